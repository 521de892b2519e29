//! What every primitive's handle holds (the lock's name, keys, and the
//! options of its guards), the setters every handle shares, and their
//! defaults. The primitives' layer over the core: the wait loop
//! (`acquire.rs`) knows nothing of clients, handles or guards.

use std::sync::Arc;
use std::time::Duration;

use crate::acquire::{Target, Won};
use crate::error::{Error, Result};
use crate::inner::Inner;
use crate::key::{LockKeys, validate_name};
use crate::kind::LockKind;
use crate::lease::Lease;
use crate::primitives::guard::{Held, describe_hold};
use crate::token::Token;

/// One live hold of an [`RwLock`](crate::RwLock) or one [`Permit`](crate::Permit) of a
/// [`Semaphore`](crate::Semaphore), as a status shows it.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct HoldStatus {
    /// The first 8 characters of the holder's id, as its guard's `token()`
    /// gives it: the owner id of an RwLock hold, the permit's token of a
    /// semaphore. Never the whole id: a token is a capability.
    pub holder: String,
    /// How long the hold's lease has left.
    pub remaining: Duration,
    /// What the holder says of itself, if it did (`describe`; `leasehold
    /// run`: host, pid and command).
    pub about: Option<String>,
}

/// The longest description a holder may give of itself (`describe`).
pub(crate) const MAX_ABOUT_LEN: usize = 512;

/// Default lease length of every handle.
pub const DEFAULT_TTL: Duration = Duration::from_secs(30);
/// Default bound on how long a handle's acquire waits for the holders.
pub const DEFAULT_WAIT: Duration = Duration::from_secs(10);

/// What every primitive's handle holds: the lock's name and keys and the
/// options of its guards. Public handles wrap it and get their setters from
/// [`handle_api!`].
#[derive(Clone)]
pub(crate) struct Handle {
    pub(crate) inner: Arc<Inner>,
    pub(crate) name: String,
    pub(crate) keys: Arc<LockKeys>,
    pub(crate) ttl: Duration,
    pub(crate) wait: Duration,
    pub(crate) watchdog: bool,
    /// `hold_at_least`: a release keeps the lease until this long after
    /// the acquisition.
    pub(crate) at_least: Option<Duration>,
    /// `lock_delay`: the server keeps a lease this much longer than the
    /// holder counts it (Lock and FairLock only).
    pub(crate) delay: Duration,
    /// `describe`: what each hold says of its holder, kept beside it.
    pub(crate) about: Option<Arc<str>>,
}

impl Handle {
    pub(crate) fn new(inner: Arc<Inner>, name: String) -> Handle {
        let keys = Arc::new(LockKeys::new(&inner.prefix, &name));
        Handle {
            inner,
            name,
            keys,
            ttl: DEFAULT_TTL,
            wait: DEFAULT_WAIT,
            watchdog: true,
            at_least: None,
            delay: Duration::ZERO,
            about: None,
        }
    }

    /// How long the fence of each acquisition is kept at least: the lease's
    /// TTL, or the client's [`fence_memory`](crate::ClientBuilder::fence_memory)
    /// if longer.
    pub(crate) fn fence_memory(&self) -> Duration {
        self.ttl.max(self.inner.fence_memory)
    }

    /// What each attempt asks the server to keep the lease for (see
    /// [`server_ttl`](crate::lease::server_ttl)).
    pub(crate) fn server_ttl(&self) -> Duration {
        crate::lease::server_ttl(self.ttl, self.delay)
    }

    /// Checks the name and TTL before anything is sent.
    pub(crate) fn validate(&self) -> Result<()> {
        if self.inner.is_closed() {
            return Err(Error::Closed);
        }
        validate_name(&self.name)?;
        self.inner.check_ttl(self.ttl)?;
        if self.delay > self.inner.max_ttl {
            return Err(Error::InvalidArgument(format!(
                "lock_delay {:?} is above the longest lease TTL allowed, {:?} \
                 (ClientBuilder::ttl_bounds)",
                self.delay, self.inner.max_ttl
            )));
        }
        if let Some(about) = &self.about
            && (about.is_empty() || about.len() > MAX_ABOUT_LEN)
        {
            return Err(Error::InvalidArgument(format!(
                "describe: a holder's description must be 1 to {MAX_ABOUT_LEN} bytes, got {}",
                about.len()
            )));
        }
        match self.at_least {
            Some(at_least) if at_least > self.inner.max_ttl => {
                Err(Error::InvalidArgument(format!(
                    "hold_at_least {at_least:?} is above the longest lease TTL allowed, {:?} \
                     (ClientBuilder::ttl_bounds)",
                    self.inner.max_ttl
                )))
            }
            _ => Ok(()),
        }
    }

    /// A target for [`acquire`] of `kind`, known to the scripts as `hold`.
    pub(crate) fn target<'a>(&'a self, kind: LockKind, hold: &'a str) -> Target<'a, Inner> {
        let handoff = kind
            .describe()
            .hands_off
            .then(|| self.inner.servers.handoff_channel(&self.keys))
            .flatten();
        Target {
            core: &self.inner,
            name: &self.name,
            keys: &self.keys,
            kind,
            hold,
            ttl: self.ttl,
            delay: self.delay,
            queues: handoff.is_some(),
            channel: handoff.unwrap_or_else(|| self.keys.channel().to_owned()),
            // A lease handed over at release lasts until the waiter's
            // deadline on the server, with no room for a lock delay.
            takes_grants: self.watchdog
                && self.inner.min_replicas.is_none()
                && self.delay.is_zero(),
        }
    }

    /// The error for a wait that ran out.
    pub(crate) fn timeout(&self) -> Error {
        Error::Timeout {
            name: self.name.clone(),
            waited: self.wait,
        }
    }

    /// Wraps a lease acquired by `won`, starting its renewal if the
    /// watchdog is on.
    pub(crate) fn held(&self, (kind, token, hold): (LockKind, Token, String), won: Won) -> Held {
        let lease = Lease::new(
            self.name.clone(),
            Arc::clone(&self.keys),
            kind,
            token,
            hold,
            self.ttl,
            won.sent,
        );
        let lease = if won.span == self.ttl {
            lease
        } else {
            lease.first_span(won.span)
        };
        // Counted from now, when the reply came: no earlier than the
        // server's acquisition, so the lease is kept at least that long
        // after it.
        let lease = match self.at_least {
            Some(at_least) => lease.keep_until(crate::clock::Instant::now() + at_least),
            None => lease,
        };
        let lease = lease
            .lock_delay(self.delay)
            .described(self.about.clone())
            .queued_as(won.queued);
        let held = Held::new(&self.inner, lease, won.fence, self.watchdog);
        // On the watchdog's books now: `Client::close` gives it back from
        // there, and need not wait for this acquisition any more.
        drop(won.flight);
        held
    }

    /// [`Handle::held`], and the holder's description (`describe`) written
    /// beside the new hold ([`describe_hold`]), in the background: the
    /// guard is handed out at once, since its lease's validity runs
    /// meanwhile.
    pub(crate) fn hold(&self, id: (LockKind, Token, String), won: Won) -> Held {
        let held = self.held(id, won);
        describe_hold(&self.inner, &held.lease, None);
        held
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
            /// What each hold taken by this handle says of its holder (a
            /// host, a process, a job: `leasehold run` records host, pid and
            /// command), shown by the statuses (`holder_about`/`about`) and
            /// `leasehold status`/`list`. Kept beside the hold, with its TTL,
            /// renewed with it and deleted with its release, so nothing is
            /// left once it ends. Readable by anyone who can read the lock's
            /// keys: put no secret in it. 1 to 512 bytes.
            ///
            /// Defaults to none (nothing is written).
            pub fn describe(mut self, about: impl Into<String>) -> Self {
                self.h.about = Some(std::sync::Arc::from(about.into()));
                self
            }

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
            /// `Duration::MAX` waits until acquired (or the client is closed).
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

/// `hold_at_least`, on the handles whose lease a release may cut short to
/// the time asked: every kind but [`ReentrantLock`](crate::ReentrantLock).
macro_rules! at_least_api {
    ($handle:ident) => {
        impl $handle {
            /// Scheduled-job semantics (ShedLock's `lockAtLeastFor`): a
            /// release made sooner than `at_least` after the acquisition
            /// does not free the lock; it keeps the lease until then (no
            /// longer renewed), so the same job started a little later on
            /// another host (clock skew, cron jitter) finds it taken. A
            /// release after that frees the lock at once, as without it.
            /// A dropped guard and [`Client::close`](crate::Client::close)
            /// keep it the same way. Counted from when the acquisition's
            /// reply arrived, so never shorter than asked on the server.
            ///
            /// Waiters are not handed a kept lease: they take it once it
            /// ends, at their next retry. A lock's queued waiters retry at
            /// least every second; waiters that do not queue (RwLock,
            /// Semaphore, Redlock) retry when the lease they were refused by
            /// would have ended, so they may take it up to one TTL after
            /// the refusal (a kept lease ends without a release message).
            ///
            /// Not on [`ReentrantLock`](crate::ReentrantLock): its holds share one
            /// expiry that only grows (an owner's other holds may need it), so a
            /// kept hold could not be cut down to the time asked.
            ///
            /// At most the client's longest TTL (24 h unless set with
            /// [`ClientBuilder::ttl_bounds`](crate::ClientBuilder::ttl_bounds)).
            /// Defaults to none.
            ///
            /// ```no_run
            /// # async fn run(client: leasehold::Client) -> Result<(), leasehold::Error> {
            /// use std::time::Duration;
            /// // Runs at most once per 5 minutes across hosts, however fast it is.
            /// let lock = client.lock("nightly-report").hold_at_least(Duration::from_secs(300));
            /// if let Some(guard) = lock.try_acquire().await? {
            ///     // ... the job ...
            ///     guard.release().await?; // kept until 5 minutes after the acquisition
            /// }
            /// # Ok(()) }
            /// ```
            pub fn hold_at_least(mut self, at_least: std::time::Duration) -> Self {
                self.h.at_least = Some(at_least);
                self
            }
        }
    };
}

pub(crate) use at_least_api;

/// `lock_delay`, on the lease locks (Lock, FairLock), whose scripts keep a
/// lease for whatever the client asks.
macro_rules! lock_delay_api {
    ($handle:ident) => {
        impl $handle {
            /// Chubby's lock-delay: when a lease ends without a release
            /// (the holder crashed, paused or was cut off), nobody gets the
            /// lock until `delay` has passed as well; a clean release frees
            /// it at once. For resources that cannot check fences: a zombie
            /// holder's late writes land while nobody else holds the lock.
            ///
            /// The server keeps each lease (and each renewal) for the TTL
            /// plus the delay, while the holder counts it as the TTL only:
            /// the guard reports it lost at the TTL, as without a delay.
            /// Waiters are not handed the lease whole at release; they take
            /// it with one more attempt after the release's message.
            ///
            /// At most the client's longest TTL. Defaults to zero.
            ///
            /// ```no_run
            /// # async fn run(client: leasehold::Client) -> Result<(), leasehold::Error> {
            /// use std::time::Duration;
            /// let lock = client.lock("printer").lock_delay(Duration::from_secs(10));
            /// let guard = lock.acquire().await?;
            /// // A crash here keeps the printer locked for the TTL + 10 s.
            /// guard.release().await?; // frees it at once
            /// # Ok(()) }
            /// ```
            pub fn lock_delay(mut self, delay: std::time::Duration) -> Self {
                self.h.delay = delay;
                self
            }
        }
    };
}

pub(crate) use lock_delay_api;

/// The owner setters of handles whose holds belong to an owner id (an
/// `owner: Option<Token>` field: `None` until the user names one, and then
/// each acquisition is its own owner). `$make` is example code that yields
/// a handle.
macro_rules! owner_api {
    ($handle:ident, $make:literal) => {
        impl $handle {
            /// An owner shared on purpose: handles with the same id share
            /// the lock's holds (reentrancy), from any task or process.
            /// Anyone who knows it can act as the owner, so treat it as a
            /// secret when that matters.
            ///
            /// Must be 1 to 512 bytes. Defaults to none: then each
            /// acquisition is its own owner (its guard's `token()`), so
            /// clones of a handle exclude each other as any two holders do
            /// (see the crate docs, "Who holds a lock").
            ///
            /// # Example
            ///
            /// ```no_run
            /// # fn run(client: leasehold::Client) {
            #[doc = concat!("let lock = ", $make, ".owner(\"job-7\");")]
            /// assert_eq!(lock.owner_id(), Some("job-7"));
            /// # }
            /// ```
            pub fn owner(mut self, id: impl Into<String>) -> Self {
                self.owner = Some(crate::token::Token::from_owner(id.into()));
                self
            }

            /// The owner id set with
            #[doc = concat!("[`", stringify!($handle), "::owner`],")]
            /// or `None`: each acquisition is then its own owner.
            pub fn owner_id(&self) -> Option<&str> {
                self.owner.as_ref().map(crate::token::Token::as_str)
            }

            /// The owner of one acquisition: the one set, or a new one.
            fn acquisition_owner(&self) -> crate::token::Token {
                self.owner
                    .clone()
                    .unwrap_or_else(crate::token::Token::random)
            }
        }
    };
}

pub(crate) use owner_api;
