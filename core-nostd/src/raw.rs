//! The raw-pointer API (libnrt's own shape): dmems and tensors named by `*mut dmem_t` /
//! `*mut nrt_tensor_t`, for layers that keep their own registry of live objects (the C ABI,
//! `nrt-ffi`, passes the safe API's handles through instead, and uses only [`epoch`] and
//! [`tensor_allocate`] (the C placement value) from here). Most functions are `unsafe`: the
//! core cannot tell a stale pointer from a live one whose slot was reused, so the caller
//! vouches for it. The safe API ([`crate::Nrt`]'s methods) names the same objects by
//! generation-checked handles.
//!
//! # The contract every function here shares
//!
//! A pointer argument is one this runtime returned (through this module or
//! [`tensor_ptr`]/[`dmem_ptr`]) and the caller still owns: not freed, and not freed by any
//! thread while the call runs. Freed pointers, pointers of another runtime and forged ones
//! are refused when the core can tell (not a live arena slot), but a pointer kept past its
//! free may name a new object, which the call would then use: that is the caller's bug to
//! prevent. The objects' fields are the runtime's: a caller reads them, and writes none of a
//! live object (other threads read them, `dmem_t`'s `mem_handle` and `device_id` for one, as
//! the key of the set of live driver handles).
//!
//! Each function checks what it can (a live arena slot, the tensor magic), turns the pointer
//! into the object's handle, and makes the safe call: the behaviour, the state gate and the
//! errors are the safe API's.
#![deny(unsafe_op_in_unsafe_fn)]

use crate::abi::{dmem_allocator_t, dmem_list_t, dmem_t, nrt_tensor_t};
use crate::ctx::Nrt;
use crate::dmem::{AllocArgs, Dmem, DmemInfo};
use crate::error::{Error, InvalidArg, Result};
use crate::handle::{AllocatorHandle, DmemHandle, HandleKind, TensorHandle};
use crate::tensor::{DeviceAllocationInfo, Placement, Tensor, TensorName};
use crate::vcore::CoreSel;

/// The runtime's epoch: what every handle it hands out carries ([`crate::handle`]); 0 while
/// it is not initialised. A layer that encodes handles in fewer bits (the C ABI's pointers)
/// keeps it once and puts it back when decoding.
pub fn epoch(n: &Nrt<'_>) -> u32 {
    n.epoch()
}

/// The handle of tensor `t`.
///
/// # Safety
/// The module contract: `t` is a live tensor of this runtime the caller owns, not freed
/// while this runs (the check reads the slot without synchronising with an allocation of it).
pub unsafe fn tensor_handle(n: &Nrt<'_>, t: *const nrt_tensor_t) -> Result<TensorHandle> {
    n.tensor_check(t)?;
    Ok(n.tensor_handle_of_owned(t))
}

/// The pointer behind a live tensor handle (the slot; valid while the tensor lives).
pub fn tensor_ptr(n: &Nrt<'_>, h: TensorHandle) -> Result<Tensor> {
    let _call = n.enter()?;
    let pin = n.tensor_pin(h)?;
    Ok(pin.as_ptr())
}

/// Whether `t` is a live tensor of this runtime.
///
/// # Safety
/// As [`tensor_handle`]: a pointer being freed or handed out by another thread races this
/// check's read of the slot.
pub unsafe fn tensor_check(n: &Nrt<'_>, t: *const nrt_tensor_t) -> Result<()> {
    n.tensor_check(t)
}

/// [`Tensors::allocate`](crate::tensor::Tensors::allocate) with the C placement and logical-core values (the C ABI's entry).
/// The state gate answers first (NRT_UNINITIALIZED / NRT_CLOSED), then a value that is not a
/// [`Placement`] is `InvalidArgument(InvalidArg::Placement)`, the order of the safe call's
/// gates; `vnc` goes through [`CoreSel::from_c`] (`-1` is any core).
pub fn tensor_allocate(
    n: &Nrt<'_>,
    placement: u32,
    vnc: i64,
    size: u64,
    name: Option<&str>,
) -> Result<TensorHandle> {
    let Some(placement) = Placement::from_raw(placement) else {
        n.check_state()?;
        return Err(Error::InvalidArgument(InvalidArg::Placement));
    };
    n.tensor_allocate(placement, CoreSel::from_c(vnc), size, name)
}

/// [`Tensors::allocate_empty`](crate::tensor::Tensors::allocate_empty), returning the tensor's pointer.
pub fn tensor_allocate_empty(n: &Nrt<'_>, name: Option<&str>) -> Result<Tensor> {
    let h = n.tensor_allocate_empty(name)?;
    n.tensor_slot(h).ok_or(Error::stale(HandleKind::Tensor))
}

/// [`Tensors::allocate_slice`](crate::tensor::Tensors::allocate_slice) of `src`, returning the slice's pointer.
///
/// # Safety
/// The module contract for `src`.
pub unsafe fn tensor_allocate_slice(
    n: &Nrt<'_>,
    src: *const nrt_tensor_t,
    offset: u64,
    size: u64,
    name: Option<&str>,
) -> Result<Tensor> {
    // SAFETY: forwarded contract.
    let h = unsafe { tensor_handle(n, src) }?;
    let s = n.tensor_allocate_slice(h, offset, size, name)?;
    n.tensor_slot(s).ok_or(Error::stale(HandleKind::Tensor))
}

/// [`Tensors::free`](crate::tensor::Tensors::free) of `t`.
///
/// # Safety
/// The module contract for `t`; afterwards the pointer is dead.
pub unsafe fn tensor_free(n: &Nrt<'_>, t: *const nrt_tensor_t) -> Result<()> {
    // SAFETY: forwarded contract.
    n.tensor_free(unsafe { tensor_handle(n, t) }?)
}

/// [`Tensors::attach_buffer`](crate::tensor::Tensors::attach_buffer) on `t`.
///
/// # Safety
/// The module contract for `t`, and [`Tensors::attach_buffer`](crate::tensor::Tensors::attach_buffer)'s for `buf`.
pub unsafe fn tensor_attach_buffer(
    n: &Nrt<'_>,
    t: *const nrt_tensor_t,
    buf: *mut u8,
    size: u64,
) -> Result<()> {
    // SAFETY: forwarded contracts.
    unsafe { n.tensor_attach_buffer(tensor_handle(n, t)?, buf, size) }
}

macro_rules! tensor_fwd {
    ($(#[$m:meta])* $name:ident ( $($arg:ident : $ty:ty),* ) -> $ret:ty) => {
        $(#[$m])*
        ///
        /// # Safety
        /// The module contract for `t`.
        pub unsafe fn $name(n: &Nrt<'_>, t: *const nrt_tensor_t $(, $arg: $ty)*) -> Result<$ret> {
            // SAFETY: forwarded contract.
            let h = unsafe { tensor_handle(n, t) }?;
            n.$name(h $(, $arg)*)
        }
    };
}

tensor_fwd!(
    /// [`Tensors::size`](crate::tensor::Tensors::size) of `t`.
    tensor_get_size() -> u64
);
tensor_fwd!(
    /// [`Tensors::name`](crate::tensor::Tensors::name) of `t`.
    tensor_name() -> TensorName
);
tensor_fwd!(
    /// [`Tensors::read`](crate::tensor::Tensors::read) from `t`.
    tensor_read(buf: &mut [u8], offset: u64) -> ()
);
tensor_fwd!(
    /// [`Tensors::write`](crate::tensor::Tensors::write) to `t`.
    tensor_write(buf: &[u8], offset: u64) -> ()
);
tensor_fwd!(
    /// [`Tensors::memset`](crate::tensor::Tensors::memset) of `t`.
    tensor_memset(offset: u64, value: u8, size: u64) -> ()
);
tensor_fwd!(
    /// [`Tensors::va`](crate::tensor::Tensors::va) of `t`.
    tensor_get_va() -> *mut u8
);
tensor_fwd!(
    /// [`Tensors::device_allocation_info`](crate::tensor::Tensors::device_allocation_info) of `t`.
    tensor_device_allocation_info() -> DeviceAllocationInfo
);
tensor_fwd!(
    /// [`Tensors::output_completion`](crate::tensor::Tensors::output_completion) of `t`.
    tensor_output_completion() -> u64
);
tensor_fwd!(
    /// [`Tensors::reset_output_completion`](crate::tensor::Tensors::reset_output_completion) of `t`.
    tensor_reset_output_completion() -> ()
);
tensor_fwd!(
    /// [`Tensors::pending`](crate::tensor::Tensors::pending) of `t`.
    tensor_pending() -> crate::tensor::Pending
);

/// [`Tensors::copy`](crate::tensor::Tensors::copy) between two tensor pointers.
///
/// # Safety
/// The module contract for `src` and `dst`.
pub unsafe fn tensor_copy(
    n: &Nrt<'_>,
    src: *const nrt_tensor_t,
    src_off: u64,
    dst: *const nrt_tensor_t,
    dst_off: u64,
    size: u64,
) -> Result<()> {
    // SAFETY: forwarded contract.
    let (s, d) = unsafe { (tensor_handle(n, src)?, tensor_handle(n, dst)?) };
    n.tensor_copy(s, src_off, d, dst_off, size)
}

/// The handle of dmem `m`.
///
/// # Safety
/// The module contract: `m` is a live dmem of this runtime on which the caller holds an
/// owner reference, not dropped while this runs.
pub unsafe fn dmem_handle(n: &Nrt<'_>, m: *const dmem_t) -> Result<DmemHandle> {
    let m = m as Dmem;
    if !n.st.dmem.dmems().is_live(m) {
        return Err(n.not_live(m));
    }
    Ok(n.dmem_handle_of_owned(m))
}

/// The pointer behind a live dmem handle (valid while the caller holds an owner reference).
pub fn dmem_ptr(n: &Nrt<'_>, h: DmemHandle) -> Result<Dmem> {
    let _call = n.enter()?;
    let pin = n.dmem_pin(h)?;
    Ok(pin.m)
}

/// The pointer behind a live allocator handle (valid until the allocator is destroyed: the
/// caller keeps it alive while it uses the pointer).
pub fn allocator_ptr(n: &Nrt<'_>, h: AllocatorHandle) -> Result<*mut dmem_allocator_t> {
    n.with_allocator(h, Ok)
}

/// `dmem_allocator_create` in libnrt's shape (spec §3.1): an allocator for `pcore` (the
/// `pcore` of an attached core's `tpb_t`; any other pointer is refused without being
/// dereferenced), returned by pointer. The caller destroys it with [`allocator_destroy`] (or
/// [`DeviceMemory::allocator_destroy`](crate::dmem::DeviceMemory::allocator_destroy) through
/// [`DeviceMemory::allocator_handle_of`](crate::dmem::DeviceMemory::allocator_handle_of)).
pub fn allocator_create(
    n: &Nrt<'_>,
    pcore: *mut crate::abi::physical_core_t,
    ty: crate::abi::dmem_allocator_type_t,
) -> Result<*mut dmem_allocator_t> {
    n.dmem_allocator_create(pcore, ty)
}

/// `dmem_allocator_destroy` in libnrt's shape (spec §5.4), `al` by pointer.
///
/// # Safety
/// The module contract for `al`: no other thread uses it while this runs or afterwards.
pub unsafe fn allocator_destroy(n: &Nrt<'_>, al: *mut dmem_allocator_t) -> Result<()> {
    n.dmem_allocator_destroy(al)
}

/// [`DeviceMemory::alloc`](crate::dmem::DeviceMemory::alloc), returning the dmem's pointer.
pub fn dmem_alloc(
    n: &Nrt<'_>,
    al: *mut dmem_allocator_t,
    a: &AllocArgs<'_>,
    ref_list: Option<*mut dmem_list_t>,
) -> Result<Dmem> {
    let h = n.dmem_alloc(al, a, ref_list)?;
    n.st.dmem
        .dmems()
        .slot(h.0.index)
        .ok_or(Error::stale(HandleKind::Dmem))
}

/// [`DeviceMemory::free`](crate::dmem::DeviceMemory::free) of `m` (a pointer that is not a live dmem is [`Error::DoubleFree`]).
///
/// # Safety
/// The module contract for `m`; the caller's owner reference is dropped.
pub unsafe fn dmem_free(n: &Nrt<'_>, m: *const dmem_t) -> Result<()> {
    // SAFETY: forwarded contract.
    n.dmem_free(unsafe { dmem_handle(n, m) }?)
}

/// [`DeviceMemory::acquire_reference`](crate::dmem::DeviceMemory::acquire_reference) on `m`.
///
/// # Safety
/// The module contract for `m`.
pub unsafe fn dmem_acquire_reference(n: &Nrt<'_>, m: *const dmem_t) -> Result<()> {
    // SAFETY: forwarded contract.
    n.dmem_acquire_reference(unsafe { dmem_handle(n, m) }?)
}

/// [`DeviceMemory::info`](crate::dmem::DeviceMemory::info) of `m`.
///
/// # Safety
/// The module contract for `m`.
pub unsafe fn dmem_info(n: &Nrt<'_>, m: *const dmem_t) -> Result<DmemInfo> {
    // SAFETY: forwarded contract.
    n.dmem_info(unsafe { dmem_handle(n, m) }?)
}
