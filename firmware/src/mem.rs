//! The C memory primitives the compiler emits calls to (`memcpy`, `memmove`, `memset`,
//! `memcmp`, `bcmp`). A hosted program gets them from libc; this image links `-nostdlib`, and
//! compiler_builtins' own copies are behind its `mem` feature, which stable Rust does not turn on
//! for host targets, so the image defines them.
//!
//! They must not be written as the loops LLVM recognises as these very functions, or the
//! optimiser would turn `memcpy`'s body into a call to `memcpy`. The copies and fills are
//! therefore `rep movsb` / `rep stosb` (fast on every x86_64 since Ivy Bridge's ERMSB), and the
//! comparisons read through `read_volatile`, which the optimiser may not merge into a call.
//! The SysV ABI guarantees the direction flag is clear on function entry.

use core::arch::asm;
use core::ptr::read_volatile;

/// C `memcpy`.
///
/// # Safety
/// `src` readable and `dest` writable for `n` bytes; the ranges do not overlap.
#[no_mangle]
pub unsafe extern "C" fn memcpy(dest: *mut u8, src: *const u8, n: usize) -> *mut u8 {
    // SAFETY: caller contract; `rep movsb` copies exactly rcx = n bytes forward from rsi to rdi
    // (DF is clear per the ABI) and touches no other memory.
    unsafe {
        asm!(
            "rep movsb",
            inout("rcx") n => _,
            inout("rdi") dest => _,
            inout("rsi") src => _,
            options(nostack, preserves_flags),
        );
    }
    dest
}

/// C `memmove`: like `memcpy`, but the ranges may overlap.
///
/// # Safety
/// `src` readable and `dest` writable for `n` bytes.
#[no_mangle]
pub unsafe extern "C" fn memmove(dest: *mut u8, src: *const u8, n: usize) -> *mut u8 {
    if (dest as usize).wrapping_sub(src as usize) >= n {
        // dest is below src, or past its end: a forward copy never reads a byte it wrote.
        // SAFETY: caller contract; forward copy is correct for this overlap (see above).
        unsafe { memcpy(dest, src, n) };
    } else if n > 0 {
        // dest overlaps the tail of src: copy backwards from the last byte.
        // SAFETY: caller contract; with DF set `rep movsb` copies rcx bytes from rsi down to
        // rsi-n+1 into rdi down to rdi-n+1, i.e. exactly the two ranges; DF is cleared again
        // before returning, as the ABI requires.
        unsafe {
            asm!(
                "std",
                "rep movsb",
                "cld",
                inout("rcx") n => _,
                inout("rdi") dest.add(n - 1) => _,
                inout("rsi") src.add(n - 1) => _,
                options(nostack),
            );
        }
    }
    dest
}

/// C `memset`.
///
/// # Safety
/// `dest` writable for `n` bytes.
#[no_mangle]
pub unsafe extern "C" fn memset(dest: *mut u8, c: i32, n: usize) -> *mut u8 {
    // SAFETY: caller contract; `rep stosb` stores al into exactly rcx = n bytes from rdi.
    unsafe {
        asm!(
            "rep stosb",
            inout("rcx") n => _,
            inout("rdi") dest => _,
            in("al") c as u8,
            options(nostack, preserves_flags),
        );
    }
    dest
}

/// C `memcmp`: the sign of the first differing byte pair (as unsigned), or 0.
///
/// # Safety
/// `a` and `b` readable for `n` bytes.
#[no_mangle]
pub unsafe extern "C" fn memcmp(a: *const u8, b: *const u8, n: usize) -> i32 {
    for i in 0..n {
        // SAFETY: caller contract: `i < n`, both in bounds.
        let (x, y) = unsafe { (read_volatile(a.add(i)), read_volatile(b.add(i))) };
        if x != y {
            return x as i32 - y as i32;
        }
    }
    0
}

/// C `bcmp`: zero when equal (LLVM emits it for `==` on byte slices).
///
/// # Safety
/// `a` and `b` readable for `n` bytes.
#[no_mangle]
pub unsafe extern "C" fn bcmp(a: *const u8, b: *const u8, n: usize) -> i32 {
    // SAFETY: same contract.
    unsafe { memcmp(a, b, n) }
}
