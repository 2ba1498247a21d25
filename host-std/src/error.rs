//! The host crate's error type (docs/STYLE.md #8): `thiserror`, with the errno that caused a failure
//! kept as its `#[source]`.
//!
//! The [`nrt_core::driver::Driver`] trait itself returns raw errno values, as the kernel does;
//! this type is for what the host layer does around it (discovering devices, reserving host
//! memory for the simulated device).
#![deny(unsafe_code)]

use std::path::PathBuf;

pub use nix::errno::Errno;

/// What to tell a person who has no Neuron hardware.
pub const SIM_HINT: &str = "NRT_DMEM_DEVICE=sim:trn2";

/// Result alias of the host crate.
pub type Result<T, E = Error> = core::result::Result<T, E>;

/// Everything the host layer can fail at.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// No `/dev/neuron0`: no hardware, or the `neuron` kernel module is not loaded.
    #[error(
        "no Neuron device: cannot open {path} (is this a Trainium/Inferentia instance with the \
         neuron driver loaded?); to run without hardware, use the simulated device: {SIM_HINT}"
    )]
    NoDevice {
        /// The node that is missing (`/dev/neuron0`).
        path: PathBuf,
        /// Why it could not be opened (`ENOENT`, `ENODEV`, `ENXIO`).
        #[source]
        source: Errno,
    },
    /// A device node exists but could not be opened (permissions, busy).
    #[error("cannot open Neuron device {path}")]
    Open {
        /// The node.
        path: PathBuf,
        /// The errno of `open(2)`.
        #[source]
        source: Errno,
    },
    /// A bring-up ioctl failed (public ABI §3).
    #[error("{path}: ioctl {name} ({cmd:#010x}) failed")]
    Ioctl {
        /// The node.
        path: PathBuf,
        /// The command's name in the public table.
        name: &'static str,
        /// The command number.
        cmd: u64,
        /// The errno the driver returned.
        #[source]
        source: Errno,
    },
    /// DEVICE_BASIC_INFO reported an architecture this runtime does not drive (public ABI §4).
    #[error(
        "{path}: unsupported Neuron architecture {arch} (supported: 2 = v2 trn1/inf2, \
         3 = v3 trn2, 4 = v4 trn3)"
    )]
    UnsupportedArch {
        /// The node.
        path: PathBuf,
        /// `DEVICE_BASIC_INFO.architecture`.
        arch: u32,
    },
    /// `mmap` refused to reserve host memory for the simulated device.
    #[error("cannot reserve {len} bytes of host address space for simulated device memory")]
    Reserve {
        /// Bytes asked for.
        len: u64,
        /// The errno of `mmap(2)`.
        #[source]
        source: Errno,
    },
    /// The simulated device refused its configuration or backing (`nrt_core::sim`).
    #[error("simulated device: {what}")]
    Sim {
        /// What was being done.
        what: &'static str,
        /// The errno the simulator returned.
        #[source]
        source: Errno,
    },
    /// A shared simulated device refused this process (docs/SHARED_DEVICE.md): 16 processes,
    /// a core another process holds, permission, another layout version, a corrupted file.
    #[error(transparent)]
    Shared(#[from] crate::shared::SharedError),
}

/// The core's [`nrt_core::driver::Errno`] of a nix errno: the same Linux number, the type the
/// [`nrt_core::driver::Driver`] trait returns.
pub(crate) fn drv(e: Errno) -> nrt_core::driver::Errno {
    nrt_core::driver::Errno::new(e as i32)
}

/// The nix errno of a core [`nrt_core::driver::Errno`] (the host error's `#[source]`).
pub(crate) fn nix_errno(e: nrt_core::driver::Errno) -> Errno {
    Errno::from_raw(e.raw())
}

impl Error {
    /// The errno behind this error, when there is one.
    pub fn errno(&self) -> Option<Errno> {
        match self {
            Error::NoDevice { source, .. }
            | Error::Open { source, .. }
            | Error::Ioctl { source, .. }
            | Error::Reserve { source, .. }
            | Error::Sim { source, .. } => Some(*source),
            Error::UnsupportedArch { .. } => None,
            Error::Shared(e) => Some(Errno::from_raw(e.errno.raw())),
        }
    }
}
