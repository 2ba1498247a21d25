//! The std shim's bounded waits (`nrt_core::sync`): a wait hook that yields the thread and
//! gives up after a time limit, and a thread token, so the core refuses at once a call that
//! would wait for its own thread.

use std::cell::Cell;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Once;
use std::time::{Duration, Instant};

use nrt_core::sync::{WaitFor, WaitStep};

/// How long a wait of the core lasts before it gives up with `Error::Timeout`, unless
/// [`set_wait_limit`] says otherwise: longer than any execution or teardown of a healthy
/// runtime, short enough that a leaked guard shows as an error rather than a hung process.
pub const DEFAULT_WAIT_LIMIT: Duration = Duration::from_secs(30);

static LIMIT_US: AtomicU64 = AtomicU64::new(DEFAULT_WAIT_LIMIT.as_micros() as u64);

thread_local! {
    /// When the calling thread's current wait began.
    static STARTED: Cell<Option<Instant>> = const { Cell::new(None) };
    /// A byte whose address names the thread (the core's thread token).
    static TOKEN: u8 = const { 0 };
}

/// Sets how long a wait of the core lasts before it gives up (every runtime of the process).
pub fn set_wait_limit(limit: Duration) {
    LIMIT_US.store(
        u64::try_from(limit.as_micros()).unwrap_or(u64::MAX),
        Ordering::Relaxed,
    );
}

/// The wait limit now in force.
pub fn wait_limit() -> Duration {
    Duration::from_micros(LIMIT_US.load(Ordering::Relaxed))
}

/// The wait hook: yields, and gives up once the wait has lasted [`wait_limit`].
fn wait(_what: WaitFor, looks: u32) -> WaitStep {
    let now = Instant::now();
    let started = STARTED.with(|s| {
        if looks == 0 || s.get().is_none() {
            s.set(Some(now));
        }
        s.get().unwrap_or(now)
    });
    if now.duration_since(started) >= wait_limit() {
        return WaitStep::GiveUp;
    }
    if looks < 1_000 {
        std::thread::yield_now();
    } else {
        // A long wait (an execution holding the core) does not burn a CPU.
        std::thread::sleep(Duration::from_micros(50));
    }
    WaitStep::Wait
}

/// The calling thread's token: the address of a thread-local (never 0, unique among live
/// threads).
fn token() -> usize {
    TOKEN.with(|t| t as *const u8 as usize)
}

/// Installs the shim's relax hook, wait hook and thread token in the core, once per process
/// (every `HostRuntime` constructor calls it). An integrator's own wait hook installed later
/// replaces this one (`nrt_core::sync::set_wait_hook`).
pub fn install_waits() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        nrt_core::sync::set_relax_hook(std::thread::yield_now);
        nrt_core::sync::set_wait_hook(Some(wait));
        nrt_core::sync::set_thread_token_hook(token);
    });
}
