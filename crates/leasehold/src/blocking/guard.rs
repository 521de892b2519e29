//! [`Guard`]: the one blocking guard, wrapped around any async guard.
//!
//! Each blocking guard type ([`LockGuard`](super::LockGuard),
//! [`Permit`](super::Permit), ...) is this wrapper around its async twin;
//! what all of them share is here, what one has alone is in its
//! primitive's file.

use std::future::Future;
use std::time::Duration;

use super::runtime::Rt;
use super::twins::{AsyncGuard, AsyncLease};
use crate::error::Result;

/// A held lease of any primitive, blocking where its async twin `G` awaits:
/// [`LockGuard`](super::LockGuard) is `Guard<leasehold::LockGuard>`, and so
/// on for each guard. The lease is renewed on the client's runtime thread
/// while the guard lives.
///
/// Dropping it stops renewal and releases in the background, as the async
/// guard does: never blocking, never panicking, even inside a runtime.
///
/// # Panics
///
/// The methods that talk to Redis (`lost`, `extend`, `release` and those of
/// one guard alone) panic inside an async runtime: use the async guard
/// there.
#[must_use = "dropping the guard releases at once"]
pub struct Guard<G> {
    // Declared before `rt`, so dropped first: the async guard hands its
    // release to the runtime, which this guard keeps alive until then.
    pub(super) inner: G,
    pub(super) rt: Rt,
}

impl<G: std::fmt::Debug> std::fmt::Debug for Guard<G> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.inner.fmt(f)
    }
}

impl<G> Guard<G> {
    /// Runs the async guard's `call` to its end on the client's runtime,
    /// giving back the runtime too (for a guard made from the answer).
    #[track_caller]
    pub(super) fn finish<T, Fut>(self, call: impl FnOnce(G) -> Fut) -> (T, Rt)
    where
        Fut: Future<Output = T>,
    {
        let Guard { inner, rt } = self;
        (rt.block_on(call(inner)), rt)
    }
}

impl<G: AsyncGuard> Guard<G> {
    /// True once the lease may have expired or was taken by another owner;
    /// see [`crate::LockGuard::is_lost`].
    pub fn is_lost(&self) -> bool {
        self.inner.is_lost()
    }

    /// Why the lease was lost (of a `MultiLockGuard`, the first lost
    /// name's); `None` while it is not. See
    /// [`crate::LockGuard::lost_reason`].
    pub fn lost_reason(&self) -> Option<crate::telemetry::LostReason> {
        self.inner.lost_reason()
    }

    /// How long the lease is certain to last from now, by this client's
    /// clock; zero once it is lost. See [`crate::LockGuard::valid_for`].
    pub fn valid_for(&self) -> Duration {
        self.inner.valid_for()
    }

    /// Blocks until the lease is lost; the blocking form of
    /// [`crate::LockGuard::lost`]. Call it on a thread that watches the lease.
    #[track_caller]
    pub fn lost(&self) {
        self.rt.block_on(self.inner.lost());
    }

    /// The blocking form of [`crate::LockGuard::extend`].
    ///
    /// # Errors
    ///
    /// As the async guard's `extend`.
    #[track_caller]
    pub fn extend(&self, ttl: Duration) -> Result<()> {
        self.rt.block_on(self.inner.extend(ttl))
    }

    /// The blocking form of [`crate::LockGuard::release`].
    ///
    /// # Errors
    ///
    /// As the async guard's `release`.
    #[track_caller]
    pub fn release(self) -> Result<()> {
        self.finish(G::release).0
    }
}

impl<K: crate::hold::Kind> Guard<crate::Guard<K>> {
    /// The same guard with its kind forgotten; see [`crate::Guard::into_any`].
    pub fn into_any(self) -> Guard<crate::Guard> {
        let Guard { inner, rt } = self;
        Guard {
            inner: inner.into_any(),
            rt,
        }
    }
}

impl<G: AsyncLease> Guard<G> {
    /// The fencing token; see [`crate::LockGuard::fence`].
    pub fn fence(&self) -> u64 {
        self.inner.fence()
    }

    /// This holder's owner token (a capability: do not log it whole); see
    /// [`crate::LockGuard::token`].
    pub fn token(&self) -> &str {
        self.inner.token()
    }

    /// The lock's name.
    pub fn name(&self) -> &str {
        self.inner.name()
    }
}
