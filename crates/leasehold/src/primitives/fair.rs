//! The fair lock: the lease lock, taken in strict arrival order.

use std::sync::Arc;
use std::time::Duration;

use crate::error::Result;
use crate::inner::Inner;
use crate::primitives::handle::{Handle, at_least_api, handle_api, lock_delay_api};
use crate::primitives::lock::{Lock, LockGuard, LockStatus};

/// A handle to one named lease lock whose waiters are served in arrival
/// order; made by [`Client::fair_lock`](crate::Client::fair_lock).
///
/// The same lease as [`Lock`](crate::Lock) (same keys, guard, fence, renewal and
/// release), with one more rule: a free lock goes to a caller only if no
/// live waiter queued before it. So:
///
/// - **First come, first served.** A caller that is refused joins the queue;
///   at release the lock is handed straight to the first live waiter, and
///   only that waiter is woken. Newcomers (and the releasing holder) cannot
///   barge in, not even with [`FairLock::try_acquire`].
/// - **A dead waiter leaves the queue within a bounded time.** A waiter
///   tries again at least every second while it waits (its heartbeat) and
///   counts as dead 3 s after its last try; a waiter that gives up leaves at
///   once. A lock handed to a waiter that died since waits 0.5 s for it,
///   then goes to the next. So a dead waiter delays the queue by about 4 s
///   at most, once.
/// - Fairness holds among fair callers: a [`Lock`](crate::Lock) of the same name shares
///   the lease and the queue but may take a free lock ahead of the queue.
///
/// Use it when starvation matters more than throughput: strict order costs
/// a hand-off round trip per holder, and a newcomer waits even while the
/// lock is briefly free.
///
/// # Example
///
/// ```no_run
/// # async fn run(client: leasehold::Client) -> Result<(), leasehold::Error> {
/// let queue = client.fair_lock("payouts");
/// let guard = queue.acquire().await?; // after everyone who came before
/// // ... pass guard.fence() to the resource ...
/// guard.release().await?; // handed to the next in line
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct FairLock {
    h: Handle,
}

at_least_api!(FairLock);
lock_delay_api!(FairLock);
handle_api!(FairLock, "acquire");

impl FairLock {
    pub(crate) fn new(inner: Arc<Inner>, name: String) -> FairLock {
        FairLock {
            h: Handle::new(inner, name),
        }
    }

    fn lock(&self) -> Lock {
        Lock::with_order(self.h.clone(), true)
    }

    /// Takes the lock after every live waiter that came before, waiting up
    /// to [`FairLock::wait`].
    ///
    /// # Errors
    ///
    /// As [`Lock::acquire`](crate::Lock::acquire): [`Error::Timeout`](crate::Error::Timeout) when
    /// the wait ran out (the caller then leaves the queue),
    /// [`Error::InvalidArgument`](crate::Error::InvalidArgument) for a bad
    /// name or TTL, [`Error::WrongType`](crate::Error::WrongType), connection
    /// errors if Redis stayed unreachable until the wait ran out.
    ///
    /// # Cancel safety
    ///
    /// Dropping the future leaves nothing held and leaves the queue: if an
    /// attempt may have succeeded on the server, the lease is released (or
    /// handed to the next waiter) in the background.
    ///
    /// # Example
    ///
    /// ```no_run
    /// # async fn run(client: leasehold::Client) -> Result<(), leasehold::Error> {
    /// let guard = client.fair_lock("payouts").acquire().await?;
    /// guard.release().await?;
    /// # Ok(()) }
    /// ```
    pub async fn acquire(&self) -> Result<LockGuard> {
        self.lock().acquire().await
    }

    crate::primitives::run::run_api!(run, acquire, "lock", "client.fair_lock(\"payouts\")");

    /// Takes the lock if it is free and nobody waits for it, without
    /// waiting (and without joining the queue): `Ok(None)` otherwise.
    ///
    /// # Errors
    ///
    /// As [`FairLock::acquire`], except `Timeout`.
    ///
    /// # Cancel safety
    ///
    /// As [`FairLock::acquire`].
    ///
    /// # Example
    ///
    /// ```no_run
    /// # async fn run(client: leasehold::Client) -> Result<(), leasehold::Error> {
    /// if let Some(guard) = client.fair_lock("payouts").try_acquire().await? {
    ///     guard.release().await?;
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn try_acquire(&self) -> Result<Option<LockGuard>> {
        self.lock().try_acquire().await
    }

    /// Releases the lease held under `token`, for holders that kept only
    /// the token (for example across processes); see
    /// [`Lock::release_by_token`](crate::Lock::release_by_token). As with [`LockGuard::release`](crate::LockGuard::release), the lock
    /// is handed straight to the first live waiter in the queue. Refused on
    /// a handle with [`hold_at_least`](Self::hold_at_least), as
    /// [`Lock::release_by_token`](crate::Lock::release_by_token) explains.
    ///
    /// # Errors
    ///
    /// [`Error::NotOwner`](crate::Error::NotOwner) when another owner holds
    /// the lock (nothing is changed); [`Error::Lost`](crate::Error::Lost)
    /// when nobody holds it;
    /// [`Error::InvalidArgument`](crate::Error::InvalidArgument) for a bad
    /// name or a handle with `hold_at_least`; connection errors.
    ///
    /// # Example
    ///
    /// ```no_run
    /// # async fn run(client: leasehold::Client, token: String) -> Result<(), leasehold::Error> {
    /// client.fair_lock("payouts").release_by_token(&token).await?;
    /// # Ok(()) }
    /// ```
    pub async fn release_by_token(&self, token: &str) -> Result<()> {
        self.lock().release_by_token(token).await
    }

    /// Sets the lease held under `token` to end `ttl` from now; see
    /// [`Lock::extend_by_token`](crate::Lock::extend_by_token).
    ///
    /// # Errors
    ///
    /// [`Error::NotOwner`](crate::Error::NotOwner) when another owner holds
    /// the lock (nothing is changed); [`Error::Lost`](crate::Error::Lost)
    /// when nobody holds it;
    /// [`Error::InvalidArgument`](crate::Error::InvalidArgument) for a TTL
    /// out of bounds; connection errors.
    ///
    /// # Example
    ///
    /// ```no_run
    /// # async fn run(client: leasehold::Client, token: String) -> Result<(), leasehold::Error> {
    /// use std::time::Duration;
    /// client.fair_lock("payouts").extend_by_token(&token, Duration::from_secs(60)).await?;
    /// # Ok(()) }
    /// ```
    pub async fn extend_by_token(&self, token: &str, ttl: Duration) -> Result<()> {
        self.lock().extend_by_token(token, ttl).await
    }

    /// Reads who holds the lock and how many wait for it; see
    /// [`Lock::status`](crate::Lock::status).
    ///
    /// # Errors
    ///
    /// As [`Lock::status`](crate::Lock::status).
    ///
    /// # Example
    ///
    /// ```no_run
    /// # async fn run(client: leasehold::Client) -> Result<(), leasehold::Error> {
    /// println!("{} waiting", client.fair_lock("payouts").status().await?.waiters);
    /// # Ok(()) }
    /// ```
    pub async fn status(&self) -> Result<LockStatus> {
        self.lock().status().await
    }
}
