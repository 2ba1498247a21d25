//! The §12 fixture (the NEFF embedded in libnrt): its header, archive, tensor table and
//! footprint as docs/NEFF-FORMAT.md states them.

use nrt_core::abi::dma_mem_usage_type_t as U;
use nrt_neff::{pack, read, Basis, Dtype, ReadOptions, TensorUsage};

fn usage_bytes(m: &nrt_neff::NeffModel, u: U) -> (u64, Vec<Basis>) {
    let b: Vec<_> = m.bookings[0].iter().filter(|b| b.usage == u).collect();
    (
        b.iter().map(|b| b.size).sum(),
        b.iter().map(|b| b.basis).collect(),
    )
}

#[test]
fn the_fixture_reads_as_the_reference_describes_it() {
    let bytes = pack::fixture().unwrap();
    let verify = ReadOptions {
        verify: true,
        ..ReadOptions::default()
    };
    let m = read(&bytes, &verify).unwrap();
    let h = &m.header;
    assert_eq!(
        (h.pkg_version, h.header_size, h.major, h.minor),
        (2, 0x400, 2, 0)
    );
    assert_eq!(h.build_version, "2.0.21884.0%kaena-tools/develop@6c66f4b");
    assert_eq!(h.uuid_string(), "561826fb-125f-4bb8-991c-29e085c8949a");
    assert_eq!(
        (h.name.as_str(), h.requested_tpb_count, h.vnc_size),
        ("x", 1, 1)
    );
    assert_eq!(&h.hash[16..], &[b'0'; 16], "pkg 2 hash tail is ASCII zeros");
    assert_eq!(bytes.len() as u64, 0x400 + h.data_size);
    // The archive: 19 members, one of them the directory.
    assert!(m.archive.gzip);
    assert_eq!((m.archive.members, m.archive.directories), (18, 1));
    assert_eq!(
        m.archive.inflated_bytes, 20480,
        "tar padded to two 10 KiB records"
    );
    assert_eq!(m.archive.passes, 1, "no weights: one pass");
    let gates: Vec<_> = m.gates.iter().map(|g| g.name).collect();
    assert_eq!(
        gates,
        [
            "size floor",
            "header size",
            "version ceiling",
            "feature trapdoor",
            "data fit",
            "packager",
            "integrity"
        ]
    );
    // Tensor table: input/output float32 [32], 128 B.
    assert_eq!(m.tensors.len(), 2);
    for (t, (name, usage)) in m.tensors.iter().zip([
        ("input", TensorUsage::Input),
        ("output", TensorUsage::Output),
    ]) {
        assert_eq!(
            (
                t.name.as_str(),
                t.usage,
                t.dtype,
                t.shape.as_slice(),
                t.size
            ),
            (name, usage, Dtype::Float32, &[32u32][..], 128)
        );
    }
    assert_eq!(m.kelf.target, "*");
    assert_eq!(m.kelf.arch, None);
    assert_eq!(m.subgraphs.len(), 1);
    assert_eq!(m.subgraphs[0].vars.len(), 5);
    assert_eq!(m.subgraphs[0].queues.len(), 2);
    // Footprint (§12): 256 B SCRATCHPAD_NOT_SHARED exactly, no WEIGHT, PE 64 B and POOL 192 B of
    // raw program, two DMA rings.
    assert_eq!(
        usage_bytes(&m, U::DMA_MEM_USAGE_TYPE_SCRATCHPAD_NOT_SHARED),
        (256, vec![Basis::Exact; 2])
    );
    assert_eq!(usage_bytes(&m, U::DMA_MEM_USAGE_TYPE_WEIGHT).0, 0);
    let raw = |u: U| {
        m.bookings[0]
            .iter()
            .find(|b| b.usage == u)
            .map(|b| (b.known_bytes, b.basis))
    };
    assert_eq!(
        raw(U::DMA_MEM_USAGE_TYPE_INSTR_PE),
        Some((64, Basis::Estimated))
    );
    assert_eq!(
        raw(U::DMA_MEM_USAGE_TYPE_INSTR_POOL),
        Some((192, Basis::Estimated))
    );
    assert_eq!(
        m.bookings[0]
            .iter()
            .filter(|b| b.usage == U::DMA_MEM_USAGE_TYPE_DMA_RING_IO)
            .count(),
        2
    );
    assert_eq!(m.scratchpad_bytes, 0);
    assert_eq!(m.carveout, None);
    // The spec the core takes.
    let s = m.spec().unwrap();
    let spec = s.as_spec();
    assert_eq!(
        (
            spec.name,
            spec.subgraphs,
            spec.inputs.len(),
            spec.outputs.len()
        ),
        ("x", 1, 1, 1)
    );
    assert_eq!(spec.allocations.len(), m.bookings[0].len());
}
