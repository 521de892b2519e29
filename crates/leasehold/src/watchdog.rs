//! Renewal shared by every primitive: one task per client.
//!
//! Each held lease is renewed at a third of its TTL, counted from when the
//! command that last set its expiry was sent (its acquisition, a renewal,
//! an extend). Leases due at about the same time are renewed together: one
//! script call per kind of lease (lock, reentrant hold, RwLock hold), each
//! kind by its own script. A renewal that finds the lease missing or held
//! by another owner marks it lost at once; one that cannot reach Redis is
//! retried until the lease's `valid_until`, and then the lease is marked
//! lost. A renewal never overlaps an extend of the same lease
//! ([`Lease::change`]).
//!
//! The task also performs the releases of dropped guards, so `Drop` never
//! blocks and never needs a runtime of its own. Those run concurrently
//! (at most [`MAX_RELEASES_IN_FLIGHT`] at once) and never hold up a
//! renewal: a batch job that drops thousands of guards at once does not
//! starve the leases that stay held.
//!
//! The task knows every lease its client holds, renewed or not, so that
//! [`Watchdog::close`] can give them all back.

#[cfg(not(leasehold_sim))]
use std::collections::HashMap;
// Only inserted, removed and counted, never iterated: its order cannot
// reach the simulation's outcome.
use std::collections::HashSet;
use std::collections::{BTreeMap, VecDeque};

#[cfg(leasehold_sim)]
use crate::sim::HashMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use crate::clock::Instant;

use futures_util::StreamExt;
use futures_util::stream::FuturesUnordered;
use tokio::sync::{OwnedMutexGuard, mpsc, oneshot};
use tracing::Instrument;

use crate::error::{Error, Result};

use crate::key::slot;
use crate::kind::LockKind;
use crate::lease::{Lease, Snapshot};
use crate::scripts::{Extension, LeaseId, Owned, OwnedLeaseId, QUEUE_WINDOW};
use crate::servers::Servers;
use crate::telemetry::{self, LostReason};

/// Leases due within this much of each other share one renewal call.
const COALESCE: Duration = Duration::from_millis(20);
/// Most leases renewed by one script call.
const MAX_BATCH: usize = 512;
/// Most background releases in flight at once; the rest wait their turn.
const MAX_RELEASES_IN_FLIGHT: usize = 64;
/// Most failed background releases kept for [`Watchdog::close`] to send
/// again; past it the oldest is let go, and `close` reports it.
const MAX_UNFINISHED: usize = 4096;

enum Command {
    /// Keep this lease on the books and, with `renew`, renew it (again: its
    /// TTL may have changed).
    Track { lease: Arc<Lease>, renew: bool },
    /// Forget the lease with this id: stop renewing it.
    Untrack(u64),
    /// Release a lease in the background, owner-checked.
    Release(Release),
    /// Give back every lease on the books, stop renewing, and answer once
    /// every release is done (with the first error, if any failed).
    /// Answered when every release is done, or at the deadline with the
    /// releases still unanswered then (they go on).
    Close(oneshot::Sender<Result<()>>, Instant),
    /// An operator broke these holds of the lock whose key is `key`: the
    /// leases on the books that are among them are lost at once.
    Broken { key: String, holds: Vec<String> },
}

/// A break notice: what `Client::break_lease` publishes on the prefix's
/// break channel ([`crate::key::broken_channel`]) once it broke holds, and
/// every client that holds a lease of that prefix hears. The lock key and
/// the ids of the holds broken (as each lease knows its hold: a lock's
/// token, a reentrant hold id, an RwLock's or a semaphore's member), each as
/// `<length in bytes>:<text>`, so that any text fits.
pub(crate) fn broken_notice(key: &str, holds: &[&str]) -> String {
    let mut notice = String::new();
    for part in std::iter::once(key).chain(holds.iter().copied()) {
        notice.push_str(&format!("{}:{part}", part.len()));
    }
    notice
}

/// The lock key and the hold ids of a [`broken_notice`]; `None` for
/// anything else.
fn parse_broken_notice(mut payload: &[u8]) -> Option<(String, Vec<String>)> {
    let mut parts = Vec::new();
    while !payload.is_empty() {
        let colon = payload.iter().position(|&b| b == b':')?;
        let len: usize = std::str::from_utf8(&payload[..colon]).ok()?.parse().ok()?;
        let rest = &payload[colon + 1..];
        let part = rest.get(..len)?;
        parts.push(String::from_utf8(part.to_vec()).ok()?);
        payload = &rest[len..];
    }
    let mut parts = parts.into_iter();
    let key = parts.next()?;
    Some((key, parts.collect()))
}

/// One background release.
struct Release {
    id: OwnedLeaseId,
    /// `hold_at_least`: until then the lease is kept (set on the server to
    /// last until then) instead of released.
    keep_until: Option<Instant>,
    /// Counted in [`Unsettled`] when handed over ([`Watchdog::release`],
    /// [`Watchdog::release_lease`]), until done.
    counted: bool,
    /// A held lease's [`Lease::change`] lock: the release waits for a
    /// renewal of the lease in flight, so that nothing of that renewal
    /// (on Redlock, a re-take of the lease on a node) lands after it.
    changes: Option<Arc<tokio::sync::Mutex<()>>>,
    /// Where the holder's description is kept ([`Lease::who`]), deleted
    /// with the release.
    who: Option<String>,
}

/// The background releases handed over and not done yet, per lock key:
/// counted by the caller as it hands one over (not by the task as it takes
/// it in), so [`Watchdog::settled`] sees every release handed over before
/// it is called.
#[derive(Default)]
struct Unsettled {
    keys: std::sync::Mutex<HashMap<String, usize>>,
    /// Woken whenever one is done.
    done: tokio::sync::Notify,
}

impl Unsettled {
    fn keys(&self) -> std::sync::MutexGuard<'_, HashMap<String, usize>> {
        self.keys.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn add(&self, key: &str) {
        *self.keys().entry(key.to_owned()).or_insert(0) += 1;
    }

    fn remove(&self, key: &str) {
        let mut keys = self.keys();
        if let Some(n) = keys.get_mut(key) {
            *n -= 1;
            if *n == 0 {
                keys.remove(key);
            }
        }
        drop(keys);
        self.done.notify_waiters();
    }

    fn contains(&self, key: &str) -> bool {
        self.keys().contains_key(key)
    }
}

/// What the watchdog needs from the servers: [`Servers`] in a client, an
/// in-process fake in the unit tests, which check the task's orderings on
/// tokio's paused clock.
pub(crate) trait Door: Clone + Send + Sync + 'static {
    /// Releases one lease, owner-checked.
    fn release(&self, id: LeaseId<'_>) -> impl Future<Output = Result<Owned>> + Send;

    /// Renews leases of one kind; `None` where the outcome is not known.
    fn extend(
        &self,
        kind: LockKind,
        leases: &[Extension<'_>],
    ) -> impl Future<Output = Result<Vec<Option<Owned>>>> + Send;

    /// Whether one call may only touch keys of one slot.
    fn is_cluster(&self) -> bool;

    /// Writes (`about`), renews (`ttl` alone) or deletes (neither) what a
    /// hold says of its holder at `key` ([`Servers::describe`]).
    fn describe(
        &self,
        key: &str,
        about: Option<&str>,
        ttl: Option<Duration>,
    ) -> impl Future<Output = Result<()>> + Send {
        let _ = (key, about, ttl);
        std::future::ready(Ok(()))
    }
}

impl Door for Servers {
    fn release(&self, id: LeaseId<'_>) -> impl Future<Output = Result<Owned>> + Send {
        Servers::release(self, id)
    }

    fn extend(
        &self,
        kind: LockKind,
        leases: &[Extension<'_>],
    ) -> impl Future<Output = Result<Vec<Option<Owned>>>> + Send {
        Servers::extend(self, kind, leases)
    }

    fn is_cluster(&self) -> bool {
        Servers::is_cluster(self)
    }

    fn describe(
        &self,
        key: &str,
        about: Option<&str>,
        ttl: Option<Duration>,
    ) -> impl Future<Output = Result<()>> + Send {
        Servers::describe(self, key, about, ttl)
    }
}

/// Handle to the client's watchdog task. The task ends when every handle is dropped.
#[derive(Clone)]
pub(crate) struct Watchdog {
    tx: mpsc::UnboundedSender<Command>,
    unsettled: Arc<Unsettled>,
}

impl Watchdog {
    /// The task of a client whose leases last at most `max_ttl` (and as
    /// long again with `lock_delay`).
    pub(crate) fn start(door: impl Door, max_ttl: Duration) -> Watchdog {
        let (tx, rx) = mpsc::unbounded_channel();
        let unsettled = Arc::new(Unsettled::default());
        let longest = max_ttl.saturating_mul(2).saturating_add(QUEUE_WINDOW);
        tokio::spawn(run(door, rx, Arc::clone(&unsettled), longest));
        Watchdog { tx, unsettled }
    }

    /// Hands a release to the task, counted in [`Unsettled`] until done.
    fn hand_over(&self, release: Release) {
        let key = release.id.keys.lock().to_owned();
        self.unsettled.add(&key);
        if self.tx.send(Command::Release(release)).is_err() {
            self.unsettled.remove(&key);
        }
    }

    /// Resolves once every background release of the lock key `key` handed
    /// over before this call is done (answered, or failed). An RwLock
    /// write waits for it: the owner's read guard dropped just before is
    /// released here, and a write that reached the server first would be
    /// refused as an upgrade.
    pub(crate) async fn settled(&self, key: &str) {
        loop {
            let done = self.unsettled.done.notified();
            tokio::pin!(done);
            done.as_mut().enable();
            if !self.unsettled.contains(key) {
                return;
            }
            done.await;
        }
    }

    // Sends below ignore a closed channel: the task only ends with the
    // client (or its runtime), and then Redis expires the leases by their TTL.

    /// Puts `lease` on the books and, with `renew`, starts (or reschedules)
    /// its renewal.
    pub(crate) fn track(&self, lease: Arc<Lease>, renew: bool) {
        let _ = self.tx.send(Command::Track { lease, renew });
    }

    /// What hands the break notices heard ([`broken_notice`]) to the task:
    /// the leases they name are lost at once, with
    /// [`LostReason::Broken`]. It holds the task only weakly: the
    /// subscription that calls it lives as long as the client's
    /// connections, which the task holds.
    pub(crate) fn hear_broken(&self) -> crate::events::Listener {
        let tx = self.tx.downgrade();
        Box::new(move |payload| {
            let Some((key, holds)) = parse_broken_notice(payload) else {
                return;
            };
            if let Some(tx) = tx.upgrade() {
                let _ = tx.send(Command::Broken { key, holds });
            }
        })
    }

    /// Takes the lease with this id off the books: no more renewals.
    pub(crate) fn untrack(&self, id: u64) {
        let _ = self.tx.send(Command::Untrack(id));
    }

    /// Releases the hold `id` in the background; never blocks. A queued
    /// waiter of a lease lock (`id.queued`: a cancelled acquire) then
    /// leaves the queue.
    pub(crate) fn release(&self, id: OwnedLeaseId) {
        self.hand_over(Release {
            id,
            keep_until: None,
            counted: true,
            changes: None,
            who: None,
        });
    }

    /// Releases a held lease in the background (a dropped guard), or, if
    /// its `hold_at_least` has not passed, keeps it until then.
    pub(crate) fn release_lease(&self, lease: &Lease) {
        self.hand_over(Release {
            counted: true,
            ..Release::of(lease)
        });
    }

    /// Gives back every lease on the books and every release still queued,
    /// sends again every background release that failed while its hold may
    /// still be on the server, and stops renewing; returns when all of them
    /// are done. Leases put on the books later are given back at once.
    pub(crate) async fn close(&self, deadline: Instant) -> Result<()> {
        let (done, closed) = oneshot::channel();
        if self.tx.send(Command::Close(done, deadline)).is_err() {
            return Ok(());
        }
        closed.await.unwrap_or(Ok(()))
    }
}

struct Tracked {
    lease: Arc<Lease>,
    /// When its next renewal is due; `None` for a lease not renewed.
    due: Option<Instant>,
}

/// A background release in flight; it answers with its outcome and
/// itself, to be sent again by a close if it failed.
type Releasing = Pin<Box<dyn Future<Output = (Result<()>, Release)> + Send>>;

/// A lease being renewed: its timing when the renewal was sent, and the
/// guard that keeps an extend of it out until the outcome is recorded.
type Renewing = (Arc<Lease>, Snapshot, OwnedMutexGuard<()>);

/// One renewal call in flight: its batch, and when it was sent and its
/// outcome once answered.
type Renewal =
    Pin<Box<dyn Future<Output = (Vec<Renewing>, Instant, Result<Vec<Option<Owned>>>)> + Send>>;

struct State<D> {
    servers: D,
    unsettled: Arc<Unsettled>,
    leases: HashMap<u64, Tracked>,
    queue: BTreeMap<(Instant, u64), ()>,
    /// Background releases not started yet, oldest first.
    backlog: VecDeque<Release>,
    releasing: FuturesUnordered<Releasing>,
    /// Renewal calls in flight. Each is recorded as it is answered, not
    /// with the others sent with it: a call stuck on one silent node (a
    /// frozen cluster master) holds back no renewal sent elsewhere.
    renewing: FuturesUnordered<Renewal>,
    /// Set by [`Command::Close`]: everything is given back from now on.
    closed: bool,
    /// Callers of [`Watchdog::close`] waiting for the releases to finish.
    closing: Vec<oneshot::Sender<Result<()>>>,
    /// Releases that failed while a close waited, and the first error.
    close_failures: (usize, Option<String>),
    /// The earliest deadline of the callers in `closing`.
    close_deadline: Option<Instant>,
    /// Background releases that failed, oldest first, each with when it
    /// is let go: a close sends them again. Without it, a dropped guard's
    /// release or a cancelled acquisition's give-back that failed before
    /// `close` left its hold (a lease, a queued waiter then handed the
    /// lock) on the server after `close` returned Ok.
    unfinished: VecDeque<(Instant, Release)>,
    /// How long a failed release is kept: the longest a hold of this
    /// client can last (its longest TTL and lock-delay, a queue window).
    /// Not the hold's own TTL from the failure: a request of the hold that
    /// the client gave up on (a renewal, an extend, an attempt) may still
    /// be on its way, and sets the TTL again when it lands (seed 496 of the
    /// simulator: an extend given up on landed 1.2 s after its release
    /// failed, and kept the lease past the TTL counted from the failure).
    keep_failed: Duration,
    /// Failed releases let go past [`MAX_UNFINISHED`] while their holds may
    /// still be on the server: the next close reports them.
    forgotten: usize,
    /// The leases whose last renewal got no answer, and since when some
    /// have had none: an outage is logged once as it starts, and once as
    /// it ends, not at every retry.
    unanswered: HashSet<u64>,
    failing_since: Option<Instant>,
}

async fn run<D: Door>(
    servers: D,
    mut rx: mpsc::UnboundedReceiver<Command>,
    unsettled: Arc<Unsettled>,
    keep_failed: Duration,
) {
    let mut state = State {
        servers,
        unsettled,
        leases: HashMap::default(),
        queue: BTreeMap::new(),
        backlog: VecDeque::new(),
        releasing: FuturesUnordered::new(),
        renewing: FuturesUnordered::new(),
        closed: false,
        closing: Vec::new(),
        close_failures: (0, None),
        close_deadline: None,
        unfinished: VecDeque::new(),
        keep_failed,
        forgotten: 0,
        unanswered: HashSet::new(),
        failing_since: None,
    };
    loop {
        // Every command queued so far is taken in first: handling one never
        // waits, and a stream of renewal outcomes must not keep a new
        // lease's registration, a release or a close waiting.
        loop {
            match rx.try_recv() {
                Ok(command) => state.handle(command),
                Err(mpsc::error::TryRecvError::Empty) => break,
                Err(mpsc::error::TryRecvError::Disconnected) => return state.finish().await,
            }
        }
        state.start_releases();
        state.answer_close();
        let next = state.queue.first_key_value().map(|((due, _), ())| *due);
        tokio::select! {
            // Polled first, so the releases in flight make progress even
            // while renewals follow one another; recording an outcome takes
            // no time. Then renewals, before new commands.
            biased;
            Some(outcome) = state.releasing.next(), if !state.releasing.is_empty() => {
                state.released(outcome);
            }
            Some((batch, sent, outcome)) = state.renewing.next(), if !state.renewing.is_empty() => {
                state.renewed(&batch, sent, outcome);
            }
            () = sleep_until(next), if next.is_some() => state.renew_due(),
            () = sleep_until(state.close_deadline), if state.close_deadline.is_some() => {
                state.close_overdue();
            }
            command = rx.recv() => match command {
                Some(command) => state.handle(command),
                None => return state.finish().await,
            },
        }
        state.start_releases();
        state.answer_close();
    }
}

async fn sleep_until(at: Option<Instant>) {
    if let Some(at) = at {
        crate::clock::sleep_until(at).await;
    }
}

/// How soon to retry a renewal that failed to reach Redis.
fn retry_delay(ttl: Duration) -> Duration {
    (ttl / 10).clamp(Duration::from_millis(5), Duration::from_millis(500))
}

impl<D: Door> State<D> {
    fn handle(&mut self, command: Command) {
        match command {
            Command::Track { lease, renew } => {
                if self.closed {
                    // Acquired while the client closed: give it back.
                    lease.mark_closed();
                    self.backlog.push_back(Release::of(&lease));
                } else if renew {
                    let due = lease.renewal_due();
                    self.schedule(lease, Some(due));
                } else {
                    self.schedule(lease, None);
                }
            }
            Command::Untrack(id) => self.untrack(id),
            Command::Broken { key, holds } => {
                let mut broken: Vec<u64> = self
                    .leases
                    .iter()
                    .filter(|(_, t)| t.lease.keys.lock() == key && holds.contains(&t.lease.hold))
                    .map(|(id, _)| *id)
                    .collect();
                broken.sort_unstable();
                for id in broken {
                    if let Some(tracked) = self.leases.get(&id) {
                        let lease = Arc::clone(&tracked.lease);
                        self.untrack(id);
                        lease.mark_lost(LostReason::Broken);
                    }
                }
            }
            Command::Release(release) => self.backlog.push_back(release),
            Command::Close(done, deadline) => {
                self.closed = true;
                self.close_deadline =
                    Some(self.close_deadline.map_or(deadline, |d| d.min(deadline)));
                for (_, tracked) in self.leases.drain() {
                    // lock_delay: a lease that already ended is left to
                    // expire with its delay, not released.
                    let ended = tracked.lease.delays() && tracked.lease.is_lost();
                    tracked.lease.mark_closed();
                    if !ended {
                        self.backlog.push_back(Release::of(&tracked.lease));
                    }
                }
                self.queue.clear();
                self.unanswered.clear();
                self.failing_since = None;
                // The releases that failed before: sent again, and this
                // close answers only once they are done.
                let now = Instant::now();
                for (until, release) in self.unfinished.drain(..) {
                    if until > now {
                        self.backlog.push_back(release);
                    }
                }
                if self.forgotten > 0 {
                    let (failed, first) = &mut self.close_failures;
                    *failed += std::mem::take(&mut self.forgotten);
                    first.get_or_insert_with(|| {
                        format!(
                            "more than {MAX_UNFINISHED} background releases failed; the oldest \
                             were not sent again"
                        )
                    });
                }
                self.closing.push(done);
            }
        }
    }

    /// Every handle is gone (the client was dropped): finishes the releases
    /// queued and started, so a guard dropped last still frees its lock at once.
    async fn finish(mut self) {
        self.start_releases();
        while let Some(outcome) = self.releasing.next().await {
            self.released(outcome);
            self.start_releases();
        }
    }

    /// Starts queued releases while fewer than the most allowed are in flight.
    fn start_releases(&mut self) {
        while self.releasing.len() < MAX_RELEASES_IN_FLIGHT {
            let Some(Release {
                id,
                keep_until,
                counted,
                changes,
                who,
            }) = self.backlog.pop_front()
            else {
                return;
            };
            let (again, again_who) = (changes.clone(), who.clone());
            let servers = self.servers.clone();
            let kept_for = keep_until.and_then(crate::lease::rest_until);
            let unsettled = counted.then(|| Arc::clone(&self.unsettled));
            let settle = id.keys.lock().to_owned();
            let release = async move |id: &OwnedLeaseId| {
                let _changing = match changes {
                    Some(changes) => Some(changes.lock_owned().await),
                    None => None,
                };
                if let Some(ttl) = kept_for {
                    // hold_at_least: the lease stays until then, unrenewed.
                    let extension = Extension {
                        key: id.keys.lock(),
                        hold: &id.hold,
                        ttl,
                    };
                    return match servers.extend(id.kind, &[extension]).await {
                        Ok(_) => Ok(()),
                        Err(e) => {
                            tracing::warn!(key = %id.keys.lock(), error = %e,
                                "keeping a lease for hold_at_least failed; it will expire by its TTL");
                            Err(e)
                        }
                    };
                }
                let released = servers.release(id.id()).await;
                if let Some(key) = who
                    && let Err(e) = servers.describe(&key, None, None).await
                {
                    tracing::debug!(%key, error = %e, "deleting the holder's description failed; it expires with the lease");
                }
                match released {
                    Ok(_) => Ok(()),
                    Err(e) => {
                        tracing::warn!(key = %id.keys.lock(), error = %e,
                            "background release failed; the lease will expire by its TTL");
                        Err(e)
                    }
                }
            };
            self.releasing.push(Box::pin(async move {
                let outcome = release(&id).await;
                if let Some(unsettled) = unsettled {
                    unsettled.remove(&settle);
                }
                // Sent again by a close if it failed.
                let again = Release {
                    id,
                    keep_until,
                    counted: false,
                    changes: again,
                    who: again_who,
                };
                (outcome, again)
            }));
        }
    }

    fn released(&mut self, (outcome, release): (Result<()>, Release)) {
        let Err(e) = outcome else { return };
        if !self.closing.is_empty() {
            let (failed, first) = &mut self.close_failures;
            *failed += 1;
            first.get_or_insert_with(|| e.to_string());
        }
        // Kept for the next close while its hold may be on the server.
        let now = Instant::now();
        while self
            .unfinished
            .front()
            .is_some_and(|(until, _)| *until <= now)
        {
            self.unfinished.pop_front();
        }
        if self.unfinished.len() == MAX_UNFINISHED {
            self.unfinished.pop_front();
            self.forgotten += 1;
        }
        self.unfinished.push_back((now + self.keep_failed, release));
    }

    /// Answers the callers of close once nothing is left to release.
    fn answer_close(&mut self) {
        if self.closing.is_empty() || !self.backlog.is_empty() || !self.releasing.is_empty() {
            return;
        }
        self.answer_closing();
    }

    /// The deadline of a close came with releases still unanswered: the
    /// callers learn how many (with those that failed), and the releases go
    /// on; one that fails later is kept for the next close.
    fn close_overdue(&mut self) {
        let unanswered = self.backlog.len() + self.releasing.len();
        if unanswered > 0 {
            let (failed, first) = &mut self.close_failures;
            *failed += unanswered;
            first.get_or_insert_with(|| {
                format!("{unanswered} release(s) still unanswered at close()'s bound")
            });
        }
        self.answer_closing();
    }

    fn answer_closing(&mut self) {
        self.close_deadline = None;
        let (failed, first) = std::mem::take(&mut self.close_failures);
        for done in self.closing.drain(..) {
            let _ = done.send(match &first {
                None => Ok(()),
                Some(first) => Err(Error::CloseIncomplete {
                    failed,
                    first: first.clone(),
                }),
            });
        }
    }

    fn schedule(&mut self, lease: Arc<Lease>, due: Option<Instant>) {
        let id = lease.id;
        if let Some(old) = self.leases.insert(id, Tracked { lease, due })
            && let Some(old_due) = old.due
        {
            self.queue.remove(&(old_due, id));
        }
        if let Some(due) = due {
            self.queue.insert((due, id), ());
        }
    }

    /// A lease lost by the client's clock (its validity ran out
    /// unrenewed) stays on the books, no longer renewed, until its guard
    /// goes: the server may hold it for as long as its last TTL there
    /// (the validity is counted short: from a request's send, less the
    /// drift, and capped by an extend whose answer never came), and a
    /// close gives it back. A lease the server said is gone, or held by
    /// another, goes off the books at once.
    fn keep_unrenewed(&mut self, lease: &Arc<Lease>) {
        if self.unanswered.remove(&lease.id) && self.unanswered.is_empty() {
            self.failing_since = None;
        }
        self.schedule(Arc::clone(lease), None);
    }

    fn untrack(&mut self, id: u64) {
        // A lease off the books keeps no outage open.
        if self.unanswered.remove(&id) && self.unanswered.is_empty() {
            self.failing_since = None;
        }
        if let Some(old) = self.leases.remove(&id)
            && let Some(old_due) = old.due
        {
            self.queue.remove(&(old_due, id));
        }
    }

    /// Renews every lease that is due (or nearly due) now.
    fn renew_due(&mut self) {
        let now = Instant::now();
        let mut due: Vec<Renewing> = Vec::new();
        let horizon = now + COALESCE;
        let candidates: Vec<(Instant, u64)> = self
            .queue
            .range(..=(horizon, u64::MAX))
            .map(|(k, ())| *k)
            .collect();
        for (at, id) in candidates {
            let Some(tracked) = self.leases.get(&id) else {
                continue;
            };
            let ttl = tracked.lease.snapshot().ttl;
            // Renew early only by a small part of the period.
            if at > now + COALESCE.min(ttl / 12) {
                continue;
            }
            let lease = Arc::clone(&tracked.lease);
            if lease.is_lost() {
                self.keep_unrenewed(&lease);
                lease.mark_lost(lease.expiry_reason());
                continue;
            }
            let Some(changing) = lease.try_change() else {
                // An extend is in flight: it sets the expiry itself and
                // reschedules; look again soon in case it fails.
                self.schedule(Arc::clone(&lease), Some(now + retry_delay(ttl)));
                continue;
            };
            // Taken after the extend guard, so it is the latest timing.
            let snapshot = lease.snapshot();
            self.schedule(Arc::clone(&lease), None);
            lease.renewal_waits(true);
            due.push((lease, snapshot, changing));
        }
        // On a cluster one call may only touch keys of one slot.
        let cluster = self.servers.is_cluster();
        due.sort_by_key(|(lease, _, _)| (lease.kind, cluster.then(|| slot(lease.keys.lock()))));
        let mut due = due.into_iter().peekable();
        while let Some(first) = due.next() {
            let key =
                |(lease, _, _): &Renewing| (lease.kind, cluster.then(|| slot(lease.keys.lock())));
            let group = key(&first);
            let mut batch = vec![first];
            while batch.len() < MAX_BATCH && due.peek().is_some_and(|next| key(next) == group) {
                batch.extend(due.next());
            }
            // Sent at once, pipelined on the connection, so the renewal rate
            // is bounded by the server, not by round trips; each recorded
            // as it is answered.
            let servers = self.servers.clone();
            self.renewing.push(Box::pin(async move {
                let (sent, outcome) = renew_batch(&servers, &batch).await;
                (batch, sent, outcome)
            }));
        }
    }

    /// Records the outcome of renewing `batch` (sent at `sent`).
    fn renewed(&mut self, batch: &[Renewing], sent: Instant, outcome: Result<Vec<Option<Owned>>>) {
        let now = Instant::now();
        let error = outcome.as_ref().err().map(ToString::to_string);
        let results = outcome.unwrap_or_else(|_| vec![None; batch.len()]);
        let (mut renewed, mut unanswered, mut answered) = (0, 0, false);
        for ((lease, snap, _), result) in batch.iter().zip(results) {
            // Released, or given back by a close, while its renewal was in
            // flight: off the books, and nothing more to do.
            if !self.leases.contains_key(&lease.id) {
                continue;
            }
            match result {
                Some(Owned::Done) => {
                    lease.renewal_waits(false);
                    lease.renewed(sent, *snap);
                    if let Some(key) = lease.who() {
                        // Renewed only where it is still there (PEXPIRE): a
                        // release that deleted it meanwhile stays done.
                        let (servers, ttl) = (self.servers.clone(), lease.server_ttl(snap.ttl));
                        tokio::spawn(async move {
                            if let Err(e) = servers.describe(&key, None, Some(ttl)).await {
                                tracing::debug!(%key, error = %e, "renewing the holder's description failed");
                            }
                        });
                    }
                    self.schedule(Arc::clone(lease), Some(sent + snap.ttl / 3));
                    self.unanswered.remove(&lease.id);
                    renewed += 1;
                    answered = true;
                }
                Some(gone @ (Owned::Missing | Owned::OtherOwner)) => {
                    self.untrack(lease.id);
                    lease.mark_lost(gone.lost_reason());
                    answered = true;
                }
                // Not known: keep trying while the lease may still be valid.
                // (A lease lost so is logged as lost, for that reason.)
                None => {
                    let valid_until = lease.snapshot().valid_until;
                    if now >= valid_until {
                        self.keep_unrenewed(lease);
                        lease.mark_lost(LostReason::Unreachable);
                    } else {
                        unanswered += 1;
                        self.unanswered.insert(lease.id);
                        let retry = (now + retry_delay(snap.ttl)).min(valid_until);
                        self.schedule(Arc::clone(lease), Some(retry));
                    }
                }
            }
        }
        self.log_outage(error, unanswered, answered);
        telemetry::renewed(renewed);
    }

    /// Logs an outage of renewals once as it starts (a renewal of a lease
    /// got no answer while every other had one) and once as it ends (every
    /// lease's last renewal was answered again), not at every retry.
    fn log_outage(&mut self, error: Option<String>, unanswered: usize, answered: bool) {
        let error = error.unwrap_or_else(|| "no answer".to_owned());
        if unanswered > 0 {
            if self.failing_since.is_none() {
                tracing::warn!(%error, leases = unanswered,
                    "renewals cannot reach Redis; retrying until the leases' validity runs out \
                     (logged once per outage)");
                self.failing_since = Some(Instant::now());
            } else {
                tracing::debug!(%error, leases = unanswered, "renewal failed again");
            }
        }
        if self.unanswered.is_empty()
            && let Some(since) = self.failing_since.take()
            && answered
        {
            tracing::info!(outage = ?since.elapsed(), "renewals reach Redis again");
        }
    }
}

impl Release {
    fn of(lease: &Lease) -> Release {
        lease.mark_released();
        Release {
            id: lease.owned_id(),
            keep_until: lease.kept_until(),
            counted: false,
            changes: Some(lease.changes()),
            who: lease.who(),
        }
    }
}

/// Renews one batch of leases of one kind; returns when it was sent.
async fn renew_batch(
    servers: &impl Door,
    batch: &[Renewing],
) -> (Instant, Result<Vec<Option<Owned>>>) {
    let kind = batch[0].0.kind;
    let extensions: Vec<Extension<'_>> = batch
        .iter()
        .map(|(lease, snap, _)| Extension {
            key: lease.keys.lock(),
            hold: &lease.hold,
            ttl: lease.server_ttl(snap.ttl),
        })
        .collect();
    let sent = Instant::now();
    telemetry::renewal_batch();
    let span = tracing::debug_span!(
        "leasehold.renew",
        kind = kind.as_str(),
        leases = batch.len()
    );
    (
        sent,
        servers.extend(kind, &extensions).instrument(span).await,
    )
}

#[cfg(test)]
mod tests {
    //! The task's orderings, on tokio's paused clock against an in-process
    //! fake server: deterministic, no timing luck.

    use std::sync::Mutex;

    use tokio::sync::Semaphore;

    use super::*;

    #[test]
    fn a_break_notice_carries_the_lock_key_and_holds_whatever_their_text() {
        let holds = ["r:h1:own:er", "", "12:3", "ünï"];
        let notice = broken_notice("p:{n}:lock", &holds);
        let (key, parsed) = parse_broken_notice(notice.as_bytes()).expect("parsed");
        assert_eq!(key, "p:{n}:lock");
        assert_eq!(parsed, holds);
        for bad in ["", "x", "5:abc", "3:abc2", "3:abcx"] {
            assert_eq!(parse_broken_notice(bad.as_bytes()), None, "{bad:?}");
        }
    }
    use crate::key::{LockKeys, slot};
    use crate::scripts::QUEUE_WINDOW;
    use crate::token::Token;

    /// A dropped guard's lock lease, released in the background.
    fn dropped(keys: Arc<LockKeys>, hold: String) -> OwnedLeaseId {
        OwnedLeaseId {
            kind: LockKind::Lock,
            keys,
            hold,
            queued: None,
        }
    }

    #[test]
    fn renewal_batches_split_by_slot() {
        // Every key of one lock shares a slot; different names spread out.
        let a = LockKeys::new("leasehold", "orders:1");
        let b = LockKeys::new("leasehold", "orders:2");
        assert_eq!(slot(a.lock()), slot(a.fence()));
        assert_eq!(slot(a.lock()), slot(a.channel()));
        assert_ne!(slot(a.lock()), slot(b.lock()));
    }

    /// A server whose renewals wait for a permit each, and whose releases
    /// never answer when `stuck`.
    #[derive(Clone)]
    struct Fake {
        /// Every renewal sent: when, and the lease's hold.
        renewals: Arc<Mutex<Vec<(Instant, String)>>>,
        releases_sent: Arc<Mutex<usize>>,
        /// This many releases from now fail to reach the server (a
        /// connection reset, a timeout).
        failing_releases: Arc<Mutex<usize>>,
        renewal_permits: Arc<Semaphore>,
        /// While set, every renewal fails to reach the server.
        unreachable: Arc<std::sync::atomic::AtomicBool>,
        /// The renewals of these holds never answer (their node is frozen).
        frozen: Arc<Mutex<Vec<String>>>,
        stuck: bool,
        /// How long each renewal takes to answer once let through.
        rtt: Duration,
    }

    impl Fake {
        fn new(renewals_answer: bool, stuck: bool) -> Fake {
            let permits = if renewals_answer {
                Semaphore::MAX_PERMITS
            } else {
                0
            };
            Fake {
                renewals: Arc::default(),
                releases_sent: Arc::default(),
                failing_releases: Arc::default(),
                renewal_permits: Arc::new(Semaphore::new(permits)),
                unreachable: Arc::default(),
                frozen: Arc::default(),
                stuck,
                rtt: Duration::ZERO,
            }
        }

        /// A server that answers every renewal after 25 ms (a distant
        /// Redis, or a busy one), and every release at once.
        fn distant() -> Fake {
            Fake {
                rtt: Duration::from_millis(25),
                ..Fake::new(true, false)
            }
        }

        fn renewals_of(&self, hold: &str) -> Vec<Instant> {
            let renewals = self.renewals.lock().unwrap();
            renewals
                .iter()
                .filter(|(_, h)| h == hold)
                .map(|(at, _)| *at)
                .collect()
        }
    }

    impl Door for Fake {
        fn release(&self, _id: LeaseId<'_>) -> impl Future<Output = Result<Owned>> + Send {
            let (sent, stuck) = (Arc::clone(&self.releases_sent), self.stuck);
            let fails = {
                let mut failing = self.failing_releases.lock().unwrap();
                let fails = *failing > 0;
                *failing = failing.saturating_sub(1);
                fails
            };
            async move {
                *sent.lock().unwrap() += 1;
                if stuck {
                    std::future::pending::<()>().await;
                }
                if fails {
                    return Err(Error::Unreachable {
                        addr: "fake".into(),
                        source: std::io::Error::other("connection reset").into(),
                    });
                }
                Ok(Owned::Done)
            }
        }

        fn extend(
            &self,
            _kind: LockKind,
            leases: &[Extension<'_>],
        ) -> impl Future<Output = Result<Vec<Option<Owned>>>> + Send {
            let now = Instant::now();
            self.renewals
                .lock()
                .unwrap()
                .extend(leases.iter().map(|l| (now, l.hold.to_owned())));
            let (n, permits, rtt) = (leases.len(), Arc::clone(&self.renewal_permits), self.rtt);
            let unreachable = self.unreachable.load(std::sync::atomic::Ordering::Relaxed);
            let frozen = {
                let frozen = self.frozen.lock().unwrap();
                leases.iter().any(|l| frozen.iter().any(|h| h == l.hold))
            };
            async move {
                if frozen {
                    std::future::pending::<()>().await;
                }
                if unreachable {
                    return Err(Error::Unreachable {
                        addr: "fake".into(),
                        source: std::io::Error::other("connection refused").into(),
                    });
                }
                permits.acquire().await.expect("open").forget();
                tokio::time::sleep(rtt).await;
                Ok(vec![Some(Owned::Done); n])
            }
        }

        fn is_cluster(&self) -> bool {
            false
        }
    }

    /// A lock lease known as `hold`, acquired by a command sent at `sent`.
    fn lease(hold: &str, ttl: Duration, sent: Instant) -> Arc<Lease> {
        let keys = Arc::new(LockKeys::new("t", hold));
        let token = Token::random();
        Arc::new(Lease::new(
            hold.to_owned(),
            keys,
            LockKind::Lock,
            token,
            hold.to_owned(),
            ttl,
            sent,
        ))
    }

    const TTL: Duration = Duration::from_millis(300);

    /// The events logged while it is the default subscriber: level and
    /// message.
    #[derive(Clone, Default)]
    struct Logged(Arc<Mutex<Vec<(tracing::Level, String)>>>);

    impl Logged {
        fn at(&self, level: tracing::Level) -> Vec<String> {
            let events = self.0.lock().unwrap();
            events
                .iter()
                .filter(|(l, _)| *l == level)
                .map(|(_, m)| m.clone())
                .collect()
        }
    }

    struct Message(String);

    impl tracing::field::Visit for Message {
        fn record_debug(&mut self, field: &tracing::field::Field, value: &dyn std::fmt::Debug) {
            if field.name() == "message" {
                self.0 = format!("{value:?}");
            }
        }
    }

    impl tracing::Subscriber for Logged {
        fn enabled(&self, _: &tracing::Metadata<'_>) -> bool {
            true
        }
        fn new_span(&self, _: &tracing::span::Attributes<'_>) -> tracing::span::Id {
            tracing::span::Id::from_u64(1)
        }
        fn record(&self, _: &tracing::span::Id, _: &tracing::span::Record<'_>) {}
        fn record_follows_from(&self, _: &tracing::span::Id, _: &tracing::span::Id) {}
        fn event(&self, event: &tracing::Event<'_>) {
            let mut message = Message(String::new());
            event.record(&mut message);
            let level = *event.metadata().level();
            self.0.lock().unwrap().push((level, message.0));
        }
        fn enter(&self, _: &tracing::span::Id) {}
        fn exit(&self, _: &tracing::span::Id) {}
    }

    /// Issue 24, item 5: renewals that cannot reach Redis for a while log
    /// one warning for the outage, not one per retry (7 identical ones in
    /// 3 s under `leasehold run`), and the end of the outage once.
    #[tokio::test(start_paused = true)]
    async fn an_outage_of_renewals_is_logged_once() {
        let logged = Logged::default();
        let _default = tracing::dispatcher::set_default(&tracing::Dispatch::new(logged.clone()));
        let fake = Fake::new(true, false);
        let watchdog = Watchdog::start(fake.clone(), TTL);
        let ttl = Duration::from_secs(3);
        let held = lease("held", ttl, Instant::now());
        watchdog.track(Arc::clone(&held), true);
        // Renewed once; then Redis is away for 1.5 s: retried every 300 ms.
        tokio::time::sleep(ttl / 3 + Duration::from_millis(10)).await;
        fake.unreachable
            .store(true, std::sync::atomic::Ordering::Relaxed);
        tokio::time::sleep(ttl / 3 + Duration::from_millis(1500)).await;
        fake.unreachable
            .store(false, std::sync::atomic::Ordering::Relaxed);
        tokio::time::sleep(Duration::from_secs(1)).await;
        assert!(!held.is_lost(), "renewed again once Redis was back");
        assert!(
            fake.renewals_of("held").len() >= 5,
            "the outage was retried: {:?}",
            fake.renewals_of("held")
        );
        let warnings = logged.at(tracing::Level::WARN);
        assert_eq!(warnings.len(), 1, "{warnings:?}");
        assert!(warnings[0].contains("cannot reach Redis"), "{warnings:?}");
        let back = logged.at(tracing::Level::INFO);
        assert_eq!(back.len(), 1, "{back:?}");
    }

    /// Issue 24, item 5: a lease whose renewal got no answer before its
    /// validity ran out (its node frozen) is lost as `Unreachable`; one
    /// the watchdog never renewed (not tracked for renewal) as `Expired`.
    #[tokio::test(start_paused = true)]
    async fn a_lease_whose_renewal_was_not_answered_is_lost_as_unreachable() {
        let fake = Fake::new(true, false);
        fake.frozen.lock().unwrap().push("frozen".to_owned());
        let watchdog = Watchdog::start(fake.clone(), TTL);
        let ttl = Duration::from_secs(3);
        let frozen = lease("frozen", ttl, Instant::now());
        let unrenewed = lease("unrenewed", ttl, Instant::now());
        watchdog.track(Arc::clone(&frozen), true);
        watchdog.track(Arc::clone(&unrenewed), false);
        assert_eq!(frozen.lost_reason(), None);
        tokio::time::timeout(ttl * 2, async {
            frozen.lost().await;
            unrenewed.lost().await;
        })
        .await
        .expect("both lost once their validity ran out");
        assert_eq!(
            fake.renewals_of("frozen").len(),
            1,
            "renewal sent, never answered"
        );
        assert_eq!(frozen.lost_reason(), Some(LostReason::Unreachable));
        assert_eq!(unrenewed.lost_reason(), Some(LostReason::Expired));
    }

    /// Issue 24, item 5: `settled` resolves once the background releases
    /// of its key handed over before it are done, and at once for a key
    /// with none: counted as they are handed over, before the task has
    /// even taken them in.
    #[tokio::test(start_paused = true)]
    async fn settled_waits_for_the_releases_of_its_key_handed_over_before() {
        let keys = Arc::new(LockKeys::new("t", "dropped"));
        let other = LockKeys::new("t", "other");
        let stuck = Fake::new(true, true);
        let watchdog = Watchdog::start(stuck.clone(), TTL);
        watchdog.release(dropped(Arc::clone(&keys), "dropped".into()));
        tokio::time::timeout(Duration::from_millis(1), watchdog.settled(other.lock()))
            .await
            .expect("nothing handed over for that key");
        assert!(
            tokio::time::timeout(Duration::from_secs(10), watchdog.settled(keys.lock()))
                .await
                .is_err(),
            "a release that never answers is not done"
        );
        assert_eq!(*stuck.releases_sent.lock().unwrap(), 1);

        let fake = Fake::new(true, false);
        let watchdog = Watchdog::start(fake.clone(), TTL);
        watchdog.release(dropped(Arc::clone(&keys), "dropped".into()));
        tokio::time::timeout(Duration::from_millis(1), watchdog.settled(keys.lock()))
            .await
            .expect("done once answered");
        assert_eq!(*fake.releases_sent.lock().unwrap(), 1);
    }

    /// Issue 33, item 6: a break notice loses exactly the leases it names,
    /// at once, with `Broken`, and stops their renewal; a notice naming a
    /// hold this client does not have (a later holder's break delivered
    /// again, another name, garbage) loses nothing.
    #[tokio::test(start_paused = true)]
    async fn a_break_notice_loses_exactly_the_leases_it_names() {
        let fake = Fake::new(true, false);
        let watchdog = Watchdog::start(fake.clone(), TTL);
        let start = Instant::now();
        let (broken, kept) = (lease("a", TTL, start), lease("b", TTL, start));
        watchdog.track(Arc::clone(&broken), true);
        watchdog.track(Arc::clone(&kept), true);
        let hear = watchdog.hear_broken();
        let key_a = broken.keys.lock().to_owned();
        let key_b = kept.keys.lock().to_owned();
        hear(broken_notice(&key_a, &["someone-else", "b"]).as_bytes());
        hear(broken_notice(&key_b, &["a"]).as_bytes());
        hear(b"not a notice");
        tokio::time::sleep(Duration::from_millis(1)).await;
        assert!(
            !broken.is_lost() && !kept.is_lost(),
            "a notice of other holds lost a lease"
        );
        hear(broken_notice(&key_a, &["a"]).as_bytes());
        tokio::time::timeout(Duration::from_millis(1), broken.lost())
            .await
            .expect("lost at once");
        assert_eq!(broken.lost_reason(), Some(LostReason::Broken));
        tokio::time::sleep(TTL).await;
        assert!(
            fake.renewals_of("a").is_empty(),
            "a broken lease was renewed"
        );
        assert!(!kept.is_lost());
        assert!(!fake.renewals_of("b").is_empty());
    }

    /// Issue 13, item 6: releases that never answer (a batch of dropped
    /// guards on a slow server) do not hold up the renewal of a lease that
    /// stays held; at most `MAX_RELEASES_IN_FLIGHT` are in flight.
    #[tokio::test(start_paused = true)]
    async fn a_renewal_is_not_held_up_by_releases_that_hang() {
        let fake = Fake::new(true, true);
        let watchdog = Watchdog::start(fake.clone(), TTL);
        let start = Instant::now();
        for i in 0..1000 {
            let keys = Arc::new(LockKeys::new("t", &format!("dropped:{i}")));
            watchdog.release(dropped(keys, format!("dropped:{i}")));
        }
        let held = lease("held", TTL, start);
        watchdog.track(Arc::clone(&held), true);
        tokio::time::sleep(TTL).await;
        let renewals = fake.renewals_of("held");
        assert!(
            renewals.first() == Some(&(start + TTL / 3)),
            "renewed at {:?} (due at {:?})",
            renewals.iter().map(|at| *at - start).collect::<Vec<_>>(),
            TTL / 3
        );
        assert!(!held.is_lost());
        assert_eq!(*fake.releases_sent.lock().unwrap(), MAX_RELEASES_IN_FLIGHT);
    }

    /// Issue 24, item 1: a renewal call that never answers (its cluster
    /// master is frozen) holds back no other renewal. Renewal calls went
    /// out as rounds, each awaited whole, so the stuck one kept the task
    /// from renewing anything else until its command timed out, and the
    /// leases on healthy masters were lost.
    #[tokio::test(start_paused = true)]
    async fn a_renewal_that_never_answers_holds_back_no_other() {
        let fake = Fake::new(true, false);
        fake.frozen.lock().unwrap().push("stuck".into());
        let watchdog = Watchdog::start(fake.clone(), TTL);
        let start = Instant::now();
        let stuck = lease("stuck", TTL, start);
        watchdog.track(Arc::clone(&stuck), true);
        // Due 50 ms apart: renewed by calls of their own.
        let healthy = lease("healthy", TTL, start + Duration::from_millis(50));
        watchdog.track(Arc::clone(&healthy), true);
        tokio::time::sleep(TTL * 4).await;
        assert!(!healthy.is_lost(), "the healthy lease was lost");
        let renewals = fake.renewals_of("healthy");
        assert!(renewals.len() >= 10, "renewed at {renewals:?}");
        assert!(stuck.is_lost(), "the stuck lease ran out");
        assert_eq!(
            fake.renewals_of("stuck").len(),
            1,
            "its renewal never answered"
        );
    }

    /// Issue 13, item 6: a lease whose registration reaches the watchdog
    /// late (behind a queue of commands) is due a third of its TTL after
    /// its acquisition was sent, not after the registration: here at once.
    #[tokio::test(start_paused = true)]
    async fn the_first_renewal_is_due_from_the_acquisition_not_the_registration() {
        let fake = Fake::new(true, false);
        let watchdog = Watchdog::start(fake.clone(), TTL);
        let sent = Instant::now();
        let held = lease("late", TTL, sent);
        tokio::time::advance(Duration::from_millis(250)).await;
        watchdog.track(Arc::clone(&held), true);
        tokio::time::sleep(Duration::from_millis(40)).await;
        let renewals = fake.renewals_of("late");
        assert_eq!(
            renewals.first().map(|at| *at - sent),
            Some(Duration::from_millis(250)),
            "renewed as soon as it was registered"
        );
        tokio::time::sleep(Duration::from_secs(2)).await;
        assert!(!held.is_lost(), "the lease lapsed before its first renewal");
    }

    /// A lease on the books of a watchdog whose server lets no renewal
    /// answer, once its first renewal is in flight.
    async fn a_renewal_in_flight() -> (Fake, Watchdog, Arc<Lease>) {
        let fake = Fake::new(false, false);
        let watchdog = Watchdog::start(fake.clone(), TTL);
        let held = lease("held", TTL, Instant::now());
        watchdog.track(Arc::clone(&held), true);
        tokio::time::sleep(TTL / 3 + Duration::from_millis(1)).await;
        assert_eq!(
            fake.renewals_of("held").len(),
            1,
            "the renewal is in flight"
        );
        (fake, watchdog, held)
    }

    /// Issue 13, item 4: an extend waits while a renewal of its lease is in
    /// flight, so the renewal (sent with the old TTL) cannot land after it.
    #[tokio::test(start_paused = true)]
    async fn an_extend_waits_for_a_renewal_in_flight() {
        let (fake, _watchdog, held) = a_renewal_in_flight().await;
        let sent = Arc::new(Mutex::new(None));
        let extend = |sent: Arc<Mutex<Option<Instant>>>| {
            let held = Arc::clone(&held);
            async move {
                held.extend(Duration::from_secs(60), || async move {
                    *sent.lock().unwrap() = Some(Instant::now());
                    Ok(Owned::Done)
                })
                .await
            }
        };
        let waited = tokio::time::timeout(TTL / 3, extend(Arc::clone(&sent))).await;
        assert!(
            waited.is_err() && sent.lock().unwrap().is_none(),
            "an extend went out beside a renewal in flight"
        );
        fake.renewal_permits.add_permits(1);
        let extended = tokio::time::timeout(Duration::from_secs(1), extend(Arc::clone(&sent)))
            .await
            .expect("the extend goes out once the renewal answered");
        assert!(extended.expect("extend"), "the lease is still held");
        assert!(sent.lock().unwrap().is_some());
    }

    /// Found by the chaos suite (redlock-rolling-restart): a release sent
    /// while a renewal of its lease is in flight can reach a Redlock node
    /// before that renewal's re-take, which then sets the released lease
    /// back on the node (over whoever took it meanwhile, while a re-take
    /// still replaced other tokens; now a copy left for its TTL). A release
    /// waits for the renewal's answer, and goes out once it came.
    #[tokio::test(start_paused = true)]
    async fn a_release_waits_for_a_renewal_in_flight() {
        let (fake, watchdog, held) = a_renewal_in_flight().await;
        watchdog.untrack(held.id);
        let sent = Arc::new(Mutex::new(None));
        let release = |sent: Arc<Mutex<Option<Instant>>>| {
            let held = Arc::clone(&held);
            async move {
                held.release(|| async move {
                    *sent.lock().unwrap() = Some(Instant::now());
                })
                .await;
            }
        };
        let waited = tokio::time::timeout(TTL / 3, release(Arc::clone(&sent))).await;
        assert!(
            waited.is_err() && sent.lock().unwrap().is_none(),
            "a release went out beside a renewal in flight"
        );
        fake.renewal_permits.add_permits(1);
        tokio::time::timeout(Duration::from_secs(1), release(Arc::clone(&sent)))
            .await
            .expect("the release goes out once the renewal answered");
        assert!(sent.lock().unwrap().is_some());
    }

    /// Issue 13, item 4: a renewal falling due while an extend of its lease
    /// is in flight waits, and goes out once the extend is done.
    #[tokio::test(start_paused = true)]
    async fn a_renewal_waits_for_an_extend_in_flight() {
        let fake = Fake::new(true, false);
        let watchdog = Watchdog::start(fake.clone(), TTL);
        let sent = Instant::now();
        let held = lease("held", TTL, sent);
        let extending = held.change().await;
        watchdog.track(Arc::clone(&held), true);
        tokio::time::sleep(TTL / 2).await;
        assert!(
            fake.renewals_of("held").is_empty(),
            "a renewal went out beside an extend in flight"
        );
        drop(extending);
        tokio::time::sleep(retry_delay(TTL) + Duration::from_millis(1)).await;
        assert_eq!(fake.renewals_of("held").len(), 1);
    }

    /// Found in review: renewal rounds that follow one another (each takes
    /// 25 ms, longer than the 20 ms coalescing window, and 200 leases of
    /// 3 s keep one due at the end of every round) must not starve the
    /// commands: a new lease is put on the books and renewed, a dropped
    /// guard's release is sent, and `close` returns. With renewals polled
    /// before commands and no draining, none of that happened on the paused
    /// clock.
    #[tokio::test(start_paused = true)]
    async fn commands_are_not_starved_by_a_steady_stream_of_due_renewals() {
        let door = Fake::distant();
        let watchdog = Watchdog::start(door.clone(), TTL);
        let start = Instant::now();
        let ttl = Duration::from_secs(3);
        let mut held = Vec::new();
        for i in 0..200u32 {
            let l = lease(
                &format!("steady:{i}"),
                ttl,
                start + Duration::from_millis(5) * i,
            );
            watchdog.track(Arc::clone(&l), true);
            held.push(l);
        }
        // Let the renewals settle into their steady stream.
        tokio::time::sleep(Duration::from_secs(3)).await;
        assert!(held.iter().all(|l| !l.is_lost()));

        // A new lease, and a dropped guard's release.
        let fresh = lease("fresh", Duration::from_millis(600), Instant::now());
        watchdog.track(Arc::clone(&fresh), true);
        watchdog.release(dropped(
            Arc::new(LockKeys::new("t", "dropped")),
            "dropped".into(),
        ));
        tokio::time::sleep(Duration::from_secs(1)).await;
        assert_eq!(
            *door.releases_sent.lock().unwrap(),
            1,
            "the dropped guard's release was never sent"
        );
        assert!(
            !door.renewals_of("fresh").is_empty(),
            "the fresh lease was never renewed"
        );
        assert!(!fresh.is_lost(), "the fresh lease lapsed");
        tokio::time::timeout(Duration::from_secs(10), watchdog.close(far()))
            .await
            .expect("close returned")
            .expect("close");
    }

    /// The simulator's close() invariant, seeds 107, 114, 496 and 1274: a
    /// background release that failed before `close` (a cancelled
    /// campaign's leave whose connection was reset; a dropped guard's
    /// release, or an acquisition's give-back, whose answer outlasted the
    /// command timeout) was forgotten, and `close` returned Ok while the
    /// hold (a queued waiter, a lease the server granted late) was still
    /// on the server. `close` sends it again, and returns Ok only once
    /// answered.
    #[tokio::test(start_paused = true)]
    async fn close_sends_again_the_background_releases_that_failed() {
        let fake = Fake::new(true, false);
        *fake.failing_releases.lock().unwrap() = 2;
        let watchdog = Watchdog::start(fake.clone(), TTL);
        let waiter = Arc::new(LockKeys::new("t", "campaign"));
        watchdog.release(OwnedLeaseId {
            kind: LockKind::Election,
            keys: Arc::clone(&waiter),
            hold: "cancelled".into(),
            queued: Some(TTL),
        });
        let guard = lease("dropped", TTL, Instant::now());
        watchdog.track(Arc::clone(&guard), true);
        watchdog.untrack(guard.id);
        watchdog.release_lease(&guard);
        tokio::time::timeout(Duration::from_millis(1), watchdog.settled(waiter.lock()))
            .await
            .expect("the first tries are done (failed)");
        assert_eq!(*fake.releases_sent.lock().unwrap(), 2);
        tokio::time::timeout(Duration::from_secs(1), watchdog.close(far()))
            .await
            .expect("close returned")
            .expect("both sent again and answered");
        assert_eq!(*fake.releases_sent.lock().unwrap(), 4);
    }

    /// A close no later than its deadline: a release still unanswered then
    /// (its server paused, a reconnect's attempts under way) is reported,
    /// not waited for, and goes on. Seed 406310 of the simulator: the
    /// background releases close sent through a reconnect's three
    /// connection attempts and a script reload ended 9.1 s after close was
    /// called, with a 2 s command timeout.
    #[tokio::test(start_paused = true)]
    async fn close_reports_the_releases_unanswered_at_its_deadline() {
        let fake = Fake::new(true, true);
        let watchdog = Watchdog::start(fake.clone(), TTL);
        let held = lease("held", TTL, Instant::now());
        watchdog.track(Arc::clone(&held), true);
        watchdog.release(dropped(
            Arc::new(LockKeys::new("t", "dropped")),
            "dropped".into(),
        ));
        let started = Instant::now();
        let closed = tokio::time::timeout(TTL * 10, watchdog.close(started + TTL))
            .await
            .expect("close returned by its deadline");
        assert_eq!(started.elapsed(), TTL);
        assert!(
            matches!(closed, Err(Error::CloseIncomplete { failed: 2, .. })),
            "{closed:?}"
        );
        assert_eq!(*fake.releases_sent.lock().unwrap(), 2);
    }

    /// A deadline no test reaches.
    fn far() -> Instant {
        Instant::now() + Duration::from_secs(3600)
    }

    /// As above, when the release sent again at close fails too: `close`
    /// says so, and a second `close` tries once more.
    #[tokio::test(start_paused = true)]
    async fn a_failed_release_that_fails_again_at_close_makes_close_incomplete() {
        let fake = Fake::new(true, false);
        *fake.failing_releases.lock().unwrap() = 2;
        let watchdog = Watchdog::start(fake.clone(), TTL);
        watchdog.release(dropped(
            Arc::new(LockKeys::new("t", "dropped")),
            "dropped".into(),
        ));
        tokio::time::sleep(Duration::from_millis(1)).await;
        let closed = watchdog.close(far()).await;
        assert!(
            matches!(closed, Err(Error::CloseIncomplete { failed: 1, .. })),
            "{closed:?}"
        );
        watchdog
            .close(far())
            .await
            .expect("answered on the third try");
        assert_eq!(*fake.releases_sent.lock().unwrap(), 3);
    }

    /// A failed background release is kept for as long as a hold of the
    /// client can last (twice its longest TTL, for a lock-delay, and a
    /// queue window): `close` after that sends nothing again.
    #[tokio::test(start_paused = true)]
    async fn a_failed_release_is_not_sent_again_after_the_longest_hold() {
        let fake = Fake::new(true, false);
        *fake.failing_releases.lock().unwrap() = 2;
        let watchdog = Watchdog::start(fake.clone(), TTL);
        watchdog.release(dropped(
            Arc::new(LockKeys::new("t", "dropped")),
            "dropped".into(),
        ));
        let longest = TTL * 2 + QUEUE_WINDOW;
        tokio::time::sleep(longest - Duration::from_millis(1)).await;
        // A second one, failed later: still kept when the first is not.
        let guard = lease("guard", TTL, Instant::now());
        watchdog.release_lease(&guard);
        tokio::time::sleep(Duration::from_millis(2)).await;
        assert_eq!(*fake.releases_sent.lock().unwrap(), 2);
        watchdog.close(far()).await.expect("answered");
        assert_eq!(
            *fake.releases_sent.lock().unwrap(),
            3,
            "only the later one sent again"
        );
    }

    /// The simulator's close() invariant, seed 2824: a lease the client
    /// counts as lost by its own clock (an extend to a shorter TTL, given
    /// up on, capped its validity; a renewal could not reach Redis until
    /// the validity ran out) may still be held on the server, for as long
    /// as its last TTL there. It went off the books, so `close` returned Ok
    /// without giving it back while its guard lived on. It stays on the
    /// books, unrenewed, until its guard goes; `close` gives it back.
    #[tokio::test(start_paused = true)]
    async fn close_gives_back_a_lease_lost_by_the_clients_clock() {
        let fake = Fake::new(true, false);
        let watchdog = Watchdog::start(fake.clone(), TTL);
        let ttl = Duration::from_secs(3);
        // Its validity capped by an extend to 100 ms that got no answer.
        let capped = lease("capped", ttl, Instant::now());
        watchdog.track(Arc::clone(&capped), true);
        let extending = tokio::time::timeout(
            Duration::from_millis(10),
            capped.extend(Duration::from_millis(100), std::future::pending),
        )
        .await;
        assert!(extending.is_err(), "given up on");
        // Renewals that cannot reach Redis until the validity runs out.
        let unreachable = lease("unreachable", TTL, Instant::now());
        fake.unreachable
            .store(true, std::sync::atomic::Ordering::Relaxed);
        watchdog.track(Arc::clone(&unreachable), true);
        tokio::time::sleep(ttl / 3 + Duration::from_millis(10)).await;
        assert!(capped.is_lost() && unreachable.is_lost());
        assert_eq!(unreachable.lost_reason(), Some(LostReason::Unreachable));
        assert_eq!(*fake.releases_sent.lock().unwrap(), 0);
        watchdog.close(far()).await.expect("answered");
        assert_eq!(
            *fake.releases_sent.lock().unwrap(),
            2,
            "both given back at close"
        );
    }

    /// A lease lost by the client's clock and then released by its guard
    /// (or dropped) is off the books: `close` sends nothing more for it.
    #[tokio::test(start_paused = true)]
    async fn a_lost_lease_whose_guard_went_is_off_the_books() {
        let fake = Fake::new(true, false);
        fake.unreachable
            .store(true, std::sync::atomic::Ordering::Relaxed);
        let watchdog = Watchdog::start(fake.clone(), TTL);
        let lost = lease("lost", TTL, Instant::now());
        watchdog.track(Arc::clone(&lost), true);
        tokio::time::sleep(TTL * 2).await;
        assert!(lost.is_lost());
        watchdog.untrack(lost.id);
        watchdog.close(far()).await.expect("nothing to give back");
        assert_eq!(*fake.releases_sent.lock().unwrap(), 0);
    }
}
