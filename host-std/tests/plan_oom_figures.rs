//! The plan's OOM figures for a request whose alignment the runtime emulates (spec §3.2: the
//! driver refuses alignments above `INT_MAX`, so the runtime latches and over-allocates
//! `size + align`): requested, largest block and missing are all in the request's own terms,
//! and the "why" line says what the driver was asked for.

use nrt_host::plan::{plan, ModelSource, PlanModel, PlanRequest, Verdict};

const GIB: u64 = 1 << 30;

/// A model of one device allocation of `bytes` at `align`.
fn manifest(name: &str, bytes: u64, align: u64) -> Vec<u8> {
    format!(
        r#"{{"format":"nrt-dmem-model/2","name":"{name}","allocations":[
        {{"usage":"WEIGHT","location":"device","size":{bytes},"align":{align},"hint":"w"}}]}}"#
    )
    .into_bytes()
}

#[test]
fn an_emulated_alignment_is_reported_in_the_requests_terms() {
    // trn2: 24 GiB channels, a 22.98 GiB main pool. After 10 GiB, its free block is 12.98 GiB;
    // 1 GiB at a 16 GiB alignment reaches the driver as 17 GiB.
    let r = PlanRequest {
        models: [("a", 10 * GIB, 0), ("b", GIB, 16 * GIB)]
            .into_iter()
            .map(|(name, bytes, align)| PlanModel {
                source: ModelSource::Bytes {
                    label: name.into(),
                    bytes: manifest(name, bytes, align),
                },
                tensors: false,
            })
            .collect(),
        placements: vec![("a".into(), 0), ("b".into(), 0)],
        what_ifs: false,
        ..PlanRequest::default()
    };
    let p = plan(&r).unwrap();
    assert!(p.models[0].fits && !p.models[1].fits, "{:?}", p.models);
    let o = p.first_failure.as_ref().unwrap().oom.clone().unwrap();
    // You asked for 1 GiB at 16 GiB alignment; no request at that alignment fits.
    assert_eq!(o.requested, GIB, "{o:?}");
    assert_eq!(o.largest_block, 0, "{o:?}");
    assert_eq!(o.missing, o.requested - o.largest_block, "{o:?}");
    assert!(!o.larger_than_channel, "{o:?}");
    assert!(
        o.channel_free > 12 * GIB && o.channel_free < 14 * GIB,
        "{o:?}"
    );
    // The why line gives the driver's side: 17 GiB needed, and why.
    assert!(o.why.contains("17408.000MB needed"), "{}", o.why);
    assert!(
        o.why.contains("1024.000MB at a 17179869184-byte alignment")
            && o.why
                .contains("16384.000MB the runtime over-allocates to emulate it"),
        "{}",
        o.why
    );
    // The verdict counts what the driver holds for it: 17 GiB against 12.98 GiB free. The
    // request's own terms for the largest block: no 16 GiB-aligned 1 GiB fits.
    let v = p.models[1].refusal.clone().unwrap();
    assert_eq!(v.verdict, Verdict::Full, "{v:?}");
    assert_eq!(v.needed, Some(17 * GIB), "{v:?}");
    assert_eq!((v.request.size, v.request.align), (GIB, 16 * GIB));
    assert!(v.request.emulated, "{v:?}");
    assert_eq!(v.largest_free_at_align, Some(0), "{v:?}");
    assert_eq!(v.free, o.channel_free, "{v:?}");
}

#[test]
fn an_emulated_alignment_that_no_channel_can_hold_says_so() {
    // 9 GiB at a 16 GiB alignment: the driver would need 25 GiB of a 24 GiB channel, although
    // 9 GiB alone would fit.
    let r = PlanRequest {
        models: vec![PlanModel {
            source: ModelSource::Bytes {
                label: "c".into(),
                bytes: manifest("c", 9 * GIB, 16 * GIB),
            },
            tensors: false,
        }],
        what_ifs: false,
        ..PlanRequest::default()
    };
    let p = plan(&r).unwrap();
    let o = p.first_failure.as_ref().unwrap().oom.clone().unwrap();
    // The largest 16 GiB-aligned request that fits is the 22.98 GiB block less the 16 GiB.
    let main = 24 * GIB - (16 << 20) - GIB;
    assert_eq!(
        (o.requested, o.largest_block, o.missing),
        (9 * GIB, main - 16 * GIB, 25 * GIB - main),
        "{o:?}"
    );
    assert!(o.larger_than_channel, "{o:?}");
    // Hopeless, and what it needs is measured all the same (on channels large enough): the
    // 25 GiB the driver would hold.
    let v = p.models[0].refusal.clone().unwrap();
    assert_eq!(v.verdict, Verdict::Hopeless, "{v:?}");
    assert_eq!(v.needed, Some(25 * GIB), "{v:?}");
    assert!(v.empty_free < 24 * GIB, "{v:?}");
}

/// A request larger than an empty channel's main pool (trn2: 24 GiB less the 16 MiB firmware
/// carve-out and the 1 GiB small-object region, 22.98 GiB) can never fit, although it is
/// smaller than the channel: the plan says nothing makes it fit and tries no what-ifs. One
/// just under that extent is a fit question (it fits on an empty channel).
#[test]
fn a_request_above_an_empty_channels_largest_block_is_hopeless() {
    let one = |bytes: u64| PlanRequest {
        models: vec![PlanModel {
            source: ModelSource::Bytes {
                label: "big".into(),
                bytes: manifest("big", bytes, 0),
            },
            tensors: false,
        }],
        ..PlanRequest::default()
    };
    let main = 24 * GIB - 16 * (1 << 20) - GIB;
    let p = plan(&one(main + GIB / 2)).unwrap();
    let f = p.first_failure.as_ref().unwrap();
    let o = f.oom.as_ref().unwrap();
    assert!(o.larger_than_channel, "{o:?}");
    assert!(f.what_ifs.is_empty(), "{f:?}");
    // Nor is it fragmentation: only the small-object region is free beside the main pool,
    // and it does not fit on an empty channel.
    let r = p.models[0].refusal.as_ref().unwrap();
    assert_eq!(r.verdict, Verdict::Hopeless, "{r:?}");
    assert_eq!(r.needed, Some(main + GIB / 2), "{r:?}");
    assert!(p.fragmentation.is_empty(), "{:?}", p.fragmentation);
    assert!(plan(&one(main)).unwrap().all_fit());
}
