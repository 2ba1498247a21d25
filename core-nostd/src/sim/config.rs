//! How a simulated device is built: the instance presets (public ABI §4 "Devices"), the
//! HBM placement, [`SimConfig`] and the extended-info view [`SimMemInfo`].

use super::*;

/// A simulated instance type (public ABI §4 "Devices").
#[repr(u8)]
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub enum Preset {
    /// inf2: SUNDA (NeuronCore-v2), 2 cores, 2 × 16 GiB, HBM i ↔ core i.
    Inf2 = 1,
    /// trn1: SUNDA (NeuronCore-v2), 2 cores, 2 × 16 GiB, HBM i ↔ core i.
    Trn1 = 2,
    /// trn2: CAYMAN (NeuronCore-v3), 8 cores, 4 × 24 GiB, HBM i shared by cores 2i, 2i+1.
    Trn2 = 3,
    /// trn3: MARIANA (NeuronCore-v4), 8 cores, 4 × 36 GiB = 144 GiB.
    Trn3 = 4,
}

impl Preset {
    /// Every preset, in declaration order.
    pub const ALL: [Preset; 4] = [Preset::Inf2, Preset::Trn1, Preset::Trn2, Preset::Trn3];

    /// Parses `inf2`, `trn1`, `trn2` or `trn3`, ignoring ASCII case.
    pub fn parse(s: &str) -> Option<Self> {
        Self::ALL
            .into_iter()
            .find(|p| p.name().eq_ignore_ascii_case(s.trim()))
    }

    /// The lower-case instance name.
    pub const fn name(self) -> &'static str {
        match self {
            Preset::Inf2 => "inf2",
            Preset::Trn1 => "trn1",
            Preset::Trn2 => "trn2",
            Preset::Trn3 => "trn3",
        }
    }

    pub(super) const fn from_u8(v: u8) -> Option<Self> {
        match v {
            1 => Some(Preset::Inf2),
            2 => Some(Preset::Trn1),
            3 => Some(Preset::Trn2),
            4 => Some(Preset::Trn3),
            _ => None,
        }
    }

    /// The driver feature bits this preset reports by default (`DRIVER_INFO_GET.feature_flags1`,
    /// public ABI §3): MEM_ALLOC_TYPE | MEM_ALLOC64 everywhere, plus CONTIGUOUS_SCRATCHPAD on
    /// v3+ (trn2, trn3), whose scratchpad uses it (spec §8).
    pub const fn default_feature_flags(self) -> u64 {
        let common = feature::MEM_ALLOC_TYPE | feature::MEM_ALLOC64;
        match self {
            Preset::Inf2 | Preset::Trn1 => common,
            Preset::Trn2 | Preset::Trn3 => common | feature::CONTIGUOUS_SCRATCHPAD,
        }
    }

    /// Geometry and features of one device of this preset with the default host DMA capacity
    /// (public ABI §3 "per channel sizes", §4 "Devices").
    pub const fn device_info(self) -> DeviceInfo {
        use al_hal_tpb_arch_type_t::*;
        let (arch, g) = match self {
            Preset::Inf2 | Preset::Trn1 => (AL_HAL_TPB_ARCH_TYPE_SUNDA, Geometry::V2),
            Preset::Trn2 => (AL_HAL_TPB_ARCH_TYPE_CAYMAN, Geometry::V3),
            Preset::Trn3 => (AL_HAL_TPB_ARCH_TYPE_MARIANA, Geometry::V4),
        };
        DeviceInfo {
            arch,
            cores_per_device: g.cores_per_device,
            hbm_channels: g.hbm_channels,
            hbm_channel_size: g.hbm_channel_size,
            host_dma_capacity: DEFAULT_HOST_DMA_CAPACITY,
            feature_flags: self.default_feature_flags(),
            supports_aligned_alloc: true,
            page_size: PAGE_SIZE,
        }
    }
}

/// Parses a device spec: a preset name, optionally followed by `x<count>` (`trn2` → 1 device,
/// `inf2x2` → 2, `TRN2X16` → 16). The count must be in `1..=32`.
pub fn parse_device_spec(s: &str) -> Option<(Preset, u32)> {
    let s = s.trim();
    if let Some(p) = Preset::parse(s) {
        return Some((p, 1));
    }
    let at = s.find(['x', 'X'])?;
    let preset = Preset::parse(&s[..at])?;
    let digits = &s[at + 1..];
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let n: u32 = digits.parse().ok()?;
    (1..=MAX_DEVICES).contains(&n).then_some((preset, n))
}

/// How the simulated device places HBM allocations inside a pool (docs/PLACEMENT.md).
#[repr(u8)]
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub enum Placement {
    /// The kernel driver's genalloc placement, address for address (public ABI §3 "How the
    /// driver carves memory"; aws-neuron-driver `neuron_mempool.c` `mc_alloc_internal`):
    /// page-granular first fit, aligned first fit above the page, the small-object pool with
    /// fallback both ways, the contiguous scratchpad at fixed offsets below the main pool's
    /// end, alignments above `INT_MAX` and sizes above `INT64_MAX` refused with `EINVAL`.
    /// Every search is O(log blocks) ([`Policy::FirstFit`]).
    #[default]
    Genalloc = 0,
    /// The TLSF good-fit carve ([`Policy::GoodFit`]): O(1)-class work, addresses that differ
    /// from the driver's, and this simulator's earlier routing (a request above
    /// [`SMALL_OBJECT_MAX`] never falls back to the small-object pool; the contiguous
    /// scratchpad is placed like any request).
    Tlsf = 1,
}

impl Placement {
    /// Parses `genalloc` or `tlsf`, ignoring ASCII case.
    pub fn parse(s: &str) -> Option<Self> {
        match s.trim() {
            t if t.eq_ignore_ascii_case("genalloc") => Some(Placement::Genalloc),
            t if t.eq_ignore_ascii_case("tlsf") => Some(Placement::Tlsf),
            _ => None,
        }
    }

    /// The lower-case name [`Placement::parse`] reads (`genalloc`, `tlsf`).
    pub const fn name(self) -> &'static str {
        match self {
            Placement::Genalloc => "genalloc",
            Placement::Tlsf => "tlsf",
        }
    }

    /// The carve policy of the HBM pools.
    pub(super) const fn policy(self) -> Policy {
        match self {
            Placement::Genalloc => Policy::FirstFit,
            Placement::Tlsf => Policy::GoodFit,
        }
    }
}

/// How to build a [`SimDevice`].
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct SimConfig {
    /// Instance type.
    pub preset: Preset,
    /// Devices, `1..=32`.
    pub devices: u32,
    /// Whether MEM_ALLOC honours an alignment (spec §3.2 `ndl_supports_align`); when false
    /// the driver refuses `align != 0` with `EINVAL` and the runtime emulates alignment.
    pub aligned_alloc: bool,
    /// Bytes of host DMA memory per device (page multiple, ≤ 16 TiB).
    pub host_dma_capacity: u64,
    /// Driver feature bits; `None` = the preset's [`Preset::default_feature_flags`].
    pub feature_flags: Option<u64>,
    /// Shrinks every HBM channel to this many bytes (page multiple, ≥ 32 MiB) for tests that
    /// need a real backing; the 16 MiB carve-out stays, the small pool becomes a quarter of
    /// the channel.
    pub channel_size_override: Option<u64>,
    /// HBM placement: the driver's ([`Placement::Genalloc`], the default) or the fast TLSF
    /// carve.
    pub placement: Placement,
}

impl SimConfig {
    /// The preset's real geometry: aligned alloc on, 8 GiB host DMA pool, default features.
    pub const fn new(preset: Preset, devices: u32) -> Self {
        SimConfig {
            preset,
            devices,
            aligned_alloc: true,
            host_dma_capacity: DEFAULT_HOST_DMA_CAPACITY,
            feature_flags: None,
            channel_size_override: None,
            placement: Placement::Genalloc,
        }
    }

    /// A scaled-down geometry for tests that need bytes: 64 MiB channels (16 MiB carve-out,
    /// 32 MiB main pool, 16 MiB small pool) and a 32 MiB host pool, so a backing is
    /// `channels * 64 MiB + 32 MiB`.
    pub const fn scaled_down(preset: Preset, devices: u32) -> Self {
        SimConfig {
            host_dma_capacity: 32 * MIB,
            channel_size_override: Some(64 * MIB),
            ..Self::new(preset, devices)
        }
    }
}

/// Where a live allocation sits (the `MEM_GET_EXTENDED_INFO` view, public ABI §3).
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct SimMemInfo {
    /// Physical address.
    pub pa: u64,
    /// Bytes (rounded up to the page).
    pub size: u64,
    /// Host DMA pool (true) or HBM.
    pub host: bool,
    /// HBM channel (0 for host memory).
    pub hbm_idx: u32,
    /// Whether it came from the small-object pool.
    pub small_pool: bool,
}
