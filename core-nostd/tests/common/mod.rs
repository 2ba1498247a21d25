//! Shared fixtures: a runtime over a simulated device.
#![allow(dead_code)]

use nrt_core::abi::*;
use nrt_core::sim::{Preset, SimConfig, SimDevice};
use nrt_core::tensor::HostMem;
use nrt_core::{CoreState, InitOptions, Nrt};

pub struct Fixture {
    pub st: Box<CoreState>,
    pub sim: Box<SimDevice>,
    pub backing: Vec<Vec<u8>>,
    /// The host-memory provider the runtime is bound to (`Nrt::with_host`), if any.
    pub host: Option<&'static dyn HostMem>,
}

impl Fixture {
    pub fn new(cfg: SimConfig) -> Self {
        let mut sim = SimDevice::new_boxed(&cfg).expect("sim");
        let mut backing = Vec::new();
        if cfg.channel_size_override.is_some() {
            for d in 0..cfg.devices {
                let mut v = vec![0u8; sim.backing_len(d) as usize];
                // SAFETY: the Vec outlives the device (both owned by the fixture, sim dropped first
                // is irrelevant: it never touches the backing on drop).
                unsafe { sim.set_backing(d, v.as_mut_ptr(), v.len() as u64).unwrap() };
                backing.push(v);
            }
        }
        Fixture {
            st: CoreState::new_boxed(),
            sim,
            backing,
            host: None,
        }
    }
    pub fn trn2() -> Self {
        Self::new(SimConfig::new(Preset::Trn2, 1))
    }
    pub fn nrt(&self) -> Nrt<'_> {
        match self.host {
            Some(h) => Nrt::with_host(&self.st, &*self.sim, h),
            None => Nrt::new(&self.st, &*self.sim),
        }
    }
    /// [`Self::up`] with the runtime bound to `host` for its VIRTUAL tensors.
    pub fn up_with_host(cfg: SimConfig, opts: InitOptions, host: &'static dyn HostMem) -> Self {
        let mut f = Self::new(cfg);
        f.host = Some(host);
        f.nrt().init(&opts).expect("init");
        f
    }
    pub fn up(cfg: SimConfig, opts: InitOptions) -> Self {
        let f = Self::new(cfg);
        f.nrt().init(&opts).expect("init");
        f
    }
}

/// A DEVICE tensor of `size` bytes named `name` on logical core `core` (the call must succeed).
pub fn device_tensor(n: &Nrt<'_>, core: u32, size: u64, name: &str) -> nrt_core::TensorHandle {
    n.tensors()
        .allocate(
            nrt_core::tensor::Placement::Device,
            nrt_core::LogicalCore::new(core).into(),
            size,
            Some(name),
        )
        .unwrap()
}

/// Closes the runtime and checks that it gave every byte back to the driver.
pub fn close_and_check_drained(n: &Nrt<'_>) {
    n.close().unwrap();
    assert_eq!(
        n.driver_pool_bytes_in_use().unwrap(),
        0,
        "close left memory behind"
    );
}

/// One device's ledger: device rows and host rows.
pub type Ledger = nrt_core::LedgerSnapshot;

/// Every ledger row of every device, plus the driver's view: equal before/after a failed call.
pub fn snapshot(n: &Nrt<'_>) -> (Vec<Ledger>, u64) {
    (
        (0..n.num_devices())
            .map(|d| n.ledger().snapshot(d))
            .collect(),
        n.driver_pool_bytes_in_use().unwrap(),
    )
}

pub const TENSOR: dma_mem_usage_type_t = dma_mem_usage_type_t::DMA_MEM_USAGE_TYPE_TENSOR;

/// Sets a stop flag however the owning thread leaves its scope (a failed assertion included),
/// so a threaded test that fails reports instead of hanging in the scope's join.
pub struct StopOnDrop<'a>(pub &'a std::sync::atomic::AtomicBool);

impl Drop for StopOnDrop<'_> {
    fn drop(&mut self) {
        self.0.store(true, std::sync::atomic::Ordering::Relaxed);
    }
}

/// The error a freed (stale) handle of `kind` gets.
pub fn stale(kind: nrt_core::HandleKind) -> nrt_core::Error {
    nrt_core::Error::InvalidHandle(nrt_core::HandleError {
        kind,
        fault: nrt_core::HandleFault::Stale,
    })
}

/// A dmem handle its owner has already freed: what a caller's stale copy holds.
pub fn stale_dmem(n: &Nrt<'_>, al: nrt_core::AllocatorHandle) -> nrt_core::DmemHandle {
    let args = nrt_core::dmem::AllocArgs::device(4096, 0, TENSOR, "mine");
    let m = n.dmem().alloc(al, &args, None).unwrap();
    n.dmem().free(m).unwrap();
    m
}

/// `stale` (from [`stale_dmem`]) still names no allocation: the next one is another dmem,
/// and freeing `stale` again is a reported double free that touches nothing.
pub fn assert_stale_still_detected(
    n: &Nrt<'_>,
    al: nrt_core::AllocatorHandle,
    stale: nrt_core::DmemHandle,
) {
    let args = nrt_core::dmem::AllocArgs::device(4096, 0, TENSOR, "theirs");
    let fresh = n.dmem().alloc(al, &args, None).unwrap();
    assert_ne!(fresh, stale, "the stale slot was handed out again");
    assert_eq!(
        n.dmem().free(stale),
        Err(self::stale(nrt_core::HandleKind::Dmem))
    );
    n.dmem().free(fresh).unwrap();
}

/// What a test does just before some of a simulated device's driver calls ([`HookedSim`]);
/// each hook does nothing unless the test says otherwise.
pub trait DriverHooks: Send + Sync {
    /// Before `memory_alloc` / `memory_alloc_pa`; `drv` is the hooked driver itself.
    fn before_alloc(
        &self,
        _drv: &dyn nrt_core::driver::Driver,
        _r: &nrt_core::driver::AllocRequest,
    ) {
    }
    /// The errno `memory_alloc` / `memory_alloc_pa` answers instead of allocating, if any
    /// (after `before_alloc`).
    fn refuse_alloc(&self, _r: &nrt_core::driver::AllocRequest) -> Option<nrt_core::driver::Errno> {
        None
    }
    /// Before `copy_in`.
    fn before_copy_in(&self) {}
    /// Before `fill`.
    fn before_fill(&self) {}
}

/// A simulated device whose driver calls pass `hooks` first: one delegating `Driver` for
/// every test that needs to step into the middle of a runtime call.
pub struct HookedSim<H> {
    /// The device every call goes to.
    pub inner: Box<SimDevice>,
    /// What runs first.
    pub hooks: H,
}

impl<H: DriverHooks> nrt_core::driver::Driver for HookedSim<H> {
    nrt_core::forward_driver!(inner => device_count, device_info, memory_get_pa, memory_free,
        copy_out, pool_stats, hbm_stats_aligned, free_histogram);
    fn memory_alloc(
        &self,
        d: u32,
        r: &nrt_core::driver::AllocRequest,
    ) -> Result<u64, nrt_core::driver::Errno> {
        self.hooks.before_alloc(self, r);
        if let Some(e) = self.hooks.refuse_alloc(r) {
            return Err(e);
        }
        self.inner.memory_alloc(d, r)
    }
    fn memory_alloc_pa(
        &self,
        d: u32,
        r: &nrt_core::driver::AllocRequest,
    ) -> Result<(u64, u64), nrt_core::driver::Errno> {
        self.hooks.before_alloc(self, r);
        if let Some(e) = self.hooks.refuse_alloc(r) {
            return Err(e);
        }
        self.inner.memory_alloc_pa(d, r)
    }
    fn copy_in(&self, d: u32, h: u64, o: u64, s: &[u8]) -> Result<(), nrt_core::driver::Errno> {
        self.hooks.before_copy_in();
        self.inner.copy_in(d, h, o, s)
    }
    fn fill(&self, d: u32, h: u64, o: u64, l: u64, v: u8) -> Result<(), nrt_core::driver::Errno> {
        self.hooks.before_fill();
        self.inner.fill(d, h, o, l, v)
    }
}

/// Physical core 0:0's GLOBAL allocator (the call must succeed).
pub fn core0_allocator(n: &Nrt<'_>) -> nrt_core::AllocatorHandle {
    n.dmem()
        .core_allocator(nrt_core::PhysicalCore::new(0, 0))
        .unwrap()
}

/// A DEVICE allocation of `size` bytes booked as TENSOR, hinted `name`.
pub fn tensor_args(size: u64, name: &str) -> nrt_core::dmem::AllocArgs<'_> {
    nrt_core::dmem::AllocArgs::device(
        size,
        0,
        dma_mem_usage_type_t::DMA_MEM_USAGE_TYPE_TENSOR,
        name,
    )
}
