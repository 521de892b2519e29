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

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use crate::clock::Instant;

use redis::{PushInfo, PushKind, Value};
use tokio::sync::{Notify, mpsc, oneshot};

use crate::error::{Error, Result};
use crate::servers::Servers;

/// How long a channel stays subscribed after its last waiter left.
const LINGER: Duration = Duration::from_secs(5);

#[derive(Default)]
pub(crate) struct Shared {
    channels: Mutex<HashMap<String, Entry>>,
}

struct Entry {
    refs: usize,
    /// Wakes one or all waiters of the channel (empty or `all` payloads).
    notify: Arc<Notify>,
    /// Each waiter's own wake-up, by waiter id (payload = that id).
    waiters: HashMap<String, Arc<Notify>>,
    /// The server confirmed the subscription (set by the task).
    subscribed: bool,
    idle_since: Instant,
}

impl Shared {
    fn channels(&self) -> MutexGuard<'_, HashMap<String, Entry>> {
        // A panic while holding this lock cannot leave the map inconsistent
        // (every update is a single insert or field write), so go on.
        self.channels.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Routes a push frame from the connection to the waiters it concerns.
    /// Runs on the connection's task, so it only takes a lock and notifies.
    pub(crate) fn on_push(&self, info: PushInfo) {
        match info.kind {
            PushKind::Message => {
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
                    match payload {
                        b"" => entry.notify.notify_one(),
                        b"all" => entry.notify.notify_waiters(),
                        id => {
                            let id = std::str::from_utf8(id).unwrap_or("");
                            if let Some(waiter) = entry.waiters.get(id) {
                                waiter.notify_one();
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
                        waiter.notify_one();
                    }
                }
            }
            _ => {}
        }
    }
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
    /// Starts the subscription task on `backend`, whose push frames must be
    /// routed to `shared.on_push`.
    pub(crate) fn start(shared: Arc<Shared>, servers: Servers) -> Events {
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
        let (subscription, subscribed) = self.register(channel, waiter);
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
        match self.register(channel, waiter) {
            (subscription, true) => Some(subscription),
            // Swept in between: dropping the registration undoes it.
            (_, false) => None,
        }
    }

    /// Adds `waiter` to `channel`'s registry; says whether the server
    /// confirmed the channel's subscription already.
    fn register(&self, channel: &str, waiter: &str) -> (Subscription, bool) {
        let own = Arc::new(Notify::new());
        let (notify, subscribed) = {
            let mut channels = self.shared.channels();
            let entry = channels.entry(channel.to_owned()).or_insert_with(|| Entry {
                refs: 0,
                notify: Arc::new(Notify::new()),
                waiters: HashMap::new(),
                subscribed: false,
                idle_since: Instant::now(),
            });
            entry.refs += 1;
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
    own: Arc<Notify>,
}

impl Subscription {
    /// The channel's wake-ups: one waiter per empty event, all on `all`.
    pub(crate) fn notify(&self) -> Arc<Notify> {
        Arc::clone(&self.notify)
    }

    /// This waiter's own wake-up: a lease was handed to it.
    pub(crate) fn own(&self) -> Arc<Notify> {
        Arc::clone(&self.own)
    }
}

impl Drop for Subscription {
    fn drop(&mut self) {
        if let Some(entry) = self.shared.channels().get_mut(&self.channel) {
            entry.waiters.remove(&self.waiter);
            entry.refs -= 1;
            if entry.refs == 0 {
                entry.idle_since = Instant::now();
            }
        }
    }
}

/// Makes the server's subscriptions follow the registry, one call at a time.
async fn run(shared: Arc<Shared>, servers: Servers, mut rx: mpsc::UnboundedReceiver<Ensure>) {
    let mut on_server: HashSet<String> = HashSet::new();
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
                    match servers.unsubscribe(&channel).await {
                        Ok(()) => { on_server.remove(&channel); }
                        Err(e) => tracing::debug!(%channel, error = %e, "unsubscribe failed; will retry"),
                    }
                }
            }
        }
    }
}
