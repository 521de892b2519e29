//! A [`ConnectionManager`] (one server, or the Sentinel master in use) and
//! the channels subscribed on it, which we resend ourselves after a
//! reconnect.
//!
//! redis-rs 1.8.1's own resubscription (`set_automatic_resubscription`)
//! resends every channel as one `SUBSCRIBE ch1 .. chN` in a pipeline that
//! awaits one reply (`ConnectionManager::new_connection` runs
//! `get_subscription_pipeline()` with `exec_async`), then hands the new
//! connection to callers. When the N confirmations do not arrive in one
//! read (a real network; a large N), lock commands sent meanwhile take the
//! N - 1 surplus ones as their replies, and every reply after them is
//! shifted: a try_acquire was granted the reply of another name's acquire
//! (`tests/reconnect_resubscribe.rs`;
//! `docs/upstream/redis-rs-cluster-resubscribe.md`).
//!
//! So the manager is built without it, and here a disconnection (the
//! driver's [`PushKind::Disconnection`], not passed on) starts a round that
//! subscribes every channel again on the manager's new connection with
//! [`ConnectionManager::subscribe`], whose request awaits exactly as many
//! confirmations as it names channels; only then the disconnection is
//! passed on, which wakes every waiter to try again (releases published in
//! between were missed). Lock commands keep sharing the one connection:
//! every SUBSCRIBE on it is counted right. A failed round is retried with
//! exponential back-off until one succeeds.

use std::collections::BTreeSet;
use std::sync::{Arc, Mutex, MutexGuard, Weak};
use std::time::Duration;

/// redis-rs's connection manager; in the simulator's build, its model over
/// simulated sockets (see `sim::ConnectionManager`).
#[cfg(leasehold_sim)]
pub(crate) use crate::sim::{ConnectionManager, ConnectionManagerConfig};
#[cfg(not(leasehold_sim))]
pub(crate) use redis::aio::{ConnectionManager, ConnectionManagerConfig};
use redis::{PushInfo, PushKind};
use tokio::sync::{Notify, watch};

use super::{ConnectOptions, OnPush};
use crate::error::{Error, Result};

/// Channels per SUBSCRIBE of a round: bounds one command's size.
const CHUNK: usize = 512;
/// First and longest wait between failed rounds.
const BACKOFF_MIN: Duration = Duration::from_millis(50);
const BACKOFF_MAX: Duration = Duration::from_secs(2);

pub(crate) struct Managed {
    /// The server's address and its manager; replaced when a Sentinel
    /// names another master.
    current: Mutex<(String, ConnectionManager)>,
    /// Channels the client wants subscribed.
    channels: Mutex<BTreeSet<String>>,
    /// Serialises (un)subscriptions with rounds and with a change of manager.
    serial: tokio::sync::Mutex<()>,
    /// Moves to another server asked for and made (`replace`): while they
    /// differ no (un)subscription starts, and one waiting for the old
    /// server's answer gives up that wait, so a move is never held up by a
    /// server that stopped answering (for up to the command timeout each).
    moves: watch::Sender<Moves>,
    on_push: OnPush,
    /// Wakes the task that runs rounds.
    dropped: Arc<Notify>,
}

/// How many moves to another server were asked for, and how many made.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
struct Moves {
    asked: u64,
    made: u64,
}

/// What a manager's push sender needs: where messages go, and what to
/// wake when its connection drops.
#[derive(Clone)]
pub(crate) struct Pushes {
    on_push: OnPush,
    dropped: Arc<Notify>,
}

impl Pushes {
    pub(crate) fn new(on_push: OnPush) -> Pushes {
        Pushes {
            on_push,
            dropped: Arc::new(Notify::new()),
        }
    }

    /// The settings of every manager of one [`Managed`]: bounded replies,
    /// quick reconnects, pushes routed here, no automatic resubscription.
    pub(crate) fn config(&self, options: &ConnectOptions) -> ConnectionManagerConfig {
        let (on_push, dropped) = (Arc::clone(&self.on_push), Arc::clone(&self.dropped));
        ConnectionManagerConfig::new()
            .set_response_timeout(Some(options.command_timeout))
            .set_connection_timeout(Some(options.command_timeout))
            // Few, quick retries: a lock caller has its own deadline and would
            // rather hear "unreachable" than wait out a long backoff.
            .set_number_of_retries(2)
            .set_min_delay(Duration::from_millis(20))
            .set_max_delay(Duration::from_millis(500))
            .set_push_sender(
                move |info: PushInfo| -> std::result::Result<(), std::convert::Infallible> {
                    if info.kind == PushKind::Disconnection {
                        // Passed on by the round, once the channels are back.
                        dropped.notify_one();
                    } else {
                        on_push(info);
                    }
                    Ok(())
                },
            )
    }
}

impl Managed {
    /// Takes over `manager` (built with `pushes.config(..)`) at `addr`; the
    /// task that resubscribes after each disconnection ends with it.
    pub(crate) fn start(addr: String, manager: ConnectionManager, pushes: &Pushes) -> Arc<Managed> {
        let managed = Arc::new(Managed {
            current: Mutex::new((addr, manager)),
            channels: Mutex::new(BTreeSet::new()),
            serial: tokio::sync::Mutex::new(()),
            moves: watch::Sender::new(Moves::default()),
            on_push: Arc::clone(&pushes.on_push),
            dropped: Arc::clone(&pushes.dropped),
        });
        tokio::spawn(maintain(
            Arc::downgrade(&managed),
            Arc::clone(&pushes.dropped),
        ));
        managed
    }

    fn slot(&self) -> MutexGuard<'_, (String, ConnectionManager)> {
        self.current.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn channels(&self) -> MutexGuard<'_, BTreeSet<String>> {
        self.channels.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The manager in use.
    #[cfg(feature = "sentinel")]
    pub(crate) fn current(&self) -> ConnectionManager {
        self.slot().1.clone()
    }

    /// The address of the server in use.
    #[cfg(feature = "sentinel")]
    pub(crate) fn addr(&self) -> String {
        self.slot().0.clone()
    }

    /// Runs `op` on the server in use, under the serial lock, once no move
    /// is pending; `None`, without waiting for `op` to end, if a move is
    /// asked for meanwhile: the old server's answer no longer matters.
    async fn between_moves<T>(
        &self,
        op: impl AsyncFnOnce(String, ConnectionManager) -> Result<T>,
    ) -> Option<Result<T>> {
        let mut moves = self.moves.subscribe();
        // The sender lives as long as `self`: these waits end.
        let _ = moves.wait_for(|m| m.asked == m.made).await;
        let _serial = self.serial.lock().await;
        let now = *self.moves.borrow();
        if now.asked != now.made {
            return None;
        }
        let (addr, conn) = self.slot().clone();
        tokio::select! {
            result = op(addr, conn) => Some(result),
            _ = moves.wait_for(|m| m.asked != now.asked) => None,
        }
    }

    /// Subscribes to `channel`; returns once the server confirmed it.
    pub(crate) async fn subscribe(&self, channel: &str) -> Result<()> {
        self.subscribe_or_not(channel, false).await
    }

    /// As [`subscribe`](Self::subscribe), but a server that cannot be
    /// reached keeps `channel` wanted, and a round (tried again with
    /// back-off until the server answers) subscribes it once the server is
    /// back; the error is returned all the same. For a Redlock node, down
    /// now and maybe back while the waiters still wait: a release on any
    /// node wakes them. [`forget`](Self::forget) undoes it.
    pub(crate) async fn subscribe_or_later(&self, channel: &str) -> Result<()> {
        self.subscribe_or_not(channel, true).await
    }

    /// Drops `channel` from the channels wanted, sending nothing (a round
    /// under way may still subscribe it; the next reconnect drops it).
    pub(crate) fn forget(&self, channel: &str) {
        self.channels().remove(channel);
    }

    async fn subscribe_or_not(&self, channel: &str, later: bool) -> Result<()> {
        loop {
            let done = self
                .between_moves(async |addr, mut conn| match conn.subscribe(channel).await {
                    Ok(()) => {
                        self.channels().insert(channel.to_owned());
                        Ok(())
                    }
                    Err(e) => {
                        let e = Error::from_redis(e, &addr, channel);
                        if later && e.is_transient() {
                            self.channels().insert(channel.to_owned());
                            self.dropped.notify_one();
                        }
                        Err(e)
                    }
                })
                .await;
            // Moved meanwhile: subscribe on the new server (its move did
            // not see this channel, wanted only once confirmed).
            if let Some(result) = done {
                return result;
            }
        }
    }

    /// Ends the subscription to `channel`.
    pub(crate) async fn unsubscribe(&self, channel: &str) -> Result<()> {
        loop {
            let done = self
                .between_moves(async |addr, mut conn| {
                    self.channels().remove(channel);
                    conn.unsubscribe(channel)
                        .await
                        .map_err(|e| Error::from_redis(e, &addr, channel))
                })
                .await;
            match done {
                Some(result) => return result,
                // Moved before it was dropped from the wanted channels,
                // so the move subscribed it on the new server: again.
                None if self.channels().contains(channel) => {}
                // Moved after: never subscribed on the new server.
                None => return Ok(()),
            }
        }
    }

    /// Moves to `manager` at `addr` (a new Sentinel master): every channel
    /// is subscribed there first, then it replaces the one in use and every
    /// waiter is woken. An (un)subscription still waiting for the old
    /// server gives up that wait and runs again on the new one.
    #[cfg(feature = "sentinel")]
    pub(crate) async fn replace(&self, addr: String, manager: ConnectionManager) {
        let mut asked = 0;
        self.moves.send_modify(|m| {
            m.asked += 1;
            asked = m.asked;
        });
        // Made once this ends, however it ends (a move cancelled halfway
        // must not stop every later subscription).
        let _made = scopeguard(|| self.moves.send_modify(|m| m.made = m.made.max(asked)));
        let _serial = self.serial.lock().await;
        if let Err(e) = self.subscribe_all(&addr, &manager).await {
            tracing::warn!(%addr, error = %e, "cannot subscribe on the new master yet; retrying");
            self.dropped.notify_one();
        }
        *self.slot() = (addr, manager);
        drop(_made);
        self.wake_all();
    }

    /// One round: every channel subscribed again on the manager in use,
    /// then every waiter woken. A move asked for meanwhile ends it: the
    /// move subscribes every channel on the new server and wakes them.
    async fn resubscribe(&self) -> Result<()> {
        self.between_moves(async |addr, manager| {
            self.subscribe_all(&addr, &manager).await?;
            self.wake_all();
            Ok(())
        })
        .await
        .unwrap_or(Ok(()))
    }

    async fn subscribe_all(&self, addr: &str, manager: &ConnectionManager) -> Result<()> {
        let channels: Vec<String> = self.channels().iter().cloned().collect();
        for chunk in channels.chunks(CHUNK) {
            // One SUBSCRIBE naming `chunk.len()` channels, awaiting as
            // many confirmations.
            manager
                .clone()
                .subscribe(chunk)
                .await
                .map_err(|e| Error::from_redis(e, addr, ""))?;
        }
        tracing::debug!(%addr, channels = channels.len(), "channels subscribed again");
        Ok(())
    }

    /// Wakes every waiter: releases may have been missed.
    fn wake_all(&self) {
        (self.on_push)(PushInfo {
            kind: PushKind::Disconnection,
            data: Vec::new(),
        });
    }
}

/// Runs `f` when dropped.
#[cfg(feature = "sentinel")]
fn scopeguard(f: impl FnOnce()) -> impl Drop {
    struct Guard<F: FnOnce()>(Option<F>);
    impl<F: FnOnce()> Drop for Guard<F> {
        fn drop(&mut self) {
            if let Some(f) = self.0.take() {
                f();
            }
        }
    }
    Guard(Some(f))
}

impl Drop for Managed {
    fn drop(&mut self) {
        // Lets the task see that it is gone.
        self.dropped.notify_one();
    }
}

/// Runs a round after each disconnection, with exponential back-off
/// between failed rounds; ends with the [`Managed`].
async fn maintain(managed: Weak<Managed>, dropped: Arc<Notify>) {
    loop {
        dropped.notified().await;
        let mut backoff = BACKOFF_MIN;
        loop {
            let Some(m) = managed.upgrade() else { return };
            let result = m.resubscribe().await;
            drop(m);
            match result {
                Ok(()) => break,
                Err(e) => {
                    tracing::warn!(error = %e, retry_in = ?backoff,
                        "cannot subscribe again after a reconnect; waiters fall back to timers");
                    tokio::time::sleep(backoff).await;
                    backoff = (backoff * 2).min(BACKOFF_MAX);
                }
            }
        }
    }
}

#[cfg(all(test, feature = "sentinel"))]
mod tests {
    use super::*;
    use leasehold_testkit::RedisServer;

    /// A manager of `server` as a Sentinel follower builds it.
    async fn manager(
        server: &RedisServer,
        pushes: &Pushes,
        options: &ConnectOptions,
    ) -> ConnectionManager {
        let info = super::super::parse_url(&server.url(), options).expect("url");
        let client = super::super::open_client(info, options).expect("client");
        ConnectionManager::new_with_config(client, pushes.config(options))
            .await
            .expect("connect")
    }

    /// How many subscribers `server` counts on `channel`.
    /// Issue 24, item 2: a move to a new master is not held up by a
    /// subscription waiting for an answer from the old one (frozen: its
    /// answer could only come after the 30 s command timeout), and that
    /// subscription ends on the new master.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_move_is_not_held_up_by_a_subscribe_stuck_on_the_old_server() {
        let (old, new) = (RedisServer::start(), RedisServer::start());
        let options = ConnectOptions {
            command_timeout: Duration::from_secs(30),
            ..ConnectOptions::default()
        };
        let pushes = Pushes::new(Arc::new(|_| {}));
        let first = manager(&old, &pushes, &options).await;
        let managed = Managed::start(format!("127.0.0.1:{}", old.port()), first, &pushes);
        managed.subscribe("before").await.expect("subscribe");
        old.pause();
        let stuck = tokio::spawn({
            let managed = Arc::clone(&managed);
            async move { managed.subscribe("during").await }
        });
        // The subscription is under way: it holds the serial lock.
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        while managed.serial.try_lock().is_ok() {
            assert!(
                std::time::Instant::now() < deadline,
                "no subscription began"
            );
            tokio::task::yield_now().await;
        }
        let next = manager(&new, &pushes, &options).await;
        let moved = tokio::time::timeout(
            Duration::from_secs(5),
            managed.replace(format!("127.0.0.1:{}", new.port()), next),
        )
        .await;
        old.resume();
        assert!(
            moved.is_ok(),
            "the move waited for a subscription stuck on the old master"
        );
        tokio::time::timeout(Duration::from_secs(5), stuck)
            .await
            .expect("the subscription stuck on the old master ended")
            .expect("join")
            .expect("subscribed");
        assert_eq!(new.subscribers("before"), 1, "moved with the client");
        assert_eq!(new.subscribers("during"), 1, "subscribed on the new master");
        assert_eq!(managed.addr(), format!("127.0.0.1:{}", new.port()));
    }
}
