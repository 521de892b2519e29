//! Test kit for `leasehold`: real `redis-server` processes and network faults.
//!
//! Every server is a real `redis-server` child process listening on a free
//! loopback port (never 6379), with its own temporary directory and log file.
//! It is killed (SIGKILL, by PID, and reaped) when the [`RedisServer`] is
//! dropped, and if the test is panicking at that moment the tail of the server
//! log is printed to stderr so the failure output shows what Redis saw.
//!
//! Faults:
//! - process level: [`RedisServer::kill`], [`RedisServer::pause`] /
//!   [`RedisServer::resume`] (SIGSTOP / SIGCONT), [`RedisServer::restart`] and
//!   [`RedisServer::restart_without_persistence`];
//! - network level, per client: a [`Proxy`] between the client and the server
//!   whose [`ProxyMode`] can drop, delay or reset traffic.
//!
//! [`PostgresServer`] starts a private PostgreSQL the same way (`initdb` in
//! a temporary directory, `postgres` on a free loopback port, killed on
//! drop), for the fencing tests that guard an SQL `UPDATE`.
//!
//! The kit is synchronous (std threads, std sockets), so it works from plain
//! `#[test]`s and from `#[tokio::test]`s alike.
//!
//! The `redis-server` binary is taken from the `LEASEHOLD_REDIS_SERVER`
//! environment variable if set, else from `PATH`; sentinels are that binary
//! with `--sentinel`. Clusters are created and resharded with `redis-cli`,
//! from `LEASEHOLD_REDIS_CLI` if set, else from `PATH`. Pointing them at
//! `valkey-server` and `valkey-cli` runs everything on Valkey
//! (`scripts/test` does, for `leasehold`'s tests). If a binary cannot be
//! found the kit panics with the command that installs it, and a TLS server
//! asked of a binary built without TLS panics saying so; tests never skip
//! silently.
//!
//! ```
//! use leasehold_testkit::{Proxy, ProxyMode, RedisServer};
//!
//! let server = RedisServer::start();
//! let mut con = server.connection();
//! let _: () = redis::cmd("SET").arg("k").arg("v").query(&mut con).unwrap();
//!
//! let proxy = Proxy::start(server.port());
//! proxy.set_mode(ProxyMode::Blackhole);
//! ```

mod ports;
mod postgres;
mod proxy;
mod server;
mod topology;

pub use postgres::{POSTGRES_INSTALL_HINT, PostgresServer};
pub use proxy::{Proxy, ProxyMode};
pub use server::{RedisServer, ServerBuilder, server_version, start_servers};
pub use topology::{RedisCluster, SentinelSet};

/// The command that installs the Redis binaries the test-suite needs; it is
/// part of the panic message when `redis-server` cannot be found.
///
/// ```
/// assert!(leasehold_testkit::INSTALL_HINT.contains("apt-get install -y redis-server"));
/// ```
pub const INSTALL_HINT: &str =
    "apt-get update && apt-get install -y redis-server redis-tools redis-sentinel";

/// Builds a `redis://` URL for a loopback port, percent-encoding credentials.
fn redis_url(port: u16, auth: Option<(Option<&str>, &str)>) -> String {
    match auth {
        None => format!("redis://127.0.0.1:{port}"),
        Some((user, password)) => format!(
            "redis://{}:{}@127.0.0.1:{port}",
            percent_encode(user.unwrap_or("")),
            percent_encode(password)
        ),
    }
}

/// Percent-encodes everything except RFC 3986 unreserved characters.
fn percent_encode(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~') {
            out.push(char::from(b));
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls() {
        assert_eq!(redis_url(7000, None), "redis://127.0.0.1:7000");
        assert_eq!(
            redis_url(7000, Some((None, "p@ss w"))),
            "redis://:p%40ss%20w@127.0.0.1:7000"
        );
        assert_eq!(
            redis_url(7000, Some((Some("app"), "pw"))),
            "redis://app:pw@127.0.0.1:7000"
        );
    }
}
