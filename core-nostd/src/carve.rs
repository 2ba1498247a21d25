//! The carve allocator: an out-of-band device address-range allocator, what the kernel driver
//! does per HBM channel (public ABI §3 "How the driver carves memory").
//!
//! Device memory cannot hold the allocator's own bookkeeping (the host cannot cheaply touch it,
//! and on a simulated device it may not exist at all), so every block — free or used — is
//! described by a node in a fixed-capacity array *inside the struct*; the managed range
//! `[base, base + size)` is never read or written. Offsets and sizes are `u64`.
//!
//! # Algorithm
//!
//! TLSF-style two-level segregated free lists: a first-level class per power of two and 32
//! linear second-level classes inside it (class width ≤ 1/32 of its lower bound), each with a
//! list head and a bitmap bit, so finding a non-empty class is two bit scans. On top of
//! textbook TLSF:
//!
//! * **Good fit for exact holes.** Textbook TLSF rounds a request up to the next class and so
//!   never reuses a freed hole of exactly the requested size when that hole sits in the
//!   request's own class. [`Carve::alloc`] first scans at most [`OWN_CLASS_SCAN`] entries of the
//!   request's own class (first fit: blocks too small are skipped, and blocks of one class
//!   differ by less than 1/32), then takes the next class up, then — for alignments above the
//!   granule — the class that guarantees an aligned fit. Every step is bounded, so alloc stays
//!   O(1)-class. Only a request that would otherwise be refused scans its own class to the end
//!   (so "out of space" is never reported while a fitting block of that class exists).
//! * **Address-leaning lists.** The driver's pools are first-fit (lowest address). A freed
//!   block goes to the head of its class list unless the head has the lower address, in which
//!   case it goes right behind it. That one comparison, with a node the insert touches anyway,
//!   makes allocation lean toward low addresses, so live blocks pack low and large holes
//!   survive. On trace A (docs/PERFORMANCE.md), mean utilisation at the first failure goes
//!   from 0.862 with textbook TLSF LIFO lists to 0.918 across 10 seeds.
//! * **Native alignment.** The head fragment in front of an aligned start is split off as its
//!   own free block instead of being wasted.
//! * **Immediate coalescing.** Each node links to its physical neighbours, so free merges with
//!   free neighbours in O(1).
//! * **Checked ids.** An allocation is named by a [`CarveId`] (node index + generation); a
//!   double free or a stale id is an error ([`CarveError::InvalidId`]), never corruption.
//!
//! # Address-ordered first fit ([`Policy::FirstFit`])
//!
//! The kernel driver's pools are genalloc bitmaps searched first fit (docs/PLACEMENT.md). A
//! carve set up with [`Carve::init_with`] and [`Policy::FirstFit`] keeps the same block chain
//! and node arena but indexes its free blocks differently. Because free blocks are always
//! coalesced, the lowest free block whose aligned start still holds the request is exactly the
//! lowest run of free granules a bitmap first-fit search would find, so placement is the
//! bitmap's without scanning bits. The index has two levels:
//!
//! * **Buckets.** The range is cut into [`FF_BUCKETS`] (16 384) equal address buckets of a
//!   power-of-two number of granules. A free block belongs to the bucket of its *last*
//!   granule (allocation takes a block's front, so a shrinking block keeps its bucket). A
//!   max summary over the buckets' largest blocks (`carve/summary.rs`: 16 384 exact `u32`s,
//!   then 1 024 and 32 saturating `u16` bounds; one 64-byte line per level, scanned with SSE2
//!   on x86-64) gives the lowest bucket whose largest block fits in three line scans from
//!   the top. Level 0 is exact; the levels above are *upper bounds*: a larger maximum is
//!   carried up at once (stopping at the first entry already as large), a smaller one is not,
//!   and the search tightens an entry it finds too high (to its line's maximum) and goes on
//!   with the next candidate. Each tightening pays for one earlier decrease, so a search
//!   stays three line scans amortised.
//! * **Per-bucket treaps.** Inside a bucket, the free blocks form a treap keyed by address
//!   (the free-list links serve as child links, plus a parent link), each node augmented with
//!   the largest free block of its subtree and of each child's subtree, in granules (so the
//!   walk and the fix-ups decide from the node in hand, never loading a sibling). Priorities
//!   are a hash of the node index, so the shape does not depend on the trace.
//!
//! Then:
//!
//! * an unaligned request takes the lowest fitting bucket and walks down its treap once
//!   (left subtree if its maximum fits, else this block, else the right subtree);
//! * an aligned request visits, in address order, only buckets and subtrees whose maximum is
//!   at least the request, stopping at the first block where it fits aligned;
//! * an allocation from a block's front keeps the free remainder in the block's node (the
//!   allocation gets a fresh node): same treap position, one maxima fix-up, no rotation. A
//!   freed block below a free one is absorbed by it the same way. Other splits and merges
//!   update a block in place or move it between buckets.
//!
//! Everything is O(log blocks) expected plus a constant for the summary; nothing is
//! proportional to the pool's size in pages. [`Carve::largest_free`] and
//! [`Carve::largest_aligned`] read level 0 (one line scan per 16 buckets, a diagnostics
//! path). A first-fit carve never places elsewhere to save nodes: when the block first fit
//! chose needs more nodes than are spare it refuses with [`CarveError::NodesExhausted`] (a
//! simulation limit: the driver has none).
//!
//! With immediate coalescing there is at most one free block per used block plus one, so a
//! `Carve<N>` holds at least `(N - 1) / 2` live allocations whatever the pattern. Running out of
//! nodes is [`CarveError::NodesExhausted`], distinct from [`CarveError::OutOfSpace`].
//!
//! The all-zero value is a valid, uninitialised carve ([`ZeroValid`]), so large instances live
//! in `.bss` or a zeroed allocation; [`Carve::init`] touches only the header and one node, so the
//! node array costs nothing until it is used (a first-fit carve's bucket index, 130 KiB, is
//! cleared only when a first-fit init has used it before).
#![deny(unsafe_code)]

use core::fmt;
use core::num::NonZeroU64;

use crate::abi::meta::ZeroValid;
use crate::driver::{errno, Errno, PoolStats};

mod check;
mod firstfit;
mod summary;
mod tlsf;
mod types;

use summary::*;
use tlsf::*;
pub use types::*;

/// log2 of the second-level class count.
const SL_LOG2: u32 = 5;
/// Second-level classes per first-level class.
const SL: usize = 1 << SL_LOG2;
/// First-level classes: sizes below `SL` share class 0; `2^f` (f ≥ 5) gets class `f - 4`.
const FL: usize = 64 - SL_LOG2 as usize + 1;
/// Entries of a size class [`Carve::alloc`] examines before moving up a class (the bound that
/// keeps the good-fit scan O(1)).
pub const OWN_CLASS_SCAN: u32 = 32;
/// The largest node capacity a carve may have (indices and generations share a `u64` id).
pub const MAX_NODES: usize = (u32::MAX - 1) as usize;
/// Address buckets of a [`Policy::FirstFit`] carve (a power of two): the range is cut into this
/// many equal buckets (a power-of-two number of granules each), every free block is indexed in
/// the treap of the bucket holding its last granule, and a max summary over the buckets'
/// largest blocks (`carve/summary.rs`) finds the lowest bucket that can hold a request.
pub const FF_BUCKETS: usize = 16384;
/// Node index 0 is "none"; node `i` lives at `nodes[i - 1]`.
const NIL: u32 = 0;
const UNUSED: u8 = 0;
const FREE: u8 = 1;
const USED: u8 = 2;

/// One block descriptor (free, used, or an unused slot on the spare stack).
///
/// `repr(C)` with the fields both policies use in the first 40 bytes and the first-fit tree's
/// last: the good-fit carve never reads the last 16 bytes, so the 8 bytes the child maxima
/// added do not spread its hot fields over more cache lines (docs/PERFORMANCE.md).
#[derive(Copy, Clone)]
#[repr(C)]
struct Node {
    addr: u64,
    size: u64,
    prev_phys: u32,
    next_phys: u32,
    /// Free-list links while FREE (left / right child under [`Policy::FirstFit`]);
    /// `next_free` also chains the spare stack while UNUSED.
    prev_free: u32,
    next_free: u32,
    /// Bumped each time the node becomes USED; never reset (not even by `init`).
    generation: u32,
    /// `fl * SL + sl` of the free list the node is on (valid while FREE); under
    /// [`Policy::FirstFit`] the bucket whose treap holds it.
    class: u16,
    state: u8,
    /// Tree parent while FREE under [`Policy::FirstFit`].
    parent: u32,
    /// Largest free block of this node's subtree, in granules ([`Policy::FirstFit`]).
    max_units: u32,
    /// `max_units` of the left / right child, 0 without one ([`Policy::FirstFit`]): the walk
    /// and the fix-ups decide from the node in hand instead of loading a child.
    lmax: u32,
    rmax: u32,
}

const _: () = assert!(core::mem::size_of::<Node>() == 56);

impl Node {
    const ZERO: Node = Node {
        addr: 0,
        size: 0,
        prev_phys: NIL,
        next_phys: NIL,
        prev_free: NIL,
        next_free: NIL,
        parent: NIL,
        max_units: 0,
        lmax: 0,
        rmax: 0,
        generation: 0,
        class: 0,
        state: UNUSED,
    };
}

/// An out-of-band range allocator over `[base, base + size)` with `N` block descriptors
/// (public ABI §3 "How the driver carves memory"; see the module docs for the algorithm).
pub struct Carve<const N: usize> {
    base: u64,
    /// Bytes managed; 0 = not initialised.
    size: u64,
    granule: u64,
    free_bytes: u64,
    live_bytes: u64,
    live_count: u64,
    free_blocks: u32,
    /// Nodes `1..=bump` have been handed out at least once since `init`.
    bump: u32,
    /// Spare stack of released nodes (chained through `next_free`).
    spare_head: u32,
    spare_count: u32,
    /// [`Policy`] as its discriminant (0 = good fit, the zero state).
    policy: u8,
    /// `FF_BUCKETS` arrays below were written since they were last cleared
    /// ([`Policy::FirstFit`] ever initialised).
    ff_dirty: u8,
    /// Bucket of an address: `(addr - base) >> bucket_shift` ([`Policy::FirstFit`]).
    bucket_shift: u32,
    fl_bitmap: u64,
    sl_bitmap: [u32; FL],
    /// Free-list heads; only meaningful where the bitmap bit is set.
    heads: [[u32; SL]; FL],
    /// Root of each bucket's free-block treap ([`Policy::FirstFit`]).
    roots: [u32; FF_BUCKETS],
    /// The bucket summary ([`Policy::FirstFit`], `carve/summary.rs`), level 0: the largest
    /// free block (granules) of each bucket, 16 buckets per line.
    seg: [Line0; L1_LEN],
    /// Level 1: an upper bound of each level-0 line's maximum, saturated at `u16::MAX`.
    seg1: [Line1; L2_LEN],
    /// Level 2: an upper bound of each level-1 line's maximum.
    seg2: Line1,
    nodes: [Node; N],
}

// SAFETY: every member is an integer, an array of integers, or an array of `Node` (integers
// only). All-zero is the documented uninitialised state: `size == 0` makes every operation
// return `Uninitialized`, and `init` never trusts stale node or head contents.
#[allow(unsafe_code)]
unsafe impl<const N: usize> ZeroValid for Carve<N> {}

/// Padding in front of `addr` to reach `align`, if `[addr, addr + bsize)` then still holds
/// `size` bytes.
#[inline]
fn fit(addr: u64, bsize: u64, size: u64, align: u64) -> Option<u64> {
    let aligned = addr.checked_add(align - 1)? & !(align - 1);
    let pad = aligned - addr;
    if pad <= bsize && bsize - pad >= size {
        Some(pad)
    } else {
        None
    }
}

impl<const N: usize> Carve<N> {
    const CAPACITY_OK: () = assert!(
        N >= 2 && N <= MAX_NODES,
        "Carve<N>: N must be in 2..=u32::MAX-1"
    );

    /// Node capacity.
    pub const NODE_CAPACITY: usize = N;

    /// An uninitialised carve (all zero). For large `N` prefer a `static`, a zeroed box
    /// (`Carve::new_boxed`, with the `alloc` feature) or a field of a zeroed struct: this value
    /// is `N * 56` bytes plus the 130 KiB first-fit bucket index.
    pub const fn new() -> Self {
        Carve {
            base: 0,
            size: 0,
            granule: 0,
            free_bytes: 0,
            live_bytes: 0,
            live_count: 0,
            free_blocks: 0,
            bump: 0,
            spare_head: NIL,
            spare_count: 0,
            policy: 0,
            ff_dirty: 0,
            bucket_shift: 0,
            fl_bitmap: 0,
            sl_bitmap: [0; FL],
            heads: [[NIL; SL]; FL],
            roots: [NIL; FF_BUCKETS],
            seg: [[0; FAN0]; L1_LEN],
            seg1: [[0; FAN1]; L2_LEN],
            seg2: [0; FAN1],
            nodes: [Node::ZERO; N],
        }
    }

    /// An uninitialised carve on the heap, without building it on the stack (the zeroed
    /// allocation is only touched as nodes are used).
    #[cfg(any(test, feature = "alloc"))]
    pub fn new_boxed() -> alloc::boxed::Box<Self> {
        let b = alloc::boxed::Box::<Self>::new_zeroed();
        // SAFETY: `Carve<N>` is `ZeroValid`: all-zero bytes are its uninitialised state.
        #[allow(unsafe_code)]
        unsafe {
            b.assume_init()
        }
    }

    /// Sets the carve up to manage `[base, base + size)` in units of `granule` (a power of two;
    /// `base` must be a multiple of it, `size` is rounded down to it) with the
    /// [`Policy::GoodFit`] placement. Forgets every previous allocation; ids handed out before
    /// stay invalid. Touches the header and one node only.
    pub fn init(&mut self, base: u64, size: u64, granule: u64) -> Result<(), CarveError> {
        self.init_with(base, size, granule, Policy::GoodFit)
    }

    /// [`Carve::init`] with a placement [`Policy`]. [`Policy::FirstFit`] also needs the range
    /// to be at most `u32::MAX` granules (its tree counts in granules): [`CarveError::BadRegion`]
    /// otherwise.
    pub fn init_with(
        &mut self,
        base: u64,
        size: u64,
        granule: u64,
        policy: Policy,
    ) -> Result<(), CarveError> {
        #[allow(clippy::let_unit_value)]
        let () = Self::CAPACITY_OK;
        if !granule.is_power_of_two() || base & (granule - 1) != 0 {
            return Err(CarveError::BadRegion);
        }
        let size = size & !(granule - 1);
        if size == 0 || base.checked_add(size).is_none() {
            return Err(CarveError::BadRegion);
        }
        if policy == Policy::FirstFit && size / granule > u64::from(u32::MAX) {
            return Err(CarveError::BadRegion);
        }
        self.policy = policy as u8;
        if policy == Policy::FirstFit {
            // Zero state: nothing to clear (a fresh carve touches no bucket page here).
            if self.ff_dirty != 0 {
                self.roots = [NIL; FF_BUCKETS];
                self.seg = [[0; FAN0]; L1_LEN];
                self.seg1 = [[0; FAN1]; L2_LEN];
                self.seg2 = [0; FAN1];
            }
            self.ff_dirty = 1;
            let units = (size >> granule.trailing_zeros()) - 1;
            let mut shift = 0;
            while (units >> shift) >= FF_BUCKETS as u64 {
                shift += 1;
            }
            self.bucket_shift = granule.trailing_zeros() + shift;
        }
        self.base = base;
        self.size = size;
        self.granule = granule;
        self.free_bytes = size;
        self.live_bytes = 0;
        self.live_count = 0;
        self.free_blocks = 0;
        self.bump = 0;
        self.spare_head = NIL;
        self.spare_count = 0;
        self.fl_bitmap = 0;
        self.sl_bitmap = [0; FL];
        // `heads` is left as is: a head is only read where its bitmap bit is set.
        let first = self.take_node();
        self.setup(first, base, size, FREE);
        self.node_mut(first).prev_phys = NIL;
        self.node_mut(first).next_phys = NIL;
        self.insert_free(first);
        Ok(())
    }

    /// Whether [`Carve::init`] has run.
    pub fn is_initialized(&self) -> bool {
        self.size != 0
    }

    /// The placement policy chosen at [`Carve::init_with`].
    pub fn policy(&self) -> Policy {
        if self.first_fit() {
            Policy::FirstFit
        } else {
            Policy::GoodFit
        }
    }

    /// First managed address.
    pub fn base(&self) -> u64 {
        self.base
    }

    /// Bytes managed (0 before `init`).
    pub fn capacity(&self) -> u64 {
        self.size
    }

    /// Allocation granule (0 before `init`).
    pub fn granule(&self) -> u64 {
        self.granule
    }

    /// Bytes free.
    pub fn free_bytes(&self) -> u64 {
        self.free_bytes
    }

    /// Live allocations.
    pub fn live_allocations(&self) -> u64 {
        self.live_count
    }

    /// Carves `size` bytes (rounded up to the granule) whose absolute start is a multiple of
    /// `align` (a power of two; 0 = the granule). Bounded work: at most two short class scans
    /// and two bitmap searches, plus one full scan of the request's own class before refusing
    /// with [`CarveError::OutOfSpace`] (public ABI §3 "How the driver carves memory").
    pub fn alloc(&mut self, size: u64, align: u64) -> Result<CarveBlock, CarveError> {
        if self.size == 0 {
            return Err(CarveError::Uninitialized);
        }
        if size == 0 {
            return Err(CarveError::ZeroSize);
        }
        if align != 0 && !align.is_power_of_two() {
            return Err(CarveError::BadAlignment(align));
        }
        let g = self.granule;
        let align = align.max(g);
        let size = match size.checked_add(g - 1) {
            Some(s) => s & !(g - 1),
            None => return Err(CarveError::SizeOverflow),
        };
        if size > self.free_bytes {
            return Err(CarveError::OutOfSpace);
        }
        let (idx, pad) = if self.first_fit() {
            let (idx, pad) = self.ff_find(size, align).ok_or(CarveError::OutOfSpace)?;
            if self.nodes_to_split(idx, pad, size) > self.spare_nodes() {
                return Err(CarveError::NodesExhausted);
            }
            (idx, pad)
        } else {
            let (idx, pad) = self.find(size, align).ok_or(CarveError::OutOfSpace)?;
            if self.nodes_to_split(idx, pad, size) > self.spare_nodes() {
                // Node-starved: another free block may fit with fewer splits (an exact fit
                // needs no node at all).
                self.find_within_nodes(size, align, self.spare_nodes())
                    .ok_or(CarveError::NodesExhausted)?
            } else {
                (idx, pad)
            }
        };
        Ok(self.carve_block(idx, pad, size))
    }

    /// Carves exactly `[addr, addr + size)` (`size` rounded up to the granule), which must lie
    /// inside one free block: the driver's fixed-offset allocation (`gen_pool_fixed_alloc`,
    /// used for the contiguous scratchpad; docs/PLACEMENT.md). [`CarveError::OutOfSpace`] when
    /// any granule of the range is in use or outside the carve, [`CarveError::BadAlignment`]
    /// for an `addr` that is not a granule multiple. O(depth) under [`Policy::FirstFit`], a walk
    /// of the block chain under [`Policy::GoodFit`].
    pub fn alloc_at(&mut self, addr: u64, size: u64) -> Result<CarveBlock, CarveError> {
        if self.size == 0 {
            return Err(CarveError::Uninitialized);
        }
        if size == 0 {
            return Err(CarveError::ZeroSize);
        }
        let g = self.granule;
        if addr & (g - 1) != 0 {
            return Err(CarveError::BadAlignment(addr));
        }
        let size = match size.checked_add(g - 1) {
            Some(s) => s & !(g - 1),
            None => return Err(CarveError::SizeOverflow),
        };
        let end = addr.checked_add(size).ok_or(CarveError::OutOfSpace)?;
        let idx = self.free_block_at(addr).ok_or(CarveError::OutOfSpace)?;
        let n = self.node(idx);
        if end > n.addr + n.size {
            return Err(CarveError::OutOfSpace);
        }
        let pad = addr - n.addr;
        if self.nodes_to_split(idx, pad, size) > self.spare_nodes() {
            return Err(CarveError::NodesExhausted);
        }
        Ok(self.carve_block(idx, pad, size))
    }

    /// Turns `[addr + pad, addr + pad + size)` of free block `idx` into an allocation (the
    /// caller checked it fits and that the split's nodes are spare).
    fn carve_block(&mut self, idx: u32, pad: u64, size: u64) -> CarveBlock {
        let (baddr, bsize) = {
            let n = self.node(idx);
            (n.addr, n.size)
        };
        let tail = bsize - pad - size;
        let used = if self.first_fit() && pad == 0 && tail > 0 && idx != 1 {
            // The common first-fit case: the allocation takes the block's front. The free
            // block keeps its node and its place in the treap (same neighbours, same last
            // granule, so the same bucket) and only shrinks; the allocation gets a fresh node
            // in front of it. Node 1 is excluded: it stays the block at `base`.
            let u = self.take_node();
            self.setup(u, baddr, size, USED);
            self.link_before(idx, u);
            let old_units = self.units(idx);
            let n = self.node_mut(idx);
            n.addr = baddr + size;
            n.size = tail;
            self.tree_shrank(idx, old_units);
            u
        } else if pad > 0 {
            // `idx` keeps the head fragment; the allocation gets a fresh node after it.
            self.node_mut(idx).size = pad;
            self.free_resized(idx);
            let u = self.take_node();
            self.setup(u, baddr + pad, size, USED);
            self.link_after(idx, u);
            u
        } else {
            idx
        };
        if used != idx && pad == 0 {
            // Handled above: the free block stayed in `idx`.
        } else if tail > 0 {
            let t = self.take_node();
            self.setup(t, baddr + pad + size, tail, FREE);
            self.link_after(used, t);
            if pad > 0 {
                self.insert_free(t);
            } else {
                // The tail takes the whole block's place among the free blocks.
                self.free_replaced(idx, t);
            }
        } else if pad == 0 {
            self.remove_free(idx);
        }
        let n = self.node_mut(used);
        n.size = size;
        n.state = USED;
        n.generation = n.generation.wrapping_add(1);
        let block = CarveBlock {
            // `used` is a taken node, so its index is ≥ 1: the value is non-zero and the
            // fallback is unreachable.
            id: CarveId(
                NonZeroU64::new(((n.generation as u64) << 32) | used as u64)
                    .unwrap_or(NonZeroU64::MIN),
            ),
            addr: n.addr,
            size,
        };
        self.free_bytes -= size;
        self.live_bytes += size;
        self.live_count += 1;
        block
    }

    /// Returns an allocation, merging it with free neighbours. A stale, foreign or repeated id
    /// is [`CarveError::InvalidId`] and changes nothing.
    pub fn free(&mut self, id: CarveId) -> Result<CarveBlock, CarveError> {
        let block = self.lookup(id)?;
        let cur = id.index();
        self.free_bytes += block.size;
        self.live_bytes -= block.size;
        self.live_count -= 1;
        let prev = self.node(cur).prev_phys;
        let next = self.node(cur).next_phys;
        let prev_free = prev != NIL && self.node(prev).state == FREE;
        let next_free = next != NIL && self.node(next).state == FREE;
        if self.first_fit() && next_free && !prev_free && cur != 1 {
            // `next` grows down over the freed block in place: same neighbours in address
            // order, same last granule (so the same bucket), one maxima fix-up, no relinking.
            let (ca, cs) = {
                let n = self.node(cur);
                (n.addr, n.size)
            };
            let n = self.node_mut(next);
            n.addr = ca;
            n.size += cs;
            self.unlink(cur);
            self.release_node(cur);
            self.tree_grew(next);
            return Ok(block);
        }
        if next_free && prev_free {
            // `next` disappears into `prev`, which grows in place.
            self.remove_free(next);
        }
        if next_free {
            let ns = self.node(next).size;
            self.node_mut(cur).size += ns;
        }
        self.node_mut(cur).state = FREE;
        if prev_free {
            let cs = self.node(cur).size;
            self.node_mut(prev).size += cs;
            self.unlink(cur);
            self.release_node(cur);
            self.free_grown(prev);
        } else if next_free {
            // `cur` takes `next`'s place among the free blocks (it starts lower, but after
            // every free block before `next`).
            self.free_replaced(next, cur);
        } else {
            self.insert_free(cur);
        }
        if next_free {
            self.unlink(next);
            self.release_node(next);
        }
        Ok(block)
    }

    /// The live allocation `id` names, or [`CarveError::InvalidId`].
    pub fn lookup(&self, id: CarveId) -> Result<CarveBlock, CarveError> {
        if self.size == 0 {
            return Err(CarveError::Uninitialized);
        }
        let i = id.index();
        if i == NIL || i > self.bump {
            return Err(CarveError::InvalidId);
        }
        let n = self.node(i);
        if n.state != USED || n.generation != id.generation() {
            return Err(CarveError::InvalidId);
        }
        Ok(CarveBlock {
            id,
            addr: n.addr,
            size: n.size,
        })
    }

    /// The id of the live allocation described by node `index`, if that node is one (for
    /// tables indexed by [`CarveId::index`] that must be reconciled with the carve, e.g. after
    /// a process died mid-update in shared memory). `None` for a free, unused or
    /// out-of-range node.
    pub fn id_at(&self, index: u32) -> Option<CarveId> {
        if self.size == 0 || index == NIL || index > self.bump || index as usize > N {
            return None;
        }
        let n = self.node(index);
        if n.state != USED {
            return None;
        }
        CarveId::from_parts(index, n.generation)
    }

    /// The largest free block in bytes. Bounded by the length of the top non-empty class list
    /// (a diagnostics path, not an allocation path).
    pub fn largest_free(&self) -> u64 {
        if self.first_fit() {
            return u64::from(self.seg_exact_max()) * self.granule;
        }
        if self.fl_bitmap == 0 {
            return 0;
        }
        let f = 63 - self.fl_bitmap.leading_zeros() as usize;
        let s = 31 - self.sl_bitmap[f].leading_zeros() as usize;
        let mut i = self.heads[f][s];
        let mut best = 0;
        while i != NIL {
            let n = self.node(i);
            best = best.max(n.size);
            i = n.next_free;
        }
        best
    }

    /// The largest request [`Carve::alloc`] would grant right now at alignment `align` (a
    /// power of two; 0 or anything up to the granule means the granule): a granule multiple,
    /// 0 when no request would succeed or `align` is not a power of two. Exact: `alloc(n,
    /// align)` succeeds for `n` = this figure and fails with `OutOfSpace` or `NodesExhausted`
    /// for anything a granule larger (public ABI §3 "alignment above the page size uses an
    /// aligned first-fit"; §6 "users cannot see the largest free block").
    ///
    /// Unaligned, it is [`Carve::largest_free`]: a whole block needs no split. Aligned, a
    /// block's best is from its first aligned start to its end (no tail node, one head node
    /// unless the block starts aligned). A diagnostics path, computed on demand: classes are
    /// visited from the top down until no lower class can beat the best found, so it costs a
    /// visit of the free blocks in the top classes, never anything on the allocation path.
    pub fn largest_aligned(&self, align: u64) -> u64 {
        if self.size == 0 || (align != 0 && !align.is_power_of_two()) {
            return 0;
        }
        let align = align.max(self.granule);
        if align == self.granule {
            return self.largest_free();
        }
        if self.first_fit() {
            return self.ff_largest_aligned(align);
        }
        let head_node_spare = self.spare_nodes() > 0;
        let mut best = 0;
        let mut fl_map = self.fl_bitmap;
        while fl_map != 0 {
            let f = 63 - fl_map.leading_zeros() as usize;
            fl_map &= !(1 << f);
            let mut sl_map = self.sl_bitmap[f];
            while sl_map != 0 {
                let s = 31 - sl_map.leading_zeros() as usize;
                sl_map &= !(1 << s);
                if class_upper_bound(f, s) <= best {
                    return best; // every block from here down is too small to win
                }
                let mut i = self.heads[f][s];
                while i != NIL {
                    let n = self.node(i);
                    let end = n.addr + n.size;
                    if let Some(start) = n.addr.checked_next_multiple_of(align) {
                        if start < end && (start == n.addr || head_node_spare) {
                            best = best.max(end - start);
                        }
                    }
                    i = n.next_free;
                }
            }
        }
        best
    }

    /// Occupancy figures (public ABI §6 "users cannot see the largest free block").
    pub fn stats(&self) -> CarveStats {
        CarveStats {
            capacity: self.size,
            free: self.free_bytes,
            largest_free: self.largest_free(),
            live_allocations: self.live_count,
            live_bytes: self.live_bytes,
            free_blocks: self.free_blocks,
            nodes_used: self.bump - self.spare_count,
            node_capacity: N as u32,
        }
    }

    /// Calls `f` for every block, free or used, in address order (O(blocks)).
    pub fn for_each_block(&self, mut f: impl FnMut(BlockInfo)) {
        if self.size == 0 {
            return;
        }
        // Node 1 is the block at `base` for the carve's whole life: it is never merged away
        // (only a block with a predecessor is) and splits keep it at the front.
        let mut i = 1;
        while i != NIL {
            let n = self.node(i);
            f(BlockInfo {
                addr: n.addr,
                size: n.size,
                used: n.state == USED,
            });
            i = n.next_phys;
        }
    }

    // ---- internals -------------------------------------------------------------------------

    #[inline(always)]
    fn node(&self, i: u32) -> &Node {
        &self.nodes[(i - 1) as usize]
    }

    #[inline(always)]
    fn node_mut(&mut self, i: u32) -> &mut Node {
        &mut self.nodes[(i - 1) as usize]
    }

    /// Nodes that can still be taken.
    #[inline]
    fn spare_nodes(&self) -> u32 {
        (N as u32 - self.bump) + self.spare_count
    }

    /// Takes a node (caller checked `spare_nodes() > 0`); its generation is preserved.
    #[inline(always)]
    fn take_node(&mut self) -> u32 {
        if self.spare_head != NIL {
            let i = self.spare_head;
            self.spare_head = self.node(i).next_free;
            self.spare_count -= 1;
            i
        } else {
            self.bump += 1;
            self.bump
        }
    }

    #[inline(always)]
    fn release_node(&mut self, i: u32) {
        let head = self.spare_head;
        let n = self.node_mut(i);
        n.state = UNUSED;
        n.next_free = head;
        self.spare_head = i;
        self.spare_count += 1;
    }

    /// Sets a taken node's block fields, keeping its generation.
    #[inline(always)]
    fn setup(&mut self, i: u32, addr: u64, size: u64, state: u8) {
        let n = self.node_mut(i);
        n.addr = addr;
        n.size = size;
        n.state = state;
        n.prev_free = NIL;
        n.next_free = NIL;
    }

    /// Puts `b` right after `a` in the physical chain.
    #[inline(always)]
    fn link_after(&mut self, a: u32, b: u32) {
        let next = self.node(a).next_phys;
        {
            let nb = self.node_mut(b);
            nb.prev_phys = a;
            nb.next_phys = next;
        }
        if next != NIL {
            self.node_mut(next).prev_phys = b;
        }
        self.node_mut(a).next_phys = b;
    }

    /// Puts `b` right before `a` in the physical chain (`a` is not the first block).
    #[inline(always)]
    fn link_before(&mut self, a: u32, b: u32) {
        let prev = self.node(a).prev_phys;
        {
            let nb = self.node_mut(b);
            nb.prev_phys = prev;
            nb.next_phys = a;
        }
        if prev != NIL {
            self.node_mut(prev).next_phys = b;
        }
        self.node_mut(a).prev_phys = b;
    }

    /// Removes `i` from the physical chain (it is being merged into a neighbour).
    #[inline(always)]
    fn unlink(&mut self, i: u32) {
        let (p, n) = {
            let x = self.node(i);
            (x.prev_phys, x.next_phys)
        };
        if p != NIL {
            self.node_mut(p).next_phys = n;
        }
        if n != NIL {
            self.node_mut(n).prev_phys = p;
        }
    }

    #[inline(always)]
    fn first_fit(&self) -> bool {
        self.policy == Policy::FirstFit as u8
    }

    /// Indexes free block `i` (its size and address set).
    #[inline(always)]
    fn insert_free(&mut self, i: u32) {
        if self.first_fit() {
            self.tree_insert(i);
        } else {
            self.tlsf_insert(i);
        }
        self.free_blocks += 1;
    }

    /// Drops free block `i` from the index.
    #[inline(always)]
    fn remove_free(&mut self, i: u32) {
        if self.first_fit() {
            self.tree_remove(i);
        } else {
            self.tlsf_remove(i);
        }
        self.free_blocks -= 1;
    }

    /// Free block `i` changed size and kept its place in address order.
    #[inline(always)]
    fn free_resized(&mut self, i: u32) {
        if self.first_fit() {
            // Consistent with the new size first, so a move between buckets removes it from
            // a consistent treap.
            self.tree_fix_up(i);
            if self.key_bucket(i) != usize::from(self.node(i).class) {
                self.tree_remove(i);
                self.tree_insert(i);
            }
        } else {
            // Always re-listed (even within its class), as a remove + insert always did.
            self.tlsf_remove(i);
            self.tlsf_insert(i);
        }
    }

    /// Free block `i` grew at its end and kept its place in address order.
    #[inline(always)]
    fn free_grown(&mut self, i: u32) {
        if self.first_fit() && self.key_bucket(i) == usize::from(self.node(i).class) {
            self.tree_grew(i);
        } else {
            self.free_resized(i);
        }
    }

    /// Free block `new` (not indexed, size set) replaces indexed free block `old`; no other
    /// free block lies between their addresses.
    #[inline(always)]
    fn free_replaced(&mut self, old: u32, new: u32) {
        if self.first_fit() {
            self.tree_replace(old, new);
        } else {
            self.tlsf_remove(old);
            self.tlsf_insert(new);
        }
    }

    /// The free block containing `addr`, if any.
    fn free_block_at(&mut self, addr: u64) -> Option<u32> {
        let hit = |n: &Node| n.addr <= addr && addr - n.addr < n.size;
        if self.first_fit() {
            if addr < self.base || addr - self.base >= self.size {
                return None;
            }
            // The lowest free block ending above `addr`: its last granule is at or above
            // `addr`, so it is in `addr`'s bucket or the first non-empty bucket after it.
            let k = self.bucket_of(addr);
            let mut best = self.tree_ceil_end(self.roots[k], addr);
            if best == NIL {
                if let Some(b) = self.next_bucket(k + 1, 1) {
                    let mut x = self.roots[b];
                    while x != NIL {
                        best = x;
                        x = self.node(x).prev_free;
                    }
                }
            }
            (best != NIL && hit(self.node(best))).then_some(best)
        } else {
            let mut i = 1;
            while i != NIL {
                let n = self.node(i);
                if hit(n) {
                    return (n.state == FREE).then_some(i);
                }
                i = n.next_phys;
            }
            None
        }
    }

    // ---- first-fit index (Policy::FirstFit) --------------------------------------------------
    // The range is cut into `FF_BUCKETS` address buckets. Each free block lives in the treap of
    // the bucket holding its last granule: keyed by address, `prev_free` / `next_free` are the
    // left / right children, `parent` the parent (NIL at a bucket's root), `max_units` the
    // largest block of the subtree in granules and `lmax` / `rmax` the children's
    // `max_units` (0 without that child); heap order on `priority(i)` (a parent's is ≥ its
    // children's). `seg` / `seg1` / `seg2` summarise the buckets' root maxima (summary.rs), so
    // the lowest bucket holding a block of at least `need` granules is three line scans of a
    // 66 KiB summary, and that bucket's (small) treap finishes the search.
}

impl<const N: usize> Default for Carve<N> {
    fn default() -> Self {
        Self::new()
    }
}

impl<const N: usize> fmt::Debug for Carve<N> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Carve")
            .field("base", &self.base)
            .field("size", &self.size)
            .field("granule", &self.granule)
            .field("free_bytes", &self.free_bytes)
            .field("live_count", &self.live_count)
            .field("free_blocks", &self.free_blocks)
            .field("node_capacity", &N)
            .finish()
    }
}

#[cfg(test)]
mod tests;
