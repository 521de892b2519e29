//! The entry point: a cheap, cloneable handle to one Redis deployment.
//!
//! [`Client`] connects and makes the primitives' handles; beside it, its
//! options ([`builder`]) and the operator's tools over any name
//! ([`inspect`]: what holds it; [`break_lease`]: remove it).

use std::sync::Arc;

use crate::acquire::{Core, Flights};
#[cfg(feature = "sentinel")]
use crate::backend::SentinelTarget;
use crate::backend::{Backend, ConnectOptions};
use crate::client::builder::ClientBuilder;
use crate::error::{Error, Result};
use crate::events::{Events, Shared};
use crate::inner::Inner;
use crate::key::{glob_match, name_of_lock_key, validate_prefix};
use crate::primitives::election::Election;
use crate::primitives::fair::FairLock;
use crate::primitives::lock::{Lock, LockStatus};
use crate::primitives::multi::MultiLock;
use crate::primitives::reentrant::ReentrantLock;
use crate::primitives::rwlock::RwLock;
use crate::primitives::semaphore::Semaphore;
use crate::servers::Servers;
use crate::servers::redlock::Redlock;
use crate::servers::redlock::quorum::quorum;
use crate::watchdog::Watchdog;

pub(crate) mod break_lease;
pub(crate) mod builder;
mod inspect;

/// A connection to Redis from which locks are made.
///
/// Cheap to clone (`Arc` inside); clones share one connection, one
/// subscription for release events and one watchdog task. Needs a Tokio
/// runtime; the background tasks end when the last clone and the last guard
/// are dropped.
///
/// # Example
///
/// ```no_run
/// # async fn run() -> Result<(), leasehold::Error> {
/// let client = leasehold::Client::connect("redis://127.0.0.1:6379").await?;
/// let guard = client.lock("orders:42").acquire().await?;
/// // ... critical section, pass guard.fence() to the resource ...
/// guard.release().await?;
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct Client {
    pub(crate) inner: Arc<Inner>,
}

impl std::fmt::Debug for Client {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Client")
            .field("servers", &self.inner.servers.addrs())
            .field("prefix", &self.inner.prefix)
            .finish()
    }
}

impl Client {
    /// True once this client hears break notices (its subscription to the
    /// break channel is made: a notice that reaches it from then on loses
    /// the guards it names). Simulation builds only: the simulator judges
    /// "a break stops its holder" for guards of such clients.
    #[cfg(leasehold_sim)]
    #[doc(hidden)]
    pub fn sim_hears_breaks(&self) -> bool {
        self.inner.breaks.0.initialized()
    }

    /// Connects to one Redis server with default options.
    ///
    /// `url` is `redis://[user:password@]host:port[/db]`.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidArgument`] for a malformed URL, [`Error::Unreachable`]
    /// when the server does not answer, [`Error::Auth`] when it refuses the
    /// credentials, [`Error::Unsupported`] for Redis older than 6.2 and for
    /// a `rediss://` URL this build cannot serve (no `tls` feature, or no
    /// rustls crypto provider: see the crate docs' "Features").
    ///
    /// # Panics
    ///
    /// Outside a Tokio runtime, as [`ClientBuilder::build`].
    ///
    /// # Example
    ///
    /// ```no_run
    /// # async fn run() -> Result<(), leasehold::Error> {
    /// let client = leasehold::Client::connect("redis://127.0.0.1:6379").await?;
    /// # Ok(()) }
    /// ```
    pub async fn connect(url: &str) -> Result<Client> {
        Client::builder().url(url).build().await
    }

    /// Connects to independent Redis masters for Redlock: each lease is
    /// held while a majority of them (the quorum, N/2+1) agrees, so locks
    /// keep working while a minority of nodes is down.
    ///
    /// Give at least 3 URLs of masters that do not replicate each other.
    /// Only [`Lock`] works on a Redlock client; the other primitives need
    /// one server and say so when acquired. Waiters do not queue (queues on
    /// separate nodes could disagree): they wake on a release from any node,
    /// or retry when the holder's lease would end.
    ///
    /// Fencing tokens are best-effort here: each is the largest of the
    /// quorum's, and nodes raise theirs to their clock in µs at every
    /// acquisition, so successive holders get increasing fences as long as
    /// the nodes' clocks agree better than the time between acquisitions.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidArgument`] for fewer than 3 URLs or a malformed one;
    /// [`Error::QuorumNotReached`] when fewer than a quorum of nodes can be
    /// reached now; [`Error::Auth`] when a node refuses the credentials.
    ///
    /// # Panics
    ///
    /// Outside a Tokio runtime, as [`ClientBuilder::build`].
    ///
    /// # Example
    ///
    /// ```no_run
    /// # async fn run() -> Result<(), leasehold::Error> {
    /// let client = leasehold::Client::redlock([
    ///     "redis://127.0.0.1:7001",
    ///     "redis://127.0.0.1:7002",
    ///     "redis://127.0.0.1:7003",
    /// ])
    /// .await?;
    /// let guard = client.lock("orders:42").acquire().await?;
    /// guard.release().await?;
    /// # Ok(()) }
    /// ```
    pub async fn redlock<I, S>(urls: I) -> Result<Client>
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        Client::builder().redlock(urls).build().await
    }

    /// Connects to a Redis Cluster through any of its nodes; the rest are
    /// discovered. Every key of one lock shares a hash slot, so each
    /// operation is one call to one master; redirections (MOVED, ASK) and
    /// slot migrations are followed by the driver.
    ///
    /// Release events: where every master has sharded pub/sub (Redis or
    /// Valkey 7+) and the user may run `SPUBLISH`, `SSUBSCRIBE` and
    /// `SUNSUBSCRIBE` (asked once, at connect), a release is published with
    /// `SPUBLISH`, which the cluster bus carries only to the lock's shard
    /// (its master's replicas), and waiters subscribe at the master of the
    /// lock's slot, following it through reshards and failovers. Otherwise
    /// releases go by `PUBLISH`, which the bus forwards to every node, and
    /// the client's one subscription (on any node) hears them all. Clients
    /// of one cluster should agree: a waiter subscribed the other way than
    /// the releaser publishes falls back to its timers (give every lock
    /// user of a cluster the three commands, or none).
    ///
    /// [`Client::list`] scans every master of the cluster.
    ///
    /// Needs the `cluster` feature.
    ///
    /// # Errors
    ///
    /// As [`Client::connect`].
    ///
    /// # Panics
    ///
    /// Outside a Tokio runtime, as [`ClientBuilder::build`].
    ///
    /// # Example
    ///
    /// ```no_run
    /// # async fn run() -> Result<(), leasehold::Error> {
    /// let client = leasehold::Client::cluster(["redis://127.0.0.1:7000", "redis://127.0.0.1:7001"]).await?;
    /// let guard = client.lock("orders:42").acquire().await?;
    /// guard.release().await?;
    /// # Ok(()) }
    /// ```
    #[cfg(feature = "cluster")]
    pub async fn cluster<I, S>(urls: I) -> Result<Client>
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        Client::builder().cluster(urls).build().await
    }

    /// Connects to the master that Redis Sentinel monitors as
    /// `master_name`, and follows it through failovers: the sentinels are
    /// asked every 0.5 s (and at once after a connection error or a
    /// `READONLY` reply), and commands go only to a server that confirmed
    /// it is the master. Lock state is never read from a replica.
    ///
    /// The scheme and credentials of the first sentinel URL are used for
    /// the master too.
    ///
    /// A failover can lose a lease the old master had not yet passed to
    /// its replica; [`ClientBuilder::min_replicas`] narrows that window.
    ///
    /// Needs the `sentinel` feature.
    ///
    /// # Errors
    ///
    /// As [`Client::connect`]; [`Error::Unsupported`] when no sentinel knows
    /// `master_name`.
    ///
    /// # Panics
    ///
    /// Outside a Tokio runtime, as [`ClientBuilder::build`].
    ///
    /// # Example
    ///
    /// ```no_run
    /// # async fn run() -> Result<(), leasehold::Error> {
    /// let client = leasehold::Client::sentinel(["redis://127.0.0.1:26379"], "mymaster").await?;
    /// # Ok(()) }
    /// ```
    #[cfg(feature = "sentinel")]
    pub async fn sentinel<I, S>(sentinel_urls: I, master_name: &str) -> Result<Client>
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        Client::builder()
            .sentinel(sentinel_urls, master_name)
            .build()
            .await
    }

    /// Starts a [`ClientBuilder`] for options beyond the URL.
    ///
    /// # Example
    ///
    /// ```no_run
    /// # async fn run() -> Result<(), leasehold::Error> {
    /// use std::time::Duration;
    /// let client = leasehold::Client::builder()
    ///     .url("redis://127.0.0.1:6379")
    ///     .prefix("myapp")
    ///     .command_timeout(Duration::from_millis(500))
    ///     .build()
    ///     .await?;
    /// # Ok(()) }
    /// ```
    pub fn builder() -> ClientBuilder {
        ClientBuilder::default()
    }

    /// A handle to the lease lock `name` (not reentrant).
    ///
    /// Cheap: nothing is sent until [`Lock::acquire`] or [`Lock::try_acquire`].
    ///
    /// # Example
    ///
    /// ```no_run
    /// # async fn run(client: leasehold::Client) -> Result<(), leasehold::Error> {
    /// use std::time::Duration;
    /// let lock = client.lock("orders:42").ttl(Duration::from_secs(30)).wait(Duration::from_secs(5));
    /// let guard = lock.acquire().await?;
    /// # Ok(()) }
    /// ```
    pub fn lock(&self, name: impl Into<String>) -> Lock {
        Lock::new(Arc::clone(&self.inner), name.into())
    }

    /// A handle to several lease locks taken together, all or none: one
    /// [`MultiLockGuard`](crate::MultiLockGuard) with a fence per name. Duplicate names count
    /// once; the names are taken in sorted order, so callers asking for
    /// overlapping sets in any order cannot deadlock (see [`MultiLock`]).
    /// An empty list is refused by the acquire with
    /// [`Error::InvalidArgument`](crate::Error::InvalidArgument).
    ///
    /// Cheap: nothing is sent until [`MultiLock::acquire`] or
    /// [`MultiLock::try_acquire`].
    ///
    /// # Example
    ///
    /// ```no_run
    /// # async fn run(client: leasehold::Client) -> Result<(), leasehold::Error> {
    /// let guard = client.multi_lock(["account:7", "account:3"]).acquire().await?;
    /// assert_eq!(guard.names(), ["account:3", "account:7"]);
    /// let fence = guard.fence("account:7"); // Some(..): pass it to that account's writes
    /// guard.release().await?;
    /// # Ok(()) }
    /// ```
    pub fn multi_lock<I>(&self, names: I) -> MultiLock
    where
        I: IntoIterator,
        I::Item: Into<String>,
    {
        MultiLock::new(
            Arc::clone(&self.inner),
            names.into_iter().map(Into::into).collect(),
        )
    }

    /// A handle to the reentrant lock `name`: the same owner may acquire it
    /// again while holding it. Set the owner with
    /// [`ReentrantLock::owner`]; without one, each acquisition is its own
    /// owner (and nothing re-enters).
    ///
    /// Cheap: nothing is sent until [`ReentrantLock::acquire`] or
    /// [`ReentrantLock::try_acquire`].
    ///
    /// # Example
    ///
    /// ```no_run
    /// # async fn run(client: leasehold::Client) -> Result<(), leasehold::Error> {
    /// let lock = client.reentrant_lock("orders:42").owner("job-7");
    /// let guard = lock.acquire().await?;
    /// # Ok(()) }
    /// ```
    pub fn reentrant_lock(&self, name: impl Into<String>) -> ReentrantLock {
        ReentrantLock::new(Arc::clone(&self.inner), name.into())
    }

    /// A handle to the read-write lock `name`: many readers or one writer.
    ///
    /// Cheap: nothing is sent until [`RwLock::read`], [`RwLock::write`],
    /// [`RwLock::try_read`] or [`RwLock::try_write`].
    ///
    /// # Example
    ///
    /// ```no_run
    /// # async fn run(client: leasehold::Client) -> Result<(), leasehold::Error> {
    /// let catalog = client.rw_lock("catalog");
    /// let guard = catalog.read().await?;
    /// # Ok(()) }
    /// ```
    pub fn rw_lock(&self, name: impl Into<String>) -> RwLock {
        RwLock::new(Arc::clone(&self.inner), name.into())
    }

    /// A handle to the semaphore `name` with `permits` permits: up to that
    /// many holders at once, each permit its own lease. Every client of one
    /// semaphore must pass the same `permits` (see [`Semaphore`]).
    ///
    /// Cheap: nothing is sent until [`Semaphore::acquire`] or
    /// [`Semaphore::try_acquire`].
    ///
    /// # Example
    ///
    /// ```no_run
    /// # async fn run(client: leasehold::Client) -> Result<(), leasehold::Error> {
    /// let permit = client.semaphore("exports", 4).acquire().await?;
    /// # Ok(()) }
    /// ```
    pub fn semaphore(&self, name: impl Into<String>, permits: u32) -> Semaphore {
        Semaphore::new(Arc::clone(&self.inner), name.into(), permits)
    }

    /// A handle to the fair lock `name`: the lease lock, with waiters served
    /// in arrival order (see [`FairLock`]).
    ///
    /// Cheap: nothing is sent until [`FairLock::acquire`] or
    /// [`FairLock::try_acquire`].
    ///
    /// # Example
    ///
    /// ```no_run
    /// # async fn run(client: leasehold::Client) -> Result<(), leasehold::Error> {
    /// let guard = client.fair_lock("payouts").acquire().await?;
    /// # Ok(()) }
    /// ```
    pub fn fair_lock(&self, name: impl Into<String>) -> FairLock {
        FairLock::new(Arc::clone(&self.inner), name.into())
    }

    /// A handle to the leader election `name` (see [`Election`]): the lease
    /// lock `name` with the leader's value beside it.
    ///
    /// Cheap: nothing is sent until [`Election::campaign`],
    /// [`Election::leader`] or [`Election::observe`]. Not on a Redlock
    /// client ([`Error::Unsupported`](crate::Error::Unsupported)).
    ///
    /// # Example
    ///
    /// ```no_run
    /// # async fn run(client: leasehold::Client) -> Result<(), leasehold::Error> {
    /// let leadership = client.election("scheduler").campaign("host-a").await?;
    /// # Ok(()) }
    /// ```
    pub fn election(&self, name: impl Into<String>) -> Election {
        Election::new(Arc::clone(&self.inner), name.into())
    }

    /// The locks currently held under this client's prefix whose names match
    /// the glob `pattern` (`*` and `?`), sorted by name. Uses SCAN, which
    /// does not block the server; a lock taken or released during the scan
    /// may or may not appear.
    ///
    /// # Errors
    ///
    /// Connection errors.
    ///
    /// # Example
    ///
    /// ```no_run
    /// # async fn run(client: leasehold::Client) -> Result<(), leasehold::Error> {
    /// for status in client.list("orders:*").await? {
    ///     println!("{} {:?}", status.name, status.remaining);
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn list(&self, pattern: &str) -> Result<Vec<LockStatus>> {
        let prefix = &self.inner.prefix;
        // Every master of a cluster, a quorum of Redlock nodes; status then
        // asks the quorum.
        let keys = self
            .inner
            .servers
            .scan(&format!("{prefix}:{{*:lock"), "string")
            .await?;
        let mut out = Vec::new();
        for key in keys {
            let Some(name) = name_of_lock_key(prefix, &key) else {
                continue;
            };
            if !glob_match(pattern, &name) {
                continue;
            }
            let status = self.lock(name).status().await?;
            if status.holder.is_some() {
                out.push(status);
            }
        }
        out.sort_by(|a, b| a.name.cmp(&b.name));
        Ok(out)
    }

    /// The key prefix every key and channel of this client starts with.
    pub fn prefix(&self) -> &str {
        &self.inner.prefix
    }

    /// Gives back every lease this client (and every clone of it) holds,
    /// finishes the releases of guards dropped earlier, sends again every
    /// release made in the background that failed (a dropped guard's, a
    /// cancelled acquisition's) while its hold may still be on the server,
    /// and stops renewing; returns once Redis has answered them all. Call it before a program
    /// ends: a guard dropped as `main` returns is released by a background
    /// task that the runtime's shutdown stops, which leaves its lock held
    /// until the TTL runs out.
    ///
    /// Afterwards the client takes no more locks ([`Error::Closed`]): callers
    /// waiting to acquire get that error at once (after leaving the queue
    /// they waited in, one round trip), and an attempt in flight
    /// gives back what it took and fails with it once its request is
    /// answered (with [`ClientBuilder::min_replicas`], once the replicas'
    /// WAIT is). `close` waits for those acquisitions, and for explicit
    /// releases (`guard.release()`) already in flight, so that nothing they
    /// took is left held once it returns (each of their requests is bounded
    /// by the command timeout; `close` gives up on them after six command
    /// timeouts, plus the replicas' timeout with `min_replicas`).
    /// The guards still alive report [`is_lost`](crate::LockGuard::is_lost).
    /// Calling it again is harmless.
    ///
    /// It returns within nine command timeouts (plus the replicas' timeout
    /// with `min_replicas`): six for the acquisitions and releases in
    /// flight, then three for its own releases (a reply, or a script
    /// reloaded and run again). Against a server that does not answer by
    /// then (paused, or its connection being made again), the releases not
    /// answered are reported in [`Error::CloseIncomplete`] and go on in the
    /// background.
    ///
    /// ```no_run
    /// # async fn run() -> Result<(), leasehold::Error> {
    /// let client = leasehold::Client::connect("redis://127.0.0.1:6379").await?;
    /// let guard = client.lock("nightly-report").acquire().await?;
    /// // ... work; `guard` may still be alive here ...
    /// client.close().await?; // the lock is free for the next run now
    /// # drop(guard);
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    ///
    /// [`Error::CloseIncomplete`] when some release got no answer (the
    /// server is unreachable, or did not answer within close's bound), or
    /// some acquisition or release was still in flight after that bound, or more than 4096 releases in the
    /// background failed before it (the oldest are not sent again): those
    /// leases end by their TTL. Calling `close` again sends again the
    /// releases that failed.
    ///
    /// # Cancel safety
    ///
    /// If dropped, the client is closed all the same and the releases go on
    /// in the background.
    pub async fn close(&self) -> Result<()> {
        self.inner
            .closed
            .store(true, std::sync::atomic::Ordering::Release);
        self.inner.closing.notify_waiters();
        // First the acquisitions and releases in flight: an acquisition
        // that wins puts its lease on the watchdog's books before it lands,
        // and one that gives back, or releases in the background, does so
        // before it lands too, so the watchdog's close below covers them.
        let bound = self.inner.flights_bound();
        let landed = tokio::time::timeout(bound, self.inner.flights.landed()).await;
        let closed = self
            .inner
            .watchdog
            .close(crate::clock::Instant::now() + self.inner.close_release_bound())
            .await;
        if landed.is_err() {
            let in_flight = self.inner.flights.count();
            if in_flight > 0 {
                let (failed, first) = match closed {
                    Err(Error::CloseIncomplete { failed, first }) => (failed, first),
                    _ => (0, format!("still in flight after {bound:?}")),
                };
                return Err(Error::CloseIncomplete {
                    failed: failed + in_flight,
                    first,
                });
            }
        }
        closed
    }

    /// Whether [`Client::close`] was called.
    pub fn is_closed(&self) -> bool {
        Core::is_closed(&*self.inner)
    }
}

impl ClientBuilder {
    /// Connects and checks the server.
    ///
    /// # Errors
    ///
    /// As [`Client::connect`], plus [`Error::InvalidArgument`] for a bad
    /// prefix, timeout or TTL bounds.
    ///
    /// # Panics
    ///
    /// Outside a Tokio runtime (the client spawns its background tasks on
    /// it).
    pub async fn build(self) -> Result<Client> {
        validate_prefix(&self.prefix)?;
        if self.command_timeout.is_zero() {
            return Err(Error::InvalidArgument(
                "command timeout must be above zero".into(),
            ));
        }
        if self.min_ttl.is_zero() || self.min_ttl > self.max_ttl {
            return Err(Error::InvalidArgument(format!(
                "TTL bounds {:?}..={:?} are empty or start at zero",
                self.min_ttl, self.max_ttl
            )));
        }
        let shared = Arc::new(Shared::default());
        let on_push = Arc::clone(&shared);
        let options = ConnectOptions {
            command_timeout: self.command_timeout,
            tls: self.tls.clone(),
            fence_memory: self.fence_memory,
            credentials: self.credentials.clone(),
        };
        let push = move |info| on_push.on_push(info);
        let chosen = [
            self.redlock.is_some(),
            #[cfg(feature = "cluster")]
            self.cluster.is_some(),
            #[cfg(feature = "sentinel")]
            self.sentinel.is_some(),
        ];
        if chosen.iter().filter(|&&c| c).count() > 1 {
            return Err(Error::InvalidArgument(
                "choose one of redlock, cluster and sentinel".into(),
            ));
        }
        let servers = 'servers: {
            if let Some(urls) = &self.redlock {
                if self.min_replicas.is_some() {
                    return Err(Error::InvalidArgument(
                        "min_replicas is not available on a Redlock client (its masters have no \
                         replicas to wait for)"
                            .into(),
                    ));
                }
                break 'servers self.connect_redlock(urls, &options, &shared).await?;
            }
            #[cfg(feature = "cluster")]
            if let Some(urls) = &self.cluster {
                if urls.is_empty() {
                    return Err(Error::InvalidArgument(
                        "a cluster client needs at least one node URL".into(),
                    ));
                }
                break 'servers Servers::One(Backend::connect_cluster(urls, &options, push).await?);
            }
            #[cfg(feature = "sentinel")]
            if let Some(target) = &self.sentinel {
                let target = SentinelTarget {
                    failover_wait: self.failover_wait.unwrap_or(self.command_timeout),
                    ..target.clone()
                };
                break 'servers Servers::One(
                    Backend::connect_sentinel(target, &options, push).await?,
                );
            }
            Servers::One(Backend::connect(&self.server, &options, push).await?)
        };
        Ok(Client {
            inner: Arc::new(Inner {
                events: Events::start(shared, servers.clone()),
                watchdog: Watchdog::start(servers.clone(), self.max_ttl),
                servers,
                prefix: self.prefix,
                min_ttl: self.min_ttl,
                max_ttl: self.max_ttl,
                min_replicas: self.min_replicas,
                fence_memory: self.fence_memory,
                closed: std::sync::atomic::AtomicBool::new(false),
                closing: tokio::sync::Notify::new(),
                breaks: Arc::default(),
                flights: Flights::new(),
                command_timeout: self.command_timeout,
            }),
        })
    }

    /// Connects to every Redlock node at once; a minority may be down now
    /// (they are connected when they come back).
    async fn connect_redlock(
        &self,
        urls: &[String],
        options: &ConnectOptions,
        shared: &Arc<Shared>,
    ) -> Result<Servers> {
        if urls.len() < 3 {
            return Err(Error::InvalidArgument(format!(
                "Redlock needs at least 3 independent masters, got {}: with fewer, one node's \
                 failure stops every lock",
                urls.len()
            )));
        }
        if self.node_timeout.is_zero() {
            return Err(Error::InvalidArgument(
                "node timeout must be above zero".into(),
            ));
        }
        let attempts = futures_util::future::join_all(urls.iter().map(|url| {
            let on_push = Arc::clone(shared);
            Backend::connect_tolerant(url, options, move |info| on_push.on_push(info))
        }))
        .await;
        let mut nodes = Vec::with_capacity(urls.len());
        let mut node_errors = Vec::new();
        for attempt in attempts {
            let (node, error) = attempt?;
            if let Some(e) = error {
                node_errors.push(format!("{}: {}", node.addr(), e.reason()));
            }
            nodes.push(node);
        }
        let reachable = nodes.len() - node_errors.len();
        if reachable < quorum(nodes.len()) {
            return Err(Error::QuorumNotReached {
                acquired: reachable,
                needed: quorum(nodes.len()),
                node_errors,
            });
        }
        for error in &node_errors {
            tracing::warn!(%error, "a Redlock node is unreachable; going on with the quorum");
        }
        Ok(Servers::Quorum(Arc::new(Redlock::new(
            nodes,
            self.node_timeout,
            self.command_timeout,
        ))))
    }
}
