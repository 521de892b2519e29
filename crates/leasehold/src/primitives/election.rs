//! Leader election: the lease lock with a value, and a stream of its leaders.
//!
//! An election is the lease lock of the same name (its queue, hand-off,
//! fences and renewal), with the leader's value in a record next to the
//! lease (`<prefix>:{<name>}:leader`, under the lease's hash tag). The
//! record is written right after the lease is won, by a script that first
//! checks the lease is still the caller's, and lives and ends with the
//! lease: the watchdog renews both in one call, and a resignation drops it
//! before the lease goes. A record is believed only while its owner token
//! holds the lease. A changed leader is published on
//! `<prefix>:{<name>}:elected`, which observers listen to.
//!
//! Why not write the value with the acquisition itself: a lease handed to
//! a standby at release is set by the releaser's script, which does not
//! know the standby's value. Writing it right after, with the owner
//! checked, keeps the lock's scripts as they are; the price is a moment
//! (one round trip) in which the new leader holds the lease and
//! [`Election::leader`] still says nobody leads.

use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use futures_util::stream::{BoxStream, Stream, StreamExt};
use tokio::sync::Notify;

use crate::clock::Instant;
use crate::error::{Error, Result};
use crate::events::Subscription;
use crate::inner::Inner;
use crate::key::validate_name;
use crate::kind::LockKind;
use crate::primitives::guard::{Guard, Held, hold};
use crate::primitives::handle::Handle;
use crate::scripts::Leading;
use crate::token::Token;

/// Longest accepted leader value, in bytes.
pub const MAX_VALUE_LEN: usize = 64 * 1024;

/// How long one round of a campaign waits before the next: a campaign
/// waits until it wins, in rounds that stay in the queue.
const CAMPAIGN_ROUND: Duration = Duration::from_secs(24 * 60 * 60);

/// An observer with no leader to watch re-reads at least this often, in
/// case a change message was lost (a reconnect wakes it as well).
const SAFETY_NET: Duration = Duration::from_secs(30);

/// A handle to one named election; made by [`Client::election`](crate::Client::election).
///
/// Cheap to clone; holds no leadership itself. The election `name` is the
/// lease lock `name` ([`Client::lock`](crate::Client::lock)), so `status` of that lock shows
/// the leader's lease; its value lives next to it.
///
/// # Example
///
/// ```no_run
/// # async fn run(client: leasehold::Client) -> Result<(), leasehold::Error> {
/// use std::time::Duration;
/// let election = client.election("scheduler").ttl(Duration::from_secs(10));
/// let leadership = election.campaign("host-a").await?; // waits until elected
/// tokio::select! {
///     () = leadership.lost() => eprintln!("no longer leader; stop leading"),
///     () = tokio::time::sleep(Duration::from_secs(60)) => leadership.resign().await?,
/// }
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct Election {
    h: Handle,
}

impl std::fmt::Debug for Election {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Election")
            .field("name", &self.h.name)
            .field("ttl", &self.h.ttl)
            .finish()
    }
}

/// Who leads an election: the value its leader campaigned with and its
/// term (the fence of its lease, strictly greater than every earlier
/// leader's).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Leader {
    /// What the leader campaigned with (an address, a host name).
    pub value: String,
    /// The leader's term: its lease's fencing token.
    pub term: u64,
}

impl Election {
    pub(crate) fn new(inner: Arc<Inner>, name: String) -> Election {
        Election {
            h: Handle::new(inner, name),
        }
    }

    /// The length of a leader's lease. While a [`Leadership`] lives, the
    /// watchdog renews it every `ttl / 3`, so the TTL bounds how long a
    /// crashed leader keeps the lead, not how long a live one may lead.
    ///
    /// Must lie within the client's TTL bounds (10 ms ..= 24 h unless set
    /// with [`ClientBuilder::ttl_bounds`](crate::ClientBuilder::ttl_bounds)).
    /// Defaults to 30 s.
    pub fn ttl(mut self, ttl: Duration) -> Self {
        self.h.ttl = ttl;
        self
    }

    /// The election's name.
    pub fn name(&self) -> &str {
        &self.h.name
    }

    /// Waits until this caller leads the election, then records `value` as
    /// the leader's.
    ///
    /// Standbys queue in arrival order: a resignation hands the lease to
    /// the first live one at once (it leads within a round trip); a leader
    /// that crashed is replaced when its lease ends, within its TTL (and at
    /// most a second later: a queued standby tries again at least every
    /// second).
    ///
    /// # Errors
    ///
    /// [`Error::InvalidArgument`](crate::Error::InvalidArgument) for a bad name, TTL or a value over
    /// [`MAX_VALUE_LEN`]; [`Error::Unsupported`](crate::Error::Unsupported) on a Redlock client;
    /// [`Error::WrongType`](crate::Error::WrongType) when a key of the election holds data of another
    /// type; [`Error::Closed`](crate::Error::Closed) once the client is closed; connection errors
    /// that outlast the retries of one attempt.
    ///
    /// # Cancel safety
    ///
    /// Dropping the future leaves nothing held: the queue is left, and a
    /// lease that may have been won is released, in the background.
    ///
    /// # Example
    ///
    /// ```no_run
    /// # async fn run(client: leasehold::Client) -> Result<(), leasehold::Error> {
    /// let leadership = client.election("scheduler").campaign("host-a").await?;
    /// println!("leading in term {}", leadership.term());
    /// # Ok(()) }
    /// ```
    pub async fn campaign(&self, value: impl Into<String>) -> Result<Leadership> {
        let value = value.into();
        self.validate(&value)?;
        loop {
            let Some(held) = self.win(Some(CAMPAIGN_ROUND)).await? else {
                continue;
            };
            if let Some(leadership) = self.announce(held, &value).await? {
                return Ok(leadership);
            }
        }
    }

    /// Leads the election if nobody does, without waiting; `Ok(None)` when
    /// another candidate leads it, or when the answer to recording this
    /// candidate as leader came after the lease's validity: a leadership is
    /// never returned already lost (observers may see that leader for a
    /// moment, until the lease it drops is released). Winning takes two
    /// round trips within the TTL; on a network slower than that,
    /// [`Election::campaign`] keeps trying and never leads.
    ///
    /// # Errors
    ///
    /// As [`Election::campaign`].
    ///
    /// # Cancel safety
    ///
    /// As [`Election::campaign`].
    ///
    /// # Example
    ///
    /// ```no_run
    /// # async fn run(client: leasehold::Client) -> Result<(), leasehold::Error> {
    /// if let Some(leadership) = client.election("scheduler").try_campaign("host-a").await? {
    ///     leadership.resign().await?;
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn try_campaign(&self, value: impl Into<String>) -> Result<Option<Leadership>> {
        let value = value.into();
        self.validate(&value)?;
        match self.win(None).await? {
            Some(held) => self.announce(held, &value).await,
            None => Ok(None),
        }
    }

    /// Campaigns with `value` (as [`Election::campaign`], waiting until it
    /// leads), runs `work(term)` while leading, then resigns and returns the
    /// work's output. If the leadership is lost before the work finishes,
    /// the work is dropped at once and the call returns [`Error::Lost`](crate::Error::Lost):
    /// what a leader does cannot outlast its lead by more than the time to
    /// notice (see [`Lock::run`](crate::Lock::run) for what "dropped" means
    /// for work already sent elsewhere, and why the term still matters).
    ///
    /// # Errors
    ///
    /// As [`Election::campaign`] before the work starts; then
    /// [`Error::Lost`](crate::Error::Lost) when the leadership was lost while the work ran (or
    /// was found gone by the resignation). A resignation that fails for
    /// another reason is retried in the background and the output returned.
    ///
    /// # Cancel safety
    ///
    /// Dropping the future drops the work and resigns in the background.
    ///
    /// # Example
    ///
    /// ```no_run
    /// # async fn run(client: leasehold::Client) -> Result<(), leasehold::Error> {
    /// # async fn schedule_jobs(term: u64) {}
    /// client
    ///     .election("scheduler")
    ///     .lead("host-a", |term| async move { schedule_jobs(term).await })
    ///     .await?;
    /// # Ok(()) }
    /// ```
    pub async fn lead<F, Fut, T>(&self, value: impl Into<String>, work: F) -> Result<T>
    where
        F: FnOnce(u64) -> Fut,
        Fut: std::future::Future<Output = T>,
    {
        crate::primitives::run::run(self.campaign(value).await?.held, work).await
    }

    /// Reads who leads the election now: `None` when nobody does, which
    /// includes the moment (one round trip) between a new leader winning
    /// the lease and recording its value.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidArgument`](crate::Error::InvalidArgument) for a bad name; [`Error::Unsupported`](crate::Error::Unsupported) on a
    /// Redlock client; [`Error::WrongType`](crate::Error::WrongType); connection errors.
    ///
    /// # Example
    ///
    /// ```no_run
    /// # async fn run(client: leasehold::Client) -> Result<(), leasehold::Error> {
    /// match client.election("db-primary").leader().await? {
    ///     Some(leader) => println!("{} leads in term {}", leader.value, leader.term),
    ///     None => println!("nobody leads"),
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn leader(&self) -> Result<Option<Leader>> {
        Ok(self.leading().await?.map(Leader::from))
    }

    /// A stream of the election's leaders: first who leads now (`None`
    /// for nobody), then each change as it happens.
    ///
    /// Event-driven: every recorded leader and every resignation is
    /// published, and the stream reads the election again when told (one
    /// round trip), or when the client reconnected, since messages may have
    /// been missed. A leader that crashed with no standby to replace it
    /// publishes nothing; the stream re-reads when the lease it last read
    /// would end (a renewed lease sets the next re-read), and with nobody
    /// leading at least every 30 s: that is its only timer. Changes closer
    /// together than a round trip may show as the last of them, so a
    /// resignation followed at once by the next leader may show only that
    /// leader; each item differs from the one before, and the terms of the
    /// leaders it shows rise.
    ///
    /// Errors are yielded as items: after a connection error the stream
    /// tries again (with a growing pause, at most 1 s); after
    /// [`Error::Closed`](crate::Error::Closed) (the client was closed, [`Client::close`](crate::Client::close)),
    /// [`Error::InvalidArgument`](crate::Error::InvalidArgument), [`Error::Unsupported`](crate::Error::Unsupported) or
    /// [`Error::WrongType`](crate::Error::WrongType) it ends.
    ///
    /// # Example
    ///
    /// ```no_run
    /// # async fn run(client: leasehold::Client) -> Result<(), leasehold::Error> {
    /// use futures_util::StreamExt;
    /// let mut leaders = client.election("scheduler").observe();
    /// while let Some(leader) = leaders.next().await {
    ///     match leader? {
    ///         Some(leader) => println!("{} leads (term {})", leader.value, leader.term),
    ///         None => println!("nobody leads"),
    ///     }
    /// }
    /// # Ok(()) }
    /// ```
    pub fn observe(&self) -> LeaderChanges {
        let observer = Observer {
            election: self.clone(),
            id: Token::random(),
            subscription: None,
            last: None,
            backoff: Duration::from_millis(50),
            done: false,
        };
        LeaderChanges {
            inner: futures_util::stream::unfold(observer, |mut observer| async move {
                let item = observer.next_change().await?;
                Some((item, observer))
            })
            .boxed(),
        }
    }

    async fn leading(&self) -> Result<Option<Leading>> {
        validate_name(&self.h.name)?;
        let servers = &self.h.inner.servers;
        servers.election_leader(&self.h.keys).await
    }

    fn validate(&self, value: &str) -> Result<()> {
        self.h.validate()?;
        self.h.inner.servers.single("Election")?;
        if value.len() > MAX_VALUE_LEN {
            return Err(Error::InvalidArgument(format!(
                "the leader value is {} bytes long, over the limit of {MAX_VALUE_LEN}: keep \
                 the value short (an address, a host name) and the rest elsewhere",
                value.len()
            )));
        }
        Ok(())
    }

    /// Records `value` for the lease `held` won. `None` when the lease was
    /// lost in between (then it is let go, and the caller tries again).
    async fn announce(&self, held: Held, value: &str) -> Result<Option<Leadership>> {
        // Held from here: dropping this future releases the lease.
        let leadership = Guard::new(
            held,
            hold::Leader {
                value: value.to_owned(),
            },
        );
        let servers = &self.h.inner.servers;
        let (token, term) = (leadership.held.token(), leadership.held.fence());
        if servers
            .election_announce(&self.h.keys, token, term, value)
            .await?
        {
            if self.h.inner.is_closed() {
                // Closed while the record was written: the client takes no
                // more locks, and close() let this lease go already.
                return Err(Error::Closed);
            }
            if leadership.held.is_lost() {
                // The record was written, but the answer came after the
                // lease's validity (counted from the acquisition's send):
                // a leadership already lost is no leadership. Dropping it
                // gives the lease back; a campaign tries again.
                tracing::debug!(election = %self.h.name, "the lease ran out while the leader was recorded");
                return Ok(None);
            }
            Ok(Some(leadership))
        } else {
            tracing::debug!(election = %self.h.name, "lost the lease before recording the leader");
            Ok(None)
        }
    }

    /// The lease lock's acquisition, as [`Lock`](crate::Lock)'s, of kind
    /// [`LockKind::Election`] (its renewals and release carry the record).
    async fn win(&self, wait: Option<Duration>) -> Result<Option<Held>> {
        crate::primitives::lock::take_lease(&self.h, LockKind::Election, false, wait).await
    }
}

impl From<Leading> for Leader {
    fn from(leading: Leading) -> Leader {
        Leader {
            value: leading.value,
            term: leading.term,
        }
    }
}

/// The stream of [`Election::observe`]: `Result<Option<Leader>>` items,
/// each different from the one before.
#[must_use = "streams do nothing unless polled"]
pub struct LeaderChanges {
    inner: BoxStream<'static, Result<Option<Leader>>>,
}

impl std::fmt::Debug for LeaderChanges {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LeaderChanges").finish_non_exhaustive()
    }
}

impl Stream for LeaderChanges {
    type Item = Result<Option<Leader>>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        self.inner.poll_next_unpin(cx)
    }
}

/// The state of one [`LeaderChanges`] between items.
struct Observer {
    election: Election,
    /// This observer's id in the client's subscriptions.
    id: Token,
    subscription: Option<Subscription>,
    /// What was yielded last (`None` before the first item).
    last: Option<Option<Leader>>,
    backoff: Duration,
    done: bool,
}

impl Observer {
    /// The next item: the election read again whenever a message (or a
    /// reconnect, or the timer) says it may have changed, until it did.
    async fn next_change(&mut self) -> Option<Result<Option<Leader>>> {
        loop {
            if self.done {
                return None;
            }
            // Client::close wakes it; registered before the check, so a
            // close in between is not missed.
            let inner = self.election.h.inner.clone();
            let closing = inner.closing.notified();
            tokio::pin!(closing);
            closing.as_mut().enable();
            if inner.is_closed() {
                return Some(self.failed(Error::Closed).await);
            }
            let notify = match self.notify().await {
                Ok(notify) => notify,
                Err(e) => return Some(self.failed(e).await),
            };
            // Registered before the read, so a change published after it is
            // not missed.
            let notified = notify.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            let leading = match self.election.leading().await {
                Ok(leading) => leading,
                Err(e) => return Some(self.failed(e).await),
            };
            self.backoff = Duration::from_millis(50);
            let recheck = match leading.as_ref().and_then(|l| l.remaining) {
                Some(remaining) => remaining + Duration::from_millis(1),
                None => SAFETY_NET,
            };
            let leader = leading.map(Leader::from);
            if self.last.as_ref() != Some(&leader) {
                self.last = Some(leader.clone());
                return Some(Ok(leader));
            }
            tokio::select! {
                () = notified => {}
                () = &mut closing => {}
                () = crate::clock::sleep_until(Instant::now() + recheck) => {}
            }
        }
    }

    /// The channel's wake-ups, subscribing first if need be.
    async fn notify(&mut self) -> Result<std::sync::Arc<Notify>> {
        if let Some(subscription) = &self.subscription {
            return Ok(subscription.notify());
        }
        let h = &self.election.h;
        validate_name(&h.name)?;
        h.inner.servers.single("Election")?;
        let subscription = h
            .inner
            .events
            .subscribe(&h.keys.elected(), self.id.as_str())
            .await?;
        let notify = subscription.notify();
        self.subscription = Some(subscription);
        Ok(notify)
    }

    /// Yields `e`; the stream ends after it unless it is worth retrying,
    /// and then the next read waits a little first.
    async fn failed(&mut self, e: Error) -> Result<Option<Leader>> {
        match e {
            Error::Closed
            | Error::InvalidArgument(_)
            | Error::Unsupported(_)
            | Error::WrongType { .. } => self.done = true,
            _ => {
                crate::clock::sleep_until(Instant::now() + self.backoff).await;
                self.backoff = (self.backoff * 2).min(Duration::from_secs(1));
            }
        }
        Err(e)
    }
}

/// Proof of leading an [`Election`]; the lease is renewed while it lives.
///
/// Dropping it stops renewal and resigns in the background (never
/// blocking, never panicking). Call [`Leadership::resign`] to learn whether
/// it still led. Its [`fence`](Leadership::fence) is its
/// [`term`](Leadership::term).
pub type Leadership = Guard<hold::Leader>;

impl Leadership {
    /// The term of this leadership: strictly greater than every earlier
    /// leader's of this election on this Redis (it is the fence of its
    /// lease, see [`Leadership::fence`]). Pass it with every write the
    /// leader makes, and have the resource reject lower ones: a leader
    /// that paused past its lease does not know it was replaced.
    pub fn term(&self) -> u64 {
        self.held.fence()
    }

    /// The value this leader campaigned with.
    pub fn value(&self) -> &str {
        &self.kind.value
    }

    /// Steps down: observers are told, and the first live standby leads at
    /// once. The same as [`Leadership::release`].
    ///
    /// # Errors
    ///
    /// [`Error::Lost`](crate::Error::Lost) if the leadership had already been lost (its lease
    /// expired or was taken); connection errors (the resignation is then
    /// retried once in the background, and the lease ends by its TTL at
    /// the latest).
    ///
    /// # Cancel safety
    ///
    /// If dropped, the resignation still happens in the background.
    ///
    /// # Example
    ///
    /// ```no_run
    /// # async fn run(client: leasehold::Client) -> Result<(), leasehold::Error> {
    /// let leadership = client.election("scheduler").campaign("host-a").await?;
    /// leadership.resign().await?;
    /// # Ok(()) }
    /// ```
    pub async fn resign(self) -> Result<()> {
        self.held.release().await
    }
}
