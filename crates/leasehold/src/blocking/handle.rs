//! [`Handle`]: the one blocking handle, wrapped around any async handle.
//!
//! Each blocking handle type ([`Lock`](super::Lock),
//! [`Semaphore`](super::Semaphore), ...) is this wrapper around its async
//! twin. The methods several of them share are here, once, each for the
//! async handles that have it (a sealed trait per group); what one has
//! alone is in its primitive's file.

use std::future::Future;
use std::time::Duration;

use super::guard::Guard;
use super::runtime::Rt;
use super::twins::{Acquire, AtLeast, Exclusive, Named, Owned, Settings};
use crate::error::Result;

/// A handle of any primitive, blocking where its async twin `H` awaits:
/// [`Lock`](super::Lock) is `Handle<leasehold::Lock>`, and so on for each
/// handle. Made by the blocking [`Client`](super::Client).
///
/// Cheap to clone; holds no lease itself.
///
/// # Panics
///
/// The methods that talk to Redis panic inside an async runtime: use the
/// async handle there.
#[derive(Clone)]
pub struct Handle<H> {
    pub(super) inner: H,
    pub(super) rt: Rt,
}

impl<H: std::fmt::Debug> std::fmt::Debug for Handle<H> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let twin = std::any::type_name::<H>().rsplit("::").next();
        f.debug_tuple(&format!("blocking::{}", twin.unwrap_or("Handle")))
            .field(&self.inner)
            .finish()
    }
}

impl<H> Handle<H> {
    /// The same handle with an option of the async one changed by `set`.
    pub(super) fn map(self, set: impl FnOnce(H) -> H) -> Self {
        Handle {
            inner: set(self.inner),
            rt: self.rt,
        }
    }

    /// Runs `f` to its end on the client's runtime, blocking this thread.
    #[track_caller]
    pub(super) fn block_on<F: Future>(&self, f: F) -> F::Output {
        self.rt.block_on(f)
    }

    /// Runs an async acquire and wraps the guard it gives.
    #[track_caller]
    pub(super) fn take<G>(&self, acquire: impl Future<Output = Result<G>>) -> Result<Guard<G>> {
        Ok(self.guard(self.block_on(acquire)?))
    }

    /// Runs an async `try_` acquire and wraps the guard it may give.
    #[track_caller]
    pub(super) fn try_take<G>(
        &self,
        acquire: impl Future<Output = Result<Option<G>>>,
    ) -> Result<Option<Guard<G>>> {
        Ok(self.block_on(acquire)?.map(|g| self.guard(g)))
    }

    fn guard<G>(&self, inner: G) -> Guard<G> {
        Guard {
            inner,
            rt: self.rt.clone(),
        }
    }
}

impl<H: Settings> Handle<H> {
    /// The length of each lease; see [`crate::Lock::ttl`].
    ///
    /// Defaults to 30 s.
    pub fn ttl(self, ttl: Duration) -> Self {
        self.map(|h| h.ttl(ttl))
    }

    /// How long a waiting acquire blocks at most; `Duration::MAX` blocks
    /// until acquired. See [`crate::Lock::wait`].
    ///
    /// Defaults to 10 s.
    pub fn wait(self, wait: Duration) -> Self {
        self.map(|h| h.wait(wait))
    }

    /// Whether the client's watchdog renews held leases; see
    /// [`crate::Lock::watchdog`].
    ///
    /// Defaults to `true`.
    pub fn watchdog(self, renew: bool) -> Self {
        self.map(|h| h.watchdog(renew))
    }

    /// What each hold says of its holder, shown by the statuses and
    /// `leasehold status`; see [`crate::Lock::describe`].
    ///
    /// Defaults to none.
    pub fn describe(self, about: impl Into<String>) -> Self {
        let about = about.into();
        self.map(|h| h.describe(about))
    }
}

impl<H: Named> Handle<H> {
    /// The lock's name.
    pub fn name(&self) -> &str {
        self.inner.name()
    }
}

impl<H: AtLeast> Handle<H> {
    /// A release sooner than `at_least` after the acquisition keeps the
    /// lease until then; see [`crate::Lock::hold_at_least`].
    ///
    /// Defaults to none.
    pub fn hold_at_least(self, at_least: Duration) -> Self {
        self.map(|h| h.hold_at_least(at_least))
    }
}

impl<H: Owned> Handle<H> {
    /// An owner shared on purpose: handles with the same id share the
    /// lock's holds; see [`crate::RwLock::owner`].
    ///
    /// Defaults to none: each acquisition is its own owner.
    pub fn owner(self, id: impl Into<String>) -> Self {
        self.map(|h| h.owner(id))
    }

    /// The owner id set with `owner`, or `None`.
    pub fn owner_id(&self) -> Option<&str> {
        self.inner.owner_id()
    }
}

impl<H: Exclusive> Handle<H> {
    /// A lease that ends without a release keeps the lock taken `delay`
    /// longer; see [`crate::Lock::lock_delay`].
    ///
    /// Defaults to zero.
    pub fn lock_delay(self, delay: Duration) -> Self {
        self.map(|h| h.lock_delay(delay))
    }

    /// The blocking form of [`crate::Lock::release_by_token`].
    ///
    /// # Errors
    ///
    /// As the async method.
    #[track_caller]
    pub fn release_by_token(&self, token: &str) -> Result<()> {
        self.block_on(self.inner.release_by_token(token))
    }

    /// The blocking form of [`crate::Lock::extend_by_token`].
    ///
    /// # Errors
    ///
    /// As the async method.
    #[track_caller]
    pub fn extend_by_token(&self, token: &str, ttl: Duration) -> Result<()> {
        self.block_on(self.inner.extend_by_token(token, ttl))
    }
}

impl<H: Acquire> Handle<H> {
    /// The blocking form of [`crate::Lock::acquire`]: blocks up to the
    /// handle's `wait`.
    ///
    /// # Errors
    ///
    /// As the async method.
    #[track_caller]
    pub fn acquire(&self) -> Result<Guard<H::Guard>> {
        self.take(self.inner.acquire())
    }

    /// The blocking form of [`crate::Lock::try_acquire`]: `Ok(None)` at
    /// once when it cannot be had.
    ///
    /// # Errors
    ///
    /// As the async method.
    #[track_caller]
    pub fn try_acquire(&self) -> Result<Option<Guard<H::Guard>>> {
        self.try_take(self.inner.try_acquire())
    }

    /// The blocking form of [`crate::Lock::run`]. The work is still a
    /// future, polled on this thread inside the client's runtime: only a
    /// future can be dropped the moment the lease is lost. For purely
    /// synchronous work, take a guard and check its `is_lost()` between steps.
    ///
    /// # Errors
    ///
    /// As the async method.
    #[track_caller]
    pub fn run<F, Fut, T>(&self, work: F) -> Result<T>
    where
        F: FnOnce(u64) -> Fut,
        Fut: Future<Output = T>,
    {
        self.block_on(self.inner.run(work))
    }

    /// The blocking form of [`crate::Lock::status`]; changes nothing.
    ///
    /// # Errors
    ///
    /// As the async method.
    #[track_caller]
    pub fn status(&self) -> Result<H::Status> {
        self.block_on(self.inner.status())
    }
}
