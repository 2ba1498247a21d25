//! Host memory behind the simulated device (docs/ARCHITECTURE.md principle 7): a reservation of
//! address space whose pages are committed only when first touched, so a trn2's 96 GiB of HBM
//! plus its host pool fits a machine with a fraction of that in RAM.
//!
//! `mmap(PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE)`: anonymous pages
//! read as zero (the simulator's "zero is empty"), `MAP_NORESERVE` keeps the mapping out of the
//! kernel's commit accounting, and nothing is resident until written.
//!
//! The mapping is `MADV_DONTDUMP`: simulated device memory stays out of core dumps (the
//! kernel's and `gcore`'s), as a real device's HBM does, so a dump of a process on a simulated
//! trn2 holds the runtime's host state, not up to 104 GiB of simulated HBM.

use core::ptr::NonNull;

use nix::errno::Errno;

use crate::error::{Error, Result};

/// `len` bytes of lazily committed, zero-filled, read-write host memory, unmapped on drop.
///
/// The reservation only owns the mapping: it hands out a raw pointer, and whoever writes
/// through it (the simulated device) is responsible for not racing on the same bytes.
#[derive(Debug)]
pub struct HostReservation {
    ptr: NonNull<u8>,
    len: usize,
}

// SAFETY: the mapping is plain process memory, valid from any thread until drop; the type
// itself gives no access to the bytes, so sharing or sending it cannot race.
unsafe impl Send for HostReservation {}
// SAFETY: as for `Send`: `&HostReservation` exposes only the address and the length.
unsafe impl Sync for HostReservation {}

impl HostReservation {
    /// Reserves `len` bytes (rounded up to the page size by the kernel). `len == 0` or one the
    /// address space cannot hold is [`Error::Reserve`].
    pub fn reserve(len: u64) -> Result<Self> {
        let err = |source| Error::Reserve { len, source };
        let n = usize::try_from(len).map_err(|_| err(Errno::ENOMEM))?;
        if n == 0 {
            return Err(err(Errno::EINVAL));
        }
        // SAFETY: a fresh anonymous mapping at an address of the kernel's choosing: it cannot
        // alias any existing Rust object, and no fd is involved.
        let p = unsafe {
            libc::mmap(
                core::ptr::null_mut(),
                n,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE,
                -1,
                0,
            )
        };
        if p == libc::MAP_FAILED {
            return Err(err(Errno::last()));
        }
        let ptr = NonNull::new(p.cast::<u8>()).ok_or_else(|| err(Errno::ENOMEM))?;
        // SAFETY: advice on exactly the mapping just made; it changes what a core dump
        // includes, not the memory's contents or validity.
        if unsafe { libc::madvise(p, n, libc::MADV_DONTDUMP) } != 0 {
            // Only the dump's size depends on it: a kernel that refuses it still runs the
            // simulator.
            log::warn!(
                "MADV_DONTDUMP on the {len} B simulated device memory failed ({}): core dumps will include it",
                Errno::last()
            );
        }
        log::debug!("reserved {len} B of lazily committed host memory at {ptr:p}");
        Ok(HostReservation { ptr, len: n })
    }

    /// The first byte.
    pub fn as_ptr(&self) -> *mut u8 {
        self.ptr.as_ptr()
    }

    /// Bytes reserved.
    pub fn len(&self) -> u64 {
        self.len as u64
    }

    /// Always false: empty reservations are refused.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
}

impl Drop for HostReservation {
    fn drop(&mut self) {
        // SAFETY: `ptr`/`len` are exactly the mapping made in `reserve`, unmapped only here;
        // users were told the pointer lives only as long as the reservation.
        let r = unsafe { libc::munmap(self.ptr.as_ptr().cast(), self.len) };
        if r != 0 {
            log::warn!(
                "munmap of {} B host reservation failed: {}",
                self.len,
                Errno::last()
            );
        }
    }
}

/// Pages of `r` that are resident in RAM (`mincore(2)`), for tests and diagnostics.
pub fn resident_pages_of(r: &HostReservation) -> Result<u64> {
    const WINDOW: usize = 1 << 30; // scan 1 GiB at a time: 256 Ki status bytes
                                   // SAFETY: sysconf has no memory effects.
    let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) }.max(4096) as usize;
    let mut vec = vec![0u8; WINDOW / page];
    let mut total = 0u64;
    let mut off = 0usize;
    while off < r.len {
        let n = (r.len - off).min(WINDOW);
        // SAFETY: `[ptr + off, + n)` lies inside the live mapping, `off` is page aligned, and
        // `vec` has room for one status byte per page of it.
        let rc = unsafe { libc::mincore(r.ptr.as_ptr().add(off).cast(), n, vec.as_mut_ptr()) };
        if rc != 0 {
            return Err(Error::Reserve {
                len: r.len as u64,
                source: Errno::last(),
            });
        }
        total += vec[..n.div_ceil(page)]
            .iter()
            .filter(|&&b| b & 1 != 0)
            .count() as u64;
        off += n;
    }
    Ok(total)
}

/// Resident pages of this process (`/proc/self/statm`, field 2), for tests and diagnostics.
pub fn resident_pages() -> Option<u64> {
    let s = std::fs::read_to_string("/proc/self/statm").ok()?;
    s.split_whitespace().nth(1)?.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_100_gib_reservation_costs_only_the_pages_touched() {
        const GIB: u64 = 1 << 30;
        let r = HostReservation::reserve(100 * GIB).expect("100 GiB of address space");
        assert_eq!(r.len(), 100 * GIB);
        assert!(!r.is_empty());
        let offsets = [0u64, 50 * GIB + 12345, 100 * GIB - 8];
        for (i, &o) in offsets.iter().enumerate() {
            // SAFETY: `o + 8 <= len`, inside the live mapping; nothing else touches it.
            unsafe {
                assert_eq!(
                    r.as_ptr().add(o as usize).read(),
                    0,
                    "untouched pages read zero"
                );
                r.as_ptr()
                    .add(o as usize)
                    .cast::<[u8; 8]>()
                    .write_unaligned([i as u8 + 1; 8]);
            }
        }
        for (i, &o) in offsets.iter().enumerate() {
            // SAFETY: as above.
            let v = unsafe {
                r.as_ptr()
                    .add(o as usize)
                    .cast::<[u8; 8]>()
                    .read_unaligned()
            };
            assert_eq!(v, [i as u8 + 1; 8]);
        }
        // Measured on the reservation itself (mincore), so other tests running in parallel in
        // this process cannot disturb the figure: exactly the three touched pages are resident.
        assert_eq!(resident_pages_of(&r).expect("mincore"), 3);
        drop(r);
    }

    /// Whether the mapping holding `addr` is marked "dd" (do not dump) in /proc/self/smaps.
    fn dont_dump(addr: usize) -> bool {
        let smaps = std::fs::read_to_string("/proc/self/smaps").expect("/proc/self/smaps");
        let mut inside = false;
        for l in smaps.lines() {
            if let Some((a, rest)) = l.split_once('-') {
                let b = rest.split(' ').next().unwrap_or("");
                if let (Ok(a), Ok(b)) = (usize::from_str_radix(a, 16), usize::from_str_radix(b, 16))
                {
                    inside = (a..b).contains(&addr);
                    continue;
                }
            }
            if inside && l.starts_with("VmFlags:") {
                return l.split_whitespace().any(|f| f == "dd");
            }
        }
        panic!("no mapping holds {addr:#x}");
    }

    /// The kernel marks the mapping "dd" (do not dump): core dumps and `gcore` skip it.
    #[test]
    fn the_reservation_is_left_out_of_core_dumps() {
        let r = HostReservation::reserve(1 << 30).expect("1 GiB of address space");
        assert!(dont_dump(r.as_ptr() as usize));
        assert!(dont_dump(r.as_ptr() as usize + (1 << 30) - 1));
    }

    /// The simulated driver's state (a `ZeroedBox` made undumped) is out of core dumps; an
    /// ordinary one stays in.
    #[test]
    fn undumped_boxes_leave_the_dumps() {
        #[repr(C)]
        struct Big([u8; 1 << 20]);
        // SAFETY: bytes only.
        unsafe impl nrt_core::abi::meta::ZeroValid for Big {}
        let out = crate::zeroed::ZeroedBox::<Big>::new_undumped().unwrap();
        let kept = crate::zeroed::ZeroedBox::<Big>::new().unwrap();
        assert!(dont_dump(&*out as *const Big as usize));
        assert!(!dont_dump(&*kept as *const Big as usize));
    }

    #[test]
    fn empty_and_impossible_reservations_are_errors() {
        let e = HostReservation::reserve(0).unwrap_err();
        assert_eq!(e.errno(), Some(Errno::EINVAL));
        let e = HostReservation::reserve(1 << 62).unwrap_err();
        assert!(matches!(e, Error::Reserve { .. }), "{e:?}");
        assert!(e.to_string().contains("reserve"));
    }
}
