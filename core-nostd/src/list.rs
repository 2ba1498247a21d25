//! Intrusive lists whose links live inside their nodes (spec §3.1), after cordyceps's
//! `list.rs` and the kernel's `rust/kernel/list.rs` (docs/STYLE.md #11, #19).
//!
//! * [`List`]: the doubly linked list of a `dmem_allocator_t` — its dmems between the embedded
//!   `dummy_head` and `dummy_tail` sentinels (`dmem_t.next` @152, `dmem_t.prev` @160, the bytes
//!   libnrt's DWARF pins). A node says where its links are through the unsafe [`Linked`] trait;
//!   the links are [`Links`], `!Unpin` (`PhantomPinned`): a node on a list must not move.
//! * [`WeakIndex`]: the singly linked weak GC index `dmem_list_t` (head @0, tail @8) of
//!   `dmem_ref_node_t`s (`next` @8).
//!
//! As in the kernel's list, a node's links are null exactly while it is on no list. That makes
//! both misuses checkable in release builds, with nothing changed when they are refused: a
//! push of a node that is already linked ([`ListError::AlreadyLinked`], cordyceps asserts the
//! same), and a remove of a node that is not ([`ListError::NotLinked`]). [`List::check`] (and
//! the panicking [`List::assert_valid`], for tests) walks a list and checks that every `prev`
//! points back at the node before it and that the length is the one its owner counted.
//!
//! The list does not lock: a [`List`] is a view made under the lock that guards its nodes'
//! links (an allocator's `lock`), and its constructor's contract says so.

use core::fmt;
use core::marker::{PhantomData, PhantomPinned};
use core::mem::{offset_of, size_of};
use core::ptr::{addr_of_mut, null_mut, NonNull};

use crate::abi::{dmem_allocator_t, dmem_list_t, dmem_ref_node_t, dmem_t};

/// A node's two links, where the node keeps them: `next` then `prev`, 16 bytes. Only ever
/// reached through a pointer into a node ([`Linked::links`]); `!Unpin`, because a linked node's
/// neighbours point at it.
#[repr(C)]
pub struct Links<T> {
    next: *mut T,
    prev: *mut T,
    _pin: PhantomPinned,
}

/// A type whose values carry their own [`Links`] (cordyceps's `Linked`).
///
/// # Safety
/// [`Linked::links`] must return a pointer to `size_of::<Links<Self>>()` bytes inside `*node`,
/// laid out as two `*mut Self` (`next`, then `prev`), that nothing but the list code writes
/// while the node is on a list, and that are both null while it is on none.
pub unsafe trait Linked: Sized {
    /// Where `node`'s links live.
    ///
    /// # Safety
    /// `node` points to a live `Self`.
    unsafe fn links(node: NonNull<Self>) -> NonNull<Links<Self>>;
}

// The dmem_t links are `Links<dmem_t>` as laid out: `next` @152, `prev` right after it.
const _: () = {
    assert!(size_of::<Links<dmem_t>>() == 16);
    assert!(offset_of!(Links<dmem_t>, next) == 0);
    assert!(offset_of!(Links<dmem_t>, prev) == 8);
    assert!(offset_of!(dmem_t, next) == 152);
    assert!(offset_of!(dmem_t, prev) == offset_of!(dmem_t, next) + size_of::<*mut dmem_t>());
};

// SAFETY: `next` @152 and `prev` @160 are two adjacent `*mut dmem_t` inside the node (the
// const block above), which is `Links<dmem_t>`'s layout. Only this module writes them (the
// allocator's list, under its lock), and a dmem slot starts zeroed (unlinked) and is given
// back to its arena only after it was unlinked.
unsafe impl Linked for dmem_t {
    #[inline]
    unsafe fn links(node: NonNull<Self>) -> NonNull<Links<Self>> {
        // SAFETY: `node` is live (caller contract), so its `next` field is in bounds;
        // `addr_of_mut!` makes no reference, and the result is non-null as `node` is.
        unsafe { NonNull::new_unchecked(addr_of_mut!((*node.as_ptr()).next)).cast() }
    }
}

/// Why a list refused an operation (nothing was changed).
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub enum ListError {
    /// A push of a node that is already on a list (a double insert).
    AlreadyLinked,
    /// A remove of a node that is on no list.
    NotLinked,
    /// Links that do not point back at each other, a walk that does not end at the tail, or
    /// a length other than the expected one: the list is corrupt.
    Broken,
}

impl fmt::Display for ListError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            ListError::AlreadyLinked => "node is already on a list (double insert)",
            ListError::NotLinked => "node is on no list",
            ListError::Broken => "list links are inconsistent",
        })
    }
}

/// `node`'s `next` link.
///
/// # Safety
/// `node` is live.
#[inline]
unsafe fn next_of<T: Linked>(node: NonNull<T>) -> *mut T {
    // SAFETY: caller contract; `links` points into the node. A raw place read, no reference.
    unsafe { (*T::links(node).as_ptr()).next }
}

/// `node`'s `prev` link.
///
/// # Safety
/// `node` is live.
#[inline]
unsafe fn prev_of<T: Linked>(node: NonNull<T>) -> *mut T {
    // SAFETY: as in `next_of`.
    unsafe { (*T::links(node).as_ptr()).prev }
}

/// Sets `node`'s links.
///
/// # Safety
/// `node` is live and the caller may write its links (holds the list's lock).
#[inline]
unsafe fn set_links<T: Linked>(node: NonNull<T>, next: *mut T, prev: *mut T) {
    // SAFETY: caller contract; raw place writes through the node's own pointer.
    unsafe {
        let l = T::links(node).as_ptr();
        (*l).next = next;
        (*l).prev = prev;
    }
}

/// A doubly linked list between two sentinel nodes (libnrt's allocator list: `dummy_head`,
/// `dummy_tail`). A view: it owns nothing and is made under the lock that guards the links.
pub struct List<'a, T: Linked> {
    head: NonNull<T>,
    tail: NonNull<T>,
    _guarded: PhantomData<&'a mut T>,
}

impl<'a, T: Linked> List<'a, T> {
    /// The list whose sentinels are `head` and `tail`.
    ///
    /// # Safety
    /// For `'a`: `head` and `tail` are distinct live nodes used only as this list's sentinels,
    /// every node linked between them is live, and no one else reads or writes the links of
    /// any of them (the caller holds the lock that guards the list, and makes one view at a
    /// time).
    #[inline]
    pub unsafe fn from_sentinels(head: NonNull<T>, tail: NonNull<T>) -> Self {
        List {
            head,
            tail,
            _guarded: PhantomData,
        }
    }

    /// Wires the sentinels as an empty list (`dmem_allocator_create`): `head.next = tail`,
    /// `tail.prev = head`, the outer links null. Nodes linked before are forgotten, not
    /// unlinked: only for sentinels no node is linked to yet.
    pub fn init(&mut self) {
        // SAFETY: both sentinels are live and ours to write (constructor contract).
        unsafe {
            set_links(self.head, self.tail.as_ptr(), null_mut());
            set_links(self.tail, null_mut(), self.head.as_ptr());
        }
    }

    /// The first node, `None` when the list is empty (or its sentinels were never wired).
    #[inline]
    pub fn first(&self) -> Option<NonNull<T>> {
        // SAFETY: the head sentinel is live (constructor contract).
        let n = unsafe { next_of(self.head) };
        NonNull::new(n).filter(|n| *n != self.tail)
    }

    /// Whether no node is on the list.
    #[inline]
    pub fn is_empty(&self) -> bool {
        self.first().is_none()
    }

    /// Links `node` before the tail sentinel (`list_insert_before(&dummy_tail, node)`).
    /// Refuses, changing nothing, a node that is already on a list
    /// ([`ListError::AlreadyLinked`]: either link set; a sentinel of a wired list is one) and a
    /// list whose last node does not point at the tail ([`ListError::Broken`]).
    ///
    /// # Safety
    /// `node` is live, and for `'a` it is guarded by the list's lock like the list's nodes.
    #[inline]
    pub unsafe fn push_back(&mut self, node: NonNull<T>) -> Result<(), ListError> {
        // SAFETY: `node` is live (caller contract); the sentinels and linked nodes are live and
        // ours to write (constructor contract).
        unsafe {
            if !next_of(node).is_null() || !prev_of(node).is_null() {
                return Err(ListError::AlreadyLinked);
            }
            if node == self.head || node == self.tail {
                return Err(ListError::AlreadyLinked);
            }
            let last = NonNull::new(prev_of(self.tail)).ok_or(ListError::Broken)?;
            if next_of(last) != self.tail.as_ptr() {
                return Err(ListError::Broken);
            }
            set_links(node, self.tail.as_ptr(), last.as_ptr());
            (*T::links(last).as_ptr()).next = node.as_ptr();
            (*T::links(self.tail).as_ptr()).prev = node.as_ptr();
        }
        Ok(())
    }

    /// Unlinks `node` and nulls its links. Refuses, changing nothing, a node on no list
    /// ([`ListError::NotLinked`]; a sentinel is one: it has a null outer link) and a node whose
    /// neighbours do not point back at it ([`ListError::Broken`]).
    ///
    /// # Safety
    /// `node` is live and, if linked, on *this* list (the list does not walk itself to find
    /// out: the caller knows, e.g. from the dmem's `allocator` field).
    #[inline]
    pub unsafe fn remove(&mut self, node: NonNull<T>) -> Result<(), ListError> {
        // SAFETY: `node` is live; its neighbours are nodes of this list (caller contract), so
        // live and ours to write (constructor contract).
        unsafe {
            let (Some(prev), Some(next)) =
                (NonNull::new(prev_of(node)), NonNull::new(next_of(node)))
            else {
                return Err(ListError::NotLinked);
            };
            if next_of(prev) != node.as_ptr() || prev_of(next) != node.as_ptr() {
                return Err(ListError::Broken);
            }
            (*T::links(prev).as_ptr()).next = next.as_ptr();
            (*T::links(next).as_ptr()).prev = prev.as_ptr();
            set_links(node, null_mut(), null_mut());
        }
        Ok(())
    }

    /// The nodes from first to last.
    #[inline]
    pub fn iter(&self) -> Iter<'_, T> {
        Iter {
            next: self.first(),
            tail: self.tail,
            _list: PhantomData,
        }
    }

    /// Walks the list and checks it: the head's outer link is null, every node's `prev` is
    /// the node before it, the walk reaches the tail after exactly `len` nodes (so a cycle
    /// or a cut list is found without walking forever), and the tail's outer link is null.
    pub fn check(&self, len: usize) -> Result<(), ListError> {
        // SAFETY: the sentinels and every node reached from them are live (constructor
        // contract); the walk is bounded by `len` + 1 steps.
        unsafe {
            if !prev_of(self.head).is_null() || !next_of(self.tail).is_null() {
                return Err(ListError::Broken);
            }
            let mut before = self.head;
            for seen in 0..=len {
                let n = NonNull::new(next_of(before)).ok_or(ListError::Broken)?;
                if prev_of(n) != before.as_ptr() {
                    return Err(ListError::Broken);
                }
                if n == self.tail {
                    return if seen == len {
                        Ok(())
                    } else {
                        Err(ListError::Broken)
                    };
                }
                before = n;
            }
        }
        Err(ListError::Broken) // more than `len` nodes, or a cycle
    }

    /// [`Self::check`] that panics, naming what is wrong (cordyceps's `assert_valid`): for
    /// tests and debugging, never on the runtime's paths.
    #[track_caller]
    pub fn assert_valid(&self, len: usize) {
        if let Err(e) = self.check(len) {
            let mut walked = 0usize;
            let mut it = self.iter();
            while walked <= len && it.next().is_some() {
                walked += 1;
            }
            panic!("list invalid ({e}): expected {len} nodes, walked {walked}");
        }
    }
}

/// The nodes of a [`List`], first to last.
pub struct Iter<'l, T: Linked> {
    next: Option<NonNull<T>>,
    tail: NonNull<T>,
    _list: PhantomData<&'l T>,
}

impl<T: Linked> Iterator for Iter<'_, T> {
    type Item = NonNull<T>;

    #[inline]
    fn next(&mut self) -> Option<NonNull<T>> {
        let n = self.next?;
        // SAFETY: `n` is a node of the list the iterator borrows, so live (its constructor
        // contract) and not written while it is borrowed.
        self.next = NonNull::new(unsafe { next_of(n) }).filter(|x| *x != self.tail);
        Some(n)
    }
}

/// The dmems of allocator `al` (spec §3.1): the list between its `dummy_head` and
/// `dummy_tail`.
///
/// # Safety
/// `al` is a live allocator whose `lock` the caller holds for `'a`, and makes no other view of
/// its list meanwhile.
#[inline]
pub unsafe fn allocator_list<'a>(al: *mut dmem_allocator_t) -> List<'a, dmem_t> {
    // SAFETY: `al` is live, so its embedded sentinels are two distinct live nodes; the held
    // lock guards their links and those of every dmem linked between them (`dmem/allocator.rs`).
    unsafe {
        List::from_sentinels(
            NonNull::new_unchecked(addr_of_mut!((*al).dummy_head)),
            NonNull::new_unchecked(addr_of_mut!((*al).dummy_tail)),
        )
    }
}

/// The weak GC index `dmem_list_t` (spec §3.1): a singly linked FIFO of `dmem_ref_node_t`s
/// that name dmems without owning them. A view over the list's head/tail words.
pub struct WeakIndex<'a> {
    list: NonNull<dmem_list_t>,
    _guarded: PhantomData<&'a mut dmem_list_t>,
}

impl<'a> WeakIndex<'a> {
    /// The index at `list`.
    ///
    /// # Safety
    /// For `'a`, `list` is a live `dmem_list_t` whose nodes are live `dmem_ref_node_t`s, and
    /// no one else reads or writes it or its nodes' links.
    #[inline]
    pub unsafe fn new(list: NonNull<dmem_list_t>) -> Self {
        WeakIndex {
            list,
            _guarded: PhantomData,
        }
    }

    /// Appends `node`. Refuses, changing nothing, a node whose `next` is set or that is the
    /// tail already ([`ListError::AlreadyLinked`]).
    ///
    /// # Safety
    /// `node` is a live `dmem_ref_node_t`, on this index if on any, guarded like its nodes.
    pub unsafe fn push_back(&mut self, node: NonNull<dmem_ref_node_t>) -> Result<(), ListError> {
        let l = self.list.as_ptr();
        let n = node.as_ptr();
        // SAFETY: `l` and `n` are live and ours to write (contracts above).
        unsafe {
            if !(*n).next.is_null() || (*l).tail == n {
                return Err(ListError::AlreadyLinked);
            }
            if (*l).tail.is_null() {
                (*l).head = n;
            } else {
                (*(*l).tail).next = n;
            }
            (*l).tail = n;
        }
        Ok(())
    }

    /// Empties the index, handing each node to `f` (which may free it) first to last.
    pub fn drain(&mut self, mut f: impl FnMut(NonNull<dmem_ref_node_t>)) {
        let l = self.list.as_ptr();
        // SAFETY: the index and its nodes are live and ours (constructor contract); each
        // node's `next` is read before `f` may free it.
        unsafe {
            let mut n = (*l).head;
            (*l).head = null_mut();
            (*l).tail = null_mut();
            while let Some(node) = NonNull::new(n) {
                n = (*n).next;
                (*node.as_ptr()).next = null_mut();
                f(node);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    extern crate std;
    use super::*;
    use proptest::prelude::*;
    use std::boxed::Box;
    use std::vec::Vec;

    /// A test node: links then a tag, links reached through the trait like dmem_t's.
    #[repr(C)]
    struct Node {
        links: Links<Node>,
        tag: u32,
    }

    // SAFETY: `links` is a `Links<Node>` field of the node, null until linked (`node`), and
    // written only by the list.
    unsafe impl Linked for Node {
        unsafe fn links(node: NonNull<Self>) -> NonNull<Links<Self>> {
            // SAFETY: in bounds of a live node (caller contract).
            unsafe { NonNull::new_unchecked(addr_of_mut!((*node.as_ptr()).links)) }
        }
    }

    /// A node on the heap, reached only through raw pointers from here on (so no later
    /// `&mut` reborrow invalidates the pointers its neighbours hold).
    fn node(tag: u32) -> NonNull<Node> {
        let b = Box::new(Node {
            links: Links {
                next: null_mut(),
                prev: null_mut(),
                _pin: PhantomPinned,
            },
            tag,
        });
        NonNull::from(Box::leak(b))
    }

    /// Sentinels plus `n` nodes, none linked; freed when the fixture drops.
    struct Fixture {
        head: NonNull<Node>,
        tail: NonNull<Node>,
        nodes: Vec<NonNull<Node>>,
    }

    impl Drop for Fixture {
        fn drop(&mut self) {
            for p in [self.head, self.tail]
                .into_iter()
                .chain(self.nodes.drain(..))
            {
                // SAFETY: each came from `Box::leak` in `node` and is freed once, here.
                drop(unsafe { Box::from_raw(p.as_ptr()) });
            }
        }
    }

    impl Fixture {
        fn new(n: u32) -> Self {
            let mut f = Fixture {
                head: node(u32::MAX),
                tail: node(u32::MAX),
                nodes: (0..n).map(node).collect(),
            };
            f.list().init();
            f
        }
        fn list(&mut self) -> List<'_, Node> {
            // SAFETY: the fixture owns the sentinels and nodes for the view's lifetime, and
            // `&mut self` makes this the only view.
            unsafe { List::from_sentinels(self.head, self.tail) }
        }
        fn ptr(&self, i: usize) -> NonNull<Node> {
            self.nodes[i]
        }
        /// Overwrites node `i`'s links by hand (to corrupt a list on purpose).
        fn poke(&mut self, i: usize, next: Option<usize>, prev: Option<usize>) {
            let l = self.ptr(i).as_ptr();
            // SAFETY: a live node of the fixture; no view is alive (`&mut self`).
            unsafe {
                if let Some(n) = next {
                    (*l).links.next = self.ptr(n).as_ptr();
                }
                if let Some(p) = prev {
                    (*l).links.prev = self.ptr(p).as_ptr();
                }
            }
        }
        fn push(&mut self, i: usize) -> Result<(), ListError> {
            let p = self.ptr(i);
            // SAFETY: `p` is a node of the fixture, guarded by it like the list.
            unsafe { self.list().push_back(p) }
        }
        fn remove(&mut self, i: usize) -> Result<(), ListError> {
            let p = self.ptr(i);
            // SAFETY: as in `push`; the fixture has one list, so a linked node is on it.
            unsafe { self.list().remove(p) }
        }
        fn tags(&mut self) -> Vec<u32> {
            // SAFETY: nodes of the fixture, live; a raw read of the tag.
            self.list()
                .iter()
                .map(|n| unsafe { (*n.as_ptr()).tag })
                .collect()
        }
    }

    #[test]
    fn push_iterate_remove() {
        let mut f = Fixture::new(3);
        assert!(f.list().is_empty());
        f.list().assert_valid(0);
        for i in 0..3 {
            f.push(i).unwrap();
        }
        f.list().assert_valid(3);
        assert_eq!(f.tags(), [0, 1, 2]);
        f.remove(1).unwrap();
        f.list().assert_valid(2);
        assert_eq!(f.tags(), [0, 2]);
        f.remove(0).unwrap();
        f.remove(2).unwrap();
        assert!(f.list().is_empty());
        f.list().assert_valid(0);
    }

    #[test]
    fn a_double_insert_is_refused_and_changes_nothing() {
        let mut f = Fixture::new(2);
        f.push(0).unwrap();
        f.push(1).unwrap();
        assert_eq!(f.push(0), Err(ListError::AlreadyLinked), "a middle node");
        assert_eq!(f.push(1), Err(ListError::AlreadyLinked), "the last node");
        let (h, t) = (f.head, f.tail);
        // SAFETY: the fixture's own sentinels, live.
        unsafe {
            assert_eq!(f.list().push_back(h), Err(ListError::AlreadyLinked));
            assert_eq!(f.list().push_back(t), Err(ListError::AlreadyLinked));
        }
        f.list().assert_valid(2);
        assert_eq!(f.tags(), [0, 1]);
    }

    #[test]
    fn removing_an_unlinked_node_is_refused_and_changes_nothing() {
        let mut f = Fixture::new(2);
        f.push(0).unwrap();
        assert_eq!(f.remove(1), Err(ListError::NotLinked), "never linked");
        f.remove(0).unwrap();
        assert_eq!(f.remove(0), Err(ListError::NotLinked), "removed twice");
        let h = f.head;
        // SAFETY: the fixture's head sentinel, live.
        assert_eq!(unsafe { f.list().remove(h) }, Err(ListError::NotLinked));
        f.list().assert_valid(0);
    }

    #[test]
    fn check_finds_a_wrong_count_and_broken_links() {
        let mut f = Fixture::new(3);
        for i in 0..3 {
            f.push(i).unwrap();
        }
        assert_eq!(f.list().check(2), Err(ListError::Broken), "one node more");
        assert_eq!(f.list().check(4), Err(ListError::Broken), "one node fewer");
        // Break a back link by hand: node 2's prev skips node 1.
        f.poke(2, None, Some(0));
        assert_eq!(f.list().check(3), Err(ListError::Broken));
        // A refused remove of a node whose neighbours disagree changes nothing.
        assert_eq!(f.remove(2), Err(ListError::Broken));
        f.poke(2, None, Some(1));
        f.list().assert_valid(3);
        // A cycle that never reaches the tail is found in bounded steps.
        f.poke(2, Some(1), None);
        assert_eq!(f.list().check(3), Err(ListError::Broken));
        assert_eq!(f.list().check(1000), Err(ListError::Broken));
    }

    #[test]
    #[should_panic(expected = "list invalid")]
    fn assert_valid_panics_on_a_wrong_count() {
        let mut f = Fixture::new(1);
        f.push(0).unwrap();
        f.list().assert_valid(0);
    }

    #[test]
    fn weak_index_appends_refuses_a_double_push_and_drains_in_order() {
        let mut list = dmem_list_t {
            head: null_mut(),
            tail: null_mut(),
        };
        let mut nodes: Vec<dmem_ref_node_t> = (0..3)
            .map(|i| dmem_ref_node_t {
                dmem: (i + 1) as *mut dmem_t,
                next: null_mut(),
            })
            .collect();
        let ptrs: Vec<NonNull<dmem_ref_node_t>> = nodes.iter_mut().map(NonNull::from).collect();
        // SAFETY: the list and nodes are locals that outlive the view, used only through it.
        let mut w = unsafe { WeakIndex::new(NonNull::from(&mut list)) };
        for p in &ptrs {
            // SAFETY: live nodes of this test.
            unsafe { w.push_back(*p).unwrap() };
        }
        for p in &ptrs {
            // SAFETY: as above.
            assert_eq!(unsafe { w.push_back(*p) }, Err(ListError::AlreadyLinked));
        }
        let mut seen = Vec::new();
        w.drain(|n| seen.push(n));
        assert_eq!(seen, ptrs);
        assert!(list.head.is_null() && list.tail.is_null());
        assert!(
            nodes.iter().all(|n| n.next.is_null()),
            "drained nodes are unlinked"
        );
    }

    #[derive(Clone, Debug)]
    enum Op {
        Push(usize),
        Remove(usize),
    }

    const N: usize = 6;

    proptest! {
        /// Against a `Vec` model: pushes append, removes take the node out wherever it is, a
        /// push of a linked node and a remove of an unlinked one are refused, and after every
        /// step the list is valid and holds the model's nodes in the model's order.
        #[test]
        fn list_matches_a_vec_model(ops in proptest::collection::vec(
            prop_oneof![(0..N).prop_map(Op::Push), (0..N).prop_map(Op::Remove)], 1..64)) {
            let mut f = Fixture::new(N as u32);
            let mut model: Vec<u32> = Vec::new();
            for op in ops {
                match op {
                    Op::Push(i) => {
                        let want = if model.contains(&(i as u32)) {
                            Err(ListError::AlreadyLinked)
                        } else {
                            model.push(i as u32);
                            Ok(())
                        };
                        prop_assert_eq!(f.push(i), want);
                    }
                    Op::Remove(i) => {
                        let want = match model.iter().position(|t| *t == i as u32) {
                            Some(k) => {
                                model.remove(k);
                                Ok(())
                            }
                            None => Err(ListError::NotLinked),
                        };
                        prop_assert_eq!(f.remove(i), want);
                    }
                }
                prop_assert_eq!(f.list().check(model.len()), Ok(()));
                prop_assert_eq!(f.tags(), model.clone());
            }
        }
    }
}
