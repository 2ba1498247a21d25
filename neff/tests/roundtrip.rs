//! pack → read gives back the spec the model described, and no input makes the reader panic.

mod common;

use common::*;
use nrt_core::abi::dma_mem_usage_type_t as U;
use nrt_neff::pack::{self, PackModel};
use nrt_neff::{read, Basis, ReadOptions};
use rand::{Rng, SeedableRng};

type Row = (u32, u32, u64, u64, String);

const HOST: u32 = nrt_core::abi::dma_mem_location_t::HOST_DRAM as u32;
const DEVICE: u32 = nrt_core::abi::dma_mem_location_t::TONGA_DRAM as u32;

fn sorted(mut v: Vec<Row>) -> Vec<Row> {
    v.sort();
    v
}

fn check_round_trip(m: &PackModel) {
    let bytes = pack::pack(m).unwrap();
    let n = read(&bytes, &ReadOptions::default()).unwrap_or_else(|e| panic!("{}: {e}", m.name));
    let s = n.spec().unwrap();
    let spec = s.as_spec();
    let want = sorted(
        m.allocations
            .iter()
            .map(|a| {
                (
                    a.usage as u32,
                    if a.host { HOST } else { DEVICE },
                    a.size,
                    a.align,
                    a.hint.clone(),
                )
            })
            .collect(),
    );
    let got = sorted(
        spec.allocations
            .iter()
            .map(|a| {
                (
                    a.usage as u32,
                    a.location as u32,
                    a.size,
                    a.align,
                    a.hint.to_string(),
                )
            })
            .collect(),
    );
    assert_eq!(got, want, "{}", m.name);
    assert_eq!(spec.name, m.name);
    assert_eq!(spec.subgraphs, m.subgraphs);
    assert_eq!(spec.scratchpad_bytes, m.scratchpad_bytes);
    assert_eq!(
        spec.gpsimd_libs.map(|l| (l.count, l.bytes)),
        m.gpsimd_libs.filter(|l| l.0 > 0)
    );
    assert_eq!(
        spec.sbuf_carveout
            .map(|c| (c.ty, c.partition_start, c.partition_count, c.offset, c.size)),
        m.sbuf_carveout
            .map(|c| (c.ty, c.start_partition, c.num_partitions, c.offset, c.size))
    );
    let io = |t: &[nrt_core::model::TensorDecl]| {
        t.iter()
            .map(|t| (t.name.to_string(), t.size))
            .collect::<Vec<_>>()
    };
    let sizes = |t: &[pack::PackTensor]| {
        t.iter()
            .map(|t| {
                (
                    t.name.clone(),
                    nrt_neff::meta::tensor_size(&t.name, t.dtype, &t.shape).unwrap(),
                )
            })
            .collect::<Vec<_>>()
    };
    assert_eq!(io(spec.inputs), sizes(&m.inputs));
    assert_eq!(io(spec.outputs), sizes(&m.outputs));
    // Nothing of a packed NEFF is estimated: the extension declares what the format cannot.
    assert!(n
        .bookings
        .iter()
        .flatten()
        .all(|b| b.basis != Basis::Estimated));
    // The weights stream out at their booked sizes.
    let mut sink = Collect::default();
    let n = nrt_neff::read_with(&bytes.as_slice(), &ReadOptions::default(), &mut sink).unwrap();
    for (k, len) in n.copy_in_lens(0) {
        assert_eq!(len, n.bookings[0][k].size);
        let w = n.bookings[0][k].weight.unwrap();
        assert_eq!(sink.bytes[&(0, w)].len() as u64, len);
    }
}

#[test]
fn pack_then_read_gives_the_same_spec() {
    let mut models = vec![small()];
    let mut two = small();
    two.name = "two-subgraphs".into();
    two.subgraphs = 2;
    two.gpsimd_libs = None;
    two.sbuf_carveout = None;
    two.scratchpad_bytes = 0;
    models.push(two);
    let mut many = small();
    many.name = "ten-libs".into();
    many.gpsimd_libs = Some((10, 4096));
    models.push(many);
    for m in &models {
        check_round_trip(m);
    }
}

#[test]
fn weights_are_read_back_byte_for_byte() {
    // A .npy weight (v1 header) and a raw one, with content.
    let mut ms = members(&small());
    let mut npy = vec![0x93, b'N', b'U', b'M', b'P', b'Y', 1, 0];
    let header = b"{'descr': '<f4', 'fortran_order': False, 'shape': (4,), }    \n";
    npy.extend_from_slice(&(header.len() as u16).to_le_bytes());
    npy.extend_from_slice(header);
    npy.extend_from_slice(&[1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16]);
    ms.push(("sg00/w.npy".into(), Some(npy)));
    for (n, b) in ms.iter_mut() {
        if n == "sg00/def.json" {
            let mut v: serde_json::Value = serde_json::from_slice(b.as_ref().unwrap()).unwrap();
            v["var"]["weights"]["file_name"] = serde_json::json!("w.npy");
            v["var"]["weights"]["size"] = serde_json::json!(16);
            *b = Some(serde_json::to_vec(&v).unwrap());
        }
    }
    let mut sink = Collect::default();
    let bytes = write(ms);
    let n = nrt_neff::read_with(&bytes.as_slice(), &ReadOptions::default(), &mut sink).unwrap();
    let c = n.copy_in_lens(0);
    assert_eq!(c.len(), 1);
    let w = &n.bookings[0][c[0].0];
    assert_eq!(
        sink.bytes[&(0, w.weight.unwrap())],
        [1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16]
    );
    assert_eq!(
        (w.usage, w.size, w.align, w.basis),
        (U::DMA_MEM_USAGE_TYPE_WEIGHT, 16, 4096, Basis::Exact)
    );
    assert_eq!(c, vec![(c[0].0, 16)]);
    assert_eq!(n.copy_in_lens(7), vec![]);
    // The reader without a sink holds no bytes and finds the same footprint.
    assert_eq!(
        read(&bytes, &ReadOptions::default()).unwrap().bookings,
        n.bookings
    );
}

/// Random byte flips anywhere in a packed NEFF, and in its inflated tar (re-wrapped so that the
/// gates pass and the archive and metadata tiers are reached), never panic.
#[test]
fn random_flips_never_panic() {
    let good = pack::pack(&small()).unwrap();
    let tar = {
        let mut w = pack::NeffWriter::new(pack::header_for("small"));
        w.members = members(&small());
        w.tar().unwrap()
    };
    let mut rng = rand::rngs::SmallRng::seed_from_u64(18);
    let lax = ReadOptions {
        verify: false,
        ..ReadOptions::default()
    };
    let (mut ok, mut refused) = (0, 0);
    for i in 0..600 {
        let mut b = if i % 2 == 0 {
            good.clone()
        } else {
            tar.clone()
        };
        for _ in 0..rng.gen_range(1..8) {
            let at = if i % 3 == 0 {
                rng.gen_range(0..b.len().min(2048))
            } else {
                rng.gen_range(0..b.len())
            };
            b[at] ^= 1 << rng.gen_range(0..8);
        }
        if i % 5 == 0 {
            b.truncate(rng.gen_range(0..b.len()));
        }
        let bytes = if i % 2 == 0 { b } else { pack_tar_pkg1(&b) };
        match read(&bytes, &lax) {
            Ok(m) => {
                ok += 1;
                let _ = m.spec();
            }
            Err(e) => {
                refused += 1;
                assert!(!e.message().is_empty());
            }
        }
        // The same bytes with the weights streamed into a sink, and verified.
        let verify = ReadOptions {
            verify: true,
            ..lax
        };
        let _ = nrt_neff::read_with(&bytes.as_slice(), &verify, &mut Collect::default());
    }
    assert!(refused > 0 && ok + refused == 600);
}

/// A pkg 1 NEFF around a (possibly corrupt) tar.
fn pack_tar_pkg1(tar: &[u8]) -> Vec<u8> {
    let mut h = nrt_neff::Header {
        pkg_version: 1,
        ..pack::header_for("small")
    };
    h.data_size = tar.len() as u64;
    let mut out = h.to_bytes().to_vec();
    out.extend_from_slice(tar);
    out
}
