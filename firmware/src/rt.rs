//! The image's whole runtime: the `_start` entry, the three raw Linux syscalls it uses
//! (`write`, `getrusage`, `exit_group`), and the panic handler. No libc, no crt, no std.
//!
//! On real firmware these would be the reset vector, a UART or mailbox writer and a reset; the
//! host stands in for the bare-metal target this toolchain does not have (docs/STYLE.md, last
//! paragraph).

use core::arch::{asm, global_asm};
use core::fmt::Write;
use core::panic::PanicInfo;

use crate::out::Out;

/// `__NR_write` (x86_64).
const SYS_WRITE: usize = 1;
/// `__NR_getrusage` (x86_64).
const SYS_GETRUSAGE: usize = 98;
/// `__NR_exit_group` (x86_64).
const SYS_EXIT_GROUP: usize = 231;
/// `EINTR`: a write interrupted before it wrote anything (retried).
const EINTR: isize = 4;

// The ELF entry point. The kernel enters with `rsp` pointing at `argc`, followed by `argv[]`,
// NULL, `envp[]`, NULL, auxv; `rsp` is 16-byte aligned there, but we align it again rather than
// rely on it, because the SysV ABI requires `rsp % 16 == 0` at every `call`. `rbp = 0` marks the
// outermost frame for debuggers. `firmware_entry` never returns; `ud2` traps if it ever did.
global_asm!(
    ".globl _start",
    ".type _start,@function",
    "_start:",
    "xor ebp, ebp",
    "mov rdi, rsp",
    "and rsp, -16",
    "call {entry}",
    "ud2",
    ".size _start, . - _start",
    entry = sym firmware_entry,
);

/// The Rust side of `_start`: reads the command line off the initial stack and runs the image.
///
/// # Safety
/// Called once, by `_start`, with the process's initial stack pointer.
unsafe extern "C" fn firmware_entry(sp: *const usize) -> ! {
    // SAFETY: per the x86_64 Linux process-entry ABI, `sp` points at `argc` followed by `argc`
    // valid pointers to NUL-terminated strings; we read them only within those bounds.
    let args = unsafe { Args::from_entry_stack(sp) };
    let code = crate::run(&args);
    exit_group(code)
}

/// The process arguments, read from the entry stack (no allocation).
pub struct Args {
    argc: usize,
    argv: *const *const u8,
}

impl Args {
    /// # Safety
    /// `sp` is the process-entry stack pointer (see [`firmware_entry`]).
    unsafe fn from_entry_stack(sp: *const usize) -> Self {
        // SAFETY: caller contract: `*sp` is argc, argv starts one word above.
        unsafe {
            Args {
                argc: *sp,
                argv: sp.add(1) as *const *const u8,
            }
        }
    }

    /// Whether any argument after the program name equals `flag`.
    pub fn has(&self, flag: &str) -> bool {
        (1..self.argc).any(|i| {
            // SAFETY: `i < argc`, so `argv[i]` is a valid NUL-terminated string that lives for
            // the whole process (it is on the initial stack, which we never unwind past).
            let s = unsafe { cstr(*self.argv.add(i)) };
            s == flag.as_bytes()
        })
    }
}

/// The bytes of a NUL-terminated string.
///
/// # Safety
/// `p` points at a NUL-terminated string that outlives `'static` use here.
unsafe fn cstr(p: *const u8) -> &'static [u8] {
    let mut n = 0;
    // A plain loop here is what LLVM turns into a call to `strlen`, which this image lacks;
    // volatile reads keep it a loop.
    // SAFETY: caller contract: every byte up to and including the NUL is readable.
    unsafe {
        while core::ptr::read_volatile(p.add(n)) != 0 {
            n += 1;
        }
        core::slice::from_raw_parts(p, n)
    }
}

/// `write(2)` of the whole buffer (retrying short writes and `EINTR`); errors are dropped: there
/// is nowhere else to report them.
pub fn write_all(fd: i32, mut buf: &[u8]) {
    while !buf.is_empty() {
        let ret: isize;
        // SAFETY: `write(fd, buf.as_ptr(), buf.len())` only reads `buf`, which is valid for
        // `buf.len()` bytes; the kernel clobbers rcx and r11 (declared) and nothing else.
        unsafe {
            asm!(
                "syscall",
                inlateout("rax") SYS_WRITE as isize => ret,
                in("rdi") fd as isize,
                in("rsi") buf.as_ptr(),
                in("rdx") buf.len(),
                lateout("rcx") _,
                lateout("r11") _,
                options(nostack, readonly),
            );
        }
        if ret == -EINTR {
            continue;
        }
        if ret <= 0 {
            return;
        }
        buf = &buf[ret as usize..];
    }
}

/// Peak resident set size of this process in KiB (`getrusage(RUSAGE_SELF).ru_maxrss`), or 0.
pub fn peak_rss_kib() -> u64 {
    // struct rusage: two timevals (4 longs), then ru_maxrss, then 13 more longs.
    let mut ru = [0i64; 18];
    let ret: isize;
    // SAFETY: `getrusage(RUSAGE_SELF = 0, &mut ru)` writes exactly `sizeof(struct rusage)` =
    // 144 bytes, which `ru` has; the kernel clobbers rcx and r11 (declared).
    unsafe {
        asm!(
            "syscall",
            inlateout("rax") SYS_GETRUSAGE as isize => ret,
            in("rdi") 0usize,
            in("rsi") ru.as_mut_ptr(),
            lateout("rcx") _,
            lateout("r11") _,
            options(nostack),
        );
    }
    if ret == 0 {
        ru[4].max(0) as u64
    } else {
        0
    }
}

/// `exit_group(2)`: ends the process with `code`.
pub fn exit_group(code: i32) -> ! {
    // SAFETY: exit_group does not return and touches no memory of ours.
    unsafe {
        asm!(
            "syscall",
            in("rax") SYS_EXIT_GROUP,
            in("rdi") code as isize,
            options(noreturn, nostack),
        );
    }
}

/// A panic is a bug in the image or the core (the core returns errors for bad input): say
/// where on stderr and exit 101, like a std program would. There is no unwinding
/// (`panic = "abort"`); a std crate anywhere in the graph would bring a second `panic_impl`
/// and the image would not link.
#[panic_handler]
fn panic(info: &PanicInfo<'_>) -> ! {
    let mut w = Out::<512>::new(2);
    let _ = writeln!(w, "nrt-firmware: {info}");
    w.flush();
    exit_group(101)
}

impl Args {
    /// The value of `name=value`, if given (e.g. `--log-level=debug`).
    #[cfg(feature = "log")]
    pub fn value(&self, name: &str) -> Option<&'static str> {
        (1..self.argc).find_map(|i| {
            // SAFETY: as in `has`.
            let s = unsafe { cstr(*self.argv.add(i)) };
            let v = s.strip_prefix(name.as_bytes())?.strip_prefix(b"=")?;
            core::str::from_utf8(v).ok()
        })
    }
}
