//! The floor: leasehold's own acquire and release scripts, sent with plain
//! redis-rs on the same kind of connection the library uses (a RESP3
//! `ConnectionManager`), with no library around them.
//!
//! The calls come from the library itself (`leasehold::raw`), built by the
//! same functions as the client's, for a caller that does not wait (queue
//! window 0): the floor never drifts from what the library sends.

use std::time::Duration;

use leasehold::raw::LockCalls;
use redis::aio::{ConnectionManager, ConnectionManagerConfig};
use redis::{IntoConnectionInfo, ProtocolVersion};

use crate::exit::Failure;
use crate::session::redis_failure;

/// The id in hand-off channels and queue entries; the raw loop never
/// queues, so one fixed id does.
const CONNECTION_ID: &str = "raw";

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

/// One lock name's calls, made by the library itself
/// ([`leasehold::raw`]), so the key layout and the arguments are exactly
/// the client's.
#[derive(Debug)]
pub(crate) struct RawKeys(LockCalls);

impl RawKeys {
    /// The calls for `name` under `prefix`; `name` is one of the bench's
    /// own, always valid.
    pub(crate) fn new(prefix: &str, name: &str) -> RawKeys {
        RawKeys(
            LockCalls::new(prefix, name, CONNECTION_ID).expect("the bench's lock names are valid"),
        )
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
    let (acquired, _): (i64, i64) = keys
        .0
        .acquire(token, ttl, redlock_node)
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
    keys.0
        .release(token, redlock_node)
        .invoke_async::<i64>(con)
        .await
        .map_err(|e| redis_failure(e, "in the raw release"))?;
    Ok(())
}
