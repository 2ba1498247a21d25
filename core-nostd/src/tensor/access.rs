//! The tensor, storage and tensor-set arenas' accessors (spec §7.1, §7.3): every raw pointer
//! `tensor` needs is reached here, through a type that proves the access sound, so the rest of
//! `tensor/` is `deny(unsafe_code)` (docs/UNSAFE.md).
//!
//! What proves what:
//! * [`SlotPin`] (a tensor's or a set's pin, the protocol of [`crate::handle`]): the object
//!   stays whole and its slot is not reused while the pin lives. Made only here.
//! * [`TensorRef`] (a live tensor the caller holds) and its [`StorageRef`]: the fields a
//!   tensor's or storage's holder may read, for as long as the hold lasts. From a pin
//!   ([`Nrt::tensor_ref`]), or from a pointer the caller holds ([`Nrt::held_tensor`]).
//! * [`Last`]: the last owner dropped and every other pin drained, so the object is the
//!   caller's alone ([`SlotPin::drop_owner`], [`Nrt::tensor_last_owned`]).
//! * [`FreshTensor`] (a tensor slot not yet published) and [`StorageOwner`] (one counted
//!   reference on a storage): the writes that build a tensor, and the reference it holds.
//! * A storage's memory fields (type, bytes, size, ownership) are written only here, when the
//!   storage is made ([`Nrt::storage_dma`], [`Nrt::storage_host`], [`Nrt::tensor_attach`]),
//!   and read back only here, so a MALLOC storage's bytes are always `allocated_size` bytes
//!   the storage may use ([`StorageRef::host_write`] and its kin check every window).

use core::ffi::c_void;
use core::marker::PhantomData;
use core::ptr::{addr_of, addr_of_mut, NonNull};

use crate::atomic::AtomicU64;
use core::sync::atomic::Ordering;

use crate::abi::meta::ZeroValid;
use crate::abi::*;
use crate::arena::Fresh;
use crate::ctx::state::tensor::{BindChunk, Bound};
use crate::ctx::*;
use crate::error::{Error, InvalidArg, Result};
use crate::handle::{self, Dropped, HandleKind, SetHandle, TensorHandle};
use crate::host_heap::HostMem;
use crate::sync::relax;
use crate::tensor::{SetBody, SetSlot, Tensor, TENSOR_NAME_MAX};

/// `nrt_tensor_t.magic` of a live tensor (0 once retired).
const TENSOR_MAGIC: u32 = 0x7e45_0a11;
/// `nrt_tensor_storage_t.magic` of a live storage (0 once released).
const STORAGE_MAGIC: u32 = 0x570a_6e01;

/// A pinned arena object (a tensor, a set; [`Nrt::tensor_pin`], [`Nrt::set_pin`]): it stays
/// whole, and its slot is not reused, until this drops (the pin protocol of
/// [`crate::handle`]). Made only by those two resolvers, so holding one proves the pin.
pub(crate) struct SlotPin<'a, T> {
    t: NonNull<T>,
    refs: &'a AtomicU64,
}

/// A pinned tensor ([`Nrt::tensor_pin`]): the tensor (and so its storage) stays whole until
/// this drops.
pub(crate) type TensorPin<'a> = SlotPin<'a, nrt_tensor_t>;

/// A pinned tensor set ([`Nrt::set_pin`]).
pub(crate) type SetPin<'a> = SlotPin<'a, SetSlot>;

impl<T> Drop for SlotPin<'_, T> {
    #[inline]
    fn drop(&mut self) {
        handle::unpin(self.refs);
    }
}

impl<'a, T> SlotPin<'a, T> {
    /// The pinned slot's address (for the raw API and the runtime's own tables).
    #[inline]
    pub(crate) fn as_ptr(&self) -> *mut T {
        self.t.as_ptr()
    }

    /// Drops the object's owner through this pin (a free by handle, [`crate::handle`]): the
    /// object to finalise when that was its last owner, once every other pin has drained;
    /// otherwise the pin ends and the error says what the drop found (`Shared`: owners
    /// remain; `NoOwner`: a racing free took it).
    pub(crate) fn drop_owner(self) -> core::result::Result<Last<'a, T>, Dropped> {
        match handle::drop_owner(self.refs) {
            Dropped::Last => {
                let t = self.t;
                let refs = self.refs;
                // The pin is handed over to the drain: it is the last one left.
                core::mem::forget(self);
                handle::wait_drained(refs, 1, relax);
                Ok(Last {
                    t,
                    _own: PhantomData,
                })
            }
            other => Err(other),
        }
    }
}

/// An arena object whose last owner the caller dropped and whose other pins have drained:
/// nobody else can reach it (no handle resolves to it any more: it has no owner to pin), so
/// its fields are the caller's to tear down.
#[must_use = "the object is finalised only through its `Last`"]
pub(crate) struct Last<'a, T> {
    t: NonNull<T>,
    _own: PhantomData<&'a mut T>,
}

impl<T> Last<'_, T> {
    /// The slot's address.
    pub(crate) fn as_ptr(&self) -> *mut T {
        self.t.as_ptr()
    }
}

impl Last<'_, nrt_tensor_t> {
    /// Takes the tensor's storage reference out of it (leaving none): the caller now owns
    /// that reference and must put it back ([`crate::ctx::Nrt`]'s `storage_put`).
    pub(crate) fn take_storage(&mut self) -> Option<StorageOwner> {
        let t = self.t.as_ptr();
        // SAFETY: `Last` proves the tensor is the caller's alone (last owner gone, pins
        // drained), and `&mut self` makes this the only use of it: the field is read and
        // written with nothing racing it. Field projections only: no reference to the
        // `nrt_tensor_t` (whose generation and reference words resolvers still load).
        let s = unsafe {
            let s = addr_of!((*t).sto).read();
            addr_of_mut!((*t).sto).write(core::ptr::null_mut());
            s
        };
        NonNull::new(s).map(|s| StorageOwner { s })
    }
}

/// A live tensor the caller holds for `'p` (through a pin, or as its owner): what may be read
/// of it while the hold lasts. Its window (`sto`, `_offset`, `_size`) is written only while
/// nobody holds it ([`FreshTensor`], [`Last`]) or under [`Nrt::tensor_attach`]'s contract.
#[derive(Copy, Clone)]
pub(crate) struct TensorRef<'p> {
    t: NonNull<nrt_tensor_t>,
    _held: PhantomData<&'p nrt_tensor_t>,
}

impl<'p> TensorRef<'p> {
    /// The tensor's address.
    #[inline]
    pub(crate) fn as_ptr(&self) -> *mut nrt_tensor_t {
        self.t.as_ptr()
    }

    /// `(storage, offset, size)`: the storage the tensor views (`None`: an empty tensor) and
    /// the window of it.
    #[inline]
    pub(crate) fn window(&self) -> (Option<StorageRef<'p>>, u64, u64) {
        let t = self.t.as_ptr();
        // SAFETY: the tensor is live and held for `'p` (the type's invariant: a pin, or the
        // caller owns it), so its slot is neither released nor rebuilt meanwhile; these three
        // fields are written only when nobody holds the tensor (see the type), so the reads
        // race no write. Field projections: no reference to the whole tensor is made.
        let (s, off, len) = unsafe {
            (
                addr_of!((*t).sto).read(),
                addr_of!((*t)._offset).read(),
                addr_of!((*t)._size).read(),
            )
        };
        // A held tensor holds a reference on its storage (`FreshTensor::publish`,
        // `Nrt::tensor_attach`), which lasts as long as the hold.
        let s = NonNull::new(s).map(|s| StorageRef {
            s,
            _held: PhantomData,
        });
        (s, off, len)
    }

    /// Bytes of the tensor.
    #[inline]
    pub(crate) fn size(&self) -> u64 {
        self.window().2
    }

    /// The tensor's `output_completion_count` (spec §7.1).
    pub(crate) fn completions(&self) -> &'p AtomicU64 {
        // SAFETY: the slot lives and stays this tensor for `'p` (held); the field is an
        // atomic, only ever accessed atomically while the tensor lives (zeroed by the arena
        // only once the slot is released, after `'p`), so a shared reference to it is sound
        // whoever else updates it.
        unsafe { &*addr_of!((*self.t.as_ptr()).output_completion_count) }
    }
}

/// A tensor's storage, live for `'p` because a tensor held for `'p` holds a reference on it
/// ([`TensorRef::window`]). Its memory fields are fixed from its making to its release.
#[derive(Copy, Clone)]
pub(crate) struct StorageRef<'p> {
    s: NonNull<nrt_tensor_storage_t>,
    _held: PhantomData<&'p nrt_tensor_storage_t>,
}

/// What memory a storage holds.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub(crate) enum StorageMem {
    /// Device or host DMA memory: its dmem, owned by the storage.
    Dma(*mut dmem_t),
    /// Host bytes (a VIRTUAL tensor's, or a buffer attached by the caller).
    Host,
    /// None (a storage with another type, or without memory).
    Unbacked,
}

impl<'p> StorageRef<'p> {
    /// The storage's address (no dereference: for identity and arena indices).
    #[inline]
    pub(crate) fn as_ptr(&self) -> *const nrt_tensor_storage_t {
        self.s.as_ptr()
    }

    /// `(type, memory, allocated_size, mem_owned_by_tensor)`.
    #[inline]
    fn fixed(&self) -> (u32, *mut c_void, u64, u8) {
        let s = self.s.as_ptr();
        // SAFETY: the storage is live for `'p` (a held tensor's reference); these fields are
        // written only by the accessors below that make a storage (before any tensor views
        // it) and are not written again before the storage is released (after its last
        // reference, so after `'p`): the reads race nothing. Field projections only.
        unsafe {
            (
                addr_of!((*s).r#type).read(),
                addr_of!((*s).dmem).read(),
                addr_of!((*s).allocated_size).read(),
                addr_of!((*s).mem_owned_by_tensor).read(),
            )
        }
    }

    /// What memory the storage holds.
    #[inline]
    pub(crate) fn mem(&self) -> StorageMem {
        let (ty, p, _, _) = self.fixed();
        match nrt_tensor_mem_type_t::from_raw(ty) {
            _ if p.is_null() => StorageMem::Unbacked,
            Some(nrt_tensor_mem_type_t::NRT_TENSOR_MEM_TYPE_DMA) => StorageMem::Dma(p.cast()),
            Some(nrt_tensor_mem_type_t::NRT_TENSOR_MEM_TYPE_MALLOC) => StorageMem::Host,
            _ => StorageMem::Unbacked,
        }
    }

    /// Whether the storage frees its memory with its last reference (`mem_owned_by_tensor`).
    fn owns_mem(&self) -> bool {
        self.fixed().3 != 0
    }

    /// The storage's HBM channel (`hbm_idx`).
    pub(crate) fn hbm_idx(&self) -> u32 {
        // SAFETY: as `fixed`: written when the storage is made (through its `Fresh`), never
        // after, read while it lives.
        unsafe { addr_of!((*self.s.as_ptr()).hbm_idx).read() }
    }

    /// `pending_exec_count_read` (spec §7.1).
    pub(crate) fn pending_reads(&self) -> &'p AtomicU64 {
        // SAFETY: the storage lives for `'p`; the field is an atomic, only ever accessed
        // atomically while the storage lives, so sharing a reference to it is sound.
        unsafe { &*addr_of!((*self.s.as_ptr()).pending_exec_count_read) }
    }

    /// `pending_exec_count_write` (spec §7.1).
    pub(crate) fn pending_writes(&self) -> &'p AtomicU64 {
        // SAFETY: as `pending_reads`.
        unsafe { &*addr_of!((*self.s.as_ptr()).pending_exec_count_write) }
    }

    /// `tensor_op_cv_lock`, which orders readers against an execution's output marks.
    pub(crate) fn op_lock(&self) -> &'p nrt_mutex_t {
        // SAFETY: the storage lives for `'p`; the lock word is an atomic, so a shared
        // reference is sound whoever else spins on it.
        unsafe { &*addr_of!((*self.s.as_ptr()).tensor_op_cv_lock) }
    }

    /// The host bytes `[at, at + len)` of a MALLOC storage, `None` for another storage or a
    /// window that does not lie inside its `allocated_size` bytes.
    #[inline]
    fn host_span(&self, at: u64, len: usize) -> Option<*mut u8> {
        let (ty, p, size, _) = self.fixed();
        let end = at.checked_add(len as u64)?;
        (ty == nrt_tensor_mem_type_t::NRT_TENSOR_MEM_TYPE_MALLOC as u32
            && !p.is_null()
            && end <= size)
            .then(|| p.cast::<u8>().wrapping_add(at as usize))
    }

    /// Copies `src` into the host bytes at `at` (`StorageWithoutMemory` for a storage with
    /// no host bytes, `OutOfBounds` past them).
    pub(crate) fn host_write(&self, at: u64, src: &[u8]) -> Result<()> {
        let p = self.span_or_err(at, src.len())?;
        // SAFETY: `p..p + len` lies inside the storage's `allocated_size` host bytes
        // (`host_span`), which are valid for writes while the storage lives: they came from
        // the bound provider's `alloc(allocated_size)` (`storage_host`: the `HostMem`
        // promise) or from the caller of `tensor_attach_buffer` (its safety contract). `src`
        // is a borrowed slice, so it may overlap them only through that same contract's
        // buffer; `copy` allows overlap.
        unsafe { core::ptr::copy(src.as_ptr(), p, src.len()) };
        Ok(())
    }

    /// Copies the host bytes at `at` into `dst` (errors as [`Self::host_write`]).
    pub(crate) fn host_read(&self, at: u64, dst: &mut [u8]) -> Result<()> {
        let p = self.span_or_err(at, dst.len())?;
        // SAFETY: as `host_write`, for reads; `dst` is an exclusive borrow, so it is not the
        // storage's bytes unless the attach contract was broken.
        unsafe { core::ptr::copy(p, dst.as_mut_ptr(), dst.len()) };
        Ok(())
    }

    /// Fills `len` host bytes at `at` with `value` (errors as [`Self::host_write`]).
    pub(crate) fn host_fill(&self, at: u64, len: u64, value: u8) -> Result<()> {
        let n = usize::try_from(len).map_err(|_| self.out_of_bounds(at, len))?;
        let p = self.span_or_err(at, n)?;
        // SAFETY: as `host_write`: `p..p + n` lies inside the storage's host bytes.
        unsafe { core::ptr::write_bytes(p, value, n) };
        Ok(())
    }

    /// The host address of byte `at` (address arithmetic only; null for a storage with no
    /// host bytes).
    pub(crate) fn host_va(&self, at: u64) -> *mut u8 {
        match self.mem() {
            StorageMem::Host => self.fixed().1.cast::<u8>().wrapping_add(at as usize),
            _ => core::ptr::null_mut(),
        }
    }

    fn out_of_bounds(&self, at: u64, len: u64) -> Error {
        Error::OutOfBounds {
            offset: at,
            len,
            size: self.fixed().2,
        }
    }

    fn span_or_err(&self, at: u64, len: usize) -> Result<*mut u8> {
        if self.mem() != StorageMem::Host {
            return Err(Error::InvalidArgument(InvalidArg::StorageWithoutMemory));
        }
        self.host_span(at, len)
            .ok_or_else(|| self.out_of_bounds(at, len as u64))
    }

    /// One more reference on this storage, for a new tensor viewing it (a slice).
    pub(crate) fn share(&self) -> StorageOwner {
        // SAFETY: the storage lives for `'p` and a held tensor keeps a reference on it all
        // that time, so the count is at least 1 and cannot reach 0 under this add; the field
        // is an atomic, only ever accessed atomically while the storage lives.
        unsafe { &*addr_of!((*self.s.as_ptr()).ref_count) }.fetch_add(1, Ordering::AcqRel);
        StorageOwner { s: self.s }
    }
}

/// One counted reference on a live storage (`ref_count`), owned by the holder of this value:
/// handed to a tensor ([`FreshTensor::publish`], [`Nrt::tensor_attach`]) or dropped through
/// [`Nrt::storage_drop_ref`]. Dropping it leaks the reference (never frees early).
#[must_use = "a storage reference is given to a tensor or dropped through storage_drop_ref"]
pub(crate) struct StorageOwner {
    s: NonNull<nrt_tensor_storage_t>,
}

/// A storage whose last reference the caller dropped: its memory and slot are the caller's
/// to give back ([`Nrt::storage_retire`]).
#[must_use = "the storage's memory and slot go back through storage_retire"]
pub(crate) struct LastStorage {
    s: NonNull<nrt_tensor_storage_t>,
}

impl LastStorage {
    /// The storage's memory, when it frees it (`mem_owned_by_tensor`); `None` for memory it
    /// only views (an attached buffer).
    pub(crate) fn owned_mem(&self) -> Option<StorageMem> {
        let v = StorageRef {
            s: self.s,
            _held: PhantomData,
        };
        v.owns_mem().then(|| v.mem())
    }
}

/// Host bytes just taken from the bound provider ([`Nrt::host_alloc`]), not yet a storage's:
/// given back to the provider when dropped.
pub(crate) struct HostBlock<'a> {
    host: &'a dyn HostMem,
    p: NonNull<u8>,
    size: usize,
}

impl Drop for HostBlock<'_> {
    fn drop(&mut self) {
        // SAFETY: `p` came from `host.alloc(size)` ([`Nrt::host_alloc`]) and was never handed
        // to a storage (`storage_host` forgets the block it consumes), so nothing uses it.
        unsafe { self.host.free(self.p, self.size) };
    }
}

/// A tensor slot taken from the arena and not yet published ([`Nrt::fresh_tensor`]): no
/// handle resolves to it and it has no owner to pin, so its fields are the caller's to write.
/// [`FreshTensor::publish`] makes it a tensor; dropping it gives the slot back.
#[must_use = "a fresh tensor goes back to its arena unless published"]
pub(crate) struct FreshTensor<'a> {
    nrt: Nrt<'a>,
    t: NonNull<nrt_tensor_t>,
}

impl Drop for FreshTensor<'_> {
    fn drop(&mut self) {
        let _ = self.nrt.st.tensor.tensors.cancel(self.t.as_ptr());
    }
}

impl FreshTensor<'_> {
    /// Gives the tensor its window of `view`'s storage (taking that reference), publishes it
    /// (from here its handle resolves) and returns its handle.
    pub(crate) fn publish(self, view: Option<(StorageOwner, u64, u64)>) -> TensorHandle {
        let t = self.t.as_ptr();
        if let Some((s, off, len)) = view {
            // SAFETY: the slot is not published (no pin can be taken: its owner count is 0)
            // and its pointer is ours alone, so the writes race nothing; the handle's publish
            // below (Release) makes them visible to whoever pins it. The reference `s` owns
            // becomes the tensor's. Field projections only (resolvers of old handles may load
            // the generation and reference words).
            unsafe {
                addr_of_mut!((*t).sto).write(s.s.as_ptr());
                addr_of_mut!((*t)._offset).write(off);
                addr_of_mut!((*t)._size).write(len);
            }
        }
        let nrt = self.nrt;
        core::mem::forget(self);
        if let Some((gen, refs)) = nrt.st.tensor.tensors.words_of(t) {
            handle::publish(gen, refs);
        }
        nrt.tensor_handle_of_owned(t)
    }
}

impl<'a> Nrt<'a> {
    /// Resolves and pins `h` (the pin protocol of [`crate::handle`]): the tensor cannot be
    /// finalised, nor its slot reused, until the pin drops.
    pub(crate) fn tensor_pin(&self, h: TensorHandle) -> Result<TensorPin<'a>> {
        self.check_epoch(h.0, HandleKind::Tensor)?;
        let (t, refs) =
            self.st
                .tensor
                .tensors
                .pin(h.0.index, h.0.generation, HandleKind::Tensor)?;
        // A slot pointer of bound storage is never null.
        let t = NonNull::new(t).ok_or(Error::forged(HandleKind::Tensor))?;
        Ok(SlotPin { t, refs })
    }

    /// Resolves and pins set `h` (the pin protocol of [`crate::handle`]).
    pub(crate) fn set_pin(&self, h: SetHandle) -> Result<SetPin<'a>> {
        self.check_epoch(h.0, HandleKind::Set)?;
        let (t, refs) = self
            .st
            .tensor
            .sets
            .pin(h.0.index, h.0.generation, HandleKind::Set)?;
        let t = NonNull::new(t).ok_or(Error::forged(HandleKind::Set))?;
        Ok(SlotPin { t, refs })
    }

    /// The pinned tensor, checked whole (its magic): what a call may read of it while `pin`
    /// lives.
    #[inline]
    pub(crate) fn tensor_ref<'p>(&self, pin: &'p TensorPin<'_>) -> Result<TensorRef<'p>> {
        // The pin keeps the slot this tensor (the pin protocol), so the check's read is sound.
        self.checked_tensor(pin.as_ptr())
    }

    /// [`Self::tensor_ref`] for a tensor pointer the caller holds without the pin at hand:
    /// `t` must be pinned by the calling call (it resolved the pointer from a pin it still
    /// holds: `execute`'s bound tensors, the arguments of the token-taking steps
    /// `tensor_fill` and `tensor_copy_bytes`) or owned by it (teardown after the gate
    /// drained, the raw API's caller). That is this function's crate-internal contract, as
    /// for `Nrt::owned_dmem_fixed`: the gate token the steps take proves the call, not the
    /// pin, which `execute` keeps in a list. A null pointer or one that is not a live tensor
    /// slot is refused without a dereference.
    #[inline]
    pub(crate) fn held_tensor(&self, t: *const nrt_tensor_t) -> Result<TensorRef<'_>> {
        self.checked_tensor(t.cast_mut())
    }

    /// Checks that `t` is a live tensor of this runtime (never dereferences a pointer that
    /// is not a live slot of the tensor arena); the contract of [`Self::held_tensor`].
    pub(crate) fn tensor_check(&self, t: *const nrt_tensor_t) -> Result<()> {
        self.held_tensor(t).map(|_| ())
    }

    fn checked_tensor<'p>(&self, t: *mut nrt_tensor_t) -> Result<TensorRef<'p>> {
        let Some(nn) = NonNull::new(t) else {
            return Err(Error::InvalidArgument(InvalidArg::NullTensor));
        };
        if !self.st.tensor.tensors.is_live(t) {
            return Err(Error::InvalidArgument(InvalidArg::NotLiveTensor));
        }
        // SAFETY: a live slot of the tensor arena (checked above) that the caller holds (a
        // pin, or the contract of `held_tensor`), so it is neither released nor rebuilt
        // during the read; `magic` is written only while nobody holds the tensor
        // (`fresh_tensor` before publication, `tensor_retire` after the drain).
        if unsafe { addr_of!((*t).magic).read() } != TENSOR_MAGIC {
            return Err(Error::InvalidArgument(InvalidArg::NotLiveTensor));
        }
        Ok(TensorRef {
            t: nn,
            _held: PhantomData,
        })
    }

    /// Drops the owner of tensor `t`, which the caller owns but has not pinned (teardown's
    /// sweep and `tensor_free_owned`): the tensor to finalise when that was its last owner,
    /// once every pin has drained. Sound for any pointer: a slot with no owner is
    /// `NoOwner`, and a drop that takes the last owner leaves nobody able to pin it.
    pub(crate) fn tensor_last_owned(
        &self,
        t: *const nrt_tensor_t,
    ) -> core::result::Result<Last<'a, nrt_tensor_t>, Dropped> {
        let Some((_, refs)) = self.st.tensor.tensors.words_of(t) else {
            return Err(Dropped::NoOwner);
        };
        match handle::drop_owner(refs) {
            Dropped::Last => {
                handle::wait_drained(refs, 0, relax);
                let t = NonNull::new(t.cast_mut()).ok_or(Dropped::NoOwner)?;
                Ok(Last {
                    t,
                    _own: PhantomData,
                })
            }
            other => Err(other),
        }
    }

    /// Retires a finalised tensor (its storage already taken, [`Last::take_storage`]): the
    /// magic cleared, the generation made even (its handles refused from here), the slot
    /// given back.
    pub(crate) fn tensor_retire(&self, last: Last<'_, nrt_tensor_t>) {
        let t = last.as_ptr();
        // SAFETY: `Last` proves the tensor is ours alone; a field projection, no reference.
        unsafe { addr_of_mut!((*t).magic).write(0) };
        // The slot reads as free before it can be handed out again.
        if let Some((gen, _)) = self.st.tensor.tensors.words_of(t) {
            handle::retire(gen);
        }
        let _ = self.st.tensor.tensors.release(t);
    }

    /// A fresh tensor slot named `name` (at most [`TENSOR_NAME_MAX`] bytes, else
    /// `TensorNameTooLong`), from arena shard `shard` first (the caller's core).
    pub(crate) fn fresh_tensor(&self, name: &str, shard: usize) -> Result<FreshTensor<'a>> {
        if name.len() > TENSOR_NAME_MAX {
            return Err(Error::InvalidArgument(InvalidArg::TensorNameTooLong));
        }
        // Generation and reference words left alone: resolvers of old handles may read them.
        let (t, _) = self
            .st
            .tensor
            .tensors
            .alloc_handle("nrt_tensor_t", true, shard)?;
        let fresh = FreshTensor { nrt: *self, t };
        let buf = self
            .st
            .tensor
            .tensors
            .side_entry(&self.st.tensor.tensor_names, t.as_ptr());
        let t = t.as_ptr();
        // SAFETY: the slot is zeroed and not published (its owner count is 0, so no handle
        // pins it) and its pointer is ours alone, so nothing else reads or writes it or its
        // name entry: `side_entry` is the in-bounds entry of this slot (a slot of the arena),
        // and the side table lives as long as the state block. The copy fits (checked above,
        // and the entry holds `TENSOR_NAME_MAX + 1` bytes, so a NUL follows). Field
        // projections only on the tensor (resolvers may load its generation and reference
        // words).
        unsafe {
            if !buf.is_null() {
                *buf = [0; TENSOR_NAME_MAX + 1];
                (&mut *buf)[..name.len()].copy_from_slice(name.as_bytes());
            }
            addr_of_mut!((*t).name).write(buf.cast());
            addr_of_mut!((*t).magic).write(TENSOR_MAGIC);
        }
        Ok(fresh)
    }

    /// The name bytes of a held tensor (its side-table entry, `nrt_tensor_t.name`).
    pub(crate) fn tensor_name_bytes<'p>(&self, t: TensorRef<'p>) -> &'p [u8; TENSOR_NAME_MAX + 1] {
        let buf = self
            .st
            .tensor
            .tensors
            .side_entry(&self.st.tensor.tensor_names, t.as_ptr());
        const EMPTY: &[u8; TENSOR_NAME_MAX + 1] = &[0; TENSOR_NAME_MAX + 1];
        if buf.is_null() {
            return EMPTY;
        }
        // SAFETY: the entry of a held tensor's slot (in bounds), in a side table that lives as
        // long as the state block; it is written only by `fresh_tensor` while the slot is not
        // published, so not during the hold (`'p`): a shared borrow for `'p` races no write.
        unsafe { &*buf }
    }

    /// A fresh storage slot from shard `shard` first, to be made a storage by one of the
    /// accessors below (dropped: back to the arena as if never taken).
    pub(crate) fn fresh_storage(&self, shard: usize) -> Result<Fresh<'a, nrt_tensor_storage_t>> {
        Ok(self
            .st
            .tensor
            .storages
            .alloc_fresh_in(shard, true, "nrt_tensor_storage_t")?)
    }

    /// Makes `s` a DMA storage of `size` bytes owning dmem `m` (one reference, the caller's).
    /// The other members (`hbm_idx`, coordinates, `vtpb_idx`) are the caller's to write
    /// through `s` first.
    pub(crate) fn storage_dma(
        &self,
        s: Fresh<'a, nrt_tensor_storage_t>,
        m: *mut dmem_t,
        size: u64,
    ) -> StorageOwner {
        let ty = nrt_tensor_mem_type_t::NRT_TENSOR_MEM_TYPE_DMA;
        Self::storage_make(s, ty, m.cast(), size, true)
    }

    /// Makes `s` a MALLOC storage owning host block `b` (freed to the bound provider with the
    /// last reference).
    pub(crate) fn storage_host(
        &self,
        s: Fresh<'a, nrt_tensor_storage_t>,
        b: HostBlock<'a>,
    ) -> StorageOwner {
        let (p, size) = (b.p, b.size);
        // The block is the storage's now: not freed on drop.
        core::mem::forget(b);
        let ty = nrt_tensor_mem_type_t::NRT_TENSOR_MEM_TYPE_MALLOC;
        Self::storage_make(s, ty, p.as_ptr().cast(), size as u64, true)
    }

    /// Writes a storage's memory members (what [`StorageRef`] trusts) and publishes it with
    /// one reference, the caller's.
    fn storage_make(
        mut s: Fresh<'a, nrt_tensor_storage_t>,
        ty: nrt_tensor_mem_type_t,
        mem: *mut c_void,
        size: u64,
        owned: bool,
    ) -> StorageOwner {
        s.r#type = ty as u32;
        s.dmem = mem;
        s.allocated_size = size;
        s.mem_owned_by_tensor = owned as u8;
        s.ref_count.store(1, Ordering::Release);
        s.magic = STORAGE_MAGIC;
        StorageOwner { s: s.publish() }
    }

    /// `size` bytes from the bound host-memory provider (`None`: no provider, or exhausted).
    pub(crate) fn host_alloc(&self, size: u64) -> Option<HostBlock<'a>> {
        let host = self.host?;
        let size = usize::try_from(size).ok()?;
        let p = host.alloc(size)?;
        Some(HostBlock { host, p, size })
    }

    /// Drops reference `s`; the storage when it was the last one (its memory and slot then go
    /// back through [`Self::storage_retire`]).
    pub(crate) fn storage_drop_ref(&self, s: StorageOwner) -> Option<LastStorage> {
        // SAFETY: `s` owns a reference, so the storage is live; the count is an atomic, only
        // ever accessed atomically while the storage lives.
        let rc = unsafe { &*addr_of!((*s.s.as_ptr()).ref_count) };
        (rc.fetch_sub(1, Ordering::AcqRel) == 1).then_some(LastStorage { s: s.s })
    }

    /// Gives back a storage whose last reference is gone: owned host bytes to the bound
    /// provider (the one that allocated them), the slot to the arena. A DMA storage's dmem is
    /// the caller's to free first ([`LastStorage::owned_mem`]).
    pub(crate) fn storage_retire(&self, last: LastStorage) {
        let s = last.s.as_ptr();
        if last.owned_mem() == Some(StorageMem::Host) {
            // SAFETY: the last reference is gone, so nobody reads the fields (written once,
            // by `storage_make`) nor the bytes any more.
            let (p, size) = unsafe {
                (
                    addr_of!((*s).dmem).read(),
                    addr_of!((*s).allocated_size).read(),
                )
            };
            if let (Some(h), Some(p)) = (self.host, NonNull::new(p.cast::<u8>())) {
                // SAFETY: an owned MALLOC storage is made only by `storage_host`, from a
                // `HostBlock` of `self.host`'s `alloc(allocated_size)` (a view can only call
                // in with the provider its runtime was initialised with, `check_bound`, and
                // `close` frees every tensor, so this is the provider that allocated it); the
                // last reference is gone, so no tensor uses the bytes after this.
                unsafe { h.free(p, size as usize) };
            }
        }
        // SAFETY: the storage is ours alone (last reference gone); a field projection.
        unsafe { addr_of_mut!((*s).magic).write(0) };
        let _ = self.st.tensor.storages.release(s);
    }

    /// Makes `s` a MALLOC view of the caller's `buf` (`size` bytes, not owned) and swaps it
    /// in as the pinned tensor's storage, window `[0, size)`: `tensor_attach_buffer`. Returns
    /// the tensor's previous storage reference, now the caller's to drop.
    ///
    /// # Safety
    /// `buf` is valid for reads and writes of `size` bytes until no tensor views it any more
    /// (the contract of [`Tensors::attach_buffer`](crate::tensor::Tensors::attach_buffer)), and no other thread uses the tensor
    /// during this call (its window is rewritten without a lock, as in libnrt).
    pub(crate) unsafe fn tensor_attach(
        &self,
        pin: &TensorPin<'_>,
        s: Fresh<'a, nrt_tensor_storage_t>,
        buf: NonNull<u8>,
        size: u64,
    ) -> Option<StorageOwner> {
        let ty = nrt_tensor_mem_type_t::NRT_TENSOR_MEM_TYPE_MALLOC;
        let new = Self::storage_make(s, ty, buf.as_ptr().cast(), size, false);
        let t = pin.as_ptr();
        // SAFETY: the pin keeps the slot this live tensor; the caller's contract excludes
        // every other use of the tensor during the call, so these writes race no read. The
        // tensor's reference on its old storage passes to the caller; `new`'s becomes the
        // tensor's. Field projections only.
        let old = unsafe {
            let old = addr_of!((*t).sto).read();
            addr_of_mut!((*t).sto).write(new.s.as_ptr());
            addr_of_mut!((*t)._offset).write(0);
            addr_of_mut!((*t)._size).write(size);
            old
        };
        NonNull::new(old).map(|s| StorageOwner { s })
    }
}

// SAFETY: every member of a `SetSlot` is valid all-zero: integers, an atomic, and a
// `DataLock` that is unlocked when zeroed (checked in `sync`) around an empty body (a zero
// length, zeroed handle words and names).
unsafe impl ZeroValid for SetSlot {}
// SAFETY: `generation` is a u32 at offset 0 and `refs` an AtomicU64 at 8 (repr(C), pinned
// by the const asserts beside the type); the core reaches `generation` only through
// `Arena::words` (atomically) and `refs` only as the atomic it is.
unsafe impl crate::arena::Generational for SetSlot {
    const GEN: usize = core::mem::offset_of!(SetSlot, generation);
    const REFS: usize = core::mem::offset_of!(SetSlot, refs);
}
// SAFETY: integers and bytes; zero is an unused entry.
unsafe impl ZeroValid for crate::tensor::SetEntry {}

// SAFETY: null pointers: an unused entry.
unsafe impl ZeroValid for Bound {}
// SAFETY: the pointers name arena slots of a state block that every thread may reach; an
// entry is only used by the execution whose list holds it.
unsafe impl Send for Bound {}

/// The tensors an execution binds, inputs first, each pinned until the list drops (so a racing
/// free waits for the execution, spec §7.1), with the pending-exec marks on their storages
/// while [`BoundTensors::mark`] holds them. A chain of the `bind_chunks` arena: an execution
/// binds as many tensors as its model declares.
pub(crate) struct BoundTensors<'a> {
    chunks: &'a crate::arena::Arena<BindChunk>,
    list: crate::arena::Chain,
    /// Inputs among the entries, once marked.
    marked: Option<usize>,
}

impl<'a> BoundTensors<'a> {
    /// An empty list of `nrt`'s runtime.
    pub(crate) fn new(nrt: &Nrt<'a>) -> Self {
        BoundTensors {
            chunks: &nrt.st.tensor.bind_chunks,
            list: crate::arena::Chain::EMPTY,
            marked: None,
        }
    }

    /// Keeps `pin` until the list drops; its tensor. A full `bind_chunks` arena is
    /// [`Error::ArenaFull`] (and the pin ends).
    pub(crate) fn push(&mut self, pin: TensorPin<'a>, shard: usize) -> Result<Tensor> {
        if self.marked.is_some() {
            return Err(Error::InvalidArgument(InvalidArg::TooManyBound));
        }
        let e = self
            .chunks
            .chain_push(&mut self.list, shard, "bound tensor chunk")?;
        let t = pin.as_ptr();
        e.t = t;
        e.refs = pin.refs;
        // The pin is now the entry's: `Drop` ends it.
        core::mem::forget(pin);
        Ok(t)
    }

    /// Bound tensor `i` (inputs first), pinned by this list.
    pub(crate) fn get(&self, i: usize) -> Option<Tensor> {
        self.chunks.chain_get(&self.list, i).map(|e| e.t)
    }

    /// Marks the storages of the first `inputs` tensors as read and the rest as written by
    /// this execution (spec §7.1 `pending_exec_count_read` / `_write`) until the list drops.
    /// Outputs are marked under the storage's `tensor_op_cv_lock`, which readers of an
    /// output hold. Every storage is looked up before any is marked: a refusal marks nothing.
    pub(crate) fn mark(&mut self, nrt: &Nrt<'_>, inputs: usize) -> Result<()> {
        if self.marked.is_some() {
            return Ok(());
        }
        for i in 0..self.list.len() {
            let Some(e) = self.chunks.chain_get_mut(&mut self.list, i) else {
                break;
            };
            // Pinned by this list (`held_tensor`'s contract).
            let (s, _, _) = nrt.storage_of(nrt.held_tensor(e.t)?)?;
            e.sto = s.as_ptr().cast_mut();
        }
        for (i, e) in self.chunks.chain_iter(&self.list).enumerate() {
            let s = Self::storage(e);
            if i < inputs {
                s.pending_reads().fetch_add(1, Ordering::AcqRel);
            } else {
                let _g = s.op_lock().lock();
                s.pending_writes().fetch_add(1, Ordering::AcqRel);
            }
        }
        self.marked = Some(inputs);
        Ok(())
    }

    /// The storage entry `e` recorded at `mark`.
    fn storage(e: &Bound) -> StorageRef<'_> {
        StorageRef {
            // `mark` wrote every entry's storage before any entry is read through here.
            s: NonNull::new(e.sto).unwrap_or(NonNull::dangling()),
            _held: PhantomData,
        }
    }
}

impl Drop for BoundTensors<'_> {
    fn drop(&mut self) {
        if let Some(inputs) = self.marked {
            for (i, e) in self.chunks.chain_iter(&self.list).enumerate() {
                let s = Self::storage(e);
                if i < inputs {
                    s.pending_reads().fetch_sub(1, Ordering::AcqRel);
                } else {
                    s.pending_writes().fetch_sub(1, Ordering::AcqRel);
                }
            }
        }
        for e in self.chunks.chain_iter(&self.list) {
            // SAFETY: `refs` is the reference word of a tensor slot this entry pinned (`push`
            // took it from a live pin), in storage that outlives the list (`'a`); the pin it
            // ends is this entry's own, ended once.
            handle::unpin(unsafe { &*e.refs });
        }
        self.chunks.chain_clear(&mut self.list);
    }
}

impl Nrt<'_> {
    /// The body of set slot `p`, locked, for its finalisation: `p`'s last owner is gone and
    /// every pin drained, so nobody else reaches the body (the lock is taken anyway, and
    /// costs nothing uncontended). `None` for a pointer that is not a slot of the set arena.
    pub(crate) fn set_body_finalizing(
        &self,
        p: *mut SetSlot,
    ) -> Option<lock_api::MutexGuard<'_, crate::sync::RawSpin, SetBody>> {
        if !self.st.tensor.sets.owns(p) {
            return None;
        }
        // SAFETY: `p` is a slot of the set arena (checked), whose storage lives as long as the
        // state block this view borrows; only the `body` field is referenced (the generation
        // and reference words other threads read atomically are not), and the body is only
        // ever reached under its lock.
        let lock = unsafe { &*addr_of!((*p).body) };
        Some(lock.lock())
    }
}

impl SetPin<'_> {
    /// The set's entries, locked. The one way to them: a set's body is only read or written
    /// through a pin, under its lock.
    pub(crate) fn body(&self) -> lock_api::MutexGuard<'_, crate::sync::RawSpin, SetBody> {
        // SAFETY: the pin keeps the slot's object alive and this set (the pin protocol of
        // `crate::handle`: no finalise, no reuse until it drops), so the field outlives the
        // returned guard, which borrows the pin. Only the `body` field is referenced: the
        // generation and reference words other threads read atomically are not.
        let lock = unsafe { &*addr_of!((*self.as_ptr()).body) };
        lock.lock()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cstr::c_name;
    use crate::sim::{Preset, SimConfig, SimDevice};
    use crate::tensor::{ArenaHostMem, Placement};
    use crate::CoreSel;

    /// The accessors that replaced `tensor`'s raw dereferences (docs/UNSAFE.md) refuse any
    /// pointer that is not a live tensor without reading through it, and a storage's host
    /// byte copies stay inside its `allocated_size` whatever window they are asked for.
    #[test]
    fn tensor_accessors_refuse_what_is_not_a_live_tensor_or_inside_its_bytes() {
        static HOST: ArenaHostMem<{ 64 << 10 }, 16> = ArenaHostMem::new();
        let st = CoreState::new_boxed();
        let sim = SimDevice::new_boxed(&SimConfig::new(Preset::Trn1, 1)).unwrap();
        let n = Nrt::with_host(&st, &*sim, &HOST);
        n.init(&InitOptions::default()).unwrap();
        let before = HOST.free_bytes();

        let mut foreign = [0u64; 32];
        let fp = foreign.as_mut_ptr().cast::<nrt_tensor_t>();
        assert!(matches!(
            n.held_tensor(core::ptr::null()),
            Err(Error::InvalidArgument(InvalidArg::NullTensor))
        ));
        assert!(n.held_tensor(fp).is_err(), "not a slot of the arena");
        assert!(matches!(n.tensor_last_owned(fp), Err(Dropped::NoOwner)));

        let h = n
            .tensor_allocate(Placement::Virtual, CoreSel::Any, 256, Some("probe"))
            .unwrap();
        let p = crate::raw::tensor_ptr(&n, h).unwrap();
        let inside = p.cast::<u8>().wrapping_add(8).cast::<nrt_tensor_t>();
        assert!(n.held_tensor(inside).is_err(), "not a slot's start");
        let t = n.held_tensor(p).unwrap();
        let (s, off, len) = t.window();
        let s = s.unwrap();
        assert_eq!((off, len, s.mem()), (0, 256, StorageMem::Host));
        assert!(s.host_write(250, &[7; 6]).is_ok(), "the last six bytes");
        assert!(matches!(
            s.host_write(251, &[7; 6]),
            Err(Error::OutOfBounds { size: 256, .. })
        ));
        assert!(s.host_fill(0, u64::MAX, 0).is_err());
        assert!(
            s.host_read(u64::MAX, &mut [0; 2]).is_err(),
            "offset overflow"
        );
        let mut back = [0u8; 6];
        s.host_read(250, &mut back).unwrap();
        assert_eq!(back, [7; 6]);
        assert_eq!(c_name(n.tensor_name_bytes(t)), "probe");

        n.tensor_free(h).unwrap();
        assert!(n.held_tensor(p).is_err(), "freed: no longer live");
        assert!(matches!(n.tensor_last_owned(p), Err(Dropped::NoOwner)));
        assert_eq!(HOST.free_bytes(), before, "the bytes went back to the pool");
        n.close().unwrap();
    }
}
