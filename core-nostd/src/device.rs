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

/// A logical NeuronCore of this process, by its application-visible index (`vtpb_idx`,
/// `0..owned`, spec §9).
///
/// A `LogicalCore` names an index, not a claim: the runtime checks it against the cores the
/// process owns at every call (spec §7.2 range gate), so one kept across `close` and a
/// re-initialisation with fewer cores is an error ([`crate::Error::LogicalCoreOutOfRange`]), never
/// another core. [`crate::Nrt::logical_core`] is the checked constructor; [`LogicalCore::new`]
/// names an index without a runtime (checked when used).
///
/// It keeps the C value it was made from ([`LogicalCore::from_c`]), so a C caller's `-5`
/// fails the range gate at the same point and with the same message as in libnrt.
///
/// The default is [`LogicalCore::FIRST`].
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct LogicalCore(i64);

impl LogicalCore {
    /// Logical core 0, which every initialised runtime owns (an empty owned slice is refused
    /// at init, spec §9).
    pub const FIRST: LogicalCore = LogicalCore(0);

    /// Logical core `index`, unchecked until used (spec §9).
    pub const fn new(index: u32) -> Self {
        LogicalCore(index as i64)
    }

    /// The one conversion from the C ABI's `int` / `int32_t` / `int64_t` logical-core argument
    /// (spec §9). Any value is kept as given, a negative or too large one included: the
    /// runtime's range gate refuses it where libnrt does, naming the value.
    pub fn from_c(vnc: impl Into<i64>) -> Self {
        LogicalCore(vnc.into())
    }

    /// The value as the C ABI writes it (the index, or the out-of-range C value it was made
    /// from).
    pub const fn to_c(self) -> i64 {
        self.0
    }

    /// The index, if it is one (`None` for a negative or too large C value).
    pub fn index(self) -> Option<u32> {
        u32::try_from(self.0).ok()
    }
}

impl core::fmt::Display for LogicalCore {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        write!(f, "{}", self.0)
    }
}

impl From<u32> for LogicalCore {
    fn from(index: u32) -> Self {
        LogicalCore::new(index)
    }
}

/// Which logical core a tensor goes to (`nrt_tensor_allocate`'s `vnc`, spec §7.2): VIRTUAL
/// and HOST tensors accept "any" (the C `-1`), which is logical core 0; a DEVICE tensor needs
/// a core, and "any" fails its range gate as `-1`, as in libnrt.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub enum CoreSel {
    /// Any core (C `-1`).
    Any,
    /// This logical core.
    Core(LogicalCore),
}

impl CoreSel {
    /// The C ABI's value: `-1` is [`CoreSel::Any`], anything else [`LogicalCore::from_c`].
    pub fn from_c(vnc: impl Into<i64>) -> Self {
        let vnc = vnc.into();
        if vnc == -1 {
            CoreSel::Any
        } else {
            CoreSel::Core(LogicalCore::from_c(vnc))
        }
    }

    /// The value as the C ABI writes it (`-1` for [`CoreSel::Any`]).
    pub const fn to_c(self) -> i64 {
        match self {
            CoreSel::Any => -1,
            CoreSel::Core(c) => c.to_c(),
        }
    }
}

impl From<LogicalCore> for CoreSel {
    fn from(c: LogicalCore) -> Self {
        CoreSel::Core(c)
    }
}

/// A physical NeuronCore: core `core` of device `device` (libnrt's `physical_core_t`:
/// `device_id`, `device_tpb_idx`, spec §1, §9). A name, checked when used.
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct PhysicalCore {
    /// The device index.
    pub device: u32,
    /// The core on the device.
    pub core: u32,
}

impl PhysicalCore {
    /// Core `core` of device `device`.
    pub const fn new(device: u32, core: u32) -> Self {
        PhysicalCore { device, core }
    }
}

impl core::fmt::Display for PhysicalCore {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        write!(f, "{}:{}", self.device, self.core)
    }
}

/// The physical cores of one logical core, in order ([`crate::Nrt::physical_cores`]; at most
/// `MAX_LNC_SIZE`, spec §9).
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq)]
pub struct PhysicalCores {
    cores: [PhysicalCore; 2],
    len: usize,
}

impl PhysicalCores {
    /// From a list (the first two, at most).
    pub fn from_slice(cores: &[PhysicalCore]) -> Self {
        let mut out = PhysicalCores::default();
        for (slot, c) in out.cores.iter_mut().zip(cores) {
            *slot = *c;
            out.len += 1;
        }
        out
    }
}

impl core::ops::Deref for PhysicalCores {
    type Target = [PhysicalCore];
    fn deref(&self) -> &[PhysicalCore] {
        &self.cores[..self.len]
    }
}

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
