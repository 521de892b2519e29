//! The election's calls: its leader record beside the lock of the same name.

use std::time::Duration;

use super::{
    ELECTION_ANNOUNCE, ELECTION_LEADER, ELECTION_VACATE, Owned, Spread, invoke_typed, lock_release,
    sharded,
};
use crate::backend::Backend;
use crate::error::{Error, Result};
use crate::key::LockKeys;

/// Steps down from an election (its leader record dropped, observers told)
/// if `token` leads it, then gives the lease back as [`lock_release`] does,
/// handing it to the first live standby.
pub(super) async fn election_release(
    backend: &Backend,
    keys: &LockKeys,
    token: &str,
    spread: Spread,
) -> Result<Owned> {
    election_vacate(backend, keys, token).await?;
    lock_release(backend, keys, token, spread).await
}

/// Drops the leader record of the election `keys` if `token` holds its
/// lease, and tells the observers (`election_vacate.lua`); the lease stays.
pub(super) async fn election_vacate(backend: &Backend, keys: &LockKeys, token: &str) -> Result<()> {
    let mut invocation = ELECTION_VACATE.prepare_invoke();
    invocation
        .key(keys.lock())
        .key(keys.leader())
        .key(keys.elected())
        .arg(token)
        .arg(sharded(backend));
    let _led: i64 = backend.invoke(&invocation, keys.lock()).await?;
    Ok(())
}

/// Records `value` and `term` as the leader of the election `keys` if
/// `token` holds its lease, for as long as the lease lasts, and tells the
/// observers. Says whether it did.
pub(crate) async fn election_announce(
    backend: &Backend,
    keys: &LockKeys,
    token: &str,
    term: u64,
    value: &str,
) -> Result<bool> {
    let mut invocation = ELECTION_ANNOUNCE.prepare_invoke();
    invocation
        .key(keys.lock())
        .key(keys.leader())
        .key(keys.elected())
        .arg(token)
        .arg(term)
        .arg(value)
        .arg(sharded(backend));
    let code: i64 = invoke_typed(backend, &invocation, keys).await?;
    Ok(code == 1)
}

/// An election's leader as stored: its value, term and remaining lease.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Leading {
    pub(crate) value: String,
    pub(crate) term: u64,
    pub(crate) remaining: Option<Duration>,
}

/// Reads who leads the election `keys`: `None` when nobody holds its lease
/// or the holder has not recorded its value yet. Changes nothing.
pub(crate) async fn election_leader(backend: &Backend, keys: &LockKeys) -> Result<Option<Leading>> {
    let mut invocation = ELECTION_LEADER.prepare_invoke();
    invocation.key(keys.lock()).key(keys.leader());
    let reply: Vec<redis::Value> = invoke_typed(backend, &invocation, keys).await?;
    if reply.is_empty() {
        return Ok(None);
    }
    let (value, term, pttl): (String, u64, i64) =
        redis::FromRedisValue::from_redis_value(redis::Value::Array(reply))
            .map_err(|e| Error::Redis(e.into()))?;
    Ok(Some(Leading {
        value,
        term,
        remaining: u64::try_from(pttl).ok().map(Duration::from_millis),
    }))
}
