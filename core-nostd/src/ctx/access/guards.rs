//! The guards and tokens of the context tree's locks and gates (spec §7.2, §8, §6, §12): what
//! an accessor hands out so that no borrow outlives its lock or its call.

use super::super::*;

/// One public API call in flight (spec §7.2 state gate, §12 teardown): holds a count that
/// `close` waits on before it tears anything down. Taken by [`Nrt::enter`]; dropping it ends
/// the call.
#[must_use = "the call is in flight only while the guard lives"]
pub(crate) struct InFlight<'a> {
    pub(in crate::ctx) active: &'a ShardedGate,
    pub(in crate::ctx) shard: usize,
    /// What the driver refused to free during this call.
    pub(in crate::ctx) kept: core::cell::Cell<Kept>,
}

/// Blocks the driver refused to free during one call (`memory_free` failed), reported by the
/// call as [`Error::DriverKept`].
#[derive(Copy, Clone, Debug, Default)]
pub(crate) struct Kept {
    pub(crate) blocks: u32,
    pub(crate) bytes: u64,
    pub(crate) errno: Option<crate::driver::Errno>,
}

impl Drop for InFlight<'_> {
    fn drop(&mut self) {
        self.active.exit(self.shard);
    }
}

/// The gate token the runtime's internal steps take: proof, for as long as
/// it is borrowed, that the tables only `init` and `close` write (the device count and
/// geometry, the logical-core table, each core's `physical_core_t` and GLOBAL allocator) are
/// not being rewritten under the step. Two types carry that proof:
/// - [`InFlight`], a public call past the state gate ([`Nrt::enter`] / [`Nrt::inspect`]):
///   `init` and `close` shut the gate and wait for every such guard to drop before they
///   write those tables;
/// - [`Exclusive`], `init` or `close` itself, whose steps run between its own writes.
///
/// A step that reads those tables takes `call: &impl InCall`, so "called inside a gated call"
/// is checked by the compiler rather than promised in a comment; a public method is
/// `let call = self.enter()?; self.step(&call, …)`. Sealed: implemented by those two types
/// only, which are themselves made only by the gate and by `init` / `close`.
pub(crate) trait InCall: sealed::Sealed {
    /// What the driver refused to free during the call so far.
    fn kept(&self) -> &core::cell::Cell<Kept>;

    /// Records that the driver refused to free `bytes` (`errno`).
    fn note_kept(&self, bytes: u64, errno: crate::driver::Errno) {
        let k = self.kept().get();
        self.kept().set(Kept {
            blocks: k.blocks.saturating_add(1),
            bytes: k.bytes.saturating_add(bytes),
            errno: Some(errno),
        });
    }

    /// `Err(DriverKept)` when the driver refused a free during the call.
    fn kept_result(&self) -> Result<()> {
        match self.kept().get() {
            Kept {
                blocks,
                bytes,
                errno: Some(errno),
            } => Err(Error::DriverKept {
                blocks,
                bytes,
                errno,
            }),
            _ => Ok(()),
        }
    }
}

impl InCall for InFlight<'_> {
    fn kept(&self) -> &core::cell::Cell<Kept> {
        &self.kept
    }
}
impl InCall for Exclusive<'_> {
    fn kept(&self) -> &core::cell::Cell<Kept> {
        &self.kept
    }
}

mod sealed {
    /// Keeps [`super::InCall`] to the two token types of this module.
    pub trait Sealed {}
    impl Sealed for super::InFlight<'_> {}
    impl Sealed for super::Exclusive<'_> {}
}

/// Opens the gate `init` shut, on whichever path `init` returns.
pub(crate) struct ReopenOnDrop<'a>(pub(crate) &'a ShardedGate);

impl Drop for ReopenOnDrop<'_> {
    fn drop(&mut self) {
        self.0.open();
    }
}

/// Proof that `init` or `close` has the runtime to itself (spec §12; the gate
/// token for the tables only those two rewrite): `init_lock` is held (the borrow of its guard
/// is the lifetime) and the in-flight gate is shut and drained, so no API call and no reader
/// of a closed runtime is in flight. Made only by [`Nrt::exclusive`], which checks both, for
/// `init` and `close`; there is one `init_lock`, so at most one token exists.
/// Accessors that hand out `&mut` to those tables take `&mut Exclusive`, so two such borrows
/// cannot overlap.
pub(crate) struct Exclusive<'g> {
    _init_lock: core::marker::PhantomData<&'g mut ()>,
    kept: core::cell::Cell<Kept>,
}

impl<'g> Exclusive<'g> {
    /// The token of the caller that holds `init_lock` (`lock`) and has shut and drained the
    /// gate (`active_calls.close_bounded`): [`Nrt::exclusive`] checks both.
    fn new(_lock: &'g mut crate::sync::MutexGuard<'_>) -> Self {
        Exclusive {
            _init_lock: core::marker::PhantomData,
            kept: core::cell::Cell::new(Kept::default()),
        }
    }
}

impl Nrt<'_> {
    /// The [`Exclusive`] token for `init` and `close` (`crate::lifecycle`): made only from the
    /// guard of this runtime's `init_lock`, once the in-flight gate is shut (and drained: the
    /// caller's `close_bounded` returned); `None` otherwise.
    pub(crate) fn exclusive<'g>(
        &self,
        lock: &'g mut crate::sync::MutexGuard<'_>,
    ) -> Option<Exclusive<'g>> {
        (lock.holds(&self.st.init_lock) && self.st.active_calls.is_shut())
            .then(|| Exclusive::new(lock))
    }
}

/// A core's scratchpad (spec §8) with its lock held: the page table and page count, which
/// only the holder of `scratchpad.lock` reads or writes, borrowed from the guard (so no
/// borrow outlives the lock). The page size and mode are written by bring-up alone
/// ([`Nrt::scratchpad_setup`], under the [`Exclusive`] token) and read as copies.
pub(crate) struct ScratchpadGuard<'a> {
    pub(in crate::ctx) sp: *mut tdrv_scratchpad_t,
    pub(in crate::ctx) _lock: crate::sync::MutexGuard<'a>,
}

impl ScratchpadGuard<'_> {
    /// Bytes per page.
    pub(crate) fn page_size(&self) -> u64 {
        // SAFETY: `sp` is a scratchpad of the tree (see `Nrt::scratchpad_lock`); `page_size`
        // is written only under the `Exclusive` token, never while a guard exists.
        unsafe { core::ptr::addr_of!((*self.sp).page_size).read() }
    }

    /// Whether the pages are contiguous (laid out in reverse, spec §8).
    pub(crate) fn is_contiguous(&self) -> bool {
        // SAFETY: as `page_size`.
        unsafe { core::ptr::addr_of!((*self.sp).is_contiguous).read() != 0 }
    }

    /// `(num_pages, pages)`, for reading and writing.
    pub(crate) fn table(&mut self) -> (&mut u32, &mut [tdrv_scratchpad_page_t]) {
        // SAFETY: `sp` points into the context tree, which lives as long as the state block
        // the guard borrows (`'a`), and is rewritten whole only by `zero_tree` under the
        // `Exclusive` token, when no guard exists. These two fields are read and written only
        // by the holder of `scratchpad.lock`, which this guard is, and the borrows are tied to
        // `&mut self`, so they end before the guard releases the lock and never overlap each
        // other or a `view`. Disjoint from the lock word and from `page_size` /
        // `is_contiguous`, which other threads read unlocked.
        unsafe {
            (
                &mut *core::ptr::addr_of_mut!((*self.sp).num_pages),
                &mut *core::ptr::addr_of_mut!((*self.sp).pages),
            )
        }
    }

    /// `(num_pages, pages)`, for reading.
    pub(crate) fn view(&self) -> (u32, &[tdrv_scratchpad_page_t]) {
        // SAFETY: as `table`, shared: no `&mut` from `table` can be live while `&self` is.
        unsafe {
            (
                core::ptr::addr_of!((*self.sp).num_pages).read(),
                &*core::ptr::addr_of!((*self.sp).pages),
            )
        }
    }
}

/// A core's cached ext-isa library set (`tpb_sunda_t.ulib_set_info_extisa_only`, spec §6) with
/// `ulib_staging_lock` held: the pointer is read and written only by the lock's holder.
pub(crate) struct UlibCacheGuard<'a> {
    pub(in crate::ctx) slot: *mut *mut ucode_lib_set_info_t,
    pub(in crate::ctx) _lock: crate::sync::MutexGuard<'a>,
}

impl UlibCacheGuard<'_> {
    /// The cached set (null: none staged).
    pub(crate) fn cached(&mut self) -> &mut *mut ucode_lib_set_info_t {
        // SAFETY: `slot` is the field of a `tpb_sunda_t` of the tree (see
        // `Nrt::ulib_cache_lock`), which lives as long as the state block the guard borrows
        // and is zeroed only by `zero_tree` under the `Exclusive` token, when no guard exists;
        // only the holder of `ulib_staging_lock` (this guard) touches the field, and the borrow
        // is tied to `&mut self`, so it ends before the lock is released.
        unsafe { &mut *self.slot }
    }
}

/// The members of a `dmem_t` that are fixed from its publication to its release (spec §3.1,
/// §3.2 step 5), copied out: what the ledger books and the OOM dump lists.
#[derive(Copy, Clone, Debug)]
pub(crate) struct DmemFixed {
    pub(crate) pa: u64,
    pub(crate) align_offset: u64,
    pub(crate) allocated_size: u64,
    pub(crate) mem_handle: u64,
    pub(crate) device_id: u32,
    pub(crate) nc_id: u32,
    pub(crate) mem_type: u32,
    pub(crate) mem_usage_type: u32,
    pub(crate) tdram_channel: u32,
    pub(crate) hint: [u8; 48],
    /// The reference word as read with the rest (0: no owner left).
    pub(crate) refs: u64,
}

impl DmemFixed {
    /// Copies the fixed members of `m`, or `None` when `m` is not published (its generation
    /// is even: not yet written, or being finalised).
    ///
    /// # Safety
    /// `m` is a live slot of the dmem arena that is neither released nor handed out again
    /// during the call: the lock of its shard is held (by [`Arena::with_live`] or
    /// [`Arena::for_each_live`]), or the caller owns the dmem (see
    /// [`Nrt::owned_dmem_fixed`]).
    #[inline]
    pub(in crate::ctx) unsafe fn read(
        arena: &Arena<dmem_t>,
        m: *const dmem_t,
    ) -> Option<DmemFixed> {
        // SAFETY: `m` is a slot of `arena` (contract).
        let (gen, refs) = unsafe { arena.words(m) };
        let refs = refs.load(Ordering::Acquire);
        if gen.load(Ordering::Acquire) & 1 == 0 {
            return None;
        }
        // SAFETY: `dmem_alloc` writes these members before `handle::publish` stores the odd
        // generation (Release), which the load above read (Acquire), so the writes are
        // visible; nobody writes them again until the slot is zeroed by a later allocation,
        // which needs the slot released first, which the contract excludes. Plain field reads
        // through a raw pointer: no reference to the whole `dmem_t` (whose list links other
        // threads write) is made.
        unsafe {
            Some(DmemFixed {
                pa: core::ptr::addr_of!((*m)._pa).read(),
                align_offset: core::ptr::addr_of!((*m).align_offset).read(),
                allocated_size: core::ptr::addr_of!((*m).allocated_size).read(),
                mem_handle: core::ptr::addr_of!((*m).mem_handle).read(),
                device_id: core::ptr::addr_of!((*m).device_id).read(),
                nc_id: core::ptr::addr_of!((*m).nc_id).read(),
                mem_type: core::ptr::addr_of!((*m).mem_type).read(),
                mem_usage_type: core::ptr::addr_of!((*m).mem_usage_type).read(),
                tdram_channel: core::ptr::addr_of!((*m).tdram_channel).read(),
                hint: core::ptr::addr_of!((*m).hint_buf).read(),
                refs,
            })
        }
    }
}

/// The last device OOM of a runtime, as `LedgerPool::oom` guards it: all-zero is "none yet".
pub(crate) struct LastOom {
    /// True once `last` and `channel` hold values (MaybeUninit keeps all-zero valid).
    pub(crate) set: bool,
    /// The error.
    pub(crate) last: core::mem::MaybeUninit<Error>,
    /// The failing channel's figures at the moment of the OOM.
    pub(crate) channel: core::mem::MaybeUninit<Option<crate::ctx::state::oom::FailingChannel>>,
    /// The OOM table as it was then; `dump_len` bytes of it are written.
    pub(crate) dump: [u8; OOM_DUMP_BYTES],
    /// Bytes of `dump` in use.
    pub(crate) dump_len: usize,
}

impl LastOom {
    /// Records `e` and its failing channel (the table is written into `dump` by the caller).
    pub(crate) fn record(
        &mut self,
        e: Error,
        channel: Option<crate::ctx::state::oom::FailingChannel>,
    ) {
        self.last.write(e);
        self.channel.write(channel);
        self.set = true;
    }

    /// The last OOM, if one was recorded.
    pub(crate) fn error(&self) -> Option<Error> {
        // SAFETY: `set` becomes true only in `record`, after `last` was written.
        self.set.then(|| unsafe { self.last.assume_init() })
    }

    /// The failing channel of the last OOM (`None` also when there was none).
    pub(crate) fn channel(&self) -> Option<crate::ctx::state::oom::FailingChannel> {
        // SAFETY: `set` becomes true only in `record`, after `channel` was written.
        self.set
            .then(|| unsafe { self.channel.assume_init() })
            .flatten()
    }

    /// The OOM table text captured with the last OOM ("" when none).
    pub(crate) fn dump_text(&self) -> &str {
        let bytes = &self.dump[..self.dump_len.min(OOM_DUMP_BYTES)];
        match core::str::from_utf8(bytes) {
            Ok(t) => t,
            // Truncated inside a character: keep the valid prefix.
            Err(e) => core::str::from_utf8(&bytes[..e.valid_up_to()]).unwrap_or(""),
        }
    }
}
