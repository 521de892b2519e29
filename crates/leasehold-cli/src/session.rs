//! Where `demo` and `bench` run: the Redis the user named, or a private
//! throwaway one, and the signals that end them early through the path that
//! stops that server.

use redis::aio::MultiplexedConnection;
use tokio::signal::unix::{Signal, SignalKind, signal};

use crate::cli::{Global, single};
use crate::embedded::EmbeddedRedis;
use crate::exit::{self, Failure};

/// The Redis a session talks to.
#[derive(Debug)]
pub(crate) struct Target {
    /// Its URL.
    pub(crate) url: String,
    /// The private server, when we started one; killed on drop.
    pub(crate) server: Option<EmbeddedRedis>,
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
                url: single(global.servers()?)?,
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
