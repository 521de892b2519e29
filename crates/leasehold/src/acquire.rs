//! The wait loop shared by every primitive: one attempt at a time, woken by
//! release events, with the holder's lease end as a fallback timer.
//!
//! A primitive supplies "one attempt" (a script call); this module decides
//! when to try again and cleans up an attempt whose outcome is unknown when
//! the caller's future is dropped.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use crate::clock::Instant;

use tokio::sync::Notify;

use crate::client::{Client, Inner};
use crate::error::{Error, Result};
use crate::events::{Events, Subscription};
use crate::guard::Held;
use crate::key::{LockKeys, validate_name};
use crate::lease::{Kind, Lease, validity};
use crate::scripts::{Acquire, Owned, QUEUE_HEARTBEAT};
use crate::token::Token;

/// Default lease length of every handle.
pub const DEFAULT_TTL: Duration = Duration::from_secs(30);
/// Default bound on how long a handle's acquire waits for the holders.
pub const DEFAULT_WAIT: Duration = Duration::from_secs(10);

/// What the wait loop needs from its client: the client's [`Inner`] in a
/// build, an in-process fake in the unit tests, which check the loop's
/// timers and cancel paths on tokio's paused clock.
pub(crate) trait Core: Sync {
    /// The client's release events.
    fn events(&self) -> &Events;

    /// Whether [`Client::close`] was called.
    fn is_closed(&self) -> bool;

    /// Woken (`notify_waiters`) when the client is closed.
    fn closing(&self) -> &Notify;

    /// `min_replicas(n, timeout)`: replicas that must acknowledge each
    /// acquisition.
    fn min_replicas(&self) -> Option<(usize, Duration)>;

    /// How many replicas acknowledged the writes made so far to `key`'s
    /// master, up to `replicas`, waiting at most `timeout`.
    fn wait_replicas(
        &self,
        key: &str,
        replicas: usize,
        timeout: Duration,
    ) -> impl Future<Output = Result<usize>> + Send;

    /// Releases a hold now, owner-checked, and answers with the outcome.
    fn release(
        &self,
        kind: Kind,
        keys: &LockKeys,
        hold: &str,
    ) -> impl Future<Output = Result<Owned>> + Send;

    /// Releases a hold in the background (the watchdog); never blocks.
    fn release_in_background(&self, kind: Kind, keys: Arc<LockKeys>, hold: String);
}

/// What the attempts try to take.
pub(crate) struct Target<'a, C: Core = Inner> {
    pub(crate) core: &'a C,
    pub(crate) name: &'a str,
    pub(crate) keys: &'a Arc<LockKeys>,
    pub(crate) kind: Kind,
    /// The lease's identity in its kind's scripts; every attempt uses the
    /// same one, so a retry after a lost reply is idempotent.
    pub(crate) hold: &'a str,
    pub(crate) ttl: Duration,
    /// A refused attempt of a waiting caller joins the lock's queue of
    /// waiters (lease locks): the waiter then tries at least every
    /// [`QUEUE_HEARTBEAT`] to stay queued, and leaves the queue when it
    /// gives up.
    pub(crate) queues: bool,
    /// The channel whose messages wake this caller: its client's hand-off
    /// channel for the lock when it queues, else the lock's release channel.
    pub(crate) channel: String,
}

/// Calls `attempt` until it acquires or, with `wait: Some`, until the wait
/// runs out (`Ok(None)`); with `None`, tries once. On success returns the
/// fence and when the successful attempt was sent.
///
/// Cancel safety: dropping the future while an attempt may have succeeded
/// on the server releases that hold in the background.
pub(crate) async fn acquire<C, F, Fut>(
    target: &Target<'_, C>,
    wait: Option<Duration>,
    mut attempt: F,
) -> Result<Option<(u64, Instant)>>
where
    C: Core,
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<Acquire>>,
{
    let core = target.core;
    let deadline = wait.map(|w| Instant::now() + w);
    let mut pending = PendingAttempt {
        target,
        armed: false,
        queued: false,
    };
    // A waiting caller of a lock whose channel is subscribed already (it
    // was waited for moments ago) registers before its first attempt, so a
    // refused first attempt needs no second one after subscribing.
    let mut subscription: Option<Subscription> =
        deadline.and_then(|_| core.events().subscribed(&target.channel, target.hold));
    let mut backoff = Duration::from_millis(10);
    loop {
        // Client::close wakes the waiters; registered before the check, so
        // a close between the two is not missed.
        let closing = core.closing().notified();
        tokio::pin!(closing);
        closing.as_mut().enable();
        if core.is_closed() {
            return Err(Error::Closed);
        }
        // Register for the wake-ups before trying, so a release that lands
        // between a failed attempt and the wait is not missed.
        let notify = subscription.as_ref().map(Subscription::notify);
        let own = subscription.as_ref().map(Subscription::own);
        let notified = notify.as_deref().map(Notify::notified);
        let handed = own.as_deref().map(Notify::notified);
        tokio::pin!(notified, handed);
        for n in [notified.as_mut().as_pin_mut(), handed.as_mut().as_pin_mut()]
            .into_iter()
            .flatten()
        {
            n.enable();
        }

        let sent = Instant::now();
        pending.armed = true;
        let retry_at = match attempt().await {
            Ok(Acquire::Acquired { fence }) => {
                if validity(target.ttl, sent.elapsed()).is_none() {
                    // The reply came too late to be sure of any validity:
                    // give it back before trying again. The give-back is
                    // awaited here, never queued: the retry uses the same
                    // hold, would find the lease "already ours", and a
                    // give-back still queued behind it would then delete
                    // the lease of the guard the retry returns.
                    pending.give_back().await?;
                    Instant::now()
                } else if core.is_closed() {
                    // Closed while the attempt was in flight: the client's
                    // watchdog gives back nothing it is told of from now
                    // on but in the background, so give it back here.
                    pending.give_back().await?;
                    return Err(Error::Closed);
                } else {
                    pending.replicated().await?;
                    pending.armed = false;
                    pending.queued = false;
                    return Ok(Some((fence, sent)));
                }
            }
            Ok(Acquire::Held {
                remaining,
                unsettled,
            }) => {
                // Settled: nothing of this attempt is held anywhere.
                pending.armed = unsettled;
                let Some(deadline) = deadline else {
                    return Ok(None);
                };
                pending.queued = target.queues;
                if Instant::now() >= deadline {
                    return Ok(None);
                }
                if subscription.is_none() {
                    match core.events().subscribe(&target.channel, target.hold).await {
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
                // Fallback when no release event comes: the holder's lease
                // end, or sooner to stay in the queue.
                let mut fallback = remaining.unwrap_or(target.ttl) + Duration::from_millis(1);
                if target.queues {
                    fallback = fallback.min(QUEUE_HEARTBEAT);
                }
                (Instant::now() + fallback).min(deadline)
            }
            Err(e) if e.is_transient() && deadline.is_some_and(|d| Instant::now() < d) => {
                // The attempt's outcome is unknown; a retry with the same
                // hold is idempotent, and `pending` stays armed.
                tracing::debug!(lock = %target.name, error = %e, "acquire attempt failed; retrying");
                let at = Instant::now() + jitter(backoff);
                backoff = (backoff * 2).min(Duration::from_millis(500));
                at.min(deadline.unwrap_or(at))
            }
            Err(e) => return Err(e),
        };
        match (notified.as_mut().as_pin_mut(), handed.as_mut().as_pin_mut()) {
            (Some(n), Some(h)) => {
                tokio::select! {
                    () = n => {}
                    () = h => {}
                    () = &mut closing => {}
                    () = crate::clock::sleep_until(retry_at) => {}
                }
            }
            _ => {
                tokio::select! {
                    () = &mut closing => {}
                    () = crate::clock::sleep_until(retry_at) => {}
                }
            }
        }
        if core.is_closed() {
            continue;
        }
        if deadline.is_some_and(|d| Instant::now() >= d) && !pending.armed {
            // One last try at the deadline, so a release that woke us
            // right at the end still counts.
            let sent = Instant::now();
            pending.armed = true;
            let reply = attempt().await?;
            return Ok(match reply {
                Acquire::Acquired { fence } if validity(target.ttl, sent.elapsed()).is_some() => {
                    pending.replicated().await?;
                    pending.armed = false;
                    pending.queued = false;
                    Some((fence, sent))
                }
                // Too late to be of use: `pending` gives it back on drop.
                Acquire::Acquired { .. } => None,
                Acquire::Held { unsettled, .. } => {
                    pending.armed = unsettled;
                    None
                }
            });
        }
    }
}

/// Up to 50% random extra, so retrying clients do not march in step.
fn jitter(d: Duration) -> Duration {
    d + d.mul_f64(rand::random::<f64>() * 0.5)
}

/// An acquire attempt whose outcome may be unknown: if the future is dropped
/// while armed, the hold is released in the background. A waiter that gave
/// up leaves the queue the same way (the release script does both).
struct PendingAttempt<'a, 'b, C: Core> {
    target: &'a Target<'b, C>,
    armed: bool,
    queued: bool,
}

impl<C: Core> PendingAttempt<'_, '_, C> {
    /// With `min_replicas`, waits for the replicas to acknowledge the
    /// acquisition just made; too few release it (at once, or in the
    /// background if that fails) and fail.
    async fn replicated(&mut self) -> Result<()> {
        let t = self.target;
        let Some((needed, timeout)) = t.core.min_replicas() else {
            return Ok(());
        };
        let acked = t.core.wait_replicas(t.keys.lock(), needed, timeout).await?;
        if acked >= needed {
            return Ok(());
        }
        match t.core.release(t.kind, t.keys, t.hold).await {
            Ok(_) => {
                self.armed = false;
                self.queued = false;
            }
            Err(e) => {
                tracing::warn!(lock = %t.name, error = %e,
                    "release after too few replica acks failed; retrying in the background");
            }
        }
        Err(Error::ReplicasNotReached {
            name: t.name.to_owned(),
            acked,
            needed,
        })
    }

    /// Releases a grant that came too late to use, and waits for the
    /// server's answer, so that no release of this hold is left in flight
    /// when the caller tries again with the same hold. If the answer does
    /// not come, the release goes on in the background and the acquire
    /// fails: a retry with this hold could race it.
    async fn give_back(&mut self) -> Result<()> {
        let t = self.target;
        match t.core.release(t.kind, t.keys, t.hold).await {
            Ok(_) => {
                self.armed = false;
                self.queued = false;
                Ok(())
            }
            Err(e) => {
                tracing::warn!(lock = %t.name, error = %e,
                    "giving back a grant that came too late failed; retrying in the background");
                self.release_in_background();
                Err(e)
            }
        }
    }

    fn release_in_background(&mut self) {
        self.armed = false;
        self.queued = false;
        let t = self.target;
        t.core
            .release_in_background(t.kind, Arc::clone(t.keys), t.hold.to_owned());
    }
}

impl<C: Core> Drop for PendingAttempt<'_, '_, C> {
    fn drop(&mut self) {
        if self.armed || self.queued {
            self.release_in_background();
        }
    }
}

/// What every primitive's handle holds: the lock's name and keys and the
/// options of its guards. Public handles wrap it and get their setters from
/// [`handle_api!`].
#[derive(Clone)]
pub(crate) struct Handle {
    pub(crate) client: Client,
    pub(crate) name: String,
    pub(crate) keys: Arc<LockKeys>,
    pub(crate) ttl: Duration,
    pub(crate) wait: Duration,
    pub(crate) watchdog: bool,
}

impl Handle {
    pub(crate) fn new(client: Client, name: String) -> Handle {
        let keys = Arc::new(LockKeys::new(&client.inner.prefix, &name));
        Handle {
            client,
            name,
            keys,
            ttl: DEFAULT_TTL,
            wait: DEFAULT_WAIT,
            watchdog: true,
        }
    }

    /// Checks the name and TTL before anything is sent.
    pub(crate) fn validate(&self) -> Result<()> {
        if self.client.is_closed() {
            return Err(Error::Closed);
        }
        validate_name(&self.name)?;
        self.client.inner.check_ttl(self.ttl)
    }

    /// A target for [`acquire`] of `kind`, known to the scripts as `hold`.
    pub(crate) fn target<'a>(&'a self, kind: Kind, hold: &'a str) -> Target<'a> {
        let handoff = match kind {
            Kind::Lock => self.client.inner.servers.handoff_channel(&self.keys),
            _ => None,
        };
        Target {
            core: &self.client.inner,
            name: &self.name,
            keys: &self.keys,
            kind,
            hold,
            ttl: self.ttl,
            queues: handoff.is_some(),
            channel: handoff.unwrap_or_else(|| self.keys.channel().to_owned()),
        }
    }

    /// The error for a wait that ran out.
    pub(crate) fn timeout(&self) -> Error {
        Error::Timeout {
            name: self.name.clone(),
            waited: self.wait,
        }
    }

    /// Wraps a lease acquired by an attempt sent at `sent`, starting its
    /// renewal if the watchdog is on.
    pub(crate) fn held(
        &self,
        (kind, token, hold): (Kind, Token, String),
        fence: u64,
        sent: Instant,
    ) -> Held {
        let lease = Lease::new(
            self.name.clone(),
            Arc::clone(&self.keys),
            kind,
            token,
            hold,
            self.ttl,
            sent,
        );
        Held::new(&self.client, lease, fence, self.watchdog)
    }
}

/// The setters every handle has, on its `h: Handle` field. `$acquire` names
/// the method that waits, for the docs.
macro_rules! handle_api {
    ($handle:ident, $acquire:literal) => {
        impl std::fmt::Debug for $handle {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.debug_struct(stringify!($handle))
                    .field("name", &self.h.name)
                    .field("ttl", &self.h.ttl)
                    .field("wait", &self.h.wait)
                    .field("watchdog", &self.h.watchdog)
                    .finish()
            }
        }

        impl $handle {
            /// The length of the lease. While a guard is held, the watchdog
            /// renews it every `ttl / 3`, so the TTL bounds how long a crashed
            /// holder keeps the lock, not how long a live one may hold it.
            ///
            /// Must lie within the client's TTL bounds (10 ms ..= 24 h unless
            /// set with [`ClientBuilder::ttl_bounds`](crate::ClientBuilder::ttl_bounds)).
            /// Defaults to 30 s.
            pub fn ttl(mut self, ttl: std::time::Duration) -> Self {
                self.h.ttl = ttl;
                self
            }

            #[doc = concat!("How long [`", stringify!($handle), "::", $acquire, "`] waits for holders to release.")]
            ///
            /// Defaults to 10 s.
            pub fn wait(mut self, wait: std::time::Duration) -> Self {
                self.h.wait = wait;
                self
            }

            /// Whether the client's watchdog renews held leases. Without it a
            /// lease simply ends after its TTL, unless extended with the
            /// guard's `extend`.
            ///
            /// Defaults to `true`.
            pub fn watchdog(mut self, renew: bool) -> Self {
                self.h.watchdog = renew;
                self
            }

            /// The lock's name.
            pub fn name(&self) -> &str {
                &self.h.name
            }
        }
    };
}

pub(crate) use handle_api;

/// The owner setters of handles whose holds belong to an owner id (an
/// `owner: Token` field). `$make` is example code that yields a handle.
macro_rules! owner_api {
    ($handle:ident, $make:literal) => {
        impl $handle {
            /// The owner id: handles with the same id share the lock's holds
            /// (reentrancy), from any task or process. Anyone who knows it
            /// can act as the owner, so treat it as a secret when that
            /// matters.
            ///
            /// Must be 1 to 512 bytes. Defaults to a random 128-bit id per
            /// handle (clones of a handle share it).
            ///
            /// # Example
            ///
            /// ```no_run
            /// # fn run(client: leasehold::Client) {
            #[doc = concat!("let lock = ", $make, ".owner(\"job-7\");")]
            /// assert_eq!(lock.owner_id(), "job-7");
            /// # }
            /// ```
            pub fn owner(mut self, id: impl Into<String>) -> Self {
                self.owner = crate::token::Token::from_owner(id.into());
                self
            }

            /// The owner id of this handle.
            pub fn owner_id(&self) -> &str {
                self.owner.as_str()
            }
        }
    };
}

pub(crate) use owner_api;
