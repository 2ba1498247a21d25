//! Every struct member `inspect` reads, at the offset the core's `abi_struct!` declarations give
//! it (`nrt_core::abi`, the layouts proven against libnrt's facts). The members libnrt's public
//! record pins (observed or inferred) are read from any libnrt; the few this project placed
//! itself (chosen) are read only from this project's library and are listed with the reason
//! (docs/INSPECT.md). A test holds each entry to its provenance in the layout tables.

use core::mem::{offset_of, size_of};

use nrt_core::abi::meta::strip_raw;
use nrt_core::abi::*;

/// A member of an ABI struct.
#[derive(Copy, Clone, Debug)]
pub struct Field {
    /// The struct (libnrt's name).
    pub ty: &'static str,
    /// The member (libnrt's name).
    pub name: &'static str,
    /// Its byte offset.
    pub off: u64,
    /// Why the reader needs it, for a member this project placed (None: pinned by libnrt's
    /// record).
    pub chosen: Option<&'static str>,
    /// Read from any libnrt (pinned members, and the one chosen convention without which no
    /// model is found); false: from this project's library only.
    pub any_library: bool,
}

macro_rules! pinned {
    ($t:ident . $f:ident) => {
        Field {
            ty: stringify!($t),
            name: strip_raw(stringify!($f)),
            off: offset_of!($t, $f) as u64,
            chosen: None,
            any_library: true,
        }
    };
}

macro_rules! chosen {
    ($t:ident . $f:ident, $why:expr) => {
        chosen!($t.$f, $why, false)
    };
    ($t:ident . $f:ident, $why:expr, $any:expr) => {
        Field {
            ty: stringify!($t),
            name: strip_raw(stringify!($f)),
            off: offset_of!($t, $f) as u64,
            chosen: Some($why),
            any_library: $any,
        }
    };
}

pub const CTX_NUM_MLA: Field = pinned!(tdrv_ctx_t.num_mla);
pub const CTX_MLA: Field = pinned!(tdrv_ctx_t.mla);
pub const MLA_IS_USED: Field = pinned!(mla_t.is_used);
pub const MLA_TPBS: Field = pinned!(mla_t._tpbs);
pub const MLA_TPB_MAP: Field = pinned!(mla_t.tpb_map);
pub const MLA_LOGGER: Field = pinned!(mla_t.dmem_logger);
pub const TPB_MAP_MAP: Field = pinned!(tpb_map_t.map);
pub const TPB_ALLOCATOR: Field = pinned!(tpb_t.tpb_allocator);
pub const TPB_MODEL_DB: Field = pinned!(tpb_t.model_db);
pub const LOG_USAGE_NC: Field = pinned!(dma_mem_log_t.memory_usage_nc);
pub const AL_TYPE: Field = pinned!(dmem_allocator_t.r#type);
pub const AL_PCORE: Field = pinned!(dmem_allocator_t.pcore);
pub const AL_HEAD: Field = pinned!(dmem_allocator_t.dummy_head);
pub const AL_TAIL: Field = pinned!(dmem_allocator_t.dummy_tail);
pub const AL_COUNT: Field = chosen!(
    dmem_allocator_t.count,
    "this project's live count of the list: a second check that the walk found every node"
);
pub const AL_BYTES: Field = chosen!(
    dmem_allocator_t.bytes,
    "this project's byte total of the list: a second check of the walked sum"
);
pub const D_PCORE: Field = pinned!(dmem_t.pcore);
pub const D_SIZE: Field = pinned!(dmem_t.size);
pub const D_PA: Field = pinned!(dmem_t._pa);
pub const D_ALLOCATED: Field = pinned!(dmem_t.allocated_size);
pub const D_MEM_TYPE: Field = pinned!(dmem_t.mem_type);
pub const D_USAGE: Field = pinned!(dmem_t.mem_usage_type);
pub const D_CHANNEL: Field = pinned!(dmem_t.tdram_channel);
pub const D_REFS: Field = pinned!(dmem_t.ref_count);
pub const D_HINT: Field = pinned!(dmem_t.hint);
pub const D_NEXT: Field = pinned!(dmem_t.next);
pub const D_PREV: Field = pinned!(dmem_t.prev);
pub const D_ALLOCATOR: Field = pinned!(dmem_t.allocator);
pub const PC_DEVICE: Field = pinned!(physical_core_t.device_id);
pub const PC_TPB: Field = pinned!(physical_core_t.device_tpb_idx);
pub const HT_SIZE: Field = pinned!(ht_t.size);
pub const HT_MASK: Field = pinned!(ht_t.size_mask);
pub const HT_COUNT: Field = pinned!(ht_t.count);
pub const HT_BUCKETS: Field = chosen!(
    ht_t.buckets,
    "the bucket array: libnrt's record says ht_node_t[] follows the 32-byte header but not how \
     a chain hangs off it; here each bucket is a head node whose `next` starts the chain",
    true
);
pub const NODE_KEY: Field = pinned!(ht_node_t.key);
pub const NODE_NEXT: Field = pinned!(ht_node_t.next);
pub const M_NAME: Field = pinned!(model_t.name);
pub const M_H_MODEL: Field = pinned!(model_t.h_model);
pub const M_REFS: Field = pinned!(model_t.ref_count);
pub const M_ALLOCATOR: Field = pinned!(model_t.dmem_allocator);
pub const M_HT_NODE: Field = pinned!(model_t.ht_node);
pub const M_NUM_SUBGRAPHS: Field = chosen!(
    model_t.num_subgraphs,
    "how many of sg_allocators are in use"
);
pub const M_SG_ALLOCATORS: Field = chosen!(
    model_t.sg_allocators,
    "a model of several subgraphs has one MODEL heap per subgraph here (libnrt moves one \
     mr_set into each model_t); dmem_allocator is the first of them"
);
pub const H_MODEL_ID: Field = pinned!(H_MODEL.id);

/// Every member above, for the provenance test and the documentation.
pub const ALL: &[Field] = &[
    CTX_NUM_MLA,
    CTX_MLA,
    MLA_IS_USED,
    MLA_TPBS,
    MLA_TPB_MAP,
    MLA_LOGGER,
    TPB_MAP_MAP,
    TPB_ALLOCATOR,
    TPB_MODEL_DB,
    LOG_USAGE_NC,
    AL_TYPE,
    AL_PCORE,
    AL_HEAD,
    AL_TAIL,
    AL_COUNT,
    AL_BYTES,
    D_PCORE,
    D_SIZE,
    D_PA,
    D_ALLOCATED,
    D_MEM_TYPE,
    D_USAGE,
    D_CHANNEL,
    D_REFS,
    D_HINT,
    D_NEXT,
    D_PREV,
    D_ALLOCATOR,
    PC_DEVICE,
    PC_TPB,
    HT_SIZE,
    HT_MASK,
    HT_COUNT,
    HT_BUCKETS,
    NODE_KEY,
    NODE_NEXT,
    M_NAME,
    M_H_MODEL,
    M_REFS,
    M_ALLOCATOR,
    M_HT_NODE,
    M_NUM_SUBGRAPHS,
    M_SG_ALLOCATORS,
    H_MODEL_ID,
];

/// Struct sizes (pinned: every one is a fact of libnrt's record).
pub const MLA_SIZE: u64 = size_of::<mla_t>() as u64;
pub const TPB_SIZE: u64 = size_of::<tpb_t>() as u64;
pub const DMEM_SIZE: usize = size_of::<dmem_t>();
pub const ALLOCATOR_SIZE: usize = size_of::<dmem_allocator_t>();
pub const HT_SIZEOF: usize = size_of::<ht_t>();
pub const NODE_SIZE: usize = size_of::<ht_node_t>();
pub const MODEL_SIZE: usize = size_of::<model_t>();
pub const PCORE_SIZE: usize = size_of::<physical_core_t>();
/// `model_t.name`'s capacity.
pub const NAME_LEN: usize = 256;
/// Devices of a context (`mla[32]`), cores of a device (`_tpbs[8]`), ledger columns.
pub const MAX_MLA: u32 = constants::MAX_MLA_PER_PROCESS as u32;
pub const TPBS: u32 = constants::TPBS_PER_MLA as u32;
pub const USAGES: usize = dma_mem_usage_type_t::COUNT;
/// Subgraph slots of a model (`sg_allocators[8]`).
pub const SUBGRAPHS: u32 = 8;

/// A little-endian `u64` at `off` of `b` (0 past its end: callers read whole structs).
pub fn u64_at(b: &[u8], off: u64) -> u64 {
    let o = off as usize;
    b.get(o..o + 8)
        .and_then(|s| s.try_into().ok())
        .map_or(0, u64::from_le_bytes)
}

/// A little-endian `u32` at `off` of `b`.
pub fn u32_at(b: &[u8], off: u64) -> u32 {
    let o = off as usize;
    b.get(o..o + 4)
        .and_then(|s| s.try_into().ok())
        .map_or(0, u32::from_le_bytes)
}

#[cfg(test)]
mod tests {
    use super::*;
    use nrt_core::abi::meta::Provenance;

    /// Each member is where the layout tables put it, and is pinned by libnrt's record unless
    /// it says why the reader needs a chosen one.
    #[test]
    fn every_member_read_is_pinned_or_named_as_chosen() {
        for f in ALL {
            let s = nrt_core::abi::struct_info(f.ty).unwrap_or_else(|| panic!("{}", f.ty));
            let info = s
                .field(f.name)
                .unwrap_or_else(|| panic!("{}.{}", f.ty, f.name));
            assert_eq!(info.offset as u64, f.off, "{}.{}", f.ty, f.name);
            match f.chosen {
                None => assert!(
                    matches!(info.provenance, Provenance::Observed | Provenance::Inferred),
                    "{}.{} is {:?}: the reader may only read pinned members from any libnrt",
                    f.ty,
                    f.name,
                    info.provenance
                ),
                Some(_) => assert_eq!(
                    info.provenance,
                    Provenance::Chosen,
                    "{}.{} is listed as chosen",
                    f.ty,
                    f.name
                ),
            }
        }
    }

    /// The chosen members are named in the user's documentation with their reason.
    #[test]
    fn the_chosen_members_are_documented() {
        let doc =
            std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../docs/INSPECT.md"))
                .expect("docs/INSPECT.md");
        for f in ALL.iter().filter(|f| f.chosen.is_some()) {
            let name = format!("{}.{}", f.ty, f.name);
            assert!(doc.contains(&name), "docs/INSPECT.md does not name {name}");
        }
    }
}
