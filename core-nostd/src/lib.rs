// The crate documentation is the README, so its code blocks are doctests and cannot drift.
#![doc = include_str!("../README.md")]
#![cfg_attr(not(any(test, feature = "std")), no_std)]
#![deny(unsafe_op_in_unsafe_fn)]

// The heap constructors (`new_boxed`) only; nothing else in the core allocates.
#[cfg(any(test, feature = "alloc"))]
extern crate alloc;

#[cfg(all(feature = "defmt", feature = "log"))]
compile_error!("features `defmt` and `log` are mutually exclusive: pick one logging backend");

#[macro_use]
mod fmt;

pub mod abi;
pub mod arena;
pub mod atomic;
pub mod carve;
pub mod cell;
pub mod config;
pub mod cstr;
pub mod ctx;
pub mod device;
pub mod dmem;
pub mod driver;
pub mod error;
pub mod handle;
pub mod host_heap;
pub mod ht;
pub mod ledger;
mod lifecycle;
pub mod list;
pub mod loom;
pub mod model;
pub mod oom;
pub mod raw;
pub mod scratchpad;
pub mod sim;
pub mod sync;
pub mod tensor;
pub mod ulib;
pub mod vcore;

// `abi_struct!` (a `#[macro_export]` macro) names the crate through `$crate`.
#[doc(hidden)]
pub use static_assertions as __static_assertions;

pub use config::Capacity;
pub use ctx::{CoreState, DriverKept, InitOptions, Lifecycle, Nrt, StaticState, StorageFree};
pub use device::{CoreSel, LogicalCore, PhysicalCore, PhysicalCores};
pub use dmem::DeviceMemory;
pub use error::{Error, InvalidArg, Result};
pub use handle::{
    AllocatorHandle, DmemHandle, HandleError, HandleFault, HandleKind, ModelHandle, SetHandle,
    TensorHandle,
};
pub use ledger::{DeviceTotals, Ledger, LedgerSnapshot, UsageSel};
pub use model::Models;
pub use tensor::{Sets, Tensors};

// What the public types promise about their traits, checked at compile time (the promises of
// the types in `handle`, `sync`, `cell` and `dmem` sit beside them).
// The integrator implements these and passes them as trait objects (`&dyn Driver`,
// `&'static dyn HostMem`).
static_assertions::assert_obj_safe!(driver::Driver, tensor::HostMem);
// A state block is shared by every thread that calls in, and is made from zeroed bytes.
static_assertions::assert_impl_all!(CoreState: Send, Sync, abi::meta::ZeroValid);
// A runtime view is shared by threads (the C ABI's global, the std shim's runtime).
static_assertions::assert_impl_all!(Nrt<'static>: Send, Sync);
// Errors are plain values (`Error` stays `Copy`).
static_assertions::assert_impl_all!(Error: Copy, Send, Sync, core::fmt::Debug, core::fmt::Display);
// An execution belongs to the thread that began it (its cores record that thread, so that
// thread's calls that would wait for it are refused), and a copy would end it twice.
static_assertions::assert_not_impl_any!(model::ExecGuard<'static>: Send, Clone, Copy);
