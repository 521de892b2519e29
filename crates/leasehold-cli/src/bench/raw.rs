//! The floor: leasehold's own acquire and release scripts, sent with plain
//! redis-rs on the same kind of connection the library uses (a RESP3
//! `ConnectionManager`), with no library around them.
//!
//! The calls pass the scripts' full KEYS and ARGV as the library does, for
//! a caller that does not wait (queue window 0) on one server.

use std::sync::LazyLock;
use std::time::Duration;

use redis::aio::{ConnectionManager, ConnectionManagerConfig};
use redis::{IntoConnectionInfo, ProtocolVersion, Script};

use crate::exit::Failure;
use crate::session::redis_failure;

/// leasehold's acquire script, byte for byte.
static ACQUIRE: LazyLock<Script> = LazyLock::new(|| {
    Script::new(include_str!(
        "../../../leasehold/src/scripts/lock_acquire.lua"
    ))
});
/// leasehold's release script, byte for byte.
static RELEASE: LazyLock<Script> = LazyLock::new(|| {
    Script::new(include_str!(
        "../../../leasehold/src/scripts/lock_release.lua"
    ))
});

/// The id in hand-off channels and queue entries; the raw loop never
/// queues, so one fixed id does.
const CONNECTION_ID: &str = "raw";
/// The fence key's TTL the library passes (1 h).
const FENCE_TTL_MS: u64 = 3_600_000;
/// How long a handed-off lease waits for its new owner, as the library passes.
const HANDOFF_GRACE_MS: u64 = 500;

/// What the raw loop says in the output.
pub(crate) const DESCRIPTION: &str = "raw = EVALSHA of leasehold's own lock_acquire.lua and \
     lock_release.lua on a redis-rs ConnectionManager (RESP3), no library";

/// A RESP3 connection manager, as the library opens.
pub(crate) async fn connection(url: &str) -> Result<ConnectionManager, Failure> {
    let info = url
        .into_connection_info()
        .map_err(|e| Failure::usage(format!("invalid Redis URL: {e}")))?;
    let settings = info
        .redis_settings()
        .clone()
        .set_protocol(ProtocolVersion::RESP3);
    let info = info.set_redis_settings(settings);
    let client = redis::Client::open(info).map_err(|e| redis_failure(e, "connecting"))?;
    ConnectionManager::new_with_config(client, ConnectionManagerConfig::new())
        .await
        .map_err(|e| redis_failure(e, "connecting"))
}

/// The three keys of one lock name, laid out as the library lays them.
#[derive(Debug, Clone)]
pub(crate) struct RawKeys {
    /// The lease.
    lock: String,
    /// The fence counter.
    fence: String,
    /// The release channel.
    channel: String,
    /// The waiters' queue.
    queue: String,
    /// The waiters' deadlines.
    alive: String,
}

impl RawKeys {
    /// Keys for `name` under `prefix` (`<prefix>:{<name>}:lock` and so on).
    pub(crate) fn new(prefix: &str, name: &str) -> RawKeys {
        let base = format!("{prefix}:{{{name}}}");
        RawKeys {
            lock: format!("{base}:lock"),
            fence: format!("{base}:fence"),
            channel: format!("{base}:released"),
            queue: format!("{base}:queue"),
            alive: format!("{base}:alive"),
        }
    }
}

/// One acquire round trip; true when `token` holds the lease now.
pub(crate) async fn acquire(
    con: &mut ConnectionManager,
    keys: &RawKeys,
    token: &str,
    ttl: Duration,
) -> Result<bool, Failure> {
    acquire_on(con, keys, token, ttl, false).await
}

/// [`acquire`] as on one Redlock node when `redlock_node` (fences raised to
/// the server clock).
pub(crate) async fn acquire_on(
    con: &mut ConnectionManager,
    keys: &RawKeys,
    token: &str,
    ttl: Duration,
    redlock_node: bool,
) -> Result<bool, Failure> {
    let (acquired, _): (i64, i64) = ACQUIRE
        .key(&keys.lock)
        .key(&keys.fence)
        .key(&keys.queue)
        .key(&keys.alive)
        .arg(token)
        .arg(u64::try_from(ttl.as_millis()).unwrap_or(u64::MAX))
        .arg(FENCE_TTL_MS)
        // Queue window 0 (never waits, never queues), never queued before,
        // the clock fence of a Redlock node, not fair, this connection's id.
        .arg(0)
        .arg("0")
        .arg(if redlock_node { "1" } else { "0" })
        .arg("0")
        .arg(CONNECTION_ID)
        .invoke_async(con)
        .await
        .map_err(|e| redis_failure(e, "in the raw acquire"))?;
    Ok(acquired == 1)
}

/// One release round trip.
pub(crate) async fn release(
    con: &mut ConnectionManager,
    keys: &RawKeys,
    token: &str,
) -> Result<(), Failure> {
    release_on(con, keys, token, false).await
}

/// [`release`] as on one Redlock node when `redlock_node` (a message when
/// the lease is freed, for waiters that do not queue).
pub(crate) async fn release_on(
    con: &mut ConnectionManager,
    keys: &RawKeys,
    token: &str,
    redlock_node: bool,
) -> Result<(), Failure> {
    RELEASE
        .key(&keys.lock)
        .key(&keys.channel)
        .key(&keys.queue)
        .key(&keys.alive)
        .arg(token)
        .arg(HANDOFF_GRACE_MS)
        // A message when freed with nobody queued only on a Redlock node.
        .arg(if redlock_node { "1" } else { "0" })
        .arg(CONNECTION_ID)
        .invoke_async::<i64>(con)
        .await
        .map_err(|e| redis_failure(e, "in the raw release"))?;
    Ok(())
}
