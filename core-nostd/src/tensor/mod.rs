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
//! `set` (tensor sets). The VIRTUAL tensors' [`HostMem`] providers live in
//! [`crate::host_heap`] (re-exported here), and every raw access to a tensor, a storage or a
//! set slot goes through the accessors of `access` (docs/UNSAFE.md), so the rest of this
//! module is `deny(unsafe_code)` but for [`Tensors::attach_buffer`]'s declaration (and its body's).
//! The domain's data — its pool of arenas, the set slots and entries, the bound-tensor chunks —
//! is declared with the state block, in `ctx/state/tensor.rs`.
#![deny(unsafe_code)]

// The domain's raw accessors: the one file of the domain where `unsafe` is allowed, each
// block argued (docs/UNSAFE.md).
#[allow(unsafe_code)]
pub(crate) mod access;
mod exec;
mod io;
mod set;
mod view;

pub(crate) use crate::ctx::state::tensor::{SetBody, SetEntry};
pub use crate::ctx::state::tensor::{SetSlot, BIND_CHUNK, SET_CHUNK};
#[cfg(feature = "heap-host-mem")]
pub use crate::host_heap::HeapHostMem;
pub use crate::host_heap::{ArenaHostMem, HostMem};
pub use io::{check_window, Pending};
pub use view::{Sets, Tensors};

use core::ptr::NonNull;

use crate::abi::*;
use crate::cstr::c_name;
use crate::ctx::{Exclusive, InCall, Nrt};
use crate::dmem::{AllocArgs, Dmem};
use crate::error::{Error, InvalidArg, Result};
use crate::handle::{Dropped, HandleKind, TensorHandle};
use crate::vcore::{CoreSel, LogicalCore};
use access::{Last, StorageMem, StorageOwner};

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

pub use crate::config::TENSOR_NAME_MAX;

/// A tensor's name as [`Tensors::name`](crate::tensor::Tensors::name) returns it: an owned copy of the tensor's name text
/// (spec §7.1), so it stays valid after the tensor is freed.
pub type TensorName = heapless::String<{ TENSOR_NAME_MAX + 1 }>;

impl<'a> Nrt<'a> {
    /// The handle of tensor `t`, which the caller owns (just made, or kept alive by the
    /// caller), so its generation cannot move under this call.
    pub(crate) fn tensor_handle_of_owned(&self, t: *const nrt_tensor_t) -> TensorHandle {
        TensorHandle(self.owned_handle(&self.st.tensor.tensors, t))
    }

    /// The slot `h` names, if it is in bounds (no liveness check: for [`crate::raw`]).
    pub(crate) fn tensor_slot(&self, h: TensorHandle) -> Option<Tensor> {
        self.st.tensor.tensors.slot(h.0.index)
    }

    /// The body of [`crate::tensor::Tensors::allocate`].
    pub(crate) fn tensor_allocate(
        &self,
        placement: Placement,
        vnc: CoreSel,
        size: u64,
        name: Option<&str>,
    ) -> Result<TensorHandle> {
        let call = self.enter()?;
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
        // Both slots go back untouched if anything below fails (dropped unpublished).
        let t = self.fresh_tensor(name.unwrap_or(""), shard)?;
        let mut s = self.fresh_storage(shard)?;
        s.vtpb_idx = v.vtpb_idx as i32;
        let sto = match placement {
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
                let m = self
                    .dmem_alloc_internal(&call, self.tpb_allocator(&call, tpb), &args, None)?
                    .m;
                s.hbm_idx = hbm;
                s.device_id = v.tpbs[0].device_id;
                s.tpb_idx = v.tpbs[0].device_tpb_idx;
                self.storage_dma(s, m, size)
            }
            // VIRTUAL bytes come from the provider the runtime is bound to (`Nrt::with_host`).
            Placement::Virtual => match self.host_alloc(size) {
                Some(b) => self.storage_host(s, b),
                None if self.host.is_none() => {
                    return Err(Error::Unsupported(
                        "no host memory provider for VIRTUAL tensors",
                    ))
                }
                None => return Err(Error::HostOom { size, dma: false }),
            },
        };
        Ok(t.publish(Some((sto, 0, size))))
    }

    /// The body of [`crate::tensor::Tensors::allocate_empty`].
    pub(crate) fn tensor_allocate_empty(&self, name: Option<&str>) -> Result<TensorHandle> {
        let _call = self.enter()?;
        Ok(self.fresh_tensor(name.unwrap_or(""), 0)?.publish(None))
    }

    /// The body of [`crate::tensor::Tensors::attach_buffer`]: the same contract.
    ///
    /// # Safety
    /// As [`crate::tensor::Tensors::attach_buffer`].
    // One of the two `unsafe` items of `tensor` (docs/UNSAFE.md): the declaration of the
    // caller's promise about `buf`, and the call that hands that promise on to the accessor.
    #[allow(unsafe_code)]
    pub(crate) unsafe fn tensor_attach_buffer(
        &self,
        h: TensorHandle,
        buf: *mut u8,
        size: u64,
    ) -> Result<()> {
        let call = self.enter()?;
        let pin = self.tensor_pin(h)?;
        self.tensor_ref(&pin)?;
        let Some(buf) = NonNull::new(buf).filter(|_| size != 0) else {
            return Err(Error::InvalidArgument(InvalidArg::NullOrEmptyBuffer));
        };
        let s = self.fresh_storage(0)?;
        // SAFETY: this function's contract is `tensor_attach`'s: `buf` holds `size` bytes
        // valid for reads and writes until no tensor views it, and no other thread uses the
        // tensor while it is swapped.
        if let Some(old) = unsafe { self.tensor_attach(&pin, s, buf, size) } {
            self.storage_put(&call, old);
        }
        Ok(())
    }

    /// The body of [`crate::tensor::Tensors::allocate_slice`].
    pub(crate) fn tensor_allocate_slice(
        &self,
        src: TensorHandle,
        offset: u64,
        size: u64,
        name: Option<&str>,
    ) -> Result<TensorHandle> {
        let _call = self.enter()?;
        let pin = self.tensor_pin(src)?;
        let (sto, base, len) = self.tensor_ref(&pin)?.window();
        let Some(sto) = sto else {
            return Err(Error::InvalidArgument(InvalidArg::SourceWithoutStorage));
        };
        check_window(offset, size, len)?;
        if size == 0 {
            return Err(Error::ZeroSize);
        }
        let t = self.fresh_tensor(name.unwrap_or(""), 0)?;
        // The storage is live: the pinned source holds a reference on it.
        Ok(t.publish(Some((sto.share(), base + offset, size))))
    }

    /// The body of [`crate::tensor::Tensors::free`].
    pub(crate) fn tensor_free(&self, h: TensorHandle) -> Result<()> {
        let call = self.enter()?;
        let pin = self.tensor_pin(h)?;
        // Freeing the storage takes its allocator's lock: refused before anything changes
        // when the calling thread walks that allocator (`DeviceMemory::allocator_for_each`).
        if let Ok((s, _, _)) = self.tensor_ref(&pin).and_then(|t| self.storage_of(t)) {
            if let StorageMem::Dma(m) = s.mem() {
                self.allocator_reachable(self.allocator_of(m as Dmem))?;
            }
        }
        match pin.drop_owner() {
            Ok(last) => {
                self.tensor_finalize(&call, last);
                // The tensor is gone either way; a block the driver kept is said.
                call.kept_result()
            }
            // A tensor has one owner, so never Shared; NoOwner: a racing free took it.
            Err(Dropped::Shared) => Ok(()),
            Err(_) => Err(Error::stale(HandleKind::Tensor)),
        }
    }

    /// [`Self::tensor_free`] as a step of a gated call or of `close` (`call`: teardown runs
    /// after the gate closed), through a pointer the caller owns ([`crate::raw`]).
    pub(crate) fn tensor_free_owned(&self, call: &impl InCall, t: Tensor) -> Result<()> {
        self.tensor_check(t)?;
        match self.tensor_last_owned(t) {
            Ok(last) => {
                self.tensor_finalize(call, last);
                Ok(())
            }
            // A tensor has one owner, so never Shared.
            Err(Dropped::Shared) => Ok(()),
            // A racing free took it.
            Err(_) => Err(Error::InvalidArgument(InvalidArg::NotLiveTensor)),
        }
    }

    /// Tears a tensor down (its last owner gone, its pins drained) and gives its slot back.
    fn tensor_finalize(&self, call: &impl InCall, mut last: Last<'_, nrt_tensor_t>) {
        if let Some(sto) = last.take_storage() {
            self.storage_put(call, sto);
        }
        self.tensor_retire(last);
    }

    /// Drops one reference on a storage; the last one frees its memory if owned (VIRTUAL
    /// bytes to the bound host provider, the one that allocated them).
    fn storage_put(&self, call: &impl InCall, s: StorageOwner) {
        let Some(last) = self.storage_drop_ref(s) else {
            return;
        };
        if let Some(StorageMem::Dma(m)) = last.owned_mem() {
            let _ = self.dmem_free_owned(call, m as Dmem);
        }
        self.storage_retire(last);
    }

    /// Teardown: frees every tensor still alive: device and host DMA memory returns to the
    /// driver, VIRTUAL bytes to the bound host provider (close returns every
    /// byte in every layer).
    pub(crate) fn free_all_tensors(&self, ex: &Exclusive<'_>) {
        self.st.tensor.tensors.drain_live(|t| {
            if self.tensor_free_owned(ex, t.as_ptr()).is_err() {
                // Not a whole tensor (cannot happen once the gate is drained): give the slot
                // back rather than meet it again.
                let _ = self.st.tensor.tensors.release(t.as_ptr());
            }
        });
    }

    /// The body of [`crate::tensor::Tensors::size`].
    pub(crate) fn tensor_get_size(&self, h: TensorHandle) -> Result<u64> {
        let _call = self.enter()?;
        let pin = self.tensor_pin(h)?;
        Ok(self.tensor_ref(&pin)?.size())
    }

    /// The body of [`crate::tensor::Tensors::name`].
    pub(crate) fn tensor_name(&self, h: TensorHandle) -> Result<TensorName> {
        let _call = self.enter()?;
        let pin = self.tensor_pin(h)?;
        let text = c_name(self.tensor_name_bytes(self.tensor_ref(&pin)?));
        let mut name = TensorName::new();
        // `name_buf` is 96 bytes, so its text always fits.
        name.push_str(text)
            .map_err(|_| Error::InvalidArgument(InvalidArg::TensorNameBuffer))?;
        Ok(name)
    }
}
