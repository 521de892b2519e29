//! The lease lock: one owner at a time, with fencing tokens.

use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::sync::Notify;

use crate::client::Client;
use crate::error::{Error, Result};
use crate::events::Subscription;
use crate::key::{LockKeys, validate_name};
use crate::lease::Lease;
use crate::scripts::{self, Acquire, Extension, Owned};
use crate::token::{Token, redact};

/// Default lease length.
pub const DEFAULT_TTL: Duration = Duration::from_secs(30);
/// Default bound on how long [`Lock::acquire`] waits.
pub const DEFAULT_WAIT: Duration = Duration::from_secs(10);

/// A handle to one named lease lock; made by [`Client::lock`].
///
/// Cheap to clone; holds no lease itself. Each successful acquire returns a
/// [`LockGuard`] that owns the lease until it is released or dropped.
///
/// The lock is not reentrant: a second `acquire` through any handle waits
/// for the first guard to go.
#[derive(Clone)]
pub struct Lock {
    client: Client,
    name: String,
    keys: Arc<LockKeys>,
    ttl: Duration,
    wait: Duration,
    watchdog: bool,
}

impl std::fmt::Debug for Lock {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Lock")
            .field("name", &self.name)
            .field("ttl", &self.ttl)
            .field("wait", &self.wait)
            .field("watchdog", &self.watchdog)
            .finish()
    }
}

impl Lock {
    pub(crate) fn new(client: Client, name: String) -> Lock {
        let keys = Arc::new(LockKeys::new(&client.inner.prefix, &name));
        Lock {
            client,
            name,
            keys,
            ttl: DEFAULT_TTL,
            wait: DEFAULT_WAIT,
            watchdog: true,
        }
    }

    /// The length of the lease. While a guard is held, the watchdog renews
    /// it every `ttl / 3`, so the TTL bounds how long a crashed holder keeps
    /// the lock, not how long a live one may hold it.
    ///
    /// Must lie within the client's TTL bounds (10 ms ..= 24 h unless set
    /// with [`ClientBuilder::ttl_bounds`](crate::ClientBuilder::ttl_bounds)).
    /// Defaults to 30 s.
    pub fn ttl(mut self, ttl: Duration) -> Self {
        self.ttl = ttl;
        self
    }

    /// How long [`Lock::acquire`] waits for a holder to release.
    ///
    /// Defaults to 10 s.
    pub fn wait(mut self, wait: Duration) -> Self {
        self.wait = wait;
        self
    }

    /// Whether the client's watchdog renews held leases. Without it a lease
    /// simply ends after its TTL, unless extended with [`LockGuard::extend`].
    ///
    /// Defaults to `true`.
    pub fn watchdog(mut self, renew: bool) -> Self {
        self.watchdog = renew;
        self
    }

    /// The lock's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Takes the lock, waiting up to [`Lock::wait`] for the holder to release.
    ///
    /// Waiting is event-driven: a release wakes one waiter of this client at
    /// once. If a release event is lost (or the holder simply expires), the
    /// waiter retries when the holder's lease would end.
    ///
    /// # Errors
    ///
    /// [`Error::Timeout`] when the wait ran out; [`Error::InvalidArgument`]
    /// for a bad name or TTL; [`Error::WrongType`] when the lock's key holds
    /// data of another type; connection errors if Redis stayed unreachable
    /// until the wait ran out.
    ///
    /// # Cancel safety
    ///
    /// Dropping the future leaves nothing held: if an attempt may have
    /// succeeded on the server, the lease is released in the background.
    ///
    /// # Example
    ///
    /// ```no_run
    /// # async fn run(client: leasehold::Client) -> Result<(), leasehold::Error> {
    /// let guard = client.lock("orders:42").acquire().await?;
    /// println!("fence {}", guard.fence());
    /// guard.release().await?;
    /// # Ok(()) }
    /// ```
    pub async fn acquire(&self) -> Result<LockGuard> {
        match self.acquire_within(Some(self.wait)).await? {
            Some(guard) => Ok(guard),
            None => Err(Error::Timeout {
                name: self.name.clone(),
                waited: self.wait,
            }),
        }
    }

    /// Takes the lock if it is free, without waiting.
    ///
    /// Returns `Ok(None)` when another owner holds it.
    ///
    /// # Errors
    ///
    /// As [`Lock::acquire`], except [`Error::Timeout`].
    ///
    /// # Cancel safety
    ///
    /// As [`Lock::acquire`].
    ///
    /// # Example
    ///
    /// ```no_run
    /// # async fn run(client: leasehold::Client) -> Result<(), leasehold::Error> {
    /// match client.lock("nightly-backup").try_acquire().await? {
    ///     Some(guard) => guard.release().await?,
    ///     None => println!("someone else runs it"),
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn try_acquire(&self) -> Result<Option<LockGuard>> {
        self.acquire_within(None).await
    }

    /// Releases the lease held under `token`, for holders that kept only
    /// the token (for example across processes, as `leasehold release` does).
    ///
    /// # Errors
    ///
    /// [`Error::NotOwner`] when another owner holds the lock (nothing is
    /// changed); [`Error::Lost`] when nobody holds it; connection errors.
    ///
    /// # Example
    ///
    /// ```no_run
    /// # async fn run(client: leasehold::Client, token: String) -> Result<(), leasehold::Error> {
    /// client.lock("nightly-backup").release_by_token(&token).await?;
    /// # Ok(()) }
    /// ```
    pub async fn release_by_token(&self, token: &str) -> Result<()> {
        validate_name(&self.name)?;
        let outcome = scripts::lock_release(&self.client.inner.backend, &self.keys, token).await?;
        self.by_token_outcome(outcome)
    }

    /// Sets the lease held under `token` to end `ttl` from now.
    ///
    /// # Errors
    ///
    /// [`Error::NotOwner`] when another owner holds the lock (nothing is
    /// changed); [`Error::Lost`] when nobody holds it;
    /// [`Error::InvalidArgument`] for a TTL out of bounds; connection errors.
    ///
    /// # Example
    ///
    /// ```no_run
    /// # async fn run(client: leasehold::Client, token: String) -> Result<(), leasehold::Error> {
    /// use std::time::Duration;
    /// client.lock("nightly-backup").extend_by_token(&token, Duration::from_secs(60)).await?;
    /// # Ok(()) }
    /// ```
    pub async fn extend_by_token(&self, token: &str, ttl: Duration) -> Result<()> {
        self.clone().ttl(ttl).validate()?;
        let extension = Extension {
            key: &self.keys.lock,
            token,
            ttl,
        };
        let outcome = scripts::lock_extend(&self.client.inner.backend, &[extension]).await?;
        self.by_token_outcome(outcome.first().copied().unwrap_or(Owned::Missing))
    }

    fn by_token_outcome(&self, outcome: Owned) -> Result<()> {
        match outcome {
            Owned::Done => Ok(()),
            Owned::Missing => Err(Error::Lost {
                name: self.name.clone(),
            }),
            Owned::OtherOwner => Err(Error::NotOwner {
                name: self.name.clone(),
            }),
        }
    }

    /// Reads who holds the lock, for how much longer, its last fencing token
    /// and how many clients wait for it. Changes nothing.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidArgument`] for a bad name, [`Error::WrongType`] if the
    /// key holds another type, connection errors.
    ///
    /// # Example
    ///
    /// ```no_run
    /// # async fn run(client: leasehold::Client) -> Result<(), leasehold::Error> {
    /// let status = client.lock("nightly-backup").status().await?;
    /// if let Some(left) = status.remaining {
    ///     println!("held by {}…, {left:?} left", status.holder.unwrap_or_default());
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn status(&self) -> Result<LockStatus> {
        validate_name(&self.name)?;
        let backend = &self.client.inner.backend;
        let stored = scripts::lock_status(backend, &self.keys).await?;
        let waiting_clients = scripts::subscribers(backend, &self.keys.channel).await?;
        Ok(LockStatus {
            name: self.name.clone(),
            holder: stored.holder.as_deref().map(|t| redact(t).to_owned()),
            remaining: stored.remaining,
            fence: stored.fence,
            waiting_clients,
        })
    }

    fn validate(&self) -> Result<()> {
        validate_name(&self.name)?;
        let inner = &self.client.inner;
        if self.ttl < inner.min_ttl || self.ttl > inner.max_ttl {
            return Err(Error::InvalidArgument(format!(
                "lease TTL {:?} is outside the allowed {:?}..={:?}: a TTL bounds how long a \
                 crashed holder blocks others, so pick one between them",
                self.ttl, inner.min_ttl, inner.max_ttl
            )));
        }
        Ok(())
    }

    /// Tries until acquired or, with `wait: Some`, until the wait runs out
    /// (`Ok(None)`); with `None`, tries once.
    async fn acquire_within(&self, wait: Option<Duration>) -> Result<Option<LockGuard>> {
        self.validate()?;
        let inner = &self.client.inner;
        let started = Instant::now();
        let deadline = wait.map(|w| started + w);
        let mut attempt = PendingAttempt {
            client: &self.client,
            keys: &self.keys,
            token: Token::random(),
            armed: false,
        };
        let mut subscription = None;
        let mut backoff = Duration::from_millis(10);
        loop {
            // Register for the wake-up before trying, so a release that lands
            // between a failed attempt and the wait is not missed.
            let notify = subscription.as_ref().map(Subscription::notify);
            let notified = notify.as_deref().map(Notify::notified);
            tokio::pin!(notified);
            if let Some(n) = notified.as_mut().as_pin_mut() {
                n.enable();
            }

            let sent = Instant::now();
            attempt.armed = true;
            let reply =
                scripts::lock_acquire(&inner.backend, &self.keys, attempt.token.as_str(), self.ttl)
                    .await;
            let retry_at = match reply {
                Ok(Acquire::Acquired { fence }) => {
                    if Instant::now() >= crate::lease::valid_until(sent, self.ttl) {
                        // The reply came too late to be sure of any validity:
                        // give it back and try again.
                        inner
                            .watchdog
                            .release(Arc::clone(&self.keys), attempt.token.clone());
                        attempt.armed = false;
                        Instant::now()
                    } else {
                        attempt.armed = false;
                        return Ok(Some(self.guard(attempt.token.clone(), fence, sent)));
                    }
                }
                Ok(Acquire::Held { remaining }) => {
                    attempt.armed = false;
                    let Some(deadline) = deadline else {
                        return Ok(None);
                    };
                    if Instant::now() >= deadline {
                        return Ok(None);
                    }
                    if subscription.is_none() {
                        match inner.events.subscribe(&self.keys.channel).await {
                            Ok(s) => {
                                subscription = Some(s);
                                continue;
                            }
                            Err(e) if e.is_transient() => {
                                tracing::debug!(error = %e, "cannot subscribe; falling back to timers");
                            }
                            Err(e) => return Err(e),
                        }
                    }
                    // Fallback when no release event comes: the holder's lease end.
                    let fallback = remaining.unwrap_or(self.ttl) + Duration::from_millis(1);
                    (Instant::now() + fallback).min(deadline)
                }
                Err(e) if e.is_transient() && deadline.is_some_and(|d| Instant::now() < d) => {
                    // The attempt's outcome is unknown; a retry with the same
                    // token is idempotent, and `attempt` stays armed.
                    tracing::debug!(lock = %self.name, error = %e, "acquire attempt failed; retrying");
                    let at = Instant::now() + jitter(backoff);
                    backoff = (backoff * 2).min(Duration::from_millis(500));
                    at.min(deadline.unwrap_or(at))
                }
                Err(e) => return Err(e),
            };
            match notified.as_mut().as_pin_mut() {
                Some(n) => {
                    tokio::select! {
                        () = n => {}
                        () = tokio::time::sleep_until(retry_at.into()) => {}
                    }
                }
                None => tokio::time::sleep_until(retry_at.into()).await,
            }
            if deadline.is_some_and(|d| Instant::now() >= d) && !attempt.armed {
                // One last try at the deadline, so a release that woke us
                // right at the end still counts.
                return self.last_try(attempt).await;
            }
        }
    }

    async fn last_try(&self, mut attempt: PendingAttempt<'_>) -> Result<Option<LockGuard>> {
        let sent = Instant::now();
        attempt.armed = true;
        let reply = scripts::lock_acquire(
            &self.client.inner.backend,
            &self.keys,
            attempt.token.as_str(),
            self.ttl,
        )
        .await?;
        attempt.armed = false;
        match reply {
            Acquire::Acquired { fence } => Ok(Some(self.guard(attempt.token.clone(), fence, sent))),
            Acquire::Held { .. } => Ok(None),
        }
    }

    fn guard(&self, token: Token, fence: u64, sent: Instant) -> LockGuard {
        let lease = Arc::new(Lease::new(
            self.name.clone(),
            Arc::clone(&self.keys),
            token,
            self.ttl,
            sent,
        ));
        if self.watchdog {
            self.client.inner.watchdog.track(Arc::clone(&lease));
        }
        LockGuard {
            client: self.client.clone(),
            lease,
            fence,
            watchdog: self.watchdog,
            done: false,
        }
    }
}

/// A lock's state at one moment, from [`Lock::status`] or [`Client::list`].
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct LockStatus {
    /// The lock name.
    pub name: String,
    /// The first 8 characters of the holder's owner token (never the whole
    /// token: that is a capability), or `None` when free.
    pub holder: Option<String>,
    /// The holder's remaining lease, or `None` when free.
    pub remaining: Option<Duration>,
    /// The last fencing token issued for this name, if remembered.
    pub fence: Option<u64>,
    /// Client connections subscribed to this lock's releases: clients
    /// waiting now, or that waited in the last few seconds.
    pub waiting_clients: usize,
}

/// Up to 50% random extra, so retrying clients do not march in step.
fn jitter(d: Duration) -> Duration {
    d + d.mul_f64(rand::random::<f64>() * 0.5)
}

/// An acquire attempt whose outcome may be unknown: if the future is dropped
/// while armed, the lease is released in the background.
struct PendingAttempt<'a> {
    client: &'a Client,
    keys: &'a Arc<LockKeys>,
    token: Token,
    armed: bool,
}

impl Drop for PendingAttempt<'_> {
    fn drop(&mut self) {
        if self.armed {
            self.client
                .inner
                .watchdog
                .release(Arc::clone(self.keys), self.token.clone());
        }
    }
}

/// Proof of holding a [`Lock`]; the lease is renewed while it lives.
///
/// Dropping the guard stops renewal and releases the lease in the background
/// (never blocking, never panicking). Call [`LockGuard::release`] instead to
/// learn whether the lease was still held.
#[must_use = "dropping the guard releases the lock at once"]
pub struct LockGuard {
    client: Client,
    lease: Arc<Lease>,
    fence: u64,
    watchdog: bool,
    done: bool,
}

impl std::fmt::Debug for LockGuard {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LockGuard")
            .field("name", &self.lease.name)
            .field("fence", &self.fence)
            .field(
                "token",
                &format_args!("{}…", redact(self.lease.token.as_str())),
            )
            .field("lost", &self.is_lost())
            .finish()
    }
}

impl LockGuard {
    /// The fencing token: strictly greater than that of every earlier
    /// holder of this lock name on this Redis. Send it with every write to
    /// the protected resource and have the resource reject lower ones.
    pub fn fence(&self) -> u64 {
        self.fence
    }

    /// This holder's owner token. It is a capability (whoever has it can
    /// release the lock), so do not log it whole.
    pub fn token(&self) -> &str {
        self.lease.token.as_str()
    }

    /// The lock's name.
    pub fn name(&self) -> &str {
        &self.lease.name
    }

    /// True once the lease may have expired or was taken by another owner.
    ///
    /// Based on the monotonic clock and the last successful renewal, so it
    /// turns true at the end of the validity even if the watchdog could not
    /// run.
    pub fn is_lost(&self) -> bool {
        self.lease.is_lost()
    }

    /// Resolves when the lease is lost: another owner took it, or it could
    /// not be renewed before its validity ran out. Use it to abort work:
    ///
    /// ```no_run
    /// # async fn run(client: leasehold::Client) -> Result<(), leasehold::Error> {
    /// # async fn long_job() {}
    /// let guard = client.lock("migration").acquire().await?;
    /// tokio::select! {
    ///     () = long_job() => guard.release().await?,
    ///     () = guard.lost() => eprintln!("lost the lock; stopping"),
    /// }
    /// # Ok(()) }
    /// ```
    ///
    /// # Cancel safety
    ///
    /// Cancel-safe: dropping the future has no effect on the lease.
    pub async fn lost(&self) {
        self.lease.lost().await;
    }

    /// Sets the lease to end `ttl` from now, if this guard still owns it.
    /// With the watchdog on, later renewals use the new TTL.
    ///
    /// # Errors
    ///
    /// [`Error::Lost`] if the lease expired or another owner holds it (the
    /// guard is then marked lost); [`Error::InvalidArgument`] for a TTL out
    /// of bounds; connection errors.
    ///
    /// # Cancel safety
    ///
    /// If dropped, the extension may or may not have happened.
    pub async fn extend(&self, ttl: Duration) -> Result<()> {
        let inner = &self.client.inner;
        if ttl < inner.min_ttl || ttl > inner.max_ttl {
            return Err(Error::InvalidArgument(format!(
                "lease TTL {ttl:?} is outside the allowed {:?}..={:?}",
                inner.min_ttl, inner.max_ttl
            )));
        }
        if self.lease.is_lost() {
            return Err(self.lost_error());
        }
        let sent = Instant::now();
        let extension = Extension {
            key: &self.lease.keys.lock,
            token: self.lease.token.as_str(),
            ttl,
        };
        let result = scripts::lock_extend(&inner.backend, &[extension]).await?;
        if result.first() == Some(&Owned::Done) {
            self.lease.extended(sent, ttl);
            if self.watchdog {
                inner.watchdog.track(Arc::clone(&self.lease));
            }
            Ok(())
        } else {
            self.lease.mark_lost();
            Err(self.lost_error())
        }
    }

    /// Releases the lock, if this guard still owns it, and wakes a waiter.
    ///
    /// # Errors
    ///
    /// [`Error::Lost`] if the lease had already expired or another owner
    /// holds it (nothing is changed then); connection errors (the release is
    /// then retried once in the background, and the lease ends by its TTL
    /// at the latest).
    ///
    /// # Cancel safety
    ///
    /// If dropped, the release still happens in the background.
    pub async fn release(mut self) -> Result<()> {
        self.done = true;
        let inner = &self.client.inner;
        inner.watchdog.untrack(self.lease.id);
        let mut pending = ReleaseOnDrop(Some(&self));
        let outcome =
            scripts::lock_release(&inner.backend, &self.lease.keys, self.lease.token.as_str())
                .await;
        pending.0 = None;
        match outcome {
            Ok(Owned::Done) => Ok(()),
            Ok(Owned::Missing | Owned::OtherOwner) => {
                self.lease.mark_lost();
                Err(self.lost_error())
            }
            Err(e) => {
                self.release_in_background();
                Err(e)
            }
        }
    }

    /// Stops renewal and hands back the owner token *without* releasing:
    /// the lease then ends by its TTL unless someone extends or releases it
    /// with the token ([`Lock::extend_by_token`], [`Lock::release_by_token`]).
    /// For handing a lease to another process, as `leasehold acquire` does.
    ///
    /// # Example
    ///
    /// ```no_run
    /// # async fn run(client: leasehold::Client) -> Result<(), leasehold::Error> {
    /// let guard = client.lock("deploy").acquire().await?;
    /// let token = guard.detach();
    /// // ... later, perhaps elsewhere:
    /// client.lock("deploy").release_by_token(&token).await?;
    /// # Ok(()) }
    /// ```
    pub fn detach(mut self) -> String {
        self.done = true;
        self.client.inner.watchdog.untrack(self.lease.id);
        self.lease.token.as_str().to_owned()
    }

    fn lost_error(&self) -> Error {
        Error::Lost {
            name: self.lease.name.clone(),
        }
    }

    fn release_in_background(&self) {
        let watchdog = &self.client.inner.watchdog;
        watchdog.untrack(self.lease.id);
        watchdog.release(Arc::clone(&self.lease.keys), self.lease.token.clone());
    }
}

/// Hands a release to the background if `release()` is cancelled midway.
struct ReleaseOnDrop<'a>(Option<&'a LockGuard>);

impl Drop for ReleaseOnDrop<'_> {
    fn drop(&mut self) {
        if let Some(guard) = self.0 {
            guard.release_in_background();
        }
    }
}

impl Drop for LockGuard {
    fn drop(&mut self) {
        if !self.done {
            self.release_in_background();
        }
    }
}
