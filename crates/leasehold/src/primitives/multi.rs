//! Several lease locks at once: all or none, one guard, a fence per name.
//!
//! Built on [`Lock`](crate::Lock): one lock per name, taken one after the other in
//! sorted order (names deduplicated), each with what is left of the wait;
//! if one cannot be had, those already taken are given back. No new script:
//! each name keeps its own keys, slot, queue, hand-off and renewal, so the
//! set works wherever a single [`Lock`](crate::Lock) does (one server, a cluster with the
//! names in different slots, Sentinel, Redlock).

use std::sync::Arc;
use std::time::Duration;

use futures_util::future::{join_all, select_all};

use crate::clock::Instant;
use crate::error::{Error, Result};
use crate::inner::Inner;
use crate::primitives::lock::{Lock, LockGuard};

/// A handle to several lease locks taken together; made by
/// [`Client::multi_lock`](crate::Client::multi_lock).
///
/// [`acquire`](MultiLock::acquire) takes every name or none: one
/// [`MultiLockGuard`] with a fence per name, or an error (or `None` from
/// [`try_acquire`](MultiLock::try_acquire)) with nothing left held.
///
/// # Order, and why it cannot deadlock
///
/// The names are deduplicated and sorted (byte order), and always taken in
/// that order, whatever order they were given in. Two callers whose sets
/// overlap therefore ask for their common names in the same order: the one
/// that gets the first common name gets the others before the second caller
/// can hold any of them, so no caller waits for a name while holding one
/// the other waits for (no cycle, no deadlock). While it waits for a name,
/// a caller holds the names before it (renewed as usual), never the ones
/// after; a caller that gives up gives those back at once.
///
/// This is ordered per-name acquisition, not one atomic script: all or
/// none describes the outcome (a failed or cancelled acquire leaves no name
/// held), but another client may see part of a set held for a moment while
/// it is being taken, as it would see a holder of one of the names. One
/// script taking all names at once would only work when they share a slot;
/// per-name acquisition works across slots and reuses the single lock's
/// waiting, hand-off and cancel safety as they are.
///
/// # Fences
///
/// Each name gets the fence its own [`Lock`](crate::Lock) would: strictly increasing per
/// name. Pass each resource the fence of the name that guards it
/// ([`MultiLockGuard::fence`]).
#[derive(Clone)]
pub struct MultiLock {
    inner: Arc<Inner>,
    /// One lock per name, sorted by name, no duplicates. Their own `wait`
    /// is set per acquisition (what is left of this handle's); they carry
    /// no `hold_at_least`: that is set once every name is held.
    locks: Vec<Lock>,
    wait: Duration,
    at_least: Option<Duration>,
}

impl std::fmt::Debug for MultiLock {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MultiLock")
            .field("names", &self.names())
            .field("wait", &self.wait)
            .finish()
    }
}

impl MultiLock {
    pub(crate) fn new(inner: Arc<Inner>, names: Vec<String>) -> MultiLock {
        let mut names = names;
        names.sort_unstable();
        names.dedup();
        let locks = names
            .into_iter()
            .map(|name| Lock::new(Arc::clone(&inner), name))
            .collect();
        MultiLock {
            inner,
            locks,
            wait: crate::primitives::handle::DEFAULT_WAIT,
            at_least: None,
        }
    }

    fn each(mut self, set: impl Fn(Lock) -> Lock) -> MultiLock {
        self.locks = self.locks.into_iter().map(set).collect();
        self
    }

    /// The lease length of every name; see [`Lock::ttl`](crate::Lock::ttl). The watchdog
    /// renews each name's lease every `ttl / 3` while the guard lives.
    ///
    /// Defaults to 30 s.
    pub fn ttl(self, ttl: Duration) -> MultiLock {
        self.each(|lock| lock.ttl(ttl))
    }

    /// How long [`MultiLock::acquire`] waits in all, for every name
    /// together (each name waits for what is left). `Duration::MAX` waits
    /// until all are acquired (or the client is closed).
    ///
    /// Defaults to 10 s.
    pub fn wait(mut self, wait: Duration) -> MultiLock {
        self.wait = wait;
        self
    }

    /// Whether the client's watchdog renews the leases; see
    /// [`Lock::watchdog`](crate::Lock::watchdog).
    ///
    /// Without renewal, a name taken first can expire while a later one is
    /// waited for; [`MultiLock::acquire`] then gives the set back and takes
    /// it again, so keep the TTL well above the wait (with a wait longer
    /// than the TTL under contention, it may never get the whole set).
    ///
    /// Defaults to `true`.
    pub fn watchdog(self, renew: bool) -> MultiLock {
        self.each(|lock| lock.watchdog(renew))
    }

    /// Scheduled-job semantics for the whole set; see
    /// [`Lock::hold_at_least`](crate::Lock::hold_at_least). Counted from when the last name was
    /// acquired, and applied only then: names given back because another
    /// could not be had are freed at once.
    ///
    /// Defaults to none.
    pub fn hold_at_least(mut self, at_least: Duration) -> MultiLock {
        self.at_least = Some(at_least);
        self
    }

    /// What each name's hold says of its holder; see
    /// [`Lock::describe`](crate::Lock::describe).
    ///
    /// Defaults to none.
    pub fn describe(self, about: impl Into<String>) -> MultiLock {
        let about: String = about.into();
        self.each(|lock| lock.describe(about.clone()))
    }

    /// Chubby's lock-delay on every name; see [`Lock::lock_delay`](crate::Lock::lock_delay).
    ///
    /// Defaults to zero.
    pub fn lock_delay(self, delay: Duration) -> MultiLock {
        self.each(|lock| lock.lock_delay(delay))
    }

    /// The names, sorted and without duplicates: the order they are taken in.
    pub fn names(&self) -> Vec<&str> {
        self.locks.iter().map(Lock::name).collect()
    }

    /// Checks every name and option before anything is sent.
    fn validate(&self) -> Result<()> {
        if self.inner.is_closed() {
            return Err(Error::Closed);
        }
        let Some(first) = self.locks.first() else {
            return Err(Error::InvalidArgument(
                "Client::multi_lock was given no name: pass at least one lock name".into(),
            ));
        };
        for lock in &self.locks {
            lock.validate()?;
        }
        match self.at_least {
            Some(at_least) => first.clone().hold_at_least(at_least).validate(),
            None => Ok(()),
        }
    }

    /// Takes every name, waiting up to [`MultiLock::wait`] in all. If the
    /// lease of a name taken first is lost while the next are waited for
    /// (it expired, another owner took it), the set is not all held: it is
    /// given back and taken again, within the wait.
    ///
    /// # Errors
    ///
    /// [`Error::Timeout`](crate::Error::Timeout) naming the first name that could not be had in
    /// time, or whose lease was lost as the wait ran out (every name taken
    /// is given back first);
    /// [`Error::InvalidArgument`](crate::Error::InvalidArgument) for no names, a bad name or TTL (nothing
    /// is sent then); otherwise as [`Lock::acquire`](crate::Lock::acquire), again with nothing
    /// left held.
    ///
    /// # Cancel safety
    ///
    /// Dropping the future leaves nothing held and no place in any queue:
    /// the names already taken are released in the background, and the
    /// name being waited for is left as a cancelled [`Lock::acquire`](crate::Lock::acquire)
    /// leaves it.
    ///
    /// # Example
    ///
    /// ```no_run
    /// # async fn run(client: leasehold::Client) -> Result<(), leasehold::Error> {
    /// let guard = client.multi_lock(["account:1", "account:2"]).acquire().await?;
    /// println!("fences {:?}", guard.fences());
    /// guard.release().await?;
    /// # Ok(()) }
    /// ```
    pub async fn acquire(&self) -> Result<MultiLockGuard> {
        self.validate()?;
        let deadline = Instant::now().checked_add(self.wait);
        loop {
            let mut guards = Vec::with_capacity(self.locks.len());
            for lock in &self.locks {
                let left = deadline.map_or(Duration::MAX, |d| {
                    d.saturating_duration_since(Instant::now())
                });
                match lock.clone().wait(left).acquire().await {
                    Ok(guard) => guards.push(guard),
                    Err(e) => {
                        give_back(guards).await;
                        return Err(match e {
                            Error::Timeout { name, .. } => Error::Timeout {
                                name,
                                waited: self.wait,
                            },
                            e => e,
                        });
                    }
                }
            }
            // A lease taken first may have been lost while the next were
            // waited for: then the set is not all held. Give it back and
            // take it again, within the wait.
            let Some(lost) = first_lost(&guards) else {
                return Ok(self.held(guards));
            };
            tracing::debug!(lock = %lost, "a lease of the set was lost while taking the rest; taking the set again");
            give_back(guards).await;
            if deadline.is_some_and(|d| Instant::now() >= d) {
                return Err(Error::Timeout {
                    name: lost,
                    waited: self.wait,
                });
            }
        }
    }

    /// Takes every name if all are free, without waiting: `Ok(None)` (with
    /// nothing left held) when another owner holds any of them, or the
    /// lease of one was lost before the last was taken.
    ///
    /// # Errors
    ///
    /// As [`MultiLock::acquire`], except [`Error::Timeout`](crate::Error::Timeout).
    ///
    /// # Cancel safety
    ///
    /// As [`MultiLock::acquire`].
    ///
    /// # Example
    ///
    /// ```no_run
    /// # async fn run(client: leasehold::Client) -> Result<(), leasehold::Error> {
    /// match client.multi_lock(["src", "dst"]).try_acquire().await? {
    ///     Some(guard) => guard.release().await?,
    ///     None => println!("one of them is busy; nothing taken"),
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn try_acquire(&self) -> Result<Option<MultiLockGuard>> {
        self.validate()?;
        let mut guards = Vec::with_capacity(self.locks.len());
        for lock in &self.locks {
            match lock.try_acquire().await {
                Ok(Some(guard)) => guards.push(guard),
                Ok(None) => {
                    give_back(guards).await;
                    return Ok(None);
                }
                Err(e) => {
                    give_back(guards).await;
                    return Err(e);
                }
            }
        }
        // As in acquire: a lease lost meanwhile means not all are held.
        if first_lost(&guards).is_some() {
            give_back(guards).await;
            return Ok(None);
        }
        Ok(Some(self.held(guards)))
    }

    /// Takes every name (as [`acquire`](Self::acquire)), runs
    /// `work(fences)` under them, releases them and returns the work's
    /// output. If any lease is lost before the work finishes, the work is
    /// dropped at once and the call returns [`Error::Lost`](crate::Error::Lost) naming it. See
    /// [`Lock::run`](crate::Lock::run) for what "dropped" means for work already sent
    /// elsewhere, and why the fences still matter.
    ///
    /// ```no_run
    /// # async fn run(client: leasehold::Client) -> Result<(), leasehold::Error> {
    /// let moved = client
    ///     .multi_lock(["account:1", "account:2"])
    ///     .run(|fences| async move { fences.len() })
    ///     .await?;
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    ///
    /// As [`acquire`](Self::acquire), then [`Error::Lost`](crate::Error::Lost) as [`Lock::run`](crate::Lock::run).
    ///
    /// # Cancel safety
    ///
    /// Dropping the future drops the work and releases in the background.
    pub async fn run<F, Fut, T>(&self, work: F) -> Result<T>
    where
        F: FnOnce(Vec<(String, u64)>) -> Fut,
        Fut: std::future::Future<Output = T>,
    {
        let guard = self.acquire().await?;
        let work = work(guard.fences.clone());
        let out = {
            let work = std::pin::pin!(work);
            tokio::select! {
                biased;
                () = guard.lost() => None,
                out = work => Some(out),
            }
        };
        let Some(out) = out else {
            let lost = guard.lost_error();
            drop(guard); // hands the releases to the background
            return Err(lost);
        };
        match guard.release().await {
            Ok(()) => Ok(out),
            Err(lost @ Error::Lost { .. }) => Err(lost),
            Err(e) => {
                tracing::warn!(error = %e, "release after run failed; retried in the background");
                Ok(out)
            }
        }
    }

    fn held(&self, guards: Vec<LockGuard>) -> MultiLockGuard {
        if let Some(at_least) = self.at_least {
            let until = Instant::now() + at_least;
            for guard in &guards {
                guard.held.lease.keep_from(until);
            }
        }
        let fences = guards
            .iter()
            .map(|g| (g.name().to_owned(), g.fence()))
            .collect();
        MultiLockGuard { guards, fences }
    }
}

/// The name of the first of `guards` whose lease is known lost.
fn first_lost(guards: &[LockGuard]) -> Option<String> {
    guards
        .iter()
        .find(|g| g.is_lost())
        .map(|g| g.name().to_owned())
}

/// Releases `guards` together, after a name could not be had. Each release
/// that fails is retried in the background (as [`LockGuard::release`](crate::LockGuard::release)
/// does); dropped midway, the rest go to the background too.
async fn give_back(guards: Vec<LockGuard>) {
    for outcome in join_all(guards.into_iter().map(LockGuard::release)).await {
        if let Err(e) = outcome {
            tracing::debug!(error = %e, "giving back a name of a multi-lock that was not all taken");
        }
    }
}

/// Proof of holding every name of a [`MultiLock`]; each lease is renewed
/// while it lives.
///
/// Dropping it stops renewal and releases every name in the background
/// (never blocking, never panicking), as a dropped [`LockGuard`](crate::LockGuard) does.
/// Call [`MultiLockGuard::release`] to learn whether all were still held.
#[must_use = "dropping the guard releases every name at once"]
pub struct MultiLockGuard {
    /// Sorted by name, as `fences`.
    guards: Vec<LockGuard>,
    fences: Vec<(String, u64)>,
}

impl std::fmt::Debug for MultiLockGuard {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MultiLockGuard")
            .field("fences", &self.fences)
            .field("lost", &self.lost_names())
            .finish()
    }
}

impl MultiLockGuard {
    /// Each name with its fencing token, sorted by name.
    pub fn fences(&self) -> &[(String, u64)] {
        &self.fences
    }

    /// The fencing token of `name`, or `None` if it is not one of this
    /// guard's names.
    pub fn fence(&self, name: &str) -> Option<u64> {
        self.fences
            .binary_search_by(|(n, _)| n.as_str().cmp(name))
            .ok()
            .map(|i| self.fences[i].1)
    }

    /// The owner token of `name` (a capability: do not log it whole), or
    /// `None` if it is not one of this guard's names.
    pub fn token(&self, name: &str) -> Option<&str> {
        self.guards
            .iter()
            .find(|g| g.name() == name)
            .map(LockGuard::token)
    }

    /// The names, sorted.
    pub fn names(&self) -> Vec<&str> {
        self.fences.iter().map(|(n, _)| n.as_str()).collect()
    }

    /// True once any name's lease may have expired or was taken by another
    /// owner.
    pub fn is_lost(&self) -> bool {
        self.guards.iter().any(LockGuard::is_lost)
    }

    /// Why the first name whose lease is lost lost it (see
    /// [`LockGuard::lost_reason`](crate::LockGuard::lost_reason)); `None` while none is.
    pub fn lost_reason(&self) -> Option<crate::telemetry::LostReason> {
        self.guards.iter().find_map(LockGuard::lost_reason)
    }

    /// The names whose lease is lost (see [`is_lost`](Self::is_lost)).
    pub fn lost_names(&self) -> Vec<&str> {
        self.guards
            .iter()
            .filter(|g| g.is_lost())
            .map(LockGuard::name)
            .collect()
    }

    /// How long every lease is certain to last from now: the shortest.
    pub fn valid_for(&self) -> Duration {
        self.guards
            .iter()
            .map(LockGuard::valid_for)
            .min()
            .unwrap_or_default()
    }

    /// Resolves when any name's lease is lost. See [`LockGuard::lost`](crate::LockGuard::lost).
    ///
    /// # Cancel safety
    ///
    /// Cancel-safe: dropping the future has no effect on the leases.
    pub async fn lost(&self) {
        if self.guards.is_empty() {
            return std::future::pending().await;
        }
        select_all(self.guards.iter().map(|g| Box::pin(g.lost()))).await;
    }

    /// Sets every lease to end `ttl` from now, if still held.
    ///
    /// # Errors
    ///
    /// [`Error::Lost`](crate::Error::Lost) naming a lease that was gone (the others are
    /// extended all the same); otherwise as [`LockGuard::extend`](crate::LockGuard::extend).
    ///
    /// # Cancel safety
    ///
    /// If dropped, each extension may or may not have happened.
    pub async fn extend(&self, ttl: Duration) -> Result<()> {
        first_error(join_all(self.guards.iter().map(|g| g.extend(ttl))).await)
    }

    /// Gives back every name and wakes their waiters.
    ///
    /// # Errors
    ///
    /// [`Error::Lost`](crate::Error::Lost) naming a lease that was already gone (every other
    /// name is released all the same); connection errors (that release is
    /// retried in the background).
    ///
    /// # Cancel safety
    ///
    /// If dropped, the releases still happen in the background.
    pub async fn release(self) -> Result<()> {
        first_error(join_all(self.guards.into_iter().map(LockGuard::release)).await)
    }

    fn lost_error(&self) -> Error {
        Error::Lost {
            name: self
                .lost_names()
                .first()
                .copied()
                .unwrap_or_else(|| self.fences[0].0.as_str())
                .to_owned(),
        }
    }
}

/// The first [`Error::Lost`](crate::Error::Lost) of `outcomes`, else the first error.
fn first_error(outcomes: Vec<Result<()>>) -> Result<()> {
    let mut first = None;
    for outcome in outcomes {
        match outcome {
            Ok(()) => {}
            Err(e @ Error::Lost { .. }) => return Err(e),
            Err(e) => {
                first.get_or_insert(e);
            }
        }
    }
    first.map_or(Ok(()), Err)
}
