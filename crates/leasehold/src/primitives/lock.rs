//! The lease lock: one owner at a time, with fencing tokens.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use crate::acquire::acquire;
use crate::error::{Error, Result};
use crate::inner::Inner;
use crate::key::validate_name;
use crate::kind::LockKind;
use crate::lease::server_ttl;
use crate::primitives::guard::{Guard, Held, hold};
use crate::primitives::handle::{Handle, at_least_api, handle_api, lock_delay_api};
use crate::scripts::{Acquire, Extension, LeaseId, Owned, Queueing};
use crate::token::{Token, redact};

/// A handle to one named lease lock; made by [`Client::lock`](crate::Client::lock).
///
/// Cheap to clone; holds no lease itself. Each successful acquire returns a
/// [`LockGuard`](crate::LockGuard) that owns the lease until it is released or dropped.
///
/// The lock is not reentrant: a second `acquire` through any handle waits
/// for the first guard to go.
#[derive(Clone)]
pub struct Lock {
    h: Handle,
    /// Strict arrival order (a [`FairLock`](crate::FairLock)'s attempts).
    fair: bool,
}

at_least_api!(Lock);
lock_delay_api!(Lock);
handle_api!(Lock, "acquire");

impl Lock {
    pub(crate) fn new(inner: Arc<Inner>, name: String) -> Lock {
        Lock {
            h: Handle::new(inner, name),
            fair: false,
        }
    }

    /// The lease lock of `h`, taken in strict arrival order if `fair`.
    pub(crate) fn with_order(h: Handle, fair: bool) -> Lock {
        Lock { h, fair }
    }

    /// Takes the lock, waiting up to [`Lock::wait`](crate::Lock::wait) for the holder to release.
    ///
    /// Waiting is event-driven: a release wakes one waiter of this client at
    /// once. If a release event is lost (or the holder simply expires), the
    /// waiter retries when the holder's lease would end.
    ///
    /// # Errors
    ///
    /// [`Error::Timeout`](crate::Error::Timeout) when the wait ran out; [`Error::InvalidArgument`](crate::Error::InvalidArgument)
    /// for a bad name or TTL; [`Error::WrongType`](crate::Error::WrongType) when the lock's key holds
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
        self.acquire_within(Some(self.h.wait))
            .await?
            .ok_or_else(|| self.h.timeout())
    }

    /// Takes the lock if it is free, without waiting.
    ///
    /// Returns `Ok(None)` when another owner holds it.
    ///
    /// # Errors
    ///
    /// As [`Lock::acquire`](crate::Lock::acquire), except [`Error::Timeout`](crate::Error::Timeout).
    ///
    /// # Cancel safety
    ///
    /// As [`Lock::acquire`](crate::Lock::acquire).
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

    /// Takes the lock (as [`acquire`](Self::acquire), waiting up to
    /// [`Lock::wait`](crate::Lock::wait)), runs `work(fence)` under it, releases it and returns
    /// the work's output: a critical section that stops when the lease does.
    /// If the lease is lost before the work finishes (another owner took
    /// it, or it could not be renewed before its validity ran out), the
    /// work is dropped at once and the call returns [`Error::Lost`](crate::Error::Lost).
    ///
    /// # What "dropped" means
    ///
    /// The work's future is dropped the moment the loss is seen: it is not
    /// polled again, and its locals' destructors run (a transaction object
    /// rolls back, a file being written is closed). So the work cannot go
    /// on under a lease it no longer has by more than the time to notice:
    /// the next renewal (every `ttl / 3`) for a lease taken or deleted,
    /// the end of the validity (within the TTL) for a server that stopped
    /// answering. It does not reach what already left the process:
    ///
    /// - a request already sent (an `UPDATE` written to the database's
    ///   socket, a message published) may still be carried out after the
    ///   drop, and after the next holder's writes;
    /// - tasks or threads the work started run on unless the work stops
    ///   them itself (keep the work inside the future, or abort on drop);
    /// - code that never reaches an `.await` (a long computation, a
    ///   blocking call) cannot be dropped in the middle.
    ///
    /// That is what the fence is for: pass it with every write, and have
    /// the resource refuse a fence lower than the highest it has seen
    /// (`WHERE last_fence <= $fence` in SQL, [`crate::fenced`] for a
    /// Redis key). Then a write sent just before the drop and delivered
    /// after the next holder's is rejected instead of applied.
    ///
    /// ```no_run
    /// # async fn run(client: leasehold::Client, mut resource: leasehold::redis::aio::MultiplexedConnection) -> Result<(), leasehold::Error> {
    /// use std::time::Duration;
    /// use leasehold::fenced;
    ///
    /// let lock = client.lock("report").ttl(Duration::from_secs(10));
    /// let written = lock
    ///     .run(|fence| async move {
    ///         let report = String::from("..."); // long work, dropped if the lease goes
    ///         // Sent with the fence: if the lease is lost while this is in
    ///         // flight and a newer holder writes first, it is refused.
    ///         fenced::set(&mut resource, "report:latest", fence, &report, None).await
    ///     })
    ///     .await?; // Err(Error::Lost) if the lease went first
    /// written?; // Err(Error::StaleFence) if a newer holder had written
    /// # Ok(()) }
    /// ```
    ///
    /// The work's own errors are its output: a `work` returning a `Result`
    /// gives `Ok(Err(..))`, and the lock is released all the same. A panic
    /// in the work unwinds through `run`, which drops the guard on the way:
    /// the release goes out in the background.
    ///
    /// # Errors
    ///
    /// As [`acquire`](Self::acquire) before the work starts; then
    /// [`Error::Lost`](crate::Error::Lost) when the lease was lost while the work ran (or was
    /// found gone by the release). A release that fails for another reason
    /// (the connection) is retried in the background and the output is
    /// returned: the work finished inside the lease.
    ///
    /// # Cancel safety
    ///
    /// Dropping the future drops the work and releases in the background.
    pub async fn run<F, Fut, T>(&self, work: F) -> Result<T>
    where
        F: FnOnce(u64) -> Fut,
        Fut: std::future::Future<Output = T>,
    {
        crate::primitives::run::run(self.acquire().await?.held, work).await
    }

    /// Releases the lease held under `token`, for holders that kept only
    /// the token (for example across processes, as `leasehold release` does).
    ///
    /// A release by token frees the lock at once: it cannot honour
    /// [`hold_at_least`](Self::hold_at_least), which counts from an
    /// acquisition it never saw, so on a handle that asks for it the call
    /// is refused and nothing is sent. To keep the lock until a time, move
    /// the lease's end there with [`extend_by_token`](Self::extend_by_token)
    /// instead of releasing.
    ///
    /// # Errors
    ///
    /// [`Error::NotOwner`](crate::Error::NotOwner) when another owner holds the lock (nothing is
    /// changed); [`Error::Lost`](crate::Error::Lost) when nobody holds it;
    /// [`Error::InvalidArgument`](crate::Error::InvalidArgument) for a bad name or a handle with
    /// `hold_at_least`; connection errors.
    ///
    /// # Example
    ///
    /// ```no_run
    /// # async fn run(client: leasehold::Client, token: String) -> Result<(), leasehold::Error> {
    /// client.lock("nightly-backup").release_by_token(&token).await?;
    /// # Ok(()) }
    /// ```
    pub async fn release_by_token(&self, token: &str) -> Result<()> {
        validate_name(&self.h.name)?;
        if let Some(at_least) = self.h.at_least {
            return Err(Error::InvalidArgument(format!(
                "release_by_token cannot keep the lock for hold_at_least ({at_least:?}): \
                 it does not know when the lease was taken; release through the guard, \
                 or call extend_by_token with the time left"
            )));
        }
        let outcome = self
            .h
            .inner
            .servers
            .release(LeaseId {
                kind: LockKind::Lock,
                keys: &self.h.keys,
                hold: token,
                queued: None,
            })
            .await?;
        self.by_token_outcome(outcome)
    }

    /// Sets the lease held under `token` to end `ttl` from now.
    ///
    /// # Errors
    ///
    /// [`Error::NotOwner`](crate::Error::NotOwner) when another owner holds the lock (nothing is
    /// changed); [`Error::Lost`](crate::Error::Lost) when nobody holds it;
    /// [`Error::InvalidArgument`](crate::Error::InvalidArgument) for a TTL out of bounds; connection errors.
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
        self.clone().ttl(ttl).h.validate()?;
        let extension = Extension {
            key: self.h.keys.lock(),
            hold: token,
            ttl: server_ttl(ttl, self.h.delay),
        };
        let outcome = self
            .h
            .inner
            .servers
            .extend_one(LockKind::Lock, extension)
            .await?;
        self.by_token_outcome(outcome)
    }

    fn by_token_outcome(&self, outcome: Owned) -> Result<()> {
        match outcome {
            Owned::Done => Ok(()),
            Owned::Missing => Err(Error::Lost {
                name: self.h.name.clone(),
            }),
            Owned::OtherOwner => Err(Error::NotOwner {
                name: self.h.name.clone(),
            }),
        }
    }

    /// Reads who holds the lock, for how much longer, its last fencing token
    /// and how many clients wait for it. Changes nothing.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidArgument`](crate::Error::InvalidArgument) for a bad name, [`Error::WrongType`](crate::Error::WrongType) naming the
    /// key when one of the lock's keys holds another type, or its key a string
    /// that is not an owner token (no lock wrote it); connection errors.
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
        validate_name(&self.h.name)?;
        let servers = &self.h.inner.servers;
        let stored = servers.lock_status(&self.h.keys).await?;
        // A string no lock wrote (issue 36): not a holder.
        if stored
            .holder
            .as_deref()
            .is_some_and(|t| !crate::token::is_random_token(t))
        {
            return Err(crate::Error::WrongType {
                key: self.h.keys.lock().to_owned(),
            });
        }
        let waiting_clients = servers.waiting_clients(&self.h.keys).await?;
        let holder_about = match &stored.holder {
            Some(token) => servers
                .who(&[self.h.keys.who(token)])
                .await?
                .pop()
                .flatten(),
            None => None,
        };
        Ok(LockStatus {
            name: self.h.name.clone(),
            holder: stored.holder.as_deref().map(|t| redact(t).to_owned()),
            holder_about,
            remaining: stored.remaining,
            fence: stored.fence,
            waiters: stored.waiters,
            waiting_clients,
        })
    }

    /// Checks the name and options before anything is sent.
    pub(crate) fn validate(&self) -> Result<()> {
        self.h.validate()
    }

    /// Tries until acquired or, with `wait: Some`, until the wait runs out
    /// (`Ok(None)`); with `None`, tries once.
    async fn acquire_within(&self, wait: Option<Duration>) -> Result<Option<LockGuard>> {
        self.h.validate()?;
        let held = take_lease(&self.h, LockKind::Lock, self.fair, wait).await?;
        Ok(held.map(|held| Guard::new(held, hold::Exclusive)))
    }
}

/// The lease lock's acquisition (lock_acquire.lua, with its queue and
/// hand-offs) for `h`, as `kind` (a Lock, or an Election's lease): tries
/// until acquired or, with `wait: Some`, until the wait runs out
/// (`Ok(None)`); with `None`, tries once.
pub(crate) async fn take_lease(
    h: &Handle,
    kind: LockKind,
    fair: bool,
    wait: Option<Duration>,
) -> Result<Option<Held>> {
    let servers = &h.inner.servers;
    let token = Token::random();
    let target = h.target(kind, token.as_str());
    // Set once an attempt was refused while waiting: from then on this
    // caller may be in the queue, and leaves it when it acquires.
    let queued = AtomicBool::new(false);
    let acquired = acquire(&target, wait, || async {
        let queueing = match wait {
            None => Queueing::No,
            Some(_) => Queueing::Wait {
                already: queued.load(Ordering::Relaxed),
            },
        };
        let reply = servers
            .lock_acquire(
                &h.keys,
                token.as_str(),
                h.server_ttl(),
                queueing,
                fair,
                h.fence_memory(),
            )
            .await;
        // Refused, or no reply (it may have been refused and queued
        // all the same): from now on, leave the queue on acquiring.
        if queueing != Queueing::No && !matches!(reply, Ok(Acquire::Acquired { .. })) {
            queued.store(true, Ordering::Relaxed);
        }
        reply
    })
    .await?;
    Ok(acquired.map(|won| {
        let hold = token.as_str().to_owned();
        h.hold((kind, token, hold), won)
    }))
}

/// A lock's state at one moment, from [`Lock::status`](crate::Lock::status) or [`Client::list`](crate::Client::list).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct LockStatus {
    /// The lock name.
    pub name: String,
    /// The first 8 characters of the holder's owner token (never the whole
    /// token: that is a capability), or `None` when free.
    pub holder: Option<String>,
    /// What the holder says of itself, if it did
    /// ([`Lock::describe`](crate::Lock::describe); `leasehold run`: host, pid
    /// and command).
    pub holder_about: Option<String>,
    /// The holder's remaining lease, or `None` when free.
    pub remaining: Option<Duration>,
    /// The last fencing token issued for this name, if still kept: while
    /// its lease lasts (a release that frees the lock drops it), or for the
    /// [`fence_memory`](crate::ClientBuilder::fence_memory) of the client
    /// that took it, if set.
    pub fence: Option<u64>,
    /// Waiters queued for the lock (callers of [`Lock::acquire`](crate::Lock::acquire) that were
    /// refused and are still waiting), in every client.
    pub waiters: usize,
    /// Client connections subscribed to this lock's releases: clients
    /// waiting now, or that waited in the last few seconds.
    pub waiting_clients: usize,
}

/// Proof of holding a [`Lock`](crate::Lock); the lease is renewed while it lives.
///
/// Dropping the guard stops renewal and releases the lease in the background
/// (never blocking, never panicking): the client's watchdog task sends the
/// release. Call [`LockGuard::release`](crate::LockGuard::release) instead to learn whether the lease
/// was still held.
///
/// When the runtime is shutting down (a guard dropped as `main` returns, or
/// after the runtime was dropped), that task no longer runs: the release is
/// not sent and the lock stays held until its TTL ends. Release the guard,
/// or call [`Client::close`](crate::Client::close), before the program ends.
pub type LockGuard = Guard<hold::Exclusive>;

impl LockGuard {
    /// Stops renewal and hands back the owner token *without* releasing:
    /// the lease then ends by its TTL unless someone extends or releases it
    /// with the token ([`Lock::extend_by_token`](crate::Lock::extend_by_token), [`Lock::release_by_token`](crate::Lock::release_by_token)).
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
    pub fn detach(self) -> String {
        self.held.detach().token.as_str().to_owned()
    }
}
