//! Following a Sentinel-watched master.
//!
//! The sentinels are asked for the master's address; the connection goes
//! there only after the server itself confirms (`ROLE`) that it is a master,
//! so lock state is never read from a replica. A task asks the sentinels
//! again every [`CHECK_EVERY`], and at once when a command could not reach
//! the master or found it read-only; when they name another master, a new
//! connection replaces the old one, the client's subscriptions move with it,
//! and every waiter is woken to try again.

use std::collections::HashSet;
use std::sync::{Arc, Mutex, MutexGuard, Weak};
use std::time::Duration;

use redis::aio::ConnectionManager;
use redis::{PushInfo, PushKind};
use tokio::sync::Notify;

use super::{ConnectOptions, OnPush, manager_config, open_client, parse_url, redact_url};
use crate::error::{Error, Result};

/// How often the sentinels are asked whether the master changed.
const CHECK_EVERY: Duration = Duration::from_millis(500);

/// Which master to follow, through which sentinels.
#[derive(Debug, Clone)]
pub(crate) struct SentinelTarget {
    /// `redis[s]://[user:password@]host:port` of each sentinel; scheme and
    /// credentials are also used for the master.
    pub(crate) sentinels: Vec<String>,
    /// The name the sentinels monitor the master under.
    pub(crate) master_name: String,
}

pub(crate) struct Followed {
    target: SentinelTarget,
    options: ConnectOptions,
    on_push: OnPush,
    current: Mutex<(String, ConnectionManager)>,
    /// Channels subscribed, to subscribe again on a new master.
    channels: Mutex<HashSet<String>>,
    /// Serialises (un)subscriptions with a switch of master.
    switching: tokio::sync::Mutex<()>,
    check_now: Notify,
}

impl Followed {
    pub(crate) async fn connect(
        target: SentinelTarget,
        options: ConnectOptions,
        on_push: OnPush,
    ) -> Result<Arc<Followed>> {
        if target.sentinels.is_empty() {
            return Err(Error::InvalidArgument(
                "Sentinel needs at least one sentinel URL".into(),
            ));
        }
        let (addr, manager) = resolve(&target, &options, &on_push).await?;
        let followed = Arc::new(Followed {
            target,
            options,
            on_push,
            current: Mutex::new((addr, manager)),
            channels: Mutex::new(HashSet::new()),
            switching: tokio::sync::Mutex::new(()),
            check_now: Notify::new(),
        });
        tokio::spawn(follow(Arc::downgrade(&followed)));
        Ok(followed)
    }

    fn current_slot(&self) -> MutexGuard<'_, (String, ConnectionManager)> {
        self.current.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The connection to the master as last confirmed.
    pub(crate) fn current(&self) -> ConnectionManager {
        self.current_slot().1.clone()
    }

    /// A command failed as if the master had moved: check now.
    pub(crate) fn suspect(&self) {
        self.check_now.notify_one();
    }

    pub(crate) async fn subscribe(&self, channel: &str) -> Result<()> {
        let _switching = self.switching.lock().await;
        let addr = self.current_slot().0.clone();
        self.current()
            .subscribe(channel)
            .await
            .map_err(|e| Error::from_redis(e, &addr, channel))?;
        self.channels_set().insert(channel.to_owned());
        Ok(())
    }

    pub(crate) async fn unsubscribe(&self, channel: &str) -> Result<()> {
        let _switching = self.switching.lock().await;
        self.channels_set().remove(channel);
        let addr = self.current_slot().0.clone();
        self.current()
            .unsubscribe(channel)
            .await
            .map_err(|e| Error::from_redis(e, &addr, channel))
    }

    fn channels_set(&self) -> MutexGuard<'_, HashSet<String>> {
        self.channels.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Asks the sentinels for the master; moves to it if it changed.
    async fn check(&self) -> Result<()> {
        let named = master_addr(&self.target, &self.options).await?;
        if named == self.current_slot().0 {
            return Ok(());
        }
        let _switching = self.switching.lock().await;
        let (addr, manager) = resolve(&self.target, &self.options, &self.on_push).await?;
        let channels: Vec<String> = self.channels_set().iter().cloned().collect();
        for channel in &channels {
            let mut conn = manager.clone();
            if let Err(e) = conn.subscribe(channel).await {
                tracing::warn!(%channel, error = %e, "cannot subscribe on the new master");
            }
        }
        tracing::warn!(master = %self.target.master_name, from = %self.current_slot().0,
            to = %addr, "the sentinels named a new master; following it");
        *self.current_slot() = (addr, manager);
        // Releases published on the old master since it stopped being one
        // are lost: every waiter tries again.
        (self.on_push)(PushInfo {
            kind: PushKind::Disconnection,
            data: Vec::new(),
        });
        Ok(())
    }
}

/// Follows the master until the client is gone.
async fn follow(followed: Weak<Followed>) {
    loop {
        let Some(f) = followed.upgrade() else { return };
        if let Err(e) = f.check().await {
            tracing::warn!(master = %f.target.master_name, error = %e,
                "cannot confirm the master through the sentinels; retrying");
        }
        let check_now = async {
            tokio::select! {
                () = f.check_now.notified() => {}
                () = tokio::time::sleep(CHECK_EVERY) => {}
            }
        };
        check_now.await;
    }
}

/// The master's `host:port` as the first answering sentinel names it.
async fn master_addr(target: &SentinelTarget, options: &ConnectOptions) -> Result<String> {
    let mut errors = Vec::new();
    for url in &target.sentinels {
        match ask_sentinel(url, &target.master_name, options).await {
            Ok(Some(addr)) => return Ok(addr),
            Ok(None) => errors.push(format!(
                "{}: does not know a master named {:?}",
                redact_url(url),
                target.master_name
            )),
            Err(e) => errors.push(format!("{}: {e}", redact_url(url))),
        }
    }
    Err(Error::Unsupported(format!(
        "no sentinel named a master for {:?}: {}",
        target.master_name,
        errors.join("; ")
    )))
}

async fn ask_sentinel(
    url: &str,
    master_name: &str,
    options: &ConnectOptions,
) -> Result<Option<String>> {
    let info = parse_url(url, options)?;
    let addr = info.addr().to_string();
    let client = open_client(info, options)?;
    let reply: Option<(String, u16)> = tokio::time::timeout(options.command_timeout, async {
        let config = redis::AsyncConnectionConfig::new()
            .set_connection_timeout(Some(options.command_timeout))
            .set_response_timeout(Some(options.command_timeout));
        let mut conn = client
            .get_multiplexed_async_connection_with_config(&config)
            .await?;
        redis::cmd("SENTINEL")
            .arg("GET-MASTER-ADDR-BY-NAME")
            .arg(master_name)
            .query_async(&mut conn)
            .await
    })
    .await
    .map_err(|_| Error::Unreachable {
        addr: addr.clone(),
        source: redis::RedisError::from(std::io::Error::from(std::io::ErrorKind::TimedOut)),
    })?
    .map_err(|e| Error::from_redis(e, &addr, ""))?;
    Ok(reply.map(|(host, port)| format!("{host}:{port}")))
}

/// Connects to the master the sentinels name, once it confirms it is one.
async fn resolve(
    target: &SentinelTarget,
    options: &ConnectOptions,
    on_push: &OnPush,
) -> Result<(String, ConnectionManager)> {
    let addr = master_addr(target, options).await?;
    // The master's URL: the first sentinel's scheme and credentials, the
    // master's address.
    let template = &target.sentinels[0];
    let scheme_end = template.find("://").map_or(0, |i| i + 3);
    let userinfo = template[scheme_end..]
        .split_once('@')
        .filter(|(u, _)| !u.contains('/'))
        .map(|(u, _)| format!("{u}@"))
        .unwrap_or_default();
    let url = format!("{}{userinfo}{addr}", &template[..scheme_end]);
    let info = parse_url(&url, options)?;
    let client = open_client(info, options)?;
    let manager =
        ConnectionManager::new_with_config(client, manager_config(options, Arc::clone(on_push)))
            .await
            .map_err(|e| Error::from_redis(e, &addr, ""))?;
    let role: Vec<redis::Value> = redis::cmd("ROLE")
        .query_async(&mut manager.clone())
        .await
        .map_err(|e| Error::from_redis(e, &addr, ""))?;
    match role.first() {
        Some(redis::Value::BulkString(r)) if r == b"master" => Ok((addr, manager)),
        Some(redis::Value::SimpleString(r)) if r == "master" => Ok((addr, manager)),
        _ => Err(Error::Unreachable {
            addr: addr.clone(),
            source: redis::RedisError::from((
                redis::ErrorKind::Io,
                "the sentinels name this server as master, but it is not one (yet)",
            )),
        }),
    }
}
