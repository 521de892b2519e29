//! Timestamps every process on the machine agrees on.

use nix::time::{ClockId, clock_gettime};

/// Microseconds on `CLOCK_MONOTONIC`.
///
/// The same clock in every process of the machine (unlike `Instant`, whose
/// values cannot leave the process), and never set back like the wall clock,
/// so the checker can order events logged by different worker processes.
///
/// # Panics
///
/// If the kernel refuses `clock_gettime(CLOCK_MONOTONIC)`, which Linux never
/// does.
pub fn now_us() -> u64 {
    let ts = clock_gettime(ClockId::CLOCK_MONOTONIC).expect("CLOCK_MONOTONIC is always readable");
    let secs = u64::try_from(ts.tv_sec()).expect("monotonic seconds are never negative");
    let nanos = u64::try_from(ts.tv_nsec()).expect("nanoseconds are never negative");
    secs * 1_000_000 + nanos / 1_000
}
