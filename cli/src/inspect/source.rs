//! Where `inspect` reads a process's memory from: a live process (`/proc/PID/maps` and
//! `process_vm_readv`) or an ELF core file (its `PT_LOAD` segments and `NT_FILE` note).
//!
//! Both answer the same two questions: which files are mapped where (to find the library and
//! its symbol), and what bytes are at an address. Every read is checked against the memory
//! map first (an address outside it is refused without a system call), and a read either
//! returns every byte asked for or says why not: the walker never sees half a read.

use std::fs::File;
use std::io::{ErrorKind, Read};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

use nix::errno::Errno;
use nix::sys::uio::{process_vm_readv, RemoteIoVec};
use nix::unistd::Pid;
use object::elf;
use object::read::elf::{FileHeader, ProgramHeader};
use object::read::ReadCache;
use object::Endianness;

/// Why the input cannot be inspected at all (exit 2).
#[derive(Debug)]
pub struct InputError(pub String);

impl std::fmt::Display for InputError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

/// A file mapped into the process: `[start, end)` shows the file from byte `offset`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FileMap {
    /// First address.
    pub start: u64,
    /// One past the last address.
    pub end: u64,
    /// File offset of `start`.
    pub offset: u64,
    /// The file, as the process (or the core's `NT_FILE` note) names it.
    pub path: PathBuf,
    /// Where its bytes can be read: `path`, or for a live process's file that was deleted or
    /// replaced since it was mapped, `/proc/PID/map_files/…`.
    pub read_from: PathBuf,
}

/// Why a read of the inspected memory failed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ReadFail {
    /// No mapping (or no readable one) covers the address.
    Unmapped,
    /// Mapped in the process, but the core file does not hold these bytes.
    NotDumped,
    /// The system call or file read failed.
    Io(String),
}

impl std::fmt::Display for ReadFail {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ReadFail::Unmapped => f.write_str("not mapped"),
            ReadFail::NotDumped => f.write_str("not in the core file"),
            ReadFail::Io(e) => write!(f, "read failed: {e}"),
        }
    }
}

/// A read-only view of a process's memory.
pub trait Memory {
    /// Fills `buf` with the bytes at `addr`, all of them or none.
    fn read(&self, addr: u64, buf: &mut [u8]) -> Result<(), ReadFail>;
    /// How many bytes from `addr` on are readable without a gap (0 when `addr` is not).
    fn readable_from(&self, addr: u64) -> u64;
}

/// A [`Memory`] that remembers what it read (address, length, a hash of the bytes), so a
/// walk of a live process can tell afterwards whether anything it read changed meanwhile.
pub struct Recorder<'a> {
    mem: &'a dyn Memory,
    reads: std::cell::RefCell<Vec<(u64, usize, u64)>>,
}

fn digest(b: &[u8]) -> u64 {
    use std::hash::{Hash, Hasher};
    let mut h = std::collections::hash_map::DefaultHasher::new();
    b.hash(&mut h);
    h.finish()
}

impl<'a> Recorder<'a> {
    /// Records the reads made through it from `mem`.
    pub fn new(mem: &'a dyn Memory) -> Self {
        Recorder {
            mem,
            reads: Default::default(),
        }
    }

    /// True when every read made so far gives the same bytes again: nothing the walk read
    /// changed while it walked (short of a change and its exact undoing in between).
    pub fn unchanged(&self) -> bool {
        let reads = self.reads.borrow();
        let mut buf = Vec::new();
        reads.iter().all(|&(addr, len, h)| {
            buf.resize(len, 0);
            self.mem.read(addr, &mut buf).is_ok() && digest(&buf) == h
        })
    }
}

impl Memory for Recorder<'_> {
    fn read(&self, addr: u64, buf: &mut [u8]) -> Result<(), ReadFail> {
        self.mem.read(addr, buf)?;
        self.reads.borrow_mut().push((addr, buf.len(), digest(buf)));
        Ok(())
    }

    fn readable_from(&self, addr: u64) -> u64 {
        self.mem.readable_from(addr)
    }
}

/// One readable range of the inspected memory.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Region {
    start: u64,
    end: u64,
    /// Core: the file offset of `start`'s bytes; `None` for bytes the core does not hold.
    file_offset: Option<u64>,
}

/// Sorted, non-overlapping regions; answers which one holds an address.
#[derive(Debug, Default)]
struct RegionMap(Vec<Region>);

impl RegionMap {
    fn new(mut v: Vec<Region>) -> Self {
        v.retain(|r| r.end > r.start);
        v.sort_by_key(|r| r.start);
        RegionMap(v)
    }

    fn find(&self, addr: u64) -> Option<&Region> {
        let i = self.0.partition_point(|r| r.end <= addr);
        self.0.get(i).filter(|r| r.start <= addr)
    }

    /// The regions covering `[addr, addr + len)` in order, or why not all of it is.
    fn cover(&self, addr: u64, len: u64) -> Result<Vec<(Region, u64, u64)>, ReadFail> {
        let end = addr.checked_add(len).ok_or(ReadFail::Unmapped)?;
        let mut out = Vec::new();
        let mut at = addr;
        while at < end {
            let r = *self.find(at).ok_or(ReadFail::Unmapped)?;
            let upto = r.end.min(end);
            out.push((r, at, upto));
            at = upto;
        }
        Ok(out)
    }

    fn readable_from(&self, addr: u64, ok: impl Fn(&Region) -> bool) -> u64 {
        let mut at = addr;
        while let Some(r) = self.find(at).filter(|r| ok(r)) {
            at = r.end;
        }
        at - addr
    }
}

/// The permission a reader of another process's memory needs, for the error messages.
pub fn ptrace_hint() -> String {
    let scope = std::fs::read_to_string("/proc/sys/kernel/yama/ptrace_scope")
        .ok()
        .and_then(|s| s.trim().parse::<u32>().ok());
    let yama = match scope {
        Some(0) | None => String::new(),
        Some(1) => " (Yama ptrace_scope is 1: only a parent may trace its children unless it \
                    has CAP_SYS_PTRACE)"
            .to_string(),
        Some(n) => format!(" (Yama ptrace_scope is {n}: only CAP_SYS_PTRACE may)"),
    };
    format!(
        "reading another process's memory needs ptrace permission over it: run as the same \
         user (not across a setuid boundary), or as root / with CAP_SYS_PTRACE{yama}"
    )
}

/// A running process, read with `process_vm_readv` (or `/proc/PID/mem` where that call is not
/// available) without stopping it.
pub struct LiveProcess {
    pid: i32,
    regions: RegionMap,
    maps: Vec<FileMap>,
    /// `/proc/PID/mem`, opened on first need when `process_vm_readv` is not available.
    mem_file: std::cell::OnceCell<Option<File>>,
    use_mem_file: std::cell::Cell<bool>,
    /// The process's command name (`/proc/PID/comm`).
    pub command: String,
}

impl LiveProcess {
    /// Reads `/proc/PID/maps` and checks that the memory can be read.
    pub fn open(pid: i32) -> Result<Self, InputError> {
        if pid <= 0 {
            return Err(InputError(format!("--pid {pid}: not a process id")));
        }
        let base = PathBuf::from(format!("/proc/{pid}"));
        if !base.exists() {
            return Err(InputError(format!("no process {pid}")));
        }
        let text = std::fs::read_to_string(base.join("maps")).map_err(|e| {
            if e.kind() == ErrorKind::PermissionDenied {
                InputError(format!(
                    "permission denied reading /proc/{pid}/maps: {}",
                    ptrace_hint()
                ))
            } else {
                InputError(format!("cannot read /proc/{pid}/maps: {e}"))
            }
        })?;
        let (regions, mut maps) = parse_maps(&text);
        for m in &mut maps {
            if m.path.as_os_str().as_bytes().ends_with(b" (deleted)") {
                m.read_from = base.join(format!("map_files/{:x}-{:x}", m.start, m.end));
            }
        }
        if regions.is_empty() {
            // A zombie or kernel thread: nothing to read.
            return Err(InputError(format!(
                "process {pid} has no memory mapped (a kernel thread, or a process that is exiting)"
            )));
        }
        let command = std::fs::read_to_string(base.join("comm"))
            .map(|s| s.trim_end().to_string())
            .unwrap_or_default();
        let p = LiveProcess {
            pid,
            regions: RegionMap::new(regions),
            maps,
            mem_file: std::cell::OnceCell::new(),
            use_mem_file: std::cell::Cell::new(false),
            command,
        };
        // One probe read, so a permission problem is said once, clearly, up front.
        if let Some(r) = p.regions.0.first().copied() {
            let mut b = [0u8; 1];
            match p.read_raw(r.start, &mut b) {
                Err(Errno::EPERM) | Err(Errno::EACCES) => {
                    return Err(InputError(format!(
                        "permission denied reading the memory of process {pid}: {}",
                        ptrace_hint()
                    )))
                }
                Err(Errno::ESRCH) => return Err(InputError(format!("process {pid} exited"))),
                _ => {}
            }
        }
        Ok(p)
    }

    /// The files the process has mapped.
    pub fn file_maps(&self) -> &[FileMap] {
        &self.maps
    }

    fn read_raw(&self, addr: u64, buf: &mut [u8]) -> Result<(), Errno> {
        if !self.use_mem_file.get() {
            let remote = [RemoteIoVec {
                base: addr as usize,
                len: buf.len(),
            }];
            match process_vm_readv(
                Pid::from_raw(self.pid),
                &mut [std::io::IoSliceMut::new(buf)],
                &remote,
            ) {
                Ok(n) if n == buf.len() => return Ok(()),
                Ok(_) => return Err(Errno::EFAULT),
                // Filtered out (a seccomp policy) or not built into the kernel: /proc/PID/mem
                // answers the same question under the same permission.
                Err(Errno::ENOSYS) => self.use_mem_file.set(true),
                Err(e) => return Err(e),
            }
        }
        let f = self
            .mem_file
            .get_or_init(|| File::open(format!("/proc/{}/mem", self.pid)).ok());
        let f = f.as_ref().ok_or(Errno::EACCES)?;
        f.read_exact_at(buf, addr).map_err(|e| {
            e.raw_os_error()
                .map(Errno::from_raw)
                .unwrap_or(Errno::EFAULT)
        })
    }
}

impl Memory for LiveProcess {
    fn read(&self, addr: u64, buf: &mut [u8]) -> Result<(), ReadFail> {
        self.regions.cover(addr, buf.len() as u64)?;
        self.read_raw(addr, buf)
            .map_err(|e| ReadFail::Io(format!("{e} ({})", e.desc())))
    }

    fn readable_from(&self, addr: u64) -> u64 {
        self.regions.readable_from(addr, |_| true)
    }
}

/// `/proc/PID/maps` → the readable regions and the file mappings.
fn parse_maps(text: &str) -> (Vec<Region>, Vec<FileMap>) {
    let mut regions = Vec::new();
    let mut maps = Vec::new();
    for line in text.lines() {
        let mut f = line.splitn(6, ' ');
        let (Some(range), Some(perms), Some(off), Some(_dev), Some(inode)) =
            (f.next(), f.next(), f.next(), f.next(), f.next())
        else {
            continue;
        };
        let path = f.next().unwrap_or("").trim_start();
        let Some((a, b)) = range.split_once('-') else {
            continue;
        };
        let (Ok(start), Ok(end), Ok(offset)) = (
            u64::from_str_radix(a, 16),
            u64::from_str_radix(b, 16),
            u64::from_str_radix(off, 16),
        ) else {
            continue;
        };
        // [vsyscall] and friends cannot be read with process_vm_readv; nothing of libnrt's
        // lives there.
        if perms.starts_with('r') && !path.starts_with("[v") {
            regions.push(Region {
                start,
                end,
                file_offset: None,
            });
        }
        if inode != "0" && path.starts_with('/') {
            maps.push(FileMap {
                start,
                end,
                offset,
                path: PathBuf::from(path),
                read_from: PathBuf::from(path),
            });
        }
    }
    (regions, maps)
}

/// `e_ident` bytes: the class (32/64-bit) and the data encoding (endianness).
const EI_CLASS: usize = 4;
const EI_DATA: usize = 5;

/// Architectures whose cores `inspect` reads: LP64 little-endian, where libnrt's layouts are the
/// ones this project reproduces.
const MACHINES: &[(u16, &str)] = &[(elf::EM_X86_64, "x86-64"), (elf::EM_AARCH64, "AArch64")];

/// An ELF core file of a process (from `gcore` or the kernel).
pub struct CoreFile {
    file: File,
    regions: RegionMap,
    maps: Vec<FileMap>,
    /// `NT_PRPSINFO`: the process id and command name, when the core has them.
    pub pid: Option<i32>,
    /// The process's command name (`NT_PRPSINFO.pr_fname`).
    pub command: String,
    /// The machine (`x86-64`, `AArch64`).
    pub machine: &'static str,
}

impl CoreFile {
    /// Opens and checks a core file: ELF64, little-endian, `ET_CORE`, a supported machine,
    /// every segment inside the file.
    pub fn open(path: &Path) -> Result<Self, InputError> {
        let what = path.display();
        let mut file = File::open(path).map_err(|e| InputError(format!("{what}: {e}")))?;
        let len = file
            .metadata()
            .map_err(|e| InputError(format!("{what}: {e}")))?
            .len();
        let mut ident = [0u8; 20];
        let got =
            read_up_to(&mut file, &mut ident).map_err(|e| InputError(format!("{what}: {e}")))?;
        if got < 4 || ident[..4] != elf::ELFMAG {
            return Err(InputError(format!(
                "{what}: not an ELF file (no ELF magic)"
            )));
        }
        if got < 20 {
            return Err(InputError(format!(
                "{what}: truncated core file ({len} bytes: the ELF header is cut)"
            )));
        }
        if ident[EI_CLASS] != elf::ELFCLASS64 {
            return Err(InputError(format!(
                "{what}: a 32-bit ELF file; libnrt's layouts are those of a 64-bit process"
            )));
        }
        if ident[EI_DATA] != elf::ELFDATA2LSB {
            return Err(InputError(format!(
                "{what}: a big-endian ELF file; libnrt's layouts are those of a little-endian 64-bit process"
            )));
        }
        let e_type = u16::from_le_bytes([ident[16], ident[17]]);
        let e_machine = u16::from_le_bytes([ident[18], ident[19]]);
        if e_type != elf::ET_CORE {
            return Err(InputError(format!(
                "{what}: not a core file (ELF type {}); for a live process use --pid",
                match e_type {
                    elf::ET_EXEC => "EXEC, an executable",
                    elf::ET_DYN => "DYN, a shared library or PIE executable",
                    elf::ET_REL => "REL, an object file",
                    _ => "unknown",
                }
            )));
        }
        let machine = MACHINES
            .iter()
            .find(|(m, _)| *m == e_machine)
            .map(|(_, n)| *n)
            .ok_or_else(|| {
                InputError(format!(
                    "{what}: a core of another architecture (e_machine {e_machine}); inspect \
                     reads x86-64 and AArch64 cores, whose layouts are libnrt's"
                ))
            })?;
        let cache = ReadCache::new(
            file.try_clone()
                .map_err(|e| InputError(format!("{what}: {e}")))?,
        );
        let truncated = |detail: String| {
            InputError(format!(
                "{what}: truncated core file ({len} bytes): {detail}"
            ))
        };
        let hdr = elf::FileHeader64::<Endianness>::parse(&cache)
            .map_err(|_| truncated("the ELF header is cut".into()))?;
        let endian = hdr
            .endian()
            .map_err(|e| InputError(format!("{what}: {e}")))?;
        let phdrs = hdr
            .program_headers(endian, &cache)
            .map_err(|_| truncated("the program headers are cut".into()))?;
        if phdrs.is_empty() {
            return Err(InputError(format!("{what}: a core file with no segments")));
        }
        let mut regions = Vec::new();
        let mut maps = Vec::new();
        let (mut pid, mut command) = (None, String::new());
        for (i, ph) in phdrs.iter().enumerate() {
            let (off, filesz) = (ph.p_offset(endian), ph.p_filesz(endian));
            let end = off.checked_add(filesz);
            if end.is_none_or(|e| e > len) {
                return Err(truncated(format!(
                    "segment {i} needs bytes {off:#x}..{:#x}",
                    off.saturating_add(filesz)
                )));
            }
            match ph.p_type(endian) {
                elf::PT_LOAD => {
                    let (va, memsz) = (ph.p_vaddr(endian), ph.p_memsz(endian));
                    let held = filesz.min(memsz);
                    regions.push(Region {
                        start: va,
                        end: va.saturating_add(held),
                        file_offset: Some(off),
                    });
                    if memsz > held {
                        regions.push(Region {
                            start: va.saturating_add(held),
                            end: va.saturating_add(memsz),
                            file_offset: None,
                        });
                    }
                }
                elf::PT_NOTE => {
                    let notes = ph
                        .notes(endian, &cache)
                        .map_err(|e| InputError(format!("{what}: malformed notes: {e}")))?;
                    let Some(mut notes) = notes else { continue };
                    loop {
                        let note = match notes.next() {
                            Ok(Some(n)) => n,
                            Ok(None) => break,
                            Err(e) => {
                                return Err(InputError(format!("{what}: malformed notes: {e}")))
                            }
                        };
                        if note.name() != b"CORE" {
                            continue;
                        }
                        match note.n_type(endian) {
                            elf::NT_FILE => {
                                maps = parse_nt_file(note.desc()).map_err(|e| {
                                    InputError(format!("{what}: malformed NT_FILE note: {e}"))
                                })?
                            }
                            elf::NT_PRPSINFO => {
                                let d = note.desc();
                                if d.len() >= 56 {
                                    pid = Some(i32::from_le_bytes([d[24], d[25], d[26], d[27]]));
                                    command = c_text(&d[40..56]);
                                }
                            }
                            _ => {}
                        }
                    }
                }
                _ => {}
            }
        }
        Ok(CoreFile {
            file,
            regions: RegionMap::new(regions),
            maps,
            pid,
            command,
            machine,
        })
    }

    /// The files mapped in the process (the `NT_FILE` note; empty when the core has none).
    pub fn file_maps(&self) -> &[FileMap] {
        &self.maps
    }
}

impl Memory for CoreFile {
    fn read(&self, addr: u64, buf: &mut [u8]) -> Result<(), ReadFail> {
        let parts = self.regions.cover(addr, buf.len() as u64)?;
        let mut at = 0usize;
        for (r, from, to) in parts {
            let off = r.file_offset.ok_or(ReadFail::NotDumped)?;
            let n = (to - from) as usize;
            self.file
                .read_exact_at(&mut buf[at..at + n], off + (from - r.start))
                .map_err(|e| ReadFail::Io(e.to_string()))?;
            at += n;
        }
        Ok(())
    }

    fn readable_from(&self, addr: u64) -> u64 {
        self.regions
            .readable_from(addr, |r| r.file_offset.is_some())
    }
}

/// The `NT_FILE` note: `count, page_size, count × (start, end, page_offset)`, then `count`
/// NUL-terminated paths.
fn parse_nt_file(d: &[u8]) -> Result<Vec<FileMap>, String> {
    let word = |i: usize| -> Result<u64, String> {
        d.get(i * 8..i * 8 + 8)
            .map(|b| u64::from_le_bytes(b.try_into().unwrap_or([0; 8])))
            .ok_or_else(|| "cut short".to_string())
    };
    let count = word(0)?;
    let page = word(1)?;
    // Each entry takes 24 bytes of the note: a count past that is garbage, not an allocation.
    if count > d.len() as u64 / 24 {
        return Err(format!("{count} entries do not fit {} bytes", d.len()));
    }
    let count = count as usize;
    let mut names = d.get(16 + count * 24..).ok_or("cut short")?;
    let mut out = Vec::with_capacity(count);
    for i in 0..count {
        let (start, end, pgoff) = (word(2 + i * 3)?, word(3 + i * 3)?, word(4 + i * 3)?);
        let n = names
            .iter()
            .position(|&b| b == 0)
            .ok_or("fewer NUL-terminated paths than entries")?;
        let name = &names[..n];
        names = &names[n + 1..];
        let path = PathBuf::from(std::ffi::OsStr::from_bytes(name));
        out.push(FileMap {
            start,
            end,
            offset: pgoff.saturating_mul(page),
            read_from: path.clone(),
            path,
        });
    }
    Ok(out)
}

/// A fixed-size C string field as text (up to its NUL).
pub fn c_text(b: &[u8]) -> String {
    let n = b.iter().position(|&c| c == 0).unwrap_or(b.len());
    String::from_utf8_lossy(&b[..n]).into_owned()
}

fn read_up_to(f: &mut File, buf: &mut [u8]) -> std::io::Result<usize> {
    let mut n = 0;
    while n < buf.len() {
        match f.read(&mut buf[n..]) {
            Ok(0) => break,
            Ok(k) => n += k,
            Err(e) if e.kind() == ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(n)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn maps_lines_give_regions_and_files() {
        let text = "\
55d0c0000000-55d0c0001000 r--p 00000000 fd:01 1234 /usr/bin/prog
55d0c0001000-55d0c0002000 r-xp 00001000 fd:01 1234 /usr/bin/prog
55d0c1000000-55d0c1021000 rw-p 00000000 00:00 0 [heap]
7f0000000000-7f0000001000 ---p 00000000 00:00 0
7f0000100000-7f0000200000 rw-p 00000000 00:00 0
7ffff7ff0000-7ffff7ff1000 r--p 00002000 fd:01 99 /opt/x/lib/libnrt.so.1 (deleted)
ffffffffff600000-ffffffffff601000 --xp 00000000 00:00 0 [vsyscall]
";
        let (regions, maps) = parse_maps(text);
        assert_eq!(
            regions.len(),
            5,
            "the ---p and [vsyscall] ranges are not readable"
        );
        assert_eq!(maps.len(), 3);
        assert_eq!(maps[1].offset, 0x1000);
        assert_eq!(maps[2].path, Path::new("/opt/x/lib/libnrt.so.1 (deleted)"));
        let m = RegionMap::new(regions);
        assert!(m.find(0x55d0c0000fff).is_some());
        assert!(m.find(0x7f0000000000).is_none());
        // Two adjacent regions read as one run; a gap stops it.
        assert_eq!(m.readable_from(0x55d0c0000800, |_| true), 0x1800);
        assert!(m.cover(0x55d0c0000800, 0x1000).is_ok());
        assert_eq!(m.cover(0x55d0c1020000, 0x2000), Err(ReadFail::Unmapped));
        assert_eq!(m.cover(u64::MAX - 1, 8), Err(ReadFail::Unmapped));
    }

    #[test]
    fn nt_file_entries_and_garbage_counts() {
        let mut d = Vec::new();
        for w in [2u64, 4096, 0x1000, 0x3000, 0, 0x5000, 0x6000, 2] {
            d.extend_from_slice(&w.to_le_bytes());
        }
        d.extend_from_slice(b"/lib/a.so\0/lib/libnrt.so.1\0");
        let m = parse_nt_file(&d).unwrap();
        assert_eq!(m.len(), 2);
        assert_eq!(
            (m[1].start, m[1].end, m[1].offset),
            (0x5000, 0x6000, 0x2000)
        );
        assert_eq!(m[1].path, Path::new("/lib/libnrt.so.1"));
        d[..8].copy_from_slice(&u64::MAX.to_le_bytes());
        assert!(parse_nt_file(&d).is_err());
        assert!(parse_nt_file(&d[..12]).is_err());
        let mut short = d.clone();
        short[..8].copy_from_slice(&2u64.to_le_bytes());
        short.truncate(16 + 48 + 10);
        assert!(parse_nt_file(&short).is_err(), "one path for two entries");
    }
}
