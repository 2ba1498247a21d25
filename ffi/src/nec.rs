//! The `nec_*` functions of `nrt/nec.h`: the bridge between libnrt and the collectives library
//! (device and routing queries, semaphore increments and dynamic message sizes for the network
//! proxy). This library has no collectives: every call exists, so a program built against the
//! SDK links and loads, and refuses with one log line (`int` ones return -1, `bool` ones
//! false, `size_t` ones 0). `nrt/nec.h` itself is written by hand (its structs are the
//! collectives library's, which Rust never sees); `tests/headers.rs` checks these signatures
//! against it.

use std::ffi::{c_char, c_int};

/// `enc_host_mem_t` of `nrt/nec.h`: a host memory region of the network proxy (only ever
/// passed by pointer here).
#[repr(C)]
pub struct enc_host_mem_t {
    _opaque: [u8; 0],
}

/// `nec_version_info_t` of `nrt/nec.h` (only ever passed by pointer here).
#[repr(C)]
pub struct nec_version_info_t {
    _opaque: [u8; 0],
}

/// `nec_pod_type_t` of `nrt/nec.h` (a C enum).
pub type nec_pod_type_t = u32;

/// The pointee of a semaphore increment register, which C spells `volatile uint32_t`.
pub type volatile_u32 = u32;

stubs!("the collectives bridge" {
    fn nec_inc_semaphore(sem_inc_addr: *mut volatile_u32, val: u32) -> void;
    fn nec_get_dynamic_send_size_bytes(dyn_input: *mut enc_host_mem_t, data_type_sz: usize, dst_rank: c_int, rank_n: c_int) -> usize = 0;
    fn nec_get_dynamic_send_offset_bytes(dyn_input: *mut enc_host_mem_t, data_type_sz: usize, dst_rank: c_int, rank_n: c_int) -> usize = 0;
    fn nec_get_dynamic_recv_offset_bytes(dyn_input: *mut enc_host_mem_t, data_type_sz: usize, src_rank: c_int, rank_n: c_int) -> usize = 0;
    fn nec_set_recv_size_bytes(dyn_input: *mut enc_host_mem_t, recv_size_bytes: usize, data_type_sz: usize, src_rank: c_int, rank_n: c_int) -> void;
    fn nec_get_device_count(available_devices_array: *mut c_int, array_size: u32) -> c_int = -1;
    fn nec_get_device_pci_bdf(neuron_dev: c_int, domain: *mut u32, bus_num: *mut u32, pci_slot: *mut u8, dev_func: *mut u8) -> c_int = -1;
    fn nec_get_virtual_core_size(virtual_core_size: *mut u32);
    fn nec_get_version_info(version_info: *mut nec_version_info_t);
    fn nec_build_port_and_rid_map(local_nec_dev_id: c_int, mla_indexes: *mut c_int, host_device_ids: *mut c_int, count: c_int);
    fn nec_is_mla_available(local_nec_dev_id: c_int, mla_idx: c_int) -> bool = false;
    fn nec_mla_idx_to_rid(local_nec_dev_id: c_int, mla_idx: c_int) -> c_int = -1;
    fn nec_rid_to_mla_idx(local_nec_dev_id: c_int, rid: c_int) -> c_int = -1;
    fn nec_get_peer_mla_idx(local_nec_dev_id: c_int, mla_idx: c_int, port: c_int) -> c_int = -1;
    fn nec_get_p2p_pod_peer_node(nec_dev_id: u32, node: c_int, port_distance: u32, peer_node: *mut c_int) -> c_int = -1;
    fn nec_pod_node_can_access_peer_node(pod_type: nec_pod_type_t, local_rid: u32, local_node_id: u32, remote_rid: u32, remote_node_id: u32, can_access_peer: *mut c_int);
    fn nec_ndl_printk(str: *mut c_char, size: u32, action: u32) -> void;
});
