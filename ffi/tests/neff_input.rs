//! What `nrt_load` is handed that is not a loadable NEFF (the bytes are the C caller's): a
//! buffer shorter than a header, 3 GiB of zeros, random bytes, a NEFF cut inside its weight, a
//! NEFF whose digest is wrong under `NRT_DMEM_VERIFY_NEFF=1`. Each is refused with the first
//! gate's (or the archive's) status and message and leaves the device as it was; the refusals
//! cost the process next to nothing: nothing past what the header declares is read.
//! The runtime is process-global: one test.

use std::ffi::{c_void, CStr};
use std::ptr::null_mut;

use nrt::*;
use nrt_neff::pack::{self, PackAlloc, PackModel, PackTensor};

const OK: NRT_STATUS = 0;
const INVALID: NRT_STATUS = 2;
const UNSUPPORTED_NEFF_VERSION: NRT_STATUS = 10;

fn used() -> usize {
    let mut s = nrt_vnc_memory_stats_t {
        bytes_used: 0,
        bytes_limit: 0,
    };
    // SAFETY: `s` is valid for a write of its size.
    let r = unsafe { nrt_get_vnc_memory_stats(0, &mut s, std::mem::size_of_val(&s), null_mut()) };
    assert_eq!(r, OK);
    s.bytes_used
}

/// `nrt_load` of `bytes` onto core 0: its status and the last error message.
fn load(bytes: &[u8]) -> (NRT_STATUS, String) {
    let mut m = null_mut();
    // SAFETY: `bytes` is valid for its length; `m` is a valid out-pointer.
    let s = unsafe { nrt_load(bytes.as_ptr() as *const c_void, bytes.len(), 0, -1, &mut m) };
    if s == OK {
        // SAFETY: a model this runtime handed out.
        assert_eq!(unsafe { nrt_unload(m) }, OK);
    }
    // SAFETY: the message is a NUL-terminated string owned by the library.
    let msg = unsafe { CStr::from_ptr(nrtx_get_last_error_message()) };
    (s, msg.to_string_lossy().into_owned())
}

/// A NEFF with one weight of `n` bytes of incompressible content.
fn weighted(n: usize) -> Vec<u8> {
    let m = PackModel {
        name: "weighted".into(),
        subgraphs: 1,
        allocations: vec![PackAlloc {
            usage: nrt_core::abi::dma_mem_usage_type_t::DMA_MEM_USAGE_TYPE_WEIGHT,
            host: false,
            size: n as u64,
            align: 4096,
            hint: "w".into(),
        }],
        outputs: vec![PackTensor {
            name: "y".into(),
            dtype: nrt_neff::Dtype::Float32,
            shape: vec![4],
        }],
        ..PackModel::default()
    };
    let mut w = pack::NeffWriter::new(pack::header_for("weighted"));
    w.members = pack::pack_members(&m).unwrap();
    let mut x = 0x9e37_79b9_7f4a_7c15u64;
    for (name, b) in w.members.iter_mut() {
        if name == "sg00/w.bin" {
            *b = Some(
                (0..n)
                    .map(|_| {
                        x ^= x << 13;
                        x ^= x >> 7;
                        x ^= x << 17;
                        x as u8
                    })
                    .collect(),
            );
        }
    }
    w.finish().unwrap()
}

fn peak_rss_kib() -> u64 {
    // SAFETY: all-zero is a valid rusage; `ru` is valid for a write.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: as above.
    assert_eq!(unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut ru) }, 0);
    u64::try_from(ru.ru_maxrss).unwrap()
}

#[test]
fn what_is_not_a_loadable_neff_is_refused_by_its_first_gate_in_bounded_memory() {
    std::env::set_var("NRT_DMEM_DEVICE", "sim:trn2");
    std::env::set_var("NEURON_RT_LOG_LEVEL", "OFF");
    // SAFETY: NULL version strings are allowed.
    assert_eq!(unsafe { nrt_init(1, null_mut(), null_mut()) }, OK);
    let before = used();
    let base = peak_rss_kib();

    // 3 GiB of zeros, mapped but never touched: the header's all-zero fields pass gates 2-6
    // and the packager gate refuses it, having read one page.
    let len = 3usize << 30;
    // SAFETY: an anonymous private mapping; checked below.
    let p = unsafe {
        libc::mmap(
            null_mut(),
            len,
            libc::PROT_READ,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE,
            -1,
            0,
        )
    };
    assert_ne!(p, libc::MAP_FAILED);
    // SAFETY: the mapping is `len` readable bytes until the munmap below.
    let zeros = unsafe { std::slice::from_raw_parts(p as *const u8, len) };
    let (s, msg) = load(zeros);
    assert_eq!(s, UNSUPPORTED_NEFF_VERSION, "{msg}");
    assert!(msg.contains("Unsupported NEFF packager: 0"), "{msg}");
    // SAFETY: the mapping made above, no longer borrowed.
    assert_eq!(unsafe { libc::munmap(p, len) }, 0);

    // Shorter than a header.
    let (s, msg) = load(&[0u8; 1023]);
    assert_eq!(s, INVALID);
    assert!(
        msg.contains("Invalid number of NEFF bytes received 3ff"),
        "{msg}"
    );

    // 8 MiB from /dev/urandom: refused (by whichever gate its random header fails first).
    let mut random = vec![0u8; 8 << 20];
    std::io::Read::read_exact(
        &mut std::fs::File::open("/dev/urandom").unwrap(),
        &mut random,
    )
    .unwrap();
    random[0] = 0; // binary, not a manifest
    let (s, msg) = load(&random);
    assert!(s == INVALID || s == UNSUPPORTED_NEFF_VERSION, "{s} {msg}");
    drop(random);
    // What the refusals cost the process beyond the runtime itself: the test's own 8 MiB
    // buffer and little else (3 GiB read whole would show here).
    let kib = peak_rss_kib() - base;
    assert!(kib <= 16 << 10, "peak RSS grew by {kib} KiB");
    assert_eq!(used(), before);

    // A NEFF cut inside its weight: the gzip stream ends there and the header says so (the
    // gates pass). The model was loaded when the weight began to stream: it is unloaded.
    let good = weighted(4 << 20);
    let payload = &good[1024..];
    let half = payload.len() / 2;
    let mut h = nrt_neff::Header::parse(good[..1024].try_into().unwrap());
    h.data_size = half as u64;
    let mut cut = h.to_bytes().to_vec();
    cut.extend_from_slice(&payload[..half]);
    let (s, msg) = load(&cut);
    assert_eq!(s, INVALID);
    assert!(
        msg.contains("corrupt or truncated gzip stream or tar archive")
            && msg.contains("in member sg00/w.bin"),
        "{msg}"
    );
    assert_eq!(used(), before, "the load was rolled back");

    // A wrong digest: loads as libnrt's plain nrt_load does, refused when verifying, after the
    // weight streamed: rolled back.
    let mut bad = good.clone();
    bad[0xAC] ^= 1;
    assert_eq!(load(&bad).0, OK);
    std::env::set_var("NRT_DMEM_VERIFY_NEFF", "1");
    let (s, msg) = load(&bad);
    assert_eq!((s, msg.contains("MD5 mismatch!")), (INVALID, true), "{msg}");
    assert_eq!(used(), before, "the load was rolled back");
    assert_eq!(load(&good).0, OK);
    std::env::remove_var("NRT_DMEM_VERIFY_NEFF");
    nrt_close();
}
