//! Release events: one shared subscription per client, however many tasks wait.
//!
//! Waiters register interest in a lock's channel under their own id and get
//! a [`Subscription`]. The payload of a release message says whom it wakes:
//!
//! - a waiter's id: the lease was handed to that waiter (a lease lock's
//!   release); only that waiter, in whichever client has it, wakes;
//! - empty: one waiter of that lock in this client (`notify_one`, FIFO); if
//!   it loses the race it goes back to sleep, and if it gives up before
//!   trying, the wake-up passes to the next;
//! - `all`: every waiter of that lock in this client (an RwLock release,
//!   after which many readers may enter).
//!
//! A reconnect wakes every waiter, since messages may have been missed. The
//! backend passes a disconnection on (again, on a cluster) once it has
//! subscribed every channel on the new connection (`backend/managed.rs`,
//! `backend/subscriber.rs`), so a waiter woken then hears the next release.
//!
//! The server-side SUBSCRIBE/UNSUBSCRIBE calls are made by one task in
//! order, so they never overtake each other. Channels stay subscribed for a
//! while after their last waiter leaves, so a hot lock does not pay a
//! SUBSCRIBE and UNSUBSCRIBE per contended acquisition.

#[cfg(not(leasehold_sim))]
use std::collections::{HashMap, HashSet};

#[cfg(leasehold_sim)]
use crate::sim::{HashMap, HashSet};
use std::future::Future;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use crate::clock::Instant;

use redis::{PushInfo, PushKind, Value};
use tokio::sync::{Notify, mpsc, oneshot};

use crate::error::{Error, Result};

/// How long a channel stays subscribed after its last waiter left.
const LINGER: Duration = Duration::from_secs(5);

/// A lease handed to a waiter whole at release (`lock_release.lua`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Grant {
    pub(crate) fence: u64,
    /// The queue deadline (ms of server time) of the waiter's attempt the
    /// grant is dated from: the waiter learned it from that attempt's reply.
    pub(crate) deadline: u64,
    /// How long the lease lasts from when that attempt reached the server.
    pub(crate) span: Duration,
}

impl Grant {
    /// Parses '<fence> <deadline> <span in ms>'.
    fn parse(text: &str) -> Option<Grant> {
        let mut parts = text.split(' ').map(str::parse::<u64>);
        let grant = Grant {
            fence: parts.next()?.ok()?,
            deadline: parts.next()?.ok()?,
            span: Duration::from_millis(parts.next()?.ok()?),
        };
        parts.next().is_none().then_some(grant)
    }
}

/// One waiter's own wake-up, and the lease handed to it, if any.
#[derive(Default)]
struct Own {
    notify: Arc<Notify>,
    grant: Mutex<Option<Grant>>,
}

/// Locks `m`; every update under these locks is a single write, so a
/// poisoned one still holds valid data.
fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

#[derive(Default)]
pub(crate) struct Shared {
    channels: Mutex<HashMap<String, Entry>>,
}

/// What every message of a channel is handed to, instead of waking
/// waiters: the break notices ([`Events::listen`]). Called on the
/// connection's task, so it must only hand the message on.
pub(crate) type Listener = Box<dyn Fn(&[u8]) + Send + Sync>;

struct Entry {
    refs: usize,
    /// Set by [`Events::listen`]: the channel's messages go here.
    listener: Option<Listener>,
    /// Wakes one or all waiters of the channel (empty or `all` payloads).
    notify: Arc<Notify>,
    /// Each waiter's own wake-up, by waiter id (payload = that id).
    waiters: HashMap<String, Arc<Own>>,
    /// The server confirmed the subscription (set by the task).
    subscribed: bool,
    idle_since: Instant,
}

impl Shared {
    fn channels(&self) -> MutexGuard<'_, HashMap<String, Entry>> {
        lock(&self.channels)
    }

    /// Routes a push frame from the connection to the waiters it concerns.
    /// Runs on the connection's task, so it only takes a lock and notifies.
    pub(crate) fn on_push(&self, info: PushInfo) {
        match info.kind {
            // SMessage: a shard channel's, on a cluster with sharded pub/sub.
            PushKind::Message | PushKind::SMessage => {
                let Some(Value::BulkString(channel)) = info.data.first() else {
                    return;
                };
                let Ok(channel) = std::str::from_utf8(channel) else {
                    return;
                };
                let payload = match info.data.get(1) {
                    Some(Value::BulkString(payload)) => payload.as_slice(),
                    _ => b"",
                };
                if let Some(entry) = self.channels().get(channel) {
                    if let Some(listener) = &entry.listener {
                        listener(payload);
                        return;
                    }
                    match payload {
                        b"" => entry.notify.notify_one(),
                        b"all" => entry.notify.notify_waiters(),
                        payload => {
                            // '<id>', or '<id> <fence> <deadline> <span>' for a
                            // lease handed over whole (lock_release.lua).
                            let payload = std::str::from_utf8(payload).unwrap_or("");
                            let (id, grant) = match payload.split_once(' ') {
                                Some((id, rest)) => (id, Grant::parse(rest)),
                                None => (payload, None),
                            };
                            if let Some(waiter) = entry.waiters.get(id) {
                                if let Some(grant) = grant {
                                    *lock(&waiter.grant) = Some(grant);
                                }
                                waiter.notify.notify_one();
                            }
                        }
                    }
                }
            }
            PushKind::Disconnection => {
                tracing::debug!(
                    "connection to Redis dropped or replaced; waking every waiter to retry"
                );
                for entry in self.channels().values() {
                    entry.notify.notify_waiters();
                    for waiter in entry.waiters.values() {
                        waiter.notify.notify_one();
                    }
                }
            }
            _ => {}
        }
    }
}

/// What the subscription task needs from the servers: `Servers` in a
/// client, an in-process fake in the unit tests, which check the routing
/// and the task's calls on tokio's paused clock.
pub(crate) trait Channels: Send + Sync + 'static {
    /// Subscribes to `channel`; returns once the server confirmed it.
    fn subscribe(&self, channel: &str) -> impl Future<Output = Result<()>> + Send;

    /// Ends a subscription made by [`Channels::subscribe`].
    fn unsubscribe(&self, channel: &str) -> impl Future<Output = Result<()>> + Send;
}

/// The client's registry of subscriptions.
#[derive(Clone)]
pub(crate) struct Events {
    shared: Arc<Shared>,
    tx: mpsc::UnboundedSender<Ensure>,
}

struct Ensure {
    channel: String,
    done: oneshot::Sender<Result<()>>,
}

impl Events {
    /// Starts the subscription task on `servers`, whose push frames must be
    /// routed to `shared.on_push`.
    pub(crate) fn start(shared: Arc<Shared>, servers: impl Channels) -> Events {
        let (tx, rx) = mpsc::unbounded_channel();
        tokio::spawn(run(Arc::clone(&shared), servers, rx));
        Events { shared, tx }
    }

    /// Registers interest in `channel` for the waiter `waiter` (its id in
    /// hand-off messages) and returns once the server confirmed
    /// the subscription, so no release published after this returns is missed.
    ///
    /// # Cancel safety
    ///
    /// Dropping the future drops the registration; the channel is
    /// unsubscribed later if nobody else uses it.
    pub(crate) async fn subscribe(&self, channel: &str, waiter: &str) -> Result<Subscription> {
        self.ensure(channel, waiter, None).await
    }

    /// Subscribes to `channel` and hands every message on it to `listener`
    /// (a channel of notices, not of wake-ups), for as long as the returned
    /// [`Subscription`] lives; returns once the server confirmed it.
    pub(crate) async fn listen(&self, channel: &str, listener: Listener) -> Result<Subscription> {
        self.ensure(channel, "", Some(listener)).await
    }

    async fn ensure(
        &self,
        channel: &str,
        waiter: &str,
        listener: Option<Listener>,
    ) -> Result<Subscription> {
        let (subscription, subscribed) = self.register(channel, waiter, listener);
        if !subscribed {
            let (done, confirmed) = oneshot::channel();
            let shut_down = || Error::InvalidArgument("the client was shut down".into());
            self.tx
                .send(Ensure {
                    channel: channel.to_owned(),
                    done,
                })
                .map_err(|_| shut_down())?;
            confirmed.await.map_err(|_| shut_down())??;
        }
        Ok(subscription)
    }

    /// Registers `waiter` on `channel` without asking the server, if the
    /// channel is already subscribed there (a lock waited for moments ago):
    /// a waiter that registers before its first attempt misses no release,
    /// and a refused attempt needs no second try after subscribing.
    pub(crate) fn subscribed(&self, channel: &str, waiter: &str) -> Option<Subscription> {
        if !self
            .shared
            .channels()
            .get(channel)
            .is_some_and(|e| e.subscribed)
        {
            return None;
        }
        match self.register(channel, waiter, None) {
            (subscription, true) => Some(subscription),
            // Swept in between: dropping the registration undoes it.
            (_, false) => None,
        }
    }

    /// Adds `waiter` to `channel`'s registry; says whether the server
    /// confirmed the channel's subscription already.
    fn register(
        &self,
        channel: &str,
        waiter: &str,
        listener: Option<Listener>,
    ) -> (Subscription, bool) {
        let own = Arc::new(Own::default());
        let (notify, subscribed) = {
            let mut channels = self.shared.channels();
            let entry = channels.entry(channel.to_owned()).or_insert_with(|| Entry {
                refs: 0,
                listener: None,
                notify: Arc::new(Notify::new()),
                waiters: HashMap::default(),
                subscribed: false,
                idle_since: Instant::now(),
            });
            entry.refs += 1;
            if listener.is_some() {
                entry.listener = listener;
            }
            entry.waiters.insert(waiter.to_owned(), Arc::clone(&own));
            (Arc::clone(&entry.notify), entry.subscribed)
        };
        let subscription = Subscription {
            shared: Arc::clone(&self.shared),
            channel: channel.to_owned(),
            waiter: waiter.to_owned(),
            notify,
            own,
        };
        (subscription, subscribed)
    }
}

/// Interest in one lock's release events; dropping it ends the interest.
pub(crate) struct Subscription {
    shared: Arc<Shared>,
    channel: String,
    waiter: String,
    notify: Arc<Notify>,
    own: Arc<Own>,
}

impl Subscription {
    /// The channel's wake-ups: one waiter per empty event, all on `all`.
    pub(crate) fn notify(&self) -> Arc<Notify> {
        Arc::clone(&self.notify)
    }

    /// This waiter's own wake-up: a lease was handed to it.
    pub(crate) fn own(&self) -> Arc<Notify> {
        Arc::clone(&self.own.notify)
    }

    /// The last lease handed to this waiter whole, taken out (so each is
    /// looked at once).
    pub(crate) fn take_grant(&self) -> Option<Grant> {
        lock(&self.own.grant).take()
    }
}

impl Drop for Subscription {
    fn drop(&mut self) {
        let mut channels = self.shared.channels();
        let Some(entry) = channels.get_mut(&self.channel) else {
            return;
        };
        entry.waiters.remove(&self.waiter);
        entry.refs -= 1;
        if entry.refs > 0 {
            return;
        }
        if entry.subscribed {
            // Left to linger, then to the sweep.
            entry.idle_since = Instant::now();
        } else {
            // Never subscribed (it failed, or the caller gave up first):
            // the sweep only looks at subscribed channels. A subscribe
            // still in flight finds no entry to mark and leaves the
            // channel to the sweep.
            channels.remove(&self.channel);
        }
    }
}

/// Makes the server's subscriptions follow the registry, one call at a time.
async fn run(shared: Arc<Shared>, servers: impl Channels, mut rx: mpsc::UnboundedReceiver<Ensure>) {
    let mut on_server: HashSet<String> = HashSet::default();
    let mut sweep = tokio::time::interval(LINGER / 2);
    sweep.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            request = rx.recv() => {
                let Some(Ensure { channel, done }) = request else { return };
                let result = if on_server.contains(&channel) {
                    Ok(())
                } else {
                    servers.subscribe(&channel).await
                };
                if result.is_ok() {
                    on_server.insert(channel.clone());
                    if let Some(entry) = shared.channels().get_mut(&channel) {
                        entry.subscribed = true;
                    }
                }
                let _ = done.send(result);
            }
            _ = sweep.tick() => {
                let idle: Vec<String> = {
                    let mut channels = shared.channels();
                    on_server
                        .iter()
                        .filter(|ch| match channels.get(ch.as_str()) {
                            None => true,
                            Some(e) => e.refs == 0 && e.idle_since.elapsed() >= LINGER,
                        })
                        .cloned()
                        .collect::<Vec<_>>()
                        .into_iter()
                        .inspect(|ch| { channels.remove(ch); })
                        .collect()
                };
                for channel in idle {
                    // Subscribed or not, it is no longer counted as subscribed:
                    // after a failure the server may or may not still have it
                    // (a timed-out UNSUBSCRIBE may yet run; a reconnect does
                    // not subscribe it again), so the next waiter of the
                    // channel subscribes anew (SUBSCRIBE is idempotent). One
                    // the server kept costs only messages nobody is woken by,
                    // until the connection is replaced.
                    on_server.remove(&channel);
                    if let Err(e) = servers.unsubscribe(&channel).await {
                        tracing::debug!(%channel, error = %e, "unsubscribe failed");
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    //! The routing of release messages and the subscription task's calls,
    //! on tokio's paused clock against an in-process fake server.

    use std::pin::{Pin, pin};

    use futures_util::FutureExt;
    use tokio::sync::Semaphore;
    use tokio::sync::futures::Notified;

    use super::*;

    /// A server that records every (un)subscribe, answers a subscribe only
    /// with a permit each, and fails the next `failures` subscribes.
    #[derive(Clone)]
    struct Fake {
        calls: Arc<Mutex<Vec<String>>>,
        permits: Arc<Semaphore>,
        failures: Arc<Mutex<usize>>,
    }

    impl Fake {
        fn answering() -> Fake {
            Fake::with_permits(Semaphore::MAX_PERMITS)
        }

        /// Subscribes wait for [`Fake::confirm`].
        fn gated() -> Fake {
            Fake::with_permits(0)
        }

        fn with_permits(permits: usize) -> Fake {
            Fake {
                calls: Arc::default(),
                permits: Arc::new(Semaphore::new(permits)),
                failures: Arc::default(),
            }
        }

        fn confirm(&self) {
            self.permits.add_permits(1);
        }

        fn calls(&self) -> Vec<String> {
            self.calls.lock().unwrap().clone()
        }
    }

    impl Channels for Fake {
        fn subscribe(&self, channel: &str) -> impl Future<Output = Result<()>> + Send {
            self.calls
                .lock()
                .unwrap()
                .push(format!("subscribe {channel}"));
            let (permits, failures) = (Arc::clone(&self.permits), Arc::clone(&self.failures));
            async move {
                permits.acquire().await.expect("open").forget();
                let mut failures = failures.lock().unwrap();
                if *failures > 0 {
                    *failures -= 1;
                    return Err(Error::Unreachable {
                        addr: "fake".into(),
                        source: std::io::Error::other("connection refused").into(),
                    });
                }
                Ok(())
            }
        }

        fn unsubscribe(&self, channel: &str) -> impl Future<Output = Result<()>> + Send {
            self.calls
                .lock()
                .unwrap()
                .push(format!("unsubscribe {channel}"));
            std::future::ready(Ok(()))
        }
    }

    fn start(fake: &Fake) -> (Arc<Shared>, Events) {
        let shared = Arc::new(Shared::default());
        let events = Events::start(Arc::clone(&shared), fake.clone());
        (shared, events)
    }

    fn message(channel: &str, payload: &str) -> PushInfo {
        PushInfo {
            kind: PushKind::Message,
            data: vec![
                Value::BulkString(channel.as_bytes().to_vec()),
                Value::BulkString(payload.as_bytes().to_vec()),
            ],
        }
    }

    /// Whether the wake-up has come, without waiting for it.
    fn woken(notified: Pin<&mut Notified<'_>>) -> bool {
        notified.now_or_never().is_some()
    }

    #[tokio::test(start_paused = true)]
    async fn a_hand_off_wakes_only_the_waiter_it_names() {
        let fake = Fake::answering();
        let (shared, events) = start(&fake);
        let a = events.subscribe("ch", "a").await.expect("subscribe");
        let b = events.subscribe("ch", "b").await.expect("subscribe");
        let (a_own, b_own, channel) = (a.own(), b.own(), a.notify());
        let mut a_own = pin!(a_own.notified());
        let mut b_own = pin!(b_own.notified());
        let mut channel = pin!(channel.notified());
        for n in [a_own.as_mut(), b_own.as_mut(), channel.as_mut()] {
            n.enable();
        }
        // Hand-offs to a waiter this client does not have, or on a channel
        // it does not know, wake nobody.
        shared.on_push(message("ch", "c"));
        shared.on_push(message("elsewhere", "b"));
        shared.on_push(message("ch", "a"));
        assert!(woken(a_own), "the named waiter slept on");
        assert!(!woken(b_own.as_mut()), "another waiter woke");
        assert!(!woken(channel.as_mut()), "the channel's waiters woke");
    }

    #[tokio::test(start_paused = true)]
    async fn a_listened_channel_hands_every_message_on_and_wakes_nobody() {
        let fake = Fake::answering();
        let (shared, events) = start(&fake);
        let heard = Arc::new(Mutex::new(Vec::new()));
        let to = Arc::clone(&heard);
        let _notices = events
            .listen(
                "notices",
                Box::new(move |payload| to.lock().unwrap().push(payload.to_vec())),
            )
            .await
            .expect("listen");
        let waiter = events.subscribe("ch", "a").await.expect("subscribe");
        let channel = waiter.notify();
        let mut woken_channel = pin!(channel.notified());
        woken_channel.as_mut().enable();
        for payload in ["", "all", "a"] {
            shared.on_push(message("notices", payload));
        }
        assert_eq!(
            *heard.lock().unwrap(),
            [b"".to_vec(), b"all".to_vec(), b"a".to_vec()]
        );
        assert!(!woken(woken_channel), "a notice woke a waiter");
        assert_eq!(fake.calls(), ["subscribe notices", "subscribe ch"]);
    }

    #[tokio::test(start_paused = true)]
    async fn an_empty_message_wakes_one_waiter_in_arrival_order_and_all_wakes_every_one() {
        let fake = Fake::answering();
        let (shared, events) = start(&fake);
        let a = events.subscribe("ch", "a").await.expect("subscribe");
        let _b = events.subscribe("ch", "b").await.expect("subscribe");
        let (channel, a_own) = (a.notify(), a.own());
        let mut first = pin!(channel.notified());
        let mut second = pin!(channel.notified());
        let mut own = pin!(a_own.notified());
        for n in [first.as_mut(), second.as_mut(), own.as_mut()] {
            n.enable();
        }
        shared.on_push(message("ch", ""));
        assert!(woken(first), "the first waiter slept on");
        assert!(!woken(second.as_mut()), "one release woke two waiters");
        assert!(
            !woken(own.as_mut()),
            "an empty message counted as a hand-off"
        );
        shared.on_push(message("ch", ""));
        assert!(
            woken(second),
            "the next release did not pass to the next waiter"
        );

        let mut first = pin!(channel.notified());
        let mut second = pin!(channel.notified());
        for n in [first.as_mut(), second.as_mut()] {
            n.enable();
        }
        shared.on_push(message("ch", "all"));
        assert!(
            woken(first) && woken(second),
            "`all` did not wake every waiter"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_disconnection_wakes_every_waiter_of_every_channel() {
        let fake = Fake::answering();
        let (shared, events) = start(&fake);
        let a = events.subscribe("one", "a").await.expect("subscribe");
        let b = events.subscribe("two", "b").await.expect("subscribe");
        let (a_channel, b_channel, a_own, b_own) = (a.notify(), b.notify(), a.own(), b.own());
        let mut waits = [
            Box::pin(a_channel.notified()),
            Box::pin(a_channel.notified()),
            Box::pin(b_channel.notified()),
            Box::pin(a_own.notified()),
            Box::pin(b_own.notified()),
        ];
        for n in &mut waits {
            n.as_mut().enable();
        }
        shared.on_push(PushInfo {
            kind: PushKind::Disconnection,
            data: vec![],
        });
        for (i, n) in waits.iter_mut().enumerate() {
            assert!(woken(n.as_mut()), "wait {i} slept through a reconnect");
        }
    }

    #[tokio::test(start_paused = true)]
    async fn subscribe_returns_only_once_the_server_confirmed() {
        let fake = Fake::gated();
        let (_shared, events) = start(&fake);
        assert!(
            events.subscribed("ch", "x").is_none(),
            "registered on a channel never subscribed"
        );
        let mut first = pin!(events.subscribe("ch", "a"));
        let early = tokio::time::timeout(Duration::from_secs(5), first.as_mut()).await;
        assert!(
            early.is_err(),
            "subscribe returned before the server confirmed"
        );
        assert_eq!(fake.calls(), ["subscribe ch"]);
        assert!(
            events.subscribed("ch", "x").is_none(),
            "registered without a server call before the server confirmed"
        );
        fake.confirm();
        let _a = first.await.expect("subscribe");

        // Confirmed: more waiters register without a server call.
        let _b = events.subscribed("ch", "b").expect("registered");
        let _c = events.subscribe("ch", "c").await.expect("subscribe");
        assert_eq!(fake.calls(), ["subscribe ch"]);
    }

    #[tokio::test(start_paused = true)]
    async fn a_channel_unused_for_linger_is_unsubscribed_and_one_in_use_is_not() {
        let fake = Fake::answering();
        let (_shared, events) = start(&fake);
        let _used = events.subscribe("used", "a").await.expect("subscribe");
        drop(events.subscribe("idle", "b").await.expect("subscribe"));
        tokio::time::sleep(LINGER - Duration::from_millis(100)).await;
        assert_eq!(
            fake.calls(),
            ["subscribe used", "subscribe idle"],
            "unsubscribed before the channel lingered"
        );
        tokio::time::sleep(LINGER * 2).await;
        assert_eq!(
            fake.calls(),
            ["subscribe used", "subscribe idle", "unsubscribe idle"]
        );
        // Gone from the registry too: the next waiter asks the server again.
        assert!(events.subscribed("idle", "c").is_none());
        let _again = events.subscribe("idle", "c").await.expect("subscribe");
        assert_eq!(
            fake.calls().last().map(String::as_str),
            Some("subscribe idle")
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_failed_subscribe_returns_its_error_and_the_next_call_retries() {
        let fake = Fake::answering();
        *fake.failures.lock().unwrap() = 1;
        let (_shared, events) = start(&fake);
        let failed = events.subscribe("ch", "a").await;
        assert!(
            matches!(failed, Err(Error::Unreachable { .. })),
            "the failure was not returned"
        );
        assert!(
            events.subscribed("ch", "b").is_none(),
            "a failed subscription counts as made"
        );
        let _a = events.subscribe("ch", "a").await.expect("the retry");
        assert_eq!(fake.calls(), ["subscribe ch", "subscribe ch"]);
    }

    /// Found by review: the registry entry of a channel whose subscribe
    /// failed stayed for good (the sweep only looks at subscribed ones),
    /// one per lock name that met an outage.
    #[tokio::test(start_paused = true)]
    async fn a_channel_never_subscribed_leaves_no_entry_once_unused() {
        let fake = Fake::answering();
        *fake.failures.lock().unwrap() = 1;
        let (shared, events) = start(&fake);
        assert!(events.subscribe("once", "a").await.is_err());
        tokio::time::sleep(LINGER * 4).await;
        assert!(
            shared.channels().get("once").is_none(),
            "the entry of a channel never subscribed is still in the registry"
        );
    }
}
