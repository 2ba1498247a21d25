//! Bring-up to copy: a runtime over the simulated device, a model, a tensor written and read
//! back, the ledger, and `close` back to 0 bytes, with no `unsafe`. The state is boxed (feature
//! `alloc`); the README shows it as a zeroed `static`. `cargo run -p nrt-core --example bring_up`
#![forbid(unsafe_code)]

use nrt_core::abi::dma_mem_location_t::TONGA_DRAM;
use nrt_core::abi::dma_mem_usage_type_t::DMA_MEM_USAGE_TYPE_WEIGHT as WEIGHT;
use nrt_core::model::{ModelAlloc, ModelSpec};
use nrt_core::sim::{Preset, SimConfig, SimDevice};
use nrt_core::tensor::{ArenaHostMem, Placement};
use nrt_core::CoreSel;
use nrt_core::{CoreState, Error, InitOptions, Nrt};

/// Host bytes for VIRTUAL tensors, heap-free (the simulator keeps no device bytes unless given
/// a backing): 64 KiB in at most 16 blocks.
static HOST: ArenaHostMem<{ 64 << 10 }, 16> = ArenaHostMem::new();
static WEIGHTS: [ModelAlloc<'static>; 1] = [ModelAlloc {
    usage: WEIGHT,
    location: TONGA_DRAM,
    size: 8 << 20,
    align: 0,
    hint: "demo.weights",
}];

fn main() -> Result<(), Error> {
    let state = CoreState::new_boxed();
    let sim = SimDevice::new_boxed(&SimConfig::new(Preset::Trn2, 1)).map_err(Error::Driver)?;
    let nrt = Nrt::with_host(&state, &*sim, &HOST); // VIRTUAL tensors use HOST
    nrt.init(&InitOptions::default())?;
    let spec = ModelSpec {
        name: "demo",
        subgraphs: 1,
        allocations: &WEIGHTS,
        ..Default::default()
    };
    let core0 = nrt.logical_core(0)?;
    let model = nrt.models().load(core0, &spec)?;

    let t = nrt
        .tensors()
        .allocate(Placement::Virtual, CoreSel::Any, 4096, Some("x"))?;
    nrt.tensors().write(t, b"hello", 0)?;
    let mut back = [0u8; 5];
    nrt.tensors().read(t, &mut back, 0)?;
    assert_eq!(&back, b"hello");
    nrt.tensors().free(t)?;

    let core = nrt.physical_cores(core0)?[0];
    let booked = nrt.ledger().device(core, WEIGHT);
    println!(
        "model h{}: {booked} B of weights booked on logical core 0",
        model.h_model().id
    );
    nrt.close()?; // unloads the model too: every byte goes back
    assert_eq!(nrt.driver_pool_bytes_in_use()?, 0);
    println!("closed: the driver holds 0 B");
    Ok(())
}
