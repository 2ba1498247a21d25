//! The kernel driver's ioctl argument structs and command numbers (public ABI §3).
//!
//! Every struct is `#[repr(C)]`, carries zerocopy's derives (which prove it has no implicit
//! padding, so its bytes can cross into the kernel as they are) and a const block pinning its
//! size and the offsets the driver reads. Padding the C compiler would insert is spelled out as
//! private `_pad_NN` members named by offset. User-space pointers inside the structs (`u64 *`,
//! `void *`) are carried as `u64` addresses: this module is for 64-bit Linux only (x86-64 and
//! aarch64, the two architectures the Neuron driver ships for).
//!
//! Command numbers are declared once, below, with nix's `request_code_*` macros (the kernel's
//! `_IOR`/`_IOW`/`_IOWR`), and each is unit-tested against the table's hex value. Several old
//! commands encode a *pointer* type as their size (`_IOR('N', 21, struct … *)`), hence the
//! `0x8008…` values even though their structs are larger: the driver tells versions of one
//! command number apart by the encoded size only.

#![deny(unsafe_code)]

use core::mem::{offset_of, size_of};
use zerocopy::{FromBytes, Immutable, IntoBytes, KnownLayout};

#[cfg(not(target_pointer_width = "64"))]
compile_error!("the Neuron ioctl ABI is defined for 64-bit Linux only (pointers are u64 here)");

/// The driver's ioctl magic, `'N'` (public ABI §3).
pub const NEURON_IOCTL_BASE: u8 = b'N';

/// Size of a user-space pointer: what the old `_IOR(…, struct x *)` commands encode.
const PTR: usize = size_of::<u64>();

/// `_IOR('N', nr, size)` as a `u64` (the encoding is 32 bits; see the module docs).
macro_rules! ior {
    ($nr:expr, $sz:expr) => {
        (nix::request_code_read!(NEURON_IOCTL_BASE, $nr, $sz) as u32) as u64
    };
}
/// `_IOW('N', nr, size)` as a `u64`.
macro_rules! iow {
    ($nr:expr, $sz:expr) => {
        (nix::request_code_write!(NEURON_IOCTL_BASE, $nr, $sz) as u32) as u64
    };
}
/// `_IOWR('N', nr, size)` as a `u64`.
macro_rules! iowr {
    ($nr:expr, $sz:expr) => {
        (nix::request_code_readwrite!(NEURON_IOCTL_BASE, $nr, $sz) as u32) as u64
    };
}

// ---------------------------------------------------------------------------------------------
// Command numbers (public ABI §3, "cmd" column).
// ---------------------------------------------------------------------------------------------

/// `NEURON_IOCTL_DEVICE_INFO`: nr 3, `_IOR` of a *pointer* (public ABI §3) → `0x80084e03`.
pub const NEURON_IOCTL_DEVICE_INFO: u64 = ior!(3, PTR);
/// `NEURON_IOCTL_MEM_ALLOC` (legacy): nr 21, `_IOR` of a pointer → `0x80084e15`.
pub const NEURON_IOCTL_MEM_ALLOC: u64 = ior!(21, PTR);
/// `NEURON_IOCTL_MEM_FREE`: nr 22, `_IOR` of a pointer → `0x80084e16`.
pub const NEURON_IOCTL_MEM_FREE: u64 = ior!(22, PTR);
/// `NEURON_IOCTL_MEM_BUF_COPY64`: nr 24, `_IOWR` of the 40-byte struct → `0xc0284e18`.
pub const NEURON_IOCTL_MEM_BUF_COPY64: u64 = iowr!(24, size_of::<MemBufCopy64>());
/// `NEURON_IOCTL_MEM_GET_EXTENDED_INFO`: nr 29, `_IOR` of a pointer → `0x80084e1d`.
pub const NEURON_IOCTL_MEM_GET_EXTENDED_INFO: u64 = ior!(29, PTR);
/// `NEURON_IOCTL_DEVICE_BASIC_INFO`: nr 100, `_IOW` of the 8-byte struct → `0x40084e64`.
pub const NEURON_IOCTL_DEVICE_BASIC_INFO: u64 = iow!(100, size_of::<DeviceBasicInfo>());
/// `NEURON_IOCTL_MEM_ALLOC_V2`: nr 102, `_IOR` of a pointer → `0x80084e66`.
pub const NEURON_IOCTL_MEM_ALLOC_V2: u64 = ior!(102, PTR);
/// `NEURON_IOCTL_MEM_ALLOC_V2MT`: nr 102, `_IOR` of the 48-byte struct → `0x80304e66`.
pub const NEURON_IOCTL_MEM_ALLOC_V2MT: u64 = ior!(102, size_of::<MemAllocV2Mt>());
/// `NEURON_IOCTL_MEM_ALLOC_V2MT64`: nr 102, `_IOR` of the 56-byte struct → `0x80384e66`.
pub const NEURON_IOCTL_MEM_ALLOC_V2MT64: u64 = ior!(102, size_of::<MemAllocV2Mt64>());
/// `NEURON_IOCTL_DRIVER_INFO_GET`: nr 110, `_IOR` of the 24-byte struct → `0x80184e6e`.
pub const NEURON_IOCTL_DRIVER_INFO_GET: u64 = ior!(110, size_of::<DriverInfo>());
/// `NEURON_IOCTL_DUMP_MEM_CHUNKS`: nr 116, `_IOR` of a pointer → `0x80084e74`.
pub const NEURON_IOCTL_DUMP_MEM_CHUNKS: u64 = ior!(116, PTR);

/// Every command this crate issues, with its name (for errors, logs and the fake driver).
pub const COMMANDS: &[(&str, u64)] = &[
    ("DEVICE_INFO", NEURON_IOCTL_DEVICE_INFO),
    ("MEM_ALLOC", NEURON_IOCTL_MEM_ALLOC),
    ("MEM_FREE", NEURON_IOCTL_MEM_FREE),
    ("MEM_BUF_COPY64", NEURON_IOCTL_MEM_BUF_COPY64),
    ("MEM_GET_EXTENDED_INFO", NEURON_IOCTL_MEM_GET_EXTENDED_INFO),
    ("DEVICE_BASIC_INFO", NEURON_IOCTL_DEVICE_BASIC_INFO),
    ("MEM_ALLOC_V2", NEURON_IOCTL_MEM_ALLOC_V2),
    ("MEM_ALLOC_V2MT", NEURON_IOCTL_MEM_ALLOC_V2MT),
    ("MEM_ALLOC_V2MT64", NEURON_IOCTL_MEM_ALLOC_V2MT64),
    ("DRIVER_INFO_GET", NEURON_IOCTL_DRIVER_INFO_GET),
    ("DUMP_MEM_CHUNKS", NEURON_IOCTL_DUMP_MEM_CHUNKS),
];

/// The name of a command number (`"?"` for one this crate does not issue).
pub fn command_name(cmd: u64) -> &'static str {
    COMMANDS
        .iter()
        .find(|(_, c)| *c == cmd)
        .map_or("?", |(n, _)| n)
}

/// `_IOC_NR(cmd)`: the command number field.
pub const fn ioc_nr(cmd: u64) -> u8 {
    (cmd & 0xff) as u8
}

/// `_IOC_SIZE(cmd)`: the 14-bit argument size field.
pub const fn ioc_size(cmd: u64) -> usize {
    ((cmd >> 16) & 0x3fff) as usize
}

// ---------------------------------------------------------------------------------------------
// Argument structs (public ABI §3, "argument" column).
// ---------------------------------------------------------------------------------------------

/// `host_memory` value asking for host DMA memory (the driver tests it as a boolean).
pub const HOST_MEMORY_HOST: u32 = 1;
/// `host_memory` value asking for device HBM.
pub const HOST_MEMORY_DEVICE: u32 = 0;

/// `struct neuron_ioctl_mem_alloc` (legacy MEM_ALLOC, 32 B; public ABI §3).
#[repr(C)]
#[derive(
    Copy, Clone, Debug, Default, PartialEq, Eq, IntoBytes, FromBytes, KnownLayout, Immutable,
)]
pub struct MemAlloc {
    /// Bytes requested.
    pub size: u64,
    /// Non-zero: host DMA memory; zero: device HBM.
    pub host_memory: u32,
    /// HBM channel (the pool).
    pub dram_channel: u32,
    /// DRAM region; 0 on current devices.
    pub dram_region: u32,
    /// Core the allocation is accounted to (range checked, < 8).
    pub nc_id: u32,
    /// User address of the `u64` the driver writes the new handle to.
    pub mem_handle: u64,
}

/// `struct neuron_ioctl_mem_alloc_v2` (MEM_ALLOC_V2, 40 B; public ABI §3).
#[repr(C)]
#[derive(
    Copy, Clone, Debug, Default, PartialEq, Eq, IntoBytes, FromBytes, KnownLayout, Immutable,
)]
pub struct MemAllocV2 {
    /// Bytes requested.
    pub size: u64,
    /// Alignment in bytes (0 = natural).
    pub align: u64,
    /// Non-zero: host DMA memory; zero: device HBM.
    pub host_memory: u32,
    /// HBM channel (the pool).
    pub dram_channel: u32,
    /// DRAM region; 0 on current devices.
    pub dram_region: u32,
    /// Core the allocation is accounted to (range checked, < 8).
    pub nc_id: u32,
    /// User address of the `u64` the driver writes the new handle to.
    pub mem_handle: u64,
}

/// `struct neuron_ioctl_mem_alloc_v2_mem_type` (MEM_ALLOC_V2MT, 48 B; public ABI §3).
#[repr(C)]
#[derive(
    Copy, Clone, Debug, Default, PartialEq, Eq, IntoBytes, FromBytes, KnownLayout, Immutable,
)]
pub struct MemAllocV2Mt {
    /// Bytes requested.
    pub size: u64,
    /// Alignment in bytes (0 = natural).
    pub align: u64,
    /// Non-zero: host DMA memory; zero: device HBM.
    pub host_memory: u32,
    /// HBM channel (the pool).
    pub dram_channel: u32,
    /// DRAM region; 0 on current devices.
    pub dram_region: u32,
    /// Core the allocation is accounted to (range checked, < 8).
    pub nc_id: u32,
    /// Allocation category (`mem_alloc_category_t`, 0..20).
    pub mem_type: u32,
    _pad_36: u32,
    /// User address of the `u64` the driver writes the new handle to.
    pub mem_handle: u64,
}

/// `struct neuron_ioctl_mem_alloc_v2_mem_type64` (MEM_ALLOC_V2MT64, 56 B; public ABI §3): V2MT
/// plus a trailing `u32 pad` whose only purpose is to change the encoded size, so that a driver
/// accepting it announces ≥ 4 GiB allocation and copy support.
#[repr(C)]
#[derive(
    Copy, Clone, Debug, Default, PartialEq, Eq, IntoBytes, FromBytes, KnownLayout, Immutable,
)]
pub struct MemAllocV2Mt64 {
    /// The V2MT request, byte for byte (the first 48 bytes).
    pub v2mt: MemAllocV2Mt,
    /// The version discriminator; never read by the driver.
    pub pad: u32,
    _pad_52: u32,
}

/// `struct neuron_ioctl_mem_free` (MEM_FREE, 8 B; public ABI §3).
#[repr(C)]
#[derive(
    Copy, Clone, Debug, Default, PartialEq, Eq, IntoBytes, FromBytes, KnownLayout, Immutable,
)]
pub struct MemFree {
    /// The handle to free.
    pub mem_handle: u64,
}

/// `struct neuron_ioctl_mem_buf_copy64` (MEM_BUF_COPY64, 40 B; public ABI §3).
#[repr(C)]
#[derive(
    Copy, Clone, Debug, Default, PartialEq, Eq, IntoBytes, FromBytes, KnownLayout, Immutable,
)]
pub struct MemBufCopy64 {
    /// The allocation copied to or from.
    pub mem_handle: u64,
    /// User address of the host buffer.
    pub buffer: u64,
    /// Bytes to copy.
    pub size: u64,
    /// Byte offset inside the allocation.
    pub offset: u64,
    /// Non-zero: buffer → allocation; zero: allocation → buffer.
    pub copy_to_mem_handle: u32,
    _pad_36: u32,
}

/// `struct neuron_ioctl_mem_get_extended_info` (MEM_GET_EXTENDED_INFO, 48 B; public ABI §3).
#[repr(C)]
#[derive(
    Copy, Clone, Debug, Default, PartialEq, Eq, IntoBytes, FromBytes, KnownLayout, Immutable,
)]
pub struct MemGetExtendedInfo {
    /// In: the allocation.
    pub mem_handle: u64,
    /// In: structure version; [`MEM_GET_EXTENDED_INFO_VERSION`].
    pub version: u32,
    /// Out: non-zero when the allocation is host memory.
    pub host_memory: u32,
    /// Out: offset to `mmap` the allocation at.
    pub mmap_offset: u64,
    /// Out: physical address.
    pub pa: u64,
    /// Out: the process that allocated it.
    pub pid: u64,
    /// Out: allocation size.
    pub size: u64,
}

/// The `version` MEM_GET_EXTENDED_INFO expects (public ABI §3: "=1").
pub const MEM_GET_EXTENDED_INFO_VERSION: u32 = 1;

/// `struct neuron_ioctl_device_basic_info` (DEVICE_BASIC_INFO, 8 B; public ABI §3).
#[repr(C)]
#[derive(
    Copy, Clone, Debug, Default, PartialEq, Eq, IntoBytes, FromBytes, KnownLayout, Immutable,
)]
pub struct DeviceBasicInfo {
    /// `enum neuron_arch`: 2 = v2 (SUNDA), 3 = v3 (CAYMAN), 4 = v4 (MARIANA) — the same numbers
    /// as `al_hal_tpb_arch_type_t`.
    pub architecture: u32,
    /// Board revision.
    pub revision: u32,
}

/// Connected-device slots in [`DeviceInfoArg`].
pub const MAX_CONNECTED_DEVICES: usize = 8;

/// `struct neuron_ioctl_device_info` (DEVICE_INFO, 80 B; public ABI §3).
#[repr(C)]
#[derive(
    Copy, Clone, Debug, Default, PartialEq, Eq, IntoBytes, FromBytes, KnownLayout, Immutable,
)]
pub struct DeviceInfoArg {
    /// Architecture and revision.
    pub basic: DeviceBasicInfo,
    /// Valid entries in `connected_devices`.
    pub connected_device_count: u32,
    /// Device ids this device is linked to.
    pub connected_devices: [u32; MAX_CONNECTED_DEVICES],
    _pad_44: u32,
    /// PCI BAR addresses.
    pub bar_address: [u64; 2],
    /// PCI BAR sizes.
    pub bar_size: [u64; 2],
}

/// `struct neuron_ioctl_device_driver_info` (DRIVER_INFO_GET, 24 B; public ABI §3).
#[repr(C)]
#[derive(
    Copy, Clone, Debug, Default, PartialEq, Eq, IntoBytes, FromBytes, KnownLayout, Immutable,
)]
pub struct DriverInfo {
    /// Architecture and revision.
    pub basic: DeviceBasicInfo,
    /// Structure version (0).
    pub version: u32,
    /// Structure size the driver filled.
    pub size: u32,
    /// `nrt_core::driver::feature` bits.
    pub feature_flags1: u64,
}

/// `struct neuron_ioctl_dump_mem_chunks` (DUMP_MEM_CHUNKS header, 24 B; public ABI §3).
///
/// Call once with `num_entries_in = 0` to learn the count (`num_entries_out`), then again with
/// room for that many [`MemChunkInfo`]s: the driver copies the entries only when they all fit.
/// When they do not, it still copies the header back but answers `EAGAIN`.
#[repr(C)]
#[derive(
    Copy, Clone, Debug, Default, PartialEq, Eq, IntoBytes, FromBytes, KnownLayout, Immutable,
)]
pub struct DumpMemChunks {
    /// In: the HBM channel to list.
    pub hbm_index: u32,
    /// In: capacity of `data`, in entries.
    pub num_entries_in: u32,
    /// Out: chunks the channel holds.
    pub num_entries_out: u32,
    _pad_12: u32,
    /// User address of a `MemChunkInfo` array.
    pub data: u64,
}

/// `struct neuron_ioctl_mem_chunk_info` (one DUMP_MEM_CHUNKS entry, 24 B; public ABI §3).
#[repr(C)]
#[derive(
    Copy, Clone, Debug, Default, PartialEq, Eq, IntoBytes, FromBytes, KnownLayout, Immutable,
)]
pub struct MemChunkInfo {
    /// Physical address of the chunk.
    pub pa: u64,
    /// Bytes.
    pub size: u64,
    /// Allocation category.
    pub mem_type: u32,
    _pad_20: u32,
}

impl MemAllocV2Mt {
    /// A request with the padding zeroed.
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        size: u64,
        align: u64,
        host_memory: u32,
        dram_channel: u32,
        dram_region: u32,
        nc_id: u32,
        mem_type: u32,
        mem_handle: u64,
    ) -> Self {
        Self {
            size,
            align,
            host_memory,
            dram_channel,
            dram_region,
            nc_id,
            mem_type,
            _pad_36: 0,
            mem_handle,
        }
    }
}

impl MemAllocV2Mt64 {
    /// A request with the padding zeroed.
    pub fn from_v2mt(a: &MemAllocV2Mt) -> Self {
        Self {
            v2mt: MemAllocV2Mt { _pad_36: 0, ..*a },
            pad: 0,
            _pad_52: 0,
        }
    }
}

impl MemAllocV2 {
    /// The V2 form of a V2MT request (drops the category).
    pub fn from_v2mt(a: &MemAllocV2Mt) -> Self {
        Self {
            size: a.size,
            align: a.align,
            host_memory: a.host_memory,
            dram_channel: a.dram_channel,
            dram_region: a.dram_region,
            nc_id: a.nc_id,
            mem_handle: a.mem_handle,
        }
    }

    /// The V2MT form of this request with category `mem_type` (the inverse of
    /// [`MemAllocV2::from_v2mt`]).
    pub fn to_v2mt(&self, mem_type: u32) -> MemAllocV2Mt {
        MemAllocV2Mt::new(
            self.size,
            self.align,
            self.host_memory,
            self.dram_channel,
            self.dram_region,
            self.nc_id,
            mem_type,
            self.mem_handle,
        )
    }
}

impl MemBufCopy64 {
    /// A copy request with the padding zeroed.
    pub fn new(mem_handle: u64, buffer: u64, size: u64, offset: u64, to_device: bool) -> Self {
        Self {
            mem_handle,
            buffer,
            size,
            offset,
            copy_to_mem_handle: to_device as u32,
            _pad_36: 0,
        }
    }
}

impl DumpMemChunks {
    /// A dump request with the padding zeroed.
    pub fn new(hbm_index: u32, num_entries_in: u32, data: u64) -> Self {
        Self {
            hbm_index,
            num_entries_in,
            num_entries_out: 0,
            _pad_12: 0,
            data,
        }
    }
}

impl MemChunkInfo {
    /// An entry with the padding zeroed.
    pub fn new(pa: u64, size: u64, mem_type: u32) -> Self {
        Self {
            pa,
            size,
            mem_type,
            _pad_20: 0,
        }
    }
}

/// Asserts at compile time each struct's size and its members' offsets (public ABI §3 "size"
/// column): `abi_layout!(Struct = size { member: offset, … })`.
macro_rules! abi_layout {
    ($($t:ident = $size:literal { $($f:ident: $off:literal),* $(,)? })+) => {
        const _: () = {
            $(
                assert!(size_of::<$t>() == $size);
                $( assert!(offset_of!($t, $f) == $off); )*
            )+
        };
    };
}

// Sizes and offsets, beside the structs.
abi_layout! {
    MemAlloc = 32 { host_memory: 8, nc_id: 20, mem_handle: 24 }
    MemAllocV2 = 40 {
        align: 8,
        host_memory: 16,
        dram_channel: 20,
        dram_region: 24,
        nc_id: 28,
        mem_handle: 32,
    }
    MemAllocV2Mt = 48 { mem_type: 32, mem_handle: 40 }
    MemAllocV2Mt64 = 56 { v2mt: 0, pad: 48 }
    MemFree = 8 {}
    MemBufCopy64 = 40 { buffer: 8, size: 16, offset: 24, copy_to_mem_handle: 32 }
    MemGetExtendedInfo = 48 {
        version: 8,
        host_memory: 12,
        mmap_offset: 16,
        pa: 24,
        pid: 32,
        size: 40,
    }
    DeviceBasicInfo = 8 {}
    DeviceInfoArg = 80 {
        connected_device_count: 8,
        connected_devices: 12,
        bar_address: 48,
        bar_size: 64,
    }
    DriverInfo = 24 { version: 8, size: 12, feature_flags1: 16 }
    DumpMemChunks = 24 { num_entries_out: 8, data: 16 }
    MemChunkInfo = 24 { size: 8, mem_type: 16 }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Each command against the public table's value (public ABI §3, "cmd" column).
    #[test]
    fn command_numbers_match_the_public_table() {
        assert_eq!(NEURON_IOCTL_MEM_ALLOC, 0x8008_4e15);
        assert_eq!(NEURON_IOCTL_MEM_ALLOC_V2, 0x8008_4e66);
        assert_eq!(NEURON_IOCTL_MEM_ALLOC_V2MT, 0x8030_4e66);
        assert_eq!(NEURON_IOCTL_MEM_ALLOC_V2MT64, 0x8038_4e66);
        assert_eq!(NEURON_IOCTL_MEM_FREE, 0x8008_4e16);
        assert_eq!(NEURON_IOCTL_MEM_BUF_COPY64, 0xc028_4e18);
        assert_eq!(NEURON_IOCTL_MEM_GET_EXTENDED_INFO, 0x8008_4e1d);
        assert_eq!(NEURON_IOCTL_DEVICE_BASIC_INFO, 0x4008_4e64);
        assert_eq!(NEURON_IOCTL_DEVICE_INFO, 0x8008_4e03);
        assert_eq!(NEURON_IOCTL_DRIVER_INFO_GET, 0x8018_4e6e);
        assert_eq!(NEURON_IOCTL_DUMP_MEM_CHUNKS, 0x8008_4e74);
    }

    #[test]
    fn command_fields_decode() {
        assert_eq!(ioc_nr(NEURON_IOCTL_MEM_ALLOC_V2MT64), 102);
        assert_eq!(ioc_size(NEURON_IOCTL_MEM_ALLOC_V2MT64), 56);
        assert_eq!(ioc_size(NEURON_IOCTL_MEM_ALLOC_V2), 8);
        assert_eq!(command_name(NEURON_IOCTL_MEM_FREE), "MEM_FREE");
        assert_eq!(command_name(0x1234), "?");
        // The versions of one number differ only in the encoded size.
        let v: Vec<u64> = COMMANDS.iter().map(|c| c.1).collect();
        for (i, a) in v.iter().enumerate() {
            assert!(!v[i + 1..].contains(a), "duplicate command {a:#x}");
        }
    }

    #[test]
    fn structs_serialise_without_padding_surprises() {
        let a = MemAllocV2Mt64::from_v2mt(&MemAllocV2Mt::new(1 << 33, 4096, 0, 3, 0, 7, 9, 0xdead));
        let b = a.as_bytes();
        assert_eq!(b.len(), 56);
        assert_eq!(u64::from_ne_bytes(b[0..8].try_into().unwrap()), 1 << 33);
        assert_eq!(u32::from_ne_bytes(b[20..24].try_into().unwrap()), 3);
        assert_eq!(u32::from_ne_bytes(b[32..36].try_into().unwrap()), 9);
        assert_eq!(u64::from_ne_bytes(b[40..48].try_into().unwrap()), 0xdead);
        assert!(b[36..40].iter().chain(&b[48..]).all(|&x| x == 0));
        let back = MemAllocV2Mt64::read_from_bytes(b).unwrap();
        assert_eq!(back, a);
        let c = MemBufCopy64::new(1, 2, 3, 4, true);
        assert_eq!(c.as_bytes()[32], 1);
    }
}
