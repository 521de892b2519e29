//! The options of a [`Client`](crate::Client): where it connects, how it logs in, its
//! timeouts and bounds. [`ClientBuilder::build`] (in `client/mod.rs`) connects.

use std::time::Duration;

#[cfg(feature = "sentinel")]
use crate::backend::SentinelTarget;
use crate::backend::{Credentials, Endpoint, RedactedUrls, TlsOptions};

/// The default key prefix.
pub const DEFAULT_PREFIX: &str = "leasehold";

/// Options for a [`Client`](crate::Client); made by [`Client::builder`](crate::Client::builder).
///
/// Its `Debug` shows no password: the URLs go through
/// [`redact_url`](crate::redact_url), [`password`](ClientBuilder::password) shows as `***`.
#[derive(Clone)]
pub struct ClientBuilder {
    pub(crate) server: Endpoint,
    pub(crate) credentials: Credentials,
    pub(crate) redlock: Option<Vec<String>>,
    #[cfg(feature = "cluster")]
    pub(crate) cluster: Option<Vec<String>>,
    #[cfg(feature = "sentinel")]
    pub(crate) sentinel: Option<SentinelTarget>,
    #[cfg(feature = "sentinel")]
    pub(crate) failover_wait: Option<Duration>,
    pub(crate) tls: TlsOptions,
    pub(crate) min_replicas: Option<(usize, Duration)>,
    pub(crate) node_timeout: Duration,
    pub(crate) prefix: String,
    pub(crate) command_timeout: Duration,
    pub(crate) min_ttl: Duration,
    pub(crate) max_ttl: Duration,
    pub(crate) fence_memory: Duration,
}

impl std::fmt::Debug for ClientBuilder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let mut d = f.debug_struct("ClientBuilder");
        d.field("server", &self.server)
            .field("credentials", &self.credentials)
            .field("redlock", &self.redlock.as_deref().map(RedactedUrls));
        #[cfg(feature = "cluster")]
        d.field("cluster", &self.cluster.as_deref().map(RedactedUrls));
        #[cfg(feature = "sentinel")]
        d.field("sentinel", &self.sentinel)
            .field("failover_wait", &self.failover_wait);
        d.field("tls", &self.tls)
            .field("min_replicas", &self.min_replicas)
            .field("node_timeout", &self.node_timeout)
            .field("prefix", &self.prefix)
            .field("command_timeout", &self.command_timeout)
            .field("min_ttl", &self.min_ttl)
            .field("max_ttl", &self.max_ttl)
            .field("fence_memory", &self.fence_memory)
            .finish()
    }
}

impl Default for ClientBuilder {
    fn default() -> Self {
        ClientBuilder {
            server: Endpoint::Url("redis://127.0.0.1:6379".into()),
            credentials: Credentials::default(),
            redlock: None,
            #[cfg(feature = "cluster")]
            cluster: None,
            #[cfg(feature = "sentinel")]
            sentinel: None,
            #[cfg(feature = "sentinel")]
            failover_wait: None,
            tls: TlsOptions::default(),
            min_replicas: None,
            node_timeout: Duration::from_millis(200),
            prefix: DEFAULT_PREFIX.into(),
            command_timeout: Duration::from_secs(2),
            min_ttl: Duration::from_millis(10),
            max_ttl: Duration::from_secs(24 * 3600),
            fence_memory: Duration::ZERO,
        }
    }
}

impl ClientBuilder {
    /// The server, `redis://[user:password@]host:port[/db]`. Errors and
    /// `Debug` show it through [`redact_url`](crate::redact_url), without its password.
    ///
    /// Defaults to `redis://127.0.0.1:6379`.
    pub fn url(mut self, url: impl Into<String>) -> Self {
        self.server = Endpoint::Url(url.into());
        self
    }

    /// The server, as a [`redis::ConnectionInfo`] or anything the driver
    /// turns into one ([`redis::IntoConnectionInfo`]): say, the
    /// `get_connection_info()` of a `redis::Client` the application already
    /// has. Instead of [`ClientBuilder::url`]; the protocol is set to RESP3
    /// (leasehold's events ride on the command connection).
    ///
    /// Something that does not convert is reported by
    /// [`build`](ClientBuilder::build) as [`Error::InvalidArgument`](crate::Error::InvalidArgument).
    ///
    /// ```no_run
    /// # async fn example() -> Result<(), Box<dyn std::error::Error>> {
    /// let theirs = leasehold::redis::Client::open("redis://127.0.0.1:6379")?;
    /// let client = leasehold::Client::builder()
    ///     .connection_info(theirs.get_connection_info().clone())
    ///     .build()
    ///     .await?;
    /// # Ok(()) }
    /// ```
    pub fn connection_info(mut self, info: impl redis::IntoConnectionInfo) -> Self {
        self.server = match info.into_connection_info() {
            Ok(info) => Endpoint::Info(Box::new(info)),
            Err(e) => Endpoint::Invalid(e.to_string()),
        };
        self
    }

    /// The ACL username to log in with, on every server the client opens
    /// (Redlock's nodes, a cluster's, a Sentinel master and its sentinels);
    /// it replaces a username in the URLs.
    pub fn username(mut self, username: impl Into<String>) -> Self {
        self.credentials.username = Some(username.into());
        self
    }

    /// The password to log in with (`AUTH`), kept apart from the URLs so
    /// that it comes from wherever secrets live, and never shown by
    /// `Debug` or in errors; like [`ClientBuilder::username`], on every
    /// server, replacing a password in the URLs.
    pub fn password(mut self, password: impl Into<String>) -> Self {
        self.credentials.password = Some(password.into());
        self
    }

    /// Makes this a Redlock client over these independent masters (at
    /// least 3), instead of one server; see [`Client::redlock`](crate::Client::redlock).
    ///
    /// Defaults to one server, [`ClientBuilder::url`].
    pub fn redlock<I, S>(mut self, urls: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        self.redlock = Some(urls.into_iter().map(Into::into).collect());
        self
    }

    /// Makes this a Redis Cluster client, reached through any of these
    /// nodes; see [`Client::cluster`](crate::Client::cluster). Needs the `cluster` feature (on by
    /// default).
    ///
    /// Defaults to one server, [`ClientBuilder::url`].
    #[cfg(feature = "cluster")]
    pub fn cluster<I, S>(mut self, urls: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        self.cluster = Some(urls.into_iter().map(Into::into).collect());
        self
    }

    /// Makes this a Sentinel client of the master monitored as
    /// `master_name`; see [`Client::sentinel`](crate::Client::sentinel). Needs the `sentinel`
    /// feature.
    ///
    /// Defaults to one server, [`ClientBuilder::url`].
    #[cfg(feature = "sentinel")]
    pub fn sentinel<I, S>(mut self, sentinel_urls: I, master_name: &str) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        self.sentinel = Some(SentinelTarget {
            sentinels: sentinel_urls.into_iter().map(Into::into).collect(),
            master_name: master_name.to_owned(),
            failover_wait: Duration::ZERO,
        });
        self
    }

    /// Sentinel: how long [`build`](ClientBuilder::build) keeps asking the
    /// sentinels while the master they name cannot be reached or is not a
    /// master yet (it died, and the sentinels have not failed it over:
    /// their `down-after-milliseconds` and the failover itself), before
    /// failing with [`Error::Unreachable`](crate::Error::Unreachable). Past the connection, commands
    /// that cannot reach the master have the sentinels asked again at once,
    /// and an acquisition that waits retries within its wait.
    /// `Duration::MAX` asks until a master answers.
    ///
    /// Defaults to the command timeout.
    ///
    /// ```no_run
    /// # async fn run() -> Result<(), leasehold::Error> {
    /// use std::time::Duration;
    /// let client = leasehold::Client::builder()
    ///     .sentinel(["redis://127.0.0.1:26379"], "mymaster")
    ///     .failover_wait(Duration::from_secs(60))
    ///     .build()
    ///     .await?;
    /// # Ok(()) }
    /// ```
    #[cfg(feature = "sentinel")]
    pub fn failover_wait(mut self, wait: Duration) -> Self {
        self.failover_wait = Some(wait);
        self
    }

    /// Trusts this CA (PEM) for `rediss://` servers instead of the system's
    /// trust store. Verification of the server's certificate and host name
    /// is always on. Needs the `tls` feature.
    ///
    /// Defaults to the system's trust store.
    ///
    /// # Example
    ///
    /// ```no_run
    /// # async fn run(ca_pem: &[u8]) -> Result<(), leasehold::Error> {
    /// let client = leasehold::Client::builder()
    ///     .url("rediss://redis.internal:6380")
    ///     .tls_ca_cert(ca_pem)
    ///     .build()
    ///     .await?;
    /// # Ok(()) }
    /// ```
    #[cfg(feature = "tls")]
    pub fn tls_ca_cert(mut self, ca_pem: &[u8]) -> Self {
        self.tls.ca = Some(ca_pem.to_vec());
        self
    }

    /// Presents this certificate chain and private key (PEM) to
    /// `rediss://` servers that ask for one (mutual TLS,
    /// `tls-auth-clients yes`). Needs the `tls` feature.
    ///
    /// Defaults to no client certificate.
    #[cfg(feature = "tls")]
    pub fn tls_client_cert(mut self, cert_pem: &[u8], key_pem: &[u8]) -> Self {
        self.tls.client = Some((cert_pem.to_vec(), key_pem.to_vec()));
        self
    }

    /// After each acquisition, waits (`WAIT`, on the connection that
    /// acquired) until at least `replicas` replicas acknowledged it, for up
    /// to `timeout`. Fewer acknowledgements release the lock again and fail
    /// with [`Error::ReplicasNotReached`](crate::Error::ReplicasNotReached).
    ///
    /// This narrows, but does not close, the window in which a failover to
    /// a replica loses a held lock: `WAIT` tells that replicas received the
    /// write, not that they will be the ones promoted, nor that the
    /// renewals that follow reach them. Not available on Redlock.
    ///
    /// Defaults to no waiting.
    pub fn min_replicas(mut self, replicas: usize, timeout: Duration) -> Self {
        self.min_replicas = Some((replicas, timeout));
        self
    }

    /// Redlock: how long one node may take to answer one request before it
    /// counts as failed. Keep it far below the TTL (a slow node must not eat
    /// the lease's validity); it is also capped at half the TTL.
    ///
    /// Defaults to 200 ms.
    pub fn node_timeout(mut self, timeout: Duration) -> Self {
        self.node_timeout = timeout;
        self
    }

    /// The prefix of every key and channel (no braces or whitespace), so one
    /// ACL rule pair `~<prefix>:*` `&<prefix>:*` covers the library.
    ///
    /// Defaults to `leasehold`.
    pub fn prefix(mut self, prefix: impl Into<String>) -> Self {
        self.prefix = prefix.into();
        self
    }

    /// Bound on every reply and connection attempt. A command that takes
    /// longer fails with [`Error::Unreachable`](crate::Error::Unreachable).
    ///
    /// Defaults to 2 s.
    pub fn command_timeout(mut self, timeout: Duration) -> Self {
        self.command_timeout = timeout;
        self
    }

    /// The range of lease TTLs locks accept; outside it, acquiring fails
    /// with [`Error::InvalidArgument`](crate::Error::InvalidArgument).
    ///
    /// Defaults to 10 ms ..= 24 h.
    pub fn ttl_bounds(mut self, min: Duration, max: Duration) -> Self {
        self.min_ttl = min;
        self.max_ttl = max;
        self
    }

    /// How long a lock name's last fencing token is kept on the server after
    /// each acquisition, at least: the lease's TTL when that is longer.
    ///
    /// Fences rise without it: each is at least the server time in µs,
    /// above every earlier one as long as the server clock does not step
    /// back. The kept fence covers a clock that steps back while it lives:
    /// it then lives until the clock has passed it again, and fences keep
    /// rising. A step back while no fence of the name is kept (none issued
    /// within the memory before it) can issue fences lower than earlier
    /// ones by up to the step. Keep fences longer to cover steps that come
    /// later after the last acquisition, at the cost of one key per lock
    /// name for that long.
    ///
    /// Defaults to zero: the fence is kept while its lease lasts (the TTL
    /// from each acquisition, dropped by a release that frees the lock), so
    /// a name used once leaves no key once its lease is gone. With a memory
    /// set, releases leave the fence for the memory (or the TTL) from its
    /// acquisition.
    pub fn fence_memory(mut self, memory: Duration) -> Self {
        self.fence_memory = memory;
        self
    }
}
