//! The process-global runtime behind the C ABI and the machinery every entry point shares:
//! the lifecycle (`Uninit → Init → Closed → Init …`), the opaque pointers handed to C and how
//! they are checked (tensors, models and tensor sets: the core's handles, encoded in the
//! pointer value and checked by the core at every call; no registry), the error type with its
//! `NRT_STATUS`, the thread-local last error, and the panic fence.
//!
//! libnrt has one runtime per process (docs/ARCHITECTURE.md principle 3: the C ABI uses one global
//! context). Every call takes the lifecycle lock shared; `nrt_init`/`nrt_close` take it
//! exclusively, so close waits for calls in flight and no call sees a half-closed runtime.
//! The lock is a sharded reader-writer lock ([`Lifecycle`]): a call touches only its thread's
//! shard, so calls on different threads share no cache line here (no
//! process-wide lock on the per-call path).

use std::cell::{Cell, RefCell, UnsafeCell};
use std::ffi::{c_char, CStr, CString};
use std::fmt::Display;
use std::hash::{BuildHasher, Hasher};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicPtr, AtomicU32, AtomicUsize, Ordering};
use std::sync::{Mutex, MutexGuard, RwLock, RwLockReadGuard, RwLockWriteGuard};

use crossbeam_utils::CachePadded;
use nrt_core::abi::NRT_STATUS as CoreStatus;
use nrt_core::{ModelHandle, SetHandle, TensorHandle};
use nrt_host::HostRuntime;

use crate::status::NRT_STATUS;
use crate::types::{nrt_model_t, nrt_tensor_set_t, nrt_tensor_t};

/// What an entry point failed with: the status C sees and the message it logs.
#[derive(Debug, Clone)]
pub(crate) struct Fail {
    pub status: CoreStatus,
    pub msg: String,
}

impl Fail {
    pub fn new(status: CoreStatus, msg: impl Display) -> Self {
        Fail {
            status,
            msg: msg.to_string(),
        }
    }
    /// `NRT_INVALID`: a bad argument.
    pub fn invalid(msg: impl Display) -> Self {
        Fail::new(CoreStatus::NRT_INVALID, msg)
    }
}

impl From<nrt_core::Error> for Fail {
    fn from(e: nrt_core::Error) -> Self {
        Fail::new(e.status(), e)
    }
}

pub(crate) type Res<T = ()> = Result<T, Fail>;

/// One initialised runtime and the C-side state tied to it.
pub(crate) struct Runtime {
    pub rt: HostRuntime,
    /// This runtime's number among the process's `nrt_init`s ([`INIT_SERIAL`]): its low bits
    /// are in every pointer it hands out ([`Runtime::tensor_ptr`], [`Runtime::model_ptr`],
    /// [`Runtime::set_ptr`]).
    pub serial: u32,
    /// XORed into the generation (or model id) a pointer carries: drawn at random per
    /// runtime, so a pointer of an earlier runtime whose serial bits happen to match names a
    /// random generation (refused by the core but for a 2⁻³² chance), not the same small
    /// numbers.
    salt: u32,
    /// The core's epoch for this runtime (what the core's handles carry).
    epoch: u32,
    /// The OOM report captured when the last device OOM happened (libnrt writes its
    /// report at the failure, not when someone asks).
    pub oom_report: Mutex<Option<String>>,
    /// Held by a `nrt_load(vnc = -1)` from picking its core to the end of the load.
    pub free_core_pick: Mutex<()>,
}

/// Bits of a pointer's slot index (a tensor or set arena slot, a model's logical core):
/// arenas up to 2²⁰ slots through the C API.
const INDEX_BITS: u32 = 20;
/// Bits of the runtime serial a pointer carries.
const SERIAL_BITS: u32 = 6;
/// Where each field of a pointer starts (bits 0..3 stay 0: 8-byte aligned).
const SERIAL_SHIFT: u32 = HANDLE_SHIFT;
const INDEX_SHIFT: u32 = SERIAL_SHIFT + SERIAL_BITS;
const GEN_SHIFT: u32 = INDEX_SHIFT + INDEX_BITS;
const _: () = assert!(GEN_SHIFT + 32 <= KIND_SHIFT);
const _: () = assert!(usize::BITS == 64, "the C handles need 64-bit pointers");

impl Runtime {
    /// Passes a core result through. A device out-of-memory (`NRT_RESOURCE`, spec §3.2
    /// GOTCHA) is reported as libnrt reports it (public API §5): the table the core captured
    /// at the failure, followed by `context()` (what the call asked for), is logged at ERROR
    /// and written to its file (`nrt_host::runtime::write_oom_report`), and kept for
    /// `nrtx_get_oom_report`.
    pub fn core<T>(&self, r: nrt_core::Result<T>, context: impl FnOnce() -> String) -> Res<T> {
        if let Err(e @ nrt_core::Error::DeviceOom { device, .. }) = &r {
            let mut text = crate::nrtx::oom_report_text(self, Some(*e));
            text.push_str(&context());
            for line in text.lines() {
                log::error!(target: "nrt", "{line}");
            }
            match nrt_host::runtime::write_oom_report(*device, &text) {
                Ok(None) => {}
                Ok(Some(path)) => {
                    log::error!(target: "nrt", "memory utilisation table written to {}", path.display())
                }
                Err(err) => log::warn!(target: "nrt", "could not write the OOM table: {err}"),
            }
            *lock(&self.oom_report) = Some(text);
        }
        Ok(r?)
    }

    /// The pointer value of a core handle of kind `kind` with words `(index, generation)`:
    /// `HANDLE_BASE | kind | (generation ^ salt) << 29 | index << 9 | serial << 3` (low serial
    /// bits only). No registry: the value is decoded back ([`Runtime::decode`]) and the core
    /// checks the handle (generation, epoch) at every call. `None` when the index does not
    /// fit.
    fn encode(&self, kind: usize, index: u32, generation: u32) -> Option<usize> {
        if index >= 1 << INDEX_BITS {
            return None;
        }
        let serial = self.serial as usize & ((1 << SERIAL_BITS) - 1);
        Some(
            HANDLE_BASE
                | kind
                | ((generation ^ self.salt) as usize) << GEN_SHIFT
                | (index as usize) << INDEX_SHIFT
                | serial << SERIAL_SHIFT,
        )
    }

    /// [`Runtime::encode`] backwards: `(index, generation)` of pointer value `v` of kind
    /// `kind`. `what` fails for a value that is no pointer of that kind (NULL, foreign,
    /// corrupt, another kind's) and `closed` for one of a runtime that `nrt_close` ended;
    /// whether the object is still alive is the core's to say.
    fn decode(&self, v: usize, kind: usize, what: impl FnOnce() -> Fail) -> Res<(u32, u32)> {
        if v & (HANDLE_BASE | KIND_MASK | ((1 << HANDLE_SHIFT) - 1)) != HANDLE_BASE | kind {
            return Err(what());
        }
        let field = |shift: u32, bits: u32| ((v >> shift) & ((1usize << bits) - 1)) as u32;
        if field(SERIAL_SHIFT, SERIAL_BITS) != self.serial & ((1 << SERIAL_BITS) - 1) {
            return Err(Fail::new(
                if kind == KIND_MODEL {
                    CoreStatus::NRT_INVALID_HANDLE
                } else {
                    CoreStatus::NRT_INVALID
                },
                format_args!(
                    "the {} belongs to a runtime that nrt_close ended",
                    match kind {
                        KIND_TENSOR => "tensor",
                        KIND_MODEL => "model",
                        _ => "tensor set",
                    }
                ),
            ));
        }
        Ok((
            field(INDEX_SHIFT, INDEX_BITS),
            field(GEN_SHIFT, 32) ^ self.salt,
        ))
    }

    /// The `nrt_tensor_t *` C gets for a new core tensor `h` ([`Runtime::encode`]). When the
    /// slot index does not fit the pointer, the tensor is freed again and the call fails with
    /// NRT_RESOURCE.
    pub fn tensor_ptr(&self, h: TensorHandle) -> Res<*mut nrt_tensor_t> {
        let (index, generation, _) = h.to_parts();
        match self.encode(KIND_TENSOR, index, generation) {
            Some(v) => Ok(handle_ptr(v)),
            None => {
                let _ = self.rt.nrt().tensors().free(h);
                Err(too_many("tensor", index))
            }
        }
    }

    /// The `nrt_tensor_t *` of a tensor C already holds (its index fitted when it was handed
    /// out), e.g. one stored in a tensor set.
    pub fn existing_tensor_ptr(&self, h: TensorHandle) -> Res<*mut nrt_tensor_t> {
        let (index, generation, _) = h.to_parts();
        self.encode(KIND_TENSOR, index, generation)
            .map(handle_ptr)
            .ok_or_else(|| too_many("tensor", index))
    }

    /// The core's handle behind tensor pointer `p` ([`Runtime::tensor_ptr`] backwards), for
    /// the core to check: `NRT_INVALID` here for NULL, for a value that is no tensor pointer
    /// (foreign, corrupt, a model or set pointer) and for one of a runtime that `nrt_close`
    /// ended; the core refuses a freed or forged one (`InvalidHandle`, NRT_INVALID) at any
    /// age.
    pub fn tensor(&self, p: *const nrt_tensor_t) -> Res<TensorHandle> {
        let (index, generation) = self.decode(p.addr(), KIND_TENSOR, || {
            Fail::invalid("not a live tensor (NULL, already freed, foreign or corrupt pointer)")
        })?;
        Ok(TensorHandle::from_parts(index, generation, self.epoch))
    }

    /// The `nrt_tensor_set_t *` C gets for a new core set `h`; when its slot index does not
    /// fit, the set is destroyed again and the call fails with NRT_RESOURCE.
    pub fn set_ptr(&self, h: SetHandle) -> Res<*mut nrt_tensor_set_t> {
        let (index, generation, _) = h.to_parts();
        match self.encode(KIND_SET, index, generation) {
            Some(v) => Ok(handle_ptr(v)),
            None => {
                let _ = self.rt.nrt().sets().destroy(h);
                Err(too_many("tensor set", index))
            }
        }
    }

    /// The core's handle behind set pointer `p` (NRT_INVALID here for NULL or a value that is
    /// no set pointer of this runtime; the core refuses a destroyed or forged one).
    pub fn set(&self, p: *const nrt_tensor_set_t, what: &str) -> Res<SetHandle> {
        let (index, generation) = self.decode(p.addr(), KIND_SET, || {
            Fail::invalid(format_args!(
                "{what} is not a live tensor set (NULL, destroyed, foreign or corrupt pointer)"
            ))
        })?;
        Ok(SetHandle::from_parts(index, generation, self.epoch))
    }

    /// The `nrt_model_t *` C gets for core model `h`: its logical core as the index, its
    /// `H_MODEL` id as the generation ([`Runtime::encode`]). A logical core always fits.
    pub fn model_ptr(&self, h: ModelHandle) -> Res<*mut nrt_model_t> {
        let (vnc, id, _) = h.to_parts();
        self.encode(KIND_MODEL, vnc, id)
            .map(handle_ptr)
            .ok_or_else(|| too_many("model core", vnc))
    }

    /// The core's handle behind model pointer `p`: NRT_INVALID for NULL, NRT_INVALID_HANDLE
    /// here for a value that is no model pointer of this runtime (and from the core for an
    /// unloaded or forged one, at any age).
    pub fn model(&self, p: *const nrt_model_t) -> Res<ModelHandle> {
        if p.is_null() {
            return Err(Fail::invalid("model is NULL"));
        }
        let (vnc, id) = self.decode(p.addr(), KIND_MODEL, || {
            Fail::new(
                CoreStatus::NRT_INVALID_HANDLE,
                "model is not a loaded model of this runtime (unloaded, foreign or corrupt \
                 pointer)",
            )
        })?;
        Ok(ModelHandle::from_parts(vnc, id, self.epoch))
    }

    /// Closes the core (spec §12): it frees what the application left, VIRTUAL tensors'
    /// bytes included (to the host provider the runtime is bound to).
    fn shutdown(self) {
        if let Err(e) = self.rt.close() {
            log::warn!(target: "nrt_close", "{e}");
        }
    }
}

/// NRT_RESOURCE: an arena slot past what a C pointer can carry.
fn too_many(what: &str, index: u32) -> Fail {
    Fail::new(
        CoreStatus::NRT_RESOURCE,
        format_args!(
            "{what} slot {index} does not fit a C handle (at most {} live through the C API)",
            1u32 << INDEX_BITS
        ),
    )
}

enum Life {
    Uninit,
    Init(Box<Runtime>),
    Closed,
}

/// Shards of the [`Lifecycle`] lock.
const LIFE_SHARDS: usize = 16;

/// The lifecycle behind a sharded reader-writer lock: a reader takes the read side of its
/// thread's shard only (threads are dealt shards round-robin at their first call); a writer
/// takes the write side of every shard, in order. So calls on different threads touch
/// different cache lines, and `nrt_init` / `nrt_close` still exclude every call.
///
/// Hand-rolled rather than `crossbeam_utils::sync::ShardedLock`, which registers every thread
/// in a process-global map that is never freed: valgrind reports it as possibly lost in C
/// clients (`tests/tests/c_client.rs`). This one allocates nothing.
struct Lifecycle {
    shards: [CachePadded<RwLock<()>>; LIFE_SHARDS],
    life: UnsafeCell<Life>,
}

// SAFETY: `life` is read only through `read` (holding a shard's read lock) and written only
// through `write` (holding every shard's write lock, so no reader holds any): never a write
// alongside another access. `Life` itself is Send + Sync.
unsafe impl Sync for Lifecycle {}

/// The next shard to deal to a thread at its first call.
static NEXT_SHARD: AtomicUsize = AtomicUsize::new(0);

thread_local! {
    /// This thread's [`Lifecycle`] shard (`usize::MAX` until its first call). A plain `Cell`:
    /// no destructor, no heap.
    static SHARD: Cell<usize> = const { Cell::new(usize::MAX) };
}

/// Shared access to the lifecycle (what [`Lifecycle::read`] returns).
struct LifeRead<'a> {
    _g: RwLockReadGuard<'a, ()>,
    life: &'a Life,
}

/// Exclusive access to the lifecycle (what [`Lifecycle::write`] returns).
struct LifeWrite<'a> {
    _g: [RwLockWriteGuard<'a, ()>; LIFE_SHARDS],
    life: &'a mut Life,
}

impl Lifecycle {
    const fn new() -> Self {
        Lifecycle {
            shards: [const { CachePadded::new(RwLock::new(())) }; LIFE_SHARDS],
            life: UnsafeCell::new(Life::Uninit),
        }
    }

    fn read(&self) -> LifeRead<'_> {
        // A thread whose storage is gone (a call from a TLS destructor) uses shard 0.
        let i = SHARD
            .try_with(|s| {
                if s.get() == usize::MAX {
                    s.set(NEXT_SHARD.fetch_add(1, Ordering::Relaxed) % LIFE_SHARDS);
                }
                s.get()
            })
            .unwrap_or(0);
        let g = self.shards[i].read().unwrap_or_else(|e| e.into_inner());
        // SAFETY: a shard's read lock is held for the guard's life, so no writer runs (see
        // the Sync impl).
        let life = unsafe { &*self.life.get() };
        LifeRead { _g: g, life }
    }

    fn write(&self) -> LifeWrite<'_> {
        let g = self
            .shards
            .each_ref()
            .map(|s| s.write().unwrap_or_else(|e| e.into_inner()));
        // SAFETY: every shard's write lock is held for the guard's life, so no reader and no
        // other writer runs (see the Sync impl).
        let life = unsafe { &mut *self.life.get() };
        LifeWrite { _g: g, life }
    }
}

/// The lifecycle: read-shared by every call, written by `nrt_init` / `nrt_close`.
static RT: Lifecycle = Lifecycle::new();

/// `nrt_init`s so far in this process (the next runtime's [`Runtime::serial`]).
static INIT_SERIAL: AtomicU32 = AtomicU32::new(0);

// libnrt's file-scope `tdrv_ctx_0` (spec §1): the live runtime's `tdrv_ctx_t`, NULL before
// `nrt_init` and after `nrt_close`. Nothing in the library reads it; it is there, under that
// name, for debuggers and crash-dump readers (`nrt-dmem inspect`, docs/INSPECT.md) to find the
// context tree in a live process or a core file as they find AWS's. It is defined here in
// assembly because Rust has no hidden-visibility static: a `#[no_mangle]` static would be
// exported from the cdylib. Hidden, it is a symbol of `.symtab` in the cargo-built library
// (local), in `libnrt.a` and in the installed library (local), never in `.dynsym`, like
// libnrt's own: a stripped copy does not have it.
std::arch::global_asm!(
    ".pushsection .bss.tdrv_ctx_0,\"aw\",%nobits",
    ".globl tdrv_ctx_0",
    ".hidden tdrv_ctx_0",
    ".type tdrv_ctx_0,%object",
    ".size tdrv_ctx_0,8",
    ".balign 8",
    "tdrv_ctx_0:",
    ".zero 8",
    ".popsection",
);

extern "C" {
    /// The 8 zeroed bytes the assembly above defines.
    #[allow(non_upper_case_globals)]
    static tdrv_ctx_0: AtomicPtr<nrt_core::abi::tdrv_ctx_t>;
}

/// [`tdrv_ctx_0`] as the atomic it is.
fn tdrv_ctx_slot() -> &'static AtomicPtr<nrt_core::abi::tdrv_ctx_t> {
    // SAFETY: the symbol is 8 bytes of `.bss`, 8-byte aligned, zero (a null pointer) until
    // stored to, and written only through this reference: a valid `AtomicPtr` for the life of
    // the library.
    unsafe { &tdrv_ctx_0 }
}

/// Locks a mutex, ignoring poisoning (a panic is fenced at the boundary; the data stays
/// consistent because every critical section here is a single map operation).
pub(crate) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// Runs `f` on the initialised runtime: `NRT_UNINITIALIZED` before `nrt_init`, `NRT_CLOSED`
/// after `nrt_close` (the public API's state gate, spec §7.2).
pub(crate) fn with_rt<T>(f: impl FnOnce(&Runtime) -> Res<T>) -> Res<T> {
    let g = RT.read();
    match g.life {
        Life::Init(r) => f(r),
        Life::Uninit => Err(nrt_core::Error::Uninitialized.into()),
        Life::Closed => Err(nrt_core::Error::Closed.into()),
    }
}

/// A random 32-bit value (std's per-process random hash keys; no cryptographic use).
fn random_u32() -> u32 {
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u32(INIT_SERIAL.load(Ordering::Relaxed));
    h.finish() as u32
}

/// `nrt_init`: builds the runtime from the environment unless one is up.
pub(crate) fn init(build: impl FnOnce() -> Res<HostRuntime>) -> Res {
    let g = RT.write();
    if let Life::Init(_) = g.life {
        return Err(nrt_core::Error::AlreadyInitialized.into());
    }
    let rt = build()?;
    let epoch = nrt_core::raw::epoch(&rt.nrt());
    // The tree lives in the state block's storage (the first bytes of its mapping, 32 devices:
    // libnrt's whole `tdrv_ctx_t`): its address does not move with the runtime.
    let tree = rt.nrt().state().context_addr().cast_mut();
    *g.life = Life::Init(Box::new(Runtime {
        rt,
        serial: INIT_SERIAL.fetch_add(1, Ordering::Relaxed).wrapping_add(1),
        salt: random_u32(),
        epoch,
        oom_report: Mutex::new(None),
        free_core_pick: Mutex::new(()),
    }));
    tdrv_ctx_slot().store(tree, Ordering::Release);
    Ok(())
}

/// `nrt_close`: tears the runtime down; `Uninitialized` / `Closed` (as the core's
/// `Nrt::close`, docs/STATES.md) when none was up.
pub(crate) fn close() -> Res {
    let g = RT.write();
    match std::mem::replace(g.life, Life::Closed) {
        Life::Init(r) => {
            // Cleared before the tree is torn down and freed, as libnrt's `tdrv_destroy`
            // clears its pointer.
            tdrv_ctx_slot().store(std::ptr::null_mut(), Ordering::Release);
            r.shutdown();
            Ok(())
        }
        Life::Uninit => {
            *g.life = Life::Uninit;
            Err(nrt_core::Error::Uninitialized.into())
        }
        Life::Closed => Err(nrt_core::Error::Closed.into()),
    }
}

/// First bit of every handle: on 64-bit Linux (x86-64, AArch64) the kernel half of the address
/// space, where no object of a user process lives, so no pointer to the caller's own memory
/// (a foreign pointer) ever equals a handle.
const HANDLE_BASE: usize = 1 << (usize::BITS - 1);
/// The two bits below [`HANDLE_BASE`] say what a handle names, so the pointer of one kind is
/// never taken for another: [`KIND_TENSOR`], [`KIND_MODEL`] or [`KIND_SET`].
const KIND_SHIFT: u32 = usize::BITS - 3;
const KIND_MASK: usize = 3 << KIND_SHIFT;
const KIND_TENSOR: usize = 1 << KIND_SHIFT;
const KIND_MODEL: usize = 2 << KIND_SHIFT;
const KIND_SET: usize = 3 << KIND_SHIFT;
/// Handles are multiples of 8: aligned for any pointer-sized type a caller may imagine
/// behind them.
const HANDLE_SHIFT: u32 = 3;

/// The C pointer of handle `h`. It has no provenance: nothing may read or write through it
/// (nothing does: pointers coming back from C are only decoded or looked up by address).
pub(crate) fn handle_ptr<T>(h: usize) -> *mut T {
    std::ptr::without_provenance_mut(h)
}

thread_local! {
    static LAST_ERROR: RefCell<CString> = RefCell::new(CString::default());
}

/// What [`last_error_ptr`] returns when this thread's last error cannot be reached: its
/// thread-local storage is being or has been destroyed (a call from an `atexit` handler, from
/// a thread-local destructor, or from a thread that is exiting).
pub(crate) const LAST_ERROR_UNAVAILABLE: &CStr =
    c"(no last error message: this thread's storage has been destroyed, e.g. in an atexit handler)";

/// Records `msg` as this thread's last error (`nrtx_get_last_error_message`). Never panics:
/// when the thread's storage is gone (see [`LAST_ERROR_UNAVAILABLE`]) the message is only
/// logged.
pub(crate) fn set_last_error(msg: &str) {
    let c = CString::new(msg.replace('\0', " ")).unwrap_or_default();
    // `try_with`, not `with`: `with` panics once the thread-local is destroyed, and this runs
    // outside the panic fence. No call re-enters here while the slot is borrowed, so
    // `try_borrow_mut` only guards against a panic that cannot happen.
    let _ = LAST_ERROR.try_with(|e| {
        if let Ok(mut slot) = e.try_borrow_mut() {
            *slot = c;
        }
    });
}

/// This thread's last error message (empty when none); valid until the thread's next failing
/// call or its exit. A static text ([`LAST_ERROR_UNAVAILABLE`]) once the thread's storage is
/// destroyed. Never panics.
pub(crate) fn last_error_ptr() -> *const c_char {
    LAST_ERROR
        .try_with(|e| e.try_borrow().map(|s| s.as_ptr()).ok())
        .ok()
        .flatten()
        .unwrap_or(LAST_ERROR_UNAVAILABLE.as_ptr())
}

/// Logs a failure and records it as the thread's last error. Runs outside the entry point's
/// panic fence, so it has its own: a panicking log backend (the host process may have
/// installed any logger) is swallowed here instead of unwinding into C.
fn report(func: &'static str, f: &Fail) {
    let _ = catch_unwind(AssertUnwindSafe(|| {
        // A timeout is an answer ("not yet"), not a failure: callers poll with timeout 0.
        let level = if f.status == CoreStatus::NRT_TIMEOUT {
            log::Level::Debug
        } else {
            log::Level::Error
        };
        log::log!(target: func, level, "{}", f.msg);
    }));
    set_last_error(&format!("{func}: {}", f.msg));
}

fn panic_text(p: &(dyn std::any::Any + Send)) -> String {
    p.downcast_ref::<&str>()
        .map(|s| s.to_string())
        .or_else(|| p.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "unknown panic".into())
}

/// The body of every status-returning entry point: runs `f` behind the panic fence
/// (docs/ARCHITECTURE.md principle 5: nothing unwinds across the C boundary), logs a failure with
/// the core's message and records it as the thread's last error.
pub(crate) fn entry(func: &'static str, f: impl FnOnce() -> Res) -> NRT_STATUS {
    crate::logger::install();
    match catch_unwind(AssertUnwindSafe(f)) {
        Ok(Ok(())) => CoreStatus::NRT_SUCCESS as NRT_STATUS,
        Ok(Err(e)) => {
            report(func, &e);
            e.status as NRT_STATUS
        }
        Err(p) => {
            let e = Fail::new(
                CoreStatus::NRT_FAILURE,
                format_args!("internal error (panic): {}", panic_text(&*p)),
            );
            report(func, &e);
            CoreStatus::NRT_FAILURE as NRT_STATUS
        }
    }
}

/// The body of an entry point that returns a value instead of a status (`void`, a size, a
/// pointer): `fallback` on failure or panic.
pub(crate) fn entry_value<T>(func: &'static str, fallback: T, f: impl FnOnce() -> Res<T>) -> T {
    crate::logger::install();
    match catch_unwind(AssertUnwindSafe(f)) {
        Ok(Ok(v)) => v,
        Ok(Err(e)) => {
            report(func, &e);
            fallback
        }
        Err(p) => {
            report(
                func,
                &Fail::new(
                    CoreStatus::NRT_FAILURE,
                    format_args!("internal error (panic): {}", panic_text(&*p)),
                ),
            );
            fallback
        }
    }
}

/// Longest tensor / tensor-set name (bytes, excluding the NUL): `NRT_TENSOR_NAME_MAX - 1`; a
/// longer one is NRT_INVALID.
pub(crate) const NAME_MAX: usize = nrt_core::tensor::TENSOR_NAME_MAX;

/// Reads an optional C name, never more than `NAME_MAX + 1` bytes: `None` for NULL, an error
/// when it is longer than [`NAME_MAX`] or not UTF-8.
///
/// # Safety
/// `p` is NULL or points to a NUL-terminated string (only bytes up to its NUL, and at most
/// `NAME_MAX + 1` of them, are read).
pub(crate) unsafe fn read_name<'a>(p: *const c_char, what: &str) -> Res<Option<&'a str>> {
    if p.is_null() {
        return Ok(None);
    }
    let mut n = 0;
    // SAFETY: caller contract: the string is readable up to its NUL; we stop at the NUL or
    // after NAME_MAX + 1 bytes, whichever comes first.
    while n <= NAME_MAX && unsafe { *p.add(n) } != 0 {
        n += 1;
    }
    if n > NAME_MAX {
        return Err(Fail::invalid(format_args!(
            "{what} is longer than {NAME_MAX} bytes"
        )));
    }
    // SAFETY: the n bytes before the NUL were just read.
    let bytes = unsafe { std::slice::from_raw_parts(p as *const u8, n) };
    std::str::from_utf8(bytes)
        .map(Some)
        .map_err(|_| Fail::invalid(format_args!("{what} is not UTF-8")))
}

/// A required name: NULL is `NRT_INVALID`.
///
/// # Safety
/// As [`read_name`].
pub(crate) unsafe fn required_name<'a>(p: *const c_char, what: &str) -> Res<&'a str> {
    // SAFETY: forwarded contract.
    unsafe { read_name(p, what) }?.ok_or_else(|| Fail::invalid(format_args!("{what} is NULL")))
}

/// The `free(T **p)` convention of the public API: takes `*p` and leaves NULL behind, so a
/// second call with the same variable is a no-op. `None` when `p` or `*p` is NULL.
///
/// # Safety
/// `p` is NULL or valid for a read and a write.
pub(crate) unsafe fn take_nulled<T>(p: *mut *mut T) -> Option<*mut T> {
    if p.is_null() {
        return None;
    }
    // SAFETY: non-null; the caller guarantees it is readable and writable.
    let v = unsafe { p.replace(std::ptr::null_mut()) };
    (!v.is_null()).then_some(v)
}

/// Writes `v` through an out-pointer, `NRT_INVALID` when it is NULL.
///
/// # Safety
/// `p` is NULL or valid for a write of `T`.
pub(crate) unsafe fn put<T>(p: *mut T, v: T, what: &str) -> Res {
    if p.is_null() {
        return Err(Fail::invalid(format_args!("{what} is NULL")));
    }
    // SAFETY: non-null, and the caller guarantees it is writable.
    unsafe { p.write(v) };
    Ok(())
}

/// The size-in/size-out protocol of `nrt_get_vnc_memory_stats` (public API §2): copies
/// `min(size_in, sizeof(T))` bytes of `v` to `dst` and reports `sizeof(T)` through `size_out`
/// (when not NULL). A struct that only grows at its end stays compatible both ways.
/// `names` are the C parameter names of `dst` and `size_in`, for the message.
///
/// # Safety
/// `dst` is NULL or valid for writes of `size_in` bytes; `size_out` is NULL or writable.
pub(crate) unsafe fn put_sized<T: zerocopy::IntoBytes + zerocopy::Immutable>(
    v: &T,
    dst: *mut T,
    size_in: usize,
    size_out: *mut usize,
    names: [&str; 2],
) -> Res {
    if dst.is_null() && size_in > 0 {
        let [dst, size_in] = names;
        return Err(Fail::invalid(format_args!(
            "{dst} is NULL but {size_in} is not 0"
        )));
    }
    let n = size_in.min(std::mem::size_of::<T>());
    if n > 0 {
        // `T: IntoBytes` proves every byte of `v` is initialised (no padding), checked at
        // compile time by the derive.
        let src = &v.as_bytes()[..n];
        // SAFETY: `dst` holds at least `size_in >= n` bytes (caller contract); they cannot
        // overlap `src`, which the caller owns as a value it just built.
        unsafe { std::ptr::copy_nonoverlapping(src.as_ptr(), dst as *mut u8, n) };
    }
    if !size_out.is_null() {
        // SAFETY: caller contract.
        unsafe { size_out.write(std::mem::size_of::<T>()) };
    }
    Ok(())
}

/// `size` bytes at `p` as a slice, refusing NULL (unless empty) and sizes past `isize::MAX`.
///
/// # Safety
/// `p` is valid for reads of `size` bytes.
pub(crate) unsafe fn in_bytes<'a>(p: *const u8, size: usize, what: &str) -> Res<&'a [u8]> {
    if size == 0 {
        return Ok(&[]);
    }
    if p.is_null() {
        return Err(Fail::invalid(format_args!("{what} is NULL")));
    }
    if size > isize::MAX as usize {
        return Err(Fail::invalid(format_args!("size {size} is too large")));
    }
    // SAFETY: non-null, in range, readable by the caller's contract.
    Ok(unsafe { std::slice::from_raw_parts(p, size) })
}

/// Mutable counterpart of [`in_bytes`].
///
/// # Safety
/// `p` is valid for writes of `size` bytes and not otherwise borrowed.
pub(crate) unsafe fn out_bytes<'a>(p: *mut u8, size: usize, what: &str) -> Res<&'a mut [u8]> {
    if size == 0 {
        return Ok(&mut []);
    }
    if p.is_null() {
        return Err(Fail::invalid(format_args!("{what} is NULL")));
    }
    if size > isize::MAX as usize {
        return Err(Fail::invalid(format_args!("size {size} is too large")));
    }
    // SAFETY: non-null, in range, writable by the caller's contract.
    Ok(unsafe { std::slice::from_raw_parts_mut(p, size) })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_panic_becomes_nrt_failure_and_the_last_error() {
        let st = entry("nrt_test", || panic!("boom"));
        assert_eq!(st, CoreStatus::NRT_FAILURE as NRT_STATUS);
        // SAFETY: a NUL-terminated thread-local string.
        let msg = unsafe { std::ffi::CStr::from_ptr(last_error_ptr()) };
        assert!(msg
            .to_str()
            .unwrap()
            .contains("nrt_test: internal error (panic): boom"));
        assert_eq!(entry_value("nrt_test", 7usize, || panic!("again")), 7);
        assert_eq!(entry("nrt_test", || Ok(())), 0);
        let st = entry("nrt_test", || Err(Fail::invalid("bad")));
        assert_eq!(st, CoreStatus::NRT_INVALID as NRT_STATUS);
    }

    /// A failing call from a thread-local destructor that runs after `LAST_ERROR`'s (as from
    /// an `atexit` handler in C): the status comes back, nothing panics, and the last-error
    /// getter returns the static text instead of a dangling pointer.
    #[test]
    fn failing_calls_after_the_threads_storage_is_gone_do_not_panic() {
        use std::sync::atomic::{AtomicU32, Ordering};
        // 0: the destructor did not run; 1: it ran after LAST_ERROR was gone and all was
        // well; 2: LAST_ERROR was still alive (the order the test needs did not happen);
        // 3: a wrong answer.
        static OUTCOME: AtomicU32 = AtomicU32::new(0);
        struct Late;
        impl Drop for Late {
            fn drop(&mut self) {
                if LAST_ERROR.try_with(|_| ()).is_ok() {
                    OUTCOME.store(2, Ordering::SeqCst);
                    return;
                }
                let st = entry("nrt_test", || Err(Fail::invalid("late")));
                let v = entry_value("nrt_test", 5u8, || panic!("late panic"));
                // SAFETY: last_error_ptr returns a NUL-terminated string, static here.
                let msg = unsafe { std::ffi::CStr::from_ptr(last_error_ptr()) };
                let ok = st == CoreStatus::NRT_INVALID as NRT_STATUS
                    && v == 5
                    && msg == LAST_ERROR_UNAVAILABLE;
                OUTCOME.store(if ok { 1 } else { 3 }, Ordering::SeqCst);
            }
        }
        thread_local! {
            static LATE: Late = const { Late };
        }
        std::thread::spawn(|| {
            // Destructors run in reverse order of registration: LATE's after LAST_ERROR's.
            LATE.with(|_| ());
            set_last_error("early");
        })
        .join()
        .unwrap();
        assert_eq!(OUTCOME.load(Ordering::SeqCst), 1);
    }

    /// Each kind's pointer decodes back to its own words, is 8-aligned, non-null and in the
    /// kernel half; another kind's, another runtime's (serial) and a foreign pointer do not
    /// decode.
    #[test]
    fn handles_encode_and_decode_by_kind() {
        let r = |serial, salt| Runtime {
            rt: HostRuntime::new(nrt_host::RuntimeConfig::default()).unwrap(),
            serial,
            salt,
            epoch: 7,
            oom_report: Mutex::new(None),
            free_core_pick: Mutex::new(()),
        };
        let (a, b) = (r(1, 0x1234_5678), r(2, 0x9abc_def0));
        let bad = || Fail::invalid("bad");
        for kind in [KIND_TENSOR, KIND_MODEL, KIND_SET] {
            let v = a.encode(kind, (1 << INDEX_BITS) - 1, 0xdead_beef).unwrap();
            assert!(v != 0 && v % 8 == 0 && v & HANDLE_BASE != 0, "{v:#x}");
            assert_eq!(handle_ptr::<u8>(v).addr(), v);
            assert_eq!(
                a.decode(v, kind, bad).unwrap(),
                ((1 << INDEX_BITS) - 1, 0xdead_beef)
            );
            assert!(b.decode(v, kind, bad).is_err(), "another runtime's");
            for other in [KIND_TENSOR, KIND_MODEL, KIND_SET]
                .into_iter()
                .filter(|k| *k != kind)
            {
                assert!(a.decode(v, other, bad).is_err(), "another kind's");
            }
            assert!(a.decode(0x1000, kind, bad).is_err(), "a foreign pointer");
            assert!(a.decode(v | 4, kind, bad).is_err(), "misaligned");
        }
        assert_eq!(a.encode(KIND_SET, 1 << INDEX_BITS, 1), None);
        let m = a
            .model(a.model_ptr(ModelHandle::from_parts(3, 42, 7)).unwrap())
            .unwrap();
        assert_eq!(m, ModelHandle::from_parts(3, 42, 7));
        assert_eq!(
            a.model(std::ptr::null()).unwrap_err().status,
            CoreStatus::NRT_INVALID
        );
    }

    #[test]
    fn names_are_read_with_a_bound() {
        let ok = CString::new("n".repeat(NAME_MAX)).unwrap();
        // SAFETY: NUL-terminated strings (and NULL).
        unsafe {
            assert_eq!(read_name(ok.as_ptr(), "name").unwrap().unwrap().len(), 255);
            let long = CString::new("n".repeat(NAME_MAX + 1)).unwrap();
            let e = read_name(long.as_ptr(), "name").unwrap_err();
            assert_eq!(e.status, CoreStatus::NRT_INVALID);
            assert!(e.msg.contains("longer than 255"), "{}", e.msg);
            assert_eq!(read_name(std::ptr::null(), "name").unwrap(), None);
            assert!(required_name(std::ptr::null(), "name").is_err());
            let bad = [0xffu8 as c_char, 0xfeu8 as c_char, 0];
            assert!(read_name(bad.as_ptr(), "name").is_err());
            // 256 bytes without a NUL: refused after reading exactly NAME_MAX + 1 of them.
            let unterminated = [b'x' as c_char; NAME_MAX + 1];
            assert!(read_name(unterminated.as_ptr(), "name").is_err());
        }
    }

    #[test]
    fn sized_copies_follow_the_size_in_size_out_protocol() {
        #[derive(Copy, Clone, zerocopy::IntoBytes, zerocopy::Immutable)]
        #[repr(C)]
        struct S {
            a: u64,
            b: u64,
        }
        let v = S { a: 1, b: 2 };
        let mut dst = [0xEEu8; 32];
        let mut out = 0usize;
        // SAFETY: `dst` holds 32 bytes; `out` is writable.
        unsafe {
            put_sized(
                &v,
                dst.as_mut_ptr() as *mut S,
                8,
                &mut out,
                ["dst", "size_in"],
            )
            .unwrap();
            assert_eq!((out, dst[0], dst[8]), (16, 1, 0xEE));
            put_sized(
                &v,
                dst.as_mut_ptr() as *mut S,
                32,
                &mut out,
                ["dst", "size_in"],
            )
            .unwrap();
            assert_eq!((dst[8], dst[16]), (2, 0xEE));
            let e = put_sized(
                &v,
                std::ptr::null_mut(),
                16,
                &mut out,
                ["info", "info_size_in"],
            );
            assert_eq!(
                e.unwrap_err().msg,
                "info is NULL but info_size_in is not 0",
                "the message names the caller's parameters"
            );
            put_sized(
                &v,
                std::ptr::null_mut(),
                0,
                std::ptr::null_mut(),
                ["dst", "size_in"],
            )
            .unwrap();
        }
    }
}
