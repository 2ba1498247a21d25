//! Device facts (public ABI §3 "per channel sizes", §4 "Devices"): the one source for the
//! geometry and constants that the simulated device ([`crate::sim`]) and the real driver
//! (`nrt_host::neuron_driver`) both describe, written once.
#![deny(unsafe_code)]

use crate::abi::al_hal_tpb_arch_type_t;

const MIB: u64 = 1 << 20;
const GIB: u64 = 1 << 30;

/// At most this many devices (the context tree's `mla[32]`, spec §1).
pub const MAX_DEVICES: u32 = 32;
/// HBM channels per device at most (trn2/trn3 have 4).
pub const MAX_HBM_CHANNELS: u32 = 4;
/// Bytes the firmware keeps at the start of every HBM channel (public ABI §3).
pub const FIRMWARE_CARVEOUT: u64 = 16 * MIB;
/// The driver rounds every request up to this (the kernel page).
pub const PAGE_SIZE: u64 = 4096;
/// Bytes of host DMA memory a device reports by default. The real driver takes host DMA
/// memory from the kernel with no fixed pool, so this is a chosen budget (the simulated
/// device's pool size), not a driver fact.
pub const DEFAULT_HOST_DMA_CAPACITY: u64 = 8 * GIB;

/// Device geometry by architecture (public ABI §4).
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct Geometry {
    /// Physical NeuronCores.
    pub cores_per_device: u32,
    /// HBM channels (driver pools).
    pub hbm_channels: u32,
    /// Bytes per channel, before the firmware carve-out.
    pub hbm_channel_size: u64,
}

impl Geometry {
    /// v2 (trn1/inf2, SUNDA): 2 cores, 2 × 16 GiB (public ABI §4).
    pub const V2: Geometry = Geometry {
        cores_per_device: 2,
        hbm_channels: 2,
        hbm_channel_size: 16 * GIB,
    };
    /// v3 (trn2, CAYMAN): 8 cores, 4 × 24 GiB.
    pub const V3: Geometry = Geometry {
        cores_per_device: 8,
        hbm_channels: 4,
        hbm_channel_size: 24 * GIB,
    };
    /// v4 (trn3, MARIANA): 8 cores, 144 GiB — split here as 4 × 36 GiB, a *chosen* channel
    /// count (the public table gives only the total).
    pub const V4: Geometry = Geometry {
        cores_per_device: 8,
        hbm_channels: 4,
        hbm_channel_size: 36 * GIB,
    };

    /// The geometry of an architecture: [`Self::V2`], [`Self::V3`] or [`Self::V4`]; `None`
    /// for v1 and unknown values.
    pub const fn for_arch(arch: al_hal_tpb_arch_type_t) -> Option<Geometry> {
        use al_hal_tpb_arch_type_t::*;
        match arch {
            AL_HAL_TPB_ARCH_TYPE_SUNDA => Some(Self::V2),
            AL_HAL_TPB_ARCH_TYPE_CAYMAN => Some(Self::V3),
            AL_HAL_TPB_ARCH_TYPE_MARIANA => Some(Self::V4),
            _ => None,
        }
    }
}

const _: () = {
    // Every known geometry fits what the context tree and the simulator hold.
    let all = [Geometry::V2, Geometry::V3, Geometry::V4];
    let mut i = 0;
    while i < all.len() {
        assert!(all[i].hbm_channels <= MAX_HBM_CHANNELS && all[i].cores_per_device <= 8);
        i += 1;
    }
};

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn trn3_is_144_gib_and_v1_has_no_geometry() {
        let m = Geometry::for_arch(al_hal_tpb_arch_type_t::AL_HAL_TPB_ARCH_TYPE_MARIANA).unwrap();
        assert_eq!(m.hbm_channels as u64 * m.hbm_channel_size, 144 * GIB);
        assert_eq!(
            Geometry::for_arch(al_hal_tpb_arch_type_t::AL_HAL_TPB_ARCH_TYPE_INVALID_1),
            None
        );
    }
}
