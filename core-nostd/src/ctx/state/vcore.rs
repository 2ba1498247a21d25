//! The logical-core table a state block holds and the options that fill it (spec §9); the
//! steps that parse, fill and read them are `vcore`'s.

use crate::abi::*;
use crate::config::MAX_VCORES;

/// Logical-core configuration (`NEURON_RT_VIRTUAL_CORE_SIZE`, `NEURON_RT_VISIBLE_CORES`,
/// `NEURON_RT_NUM_CORES`, already parsed).
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct VcoreOptions {
    /// Requested LNC size (`None` = default 2; SUNDA forces 1).
    pub lnc_size: Option<u32>,
    /// Visible logical cores `(first, count)`, global logical indices across devices.
    /// Wins over `num_cores`.
    pub visible: Option<(u32, u32)>,
    /// Use the first N logical cores (`0` or `None` = all).
    pub num_cores: Option<u32>,
}

/// The process's logical cores (`owned_vcores[num_owned_vcores]`).
#[repr(C)]
pub struct VcoreTable {
    /// Owned logical cores; `vtpb_idx` is the application-visible index (from 0).
    pub owned: [virtual_core_t; MAX_VCORES],
    /// Number of owned logical cores.
    pub num_owned: u32,
    /// Logical cores on all attached devices.
    pub num_total: u32,
    /// LNC size in force.
    pub lnc_size: u32,
    /// Global logical index of `owned[0]`.
    pub first_global: u32,
}
