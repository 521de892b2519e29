//! How leasehold talks to Redis. Knows nothing about locks.
//!
//! One [`ConnectionManager`] per client: a multiplexed RESP3 connection that
//! reconnects on its own, carries every command, and delivers pub/sub
//! messages as push frames, so the whole client needs one socket.

use std::time::Duration;

use redis::aio::{ConnectionManager, ConnectionManagerConfig};
use redis::{FromRedisValue, IntoConnectionInfo, ProtocolVersion, PushInfo, ScriptInvocation};

use crate::error::{Error, Result};

/// Connection settings a [`Backend`] is built with.
#[derive(Debug, Clone)]
pub(crate) struct ConnectOptions {
    /// Bound on each command's reply and on each connection attempt.
    pub(crate) command_timeout: Duration,
}

/// A connection to one Redis server.
#[derive(Clone)]
pub(crate) struct Backend {
    manager: ConnectionManager,
    addr: String,
}

impl std::fmt::Debug for Backend {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Backend").field("addr", &self.addr).finish()
    }
}

impl Backend {
    /// Connects to `url` and checks the server answers (and accepts the
    /// credentials in the URL). Pub/sub messages go to `on_push`.
    pub(crate) async fn connect(
        url: &str,
        options: &ConnectOptions,
        on_push: impl Fn(PushInfo) + Send + Sync + 'static,
    ) -> Result<Backend> {
        let (client, config, addr) = prepare(url, options, on_push)?;
        let manager = ConnectionManager::new_with_config(client, config)
            .await
            .map_err(|e| Error::from_redis(e, &addr, ""))?;
        let backend = Backend { manager, addr };
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
        let (client, config, addr) = prepare(url, options, on_push)?;
        match ConnectionManager::new_with_config(client.clone(), config.clone()).await {
            Ok(manager) => {
                let backend = Backend { manager, addr };
                backend.check_server().await?;
                Ok((backend, None))
            }
            Err(e) => match Error::from_redis(e, &addr, "") {
                e @ Error::Unreachable { .. } => {
                    let manager = ConnectionManager::new_lazy_with_config(client, config)
                        .map_err(|e| Error::from_redis(e, &addr, ""))?;
                    Ok((Backend { manager, addr }, Some(e)))
                }
                e => Err(e),
            },
        }
    }

    /// The server's address, for messages (never includes credentials).
    pub(crate) fn addr(&self) -> &str {
        &self.addr
    }

    /// Refuses servers older than Redis 7, whose scripts lack `SET .. NX GET`.
    async fn check_server(&self) -> Result<()> {
        let info: String = match self.query(redis::cmd("INFO").arg("server"), "").await {
            Ok(info) => info,
            // A least-privilege user may not run INFO; the scripts will tell.
            Err(Error::Auth { source }) if source.code() == Some("NOPERM") => return Ok(()),
            Err(e) => return Err(e),
        };
        let version = info
            .lines()
            .find_map(|l| l.strip_prefix("redis_version:"))
            .unwrap_or("")
            .trim();
        let major: u32 = version
            .split('.')
            .next()
            .and_then(|m| m.parse().ok())
            .unwrap_or(0);
        if major < 7 {
            return Err(Error::Unsupported(format!(
                "Redis {version} at {}: leasehold needs Redis 7.0 or newer",
                self.addr
            )));
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
        let mut conn = self.manager.clone();
        invocation
            .invoke_async(&mut conn)
            .await
            .map_err(|e| Error::from_redis(e, &self.addr, key))
    }

    /// Runs one command.
    pub(crate) async fn query<T: FromRedisValue>(&self, cmd: &redis::Cmd, key: &str) -> Result<T> {
        let mut conn = self.manager.clone();
        cmd.query_async(&mut conn)
            .await
            .map_err(|e| Error::from_redis(e, &self.addr, key))
    }

    /// Subscribes the shared connection to an exact channel (never a pattern).
    pub(crate) async fn subscribe(&self, channel: &str) -> Result<()> {
        let mut conn = self.manager.clone();
        conn.subscribe(channel)
            .await
            .map_err(|e| Error::from_redis(e, &self.addr, channel))
    }

    /// Ends a subscription made by [`Backend::subscribe`].
    pub(crate) async fn unsubscribe(&self, channel: &str) -> Result<()> {
        let mut conn = self.manager.clone();
        conn.unsubscribe(channel)
            .await
            .map_err(|e| Error::from_redis(e, &self.addr, channel))
    }
}

/// The client and connection settings for `url`: RESP3 (so pub/sub rides
/// on the command connection), bounded replies, quick reconnects.
fn prepare(
    url: &str,
    options: &ConnectOptions,
    on_push: impl Fn(PushInfo) + Send + Sync + 'static,
) -> Result<(redis::Client, ConnectionManagerConfig, String)> {
    let info = url.into_connection_info().map_err(|e| {
        Error::InvalidArgument(format!(
            "invalid Redis URL {:?}: {e}; expected redis://[user:password@]host:port[/db]",
            redact_url(url)
        ))
    })?;
    let addr = info.addr().to_string();
    let settings = info
        .redis_settings()
        .clone()
        .set_protocol(ProtocolVersion::RESP3);
    let info = info.set_redis_settings(settings);
    let client = redis::Client::open(info).map_err(|e| Error::from_redis(e, &addr, ""))?;
    let config = ConnectionManagerConfig::new()
        .set_response_timeout(Some(options.command_timeout))
        .set_connection_timeout(Some(options.command_timeout))
        // Few, quick retries: a lock caller has its own deadline and would
        // rather hear "unreachable" than wait out a long backoff.
        .set_number_of_retries(2)
        .set_min_delay(Duration::from_millis(20))
        .set_max_delay(Duration::from_millis(500))
        .set_push_sender(
            move |info: PushInfo| -> Result<(), std::convert::Infallible> {
                on_push(info);
                Ok(())
            },
        )
        .set_automatic_resubscription();
    Ok((client, config, addr))
}

/// A URL with any password replaced, fit for error messages.
pub(crate) fn redact_url(url: &str) -> String {
    match (url.find("://"), url.rfind('@')) {
        (Some(scheme), Some(at)) if at > scheme => {
            let userinfo = &url[scheme + 3..at];
            let user = userinfo.split(':').next().unwrap_or("");
            format!("{}{user}:***{}", &url[..scheme + 3], &url[at..])
        }
        _ => url.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::redact_url;

    #[test]
    fn passwords_never_reach_messages() {
        assert_eq!(redact_url("redis://:secret@h:1"), "redis://:***@h:1");
        assert_eq!(redact_url("redis://u:secret@h:1/0"), "redis://u:***@h:1/0");
        assert_eq!(redact_url("redis://h:1"), "redis://h:1");
    }
}
