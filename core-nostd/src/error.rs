//! The core's error type: small, `Copy`, heap-free, convertible to `NRT_STATUS` (docs/STYLE.md #8).
//!
//! Every variant carries what a person needs to act on it; `Display` renders the message.
#![deny(unsafe_code)]

use core::fmt;

use crate::abi::tables::category_for;
use crate::abi::{dma_mem_location_t, dma_mem_usage_type_t, mem_alloc_category_t, NRT_STATUS};
use crate::cstr::mb;

/// errno values the driver portal returns (Linux numbering).
pub mod errno {
    /// Operation not permitted.
    pub const EPERM: Errno = Errno(1);
    /// No such file or directory (no device node).
    pub const ENOENT: Errno = Errno(2);
    /// I/O error.
    pub const EIO: Errno = Errno(5);
    /// Bad file descriptor.
    pub const EBADF: Errno = Errno(9);
    /// Out of memory in the requested pool.
    pub const ENOMEM: Errno = Errno(12);
    /// Bad address (copy outside an allocation).
    pub const EFAULT: Errno = Errno(14);
    /// Device or resource busy.
    pub const EBUSY: Errno = Errno(16);
    /// No such device.
    pub const ENODEV: Errno = Errno(19);
    /// Invalid argument.
    pub const EINVAL: Errno = Errno(22);
    /// Inappropriate ioctl (command unknown to this driver version).
    pub const ENOTTY: Errno = Errno(25);
    /// Operation not supported.
    pub const EOPNOTSUPP: Errno = Errno(95);

    use super::Errno;

    /// The symbolic name of an errno value.
    pub const fn name(e: Errno) -> &'static str {
        match e {
            EPERM => "EPERM",
            ENOENT => "ENOENT",
            EIO => "EIO",
            EBADF => "EBADF",
            ENOMEM => "ENOMEM",
            EFAULT => "EFAULT",
            EBUSY => "EBUSY",
            ENODEV => "ENODEV",
            EINVAL => "EINVAL",
            ENOTTY => "ENOTTY",
            EOPNOTSUPP => "EOPNOTSUPP",
            _ => "E?",
        }
    }
}

/// An errno value returned by the driver (Linux numbering, positive), as a type rather than a
/// bare `i32` (docs/STYLE.md #21, vmm-sys-util's `errno::Error`): a driver failure cannot be
/// confused with a count or an index. The named values are in [`errno`].
#[derive(Copy, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
#[repr(transparent)]
pub struct Errno(i32);

impl Errno {
    /// The errno of raw value `raw` (as the kernel or libc reports it).
    pub const fn new(raw: i32) -> Self {
        Errno(raw)
    }
    /// The raw value.
    pub const fn raw(self) -> i32 {
        self.0
    }
    /// The symbolic name (`"ENOMEM"`), or `"E?"` for a value [`errno`] does not name.
    pub const fn name(self) -> &'static str {
        errno::name(self)
    }
}

impl From<i32> for Errno {
    fn from(raw: i32) -> Self {
        Errno(raw)
    }
}

impl From<Errno> for i32 {
    fn from(e: Errno) -> Self {
        e.0
    }
}

impl core::fmt::Debug for Errno {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        write!(f, "{}({})", self.name(), self.0)
    }
}

impl core::fmt::Display for Errno {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        write!(f, "{} ({})", self.0, self.name())
    }
}

/// What a bounded wait waits for (spec §4.5 drain, §4.6 exec seam, §12 teardown): carried by
/// [`Error::Timeout`] and [`Error::WouldDeadlock`] and handed to the wait hook.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
#[non_exhaustive]
pub enum WaitFor {
    /// The exec lock of physical core `core` of device `device` (its exec slot), held by an
    /// execution or an `ExecGuard` (the caller's own, another thread's, or a leaked one).
    ExecLock {
        /// Device.
        device: u32,
        /// Physical core on the device.
        core: u32,
    },
    /// The references on model `model` (its `H_MODEL` id): executions, `ExecGuard`s and
    /// model callbacks in flight, which an unload or `close` drains.
    ModelDrain {
        /// The model's `H_MODEL` id.
        model: u32,
    },
    /// The API calls in flight, which `init` and `close` let finish before they rewrite the
    /// runtime (a model or allocator callback is such a call while it runs).
    CallsInFlight,
    /// An allocator's list lock, held while a walk calls its callback.
    AllocatorLock,
    /// An output completion count (the std shim's `nrt_tensor_check_output_completion`).
    Completion,
}

impl core::fmt::Display for WaitFor {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            WaitFor::ExecLock { device, core } => {
                write!(f, "the exec lock of device {device} core {core}")
            }
            WaitFor::ModelDrain { model } => write!(f, "the references on model {model}"),
            WaitFor::CallsInFlight => f.write_str("the API calls in flight"),
            WaitFor::AllocatorLock => f.write_str("an allocator's lock"),
            WaitFor::Completion => f.write_str("an output completion"),
        }
    }
}

/// The arena had no free slot.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct ArenaFull {
    /// Which arena (for the message).
    pub arena: &'static str,
    /// Its capacity.
    pub capacity: usize,
    /// The setting that raises it (a [`crate::config::Capacity`] field and the std shim's
    /// environment variable), or "" for an arena nobody configured.
    pub setting: &'static str,
}

/// Result alias of the core.
pub type Result<T, E = Error> = core::result::Result<T, E>;

/// Everything the core can refuse or fail at.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
#[non_exhaustive]
pub enum Error {
    /// An allocation of zero bytes.
    ZeroSize,
    /// `size + alignment` (or an offset + length) does not fit 64 bits.
    SizeOverflow {
        /// Requested size.
        size: u64,
        /// Requested alignment or offset.
        extra: u64,
    },
    /// Alignment is not a power of two.
    BadAlignment(u64),
    /// A memory location other than HOST_DRAM / TONGA_DRAM.
    InvalidLocation(u32),
    /// A usage type outside 0..=21.
    InvalidUsage(u32),
    /// The usage's category byte is the sentinel 20 for this location (spec §3.2).
    UsageInvalidForLocation {
        /// Usage type.
        usage: dma_mem_usage_type_t,
        /// Location.
        loc: dma_mem_location_t,
    },
    /// HBM channel index past the device's channels.
    HbmOutOfRange {
        /// Requested index.
        hbm: u32,
        /// Channels on the device.
        channels: u32,
    },
    /// A physical core that is not present (where libnrt asserts, spec §1.1).
    CoreOutOfRange {
        /// Device.
        device: u32,
        /// Core within the device.
        tpb: u32,
    },
    /// A device index that is not attached.
    DeviceOutOfRange(u32),
    /// A logical core this process does not own (spec §7.2 range gate).
    LogicalCoreOutOfRange {
        /// Requested logical core.
        vnc: i64,
        /// Logical cores the process owns.
        owned: u32,
    },
    /// A dmem that was already freed (or never allocated), named by raw pointer
    /// ([`crate::raw`]); through a handle this is [`Error::InvalidHandle`].
    DoubleFree,
    /// A handle that names no live object of this runtime: stale (freed or unloaded, at any
    /// age), forged or foreign (another runtime, or this one before close / re-init).
    /// NRT_INVALID; NRT_INVALID_HANDLE for a model handle (libnrt's status for a model that
    /// is not loaded).
    InvalidHandle(crate::handle::HandleError),
    /// A dmem that does not belong to the allocator it was given to.
    ForeignDmem,
    /// The call came through a view ([`crate::Nrt`]) over another driver or host-memory
    /// provider than the state block was initialised with. Nothing was
    /// done.
    ForeignResources,
    /// The call came through a view built without a host-memory provider
    /// ([`crate::Nrt::new`]) while the state block was initialised with one: build the view
    /// with [`crate::Nrt::with_host`] and that provider. Nothing was done. NRT_INVALID.
    MissingHostProvider,
    /// `init` found no device to attach: the driver reports none (a simulated device that
    /// was never initialised, or no device present). NRT_FAILURE.
    NoDevices,
    /// A [`crate::Capacity`] field out of range (`Capacity::check`; the message names the
    /// field and its range). NRT_INVALID.
    InvalidCapacity(&'static str),
    /// A static arena is full (distinct from device OOM).
    ArenaFull(ArenaFull),
    /// Device HBM exhausted (`ENOMEM` on TONGA_DRAM → NRT_RESOURCE, spec §3.2 GOTCHA).
    DeviceOom {
        /// Bytes requested.
        size: u64,
        /// Alignment requested.
        align: u64,
        /// Device.
        device: u32,
        /// Core.
        nc: u32,
        /// HBM channel.
        hbm: u32,
        /// Usage type.
        usage: dma_mem_usage_type_t,
        /// The request reached the driver as the over-allocate-and-offset emulation of its
        /// alignment (`size + align`, no alignment), not as a natively aligned request: what
        /// the OOM report measures the channel against.
        emulated: bool,
    },
    /// Host memory exhausted → NRT_FAIL_HOST_MEM_ALLOC: the driver's host DMA pool (`ENOMEM`
    /// on HOST_DRAM), or the integrator's host memory for a VIRTUAL tensor.
    HostOom {
        /// Bytes requested.
        size: u64,
        /// Host DMA memory (true) or plain host memory for a VIRTUAL tensor (false).
        dma: bool,
    },
    /// Any other driver failure.
    Driver(Errno),
    /// An LNC size `parse_vnc_config` refuses (spec §9), with the rule it breaks.
    VncConfig {
        /// Which rule.
        rule: VncRule,
        /// The requested LNC size.
        size: u32,
    },
    /// More logical cores than the core's table holds (`config::MAX_VCORES`).
    TooManyVcores(u32),
    /// The visible slice (`NEURON_RT_VISIBLE_CORES` / `NEURON_RT_NUM_CORES`) names logical
    /// cores that are not present (spec §9).
    VisibleCores {
        /// First logical core asked for.
        first: u32,
        /// How many.
        count: u32,
        /// Logical cores present.
        total: u32,
    },
    /// A model handle already present in the core's model_db (spec §4.3).
    DuplicateModel(u32),
    /// A model description that cannot be loaded (message says why).
    InvalidModel(&'static str),
    /// More than 9 GPSIMD libraries (spec §6).
    TooManyLibs(u32),
    /// SBUF carveout geometry mismatch (spec §8).
    BadCarveout(&'static str),
    /// A bad argument, with the condition it breaks ([`InvalidArg`]; `Display` renders its
    /// message). NRT_INVALID.
    InvalidArgument(InvalidArg),
    /// An offset/size window outside the object.
    OutOfBounds {
        /// Requested offset.
        offset: u64,
        /// Requested length.
        len: u64,
        /// Object size.
        size: u64,
    },
    /// The operation is refused on this device class (spec §7.2 host-on-CAYMAN).
    Unsupported(&'static str),
    /// A bounded wait gave up (the integrator's wait hook said so, or the wait limit was
    /// reached, `crate::sync::set_wait_hook`): what it waited for. Nothing changed.
    /// NRT_TIMEOUT.
    Timeout(WaitFor),
    /// The driver answered what cannot be (a pool with more free bytes than capacity, a page
    /// size that is not a power of two, more HBM channels than the ABI holds, allocation
    /// handle 0, an address outside its window …): the answer is refused, nothing of it is
    /// used. NRT_FAILURE.
    BadDriver {
        /// What was wrong.
        what: &'static str,
        /// The value the driver gave.
        value: u64,
    },
    /// The driver refused to free memory the runtime gave back (`memory_free` failed): the
    /// call did everything else (the object is gone from the runtime), but the driver still
    /// holds these blocks, which the ledger keeps counting and
    /// `Nrt::driver_kept` reports. NRT_FAILURE.
    DriverKept {
        /// Blocks the driver kept.
        blocks: u32,
        /// Their bytes.
        bytes: u64,
        /// The driver's last refusal.
        errno: Errno,
    },
    /// The call would wait for its own thread: it was made from a callback that holds what
    /// it waits for (a model reference, an allocator's lock). Refused at once, nothing
    /// changed. NRT_FAILURE.
    WouldDeadlock(WaitFor),
    /// The execution was ended by `Models::revoke_exec` (spec §4.6): its guard holds nothing
    /// any more (named by the execution's first core). NRT_FAILURE.
    ExecRevoked {
        /// Device.
        device: u32,
        /// Physical core on the device.
        core: u32,
    },
    /// `init` on a runtime that is already initialised (`close` it first). NRT_FAILURE, as
    /// the C ABI's `nrt_init` answers (docs/STATES.md): the arguments are fine, the state is
    /// not, so it is not NRT_INVALID.
    AlreadyInitialized,
    /// Runtime not initialised.
    Uninitialized,
    /// Runtime closed.
    Closed,
}

/// Declares [`InvalidArg`] and its messages side by side, so a condition and the text users see
/// cannot drift apart.
macro_rules! invalid_args {
    ($($(#[$m:meta])* $v:ident => $msg:expr,)*) => {
        /// Which argument an [`Error::InvalidArgument`] refuses, one variant per condition, so
        /// callers can match on it. [`InvalidArg::message`] is the text the
        /// error shows.
        #[derive(Copy, Clone, Debug, PartialEq, Eq)]
        #[cfg_attr(feature = "defmt", derive(defmt::Format))]
        #[non_exhaustive]
        pub enum InvalidArg {
            $($(#[$m])* $v,)*
        }

        impl InvalidArg {
            /// Every condition, in declaration order (for tables and tests).
            pub const ALL: &'static [InvalidArg] = &[$(InvalidArg::$v,)*];

            /// The message `Display` shows after "invalid argument: ".
            pub const fn message(self) -> &'static str {
                match self {
                    $(InvalidArg::$v => $msg,)*
                }
            }
        }
    };
}

invalid_args! {
    /// `dmem_allocator_destroy` on a GLOBAL or MODEL allocator, which the runtime owns (spec §4.5).
    RuntimeOwnedAllocator => "the runtime's own allocators (a core's GLOBAL one, a model's MODEL ones) are \
         destroyed by the runtime, not through dmem_allocator_destroy",
    /// An allocator's `pcore` that is not a physical core of the context tree.
    PcoreNotInTree => "pcore is not a physical core of the context tree",
    /// An allocator pointer that is not a live `dmem_allocator_t` of this runtime.
    AllocatorNotLive => "allocator is not live",
    /// `dmem_allocator_destroy` of an allocator another call is using right now (an
    /// allocation, a walk, another destroy): refused, nothing changed; destroy it after.
    AllocatorInUse => "allocator is in use by another call (allocation, walk or destroy); nothing was destroyed",
    /// A `ref_list` that is not a live `dmem_list_t`.
    RefListNotLive => "ref_list is not a live dmem_list_t",
    /// An allocator whose `pcore` is NULL.
    AllocatorWithoutCore => "allocator has no core",
    /// An aligned request for HOST_DRAM (the host DMA pool takes none, spec §3.2).
    AlignedHostAlloc => "the driver's host DMA pool does not take aligned allocations",
    /// A dmem pointer outside this runtime's dmem arena.
    ForeignDmemPointer => "not a dmem of this runtime",
    /// A scratchpad page index past the pages.
    PageIndex => "page index",
    /// A NULL tensor pointer.
    NullTensor => "tensor is NULL",
    /// A tensor pointer that is not a live tensor of this runtime.
    NotLiveTensor => "not a live tensor (freed, foreign or corrupt pointer)",
    /// A tensor name over `TENSOR_NAME_MAX` (255) bytes.
    TensorNameTooLong => "tensor name longer than NRT_TENSOR_NAME_MAX - 1 (255) bytes",
    /// A tensor's `name_buf` text that does not fit the 96-byte [`crate::tensor::TensorName`].
    TensorNameBuffer => "tensor name longer than 96 bytes",
    /// A C placement value other than DEVICE (0), HOST (1) or VIRTUAL (2).
    Placement => "placement must be DEVICE (0), HOST (1) or VIRTUAL (2)",
    /// `tensor_attach_buffer` with a NULL buffer or a zero size.
    NullOrEmptyBuffer => "buffer is NULL or size is 0",
    /// `tensor_allocate_slice` of a tensor without storage.
    SourceWithoutStorage => "source tensor has no storage",
    /// A data call on a tensor without storage (`allocate_empty` without `attach_buffer`).
    TensorWithoutStorage => "tensor has no storage (allocate_empty without attach_buffer)",
    /// A tensor storage of no known memory type.
    StorageWithoutMemory => "tensor storage has no memory",
    /// A device-to-device `tensor_copy` across NeuronCores.
    CrossCoreCopy => "device-to-device copy must stay on one NeuronCore",
    /// A device-visible-memory query on a VIRTUAL or attached-buffer tensor.
    NotDeviceVisible => "tensor is not in device-visible memory",
    /// `execute` with an output set that lacks a tensor the model declares.
    OutputMissing => "output tensor set lacks a tensor the model declares",
    /// `execute` with an input set that lacks a tensor the model declares.
    InputMissing => "input tensor set lacks a tensor the model declares",
    /// `execute` with a bound tensor whose size is not the model's declaration.
    TensorSizeMismatch => "tensor size differs from the model's declaration",
    /// `execute` reading its bound tensors past what it bound (a runtime bug, never a caller's).
    TooManyBound => "an execution's bound tensors were used out of order",
    /// A `StaticState` whose storage is smaller than its capacity needs.
    StaticStorageTooSmall => "the static storage is smaller than the capacity needs (size it with CoreState::storage_bytes)",
    /// A `StaticState` bound a second time.
    StaticStateBound => "this StaticState is already bound",
    /// A capacity whose storage does not fit one allocation.
    CapacityTooLarge => "capacity too large for one allocation",
}

impl fmt::Display for InvalidArg {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.message())
    }
}

/// The rule of `parse_vnc_config` (spec §9) an LNC size breaks.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub enum VncRule {
    /// 0 (`out != 0`).
    Zero,
    /// Does not divide the cores per device (`(nc_per_device % out) == 0`).
    Divide {
        /// Cores per device.
        cores: u32,
    },
    /// Not a power of two, or above the cap.
    PowerOfTwo {
        /// The cap (`config::MAX_LNC_SIZE`).
        max: u32,
    },
    /// An instance type that takes only 2 (MARIANA here).
    OnlyTwo,
}

impl Error {
    /// The public status code this error surfaces as.
    pub const fn status(&self) -> NRT_STATUS {
        use NRT_STATUS::*;
        match self {
            Error::DeviceOom { .. } => NRT_RESOURCE,
            Error::HostOom { .. } => NRT_FAIL_HOST_MEM_ALLOC,
            Error::ArenaFull(_) => NRT_RESOURCE,
            Error::ForeignResources | Error::MissingHostProvider | Error::InvalidCapacity(_) => {
                NRT_INVALID
            }
            Error::NoDevices => NRT_FAILURE,
            // libnrt's status for a model that is not loaded (public API §2, `nrt_unload`).
            Error::InvalidHandle(crate::handle::HandleError {
                kind: crate::handle::HandleKind::Model,
                ..
            })
            | Error::DuplicateModel(_) => NRT_INVALID_HANDLE,
            Error::TooManyLibs(_) | Error::AlreadyInitialized => NRT_FAILURE,
            Error::Driver(errno::ENOMEM) => NRT_RESOURCE,
            Error::Driver(_) => NRT_FAILURE,
            Error::Unsupported(_) => NRT_RESOURCE,
            Error::Timeout(_) => NRT_TIMEOUT,
            Error::WouldDeadlock(_)
            | Error::ExecRevoked { .. }
            | Error::DriverKept { .. }
            | Error::BadDriver { .. } => NRT_FAILURE,
            Error::Uninitialized => NRT_UNINITIALIZED,
            Error::Closed => NRT_CLOSED,
            _ => NRT_INVALID,
        }
    }
}

impl Error {
    /// [`Error::InvalidHandle`] with fault `Stale`.
    pub(crate) const fn stale(kind: crate::handle::HandleKind) -> Self {
        Error::InvalidHandle(crate::handle::HandleError {
            kind,
            fault: crate::handle::HandleFault::Stale,
        })
    }
    /// [`Error::InvalidHandle`] with fault `Forged`.
    pub(crate) const fn forged(kind: crate::handle::HandleKind) -> Self {
        Error::InvalidHandle(crate::handle::HandleError {
            kind,
            fault: crate::handle::HandleFault::Forged,
        })
    }
    /// [`Error::InvalidHandle`] with fault `Foreign`.
    pub(crate) const fn foreign(kind: crate::handle::HandleKind) -> Self {
        Error::InvalidHandle(crate::handle::HandleError {
            kind,
            fault: crate::handle::HandleFault::Foreign,
        })
    }
}

impl From<crate::handle::HandleError> for Error {
    fn from(e: crate::handle::HandleError) -> Self {
        Error::InvalidHandle(e)
    }
}

impl From<ArenaFull> for Error {
    fn from(a: ArenaFull) -> Self {
        Error::ArenaFull(a)
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            Error::ZeroSize => f.write_str("allocation size is 0"),
            Error::SizeOverflow { size, extra } => {
                write!(f, "size {size} + {extra} overflows 64 bits")
            }
            Error::BadAlignment(a) => write!(f, "alignment {a} is not a power of two"),
            Error::InvalidLocation(l) => {
                write!(
                    f,
                    "memory location {l} is not HOST_DRAM (1) or TONGA_DRAM (2)"
                )
            }
            Error::InvalidUsage(u) => {
                write!(f, "usage type {u} is not a dma_mem_usage_type_t (0..=21)")
            }
            // libnrt's text ("Invalid mem_usage_type %d for host", spec §3.2 step 2), then
            // which member it is and why.
            Error::UsageInvalidForLocation { usage, loc } => write!(
                f,
                "Invalid mem_usage_type {} for {} ({}: the {} category table says 20)",
                usage as u32,
                if loc == dma_mem_location_t::HOST_DRAM { "host" } else { "device" },
                usage.name(),
                if loc == dma_mem_location_t::HOST_DRAM { "host" } else { "device" },
            ),
            Error::HbmOutOfRange { hbm, channels } => {
                write!(f, "HBM index {hbm} out of range (device has {channels})")
            }
            Error::CoreOutOfRange { device, tpb } => {
                write!(f, "physical core nd{device}:nc{tpb} is not present")
            }
            Error::DeviceOutOfRange(d) => write!(f, "device {d} is not attached"),
            Error::LogicalCoreOutOfRange { vnc, owned } => write!(
                f,
                "Logical NeuronCore {vnc} is out of range: this process owns {owned} (0..{owned})"
            ),
            Error::DoubleFree => f.write_str("dmem already freed (double free)"),
            Error::InvalidHandle(h) => write!(f, "{h}"),
            Error::ForeignDmem => f.write_str("dmem does not belong to this allocator"),
            Error::ForeignResources => f.write_str(
                "this runtime is bound to another driver or host-memory provider (the ones it \
                 was initialised with): the call was refused",
            ),
            Error::MissingHostProvider => f.write_str(
                "this view has no host-memory provider but the runtime was initialised with \
                 one: build it with Nrt::with_host and that provider; the call was refused",
            ),
            Error::NoDevices => f.write_str(
                "no device to attach: the driver reports 0 devices (a simulated device not \
                 initialised, or no device present)",
            ),
            Error::InvalidCapacity(m) => write!(f, "invalid capacity: {m}"),
            Error::ArenaFull(a) if a.setting.is_empty() => write!(
                f,
                "arena `{}` is full ({} slots); raise its nrt_core::Capacity",
                a.arena, a.capacity
            ),
            Error::ArenaFull(a) => write!(
                f,
                "arena `{}` is full ({} slots); raise {}",
                a.arena, a.capacity, a.setting
            ),
            Error::DeviceOom {
                size,
                align,
                device,
                nc,
                hbm,
                usage,
                ..
            } => {
                // libnrt's shape (public API §5): the driver category's counter name, then
                // the exact usage type.
                let category = mem_alloc_category_t::from_raw(u32::from(category_for(
                    dma_mem_location_t::TONGA_DRAM,
                    usage,
                )))
                .unwrap_or(mem_alloc_category_t::MAX);
                write!(
                    f,
                    "Failed to allocate {}MB (usage: {}) on ND {}:NC {} (HBM {}, type {})",
                    mb(size),
                    category.counter_name(),
                    device,
                    nc,
                    hbm,
                    usage.short_name()
                )?;
                if align != 0 {
                    write!(f, "; alignment {align} requested: the device may be running out of alignment boundaries")?;
                }
                Ok(())
            }
            Error::HostOom { size, dma } => write!(
                f,
                "Failed to allocate {}MB of {}",
                mb(size),
                if dma {
                    "host DMA memory"
                } else {
                    "host memory (VIRTUAL tensor)"
                }
            ),
            Error::Driver(e) => write!(f, "driver error {} ({})", e.raw(), e.name()),
            Error::VncConfig { rule, size } => match rule {
                // libnrt's assertions and messages (spec §9, .rodata), in its order.
                VncRule::Zero => write!(f, "the logical core size must not be 0 (libnrt: out != 0)"),
                VncRule::Divide { cores } => write!(
                    f,
                    "logical core size {size} does not divide the {cores} cores per device \
                     (libnrt: (nc_per_device % out) == 0)"
                ),
                VncRule::PowerOfTwo { max } => write!(
                    f,
                    "Logical core size ({size}) must be a power of two and less than or equal to {max}"
                ),
                VncRule::OnlyTwo => write!(
                    f,
                    "Only LNC Size of 2 is supported at this moment on this instance type. \
                     Requested LNC Size {size}"
                ),
            },
            Error::TooManyVcores(n) => write!(
                f,
                "{n} logical cores asked for; this build holds at most {}",
                crate::config::MAX_VCORES
            ),
            Error::VisibleCores {
                first,
                count,
                total,
            } => {
                match count {
                    0 => write!(f, "no logical core asked for")?,
                    1 => write!(f, "logical core {first} asked for")?,
                    _ => {
                        let last = u64::from(first) + u64::from(count) - 1;
                        write!(f, "logical cores {first}-{last} asked for")?
                    }
                }
                match total {
                    0 => write!(f, ", but no logical core is present"),
                    _ => write!(f, ", but the {total} present are 0-{}", total - 1),
                }
            }
            Error::DuplicateModel(h) => write!(f, "Model {h} already in DB"),
            Error::InvalidModel(m) => write!(f, "invalid model: {m}"),
            Error::TooManyLibs(n) => write!(f, "Exceeded max number of GPSIMD libs: {n} > 9"),
            Error::BadCarveout(m) => write!(f, "SBUF EVTACCEL carveout: {m}"),
            Error::InvalidArgument(a) => write!(f, "invalid argument: {}", a.message()),
            Error::OutOfBounds { offset, len, size } => write!(
                f,
                "window [{offset}, {offset}+{len}) is outside the object of {size} bytes"
            ),
            Error::Unsupported(m) => f.write_str(m),
            Error::Timeout(w @ (WaitFor::ExecLock { .. } | WaitFor::ModelDrain { .. })) => write!(
                f,
                "timed out waiting for {w} (an execution held past the bound, or leaked: \
                 Models::revoke_exec ends it)"
            ),
            Error::Timeout(w) => write!(f, "timed out waiting for {w}"),
            Error::BadDriver { what, value } => {
                write!(f, "the driver's answer is refused: {what} (it said {value})")
            }
            Error::DriverKept {
                blocks,
                bytes,
                errno,
            } => write!(
                f,
                "the driver refused to free {blocks} block(s) of {bytes} bytes (driver error \
                 {errno}): it still holds them"
            ),
            Error::WouldDeadlock(w) => write!(
                f,
                "the calling thread holds {w} itself: the call would wait for it forever"
            ),
            Error::ExecRevoked { device, core } => write!(
                f,
                "the execution on device {device} core {core} was revoked (Models::revoke_exec)"
            ),
            Error::AlreadyInitialized => {
                f.write_str("the runtime is already initialized (call nrt_close first)")
            }
            Error::Uninitialized => f.write_str("runtime not initialized (call nrt_init first)"),
            Error::Closed => f.write_str("runtime closed (nrt_close was called)"),
        }
    }
}

impl core::error::Error for Error {}

#[cfg(test)]
mod tests {
    extern crate std;
    use super::*;
    use std::string::ToString;

    #[test]
    fn waits_and_driver_answers_map_to_their_statuses_and_say_what() {
        use WaitFor;
        let t = Error::Timeout(WaitFor::ExecLock { device: 1, core: 3 });
        assert_eq!(t.status(), NRT_STATUS::NRT_TIMEOUT);
        assert_eq!(
            t.to_string(),
            "timed out waiting for the exec lock of device 1 core 3 (an execution held past \
             the bound, or leaked: Models::revoke_exec ends it)"
        );
        let t = Error::Timeout(WaitFor::ModelDrain { model: 7 });
        assert_eq!(t.status(), NRT_STATUS::NRT_TIMEOUT);
        assert!(t.to_string().contains("the references on model 7"), "{t}");
        assert!(t.to_string().contains("Models::revoke_exec"), "{t}");
        let t = Error::Timeout(WaitFor::CallsInFlight);
        assert_eq!(
            t.to_string(),
            "timed out waiting for the API calls in flight"
        );
        let r = Error::ExecRevoked { device: 0, core: 1 };
        assert_eq!(r.status(), NRT_STATUS::NRT_FAILURE);
        assert!(r.to_string().contains("device 0 core 1 was revoked"), "{r}");
        let d = Error::WouldDeadlock(WaitFor::AllocatorLock);
        assert_eq!(d.status(), NRT_STATUS::NRT_FAILURE);
        assert!(d.to_string().contains("an allocator's lock"), "{d}");
        let k = Error::DriverKept {
            blocks: 2,
            bytes: 12288,
            errno: errno::EBUSY,
        };
        assert_eq!(k.status(), NRT_STATUS::NRT_FAILURE);
        assert_eq!(
            k.to_string(),
            "the driver refused to free 2 block(s) of 12288 bytes (driver error 16 (EBUSY)): it \
             still holds them"
        );
        let b = Error::BadDriver {
            what: "pool_stats: free bytes above capacity",
            value: 5,
        };
        assert_eq!(b.status(), NRT_STATUS::NRT_FAILURE);
        assert_eq!(
            b.to_string(),
            "the driver's answer is refused: pool_stats: free bytes above capacity (it said 5)"
        );
    }

    #[test]
    fn every_invalid_argument_keeps_its_message_and_nrt_invalid() {
        let mut seen = std::collections::BTreeSet::new();
        for &a in InvalidArg::ALL {
            let e = Error::InvalidArgument(a);
            assert_eq!(e.status(), NRT_STATUS::NRT_INVALID, "{a:?}");
            assert_eq!(
                e.to_string(),
                std::format!("invalid argument: {}", a.message())
            );
            assert!(!a.message().is_empty(), "{a:?}");
            assert!(
                seen.insert(a.message()),
                "{a:?} shares its message with another condition"
            );
        }
        // The texts users saw before the conditions had variants.
        assert_eq!(
            Error::InvalidArgument(InvalidArg::NotLiveTensor).to_string(),
            "invalid argument: not a live tensor (freed, foreign or corrupt pointer)"
        );
        assert_eq!(
            Error::InvalidArgument(InvalidArg::RuntimeOwnedAllocator).to_string(),
            "invalid argument: the runtime's own allocators (a core's GLOBAL one, a model's MODEL \
             ones) are destroyed by the runtime, not through dmem_allocator_destroy"
        );
    }

    #[test]
    fn host_oom_names_the_memory_it_ran_out_of() {
        let dma = Error::HostOom {
            size: 3 << 20,
            dma: true,
        };
        let virt = Error::HostOom {
            size: 3 << 20,
            dma: false,
        };
        assert_eq!(
            dma.to_string(),
            "Failed to allocate 3.000MB of host DMA memory"
        );
        assert_eq!(
            virt.to_string(),
            "Failed to allocate 3.000MB of host memory (VIRTUAL tensor)"
        );
        assert_eq!(dma.status(), NRT_STATUS::NRT_FAIL_HOST_MEM_ALLOC);
        assert_eq!(virt.status(), NRT_STATUS::NRT_FAIL_HOST_MEM_ALLOC);
    }
}
