//! # nrt-ffi — `libnrt.so`, the C door of nrt-dmem
//!
//! A `libnrt.so`-compatible subset of the Neuron runtime's C API (public API §1–§2: the memory
//! path — init/close, load/unload/execute, tensors, tensor sets, memory stats), built as
//! `libnrt.so` (SONAME `libnrt.so.1`) and `libnrt.a`, on the simulated device when there is no
//! Trainium hardware (`NRT_DMEM_DEVICE`). A C program written for AWS's `<nrt/nrt.h>` compiles
//! unchanged against `ffi/include/nrt/nrt.h` for this subset and links with `-lnrt`.
//!
//! No logic lives here (ARCHITECTURE.md "ffi"): each entry point checks its arguments, looks
//! opaque pointers up, calls [`nrt_core`] / [`nrt_host`] and maps the error to `NRT_STATUS`.
//!
//! - [`status`] → `nrt/nrt_status.h`; [`types`], [`runtime`], [`model`], [`set`], [`tensor`],
//!   [`stats`] → `nrt/nrt.h`; [`nrtx`] → `nrt/nrtx.h` (extensions: ledger, peaks, free
//!   blocks, OOM report, last error). The headers are generated from this source by
//!   `tests/headers.rs` (`cargo xtask headers`; `cargo test` fails when they drift).
//!
//! Robustness (issue 5): every entry point runs behind `catch_unwind` (a panic is
//! `NRT_FAILURE`, never an unwind into C); NULL pointers, freed or foreign tensors, models and
//! sets, windows past the end, names NULL or longer than 255 bytes, calls before `nrt_init`
//! (`NRT_UNINITIALIZED`) or after `nrt_close` (`NRT_CLOSED`) are errors, logged to stderr
//! (`NEURON_RT_LOG_LEVEL`) and kept as the thread's last error
//! ([`nrtx::nrtx_get_last_error_message`]).
#![deny(unsafe_op_in_unsafe_fn)]
#![allow(non_camel_case_types)]

mod global;
mod logger;

/// Keeps in the library's debug info the ABI types no entry point uses, so
/// `nrt-layout check --pinned target/debug/libnrt.so` (a step of `cargo xtask ci`) finds every
/// struct the spec pins and compares what the compiler built with the spec. Never read.
#[allow(dead_code)] // never read: it exists for its type
struct LayoutAnchor(
    Option<&'static nrt_core::abi::vtpb_info_shared_mr_set_t>,
    Option<&'static nrt_core::abi::SUNDA_UCODE_LIB_LIBRARY_TABLE_ENTRY>,
    Option<&'static nrt_core::abi::nrt_tensor_list_t>,
);
// SAFETY: the anchor holds only `None`s and is never read.
unsafe impl Sync for LayoutAnchor {}
#[used]
static LAYOUT_ANCHOR: LayoutAnchor = LayoutAnchor(None, None, None);

pub mod batch;
pub mod batch_op;
pub mod experimental;
pub mod info;
pub mod model;
pub mod model_ext;
pub mod nrtx;
pub mod runtime;
pub mod set;
pub mod stats;
pub mod status;
pub mod stubs;
pub mod tensor;
pub mod types;
pub mod unsupported;
pub mod version;

pub use batch::*;
pub use batch_op::*;
pub use experimental::*;
pub use info::*;
pub use model::*;
pub use model_ext::*;
pub use nrtx::*;
pub use runtime::*;
pub use set::*;
pub use stats::*;
pub use status::*;
pub use tensor::*;
pub use types::*;
pub use unsupported::*;
pub use version::*;
