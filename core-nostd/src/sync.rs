//! The core's locks and waits (spec §2, §3.1, §6, §8).
//!
//! * [`nrt_mutex_t`]: the lock inside libnrt's 40-byte `pthread_mutex_t` slots, a spin lock of
//!   the core's own (why not spin's: see the type's `impl`).
//! * [`DataLock`]: every other lock, one that holds its data — `lock_api::Mutex` over spin's
//!   `SpinMutex<()>` ([`RawSpin`]).
//! * [`Relax`] (spin's `RelaxStrategy`) and [`relax`]: one step of a wait. The integrator can
//!   install a relax hook once (the std shim yields the thread), so long waits do not burn a
//!   core; without one a wait spins.
//! * The in-flight call gate ([`ShardedGate`]) and [`wait_until`].
//! * Bounded waits ([`WaitFor`], [`set_wait_hook`], [`set_wait_limit`]): every wait that can
//!   outlast a call of the core (a core's exec slot a guard holds, a model's references, the calls
//!   in flight `close` waits for, an allocator's lock during a walk) asks the integrator's
//!   wait hook at each look whether to go on, and gives up with [`Error::Timeout`] naming
//!   what it waited for.
//! * Re-entry detection ([`set_thread_token_hook`], [`Reentry`]): with a thread token the
//!   core refuses at once a call from a callback that would wait for the callback's own call,
//!   or from a thread that would wait for its own execution (recorded in the core's
//!   `ExecSlot`).
//!
//! The other waits of the core (an arena shard's books, a `model_db`, a ledger row, a tensor's
//! op lock and pending writers, the pins of an object being freed) last as long as a section
//! of the core itself — none is held across a callback or returned to the caller — so they
//! end when that section does.

use core::sync::atomic::{AtomicU32, AtomicUsize, Ordering};

use crate::error::{Error, Result};

use crate::abi::nrt_mutex_t;
use crate::loom::Atomic;

/// The integrator's relax hook, installed once ([`set_relax_hook`]).
static RELAX_HOOK: spin::Once<fn()> = spin::Once::new();

/// Installs the function called by spinning waiters after a short busy phase (e.g.
/// `std::thread::yield_now`). One-shot: the first hook installed stays for the process (a
/// second call, with any hook, changes nothing). Without one, waiters use
/// `core::hint::spin_loop`.
pub fn set_relax_hook(hook: fn()) {
    RELAX_HOOK.call_once(|| hook);
}

/// One relax step of a long wait (spin's [`spin::RelaxStrategy`]): the integrator's hook
/// ([`set_relax_hook`]) if one is installed, else `core::hint::spin_loop`.
pub struct Relax;

impl spin::RelaxStrategy for Relax {
    #[inline]
    fn relax() {
        match RELAX_HOOK.get() {
            Some(hook) => hook(),
            None => core::hint::spin_loop(),
        }
    }
}

pub use crate::error::WaitFor;

/// What the wait hook answers at each look of a bounded wait.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub enum WaitStep {
    /// Look again (the hook has relaxed: yielded, slept, or spun).
    Wait,
    /// Give up: the wait returns [`Error::Timeout`] with its [`WaitFor`].
    GiveUp,
}

/// The integrator's wait hook: called at each look of a bounded wait after a short busy phase,
/// with what is waited for and how many times the hook was called for this wait (0 at the
/// first call of each wait). It relaxes (yields the thread, sleeps, …) and decides whether to
/// go on.
pub type WaitHook = fn(WaitFor, u32) -> WaitStep;

/// The installed wait hook (`None`: spin up to the [`set_wait_limit`] looks).
static WAIT_HOOK: DataLock<Option<WaitHook>> = DataLock::new(None);

/// Looks a wait makes without a hook before it gives up ([`set_wait_limit`]).
static WAIT_LIMIT: AtomicU32 = AtomicU32::new(DEFAULT_WAIT_LIMIT);

/// The default of [`set_wait_limit`]: 2^26 looks (at a `spin_loop` hint each, seconds on
/// current cores).
pub const DEFAULT_WAIT_LIMIT: u32 = 1 << 26;

/// Installs (or, with `None`, removes) the wait hook that bounds every bounded wait
/// ([`WaitHook`]). Replaces any hook installed before. Without one, a wait spins and gives up
/// after the [`set_wait_limit`] looks.
pub fn set_wait_hook(hook: Option<WaitHook>) {
    *WAIT_HOOK.lock() = hook;
}

/// Sets how many looks a bounded wait makes without a wait hook before it gives up
/// ([`DEFAULT_WAIT_LIMIT`] until set; at least 1).
pub fn set_wait_limit(looks: u32) {
    WAIT_LIMIT.store(looks.max(1), Ordering::Relaxed);
}

/// Waits until `done()` holds, bounded: spins for a short busy phase, then asks the wait hook
/// (or counts against the [`set_wait_limit`] looks) at each look. `Err(Timeout(what))` when the
/// hook gives up or the limit is reached.
pub fn wait_bounded(what: WaitFor, mut done: impl FnMut() -> bool) -> Result<()> {
    use spin::RelaxStrategy;
    let mut i = 0u32;
    let mut asked = 0u32;
    let hook = *WAIT_HOOK.lock();
    let limit = WAIT_LIMIT.load(Ordering::Relaxed);
    while !done() {
        if i < SPINS_BEFORE_RELAX {
            spin::relax::Spin::relax();
            i += 1;
            continue;
        }
        let step = match hook {
            Some(h) => h(what, asked),
            None if asked >= limit => WaitStep::GiveUp,
            None => {
                core::hint::spin_loop();
                WaitStep::Wait
            }
        };
        if step == WaitStep::GiveUp {
            return Err(Error::Timeout(what));
        }
        asked = asked.saturating_add(1);
    }
    Ok(())
}

/// The integrator's thread-token hook ([`set_thread_token_hook`]).
static TOKEN_HOOK: spin::Once<fn() -> usize> = spin::Once::new();

/// Installs the function that names the calling thread (task, hart context …) with a token
/// no other live thread has, never 0 (the std shim: the address of a thread-local). One-shot,
/// like [`set_relax_hook`]. With it the core refuses at once, with
/// [`Error::WouldDeadlock`], a call from a callback that would wait for the callback's own
/// call (an unload of the model or a `close` from a model callback, an allocation, free or
/// walk of the allocator being walked) and a call that would wait for an execution the
/// calling thread began (an execution on its cores, an unload of its model, `close`);
/// without it such a call waits until its bounded wait gives up ([`Error::Timeout`]). An
/// execution leaked by a thread that has exited stays recorded with its token: a later thread
/// given the same token is refused as its owner until `Models::revoke_exec` ends it.
pub fn set_thread_token_hook(hook: fn() -> usize) {
    TOKEN_HOOK.call_once(|| hook);
}

/// The calling thread's token (0: no hook installed, nothing is detected).
#[inline]
pub fn thread_token() -> usize {
    TOKEN_HOOK.get().map_or(0, |h| h())
}

/// Slots of a [`Reentry`] table: threads that can be inside a callback of one runtime at
/// once and still be detected (a table that is full detects nothing more; the waits stay
/// bounded).
pub const REENTRY_SLOTS: usize = 16;

/// What a thread holds while it runs code the core does not control (a callback that holds a
/// model reference and a call in flight, or an allocator's lock): a key per kind, so a call
/// from the callback that would wait for it is refused at once. Callbacks run on the thread
/// that made the call, so the thread token is proof. (An execution's thread is recorded on
/// its cores instead, in their `ExecSlot`s.) All-zero is empty.
pub struct Reentry {
    /// Slots taken (a table nobody uses is read with one load).
    taken: AtomicU32,
    /// Allocator walks in progress on any thread, token or not ([`Reentry::walk`]).
    walks: AtomicU32,
    owners: [AtomicUsize; REENTRY_SLOTS],
    keys: [crate::atomic::AtomicU64; REENTRY_SLOTS],
}

/// Keys of a [`Reentry`] table: the kind in the top byte, the object below.
pub mod reentry_key {
    /// A callback holding a reference on model `id` and a call in flight.
    pub const fn model(id: u32) -> u64 {
        (1 << 56) | id as u64
    }
    /// A walk holding the lock of the allocator at address `al`.
    pub const fn allocator(al: usize) -> u64 {
        (2 << 56) | (al as u64 & 0x00ff_ffff_ffff_ffff)
    }
    /// The kind of `key`.
    pub const fn kind(key: u64) -> u64 {
        key >> 56
    }
    /// What a call that needs `key` released waits for.
    pub const fn wait_for(key: u64) -> super::WaitFor {
        match kind(key) {
            1 => super::WaitFor::ModelDrain { model: key as u32 },
            _ => super::WaitFor::AllocatorLock,
        }
    }
}

/// An allocator walk counted by [`Reentry::walk`], uncounted when dropped.
#[must_use = "the walk is counted only while the entry lives"]
pub struct WalkEntry<'a>(&'a AtomicU32);

impl Drop for WalkEntry<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::AcqRel);
    }
}

/// A [`Reentry`] entry, removed when dropped.
#[must_use = "the entry is removed when dropped"]
pub struct ReentryEntry<'a> {
    table: &'a Reentry,
    slot: usize,
}

impl Drop for ReentryEntry<'_> {
    fn drop(&mut self) {
        if self.slot < REENTRY_SLOTS {
            self.table.keys[self.slot].store(0, Ordering::Relaxed);
            self.table.owners[self.slot].store(0, Ordering::Release);
            self.table.taken.fetch_sub(1, Ordering::Release);
        }
    }
}

impl Reentry {
    /// An empty table.
    pub const fn new() -> Self {
        Reentry {
            taken: AtomicU32::new(0),
            walks: AtomicU32::new(0),
            owners: [const { AtomicUsize::new(0) }; REENTRY_SLOTS],
            keys: [const { crate::atomic::AtomicU64::new(0) }; REENTRY_SLOTS],
        }
    }

    /// Records that the calling thread holds `key` until the entry drops (nothing is recorded
    /// without a thread token, or with the table full).
    pub fn hold(&self, key: u64) -> ReentryEntry<'_> {
        let me = thread_token();
        if me != 0 {
            for (i, o) in self.owners.iter().enumerate() {
                if o.compare_exchange(0, me, Ordering::Acquire, Ordering::Relaxed)
                    .is_ok()
                {
                    self.taken.fetch_add(1, Ordering::AcqRel);
                    self.keys[i].store(key, Ordering::Release);
                    return ReentryEntry {
                        table: self,
                        slot: i,
                    };
                }
            }
        }
        ReentryEntry {
            table: self,
            slot: REENTRY_SLOTS,
        }
    }

    /// Whether the calling thread holds a key `pred` accepts.
    pub fn held_by_me(&self, mut pred: impl FnMut(u64) -> bool) -> bool {
        // The calling thread's own entries, if any, were counted before this call (by the
        // thread itself): a zero count means none of them exists.
        if self.taken.load(Ordering::Acquire) == 0 {
            return false;
        }
        let me = thread_token();
        me != 0
            && self
                .owners
                .iter()
                .zip(&self.keys)
                .any(|(o, k)| o.load(Ordering::Acquire) == me && pred(k.load(Ordering::Acquire)))
    }

    /// Counts an allocator walk (its callback may call in) until the returned guard drops.
    pub fn walk(&self) -> WalkEntry<'_> {
        self.walks.fetch_add(1, Ordering::AcqRel);
        WalkEntry(&self.walks)
    }

    /// Whether an allocator walk is in progress on some thread (a walk that begins after
    /// this answer runs on another thread than the caller's).
    #[inline]
    pub fn walking(&self) -> bool {
        self.walks.load(Ordering::Acquire) != 0
    }

    /// A key the calling thread holds (`None`: none, or no thread token).
    pub fn mine(&self) -> Option<u64> {
        let me = thread_token();
        if me == 0 || self.taken.load(Ordering::Acquire) == 0 {
            return None;
        }
        self.owners
            .iter()
            .zip(&self.keys)
            .find(|(o, _)| o.load(Ordering::Acquire) == me)
            .map(|(_, k)| k.load(Ordering::Acquire))
    }

    /// `Err(WouldDeadlock(what))` when the calling thread holds `key`.
    pub fn refuse(&self, key: u64, what: WaitFor) -> Result<()> {
        if self.held_by_me(|k| k == key) {
            return Err(Error::WouldDeadlock(what));
        }
        Ok(())
    }
}

impl Default for Reentry {
    fn default() -> Self {
        Self::new()
    }
}

impl nrt_mutex_t {
    /// [`Self::lock`], bounded ([`wait_bounded`]): `Err(Timeout(what))` when the wait gives up.
    #[inline]
    pub fn lock_bounded(&self, what: WaitFor) -> Result<MutexGuard<'_>> {
        match self.try_lock() {
            Some(g) => Ok(g),
            None => self.lock_bounded_wait(what),
        }
    }

    /// [`Self::lock_bounded`] once the first try failed: the bounded wait.
    #[cold]
    #[inline(never)]
    fn lock_bounded_wait(&self, what: WaitFor) -> Result<MutexGuard<'_>> {
        let mut got = None;
        wait_bounded(what, || {
            got = self.try_lock();
            got.is_some()
        })?;
        got.ok_or(Error::Timeout(what))
    }
}

/// One physical core's execution slot (spec §4.6): which execution holds the core, if any.
/// An execution takes the slot when it begins and owns it until its guard drops or
/// `Models::revoke_exec` ends it; whoever frees the slot first (compared by ticket, under the
/// slot's lock) is the only one that releases what the execution held. The lock is held for
/// a few stores only, never across a call of the integrator's. All-zero is free.
pub(crate) struct ExecSlot(DataLock<ExecRecord>);

/// What an [`ExecSlot`] records of the execution holding its core.
#[derive(Copy, Clone, Debug)]
pub(crate) struct ExecRecord {
    /// The execution's ticket ([`next_exec_ticket`]); 0: the core is free.
    pub(crate) ticket: u64,
    /// The thread that began the execution ([`thread_token`]; 0 without a token hook).
    pub(crate) token: usize,
    /// The counted model reference the execution holds, on its first core only (null on the
    /// second): released by whoever frees the first core's slot.
    pub(crate) model: *mut crate::abi::model_t,
    /// The model's handle words (`ModelHandle::to_parts`).
    pub(crate) handle: (u32, u32, u32),
    /// The execution's cores `(device, core)`, first then second (`u32::MAX` for none).
    pub(crate) cores: [(u32, u32); 2],
}

/// A `(device, core)` pair that names no core.
const NO_CORE: (u32, u32) = (u32::MAX, u32::MAX);

impl ExecRecord {
    /// The free slot's record.
    pub(crate) const FREE: ExecRecord = ExecRecord {
        ticket: 0,
        token: 0,
        model: core::ptr::null_mut(),
        handle: (0, 0, 0),
        cores: [NO_CORE; 2],
    };

    /// Whether the calling thread began this execution (never without a token hook).
    pub(crate) fn mine(&self) -> bool {
        let me = thread_token();
        self.ticket != 0 && me != 0 && self.token == me
    }
}

impl ExecSlot {
    /// A copy of the record (a free slot's ticket is 0).
    pub(crate) fn get(&self) -> ExecRecord {
        *self.0.lock()
    }

    /// Takes the slot for `rec` if it is free, running `f` under the slot's lock once taken
    /// (it marks the core); else the record of the execution holding it.
    pub(crate) fn try_take(
        &self,
        rec: &ExecRecord,
        f: impl FnOnce(),
    ) -> core::result::Result<(), ExecRecord> {
        let mut r = self.0.lock();
        if r.ticket != 0 {
            return Err(*r);
        }
        *r = *rec;
        f();
        Ok(())
    }

    /// Frees the slot if execution `ticket` holds it, running `f` under the slot's lock first
    /// (it clears the core's mark): the freed record, or `None` when another execution holds
    /// the slot or it is free (someone else ended `ticket`).
    pub(crate) fn end(&self, ticket: u64, f: impl FnOnce()) -> Option<ExecRecord> {
        let mut r = self.0.lock();
        if ticket == 0 || r.ticket != ticket {
            return None;
        }
        f();
        Some(core::mem::replace(&mut *r, ExecRecord::FREE))
    }

    /// Whether execution `ticket` holds the slot.
    pub(crate) fn held_by(&self, ticket: u64) -> bool {
        self.with_held(ticket, |_| ()).is_some()
    }

    /// `f` on the record under the slot's lock if execution `ticket` holds the slot (so it
    /// cannot end while `f` runs); `None` otherwise.
    pub(crate) fn with_held<R>(&self, ticket: u64, f: impl FnOnce(&ExecRecord) -> R) -> Option<R> {
        let r = self.0.lock();
        (ticket != 0 && r.ticket == ticket).then(|| f(&r))
    }
}

/// A process-unique execution ticket (never 0): a slot compares tickets, so an execution
/// that was ended never names a later one.
pub(crate) fn next_exec_ticket() -> u64 {
    static NEXT: crate::atomic::AtomicU64 = crate::atomic::AtomicU64::new(1);
    NEXT.fetch_add(1, Ordering::Relaxed)
}

/// Busy iterations a wait spins before it relaxes through [`Relax`].
const SPINS_BEFORE_RELAX: u32 = 64;

/// One step of a wait loop: spins for the first iterations, then relaxes ([`Relax`]).
#[inline]
pub fn relax(iteration: u32) {
    use spin::RelaxStrategy;
    if iteration < SPINS_BEFORE_RELAX {
        spin::relax::Spin::relax();
    } else {
        Relax::relax();
    }
}

impl nrt_mutex_t {
    /// An unlocked lock (all zero, like `PTHREAD_MUTEX_INITIALIZER`).
    pub const fn new() -> Self {
        nrt_mutex_t {
            state: AtomicU32::new(0),
            _reserved_0004: [0; 4],
            _reserved_0008: [0; 4],
        }
    }

    /// Acquires the lock, spinning (then relaxing) while another holder has it.
    #[inline]
    pub fn lock(&self) -> MutexGuard<'_> {
        // Fast path: one compare-exchange, inlined at every lock site. The wait loop stays out
        // of line so the callers' hot paths do not pay for its registers.
        if self
            .state
            .compare_exchange_weak(0, 1, Ordering::Acquire, Ordering::Relaxed)
            .is_err()
        {
            self.lock_contended();
        }
        MutexGuard { m: self }
    }

    #[cold]
    #[inline(never)]
    fn lock_contended(&self) {
        let mut i = 0u32;
        loop {
            while self.state.load(Ordering::Relaxed) != 0 {
                relax(i);
                i = i.saturating_add(1);
            }
            if self
                .state
                .compare_exchange_weak(0, 1, Ordering::Acquire, Ordering::Relaxed)
                .is_ok()
            {
                return;
            }
        }
    }

    /// Acquires the lock if it is free.
    #[inline]
    pub fn try_lock(&self) -> Option<MutexGuard<'_>> {
        self.state
            .compare_exchange(0, 1, Ordering::Acquire, Ordering::Relaxed)
            .ok()
            .map(|_| MutexGuard { m: self })
    }

    /// Whether some holder has the lock right now (diagnostics only).
    pub fn is_locked(&self) -> bool {
        self.state.load(Ordering::Relaxed) != 0
    }
}

// The ABI slots keep this raw lock of the core's own rather than spin's `SpinMutex<()>`: the
// slot's bytes are ABI. `abi_struct!` pins each member's offset, generates the C header and
// the layout report from them, and needs every member `ZeroValid` and `CType`; the lock word
// must be the `AtomicU32` at offset 0, where glibc keeps `__lock`, so that all-zero (a calloc'd
// tree, `PTHREAD_MUTEX_INITIALIZER`) is unlocked; and the shared-device mode resets these words
// in place after a death (`SimDevice::reset_locks`). spin's mutex has private, non-`repr(C)`
// fields whose layout none of that can state. Its wait relaxes through [`Relax`], as spin's do.
//
// SAFETY: `lock` returns only once this thread's compare-exchange moved the word 0 → 1
// (Acquire), and no other `lock`/`try_lock` can succeed until `unlock` stores 0 (Release),
// so at most one holder exists at a time and the holder's writes happen before the next
// holder's reads. `unlock`'s contract (lock_api: only called by the holder) is passed on.
// The lock word is not tied to a thread, so guards may be sent (`GuardSend`).
unsafe impl lock_api::RawMutex for nrt_mutex_t {
    #[allow(clippy::declare_interior_mutable_const)] // lock_api's INIT idiom: a value to copy
    const INIT: Self = nrt_mutex_t::new();
    type GuardMarker = lock_api::GuardSend;

    #[inline]
    fn lock(&self) {
        core::mem::forget(nrt_mutex_t::lock(self));
    }

    #[inline]
    fn try_lock(&self) -> bool {
        nrt_mutex_t::try_lock(self).map(core::mem::forget).is_some()
    }

    #[inline]
    unsafe fn unlock(&self) {
        self.state.store(0, Ordering::Release);
    }

    #[inline]
    fn is_locked(&self) -> bool {
        nrt_mutex_t::is_locked(self)
    }
}

/// The raw lock of the core's own (non-ABI) locks: spin's `SpinMutex<()>`, one byte.
///
/// Its waits spin without relaxing (`spin::relax::Spin`, not [`Relax`]): these locks guard a
/// few dozen instructions of bookkeeping (an arena shard's books) and are never held across a
/// driver call or another lock's wait, so a waiter's wait is as short as the holder's section
/// and a yield would cost more than it saves.
pub type RawSpin = spin::mutex::SpinMutex<(), spin::relax::Spin>;

/// A lock that holds the data it guards: `lock_api::Mutex` over [`RawSpin`]. All-zero
/// is unlocked (checked below); with zero-valid data the whole mutex is zero-valid, so it can
/// sit in the zeroed state blocks.
pub type DataLock<T> = lock_api::Mutex<RawSpin, T>;

// The state blocks holding `DataLock`s are made from zeroed bytes (`.bss`, calloc), so the
// unlocked `RawSpin` must be all-zero bytes. spin does not promise its layout; this checks it
// at compile time (a change of size, a non-zero unlocked value or padding fails the build).
const _: () = {
    // SAFETY: a value-to-bytes transmute between types of the same size (the compiler checks
    // the sizes); reading padding as `u8` would be a const-evaluation error, not UB at run time.
    let bytes: [u8; core::mem::size_of::<RawSpin>()] =
        unsafe { core::mem::transmute(<RawSpin as lock_api::RawMutex>::INIT) };
    let mut i = 0;
    while i < bytes.len() {
        assert!(
            bytes[i] == 0,
            "spin's unlocked SpinMutex is not all-zero bytes"
        );
        i += 1;
    }
};

impl Default for nrt_mutex_t {
    fn default() -> Self {
        Self::new()
    }
}

// A guard is the lock held: a copy would unlock twice.
static_assertions::assert_not_impl_any!(MutexGuard<'static>: Clone, Copy);
// The lock may sit in a `static` and be shared by threads.
static_assertions::assert_impl_all!(nrt_mutex_t: Send, Sync, lock_api::RawMutex);
static_assertions::assert_impl_all!(DataLock<u64>: Send, Sync);

/// Holds an [`nrt_mutex_t`] until dropped.
#[must_use = "the lock is released when the guard is dropped"]
pub struct MutexGuard<'a> {
    m: &'a nrt_mutex_t,
}

impl MutexGuard<'_> {
    /// Whether this guard holds `m`.
    pub fn holds(&self, m: &nrt_mutex_t) -> bool {
        core::ptr::eq(self.m, m)
    }
}

impl Drop for MutexGuard<'_> {
    #[inline]
    fn drop(&mut self) {
        self.m.state.store(0, Ordering::Release);
    }
}

/// The bit of a gate word that `close` sets. A gate word (spec §7.2 state gate, §12 teardown)
/// holds the number of calls past the gate on it, plus this bit once `close` has shut it. One
/// word, so every step of the one-word protocol below is a read-modify-write of the same
/// location and the steps are totally ordered (no store-buffering pattern to get wrong). The
/// functions are generic over the loom facade ([`crate::loom::Atomic`]), so loom checks them,
/// and the sharded gate built on them, as written (`tests/loom.rs`).
pub const GATE_CLOSED: u32 = 1 << 31;

/// A call passes the gate word: `true` when it is counted in (it must call [`gate_exit`] when
/// it ends); `false` when the gate is shut (the count is already taken back). If the count-in
/// comes before [`gate_close`]'s shut in the word's order, the closer sees the call and waits
/// for its exit; otherwise the call sees the closed bit.
#[inline]
pub fn gate_enter<W: Atomic<Int = u32>>(gate: &W) -> bool {
    if gate.fetch_add(1, Ordering::AcqRel) & GATE_CLOSED != 0 {
        gate.fetch_sub(1, Ordering::Release);
        return false;
    }
    true
}

/// A call counted in by [`gate_enter`] ends (Release: what it did happens before the
/// teardown that waited for it).
#[inline]
pub fn gate_exit<W: Atomic<Int = u32>>(gate: &W) {
    gate.fetch_sub(1, Ordering::Release);
}

/// Shuts the gate word (the first half of [`gate_close`]).
#[inline]
fn gate_shut<W: Atomic<Int = u32>>(gate: &W) {
    gate.fetch_or(GATE_CLOSED, Ordering::AcqRel);
}

/// Shuts the gate, then waits (calling `relax` between looks) until no call is counted in.
/// When it returns, every call that got past the gate has ended, and none gets past any more.
pub fn gate_close<W: Atomic<Int = u32>>(gate: &W, relax: impl FnMut(u32)) {
    gate_shut(gate);
    wait_until(|| gate.load(Ordering::Acquire) & !GATE_CLOSED == 0, relax);
}

/// Opens a gate [`gate_close`] shut (a runtime initialised again after `close`). Only the
/// closed bit is cleared: a late caller that counted itself in against the shut gate takes
/// its own count back.
pub fn gate_open<W: Atomic<Int = u32>>(gate: &W) {
    gate.fetch_and(!GATE_CLOSED, Ordering::AcqRel);
}

/// Shards of the runtime's [`ShardedGate`].
pub const GATE_SHARDS: usize = 16;

/// Bytes between the hot words of adjacent per-core / per-shard items: two cache lines, so
/// two items' first words never share a line whatever the base address (padding, not
/// alignment: an over-aligned member would over-align `CoreState`, its storage and the
/// simulator, and `Box::new_zeroed` then memsets them instead of using calloc's lazily
/// zeroed pages).
pub const LINE_STRIDE: usize = 128;

/// One gate word, padded to [`LINE_STRIDE`] (for the runtime's `AtomicU32` words exactly; a
/// loom word is larger, and its shard with it, which only matters to cache lines).
#[repr(C)]
pub struct GateShard<W = AtomicU32>(W, [u8; LINE_STRIDE - 4]);

const _: () = assert!(core::mem::size_of::<GateShard>() == LINE_STRIDE);

/// The in-flight gate split into `N` ([`GATE_SHARDS`] in the runtime) words on their own cache
/// lines (a call on one core does not bounce a line every call on every other
/// core touches). Each word runs the one-word protocol above ([`gate_enter`] / [`gate_exit`]);
/// a call counts itself in on one shard and out on the same one, and [`ShardedGate::close`]
/// shuts every shard before it waits for each to drain, so a call is either seen and waited
/// for or refused, exactly as with one word. Valid when all-zero (open, no call counted).
///
/// Generic over the word (the loom facade's [`Atomic`]) and the shard count, so loom checks
/// this type as the runtime runs it, on two shards (`tests/loom.rs`).
#[repr(C)]
pub struct ShardedGate<W = AtomicU32, const N: usize = GATE_SHARDS> {
    shards: [GateShard<W>; N],
}

impl<W: Atomic<Int = u32>, const N: usize> ShardedGate<W, N> {
    /// Refuses `N = 0` at compile time (every use of the gate names it).
    const SHARDS: usize = {
        assert!(N > 0, "a gate needs a shard");
        N
    };

    /// A gate over the given words: open and empty when they are all 0. The runtime's gate is
    /// a zeroed field of the state block; loom builds its models' gates this way.
    pub fn from_words(words: [W; N]) -> Self {
        let _ = Self::SHARDS;
        ShardedGate {
            shards: words.map(|w| GateShard(w, [0; LINE_STRIDE - 4])),
        }
    }

    /// The shard words, in order (diagnostics and the loom models' checks).
    pub fn words(&self) -> impl Iterator<Item = &W> {
        self.shards.iter().map(|s| &s.0)
    }

    /// The calling thread's shard. `no_std` has no thread-locals, so it is picked from the
    /// address of a local: threads run on disjoint stacks (a hash of the address's 2 MiB
    /// region), so concurrent threads mostly land on different shards. Any answer is
    /// correct; the guard remembers the shard it counted in on.
    #[inline(always)]
    fn pick() -> usize {
        let probe = 0u8;
        let a = core::ptr::addr_of!(probe) as usize as u64;
        ((a >> 21).wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 60) as usize % Self::SHARDS
    }

    /// [`gate_enter`] on this thread's shard: the shard to [`Self::exit`] on, or `None` when
    /// the gate is shut (nothing is left counted).
    #[inline]
    pub fn enter(&self) -> Option<usize> {
        self.enter_on(Self::pick())
    }

    /// [`gate_enter`] on shard `shard` (modulo the shard count): what [`Self::enter`] does on
    /// the shard it picks; the loom models choose the shard.
    #[inline]
    pub fn enter_on(&self, shard: usize) -> Option<usize> {
        let i = shard % Self::SHARDS;
        gate_enter(&self.shards[i].0).then_some(i)
    }

    /// [`gate_exit`] on shard `i` (what [`Self::enter`] returned).
    #[inline]
    pub fn exit(&self, i: usize) {
        gate_exit(&self.shards[i % Self::SHARDS].0);
    }

    /// Shuts every shard, then waits until none counts a call ([`gate_close`] on all words:
    /// all are shut before the first wait, so no call gets in through a shard not yet shut
    /// while another drains).
    pub fn close(&self, mut relax: impl FnMut(u32)) {
        for s in &self.shards {
            gate_shut(&s.0);
        }
        for s in &self.shards {
            gate_close(&s.0, &mut relax);
        }
    }

    /// [`Self::close`] with a bounded wait ([`wait_bounded`], [`WaitFor::CallsInFlight`]):
    /// `Timeout` when it gives up, the gate still shut (the caller opens it again).
    pub fn close_bounded(&self) -> Result<()> {
        for s in &self.shards {
            gate_shut(&s.0);
        }
        for s in &self.shards {
            wait_bounded(WaitFor::CallsInFlight, || {
                s.0.load(Ordering::Acquire) & !GATE_CLOSED == 0
            })?;
        }
        Ok(())
    }

    /// Whether every shard is shut (by [`Self::close`] or [`Self::close_bounded`], not yet
    /// opened again).
    pub fn is_shut(&self) -> bool {
        self.shards
            .iter()
            .all(|s| s.0.load(Ordering::Acquire) & GATE_CLOSED != 0)
    }

    /// [`gate_open`] on every shard.
    pub fn open(&self) {
        for s in &self.shards {
            gate_open(&s.0);
        }
    }
}

/// Waits until `done()` holds, calling `relax` between looks with the number of looks so far
/// (the waits of [`gate_close`] and of a model's drain, `model::drain_with`).
pub fn wait_until(mut done: impl FnMut() -> bool, mut relax: impl FnMut(u32)) {
    let mut i = 0u32;
    while !done() {
        relax(i);
        i = i.saturating_add(1);
    }
}

#[cfg(test)]
mod tests {
    extern crate std;
    use super::*;
    use core::cell::UnsafeCell;
    use std::sync::atomic::AtomicBool;

    struct Guarded {
        lock: nrt_mutex_t,
        value: UnsafeCell<u64>,
        inside: AtomicBool,
    }
    // SAFETY: `value` is only touched with `lock` held (the test checks exactly that).
    unsafe impl Sync for Guarded {}

    #[test]
    fn lock_excludes_under_contention() {
        const THREADS: u64 = 4;
        const ITERS: u64 = 20_000;
        let g = Guarded {
            lock: nrt_mutex_t::new(),
            value: UnsafeCell::new(0),
            inside: AtomicBool::new(false),
        };
        let g = &g;
        std::thread::scope(|s| {
            for _ in 0..THREADS {
                s.spawn(move || {
                    for _ in 0..ITERS {
                        let _l = g.lock.lock();
                        assert!(!g.inside.swap(true, Ordering::Relaxed), "two holders");
                        // SAFETY: lock held.
                        unsafe { *g.value.get() += 1 };
                        g.inside.store(false, Ordering::Relaxed);
                    }
                });
            }
        });
        // SAFETY: every thread has joined.
        assert_eq!(unsafe { *g.value.get() }, THREADS * ITERS);
        assert!(!g.lock.is_locked());
    }

    #[test]
    fn a_data_lock_excludes_under_contention_and_is_unlocked_when_zero() {
        const THREADS: u64 = 4;
        const ITERS: u64 = 20_000;
        // The zeroed state blocks rely on this: all-zero bytes are an unlocked lock.
        // SAFETY: the compile-time check beside `RawSpin` proves all-zero is its unlocked value.
        let zeroed: DataLock<u64> = unsafe { core::mem::zeroed() };
        assert!(!zeroed.is_locked());
        let lock = &zeroed;
        std::thread::scope(|s| {
            for _ in 0..THREADS {
                s.spawn(move || {
                    for _ in 0..ITERS {
                        let mut g = lock.lock();
                        let v = *g;
                        core::hint::spin_loop();
                        *g = v + 1;
                    }
                });
            }
        });
        assert_eq!(*lock.lock(), THREADS * ITERS);
        assert!(lock.try_lock().is_some(), "no guard left behind");
    }

    #[test]
    fn the_relax_hook_is_installed_once() {
        std::thread_local!(static CALLS: core::cell::Cell<u32> = const { core::cell::Cell::new(0) });
        // Counted per thread: other tests' waits may call the hook on their threads.
        fn counting() {
            CALLS.with(|c| c.set(c.get() + 1));
        }
        fn other() {
            CALLS.with(|c| c.set(c.get() + 1000));
        }
        // The only unit test that installs a hook.
        set_relax_hook(counting);
        set_relax_hook(other);
        for i in 0..SPINS_BEFORE_RELAX {
            relax(i); // the busy phase: no hook call
        }
        assert_eq!(CALLS.with(|c| c.get()), 0);
        relax(SPINS_BEFORE_RELAX);
        assert_eq!(CALLS.with(|c| c.get()), 1, "the first hook stays");
    }

    fn open_gate() -> ShardedGate {
        ShardedGate::from_words(core::array::from_fn(|_| AtomicU32::new(0)))
    }

    fn counts(g: &ShardedGate) -> std::vec::Vec<u32> {
        g.words().map(|w| w.load(Ordering::Relaxed)).collect()
    }

    #[test]
    fn a_call_counts_in_on_its_shard_only() {
        let g = open_gate();
        let i = g.enter_on(3).expect("an open gate lets the call in");
        let mut want = [0u32; GATE_SHARDS];
        want[3] = 1;
        assert_eq!(counts(&g), want, "only shard 3 counts the call");
        // A shard index past the end wraps rather than failing or panicking.
        let j = g.enter_on(3 + GATE_SHARDS).expect("wrapped shard");
        assert_eq!((i, j), (3, 3));
        g.exit(i);
        g.exit(j);
        assert_eq!(counts(&g), [0; GATE_SHARDS]);
        let k = g.enter().expect("the caller's own shard");
        assert!(k < GATE_SHARDS);
        g.exit(k);
        assert_eq!(counts(&g), [0; GATE_SHARDS]);
    }

    #[test]
    fn close_turns_calls_away_on_every_shard_and_open_lets_them_in() {
        let g = open_gate();
        g.close(|_| panic!("nothing is in flight: no wait"));
        for s in 0..GATE_SHARDS {
            assert!(
                g.enter_on(s).is_none(),
                "shard {s} lets a call in after close"
            );
        }
        assert_eq!(
            counts(&g),
            [GATE_CLOSED; GATE_SHARDS],
            "refused calls left no count"
        );
        g.open();
        for s in 0..GATE_SHARDS {
            let i = g.enter_on(s).expect("reopened");
            g.exit(i);
        }
        assert_eq!(counts(&g), [0; GATE_SHARDS]);
    }

    #[test]
    fn close_waits_for_a_call_on_another_shard() {
        let g = open_gate();
        let ended = AtomicBool::new(false);
        let i = g.enter_on(GATE_SHARDS - 1).expect("open");
        std::thread::scope(|s| {
            let closer = s.spawn(|| {
                g.close(|_| std::thread::yield_now());
                ended.load(Ordering::Acquire)
            });
            // The closer shuts every shard first; the call on the last one is still counted.
            while g.enter_on(0).map(|j| g.exit(j)).is_some() {
                std::thread::yield_now();
            }
            ended.store(true, Ordering::Release);
            g.exit(i);
            assert!(
                closer.join().unwrap(),
                "close returned before the call ended"
            );
        });
    }

    #[test]
    fn try_lock_fails_while_held_and_succeeds_after() {
        let m = nrt_mutex_t::new();
        let l = m.lock();
        assert!(m.try_lock().is_none());
        drop(l);
        assert!(m.try_lock().is_some());
        assert!(!m.is_locked(), "the try_lock guard was dropped");
    }
}
