//! The 1024-byte `neff_header_t` and libnrt's load gates, in libnrt's order (neff-format §2, §3).
//!
//! There is no magic number: a NEFF is recognised by its sizes and versions alone.

use md5::{Digest as _, Md5};
use sha2::Sha256;

use crate::error::{NeffError, Result};

/// Header bytes; the payload always starts here, whatever `header_size` says (§1).
pub const HEADER_LEN: usize = 0x400;
/// Gate 5's mask: feature bits 27..62 are "compiled by a newer compiler" (§3).
pub const FEATURE_TRAPDOOR: u64 = 0x7FFF_FFFF_F800_0000;
/// Feature bits this runtime supports, bits 0..26 (§3, printed in gate 5's message).
pub const SUPPORTED_FEATURES: u64 = 0x7FF_FFFF;
/// Highest accepted `neff_version_major` (§3 gate 4).
pub const MAX_MAJOR: u64 = 2;

/// `neff_header_t` (§2), field by field; offsets in the field docs.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Header {
    /// @0x000 `pkg_version`: 1 = tar + SHA-256, 2 = gzip(tar) + MD5.
    pub pkg_version: u64,
    /// @0x008 `header_size` (0x400 in every known file; only checked `< file size`).
    pub header_size: u64,
    /// @0x010 `data_size`: payload bytes as stored (compressed for pkg 2).
    pub data_size: u64,
    /// @0x018 `neff_version_major` (0, 1, 2 accepted).
    pub major: u64,
    /// @0x020 `neff_version_minor` (logged, never checked).
    pub minor: u64,
    /// @0x028 `neff_build_version`, NUL-terminated label (128 B).
    pub build_version: String,
    /// @0x0A8 `unused_0` (1 in the fixture; not read by the loader, §2 note).
    pub unused_0: u32,
    /// @0x0AC `hash` (32 B): SHA-256 (pkg 1) or MD5 in bytes 0..15 (pkg 2).
    pub hash: [u8; 32],
    /// @0x0CC `uuid` (16 B), the NEFF-cache key.
    pub uuid: [u8; 16],
    /// @0x0DC `name` (256 B, NUL-terminated), copied into the model.
    pub name: String,
    /// @0x1DC `requested_tpb_count`.
    pub requested_tpb_count: u32,
    /// @0x1E0 `tpb_per_node` (64 B).
    pub tpb_per_node: [u8; 64],
    /// @0x220 `feature_bits` (gate 5).
    pub feature_bits: u64,
    /// @0x228 `vnc_size` (1 single, 2 paired).
    pub vnc_size: u32,
}

impl Default for Header {
    fn default() -> Self {
        Header {
            pkg_version: 2,
            header_size: HEADER_LEN as u64,
            data_size: 0,
            major: 2,
            minor: 0,
            build_version: String::new(),
            unused_0: 1,
            hash: [0; 32],
            uuid: [0; 16],
            name: String::new(),
            requested_tpb_count: 1,
            tpb_per_node: [0; 64],
            feature_bits: 0,
            vnc_size: 1,
        }
    }
}

fn u64_at(b: &[u8], off: usize) -> u64 {
    let mut a = [0u8; 8];
    a.copy_from_slice(&b[off..off + 8]);
    u64::from_le_bytes(a)
}

fn u32_at(b: &[u8], off: usize) -> u32 {
    let mut a = [0u8; 4];
    a.copy_from_slice(&b[off..off + 4]);
    u32::from_le_bytes(a)
}

fn c_string(b: &[u8]) -> String {
    let end = b.iter().position(|&c| c == 0).unwrap_or(b.len());
    String::from_utf8_lossy(&b[..end]).into_owned()
}

fn put_c_string(dst: &mut [u8], s: &str) {
    // Always NUL-terminated: at most len - 1 bytes of text.
    let n = s.len().min(dst.len().saturating_sub(1));
    dst[..n].copy_from_slice(&s.as_bytes()[..n]);
}

impl Header {
    /// Reads the fields of a 1024-byte header (no checks: [`check_gates`] applies them).
    pub fn parse(b: &[u8; HEADER_LEN]) -> Header {
        let mut hash = [0u8; 32];
        hash.copy_from_slice(&b[0x0AC..0x0CC]);
        let mut uuid = [0u8; 16];
        uuid.copy_from_slice(&b[0x0CC..0x0DC]);
        let mut tpb_per_node = [0u8; 64];
        tpb_per_node.copy_from_slice(&b[0x1E0..0x220]);
        Header {
            pkg_version: u64_at(b, 0x000),
            header_size: u64_at(b, 0x008),
            data_size: u64_at(b, 0x010),
            major: u64_at(b, 0x018),
            minor: u64_at(b, 0x020),
            build_version: c_string(&b[0x028..0x0A8]),
            unused_0: u32_at(b, 0x0A8),
            hash,
            uuid,
            name: c_string(&b[0x0DC..0x1DC]),
            requested_tpb_count: u32_at(b, 0x1DC),
            tpb_per_node,
            feature_bits: u64_at(b, 0x220),
            vnc_size: u32_at(b, 0x228),
        }
    }

    /// The 1024 header bytes (§2 layout; strings truncated to leave their NUL).
    pub fn to_bytes(&self) -> [u8; HEADER_LEN] {
        let mut b = [0u8; HEADER_LEN];
        b[0x000..0x008].copy_from_slice(&self.pkg_version.to_le_bytes());
        b[0x008..0x010].copy_from_slice(&self.header_size.to_le_bytes());
        b[0x010..0x018].copy_from_slice(&self.data_size.to_le_bytes());
        b[0x018..0x020].copy_from_slice(&self.major.to_le_bytes());
        b[0x020..0x028].copy_from_slice(&self.minor.to_le_bytes());
        put_c_string(&mut b[0x028..0x0A8], &self.build_version);
        b[0x0A8..0x0AC].copy_from_slice(&self.unused_0.to_le_bytes());
        b[0x0AC..0x0CC].copy_from_slice(&self.hash);
        b[0x0CC..0x0DC].copy_from_slice(&self.uuid);
        put_c_string(&mut b[0x0DC..0x1DC], &self.name);
        b[0x1DC..0x1E0].copy_from_slice(&self.requested_tpb_count.to_le_bytes());
        b[0x1E0..0x220].copy_from_slice(&self.tpb_per_node);
        b[0x220..0x228].copy_from_slice(&self.feature_bits.to_le_bytes());
        b[0x228..0x22C].copy_from_slice(&self.vnc_size.to_le_bytes());
        b
    }

    /// The uuid in its usual 8-4-4-4-12 text form.
    pub fn uuid_string(&self) -> String {
        let h: Vec<String> = self.uuid.iter().map(|b| format!("{b:02x}")).collect();
        format!(
            "{}-{}-{}-{}-{}",
            h[0..4].concat(),
            h[4..6].concat(),
            h[6..8].concat(),
            h[8..10].concat(),
            h[10..16].concat()
        )
    }

    /// The digest bytes the packager compares: 16 for pkg 2 (MD5), 32 for pkg 1 (SHA-256).
    pub fn digest(&self) -> &[u8] {
        if self.pkg_version == 1 {
            &self.hash
        } else {
            &self.hash[..16]
        }
    }
}

/// The streaming digest of a payload as stored (§3 gates 8/9): SHA-256 for pkg 1, MD5 for
/// pkg 2, fed the compressed bytes as the inflater takes them.
#[derive(Clone)]
pub enum PayloadDigest {
    /// pkg 1.
    Sha256(Sha256),
    /// pkg 2.
    Md5(Md5),
}

impl PayloadDigest {
    /// The digest `pkg_version` calls for.
    pub fn new(pkg_version: u64) -> Self {
        if pkg_version == 1 {
            PayloadDigest::Sha256(Sha256::default())
        } else {
            PayloadDigest::Md5(Md5::default())
        }
    }

    /// Feeds `bytes`.
    pub fn update(&mut self, bytes: &[u8]) {
        match self {
            PayloadDigest::Sha256(d) => d.update(bytes),
            PayloadDigest::Md5(d) => d.update(bytes),
        }
    }

    /// The digest in the header's 32-byte layout (MD5 in the first 16 bytes).
    pub fn finish(self) -> [u8; 32] {
        let mut out = [0u8; 32];
        match self {
            PayloadDigest::Sha256(d) => out.copy_from_slice(&d.finalize()),
            PayloadDigest::Md5(d) => out[..16].copy_from_slice(&d.finalize()),
        }
        out
    }
}

/// The digest of `payload` that `pkg_version` calls for (§3 gates 8/9): SHA-256 for pkg 1,
/// MD5 (in the first 16 of 32 bytes) for pkg 2.
pub fn payload_digest(pkg_version: u64, payload: &[u8]) -> [u8; 32] {
    let mut d = PayloadDigest::new(pkg_version);
    d.update(payload);
    d.finish()
}

/// One gate of §3 that a NEFF passed, for `neff inspect`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Gate {
    /// Short name (`"size floor"`).
    pub name: &'static str,
    /// What was checked, with the values.
    pub detail: String,
}

/// Applies libnrt's header gates 2–7 (§3) in libnrt's order to a file of `file_size` bytes
/// whose first bytes are `head` (at least [`HEADER_LEN`] of them once the size floor passed),
/// and returns the header and the gates passed. Nothing past the header is needed: the
/// integrity gates 8/9 run over the payload as it streams ([`integrity_gate`]).
pub fn check_gates(head: &[u8], file_size: u64) -> Result<(Header, Vec<Gate>)> {
    let mut gates = Vec::new();
    // Gate 2: size floor.
    gate(
        &mut gates,
        "size floor",
        file_size > 0x3FF,
        || {
            NeffError::invalid(format!(
                "Invalid number of NEFF bytes received {file_size:x}"
            ))
        },
        || format!("file size {file_size:#x} > 0x3ff"),
    )?;
    // A source that held fewer bytes than it said (a file truncated while opened).
    let Some(raw) = head.get(..HEADER_LEN) else {
        return Err(NeffError::invalid(format!(
            "Invalid number of NEFF bytes received {:x}",
            head.len()
        ))
        .at_gate("size floor"));
    };
    let mut b = [0u8; HEADER_LEN];
    b.copy_from_slice(raw);
    let h = Header::parse(&b);
    // Gate 3: header size.
    gate(
        &mut gates,
        "header size",
        h.header_size < file_size,
        || {
            NeffError::invalid(format!(
                "Invalid NEFF file size hdr sz: {:x}, file sz: {file_size:x}",
                h.header_size
            ))
        },
        || format!("header_size {:#x} < file size", h.header_size),
    )?;
    // Gate 4: version ceiling.
    gate(
        &mut gates,
        "version ceiling",
        h.major <= MAX_MAJOR,
        || {
            NeffError::unsupported(format!(
                "NEFF version: {}.{} is not supported, accepted version range: 0.x-2.x",
                h.major, h.minor
            ))
        },
        || format!("version {}.{} within 0.x-2.x", h.major, h.minor),
    )?;
    // Gate 5: feature trapdoor (major 2 only; majors 0 and 1 skip it; bit 63 never tested).
    gate(
        &mut gates,
        "feature trapdoor",
        !(h.major == 2 && h.feature_bits & FEATURE_TRAPDOOR != 0),
        || {
            NeffError::unsupported(format!(
                "This NEFF (version: {}.{}, features: {:#x}) has been compiled by a newer version \
                 of Neuron compiler. Features supported by this Neuron Runtime: \
                 {SUPPORTED_FEATURES:#x}. Please update the Neuron Runtime.",
                h.major,
                h.minor,
                h.feature_bits & FEATURE_TRAPDOOR
            ))
        },
        || {
            format!(
                "feature_bits {:#x} & {FEATURE_TRAPDOOR:#x} == 0",
                h.feature_bits
            )
        },
    )?;
    // Gate 6: data fit (the payload starts at 0x400 whatever header_size says).
    let room = file_size - HEADER_LEN as u64;
    gate(
        &mut gates,
        "data fit",
        room >= h.data_size,
        || {
            NeffError::invalid(format!(
                "Invalid NEFF data size({:x} vs {room:x})",
                h.data_size
            ))
        },
        || format!("data_size {:#x} <= {room:#x}", h.data_size),
    )?;
    // Gate 7: packager.
    let sha = h.pkg_version == 1;
    gate(
        &mut gates,
        "packager",
        h.pkg_version == 1 || h.pkg_version == 2,
        || NeffError::unsupported(format!("Unsupported NEFF packager: {}", h.pkg_version)),
        || {
            format!(
                "pkg_version {} ({})",
                h.pkg_version,
                if sha {
                    "tar + SHA-256"
                } else {
                    "gzip(tar) + MD5"
                }
            )
        },
    )?;
    // libnrt asserts len > 0 here (a crash); refused instead (§3 note, INF).
    if h.data_size == 0 {
        return Err(NeffError::invalid(
            "Invalid NEFF data size(0): the NEFF has no payload",
        ));
    }
    Ok((h, gates))
}

/// Gates 8/9 (§3): the payload's `digest` against the header's, recorded in `gates` when it
/// matches. Runs only when the caller asked to verify (libnrt's verify flag).
pub fn integrity_gate(gates: &mut Vec<Gate>, h: &Header, digest: &[u8; 32]) -> Result<()> {
    let sha = h.pkg_version == 1;
    gate(
        gates,
        "integrity",
        digest[..h.digest().len()] == *h.digest(),
        || {
            NeffError::invalid(if sha {
                "SHA256 mismatch!"
            } else {
                "MD5 mismatch!"
            })
        },
        || {
            format!(
                "{} of the {}-byte payload matches",
                if sha { "SHA-256" } else { "MD5" },
                h.data_size
            )
        },
    )
}

/// One gate of [`check_gates`]: refused with `err()` unless `ok`, else recorded in `gates` as
/// passed, with `detail()`.
fn gate(
    gates: &mut Vec<Gate>,
    name: &'static str,
    ok: bool,
    err: impl FnOnce() -> NeffError,
    detail: impl FnOnce() -> String,
) -> Result<()> {
    if !ok {
        return Err(err().at_gate(name));
    }
    gates.push(Gate {
        name,
        detail: detail(),
    });
    Ok(())
}
