//! Runs what an integrator's firmware does, and what it must see.

use nrt_trial_firmware::{run, Report, TrialError, WEIGHT_BYTES};

#[test]
fn static_state_bring_up_returns_every_byte_and_runs_once() {
    let mut log = String::new();
    let r: Report = run(&mut log).unwrap_or_else(|e| panic!("{e:?}\n{log}"));
    assert_eq!(&r.read_back, b"hello", "{log}");
    assert_eq!(r.weights_booked, WEIGHT_BYTES, "{log}");
    assert!(r.core_total >= r.weights_booked, "{log}");
    assert_eq!(r.driver_bytes_after_close, 0, "{log}");
    assert_eq!(r.core_total_after_close, 0, "{log}");
    assert!(log.contains("closed: the driver holds 0 B"), "{log}");
    // The statics are taken once: a second bring-up is refused, not a second `&mut`.
    assert_eq!(run(&mut String::new()), Err(TrialError::AlreadyRan));
}
