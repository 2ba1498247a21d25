//! libnrt 2.31 exports that no SDK header declares (profiling sessions, two inspect options):
//! entry points that exist and refuse, so a program linked against AWS's library loads against
//! this one, also with `LD_BIND_NOW=1`. They stay undeclared here too; the signatures are those
//! of the 2.31 binary. The rest of libnrt's table lives with the header that declares it
//! (`profile`, `sys_trace`, `debug_stream`, `async_schedule`, `async_sendrecv`, `nec`,
//! `unsupported`); the whole table is `ffi/libnrt-2.31-exports.txt`, checked by
//! `tests/tests/dist.rs`.

use std::ffi::c_char;

use crate::profile::nrt_inspect_config_t;

stubs!("profiling" {
    fn nrt_profile_session_start(vnc: i32);
    fn nrt_profile_session_stop(vnc: i32, session_id: *mut u64);
    fn nrt_profile_session_serialize(session_id: u64, filename: *const c_char);
    fn nrt_profile_session_drop(session_id: u64);
    fn nrt_profile_session_drop_all(vnc: i32);
});

stubs!("inspect" {
    fn nrt_inspect_get_instance_output_dir(output_dir: *const c_char, instance_dir_buf: *mut c_char, buf_size: usize);
    fn nrt_inspect_config_set_inspect_device_profile_mode(options: *mut nrt_inspect_config_t, device_profile_mode: u32);
});
