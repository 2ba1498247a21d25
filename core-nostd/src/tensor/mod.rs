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
//!
//! This file holds the tensor types and allocate/free; the other jobs have a file each:
//! `io` (reads, writes, memset, copy, windows, counters), `exec` (the execute data path),
//! `set` (tensor sets) and `host_heap` (the VIRTUAL tensors' [`HostMem`] providers).
// The module's internal functions take the pointer of a pinned (or owned) tensor; the public
// ones take handles.
#![allow(clippy::not_unsafe_ptr_arg_deref)]

mod exec;
mod host_heap;
mod io;
mod pool;
mod set;

pub(crate) use exec::EXEC_DATA_STRIPES;
pub use host_heap::{ArenaHostMem, HostMem};
pub use io::check_window;
pub(crate) use pool::TensorPool;
pub use set::{SetSlot, SET_MAX};

use core::ffi::c_void;
use core::ptr::{null_mut, NonNull};
use core::sync::atomic::Ordering;

use crate::abi::*;
use crate::cstr::c_name;
use crate::ctx::{Exclusive, InCall, Nrt};
use crate::dmem::{AllocArgs, Dmem};
use crate::error::{Error, InvalidArg, Result};
use crate::handle::{self, Dropped, HandleKind, TensorHandle};
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
        let (t, refs) =
            self.st
                .tensor
                .tensors
                .pin(h.0.index, h.0.generation, HandleKind::Tensor)?;
        Ok(TensorPin { t, refs })
    }

    /// The handle of tensor `t`, which the caller owns (just made, or kept alive by the
    /// caller), so its generation cannot move under this call.
    pub(crate) fn tensor_handle_of_owned(&self, t: *const nrt_tensor_t) -> TensorHandle {
        TensorHandle(self.owned_handle(&self.st.tensor.tensors, t))
    }

    /// The slot `h` names, if it is in bounds (no liveness check: for [`crate::raw`]).
    pub(crate) fn tensor_slot(&self, h: TensorHandle) -> Option<Tensor> {
        self.st.tensor.tensors.slot(h.0.index)
    }

    /// Publishes a fully built tensor: from here its handle resolves.
    fn publish_tensor(&self, t: Tensor) -> TensorHandle {
        // SAFETY: a slot of the tensor arena, ours alone until published.
        let (gen, refs) = unsafe { self.st.tensor.tensors.words(t) };
        handle::publish(gen, refs);
        self.tensor_handle_of_owned(t)
    }

    /// Checks that `t` is a live tensor of this runtime (never dereferences garbage).
    pub(crate) fn tensor_check(&self, t: *const nrt_tensor_t) -> Result<()> {
        if t.is_null() {
            return Err(Error::InvalidArgument(InvalidArg::NullTensor));
        }
        if !self.st.tensor.tensors.is_live(t) {
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
    /// lives beside the tensor arena, one buffer per slot (`TensorPool::tensor_names`). A
    /// pointer the arena does not own yields the last slot's buffer; callers pass live tensors.
    fn tensor_name_buf(&self, t: *const nrt_tensor_t) -> *mut [u8; TENSOR_NAME_MAX + 1] {
        self.st
            .tensor
            .tensors
            .side_entry(&self.st.tensor.tensor_names, t)
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
            .tensor
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
            .tensor
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
        let call = self.enter()?;
        // VIRTUAL bytes come from the provider the runtime is bound to (`Nrt::with_host`).
        let host = self.host;
        let vnc = match vnc {
            CoreSel::Core(c) => c,
            CoreSel::Any if placement != Placement::Device => LogicalCore::FIRST,
            // libnrt's −1 on DEVICE is an index like any other: the range gate refuses it.
            CoreSel::Any => LogicalCore::from_c(-1),
        };
        let v = *self.vtpb_get_virtual_core(&call, vnc).inspect_err(|e| {
            // libnrt's range gate (spec §7.2), logged with its own words.
            error!(
                "Cannot allocate a tensor on Logical NeuronCore {}: {}",
                vnc, e
            );
        })?;
        let arch = self.dev_geom(&call, v.tpbs[0].device_id).arch();
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
                let _ = self.st.tensor.tensors.cancel(t);
                return Err(e);
            }
        };
        let r = match placement {
            Placement::Device | Placement::Host => {
                let tpb = self.tpb(v.tpbs[0].device_id, v.tpbs[0].device_tpb_idx)?;
                let usage = dma_mem_usage_type_t::DMA_MEM_USAGE_TYPE_TENSOR;
                let hbm = self.vcore_default_hbm(&call, &v);
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
                self.dmem_alloc_internal(&call, unsafe { (*tpb).tpb_allocator }, &args, None)
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
            let _ = self.st.tensor.storages.cancel(s);
            let _ = self.st.tensor.tensors.cancel(t);
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
        let call = self.enter()?;
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
                self.storage_put(&call, old);
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
        let call = self.enter()?;
        let pin = self.tensor_pin(h)?;
        match handle::drop_owner(pin.refs) {
            Dropped::Last => {
                let (t, refs) = (pin.t, pin.refs);
                // The pin is handed over to the drain: it is the last one left.
                core::mem::forget(pin);
                handle::wait_drained(refs, 1, relax);
                // SAFETY: last owner gone and every pin drained: the tensor is ours alone.
                unsafe { self.tensor_finalize(&call, t) };
                Ok(())
            }
            // A tensor has one owner, so never Shared; NoOwner: a racing free took it.
            Dropped::Shared => Ok(()),
            Dropped::NoOwner => Err(Error::stale(HandleKind::Tensor)),
        }
    }

    /// [`Self::tensor_free`] as a step of a gated call or of `close` (`call`: teardown runs
    /// after the gate closed), through a pointer the caller owns.
    pub(crate) fn tensor_free_owned(&self, call: &impl InCall, t: Tensor) -> Result<()> {
        self.tensor_check(t)?;
        // SAFETY: live slot of the tensor arena.
        let refs = unsafe { self.st.tensor.tensors.words(t).1 };
        match handle::drop_owner(refs) {
            Dropped::Last => handle::wait_drained(refs, 0, relax),
            // A tensor has one owner, so never Shared.
            Dropped::Shared => return Ok(()),
            // A racing free took it.
            Dropped::NoOwner => return Err(Error::InvalidArgument(InvalidArg::NotLiveTensor)),
        }
        // SAFETY: last owner gone and every pin drained: the tensor is ours alone.
        unsafe { self.tensor_finalize(call, t) };
        Ok(())
    }

    /// Tears a tensor down and gives its slot back.
    ///
    /// # Safety
    /// `t` is a live tensor whose owner is gone and whose pins have drained (nobody else can
    /// reach it).
    unsafe fn tensor_finalize(&self, call: &impl InCall, t: Tensor) {
        // SAFETY: caller contract; after this the slot is dead.
        unsafe {
            let sto = (*t).sto;
            (*t).magic = 0;
            (*t).sto = null_mut();
            if !sto.is_null() {
                self.storage_put(call, sto);
            }
            // The slot reads as free before it can be handed out again.
            handle::retire(self.st.tensor.tensors.words(t).0);
        }
        let _ = self.st.tensor.tensors.release(t);
    }

    /// Drops one reference on a storage; the last one frees its memory if owned (VIRTUAL
    /// bytes to the bound host provider, the one that allocated them).
    ///
    /// # Safety
    /// `s` is a live storage on which the caller holds a reference.
    unsafe fn storage_put(&self, call: &impl InCall, s: *mut nrt_tensor_storage_t) {
        // SAFETY: caller contract.
        unsafe {
            if (*s).ref_count.fetch_sub(1, Ordering::AcqRel) != 1 {
                return;
            }
            if (*s).mem_owned_by_tensor != 0 && !(*s).dmem.is_null() {
                match nrt_tensor_mem_type_t::from_raw((*s).r#type) {
                    Some(nrt_tensor_mem_type_t::NRT_TENSOR_MEM_TYPE_DMA) => {
                        let _ = self.dmem_free_owned(call, (*s).dmem as Dmem);
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
            let _ = self.st.tensor.storages.release(s);
        }
    }

    /// Teardown: frees every tensor still alive: device and host DMA memory returns to the
    /// driver, VIRTUAL bytes to the bound host provider (issue 16 item 2: close returns every
    /// byte in every layer). A step of `close`, under its token `ex`.
    pub(crate) fn free_all_tensors(&self, ex: &Exclusive<'_>) {
        let mut live: [Tensor; 64] = [null_mut(); 64];
        loop {
            let mut n = 0;
            self.st.tensor.tensors.for_each_live(|p| {
                if n < live.len() {
                    live[n] = p.as_ptr();
                    n += 1;
                }
            });
            if n == 0 {
                break;
            }
            for t in &live[..n] {
                if self.tensor_free_owned(ex, *t).is_err() {
                    // Not a whole tensor (cannot happen once the gate is drained): give the
                    // slot back rather than meet it again.
                    let _ = self.st.tensor.tensors.release(*t);
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
}
