//! The logical-core index type (spec §9): the runtime's checked constructor,
//! an index kept across `close` and a smaller re-initialisation, and the one conversion from
//! the C ABI's value.

mod common;

use common::*;
use nrt_core::abi::NRT_STATUS;
use nrt_core::sim::{Preset, SimConfig};
use nrt_core::vcore::VcoreOptions;
use nrt_core::{CoreSel, Error, InitOptions, LogicalCore};

#[test]
fn the_checked_constructor_names_how_many_cores_the_process_owns() {
    let f = Fixture::new(SimConfig::new(Preset::Trn2, 1));
    let n = f.nrt();
    assert_eq!(n.logical_core(0), Err(Error::Uninitialized));
    assert_eq!(n.logical_cores().count(), 0, "no cores before init");
    n.init(&InitOptions::default()).unwrap();
    let owned = n.visible_logical_core_count();
    assert_eq!(owned, 4, "trn2: 8 physical cores at LNC 2");
    for i in 0..owned {
        assert_eq!(n.logical_core(i), Ok(LogicalCore::new(i)));
    }
    assert_eq!(
        n.logical_cores().collect::<Vec<_>>(),
        (0..owned).map(LogicalCore::new).collect::<Vec<_>>()
    );
    let e = n.logical_core(owned).unwrap_err();
    assert_eq!(e, Error::LogicalCoreOutOfRange { vnc: 4, owned: 4 });
    assert_eq!(
        e.to_string(),
        "Logical NeuronCore 4 is out of range: this process owns 4 (0..4)"
    );
    assert_eq!(e.status(), NRT_STATUS::NRT_INVALID);
    n.close().unwrap();
    assert_eq!(n.logical_core(0), Err(Error::Closed));
}

#[test]
fn an_index_kept_across_a_smaller_reinit_is_an_error_not_another_core() {
    let f = Fixture::up(SimConfig::new(Preset::Trn2, 1), InitOptions::default());
    let n = f.nrt();
    let last = n.logical_core(3).unwrap();
    assert_eq!(n.logical_core_entry(last).unwrap().vtpb_idx, 3);
    n.close().unwrap();
    let two = InitOptions {
        vcores: VcoreOptions {
            num_cores: Some(2),
            ..Default::default()
        },
        ..Default::default()
    };
    n.init(&two).unwrap();
    assert_eq!(n.visible_logical_core_count(), 2);
    assert_eq!(
        n.logical_core_entry(last).err(),
        Some(Error::LogicalCoreOutOfRange { vnc: 3, owned: 2 })
    );
    assert_eq!(
        n.ledger().memory_stats(last),
        Err(Error::LogicalCoreOutOfRange { vnc: 3, owned: 2 })
    );
    n.close().unwrap();
}

#[test]
fn the_c_value_is_kept_so_the_range_gate_names_it() {
    assert_eq!(CoreSel::from_c(-1), CoreSel::Any);
    assert_eq!(CoreSel::from_c(2), CoreSel::Core(LogicalCore::new(2)));
    assert_eq!(CoreSel::from_c(-1).to_c(), -1);
    assert_eq!(LogicalCore::from_c(7u32), LogicalCore::new(7));
    assert_eq!(LogicalCore::new(7).index(), Some(7));
    assert_eq!(LogicalCore::from_c(-5).index(), None);
    assert_eq!(LogicalCore::from_c(1i64 << 40).index(), None);
    assert_eq!(LogicalCore::default(), LogicalCore::FIRST);

    let f = Fixture::up(SimConfig::new(Preset::Trn2, 1), InitOptions::default());
    let n = f.nrt();
    for c in [-5, -1, 1 << 40] {
        let e = n.logical_core_entry(LogicalCore::from_c(c)).unwrap_err();
        assert_eq!(e, Error::LogicalCoreOutOfRange { vnc: c, owned: 4 });
        assert_eq!(
            e.to_string(),
            format!("Logical NeuronCore {c} is out of range: this process owns 4 (0..4)")
        );
    }
    n.close().unwrap();
}
