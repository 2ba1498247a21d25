//! Tensors, tensor sets and the execute data path (spec §7): `nrt_tensor_t` windows onto
//! ref-counted `nrt_tensor_storage_t`, allocated through the public wrapper's gates in order.
//!
//! DEVICE tensors come from the logical core's GLOBAL allocator (usage TENSOR, default HBM
//! channel) and outlive any model; HOST tensors are host DMA memory; VIRTUAL tensors are plain
//! host memory from the integrator's [`HostMem`] provider. Callers name tensors by
//! [`TensorHandle`]s, resolved and pinned for the length of each call ([`crate::handle`]); a
//! stale, forged or foreign one is `Error::InvalidHandle`. Every public call passes the
//! state gate (spec §7.2, `Nrt::enter`): `Closed` / `Uninitialized` outside an initialised
//! runtime, and a `close` waits for the calls already in flight (spec §12).
// The module's internal functions take the pointer of a pinned (or owned) tensor; the public
// ones take handles.
#![allow(clippy::not_unsafe_ptr_arg_deref)]

use core::ffi::c_void;
use core::ptr::{null_mut, NonNull};
use core::sync::atomic::Ordering;

use crate::abi::*;
use crate::cstr::c_name;
use crate::ctx::Nrt;
use crate::dmem::{AllocArgs, Dmem};
use crate::error::{Error, InvalidArg, Result};
use crate::handle::{self, Dropped, HandleKind, ModelHandle, SetHandle, TensorHandle};
use crate::model::ExecGuard;
use crate::sync::relax;
use crate::vcore::{CoreSel, LogicalCore};

const TENSOR_MAGIC: u32 = 0x7e45_0a11;
const STORAGE_MAGIC: u32 = 0x570a_6e01;

/// Where a tensor lives (`nrt_tensor_placement_t`, public `nrt.h`).
#[repr(u32)]
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub enum Placement {
    /// Device HBM.
    Device = 0,
    /// DMA-able host memory.
    Host = 1,
    /// Ordinary host memory.
    Virtual = 2,
}

impl Placement {
    /// From the C value (`nrt_tensor_placement_t`).
    ///
    /// Deliberate difference: libnrt takes any placement other than 0 and 2 as HOST_DRAM; this
    /// refuses values other than DEVICE (0), HOST (1) and VIRTUAL (2) (NRT_INVALID,
    /// [`crate::InvalidArg::Placement`]), since such a value is a caller's bug rather than a
    /// request for host memory.
    pub fn from_raw(v: u32) -> Option<Self> {
        match v {
            0 => Some(Placement::Device),
            1 => Some(Placement::Host),
            2 => Some(Placement::Virtual),
            _ => None,
        }
    }
}

/// Plain host memory for VIRTUAL tensors (malloc in the std shim, a static pool in firmware).
pub trait HostMem: Sync {
    /// `size` bytes aligned to 64, zeroed; `None` when exhausted.
    fn alloc(&self, size: usize) -> Option<NonNull<u8>>;
    /// Returns memory from [`HostMem::alloc`].
    ///
    /// # Safety
    /// `p` came from `alloc(size)` of this provider and is not used afterwards.
    unsafe fn free(&self, p: NonNull<u8>, size: usize);
}

/// `nrt_tensor_device_allocation_info_t`.
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct DeviceAllocationInfo {
    /// Device physical address of the tensor's first byte.
    pub physical_address: u64,
    /// Tensor bytes.
    pub size: u64,
    /// HBM channel.
    pub hbm_index: i32,
}

/// A tensor pointer: the core's own name for a tensor, and the [`crate::raw`] API's. The
/// safe API names tensors by [`TensorHandle`].
pub type Tensor = *mut nrt_tensor_t;

/// A pinned arena object (a tensor, a set): it stays whole, and its slot is not reused,
/// until this drops.
pub(crate) struct SlotPin<'a, T> {
    pub(crate) t: *mut T,
    refs: &'a core::sync::atomic::AtomicU64,
}

/// A pinned tensor ([`Nrt::tensor_pin`]): the tensor (and so its storage) stays whole until
/// this drops.
pub(crate) type TensorPin<'a> = SlotPin<'a, nrt_tensor_t>;

impl<T> Drop for SlotPin<'_, T> {
    #[inline]
    fn drop(&mut self) {
        handle::unpin(self.refs);
    }
}

/// Longest tensor name (bytes, excluding the NUL).
pub const TENSOR_NAME_MAX: usize = 95;

/// A tensor's name as [`Nrt::tensor_name`] returns it: an owned copy of `nrt_tensor_t`'s
/// 96-byte `name_buf` (spec §7.1), so it stays valid after the tensor is freed.
pub type TensorName = heapless::String<96>;

impl<'a> Nrt<'a> {
    /// Resolves and pins `h` (the pin protocol of [`crate::handle`]): the tensor cannot be
    /// finalised, nor its slot reused, until the pin drops.
    pub(crate) fn tensor_pin(&self, h: TensorHandle) -> Result<TensorPin<'a>> {
        self.check_epoch(h.0, HandleKind::Tensor)?;
        let (t, refs) = self
            .st
            .tensors
            .pin(h.0.index, h.0.generation, HandleKind::Tensor)?;
        Ok(TensorPin { t, refs })
    }

    /// The handle of tensor `t`, which the caller owns (just made, or kept alive by the
    /// caller), so its generation cannot move under this call.
    pub(crate) fn tensor_handle_of_owned(&self, t: *const nrt_tensor_t) -> TensorHandle {
        TensorHandle(self.owned_handle(&self.st.tensors, t))
    }

    /// The slot `h` names, if it is in bounds (no liveness check: for [`crate::raw`]).
    pub(crate) fn tensor_slot(&self, h: TensorHandle) -> Option<Tensor> {
        self.st.tensors.slot(h.0.index)
    }

    /// Publishes a fully built tensor: from here its handle resolves.
    fn publish_tensor(&self, t: Tensor) -> TensorHandle {
        // SAFETY: a slot of the tensor arena, ours alone until published.
        let (gen, refs) = unsafe { self.st.tensors.words(t) };
        handle::publish(gen, refs);
        self.tensor_handle_of_owned(t)
    }

    /// Checks that `t` is a live tensor of this runtime (never dereferences garbage).
    pub(crate) fn tensor_check(&self, t: *const nrt_tensor_t) -> Result<()> {
        if t.is_null() {
            return Err(Error::InvalidArgument(InvalidArg::NullTensor));
        }
        if !self.st.tensors.is_live(t) {
            return Err(Error::InvalidArgument(InvalidArg::NotLiveTensor));
        }
        // SAFETY: live slot of our arena.
        if unsafe { (*t).magic } != TENSOR_MAGIC {
            return Err(Error::InvalidArgument(InvalidArg::NotLiveTensor));
        }
        Ok(())
    }

    /// The name text of tensor slot `t` (its side-table entry; `nrt_tensor_t.name` points
    /// here). libnrt `strdup`s the name; `nrt_tensor_t` leaves no 96-byte gap, so the text
    /// lives beside the tensor arena, one buffer per slot (`CoreState::tensor_names`). A
    /// pointer the arena does not own yields the last slot's buffer; callers pass live tensors.
    fn tensor_name_buf(&self, t: *const nrt_tensor_t) -> *mut [u8; TENSOR_NAME_MAX + 1] {
        self.st.tensors.side_entry(&self.st.tensor_names, t)
    }

    /// A fresh tensor slot, from arena shard `shard` first (the caller's core, see
    /// `ctx::core_shard`).
    fn new_tensor(&self, name: Option<&str>, shard: usize) -> Result<Tensor> {
        let name = name.unwrap_or("");
        if name.len() > TENSOR_NAME_MAX {
            return Err(Error::InvalidArgument(InvalidArg::TensorNameTooLong));
        }
        // Generation and reference words left alone: resolvers of old handles may read them.
        let t = self
            .st
            .tensors
            .alloc_handle("nrt_tensor_t", true, shard)?
            .0
            .as_ptr();
        // SAFETY: fresh zeroed slot, not yet published (its handle resolves to nothing).
        unsafe {
            let buf = self.tensor_name_buf(t);
            *buf = [0; TENSOR_NAME_MAX + 1];
            (&mut *buf)[..name.len()].copy_from_slice(name.as_bytes());
            (*t).name = buf as *mut core::ffi::c_char;
            (*t).magic = TENSOR_MAGIC;
        }
        Ok(t)
    }

    /// A fresh storage slot, from arena shard `shard` first.
    fn new_storage(&self, shard: usize) -> Result<*mut nrt_tensor_storage_t> {
        let s = self
            .st
            .storages
            .alloc_fresh_first_in(shard, "nrt_tensor_storage_t")?
            .as_ptr();
        // SAFETY: fresh zeroed slot.
        unsafe {
            (*s).ref_count.store(1, Ordering::Release);
            (*s).magic = STORAGE_MAGIC;
        }
        Ok(s)
    }

    /// `nrt_tensor_allocate` → `tensor_allocate` (spec §7.2), gates in order: state, logical
    /// core range (VIRTUAL and HOST accept [`CoreSel::Any`], logical core 0; on a DEVICE
    /// tensor it fails the range gate as −1, spec §9), host placement on CAYMAN, then the
    /// allocation.
    ///
    /// The placement is typed; the C value is checked in [`crate::raw::tensor_allocate`], after
    /// the state gate as here.
    pub fn tensor_allocate(
        &self,
        placement: Placement,
        vnc: CoreSel,
        size: u64,
        name: Option<&str>,
    ) -> Result<TensorHandle> {
        let _call = self.enter()?;
        // VIRTUAL bytes come from the provider the runtime is bound to (`Nrt::with_host`).
        let host = self.host;
        let vnc = match vnc {
            CoreSel::Core(c) => c,
            CoreSel::Any if placement != Placement::Device => LogicalCore::FIRST,
            // libnrt's −1 on DEVICE is an index like any other: the range gate refuses it.
            CoreSel::Any => LogicalCore::from_c(-1),
        };
        let v = *self.vtpb_get_virtual_core(vnc).inspect_err(|e| {
            // libnrt's range gate (spec §7.2), logged with its own words.
            error!(
                "Cannot allocate a tensor on Logical NeuronCore {}: {}",
                vnc, e
            );
        })?;
        let arch = self.dev_geom(v.tpbs[0].device_id).arch();
        if placement == Placement::Host
            && arch == al_hal_tpb_arch_type_t::AL_HAL_TPB_ARCH_TYPE_CAYMAN
        {
            error!(
                "Can not allocate tensor (name:{}) on Host for NC:{}",
                name.unwrap_or(""),
                vnc
            );
            return Err(Error::Unsupported("Can not allocate tensor on Host for this NeuronCore (host DMA tensors are not supported on CAYMAN)"));
        }
        if size == 0 {
            return Err(Error::ZeroSize);
        }
        let shard = crate::ctx::core_shard(v.tpbs[0].device_id, v.tpbs[0].device_tpb_idx);
        let t = self.new_tensor(name, shard)?;
        let s = match self.new_storage(shard) {
            Ok(s) => s,
            Err(e) => {
                let _ = self.st.tensors.cancel(t);
                return Err(e);
            }
        };
        let r = match placement {
            Placement::Device | Placement::Host => {
                let tpb = self.tpb(v.tpbs[0].device_id, v.tpbs[0].device_tpb_idx)?;
                let usage = dma_mem_usage_type_t::DMA_MEM_USAGE_TYPE_TENSOR;
                let hbm = self.vcore_default_hbm(&v);
                let hint = name.unwrap_or("tensor");
                // The logical core's default HBM for either location (spec §7.2: libnrt
                // computes it before choosing the location, and records it in both).
                let args = if placement == Placement::Device {
                    AllocArgs::device(size, hbm, usage, hint)
                } else {
                    AllocArgs {
                        hbm_idx: hbm,
                        ..AllocArgs::host(size, usage, hint)
                    }
                };
                // SAFETY: resolved tpb; its GLOBAL allocator lives until teardown.
                self.dmem_alloc_inner(unsafe { (*tpb).tpb_allocator }, &args, None)
                    .map(|m| {
                        // SAFETY: fresh storage.
                        unsafe {
                            (*s).r#type = nrt_tensor_mem_type_t::NRT_TENSOR_MEM_TYPE_DMA as u32;
                            (*s).dmem = m as *mut c_void;
                            (*s).hbm_idx = hbm;
                            (*s).device_id = v.tpbs[0].device_id;
                            (*s).tpb_idx = v.tpbs[0].device_tpb_idx;
                        }
                    })
            }
            Placement::Virtual => {
                match host.and_then(|h| usize::try_from(size).ok().and_then(|sz| h.alloc(sz))) {
                    // SAFETY: fresh storage.
                    Some(p) => unsafe {
                        (*s).r#type = nrt_tensor_mem_type_t::NRT_TENSOR_MEM_TYPE_MALLOC as u32;
                        (*s).dmem = p.as_ptr() as *mut c_void;
                        Ok(())
                    },
                    None if host.is_none() => Err(Error::Unsupported(
                        "no host memory provider for VIRTUAL tensors",
                    )),
                    None => Err(Error::HostOom { size, dma: false }),
                }
            }
        };
        if let Err(e) = r {
            let _ = self.st.storages.cancel(s);
            let _ = self.st.tensors.cancel(t);
            return Err(e);
        }
        // SAFETY: fresh tensor and storage.
        unsafe {
            (*s).allocated_size = size;
            (*s).mem_owned_by_tensor = 1;
            (*s).vtpb_idx = v.vtpb_idx as i32;
            (*t).sto = s;
            (*t)._offset = 0;
            (*t)._size = size;
        }
        Ok(self.publish_tensor(t))
    }

    /// `nrt_tensor_allocate_empty`: a tensor with no storage yet.
    pub fn tensor_allocate_empty(&self, name: Option<&str>) -> Result<TensorHandle> {
        let _call = self.enter()?;
        let t = self.new_tensor(name, 0)?;
        Ok(self.publish_tensor(t))
    }

    /// `nrt_tensor_attach_buffer` (spec §7.1, MALLOC storage not owned by the tensor): makes
    /// `t` a VIRTUAL view of the caller's buffer (never freed by us). Any previous storage is
    /// released. `t` is checked; a null `buf` or a zero `size` is `InvalidArgument`.
    ///
    /// Unsafe because the runtime keeps `buf` and later safe calls (`tensor_write`,
    /// `tensor_memset`, `tensor_copy`, `execute`, …) read and write through it.
    ///
    /// ```compile_fail,E0133
    /// # fn f(n: nrt_core::Nrt<'_>, t: nrt_core::TensorHandle, b: &mut [u8; 16]) {
    /// // Attaching needs `unsafe`: the caller vouches for the buffer.
    /// let _ = n.tensor_attach_buffer(t, b.as_mut_ptr(), 16);
    /// # }
    /// ```
    ///
    /// # Safety
    /// `buf` must be valid for reads and writes of `size` bytes, and must stay so (and not be
    /// accessed through other references while a runtime call uses it) until no tensor views
    /// it any more: `t` and every slice made from it are freed, or `t` gets another storage
    /// and its slices are freed, or the runtime is closed.
    ///
    /// The storage is swapped without a lock: the caller must not attach while another
    /// thread uses `t` (its old storage may be released under that call), as with libnrt.
    pub unsafe fn tensor_attach_buffer(
        &self,
        h: TensorHandle,
        buf: *mut u8,
        size: u64,
    ) -> Result<()> {
        let _call = self.enter()?;
        let pin = self.tensor_pin(h)?;
        let t = pin.t;
        self.tensor_check(t)?;
        if buf.is_null() || size == 0 {
            return Err(Error::InvalidArgument(InvalidArg::NullOrEmptyBuffer));
        }
        let s = self.new_storage(0)?;
        // SAFETY: live tensor, fresh storage.
        unsafe {
            (*s).r#type = nrt_tensor_mem_type_t::NRT_TENSOR_MEM_TYPE_MALLOC as u32;
            (*s).dmem = buf as *mut c_void;
            (*s).allocated_size = size;
            (*s).mem_owned_by_tensor = 0;
            let old = (*t).sto;
            (*t).sto = s;
            (*t)._offset = 0;
            (*t)._size = size;
            if !old.is_null() {
                self.storage_put(old);
            }
        }
        Ok(())
    }

    /// `nrt_tensor_allocate_slice`: a new tensor viewing `[offset, offset+size)` of `src`,
    /// sharing its ref-counted storage (freed with the last user).
    pub fn tensor_allocate_slice(
        &self,
        src: TensorHandle,
        offset: u64,
        size: u64,
        name: Option<&str>,
    ) -> Result<TensorHandle> {
        let _call = self.enter()?;
        let pin = self.tensor_pin(src)?;
        let src = pin.t;
        self.tensor_check(src)?;
        // SAFETY: live tensor.
        let (sto, base, len) = unsafe { ((*src).sto, (*src)._offset, (*src)._size) };
        if sto.is_null() {
            return Err(Error::InvalidArgument(InvalidArg::SourceWithoutStorage));
        }
        check_window(offset, size, len)?;
        if size == 0 {
            return Err(Error::ZeroSize);
        }
        let t = self.new_tensor(name, 0)?;
        // SAFETY: live storage shared by a live (pinned) tensor.
        unsafe {
            (*sto).ref_count.fetch_add(1, Ordering::AcqRel);
            (*t).sto = sto;
            (*t)._offset = base + offset;
            (*t)._size = size;
        }
        Ok(self.publish_tensor(t))
    }

    /// `nrt_tensor_free`: releases the tensor and its reference on the storage, once any
    /// call using it on another thread is done. A stale (already freed, at any age), forged
    /// or foreign handle is [`Error::InvalidHandle`], and nothing is freed. `Closed` /
    /// `Uninitialized` outside an initialised runtime (close frees every tensor, spec §12).
    pub fn tensor_free(&self, h: TensorHandle) -> Result<()> {
        let _call = self.enter()?;
        let pin = self.tensor_pin(h)?;
        match handle::drop_owner(pin.refs) {
            Dropped::Last => {
                let (t, refs) = (pin.t, pin.refs);
                // The pin is handed over to the drain: it is the last one left.
                core::mem::forget(pin);
                handle::wait_drained(refs, 1, relax);
                // SAFETY: last owner gone and every pin drained: the tensor is ours alone.
                unsafe { self.tensor_finalize(t) };
                Ok(())
            }
            // A tensor has one owner, so never Shared; NoOwner: a racing free took it.
            Dropped::Shared => Ok(()),
            Dropped::NoOwner => Err(Error::stale(HandleKind::Tensor)),
        }
    }

    /// [`Self::tensor_free`] without the gate and through a pointer the caller owns
    /// (teardown runs after the gate closed; [`crate::raw`]).
    pub(crate) fn tensor_free_inner(&self, t: Tensor) -> Result<()> {
        self.tensor_check(t)?;
        // SAFETY: live slot of the tensor arena.
        let refs = unsafe { self.st.tensors.words(t).1 };
        match handle::drop_owner(refs) {
            Dropped::Last => handle::wait_drained(refs, 0, relax),
            // A tensor has one owner, so never Shared.
            Dropped::Shared => return Ok(()),
            // A racing free took it.
            Dropped::NoOwner => return Err(Error::InvalidArgument(InvalidArg::NotLiveTensor)),
        }
        // SAFETY: last owner gone and every pin drained: the tensor is ours alone.
        unsafe { self.tensor_finalize(t) };
        Ok(())
    }

    /// Tears a tensor down and gives its slot back.
    ///
    /// # Safety
    /// `t` is a live tensor whose owner is gone and whose pins have drained (nobody else can
    /// reach it).
    unsafe fn tensor_finalize(&self, t: Tensor) {
        // SAFETY: caller contract; after this the slot is dead.
        unsafe {
            let sto = (*t).sto;
            (*t).magic = 0;
            (*t).sto = null_mut();
            if !sto.is_null() {
                self.storage_put(sto);
            }
            // The slot reads as free before it can be handed out again.
            handle::retire(self.st.tensors.words(t).0);
        }
        let _ = self.st.tensors.release(t);
    }

    /// Drops one reference on a storage; the last one frees its memory if owned (VIRTUAL
    /// bytes to the bound host provider, the one that allocated them).
    ///
    /// # Safety
    /// `s` is a live storage on which the caller holds a reference.
    unsafe fn storage_put(&self, s: *mut nrt_tensor_storage_t) {
        // SAFETY: caller contract.
        unsafe {
            if (*s).ref_count.fetch_sub(1, Ordering::AcqRel) != 1 {
                return;
            }
            if (*s).mem_owned_by_tensor != 0 && !(*s).dmem.is_null() {
                match nrt_tensor_mem_type_t::from_raw((*s).r#type) {
                    Some(nrt_tensor_mem_type_t::NRT_TENSOR_MEM_TYPE_DMA) => {
                        let _ = self.dmem_free_inner((*s).dmem as Dmem);
                    }
                    Some(nrt_tensor_mem_type_t::NRT_TENSOR_MEM_TYPE_MALLOC) => {
                        if let (Some(h), Some(p)) = (self.host, NonNull::new((*s).dmem as *mut u8))
                        {
                            h.free(p, (*s).allocated_size as usize);
                        }
                    }
                    _ => {}
                }
            }
            (*s).magic = 0;
            let _ = self.st.storages.release(s);
        }
    }

    /// Teardown: frees every tensor still alive: device and host DMA memory returns to the
    /// driver, VIRTUAL bytes to the bound host provider (issue 16 item 2: close returns every
    /// byte in every layer).
    pub(crate) fn free_all_tensors(&self) {
        let mut live: [Tensor; 64] = [null_mut(); 64];
        loop {
            let mut n = 0;
            self.st.tensors.for_each_live(|p| {
                if n < live.len() {
                    live[n] = p.as_ptr();
                    n += 1;
                }
            });
            if n == 0 {
                break;
            }
            for t in &live[..n] {
                if self.tensor_free_inner(*t).is_err() {
                    // Not a whole tensor (cannot happen once the gate is drained): give the
                    // slot back rather than meet it again.
                    let _ = self.st.tensors.release(*t);
                }
            }
        }
    }

    /// Bytes of a tensor.
    pub fn tensor_get_size(&self, h: TensorHandle) -> Result<u64> {
        let _call = self.enter()?;
        let pin = self.tensor_pin(h)?;
        let t = pin.t;
        self.tensor_check(t)?;
        // SAFETY: live tensor.
        Ok(unsafe { (*t)._size })
    }

    /// The tensor's name (`nrt_tensor_t.name`, spec §7.1), copied out: the slot's `name_buf`
    /// is reused by the next tensor once `t` is freed, so no borrow of it is handed out.
    pub fn tensor_name(&self, h: TensorHandle) -> Result<TensorName> {
        let _call = self.enter()?;
        let pin = self.tensor_pin(h)?;
        let t = pin.t;
        self.tensor_check(t)?;
        // SAFETY: live tensor; its name_buf is written only when the slot is handed out.
        let text = c_name(unsafe { &*self.tensor_name_buf(t) });
        let mut name = TensorName::new();
        // `name_buf` is 96 bytes, so its text always fits.
        name.push_str(text)
            .map_err(|_| Error::InvalidArgument(InvalidArg::TensorNameBuffer))?;
        Ok(name)
    }

    /// Storage of a live tensor, checked.
    fn storage_of(&self, t: *const nrt_tensor_t) -> Result<(*mut nrt_tensor_storage_t, u64, u64)> {
        self.tensor_check(t)?;
        // SAFETY: live tensor.
        let (s, off, len) = unsafe { ((*t).sto, (*t)._offset, (*t)._size) };
        if s.is_null() {
            return Err(Error::InvalidArgument(InvalidArg::TensorWithoutStorage));
        }
        Ok((s, off, len))
    }

    /// Moves bytes between a tensor window and host memory.
    fn tensor_io(
        &self,
        t: *const nrt_tensor_t,
        offset: u64,
        write: Option<&[u8]>,
        read: Option<&mut [u8]>,
    ) -> Result<()> {
        let (s, base, len) = self.storage_of(t)?;
        let n = write
            .map(|w| w.len())
            .or(read.as_ref().map(|r| r.len()))
            .unwrap_or(0) as u64;
        check_window(offset, n, len)?;
        // SAFETY: live storage of a live tensor.
        unsafe {
            match nrt_tensor_mem_type_t::from_raw((*s).r#type) {
                Some(nrt_tensor_mem_type_t::NRT_TENSOR_MEM_TYPE_DMA) => {
                    let m = (*s).dmem as Dmem;
                    let at = (*m).align_offset + base + offset;
                    let r = match (write, read) {
                        (Some(w), _) => self.drv.copy_in((*m).device_id, (*m).mem_handle, at, w),
                        (_, Some(r)) => self.drv.copy_out((*m).device_id, (*m).mem_handle, at, r),
                        _ => Ok(()),
                    };
                    r.map_err(Error::Driver)
                }
                Some(nrt_tensor_mem_type_t::NRT_TENSOR_MEM_TYPE_MALLOC) => {
                    let p = ((*s).dmem as *mut u8).add((base + offset) as usize);
                    match (write, read) {
                        (Some(w), _) => core::ptr::copy(w.as_ptr(), p, w.len()),
                        (_, Some(r)) => core::ptr::copy(p, r.as_mut_ptr(), r.len()),
                        _ => {}
                    }
                    Ok(())
                }
                _ => Err(Error::InvalidArgument(InvalidArg::StorageWithoutMemory)),
            }
        }
    }

    /// `nrt_tensor_write`.
    pub fn tensor_write(&self, h: TensorHandle, buf: &[u8], offset: u64) -> Result<()> {
        let _call = self.enter()?;
        let pin = self.tensor_pin(h)?;
        self.tensor_io(pin.t, offset, Some(buf), None)
    }

    /// `nrt_tensor_read`. Waits for an execution writing the tensor (`when_written`).
    pub fn tensor_read(&self, h: TensorHandle, buf: &mut [u8], offset: u64) -> Result<()> {
        let _call = self.enter()?;
        let pin = self.tensor_pin(h)?;
        let t = pin.t;
        self.when_written(t, || self.tensor_io(t, offset, None, Some(buf)))
    }

    /// Runs `read` once no execution is writing `t`'s storage (spec §7.1: "a tensor cannot be
    /// read until the DMA writing it has completed"). It runs under the storage's
    /// `tensor_op_cv_lock`, which `execute` takes to mark its outputs, so a read ends before an
    /// execution marks the tensor or starts after that execution has finished writing it: it
    /// never sees half an output. Only for public calls: `execute`'s own copies read tensors
    /// it is writing.
    fn when_written<R>(
        &self,
        t: *const nrt_tensor_t,
        read: impl FnOnce() -> Result<R>,
    ) -> Result<R> {
        let (s, _, _) = self.storage_of(t)?;
        let mut i = 0u32;
        loop {
            // SAFETY: `t` is live and holds a reference on its storage for the whole call.
            let (lock, writers) =
                unsafe { (&(*s).tensor_op_cv_lock, &(*s).pending_exec_count_write) };
            let g = lock.lock();
            if writers.load(Ordering::Acquire) == 0 {
                let r = read();
                drop(g);
                return r;
            }
            drop(g);
            relax(i);
            i = i.saturating_add(1);
        }
    }

    /// `nrt_tensor_memset`.
    pub fn tensor_memset(&self, h: TensorHandle, offset: u64, value: u8, size: u64) -> Result<()> {
        let _call = self.enter()?;
        let pin = self.tensor_pin(h)?;
        self.tensor_memset_inner(pin.t, offset, value, size)
    }

    /// [`Self::tensor_memset`] without the gate, for callers already past it (`execute`: a
    /// second `enter` there could see a `close` that is waiting for that very call, and fail
    /// it half-way).
    fn tensor_memset_inner(&self, t: Tensor, offset: u64, value: u8, size: u64) -> Result<()> {
        let (s, base, len) = self.storage_of(t)?;
        check_window(offset, size, len)?;
        // SAFETY: live storage; the window lies inside it (checked above), and a MALLOC storage
        // owns (or was attached with) `allocated_size` writable bytes.
        unsafe {
            match nrt_tensor_mem_type_t::from_raw((*s).r#type) {
                Some(nrt_tensor_mem_type_t::NRT_TENSOR_MEM_TYPE_DMA) => {
                    let m = (*s).dmem as Dmem;
                    self.drv
                        .fill(
                            (*m).device_id,
                            (*m).mem_handle,
                            (*m).align_offset + base + offset,
                            size,
                            value,
                        )
                        .map_err(Error::Driver)
                }
                Some(nrt_tensor_mem_type_t::NRT_TENSOR_MEM_TYPE_MALLOC) => {
                    // The window was checked against the storage above.
                    let p = ((*s).dmem as *mut u8).add((base + offset) as usize);
                    core::ptr::write_bytes(p, value, size as usize);
                    Ok(())
                }
                _ => Err(Error::InvalidArgument(InvalidArg::StorageWithoutMemory)),
            }
        }
    }

    /// `nrt_tensor_copy` (spec §7.1): `size` bytes from `src[src_off..]` to `dst[dst_off..]`;
    /// two device tensors must be on the same physical core (else NRT_INVALID, as the public
    /// API says). Overlapping ranges of one storage (one tensor, or slices sharing it) copy
    /// as `memmove` does: the destination ends up holding the source's original bytes. Waits
    /// for an execution writing `src` (`when_written`).
    pub fn tensor_copy(
        &self,
        src: TensorHandle,
        src_off: u64,
        dst: TensorHandle,
        dst_off: u64,
        size: u64,
    ) -> Result<()> {
        let _call = self.enter()?;
        let (src_pin, dst_pin) = (self.tensor_pin(src)?, self.tensor_pin(dst)?);
        let (src, dst) = (src_pin.t as *const nrt_tensor_t, dst_pin.t);
        self.when_written(src, || {
            self.tensor_copy_inner(src, src_off, dst, dst_off, size)
        })
    }

    /// [`Self::tensor_copy`] without the gate, for callers already past it (see
    /// [`Self::tensor_memset_inner`]).
    fn tensor_copy_inner(
        &self,
        src: *const nrt_tensor_t,
        src_off: u64,
        dst: Tensor,
        dst_off: u64,
        size: u64,
    ) -> Result<()> {
        let backwards = self.copy_check(src, src_off, dst, dst_off, size)?;
        let mut buf = [0u8; 4096];
        let mut done = 0;
        while done < size {
            let k = (size - done).min(buf.len() as u64);
            let at = if backwards { size - done - k } else { done };
            let chunk = &mut buf[..k as usize];
            self.tensor_io(src, src_off + at, None, Some(&mut *chunk))?;
            self.tensor_io(dst, dst_off + at, Some(&*chunk), None)?;
            done += k;
        }
        Ok(())
    }

    /// Everything that can refuse a copy, checked before a byte moves (both windows, one
    /// NeuronCore for device-to-device). Returns whether the copy must run from the end
    /// backwards (memmove).
    fn copy_check(
        &self,
        src: *const nrt_tensor_t,
        src_off: u64,
        dst: Tensor,
        dst_off: u64,
        size: u64,
    ) -> Result<bool> {
        let (ss, sbase, slen) = self.storage_of(src)?;
        let (ds, dbase, dlen) = self.storage_of(dst)?;
        check_window(src_off, size, slen)?;
        check_window(dst_off, size, dlen)?;
        // SAFETY: live storages.
        unsafe {
            let dma = nrt_tensor_mem_type_t::NRT_TENSOR_MEM_TYPE_DMA as u32;
            if (*ss).r#type == dma && (*ds).r#type == dma {
                let (a, b) = ((*ss).dmem as Dmem, (*ds).dmem as Dmem);
                if (*a).mem_type == (*b).mem_type
                    && (*a).mem_type == dma_mem_location_t::TONGA_DRAM as u32
                    && ((*a).device_id, (*a).nc_id) != ((*b).device_id, (*b).nc_id)
                {
                    return Err(Error::InvalidArgument(InvalidArg::CrossCoreCopy));
                }
            }
        }
        // The copy goes through a bounce buffer, one chunk at a time (each chunk is read whole
        // before it is written). When the destination starts above the source in the same
        // storage, a forward pass would re-read bytes it already overwrote, so the chunks go
        // from the end backwards (memmove). The windows were checked inside their tensors,
        // whose offsets lie inside the storage, so these sums do not overflow.
        Ok(core::ptr::eq(ss, ds) && dbase + dst_off > sbase + src_off)
    }

    /// `nrt_tensor_get_va`: host address of a VIRTUAL tensor's first byte; null for memory
    /// the host cannot address (device and host-DMA tensors here).
    pub fn tensor_get_va(&self, h: TensorHandle) -> Result<*mut u8> {
        let _call = self.enter()?;
        let pin = self.tensor_pin(h)?;
        let (s, base, _) = self.storage_of(pin.t)?;
        // SAFETY: live storage.
        unsafe {
            if (*s).r#type == nrt_tensor_mem_type_t::NRT_TENSOR_MEM_TYPE_MALLOC as u32 {
                Ok(((*s).dmem as *mut u8).wrapping_add(base as usize))
            } else {
                Ok(null_mut())
            }
        }
    }

    /// `nrt_tensor_get_device_allocation_info`.
    pub fn tensor_device_allocation_info(&self, h: TensorHandle) -> Result<DeviceAllocationInfo> {
        let _call = self.enter()?;
        let pin = self.tensor_pin(h)?;
        let (s, base, len) = self.storage_of(pin.t)?;
        // SAFETY: live storage.
        unsafe {
            if (*s).r#type != nrt_tensor_mem_type_t::NRT_TENSOR_MEM_TYPE_DMA as u32 {
                return Err(Error::InvalidArgument(InvalidArg::NotDeviceVisible));
            }
            let m = (*s).dmem as Dmem;
            Ok(DeviceAllocationInfo {
                physical_address: (*m)._pa + (*m).align_offset + base,
                size: len,
                hbm_index: (*s).hbm_idx as i32,
            })
        }
    }

    /// Output completions recorded on `t` (`output_completion_count`).
    pub fn tensor_output_completion(&self, h: TensorHandle) -> Result<u64> {
        let _call = self.enter()?;
        let pin = self.tensor_pin(h)?;
        let t = pin.t;
        self.tensor_check(t)?;
        // SAFETY: live tensor; atomic.
        Ok(unsafe { (*t).output_completion_count.load(Ordering::Acquire) })
    }

    /// `nrt_tensor_reset_output_completion`.
    pub fn tensor_reset_output_completion(&self, h: TensorHandle) -> Result<()> {
        let _call = self.enter()?;
        let pin = self.tensor_pin(h)?;
        let t = pin.t;
        self.tensor_check(t)?;
        // SAFETY: live tensor; atomic.
        unsafe { (*t).output_completion_count.store(0, Ordering::Release) };
        Ok(())
    }

    /// `(pending_exec_count_read, pending_exec_count_write)` of a tensor's storage.
    pub fn tensor_pending(&self, h: TensorHandle) -> Result<(u64, u64)> {
        let _call = self.enter()?;
        let pin = self.tensor_pin(h)?;
        let (s, _, _) = self.storage_of(pin.t)?;
        // SAFETY: live storage; atomics.
        unsafe {
            Ok((
                (*s).pending_exec_count_read.load(Ordering::Acquire),
                (*s).pending_exec_count_write.load(Ordering::Acquire),
            ))
        }
    }

    /// The execute data path behind `nrt_execute`: binds `inputs`/`outputs` (each `(name,
    /// tensor)`) to the model's declared tensors by name — a missing or wrongly sized one is
    /// NRT_INVALID — then, inside the exec seam, copies each input's bytes to the output of the
    /// same position (zero-filling the rest) and bumps each output's completion count.
    ///
    /// The sets are tensor sets of this runtime ([`Nrt::set_create`]); a stale, forged or
    /// foreign model or set handle is [`Error::InvalidHandle`], and nothing is written.
    pub fn execute(&self, h: ModelHandle, inputs: SetHandle, outputs: SetHandle) -> Result<()> {
        let _call = self.enter()?;
        let g = self.exec_begin(h)?;
        let mut ins: [Tensor; 32] = [null_mut(); 32];
        let mut outs: [Tensor; 32] = [null_mut(); 32];
        // Every bound tensor stays pinned for the whole execution: a racing free waits.
        let mut pins = PinList::new();
        let ni = self.bind(&g, false, inputs, &mut ins, &mut pins)?;
        let no = self.bind(&g, true, outputs, &mut outs, &mut pins)?;
        // Unmarked when dropped, also if a copy below panics (a count left up would make
        // every later read of the output wait forever, see `when_written`).
        // Every copy is checked before any output is written, so a refused execution leaves
        // its outputs as they were.
        for (k, o) in outs[..no.min(ni)].iter().enumerate() {
            // SAFETY: bound, live.
            let n = unsafe { (*ins[k])._size.min((**o)._size) };
            self.copy_check(ins[k], 0, *o, 0, n)?;
        }
        let marks = PendingMarks::new(&ins[..ni], &outs[..no]);
        // Executions that share a storage move their data one at a time (spec §7.1: a tensor
        // is not read while the execution writing it runs; executions on different cores may
        // share tensors); executions with disjoint tensors run side by side.
        let mut stripes = 0u64;
        for t in ins[..ni].iter().chain(&outs[..no]) {
            stripes |= 1 << self.exec_stripe(*t)?;
        }
        let data = ExecDataGuard::lock(self.st, stripes);
        let mut r = Ok(());
        for (k, o) in outs[..no].iter().enumerate() {
            // SAFETY: bound, live.
            let olen = unsafe { (**o)._size };
            let copied = if k < ni {
                // SAFETY: bound, live.
                let n = unsafe { (*ins[k])._size }.min(olen);
                self.tensor_copy_inner(ins[k], 0, *o, 0, n).map(|_| n)
            } else {
                Ok(0)
            };
            r = copied.and_then(|n| {
                if n < olen {
                    self.tensor_memset_inner(*o, n, 0, olen - n)
                } else {
                    Ok(())
                }
            });
            if r.is_err() {
                break;
            }
        }
        drop(data);
        drop(marks);
        if r.is_ok() {
            for o in &outs[..no] {
                // SAFETY: bound, live; atomic.
                unsafe { (**o).output_completion_count.fetch_add(1, Ordering::AcqRel) };
            }
        }
        drop(g);
        r
    }

    /// Binds the model's declared inputs (or outputs) to the tensors of set `set` by name,
    /// pinning each for the execution. The set is read under its lock (a racing `set_add`
    /// waits) and stays pinned only for the binding: the tensors, not the set, are what the
    /// execution uses.
    fn bind(
        &self,
        g: &ExecGuard<'_>,
        output: bool,
        set: SetHandle,
        out: &mut [Tensor; 32],
        pins: &mut PinList<'a>,
    ) -> Result<usize> {
        let sp = self.set_pin(set)?;
        let body = sp.body();
        let mut i = 0;
        while let Some(io) = self.model_io(g, output, i) {
            let h = body.get(io.name).ok_or(Error::InvalidArgument(if output {
                InvalidArg::OutputMissing
            } else {
                InvalidArg::InputMissing
            }))?;
            let t = pins.push(self.tensor_pin(h)?)?;
            let (_, _, len) = self.storage_of(t)?;
            if len != io.size {
                return Err(Error::InvalidArgument(InvalidArg::TensorSizeMismatch));
            }
            out[i] = t;
            i += 1;
        }
        Ok(i)
    }
}

/// Stripes of the execute data lock (`CoreState::exec_data_locks`): one bit each of a `u64`.
pub(crate) const EXEC_DATA_STRIPES: usize = 64;

impl Nrt<'_> {
    /// The execute data lock stripe of bound tensor `t`: its storage's arena slot, modulo the
    /// stripes, so every tensor viewing one storage (slices included) has the same stripe.
    fn exec_stripe(&self, t: Tensor) -> Result<usize> {
        let (s, _, _) = self.storage_of(t)?;
        Ok(self.st.storages.index_of(s).unwrap_or(0) % EXEC_DATA_STRIPES)
    }
}

/// The stripes of the execute data lock one execution holds, taken in ascending order (so
/// two executions never wait for each other's stripes in a cycle), released on drop.
pub(crate) struct ExecDataGuard<'a> {
    _held: heapless::Vec<crate::sync::MutexGuard<'a>, EXEC_DATA_STRIPES>,
}

impl<'a> ExecDataGuard<'a> {
    /// Locks every stripe whose bit is set in `stripes`, lowest first.
    pub(crate) fn lock(st: &'a crate::ctx::CoreState, mut stripes: u64) -> Self {
        let mut held = heapless::Vec::new();
        while stripes != 0 {
            let i = stripes.trailing_zeros() as usize;
            stripes &= stripes - 1;
            // At most EXEC_DATA_STRIPES bits, so the push never finds the list full.
            let _ = held.push(st.exec_data_locks[i].0.lock());
        }
        ExecDataGuard { _held: held }
    }
}

/// `[offset, offset+len)` inside `size`, overflow-checked.
pub fn check_window(offset: u64, len: u64, size: u64) -> Result<()> {
    match offset.checked_add(len) {
        Some(end) if end <= size => Ok(()),
        _ => Err(Error::OutOfBounds { offset, len, size }),
    }
}

/// The pins an execution holds on its bound tensors (up to 32 inputs + 32 outputs).
pub(crate) struct PinList<'a> {
    pins: heapless::Vec<TensorPin<'a>, 64>,
}

impl<'a> PinList<'a> {
    fn new() -> Self {
        PinList {
            pins: heapless::Vec::new(),
        }
    }
    /// Keeps `p` until the list drops; its tensor.
    fn push(&mut self, p: TensorPin<'a>) -> Result<Tensor> {
        let t = p.t;
        self.pins
            .push(p)
            .map_err(|_| Error::InvalidArgument(InvalidArg::TooManyBound))?;
        Ok(t)
    }
}

/// Tensors one tensor set holds (spec §7.3: what one execution binds).
pub const SET_MAX: usize = 64;

/// One tensor set (`nrt_tensor_set_t`, spec §7.3; libnrt's `kbl_feature_map_set_t`): a slot
/// of the core's set arena (`CoreState::sets`, sized by [`crate::Capacity::sets`]), named by
/// a [`SetHandle`] through the pin protocol of [`crate::handle`]. Valid when all-zero.
#[repr(C)]
pub struct SetSlot {
    /// The slot's generation (only through `Arena::words`, atomically).
    pub(crate) generation: u32,
    _pad: u32,
    /// Owners (1 while the set lives) and pins.
    pub(crate) refs: core::sync::atomic::AtomicU64,
    /// The entries, behind the lock that guards them ([`SetPin::body`]): taken by `set_add`,
    /// `set_get`, `set_len` and an execution's binding, only while the set is pinned.
    body: crate::sync::DataLock<SetBody>,
}

const _: () = assert!(core::mem::offset_of!(SetSlot, generation) == 0);
const _: () = assert!(core::mem::offset_of!(SetSlot, refs) == 8);

// SAFETY: every member is valid all-zero: integers, an atomic, and a `DataLock` that is
// unlocked when zeroed (checked in `sync`) around an empty body (length 0).
unsafe impl crate::abi::meta::ZeroValid for SetSlot {}

/// A set's entries: `len` (name, tensor handle words) pairs in insertion order.
#[repr(C)]
pub(crate) struct SetBody {
    len: u32,
    _pad: u32,
    tensors: [[u32; 3]; SET_MAX],
    names: [[u8; TENSOR_NAME_MAX + 1]; SET_MAX],
}

impl SetBody {
    fn find(&self, name: &str) -> Option<usize> {
        (0..(self.len as usize).min(SET_MAX)).find(|&i| c_name(&self.names[i]) == name)
    }

    fn get(&self, name: &str) -> Option<TensorHandle> {
        self.find(name).map(|i| {
            let [a, b, c] = self.tensors[i];
            TensorHandle::from_parts(a, b, c)
        })
    }
}

/// A pinned tensor set ([`Nrt::set_pin`]).
pub(crate) type SetPin<'a> = SlotPin<'a, SetSlot>;

impl SetPin<'_> {
    /// The set's entries, locked. The one way to them: a set's body is only read or written
    /// through a pin, under its lock.
    fn body(&self) -> lock_api::MutexGuard<'_, crate::sync::RawSpin, SetBody> {
        // SAFETY: the pin keeps the slot's object alive and this set (the pin protocol of
        // `crate::handle`: no finalise, no reuse until it drops), so the field outlives the
        // returned guard, which borrows the pin. Only the `body` field is referenced: the
        // generation and reference words other threads read atomically are not.
        let lock = unsafe { &*core::ptr::addr_of!((*self.t).body) };
        lock.lock()
    }
}

impl<'a> Nrt<'a> {
    /// Resolves and pins set `h` (the pin protocol of [`crate::handle`]).
    pub(crate) fn set_pin(&self, h: SetHandle) -> Result<SetPin<'a>> {
        self.check_epoch(h.0, HandleKind::Set)?;
        let (t, refs) = self
            .st
            .sets
            .pin(h.0.index, h.0.generation, HandleKind::Set)?;
        Ok(SlotPin { t, refs })
    }

    /// `nrt_allocate_tensor_set`: an empty tensor set of this runtime. A full set arena is
    /// [`Error::ArenaFull`] naming the setting that raises it (`Capacity.sets`,
    /// `NRT_DMEM_MAX_SETS`).
    pub fn set_create(&self) -> Result<SetHandle> {
        let _call = self.enter()?;
        // Generation and reference words left alone: resolvers of old handles may read them.
        let (p, index) = self.st.sets.alloc_handle("tensor set", true, 0)?;
        // SAFETY: a slot of the set arena, ours alone until published (zeroed but for the
        // two words: an empty body).
        let (gen, refs) = unsafe { self.st.sets.words(p.as_ptr()) };
        let generation = handle::publish(gen, refs);
        Ok(SetHandle(handle::Raw {
            index,
            generation,
            epoch: self.epoch(),
        }))
    }

    /// `nrt_destroy_tensor_set`: frees the set (not its tensors), once any call using it on
    /// another thread is done. A stale (already destroyed, at any age), forged or foreign
    /// handle is [`Error::InvalidHandle`] and nothing changes. `Closed` / `Uninitialized`
    /// outside an initialised runtime: `close` frees every set (spec §12), so a set of a
    /// closed runtime is already gone.
    pub fn set_destroy(&self, h: SetHandle) -> Result<()> {
        let _call = self.enter()?;
        let pin = self.set_pin(h)?;
        match handle::drop_owner(pin.refs) {
            Dropped::Last => {
                let (p, refs) = (pin.t, pin.refs);
                // The pin is handed over to the drain: it is the last one left.
                core::mem::forget(pin);
                handle::wait_drained(refs, 1, relax);
                self.set_finalize(p);
                Ok(())
            }
            // A set has one owner, so never Shared; NoOwner: a racing destroy took it.
            Dropped::Shared => Ok(()),
            Dropped::NoOwner => Err(Error::stale(HandleKind::Set)),
        }
    }

    /// Retires a set whose owner is gone and whose pins drained, and gives its slot back.
    fn set_finalize(&self, p: *mut SetSlot) {
        // SAFETY: a slot of the set arena; nobody else can reach it (owner gone, drained).
        handle::retire(unsafe { self.st.sets.words(p) }.0);
        let _ = self.st.sets.release(p);
    }

    /// Teardown: frees every set still alive (after the gate drained: nobody pins one).
    pub(crate) fn free_all_sets(&self) {
        let mut live: [*mut SetSlot; 64] = [null_mut(); 64];
        loop {
            let mut n = 0;
            self.st.sets.for_each_live(|p| {
                if n < live.len() {
                    live[n] = p.as_ptr();
                    n += 1;
                }
            });
            if n == 0 {
                break;
            }
            for p in &live[..n] {
                // SAFETY: a live slot of the set arena.
                let refs = unsafe { self.st.sets.words(*p) }.1;
                if handle::drop_owner(refs) == Dropped::Last {
                    handle::wait_drained(refs, 0, relax);
                }
                self.set_finalize(*p);
            }
        }
    }

    /// `nrt_add_tensor_to_tensor_set`: adds tensor `t` under `name` (at most 95 bytes), replacing
    /// a tensor of the same name. `t` must be a live tensor of this runtime now
    /// ([`Error::InvalidHandle`] otherwise); one freed later makes an execution that binds it
    /// fail with [`Error::InvalidHandle`]. A set holds [`SET_MAX`] tensors
    /// ([`Error::SetFull`], NRT_RESOURCE, beyond). A failed add changes nothing.
    pub fn set_add(&self, h: SetHandle, name: &str, t: TensorHandle) -> Result<()> {
        let _call = self.enter()?;
        if name.len() > TENSOR_NAME_MAX {
            return Err(Error::InvalidArgument(InvalidArg::TensorNameTooLong));
        }
        drop(self.tensor_pin(t)?);
        let pin = self.set_pin(h)?;
        let mut body = pin.body();
        let (a, b, c) = t.to_parts();
        let i = match body.find(name) {
            Some(i) => i,
            None if body.len as usize >= SET_MAX => return Err(Error::SetFull),
            None => {
                let i = body.len as usize;
                body.names[i] = [0; TENSOR_NAME_MAX + 1];
                body.names[i][..name.len()].copy_from_slice(name.as_bytes());
                body.len += 1;
                i
            }
        };
        body.tensors[i] = [a, b, c];
        Ok(())
    }

    /// `nrt_get_tensor_from_tensor_set`: the tensor stored under `name` (`None` when the set
    /// has none). The handle is returned as stored: a tensor freed since is refused where
    /// it is used.
    pub fn set_get(&self, h: SetHandle, name: &str) -> Result<Option<TensorHandle>> {
        let _call = self.enter()?;
        let pin = self.set_pin(h)?;
        let found = pin.body().get(name);
        Ok(found)
    }

    /// Tensors in set `h`.
    pub fn set_len(&self, h: SetHandle) -> Result<usize> {
        let _call = self.enter()?;
        let pin = self.set_pin(h)?;
        let len = pin.body().len as usize;
        Ok(len)
    }
}

/// A heap-free [`HostMem`] for `no_std` integrators: VIRTUAL tensor bytes carved out of a
/// fixed byte array (`BYTES`), placed by the same [`crate::carve::Carve`] allocator the sim
/// uses (`NODES` blocks of metadata, kept out of the byte array). Valid when all-zero, so it
/// can be a `static`; it initialises itself on first use.
#[repr(C)]
pub struct ArenaHostMem<const BYTES: usize, const NODES: usize> {
    lock: nrt_mutex_t,
    carve: core::cell::UnsafeCell<crate::carve::Carve<NODES>>,
    bytes: core::cell::UnsafeCell<[u8; BYTES]>,
}

// SAFETY: all members are zero-valid: an unlocked lock, a not-yet-initialised carve (it checks
// `is_initialized`), and bytes.
unsafe impl<const BYTES: usize, const NODES: usize> crate::abi::meta::ZeroValid
    for ArenaHostMem<BYTES, NODES>
{
}
// SAFETY: the carve is only touched under `lock`; handed-out byte ranges are disjoint.
unsafe impl<const BYTES: usize, const NODES: usize> Sync for ArenaHostMem<BYTES, NODES> {}

/// Bytes in front of every block: the carve id that frees it.
const ARENA_HDR: usize = 64;

impl<const BYTES: usize, const NODES: usize> ArenaHostMem<BYTES, NODES> {
    /// An empty pool (usable as a `static` initialiser).
    pub const fn new() -> Self {
        ArenaHostMem {
            lock: nrt_mutex_t::new(),
            carve: core::cell::UnsafeCell::new(crate::carve::Carve::new()),
            bytes: core::cell::UnsafeCell::new([0; BYTES]),
        }
    }

    /// Bytes still free.
    pub fn free_bytes(&self) -> u64 {
        let _g = self.lock.lock();
        // SAFETY: carve under lock.
        let c = unsafe { &*self.carve.get() };
        if c.is_initialized() {
            c.free_bytes()
        } else {
            BYTES as u64
        }
    }
}

impl<const BYTES: usize, const NODES: usize> Default for ArenaHostMem<BYTES, NODES> {
    fn default() -> Self {
        Self::new()
    }
}

impl<const BYTES: usize, const NODES: usize> HostMem for ArenaHostMem<BYTES, NODES> {
    fn alloc(&self, size: usize) -> Option<NonNull<u8>> {
        let want = size.checked_add(ARENA_HDR)? as u64;
        let _g = self.lock.lock();
        // SAFETY: the carve is only reached under `lock`.
        let c = unsafe { &mut *self.carve.get() };
        if !c.is_initialized() {
            c.init(0, BYTES as u64 & !63, 64).ok()?;
        }
        let b = c.alloc(want, 64).ok()?;
        let base = self.bytes.get() as *mut u8;
        // SAFETY: [b.addr, b.addr + want) lies inside the byte array (carve over 0..BYTES) and
        // is ours alone until freed; the header slot is 8-byte aligned (64-byte blocks).
        unsafe {
            let p = base.add(b.addr as usize);
            core::ptr::write_bytes(p, 0, want as usize);
            (p as *mut u64).write(b.id.raw());
            NonNull::new(p.add(ARENA_HDR))
        }
    }

    unsafe fn free(&self, p: NonNull<u8>, _size: usize) {
        let base = self.bytes.get() as *mut u8 as usize;
        let addr = (p.as_ptr() as usize).wrapping_sub(ARENA_HDR);
        if addr < base || addr >= base + BYTES {
            return; // not ours: ignore rather than corrupt
        }
        let _g = self.lock.lock();
        // SAFETY: caller contract: `p` came from `alloc`, so its header holds the carve id.
        let raw = unsafe { (addr as *const u64).read() };
        if let Some(id) = crate::carve::CarveId::from_raw(raw) {
            // SAFETY: carve under lock; a stale id is refused by its generation check.
            let _ = unsafe { &mut *self.carve.get() }.free(id);
        }
    }
}

/// An execution's marks on its bound tensors' storages (spec §7.1 `pending_exec_count_read`
/// and `_write`): counted up when made, down when dropped. Outputs are marked under the
/// storage's `tensor_op_cv_lock`, which [`Nrt::when_written`]'s readers hold.
struct PendingMarks<'a> {
    ins: &'a [Tensor],
    outs: &'a [Tensor],
}

impl<'a> PendingMarks<'a> {
    fn new(ins: &'a [Tensor], outs: &'a [Tensor]) -> Self {
        for t in ins {
            // SAFETY: bound tensors were checked live with storage, and stay bound (held by
            // the caller's sets) for the whole execution.
            unsafe {
                (*(**t).sto)
                    .pending_exec_count_read
                    .fetch_add(1, Ordering::AcqRel)
            };
        }
        for t in outs {
            // SAFETY: as above.
            unsafe {
                let s = (**t).sto;
                let _g = (*s).tensor_op_cv_lock.lock();
                (*s).pending_exec_count_write.fetch_add(1, Ordering::AcqRel);
            }
        }
        PendingMarks { ins, outs }
    }
}

impl Drop for PendingMarks<'_> {
    fn drop(&mut self) {
        for t in self.ins {
            // SAFETY: as in `new`.
            unsafe {
                (*(**t).sto)
                    .pending_exec_count_read
                    .fetch_sub(1, Ordering::AcqRel)
            };
        }
        for t in self.outs {
            // SAFETY: as in `new`.
            unsafe {
                (*(**t).sto)
                    .pending_exec_count_write
                    .fetch_sub(1, Ordering::AcqRel)
            };
        }
    }
}

#[cfg(test)]
mod tests {
    extern crate std;
    use super::*;
    use core::sync::atomic::AtomicBool;

    /// spec §7.1 through the striped execute data lock: an execution whose stripes meet
    /// another's (a shared storage) waits for it; one with disjoint stripes does not.
    #[test]
    fn executions_sharing_a_stripe_serialise_and_disjoint_ones_do_not() {
        let state = crate::ctx::CoreState::new_boxed();
        let st = &*state;
        let done = AtomicBool::new(false);
        std::thread::scope(|s| {
            let first = ExecDataGuard::lock(st, 1 << 3 | 1 << 5);
            // Disjoint stripes: taken at once, while the first execution holds its own.
            drop(ExecDataGuard::lock(st, 1 << 4 | 1 << 63));
            let waiter = s.spawn(|| {
                let _g = ExecDataGuard::lock(st, 1 << 5 | 1 << 9);
                done.load(Ordering::Acquire)
            });
            std::thread::sleep(std::time::Duration::from_millis(50));
            done.store(true, Ordering::Release);
            drop(first);
            assert!(
                waiter.join().unwrap(),
                "an execution sharing stripe 5 ran while the first one held it"
            );
        });
    }
}
