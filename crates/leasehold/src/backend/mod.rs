//! How leasehold talks to Redis. Knows nothing about locks.
//!
//! One connection per client (more on a cluster), whatever the deployment.
//! Each deployment is one type in its own file behind one trait,
//! [`DeploymentConnection`](connection::DeploymentConnection), whose
//! methods are what a [`Backend`] needs (a command, a script call, a command
//! on a key's master or on every node, SCAN over every master, subscribe,
//! unsubscribe, forget); the backend holds one as an `Arc<dyn ..>`:
//!
//! - [`single`]: one server, on a [`ConnectionManager`] (one multiplexed
//!   RESP3 socket for commands and pushes) whose subscriptions [`managed`]
//!   sends again after a reconnect;
//! - [`cluster`]: redis-rs's async cluster connection for commands, routed
//!   by key (scripts' loads and `WAIT` to their key's master, SCAN to every
//!   master), and pub/sub, sharded where every master has it, on
//!   connections of their own ([`subscriber`]);
//! - [`sentinel`]: a [`ConnectionManager`] to the master the sentinels
//!   name, resubscribed as for one server, replaced when they name another;
//! - `simulated`: the simulator's older wire (`--cfg leasehold_sim` only,
//!   and only for its `--set seam=wire`).
//!
//! TLS (`rediss://`) uses rustls with certificate verification always on;
//! [`tls`] says which crypto provider it runs on. Cluster support is
//! compiled with the `cluster` feature, Sentinel support with `sentinel`,
//! TLS with `tls`.

#[cfg(feature = "cluster")]
mod abandoned;
mod address;
#[cfg(feature = "cluster")]
mod cluster;
mod connection;
mod managed;
#[cfg(feature = "sentinel")]
mod sentinel;
#[cfg(leasehold_sim)]
mod simulated;
mod single;
#[cfg(feature = "cluster")]
mod subscriber;
#[cfg(feature = "tls")]
mod tls;

use std::sync::Arc;
use std::time::Duration;

pub use address::redact_url;
pub(crate) use address::{Credentials, Endpoint, RedactedUrls, TlsOptions};
use address::{checked_info, open_client, parse_url};
use connection::DeploymentConnection;
use managed::{ConnectionManager, Pushes};
use redis::{ConnectionInfo, FromRedisValue, PushInfo, RedisResult, ScriptInvocation, Value};

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
    conn: Arc<dyn DeploymentConnection>,
    addr: String,
    /// A random id for this connection's hand-off channels: a lease handed
    /// to one of its waiters is published on `<lock channel>:<id>`, which
    /// only this connection subscribes to, so a release wakes one process,
    /// not every process with a waiter.
    id: Arc<str>,
    /// The client keeps fences longer than their lease
    /// (`ClientBuilder::fence_memory`): releases leave the fence key be.
    keeps_fences: bool,
}

impl std::fmt::Debug for Backend {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Backend").field("addr", &self.addr).finish()
    }
}

impl Backend {
    fn new(conn: Arc<dyn DeploymentConnection>, addr: String, options: &ConnectOptions) -> Backend {
        let id = crate::token::Token::random();
        Backend {
            conn,
            addr,
            id: id.as_str().into(),
            keeps_fences: !options.fence_memory.is_zero(),
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
            && let Some(simulated) = simulated::dial(url, options, &on_push).await
        {
            return simulated;
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
        let backend = Backend::single(addr, manager, &pushes, options);
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
        if let Some(simulated) = simulated::dial(url, options, &on_push).await {
            return simulated.map(|b| (b, None));
        }
        let (client, pushes, addr) = prepare(parse_url(url, options)?, options, on_push)?;
        let config = pushes.config(options);
        match ConnectionManager::new_with_config(client.clone(), config.clone()).await {
            Ok(manager) => {
                let backend = Backend::single(addr, manager, &pushes, options);
                backend.check_server().await?;
                Ok((backend, None))
            }
            Err(e) => match Error::from_redis(e, &addr, "") {
                e @ Error::Unreachable { .. } => {
                    let manager = ConnectionManager::new_lazy_with_config(client, config)
                        .map_err(|e| Error::from_redis(e, &addr, ""))?;
                    Ok((Backend::single(addr, manager, &pushes, options), Some(e)))
                }
                e => Err(e),
            },
        }
    }

    /// A one-server backend: commands on `manager`, subscriptions kept and
    /// sent again after each reconnect.
    fn single(
        addr: String,
        manager: ConnectionManager,
        pushes: &Pushes,
        options: &ConnectOptions,
    ) -> Backend {
        let single = single::Single::new(addr.clone(), manager, pushes);
        Backend::new(Arc::new(single), addr, options)
    }

    /// Connects to a Redis Cluster through any of its nodes (`urls`); the
    /// driver discovers the rest and follows slot moves and failovers.
    #[cfg(feature = "cluster")]
    pub(crate) async fn connect_cluster(
        urls: &[String],
        options: &ConnectOptions,
        on_push: impl Fn(PushInfo) + Send + Sync + 'static,
    ) -> Result<Backend> {
        let (cluster, addr) = cluster::Cluster::connect(urls, options, Arc::new(on_push)).await?;
        let backend = Backend::new(Arc::new(cluster), addr, options);
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
        let backend = Backend::new(followed, addr, options);
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

    /// The server's address, for messages (never includes credentials).
    pub(crate) fn addr(&self) -> &str {
        &self.addr
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
        self.conn.note(e);
    }

    /// `reply` as a `T`, a reply that does not fit named as `key`'s error.
    fn read<T: FromRedisValue>(&self, reply: Value, key: &str) -> Result<T> {
        T::from_redis_value(reply).map_err(|e| self.error(e.into(), key))
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
        let reply = self
            .conn
            .invoke(invocation, key)
            .await
            .map_err(|e| self.error(e, key))?;
        self.read(reply, key)
    }

    /// Runs one command.
    pub(crate) async fn query<T: FromRedisValue>(&self, cmd: &redis::Cmd, key: &str) -> Result<T> {
        let mut conn = self.conn.commands();
        cmd.query_async(&mut conn)
            .await
            .map_err(|e| self.error(e, key))
    }

    /// Runs one command on every node (a cluster's masters and replicas)
    /// and gives each node's reply; on one server, its one reply. For
    /// counters a cluster adds up.
    pub(crate) async fn query_each_node<T: FromRedisValue>(
        &self,
        cmd: &redis::Cmd,
    ) -> Result<Vec<T>> {
        let replies = self
            .conn
            .on_every_node(cmd)
            .await
            .map_err(|e| self.error(e, ""))?
            .map_err(Error::Unsupported)?;
        replies
            .into_iter()
            .map(|reply| {
                let reply = reply.extract_error().map_err(|e| self.error(e, ""))?;
                self.read(reply, "")
            })
            .collect()
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
        let reply = self
            .conn
            .on_master_of(cmd, key)
            .await
            .map_err(|e| self.error(e, key))?;
        self.read(reply, key)
    }

    /// Every key matching the glob `pattern` whose type is `kind`, by SCAN
    /// (never KEYS, which blocks the server); on a cluster, on every master.
    /// Sorted, without repeats.
    pub(crate) async fn scan(&self, pattern: &str, kind: &str) -> Result<Vec<String>> {
        let mut keys = self
            .conn
            .scan(pattern, kind)
            .await
            .map_err(|e| self.error(e, ""))?;
        keys.sort();
        keys.dedup();
        Ok(keys)
    }

    /// Subscribes the shared connection to an exact channel (never a pattern).
    pub(crate) async fn subscribe(&self, channel: &str) -> Result<()> {
        self.conn
            .subscribe(channel)
            .await
            .inspect_err(|e| self.note(e))
    }

    /// A Redlock node's subscription: as [`subscribe`](Self::subscribe),
    /// but a node that cannot be reached now is subscribed once it is back
    /// (until [`forget`](Self::forget) or an unsubscribe).
    pub(crate) async fn subscribe_or_later(&self, channel: &str) -> Result<()> {
        self.conn
            .subscribe_or_later(channel)
            .await
            .inspect_err(|e| self.note(e))
    }

    /// Drops a channel [`subscribe_or_later`](Self::subscribe_or_later)
    /// kept wanted, sending nothing.
    pub(crate) fn forget(&self, channel: &str) {
        self.conn.forget(channel);
    }

    /// Ends a subscription made by [`Backend::subscribe`].
    pub(crate) async fn unsubscribe(&self, channel: &str) -> Result<()> {
        self.conn
            .unsubscribe(channel)
            .await
            .inspect_err(|e| self.note(e))
    }

    /// Whether release messages go by SPUBLISH (scripts) and SSUBSCRIBE
    /// (subscriptions), so that a cluster delivers each to its channel's
    /// shard only; false on one server, Sentinel, and a cluster without it.
    pub(crate) fn sharded_pubsub(&self) -> bool {
        self.conn.sharded_pubsub()
    }

    /// Whether keys of different hash slots may live on different servers
    /// (then one call may only touch keys of one slot).
    pub(crate) fn is_cluster(&self) -> bool {
        self.conn.is_cluster()
    }

    /// Waits until every request on `key` whose caller stopped waiting is
    /// done, so that a release sent now runs after them (a cluster: see
    /// `abandoned.rs`; elsewhere nothing to wait for).
    pub(crate) async fn settled(&self, key: &str) {
        self.conn.settled(key).await;
    }
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

/// Adds the keys of one SCAN reply to `keys`; the next cursor (0: done).
fn scan_page(reply: Value, keys: &mut Vec<String>) -> RedisResult<u64> {
    let (next, batch): (u64, Vec<String>) = FromRedisValue::from_redis_value(reply)?;
    keys.extend(batch);
    Ok(next)
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
    use super::address::is_tls_url;
    use super::{evicts_lock_keys, redact_url, supported};
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
