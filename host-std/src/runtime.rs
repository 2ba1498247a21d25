//! [`HostRuntime`]: one runtime instance with its state block, its driver (simulated or real)
//! and host memory for VIRTUAL tensors — what the C ABI and the CLI run on.
//!
//! Threads (issue "std shim"): executions are serialised per core by the core's exec locks;
//! waiters (locks, the `remove_model` drain) yield the thread instead of burning a core once
//! they have spun briefly (the relax hook installed here); output-completion waits block on a
//! condvar with a timeout.

use std::alloc::Layout;
use std::path::PathBuf;
use std::ptr::NonNull;
use std::sync::{Condvar, Mutex};
use std::time::{Duration, Instant};

use nrt_core::driver::Driver;
use nrt_core::sim::SimDevice;
use nrt_core::tensor::HostMem;
use nrt_core::{CoreState, Nrt};

use crate::config::{DeviceChoice, RuntimeConfig};
use crate::shared::{JoinRequest, SharedDevice};
use crate::{HostSim, NeuronDriver};

/// `malloc`-backed host memory for VIRTUAL tensors.
#[derive(Default, Debug)]
pub struct MallocHostMem;

impl HostMem for MallocHostMem {
    fn alloc(&self, size: usize) -> Option<NonNull<u8>> {
        let layout = Layout::from_size_align(size.max(1), 64).ok()?;
        // SAFETY: non-zero size.
        NonNull::new(unsafe { std::alloc::alloc_zeroed(layout) })
    }
    unsafe fn free(&self, p: NonNull<u8>, size: usize) {
        if let Ok(layout) = Layout::from_size_align(size.max(1), 64) {
            // SAFETY: caller contract: `p` came from `alloc(size)` with this layout.
            unsafe { std::alloc::dealloc(p.as_ptr(), layout) };
        }
    }
}

enum Backend {
    Sim(HostSim),
    Neuron(NeuronDriver),
    Shared(SharedDevice),
}

impl Backend {
    fn driver(&self) -> &dyn Driver {
        match self {
            Backend::Sim(s) => s,
            Backend::Neuron(n) => n,
            Backend::Shared(s) => s,
        }
    }
}

/// A runtime: state block + driver + host memory. Not yet initialised when built.
pub struct HostRuntime {
    // Field order: the state (which refers to driver memory by handle only) can drop in any
    // order; the backend owns the device memory.
    st: Box<CoreState>,
    /// Boxed, like the state: the state block is bound to the driver's and the host
    /// provider's addresses at `init` (`Nrt::with_host`), so they must not move with the
    /// runtime (the C ABI moves it into its global after building it).
    backend: Box<Backend>,
    host: Box<MallocHostMem>,
    config: RuntimeConfig,
    completions: (Mutex<u64>, Condvar),
}

/// Why a runtime could not be built.
#[derive(Debug, thiserror::Error)]
pub enum BuildError {
    /// Host layer (device missing, reservation refused, …).
    #[error(transparent)]
    Host(#[from] crate::Error),
    /// The arena capacities (`RuntimeConfig::capacity`, `NRT_DMEM_MAX_*`) were refused.
    #[error("arena capacities refused: {0}")]
    Capacity(nrt_core::Error),
}

/// A state block whose context tree and arenas hold `caps`, in one anonymous `MAP_NORESERVE`
/// mapping (the context first, libnrt's whole `tdrv_ctx_t` for the shim's 32 devices): pages are
/// committed only as slots are used, so capacity that is never used costs address space, not
/// memory (also under valgrind, whose `calloc` writes every byte). The mapping starts out of
/// core dumps (`MADV_DONTDUMP`: `gcore` writes every page of a readable mapping, touched or
/// not); the context region is put back when the block is bound and each arena's slots as they
/// come into use (`dump_in_use`), so a core holds the context tree, the runtime's `dmem_t`s and
/// `model_t`s, which `nrt-dmem inspect --core` reads,
/// and not gigabytes of zeros. The side tables beside the arenas (tensor names, model IO
/// tables, free stacks) stay out of core dumps.
pub fn state_block(caps: &nrt_core::Capacity) -> Result<Box<CoreState>, BuildError> {
    let bytes = CoreState::storage_bytes(caps);
    if bytes == 0 {
        return Err(BuildError::Capacity(
            caps.check()
                .map_err(nrt_core::Error::InvalidCapacity)
                .err()
                .unwrap_or(nrt_core::Error::InvalidCapacity("Capacity")),
        ));
    }
    // 64 bytes of slack: the arenas start at the mapping's first 64-aligned byte (the first).
    let len = bytes + 64;
    // SAFETY: a fresh anonymous mapping at an address of the kernel's choosing: it aliases no
    // Rust object and involves no fd.
    let p = unsafe {
        libc::mmap(
            core::ptr::null_mut(),
            len,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE,
            -1,
            0,
        )
    };
    if p == libc::MAP_FAILED {
        return Err(BuildError::Host(crate::Error::Reserve {
            len: len as u64,
            source: nix::errno::Errno::last(),
        }));
    }
    // SAFETY: advice on exactly our own mapping; it changes no byte of it.
    if unsafe { libc::madvise(p, len, libc::MADV_DONTDUMP) } != 0 {
        log::debug!(
            "MADV_DONTDUMP on the arena storage refused: {}",
            nix::errno::Errno::last()
        );
    }
    /// Unmaps what `state_block` mapped.
    unsafe fn unmap(p: *mut u8, len: usize) {
        // SAFETY: exactly the mapping `state_block` made (the state block's contract).
        unsafe { libc::munmap(p.cast(), len) };
    }
    // SAFETY: `len` zero-filled (anonymous) writable bytes, ours alone, released only by
    // `unmap` with the same length when the state block drops.
    unsafe { CoreState::with_storage(caps, p.cast(), len, unmap, Some(dump_in_use)) }
        .map_err(BuildError::Capacity)
}

/// Puts the pages under arena slots that came into use back into core dumps
/// ([`nrt_core::arena::InUse`], for [`state_block`]'s mapping).
fn dump_in_use(at: *const u8, len: usize) {
    // SAFETY: sysconf has no memory effects.
    let page = usize::try_from(unsafe { libc::sysconf(libc::_SC_PAGESIZE) })
        .ok()
        .filter(|p| p.is_power_of_two())
        .unwrap_or(4096);
    let start = at as usize & !(page - 1);
    let end = (at as usize).saturating_add(len).next_multiple_of(page);
    // SAFETY: MADV_DODUMP changes only whether pages are written to a core dump, never their
    // contents; the range lies inside the arena storage mapping (whole pages around slots of
    // it), and a range that is not mapped is refused, not touched.
    unsafe { libc::madvise(start as *mut libc::c_void, end - start, libc::MADV_DODUMP) };
}

impl HostRuntime {
    /// Builds the driver the configuration names (does not initialise the runtime).
    pub fn new(config: RuntimeConfig) -> Result<Self, BuildError> {
        crate::wait::install_waits();
        let backend = match config.device {
            DeviceChoice::Sim {
                preset,
                devices,
                placement,
            } => Backend::Sim(HostSim::new(
                &config.sim_config(preset, devices, placement),
            )?),
            DeviceChoice::Neuron => Backend::Neuron(NeuronDriver::open()?),
            DeviceChoice::Shared {
                preset,
                devices,
                placement,
                name,
            } => {
                // The placement is recorded in the file by its creator; a process naming
                // another one is refused while others use it (`SharedDevice::open`).
                let req = JoinRequest::for_runtime(preset, devices, placement, &config);
                let dev = SharedDevice::open(&name, &req).map_err(crate::Error::from)?;
                let info = preset.device_info();
                let lnc = nrt_core::vcore::parse_vnc_config(
                    info.arch,
                    info.cores_per_device,
                    config.vcores.lnc_size,
                )
                .unwrap_or(1);
                let tag = std::env::var(PROCESS_TAG_VAR).unwrap_or_default();
                dev.publish_identity(lnc, &tag);
                Backend::Shared(dev)
            }
        };
        let st = state_block(&config.capacity_for(backend.driver()))?;
        Ok(HostRuntime {
            st,
            backend: Box::new(backend),
            host: Box::new(MallocHostMem),
            config,
            completions: (Mutex::new(0), Condvar::new()),
        })
    }

    /// Builds a runtime on a simulated device already made (a copy of a shared device's pools,
    /// `HostSim::from_snapshot`) and initialises it; `config.device` only names it.
    pub fn start_on(config: RuntimeConfig, sim: HostSim) -> Result<Self, StartError> {
        crate::wait::install_waits();
        let st = state_block(&config.capacity_for(&sim)).map_err(StartError::Build)?;
        let rt = HostRuntime {
            st,
            backend: Box::new(Backend::Sim(sim)),
            host: Box::new(MallocHostMem),
            config,
            completions: (Mutex::new(0), Condvar::new()),
        };
        rt.nrt()
            .init(&config.init_options())
            .map_err(StartError::Init)?;
        Ok(rt)
    }

    /// Builds and initialises (`nrt_init`).
    pub fn start(config: RuntimeConfig) -> Result<Self, StartError> {
        let rt = Self::new(config)?;
        rt.nrt()
            .init(&config.init_options())
            .map_err(StartError::Init)?;
        Ok(rt)
    }

    /// The driver.
    pub fn driver(&self) -> &dyn Driver {
        self.backend.driver()
    }

    /// The core runtime view, bound to this runtime's driver and host memory (so `close`
    /// returns VIRTUAL tensors' bytes too). Its views (`dmem()`, `models()`, …) borrow it: bind
    /// it first (`let n = rt.nrt();`) to keep one past the statement.
    pub fn nrt(&self) -> Nrt<'_> {
        Nrt::with_host(&self.st, self.driver(), &*self.host)
    }

    /// Host memory for VIRTUAL tensors.
    pub fn host_mem(&self) -> &dyn HostMem {
        &*self.host
    }

    /// The simulated device (fault injection), when simulated.
    pub fn sim(&self) -> Option<&SimDevice> {
        match &*self.backend {
            Backend::Sim(s) => Some(s.device()),
            Backend::Neuron(_) | Backend::Shared(_) => None,
        }
    }

    /// The shared simulated device, when the runtime runs on one (`sim:trn2@name`): its
    /// device-wide figures ([`SharedDevice::snapshot`]).
    pub fn shared(&self) -> Option<&SharedDevice> {
        match &*self.backend {
            Backend::Shared(s) => Some(s),
            _ => None,
        }
    }

    /// The configuration it was built with.
    pub fn config(&self) -> &RuntimeConfig {
        &self.config
    }

    /// `nrt_execute`'s data path, waking completion waiters afterwards.
    pub fn execute(
        &self,
        h: nrt_core::ModelHandle,
        inputs: nrt_core::SetHandle,
        outputs: nrt_core::SetHandle,
    ) -> nrt_core::Result<()> {
        let r = self.nrt().tensors().execute(h, inputs, outputs);
        let (m, cv) = &self.completions;
        *m.lock().unwrap_or_else(|e| e.into_inner()) += 1;
        cv.notify_all();
        r
    }

    /// `nrt_tensor_check_output_completion`: waits up to `timeout` (None = forever) until the
    /// tensor's completion count reaches `expected`; `Timeout` otherwise.
    pub fn wait_output_completion(
        &self,
        t: nrt_core::TensorHandle,
        timeout: Option<Duration>,
        expected: u64,
    ) -> nrt_core::Result<()> {
        let deadline = timeout.map(|d| Instant::now() + d);
        let (m, cv) = &self.completions;
        let mut g = m.lock().unwrap_or_else(|e| e.into_inner());
        loop {
            if self.nrt().tensors().output_completion(t)? >= expected {
                return Ok(());
            }
            let wait = match deadline {
                Some(d) => match d.checked_duration_since(Instant::now()) {
                    Some(left) if !left.is_zero() => left,
                    _ => {
                        return Err(nrt_core::Error::Timeout(
                            nrt_core::sync::WaitFor::Completion,
                        ))
                    }
                },
                None => Duration::from_millis(100),
            };
            g = cv
                .wait_timeout(g, wait)
                .unwrap_or_else(|e| e.into_inner())
                .0;
        }
    }

    /// Closes the runtime if it is initialised (frees everything on the device).
    pub fn close(&self) -> nrt_core::Result<()> {
        if let Some(d) = self.shared() {
            d.unpublish_models();
        }
        self.nrt().close()
    }

    /// Tells the monitor of a shared device that model `h` was loaded as `name`
    /// (`loaded_models[]`: its logical core, device and per subgraph the bytes allocated at
    /// load time). A no-op on other devices.
    pub fn note_loaded(&self, h: nrt_core::ModelHandle, name: &str) {
        let Some(d) = self.shared() else { return };
        let nrt = self.nrt();
        let Ok(info) = nrt.models().info(h) else {
            return;
        };
        let device = nrt
            .inspector()
            .logical_core_entry(info.vnc)
            .ok()
            .and_then(|v| v.cores().first().map(|p| p.device_id))
            .unwrap_or(0);
        let mut sgs =
            vec![[0u64; crate::shared::layout::MODEL_CLASSES]; info.subgraphs.max(1) as usize];
        let _ = nrt.models().for_each_dmem(h, |sg, dm| {
            let Some(row) = sgs.get_mut(sg as usize) else {
                return;
            };
            row[model_class(&dm.info)] += dm.info.allocated_size;
        });
        d.publish_model(
            h.h_model().id,
            info.vnc.index().unwrap_or(0),
            device,
            name,
            &sgs,
        );
    }

    /// Tells the monitor of a shared device that model `h` was unloaded.
    pub fn note_unloaded(&self, h: nrt_core::ModelHandle) {
        if let Some(d) = self.shared() {
            d.unpublish_model(h.h_model().id);
        }
    }
}

impl Drop for HostRuntime {
    fn drop(&mut self) {
        if self.nrt().lifecycle() == nrt_core::Lifecycle::Init {
            let _ = self.nrt().close();
        }
    }
}

/// The variable naming a process for the monitor (neuron-monitor's `neuron_runtime_tag`;
/// without it the pid is the tag).
pub const PROCESS_TAG_VAR: &str = "NEURON_PROCESS_TAG";

/// The [`crate::shared::layout::MODEL_CLASSES`] index of a model's dmem: device `constants`,
/// `model_code`, `runtime_memory` (scratchpad and rings included), `tensors`; host
/// `application_memory`, `constants`, `dma_buffers`, `tensors`.
fn model_class(d: &nrt_core::dmem::DmemInfo) -> usize {
    use nrt_core::abi::tables::category_for;
    use nrt_core::abi::{dma_mem_location_t, dma_mem_usage_type_t, mem_alloc_category_t as C};
    let host = d.mem_type == dma_mem_location_t::HOST_DRAM as u32;
    let loc = if host {
        dma_mem_location_t::HOST_DRAM
    } else {
        dma_mem_location_t::TONGA_DRAM
    };
    let cat = dma_mem_usage_type_t::from_raw(d.mem_usage_type)
        .and_then(|u| C::from_raw(category_for(loc, u) as u32));
    match (host, cat) {
        (false, Some(C::CONSTANTS_DEVICE)) => 0,
        (false, Some(C::CODE_DEVICE)) => 1,
        (false, Some(C::TENSORS_DEVICE)) => 3,
        (false, _) => 2,
        (true, Some(C::CONSTANTS_HOST)) => 5,
        (true, Some(C::DMA_RINGS_HOST)) => 6,
        (true, Some(C::TENSORS_HOST)) => 7,
        (true, _) => 4,
    }
}

/// Why `start` failed.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    /// Building the driver failed.
    #[error(transparent)]
    Build(#[from] BuildError),
    /// `nrt_init` failed.
    #[error("runtime initialisation failed: {0}")]
    Init(nrt_core::Error),
}

impl From<crate::Error> for StartError {
    fn from(e: crate::Error) -> Self {
        StartError::Build(BuildError::Host(e))
    }
}

// A runtime is shared by threads (the C ABI's global, the concurrency tests): Send + Sync come
// from its parts (CoreState and the drivers are Sync), checked here instead of asserted unsafely.
static_assertions::assert_impl_all!(HostRuntime: Send, Sync);

/// The OOM table libnrt logs and writes on a device OOM (public API §5), as text: the table
/// the core captured at the moment of the failure (headed by the failure, with the largest
/// live allocations), and the device it names. `None` when `err` is not a device OOM. The one
/// place every layer (scenario runner, worker, demo, C API) gets the table from.
pub fn oom_table(nrt: &nrt_core::Nrt<'_>, err: &nrt_core::Error) -> Option<(u32, String)> {
    let nrt_core::Error::DeviceOom { device, .. } = *err else {
        return None;
    };
    let mut s = String::new();
    nrt.ledger().last_oom_dump(&mut s).ok()?;
    Some((device, s))
}

/// [`oom_table`] written to its file ([`write_oom_report`]): the path (`None` when report files
/// are turned off), or why it could not be written; `None` when `err` is not a device OOM.
pub fn write_oom_table(
    nrt: &nrt_core::Nrt<'_>,
    err: &nrt_core::Error,
) -> Option<std::io::Result<Option<PathBuf>>> {
    let (device, text) = oom_table(nrt, err)?;
    Some(write_oom_report(device, &text))
}

/// Where libnrt's OOM table for `device` goes (public API §5: on a device OOM libnrt logs the
/// table and writes it to a file): `$TMPDIR/nrt-dmem-oom-nd<D>-<pid>.txt`, one file per device
/// and process, `/tmp` when `TMPDIR` is unset or empty.
pub fn oom_report_path(device: u32) -> PathBuf {
    let dir = std::env::var_os("TMPDIR")
        .filter(|d| !d.is_empty())
        .map_or_else(|| PathBuf::from("/tmp"), PathBuf::from);
    dir.join(format!(
        "{OOM_REPORT_PREFIX}{device}-{}.txt",
        std::process::id()
    ))
}

/// How an OOM report file's name starts (`nrt-dmem-oom-nd<D>-<pid>.txt`).
const OOM_REPORT_PREFIX: &str = "nrt-dmem-oom-nd";

/// How many OOM report files the report directory keeps by default
/// ([`oom_report_files_kept`]).
pub const OOM_REPORT_FILES_DEFAULT: usize = 16;

/// How many OOM report files the report directory keeps: `NRT_DMEM_OOM_REPORT_FILES` (0 turns
/// the files off; the table is still logged), [`OOM_REPORT_FILES_DEFAULT`] when unset. A value
/// that is not a number is the default.
pub fn oom_report_files_kept() -> usize {
    std::env::var("NRT_DMEM_OOM_REPORT_FILES")
        .ok()
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(OOM_REPORT_FILES_DEFAULT)
}

/// Writes an OOM table to [`oom_report_path`] and returns that path, then keeps the directory
/// to [`oom_report_files_kept`] report files: the oldest files of processes that have exited
/// go first, so a test suite or a restart loop does not leave one file per process behind,
/// and a running process's report is never removed. `None` when the files are turned off.
pub fn write_oom_report(device: u32, text: &str) -> std::io::Result<Option<PathBuf>> {
    let keep = oom_report_files_kept();
    if keep == 0 {
        return Ok(None);
    }
    let path = oom_report_path(device);
    write_private(&path, text)?;
    if let Some(dir) = path.parent() {
        prune_oom_reports(dir, keep);
    }
    Ok(Some(path))
}

/// Removes the oldest OOM report files of exited processes from `dir` until at most `keep`
/// remain (or only running processes' files are left). Best effort: a file that cannot be
/// read or removed (another user's, in a shared `/tmp`) stays.
fn prune_oom_reports(dir: &std::path::Path, keep: usize) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    let mut reports: Vec<(std::time::SystemTime, PathBuf, Option<u32>)> = entries
        .filter_map(Result::ok)
        .filter_map(|e| {
            let name = e.file_name().into_string().ok()?;
            let pid = name
                .strip_prefix(OOM_REPORT_PREFIX)?
                .strip_suffix(".txt")?
                .split_once('-')?
                .1
                .parse()
                .ok();
            let meta = e.metadata().ok().filter(|m| m.is_file())?;
            Some((meta.modified().ok()?, e.path(), pid))
        })
        .collect();
    if reports.len() <= keep {
        return;
    }
    reports.sort();
    let mut excess = reports.len() - keep;
    for (_, path, pid) in reports {
        if excess == 0 {
            break;
        }
        if pid.is_some_and(process_is_running) {
            continue;
        }
        if std::fs::remove_file(&path).is_ok() {
            excess -= 1;
        }
    }
}

/// Whether process `pid` exists (it may belong to another user).
fn process_is_running(pid: u32) -> bool {
    std::path::Path::new("/proc").join(pid.to_string()).exists()
}

/// Writes `text` to `path`, which has a predictable name in a directory that may be shared:
/// a symlink planted there is not followed (`O_NOFOLLOW`: the write fails instead of
/// truncating the link's target), and a new file is private (0600: an OOM table names the
/// process's allocations).
fn write_private(path: &std::path::Path, text: &str) -> std::io::Result<()> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .custom_flags(libc::O_NOFOLLOW)
        .open(path)?
        .write_all(text.as_bytes())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The shim's state block holds libnrt's whole `tdrv_ctx_t` (32 devices) at the start of
    /// its storage mapping, and the context's pages are in core dumps (no `dd` flag) although
    /// the rest of the mapping is left out until its slots are used.
    #[test]
    fn the_shim_context_is_libnrt_whole_and_dumped() {
        let caps = nrt_core::Capacity {
            dmems: 65536,
            ..crate::config::HOST_CAPACITY
        };
        let st = state_block(&caps).unwrap();
        let l = st.context_layout();
        assert!(l.is_full(), "{l:?}");
        assert_eq!(
            l.tail,
            core::mem::offset_of!(nrt_core::abi::tdrv_ctx_t, num_ptpb)
        );
        let at = st.context_addr() as usize;
        let smaps = std::fs::read_to_string("/proc/self/smaps").unwrap();
        let flags_at = |addr: usize| -> Option<String> {
            let mut inside = false;
            for line in smaps.lines() {
                if let Some((range, _)) = line.split_once(' ') {
                    if let Some((a, b)) = range.split_once('-') {
                        if let (Ok(a), Ok(b)) =
                            (usize::from_str_radix(a, 16), usize::from_str_radix(b, 16))
                        {
                            inside = (a..b).contains(&addr);
                            continue;
                        }
                    }
                }
                if inside {
                    if let Some(f) = line.strip_prefix("VmFlags:") {
                        return Some(f.to_string());
                    }
                }
            }
            None
        };
        let ctx = flags_at(at).expect("the context is mapped");
        assert!(!ctx.split_whitespace().any(|f| f == "dd"), "{ctx}");
        let arenas = flags_at(at + l.bytes + (64 << 20)).expect("the arenas are mapped");
        assert!(arenas.split_whitespace().any(|f| f == "dd"), "{arenas}");
    }

    /// The report directory keeps the newest files of exited processes up to the bound, never
    /// a running process's file, and leaves other files alone.
    #[test]
    fn old_reports_of_exited_processes_are_pruned_to_the_bound() {
        let dir = std::env::temp_dir().join(format!("nrt-oom-prune-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let t0 = std::time::SystemTime::now() - std::time::Duration::from_secs(1000);
        // Exited processes: pids above the kernel's maximum (4194304) never run.
        let dead: Vec<PathBuf> = (0..6)
            .map(|i| dir.join(format!("{OOM_REPORT_PREFIX}0-{}.txt", 5_000_000 + i)))
            .collect();
        for (i, p) in dead.iter().enumerate() {
            write_private(p, "table").unwrap();
            let f = std::fs::File::options().write(true).open(p).unwrap();
            f.set_modified(t0 + std::time::Duration::from_secs(i as u64))
                .unwrap();
        }
        // This process's report, the oldest of all, and a file that is no report.
        let live = dir.join(format!("{OOM_REPORT_PREFIX}1-{}.txt", std::process::id()));
        write_private(&live, "mine").unwrap();
        std::fs::File::options()
            .write(true)
            .open(&live)
            .unwrap()
            .set_modified(t0 - std::time::Duration::from_secs(10))
            .unwrap();
        let other = dir.join("unrelated.txt");
        std::fs::write(&other, "x").unwrap();
        prune_oom_reports(&dir, 3);
        let left: Vec<bool> = dead.iter().map(|p| p.exists()).collect();
        assert_eq!(left, [false, false, false, false, true, true]);
        assert!(live.exists() && other.exists());
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn the_oom_file_does_not_follow_a_planted_symlink() {
        let dir = std::env::temp_dir().join(format!("nrt-oom-link-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let victim = dir.join("victim");
        std::fs::write(&victim, "keep me").unwrap();
        let link = dir.join("nrt-dmem-oom-nd0-1.txt");
        std::os::unix::fs::symlink(&victim, &link).unwrap();
        assert!(write_private(&link, "table").is_err());
        assert_eq!(std::fs::read_to_string(&victim).unwrap(), "keep me");
        // A plain file is written, and readable by its owner only.
        let plain = dir.join("plain.txt");
        write_private(&plain, "table").unwrap();
        assert_eq!(std::fs::read_to_string(&plain).unwrap(), "table");
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(&plain).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o600);
        let _ = std::fs::remove_dir_all(&dir);
    }
}
