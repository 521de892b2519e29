//! Where a client's locks live: one Redis server, or Redlock's N masters.
//! Primitives and the watchdog call these, and never care which.

use std::sync::Arc;
use std::time::Duration;

use futures_util::StreamExt;
use futures_util::stream::FuturesUnordered;

use crate::backend::Backend;
use crate::error::{Error, Result};
use crate::events::Channels;
use crate::key::LockKeys;
use crate::kind::LockKind;
use crate::scripts::{
    self, Acquire, Extension, Leading, LeaseId, Owned, Queueing, ReentrantState, RwAcquire,
    RwAttempt, SemAcquire, SetStatus, Spread, Status,
};
use crate::servers::redlock::Redlock;

pub(crate) mod redlock;

/// The servers of one client.
#[derive(Clone)]
pub(crate) enum Servers {
    /// One Redis server.
    One(Backend),
    /// Independent masters, each lease held by a quorum.
    Quorum(Arc<Redlock>),
}

impl Servers {
    /// Every server.
    pub(crate) fn all(&self) -> &[Backend] {
        match self {
            Servers::One(backend) => std::slice::from_ref(backend),
            Servers::Quorum(redlock) => redlock.nodes(),
        }
    }

    /// The one server, for primitives that need a single one; Redlock
    /// clients refuse them with a clear error.
    pub(crate) fn single(&self, primitive: &str) -> Result<&Backend> {
        match self {
            Servers::One(backend) => Ok(backend),
            Servers::Quorum(_) => Err(needs_one_server(primitive)),
        }
    }

    /// Where leases of the lock `keys` handed to this client's waiters are
    /// announced, if waiters of a lease lock queue for a hand-off: only on
    /// one server, since queues on separate nodes could disagree.
    pub(crate) fn handoff_channel(&self, keys: &LockKeys) -> Option<String> {
        match self {
            Servers::One(backend) => Some(keys.handoff_channel(backend.id())),
            Servers::Quorum(_) => None,
        }
    }

    /// Whether keys of different slots may live on different masters, so
    /// one call may only touch keys of one slot.
    pub(crate) fn is_cluster(&self) -> bool {
        matches!(self, Servers::One(backend) if backend.is_cluster())
    }

    /// How many replicas acknowledged the writes made so far to `key`'s
    /// master (`WAIT`), up to `replicas`, waiting at most `timeout`.
    pub(crate) async fn wait_replicas(
        &self,
        key: &str,
        replicas: usize,
        timeout: Duration,
    ) -> Result<usize> {
        self.single("min_replicas")?
            .wait_replicas(key, replicas, timeout)
            .await
    }

    /// Addresses, for messages.
    pub(crate) fn addrs(&self) -> Vec<&str> {
        self.all().iter().map(Backend::addr).collect()
    }

    pub(crate) async fn lock_acquire(
        &self,
        keys: &LockKeys,
        token: &str,
        ttl: Duration,
        queueing: Queueing,
        fair: bool,
        fence_memory: Duration,
    ) -> Result<Acquire> {
        match self {
            Servers::One(backend) => {
                scripts::lock_acquire(backend, keys, token, ttl, queueing, fair, fence_memory).await
            }
            Servers::Quorum(_) if fair => Err(needs_one_server("FairLock")),
            Servers::Quorum(redlock) => redlock.lock_acquire(keys, token, ttl, fence_memory).await,
        }
    }

    /// Gives back the hold `id` (a waiter of a lease lock that may be
    /// queued, `id.queued`, then leaves the queue).
    pub(crate) async fn release(&self, id: LeaseId<'_>) -> Result<Owned> {
        match self {
            Servers::One(backend) => {
                // After any attempt of this hold still in flight on a cluster
                // connection the driver replaced (backend/abandoned.rs).
                backend.settled(id.keys.lock()).await;
                scripts::release(backend, id, Spread::One { queued: id.queued }).await
            }
            Servers::Quorum(redlock) => redlock.release(id).await,
        }
    }

    /// [`Servers::release`] before a retry with the same hold: on Redlock
    /// it waits for every node (see [`crate::acquire::Core::give_back`]).
    pub(crate) async fn give_back(&self, id: LeaseId<'_>) -> Result<Owned> {
        match self {
            Servers::One(_) => self.release(id).await,
            Servers::Quorum(redlock) => redlock.release_everywhere(id).await,
        }
    }

    /// Renews many leases of one kind; `None` where Redlock's nodes did
    /// not answer enough to tell.
    pub(crate) async fn extend(
        &self,
        kind: LockKind,
        leases: &[Extension<'_>],
    ) -> Result<Vec<Option<Owned>>> {
        match self {
            Servers::One(backend) => Ok(scripts::extend(backend, kind, leases)
                .await?
                .into_iter()
                .map(Some)
                .collect()),
            Servers::Quorum(redlock) => redlock.extend(kind, leases).await,
        }
    }

    /// Renews one lease.
    pub(crate) async fn extend_one(&self, kind: LockKind, lease: Extension<'_>) -> Result<Owned> {
        match self {
            Servers::One(backend) => Ok(scripts::extend(backend, kind, &[lease])
                .await?
                .first()
                .copied()
                .unwrap_or(Owned::Missing)),
            Servers::Quorum(redlock) => redlock.extend_one(kind, lease).await,
        }
    }

    pub(crate) async fn election_announce(
        &self,
        keys: &LockKeys,
        token: &str,
        term: u64,
        value: &str,
    ) -> Result<bool> {
        let backend = self.single("Election")?;
        scripts::election_announce(backend, keys, token, term, value).await
    }

    pub(crate) async fn election_leader(&self, keys: &LockKeys) -> Result<Option<Leading>> {
        scripts::election_leader(self.single("Election")?, keys).await
    }

    pub(crate) async fn lock_status(&self, keys: &LockKeys) -> Result<Status> {
        match self {
            Servers::One(backend) => scripts::lock_status(backend, keys).await,
            Servers::Quorum(redlock) => redlock.lock_status(keys).await,
        }
    }

    /// Breaks the lease lock held under `token` whatever the client's
    /// fence memory ([`scripts::lock_break`]); on Redlock, released on the
    /// nodes as its holder would (Redlock has no elections).
    pub(crate) async fn lock_break(
        &self,
        keys: &LockKeys,
        token: &str,
        election: bool,
    ) -> Result<Owned> {
        match self {
            Servers::One(backend) => scripts::lock_break(backend, keys, token, election).await,
            Servers::Quorum(redlock) => {
                let id = LeaseId {
                    kind: LockKind::Lock,
                    keys,
                    hold: token,
                    queued: None,
                };
                redlock.release(id).await
            }
        }
    }

    /// Reads the live holds of a reentrant lock, RwLock or semaphore, or
    /// breaks those named ([`scripts::lease_break`]); refused on Redlock,
    /// which has none.
    pub(crate) async fn lease_break(
        &self,
        keys: &LockKeys,
        holds: Option<(&str, &[&str])>,
    ) -> Result<scripts::BrokenSet> {
        let backend = self.single("ReentrantLock, RwLock or Semaphore")?;
        scripts::lease_break(backend, keys, holds).await
    }

    // The primitives that need one server (their state cannot be split over
    // independent masters): each refuses a Redlock client with a clear error.

    pub(crate) async fn reentrant_acquire(
        &self,
        keys: &LockKeys,
        owner: &str,
        hold: &str,
        ttl: Duration,
        fence_memory: Duration,
    ) -> Result<Acquire> {
        let backend = self.single("ReentrantLock")?;
        scripts::reentrant_acquire(backend, keys, owner, hold, ttl, fence_memory).await
    }

    /// Gives back any one hold of `owner`, once for the call `call`.
    pub(crate) async fn reentrant_release_any(
        &self,
        keys: &LockKeys,
        owner: &str,
        call: &str,
    ) -> Result<Owned> {
        scripts::reentrant_release(self.single("ReentrantLock")?, keys, owner, "", Some(call)).await
    }

    pub(crate) async fn rw_acquire(
        &self,
        keys: &LockKeys,
        attempt: RwAttempt<'_>,
    ) -> Result<RwAcquire> {
        scripts::rw_acquire(self.single("RwLock")?, keys, attempt).await
    }

    /// Turns the write hold `write` into the read hold `read`, in one step.
    pub(crate) async fn rw_downgrade(
        &self,
        keys: &LockKeys,
        write: &str,
        read: &str,
        ttl: Duration,
    ) -> Result<Owned> {
        scripts::rw_downgrade(self.single("RwLock")?, keys, write, read, ttl).await
    }

    pub(crate) async fn sem_acquire(
        &self,
        keys: &LockKeys,
        permits: u32,
        hold: &str,
        ttl: Duration,
        fence_memory: Duration,
    ) -> Result<SemAcquire> {
        let backend = self.single("Semaphore")?;
        scripts::sem_acquire(backend, keys, permits, hold, ttl, fence_memory).await
    }

    /// How many client connections listen for the lock's releases (its
    /// channel or a hand-off channel of it); 0 on Redlock, where it is not
    /// counted.
    pub(crate) async fn waiting_clients(&self, keys: &LockKeys) -> Result<usize> {
        match self {
            Servers::One(backend) => scripts::subscribers(backend, keys.channel()).await,
            Servers::Quorum(_) => Ok(0),
        }
    }

    /// Reads the live entries of the RwLock or semaphore (`primitive`, for
    /// the refusal on Redlock, which offers neither) whose keys are `keys`.
    pub(crate) async fn set_status(&self, primitive: &str, keys: &LockKeys) -> Result<SetStatus> {
        scripts::rw_status(self.single(primitive)?, keys).await
    }

    /// Reads a reentrant lock's state (refused on Redlock, as its acquire is).
    pub(crate) async fn reentrant_status(&self, keys: &LockKeys) -> Result<ReentrantState> {
        scripts::reentrant_status(self.single("ReentrantLock")?, keys).await
    }

    /// Every lock key matching the glob `pattern` whose type is `kind`: on
    /// every master of a cluster; on Redlock, on every node that answers,
    /// which must be a quorum, so that a lease a quorum holds is on one of them.
    pub(crate) async fn scan(&self, pattern: &str, kind: &str) -> Result<Vec<String>> {
        match self {
            Servers::One(backend) => backend.scan(pattern, kind).await,
            Servers::Quorum(redlock) => redlock.scan(pattern, kind).await,
        }
    }

    /// `TYPE key` on the server; on Redlock, the first node's that holds
    /// the key (`"none"` if none does; a node that fails is skipped unless
    /// every node fails).
    pub(crate) async fn key_type(&self, key: &str) -> Result<String> {
        let (mut answered, mut first_error) = (false, None);
        for node in self.all() {
            match node.query::<String>(redis::cmd("TYPE").arg(key), key).await {
                Ok(found) if found != "none" => return Ok(found),
                Ok(_) => answered = true,
                Err(e) => first_error = first_error.or(Some(e)),
            }
        }
        match first_error {
            Some(e) if !answered => Err(e),
            _ => Ok("none".to_owned()),
        }
    }

    /// Subscribes every server's connection to `channel`. A release on
    /// any node wakes waiters, so on Redlock the first confirmation is
    /// enough: the other nodes go on in the background, and a dead or
    /// paused node never holds up a waiter (its subscription is made when it
    /// answers, or the waiter falls back to its timer).
    pub(crate) async fn subscribe(&self, channel: &str) -> Result<()> {
        match self {
            Servers::One(backend) => backend.subscribe(channel).await,
            Servers::Quorum(_) => first_success(self.all(), channel, true).await,
        }
    }

    /// Publishes `message` on `channel`: by SPUBLISH where subscriptions
    /// are SSUBSCRIBE (a cluster with sharded pub/sub), else PUBLISH; on
    /// every node of Redlock at once, whose clients subscribe on every
    /// node. `Ok` once one server took it, else the first error.
    pub(crate) async fn publish(&self, channel: &str, message: &str) -> Result<()> {
        let sent = futures_util::future::join_all(self.all().iter().map(|backend| {
            let command = if backend.sharded_pubsub() {
                "SPUBLISH"
            } else {
                "PUBLISH"
            };
            async move {
                backend
                    .query::<i64>(redis::cmd(command).arg(channel).arg(message), channel)
                    .await
            }
        }))
        .await;
        let mut first_error = None;
        for outcome in sent {
            match outcome {
                Ok(_) => return Ok(()),
                Err(e) => first_error = first_error.or(Some(e)),
            }
        }
        first_error.map_or(Ok(()), Err)
    }

    /// Writes what a hold says of its holder ([`scripts::describe`]) on
    /// every server (every Redlock node); `Ok` once one took it (a Redlock
    /// node that is slow or down does not hold up the acquisition; the
    /// requests still in flight then are dropped).
    pub(crate) async fn describe(
        &self,
        key: &str,
        about: Option<&str>,
        ttl: Option<Duration>,
    ) -> Result<()> {
        let mut sent: FuturesUnordered<_> = self
            .all()
            .iter()
            .map(|backend| scripts::describe(backend, key, about, ttl))
            .collect();
        let mut first_error = None;
        while let Some(outcome) = sent.next().await {
            match outcome {
                Ok(()) => return Ok(()),
                Err(e) => first_error = first_error.or(Some(e)),
            }
        }
        first_error.map_or(Ok(()), Err)
    }

    /// What the holds whose keys are `keys` say of their holders
    /// ([`scripts::who`]); on Redlock, the first node to answer (each node
    /// is written alike; one down must not fail a status the quorum gave).
    pub(crate) async fn who(&self, keys: &[String]) -> Result<Vec<Option<String>>> {
        let mut asked: FuturesUnordered<_> = self
            .all()
            .iter()
            .map(|backend| scripts::who(backend, keys))
            .collect();
        let mut first_error = None;
        while let Some(answer) = asked.next().await {
            match answer {
                Ok(about) => return Ok(about),
                Err(e) => first_error = first_error.or(Some(e)),
            }
        }
        first_error.map_or(Ok(Vec::new()), Err)
    }

    pub(crate) async fn unsubscribe(&self, channel: &str) -> Result<()> {
        match self {
            Servers::One(backend) => backend.unsubscribe(channel).await,
            Servers::Quorum(_) => first_success(self.all(), channel, false).await,
        }
    }
}

/// (Un)subscribes every node in its own task; `Ok` at the first success,
/// else the first error once all failed. A node that cannot be reached is
/// subscribed once it is back (the waiters may still wait then), unless
/// every node failed: then the caller holds no subscription to undo later.
async fn first_success(nodes: &[Backend], channel: &str, subscribe: bool) -> Result<()> {
    let mut tasks: FuturesUnordered<_> = nodes
        .iter()
        .map(|node| {
            let (node, channel) = (node.clone(), channel.to_owned());
            tokio::spawn(async move {
                if subscribe {
                    node.subscribe_or_later(&channel).await
                } else {
                    node.unsubscribe(&channel).await
                }
            })
        })
        .collect();
    let mut first_error = None;
    while let Some(joined) = tasks.next().await {
        match joined {
            Ok(Ok(())) => return Ok(()),
            Ok(Err(e)) => first_error = first_error.or(Some(e)),
            Err(_) => {}
        }
    }
    if subscribe && first_error.is_some() {
        for node in nodes {
            node.forget(channel);
        }
    }
    first_error.map_or(Ok(()), Err)
}

/// The error for a primitive that a Redlock client cannot offer.
fn needs_one_server(primitive: &str) -> Error {
    Error::Unsupported(format!(
        "{primitive} is not available on a Redlock client (its state cannot be split over \
         independent masters); use Lock, or a client on one Redis"
    ))
}

impl Channels for Servers {
    fn subscribe(&self, channel: &str) -> impl Future<Output = Result<()>> + Send {
        Servers::subscribe(self, channel)
    }

    fn unsubscribe(&self, channel: &str) -> impl Future<Output = Result<()>> + Send {
        Servers::unsubscribe(self, channel)
    }
}
