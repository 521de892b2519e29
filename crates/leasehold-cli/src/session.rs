//! Connecting to the Redis the command line names (every command's
//! client, riding through a Sentinel failover for those that wait), and
//! where `demo` and `bench` run: the Redis the user named, or a private
//! throwaway one, and the signals that end them early through the path that
//! stops that server.

use std::time::Duration;

use leasehold::Client;
use redis::aio::MultiplexedConnection;
use tokio::signal::unix::{Signal, SignalKind, signal};

use crate::args::Global;
use crate::embedded::EmbeddedRedis;
use crate::exit::{self, Failure};
use crate::parse::{LeaseArgs, Servers, single};

/// The Redis a session talks to.
pub(crate) struct Target {
    /// Its URL.
    pub(crate) url: String,
    /// The private server, when we started one; killed on drop.
    pub(crate) server: Option<EmbeddedRedis>,
}

impl std::fmt::Debug for Target {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Target")
            .field("url", &leasehold::redact_url(&self.url))
            .field("server", &self.server)
            .finish()
    }
}

impl Target {
    /// The `--url` / `LEASEHOLD_URL` server, or else a private one started now.
    ///
    /// # Errors
    ///
    /// A usage failure for several URLs; exit 69 when the private server
    /// cannot start.
    pub(crate) async fn open(global: &Global) -> Result<Target, Failure> {
        if global.cluster || global.sentinel.is_some() {
            return Err(Failure::usage(
                "demo and bench run on one Redis; drop --cluster / --sentinel and pass a single \
                 --url, or none for a private redis-server",
            ));
        }
        match global.given_urls() {
            Some(_) => Ok(Target {
                url: single(global.servers()?, &global.named("urls", "--url"))?,
                server: None,
            }),
            None => {
                let server = EmbeddedRedis::start_async().await?;
                Ok(Target {
                    url: server.url(),
                    server: Some(server),
                })
            }
        }
    }

    /// Where it is, for people.
    pub(crate) fn place(&self) -> String {
        match &self.server {
            Some(s) => format!("a private redis-server on 127.0.0.1:{}", s.port()),
            None => "the Redis given by --url / LEASEHOLD_URL".to_owned(),
        }
    }

    /// True for a server we started and nobody else uses.
    #[cfg(feature = "bench")]
    pub(crate) fn is_private(&self) -> bool {
        self.server.is_some()
    }
}

/// SIGINT and SIGTERM, caught while a session runs.
pub(crate) struct Stop {
    /// SIGINT (Ctrl-C).
    interrupt: Signal,
    /// SIGTERM.
    terminate: Signal,
}

impl Stop {
    /// Catches SIGINT and SIGTERM from now on.
    pub(crate) fn install() -> Result<Stop, Failure> {
        Ok(Stop {
            interrupt: catch(SignalKind::interrupt())?,
            terminate: catch(SignalKind::terminate())?,
        })
    }

    /// Resolves with 128 + the signal's number when one arrives.
    pub(crate) async fn next(&mut self) -> u8 {
        tokio::select! {
            _ = self.interrupt.recv() => 128 + 2,
            _ = self.terminate.recv() => 128 + 15,
        }
    }
}

/// Catches signal `kind` from now on.
pub(crate) fn catch(kind: SignalKind) -> Result<Signal, Failure> {
    signal(kind).map_err(|e| {
        Failure::with_code(
            exit::SOFTWARE,
            format!("cannot install signal handlers: {e}"),
        )
    })
}

/// A plain Redis connection, outside the library.
pub(crate) async fn plain_connection(url: &str) -> Result<MultiplexedConnection, Failure> {
    redis::Client::open(url)
        .map_err(|e| Failure::usage(format!("invalid Redis URL: {e}")))?
        .get_multiplexed_async_connection()
        .await
        .map_err(|e| redis_failure(e, "connecting"))
}

/// Maps an error on a plain connection to an exit code; `doing` says what
/// the connection was for.
pub(crate) fn redis_failure(e: redis::RedisError, doing: &str) -> Failure {
    let auth = e.kind() == redis::ErrorKind::AuthenticationFailed
        || matches!(e.code(), Some("NOAUTH" | "WRONGPASS" | "NOPERM"));
    let code = if auth {
        exit::NOPERM
    } else {
        exit::UNAVAILABLE
    };
    Failure::with_code(code, format!("Redis error {doing}: {e}"))
}

/// Connects to the Redis the global options name: one server, a Redlock
/// over three or more, a cluster or a Sentinel-watched master; within
/// `--connect-timeout`.
pub(crate) async fn connect(global: &Global) -> Result<Client, Failure> {
    connect_riding(global, None).await
}

/// [`connect`] for a command that waits for its hold (`run`, `acquire`):
/// through Sentinel, while the master the sentinels name is dead or not a
/// master yet, the sentinels are asked again for up to the hold's `--wait`
/// (`--connect-timeout` with `--no-wait`), so a run started during a
/// failover waits for it, as it would for a holder, instead of exiting 69.
pub(crate) async fn connect_for(global: &Global, lease: &LeaseArgs) -> Result<Client, Failure> {
    let ride = (!lease.no_wait).then_some(lease.wait);
    connect_riding(global, ride).await
}

/// [`connect`]; through Sentinel, riding through a failover for up to
/// `ride` (else `--connect-timeout`).
async fn connect_riding(global: &Global, ride: Option<Duration>) -> Result<Client, Failure> {
    let servers = global.servers()?;
    let tls = global.tls()?;
    let mut builder = Client::builder().prefix(&global.prefix);
    // How long connecting may take: --connect-timeout, or through Sentinel
    // the wait of the hold if longer (riding through a failover).
    let mut limit = global.connect_timeout;
    let tls_urls: Vec<String> = match &servers {
        Servers::One(url) => vec![url.clone()],
        Servers::Redlock(urls) | Servers::Cluster(urls) => urls.clone(),
        Servers::Sentinel { .. } => Vec::new(),
    }
    .iter()
    .filter(|url| url.trim_start().starts_with("rediss://"))
    .filter_map(|url| crate::parse::address_of(url).ok())
    .collect();
    let place = match servers {
        Servers::One(url) => {
            let place = format!("Redis at {}", leasehold::redact_url(&url));
            builder = builder.url(url);
            place
        }
        Servers::Redlock(urls) => {
            let place = format!("the {} Redlock nodes", urls.len());
            builder = builder.redlock(urls);
            if let Some(timeout) = global.node_timeout {
                builder = builder.node_timeout(timeout);
            }
            place
        }
        Servers::Cluster(urls) => {
            let place = format!("the cluster at {}", list_of(&urls));
            builder = builder.cluster(urls);
            place
        }
        Servers::Sentinel { sentinels, master } => {
            let place = format!(
                "master {master:?} through the sentinels at {}",
                list_of(&sentinels)
            );
            limit = ride.map_or(limit, |ride| ride.max(limit));
            builder = builder.sentinel(sentinels, &master).failover_wait(limit);
            place
        }
    };
    if let Some(ca) = &tls.ca {
        builder = builder.tls_ca_cert(ca);
    }
    if let Some((cert, key)) = &tls.client {
        builder = builder.tls_client_cert(cert, key);
    }
    let failure = match tokio::time::timeout(limit, builder.build()).await {
        Ok(Ok(client)) => {
            tracing::debug!(to = %place, "connected");
            return Ok(client);
        }
        Ok(Err(err)) => Failure::from(err),
        Err(_) if limit > global.connect_timeout => Failure::with_code(
            exit::UNAVAILABLE,
            format!(
                "{place} could not be reached within {} (--wait): the sentinels named no \
                 master that answers as one; check the master and the sentinels",
                humantime::format_duration(limit)
            ),
        ),
        Err(_) => Failure::with_code(
            exit::UNAVAILABLE,
            format!(
                "no answer from {place} within {} (--connect-timeout): the server is down, \
                 paused or not Redis; check that it runs and that --url names it, or allow \
                 longer with --connect-timeout",
                humantime::format_duration(global.connect_timeout)
            ),
        ),
    };
    // A TLS handshake sent to a plain port gets no answer (Redis waits for
    // the end of an inline command that never comes): say so.
    for address in tls_urls {
        if answers_in_plain_text(&address).await {
            return Err(Failure::with_code(
                exit::UNAVAILABLE,
                format!(
                    "TLS with Redis at {address} failed: the server answers in plain text, not \
                     TLS, so it never answered the TLS handshake; write the --url as \
                     redis://{address}, or give the server's TLS port (its tls-port)"
                ),
            ));
        }
    }
    Err(failure)
}

/// Whether `address` (host:port) answers a plain-text PING like Redis does,
/// within half a second.
async fn answers_in_plain_text(address: &str) -> bool {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let probe = async {
        let mut stream = tokio::net::TcpStream::connect(address).await.ok()?;
        stream.write_all(b"PING\r\n").await.ok()?;
        let mut reply = [0u8; 1];
        stream.read_exact(&mut reply).await.ok()?;
        // +PONG, or -NOAUTH / -ERR from a server that wants a password.
        Some(matches!(reply[0], b'+' | b'-'))
    };
    tokio::time::timeout(Duration::from_millis(500), probe)
        .await
        .ok()
        .flatten()
        .unwrap_or(false)
}

/// URLs joined for messages, passwords left out.
fn list_of(urls: &[String]) -> String {
    urls.iter()
        .map(|u| leasehold::redact_url(u))
        .collect::<Vec<_>>()
        .join(", ")
}

/// Connects to `url` with keys under `prefix`.
pub(crate) async fn connect_to(url: &str, prefix: &str) -> Result<Client, Failure> {
    Ok(Client::builder().url(url).prefix(prefix).build().await?)
}
