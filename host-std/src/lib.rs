//! # nrt-host
//!
//! The std shim of nrt-dmem (docs/ARCHITECTURE.md, "Crates"): what the `no_std` core cannot do
//! by itself.
//!
//! - [`ioctl`]: the kernel driver's ioctl ABI (public ABI §3) — argument structs, command
//!   numbers, the syscall layer [`ioctl::Sys`] and a fake driver for tests.
//! - [`NeuronDriver`]: the [`nrt_core::driver::Driver`] portal over `/dev/neuron<N>`.
//! - [`backing`]: lazily committed host memory ([`HostReservation`]) for the simulated device.
//! - [`simdev`]: [`HostSim`], the simulated device with that memory behind it.
//! - [`config`]: the environment the real runtime reads ([`RuntimeConfig`]).
//! - [`shared`]: a simulated device shared by processes (`sim:trn2@name`), its reader.
//! - [`runtime`]: [`HostRuntime`], a runtime with its driver — what the C ABI and CLI use.
//! - [`manifest`]: the model manifest, the JSON stand-in for a NEFF ([`Manifest`]).
//! - [`tensor_info`]: a model's IO tensors as applications see them (dtype, shape, size).
//! - [`model_file`]: what `nrt_load` takes — a NEFF or a manifest ([`ModelFile`]) — and the
//!   one load path for both, with a NEFF's weights copied in.
//! - [`plan`]: will these models fit? A dry run of the load path on a scratch simulated device.
//! - [`error`]: the host error type ([`Error`], `thiserror`, errno as `#[source]`).
//!
//! ## What lives here and what does not
//!
//! A file belongs in this crate when an application, `libnrt.so` (`nrt-ffi`) or another
//! runtime process needs it to run models: the driver and device below the core, the
//! configuration the real runtime reads, the inputs `nrt_load` takes (NEFF, manifest) and the
//! Rust APIs over them (the planner, the shared device and its read-only view). A file whose
//! job is talking to a person — argument parsing, reports and tables, the scenario files and
//! their runner, `monitor`, the layout/DWARF commands — belongs in the `nrt-dmem` CLI crate
//! (`cli/`, `nrt-dmem-cli`), which depends on this one. So this crate carries no clap, toml,
//! gimli or object, and nothing here depends on the CLI.
#![deny(unsafe_op_in_unsafe_fn)]

pub mod backing;
pub mod config;
pub mod error;
pub mod ioctl;
pub mod manifest;
pub mod model_file;
pub mod neuron_driver;
pub mod plan;
pub mod runtime;
pub mod shared;
pub mod simdev;
pub mod tensor_info;
pub mod units;
pub mod wait;
pub mod zeroed;

pub use backing::HostReservation;
pub use config::{ConfigError, DeviceChoice, Overrides, RuntimeConfig};
pub use error::{Error, Result, SIM_HINT};
pub use manifest::{Manifest, ManifestError};
pub use model_file::{LoadError, ModelFile};
pub use neuron_driver::{AllocVariant, Geometry, NeuronDriver};
pub use runtime::{HostRuntime, MallocHostMem};
pub use simdev::HostSim;
pub use wait::{install_waits, set_wait_limit, DEFAULT_WAIT_LIMIT};
