//! Tensor data access (spec §7.1): read, write, memset and copy of a tensor's bytes, its
//! windows, VA and device placement, and its output-completion and pending-exec counters.

use core::sync::atomic::Ordering;

use super::access::{StorageMem, StorageRef, TensorRef};
use super::{DeviceAllocationInfo, Tensor};
use crate::abi::*;
use crate::ctx::{InCall, Nrt};
use crate::error::{Error, InvalidArg, Result};
use crate::handle::TensorHandle;
use crate::sync::relax;

impl<'a> Nrt<'a> {
    /// Storage of a held tensor and its window, checked (an empty tensor has none).
    pub(crate) fn storage_of<'p>(&self, t: TensorRef<'p>) -> Result<(StorageRef<'p>, u64, u64)> {
        match t.window() {
            (Some(s), off, len) => Ok((s, off, len)),
            (None, _, _) => Err(Error::InvalidArgument(InvalidArg::TensorWithoutStorage)),
        }
    }

    /// Moves bytes between a tensor window and host memory.
    fn tensor_io(
        &self,
        t: TensorRef<'_>,
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
        match s.mem() {
            StorageMem::Dma(m) => {
                // The storage owns the dmem (its one reference) while it lives.
                let m = self
                    .owned_dmem_fixed(m)
                    .ok_or(Error::InvalidArgument(InvalidArg::StorageWithoutMemory))?;
                let at = m.align_offset + base + offset;
                let r = match (write, read) {
                    (Some(w), _) => self.drv.copy_in(m.device_id, m.mem_handle, at, w),
                    (_, Some(r)) => self.drv.copy_out(m.device_id, m.mem_handle, at, r),
                    _ => Ok(()),
                };
                r.map_err(Error::Driver)
            }
            StorageMem::Host => match (write, read) {
                (Some(w), _) => s.host_write(base + offset, w),
                (_, Some(r)) => s.host_read(base + offset, r),
                _ => Ok(()),
            },
            StorageMem::Unbacked => Err(Error::InvalidArgument(InvalidArg::StorageWithoutMemory)),
        }
    }

    /// The body of [`crate::tensor::Tensors::write`].
    pub(crate) fn tensor_write(&self, h: TensorHandle, buf: &[u8], offset: u64) -> Result<()> {
        let _call = self.enter()?;
        let pin = self.tensor_pin(h)?;
        self.tensor_io(self.tensor_ref(&pin)?, offset, Some(buf), None)
    }

    /// The body of [`crate::tensor::Tensors::read`].
    pub(crate) fn tensor_read(&self, h: TensorHandle, buf: &mut [u8], offset: u64) -> Result<()> {
        let _call = self.enter()?;
        let pin = self.tensor_pin(h)?;
        let t = self.tensor_ref(&pin)?;
        self.when_written(t, || self.tensor_io(t, offset, None, Some(buf)))
    }

    /// Runs `read` once no execution is writing `t`'s storage (spec §7.1: "a tensor cannot be
    /// read until the DMA writing it has completed"). It runs under the storage's
    /// `tensor_op_cv_lock`, which `execute` takes to mark its outputs, so a read ends before an
    /// execution marks the tensor or starts after that execution has finished writing it: it
    /// never sees half an output. Only for public calls: `execute`'s own copies read tensors
    /// it is writing.
    fn when_written<R>(&self, t: TensorRef<'_>, read: impl FnOnce() -> Result<R>) -> Result<R> {
        let (s, _, _) = self.storage_of(t)?;
        let (lock, writers) = (s.op_lock(), s.pending_writes());
        let mut i = 0u32;
        loop {
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

    /// The body of [`crate::tensor::Tensors::memset`].
    pub(crate) fn tensor_memset(
        &self,
        h: TensorHandle,
        offset: u64,
        value: u8,
        size: u64,
    ) -> Result<()> {
        let call = self.enter()?;
        let pin = self.tensor_pin(h)?;
        self.tensor_fill(&call, pin.as_ptr(), offset, value, size)
    }

    /// [`Self::tensor_memset`] as a step of the gated call `_call`, for callers already past
    /// the gate (`execute`: a second `enter` there could see a `close` that is waiting for
    /// that very call, and fail it half-way).
    pub(super) fn tensor_fill(
        &self,
        _call: &impl InCall,
        t: Tensor,
        offset: u64,
        value: u8,
        size: u64,
    ) -> Result<()> {
        // The caller holds `t` pinned (`held_tensor`'s contract).
        let (s, base, len) = self.storage_of(self.held_tensor(t)?)?;
        check_window(offset, size, len)?;
        match s.mem() {
            StorageMem::Dma(m) => {
                let m = self
                    .owned_dmem_fixed(m)
                    .ok_or(Error::InvalidArgument(InvalidArg::StorageWithoutMemory))?;
                self.drv
                    .fill(
                        m.device_id,
                        m.mem_handle,
                        m.align_offset + base + offset,
                        size,
                        value,
                    )
                    .map_err(Error::Driver)
            }
            StorageMem::Host => s.host_fill(base + offset, size, value),
            StorageMem::Unbacked => Err(Error::InvalidArgument(InvalidArg::StorageWithoutMemory)),
        }
    }

    /// The body of [`crate::tensor::Tensors::copy`].
    pub(crate) fn tensor_copy(
        &self,
        src: TensorHandle,
        src_off: u64,
        dst: TensorHandle,
        dst_off: u64,
        size: u64,
    ) -> Result<()> {
        let call = self.enter()?;
        let (src_pin, dst_pin) = (self.tensor_pin(src)?, self.tensor_pin(dst)?);
        let (src, dst) = (src_pin.as_ptr() as *const nrt_tensor_t, dst_pin.as_ptr());
        self.when_written(self.tensor_ref(&src_pin)?, || {
            self.tensor_copy_bytes(&call, src, src_off, dst, dst_off, size)
        })
    }

    /// [`Self::tensor_copy`] as a step of the gated call `_call`, for callers already past
    /// the gate (see [`Self::tensor_fill`]).
    pub(super) fn tensor_copy_bytes(
        &self,
        _call: &impl InCall,
        src: *const nrt_tensor_t,
        src_off: u64,
        dst: Tensor,
        dst_off: u64,
        size: u64,
    ) -> Result<()> {
        let backwards = self.copy_check(src, src_off, dst, dst_off, size)?;
        // The caller holds both pinned (`held_tensor`'s contract).
        let (src, dst) = (self.held_tensor(src)?, self.held_tensor(dst)?);
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
    pub(super) fn copy_check(
        &self,
        src: *const nrt_tensor_t,
        src_off: u64,
        dst: Tensor,
        dst_off: u64,
        size: u64,
    ) -> Result<bool> {
        // The caller holds both pinned (`held_tensor`'s contract).
        let (ss, sbase, slen) = self.storage_of(self.held_tensor(src)?)?;
        let (ds, dbase, dlen) = self.storage_of(self.held_tensor(dst)?)?;
        check_window(src_off, size, slen)?;
        check_window(dst_off, size, dlen)?;
        if let (StorageMem::Dma(a), StorageMem::Dma(b)) = (ss.mem(), ds.mem()) {
            // Each storage owns its dmem while it lives.
            let (Some(a), Some(b)) = (self.owned_dmem_fixed(a), self.owned_dmem_fixed(b)) else {
                return Err(Error::InvalidArgument(InvalidArg::StorageWithoutMemory));
            };
            if a.mem_type == b.mem_type
                && a.mem_type == dma_mem_location_t::TONGA_DRAM as u32
                && (a.device_id, a.nc_id) != (b.device_id, b.nc_id)
            {
                return Err(Error::InvalidArgument(InvalidArg::CrossCoreCopy));
            }
        }
        // The copy goes through a bounce buffer, one chunk at a time (each chunk is read whole
        // before it is written). When the destination starts above the source in the same
        // storage, a forward pass would re-read bytes it already overwrote, so the chunks go
        // from the end backwards (memmove). The windows were checked inside their tensors,
        // whose offsets lie inside the storage, so these sums do not overflow.
        Ok(core::ptr::eq(ss.as_ptr(), ds.as_ptr()) && dbase + dst_off > sbase + src_off)
    }

    /// The body of [`crate::tensor::Tensors::va`].
    pub(crate) fn tensor_get_va(&self, h: TensorHandle) -> Result<*mut u8> {
        let _call = self.enter()?;
        let pin = self.tensor_pin(h)?;
        let (s, base, _) = self.storage_of(self.tensor_ref(&pin)?)?;
        Ok(s.host_va(base))
    }

    /// The body of [`crate::tensor::Tensors::device_allocation_info`].
    pub(crate) fn tensor_device_allocation_info(
        &self,
        h: TensorHandle,
    ) -> Result<DeviceAllocationInfo> {
        let _call = self.enter()?;
        let pin = self.tensor_pin(h)?;
        let (s, base, len) = self.storage_of(self.tensor_ref(&pin)?)?;
        let StorageMem::Dma(m) = s.mem() else {
            return Err(Error::InvalidArgument(InvalidArg::NotDeviceVisible));
        };
        // The storage owns its dmem while it lives.
        let m = self
            .owned_dmem_fixed(m)
            .ok_or(Error::InvalidArgument(InvalidArg::NotDeviceVisible))?;
        Ok(DeviceAllocationInfo {
            physical_address: m.pa + m.align_offset + base,
            size: len,
            hbm_index: s.hbm_idx() as i32,
        })
    }

    /// The body of [`crate::tensor::Tensors::output_completion`].
    pub(crate) fn tensor_output_completion(&self, h: TensorHandle) -> Result<u64> {
        let _call = self.enter()?;
        let pin = self.tensor_pin(h)?;
        let t = self.tensor_ref(&pin)?;
        Ok(t.completions().load(Ordering::Acquire))
    }

    /// The body of [`crate::tensor::Tensors::reset_output_completion`].
    pub(crate) fn tensor_reset_output_completion(&self, h: TensorHandle) -> Result<()> {
        let _call = self.enter()?;
        let pin = self.tensor_pin(h)?;
        let t = self.tensor_ref(&pin)?;
        t.completions().store(0, Ordering::Release);
        Ok(())
    }

    /// The body of [`crate::tensor::Tensors::pending`].
    pub(crate) fn tensor_pending(&self, h: TensorHandle) -> Result<Pending> {
        let _call = self.enter()?;
        let pin = self.tensor_pin(h)?;
        let (s, _, _) = self.storage_of(self.tensor_ref(&pin)?)?;
        Ok(Pending {
            reads: s.pending_reads().load(Ordering::Acquire),
            writes: s.pending_writes().load(Ordering::Acquire),
        })
    }
}

/// The executions that will read and write a tensor's storage ([`super::Tensors::pending`]:
/// `pending_exec_count_read`, `pending_exec_count_write`, spec §7.4).
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq)]
pub struct Pending {
    /// Executions that will read it.
    pub reads: u64,
    /// Executions that will write it.
    pub writes: u64,
}

/// `[offset, offset+len)` inside `size`, overflow-checked.
pub fn check_window(offset: u64, len: u64, size: u64) -> Result<()> {
    match offset.checked_add(len) {
        Some(end) if end <= size => Ok(()),
        _ => Err(Error::OutOfBounds { offset, len, size }),
    }
}
