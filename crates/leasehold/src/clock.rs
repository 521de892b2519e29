//! The core's clock: the monotonic clock, `std::time::Instant`. In this
//! crate's own unit tests it is tokio's, which a test can pause and advance,
//! so the orderings of the acquire loop and the watchdog are checked without
//! timing luck. (Never tokio's in a build a user links: a user's paused test
//! runtime would then stop the clock that lease validity is measured on,
//! while Redis keeps expiring keys in real time.)

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
