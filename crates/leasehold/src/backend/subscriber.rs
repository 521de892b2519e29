//! The pub/sub connections of a cluster client, apart from its commands.
//!
//! redis-rs 1.8.1's cluster connection re-sends its tracked subscriptions
//! after every slot-map refresh (each MOVED during a reshard) as one
//! `SUBSCRIBE ch1 .. chN` per node that expects one reply, while the server
//! answers with N confirmations; the N - 1 surplus ones become the replies
//! of the next commands on that node's connection, and every reply after
//! them is shifted by as many (`docs/upstream/redis-rs-cluster-resubscribe.md`;
//! its `SSUBSCRIBE` resubscription is built the same way). A lock command
//! must never see another command's reply, so the cluster's command
//! connection has no push sender (hence no subscriptions for the driver to
//! track or resend) and pub/sub lives here, on plain multiplexed RESP3
//! connections that carry nothing else, one (S)SUBSCRIBE per channel, so
//! each call awaits exactly its own confirmation. Two ways, by [`Mode`]:
//!
//! - [`Mode::Sharded`] (every master has sharded pub/sub and lets the user
//!   run it): the scripts publish by SPUBLISH, which reaches only the
//!   channel's shard, so each channel is subscribed by SSUBSCRIBE at the
//!   master of its slot (a lock's channels share its keys' slot), one
//!   connection per master that has some. A MOVED answer is followed. When
//!   a slot leaves a node (a reshard, a failover), the node ends its shard
//!   subscriptions on its own with a `sunsubscribe` push; the channel is then
//!   subscribed again at the slot's new master.
//! - [`Mode::Broadcast`] (plain PUBLISH, which a cluster forwards to every
//!   node): every channel is subscribed on one connection to one node, any
//!   node; when it drops, the next is the first node that answers (the one
//!   before, then the others the cluster names, then the seed URLs).
//!
//! Nothing is resubscribed by the driver. A channel whose connection
//! dropped, or that its node ended, is subscribed again by the maintenance
//! task, and only then a [`PushKind::Disconnection`] is passed on, which
//! wakes every waiter to try again: releases published in between were
//! missed. Failed rounds are retried with exponential back-off, never in a
//! loop.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::{Arc, Weak};
use std::time::Duration;

use redis::aio::MultiplexedConnection;
use redis::{
    AsyncConnectionConfig, ConnectionAddr, ConnectionInfo, ErrorKind, PushInfo, PushKind,
    RedisError, Value,
};
use tokio::sync::{Mutex, Notify};

use super::{ConnectOptions, OnPush, open_client};
use crate::error::{Error, Result};

/// The driver's cluster connection: over its own TCP connections, or (in
/// the simulator's build) over simulated sockets, the driver as shipped.
#[cfg(not(leasehold_sim))]
pub(crate) type ClusterConnection = redis::cluster_async::ClusterConnection;
#[cfg(leasehold_sim)]
pub(crate) type ClusterConnection = redis::cluster_async::ClusterConnection<crate::sim::NodeConn>;

/// First and longest wait between failed rounds of resubscription.
const BACKOFF_MIN: Duration = Duration::from_millis(50);
const BACKOFF_MAX: Duration = Duration::from_secs(2);

/// Most nodes one subscription tries: MOVED answers followed, a dropped
/// connection replaced.
const MOST_HOPS: usize = 4;

/// How release messages travel in the cluster, hence where a channel is
/// subscribed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Mode {
    /// PUBLISH and SUBSCRIBE: every node hears every message, so every
    /// channel is subscribed on one node, any one.
    Broadcast,
    /// SPUBLISH and SSUBSCRIBE: only the channel's shard hears a message, so
    /// each channel is subscribed at its slot's master.
    Sharded,
}

impl Mode {
    fn subscribe(self) -> (&'static str, PushKind) {
        match self {
            Mode::Broadcast => ("SUBSCRIBE", PushKind::Subscribe),
            Mode::Sharded => ("SSUBSCRIBE", PushKind::SSubscribe),
        }
    }

    fn unsubscribe(self) -> (&'static str, PushKind) {
        match self {
            Mode::Broadcast => ("UNSUBSCRIBE", PushKind::Unsubscribe),
            Mode::Sharded => ("SUNSUBSCRIBE", PushKind::SUnsubscribe),
        }
    }
}

pub(crate) struct Subscriber {
    mode: Mode,
    /// The seed URLs, parsed: the last resort for a node to connect to, and
    /// the scheme, credentials and TLS material for every node.
    seeds: Vec<ConnectionInfo>,
    options: ConnectOptions,
    on_push: OnPush,
    /// The cluster's command connection, asked which nodes there are.
    commands: ClusterConnection,
    /// Serialises (un)subscriptions with changes of connection.
    state: Mutex<State>,
    /// Wakes the maintenance task (a connection dropped, a node ended a
    /// subscription).
    repair: Arc<Notify>,
}

#[derive(Default)]
struct State {
    /// Open connections, by node address.
    nodes: HashMap<String, Node>,
    /// Channels the client wants subscribed, each with the address of the
    /// node it is subscribed at; `None`: nowhere now (the maintenance task
    /// subscribes it again).
    channels: BTreeMap<String, Option<String>>,
    /// Broadcast: address of the last node connected to, tried first next time.
    last: Option<String>,
    /// Sharded: the master of each slot range as last read; empty when it
    /// must be read again.
    slots: Vec<Range>,
}

/// Slots `start..=end` and the master serving them.
struct Range {
    start: u16,
    end: u16,
    master: ConnectionInfo,
}

struct Node {
    conn: MultiplexedConnection,
    /// What the connection's push frames said, in the order the server sent
    /// them.
    pushed: Arc<std::sync::Mutex<Pushed>>,
}

/// Kept by a connection's push sender.
#[derive(Default)]
struct Pushed {
    /// Channels the server confirmed and has not ended since.
    live: HashSet<String>,
    /// Channels ended since the state last looked (by us, or by the server
    /// when their slot left the node).
    ended: Vec<String>,
    /// The connection dropped.
    dropped: bool,
    /// We dropped the connection: its end wakes no waiter.
    forgotten: bool,
}

impl Node {
    fn pushed(&self) -> std::sync::MutexGuard<'_, Pushed> {
        // Every update is one insert, push or store: never left half done.
        self.pushed.lock().unwrap_or_else(|e| e.into_inner())
    }
}

impl Subscriber {
    /// A subscriber that connects when first used; its maintenance task
    /// ends with it.
    pub(crate) fn start(
        mode: Mode,
        seeds: Vec<ConnectionInfo>,
        options: ConnectOptions,
        on_push: OnPush,
        commands: ClusterConnection,
    ) -> Arc<Subscriber> {
        let subscriber = Arc::new(Subscriber {
            mode,
            seeds,
            options,
            on_push,
            commands,
            state: Mutex::new(State::default()),
            repair: Arc::new(Notify::new()),
        });
        let repair = Arc::clone(&subscriber.repair);
        tokio::spawn(maintain(Arc::downgrade(&subscriber), repair));
        subscriber
    }

    /// Subscribes to `channel`; returns once the server confirmed it.
    pub(crate) async fn subscribe(&self, channel: &str) -> Result<()> {
        let mut state = self.state.lock().await;
        self.settle(&mut state);
        if state.channels.get(channel).is_some_and(Option::is_some) {
            return Ok(());
        }
        self.place(&mut state, channel, &mut HashMap::new()).await
    }

    /// Ends the subscription to `channel`.
    pub(crate) async fn unsubscribe(&self, channel: &str) -> Result<()> {
        let mut state = self.state.lock().await;
        self.settle(&mut state);
        let Some(Some(addr)) = state.channels.remove(channel) else {
            // Subscribed nowhere now.
            return Ok(());
        };
        let Some(node) = state.nodes.get_mut(&addr) else {
            return Ok(());
        };
        let (verb, confirmation) = self.mode.unsubscribe();
        let reply: redis::RedisResult<Value> = redis::cmd(verb)
            .arg(channel)
            .query_async(&mut node.conn)
            .await;
        match reply {
            Ok(reply) if confirms(&reply, &confirmation, channel) => Ok(()),
            Ok(reply) => {
                // A push the server sent on its own was taken for this
                // call's reply; the connection's next replies would be off
                // by one (see `place`).
                tracing::debug!(%addr, ?reply, "cluster pub/sub: crossed confirmation");
                self.drop_node(&mut state, &addr);
                Ok(())
            }
            // The slot left that node, which ended the subscription itself.
            Err(e) if e.redirect_node().is_some() => Ok(()),
            Err(e) => {
                let e = Error::from_redis(e, &addr, channel);
                if e.is_transient() {
                    // The subscription dies with the connection; the other
                    // channels move on.
                    self.drop_node(&mut state, &addr);
                    Ok(())
                } else {
                    Err(e)
                }
            }
        }
    }

    /// Applies what the connections' pushes said: dropped connections are
    /// forgotten, and channels whose connection dropped or whose node ended
    /// them are marked as subscribed nowhere (the maintenance task is told).
    fn settle(&self, state: &mut State) {
        let State {
            nodes, channels, ..
        } = state;
        let mut dead = Vec::new();
        let mut moved = 0;
        for (addr, node) in nodes.iter() {
            let mut pushed = node.pushed();
            if pushed.dropped {
                dead.push(addr.clone());
                continue;
            }
            for channel in std::mem::take(&mut pushed.ended) {
                if let Some(at) = channels.get_mut(&channel)
                    && at.as_deref() == Some(addr.as_str())
                    && !pushed.live.contains(&channel)
                {
                    *at = None;
                    moved += 1;
                }
            }
        }
        if moved > 0 {
            tracing::debug!(
                moved,
                "cluster pub/sub: a node ended subscriptions (slot moved)"
            );
            // The map said those slots were theirs.
            state.slots.clear();
            self.repair.notify_one();
        }
        for addr in dead {
            self.drop_node(state, &addr);
        }
    }

    /// Forgets the connection to `addr`; its channels are subscribed nowhere
    /// now, and the maintenance task is told.
    fn drop_node(&self, state: &mut State, addr: &str) {
        let Some(node) = state.nodes.remove(addr) else {
            return;
        };
        node.pushed().forgotten = true;
        let mut orphaned = 0;
        for at in state.channels.values_mut() {
            if at.as_deref() == Some(addr) {
                *at = None;
                orphaned += 1;
            }
        }
        tracing::debug!(%addr, orphaned, "dropping a cluster pub/sub connection");
        if orphaned > 0 {
            state.slots.clear();
            self.repair.notify_one();
        }
    }

    /// Subscribes `channel` where [`Mode`] wants it, following MOVED answers
    /// and replacing a dropped connection, at most [`MOST_HOPS`] nodes.
    /// Nodes in `unreachable` (with the error they gave) are not tried
    /// again; new ones are added.
    async fn place(
        &self,
        state: &mut State,
        channel: &str,
        unreachable: &mut HashMap<String, RedisError>,
    ) -> Result<()> {
        let (verb, confirmation) = self.mode.subscribe();
        let mut redirect = None;
        let mut last_error = None;
        for _ in 0..MOST_HOPS {
            let addr = self
                .node_for(state, channel, redirect.take(), unreachable)
                .await?;
            let node = state.nodes.get_mut(&addr).expect("node_for opened it");
            let reply: redis::RedisResult<Value> = redis::cmd(verb)
                .arg(channel)
                .query_async(&mut node.conn)
                .await;
            match reply {
                Ok(reply) if confirms(&reply, &confirmation, channel) => {
                    state.channels.insert(channel.to_owned(), Some(addr));
                    return Ok(());
                }
                Ok(reply) => {
                    // A `sunsubscribe` the server pushed on its own (a slot
                    // left the node) arrived first and was taken for this
                    // call's reply (the driver gives confirmations to the
                    // oldest call). This call's confirmation follows with no
                    // call to take it, or would be taken by the next one:
                    // the connection is off by one, so it goes.
                    tracing::debug!(%addr, ?reply, "cluster pub/sub: crossed confirmation");
                    self.drop_node(state, &addr);
                }
                Err(e) => {
                    if let Some((to, slot)) = e.redirect_node() {
                        tracing::debug!(%channel, slot, %to, "cluster pub/sub: MOVED");
                        state.slots.clear();
                        redirect = Some(self.info_at(to)?);
                        last_error = Some(Error::from_redis(e, &addr, channel));
                        continue;
                    }
                    let e = Error::from_redis(e, &addr, channel);
                    if !e.is_transient() {
                        return Err(e);
                    }
                    self.drop_node(state, &addr);
                    last_error = Some(e);
                }
            }
        }
        Err(last_error.unwrap_or_else(|| {
            Error::Unsupported(format!("cannot subscribe to {channel} on the cluster"))
        }))
    }

    /// The address of an open connection to the node that should carry
    /// `channel`: `redirect` if given (a MOVED answer named it), else the
    /// master of its slot (sharded) or the one node in use, or the first
    /// that answers (broadcast).
    async fn node_for(
        &self,
        state: &mut State,
        channel: &str,
        redirect: Option<ConnectionInfo>,
        unreachable: &mut HashMap<String, RedisError>,
    ) -> Result<String> {
        if let Some(info) = redirect {
            return self.open(state, info, unreachable).await;
        }
        match self.mode {
            Mode::Sharded => {
                let master = self.master_of(state, channel).await?;
                self.open(state, master, unreachable).await
            }
            Mode::Broadcast => {
                if let Some(addr) = state.nodes.keys().next() {
                    return Ok(addr.clone());
                }
                let mut last_error = None;
                for info in self.candidates(state.last.as_deref()).await {
                    match self.open(state, info, unreachable).await {
                        Ok(addr) => {
                            state.last = Some(addr.clone());
                            return Ok(addr);
                        }
                        Err(e) => last_error = Some(e),
                    }
                }
                Err(last_error.unwrap_or_else(|| {
                    Error::InvalidArgument("a cluster client needs at least one node URL".into())
                }))
            }
        }
    }

    /// The master serving `channel`'s slot, from the slot map (read again
    /// if it has none).
    async fn master_of(&self, state: &mut State, channel: &str) -> Result<ConnectionInfo> {
        let slot = crate::key::slot(channel);
        for fresh in [false, true] {
            if fresh || state.slots.is_empty() {
                state.slots = self
                    .ranges()
                    .await
                    .into_iter()
                    .filter_map(|(start, end, nodes)| {
                        let master = nodes.into_iter().next()?;
                        Some(Range { start, end, master })
                    })
                    .collect();
            }
            if let Some(range) = state
                .slots
                .iter()
                .find(|r| (r.start..=r.end).contains(&slot))
            {
                return Ok(range.master.clone());
            }
        }
        Err(Error::Unreachable {
            addr: "cluster".into(),
            source: RedisError::from((
                ErrorKind::ClusterConnectionNotFound,
                "no master serves the slot of",
                channel.to_owned(),
            )),
        })
    }

    /// The connection to `info`'s node, opened if need be; gives its address.
    async fn open(
        &self,
        state: &mut State,
        info: ConnectionInfo,
        unreachable: &mut HashMap<String, RedisError>,
    ) -> Result<String> {
        let addr = info.addr().to_string();
        if state.nodes.contains_key(&addr) {
            return Ok(addr);
        }
        if let Some(e) = unreachable.get(&addr) {
            return Err(Error::from_redis(e.clone(), &addr, ""));
        }
        let client = open_client(info, &self.options)?;
        let pushed = Arc::new(std::sync::Mutex::new(Pushed::default()));
        let (on_push, repair, kept) = (
            Arc::clone(&self.on_push),
            Arc::clone(&self.repair),
            Arc::clone(&pushed),
        );
        let config = AsyncConnectionConfig::new()
            .set_connection_timeout(Some(self.options.command_timeout))
            .set_response_timeout(Some(self.options.command_timeout))
            .set_push_sender(
                move |info: PushInfo| -> std::result::Result<(), std::convert::Infallible> {
                    if note(&kept, &repair, &info) {
                        on_push(info);
                    }
                    Ok(())
                },
            );
        #[cfg(not(leasehold_sim))]
        let connected = client
            .get_multiplexed_async_connection_with_config(&config)
            .await;
        // The simulator's node, over its socket (the client only checked
        // the address).
        #[cfg(leasehold_sim)]
        let connected = crate::sim::connect_node(client.get_connection_info(), &config).await;
        match connected {
            Ok(conn) => {
                tracing::debug!(%addr, mode = ?self.mode, "cluster pub/sub connected");
                state.nodes.insert(addr.clone(), Node { conn, pushed });
                Ok(addr)
            }
            Err(e) => {
                tracing::debug!(%addr, error = %e, "cluster pub/sub: node refused");
                // Who serves what may have changed (a failover).
                state.slots.clear();
                unreachable.insert(addr.clone(), e.clone());
                Err(Error::from_redis(e, &addr, ""))
            }
        }
    }

    /// Subscribes again every channel that is subscribed nowhere (its
    /// connection dropped, or its node ended it), then wakes every waiter,
    /// since releases published meanwhile were missed. Errs if some channel
    /// could not be placed (its master is down): the next round retries it.
    async fn restore(&self, state: &mut State) -> Result<()> {
        self.settle(state);
        let pending: Vec<String> = state
            .channels
            .iter()
            .filter(|(_, at)| at.is_none())
            .map(|(channel, _)| channel.clone())
            .collect();
        if pending.is_empty() {
            return Ok(());
        }
        // A node that failed once is not tried again this round, so a dead
        // or blackholed master costs one connection timeout, not one per
        // channel.
        let mut unreachable = HashMap::new();
        let mut placed = 0;
        let mut first_error = None;
        for channel in &pending {
            match self.place(state, channel, &mut unreachable).await {
                Ok(()) => placed += 1,
                Err(e) => {
                    first_error.get_or_insert(e);
                }
            }
        }
        if self.mode == Mode::Sharded {
            // Connections left without channels to nodes that serve no slot
            // now (a demoted master, a node whose slots all moved) go.
            let State {
                nodes,
                channels,
                slots,
                ..
            } = &mut *state;
            let used: HashSet<&str> = channels.values().flatten().map(String::as_str).collect();
            let masters: HashSet<String> =
                slots.iter().map(|r| r.master.addr().to_string()).collect();
            nodes.retain(|addr, _| used.contains(addr.as_str()) || masters.contains(addr));
        }
        tracing::debug!(
            placed,
            failed = pending.len() - placed,
            "cluster pub/sub: channels subscribed again"
        );
        if placed > 0 {
            (self.on_push)(PushInfo {
                kind: PushKind::Disconnection,
                data: Vec::new(),
            });
        }
        first_error.map_or(Ok(()), Err)
    }

    /// Slot ranges (`CLUSTER SLOTS`, as the command connection gets it),
    /// each with its nodes, master first.
    async fn ranges(&self) -> Vec<(u16, u16, Vec<ConnectionInfo>)> {
        let Some(seed) = self.seeds.first() else {
            return Vec::new();
        };
        let slots: redis::RedisResult<Vec<Value>> = redis::cmd("CLUSTER")
            .arg("SLOTS")
            .query_async(&mut self.commands.clone())
            .await;
        let mut ranges = Vec::new();
        for range in slots.unwrap_or_default() {
            let Value::Array(range) = range else { continue };
            let (Some(Value::Int(start)), Some(Value::Int(end))) = (range.first(), range.get(1))
            else {
                continue;
            };
            let (Ok(start), Ok(end)) = (u16::try_from(*start), u16::try_from(*end)) else {
                continue;
            };
            let mut nodes = Vec::new();
            for node in range.iter().skip(2) {
                if let Value::Array(node) = node
                    && let (Some(host), Some(Value::Int(port))) = (node.first(), node.get(1))
                    && let Ok(port) = u16::try_from(*port)
                {
                    let host = match host {
                        Value::BulkString(h) => String::from_utf8_lossy(h).into_owned(),
                        Value::SimpleString(h) => h.clone(),
                        _ => continue,
                    };
                    // "" or "?" when the node does not know its own
                    // address: then it is the seed's host.
                    let host = if host.is_empty() || host == "?" {
                        seed_host(seed)
                    } else {
                        host
                    };
                    nodes.push(with_host_port(seed, host, port));
                }
            }
            ranges.push((start, end, nodes));
        }
        ranges
    }

    /// The node at `addr` (`host:port`, as a MOVED answer names it).
    fn info_at(&self, addr: &str) -> Result<ConnectionInfo> {
        let seed = self.seeds.first().ok_or_else(|| {
            Error::InvalidArgument("a cluster client needs at least one node URL".into())
        })?;
        let (host, port) = addr
            .rsplit_once(':')
            .and_then(|(h, p)| Some((h, p.parse::<u16>().ok()?)))
            .ok_or_else(|| Error::Unsupported(format!("the cluster redirected to {addr:?}")))?;
        Ok(with_host_port(seed, host.to_owned(), port))
    }

    /// Nodes to try for a broadcast connection, in order: the last one,
    /// those the cluster names now (masters and replicas: every node hears
    /// every PUBLISH), the seeds.
    async fn candidates(&self, last: Option<&str>) -> Vec<ConnectionInfo> {
        let mut infos: Vec<ConnectionInfo> = self
            .ranges()
            .await
            .into_iter()
            .flat_map(|(_, _, nodes)| nodes)
            .collect();
        infos.extend(self.seeds.iter().cloned());
        let mut seen = HashSet::new();
        infos.retain(|i| seen.insert(i.addr().to_string()));
        if let Some(last) = last
            && let Some(at) = infos.iter().position(|i| i.addr().to_string() == last)
        {
            let first = infos.remove(at);
            infos.insert(0, first);
        }
        infos
    }
}

/// Records what a connection's push frame says about its subscriptions;
/// runs on the connection's task, so it only takes a lock and notifies.
/// Says whether to pass the frame on (not the end of a connection we
/// dropped ourselves).
fn note(pushed: &std::sync::Mutex<Pushed>, repair: &Notify, info: &PushInfo) -> bool {
    let mut pushed = pushed.lock().unwrap_or_else(|e| e.into_inner());
    let channel = || match info.data.first() {
        Some(Value::BulkString(channel)) => String::from_utf8(channel.clone()).ok(),
        _ => None,
    };
    match info.kind {
        PushKind::Disconnection => {
            if pushed.forgotten {
                return false;
            }
            pushed.dropped = true;
            repair.notify_one();
        }
        PushKind::Subscribe | PushKind::SSubscribe => {
            if let Some(channel) = channel() {
                pushed.live.insert(channel);
            }
        }
        PushKind::Unsubscribe | PushKind::SUnsubscribe => {
            if let Some(channel) = channel() {
                pushed.live.remove(&channel);
                pushed.ended.push(channel);
                repair.notify_one();
            }
        }
        _ => {}
    }
    true
}

impl Drop for Subscriber {
    /// Ends the maintenance task, which waits for a repair to do and then
    /// finds the subscriber gone.
    fn drop(&mut self) {
        self.repair.notify_one();
    }
}

/// Whether `reply` is the confirmation `kind` of `channel`.
fn confirms(reply: &Value, kind: &PushKind, channel: &str) -> bool {
    matches!(
        reply,
        Value::Push { kind: k, data } if k == kind
            && matches!(data.first(), Some(Value::BulkString(c)) if c == channel.as_bytes())
    )
}

/// Subscribes again what needs it while any channel is wanted, with
/// exponential back-off between failed rounds; ends with the subscriber.
async fn maintain(subscriber: Weak<Subscriber>, repair: Arc<Notify>) {
    loop {
        repair.notified().await;
        let mut backoff = BACKOFF_MIN;
        loop {
            let Some(s) = subscriber.upgrade() else {
                return;
            };
            let result = {
                let mut state = s.state.lock().await;
                s.restore(&mut state).await
            };
            drop(s);
            match result {
                Ok(()) => break,
                Err(e) => {
                    tracing::warn!(error = %e, retry_in = ?backoff,
                        "cannot restore the cluster's pub/sub subscriptions; waiters fall back to timers");
                    tokio::time::sleep(backoff).await;
                    backoff = (backoff * 2).min(BACKOFF_MAX);
                }
            }
        }
    }
}

fn seed_host(seed: &ConnectionInfo) -> String {
    match seed.addr() {
        ConnectionAddr::Tcp(host, _) | ConnectionAddr::TcpTls { host, .. } => host.clone(),
        other => other.to_string(),
    }
}

/// `seed` (scheme, credentials, TLS) pointed at `host:port`.
fn with_host_port(seed: &ConnectionInfo, host: String, port: u16) -> ConnectionInfo {
    let addr = match seed.addr().clone() {
        ConnectionAddr::TcpTls {
            insecure,
            tls_params,
            ..
        } => ConnectionAddr::TcpTls {
            host,
            port,
            insecure,
            tls_params,
        },
        _ => ConnectionAddr::Tcp(host, port),
    };
    seed.clone().set_addr(addr)
}
