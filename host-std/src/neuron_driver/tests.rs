//! Unit tests of the `/dev/neuron` driver (`neuron_driver`), on the fake ioctl device.

use super::*;
use crate::ioctl::fake::{FakeDevice, FakeGeneration, FakeSys, FAKE_CARVE_OUT};
use nrt_core::driver::errno;

const GIB: u64 = 1 << 30;

fn req(size: u64, hbm: u32) -> AllocRequest {
    AllocRequest {
        size,
        align: 0,
        host: false,
        hbm_idx: hbm,
        region: 0,
        nc_id: 0,
        category: 9,
    }
}

fn open(devs: Vec<FakeDevice>) -> NeuronDriver<FakeSys> {
    NeuronDriver::open_with(FakeSys::new(devs)).expect("fake devices open")
}

#[test]
fn discovery_counts_consecutive_nodes_and_derives_geometry() {
    let drv = open(vec![FakeDevice::trn2(), FakeDevice::trn1()]);
    assert_eq!(drv.device_count(), 2);
    assert_eq!(drv.sys().open_fds(), 2);
    let i = drv.device_info(0).unwrap();
    assert_eq!(i.arch, al_hal_tpb_arch_type_t::AL_HAL_TPB_ARCH_TYPE_CAYMAN);
    assert_eq!(
        (i.cores_per_device, i.hbm_channels, i.hbm_channel_size),
        (8, 4, 24 * GIB)
    );
    assert_ne!(i.feature_flags & feature::MEM_ALLOC64, 0);
    assert_eq!(i.default_hbm_for_core(5), 2);
    let j = drv.device_info(1).unwrap();
    assert_eq!(j.arch, al_hal_tpb_arch_type_t::AL_HAL_TPB_ARCH_TYPE_SUNDA);
    assert_eq!(
        (j.cores_per_device, j.hbm_channels, j.hbm_channel_size),
        (2, 2, 16 * GIB)
    );
    assert_eq!(drv.device_info(2), Err(errno::ENODEV));
    assert_eq!(drv.device_path(1), Some(Path::new("/dev/neuron1")));
    assert_eq!(drv.revision(0), Some(0));
    assert!(drv.has_driver_info(0));
    // One DEVICE_BASIC_INFO and one DRIVER_INFO_GET per device.
    assert_eq!(drv.sys().call_count(NEURON_IOCTL_DEVICE_BASIC_INFO), 2);
    assert_eq!(drv.sys().call_count(NEURON_IOCTL_DRIVER_INFO_GET), 2);
}

#[test]
fn no_device_is_one_clear_error_naming_the_node_and_the_simulator() {
    let e = NeuronDriver::open_with(FakeSys::new(vec![]))
        .err()
        .expect("no devices");
    assert!(matches!(e, Error::NoDevice { .. }), "{e:?}");
    assert_eq!(e.errno(), Some(Errno::ENOENT));
    let msg = e.to_string();
    assert!(msg.contains("/dev/neuron0"), "{msg}");
    assert!(msg.contains("NRT_DMEM_DEVICE=sim:trn2"), "{msg}");
    assert!(std::error::Error::source(&e).is_some());
}

#[test]
fn unsupported_arch_and_failed_bring_up_close_every_descriptor() {
    let mut inf1 = FakeDevice::trn2();
    inf1.arch = 1;
    let fake = FakeSys::new(vec![FakeDevice::trn2(), inf1]);
    let e = NeuronDriver::open_with(fake).err().unwrap();
    assert!(matches!(e, Error::UnsupportedArch { arch: 1, .. }), "{e:?}");
    assert!(e.to_string().contains("/dev/neuron1"));

    let fake = FakeSys::new(vec![FakeDevice::trn2()]);
    fake.inject(NEURON_IOCTL_DEVICE_BASIC_INFO, Errno::EIO);
    let drv = NeuronDriver::open_with(fake);
    let e = drv.err().unwrap();
    assert!(
        matches!(
            e,
            Error::Ioctl {
                name: "DEVICE_BASIC_INFO",
                source: Errno::EIO,
                ..
            }
        ),
        "{e:?}"
    );
    assert!(e.to_string().contains("0x40084e64"), "{e}");
}

#[test]
fn drop_closes_descriptors_and_the_driver_frees_the_process_memory() {
    let fake = FakeSys::new(vec![FakeDevice::trn2(), FakeDevice::trn2()]);
    {
        let drv = NeuronDriver::open_with(&fake).unwrap();
        drv.memory_alloc(0, &req(4096, 0)).unwrap();
        drv.memory_alloc(1, &req(4096, 3)).unwrap();
        assert_eq!((fake.open_fds(), fake.live_allocations()), (2, 2));
    }
    assert_eq!((fake.open_fds(), fake.live_allocations()), (0, 0));
}

#[test]
fn alloc_copy_pa_free_round_trip() {
    let drv = open(vec![FakeDevice::trn2()]);
    let h = drv.memory_alloc(0, &req(10_000, 1)).unwrap();
    assert_ne!(h, 0);
    assert_eq!(drv.alloc_variant(0), Some(AllocVariant::V2Mt64));
    let pa = drv.memory_get_pa(0, h).unwrap();
    let ch1 = 24 * GIB; // channel 1 starts after channel 0 in the fake's address plan
    assert_eq!(pa, ch1 + FAKE_CARVE_OUT);
    let data: Vec<u8> = (0..5000u32).map(|i| (i * 7) as u8).collect();
    drv.copy_in(0, h, 100, &data).unwrap();
    let mut back = vec![0u8; 5000];
    drv.copy_out(0, h, 100, &mut back).unwrap();
    assert_eq!(back, data);
    // Empty copies are no-ops, not ioctls.
    let n = drv.sys().call_count(NEURON_IOCTL_MEM_BUF_COPY64);
    drv.copy_in(0, h, 0, &[]).unwrap();
    assert_eq!(drv.sys().call_count(NEURON_IOCTL_MEM_BUF_COPY64), n);
    drv.memory_free(0, h).unwrap();
    assert_eq!(drv.sys().live_allocations(), 0);
    assert_eq!(drv.memory_free(0, h), Err(errno::EINVAL));
}

#[test]
fn copies_are_chunked_and_fill_stages_once_per_chunk() {
    let mut drv = open(vec![FakeDevice::trn2()]);
    drv.set_copy_chunk(1000);
    let h = drv.memory_alloc(0, &req(8192, 0)).unwrap();
    let data: Vec<u8> = (0..4500u32).map(|i| (i % 251) as u8).collect();
    drv.copy_in(0, h, 7, &data).unwrap();
    assert_eq!(drv.sys().call_count(NEURON_IOCTL_MEM_BUF_COPY64), 5);
    let mut back = vec![0u8; 4500];
    drv.copy_out(0, h, 7, &mut back).unwrap();
    assert_eq!(back, data);
    assert_eq!(drv.sys().call_count(NEURON_IOCTL_MEM_BUF_COPY64), 10);
    drv.fill(0, h, 2000, 2500, 0xab).unwrap();
    assert_eq!(drv.sys().call_count(NEURON_IOCTL_MEM_BUF_COPY64), 13);
    let mut back = vec![0u8; 8192];
    drv.copy_out(0, h, 0, &mut back).unwrap();
    assert!(back[2000..4500].iter().all(|&b| b == 0xab));
    assert_eq!(back[1999], data[1992]);
    assert_eq!(back[4500], data[4493]);
}

#[test]
fn fallback_chain_v2mt64_to_v2mt_to_v2_is_remembered() {
    // No DRIVER_INFO_GET and only V2: probe V2MT64 → V2MT → V2 once.
    let mut old = FakeDevice::trn2().older(FakeGeneration::V2, Errno::ENOTTY);
    old.driver_info = false;
    let drv = open(vec![old]);
    assert!(!drv.has_driver_info(0));
    assert_eq!(drv.alloc_variant(0), None);
    let h = drv.memory_alloc(0, &req(4096, 0)).unwrap();
    assert_eq!(drv.alloc_variant(0), Some(AllocVariant::V2));
    let f = drv.sys();
    assert_eq!(f.call_count(NEURON_IOCTL_MEM_ALLOC_V2MT64), 1);
    assert_eq!(f.call_count(NEURON_IOCTL_MEM_ALLOC_V2MT), 1);
    assert_eq!(f.call_count(NEURON_IOCTL_MEM_ALLOC_V2), 1);
    drv.memory_alloc(0, &req(4096, 0)).unwrap();
    assert_eq!(f.call_count(NEURON_IOCTL_MEM_ALLOC_V2MT64), 1);
    assert_eq!(f.call_count(NEURON_IOCTL_MEM_ALLOC_V2), 2);
    drv.memory_free(0, h).unwrap();

    // A driver that claims MEM_ALLOC64 but rejects the 56-byte struct by size (EINVAL).
    let mut liar = FakeDevice::trn2().older(FakeGeneration::V2Mt, Errno::EINVAL);
    liar.feature_flags |= feature::MEM_ALLOC64;
    let drv = open(vec![liar]);
    drv.memory_alloc(0, &req(4096, 0)).unwrap();
    assert_eq!(drv.alloc_variant(0), Some(AllocVariant::V2Mt));
    assert_eq!(drv.sys().call_count(NEURON_IOCTL_MEM_ALLOC_V2MT64), 1);

    // No MEM_ALLOC64 bit: V2MT is tried first, V2MT64 never.
    let drv = open(vec![
        FakeDevice::trn2().older(FakeGeneration::V2Mt, Errno::EINVAL)
    ]);
    drv.memory_alloc(0, &req(4096, 0)).unwrap();
    assert_eq!(drv.sys().call_count(NEURON_IOCTL_MEM_ALLOC_V2MT64), 0);
    assert_eq!(drv.alloc_variant(0), Some(AllocVariant::V2Mt));
}

#[test]
fn an_einval_for_another_reason_does_not_turn_native_alignment_off() {
    // This driver refuses 4 GiB and more (no MEM_ALLOC_V2MT64) with EINVAL. An aligned
    // request of that size must not make the core conclude that alignment itself is
    // unsupported (spec §3.2's latch): later aligned requests stay native.
    use nrt_core::abi::dma_mem_usage_type_t::DMA_MEM_USAGE_TYPE_TENSOR as TENSOR;
    use nrt_core::dmem::AllocArgs;
    let drv = open(vec![
        FakeDevice::trn2().older(FakeGeneration::V2Mt, Errno::EINVAL)
    ]);
    let st = nrt_core::CoreState::new_boxed();
    let n = nrt_core::Nrt::new(&st, &drv);
    n.init(&nrt_core::InitOptions::default()).unwrap();
    let al = n
        .dmem()
        .core_allocator(nrt_core::PhysicalCore::new(0, 0))
        .unwrap();
    let used = || {
        let s = drv.pool_stats(0, false, 0).unwrap();
        s.capacity - s.free
    };
    let small = AllocArgs::device(64 << 10, 0, TENSOR, "s").aligned(64 << 10);
    let big = AllocArgs::device(4 * GIB, 0, TENSOR, "big").aligned(64 << 10);
    assert_eq!(
        n.dmem().alloc(al, &big, None),
        Err(nrt_core::Error::Driver(errno::EINVAL))
    );
    let u0 = used();
    let m = n.dmem().alloc(al, &small, None).unwrap();
    assert_eq!(used() - u0, 64 << 10, "still native: no over-allocation");
    assert_eq!(n.dmem().info(m).unwrap().align_offset, 0);
    n.dmem().free(m).unwrap();
    n.close().unwrap();
}

/// The fake, except that DUMP_MEM_CHUNKS leaves the entries uncopied and returns the
/// uncopied byte count, as the driver does when `copy_to_user` falls short.
struct ShortCopy(FakeSys);

impl Sys for ShortCopy {
    fn open(&self, p: &Path) -> core::result::Result<RawFd, Errno> {
        self.0.open(p)
    }
    unsafe fn ioctl(&self, fd: RawFd, cmd: u64, arg: *mut u8) -> core::result::Result<i32, Errno> {
        // SAFETY: forwarded under this method's own contract.
        let r = unsafe { self.0.ioctl(fd, cmd, arg) };
        if cmd == NEURON_IOCTL_DUMP_MEM_CHUNKS && r.is_ok() {
            // SAFETY: `arg` is the DUMP_MEM_CHUNKS header (the command's argument).
            let h: DumpMemChunks = unsafe { std::ptr::read_unaligned(arg.cast()) };
            if h.num_entries_in > 0 && h.num_entries_out > 0 {
                let n = h.num_entries_out as usize * size_of::<MemChunkInfo>();
                // SAFETY: `data` holds `num_entries_in` >= `num_entries_out` entries.
                unsafe { std::ptr::write_bytes(h.data as *mut u8, 0, n) };
                return Ok(n as i32);
            }
        }
        r
    }
    fn close(&self, fd: RawFd) -> core::result::Result<(), Errno> {
        self.0.close(fd)
    }
}

#[test]
fn a_short_copy_of_the_chunk_list_is_an_error_not_zeroed_chunks() {
    let drv = NeuronDriver::open_with(ShortCopy(FakeSys::new(vec![FakeDevice::trn2()]))).unwrap();
    let a = drv.memory_alloc(0, &req(1 << 20, 0)).unwrap();
    assert_eq!(drv.dump_mem_chunks(0, 0), Err(Errno::EFAULT));
    drv.memory_free(0, a).unwrap();
}

#[test]
fn a_copy_chunk_stays_below_what_the_driver_can_count() {
    let mut drv = open(vec![FakeDevice::trn2()]);
    drv.set_copy_chunk(4 * GIB);
    assert_eq!(drv.copy_chunk, MAX_COPY_CHUNK);
    drv.set_copy_chunk(0);
    assert_eq!(drv.copy_chunk, 1);
}

#[test]
fn four_gib_needs_v2mt64() {
    let drv = open(vec![
        FakeDevice::trn2().older(FakeGeneration::V2Mt, Errno::EINVAL)
    ]);
    let n = drv.sys().calls().len();
    assert_eq!(drv.memory_alloc(0, &req(5 * GIB, 0)), Err(errno::EINVAL));
    assert_eq!(drv.sys().calls().len(), n, "refused before the driver");

    let drv = open(vec![FakeDevice::trn2()]);
    let h = drv.memory_alloc(0, &req(5 * GIB, 0)).unwrap();
    drv.copy_in(0, h, 9 * GIB / 2, b"far").unwrap();
    let mut b = [0u8; 3];
    drv.copy_out(0, h, 9 * GIB / 2, &mut b).unwrap();
    assert_eq!(&b, b"far");
    assert_eq!(drv.copy_in(0, h, 5 * GIB - 1, b"xy"), Err(errno::EINVAL));
}

#[test]
fn enomem_when_the_channel_is_full() {
    let drv = open(vec![FakeDevice::trn2().with_hbm_capacity(1 << 20)]);
    let a = drv.memory_alloc(0, &req(512 << 10, 2)).unwrap();
    assert_eq!(drv.memory_alloc(0, &req(768 << 10, 2)), Err(errno::ENOMEM));
    // Other channels are separate pools.
    let b = drv.memory_alloc(0, &req(768 << 10, 3)).unwrap();
    assert_eq!(
        drv.alloc_variant(0),
        Some(AllocVariant::V2Mt64),
        "ENOMEM is not a fallback"
    );
    drv.memory_free(0, a).unwrap();
    let c = drv.memory_alloc(0, &req(768 << 10, 2)).unwrap();
    for h in [b, c] {
        drv.memory_free(0, h).unwrap();
    }
}

#[test]
fn bad_handles_bad_devices_and_bad_arguments() {
    let drv = open(vec![FakeDevice::trn2()]);
    // A bad argument before any success tries every variant, then reports EINVAL, and
    // does not pin a variant.
    let mut r = req(4096, 0);
    r.nc_id = 9;
    assert_eq!(drv.memory_alloc(0, &r), Err(errno::EINVAL));
    assert_eq!(drv.alloc_variant(0), None);
    assert_eq!(drv.memory_alloc(0, &req(4096, 7)), Err(errno::EINVAL)); // hbm 7 of 4
    let h = drv.memory_alloc(0, &req(4096, 0)).unwrap();
    assert_eq!(drv.alloc_variant(0), Some(AllocVariant::V2Mt64));
    // After confirmation, EINVAL is final: exactly one more V2MT64 call, no fallback.
    let before = drv.sys().call_count(NEURON_IOCTL_MEM_ALLOC_V2MT);
    assert_eq!(drv.memory_alloc(0, &r), Err(errno::EINVAL));
    assert_eq!(drv.sys().call_count(NEURON_IOCTL_MEM_ALLOC_V2MT), before);

    let bad = 0xdead_beef;
    assert_eq!(drv.memory_free(0, bad), Err(errno::EINVAL));
    // MEM_GET_EXTENDED_INFO answers a bad handle with a positive EINVAL.
    assert_eq!(drv.memory_get_pa(0, bad), Err(errno::EINVAL));
    assert_eq!(drv.copy_in(0, bad, 0, b"x"), Err(errno::EINVAL));
    assert_eq!(drv.copy_out(0, h, 4090, &mut [0u8; 8]), Err(errno::EINVAL));
    assert_eq!(drv.copy_in(0, h, u64::MAX, b"x"), Err(errno::EINVAL));
    assert_eq!(drv.memory_alloc(3, &req(4096, 0)), Err(errno::ENODEV));
    assert_eq!(drv.copy_in(3, h, 0, b"x"), Err(errno::ENODEV));
    assert_eq!(drv.pool_stats(0, false, 4), Err(errno::EINVAL));
    // Injected driver errors come through unchanged.
    drv.sys().inject(NEURON_IOCTL_MEM_BUF_COPY64, Errno::ENOTTY);
    assert_eq!(drv.copy_in(0, h, 0, b"x"), Err(errno::ENOTTY));
    // Host memory: an aligned host allocation is refused by the driver.
    let mut hr = req(4096, 0);
    hr.host = true;
    hr.align = 1 << 20;
    assert_eq!(drv.memory_alloc(0, &hr), Err(errno::EINVAL));
    hr.align = 0;
    let hh = drv.memory_alloc(0, &hr).unwrap();
    assert!(drv.memory_get_pa(0, hh).unwrap() >= crate::ioctl::fake::FAKE_HOST_PA_BASE);
}

#[test]
fn pool_stats_from_dump_mem_chunks() {
    let drv = open(vec![FakeDevice::trn2()]);
    let cap = 24 * GIB - FIRMWARE_CARVEOUT;
    let s = drv.pool_stats(0, false, 0).unwrap();
    assert_eq!(s, PoolStats::one_region(cap, cap, cap, 0));
    let a = drv.memory_alloc(0, &req(1 << 20, 0)).unwrap();
    let b = drv.memory_alloc(0, &req(3 << 20, 0)).unwrap();
    let _c = drv.memory_alloc(0, &req(1000, 0)).unwrap(); // rounds to one page
    drv.memory_free(0, b).unwrap();
    let s = drv.pool_stats(0, false, 0).unwrap();
    assert_eq!(s.allocations, 2);
    assert_eq!(s.free, cap - (1 << 20) - 4096);
    assert_eq!(s.largest_free, s.free - (3 << 20)); // the tail beats the 3 MiB hole
    assert!(drv.sys().call_count(NEURON_IOCTL_DUMP_MEM_CHUNKS) >= 4);
    // Other channels are untouched; the host pool counts this process's allocations.
    assert_eq!(drv.pool_stats(0, false, 1).unwrap().free, cap);
    let mut hr = req(10_000, 0);
    hr.host = true;
    drv.memory_alloc(0, &hr).unwrap();
    let h = drv.pool_stats(0, true, 0).unwrap();
    assert_eq!(
        (h.capacity, h.free, h.allocations),
        (HOST_DMA_CAPACITY, HOST_DMA_CAPACITY - 12288, 1)
    );
    drv.memory_free(0, a).unwrap();
}

#[test]
fn pool_stats_without_dump_mem_chunks_count_own_allocations() {
    let mut d = FakeDevice::trn1();
    d.dump_mem_chunks = false;
    let drv = open(vec![d]);
    let cap = 16 * GIB - FIRMWARE_CARVEOUT;
    drv.memory_alloc(0, &req(8192, 1)).unwrap();
    let s = drv.pool_stats(0, false, 1).unwrap();
    assert_eq!((s.capacity, s.free, s.allocations), (cap, cap - 8192, 1));
    assert_eq!(drv.pool_stats(0, false, 0).unwrap().allocations, 0);
}

#[test]
fn concurrent_allocations_from_two_threads() {
    let drv = open(vec![FakeDevice::trn2()]);
    let handles: Vec<u64> = std::thread::scope(|s| {
        let t: Vec<_> = (0..2u32)
            .map(|i| {
                let drv = &drv;
                s.spawn(move || {
                    (0..50)
                        .map(|_| drv.memory_alloc(0, &req(4096, i)).unwrap())
                        .collect::<Vec<_>>()
                })
            })
            .collect();
        t.into_iter().flat_map(|t| t.join().unwrap()).collect()
    });
    let mut uniq = handles.clone();
    uniq.sort_unstable();
    uniq.dedup();
    assert_eq!(uniq.len(), 100);
    for h in handles {
        drv.memory_free(0, h).unwrap();
    }
    assert_eq!(drv.sys().live_allocations(), 0);
}

/// Runs against real hardware only when `/dev/neuron0` exists.
#[test]
fn real_device_when_present() {
    if !Path::new("/dev/neuron0").exists() {
        let e = NeuronDriver::open()
            .err()
            .expect("no device node, so open fails");
        assert!(matches!(e, Error::NoDevice { .. }), "{e:?}");
        assert!(e.to_string().contains("/dev/neuron0") && e.to_string().contains(crate::SIM_HINT));
        eprintln!("real_device_when_present: skipped (no /dev/neuron0)");
        return;
    }
    let drv = NeuronDriver::open().expect("open /dev/neuron*");
    assert!(drv.device_count() >= 1);
    let info = drv.device_info(0).unwrap();
    eprintln!("real device 0: {info:?}");
    let h = drv.memory_alloc(0, &req(1 << 20, 0)).unwrap();
    assert_ne!(drv.memory_get_pa(0, h).unwrap(), 0);
    let data: Vec<u8> = (0..65536u32).map(|i| (i * 13) as u8).collect();
    drv.copy_in(0, h, 4096, &data).unwrap();
    let mut back = vec![0u8; data.len()];
    drv.copy_out(0, h, 4096, &mut back).unwrap();
    assert_eq!(back, data);
    let s = drv.pool_stats(0, false, 0).unwrap();
    assert!(s.allocations >= 1 && s.free < s.capacity);
    drv.memory_free(0, h).unwrap();
}

/// A trn2 driver that answers with what a test chooses: DUMP_MEM_CHUNKS claims `count`
/// chunks of `sizes`, MEM_ALLOC_V2MT64 succeeds for any size.
struct Hostile {
    count: u32,
    sizes: Vec<u64>,
    handles: std::sync::atomic::AtomicU64,
}

fn hostile(count: u32, sizes: Vec<u64>) -> NeuronDriver<Hostile> {
    NeuronDriver::open_with(Hostile {
        count,
        sizes,
        handles: std::sync::atomic::AtomicU64::new(0x40),
    })
    .unwrap()
}

impl Sys for Hostile {
    fn open(&self, p: &Path) -> Result<RawFd, Errno> {
        if p == Path::new("/dev/neuron0") {
            Ok(7)
        } else {
            Err(Errno::ENOENT)
        }
    }
    unsafe fn ioctl(&self, _fd: RawFd, cmd: u64, arg: *mut u8) -> Result<i32, Errno> {
        use crate::ioctl::abi::*;
        use zerocopy::IntoBytes;
        // SAFETY: the caller passes the struct `cmd` takes (Sys contract); the dump array
        // is written only when it has room for every entry, as `num_entries_in` says.
        unsafe {
            match cmd {
                NEURON_IOCTL_DEVICE_BASIC_INFO => {
                    let v = DeviceBasicInfo {
                        architecture: 3,
                        revision: 0,
                    };
                    std::ptr::copy_nonoverlapping(v.as_bytes().as_ptr(), arg, 8);
                    Ok(0)
                }
                NEURON_IOCTL_DUMP_MEM_CHUNKS => {
                    let mut h: DumpMemChunks = std::ptr::read_unaligned(arg.cast());
                    h.num_entries_out = self.count;
                    if h.num_entries_in as usize >= self.sizes.len() && h.data != 0 {
                        for (i, s) in self.sizes.iter().enumerate() {
                            let e = MemChunkInfo::new(i as u64 * 4096, *s, 9);
                            std::ptr::write_unaligned((h.data as *mut MemChunkInfo).add(i), e);
                        }
                    }
                    std::ptr::write_unaligned(arg.cast(), h);
                    Ok(0)
                }
                NEURON_IOCTL_MEM_ALLOC_V2MT64 => {
                    let a: MemAllocV2Mt64 = std::ptr::read_unaligned(arg.cast());
                    let h = self.handles.fetch_add(0x40, Ordering::Relaxed);
                    std::ptr::write_unaligned(a.v2mt.mem_handle as *mut u64, h);
                    Ok(0)
                }
                _ => Err(Errno::ENOTTY),
            }
        }
    }
    fn close(&self, _fd: RawFd) -> Result<(), Errno> {
        Ok(())
    }
}

#[test]
fn hostile_driver_replies_are_errors_or_clamped_not_panics() {
    // Chunk sizes whose sum overflows: the channel reads as full.
    let half = u64::MAX / 2 + 1;
    let s = hostile(2, vec![half, half])
        .pool_stats(0, false, 0)
        .unwrap();
    assert_eq!((s.free, s.largest_free, s.allocations), (0, 0, 2));
    // A chunk count no channel can hold: refused, nothing reserved for it.
    assert_eq!(
        hostile(u32::MAX, vec![]).pool_stats(0, false, 0),
        Err(drv(Errno::EOVERFLOW))
    );
    // A driver that "succeeds" at host allocations no page count can hold, twice: this
    // process's own ledger of them saturates instead of overflowing.
    let d = hostile(0, vec![]);
    let mut r = req(u64::MAX, 0);
    r.host = true;
    let a = d.memory_alloc(0, &r).unwrap();
    let b = d.memory_alloc(0, &r).unwrap();
    assert_ne!(a, b);
    let s = d.pool_stats(0, true, 0).unwrap();
    assert_eq!((s.free, s.allocations), (0, 2));
}
