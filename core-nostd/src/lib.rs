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
pub mod carve;
pub mod cell;
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

pub use config::Capacity;
pub use ctx::{CoreState, InitOptions, Nrt, StaticState};
pub use error::{Error, InvalidArg, Result};
pub use handle::{
    DmemHandle, HandleError, HandleFault, HandleKind, ModelHandle, SetHandle, TensorHandle,
};
pub use ledger::{DeviceTotals, UsageSel};
pub use vcore::{CoreSel, LogicalCore};
