//! The SBUF carveout a NEFF reserves (spec §8) and `kbl_model_add`'s EVTACCEL checks of it.

use crate::abi::*;
use crate::error::{Error, Result};

/// The SBUF carveout a NEFF reserves (spec §8).
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct SbufCarveout {
    /// Raw `kbin_sb_carveout_type_t`.
    pub ty: u32,
    /// First partition.
    pub partition_start: u64,
    /// Partitions.
    pub partition_count: u64,
    /// SB partition byte offset.
    pub offset: u64,
    /// Size.
    pub size: u64,
}

impl SbufCarveout {
    /// Checks the carveout against `kbl_model_add`'s EVTACCEL geometry (spec §8), as a
    /// CAYMAN load does before anything is allocated.
    pub(super) fn check(&self) -> Result<()> {
        if self.ty != kbin_sb_carveout_type_t::KBIN_SB_CARVEOUT_TYPE_EVTACCEL as u32 {
            return Err(Error::BadCarveout("type must be EVTACCEL (1)"));
        }
        if self.partition_start != constants::EVTACCEL_PARTITION_START {
            return Err(Error::BadCarveout("partition start must be 0"));
        }
        if self.partition_count != constants::EVTACCEL_PARTITION_COUNT {
            return Err(Error::BadCarveout("partition count must be 128"));
        }
        if self.offset != constants::EVTACCEL_PARTITION_BYTE_OFFSET {
            return Err(Error::BadCarveout(
                "SB partition byte offset must be 0x37ff8",
            ));
        }
        if self.size != constants::EVTACCEL_SIZE {
            return Err(Error::BadCarveout("size must be 8"));
        }
        Ok(())
    }
}
