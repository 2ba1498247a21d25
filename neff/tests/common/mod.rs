//! Shared helpers of the nrt-neff tests: a small model, member edits, re-wrapping payloads.
#![allow(dead_code)]

use nrt_core::abi::dma_mem_usage_type_t as U;
use nrt_neff::header::{payload_digest, Header, HEADER_LEN};
use nrt_neff::pack::{self, Member, NeffWriter, PackAlloc, PackModel, PackTensor};
use nrt_neff::{Dtype, Reservation};
use serde_json::Value;

pub fn alloc(usage: U, size: u64, align: u64, hint: &str) -> PackAlloc {
    PackAlloc {
        usage,
        host: false,
        size,
        align,
        hint: hint.into(),
    }
}

pub fn tensor(name: &str, dtype: Dtype, shape: &[u32]) -> PackTensor {
    PackTensor {
        name: name.into(),
        dtype,
        shape: shape.to_vec(),
    }
}

/// A small model exercising every tier: a weight, private scratch, a ring, scratchpad, two
/// GPSIMD libraries (default + one), an EVTACCEL carveout.
pub fn small() -> PackModel {
    PackModel {
        name: "small".into(),
        subgraphs: 1,
        allocations: vec![
            alloc(
                U::DMA_MEM_USAGE_TYPE_INSTR_PE,
                65536,
                0,
                "sg00_instructions",
            ),
            alloc(U::DMA_MEM_USAGE_TYPE_WEIGHT, 4096, 4096, "weights"),
            alloc(
                U::DMA_MEM_USAGE_TYPE_SCRATCHPAD_NOT_SHARED,
                8192,
                0,
                "activations",
            ),
            alloc(U::DMA_MEM_USAGE_TYPE_DMA_RING, 16384, 0, "qPoolIO0"),
            PackAlloc {
                host: true,
                ..alloc(
                    U::DMA_MEM_USAGE_TYPE_NOTIFICATION,
                    4096,
                    0,
                    "host_notifications",
                )
            },
        ],
        gpsimd_libs: Some((2, 8192)),
        scratchpad_bytes: 1 << 20,
        sbuf_carveout: Some(Reservation {
            ty: 1,
            offset: 0x37ff8,
            size: 8,
            start_partition: 0,
            num_partitions: 128,
        }),
        inputs: vec![tensor("x", Dtype::Float32, &[2, 16])],
        outputs: vec![tensor("y", Dtype::Bfloat16, &[2, 16])],
    }
}

pub fn members(m: &PackModel) -> Vec<Member> {
    pack::pack_members(m).unwrap()
}

pub fn write(members: Vec<Member>) -> Vec<u8> {
    let mut w = NeffWriter::new(pack::header_for("small"));
    w.members = members;
    w.finish().unwrap()
}

/// The members of `small()` with `f` applied to the JSON of member `name`.
pub fn edit_json(name: &str, f: impl FnOnce(&mut Value)) -> Vec<u8> {
    let mut ms = members(&small());
    let body = ms
        .iter_mut()
        .find(|(n, _)| n == name)
        .and_then(|(_, b)| b.as_mut())
        .unwrap();
    let mut v: Value = serde_json::from_slice(body).unwrap();
    f(&mut v);
    *body = serde_json::to_vec(&v).unwrap();
    write(ms)
}

/// A NEFF of `payload` with a header whose data_size and MD5 match it.
pub fn rewrap(payload: &[u8]) -> Vec<u8> {
    let mut h = pack::header_for("small");
    h.data_size = payload.len() as u64;
    h.hash = payload_digest(2, payload);
    let mut out = h.to_bytes().to_vec();
    out.extend_from_slice(payload);
    out
}

pub fn set_u64(b: &mut [u8], off: usize, v: u64) {
    b[off..off + 8].copy_from_slice(&v.to_le_bytes());
}

pub fn header_of(b: &[u8]) -> Header {
    let mut raw = [0u8; HEADER_LEN];
    raw.copy_from_slice(&b[..HEADER_LEN]);
    Header::parse(&raw)
}

/// A sink that keeps every weight's bytes, checking that each arrives at increasing offsets
/// (starting again at 0 only when a weight's member is replaced).
#[derive(Default)]
pub struct Collect {
    pub began: usize,
    pub bytes: std::collections::BTreeMap<(usize, usize), Vec<u8>>,
    pub writes: usize,
}

impl nrt_neff::WeightSink for Collect {
    type Error = String;

    fn begin(&mut self, _: &nrt_neff::NeffModel) -> Result<(), String> {
        self.began += 1;
        Ok(())
    }

    fn write(&mut self, sg: usize, w: usize, offset: u64, bytes: &[u8]) -> Result<(), String> {
        assert_eq!(self.began, 1, "bytes before begin");
        let v = self.bytes.entry((sg, w)).or_default();
        if offset == 0 {
            v.clear();
        }
        assert_eq!(v.len() as u64, offset, "weight ({sg}, {w}) out of order");
        v.extend_from_slice(bytes);
        self.writes += 1;
        Ok(())
    }
}
