//! The streaming read: one inflate pass when the metadata comes first, a second one only when a
//! weight goes by before its metadata, weights delivered in order to the sink, the same model
//! whatever the member order, and every archive bomb refused in bounded work, the member named.

mod common;

use std::cell::Cell;
use std::io::{self, BufRead, Write};

use common::*;
use nrt_core::abi::dma_mem_usage_type_t as U;
use nrt_core::abi::NRT_STATUS;
use nrt_neff::header::{payload_digest, HEADER_LEN};
use nrt_neff::pack::{self, Member, NeffWriter, PackModel};
use nrt_neff::{read, read_with, ReadOptions, Source};
use serde_json::{json, Value};

/// `small()` with a 1 MiB weight of known, poorly compressible content.
fn weighted() -> (PackModel, Vec<u8>) {
    let mut m = small();
    m.allocations
        .push(alloc(U::DMA_MEM_USAGE_TYPE_WEIGHT, 1 << 20, 64, "big"));
    let content: Vec<u8> = (0..1u32 << 20)
        .map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8)
        .collect();
    (m, content)
}

fn members_with(m: &PackModel, content: &[u8]) -> Vec<Member> {
    let mut ms = members(m);
    for (n, b) in ms.iter_mut() {
        if n == "sg00/big.bin" {
            *b = Some(content.to_vec());
        }
    }
    ms
}

fn edit(ms: &mut [Member], name: &str, f: impl FnOnce(&mut Value)) {
    let body = ms
        .iter_mut()
        .find(|(n, _)| n == name)
        .and_then(|(_, b)| b.as_mut())
        .unwrap();
    let mut v: Value = serde_json::from_slice(body).unwrap();
    f(&mut v);
    *body = serde_json::to_vec(&v).unwrap();
}

fn move_to_front(ms: &mut Vec<Member>, name: &str) {
    let i = ms.iter().position(|(n, _)| n == name).unwrap();
    let m = ms.remove(i);
    ms.insert(0, m);
}

/// Reads with a collecting sink; the weight `big` (index 1 of sg00) and the model.
fn load(bytes: &[u8]) -> (nrt_neff::NeffModel, Collect) {
    let mut sink = Collect::default();
    let m =
        read_with(&bytes, &ReadOptions::default(), &mut sink).unwrap_or_else(|e| panic!("{e:?}"));
    (m, sink)
}

fn big(m: &nrt_neff::NeffModel, sink: &Collect) -> Vec<u8> {
    let w = m.subgraphs[0]
        .weights
        .iter()
        .position(|w| w.var == "big")
        .unwrap();
    sink.bytes[&(0, w)].clone()
}

#[test]
fn what_pack_writes_streams_in_one_pass() {
    let (m, content) = weighted();
    let bytes = write(members_with(&m, &content));
    let (n, sink) = load(&bytes);
    assert_eq!(n.archive.passes, 1);
    assert_eq!(sink.began, 1);
    assert_eq!(big(&n, &sink), content);
    // Chunks, not one copy of the whole weight.
    assert!(sink.writes >= 4, "{} writes", sink.writes);
    // Without a sink taking bytes: one pass too, same footprint.
    let r = read(&bytes, &ReadOptions::default()).unwrap();
    assert_eq!((r.archive.passes, &r.bookings), (1, &n.bookings));
}

#[test]
fn programs_before_the_metadata_naming_them_still_stream_the_weights_in_one_pass() {
    let (m, content) = weighted();
    let mut ms = members_with(&m, &content);
    for program in ["sg00/pe.bin", "sg00/ulib0.so"] {
        let i = ms.iter().position(|(n, _)| n == program).unwrap();
        let p = ms.remove(i);
        ms.insert(2, p);
    }
    let (n, sink) = load(&write(ms));
    assert_eq!(n.archive.passes, 1);
    assert_eq!(big(&n, &sink), content);
}

#[test]
fn a_weight_before_its_metadata_takes_a_second_pass_and_gives_the_same_model() {
    let (m, content) = weighted();
    let ms = members_with(&m, &content);
    let one = load(&write(ms.clone()));
    for case in ["weight first", "no declared size", "npy weight first"] {
        let mut ms = ms.clone();
        match case {
            "weight first" => move_to_front(&mut ms, "sg00/big.bin"),
            "no declared size" => edit(&mut ms, "sg00/def.json", |v| {
                v["var"]["big"].as_object_mut().unwrap().remove("size");
            }),
            _ => {
                let mut npy = vec![0x93, b'N', b'U', b'M', b'P', b'Y', 1, 0];
                let h = b"{'descr': '|u1', 'fortran_order': False, 'shape': (1048576,), }\n";
                npy.extend_from_slice(&(h.len() as u16).to_le_bytes());
                npy.extend_from_slice(h);
                npy.extend_from_slice(&content);
                ms.retain(|(n, _)| n != "sg00/big.bin");
                ms.insert(0, ("sg00/big.npy".into(), Some(npy)));
                edit(&mut ms, "sg00/def.json", |v| {
                    v["var"]["big"]["file_name"] = json!("big.npy")
                });
            }
        }
        let (n, sink) = load(&write(ms.clone()));
        assert_eq!(n.archive.passes, 2, "{case}");
        assert_eq!(big(&n, &sink), content, "{case}");
        assert_eq!(
            n.bookings
                .iter()
                .flatten()
                .map(|b| b.size)
                .collect::<Vec<_>>(),
            one.0
                .bookings
                .iter()
                .flatten()
                .map(|b| b.size)
                .collect::<Vec<_>>(),
            "{case}"
        );
        // Nobody taking the bytes: one pass.
        assert_eq!(
            read(&write(ms), &ReadOptions::default())
                .unwrap()
                .archive
                .passes,
            1
        );
    }
}

#[test]
fn a_weight_beside_its_def_json_wins_over_one_at_the_root_in_either_order() {
    let (m, content) = weighted();
    let other: Vec<u8> = content.iter().map(|b| b ^ 0xff).collect();
    for root_first in [true, false] {
        let mut ms = members_with(&m, &content);
        let root = ("big.bin".to_string(), Some(other.clone()));
        if root_first {
            ms.insert(ms.len() - 2, root);
        } else {
            ms.push(root);
        }
        let (n, sink) = load(&write(ms));
        assert_eq!(big(&n, &sink), content, "root first: {root_first}");
    }
    // Only at the root: that one.
    let mut ms = members_with(&m, &content);
    for (n, _) in ms.iter_mut() {
        if n == "sg00/big.bin" {
            *n = "big.bin".into();
        }
    }
    let (n, sink) = load(&write(ms));
    assert_eq!(big(&n, &sink), content);
    let w = n.subgraphs[0]
        .weights
        .iter()
        .find(|w| w.var == "big")
        .unwrap();
    assert_eq!(w.member, "big.bin");
}

#[test]
fn metadata_under_names_that_do_not_say_json_is_read_in_more_passes() {
    let (m, content) = weighted();
    let mut ms = members_with(&m, &content);
    for (n, _) in ms.iter_mut() {
        if n == "sg00/pe.json" {
            *n = "sg00/pe.engine".into();
        }
    }
    edit(&mut ms, "sg00/def.json", |v| v["pe"] = json!("pe.engine"));
    let (n, sink) = load(&write(ms));
    assert_eq!(big(&n, &sink), content);
    assert_eq!(
        n.subgraphs[0].engines[0].json.as_deref(),
        Some("sg00/pe.engine")
    );
}

/// A source that counts the payload bytes handed out: what a refusal cost.
struct Counting<'a> {
    bytes: &'a [u8],
    read: Cell<u64>,
}

struct CountingReader<'a, 'b> {
    inner: &'a [u8],
    read: &'b Cell<u64>,
}

impl io::Read for CountingReader<'_, '_> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let n = io::Read::read(&mut self.inner, buf)?;
        self.read.set(self.read.get() + n as u64);
        Ok(n)
    }
}

impl BufRead for CountingReader<'_, '_> {
    fn fill_buf(&mut self) -> io::Result<&[u8]> {
        Ok(&self.inner[..self.inner.len().min(4096)])
    }
    fn consume(&mut self, n: usize) {
        self.read.set(self.read.get() + n as u64);
        self.inner = &self.inner[n..];
    }
}

impl Source for Counting<'_> {
    fn len(&self) -> u64 {
        self.bytes.len() as u64
    }
    fn open_at(&self, offset: u64, len: u64) -> io::Result<Box<dyn BufRead + '_>> {
        let s = &self.bytes[offset as usize..(offset + len).min(self.len()) as usize];
        Ok(Box::new(CountingReader {
            inner: s,
            read: &self.read,
        }))
    }
}

/// Reads `bytes` through a counting source: the refusal and the payload bytes read.
fn refused(bytes: &[u8]) -> (nrt_neff::NeffError, u64) {
    let src = Counting {
        bytes,
        read: Cell::new(0),
    };
    let e = nrt_neff::read_source(&src, &ReadOptions::default()).unwrap_err();
    assert_eq!(e.status(), NRT_STATUS::NRT_INVALID, "{e}");
    (e, src.read.get())
}

/// A NEFF whose gzip member inflates to `tar` followed by `zeros` zero bytes, compressed in
/// one stream (a run of zeros compresses about 1000:1).
fn gzip_with_zeros(tar: &[u8], zeros: u64) -> Vec<u8> {
    let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
    gz.write_all(tar).unwrap();
    let block = vec![0u8; 1 << 20];
    let mut left = zeros;
    while left > 0 {
        let n = left.min(block.len() as u64) as usize;
        gz.write_all(&block[..n]).unwrap();
        left -= n as u64;
    }
    rewrap(&gz.finish().unwrap())
}

/// The tar of `ms` without its end-of-archive blocks, so that members can be appended.
fn open_tar(ms: &[Member]) -> Vec<u8> {
    let mut b = tar::Builder::new(Vec::new());
    for (name, body) in ms {
        let mut h = tar::Header::new_gnu();
        h.set_path(name).unwrap();
        h.set_mode(0o644);
        match body {
            Some(body) => {
                h.set_size(body.len() as u64);
                h.set_cksum();
                b.append(&h, body.as_slice()).unwrap();
            }
            None => {
                h.set_entry_type(tar::EntryType::Directory);
                h.set_size(0);
                h.set_cksum();
                b.append(&h, io::empty()).unwrap();
            }
        }
    }
    b.get_ref().clone()
}

/// A tar header for a member `name` declaring `size` bytes.
fn member_header(name: &str, size: u64) -> Vec<u8> {
    let mut h = tar::Header::new_gnu();
    h.set_path(name).unwrap();
    h.set_size(size);
    h.set_mode(0o644);
    h.set_cksum();
    h.as_bytes().to_vec()
}

fn small_tar() -> Vec<u8> {
    let mut w = NeffWriter::new(pack::header_for("small"));
    w.members = members(&small());
    w.tar().unwrap()
}

#[test]
fn inflated_data_past_the_end_of_the_tar_is_refused_after_one_record() {
    // 256 MiB of zeros after the archive's end: refused within the record padding, having read
    // a sliver of the compressed stream.
    let bytes = gzip_with_zeros(&small_tar(), 256 << 20);
    let payload = bytes.len() as u64 - HEADER_LEN as u64;
    let (e, read) = refused(&bytes);
    assert!(
        e.message()
            .contains("data past the end of its tar archive (after the end-of-archive blocks)"),
        "{e}"
    );
    assert!(read < payload / 4, "read {read} of {payload} payload bytes");
    // Non-zero bytes right after the end-of-archive blocks, and bytes after the gzip member.
    let mut tar = small_tar();
    tar.extend_from_slice(b"trailing");
    let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
    gz.write_all(&tar).unwrap();
    let (e, _) = refused(&rewrap(&gz.finish().unwrap()));
    assert!(
        e.message().contains("data past the end of its tar archive"),
        "{e}"
    );
    let mut payload = good_payload();
    payload.extend_from_slice(b"more");
    let (e, _) = refused(&rewrap(&payload));
    assert!(
        e.message().contains("data past the end of its gzip stream"),
        "{e}"
    );
}

fn good_payload() -> Vec<u8> {
    let b = write(members(&small()));
    b[HEADER_LEN..].to_vec()
}

#[test]
fn a_member_larger_than_its_declaration_is_refused_from_its_header() {
    // The var declares 1 MiB; the member holds 512 MiB of zeros (about 512 KiB compressed).
    let (m, _) = weighted();
    let mut ms = members(&m);
    ms.retain(|(n, _)| n != "sg00/big.bin");
    let mut head = open_tar(&ms);
    head.extend_from_slice(&member_header("sg00/big.bin", 512 << 20));
    let bytes = gzip_with_zeros(&head, 512 << 20);
    let payload = bytes.len() as u64 - HEADER_LEN as u64;
    let mut sink = Collect::default();
    let e = match read_with(&bytes.as_slice(), &ReadOptions::default(), &mut sink) {
        Err(nrt_neff::ReadError::Neff(e)) => e,
        other => panic!("{:?}", other.map(|m| m.name)),
    };
    assert!(
        e.message().contains(
            "weight big: member sg00/big.bin holds 536870912 payload bytes but the var \
             declares size 1048576"
        ),
        "{e}"
    );
    // Only the small weight before it (index 0) was delivered, nothing of `big` (index 1).
    assert_eq!(sink.bytes.keys().collect::<Vec<_>>(), [&(0, 0)]);
    // Refused from the header: the stream was not inflated through.
    let (_, read) = refused(&bytes);
    assert!(read < payload / 4, "read {read} of {payload} payload bytes");
}

#[test]
fn a_neff_truncated_in_a_weight_is_refused_naming_it() {
    let (m, content) = weighted();
    let bytes = write(members_with(&m, &content));
    let h = header_of(&bytes);
    let payload = &bytes[HEADER_LEN..];
    // Inflate, cut the tar in the middle of the weight, re-compress: a well-formed gzip of a
    // truncated archive.
    let mut tar = Vec::new();
    io::copy(&mut flate2::read::GzDecoder::new(payload), &mut tar).unwrap();
    let at = tar.windows(12).position(|w| w == b"sg00/big.bin").unwrap();
    tar.truncate(at + 512 + (300 << 10));
    let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
    gz.write_all(&tar).unwrap();
    let cut = rewrap(&gz.finish().unwrap());
    let mut sink = Collect::default();
    let e = match read_with(&cut.as_slice(), &ReadOptions::default(), &mut sink) {
        Err(nrt_neff::ReadError::Neff(e)) => e,
        other => panic!("{:?}", other.map(|m| m.name)),
    };
    assert!(
        e.message()
            .contains("the archive is truncated in member sg00/big.bin"),
        "{e}"
    );
    // The load had begun and part of the weight was delivered: the caller's rollback.
    assert_eq!(sink.began, 1);
    assert!(sink.writes > 0);
    // The raw cut (the gzip itself truncated) is refused too.
    let mut raw = bytes[..HEADER_LEN + payload.len() / 2].to_vec();
    let mut hh = h.clone();
    hh.data_size = (payload.len() / 2) as u64;
    raw[..HEADER_LEN].copy_from_slice(&hh.to_bytes());
    let (e, _) = refused(&raw);
    assert!(e.message().contains("corrupt or truncated gzip"), "{e}");
}

#[test]
fn a_member_declaring_100_gib_with_1_kib_behind_it_is_refused_quickly() {
    let mut tar = open_tar(&members(&small()));
    tar.extend_from_slice(&member_header("junk.bin", 100 << 30));
    tar.extend_from_slice(&[7u8; 1024]);
    let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
    gz.write_all(&tar).unwrap();
    let (e, _) = refused(&rewrap(&gz.finish().unwrap()));
    assert!(
        e.message()
            .contains("the archive is truncated in member junk.bin"),
        "{e}"
    );
}

#[test]
fn the_digest_is_checked_only_when_asked_and_a_mismatch_after_the_weights_is_refused() {
    let (m, content) = weighted();
    let mut bytes = write(members_with(&m, &content));
    bytes[0xAC] ^= 1;
    // Off by default: loads.
    load(&bytes);
    let verify = ReadOptions {
        verify: true,
        ..ReadOptions::default()
    };
    let mut sink = Collect::default();
    let e = match read_with(&bytes.as_slice(), &verify, &mut sink) {
        Err(nrt_neff::ReadError::Neff(e)) => e,
        other => panic!("{:?}", other.map(|m| m.name)),
    };
    assert_eq!(
        (e.message(), e.gate()),
        ("MD5 mismatch!", Some("integrity"))
    );
    // The weights streamed first (one pass): the caller rolls the load back.
    assert_eq!(sink.began, 1);
    // Asked for and matching: the integrity gate passed, still one pass.
    let ok = write(members_with(&m, &content));
    let mut s = Collect::default();
    let n = read_with(&ok.as_slice(), &verify, &mut s).unwrap();
    assert_eq!(n.gates.last().map(|g| g.name), Some("integrity"));
    assert_eq!(n.archive.passes, 1);
    assert_eq!(big(&n, &s), content);
    // A corrupt payload is refused for its digest before anything else, as libnrt's gate 9.
    let good = write(members(&small()));
    let mut flipped = good.clone();
    let at = HEADER_LEN + 40;
    flipped[at] ^= 0x55;
    let e = read(&flipped, &verify).unwrap_err();
    assert_eq!(e.message(), "MD5 mismatch!");
    assert_eq!(
        payload_digest(2, &good[HEADER_LEN..])[..16],
        header_of(&good).hash[..16]
    );
}

#[test]
fn tensor_names_of_255_bytes_are_read_and_256_refused() {
    for (len, ok) in [(255, true), (256, false), (100_000, false)] {
        let name = "n".repeat(len);
        let bytes = edit_json("neff.json", |v| v["nodes"][0]["name"] = json!(name));
        match read(&bytes, &ReadOptions::default()) {
            Ok(m) if ok => assert_eq!(m.tensors[0].name.len(), 255),
            Err(e) if !ok => assert!(
                e.message().contains(&format!(
                    "is {len} bytes, longer than 255 (NRT_TENSOR_NAME_MAX 256 with its NUL)"
                )),
                "{e}"
            ),
            r => panic!("{len}: {:?}", r.map(|m| m.name)),
        }
    }
    // The writer refuses what the reader would.
    let mut m = small();
    m.inputs[0].name = "n".repeat(256);
    let e = pack::pack(&m).unwrap_err();
    assert!(e.message().contains("longer than 255"), "{e}");
}

#[test]
fn a_tensor_table_of_a_million_tensors_is_refused_from_its_tar_header() {
    // 10^6 inputs, each its own node: about 40 MB of neff.json.
    let n = 1_000_000;
    let mut s = String::from("{\"nodes\":[");
    for i in 0..n {
        s.push_str(&format!(
            "{{\"op\":\"null\",\"name\":\"i{i}\",\"inputs\":[]}},"
        ));
    }
    s.push_str("{\"op\":\"tvm_op\",\"name\":\"kelf\",\"attrs\":{\"func_name\":\"__kelf\",\"kelf\":\"kelf-a.json\"}}],\"arg_nodes\":[");
    s.push_str(&(0..n).map(|i| i.to_string()).collect::<Vec<_>>().join(","));
    s.push_str("],\"heads\":[],\"node_row_ptr\":[");
    s.push_str(&(0..=n).map(|i| i.to_string()).collect::<Vec<_>>().join(","));
    s.push_str("],\"attrs\":{\"dltype\":[\"list_str\",[");
    s.push_str(&vec!["\"uint8\""; n].join(","));
    s.push_str("]],\"shape\":[\"list_shape\",[");
    s.push_str(&vec!["[1]"; n].join(","));
    s.push_str("]]}}");
    let mut ms = members(&small());
    for (name, b) in ms.iter_mut() {
        if name == "neff.json" {
            *b = Some(s.clone().into_bytes());
        }
    }
    move_to_front(&mut ms, "neff.json");
    let bytes = write(ms);
    let payload = bytes.len() as u64 - HEADER_LEN as u64;
    let (e, read) = refused(&bytes);
    assert!(
        e.message().contains(&format!(
            "neff.json is {} bytes: an IO tensor table takes at most 8388608; refused",
            s.len()
        )),
        "{e}"
    );
    assert!(read < payload / 4, "read {read} of {payload} payload bytes");
    // One node listed a million times is refused as a repeat, not built into a table.
    let bytes = edit_json("neff.json", |v| v["arg_nodes"] = json!(vec![0; n]));
    let e = read_err(&bytes);
    assert!(e.contains("arg_nodes lists node 0 twice"), "{e}");
}

fn read_err(bytes: &[u8]) -> String {
    read(bytes, &ReadOptions::default())
        .map(|m| m.name)
        .unwrap_err()
        .message()
        .to_string()
}

#[test]
fn metadata_past_the_cap_is_refused_when_needed_and_ignored_when_not() {
    let tight = ReadOptions {
        max_metadata_bytes: 16 << 10,
        ..ReadOptions::default()
    };
    // A 64 KiB debug JSON nobody names: read past.
    let mut ms = members(&small());
    ms.push(("sg00/debug.json".into(), Some(vec![b' '; 64 << 10])));
    read(&write(ms), &tight).unwrap();
    // A def.json larger than the cap: refused, named.
    let mut ms = members(&small());
    edit(&mut ms, "sg00/def.json", |v| {
        v["padding"] = json!("x".repeat(32 << 10))
    });
    let e = read(&write(ms), &tight).unwrap_err();
    assert!(
        e.message()
            .contains("NEFF metadata member sg00/def.json is")
            && e.message().contains("more than the 16384-byte cap for it"),
        "{e}"
    );
}

#[test]
fn a_table_of_640_tensors_with_200_byte_names_reads_back_whole() {
    let mut m = small();
    let name = |io: &str, i: usize| format!("{io}.{i:03}.{}", "k".repeat(193));
    m.inputs = (0..320)
        .map(|i| tensor(&name("in", i), nrt_neff::Dtype::Bfloat16, &[2, 64]))
        .collect();
    m.outputs = (0..320)
        .map(|i| tensor(&name("ou", i), nrt_neff::Dtype::Bfloat16, &[2, 64]))
        .collect();
    let n = read(&pack::pack(&m).unwrap(), &ReadOptions::default()).unwrap();
    assert_eq!(n.tensors.len(), 640);
    assert!(n
        .tensors
        .iter()
        .all(|t| t.name.len() == 200 && t.size == 256));
    assert_eq!(n.tensors[639].name, name("ou", 319));
}
