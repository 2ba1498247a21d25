//! # nrt-core
//!
//! The `no_std`, heap-free core of nrt-dmem: a Rust re-implementation of the host-side
//! device-memory and multi-model core of AWS Neuron's runtime (libnrt 2.31), laid out byte for
//! byte as libnrt's DWARF describes it (spec `000_4b9828fb4c9f6e2f`).
//!
//! All behaviour lives here; the std shim (`nrt-host`) only supplies the driver, threads and
//! configuration.
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
pub mod carve;
pub mod config;
pub mod cstr;
pub mod ctx;
pub mod dmem;
pub mod driver;
pub mod error;
pub mod handle;
pub mod ht;
pub mod ledger;
pub mod model;
pub mod oom;
pub mod raw;
pub mod scratchpad;
pub mod sim;
pub mod sync;
pub mod tensor;
pub mod ulib;
pub mod vcore;

pub use ctx::{CoreState, InitOptions, Nrt};
pub use error::{Error, Result};
pub use handle::{DmemHandle, HandleError, HandleFault, HandleKind, TensorHandle};
