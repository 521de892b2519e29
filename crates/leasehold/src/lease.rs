//! What a guard and the watchdog share about one held lease.
//!
//! The client's view of validity uses only the monotonic clock, measured
//! from the moment a command was *sent*: `valid_until = t_send + ttl - drift`.
//! Redis keeps the real expiry; this view is always the shorter of the two.

use std::sync::atomic::{AtomicBool, AtomicU8, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use crate::clock::Instant;
use crate::kind::LockKind;

use tokio::sync::Notify;

use crate::clock::SERVER_TICK;
use crate::error::Result;
use crate::key::LockKeys;
use crate::scripts::{LeaseId, Owned};
use crate::telemetry::{self, LostReason};
use crate::token::Token;

/// Allowance for clock rate differences between client and server.
pub(crate) fn drift(ttl: Duration) -> Duration {
    ttl / 100 + Duration::from_millis(2)
}

/// What the server is asked to keep a lease for: its `ttl` as the holder
/// counts it, plus `lock_delay`'s `delay` (Chubby's lock-delay: a lease
/// that ends without a release keeps the lock that much longer), plus a
/// [`SERVER_TICK`]. The one place they are added; every acquisition,
/// renewal and extend asks for this.
pub(crate) fn server_ttl(ttl: Duration, delay: Duration) -> Duration {
    ttl + delay + SERVER_TICK
}

/// What the server's time of a waiter's attempt may have lost: read at
/// its clock's last tick ([`SERVER_TICK`]), then rounded down to the
/// millisecond. A grant's span is counted from it.
const ARRIVAL_READ_EARLY: Duration = Duration::from_millis(1).saturating_add(SERVER_TICK);

/// How long a lease handed to its waiter at release lasts by the waiter's
/// count, from when it sent the attempt that set its queue deadline, for a
/// grant whose `span` the release script reckoned from that deadline
/// (`lock_release.lua`); `None` if nothing is left. The deadline is the
/// attempt's arrival by the server's clock plus the window, and that clock
/// may have read the arrival up to [`ARRIVAL_READ_EARLY`] early.
pub(crate) fn handed_span(span: Duration) -> Option<Duration> {
    span.checked_sub(ARRIVAL_READ_EARLY)
}

/// What is left of a lease of `ttl` whose acquisition took `elapsed`
/// (measured from before the first request was sent), after the drift
/// allowance; `None` when nothing is left and the lease must not be used.
pub(crate) fn validity(ttl: Duration, elapsed: Duration) -> Option<Duration> {
    ttl.checked_sub(elapsed)?
        .checked_sub(drift(ttl))
        .filter(|v| !v.is_zero())
}

/// The end of the validity of a lease of `ttl` whose command was sent at `sent`.
/// What is left until `until`, in whole ms rounded up (the scripts take
/// ms; a kept lease must never end sooner than asked); `None` once passed.
pub(crate) fn rest_until(until: Instant) -> Option<Duration> {
    let rest = until
        .checked_duration_since(Instant::now())
        .filter(|rest| !rest.is_zero())?;
    Some(Duration::from_millis(
        u64::try_from(rest.as_micros().div_ceil(1000)).unwrap_or(u64::MAX),
    ))
}

pub(crate) fn valid_until(sent: Instant, ttl: Duration) -> Instant {
    sent + ttl.saturating_sub(drift(ttl))
}

static NEXT_ID: AtomicU64 = AtomicU64::new(1);

/// A lease id, unique in the process; in a simulation build, in the
/// schedule (the watchdog's map of leases is keyed by it, and a schedule
/// must not depend on how many leases the process made before it).
fn next_id() -> u64 {
    #[cfg(leasehold_sim)]
    if let Some(id) = crate::sim::next_lease_id() {
        return id;
    }
    NEXT_ID.fetch_add(1, Ordering::Relaxed)
}

/// One held lease.
pub(crate) struct Lease {
    pub(crate) id: u64,
    pub(crate) name: String,
    pub(crate) keys: Arc<LockKeys>,
    pub(crate) kind: LockKind,
    /// The owner token the user sees ([`LockGuard::token`](crate::LockGuard::token)).
    pub(crate) token: Token,
    /// What the kind's scripts know this lease by: the owner token for a
    /// lock, the hold id for a reentrant lock, the member for an RwLock.
    pub(crate) hold: String,
    /// What the holder says of itself (`describe`), kept beside the lease
    /// at [`LockKeys::who`] for as long as it lasts.
    pub(crate) about: Option<Arc<str>>,
    timing: Mutex<Timing>,
    /// Held by whoever changes the lease's expiry on the server (a renewal,
    /// an extend), so the two never overlap: a renewal sent with the old
    /// TTL cannot land after an extend and cut the lease short behind the
    /// client's back.
    changing: Arc<tokio::sync::Mutex<()>>,
    lost: AtomicBool,
    /// Why it was lost ([`LostReason::code`]; 0 while not known to be).
    reason: AtomicU8,
    /// A renewal was sent and has not been answered yet (set by the
    /// watchdog): a validity that runs out meanwhile ran out because Redis
    /// did not answer, not because nobody renewed.
    renewal_unanswered: AtomicBool,
    lost_notify: Notify,
    /// With [`hold_at_least`](crate::Lock::hold_at_least): until when a
    /// release keeps the lease (only stops renewing it) instead of freeing
    /// the lock. Set once: at the acquisition, or (a
    /// [`MultiLock`](crate::MultiLock)'s names) once every name is held.
    kept_until: std::sync::OnceLock<Instant>,
    /// `lock_delay`: renewals and extends set the lease on the server for
    /// this much more than the TTL the holder counts.
    delay: Duration,
    /// Set by a release (explicit, or handed to the background) before it
    /// sends anything.
    released: AtomicBool,
    /// The TTL its acquisition's attempts queued with, for a lock that
    /// queues ([`Won::queued`](crate::acquire::Won)): its release leaves
    /// the queue too.
    queued: Option<Duration>,
}

#[derive(Clone, Copy)]
struct Timing {
    ttl: Duration,
    /// When the command that last set the lease's expiry (its acquisition,
    /// a renewal, an extend) was sent: the next renewal is due a third of
    /// `span` after it.
    set_at: Instant,
    /// How long that command set the lease for: the TTL, or, for a lease
    /// handed to its waiter at release, until the waiter's queue deadline
    /// if that is shorter.
    span: Duration,
    valid_until: Instant,
}

/// The state of a lease's timing at one moment, for a renewal.
#[derive(Clone, Copy)]
pub(crate) struct Snapshot {
    pub(crate) ttl: Duration,
    pub(crate) valid_until: Instant,
}

impl Lease {
    pub(crate) fn new(
        name: String,
        keys: Arc<LockKeys>,
        kind: LockKind,
        token: Token,
        hold: String,
        ttl: Duration,
        sent: Instant,
    ) -> Lease {
        Lease {
            id: next_id(),
            name,
            keys,
            kind,
            token,
            hold,
            about: None,
            timing: Mutex::new(Timing {
                ttl,
                set_at: sent,
                span: ttl,
                valid_until: valid_until(sent, ttl),
            }),
            changing: Arc::new(tokio::sync::Mutex::new(())),
            lost: AtomicBool::new(false),
            reason: AtomicU8::new(0),
            renewal_unanswered: AtomicBool::new(false),
            lost_notify: Notify::new(),
            kept_until: std::sync::OnceLock::new(),
            delay: Duration::ZERO,
            released: AtomicBool::new(false),
            queued: None,
        }
    }

    /// This lease, whose acquisition's attempts queued with `queued` (see
    /// [`Lease::id`]).
    pub(crate) fn queued_as(mut self, queued: Option<Duration>) -> Lease {
        self.queued = queued;
        self
    }

    /// This lease, kept by a release until `until` (see [`Lease::kept_for`]).
    pub(crate) fn keep_until(self, until: Instant) -> Lease {
        self.keep_from(until);
        self
    }

    /// Keeps this held lease at a release until `until`, unless a time was
    /// already set: a [`MultiLock`](crate::MultiLock) sets it on each name
    /// once all are held, so a give-back of a partial set frees at once.
    pub(crate) fn keep_from(&self, until: Instant) {
        let _ = self.kept_until.set(until);
    }

    /// This lease, kept by the server `delay` longer than its TTL at each
    /// renewal and extend (`lock_delay`).
    pub(crate) fn lock_delay(mut self, delay: Duration) -> Lease {
        self.delay = delay;
        self
    }

    /// This lease, described by its holder as `about` (see [`Lease::about`]).
    pub(crate) fn described(mut self, about: Option<Arc<str>>) -> Lease {
        self.about = about;
        self
    }

    /// Records that a release of this lease is about to be sent.
    pub(crate) fn mark_released(&self) {
        self.released.store(true, Ordering::Release);
    }

    /// Whether a release of this lease was sent (or is about to be).
    pub(crate) fn is_released(&self) -> bool {
        self.released.load(Ordering::Acquire)
    }

    /// Where the holder's description is kept, if it gave one.
    pub(crate) fn who(&self) -> Option<String> {
        self.about.as_ref().map(|_| self.keys.who(&self.hold))
    }

    /// Whether the lease has a lock delay: once it has ended without a
    /// release, a release must not cut the delay short.
    pub(crate) fn delays(&self) -> bool {
        !self.delay.is_zero()
    }

    /// What the server is asked to keep the lease for, for a TTL of `ttl`
    /// as the holder counts it.
    pub(crate) fn server_ttl(&self, ttl: Duration) -> Duration {
        server_ttl(ttl, self.delay)
    }

    /// The lease as a release names it: with the TTL its attempts queued
    /// with, if its lock queues, so a late attempt's entry in the queue goes
    /// with the release (the release script never hands a lease to the
    /// token releasing it).
    pub(crate) fn id(&self) -> LeaseId<'_> {
        LeaseId {
            kind: self.kind,
            keys: &self.keys,
            hold: &self.hold,
            queued: self.queued,
        }
    }

    /// [`Lease::id`], owned, for a release that outlives the borrow (the
    /// background's): the keys shared, not copied.
    pub(crate) fn owned_id(&self) -> crate::scripts::OwnedLeaseId {
        crate::scripts::OwnedLeaseId {
            kind: self.kind,
            keys: Arc::clone(&self.keys),
            hold: self.hold.clone(),
            queued: self.queued,
        }
    }

    /// Until when a release keeps the lease, if `hold_at_least` asked.
    pub(crate) fn kept_until(&self) -> Option<Instant> {
        self.kept_until.get().copied()
    }

    /// How much longer a release made now must keep the lease (set on the
    /// server for this long, no longer renewed) instead of freeing it:
    /// `None` once the time asked by `hold_at_least` has passed, or if none
    /// was asked.
    pub(crate) fn kept_for(&self) -> Option<Duration> {
        rest_until(self.kept_until()?)
    }

    /// This lease, set on the server for `span` from when its acquisition
    /// was sent rather than for its TTL: a lease handed to its waiter at
    /// release lasts until the waiter's queue deadline. Its validity is
    /// that span's, and its first renewal is due a third of the shorter of
    /// the span and the TTL after it was sent.
    pub(crate) fn first_span(self, span: Duration) -> Lease {
        {
            let mut t = self.timing();
            t.valid_until = valid_until(t.set_at, span);
            t.span = span.min(t.ttl);
        }
        self
    }

    fn timing(&self) -> MutexGuard<'_, Timing> {
        // Every update is a plain field write; a poisoned lock holds valid data.
        self.timing.lock().unwrap_or_else(|e| e.into_inner())
    }

    pub(crate) fn snapshot(&self) -> Snapshot {
        let t = *self.timing();
        Snapshot {
            ttl: t.ttl,
            valid_until: t.valid_until,
        }
    }

    /// A renewal sent at `sent` with the timing of `at` succeeded. No
    /// extend ran meanwhile (the renewal held [`Lease::change`]), so `at` is
    /// still the lease's timing.
    /// The renewal set the expiry anew, to the TTL from when it was
    /// applied: a handed lease's first span, if longer, ends with it.
    pub(crate) fn renewed(&self, sent: Instant, at: Snapshot) {
        let mut t = self.timing();
        t.valid_until = valid_until(sent, at.ttl);
        t.set_at = t.set_at.max(sent);
        t.span = at.ttl;
    }

    /// When the next renewal is due: a third of the span the lease's
    /// expiry was last set for after it was set (possibly already past).
    pub(crate) fn renewal_due(&self) -> Instant {
        let t = self.timing();
        t.set_at + t.span / 3
    }

    /// Waits until no renewal or extend of this lease is in flight, and
    /// keeps others out while the returned guard lives.
    pub(crate) async fn change(&self) -> tokio::sync::OwnedMutexGuard<()> {
        Arc::clone(&self.changing).lock_owned().await
    }

    /// What [`Lease::change`] locks, for a change made where the lease
    /// itself is not at hand (a background release of the watchdog).
    pub(crate) fn changes(&self) -> Arc<tokio::sync::Mutex<()>> {
        Arc::clone(&self.changing)
    }

    /// Like [`Lease::change`], without waiting: `None` while an extend is in flight.
    pub(crate) fn try_change(&self) -> Option<tokio::sync::OwnedMutexGuard<()>> {
        Arc::clone(&self.changing).try_lock_owned().ok()
    }

    /// An explicit extend to `ttl`, sent by `send`: waits until no renewal
    /// of this lease is in flight (and keeps renewals out meanwhile), and
    /// before sending caps the validity at what the new TTL gives, since
    /// the server may apply it even if no answer ever comes (a timeout, or
    /// the caller dropping the future): an extend to a shorter TTL must
    /// shorten the client's view at once. On success the validity is the
    /// new TTL's; `Ok(false)` if the lease is gone (then marked lost).
    pub(crate) async fn extend<Fut>(
        &self,
        ttl: Duration,
        send: impl FnOnce() -> Fut,
    ) -> Result<bool>
    where
        Fut: std::future::Future<Output = Result<Owned>>,
    {
        let _changing = self.change().await;
        if self.is_lost() {
            return Ok(false);
        }
        let sent = Instant::now();
        self.update(|t| t.valid_until = t.valid_until.min(valid_until(sent, ttl)));
        match send().await? {
            Owned::Done => {}
            gone => {
                self.mark_lost(gone.lost_reason());
                return Ok(false);
            }
        }
        self.renewal_waits(false);
        self.update(|t| {
            t.ttl = ttl;
            t.set_at = sent;
            t.span = ttl;
            t.valid_until = valid_until(sent, ttl);
        });
        Ok(true)
    }

    /// A release, sent by `send` once no renewal or extend of this lease is
    /// in flight (and keeping them out meanwhile). On Redlock a renewal
    /// re-takes the lease on nodes that lost it; sent beside the release,
    /// that re-take could reach a node after the release and leave a copy
    /// of the released lease there for its TTL, keeping the next holder's
    /// re-take out of the node (it replaced the next holder's copy while a
    /// re-take still replaced other tokens).
    pub(crate) async fn release<Fut>(&self, send: impl FnOnce() -> Fut) -> Fut::Output
    where
        Fut: std::future::Future,
    {
        let _changing = self.change().await;
        send().await
    }

    /// Changes the timing and wakes [`Lease::lost`], which sleeps until the
    /// validity it read and must read it again.
    fn update(&self, change: impl FnOnce(&mut Timing)) {
        change(&mut self.timing());
        self.lost_notify.notify_waiters();
    }

    /// Records that the lease was given back by [`Client::close`](crate::Client::close):
    /// the guard reports it lost from now on, without a warning.
    pub(crate) fn mark_closed(&self) {
        let _ = self.reason.compare_exchange(
            0,
            LostReason::Closed.code(),
            Ordering::AcqRel,
            Ordering::Acquire,
        );
        self.lost.store(true, Ordering::Release);
        self.lost_notify.notify_waiters();
    }

    /// The watchdog sent a renewal of this lease (`true`), or had its
    /// answer (`false`).
    pub(crate) fn renewal_waits(&self, waits: bool) {
        self.renewal_unanswered.store(waits, Ordering::Release);
    }

    /// Why a lease whose validity ran out by our clock was lost: Redis did
    /// not answer a renewal sent in time, or none was sent.
    pub(crate) fn expiry_reason(&self) -> LostReason {
        if self.renewal_unanswered.load(Ordering::Acquire) {
            LostReason::Unreachable
        } else {
            LostReason::Expired
        }
    }

    /// Why the lease was lost; `None` while it is not.
    pub(crate) fn lost_reason(&self) -> Option<LostReason> {
        if self.lost.load(Ordering::Acquire) {
            return Some(
                LostReason::from_code(self.reason.load(Ordering::Acquire))
                    .unwrap_or(LostReason::Expired),
            );
        }
        (Instant::now() >= self.timing().valid_until).then(|| self.expiry_reason())
    }

    /// True once the lease may have expired or was taken.
    pub(crate) fn is_lost(&self) -> bool {
        self.lost.load(Ordering::Acquire) || Instant::now() >= self.timing().valid_until
    }

    /// How long the lease lasts from now by our clock; zero once lost.
    pub(crate) fn valid_for(&self) -> Duration {
        if self.lost.load(Ordering::Acquire) {
            return Duration::ZERO;
        }
        self.timing()
            .valid_until
            .saturating_duration_since(Instant::now())
    }

    /// Records that the lease is gone, for `reason`, and wakes everyone in
    /// [`Lease::lost`]; counted and logged once.
    pub(crate) fn mark_lost(&self, reason: LostReason) {
        // The first reason stands: set before `lost`, so whoever sees the
        // lease lost reads why.
        let _ = self
            .reason
            .compare_exchange(0, reason.code(), Ordering::AcqRel, Ordering::Acquire);
        if !self.lost.swap(true, Ordering::AcqRel) {
            tracing::warn!(lock = %self.name, token = ?self.token, reason = reason.label(), "lease lost");
            telemetry::lost(reason);
        }
        self.lost_notify.notify_waiters();
    }

    /// Resolves once the lease is lost: taken by another owner, or not
    /// renewed before its validity ran out.
    pub(crate) async fn lost(&self) {
        loop {
            let notified = self.lost_notify.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            if self.lost.load(Ordering::Acquire) {
                return;
            }
            let until = self.timing().valid_until;
            if Instant::now() >= until {
                self.mark_lost(self.expiry_reason());
                return;
            }
            tokio::select! {
                () = notified => {}
                () = crate::clock::sleep_until(until) => {}
            }
        }
    }
}

#[cfg(test)]
mod tests {
    //! Validity maths, and validity under explicit extends on tokio's
    //! paused clock.

    use super::*;
    use crate::token::Token;

    #[test]
    fn validity_subtracts_elapsed_and_drift() {
        let ttl = Duration::from_secs(10);
        // drift = ttl/100 + 2 ms = 102 ms
        assert_eq!(
            validity(ttl, Duration::from_secs(1)),
            Some(Duration::from_millis(8898))
        );
        assert_eq!(validity(ttl, Duration::from_millis(9898)), None);
        assert_eq!(validity(ttl, Duration::from_secs(11)), None);
    }

    /// A server's clock as a script reads it (`TIME`, µs) at the real
    /// moment `t_us`: run `ppm` parts per million fast and read at its
    /// ticks of `tick_us` (0: continuous), the last one at or before then.
    fn server_us(t_us: u64, tick_us: u64, ppm: u64) -> u64 {
        let t = t_us + t_us * ppm / 1_000_000;
        match tick_us {
            0 => t,
            tick => t / tick * tick,
        }
    }

    /// [`server_us`] in whole ms, as Redis dates and checks expiries.
    fn server_ms(t_us: u64, tick_us: u64, ppm: u64) -> u64 {
        server_us(t_us, tick_us, ppm) / 1000
    }

    fn us(d: Duration) -> u64 {
        u64::try_from(d.as_micros()).unwrap()
    }

    /// The server clock ticks the lease arithmetic must hold under (issue
    /// 32): continuous, 1 ms, a coarse clock source's 15.625 ms and 16 ms.
    const TICKS_US: [u64; 4] = [0, 1_000, 15_625, 16_000];

    /// TTLs from the shortest allowed up: the drift allowance is smallest
    /// for the shortest.
    const TTLS_MS: [u64; 9] = [10, 11, 37, 71, 100, 300, 1_000, 1_400, 30_000];

    /// Every moment within two ticks (in steps of 125 µs, a divisor of
    /// each tick and of the ms), past a real time that is a multiple of no
    /// tick, and every clock run between on time and 50 ppm fast: each way
    /// `f(sent_us, tick_us, ppm)` can meet the server's clock.
    fn each_clock(mut f: impl FnMut(u64, u64, u64)) {
        for tick_us in TICKS_US {
            for ppm in [0, 50] {
                for step in 0..256 {
                    f(7_777_777_777 + step * 125, tick_us, ppm);
                }
            }
        }
    }

    /// A lease set by a command sent at `sent` (PX of what [`server_ttl`]
    /// asks, in whole ms as the scripts take it) and run by the server any
    /// time later outlives the holder's validity ([`valid_until`]), on a
    /// server whose clock ticks by up to 16 ms and runs up to 50 ppm fast:
    /// Redis dates the expiry from its clock's last tick, up to a tick
    /// before the command ran (seeds 12599 and 22841: a 15.625 ms tick
    /// ended 100 ms leases 6 ms before their holders' validity).
    #[test]
    fn a_lease_outlives_its_validity_on_a_server_clock_that_ticks() {
        each_clock(|sent_us, tick_us, ppm| {
            for ttl in TTLS_MS.map(Duration::from_millis) {
                for delay_us in [0, 1, 999, 15_624, 250_000] {
                    let ran_us = sent_us + delay_us;
                    let px = crate::scripts::millis(server_ttl(ttl, Duration::ZERO));
                    let expiry_ms = server_ms(ran_us, tick_us, ppm) + px;
                    // Redis drops a key once its clock is past the expiry;
                    // the holder counts on its lease until `valid_until`.
                    let last_us = sent_us + us(ttl.saturating_sub(drift(ttl))) - 1;
                    let read = server_ms(last_us, tick_us, ppm);
                    assert!(
                        read <= expiry_ms,
                        "a {ttl:?} lease sent at {sent_us} us ended {} ms before its \
                         validity on a server ticking by {tick_us} us",
                        read - expiry_ms
                    );
                }
            }
        });
    }

    /// A lease handed to its waiter at release (`lock_release.lua`)
    /// outlives the waiter's view of it ([`handed_span`] of the span the
    /// script announced, from when the waiter sent the attempt that set
    /// its deadline) on a server whose clock ticks by up to 16 ms: the
    /// attempt's arrival, which the deadline is reckoned from, is read up
    /// to a tick early.
    #[test]
    fn a_handed_lease_outlives_its_validity_on_a_server_clock_that_ticks() {
        let window = crate::scripts::millis(crate::scripts::QUEUE_WINDOW);
        let grace = crate::scripts::millis(crate::scripts::HANDOFF_GRACE);
        each_clock(|sent_us, tick_us, ppm| {
            for ttl in TTLS_MS.map(Duration::from_millis) {
                for (to_server_us, waited_us) in [
                    (0, 0),
                    (1, 999),
                    (15_624, 1),
                    (999, 15_624),
                    (250_000, 1_000_000),
                    (0, 2_600_000),
                    (0, 2_990_000),
                ] {
                    // The waiter's attempt: its arrival (µs, TIME) sets its
                    // deadline; a release hands it the lease before then.
                    let arrived_us = sent_us + to_server_us;
                    let deadline = server_us(arrived_us, tick_us, ppm) / 1000 + window;
                    let now = server_ms(arrived_us + waited_us, tick_us, ppm);
                    if deadline <= now {
                        continue;
                    }
                    let queued = crate::scripts::millis(server_ttl(ttl, Duration::ZERO));
                    let reserve = (deadline - now).max(grace).min(queued);
                    let expiry_ms = now + reserve;
                    let span = Duration::from_millis(now + reserve - (deadline - window));
                    let Some(span) = handed_span(span) else {
                        continue;
                    };
                    let last_us = sent_us + us(span.saturating_sub(drift(span))) - 1;
                    let read = server_ms(last_us, tick_us, ppm);
                    assert!(
                        read <= expiry_ms,
                        "a lease handed over for {span:?} ({ttl:?} TTL) ended {} ms before \
                         its validity on a server ticking by {tick_us} us",
                        read - expiry_ms
                    );
                }
            }
        });
    }

    fn lease(ttl: Duration) -> Arc<Lease> {
        Arc::new(Lease::new(
            "n".into(),
            Arc::new(LockKeys::new("t", "n")),
            LockKind::Lock,
            Token::random(),
            "hold".into(),
            ttl,
            Instant::now(),
        ))
    }

    /// Issue 15, item 1: a lease handed to its waiter at release lasts until
    /// the waiter's deadline, not its TTL. With a TTL shorter than that, the
    /// first renewal comes a third of the TTL in, and sets the expiry anew:
    /// the validity is the renewal's, shorter than the handed span (a
    /// renewal used to keep whichever validity was longer, which here would
    /// outlast the server's expiry).
    #[tokio::test(start_paused = true)]
    async fn a_renewal_after_a_longer_handed_span_shortens_the_validity() {
        let ttl = Duration::from_secs(1);
        let span = Duration::from_secs(3);
        let start = Instant::now();
        let held = Arc::try_unwrap(lease(ttl)).ok().unwrap().first_span(span);
        assert_eq!(held.snapshot().valid_until, valid_until(start, span));
        assert_eq!(held.renewal_due(), start + ttl / 3);
        tokio::time::sleep(ttl / 3).await;
        let sent = Instant::now();
        held.renewed(sent, held.snapshot());
        assert_eq!(held.snapshot().valid_until, valid_until(sent, ttl));
        assert_eq!(held.renewal_due(), sent + ttl / 3);
    }

    /// With a TTL longer than the handed span, the first renewal comes a
    /// third of the span in, well before the span ends.
    #[tokio::test(start_paused = true)]
    async fn a_handed_span_shorter_than_the_ttl_is_renewed_early() {
        let span = Duration::from_secs(3);
        let start = Instant::now();
        let held = Arc::try_unwrap(lease(Duration::from_secs(30)))
            .ok()
            .unwrap()
            .first_span(span);
        assert_eq!(held.renewal_due(), start + span / 3);
        assert_eq!(held.snapshot().valid_until, valid_until(start, span));
    }

    /// An extend to a shorter TTL whose answer never comes (cancelled, or
    /// timed out) may still have been applied: the guard's validity is the
    /// shorter one from the moment it was sent.
    #[tokio::test(start_paused = true)]
    async fn an_unanswered_shortening_extend_shortens_the_validity() {
        let held = lease(Duration::from_secs(30));
        let short = Duration::from_millis(300);
        let cancelled = tokio::time::timeout(
            Duration::from_millis(100),
            held.extend(short, std::future::pending::<Result<Owned>>),
        )
        .await;
        assert!(cancelled.is_err());
        tokio::time::sleep(Duration::from_millis(250)).await;
        assert!(
            held.is_lost(),
            "the server may have ended the lease 300 ms after the extend"
        );
    }

    /// An unanswered extend to a longer TTL changes nothing: the old
    /// validity still holds (the server has at least that).
    #[tokio::test(start_paused = true)]
    async fn an_unanswered_lengthening_extend_keeps_the_validity() {
        let held = lease(Duration::from_secs(1));
        let before = held.snapshot().valid_until;
        let failed = held
            .extend(Duration::from_secs(60), || async {
                Err(crate::error::Error::InvalidArgument("no answer".into()))
            })
            .await;
        assert!(failed.is_err());
        assert_eq!(held.snapshot().valid_until, before);
    }

    /// `lost()` sleeps until the validity it read; an extend that moves the
    /// validity earlier wakes it to read again.
    #[tokio::test(start_paused = true)]
    async fn lost_wakes_when_an_extend_shortens_the_lease() {
        let held = lease(Duration::from_secs(30));
        let watching = {
            let held = Arc::clone(&held);
            tokio::spawn(async move { held.lost().await })
        };
        tokio::task::yield_now().await;
        let extended = held
            .extend(Duration::from_millis(300), || async { Ok(Owned::Done) })
            .await;
        assert!(extended.expect("extend"));
        tokio::time::timeout(Duration::from_secs(1), watching)
            .await
            .expect("lost() resolved when the shortened lease ran out")
            .expect("join");
        assert!(held.is_lost());
    }
}
