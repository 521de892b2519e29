//! The runtime a blocking client and everything made from it share, and the
//! refusal to block inside someone else's runtime.

use std::future::Future;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::error::{Error, Result};

/// The runtime a blocking client and its handles and guards share: one
/// worker thread, where the watchdog renews and dropped guards release
/// while the caller's thread blocks or computes.
#[derive(Clone)]
pub(crate) struct Rt(Arc<RtInner>);

struct RtInner(Option<tokio::runtime::Runtime>);

/// How long a dropped client's runtime may keep running to finish the
/// releases of guards dropped just before it.
const SHUTDOWN_GRACE: Duration = Duration::from_secs(5);

impl Drop for RtInner {
    fn drop(&mut self) {
        let Some(rt) = self.0.take() else { return };
        // The client's tasks end once the client and its guards are gone,
        // after the background releases queued before. Let them finish, on a
        // thread of its own: Drop never blocks.
        let wind_down = move || {
            let deadline = Instant::now() + SHUTDOWN_GRACE;
            while rt.metrics().num_alive_tasks() > 0 && Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(5));
            }
            rt.shutdown_background();
        };
        if let Err(e) = std::thread::Builder::new()
            .name("leasehold-blocking-shutdown".into())
            .spawn(wind_down)
        {
            tracing::warn!(error = %e, "cannot start the shutdown thread; leases still held end by their TTL");
        }
    }
}

impl Rt {
    pub(crate) fn start() -> Result<Rt> {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .thread_name("leasehold-blocking")
            .enable_all()
            .build()
            .map_err(|e| {
                Error::Unsupported(format!(
                    "cannot start the runtime thread of the blocking client: {e}"
                ))
            })?;
        Ok(Rt(Arc::new(RtInner(Some(rt)))))
    }

    /// Runs `f` to completion on the client's runtime, blocking this thread.
    #[track_caller]
    pub(crate) fn block_on<F: Future>(&self, f: F) -> F::Output {
        refuse_inside_async();
        match &self.0.0 {
            Some(rt) => rt.block_on(f),
            None => unreachable!("the runtime lives as long as its handles"),
        }
    }
}

/// Panics inside an async runtime, where blocking would stall the runtime's
/// thread (and Tokio would panic anyway, less clearly).
#[track_caller]
pub(crate) fn refuse_inside_async() {
    if tokio::runtime::Handle::try_current().is_ok() {
        panic!(
            "leasehold::blocking was called from inside an async runtime, where blocking \
             would stall the runtime's thread: use the async API (leasehold::Client) there"
        );
    }
}
