//! The walk from the bytes: `tdrv_ctx_t` → each attached `mla_t` → each present `tpb_t` →
//! its GLOBAL allocator's `dmem_t` list and its `model_db` (`ht_t`, each node `container_of`
//! its `model_t`) → each model's MODEL allocators and their lists; and each device's
//! `dma_mem_log_t` ledger. What it finds is a [`Report`].
//!
//! The memory may be anything: a process that is changing under the reader, a core with
//! scribbled pages, a pointer into nowhere. Every pointer is read through [`Memory`] (which
//! refuses what is not mapped), every loop has a bound (list lengths, bucket counts, chain
//! lengths, name lengths, a total node budget), every address sum is checked, and whatever
//! does not hold together becomes a [`Finding`] instead of being followed.

use std::collections::{BTreeMap, HashMap, HashSet};

use nrt_core::abi::{dma_mem_location_t, dma_mem_usage_type_t, dmem_allocator_type_t};
use nrt_core::cstr::Printable;
use serde::Serialize;

use super::fields::*;
use super::source::Memory;
use super::symbol::Flavor;
use crate::scenario::fmt_bytes;

/// Nodes on one allocator list before the walk calls it a runaway.
const MAX_LIST: u64 = 1 << 20;
/// Nodes in one bucket chain of a `model_db`.
const MAX_CHAIN: u64 = 1 << 12;
/// Buckets of a `model_db` (`ht_t.size`).
const MAX_BUCKETS: u64 = 1 << 16;
/// Nodes (dmems, models) read in one walk, all lists together.
const NODE_BUDGET: u64 = 1 << 22;
/// Models read in one walk, all cores together (each is a 7744-byte read and a walk of its
/// allocators).
const MAX_MODELS: usize = 1 << 14;
/// Bytes of a hint string.
const MAX_HINT: u64 = 256;

/// `"0x…"`.
pub fn hex(v: u64) -> String {
    format!("{v:#x}")
}

/// Something in the bytes that does not hold together.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Finding {
    /// What kind: `unreadable`, `list-not-closed`, `cycle`, `back-link`, `wrong-allocator`,
    /// `on-two-lists`, `ledger-mismatch`, `model-in-two-buckets`, `duplicate-handle`,
    /// `count-mismatch`, `bad-value`, `too-long`, `changing`.
    pub kind: &'static str,
    /// Where (a core, a list, a node).
    pub at: String,
    /// What was found.
    pub message: String,
}

/// One core's ledger row and what its allocator lists hold.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct CoreReport {
    /// Device index (`mla[]`).
    pub device: u32,
    /// Core index on the device (`_tpbs[]`).
    pub core: u32,
    /// The ledger's per-core total (`memory_usage_nc[core][22]`).
    pub total_bytes: u64,
    /// The ledger's non-zero usage columns, by usage name.
    pub by_usage: BTreeMap<String, u64>,
    /// Bytes of the live dmems booked to this core, counted as the ledger counts them.
    pub listed_bytes: u64,
    /// The core's GLOBAL allocator (`tpb_allocator`), when it has one.
    pub global_allocator: Option<String>,
    /// Live dmems on the GLOBAL allocator.
    pub global_dmems: u64,
    /// Their bytes.
    pub global_bytes: u64,
    /// The core's `model_db` (`ht_t`), when it has one.
    pub model_db: Option<String>,
    /// Models in it.
    pub models: u64,
}

/// The ledger over every core.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Default)]
pub struct Ledger {
    /// Device bytes in use over every core (the sum of `[core][22]`).
    pub total_bytes: u64,
    /// Per core.
    pub cores: Vec<CoreReport>,
}

/// One resident model.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct ModelReport {
    /// `model_t.name`.
    pub name: String,
    /// `H_MODEL.id`.
    pub h_model: u32,
    /// The core whose `model_db` holds it.
    pub device: u32,
    /// See `device`.
    pub core: u32,
    /// Where the `model_t` is.
    pub address: String,
    /// `model_t.ref_count`: references held by executions in flight.
    pub ref_count: u64,
    /// Its MODEL allocators (one per subgraph).
    pub allocators: Vec<String>,
    /// Live dmems on them.
    pub dmems: u64,
    /// Their bytes, every location.
    pub bytes: u64,
    /// Device (HBM) bytes.
    pub device_bytes: u64,
    /// Host DMA bytes.
    pub host_bytes: u64,
    /// Device bytes by usage name.
    pub device_by_usage: BTreeMap<String, u64>,
}

/// One live `dmem_t`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct DmemReport {
    /// Where the `dmem_t` is.
    pub address: String,
    /// Bytes asked for.
    pub size: u64,
    /// Bytes taken (with the alignment emulation's offset).
    pub allocated_size: u64,
    /// Device physical address.
    pub pa: String,
    /// Usage type name.
    pub usage: String,
    /// `device` (HBM) or `host` (host DMA memory).
    pub location: String,
    /// HBM channel.
    pub channel: u32,
    /// The hint (what it is for), when readable.
    pub hint: Option<String>,
    /// Owners (`ref_count`).
    pub ref_count: u64,
    /// Whose list it is on: `GLOBAL nd0:nc1` or `model NAME (H_MODEL n)`.
    pub owner: String,
    /// The core it is booked to (its `pcore`), `ndD:ncC`.
    pub core: Option<String>,
}

/// What a walk found.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Default)]
pub struct Report {
    /// False when `tdrv_ctx_0` is NULL: no runtime is up (before `nrt_init`, after
    /// `nrt_close`).
    pub initialized: bool,
    /// The `tdrv_ctx_t`'s address.
    pub context: Option<String>,
    /// `tdrv_ctx_t.num_mla`.
    pub devices: u32,
    /// Per core and over all cores.
    pub ledger: Ledger,
    /// Every resident model.
    pub models: Vec<ModelReport>,
    /// The number of live dmems found.
    pub dmems: u64,
    /// Each of them.
    pub allocations: Vec<DmemReport>,
    /// Everything that does not hold together; empty when the bytes are consistent.
    pub findings: Vec<Finding>,
}

/// A list's sums.
#[derive(Default, Clone, Copy)]
struct ListSum {
    dmems: u64,
    bytes: u64,
    device_bytes: u64,
    host_bytes: u64,
    device_by_usage: [u64; USAGES],
}

struct Walker<'a> {
    mem: &'a dyn Memory,
    flavor: Flavor,
    budget: u64,
    findings: Vec<Finding>,
    /// Every dmem seen, and the list it was seen on.
    dmems: HashMap<u64, String>,
    allocations: Vec<DmemReport>,
    /// Bytes booked per core (counted as the ledger counts them), per usage and total.
    booked: BTreeMap<(u32, u32), [u64; USAGES]>,
    pcores: HashMap<u64, Option<(u32, u32)>>,
    /// Every model_db node seen, and where.
    ht_nodes: HashMap<u64, String>,
    /// Every H_MODEL seen, and where.
    handles: HashMap<u32, String>,
    models: Vec<ModelReport>,
}

fn usage_name(u: u32) -> String {
    match dma_mem_usage_type_t::from_raw(u) {
        Some(t) if (u as usize) < USAGES - 1 => t.short_name().to_string(),
        _ => format!("INVALID({u})"),
    }
}

fn by_usage(row: &[u64; USAGES]) -> BTreeMap<String, u64> {
    row[..USAGES - 1]
        .iter()
        .enumerate()
        .filter(|(_, b)| **b != 0)
        .map(|(u, b)| (usage_name(u as u32), *b))
        .collect()
}

fn core_name((d, t): (u32, u32)) -> String {
    format!("nd{d}:nc{t}")
}

impl<'a> Walker<'a> {
    fn find(&mut self, kind: &'static str, at: impl Into<String>, message: impl Into<String>) {
        self.findings.push(Finding {
            kind,
            at: at.into(),
            message: message.into(),
        });
    }

    /// `len` bytes at `addr`, or a finding saying what `what` pointed at.
    fn read(&mut self, addr: u64, len: usize, at: &str, what: &str) -> Option<Vec<u8>> {
        let mut b = vec![0u8; len];
        match self.mem.read(addr, &mut b) {
            Ok(()) => Some(b),
            Err(e) => {
                self.find(
                    "unreadable",
                    at,
                    format!("{what} at {} ({len} bytes): {e}", hex(addr)),
                );
                None
            }
        }
    }

    /// A pointer that is about to be followed: non-NULL and 8-byte aligned, or a finding.
    fn pointer_ok(&mut self, p: u64, at: &str, what: &str) -> bool {
        if !p.is_multiple_of(8) {
            self.find(
                "bad-value",
                at,
                format!("{what} {} is not 8-byte aligned", hex(p)),
            );
            return false;
        }
        true
    }

    /// Takes one node from the walk's budget; a finding when it is spent.
    fn spend(&mut self, at: &str) -> bool {
        if self.budget == 0 {
            if !self
                .findings
                .iter()
                .any(|f| f.kind == "too-long" && f.at == "walk")
            {
                self.find(
                    "too-long",
                    "walk",
                    format!("more than {NODE_BUDGET} nodes: the walk stops here ({at})"),
                );
            }
            return false;
        }
        self.budget -= 1;
        true
    }

    /// The core a `physical_core_t *` names, `None` when it is unreadable or out of range
    /// (with a finding the first time the pointer is met).
    fn pcore(&mut self, p: u64, at: &str) -> Option<(u32, u32)> {
        if let Some(c) = self.pcores.get(&p) {
            return *c;
        }
        let c = self.pcore_uncached(p, at);
        self.pcores.insert(p, c);
        c
    }

    fn pcore_uncached(&mut self, p: u64, at: &str) -> Option<(u32, u32)> {
        if p == 0 {
            self.find("bad-value", at, "pcore is NULL");
            return None;
        }
        if !self.pointer_ok(p, at, "pcore") {
            return None;
        }
        let b = self.read(p, PCORE_SIZE, at, "its physical_core_t")?;
        let (d, t) = (u32_at(&b, PC_DEVICE.off), u32_at(&b, PC_TPB.off));
        if d < MAX_MLA && t < TPBS {
            return Some((d, t));
        }
        self.find(
            "bad-value",
            at,
            format!("pcore {} names core nd{d}:nc{t}, out of range", hex(p)),
        );
        None
    }

    /// Walks the list of allocator `al` (owned by `owner`, of type `expect`): every node
    /// from `dummy_head.next` to `&dummy_tail`.
    fn walk_list(&mut self, al: u64, owner: &str, expect: dmem_allocator_type_t) -> ListSum {
        let mut sum = ListSum::default();
        let at = format!("{owner} allocator {}", hex(al));
        if !self.pointer_ok(al, &at, "allocator") {
            return sum;
        }
        let Some(a) = self.read(al, ALLOCATOR_SIZE, &at, "the dmem_allocator_t") else {
            return sum;
        };
        let ty = u32_at(&a, AL_TYPE.off);
        if ty != expect as u32 {
            self.find(
                "bad-value",
                &at,
                format!(
                    "type is {ty}, not {} ({})",
                    expect as u32,
                    if expect == dmem_allocator_type_t::DMEM_ALLOCATOR_TYPE_GLOBAL {
                        "GLOBAL"
                    } else {
                        "MODEL"
                    }
                ),
            );
        }
        let al_core = {
            let p = u64_at(&a, AL_PCORE.off);
            self.pcore(p, &at)
        };
        let (head, tail) = (al.wrapping_add(AL_HEAD.off), al.wrapping_add(AL_TAIL.off));
        let tail_prev = u64_at(&a, AL_TAIL.off + D_PREV.off);
        let mut prev = head;
        let mut cur = u64_at(&a, AL_HEAD.off + D_NEXT.off);
        let mut seen: HashSet<u64> = HashSet::new();
        let mut closed = false;
        loop {
            if cur == tail {
                if tail_prev != prev {
                    self.find(
                        "back-link",
                        &at,
                        format!(
                            "dummy_tail.prev is {} but the last node is {}",
                            hex(tail_prev),
                            hex(prev)
                        ),
                    );
                }
                closed = true;
                break;
            }
            if cur == 0 {
                self.find(
                    "list-not-closed",
                    &at,
                    format!(
                        "after {} node(s) the next pointer of {} is NULL, not dummy_tail {}",
                        sum.dmems,
                        hex(prev),
                        hex(tail)
                    ),
                );
                break;
            }
            if cur == head || seen.contains(&cur) {
                self.find(
                    "cycle",
                    &at,
                    format!(
                        "after {} node(s) the list comes back to {} (next of {})",
                        sum.dmems,
                        hex(cur),
                        hex(prev)
                    ),
                );
                break;
            }
            if sum.dmems >= MAX_LIST {
                self.find(
                    "too-long",
                    &at,
                    format!("more than {MAX_LIST} nodes without reaching dummy_tail"),
                );
                break;
            }
            if !self.pointer_ok(cur, &at, &format!("the next pointer of {}", hex(prev))) {
                break;
            }
            if let Some(other) = self.dmems.get(&cur) {
                let other = other.clone();
                self.find(
                    "on-two-lists",
                    &at,
                    format!(
                        "node {} (next of {}) is also on {other}",
                        hex(cur),
                        hex(prev)
                    ),
                );
                break;
            }
            if !self.spend(&at) {
                break;
            }
            let Some(d) = self.read(
                cur,
                DMEM_SIZE,
                &at,
                &format!("node #{} (the next of {})", sum.dmems + 1, hex(prev)),
            ) else {
                break;
            };
            seen.insert(cur);
            self.dmems.insert(cur, at.clone());
            let node_at = format!("dmem {} on {at}", hex(cur));
            if u64_at(&d, D_PREV.off) != prev {
                self.find(
                    "back-link",
                    &node_at,
                    format!(
                        "prev is {}, but it follows {}",
                        hex(u64_at(&d, D_PREV.off)),
                        hex(prev)
                    ),
                );
            }
            let owner_al = u64_at(&d, D_ALLOCATOR.off);
            if owner_al != al {
                self.find(
                    "wrong-allocator",
                    &node_at,
                    format!(
                        "its allocator is {}, not the list's {}",
                        hex(owner_al),
                        hex(al)
                    ),
                );
            }
            self.record(&d, cur, owner, &node_at, al_core, &mut sum);
            prev = cur;
            cur = u64_at(&d, D_NEXT.off);
        }
        if closed && self.flavor == Flavor::NrtDmem {
            let (count, bytes) = (u64_at(&a, AL_COUNT.off), u64_at(&a, AL_BYTES.off));
            if count != sum.dmems || bytes != sum.bytes {
                self.find(
                    "count-mismatch",
                    &at,
                    format!(
                        "the allocator counts {count} dmem(s) of {bytes} B; its list holds {} of {} B",
                        sum.dmems, sum.bytes
                    ),
                );
            }
        }
        sum
    }

    /// Books one dmem node: its report line, the list's sums and its core's.
    fn record(
        &mut self,
        d: &[u8],
        addr: u64,
        owner: &str,
        at: &str,
        al_core: Option<(u32, u32)>,
        sum: &mut ListSum,
    ) {
        let (size, allocated) = (u64_at(d, D_SIZE.off), u64_at(d, D_ALLOCATED.off));
        let (loc, usage) = (u32_at(d, D_MEM_TYPE.off), u32_at(d, D_USAGE.off));
        let pcore = u64_at(d, D_PCORE.off);
        let core = self.pcore(pcore, at);
        if core.is_some() && al_core.is_some() && core != al_core {
            self.find(
                "bad-value",
                at,
                format!(
                    "booked to {} but on the list of an allocator of {}",
                    core.map(core_name).unwrap_or_default(),
                    al_core.map(core_name).unwrap_or_default()
                ),
            );
        }
        let host = loc == dma_mem_location_t::HOST_DRAM as u32;
        let device = loc == dma_mem_location_t::TONGA_DRAM as u32;
        if !host && !device {
            self.find(
                "bad-value",
                at,
                format!("location {loc} is neither host (1) nor device (2)"),
            );
        }
        let valid_usage = (usage as usize) < USAGES - 1;
        if !valid_usage {
            self.find(
                "bad-value",
                at,
                format!("usage type {usage} is out of range (0..=21)"),
            );
        }
        if allocated < size {
            self.find(
                "bad-value",
                at,
                format!("allocated_size {allocated} is less than size {size}"),
            );
        }
        let hint_ptr = u64_at(d, D_HINT.off);
        let hint = (hint_ptr != 0).then(|| self.c_string(hint_ptr, MAX_HINT, at, "hint"));
        let refs = u64_at(d, D_REFS.off);
        sum.dmems += 1;
        sum.bytes = sum.bytes.wrapping_add(allocated);
        if host {
            sum.host_bytes = sum.host_bytes.wrapping_add(allocated);
        }
        if device {
            sum.device_bytes = sum.device_bytes.wrapping_add(allocated);
            if valid_usage {
                sum.device_by_usage[usage as usize] =
                    sum.device_by_usage[usage as usize].wrapping_add(allocated);
            }
        }
        // The ledger counts device bytes here (this project's library: host DMA bytes have
        // their own rows, docs/INSPECT.md), every byte in libnrt's.
        let counted = match self.flavor {
            Flavor::NrtDmem => device,
            Flavor::Libnrt => host || device,
        };
        if let (true, true, Some(c)) = (counted, valid_usage, core) {
            let row = self.booked.entry(c).or_insert([0; USAGES]);
            row[usage as usize] = row[usage as usize].wrapping_add(allocated);
            row[USAGES - 1] = row[USAGES - 1].wrapping_add(allocated);
        }
        self.allocations.push(DmemReport {
            address: hex(addr),
            size,
            allocated_size: allocated,
            pa: hex(u64_at(d, D_PA.off)),
            usage: usage_name(usage),
            location: match (host, device) {
                (true, _) => "host".into(),
                (_, true) => "device".into(),
                _ => format!("invalid({loc})"),
            },
            channel: u32_at(d, D_CHANNEL.off),
            hint: hint.flatten(),
            ref_count: match self.flavor {
                // This project keeps transient pins above the owners (bits 32..).
                Flavor::NrtDmem => refs & 0xffff_ffff,
                Flavor::Libnrt => refs,
            },
            owner: owner.to_string(),
            core: core.map(core_name),
        });
    }

    /// A NUL-terminated string of at most `max` bytes at `p` (what is readable of it);
    /// `None` with a finding when nothing is readable there.
    fn c_string(&mut self, p: u64, max: u64, at: &str, what: &str) -> Option<String> {
        let n = self.mem.readable_from(p).min(max);
        if n == 0 {
            self.find(
                "unreadable",
                at,
                format!("{what} pointer {} points at unmapped memory", hex(p)),
            );
            return None;
        }
        let mut b = vec![0u8; n as usize];
        if let Err(e) = self.mem.read(p, &mut b) {
            self.find("unreadable", at, format!("{what} at {}: {e}", hex(p)));
            return None;
        }
        let end = b.iter().position(|&c| c == 0).unwrap_or(b.len());
        Some(String::from_utf8_lossy(&b[..end]).into_owned())
    }

    /// Walks core `c`'s `model_db` at `ht`; returns how many models it holds.
    fn walk_models(&mut self, ht: u64, c: (u32, u32)) -> u64 {
        let at = format!("{} model_db {}", core_name(c), hex(ht));
        if !self.pointer_ok(ht, &at, "model_db") {
            return 0;
        }
        let Some(h) = self.read(ht, HT_SIZEOF, &at, "the ht_t") else {
            return 0;
        };
        let (size, mask, count) = (
            u64_at(&h, HT_SIZE.off),
            u64_at(&h, HT_MASK.off),
            u64_at(&h, HT_COUNT.off),
        );
        if size == 0 {
            if count != 0 {
                self.find(
                    "count-mismatch",
                    &at,
                    format!("no buckets but a count of {count}"),
                );
            }
            return 0;
        }
        if !size.is_power_of_two() || size > MAX_BUCKETS || mask != size - 1 {
            self.find(
                "bad-value",
                &at,
                format!(
                    "{size} buckets with mask {mask:#x} (a power of two up to {MAX_BUCKETS} and its mask expected)"
                ),
            );
            return 0;
        }
        let Some(buckets) = self.read(
            ht.wrapping_add(HT_BUCKETS.off),
            size as usize * NODE_SIZE,
            &at,
            "the bucket array",
        ) else {
            return 0;
        };
        let mut found = 0u64;
        for i in 0..size {
            let mut node = u64_at(&buckets, i * NODE_SIZE as u64 + NODE_NEXT.off);
            let mut chain = 0u64;
            let bucket_at = format!("{at} bucket {i}");
            while node != 0 {
                if chain >= MAX_CHAIN {
                    self.find(
                        "too-long",
                        &bucket_at,
                        format!("more than {MAX_CHAIN} nodes"),
                    );
                    break;
                }
                chain += 1;
                if let Some(other) = self.ht_nodes.get(&node) {
                    let other = other.clone();
                    self.find(
                        if other == bucket_at {
                            "cycle"
                        } else {
                            "model-in-two-buckets"
                        },
                        &bucket_at,
                        format!("model node {} is also in {other}", hex(node)),
                    );
                    break;
                }
                if self.models.len() >= MAX_MODELS {
                    self.find(
                        "too-long",
                        &bucket_at,
                        format!("more than {MAX_MODELS} models: the walk stops here"),
                    );
                    return found;
                }
                if !self.pointer_ok(node, &bucket_at, "model node") || !self.spend(&bucket_at) {
                    break;
                }
                self.ht_nodes.insert(node, bucket_at.clone());
                let Some(model) = node.checked_sub(M_HT_NODE.off) else {
                    self.find(
                        "bad-value",
                        &bucket_at,
                        format!("model node {} is below its model_t", hex(node)),
                    );
                    break;
                };
                let Some(m) = self.read(model, MODEL_SIZE, &bucket_at, "a model_t") else {
                    break;
                };
                found += 1;
                self.model(&m, model, c, &bucket_at);
                node = u64_at(&m, M_HT_NODE.off + NODE_NEXT.off);
            }
        }
        if found != count {
            self.find(
                "count-mismatch",
                &at,
                format!("the table counts {count} model(s); its buckets hold {found}"),
            );
        }
        found
    }

    fn model(&mut self, m: &[u8], addr: u64, c: (u32, u32), bucket_at: &str) {
        let raw = &m[M_NAME.off as usize..M_NAME.off as usize + NAME_LEN];
        let end = raw.iter().position(|&b| b == 0);
        let name = String::from_utf8_lossy(&raw[..end.unwrap_or(NAME_LEN)]).into_owned();
        let h = u32_at(m, M_H_MODEL.off + H_MODEL_ID.off);
        let at = format!("model {} (H_MODEL {h}) at {}", Printable(&name), hex(addr));
        if end.is_none() {
            self.find(
                "bad-value",
                &at,
                format!("name is not NUL-terminated within {NAME_LEN} bytes"),
            );
        }
        let key = u64_at(m, M_HT_NODE.off + NODE_KEY.off);
        if key != u64::from(h) {
            self.find(
                "bad-value",
                &at,
                format!("its model_db key is {key}, its H_MODEL {h} ({bucket_at})"),
            );
        }
        if let Some(other) = self.handles.get(&h) {
            let other = other.clone();
            self.find(
                "duplicate-handle",
                &at,
                format!("H_MODEL {h} is also {other}"),
            );
        }
        self.handles.insert(h, at.clone());
        let mut allocators = vec![u64_at(m, M_ALLOCATOR.off)];
        if allocators[0] == 0 {
            self.find("bad-value", &at, "dmem_allocator is NULL");
            allocators.clear();
        }
        if self.flavor == Flavor::NrtDmem {
            let n = u32_at(m, M_NUM_SUBGRAPHS.off);
            if n > SUBGRAPHS {
                self.find(
                    "bad-value",
                    &at,
                    format!("{n} subgraphs (at most {SUBGRAPHS})"),
                );
            }
            for s in 0..u64::from(n.min(SUBGRAPHS)) {
                let a = u64_at(m, M_SG_ALLOCATORS.off + 8 * s);
                if a != 0 && !allocators.contains(&a) {
                    allocators.push(a);
                }
            }
        }
        let owner = format!("model {} (H_MODEL {h})", Printable(&name));
        let mut total = ListSum::default();
        for &a in &allocators {
            let s = self.walk_list(a, &owner, dmem_allocator_type_t::DMEM_ALLOCATOR_TYPE_MODEL);
            total.dmems += s.dmems;
            total.bytes = total.bytes.wrapping_add(s.bytes);
            total.device_bytes = total.device_bytes.wrapping_add(s.device_bytes);
            total.host_bytes = total.host_bytes.wrapping_add(s.host_bytes);
            for (t, v) in total.device_by_usage.iter_mut().zip(s.device_by_usage) {
                *t = t.wrapping_add(v);
            }
        }
        self.models.push(ModelReport {
            name,
            h_model: h,
            device: c.0,
            core: c.1,
            address: hex(addr),
            ref_count: u64_at(m, M_REFS.off),
            allocators: allocators.iter().map(|a| hex(*a)).collect(),
            dmems: total.dmems,
            bytes: total.bytes,
            device_bytes: total.device_bytes,
            host_bytes: total.host_bytes,
            device_by_usage: by_usage(&total.device_by_usage),
        });
    }
}

/// Walks the context at `ctx` (the value of `tdrv_ctx_0`) in `mem`.
pub fn walk(mem: &dyn Memory, ctx: u64, flavor: Flavor) -> Report {
    let mut w = Walker {
        mem,
        flavor,
        budget: NODE_BUDGET,
        findings: Vec::new(),
        dmems: HashMap::new(),
        allocations: Vec::new(),
        booked: BTreeMap::new(),
        pcores: HashMap::new(),
        ht_nodes: HashMap::new(),
        handles: HashMap::new(),
        models: Vec::new(),
    };
    if ctx == 0 {
        return Report::default();
    }
    let mut r = Report {
        initialized: true,
        context: Some(hex(ctx)),
        ..Default::default()
    };
    let at = format!("tdrv_ctx_t {}", hex(ctx));
    let num_mla = if w.pointer_ok(ctx, &at, "tdrv_ctx_0") {
        w.read(
            ctx.wrapping_add(CTX_NUM_MLA.off),
            4,
            &at,
            "tdrv_ctx_0's context",
        )
        .map(|b| u32_at(&b, 0))
    } else {
        None
    };
    let mut ledger_rows: BTreeMap<(u32, u32), [u64; USAGES]> = BTreeMap::new();
    if let Some(n) = num_mla {
        r.devices = n;
        if n > MAX_MLA {
            w.find(
                "bad-value",
                &at,
                format!("num_mla is {n} (at most {MAX_MLA})"),
            );
        }
        for d in 0..n.min(MAX_MLA) {
            let mla = ctx
                .wrapping_add(CTX_MLA.off)
                .wrapping_add(u64::from(d) * MLA_SIZE);
            let dat = format!("nd{d} (mla_t {})", hex(mla));
            let Some(used) = w.read(mla.wrapping_add(MLA_IS_USED.off), 1, &dat, "is_used") else {
                continue;
            };
            if used[0] == 0 {
                continue;
            }
            let Some(map) = w.read(
                mla.wrapping_add(MLA_TPB_MAP.off + TPB_MAP_MAP.off),
                TPBS as usize,
                &dat,
                "tpb_map",
            ) else {
                continue;
            };
            let rows = w.read(
                mla.wrapping_add(MLA_LOGGER.off + LOG_USAGE_NC.off),
                TPBS as usize * USAGES * 8,
                &dat,
                "the dmem_logger ledger",
            );
            for t in 0..TPBS {
                if map[t as usize] == 0 {
                    continue;
                }
                let mut row = [0u64; USAGES];
                if let Some(rows) = &rows {
                    for (u, v) in row.iter_mut().enumerate() {
                        *v = u64_at(rows, (u64::from(t) * USAGES as u64 + u as u64) * 8);
                    }
                }
                ledger_rows.insert((d, t), row);
                let tpb = mla
                    .wrapping_add(MLA_TPBS.off)
                    .wrapping_add(u64::from(t) * TPB_SIZE);
                let cat = core_name((d, t));
                let ptrs = (
                    w.read(
                        tpb.wrapping_add(TPB_ALLOCATOR.off),
                        8,
                        &cat,
                        "tpb_allocator",
                    ),
                    w.read(tpb.wrapping_add(TPB_MODEL_DB.off), 8, &cat, "model_db"),
                );
                let (al, db) = (
                    ptrs.0.map_or(0, |b| u64_at(&b, 0)),
                    ptrs.1.map_or(0, |b| u64_at(&b, 0)),
                );
                let global = if al != 0 {
                    w.walk_list(
                        al,
                        &format!("GLOBAL {cat}"),
                        dmem_allocator_type_t::DMEM_ALLOCATOR_TYPE_GLOBAL,
                    )
                } else {
                    ListSum::default()
                };
                let models = if db != 0 {
                    w.walk_models(db, (d, t))
                } else {
                    0
                };
                r.ledger.cores.push(CoreReport {
                    device: d,
                    core: t,
                    total_bytes: row[USAGES - 1],
                    by_usage: by_usage(&row),
                    listed_bytes: 0,
                    global_allocator: (al != 0).then(|| hex(al)),
                    global_dmems: global.dmems,
                    global_bytes: global.bytes,
                    model_db: (db != 0).then(|| hex(db)),
                    models,
                });
                r.ledger.total_bytes = r.ledger.total_bytes.wrapping_add(row[USAGES - 1]);
            }
        }
    }
    // The ledger against the lists, core by core.
    for c in &mut r.ledger.cores {
        let key = (c.device, c.core);
        let booked = w.booked.get(&key).copied().unwrap_or([0; USAGES]);
        c.listed_bytes = booked[USAGES - 1];
        let row = ledger_rows.get(&key).copied().unwrap_or([0; USAGES]);
        if row != booked {
            let diffs: Vec<String> = (0..USAGES)
                .filter(|&u| row[u] != booked[u])
                .map(|u| {
                    format!(
                        "{} ledger {} lists {}",
                        if u == USAGES - 1 {
                            "TOTAL".to_string()
                        } else {
                            usage_name(u as u32)
                        },
                        row[u],
                        booked[u]
                    )
                })
                .collect();
            w.findings.push(Finding {
                kind: "ledger-mismatch",
                at: core_name(key),
                message: format!(
                    "the ledger books {} but the allocator lists hold {} ({})",
                    fmt_bytes(row[USAGES - 1]),
                    fmt_bytes(booked[USAGES - 1]),
                    diffs.join("; ")
                ),
            });
        }
    }
    let stray: Vec<((u32, u32), u64)> = w
        .booked
        .iter()
        .filter(|(key, _)| !ledger_rows.contains_key(key))
        .map(|(key, b)| (*key, b[USAGES - 1]))
        .collect();
    for (key, bytes) in stray {
        let msg = format!(
            "dmems of {} are booked to this core, which is not attached",
            fmt_bytes(bytes)
        );
        w.find("ledger-mismatch", core_name(key), msg);
    }
    r.models = w.models;
    r.dmems = w.allocations.len() as u64;
    r.allocations = w.allocations;
    r.findings = w.findings;
    r
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::inspect::source::ReadFail;

    /// Memory made of byte blocks at addresses; anything else is unmapped.
    struct Fake(Vec<(u64, Vec<u8>)>);

    impl Fake {
        fn block(&mut self, at: u64, len: usize) {
            self.0.push((at, vec![0; len]));
        }
        fn put(&mut self, at: u64, bytes: &[u8]) {
            let (base, b) = self
                .0
                .iter_mut()
                .find(|(a, b)| (*a..*a + b.len() as u64).contains(&at))
                .expect("a block");
            let o = (at - *base) as usize;
            b[o..o + bytes.len()].copy_from_slice(bytes);
        }
        fn u64(&mut self, at: u64, v: u64) {
            self.put(at, &v.to_le_bytes());
        }
    }

    impl Memory for Fake {
        fn read(&self, addr: u64, buf: &mut [u8]) -> Result<(), ReadFail> {
            let (base, b) = self
                .0
                .iter()
                .find(|(a, b)| (*a..*a + b.len() as u64).contains(&addr))
                .ok_or(ReadFail::Unmapped)?;
            let o = (addr - base) as usize;
            let src = b.get(o..o + buf.len()).ok_or(ReadFail::Unmapped)?;
            buf.copy_from_slice(src);
            Ok(())
        }
        fn readable_from(&self, addr: u64) -> u64 {
            self.0
                .iter()
                .find(|(a, b)| (*a..*a + b.len() as u64).contains(&addr))
                .map_or(0, |(a, b)| a + b.len() as u64 - addr)
        }
    }

    const CTX: u64 = 0x1000_0000;
    const AL: u64 = 0x4000_0000;
    const DB: u64 = 0x5000_0000;
    const PCORE: u64 = 0x6000_0000;

    /// A context with device 0 attached, core 0 present, its GLOBAL allocator empty and its
    /// model_db empty (`buckets` buckets).
    fn one_core(buckets: u64) -> Fake {
        let mut m = Fake(Vec::new());
        m.block(CTX, core::mem::size_of::<nrt_core::abi::tdrv_ctx_t>());
        m.block(AL, ALLOCATOR_SIZE);
        m.block(DB, HT_SIZEOF + 64 * NODE_SIZE);
        m.block(PCORE, PCORE_SIZE);
        m.put(CTX + CTX_NUM_MLA.off, &1u32.to_le_bytes());
        let mla = CTX + CTX_MLA.off;
        m.put(mla + MLA_IS_USED.off, &[1]);
        m.put(mla + MLA_TPB_MAP.off + TPB_MAP_MAP.off, &[1]);
        m.u64(mla + MLA_TPBS.off + TPB_ALLOCATOR.off, AL);
        m.u64(mla + MLA_TPBS.off + TPB_MODEL_DB.off, DB);
        m.u64(AL + AL_PCORE.off, PCORE);
        m.u64(AL + AL_HEAD.off + D_NEXT.off, AL + AL_TAIL.off);
        m.u64(AL + AL_TAIL.off + D_PREV.off, AL + AL_HEAD.off);
        m.u64(DB + HT_SIZE.off, buckets);
        m.u64(DB + HT_MASK.off, buckets.wrapping_sub(1));
        m
    }

    fn kinds(r: &Report) -> Vec<&'static str> {
        r.findings.iter().map(|f| f.kind).collect()
    }

    #[test]
    fn an_empty_core_is_consistent() {
        let m = one_core(64);
        let r = walk(&m, CTX, Flavor::Libnrt);
        assert!(r.findings.is_empty(), "{:?}", r.findings);
        assert_eq!(r.ledger.cores.len(), 1);
        assert_eq!(r.dmems, 0);
        assert!(!walk(&m, 0, Flavor::Libnrt).initialized);
    }

    #[test]
    fn garbage_headers_are_findings() {
        // A ledger that books bytes no list holds.
        let mut m = one_core(64);
        let cell = CTX + CTX_MLA.off + MLA_LOGGER.off + LOG_USAGE_NC.off + 22 * 8;
        m.u64(cell, 4096);
        assert_eq!(kinds(&walk(&m, CTX, Flavor::Libnrt)), ["ledger-mismatch"]);
        // A bucket count that is no power of two, or absurd.
        for n in [3, 1 << 40] {
            let m = one_core(n);
            assert_eq!(kinds(&walk(&m, CTX, Flavor::Libnrt)), ["bad-value"], "{n}");
        }
        // num_mla past 32: reported, and the walk stays inside mla[32].
        let mut m = one_core(64);
        m.put(CTX + CTX_NUM_MLA.off, &1000u32.to_le_bytes());
        assert!(kinds(&walk(&m, CTX, Flavor::Libnrt)).contains(&"bad-value"));
        // The list's head points at itself: a cycle, found at once.
        let mut m = one_core(64);
        m.u64(AL + AL_HEAD.off + D_NEXT.off, AL + AL_HEAD.off);
        assert_eq!(kinds(&walk(&m, CTX, Flavor::Libnrt)), ["cycle"]);
        // A context pointer into nowhere, or misaligned.
        let m = one_core(64);
        assert_eq!(kinds(&walk(&m, 0x10, Flavor::Libnrt)), ["unreadable"]);
        assert_eq!(kinds(&walk(&m, CTX + 1, Flavor::Libnrt)), ["bad-value"]);
    }

    #[test]
    fn a_dmem_is_booked_to_its_core_and_checked_against_its_list() {
        let mut m = one_core(64);
        let d = 0x7000_0000u64;
        m.block(d, DMEM_SIZE);
        m.u64(AL + AL_HEAD.off + D_NEXT.off, d);
        m.u64(AL + AL_TAIL.off + D_PREV.off, d);
        m.u64(d + D_PREV.off, AL + AL_HEAD.off);
        m.u64(d + D_NEXT.off, AL + AL_TAIL.off);
        m.u64(d + D_ALLOCATOR.off, AL);
        m.u64(d + D_PCORE.off, PCORE);
        m.u64(d + D_SIZE.off, 1 << 20);
        m.u64(d + D_ALLOCATED.off, 1 << 20);
        m.put(d + D_MEM_TYPE.off, &2u32.to_le_bytes());
        let tensor = dma_mem_usage_type_t::DMA_MEM_USAGE_TYPE_TENSOR as u64;
        m.put(d + D_USAGE.off, &(tensor as u32).to_le_bytes());
        let row = CTX + CTX_MLA.off + MLA_LOGGER.off + LOG_USAGE_NC.off;
        m.u64(row + tensor * 8, 1 << 20);
        m.u64(row + 22 * 8, 1 << 20);
        let r = walk(&m, CTX, Flavor::Libnrt);
        assert!(r.findings.is_empty(), "{:?}", r.findings);
        assert_eq!(r.dmems, 1);
        assert_eq!(r.allocations[0].usage, "TENSOR");
        assert_eq!(r.allocations[0].owner, "GLOBAL nd0:nc0");
        assert_eq!(r.ledger.total_bytes, 1 << 20);
        // On another allocator's say-so, and with a broken back link.
        m.u64(d + D_ALLOCATOR.off, 0x1234_5678);
        m.u64(d + D_PREV.off, 0);
        let k = kinds(&walk(&m, CTX, Flavor::Libnrt));
        assert!(
            k.contains(&"wrong-allocator") && k.contains(&"back-link"),
            "{k:?}"
        );
    }
}
