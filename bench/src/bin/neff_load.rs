//! `neff_load FILE`: what a C application does with a NEFF file — read its bytes, `nrt_init`,
//! `nrt_load` onto core 0 — then prints `vm_hwm_kib=N`, the process's peak RSS, and unloads.
//! `nrt-bench --neff` runs it to measure `nrt_load`'s memory (docs/PERFORMANCE.md).

use std::ffi::{c_void, CStr};
use std::process::ExitCode;
use std::ptr::null_mut;

use nrt::*;

fn main() -> ExitCode {
    let Some(path) = std::env::args_os().nth(1) else {
        eprintln!("usage: neff_load FILE");
        return ExitCode::from(2);
    };
    let bytes = match std::fs::read(&path) {
        Ok(b) => b,
        Err(e) => {
            eprintln!("{}: {e}", path.to_string_lossy());
            return ExitCode::FAILURE;
        }
    };
    // SAFETY: NULL version strings are allowed.
    if unsafe { nrt_init(1, null_mut(), null_mut()) } != 0 {
        eprintln!("nrt_init failed");
        return ExitCode::FAILURE;
    }
    let mut m = null_mut();
    // SAFETY: `bytes` is valid for its length; `m` is a valid out-pointer.
    let s = unsafe { nrt_load(bytes.as_ptr() as *const c_void, bytes.len(), 0, -1, &mut m) };
    if s != 0 {
        // SAFETY: the library's NUL-terminated message.
        let msg = unsafe { CStr::from_ptr(nrtx_get_last_error_message()) };
        eprintln!("nrt_load: {s}: {}", msg.to_string_lossy());
        return ExitCode::FAILURE;
    }
    let hwm = std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("VmHWM:"))
                .map(|v| v.trim().trim_end_matches("kB").trim().to_string())
        })
        .unwrap_or_default();
    println!("vm_hwm_kib={hwm}");
    // SAFETY: the model loaded above.
    unsafe { nrt_unload(m) };
    nrt_close();
    ExitCode::SUCCESS
}
