//! How leasehold talks to Redis. Knows nothing about locks.
//!
//! One connection per client (more on a cluster), whatever the deployment:
//!
//! - one server: a [`ConnectionManager`], a multiplexed RESP3 connection that
//!   reconnects on its own, carries every command, and delivers pub/sub
//!   messages as push frames, so the whole client needs one socket; its
//!   subscriptions are sent again after a reconnect by [`managed`], one
//!   correctly counted SUBSCRIBE per 512 channels (the driver's own
//!   resubscription crossed replies between commands);
//! - a cluster: redis-rs's async cluster connection for commands (one
//!   multiplexed RESP3 connection per node, MOVED/ASK and slot migration
//!   followed by the driver), each call routed by its first key, built
//!   without a push sender so it carries no subscription; pub/sub on
//!   connections of their own (see [`subscriber`] for why: the driver's
//!   resubscription crossed replies between commands): where every master
//!   has sharded pub/sub and the user may run it (Redis or Valkey 7+, asked
//!   once at connect), release messages go by SPUBLISH, which reaches only
//!   the channel's shard, and each channel is subscribed by SSUBSCRIBE at
//!   its slot's master; otherwise by PUBLISH, which the cluster forwards to
//!   every node, all subscribed on one node;
//! - Sentinel: a [`ConnectionManager`] to the master the sentinels name,
//!   resubscribed as for one server, replaced when they name another one
//!   (see [`sentinel`]).
//!
//! TLS (`rediss://`) uses rustls with certificate verification always on;
//! [`tls`] says which crypto provider it runs on.
//!
//! Cluster support is compiled with the `cluster` feature, Sentinel support
//! with `sentinel`, TLS with `tls`.

mod address;
mod managed;
#[cfg(feature = "sentinel")]
mod sentinel;
#[cfg(feature = "cluster")]
mod subscriber;
#[cfg(feature = "tls")]
mod tls;

#[cfg(feature = "cluster")]
use std::collections::HashSet;
use std::sync::Arc;
use std::time::Duration;

/// redis-rs's connection manager; in the simulator's build, its model over
/// simulated sockets (see `sim::ConnectionManager`).
#[cfg(leasehold_sim)]
pub(crate) use crate::sim::{ConnectionManager, ConnectionManagerConfig};
use redis::aio::ConnectionLike;
#[cfg(not(leasehold_sim))]
pub(crate) use redis::aio::{ConnectionManager, ConnectionManagerConfig};

#[cfg(test)]
use address::is_tls_url;
pub use address::redact_url;
pub(crate) use address::{Credentials, Endpoint, RedactedUrls, TlsOptions};
use address::{checked_info, open_client, parse_url};
use managed::{Managed, Pushes};
/// The driver's cluster connection: over its own TCP connections, or (in
/// the simulator's build) over simulated sockets, the driver as shipped.
#[cfg(all(feature = "cluster", not(leasehold_sim)))]
pub(crate) type ClusterConnection = redis::cluster_async::ClusterConnection;
#[cfg(all(feature = "cluster", leasehold_sim))]
pub(crate) type ClusterConnection = redis::cluster_async::ClusterConnection<crate::sim::NodeConn>;
#[cfg(feature = "cluster")]
use redis::cluster_routing::{
    MultipleNodeRoutingInfo, Route, RoutingInfo, SingleNodeRoutingInfo, SlotAddr,
};
use redis::{Cmd, ConnectionInfo, FromRedisValue, PushInfo, RedisFuture, ScriptInvocation, Value};

use crate::error::{Error, Result};

#[cfg(feature = "sentinel")]
pub(crate) use sentinel::SentinelTarget;

/// Where push frames (pub/sub messages, disconnections) go.
pub(crate) type OnPush = Arc<dyn Fn(PushInfo) + Send + Sync>;

/// Connection settings a [`Backend`] is built with.
#[derive(Debug, Clone, Default)]
pub(crate) struct ConnectOptions {
    /// Bound on each command's reply and on each connection attempt.
    pub(crate) command_timeout: Duration,
    /// Certificates for `rediss://` URLs.
    pub(crate) tls: TlsOptions,
    /// `ClientBuilder::fence_memory`: fences are kept at least this long
    /// after their acquisition; when zero, a release drops the name's last
    /// fence with its lease.
    pub(crate) fence_memory: Duration,
    /// `ClientBuilder::username`/`password`: they replace the URLs' own.
    pub(crate) credentials: Credentials,
}

/// A connection to one Redis deployment whose every key lives on one
/// master per slot: a server, a cluster, or a Sentinel-watched master.
#[derive(Clone)]
pub(crate) struct Backend {
    conn: Conn,
    addr: String,
    /// A random id for this connection's hand-off channels: a lease handed
    /// to one of its waiters is published on `<lock channel>:<id>`, which
    /// only this connection subscribes to, so a release wakes one process,
    /// not every process with a waiter.
    id: Arc<str>,
    /// The client keeps fences longer than their lease
    /// (`ClientBuilder::fence_memory`): releases leave the fence key be.
    keeps_fences: bool,
    /// Release messages go by SPUBLISH and are heard by SSUBSCRIBE (a
    /// cluster whose masters have sharded pub/sub), not PUBLISH/SUBSCRIBE.
    sharded: bool,
}

#[derive(Clone)]
enum Conn {
    /// Commands on the manager (a clone of the one `Managed` holds), which
    /// also carries the subscriptions `Managed` keeps.
    Single(ConnectionManager, Arc<Managed>),
    /// Commands on the driver's cluster connection (without push sender,
    /// so without subscriptions); pub/sub on connections of their own.
    #[cfg(feature = "cluster")]
    Cluster(ClusterConnection, Arc<subscriber::Subscriber>),
    #[cfg(feature = "sentinel")]
    Sentinel(Arc<sentinel::Followed>),
    /// A simulated connection (`--cfg leasehold_sim` only): commands and
    /// subscriptions cross the simulator's wire.
    #[cfg(leasehold_sim)]
    Sim(Arc<dyn crate::sim::Wire>),
}

/// The connection one command goes out on.
enum Live {
    Single(ConnectionManager),
    #[cfg(feature = "cluster")]
    Cluster(ClusterConnection),
    #[cfg(leasehold_sim)]
    Sim(Arc<dyn crate::sim::Wire>),
}

impl ConnectionLike for Live {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a Cmd) -> RedisFuture<'a, Value> {
        match self {
            Live::Single(c) => c.req_packed_command(cmd),
            #[cfg(feature = "cluster")]
            Live::Cluster(c) => c.req_packed_command(cmd),
            #[cfg(leasehold_sim)]
            Live::Sim(w) => {
                let reply = w.request(cmd);
                Box::pin(async move { reply.await?.extract_error() })
            }
        }
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        pipeline: &'a redis::Pipeline,
        offset: usize,
        count: usize,
    ) -> RedisFuture<'a, Vec<Value>> {
        match self {
            Live::Single(c) => c.req_packed_commands(pipeline, offset, count),
            #[cfg(feature = "cluster")]
            Live::Cluster(c) => c.req_packed_commands(pipeline, offset, count),
            #[cfg(leasehold_sim)]
            Live::Sim(w) => {
                assert!(
                    offset == 0 && count == pipeline.len(),
                    "the simulator models plain pipelines, not MULTI"
                );
                let replies = w.pipeline(pipeline.cmd_iter().cloned().collect());
                Box::pin(replies)
            }
        }
    }

    fn get_db(&self) -> i64 {
        match self {
            Live::Single(c) => c.get_db(),
            #[cfg(feature = "cluster")]
            Live::Cluster(c) => c.get_db(),
            #[cfg(leasehold_sim)]
            Live::Sim(_) => 0,
        }
    }
}

/// The cluster connection for one script call on `key`: the driver sends a
/// `SCRIPT LOAD` (after a NOSCRIPT reply) to every master and waits for all
/// of them, so one frozen master held up every call that had to load its
/// script, and its timeout then set the driver reconnecting, which holds
/// back every command. Here it goes to the master of `key` only, the one
/// that runs the script (issue 24, item 1).
#[cfg(feature = "cluster")]
struct KeyRouted<'k> {
    conn: ClusterConnection,
    key: &'k str,
}

#[cfg(feature = "cluster")]
impl KeyRouted<'_> {
    fn is_script_load(cmd: &Cmd) -> bool {
        let mut args = cmd.args_iter().map(|arg| match arg {
            redis::Arg::Simple(bytes) => Some(bytes),
            _ => None,
        });
        matches!(
            (args.next().flatten(), args.next().flatten()),
            (Some(a), Some(b)) if a.eq_ignore_ascii_case(b"SCRIPT") && b.eq_ignore_ascii_case(b"LOAD")
        )
    }
}

#[cfg(feature = "cluster")]
impl ConnectionLike for KeyRouted<'_> {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a Cmd) -> RedisFuture<'a, Value> {
        if self.key.is_empty() || !KeyRouted::is_script_load(cmd) {
            return self.conn.req_packed_command(cmd);
        }
        let route = Route::with_key(self.key.as_bytes(), SlotAddr::Master);
        let routing = RoutingInfo::SingleNode(SingleNodeRoutingInfo::SpecificNode(route));
        Box::pin(self.conn.route_command(cmd.clone(), routing))
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        pipeline: &'a redis::Pipeline,
        offset: usize,
        count: usize,
    ) -> RedisFuture<'a, Vec<Value>> {
        self.conn.req_packed_commands(pipeline, offset, count)
    }

    fn get_db(&self) -> i64 {
        self.conn.get_db()
    }
}

impl std::fmt::Debug for Backend {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Backend").field("addr", &self.addr).finish()
    }
}

impl Backend {
    fn new(conn: Conn, addr: String, options: &ConnectOptions) -> Backend {
        let id = crate::token::Token::random();
        Backend {
            conn,
            addr,
            id: id.as_str().into(),
            keeps_fences: !options.fence_memory.is_zero(),
            sharded: false,
        }
    }

    /// Whether releases keep the name's last fence (see
    /// [`ConnectOptions::fence_memory`]).
    pub(crate) fn keeps_fences(&self) -> bool {
        self.keeps_fences
    }

    /// The id in this connection's hand-off channels and queue entries.
    pub(crate) fn id(&self) -> &str {
        &self.id
    }

    /// Connects to `server` and checks it answers (and accepts the
    /// credentials). Pub/sub messages go to `on_push`.
    pub(crate) async fn connect(
        server: &Endpoint,
        options: &ConnectOptions,
        on_push: impl Fn(PushInfo) + Send + Sync + 'static,
    ) -> Result<Backend> {
        let on_push: OnPush = Arc::new(on_push);
        #[cfg(leasehold_sim)]
        if let Endpoint::Url(url) = server
            && let Some(wire) = crate::sim::dial(url, options.command_timeout, Arc::clone(&on_push))
        {
            return Backend::simulated(url, wire, options).await;
        }
        let info = match server {
            Endpoint::Url(url) => parse_url(url, options)?,
            Endpoint::Info(info) => {
                checked_info((**info).clone(), options, &info.addr().to_string())?
            }
            Endpoint::Invalid(why) => {
                return Err(Error::InvalidArgument(format!(
                    "ClientBuilder::connection_info: {why}"
                )));
            }
        };
        let (client, pushes, addr) = prepare(info, options, on_push)?;
        let manager = ConnectionManager::new_with_config(client, pushes.config(options))
            .await
            .map_err(|e| Error::from_redis(e, &addr, ""))?;
        let backend = Backend::new(single(addr.clone(), manager, &pushes), addr, options);
        backend.check_server().await?;
        Ok(backend)
    }

    /// Like [`Backend::connect`], but a server that cannot be reached now
    /// still gives a backend, which connects when first used; the error is
    /// returned beside it. For Redlock, where a minority of nodes may be down.
    pub(crate) async fn connect_tolerant(
        url: &str,
        options: &ConnectOptions,
        on_push: impl Fn(PushInfo) + Send + Sync + 'static,
    ) -> Result<(Backend, Option<Error>)> {
        let on_push: OnPush = Arc::new(on_push);
        #[cfg(leasehold_sim)]
        if let Some(wire) = crate::sim::dial(url, options.command_timeout, Arc::clone(&on_push)) {
            return Backend::simulated(url, wire, options)
                .await
                .map(|b| (b, None));
        }
        let (client, pushes, addr) = prepare(parse_url(url, options)?, options, on_push)?;
        let config = pushes.config(options);
        match ConnectionManager::new_with_config(client.clone(), config.clone()).await {
            Ok(manager) => {
                let backend = Backend::new(single(addr.clone(), manager, &pushes), addr, options);
                backend.check_server().await?;
                Ok((backend, None))
            }
            Err(e) => match Error::from_redis(e, &addr, "") {
                e @ Error::Unreachable { .. } => {
                    let manager = ConnectionManager::new_lazy_with_config(client, config)
                        .map_err(|e| Error::from_redis(e, &addr, ""))?;
                    let backend =
                        Backend::new(single(addr.clone(), manager, &pushes), addr, options);
                    Ok((backend, Some(e)))
                }
                e => Err(e),
            },
        }
    }

    /// Connects to a Redis Cluster through any of its nodes (`urls`); the
    /// driver discovers the rest and follows slot moves and failovers.
    #[cfg(feature = "cluster")]
    pub(crate) async fn connect_cluster(
        urls: &[String],
        options: &ConnectOptions,
        on_push: impl Fn(PushInfo) + Send + Sync + 'static,
    ) -> Result<Backend> {
        let infos = urls
            .iter()
            .map(|url| parse_url(url, options))
            .collect::<Result<Vec<_>>>()?;
        let addr = format!(
            "cluster {}",
            infos
                .iter()
                .map(|i| i.addr().to_string())
                .collect::<Vec<_>>()
                .join(",")
        );
        // No push sender: the driver then tracks no subscriptions and never
        // resends them on this connection (see `subscriber`).
        #[cfg_attr(not(any(feature = "tls", leasehold_sim)), allow(unused_mut))]
        let mut builder = redis::cluster::ClusterClientBuilder::new(infos.clone())
            .use_protocol(redis::ProtocolVersion::RESP3)
            .connection_timeout(options.command_timeout)
            .response_timeout(options.command_timeout)
            .retries(3);
        // Without `tls`, `parse_url` refused every TLS URL.
        #[cfg(feature = "tls")]
        if infos
            .iter()
            .any(|i| matches!(i.addr(), redis::ConnectionAddr::TcpTls { .. }))
        {
            builder = builder.certs(options.tls.certificates());
        }
        // The simulator pins the back-off's jitter (drawn from the seed):
        // the driver draws it from the thread's own random source.
        #[cfg(leasehold_sim)]
        {
            let wait = crate::sim::retry_wait_ms();
            builder = builder.min_retry_wait(wait).max_retry_wait(wait);
        }
        let client = builder
            .build()
            .map_err(|e| Error::from_redis(e, &addr, ""))?;
        #[cfg(not(leasehold_sim))]
        let conn = client.get_async_connection().await;
        #[cfg(leasehold_sim)]
        let conn = client
            .get_async_generic_connection::<crate::sim::NodeConn>()
            .await;
        let conn = conn.map_err(|e| Error::from_redis(e, &addr, ""))?;
        let sharded = sharded_pubsub(&conn, &addr).await;
        let mode = if sharded {
            subscriber::Mode::Sharded
        } else {
            subscriber::Mode::Broadcast
        };
        let subscriber = subscriber::Subscriber::start(
            mode,
            infos,
            options.clone(),
            Arc::new(on_push),
            conn.clone(),
        );
        let mut backend = Backend::new(Conn::Cluster(conn, subscriber), addr, options);
        backend.sharded = sharded;
        backend.check_server().await?;
        Ok(backend)
    }

    /// Connects to the master the sentinels name for `target`, and follows
    /// it through failovers.
    #[cfg(feature = "sentinel")]
    pub(crate) async fn connect_sentinel(
        target: SentinelTarget,
        options: &ConnectOptions,
        on_push: impl Fn(PushInfo) + Send + Sync + 'static,
    ) -> Result<Backend> {
        let addr = format!("sentinel master {:?}", target.master_name);
        let deadline = tokio::time::Instant::now().checked_add(target.failover_wait);
        let followed =
            sentinel::Followed::connect(target, options.clone(), Arc::new(on_push)).await?;
        let backend = Backend::new(Conn::Sentinel(followed), addr, options);
        // The master confirmed above may die before this first command (a
        // kill -9 during a connect): the failed command has the follower ask
        // the sentinels again, and the check is tried again on the master
        // they name, within the same `failover_wait`.
        loop {
            match backend.check_server().await {
                Err(e)
                    if e.is_transient()
                        && deadline.is_none_or(|d| {
                            tokio::time::Instant::now() + sentinel::RIDE_THROUGH_EVERY < d
                        }) =>
                {
                    tracing::debug!(error = %e, "the master died as it was confirmed; asking again");
                    tokio::time::sleep(sentinel::RIDE_THROUGH_EVERY).await;
                }
                Err(e) => return Err(e),
                Ok(()) => return Ok(backend),
            }
        }
    }

    /// A backend on the simulator's wire (`--cfg leasehold_sim` only).
    #[cfg(leasehold_sim)]
    async fn simulated(
        url: &str,
        wire: std::result::Result<Arc<dyn crate::sim::Wire>, redis::RedisError>,
        options: &ConnectOptions,
    ) -> Result<Backend> {
        let wire = wire.map_err(|e| Error::from_redis(e, url, ""))?;
        let backend = Backend::new(Conn::Sim(wire), url.to_owned(), options);
        backend.check_server().await?;
        Ok(backend)
    }

    /// The server's address, for messages (never includes credentials).
    pub(crate) fn addr(&self) -> &str {
        &self.addr
    }

    fn live(&self) -> Live {
        match &self.conn {
            Conn::Single(m, _) => Live::Single(m.clone()),
            #[cfg(feature = "cluster")]
            Conn::Cluster(c, _) => Live::Cluster(c.clone()),
            #[cfg(feature = "sentinel")]
            Conn::Sentinel(f) => Live::Single(f.current()),
            #[cfg(leasehold_sim)]
            Conn::Sim(w) => Live::Sim(Arc::clone(w)),
        }
    }

    /// Maps a driver error, and tells a Sentinel follower that its master
    /// may have changed.
    fn error(&self, e: redis::RedisError, key: &str) -> Error {
        let e = Error::from_redis(e, &self.addr, key);
        self.note(&e);
        e
    }

    /// Tells a Sentinel follower that its master may have changed, if `e`
    /// says the server could not be reached.
    fn note(&self, e: &Error) {
        #[cfg(feature = "sentinel")]
        if let (Conn::Sentinel(f), Error::Unreachable { .. }) = (&self.conn, e) {
            f.suspect();
        }
        #[cfg(not(feature = "sentinel"))]
        let _ = e;
    }

    /// Refuses servers older than Redis 6.2 (see [`supported`]), and warns
    /// when the eviction policy could evict lock keys.
    async fn check_server(&self) -> Result<()> {
        // The default sections (both `server` and `memory` among them): Redis
        // 6.2 answers a syntax error to INFO with more than one section.
        let reply: Value = match self.query(&redis::cmd("INFO"), "").await {
            Ok(reply) => reply,
            // A least-privilege user may not run INFO; the scripts will tell.
            Err(Error::Auth { source }) if source.code() == Some("NOPERM") => return Ok(()),
            Err(e) => return Err(e),
        };
        // A cluster answers with one INFO per master.
        let infos: Vec<Value> = match reply {
            Value::Map(per_node) => per_node.into_iter().map(|(_, info)| info).collect(),
            one => vec![one],
        };
        for info in infos {
            let info = String::from_redis_value(info).map_err(|e| Error::Redis(e.into()))?;
            supported(&info_field(&info, "redis_version"), &self.addr)?;
            let policy = info_field(&info, "maxmemory_policy");
            if evicts_lock_keys(&policy) {
                tracing::warn!(
                    addr = %self.addr,
                    %policy,
                    "maxmemory-policy may evict lock keys when memory runs out, which frees a \
                     held lock early; use noeviction (or volatile-* with care: lock keys have \
                     a TTL)"
                );
            }
        }
        Ok(())
    }

    /// Runs a script (EVALSHA, loading it on NOSCRIPT). `key` names the key
    /// reported if the server answers WRONGTYPE.
    pub(crate) async fn invoke<T: FromRedisValue>(
        &self,
        invocation: &ScriptInvocation<'_>,
        key: &str,
    ) -> Result<T> {
        #[cfg(feature = "cluster")]
        if let Live::Cluster(conn) = self.live() {
            let mut routed = KeyRouted {
                conn: conn.clone(),
                key,
            };
            return match invocation.invoke_async(&mut routed).await {
                // Loaded where the driver's slot map put the key, but run
                // where the slot is now (a failover moved it, on Redis 6.2
                // seen in cluster_reshard's failover test): load it on every
                // master, as the driver does. NOSCRIPT means it never ran, so
                // running it again is safe.
                Err(e)
                    if e.kind() == redis::ErrorKind::Server(redis::ServerErrorKind::NoScript) =>
                {
                    let mut conn = conn;
                    invocation
                        .invoke_async(&mut conn)
                        .await
                        .map_err(|e| self.error(e, key))
                }
                other => other.map_err(|e| self.error(e, key)),
            };
        }
        let mut conn = self.live();
        invocation
            .invoke_async(&mut conn)
            .await
            .map_err(|e| self.error(e, key))
    }

    /// Runs one command.
    pub(crate) async fn query<T: FromRedisValue>(&self, cmd: &redis::Cmd, key: &str) -> Result<T> {
        let mut conn = self.live();
        cmd.query_async(&mut conn)
            .await
            .map_err(|e| self.error(e, key))
    }

    /// Runs one command on every node (a cluster's masters and replicas)
    /// and gives each node's reply; on one server, its one reply. For
    /// counters a cluster adds up: the driver's own adding up expects
    /// RESP2 arrays where RESP3 servers answer maps.
    pub(crate) async fn query_each_node<T: FromRedisValue>(
        &self,
        cmd: &redis::Cmd,
    ) -> Result<Vec<T>> {
        match self.live() {
            #[cfg(feature = "cluster")]
            Live::Cluster(mut c) => {
                let every_node = RoutingInfo::MultiNode((MultipleNodeRoutingInfo::AllNodes, None));
                let reply = c
                    .route_command(cmd.clone(), every_node)
                    .await
                    .map_err(|e| self.error(e, ""))?;
                let Value::Map(per_node) = reply else {
                    return Err(Error::Unsupported(format!(
                        "the cluster answered {reply:?} for one reply per node"
                    )));
                };
                per_node
                    .into_iter()
                    .map(|(_, reply)| {
                        let reply = reply.extract_error().map_err(|e| self.error(e, ""))?;
                        T::from_redis_value(reply).map_err(|e| self.error(e.into(), ""))
                    })
                    .collect()
            }
            mut live => Ok(vec![
                cmd.query_async(&mut live)
                    .await
                    .map_err(|e| self.error(e, ""))?,
            ]),
        }
    }

    /// `WAIT replicas timeout` on the connection (and, on a cluster, the
    /// master) that wrote `key`: how many replicas acknowledged every write
    /// made so far.
    pub(crate) async fn wait_replicas(
        &self,
        key: &str,
        replicas: usize,
        timeout: Duration,
    ) -> Result<usize> {
        let mut cmd = redis::cmd("WAIT");
        cmd.arg(replicas)
            .arg(u64::try_from(timeout.as_millis()).unwrap_or(u64::MAX));
        match self.live() {
            #[cfg(feature = "cluster")]
            Live::Cluster(mut c) => {
                let route = Route::with_key(key.as_bytes(), SlotAddr::Master);
                let routing = RoutingInfo::SingleNode(SingleNodeRoutingInfo::SpecificNode(route));
                let value = c
                    .route_command(cmd, routing)
                    .await
                    .map_err(|e| self.error(e, key))?;
                usize::from_redis_value(value).map_err(|e| self.error(e.into(), key))
            }
            mut live => cmd
                .query_async(&mut live)
                .await
                .map_err(|e| self.error(e, key)),
        }
    }

    /// Every key matching the glob `pattern` whose type is `kind`, by SCAN
    /// (never KEYS, which blocks the server); on a cluster, on every master.
    /// Sorted, without repeats.
    pub(crate) async fn scan(&self, pattern: &str, kind: &str) -> Result<Vec<String>> {
        // Each SCAN runs to its end in a loop of its own. (A page function
        // taking `&Cmd`, shared by the two, made every future above it
        // not Send: `Client::list`, tests/send_sync.rs.)
        let mut keys = Vec::new();
        match self.live() {
            #[cfg(feature = "cluster")]
            Live::Cluster(mut c) => {
                for slot in self.one_slot_per_master(&mut c).await? {
                    let route = Route::new(slot, SlotAddr::Master);
                    let routing =
                        RoutingInfo::SingleNode(SingleNodeRoutingInfo::SpecificNode(route));
                    let mut cursor = 0;
                    loop {
                        let cmd = scan_command(cursor, pattern, kind);
                        let reply = c.route_command(cmd, routing.clone()).await;
                        cursor = self.scan_page(reply, &mut keys)?;
                        if cursor == 0 {
                            break;
                        }
                    }
                }
            }
            mut live => {
                let mut cursor = 0;
                loop {
                    let reply = scan_command(cursor, pattern, kind)
                        .query_async(&mut live)
                        .await;
                    cursor = self.scan_page(reply, &mut keys)?;
                    if cursor == 0 {
                        break;
                    }
                }
            }
        }
        keys.sort();
        keys.dedup();
        Ok(keys)
    }

    /// Adds the keys of one SCAN reply to `keys`; the next cursor (0: done).
    fn scan_page(&self, reply: redis::RedisResult<Value>, keys: &mut Vec<String>) -> Result<u64> {
        let reply = reply.map_err(|e| self.error(e, ""))?;
        let (next, batch): (u64, Vec<String>) =
            FromRedisValue::from_redis_value(reply).map_err(|e| self.error(e.into(), ""))?;
        keys.extend(batch);
        Ok(next)
    }

    /// The first slot of each master's first range (`CLUSTER SLOTS`): a
    /// route to every master, one each.
    #[cfg(feature = "cluster")]
    async fn one_slot_per_master(&self, c: &mut ClusterConnection) -> Result<Vec<u16>> {
        let ranges: Vec<Value> = redis::cmd("CLUSTER")
            .arg("SLOTS")
            .query_async(c)
            .await
            .map_err(|e| self.error(e, ""))?;
        let mut masters = HashSet::new();
        let mut slots = Vec::new();
        for range in ranges {
            let Value::Array(range) = range else { continue };
            let (Some(Value::Int(start)), Some(Value::Array(master))) =
                (range.first(), range.get(2))
            else {
                continue;
            };
            let address = (master.first().cloned(), master.get(1).cloned());
            if let Ok(slot) = u16::try_from(*start)
                && masters.insert(format!("{address:?}"))
            {
                slots.push(slot);
            }
        }
        Ok(slots)
    }

    /// Subscribes the shared connection to an exact channel (never a pattern).
    pub(crate) async fn subscribe(&self, channel: &str) -> Result<()> {
        match &self.conn {
            Conn::Single(_, m) => m.subscribe(channel).await,
            // At the channel's master (sharded pub/sub), or on any one node
            // (a PUBLISH reaches every node over the cluster bus).
            #[cfg(feature = "cluster")]
            Conn::Cluster(_, s) => s.subscribe(channel).await,
            #[cfg(feature = "sentinel")]
            Conn::Sentinel(f) => f.subscribe(channel).await,
            #[cfg(leasehold_sim)]
            Conn::Sim(w) => w
                .subscribe(channel)
                .await
                .map_err(|e| Error::from_redis(e, &self.addr, "")),
        }
        .inspect_err(|e| self.note(e))
    }

    /// A Redlock node's subscription: as [`subscribe`](Self::subscribe),
    /// but a node that cannot be reached now is subscribed once it is back
    /// (until [`forget`](Self::forget) or an unsubscribe).
    pub(crate) async fn subscribe_or_later(&self, channel: &str) -> Result<()> {
        match &self.conn {
            Conn::Single(_, m) => m
                .subscribe_or_later(channel)
                .await
                .inspect_err(|e| self.note(e)),
            #[cfg(feature = "cluster")]
            Conn::Cluster(..) => self.subscribe(channel).await,
            #[cfg(feature = "sentinel")]
            Conn::Sentinel(_) => self.subscribe(channel).await,
            #[cfg(leasehold_sim)]
            Conn::Sim(_) => self.subscribe(channel).await,
        }
    }

    /// Drops a channel [`subscribe_or_later`](Self::subscribe_or_later)
    /// kept wanted, sending nothing.
    pub(crate) fn forget(&self, channel: &str) {
        match &self.conn {
            Conn::Single(_, m) => m.forget(channel),
            #[cfg(feature = "cluster")]
            Conn::Cluster(..) => {}
            #[cfg(feature = "sentinel")]
            Conn::Sentinel(_) => {}
            #[cfg(leasehold_sim)]
            Conn::Sim(_) => {}
        }
    }

    /// Ends a subscription made by [`Backend::subscribe`].
    pub(crate) async fn unsubscribe(&self, channel: &str) -> Result<()> {
        match &self.conn {
            Conn::Single(_, m) => m.unsubscribe(channel).await,
            #[cfg(feature = "cluster")]
            Conn::Cluster(_, s) => s.unsubscribe(channel).await,
            #[cfg(feature = "sentinel")]
            Conn::Sentinel(f) => f.unsubscribe(channel).await,
            #[cfg(leasehold_sim)]
            Conn::Sim(w) => w
                .unsubscribe(channel)
                .await
                .map_err(|e| Error::from_redis(e, &self.addr, "")),
        }
        .inspect_err(|e| self.note(e))
    }

    /// Whether release messages go by SPUBLISH (scripts) and SSUBSCRIBE
    /// (subscriptions), so that a cluster delivers each to its channel's
    /// shard only; false on one server, Sentinel, and a cluster without it.
    pub(crate) fn sharded_pubsub(&self) -> bool {
        self.sharded
    }

    /// Whether keys of different hash slots may live on different servers
    /// (then one call may only touch keys of one slot).
    pub(crate) fn is_cluster(&self) -> bool {
        #[cfg(feature = "cluster")]
        return matches!(self.conn, Conn::Cluster(..));
        #[cfg(not(feature = "cluster"))]
        false
    }
}

/// Says, per master, whether the server has SPUBLISH, SSUBSCRIBE and
/// SUNSUBSCRIBE and lets this user run them: `redis.acl_check_cmd` exists
/// from Redis 7.0 (and Valkey), as sharded pub/sub does. Lua's true is 1.
#[cfg(feature = "cluster")]
const SHARDED_PUBSUB_PROBE: &str = "return redis.acl_check_cmd('spublish') \
    and redis.acl_check_cmd('ssubscribe') and redis.acl_check_cmd('sunsubscribe')";

/// Whether the cluster's release messages can go by SPUBLISH and
/// SSUBSCRIBE: every master answers [`SHARDED_PUBSUB_PROBE`] with yes.
/// Asked once at connect; otherwise (Redis 6, an ACL user without those
/// commands, a master that did not answer) they go by PUBLISH, which the
/// cluster forwards to every node.
#[cfg(feature = "cluster")]
async fn sharded_pubsub(conn: &ClusterConnection, addr: &str) -> bool {
    let mut probe = redis::cmd("EVAL");
    probe.arg(SHARDED_PUBSUB_PROBE).arg(0);
    let every_master = RoutingInfo::MultiNode((MultipleNodeRoutingInfo::AllMasters, None));
    let answers = match conn.clone().route_command(probe, every_master).await {
        Ok(Value::Map(per_master)) => per_master,
        other => {
            tracing::info!(%addr, reply = ?other, "release messages go by PUBLISH to every node: \
                cannot tell whether the masters have sharded pub/sub");
            return false;
        }
    };
    let refused: Vec<String> = answers
        .iter()
        .filter(|(_, answer)| *answer != Value::Int(1))
        .map(|(node, answer)| format!("{node:?}: {answer:?}"))
        .collect();
    if answers.is_empty() || !refused.is_empty() {
        tracing::info!(%addr, ?refused, "release messages go by PUBLISH to every node: some \
            master lacks sharded pub/sub (Redis or Valkey 7+) or does not let this user run \
            SPUBLISH, SSUBSCRIBE and SUNSUBSCRIBE");
        return false;
    }
    tracing::debug!(%addr, "release messages go by SPUBLISH to their shard");
    true
}

/// The oldest Redis the scripts run on: 6.2 brought `SET .. GET`, `PXAT`
/// and `ZRANGE .. BYSCORE`, which they use. Valkey reports the Redis version
/// it is compatible with (7.2.4 for Valkey 8).
const OLDEST_SUPPORTED: (u32, u32) = (6, 2);

/// Refuses a server whose `redis_version` (from INFO) is older than
/// [`OLDEST_SUPPORTED`], naming both. A version it cannot read is let
/// through: the scripts will say what fails.
fn supported(version: &str, addr: &str) -> Result<()> {
    let mut parts = version.split('.').map(|p| p.parse::<u32>());
    let (Some(Ok(major)), Some(Ok(minor))) = (parts.next(), parts.next()) else {
        return Ok(());
    };
    if (major, minor) < OLDEST_SUPPORTED {
        let (want_major, want_minor) = OLDEST_SUPPORTED;
        return Err(Error::Unsupported(format!(
            "Redis {version} at {addr}: leasehold needs Redis {want_major}.{want_minor} or newer"
        )));
    }
    Ok(())
}

/// The value of `name` in an INFO text, empty if absent.
fn info_field(info: &str, name: &str) -> String {
    info.lines()
        .find_map(|l| l.strip_prefix(name)?.strip_prefix(':'))
        .unwrap_or("")
        .trim()
        .to_owned()
}

/// Whether a `maxmemory-policy` may evict keys that have a TTL (every lock
/// key has one).
fn evicts_lock_keys(policy: &str) -> bool {
    !policy.is_empty() && policy != "noeviction"
}

/// The client for `url` (RESP3, so pub/sub rides on the command
/// connection) and the push routing of its manager.
fn prepare(
    info: ConnectionInfo,
    options: &ConnectOptions,
    on_push: OnPush,
) -> Result<(redis::Client, Pushes, String)> {
    let addr = info.addr().to_string();
    let client = open_client(info, options)?;
    Ok((client, Pushes::new(on_push), addr))
}

/// A one-server connection: commands on `manager`, subscriptions kept and
/// sent again after each reconnect by a [`Managed`].
fn single(addr: String, manager: ConnectionManager, pushes: &Pushes) -> Conn {
    Conn::Single(manager.clone(), Managed::start(addr, manager, pushes))
}

/// One page of `SCAN cursor MATCH pattern COUNT 1000 TYPE kind`.
fn scan_command(cursor: u64, pattern: &str, kind: &str) -> redis::Cmd {
    let mut cmd = redis::cmd("SCAN");
    cmd.arg(cursor)
        .arg("MATCH")
        .arg(pattern)
        .arg("COUNT")
        .arg(1000)
        .arg("TYPE")
        .arg(kind);
    cmd
}

#[cfg(test)]
mod tests {
    use super::{evicts_lock_keys, is_tls_url, redact_url, supported};
    use crate::error::Error;

    #[test]
    fn servers_from_redis_6_2_are_supported_and_older_ones_named() {
        for ok in ["6.2.0", "6.2.14", "7.0.15", "7.2.4", "8.0.2", "10.0.0", ""] {
            assert!(supported(ok, "127.0.0.1:1").is_ok(), "{ok}");
        }
        for old in ["6.0.16", "5.0.7", "6.1.0"] {
            let Err(Error::Unsupported(message)) = supported(old, "127.0.0.1:1") else {
                panic!("{old} was let through");
            };
            assert_eq!(
                message,
                format!("Redis {old} at 127.0.0.1:1: leasehold needs Redis 6.2 or newer")
            );
        }
    }

    #[test]
    fn tls_urls_are_told_by_their_scheme() {
        assert!(is_tls_url("rediss://h:1"));
        assert!(is_tls_url("REDISS://u:p@h:1/0"));
        assert!(is_tls_url("valkeys://h:1"));
        assert!(!is_tls_url("redis://h:1"));
        assert!(!is_tls_url("redis://rediss:1"));
        assert!(!is_tls_url("h:1"));
    }

    #[cfg(not(feature = "tls"))]
    #[tokio::test]
    async fn a_tls_url_without_the_tls_feature_names_the_feature() {
        let options = super::ConnectOptions {
            command_timeout: std::time::Duration::from_secs(1),
            ..Default::default()
        };
        let server = super::Endpoint::Url("rediss://:secret@127.0.0.1:1".into());
        let err = super::Backend::connect(&server, &options, |_| {})
            .await
            .expect_err("no TLS in this build");
        let message = err.to_string();
        assert!(
            matches!(err, crate::error::Error::Unsupported(_)) && message.contains("`tls` feature"),
            "{message}"
        );
        assert!(!message.contains("secret"), "{message}");
    }

    #[test]
    fn passwords_never_reach_messages() {
        assert_eq!(redact_url("redis://:secret@h:1"), "redis://:***@h:1");
        assert_eq!(redact_url("redis://u:secret@h:1/0"), "redis://u:***@h:1/0");
        assert_eq!(redact_url("redis://h:1"), "redis://h:1");
    }

    #[test]
    fn only_noeviction_keeps_lock_keys_safe() {
        assert!(!evicts_lock_keys("noeviction"));
        assert!(!evicts_lock_keys(""));
        for policy in [
            "allkeys-lru",
            "volatile-lru",
            "volatile-ttl",
            "allkeys-random",
        ] {
            assert!(evicts_lock_keys(policy), "{policy}");
        }
    }
}
