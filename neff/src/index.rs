//! What the walk keeps of the archive's members — every member's size, the bodies of metadata
//! members (under the metadata cap), the first bytes of `.npy` members — and the view the
//! metadata parsers read it through.
//!
//! The parsers run either on the whole archive (*final*: a member not seen is absent) or, while
//! the first pass is still under way, on what has been seen so far (*early*): then a lookup of a
//! member not seen yet is recorded as a miss instead of answered, a weight not seen yet stands
//! for its declared size, and a parse that missed nothing is exactly what the final parse would
//! give — which lets the weights that follow stream into a model loaded before they arrive.

use std::cell::RefCell;
use std::collections::{BTreeSet, HashMap};

use crate::error::{NeffError, Result};

/// Bytes kept of the start of a `.npy` member: the NumPy v1 magic, version and header length.
pub const NPY_HEAD: usize = 10;

/// One member.
#[derive(Debug, Default)]
pub struct Rec {
    /// Bytes, as its tar header declares.
    pub size: u64,
    /// The body, when buffered as metadata.
    pub body: Option<Vec<u8>>,
    /// The first [`NPY_HEAD`] bytes of a `.npy` member (fewer if it is shorter).
    pub head: Vec<u8>,
    /// Its body has gone by in the current pass (a member still being read has not).
    pub passed: bool,
    /// The cap it is larger than (never buffered).
    pub over_cap: Option<u64>,
}

/// The members seen, by name.
#[derive(Debug, Default)]
pub struct Index {
    /// name → member.
    pub recs: HashMap<String, Rec>,
    /// Bytes of buffered bodies.
    pub buffered: u64,
}

/// What an early or final parse could not answer.
#[derive(Debug, Default)]
pub struct Misses {
    /// Members not seen yet (early only).
    pub unseen: BTreeSet<String>,
    /// Members seen whose bodies the parse needs but were not buffered.
    pub want: BTreeSet<String>,
    /// A weight whose member has already gone by (early only): this pass cannot copy it.
    pub blocked: bool,
}

impl Misses {
    /// Whether the parse missed nothing.
    pub fn is_empty(&self) -> bool {
        self.unseen.is_empty() && self.want.is_empty() && !self.blocked
    }
}

/// The parsers' view of an [`Index`].
pub struct View<'a> {
    idx: &'a Index,
    early: bool,
    misses: RefCell<Misses>,
    used: RefCell<BTreeSet<String>>,
}

/// The error a missed lookup returns; the caller reads the [`Misses`], not this message.
fn pending(name: &str) -> NeffError {
    NeffError::invalid(format!("NEFF member {name} not read yet"))
}

impl<'a> View<'a> {
    /// A view of `idx`: `early` while the walk is under way.
    pub fn new(idx: &'a Index, early: bool) -> Self {
        View {
            idx,
            early,
            misses: RefCell::default(),
            used: RefCell::default(),
        }
    }

    /// Whether the parse is early.
    pub fn early(&self) -> bool {
        self.early
    }

    /// What the parse missed, and the members whose bodies it read.
    pub fn into_parts(self) -> (Misses, BTreeSet<String>) {
        (self.misses.into_inner(), self.used.into_inner())
    }

    /// Whether `name` is a member. Early, a name not seen yet is a miss.
    pub fn has(&self, name: &str) -> Result<bool> {
        if self.idx.recs.contains_key(name) {
            return Ok(true);
        }
        if self.early {
            self.misses.borrow_mut().unseen.insert(name.to_string());
            return Err(pending(name));
        }
        Ok(false)
    }

    /// Whether `name` has been seen (no miss recorded either way).
    pub fn seen(&self, name: &str) -> bool {
        self.idx.recs.contains_key(name)
    }

    /// Whether `name`'s body has gone by in this pass.
    pub fn passed(&self, name: &str) -> bool {
        self.idx.recs.get(name).is_some_and(|r| r.passed)
    }

    /// A member's bytes (0 for a name not seen).
    pub fn size(&self, name: &str) -> u64 {
        self.idx.recs.get(name).map_or(0, |r| r.size)
    }

    /// The first bytes of a `.npy` member.
    pub fn npy_head(&self, name: &str) -> &'a [u8] {
        self.idx.recs.get(name).map_or(&[], |r| &r.head)
    }

    /// Records that the early parse met a weight whose member has gone by.
    pub fn block(&self) -> NeffError {
        self.misses.borrow_mut().blocked = true;
        pending("weight")
    }

    /// Records `name` as a member not seen yet (a weight without a declared size).
    pub fn unseen(&self, name: &str) -> NeffError {
        self.misses.borrow_mut().unseen.insert(name.to_string());
        pending(name)
    }

    /// A seen member's body. One larger than the metadata cap is refused; one not buffered is
    /// a miss (it is read in another pass).
    pub fn body(&self, name: &str) -> Result<&'a [u8]> {
        let Some(r) = self.idx.recs.get(name) else {
            return Err(NeffError::invalid(format!(
                "Failed to get NEFF member {name}"
            )));
        };
        if let Some(b) = &r.body {
            self.used.borrow_mut().insert(name.to_string());
            return Ok(b);
        }
        if let Some(cap) = r.over_cap {
            return Err(NeffError::invalid(format!(
                "NEFF metadata member {name} is {} bytes, more than the {cap}-byte cap for it \
                 (ReadOptions::max_metadata_bytes; the IO tensor table's: 8 MiB); refused",
                r.size
            )));
        }
        self.misses.borrow_mut().want.insert(name.to_string());
        Err(pending(name))
    }
}

/// `iter`'s results, all of them evaluated (so every miss of every item is recorded), then the
/// first error if any.
pub fn collect_all<T>(iter: impl Iterator<Item = Result<T>>) -> Result<Vec<T>> {
    let all: Vec<Result<T>> = iter.collect();
    all.into_iter().collect()
}
