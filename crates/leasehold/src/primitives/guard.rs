//! What every guard shares: the held lease, its renewal, owner-checked
//! extend and release, and the background release when it is dropped.
//!
//! Every public guard of one lease is the one generic [`Guard`] around a
//! [`Held`], told apart by its kind `K` ([`hold`]): the methods they share
//! are written once, here; what one kind has alone (a write hold's
//! `downgrade`, a leadership's `term`) is in its primitive's file, as an
//! `impl` of its alias ([`LockGuard`](crate::LockGuard) is
//! `Guard<hold::Exclusive>`, ...).

use std::sync::Arc;
use std::time::Duration;

use tracing::Instrument;

use crate::error::{Error, Result};
use crate::inner::Inner;
use crate::lease::Lease;
use crate::scripts::{Extension, Owned};
use crate::telemetry::{HeldLease, LostReason};

/// One held lease, tracked by the watchdog while it lives.
pub(crate) struct Held {
    inner: Arc<Inner>,
    pub(crate) lease: Arc<Lease>,
    fence: u64,
    watchdog: bool,
    /// Released, detached or handed on: nothing left to do on drop.
    done: bool,
    /// In `leasehold_held_leases` while the guard lives.
    _counted: HeldLease,
}

impl Held {
    /// Wraps a freshly acquired lease and, with `watchdog`, starts renewing it.
    pub(crate) fn new(inner: &Arc<Inner>, lease: Lease, fence: u64, watchdog: bool) -> Held {
        let lease = Arc::new(lease);
        // On the books even when not renewed, so Client::close gives it back.
        inner.watchdog.track(Arc::clone(&lease), watchdog);
        Held {
            inner: inner.clone(),
            lease,
            fence,
            watchdog,
            done: false,
            _counted: HeldLease::count(),
        }
    }

    pub(crate) fn inner(&self) -> &Arc<Inner> {
        &self.inner
    }

    pub(crate) fn watchdog(&self) -> bool {
        self.watchdog
    }

    pub(crate) fn fence(&self) -> u64 {
        self.fence
    }

    pub(crate) fn token(&self) -> &str {
        self.lease.token.as_str()
    }

    pub(crate) fn name(&self) -> &str {
        &self.lease.name
    }

    pub(crate) fn is_lost(&self) -> bool {
        self.lease.is_lost()
    }

    pub(crate) fn valid_for(&self) -> std::time::Duration {
        self.lease.valid_for()
    }

    pub(crate) async fn lost(&self) {
        self.lease.lost().await;
    }

    pub(crate) fn lost_reason(&self) -> Option<LostReason> {
        self.lease.lost_reason()
    }

    pub(crate) fn lost_error(&self) -> Error {
        Error::Lost {
            name: self.lease.name.clone(),
        }
    }

    pub(crate) async fn extend(&self, ttl: Duration) -> Result<()> {
        let inner = &self.inner;
        inner.check_ttl(ttl)?;
        let lease = &self.lease;
        let extension = Extension {
            key: lease.keys.lock(),
            hold: &lease.hold,
            ttl: lease.server_ttl(ttl),
        };
        let send = || inner.servers.extend_one(lease.kind, extension);
        if !lease.extend(ttl, send).await? {
            return Err(self.lost_error());
        }
        if let Some(key) = lease.who()
            && let Err(e) = inner
                .servers
                .describe(&key, None, Some(lease.server_ttl(ttl)))
                .await
        {
            tracing::debug!(%key, error = %e, "extending the holder's description failed");
        }
        if self.watchdog {
            inner.watchdog.track(Arc::clone(lease), true);
        }
        Ok(())
    }

    pub(crate) async fn release(mut self) -> Result<()> {
        self.done = true;
        self.lease.mark_released();
        let inner = &self.inner;
        // Off the watchdog's books from here: `Client::close` waits for this
        // release instead (dropped last, after a release handed to the
        // background on failure or cancel).
        let _flight = inner.flights.begin();
        inner.watchdog.untrack(self.lease.id);
        if self.lease.delays() && self.lease.is_lost() {
            // lock_delay: the lease ended without a release, so the lock
            // stays taken for the delay; a release now would cut it short.
            self.lease.mark_lost(self.lease.expiry_reason());
            return Err(self.lost_error());
        }
        let mut pending = ReleaseOnDrop(Some(&self));
        let lease = &self.lease;
        let span = tracing::info_span!("leasehold.release", lock = %lease.name, kind = lease.kind.as_str());
        let outcome = match lease.kept_for() {
            // hold_at_least: set to last until then, no longer renewed; the
            // lock frees itself when it ends. Owner-checked like a release.
            Some(ttl) => {
                let extension = Extension {
                    key: lease.keys.lock(),
                    hold: &lease.hold,
                    ttl,
                };
                let send = || inner.servers.extend_one(lease.kind, extension);
                lease
                    .extend(ttl, send)
                    .instrument(span)
                    .await
                    .map(|kept| if kept { Owned::Done } else { Owned::Missing })
            }
            None => {
                let send = || inner.servers.release(lease.id());
                lease.release(send).instrument(span).await
            }
        };
        pending.0 = None;
        if lease.kept_for().is_none()
            && let Some(key) = lease.who()
            && let Err(e) = inner.servers.describe(&key, None, None).await
        {
            tracing::debug!(%key, error = %e, "deleting the holder's description failed; it expires with the lease");
        }
        match outcome {
            Ok(Owned::Done) => Ok(()),
            Ok(gone @ (Owned::Missing | Owned::OtherOwner)) => {
                self.lease.mark_lost(gone.lost_reason());
                Err(self.lost_error())
            }
            Err(e) => {
                self.release_in_background();
                Err(e)
            }
        }
    }

    /// Stops renewal without releasing, for when the lease is handed on
    /// (to another process, or replaced on the server by another hold).
    pub(crate) fn detach(mut self) -> Arc<Lease> {
        self.done = true;
        self.inner.watchdog.untrack(self.lease.id);
        Arc::clone(&self.lease)
    }

    fn release_in_background(&self) {
        let watchdog = &self.inner.watchdog;
        watchdog.untrack(self.lease.id);
        if self.lease.delays() && self.lease.is_lost() {
            // lock_delay: left to expire with its delay (see release).
            return;
        }
        watchdog.release_lease(&self.lease);
    }
}

/// Writes what `lease`'s holder says of itself ([`Lease::who`]), if it
/// said anything, with the lease's TTL, and deletes the description kept
/// at `moved_from` (a downgraded write hold's), in a task of its own: the
/// guard is handed out at once (its lease's validity runs meanwhile, and
/// a renewal must not wait for this). A release that came first (it marks
/// the lease released before it sends anything) is followed by a deletion
/// here; a release that comes later sends its deletion after the write was
/// answered. Either way nothing is left behind.
pub(crate) fn describe_hold(inner: &Arc<Inner>, lease: &Arc<Lease>, moved_from: Option<String>) {
    let (Some(about), Some(key)) = (lease.about.clone(), lease.who()) else {
        return;
    };
    let ttl = lease.server_ttl(lease.snapshot().ttl);
    let (servers, lease) = (inner.servers.clone(), Arc::clone(lease));
    tokio::spawn(async move {
        let mut outcome = servers.describe(&key, Some(&about), Some(ttl)).await;
        if lease.is_released() {
            outcome = outcome.and(servers.describe(&key, None, None).await);
        }
        if let Some(old) = moved_from {
            outcome = outcome.and(servers.describe(&old, None, None).await);
        }
        if let Err(e) = outcome {
            tracing::debug!(%key, error = %e, "could not record the holder's description");
        }
    });
}

/// Hands a release to the background if `release()` is cancelled midway.
struct ReleaseOnDrop<'a>(Option<&'a Held>);

impl Drop for ReleaseOnDrop<'_> {
    fn drop(&mut self) {
        if let Some(held) = self.0 {
            held.release_in_background();
        }
    }
}

impl Drop for Held {
    fn drop(&mut self) {
        if !self.done {
            self.release_in_background();
        }
    }
}

/// A held lease of any kind: the one guard type behind
/// [`LockGuard`](crate::LockGuard), [`ReentrantGuard`](crate::ReentrantGuard),
/// [`ReadGuard`](crate::ReadGuard), [`WriteGuard`](crate::WriteGuard),
/// [`Permit`](crate::Permit) and [`Leadership`](crate::Leadership) (each an
/// alias of `Guard<K>` with its kind `K` from [`hold`](crate::hold)). The
/// methods every guard has are these, written once; a kind's own methods
/// (`WriteGuard::downgrade`, `Leadership::term`, `LockGuard::detach`) are on
/// its alias. [`Guard::into_any`] forgets the kind, for code that holds
/// guards of several kinds in one place (`Guard<hold::Any>`, or plain
/// `Guard`).
///
/// The lease is renewed while the guard lives. Dropping the guard stops
/// renewal and releases the lease in the background (never blocking, never
/// panicking): the client's watchdog task sends the release. Call
/// [`release`](Guard::release) instead to learn whether the lease was still
/// held.
///
/// When the runtime is shutting down (a guard dropped as `main` returns, or
/// after the runtime was dropped), that task no longer runs: the release is
/// not sent and the lock stays held until its TTL ends. Release the guard,
/// or call [`Client::close`](crate::Client::close), before the program ends.
#[must_use = "dropping the guard releases at once"]
pub struct Guard<K: hold::Kind = hold::Any> {
    pub(crate) held: Held,
    pub(crate) kind: K,
}

/// The kinds of [`Guard`]: what its type parameter says it holds. Each kind
/// adds its own methods to its guard (`Guard<hold::Write>::downgrade`, ...);
/// [`Any`](hold::Any) is a guard whose kind was forgotten
/// ([`Guard::into_any`]).
pub mod hold {
    /// What a [`Guard`](crate::Guard) can hold; implemented by the kinds of
    /// this module only.
    pub trait Kind: sealed::Sealed + Send + Sync + 'static {}

    pub(crate) mod sealed {
        /// The guard's type name, for its `Debug` output.
        pub trait Sealed {
            fn type_name(&self) -> &'static str;
        }
    }

    macro_rules! kinds {
        ($($(#[$doc:meta])* $kind:ident => $alias:literal;)+) => {$(
            $(#[$doc])*
            #[derive(Debug)]
            #[non_exhaustive]
            pub struct $kind;

            impl Kind for $kind {}

            impl sealed::Sealed for $kind {
                fn type_name(&self) -> &'static str {
                    $alias
                }
            }
        )+};
    }

    kinds! {
        /// A [`Lock`](crate::Lock)'s or a [`FairLock`](crate::FairLock)'s
        /// lease: [`LockGuard`](crate::LockGuard).
        Exclusive => "LockGuard";
        /// A [`ReentrantLock`](crate::ReentrantLock)'s hold:
        /// [`ReentrantGuard`](crate::ReentrantGuard).
        Reentrant => "ReentrantGuard";
        /// A read hold of an [`RwLock`](crate::RwLock):
        /// [`ReadGuard`](crate::ReadGuard).
        Read => "ReadGuard";
        /// The write hold of an [`RwLock`](crate::RwLock):
        /// [`WriteGuard`](crate::WriteGuard).
        Write => "WriteGuard";
        /// A [`Semaphore`](crate::Semaphore)'s permit:
        /// [`Permit`](crate::Permit).
        SemaphorePermit => "Permit";
    }

    /// An [`Election`](crate::Election)'s leadership, with the value it
    /// campaigned with: [`Leadership`](crate::Leadership).
    #[derive(Debug)]
    pub struct Leader {
        pub(crate) value: String,
    }

    impl Kind for Leader {}

    impl sealed::Sealed for Leader {
        fn type_name(&self) -> &'static str {
            "Leadership"
        }
    }

    /// A guard whose kind was forgotten ([`Guard::into_any`](crate::Guard::into_any)):
    /// only the methods every guard has.
    #[derive(Debug)]
    pub struct Any {
        pub(crate) type_name: &'static str,
    }

    impl Kind for Any {}

    impl sealed::Sealed for Any {
        fn type_name(&self) -> &'static str {
            self.type_name
        }
    }
}

impl<K: hold::Kind> std::fmt::Debug for Guard<K> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct(self.kind.type_name())
            .field("name", &self.held.name())
            .field("fence", &self.held.fence())
            .field(
                "token",
                &format_args!("{}…", crate::token::redact(self.held.token())),
            )
            .field("lost", &self.held.is_lost())
            .finish()
    }
}

impl<K: hold::Kind> Guard<K> {
    /// Wraps a held lease as a guard of kind `kind`.
    pub(crate) fn new(held: Held, kind: K) -> Guard<K> {
        Guard { held, kind }
    }

    /// The same guard with its kind forgotten: only the methods every guard
    /// has, for code that keeps guards of several kinds in one place (one
    /// variable, one collection, a binding to another language).
    ///
    /// ```no_run
    /// # async fn run(client: leasehold::Client, shared: bool) -> Result<(), leasehold::Error> {
    /// let guard: leasehold::Guard = if shared {
    ///     client.rw_lock("catalog").read().await?.into_any()
    /// } else {
    ///     client.lock("catalog:rebuild").acquire().await?.into_any()
    /// };
    /// println!("fence {}", guard.fence());
    /// guard.release().await?;
    /// # Ok(()) }
    /// ```
    pub fn into_any(self) -> Guard<hold::Any> {
        let type_name = self.kind.type_name();
        Guard {
            held: self.held,
            kind: hold::Any { type_name },
        }
    }

    /// The fencing token: strictly greater than that of every earlier
    /// acquisition of this lock name on this Redis (see each primitive for
    /// when re-entries share one). Send it with every write to the protected
    /// resource and have the resource reject lower ones.
    pub fn fence(&self) -> u64 {
        self.held.fence()
    }

    /// This holder's owner token. It is a capability (whoever has it can
    /// release the lock), so do not log it whole.
    pub fn token(&self) -> &str {
        self.held.token()
    }

    /// The lock's name.
    pub fn name(&self) -> &str {
        self.held.name()
    }

    /// What the kind's scripts know this hold by (a lock's token, a
    /// reentrant hold id, an RwLock's or a semaphore's member): the
    /// simulator matches break notices and `release_by_token`'s give-backs
    /// to guards by it. Simulation builds only.
    #[cfg(leasehold_sim)]
    #[doc(hidden)]
    pub fn sim_hold(&self) -> &str {
        &self.held.lease.hold
    }

    /// True once the lease (hold, permit, leadership) may have expired or
    /// was taken by another owner.
    ///
    /// Based on the monotonic clock and the last successful renewal, so it
    /// turns true at the end of the validity even if the watchdog could not
    /// run.
    pub fn is_lost(&self) -> bool {
        self.held.is_lost()
    }

    /// Why the lease was lost, as far as this client knows; `None` while it
    /// is not ([`is_lost`](Self::is_lost) is false).
    /// [`LostReason::Unreachable`](crate::LostReason::Unreachable):
    /// Redis did not answer the renewals sent in time;
    /// [`Expired`](crate::LostReason::Expired): none was (this
    /// process paused), or Redis no longer had it;
    /// [`Broken`](crate::LostReason::Broken): an operator broke it
    /// ([`Client::break_lease`](crate::Client::break_lease)), told at once.
    pub fn lost_reason(&self) -> Option<LostReason> {
        self.held.lost_reason()
    }

    /// How long the lease is certain to last from now, by this client's
    /// monotonic clock (the server keeps it at least that long); zero once
    /// it is lost. The watchdog's renewals push it back; without them it
    /// only shrinks.
    ///
    /// ```no_run
    /// # async fn run(client: leasehold::Client) -> Result<(), leasehold::Error> {
    /// # async fn step() {}
    /// let guard = client.lock("migration").acquire().await?;
    /// if guard.valid_for() > std::time::Duration::from_secs(5) {
    ///     step().await; // short enough to finish inside the lease
    /// }
    /// # Ok(()) }
    /// ```
    pub fn valid_for(&self) -> Duration {
        self.held.valid_for()
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
        self.held.lost().await;
    }

    /// Sets the lease to end `ttl` from now, if this guard still holds it.
    /// With the watchdog on, later renewals use the new TTL.
    ///
    /// ```no_run
    /// # async fn run(client: leasehold::Client) -> Result<(), leasehold::Error> {
    /// let guard = client.semaphore("exports", 4).acquire().await?;
    /// guard.extend(std::time::Duration::from_secs(60)).await?;
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    ///
    /// [`Error::Lost`](crate::Error::Lost) if it expired or another
    /// owner holds the lock (the guard is then marked lost);
    /// [`Error::InvalidArgument`](crate::Error::InvalidArgument) for
    /// a TTL out of bounds; connection errors.
    ///
    /// # Cancel safety
    ///
    /// If dropped, the extension may or may not have happened.
    pub async fn extend(&self, ttl: Duration) -> Result<()> {
        self.held.extend(ttl).await
    }

    /// Gives back the lease, if this guard still holds it, and wakes
    /// waiters.
    ///
    /// ```no_run
    /// # async fn run(client: leasehold::Client) -> Result<(), leasehold::Error> {
    /// let guard = client.rw_lock("catalog").write().await?;
    /// guard.release().await?;
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    ///
    /// [`Error::Lost`](crate::Error::Lost) if it had already expired
    /// or another owner holds the lock (nothing is changed then);
    /// connection errors (the release is then retried once in the
    /// background, and the lease ends by its TTL at the latest).
    ///
    /// # Cancel safety
    ///
    /// If dropped, the release still happens in the background.
    pub async fn release(self) -> Result<()> {
        self.held.release().await
    }
}
