//! The pub/sub connection of a cluster client, apart from its commands.
//!
//! redis-rs 1.8.1's cluster connection re-sends its tracked subscriptions
//! after every slot-map refresh (each MOVED during a reshard) as one
//! `SUBSCRIBE ch1 .. chN` per node that expects one reply, while the server
//! answers with N confirmations; the N - 1 surplus ones become the replies
//! of the next commands on that node's connection, and every reply after
//! them is shifted by as many (`docs/upstream/redis-rs-cluster-resubscribe.md`).
//! A lock command must never see another command's reply, so the cluster's
//! command connection has no push sender (hence no subscriptions for the
//! driver to track or resend) and pub/sub lives here, on one plain
//! multiplexed RESP3 connection to one node: a PUBLISH on a cluster is
//! forwarded to every node over the cluster bus, so any node hears every
//! release.
//!
//! The connection never resubscribes on its own. When it drops (the node
//! died, restarted or left), the next connection goes to the first node that
//! answers (the one before, then the others the cluster names, then the
//! seed URLs), every channel is subscribed again there, one `SUBSCRIBE` per
//! channel (so each call awaits exactly its own confirmation), and only
//! then a [`PushKind::Disconnection`] is passed on, which wakes every waiter
//! to try again: releases published in between were missed. Failed rounds
//! are retried with exponential back-off, never in a loop.

use std::collections::BTreeSet;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Weak};
use std::time::Duration;

use redis::aio::MultiplexedConnection;
use redis::cluster_async::ClusterConnection;
use redis::{AsyncConnectionConfig, ConnectionAddr, ConnectionInfo, PushInfo, PushKind, Value};
use tokio::sync::{Mutex, Notify};

use super::{ConnectOptions, OnPush, open_client};
use crate::error::{Error, Result};

/// First and longest wait between failed rounds of resubscription.
const BACKOFF_MIN: Duration = Duration::from_millis(50);
const BACKOFF_MAX: Duration = Duration::from_secs(2);

pub(crate) struct Subscriber {
    /// The seed URLs, parsed: the last resort for a node to connect to, and
    /// the scheme, credentials and TLS material for every node.
    seeds: Vec<ConnectionInfo>,
    options: ConnectOptions,
    on_push: OnPush,
    /// The cluster's command connection, asked which nodes there are.
    commands: ClusterConnection,
    /// Serialises (un)subscriptions with a change of connection.
    state: Mutex<State>,
    /// The generation of the connection in use; a disconnection reported by
    /// an older one is stale.
    generation: Arc<AtomicU64>,
    /// Set when the connection in use dropped: its generation.
    broken: Arc<AtomicU64>,
    /// Wakes the maintenance task (connection dropped or replaced).
    repair: Arc<Notify>,
}

#[derive(Default)]
struct State {
    node: Option<Node>,
    /// Channels the client wants subscribed, on whichever node.
    channels: BTreeSet<String>,
    /// Address of the last node connected to, tried first next time.
    last: Option<String>,
}

struct Node {
    addr: String,
    generation: u64,
    conn: MultiplexedConnection,
}

impl Subscriber {
    /// A subscriber that connects when first used; its maintenance task
    /// ends with it.
    pub(crate) fn start(
        seeds: Vec<ConnectionInfo>,
        options: ConnectOptions,
        on_push: OnPush,
        commands: ClusterConnection,
    ) -> Arc<Subscriber> {
        let subscriber = Arc::new(Subscriber {
            seeds,
            options,
            on_push,
            commands,
            state: Mutex::new(State::default()),
            generation: Arc::new(AtomicU64::new(0)),
            broken: Arc::new(AtomicU64::new(0)),
            repair: Arc::new(Notify::new()),
        });
        let repair = Arc::clone(&subscriber.repair);
        tokio::spawn(maintain(Arc::downgrade(&subscriber), repair));
        subscriber
    }

    /// Subscribes to `channel`; returns once the server confirmed it.
    pub(crate) async fn subscribe(&self, channel: &str) -> Result<()> {
        let mut state = self.state.lock().await;
        // A connection found dead here is replaced at once, once.
        for replaced in [false, true] {
            let node = self.node(&mut state).await?;
            let addr = node.addr.clone();
            match node.conn.subscribe(channel).await {
                Ok(()) => {
                    state.channels.insert(channel.to_owned());
                    return Ok(());
                }
                Err(e) => {
                    let e = Error::from_redis(e, &addr, channel);
                    if replaced || !e.is_transient() {
                        return Err(e);
                    }
                    self.drop_node(&mut state);
                }
            }
        }
        unreachable!("the loop returns")
    }

    /// Ends the subscription to `channel`.
    pub(crate) async fn unsubscribe(&self, channel: &str) -> Result<()> {
        let mut state = self.state.lock().await;
        state.channels.remove(channel);
        let Some(node) = state.node.as_mut() else {
            // No connection: no subscription anywhere.
            return Ok(());
        };
        let addr = node.addr.clone();
        match node.conn.unsubscribe(channel).await {
            Ok(()) => Ok(()),
            Err(e) => {
                let e = Error::from_redis(e, &addr, channel);
                if e.is_transient() {
                    // The subscription dies with the connection; the other
                    // channels move to the next one.
                    self.drop_node(&mut state);
                    self.repair.notify_one();
                    Ok(())
                } else {
                    Err(e)
                }
            }
        }
    }

    /// Forgets the connection in use (its subscriptions go with it).
    fn drop_node(&self, state: &mut State) {
        if let Some(node) = state.node.take() {
            tracing::debug!(addr = %node.addr, "dropping the cluster's pub/sub connection");
        }
    }

    /// The connection in use, or a new one with every channel subscribed
    /// again (and every waiter woken, since messages were missed).
    async fn node<'s>(&self, state: &'s mut State) -> Result<&'s mut Node> {
        if state
            .node
            .as_ref()
            .is_some_and(|n| n.generation == self.broken.load(Ordering::Acquire))
        {
            self.drop_node(state);
        }
        if state.node.is_none() {
            let node = match self.connect(state).await {
                Ok(node) => node,
                Err(e) => {
                    // Wanted channels are subscribed nowhere now: keep
                    // trying, with back-off, in the background.
                    if !state.channels.is_empty() {
                        self.repair.notify_one();
                    }
                    return Err(e);
                }
            };
            let resubscribed = !state.channels.is_empty();
            state.last = Some(node.addr.clone());
            state.node = Some(node);
            if resubscribed {
                (self.on_push)(PushInfo {
                    kind: PushKind::Disconnection,
                    data: Vec::new(),
                });
            }
        }
        Ok(state.node.as_mut().expect("set above"))
    }

    /// Connects to the first node that answers and subscribes it to every
    /// channel of `state`.
    async fn connect(&self, state: &State) -> Result<Node> {
        let mut last_error = None;
        for info in self.candidates(state.last.as_deref()).await {
            let addr = info.addr().to_string();
            match self.connect_to(info, &state.channels).await {
                Ok(node) => {
                    tracing::debug!(%addr, channels = state.channels.len(),
                        "cluster pub/sub connected");
                    return Ok(node);
                }
                Err(e) => {
                    tracing::debug!(%addr, error = %e, "cluster pub/sub: node refused");
                    last_error = Some(e);
                }
            }
        }
        Err(last_error.unwrap_or_else(|| {
            Error::InvalidArgument("a cluster client needs at least one node URL".into())
        }))
    }

    async fn connect_to(&self, info: ConnectionInfo, channels: &BTreeSet<String>) -> Result<Node> {
        let addr = info.addr().to_string();
        let client = open_client(info, &self.options)?;
        let generation = self.generation.fetch_add(1, Ordering::AcqRel) + 1;
        let (on_push, broken, repair) = (
            Arc::clone(&self.on_push),
            Arc::clone(&self.broken),
            Arc::clone(&self.repair),
        );
        let config = AsyncConnectionConfig::new()
            .set_connection_timeout(Some(self.options.command_timeout))
            .set_response_timeout(Some(self.options.command_timeout))
            .set_push_sender(
                move |info: PushInfo| -> std::result::Result<(), std::convert::Infallible> {
                    if info.kind == PushKind::Disconnection {
                        // Only this connection's own end counts; the
                        // maintenance task moves the channels on.
                        broken.fetch_max(generation, Ordering::AcqRel);
                        repair.notify_one();
                    }
                    on_push(info);
                    Ok(())
                },
            );
        let mut conn = client
            .get_multiplexed_async_connection_with_config(&config)
            .await
            .map_err(|e| Error::from_redis(e, &addr, ""))?;
        for channel in channels {
            conn.subscribe(channel)
                .await
                .map_err(|e| Error::from_redis(e, &addr, channel))?;
        }
        Ok(Node {
            addr,
            generation,
            conn,
        })
    }

    /// Nodes to try, in order: the last one, those the cluster names now
    /// (masters and replicas: every node hears every PUBLISH), the seeds.
    async fn candidates(&self, last: Option<&str>) -> Vec<ConnectionInfo> {
        let mut named: Vec<(String, u16)> = Vec::new();
        let slots: redis::RedisResult<Vec<Value>> = redis::cmd("CLUSTER")
            .arg("SLOTS")
            .query_async(&mut self.commands.clone())
            .await;
        for range in slots.unwrap_or_default() {
            let Value::Array(range) = range else { continue };
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
                    named.push((host, port));
                }
            }
        }
        let mut infos: Vec<ConnectionInfo> = Vec::new();
        if let Some(seed) = self.seeds.first() {
            for (host, port) in named {
                // "" or "?" when the node does not know its own address:
                // then it is the seed's host.
                let host = if host.is_empty() || host == "?" {
                    seed_host(seed)
                } else {
                    host
                };
                infos.push(with_host_port(seed, host, port));
            }
        }
        infos.extend(self.seeds.iter().cloned());
        let mut seen = BTreeSet::new();
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

/// Replaces a dropped connection while any channel is wanted, with
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
                if state.channels.is_empty() {
                    // Nothing to move; the next subscription connects.
                    if state
                        .node
                        .as_ref()
                        .is_some_and(|n| n.generation == s.broken.load(Ordering::Acquire))
                    {
                        s.drop_node(&mut state);
                    }
                    Ok(())
                } else {
                    s.node(&mut state).await.map(|_| ())
                }
            };
            drop(s);
            match result {
                Ok(()) => break,
                Err(e) => {
                    tracing::warn!(error = %e, retry_in = ?backoff,
                        "cannot restore the cluster's pub/sub connection; waiters fall back to timers");
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
