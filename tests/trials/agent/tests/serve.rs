//! Runs the std host agent, and what it must see.

use nrt_core::Error;
use nrt_trial_agent::serve;

#[test]
fn agent_serves_every_core_and_gives_every_byte_back() {
    let r = serve(2, 200).unwrap();
    assert_eq!(r.cores, 2);
    assert_eq!(r.round_trips, vec![200, 200]);
    // The model's 4 MiB of weights are on logical core 0 while it is loaded (plus the
    // runtime's own bookings for it), and on the device's totals.
    assert!(r.core0_loaded.bytes_used >= 4 << 20, "{r:?}");
    assert!(
        r.device0_loaded.device_bytes >= r.core0_loaded.bytes_used,
        "{r:?}"
    );
    assert!(r.core0_loaded.bytes_limit > 0, "{r:?}");
    // Unloading the model and freeing every tensor returns the core to 0; its peak remembers.
    assert_eq!(r.core0_idle.bytes_used, 0, "{r:?}");
    assert!(
        r.core0_idle.bytes_peak >= r.core0_loaded.bytes_used,
        "{r:?}"
    );
    // After close the statistics need a runtime again (docs/STATES.md).
    assert_eq!(r.stats_after_close, Err(Error::Closed));
}
