//! The `heap` variant: a `#[global_allocator]` and a second, independent
//! runtime made with nrt-core's `alloc` constructors.
//!
//! `linked_list_allocator`'s [`LockedHeap`] (a spin lock; no OS, no std) manages [`REGION`], a
//! zero-initialised `.bss` array just large enough for one [`CoreState`] with its arena storage
//! and one simulated device of the image's profile. While the static runtime of the main
//! scenario is still live, [`Run::second_instance`] brings up a runtime from
//! `CoreState::with_capacity` and `SimDevice::new_boxed_sized`, and checks:
//!
//! - each runtime refuses the other's tensor handle (`InvalidHandle`), and neither books the
//!   other's bytes;
//! - `close` leaves the boxed runtime's driver and ledger empty;
//! - dropping both boxes gives the heap back whole.
//!
//! `Box::new_zeroed` on this heap writes its zeroes (the allocator cannot know its pages are
//! still untouched), so this variant's peak RSS includes the two blocks; `cargo xtask firmware
//! --heap` budgets the region's size on top of the default image's target.

use core::fmt::Write;
use core::mem::size_of;

use linked_list_allocator::LockedHeap;
use nrt_core::abi::dma_mem_usage_type_t::DMA_MEM_USAGE_TYPE_TENSOR as TENSOR;
use nrt_core::cell::ZeroedCell;
use nrt_core::sim::{Preset, SimConfig};
use nrt_core::tensor::Placement;
use nrt_core::{CoreState, Error, InitOptions, LogicalCore, Nrt};

use crate::out::Mib;
use crate::{Run, Sim, CAPS, MIB};

/// Bytes of the heap: one `CoreState`, one `SimDevice`, and room for the allocator's hole
/// headers and the blocks' alignment.
const REGION_BYTES: usize =
    CoreState::BYTES + CoreState::storage_bytes(&CAPS) + size_of::<Sim>() + (64 << 10);

/// The memory the heap manages (`.bss`: costs nothing until an allocation touches it), taken
/// once (no `static mut`).
static REGION: ZeroedCell<[u8; REGION_BYTES]> = ZeroedCell::new();

/// The image's global allocator; empty until [`init`] hands it [`REGION`].
#[global_allocator]
static HEAP: LockedHeap = LockedHeap::empty();

/// Gives the heap its region. Called once, first thing in `run`, before anything allocates.
pub fn init() {
    // A second call finds the region taken and leaves the heap as the first one set it.
    let Some(region) = REGION.take() else {
        return;
    };
    // SAFETY: `region` is the only reference to REGION ever made (`ZeroedCell::take` hands it
    // out once) and lives for the rest of the process, so the heap may own those bytes for
    // good; they are valid for writes of `REGION_BYTES`, and the heap was empty (this is the
    // first and only `init`: the cell was untaken).
    unsafe { HEAP.lock().init(region.as_mut_ptr(), REGION_BYTES) };
}

impl Run {
    /// A second runtime on the heap beside the static one (see the module docs).
    pub(crate) fn second_instance(&mut self) -> Result<(), Error> {
        let ours = self.nrt;
        let free_before = HEAP.lock().free();
        let state = CoreState::with_capacity(&CAPS)?;
        let sim = Sim::new_boxed_sized(&SimConfig::new(Preset::Trn2, 1)).map_err(Error::Driver)?;
        let theirs = Nrt::new(&state, &*sim);
        theirs.init(&InitOptions::default())?;

        let ours_ledger = ours.ledger().snapshot(0);
        let t = theirs.tensors().allocate(
            Placement::Device,
            LogicalCore::FIRST.into(),
            4 * MIB,
            Some("boxed"),
        )?;
        let pc = theirs.physical_cores(LogicalCore::FIRST)?[0];
        let booked = theirs.ledger().device(pc, TENSOR);
        self.check(
            booked >= 4 * MIB && ours.ledger().snapshot(0) == ours_ledger,
            format_args!(
                "boxed runtime: {booked} B booked on its own ledger; static ledger unchanged: {}",
                ours.ledger().snapshot(0) == ours_ledger
            ),
        );
        let mine = ours.tensors().allocate_empty(Some("static"))?;
        let refused = (ours.tensors().size(t), theirs.tensors().size(mine));
        self.check(
            matches!(
                refused,
                (Err(Error::InvalidHandle(_)), Err(Error::InvalidHandle(_)))
            ),
            format_args!("handles crossed between the runtimes: {refused:?}"),
        );
        ours.tensors().free(mine)?;

        // `close` reclaims the tensor left live.
        theirs.close()?;
        let left = theirs.driver_pool_bytes_in_use()?;
        let nrt_core::LedgerSnapshot {
            device: dev_rows,
            host: host_rows,
        } = theirs.ledger().snapshot(0);
        let ledger_zero = dev_rows.iter().chain(&host_rows).flatten().all(|b| *b == 0);
        self.check(
            left == 0 && ledger_zero,
            format_args!("boxed runtime after close: driver {left} B, ledger zero: {ledger_zero}"),
        );
        drop(state);
        drop(sim);
        let free_after = HEAP.lock().free();
        self.check(
            free_after == free_before,
            format_args!("heap {free_after} B free after the boxes went, {free_before} B before"),
        );
        let _ = writeln!(
            self.out,
            "  heap          second runtime from new_boxed on a {} LockedHeap: handles refused \
             across, close to 0 B, heap whole again",
            Mib(REGION_BYTES as u64)
        );
        Ok(())
    }
}
