//! [`Tensors`] and [`Sets`]: the runtime's tensor and tensor-set calls (spec §7), views
//! borrowed from [`Nrt::tensors`] and [`Nrt::sets`].

use super::*;
use crate::handle::{ModelHandle, SetHandle, TensorHandle};

/// The runtime's tensors (spec §7): [`Nrt::tensors`]. A reference to the runtime view.
#[derive(Copy, Clone)]
pub struct Tensors<'n, 'a>(pub(crate) &'n Nrt<'a>);

/// The runtime's tensor sets (spec §7.3): [`Nrt::sets`]. A reference to the runtime view.
#[derive(Copy, Clone)]
pub struct Sets<'n, 'a>(pub(crate) &'n Nrt<'a>);

impl<'a> Nrt<'a> {
    /// The tensor calls (spec §7).
    #[inline]
    pub fn tensors(&self) -> Tensors<'_, 'a> {
        Tensors(self)
    }

    /// The tensor-set calls (spec §7.3).
    #[inline]
    pub fn sets(&self) -> Sets<'_, 'a> {
        Sets(self)
    }
}

impl<'a> Tensors<'_, 'a> {
    /// The execute data path behind `nrt_execute`: binds `inputs`/`outputs` (each `(name,
    /// tensor)`) to the model's declared tensors by name — a missing or wrongly sized one is
    /// NRT_INVALID — then, inside the exec seam, copies each input's bytes to the output of the
    /// same position (zero-filling the rest) and bumps each output's completion count. A model
    /// binds as many tensors as it declares (the `bind_chunks` arena holds them while the
    /// execution runs; [`Error::ArenaFull`] when it cannot).
    ///
    /// The sets are tensor sets of this runtime ([`crate::tensor::Sets::create`]); a stale, forged or
    /// foreign model or set handle is [`Error::InvalidHandle`], and nothing is written.
    #[inline]
    pub fn execute(&self, h: ModelHandle, inputs: SetHandle, outputs: SetHandle) -> Result<()> {
        self.0.execute(h, inputs, outputs)
    }

    /// `nrt_tensor_write`.
    #[doc(alias = "tensor_write")]
    #[inline]
    pub fn write(&self, h: TensorHandle, buf: &[u8], offset: u64) -> Result<()> {
        self.0.tensor_write(h, buf, offset)
    }

    /// `nrt_tensor_read`. Waits for an execution writing the tensor (`when_written`).
    #[doc(alias = "tensor_read")]
    #[inline]
    pub fn read(&self, h: TensorHandle, buf: &mut [u8], offset: u64) -> Result<()> {
        self.0.tensor_read(h, buf, offset)
    }

    /// `nrt_tensor_memset`.
    #[doc(alias = "tensor_memset")]
    #[inline]
    pub fn memset(&self, h: TensorHandle, offset: u64, value: u8, size: u64) -> Result<()> {
        self.0.tensor_memset(h, offset, value, size)
    }

    /// `nrt_tensor_copy` (spec §7.1): `size` bytes from `src[src_off..]` to `dst[dst_off..]`;
    /// two device tensors must be on the same physical core (else NRT_INVALID, as the public
    /// API says). Overlapping ranges of one storage (one tensor, or slices sharing it) copy
    /// as `memmove` does: the destination ends up holding the source's original bytes. Waits
    /// for an execution writing `src` (`when_written`).
    #[doc(alias = "tensor_copy")]
    #[inline]
    pub fn copy(
        &self,
        src: TensorHandle,
        src_off: u64,
        dst: TensorHandle,
        dst_off: u64,
        size: u64,
    ) -> Result<()> {
        self.0.tensor_copy(src, src_off, dst, dst_off, size)
    }

    /// `nrt_tensor_get_va`: host address of a VIRTUAL tensor's first byte; null for memory
    /// the host cannot address (device and host-DMA tensors here).
    #[doc(alias = "tensor_get_va")]
    #[inline]
    pub fn va(&self, h: TensorHandle) -> Result<*mut u8> {
        self.0.tensor_get_va(h)
    }

    /// `nrt_tensor_get_device_allocation_info`.
    #[doc(alias = "tensor_device_allocation_info")]
    #[inline]
    pub fn device_allocation_info(&self, h: TensorHandle) -> Result<DeviceAllocationInfo> {
        self.0.tensor_device_allocation_info(h)
    }

    /// Output completions recorded on `t` (`output_completion_count`).
    #[doc(alias = "tensor_output_completion")]
    #[inline]
    pub fn output_completion(&self, h: TensorHandle) -> Result<u64> {
        self.0.tensor_output_completion(h)
    }

    /// `nrt_tensor_reset_output_completion`.
    #[doc(alias = "tensor_reset_output_completion")]
    #[inline]
    pub fn reset_output_completion(&self, h: TensorHandle) -> Result<()> {
        self.0.tensor_reset_output_completion(h)
    }

    /// The executions pending on a tensor's storage (`pending_exec_count_read`,
    /// `pending_exec_count_write`).
    #[doc(alias = "tensor_pending")]
    #[inline]
    pub fn pending(&self, h: TensorHandle) -> Result<Pending> {
        self.0.tensor_pending(h)
    }

    /// `nrt_tensor_allocate` → `tensor_allocate` (spec §7.2), gates in order: state, logical
    /// core range (VIRTUAL and HOST accept [`CoreSel::Any`], logical core 0; on a DEVICE
    /// tensor it fails the range gate as −1, spec §9), host placement on CAYMAN, then the
    /// allocation.
    ///
    /// The placement is typed; the C value is checked in [`crate::raw::tensor_allocate`], after
    /// the state gate as here.
    #[doc(alias = "tensor_allocate")]
    #[inline]
    pub fn allocate(
        &self,
        placement: Placement,
        vnc: CoreSel,
        size: u64,
        name: Option<&str>,
    ) -> Result<TensorHandle> {
        self.0.tensor_allocate(placement, vnc, size, name)
    }

    /// `nrt_tensor_allocate_empty`: a tensor with no storage yet.
    #[doc(alias = "tensor_allocate_empty")]
    #[inline]
    pub fn allocate_empty(&self, name: Option<&str>) -> Result<TensorHandle> {
        self.0.tensor_allocate_empty(name)
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
    /// let _ = n.tensors().attach_buffer(t, b.as_mut_ptr(), 16);
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
    // The public `unsafe fn` of `tensor` (docs/UNSAFE.md): the caller's promise about `buf`,
    // handed on unchanged.
    #[allow(unsafe_code)]
    #[doc(alias = "tensor_attach_buffer")]
    #[inline]
    pub unsafe fn attach_buffer(&self, h: TensorHandle, buf: *mut u8, size: u64) -> Result<()> {
        // SAFETY: the caller's promise, handed on unchanged.
        unsafe { self.0.tensor_attach_buffer(h, buf, size) }
    }

    /// `nrt_tensor_allocate_slice`: a new tensor viewing `[offset, offset+size)` of `src`,
    /// sharing its ref-counted storage (freed with the last user).
    #[doc(alias = "tensor_allocate_slice")]
    #[inline]
    pub fn allocate_slice(
        &self,
        src: TensorHandle,
        offset: u64,
        size: u64,
        name: Option<&str>,
    ) -> Result<TensorHandle> {
        self.0.tensor_allocate_slice(src, offset, size, name)
    }

    /// `nrt_tensor_free`: releases the tensor and its reference on the storage, once any
    /// call using it on another thread is done. A stale (already freed, at any age), forged
    /// or foreign handle is [`Error::InvalidHandle`], and nothing is freed. `Closed` /
    /// `Uninitialized` outside an initialised runtime (close frees every tensor, spec §12).
    /// [`Error::DriverKept`] when the driver refused to free the storage's memory: the
    /// tensor is freed, the driver still holds the block ([`crate::Nrt::driver_kept`]).
    #[doc(alias = "tensor_free")]
    #[inline]
    pub fn free(&self, h: TensorHandle) -> Result<()> {
        self.0.tensor_free(h)
    }

    /// Bytes of a tensor.
    #[doc(alias = "tensor_get_size")]
    #[inline]
    pub fn size(&self, h: TensorHandle) -> Result<u64> {
        self.0.tensor_get_size(h)
    }

    /// The tensor's name (`nrt_tensor_t.name`, spec §7.1), copied out: the slot's `name_buf`
    /// is reused by the next tensor once `t` is freed, so no borrow of it is handed out.
    #[doc(alias = "tensor_name")]
    #[inline]
    pub fn name(&self, h: TensorHandle) -> Result<TensorName> {
        self.0.tensor_name(h)
    }
}

impl<'a> Sets<'_, 'a> {
    /// `nrt_allocate_tensor_set`: an empty tensor set of this runtime. A full set arena is
    /// [`Error::ArenaFull`] naming the setting that raises it (`Capacity.sets`,
    /// `NRT_DMEM_MAX_SETS`).
    #[doc(alias = "set_create")]
    #[inline]
    pub fn create(&self) -> Result<SetHandle> {
        self.0.set_create()
    }

    /// `nrt_destroy_tensor_set`: frees the set (not its tensors), once any call using it on
    /// another thread is done. A stale (already destroyed, at any age), forged or foreign
    /// handle is [`Error::InvalidHandle`] and nothing changes. `Closed` / `Uninitialized`
    /// outside an initialised runtime: `close` frees every set (spec §12), so a set of a
    /// closed runtime is already gone.
    #[doc(alias = "set_destroy")]
    #[inline]
    pub fn destroy(&self, h: SetHandle) -> Result<()> {
        self.0.set_destroy(h)
    }

    /// `nrt_add_tensor_to_tensor_set`: adds tensor `t` under `name` (at most
    /// [`TENSOR_NAME_MAX`] bytes), replacing a tensor of the same name. `t` must be a live
    /// tensor of this runtime now ([`Error::InvalidHandle`] otherwise); one freed later makes
    /// an execution that binds it fail with [`Error::InvalidHandle`]. A set holds as many
    /// tensors as the `set_chunks` arena has room for ([`Error::ArenaFull`], NRT_RESOURCE,
    /// beyond). A failed add changes nothing.
    #[doc(alias = "set_add")]
    #[inline]
    pub fn add(&self, h: SetHandle, name: &str, t: TensorHandle) -> Result<()> {
        self.0.set_add(h, name, t)
    }

    /// `nrt_get_tensor_from_tensor_set`: the tensor stored under `name` (`None` when the set
    /// has none). The handle is returned as stored: a tensor freed since is refused where
    /// it is used.
    #[doc(alias = "set_get")]
    #[inline]
    pub fn get(&self, h: SetHandle, name: &str) -> Result<Option<TensorHandle>> {
        self.0.set_get(h, name)
    }

    /// Tensors in set `h`.
    #[doc(alias = "set_len")]
    #[inline]
    pub fn len(&self, h: SetHandle) -> Result<usize> {
        self.0.set_len(h)
    }
}
