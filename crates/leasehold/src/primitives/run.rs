//! `run`: a critical section that stops when the lease does. The one
//! implementation behind every primitive's `run` (and `run_read` /
//! `run_write`), async and blocking: given a held lease and the work, it
//! races the work against the lease's [`lost`](Held::lost) signal.

use std::future::Future;

use crate::error::Result;
use crate::primitives::guard::Held;

/// Runs `work(fence)` while `held` lasts, then releases it.
///
/// The work is polled on the caller's task (nothing is spawned, so it
/// need not be `Send` or `'static`). If the lease is lost first, the work is
/// dropped before anything else happens, the lease is given back in the
/// background (owner-checked: a lease another owner took is left alone)
/// and the error is [`Error::Lost`](crate::Error::Lost).
pub(crate) async fn run<F, Fut, T>(held: Held, work: F) -> Result<T>
where
    F: FnOnce(u64) -> Fut,
    Fut: Future<Output = T>,
{
    let work = work(held.fence());
    let out = {
        let work = std::pin::pin!(work);
        tokio::select! {
            // A loss and the end of the work seen at once count as a loss:
            // the work may have run past the lease.
            biased;
            () = held.lost() => None,
            out = work => Some(out),
        }
        // The work is dropped here, before the release is even started.
    };
    let Some(out) = out else {
        let lost = held.lost_error();
        drop(held); // hands the release to the background
        return Err(lost);
    };
    match held.release().await {
        Ok(()) => Ok(out),
        // The lease was gone when the release came: the work may have
        // overlapped another holder at its very end.
        Err(lost @ crate::error::Error::Lost { .. }) => Err(lost),
        // The work finished inside the lease (by this client's clock,
        // which errs short); only the release failed. It is retried in the
        // background and the lease ends by its TTL at the latest, so the
        // work's output is what the caller needs.
        Err(e) => {
            tracing::warn!(error = %e, "release after run failed; retried in the background");
            Ok(out)
        }
    }
}

/// A `run` method on a handle: takes a guard with `$acquire` (which waits
/// up to the handle's `wait`) and hands it to [`run`]. `$what` names what
/// is held, `$make` is example code yielding the handle.
macro_rules! run_api {
    ($run:ident, $acquire:ident, $what:literal, $make:literal) => {
        #[doc = concat!("Takes the ", $what, " (as [`", stringify!($acquire), "`](Self::", stringify!($acquire), "), waiting up to the handle's `wait`), runs")]
        /// `work(fence)` under it, releases it and returns the work's output.
        /// If the lease is lost before the work finishes, the work is
        /// dropped at once and the call returns [`Error::Lost`](crate::Error::Lost).
        ///
        /// See [`Lock::run`](crate::Lock::run) for what "dropped" means for
        /// work already sent elsewhere, and why the fence still matters.
        ///
        /// ```no_run
        /// # async fn run(client: leasehold::Client) -> Result<(), leasehold::Error> {
        /// # async fn rebuild(fence: u64) -> u64 { fence }
        #[doc = concat!("let out = ", $make, ".", stringify!($run), "(|fence| async move { rebuild(fence).await }).await?;")]
        /// # Ok(()) }
        /// ```
        ///
        /// # Errors
        ///
        #[doc = concat!("As [`", stringify!($acquire), "`](Self::", stringify!($acquire), ") before the work starts; then")]
        /// [`Error::Lost`](crate::Error::Lost) when the lease was lost while
        /// the work ran (or was found gone by the release). A release that
        /// fails for another reason (the connection) is retried in the
        /// background and the output is returned: the work finished inside
        /// the lease.
        ///
        /// # Cancel safety
        ///
        /// Dropping the future drops the work and releases in the background.
        pub async fn $run<F, Fut, T>(&self, work: F) -> crate::error::Result<T>
        where
            F: FnOnce(u64) -> Fut,
            Fut: std::future::Future<Output = T>,
        {
            crate::primitives::run::run(self.$acquire().await?.held, work).await
        }
    };
}

pub(crate) use run_api;
