//! The state table of docs/STATES.md, Rust layer: every public `Nrt` call in every lifecycle
//! state (uninit, init, closed) answers what the table says. The C layer checks the same table
//! in `ffi/tests/states.rs`.

mod common;
#[path = "common/states.rs"]
mod states;

use common::*;
use nrt_core::abi::*;
use nrt_core::dmem::AllocArgs;
use nrt_core::ledger::UsageSel;
use nrt_core::model::ModelSpec;
use nrt_core::sim::{Preset, SimConfig};
use nrt_core::tensor::Placement;
use nrt_core::LogicalCore;
use nrt_core::PhysicalCore;
use nrt_core::{DmemHandle, InitOptions, ModelHandle, Nrt, Result, SetHandle, TensorHandle};

/// Objects the calls work on, made by a live runtime (this one, or a donor for the uninit
/// state, whose handles the gate refuses before it looks at them).
struct Kit {
    t: TensorHandle,
    d: DmemHandle,
    al: nrt_core::AllocatorHandle,
    m: ModelHandle,
    s: SetHandle,
}

impl Kit {
    fn make(n: &Nrt<'_>) -> Kit {
        let al = n
            .dmem()
            .core_allocator(nrt_core::PhysicalCore::new(0, 0))
            .expect("allocator");
        Kit {
            t: n.tensors()
                .allocate(
                    Placement::Device,
                    LogicalCore::new(0).into(),
                    64,
                    Some("kit"),
                )
                .expect("tensor"),
            d: n.dmem()
                .alloc(al, &AllocArgs::device(4096, 0, TENSOR, "kit"), None)
                .expect("dmem"),
            al,
            m: n.models()
                .load(LogicalCore::new(0), &model_spec())
                .expect("model"),
            s: n.sets().create().expect("set"),
        }
    }
}

fn model_spec() -> ModelSpec<'static> {
    ModelSpec {
        name: "states",
        subgraphs: 1,
        ..Default::default()
    }
}

fn st<T>(r: Result<T>) -> String {
    match r {
        Ok(_) => "NRT_SUCCESS".into(),
        Err(e) => format!("{:?}", e.status()),
    }
}

/// A fresh tensor in the live runtime (consumed by the call), the kit's otherwise.
fn fresh_t(n: &Nrt<'_>, k: &Kit) -> TensorHandle {
    n.tensors()
        .allocate(Placement::Device, LogicalCore::new(0).into(), 64, None)
        .unwrap_or(k.t)
}

/// The answer of call `name` on `n` (None: the test has no call of that name).
fn answer(n: &Nrt<'_>, k: &Kit, name: &str) -> Option<String> {
    let v = || Some("value".to_string());
    let mut buf = [0u8; 8];
    Some(match name {
        "init" => st(n.init(&InitOptions::default())),
        "close" => st(n.close()),
        "check_state" => st(n.check_state()),
        "lifecycle" => return Some(n.lifecycle()).and(v()),
        "new" => return Some(Nrt::new(n.state(), n.driver())).and(v()),
        "driver" | "state" => return v(),
        "num_devices" => return Some(n.num_devices()).and(v()),
        "geom" => return Some(n.geom(0)).and(v()),
        "driver_bytes_in_use" => return Some(n.driver_pool_bytes_in_use().unwrap()).and(v()),
        "driver_pool_bytes_in_use" => st(n.driver_pool_bytes_in_use()),
        "runtime_bytes_in_use" => st(n.runtime_bytes_in_use()),
        "visible_vnc_count" => return Some(n.visible_logical_core_count()).and(v()),
        "total_vnc_count" => return Some(n.total_logical_core_count()).and(v()),
        "lnc_size" => return Some(n.logical_core_size()).and(v()),
        "virtual_core" => st(n.logical_core_entry(LogicalCore::new(0))),
        "vtpb_get_default_hbm_idx" => st(n.logical_core_hbm(LogicalCore::new(0))),
        "core_allocator" => st(n.dmem().core_allocator(nrt_core::PhysicalCore::new(0, 0))),
        "allocator_core" => st(n.dmem().allocator_core(k.al)),
        "tensor_allocate" => {
            st(n.tensors()
                .allocate(Placement::Device, LogicalCore::new(0).into(), 64, None))
        }
        "tensor_allocate_empty" => st(n.tensors().allocate_empty(None)),
        "tensor_attach_buffer" => {
            let e = n.tensors().allocate_empty(None).unwrap_or(k.t);
            let leaked: &'static mut [u8] = Box::leak(vec![0u8; 64].into_boxed_slice());
            // SAFETY: a leaked buffer outlives every tensor.
            st(unsafe { n.tensors().attach_buffer(e, leaked.as_mut_ptr(), 64) })
        }
        "tensor_allocate_slice" => st(n.tensors().allocate_slice(k.t, 0, 8, None)),
        "tensor_free" => st(n.tensors().free(fresh_t(n, k))),
        "tensor_get_size" => st(n.tensors().size(k.t)),
        "tensor_name" => st(n.tensors().name(k.t)),
        "tensor_write" => st(n.tensors().write(k.t, &buf, 0)),
        "tensor_read" => st(n.tensors().read(k.t, &mut buf, 0)),
        "tensor_memset" => st(n.tensors().memset(k.t, 0, 1, 8)),
        "tensor_copy" => st(n.tensors().copy(k.t, 0, fresh_t(n, k), 0, 8)),
        "tensor_get_va" => st(n.tensors().va(k.t)),
        "tensor_device_allocation_info" => st(n.tensors().device_allocation_info(k.t)),
        "tensor_output_completion" => st(n.tensors().output_completion(k.t)),
        "tensor_reset_output_completion" => st(n.tensors().reset_output_completion(k.t)),
        "tensor_pending" => st(n.tensors().pending(k.t)),
        "load_model" => st(n.models().load(LogicalCore::new(0), &model_spec())),
        "unload_model" => {
            let m = n
                .models()
                .load(LogicalCore::new(1), &model_spec())
                .unwrap_or(k.m);
            st(n.models().unload(m))
        }
        "exec_begin" => st(n.models().exec_begin(k.m)),
        "execute" => st(n.tensors().execute(k.m, k.s, k.s)),
        "model_info" => st(n.models().info(k.m)),
        "for_each_model_dmem" => st(n.models().for_each_dmem(k.m, |_, _| ())),
        "models_on" => st(n.models().on_core(LogicalCore::new(0), &mut [])),
        "for_each_model_io" => st(n.models().for_each_io(k.m, |_| ())),
        "model_core" => st(n.models().core(k.m)),
        "set_create" => st(n.sets().create()),
        "set_destroy" => st(n.sets().destroy(n.sets().create().unwrap_or(k.s))),
        "set_add" => st(n.sets().add(k.s, "x", k.t)),
        "set_get" => st(n.sets().get(k.s, "x")),
        "set_len" => st(n.sets().len(k.s)),
        "dmem_allocator_create" | "dmem_allocator_destroy" => {
            let pcore = n
                .dmem()
                .allocator_core(k.al)
                .unwrap_or(nrt_core::PhysicalCore::new(0, 0));
            let made = n
                .dmem()
                .allocator_create(pcore, dmem_allocator_type_t::DMEM_ALLOCATOR_TYPE_MODEL);
            if name == "dmem_allocator_create" {
                st(made)
            } else {
                st(n.dmem().allocator_destroy(made.unwrap_or(k.al)))
            }
        }
        "dmem_alloc" => st(n
            .dmem()
            .alloc(k.al, &AllocArgs::device(4096, 0, TENSOR, "s"), None)),
        "dmem_acquire_reference" => st(n.dmem().acquire_reference(k.d)),
        "dmem_free" | "dmem_free_in" => {
            let d = n
                .dmem()
                .alloc(k.al, &AllocArgs::device(4096, 0, TENSOR, "s"), None)
                .unwrap_or(k.d);
            if name == "dmem_free" {
                st(n.dmem().free(d))
            } else {
                st(n.dmem().free_in(k.al, d))
            }
        }
        "dmem_info" => st(n.dmem().info(k.d)),
        "allocator_for_each" => st(n.dmem().allocator_for_each(k.al, |_| ())),
        "dmem_handle_of" | "dmem_is_live" => return Some(n.dmem().is_live(k.d)).and(v()),
        "allocator_usage" => st(n.dmem().allocator_usage(k.al)),
        "dmem_get_memory_stats" => st(n.ledger().memory_stats(LogicalCore::new(0))),
        "vnc_usage" => st(n.ledger().logical_core_usage(LogicalCore::new(0))),
        "reset_peak" => st(n.ledger().reset_peak(LogicalCore::new(0))),
        "inspector().dmem_get_memory_stats" => st(n.inspector().memory_stats(LogicalCore::new(0))),
        "inspector().vnc_usage" => st(n.inspector().logical_core_usage(LogicalCore::new(0))),
        "inspector().virtual_core" => st(n.inspector().logical_core_entry(LogicalCore::new(0))),
        "device_totals" => st(n.ledger().device_totals(0)),
        "ledger_hbm" => return Some(n.ledger().hbm(0)).and(v()),
        "ledger_device" => {
            return Some(n.ledger().device(PhysicalCore::new(0, 0), UsageSel::Total)).and(v())
        }
        "ledger_host" => {
            return Some(n.ledger().host(PhysicalCore::new(0, 0), UsageSel::Total)).and(v())
        }
        "ledger_snapshot" => return Some(n.ledger().snapshot(0)).and(v()),
        "dump_ledger" => return Some(n.ledger().dump(&mut String::new(), 0, None, 2)).and(v()),
        "last_oom" => return Some(n.ledger().last_oom()).and(v()),
        "last_oom_dump" => return Some(n.ledger().last_oom_dump(&mut String::new())).and(v()),
        "last_oom_channel" => return Some(n.ledger().last_oom_channel()).and(v()),
        "tdrv_scratchpad_get_mem" => st(n.tdrv_scratchpad_get_mem(PhysicalCore::new(0, 0), 0, 64)),
        "scratchpad_info" => st(n.scratchpad_info(PhysicalCore::new(0, 0))),
        "scratchpad_page" => st(n.scratchpad_page(PhysicalCore::new(0, 0), 0)),
        "ulib_shared_stats" => st(n.ulib_shared_stats(PhysicalCore::new(0, 0))),
        "ulib_unstage_for_test" => {
            n.ulib_unstage_for_test(PhysicalCore::new(0, 0));
            return v();
        }
        _ => return None,
    })
}

#[test]
fn every_rust_call_answers_the_state_table() {
    assert!(states::table().len() > 40, "docs/STATES.md has no table");
    let cfg = || SimConfig::scaled_down(Preset::Trn2, 1);
    let donor = Fixture::up(cfg(), InitOptions::default());
    let f = Fixture::new(cfg());
    let n = f.nrt();
    let rust = |r: &states::Row| r.rust;
    let mut bad = Vec::new();
    let dk = Kit::make(&donor.nrt());
    // uninit: a fresh runtime (init itself is checked last: it changes the state).
    bad.extend(states::check_state("Rust", rust, 0, "init", |name| {
        answer(&n, &dk, name)
    }));
    // init (close last, for the same reason).
    let k = Kit::make(&n);
    bad.extend(states::check_state("Rust", rust, 1, "close", |name| {
        answer(&n, &k, name)
    }));
    // closed (init last).
    bad.extend(states::check_state("Rust", rust, 2, "init", |name| {
        answer(&n, &k, name)
    }));
    assert!(
        bad.is_empty(),
        "{} disagreement(s):\n{}",
        bad.len(),
        bad.join("\n")
    );
}
