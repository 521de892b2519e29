//! The simulation seam: built only with `--cfg leasehold_sim` (`scripts/sim`),
//! never in a build a user links, and not part of the public API.
//!
//! The seam is the socket. A simulator installs a [`Dialer`] on its thread
//! ([`install_sockets`]); every connection the library makes to a Redis
//! node then opens a byte stream ([`Socket`]) through
//! [`Dialer::dial_socket`] for the address it dials, instead of a TCP
//! connection, and speaks RESP to the simulated node over it (RESP in,
//! RESP3 out). Everything above the socket is the shipped code: for one
//! server, a Replicated master and each Redlock node, the backend's own
//! connect path (`parse_url`, the connection manager, `Managed`'s
//! resubscriptions) over redis-rs's `MultiplexedConnection`; for a Sentinel
//! master, the library's Sentinel code over the same; for a Redis Cluster,
//! redis-rs's own async cluster connection over [`NodeConn`]s. Above them,
//! the primitives, the wait loop, watchdog, events, Redlock and `close()`.
//! Tokens and jitter are drawn from the simulator's seed ([`seed_random`])
//! so a schedule replays bit for bit.
//!
//! The connection manager is the one driver part modelled rather than run
//! as shipped: redis-rs's `ConnectionManager` dials TCP itself and cannot
//! be handed a socket, so the simulation build's is [`ConnectionManager`],
//! a model of redis-rs 1.8's over the same multiplexed connection; a
//! differential test (`crates/leasehold-sim/tests/manager_differential.rs`)
//! holds it equal to redis-rs's against a real server through a proxy that
//! drops connections.
//!
//! A cluster's driver randomness: the retry back-off's jitter is pinned
//! (its lower and upper bound drawn from the seed, see
//! `backend::connect_cluster`), and a random node for a keyless command is
//! not used (every command the library sends a cluster names a key or its
//! nodes).
//!
//! The older, library-level seam is kept for the regression seeds found on
//! it (the simulator's `--set seam=wire`): with a [`Dialer`] installed by
//! [`install`], a URL `sim://<name>` connects through [`Dialer::dial`]
//! instead of the driver, and every command, pipeline, subscription and
//! push frame of that connection crosses a [`Wire`].

use std::cell::RefCell;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

pub use redis::{Cmd, PushInfo, RedisError, Value};

/// What every acquisition, renewal and extend asks the server for beyond a
/// lease's TTL and `lock_delay` (`lease::server_ttl`; kept in `clock.rs`, which imports nothing of the
/// crate, so this seam adds no import circle): the checker knows a
/// lease taken with `lock_delay` by the TTL its first attempt asked for.
pub const SERVER_TICK: Duration = crate::clock::SERVER_TICK;

/// A boxed future of the wire.
pub type WireFuture<T> = Pin<Box<dyn Future<Output = T> + Send>>;

/// One simulated connection to one server.
pub trait Wire: Send + Sync {
    /// Sends one command; the reply, a server error as `Err`, or a lost
    /// connection / timeout as an I/O error.
    fn request(&self, cmd: &Cmd) -> WireFuture<Result<Value, RedisError>>;
    /// Sends commands as one pipeline (not MULTI): one reply per command,
    /// server errors among them as `Value::ServerError`.
    fn pipeline(&self, cmds: Vec<Cmd>) -> WireFuture<Result<Vec<Value>, RedisError>>;
    /// Subscribes the connection to `channel` (kept across its reconnects).
    fn subscribe(&self, channel: &str) -> WireFuture<Result<(), RedisError>>;
    /// Ends that subscription.
    fn unsubscribe(&self, channel: &str) -> WireFuture<Result<(), RedisError>>;
}

/// Where pushes of a connection go (release messages, disconnections).
pub type OnPush = Arc<dyn Fn(PushInfo) + Send + Sync>;

/// Makes the simulated sockets of every address, and the wire connections
/// of `sim://` URLs (the older seam).
pub trait Dialer {
    /// Connects to the server `name` with each reply bounded by
    /// `command_timeout`; pushes go to `on_push`.
    fn dial(
        &self,
        name: &str,
        command_timeout: Duration,
        on_push: OnPush,
    ) -> Result<Arc<dyn Wire>, RedisError>;

    /// Opens a byte stream to the node at `host:port` (a simulated node's
    /// address: as the simulator's URLs and CLUSTER SLOTS name it), or
    /// refuses as a closed port does.
    fn dial_socket(&self, host: &str, port: u16) -> Result<Box<dyn Socket>, RedisError> {
        let _ = port;
        Err(RedisError::from(std::io::Error::new(
            std::io::ErrorKind::ConnectionRefused,
            format!("no simulated node at {host}"),
        )))
    }
}

/// A byte stream to a simulated node: what a TCP socket is to the driver.
pub trait Socket: tokio::io::AsyncRead + tokio::io::AsyncWrite + Send + Unpin {}

impl<T: tokio::io::AsyncRead + tokio::io::AsyncWrite + Send + Unpin> Socket for T {}

/// A connection to one simulated cluster node: redis-rs's multiplexed
/// connection over a [`Socket`] the installed [`Dialer`] opens. The cluster
/// driver makes one per node through [`Connect`](redis::cluster_async::Connect).
#[cfg(feature = "cluster")]
#[derive(Clone)]
pub struct NodeConn(redis::aio::MultiplexedConnection);

/// Connects redis-rs's multiplexed connection to the simulated node of
/// `info` (its handshake, HELLO and the rest, as shipped), its driver task
/// spawned on the current runtime.
pub(crate) async fn connect_node(
    info: &redis::ConnectionInfo,
    config: &redis::AsyncConnectionConfig,
) -> redis::RedisResult<redis::aio::MultiplexedConnection> {
    let (host, port) = match info.addr() {
        redis::ConnectionAddr::Tcp(host, port) => (host.clone(), *port),
        other => {
            return Err(RedisError::from(std::io::Error::new(
                std::io::ErrorKind::InvalidInput,
                format!("a simulated node has a TCP address, not {other:?}"),
            )));
        }
    };
    let socket = SOCKETS.with(|d| match &*d.borrow() {
        Some(dialer) => dialer.dial_socket(&host, port),
        None => Err(RedisError::from(std::io::Error::other(
            "no simulation dialer on this thread",
        ))),
    })?;
    let (conn, driver) = redis::aio::MultiplexedConnection::new_with_config(
        info.redis_settings(),
        socket,
        config.clone(),
    )
    .await?;
    tokio::spawn(driver);
    Ok(conn)
}

#[cfg(feature = "cluster")]
impl redis::cluster_async::Connect for NodeConn {
    fn connect_with_config<'a, T>(
        info: T,
        config: redis::AsyncConnectionConfig,
    ) -> redis::RedisFuture<'a, Self>
    where
        T: redis::IntoConnectionInfo + Send + 'a,
    {
        Box::pin(async move {
            let info = info.into_connection_info()?;
            connect_node(&info, &config).await.map(NodeConn)
        })
    }
}

#[cfg(feature = "cluster")]
impl redis::aio::ConnectionLike for NodeConn {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a Cmd) -> redis::RedisFuture<'a, Value> {
        self.0.req_packed_command(cmd)
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        pipeline: &'a redis::Pipeline,
        offset: usize,
        count: usize,
    ) -> redis::RedisFuture<'a, Vec<Value>> {
        self.0.req_packed_commands(pipeline, offset, count)
    }

    fn get_db(&self) -> i64 {
        self.0.get_db()
    }
}

thread_local! {
    static DIALER: RefCell<Option<Arc<dyn Dialer>>> = const { RefCell::new(None) };
    static SOCKETS: RefCell<Option<Arc<dyn Dialer>>> = const { RefCell::new(None) };
    static RANDOM: RefCell<Option<u64>> = const { RefCell::new(None) };
    static LEASE_IDS: std::cell::Cell<u64> = const { std::cell::Cell::new(1) };
}

/// Installs the dialer of this thread's `sim://` URLs (None: uninstall).
pub fn install(dialer: Option<Arc<dyn Dialer>>) {
    DIALER.with(|d| *d.borrow_mut() = dialer);
}

/// Installs the dialer of this thread's simulated sockets (None: uninstall),
/// for the whole schedule: a driver reconnects at any time, and the address
/// it dials names the process ([`Dialer::dial_socket`]).
pub fn install_sockets(dialer: Option<Arc<dyn Dialer>>) {
    SOCKETS.with(|d| *d.borrow_mut() = dialer);
}

/// Seeds this thread's random choices (tokens, jitter); None: the OS source.
/// Lease ids restart at 1 too, so a schedule does not depend on what ran
/// before it on this thread.
pub fn seed_random(seed: Option<u64>) {
    RANDOM.with(|r| *r.borrow_mut() = seed);
    LEASE_IDS.with(|ids| ids.set(1));
}

/// The cluster driver's wait between retries, in ms: one value per schedule
/// (the driver's jitter pinned), drawn from the seed; 10-100 ms.
#[cfg(feature = "cluster")]
pub(crate) fn retry_wait_ms() -> u64 {
    10 + (unit().unwrap_or(0.5) * 90.0) as u64
}

/// The next lease id of this thread's schedule, if it has a seed.
pub(crate) fn next_lease_id() -> Option<u64> {
    RANDOM
        .with(|r| r.borrow().is_some())
        .then(|| LEASE_IDS.with(|ids| ids.replace(ids.get() + 1)))
}

pub(crate) fn dial(
    url: &str,
    command_timeout: Duration,
    on_push: OnPush,
) -> Option<Result<Arc<dyn Wire>, RedisError>> {
    let name = url.strip_prefix("sim://")?;
    let dialer = DIALER.with(|d| d.borrow().clone())?;
    Some(dialer.dial(name, command_timeout, on_push))
}

/// Fills `bytes` from the seeded generator, if this thread has one
/// (splitmix64: fast, and every schedule of a seed draws the same values).
pub(crate) fn fill(bytes: &mut [u8]) -> bool {
    RANDOM.with(|r| {
        let mut r = r.borrow_mut();
        let Some(state) = r.as_mut() else {
            return false;
        };
        for chunk in bytes.chunks_mut(8) {
            *state = state.wrapping_add(0x9e37_79b9_7f4a_7c15);
            let mut z = *state;
            z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
            z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
            z ^= z >> 31;
            chunk.copy_from_slice(&z.to_le_bytes()[..chunk.len()]);
        }
        true
    })
}

/// A number in [0, 1) from the seeded generator, if this thread has one.
pub(crate) fn unit() -> Option<f64> {
    let mut bytes = [0u8; 8];
    fill(&mut bytes).then(|| (u64::from_le_bytes(bytes) >> 11) as f64 / (1u64 << 53) as f64)
}

/// Maps whose iteration order is the same in every run (std's default
/// hasher is seeded per process), so the client's batches and wake-ups
/// replay in the same order.
pub(crate) type HashMap<K, V> =
    std::collections::HashMap<K, V, std::hash::BuildHasherDefault<std::hash::DefaultHasher>>;
/// As [`HashMap`].
pub(crate) type HashSet<K> =
    std::collections::HashSet<K, std::hash::BuildHasherDefault<std::hash::DefaultHasher>>;

/// The simulation build's `ConnectionManager`: a model of redis-rs's (1.8),
/// whose connections it cannot open over a simulated socket (it dials TCP
/// itself). Like it, it keeps one multiplexed connection (as shipped, over a
/// [`Socket`]), gives a command's error to its caller and starts a new
/// connection when the error says the old one is gone (an I/O error, a
/// dropped connection, or its Disconnection push, which it passes on), with
/// up to `number_of_retries` more attempts, each (connect and handshake)
/// within `connection_timeout`, `min_delay` doubling up to `max_delay`
/// between them; commands sent meanwhile wait for that connection. It never sends a command again. Used where the library uses
/// the manager: one server, a Replicated master, each Redlock node
/// (`backend::Backend::connect`, `connect_tolerant`) and the Sentinel
/// master (`backend/managed.rs`, `backend/sentinel.rs`).
#[derive(Clone)]
pub struct ConnectionManager(Arc<Manager>);

struct Manager {
    info: redis::ConnectionInfo,
    config: ConnectionManagerConfig,
    /// The connection in use (or being made), and how many have been made.
    current: std::sync::Mutex<(u64, ManagedConn)>,
}

type ManagedConn = futures_util::future::Shared<
    Pin<Box<dyn Future<Output = Result<redis::aio::MultiplexedConnection, RedisError>> + Send>>,
>;

/// The settings of a [`ConnectionManager`], as redis-rs's names them.
#[derive(Clone, Default)]
pub struct ConnectionManagerConfig {
    response_timeout: Option<Duration>,
    connection_timeout: Option<Duration>,
    number_of_retries: usize,
    min_delay: Duration,
    max_delay: Duration,
    push: Option<Arc<dyn Fn(PushInfo) + Send + Sync>>,
}

impl ConnectionManagerConfig {
    /// Settings with nothing set.
    pub fn new() -> Self {
        Self {
            number_of_retries: 6,
            min_delay: Duration::from_millis(100),
            max_delay: Duration::from_secs(10),
            ..Self::default()
        }
    }
    /// Each reply's bound.
    pub fn set_response_timeout(mut self, t: Option<Duration>) -> Self {
        self.response_timeout = t;
        self
    }
    /// Each connection attempt's bound.
    pub fn set_connection_timeout(mut self, t: Option<Duration>) -> Self {
        self.connection_timeout = t;
        self
    }
    /// Attempts after the first of each new connection.
    pub fn set_number_of_retries(mut self, n: usize) -> Self {
        self.number_of_retries = n;
        self
    }
    /// The first wait between attempts.
    pub fn set_min_delay(mut self, d: Duration) -> Self {
        self.min_delay = d;
        self
    }
    /// The longest wait between attempts.
    pub fn set_max_delay(mut self, d: Duration) -> Self {
        self.max_delay = d;
        self
    }
    /// Where pushes go (messages, and Disconnection when a connection drops).
    pub fn set_push_sender<E>(
        mut self,
        sender: impl Fn(PushInfo) -> Result<(), E> + Send + Sync + 'static,
    ) -> Self {
        self.push = Some(Arc::new(move |p| {
            let _ = sender(p);
        }));
        self
    }
}

impl ConnectionManager {
    /// Connects (with the retries) to the node of `client`'s address.
    pub async fn new_with_config(
        client: redis::Client,
        config: ConnectionManagerConfig,
    ) -> Result<Self, RedisError> {
        let manager = Self::new_lazy_with_config(client, config)?;
        let first = manager
            .0
            .current
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .1
            .clone();
        first.await?;
        Ok(manager)
    }

    /// As [`ConnectionManager::new_with_config`], connecting in the background.
    pub fn new_lazy_with_config(
        client: redis::Client,
        config: ConnectionManagerConfig,
    ) -> Result<Self, RedisError> {
        let info = client.get_connection_info().clone();
        let manager = Arc::new_cyclic(|weak: &std::sync::Weak<Manager>| Manager {
            current: std::sync::Mutex::new((0, Manager::connect(weak.clone(), &info, &config))),
            info,
            config,
        });
        Ok(ConnectionManager(manager))
    }

    /// SUBSCRIBE `channels`, awaiting each one's confirmation.
    pub async fn subscribe(&mut self, channels: impl redis::ToRedisArgs) -> Result<(), RedisError> {
        self.0
            .on_connection(|mut conn| async move { conn.subscribe(channels).await })
            .await
    }

    /// UNSUBSCRIBE `channels`.
    pub async fn unsubscribe(
        &mut self,
        channels: impl redis::ToRedisArgs,
    ) -> Result<(), RedisError> {
        self.0
            .on_connection(|mut conn| async move { conn.unsubscribe(channels).await })
            .await
    }
}

impl Manager {
    /// A new connection (attempts with back-off), started at once.
    fn connect(
        manager: std::sync::Weak<Manager>,
        info: &redis::ConnectionInfo,
        config: &ConnectionManagerConfig,
    ) -> ManagedConn {
        use futures_util::FutureExt;
        let (info, config) = (info.clone(), config.clone());
        let conn_config = {
            let mut c = redis::AsyncConnectionConfig::new()
                .set_response_timeout(config.response_timeout)
                .set_connection_timeout(config.connection_timeout);
            let push = config.push.clone();
            c = c.set_push_sender(move |p: PushInfo| -> Result<(), std::convert::Infallible> {
                let dropped = p.kind == redis::PushKind::Disconnection;
                if let Some(push) = &push {
                    push(p);
                }
                if dropped && let Some(m) = manager.upgrade() {
                    let generation = m.current.lock().unwrap_or_else(|e| e.into_inner()).0;
                    m.reconnect(generation);
                }
                Ok(())
            });
            c
        };
        let attempts = async move {
            let mut delay = config.min_delay;
            let mut left = config.number_of_retries;
            loop {
                // Each attempt, connect and handshake, within the connection
                // timeout, as redis-rs's client bounds it.
                let attempt = connect_node(&info, &conn_config);
                let attempt = match config.connection_timeout {
                    Some(limit) => {
                        tokio::time::timeout(limit, attempt)
                            .await
                            .unwrap_or_else(|_| {
                                Err(RedisError::from(std::io::Error::new(
                                    std::io::ErrorKind::TimedOut,
                                    "connection timed out",
                                )))
                            })
                    }
                    None => attempt.await,
                };
                match attempt {
                    Ok(conn) => return Ok(conn),
                    Err(e) if left == 0 => return Err(e),
                    Err(_) => {
                        left -= 1;
                        tokio::time::sleep(delay).await;
                        delay = (delay * 2).min(config.max_delay);
                    }
                }
            }
        };
        let shared = attempts.boxed().shared();
        tokio::spawn(shared.clone().map(|_| ()));
        shared
    }

    fn connection(&self) -> (u64, ManagedConn) {
        self.current
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// Starts a new connection in place of connection `generation`, if that
    /// one is still in use.
    fn reconnect(self: &Arc<Self>, generation: u64) {
        let mut current = self.current.lock().unwrap_or_else(|e| e.into_inner());
        if current.0 == generation {
            *current = (
                generation + 1,
                Manager::connect(Arc::downgrade(self), &self.info, &self.config),
            );
        }
    }

    /// Runs `op` on the connection in use (waiting for it if it is being
    /// made), and starts a new one when the outcome says it is gone.
    async fn on_connection<T, Fut>(
        self: &Arc<Self>,
        op: impl FnOnce(redis::aio::MultiplexedConnection) -> Fut,
    ) -> Result<T, RedisError>
    where
        Fut: Future<Output = Result<T, RedisError>>,
    {
        let (generation, conn) = self.connection();
        let conn = self.usable(generation, conn.await)?;
        let result = op(conn).await;
        self.check(generation, &result);
        result
    }

    fn usable(
        self: &Arc<Self>,
        generation: u64,
        conn: Result<redis::aio::MultiplexedConnection, RedisError>,
    ) -> Result<redis::aio::MultiplexedConnection, RedisError> {
        if let Err(e) = &conn
            && e.is_io_error()
        {
            self.reconnect(generation);
        }
        conn
    }

    fn check<T>(self: &Arc<Self>, generation: u64, result: &Result<T, RedisError>) {
        if let Err(e) = result
            && e.is_unrecoverable_error()
        {
            self.reconnect(generation);
        }
    }
}

impl redis::aio::ConnectionLike for ConnectionManager {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a Cmd) -> redis::RedisFuture<'a, Value> {
        let manager = Arc::clone(&self.0);
        Box::pin(async move {
            manager
                .on_connection(|mut conn| async move { conn.send_packed_command(cmd).await })
                .await
        })
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        pipeline: &'a redis::Pipeline,
        offset: usize,
        count: usize,
    ) -> redis::RedisFuture<'a, Vec<Value>> {
        let manager = Arc::clone(&self.0);
        Box::pin(async move {
            manager
                .on_connection(|mut conn| async move {
                    conn.send_packed_commands(pipeline, offset, count).await
                })
                .await
        })
    }

    fn get_db(&self) -> i64 {
        self.0.info.redis_settings().db()
    }
}
