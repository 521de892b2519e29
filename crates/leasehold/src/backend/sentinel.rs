//! Following a Sentinel-watched master.
//!
//! The sentinels are asked for the master's address; the connection goes
//! there only after the server itself confirms (`ROLE`) that it is a master,
//! so lock state is never read from a replica. A task asks the sentinels
//! again every [`CHECK_EVERY`], and at once when a command could not reach
//! the master or found it read-only; when they name another master, a new
//! connection replaces the old one, the client's subscriptions move with it,
//! and every waiter is woken to try again. Subscriptions, and their renewal
//! after a reconnect to the same master, are kept by [`Managed`].

use std::sync::{Arc, Weak};
use std::time::Duration;

use futures_util::StreamExt;
use futures_util::stream::FuturesUnordered;
use tokio::sync::Notify;

use super::connection::{Commands, DeploymentConnection, Pending};
use super::managed::{ConnectionManager, Managed, Pushes};
use super::{ConnectOptions, OnPush, open_client, parse_url, redact_url};
use crate::error::{Error, Result};

/// How often the sentinels are asked whether the master changed.
const CHECK_EVERY: Duration = Duration::from_millis(500);

/// Which master to follow, through which sentinels.
#[derive(Clone)]
pub(crate) struct SentinelTarget {
    /// `redis[s]://[user:password@]host:port` of each sentinel; scheme and
    /// credentials are also used for the master.
    pub(crate) sentinels: Vec<String>,
    /// The name the sentinels monitor the master under.
    pub(crate) master_name: String,
    /// How long connecting keeps asking the sentinels while the master they
    /// name cannot be reached or is not one yet (`failover_wait`).
    pub(crate) failover_wait: Duration,
}

impl std::fmt::Debug for SentinelTarget {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SentinelTarget")
            .field("sentinels", &super::address::RedactedUrls(&self.sentinels))
            .field("master_name", &self.master_name)
            .field("failover_wait", &self.failover_wait)
            .finish()
    }
}

pub(crate) struct Followed {
    target: SentinelTarget,
    options: ConnectOptions,
    pushes: Pushes,
    /// The master in use and the channels subscribed on it.
    managed: Arc<Managed>,
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
        let pushes = Pushes::new(on_push);
        let (addr, manager) = ride_through(&target, &options, &pushes).await?;
        let followed = Arc::new(Followed {
            target,
            options,
            managed: Managed::start(addr, manager, &pushes),
            pushes,
            check_now: Notify::new(),
        });
        tokio::spawn(follow(Arc::downgrade(&followed)));
        Ok(followed)
    }

    /// Asks the sentinels for the master; moves to it if it changed.
    async fn check(&self) -> Result<()> {
        let named = master_addr(&self.target, &self.options).await?;
        let from = self.managed.addr();
        if named == from {
            return Ok(());
        }
        let (addr, manager) = resolve(&self.target, &self.options, &self.pushes).await?;
        tracing::warn!(master = %self.target.master_name, %from, to = %addr,
            "the sentinels named a new master; following it");
        // Releases published on the old master since it stopped being one
        // are lost: every waiter tries again, once the channels are
        // subscribed on the new one.
        self.managed.replace(addr, manager).await;
        Ok(())
    }
}

/// A Sentinel-watched master: commands on the connection to the master as
/// last confirmed, subscriptions kept by its [`Managed`].
impl DeploymentConnection for Followed {
    fn commands(&self) -> Commands {
        Commands::new(self.managed.current())
    }

    fn subscribe<'a>(&'a self, channel: &'a str) -> Pending<'a, Result<()>> {
        Box::pin(self.managed.subscribe(channel))
    }

    fn unsubscribe<'a>(&'a self, channel: &'a str) -> Pending<'a, Result<()>> {
        Box::pin(self.managed.unsubscribe(channel))
    }

    /// A command that could not reach the master: it may have moved, so
    /// the sentinels are asked now.
    fn note(&self, e: &Error) {
        if let Error::Unreachable { .. } = e {
            self.check_now.notify_one();
        }
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

/// The master's `host:port`, trusting the newest word: every sentinel is
/// asked at once, and once a majority of them answered (or every one did,
/// each within the command timeout) the answer with the highest config
/// epoch wins (among equals, the first). A sentinel that missed a failover (partitioned, restarted,
/// slow to hear) names the demoted master under an older epoch; taking the
/// first answer, as before, sent the client back to that master, where a
/// lock could be taken while the new master granted it to someone else.
async fn master_addr(target: &SentinelTarget, options: &ConnectOptions) -> Result<String> {
    let mut asking: FuturesUnordered<_> = target
        .sentinels
        .iter()
        .map(|url| async move {
            let answer = ask_sentinel(url, &target.master_name, options).await;
            (url, answer)
        })
        .collect();
    let majority = target.sentinels.len() / 2 + 1;
    let (mut newest, mut answered, mut errors) = (None::<Named>, 0, Vec::new());
    while let Some((url, answer)) = asking.next().await {
        match answer {
            Ok(Some(named)) => {
                answered += 1;
                if newest.as_ref().is_none_or(|n| named.epoch > n.epoch) {
                    newest = Some(named);
                }
            }
            Ok(None) => errors.push(format!(
                "{}: does not know a master named {:?}",
                redact_url(url),
                target.master_name
            )),
            Err(e) => errors.push(format!("{}: {e}", redact_url(url))),
        }
        if answered >= majority {
            break;
        }
    }
    newest.map(|n| n.addr).ok_or_else(|| {
        Error::Unsupported(format!(
            "no sentinel named a master for {:?}: {}",
            target.master_name,
            errors.join("; ")
        ))
    })
}

/// A master as one sentinel names it, with the config epoch of its word.
struct Named {
    addr: String,
    epoch: u64,
}

/// What the sentinel at `url` says of the master `master_name`: its address
/// (`SENTINEL GET-MASTER-ADDR-BY-NAME`, which names a promoted replica as
/// soon as the failover promotes it, before the failover ends) and the
/// config epoch of its word (`SENTINEL MASTER`; a sentinel that refuses it,
/// such as one whose ACL allows only the former, counts as epoch 0).
async fn ask_sentinel(
    url: &str,
    master_name: &str,
    options: &ConnectOptions,
) -> Result<Option<Named>> {
    let info = parse_url(url, options)?;
    let addr = info.addr().to_string();
    let client = open_client(info, options)?;
    let reply: Option<Named> = tokio::time::timeout(options.command_timeout, async {
        let config = redis::AsyncConnectionConfig::new()
            .set_connection_timeout(Some(options.command_timeout))
            .set_response_timeout(Some(options.command_timeout));
        #[cfg(not(leasehold_sim))]
        let mut conn = client
            .get_multiplexed_async_connection_with_config(&config)
            .await?;
        // The simulator's sentinel, over its socket.
        #[cfg(leasehold_sim)]
        let mut conn = crate::sim::connect_node(client.get_connection_info(), &config).await?;
        let named: Option<(String, u16)> = redis::cmd("SENTINEL")
            .arg("GET-MASTER-ADDR-BY-NAME")
            .arg(master_name)
            .query_async(&mut conn)
            .await?;
        let Some((host, port)) = named else {
            return Ok(None);
        };
        let master: redis::RedisResult<redis::Value> = redis::cmd("SENTINEL")
            .arg("MASTER")
            .arg(master_name)
            .query_async(&mut conn)
            .await;
        let epoch = match master {
            Ok(value) => config_epoch(value).unwrap_or(0),
            Err(e) if e.kind() == redis::ErrorKind::Io => return Err(e),
            Err(_) => 0,
        };
        Ok(Some(Named {
            addr: format!("{host}:{port}"),
            epoch,
        }))
    })
    .await
    .map_err(|_| Error::Unreachable {
        addr: addr.clone(),
        source: redis::RedisError::from(std::io::Error::from(std::io::ErrorKind::TimedOut)),
    })?
    .map_err(|e| Error::from_redis(e, &addr, ""))?;
    Ok(reply)
}

/// The config epoch in a `SENTINEL MASTER` reply: field/value pairs, as a
/// RESP3 map or a flat RESP2 array.
fn config_epoch(reply: redis::Value) -> Option<u64> {
    let text = |v: &redis::Value| match v {
        redis::Value::BulkString(b) => Some(String::from_utf8_lossy(b).into_owned()),
        redis::Value::SimpleString(s) => Some(s.clone()),
        redis::Value::Int(i) => Some(i.to_string()),
        _ => None,
    };
    let pairs: Vec<(String, String)> = match reply {
        redis::Value::Map(pairs) => pairs
            .iter()
            .filter_map(|(k, v)| Some((text(k)?, text(v)?)))
            .collect(),
        redis::Value::Array(items) => items
            .chunks(2)
            .filter_map(|kv| Some((text(kv.first()?)?, text(kv.get(1)?)?)))
            .collect(),
        _ => return None,
    };
    pairs
        .iter()
        .find(|(k, _)| k == "config-epoch")
        .and_then(|(_, v)| v.parse().ok())
}

/// How soon the sentinels are asked again while the master they name cannot
/// be reached or is not one yet.
pub(super) const RIDE_THROUGH_EVERY: Duration = Duration::from_millis(200);

/// [`resolve`], again while it fails for a reason a failover ends (the
/// master named is dead, unreachable or not a master yet), for up to the
/// target's `failover_wait`: a client that connects during a failover
/// waits for it instead of failing at once on the dead master's address.
async fn ride_through(
    target: &SentinelTarget,
    options: &ConnectOptions,
    pushes: &Pushes,
) -> Result<(String, ConnectionManager)> {
    // None: a wait too long to add to the clock (`Duration::MAX`, the
    // CLI's `--wait forever`) never runs out.
    let deadline = tokio::time::Instant::now().checked_add(target.failover_wait);
    loop {
        match resolve(target, options, pushes).await {
            Err(e)
                if e.is_transient()
                    && deadline
                        .is_none_or(|d| tokio::time::Instant::now() + RIDE_THROUGH_EVERY < d) =>
            {
                tracing::debug!(master = %target.master_name, error = %e,
                    "the master the sentinels name cannot be used yet; asking again");
                tokio::time::sleep(RIDE_THROUGH_EVERY).await;
            }
            outcome => return outcome,
        }
    }
}

/// Connects to the master the sentinels name, once it confirms it is one.
async fn resolve(
    target: &SentinelTarget,
    options: &ConnectOptions,
    pushes: &Pushes,
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
    let manager = ConnectionManager::new_with_config(client, pushes.config(options))
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
