//! The core's clock: the monotonic clock, `std::time::Instant`. In this
//! crate's own unit tests it is tokio's, which a test can pause and advance,
//! so the orderings of the acquire loop and the watchdog are checked without
//! timing luck. (Never tokio's in a build a user links: a user's paused test
//! runtime would then stop the clock that lease validity is measured on,
//! while Redis keeps expiring keys in real time.) It also holds the server
//! clock's tick the lease arithmetic covers.

use std::time::Duration;

#[cfg(not(any(test, leasehold_sim)))]
pub(crate) use std::time::Instant;
// The simulator (`--cfg leasehold_sim`, never a user's build) runs on a paused clock too.
#[cfg(any(test, leasehold_sim))]
pub(crate) use tokio::time::Instant;

/// Waits until `at`.
pub(crate) async fn sleep_until(at: Instant) {
    tokio::time::sleep_until(tokio_instant(at)).await;
}

/// Runs `future` until `at`; `None` if it did not finish by then.
pub(crate) async fn timeout_at<F: std::future::Future>(
    at: Instant,
    future: F,
) -> Option<F::Output> {
    tokio::time::timeout_at(tokio_instant(at), future)
        .await
        .ok()
}

#[cfg(not(any(test, leasehold_sim)))]
fn tokio_instant(at: Instant) -> tokio::time::Instant {
    tokio::time::Instant::from_std(at)
}

#[cfg(any(test, leasehold_sim))]
fn tokio_instant(at: Instant) -> tokio::time::Instant {
    at
}

/// The coarsest server clock tick the lease arithmetic covers. Redis reads
/// its clock at ticks (1 ms on some hosts; a coarse clock source's 4 to
/// 15.625 ms in VMs and on Windows hosts) and dates an expiry from the
/// last tick, up to one tick before the command ran: a lease set for
/// `ttl` can end up to a tick sooner than `ttl` after the command reached
/// the server. The server is asked for a tick more than the holder counts
/// (`lease::server_ttl`), so the holder's view still ends first, also for the
/// shortest TTL allowed (10 ms), which a validity shortened by a tick would
/// leave with nothing. The cost: a lease whose holder stopped renewing it
/// keeps the lock up to this much longer than its TTL.
pub(crate) const SERVER_TICK: Duration = Duration::from_millis(16);
