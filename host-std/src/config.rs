//! Runtime configuration as the real runtime reads it (public ABI §4 "Environment"):
//! `NRT_DMEM_DEVICE`, `NEURON_RT_VISIBLE_CORES`, `NEURON_RT_NUM_CORES`,
//! `NEURON_RT_VIRTUAL_CORE_SIZE`, plus this project's scratchpad knobs. Flags override the
//! environment: build a [`RuntimeConfig`] from the environment, then set fields.
#![deny(unsafe_code)]

use nrt_core::sim::{self, parse_device_spec, Placement, Preset};
use nrt_core::vcore::VcoreOptions;

/// Which driver backs the runtime.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum DeviceChoice {
    /// The simulated device (`sim:trn2`, `sim:inf2x2`, `sim:trn2+tlsf`, …), host-backed
    /// memory.
    Sim {
        /// Instance preset.
        preset: Preset,
        /// Devices.
        devices: u32,
        /// HBM placement (`+tlsf`; docs/PLACEMENT.md): the driver's genalloc by default.
        placement: Placement,
    },
    /// The real driver over `/dev/neuron*`.
    Neuron,
    /// A simulated device shared by processes (`sim:trn2@prod`, issue 20,
    /// docs/SHARED_DEVICE.md): the pools live in a file every process naming it maps.
    Shared {
        /// Instance preset.
        preset: Preset,
        /// Devices.
        devices: u32,
        /// HBM placement, recorded in the file: every process of the device must name the
        /// same one.
        placement: Placement,
        /// The device's name.
        name: crate::shared::SharedName,
    },
}

/// What `NRT_DMEM_DEVICE` accepts, for messages.
const DEVICE_SYNTAX: &str =
    "expected sim:<inf2|trn1|trn2|trn3>[x<1..32>][+tlsf][@<shared name>] or neuron";

impl DeviceChoice {
    /// A private simulated device of `devices` × `preset` with the driver's placement.
    pub const fn sim(preset: Preset, devices: u32) -> Self {
        DeviceChoice::Sim {
            preset,
            devices,
            placement: Placement::Genalloc,
        }
    }

    /// Parses `NRT_DMEM_DEVICE` (public ABI §4 "Environment"):
    /// `sim:<preset>[x<devices>][+<placement>][@<shared name>]` or `neuron`. The placement is
    /// `tlsf` (the fast good-fit carve) or `genalloc` (the driver's, the default;
    /// docs/PLACEMENT.md).
    pub fn parse(s: &str) -> Result<Self, ConfigError> {
        let t = s.trim();
        if t.eq_ignore_ascii_case("neuron") {
            return Ok(DeviceChoice::Neuron);
        }
        let spec = t.strip_prefix("sim:").unwrap_or(t);
        let (spec, name) = match spec.split_once('@') {
            Some((_, name)) if name.contains('+') => {
                return Err(ConfigError::new(
                    "NRT_DMEM_DEVICE",
                    s,
                    "the placement goes before the shared name: sim:<preset>[x<n>]+tlsf@<name>",
                ))
            }
            Some((spec, name)) => (
                spec,
                Some(
                    crate::shared::SharedName::parse(name)
                        .map_err(|reason| ConfigError::new("NRT_DMEM_DEVICE", s, reason))?,
                ),
            ),
            None => (spec, None),
        };
        let (spec, placement) = match spec.split_once('+') {
            Some((spec, p)) => (
                spec,
                Placement::parse(p).ok_or_else(|| {
                    ConfigError::new(
                        "NRT_DMEM_DEVICE",
                        s,
                        "unknown placement after `+`: expected +tlsf (the fast good-fit carve) \
                         or +genalloc (the driver's, the default)",
                    )
                })?,
            ),
            None => (spec, Placement::Genalloc),
        };
        let (preset, devices) = parse_device_spec(spec)
            .ok_or_else(|| ConfigError::new("NRT_DMEM_DEVICE", s, DEVICE_SYNTAX))?;
        Ok(match name {
            Some(name) => DeviceChoice::Shared {
                preset,
                devices,
                placement,
                name,
            },
            None => DeviceChoice::Sim {
                preset,
                devices,
                placement,
            },
        })
    }
}

impl std::fmt::Display for DeviceChoice {
    /// The string [`DeviceChoice::parse`] reads back: `sim:trn2x2+tlsf@prod`, the count left
    /// out for one device and the placement for genalloc.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let (preset, devices, placement, name) = match self {
            DeviceChoice::Neuron => return f.write_str("neuron"),
            DeviceChoice::Sim {
                preset,
                devices,
                placement,
            } => (preset, *devices, *placement, None),
            DeviceChoice::Shared {
                preset,
                devices,
                placement,
                name,
            } => (preset, *devices, *placement, Some(name)),
        };
        write!(f, "sim:{}", preset.name())?;
        if devices != 1 {
            write!(f, "x{devices}")?;
        }
        if placement != Placement::Genalloc {
            write!(f, "+{}", placement.name())?;
        }
        match name {
            Some(name) => write!(f, "@{name}"),
            None => Ok(()),
        }
    }
}

/// A configuration value that cannot be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{var}={value:?}: {reason}")]
pub struct ConfigError {
    /// Variable (or flag) name.
    pub var: &'static str,
    /// The value given.
    pub value: String,
    /// What is wrong.
    pub reason: &'static str,
}

impl ConfigError {
    fn new(var: &'static str, value: &str, reason: &'static str) -> Self {
        ConfigError {
            var,
            value: value.to_string(),
            reason,
        }
    }
}

/// Device and logical-core settings that override the environment: the CLI's flags, a
/// scenario file's header, or the environment itself over the defaults.
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq)]
pub struct Overrides {
    /// `NRT_DMEM_DEVICE` / `--device` / `device =`.
    pub device: Option<DeviceChoice>,
    /// `NEURON_RT_VIRTUAL_CORE_SIZE` / `--lnc-size` / `lnc_size =`.
    pub lnc_size: Option<u32>,
    /// `NEURON_RT_VISIBLE_CORES` / `--visible-cores` / `visible_cores =`, as `(first, count)`.
    pub visible_cores: Option<(u32, u32)>,
    /// `NEURON_RT_NUM_CORES` / `--num-cores` / `num_cores =` (0 = all).
    pub num_cores: Option<u32>,
}

/// Everything bring-up needs.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct RuntimeConfig {
    /// The device.
    pub device: DeviceChoice,
    /// Logical cores.
    pub vcores: VcoreOptions,
    /// Scratchpad page size.
    pub scratchpad_page_size: Option<u64>,
    /// `experimental_contiguous_scratchpad`.
    pub contiguous_scratchpad: bool,
    /// Simulated device only: honour alignments natively (off exercises the emulation).
    pub aligned_alloc: bool,
    /// Simulated device only: bytes per HBM channel instead of the preset's
    /// (`NRT_DMEM_SIM_CHANNEL_SIZE`). A smaller device reserves less address space, which is
    /// what lets a trn2 (4 × 24 GiB) run under valgrind, whose address space stops at 64 GiB.
    pub sim_channel_size: Option<u64>,
    /// The core's arena capacities: [`HOST_CAPACITY`], with `NRT_DMEM_MAX_TENSORS`,
    /// `NRT_DMEM_MAX_DMEMS`, `NRT_DMEM_MAX_MODELS` and `NRT_DMEM_MAX_SETS` on top. `dmems` 0
    /// means one per page of the devices' memory ([`RuntimeConfig::capacity_for`]).
    pub capacity: nrt_core::Capacity,
}

/// The std shim's and libnrt.so's default arena capacities: large enough that device memory,
/// not the runtime, is what runs out first for what applications hold — a million live
/// tensors (what a C handle can name), 65 536 resident models, 262 144 tensor sets — and
/// `dmems` 0, which [`RuntimeConfig::capacity_for`] turns into one dmem per page of the
/// devices' memory. The storage is one `MAP_NORESERVE` mapping
/// ([`crate::runtime::state_block`]): capacity that is never used costs address space, not
/// memory. The `NRT_DMEM_MAX_*` variables set explicit ceilings instead.
pub const HOST_CAPACITY: nrt_core::Capacity = nrt_core::Capacity {
    devices: nrt_core::abi::constants::MAX_MLA_PER_PROCESS as u32,
    dmems: 0,
    allocators: 65536 + 256,
    models: 65536,
    io_chunks: 131072,
    mr_sets: 65536,
    ulib_sets: 65536,
    tensors: 1 << 20,
    storages: 1 << 20,
    sets: 262144,
    set_chunks: 262144,
    bind_chunks: 32768,
    shards: nrt_core::arena::MAX_SHARDS as u32,
};

impl Default for RuntimeConfig {
    fn default() -> Self {
        RuntimeConfig {
            device: DeviceChoice::sim(Preset::Trn2, 1),
            vcores: VcoreOptions::default(),
            scratchpad_page_size: None,
            contiguous_scratchpad: false,
            aligned_alloc: true,
            sim_channel_size: None,
            capacity: HOST_CAPACITY,
        }
    }
}

/// Parses `NEURON_RT_VISIBLE_CORES`: a core `3` or a range `1-3` → `(first, count)`.
pub fn parse_visible_cores(s: &str) -> Result<(u32, u32), ConfigError> {
    let bad = || {
        ConfigError::new(
            "NEURON_RT_VISIBLE_CORES",
            s,
            "expected a core index (3) or a range (1-3)",
        )
    };
    let t = s.trim();
    match t.split_once('-') {
        Some((a, b)) => {
            let a: u32 = a.trim().parse().map_err(|_| bad())?;
            let b: u32 = b.trim().parse().map_err(|_| bad())?;
            if b < a {
                return Err(ConfigError::new(
                    "NEURON_RT_VISIBLE_CORES",
                    s,
                    "range end is before its start",
                ));
            }
            let count = (b - a).checked_add(1).ok_or_else(|| {
                ConfigError::new("NEURON_RT_VISIBLE_CORES", s, "range is too large")
            })?;
            Ok((a, count))
        }
        None => t.parse().map(|a| (a, 1)).map_err(|_| bad()),
    }
}

fn parse_u32(var: &'static str, v: &str) -> Result<u32, ConfigError> {
    v.trim()
        .parse()
        .map_err(|_| ConfigError::new(var, v, "expected a non-negative integer"))
}

fn parse_bytes(var: &'static str, v: &str) -> Result<u64, ConfigError> {
    v.trim()
        .parse()
        .map_err(|_| ConfigError::new(var, v, "expected bytes"))
}

/// `NRT_DMEM_SIM_CHANNEL_SIZE`: what the simulated device accepts as a channel size.
fn parse_channel_size(v: &str) -> Result<u64, ConfigError> {
    const VAR: &str = "NRT_DMEM_SIM_CHANNEL_SIZE";
    let b = parse_bytes(VAR, v)?;
    if !b.is_multiple_of(sim::PAGE_SIZE)
        || !(sim::MIN_CHANNEL_SIZE..=sim::MAX_POOL_SIZE).contains(&b)
    {
        return Err(ConfigError::new(
            VAR,
            v,
            "expected a multiple of 4096 bytes from 32 MiB to 16 TiB",
        ));
    }
    Ok(b)
}

/// `NRT_DMEM_SCRATCHPAD_PAGE_SIZE`: a scratchpad page (spec §8) is carved like any device
/// allocation, so a page multiple, at most a pool's size.
fn parse_scratchpad_page_size(v: &str) -> Result<u64, ConfigError> {
    const VAR: &str = "NRT_DMEM_SCRATCHPAD_PAGE_SIZE";
    let b = parse_bytes(VAR, v)?;
    if b == 0 || !b.is_multiple_of(sim::PAGE_SIZE) || b > sim::MAX_POOL_SIZE {
        return Err(ConfigError::new(
            VAR,
            v,
            "expected a non-zero multiple of 4096 bytes, at most 16 TiB",
        ));
    }
    Ok(b)
}

/// An arena capacity (`NRT_DMEM_MAX_*`): a slot count the core accepts.
fn parse_slots(var: &'static str, v: &str) -> Result<u32, ConfigError> {
    match v.trim().parse::<u32>() {
        Ok(n) if (1..=nrt_core::config::MAX_ARENA_SLOTS).contains(&n) => Ok(n),
        _ => Err(ConfigError::new(
            var,
            v,
            "expected a slot count from 1 to 134217728",
        )),
    }
}

/// Every variable [`RuntimeConfig::from_env`] reads.
pub const ENV_VARS: [&str; 11] = [
    "NRT_DMEM_DEVICE",
    "NEURON_RT_VIRTUAL_CORE_SIZE",
    "NEURON_RT_VISIBLE_CORES",
    "NEURON_RT_NUM_CORES",
    "NRT_DMEM_SCRATCHPAD_PAGE_SIZE",
    "NRT_DMEM_SIM_CHANNEL_SIZE",
    "NEURON_RT_EXPERIMENTAL_CONTIGUOUS_SCRATCHPAD",
    "NRT_DMEM_MAX_TENSORS",
    "NRT_DMEM_MAX_DMEMS",
    "NRT_DMEM_MAX_MODELS",
    "NRT_DMEM_MAX_SETS",
];

impl Overrides {
    /// `self`, with every setting `later` makes replacing it.
    pub fn then(self, later: Overrides) -> Overrides {
        Overrides {
            device: later.device.or(self.device),
            lnc_size: later.lnc_size.or(self.lnc_size),
            visible_cores: later.visible_cores.or(self.visible_cores),
            num_cores: later.num_cores.or(self.num_cores),
        }
    }

    /// Whether `self` sets what the environment variable `var` would.
    pub fn replaces(&self, var: &str) -> bool {
        match var {
            "NRT_DMEM_DEVICE" => self.device.is_some(),
            "NEURON_RT_VIRTUAL_CORE_SIZE" => self.lnc_size.is_some(),
            "NEURON_RT_VISIBLE_CORES" => self.visible_cores.is_some(),
            "NEURON_RT_NUM_CORES" => self.num_cores.is_some(),
            _ => false,
        }
    }
}

impl RuntimeConfig {
    /// The arena capacities for a runtime over `drv`: [`RuntimeConfig::capacity`], with
    /// `dmems` 0 turned into one dmem per page of every device's HBM and host DMA memory (at
    /// least 65 536, at most [`nrt_core::config::MAX_ARENA_SLOTS`]), so the devices run out of
    /// memory before the runtime runs out of dmems.
    pub fn capacity_for(&self, drv: &dyn nrt_core::driver::Driver) -> nrt_core::Capacity {
        let mut c = self.capacity;
        if c.dmems == 0 {
            let pages: u64 = (0..drv.device_count().min(c.devices))
                .filter_map(|d| drv.device_info(d).ok())
                .map(|i| {
                    let bytes = u64::from(i.hbm_channels)
                        .saturating_mul(i.hbm_channel_size)
                        .saturating_add(i.host_dma_capacity);
                    bytes / i.page_size.max(4096)
                })
                .fold(0, u64::saturating_add);
            let max = nrt_core::config::MAX_ARENA_SLOTS;
            c.dmems = u32::try_from(pages).unwrap_or(max).clamp(65536, max);
        }
        c
    }

    /// From the process environment. A variable that is set but not UTF-8 is an error, not
    /// "unset".
    pub fn from_env() -> Result<Self, ConfigError> {
        Self::from_env_under(&Overrides::default())
    }

    /// From the process environment, with `over` (a scenario's settings, command-line flags)
    /// on top. A variable whose setting `over` replaces is not read at all, so a bad value in
    /// it cannot fail a run that does not use it.
    pub fn from_env_under(over: &Overrides) -> Result<Self, ConfigError> {
        let read = |k: &str| !over.replaces(k);
        for k in ENV_VARS.into_iter().filter(|k| read(k)) {
            if let Some(v) = std::env::var_os(k) {
                if v.to_str().is_none() {
                    return Err(ConfigError::new(k, &v.to_string_lossy(), "not valid UTF-8"));
                }
            }
        }
        let mut c = Self::from_lookup(|k| read(k).then(|| std::env::var(k).ok()).flatten())?;
        c.apply(over);
        Ok(c)
    }

    /// From any variable lookup (tests pass a map).
    pub fn from_lookup(get: impl Fn(&str) -> Option<String>) -> Result<Self, ConfigError> {
        let var = |k: &str| get(k).filter(|v| !v.trim().is_empty());
        let mut c = RuntimeConfig::default();
        c.apply(&Overrides {
            device: var("NRT_DMEM_DEVICE")
                .map(|v| DeviceChoice::parse(&v))
                .transpose()?,
            lnc_size: var("NEURON_RT_VIRTUAL_CORE_SIZE")
                .map(|v| parse_u32("NEURON_RT_VIRTUAL_CORE_SIZE", &v))
                .transpose()?,
            visible_cores: var("NEURON_RT_VISIBLE_CORES")
                .map(|v| parse_visible_cores(&v))
                .transpose()?,
            num_cores: var("NEURON_RT_NUM_CORES")
                .map(|v| parse_u32("NEURON_RT_NUM_CORES", &v))
                .transpose()?,
        });
        c.scratchpad_page_size = var("NRT_DMEM_SCRATCHPAD_PAGE_SIZE")
            .map(|v| parse_scratchpad_page_size(&v))
            .transpose()?;
        c.sim_channel_size = var("NRT_DMEM_SIM_CHANNEL_SIZE")
            .map(|v| parse_channel_size(&v))
            .transpose()?;
        if let Some(v) = get("NEURON_RT_EXPERIMENTAL_CONTIGUOUS_SCRATCHPAD") {
            c.contiguous_scratchpad = v.trim() == "1";
        }
        // Arena capacities: a tensor needs a storage, so one setting sizes both; a model's
        // subgraphs need mr_sets (two per model by default, as Capacity::DEFAULT has).
        // Arena capacities: a tensor needs a storage, so one setting sizes both (and the chunks
        // executions bind them with, 64 a chunk); a model's subgraphs need mr_sets and MODEL
        // allocators (two per model) and its IO table chunks (32 tensors per model on
        // average); a set's entries take chunks (16 per set on average).
        let max = nrt_core::config::MAX_ARENA_SLOTS;
        if let Some(v) = var("NRT_DMEM_MAX_TENSORS") {
            let n = parse_slots("NRT_DMEM_MAX_TENSORS", &v)?;
            (c.capacity.tensors, c.capacity.storages) = (n, n);
            c.capacity.bind_chunks = n.div_ceil(64).max(64);
        }
        if let Some(v) = var("NRT_DMEM_MAX_DMEMS") {
            c.capacity.dmems = parse_slots("NRT_DMEM_MAX_DMEMS", &v)?;
        }
        if let Some(v) = var("NRT_DMEM_MAX_MODELS") {
            let n = parse_slots("NRT_DMEM_MAX_MODELS", &v)?;
            c.capacity.models = n;
            c.capacity.mr_sets = n.saturating_mul(2).min(max);
            c.capacity.io_chunks = n.saturating_mul(4).min(max);
            c.capacity.allocators = n.saturating_mul(2).saturating_add(256).min(max);
        }
        if let Some(v) = var("NRT_DMEM_MAX_SETS") {
            let n = parse_slots("NRT_DMEM_MAX_SETS", &v)?;
            (c.capacity.sets, c.capacity.set_chunks) = (n, n);
        }
        Ok(c)
    }

    /// Applies the settings `o` sets (environment, then a scenario file, then flags). A
    /// `num_cores` of 0 means all cores; visible cores win over `num_cores` when both are set
    /// (the core's rule, `VcoreOptions`).
    pub fn apply(&mut self, o: &Overrides) {
        if let Some(d) = o.device {
            self.device = d;
        }
        if let Some(n) = o.lnc_size {
            self.vcores.lnc_size = Some(n);
        }
        if let Some(v) = o.visible_cores {
            self.vcores.visible = Some(v);
        }
        if let Some(n) = o.num_cores {
            self.vcores.num_cores = (n > 0).then_some(n);
        }
    }

    /// The simulated device a runtime of this configuration builds for `preset` × `devices`
    /// with `placement`: its alignment mode and channel size come from here. The one recipe
    /// for a private device (`HostRuntime::new`) and a shared device's join
    /// (`JoinRequest::for_runtime`), so both build the same device.
    pub fn sim_config(&self, preset: Preset, devices: u32, placement: Placement) -> sim::SimConfig {
        let mut c = sim::SimConfig::new(preset, devices);
        c.aligned_alloc = self.aligned_alloc;
        c.channel_size_override = self.sim_channel_size;
        c.placement = placement;
        c
    }

    /// The core's bring-up options.
    pub fn init_options(&self) -> nrt_core::InitOptions {
        nrt_core::InitOptions {
            vcores: self.vcores,
            scratchpad_page_size: self.scratchpad_page_size,
            contiguous_scratchpad: self.contiguous_scratchpad,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn cfg(pairs: &[(&str, &str)]) -> Result<RuntimeConfig, ConfigError> {
        let m: HashMap<String, String> = pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        RuntimeConfig::from_lookup(|k| m.get(k).cloned())
    }

    #[test]
    fn arena_capacities_come_from_the_environment() {
        let d = cfg(&[]).unwrap().capacity;
        assert_eq!(d, HOST_CAPACITY);
        assert!(
            d.tensors >= 1 << 20,
            "a million tensors, what a C handle names"
        );
        assert!(d.models >= 65536 && d.sets >= 262144);
        assert_eq!(d.dmems, 0, "sized from the device");
        let c = cfg(&[
            ("NRT_DMEM_MAX_TENSORS", "100000"),
            ("NRT_DMEM_MAX_DMEMS", " 4096 "),
            ("NRT_DMEM_MAX_MODELS", "16"),
            ("NRT_DMEM_MAX_SETS", "3"),
        ])
        .unwrap()
        .capacity;
        assert_eq!((c.tensors, c.storages, c.dmems), (100_000, 100_000, 4096));
        assert_eq!((c.models, c.mr_sets, c.sets), (16, 32, 3));
        assert_eq!((c.io_chunks, c.allocators, c.set_chunks), (64, 288, 3));
        assert_eq!(c.bind_chunks, 100_000usize.div_ceil(64) as u32);
        for bad in ["0", "-1", "134217729", "lots"] {
            let e = cfg(&[("NRT_DMEM_MAX_TENSORS", bad)]).unwrap_err();
            assert!(e.to_string().contains("NRT_DMEM_MAX_TENSORS"), "{e}");
        }
    }

    #[test]
    fn env_vars_lists_exactly_what_from_lookup_reads() {
        let asked = std::cell::RefCell::new(Vec::new());
        RuntimeConfig::from_lookup(|k| {
            asked.borrow_mut().push(k.to_string());
            None
        })
        .unwrap();
        let mut asked = asked.into_inner();
        asked.sort();
        asked.dedup();
        let mut listed: Vec<String> = ENV_VARS.iter().map(|v| v.to_string()).collect();
        listed.sort();
        assert_eq!(asked, listed);
    }

    #[test]
    fn environment_is_read_like_the_real_runtime() {
        assert_eq!(cfg(&[]).unwrap(), RuntimeConfig::default());
        let c = cfg(&[
            ("NRT_DMEM_DEVICE", "sim:inf2x2"),
            ("NEURON_RT_VISIBLE_CORES", "1-3"),
            ("NEURON_RT_NUM_CORES", "2"),
        ])
        .unwrap();
        assert_eq!(c.device, DeviceChoice::sim(Preset::Inf2, 2));
        assert_eq!(c.vcores.visible, Some((1, 3)));
        assert_eq!(c.vcores.num_cores, Some(2));
        assert_eq!(
            cfg(&[("NEURON_RT_NUM_CORES", "0")])
                .unwrap()
                .vcores
                .num_cores,
            None
        );
        assert_eq!(
            cfg(&[("NRT_DMEM_DEVICE", "neuron")]).unwrap().device,
            DeviceChoice::Neuron
        );
        assert_eq!(
            cfg(&[("NEURON_RT_VIRTUAL_CORE_SIZE", "1")])
                .unwrap()
                .vcores
                .lnc_size,
            Some(1)
        );
        assert_eq!(parse_visible_cores("3"), Ok((3, 1)));
        let c = cfg(&[
            ("NRT_DMEM_SIM_CHANNEL_SIZE", "8589934592"),
            ("NRT_DMEM_SCRATCHPAD_PAGE_SIZE", " 1048576 "),
        ])
        .unwrap();
        assert_eq!(c.sim_channel_size, Some(8 << 30));
        assert_eq!(c.scratchpad_page_size, Some(1 << 20));
        for (k, v) in [
            ("NRT_DMEM_DEVICE", "gpu"),
            ("NEURON_RT_VISIBLE_CORES", "3-1"),
            ("NEURON_RT_VISIBLE_CORES", "a"),
            ("NEURON_RT_VIRTUAL_CORE_SIZE", "-2"),
            ("NRT_DMEM_SIM_CHANNEL_SIZE", "8G"),
            ("NRT_DMEM_SIM_CHANNEL_SIZE", "12345"),
            ("NRT_DMEM_SIM_CHANNEL_SIZE", "4096"),
            ("NRT_DMEM_SCRATCHPAD_PAGE_SIZE", "-1"),
            ("NRT_DMEM_SCRATCHPAD_PAGE_SIZE", "0"),
            ("NRT_DMEM_SCRATCHPAD_PAGE_SIZE", "4097"),
            ("NRT_DMEM_SCRATCHPAD_PAGE_SIZE", "18446744073709551615"),
            ("NEURON_RT_VISIBLE_CORES", "0-4294967295"),
        ] {
            let e = cfg(&[(k, v)]).unwrap_err();
            assert_eq!(e.var, k);
        }
    }

    #[test]
    fn a_shared_device_is_a_preset_and_a_safe_name() {
        let d = DeviceChoice::parse("sim:trn2x2@prod-1.a_b").unwrap();
        let DeviceChoice::Shared {
            preset,
            devices,
            name,
            ..
        } = d
        else {
            panic!("{d:?}")
        };
        assert_eq!(
            (preset, devices, name.as_str()),
            (Preset::Trn2, 2, "prod-1.a_b")
        );
        // Display round-trips, so `plan` and the CLI can pass it on.
        assert_eq!(DeviceChoice::parse(&d.to_string()).unwrap(), d);
        assert_eq!(
            DeviceChoice::parse("trn1@x").unwrap().to_string(),
            "sim:trn1@x"
        );
        for (s, why) in [
            ("sim:trn2@../x", "path separator"),
            ("sim:trn2@a\\b", "path separator"),
            ("sim:trn2@..", "starts with `.`"),
            ("sim:trn2@", "empty"),
            ("sim:trn2@a b", "only letters"),
            ("sim:gpu@x", "expected sim:"),
        ] {
            let e = DeviceChoice::parse(s).unwrap_err();
            assert!(e.reason.contains(why), "{s}: {}", e.reason);
        }
        let long = format!("sim:trn2@{}", "n".repeat(33));
        assert!(DeviceChoice::parse(&long)
            .unwrap_err()
            .reason
            .contains("longer than 32"));
        assert!(DeviceChoice::parse(&format!("sim:trn2@{}", "n".repeat(32))).is_ok());
    }

    #[test]
    fn a_placement_option_selects_the_tlsf_carve_and_round_trips() {
        let tlsf = |preset, devices| DeviceChoice::Sim {
            preset,
            devices,
            placement: Placement::Tlsf,
        };
        for (s, want, shown) in [
            ("sim:trn2+tlsf", tlsf(Preset::Trn2, 1), "sim:trn2+tlsf"),
            ("sim:trn2x2+tlsf", tlsf(Preset::Trn2, 2), "sim:trn2x2+tlsf"),
            (" INF2X4+TLSF ", tlsf(Preset::Inf2, 4), "sim:inf2x4+tlsf"),
            (
                "sim:trn1+genalloc",
                DeviceChoice::sim(Preset::Trn1, 1),
                "sim:trn1",
            ),
            ("sim:trn3", DeviceChoice::sim(Preset::Trn3, 1), "sim:trn3"),
        ] {
            let d = DeviceChoice::parse(s).unwrap();
            assert_eq!(d, want, "{s}");
            assert_eq!(d.to_string(), shown, "{s}");
            assert_eq!(DeviceChoice::parse(&d.to_string()).unwrap(), d, "{s}");
        }
        // A shared device records its placement (every process must name the same one).
        let d = DeviceChoice::parse("sim:trn2x2+tlsf@prod").unwrap();
        let DeviceChoice::Shared {
            placement, name, ..
        } = d
        else {
            panic!("{d:?}")
        };
        assert_eq!((placement, name.as_str()), (Placement::Tlsf, "prod"));
        assert_eq!(d.to_string(), "sim:trn2x2+tlsf@prod");
        assert_eq!(DeviceChoice::parse(&d.to_string()).unwrap(), d);
        // The environment reads it like --device.
        let c = cfg(&[("NRT_DMEM_DEVICE", "sim:trn2+tlsf")]).unwrap();
        assert_eq!(c.device, tlsf(Preset::Trn2, 1));
        for (s, why) in [
            (
                "sim:trn2+fast",
                "unknown placement after `+`: expected +tlsf",
            ),
            ("sim:trn2+", "unknown placement"),
            ("sim:trn2+tlsf+tlsf", "unknown placement"),
            ("sim:trn2,tlsf", "[+tlsf]"),
            ("sim:+tlsf", "expected sim:"),
            ("neuron+tlsf", "expected sim:"),
            ("sim:trn2@prod+tlsf", "goes before the shared name"),
        ] {
            let e = DeviceChoice::parse(s).unwrap_err();
            assert_eq!(e.var, "NRT_DMEM_DEVICE");
            assert!(e.reason.contains(why), "{s}: {}", e.reason);
            assert!(e.to_string().contains(s), "{s}: {e}");
        }
    }
}
