//! The operator's calls that break a stuck lock (`Client::break_lease`):
//! a lease lock released as its holder would, with the holder's token; the
//! sets' holds removed whatever their owner (`lease_break.lua`).

use std::time::Duration;

use super::{LEASE_BREAK, Owned, Spread, lock_release_call, sharded};
use crate::backend::Backend;
use crate::error::Result;
use crate::key::LockKeys;

/// Breaks the lease lock held under `token` (read by the caller from the
/// lock's status): an election's leader record is dropped first when
/// `election`, then the lease is released as its holder would, handed to
/// the first live waiter, except that the name's last fence is kept (with
/// its expiry) whatever the client's fence memory.
pub(crate) async fn lock_break(
    backend: &Backend,
    keys: &LockKeys,
    token: &str,
    election: bool,
) -> Result<Owned> {
    if election {
        super::election::election_vacate(backend, keys, token).await?;
    }
    let invocation = lock_release_call(
        keys,
        token,
        Spread::One { queued: None },
        backend.id(),
        sharded(backend),
        false,
    );
    let code: i64 = backend.invoke(&invocation, keys.lock()).await?;
    Ok(Owned::from_code(code))
}

/// What [`lease_break`] removed: the kind the key's type and members say
/// (`lock` for a string key, which it leaves to [`lock_break`]; `none`
/// for no key), the last fence, and per hold removed its member (or a reentrant lock's
/// owner), the time it had left and how many holds it stood for.
pub(crate) struct BrokenSet {
    pub(crate) kind: String,
    pub(crate) fence: Option<u64>,
    pub(crate) holds: Vec<(String, Option<Duration>, usize)>,
}

/// Removes every live hold of a reentrant lock, RwLock (not its waiting
/// writers) or semaphore whatever its owner, wakes the waiters and keeps
/// the fence key (`lease_break.lua`).
pub(crate) async fn lease_break(backend: &Backend, keys: &LockKeys) -> Result<BrokenSet> {
    let mut invocation = LEASE_BREAK.prepare_invoke();
    invocation
        .key(keys.lock())
        .key(keys.channel())
        .key(keys.fence())
        .arg(sharded(backend));
    let (kind, holds, fence): (String, Vec<(String, i64, usize)>, Option<u64>) =
        backend.invoke(&invocation, keys.lock()).await?;
    Ok(BrokenSet {
        kind,
        fence,
        holds: holds
            .into_iter()
            .map(|(member, left, count)| {
                (
                    member,
                    u64::try_from(left).ok().map(Duration::from_millis),
                    count,
                )
            })
            .collect(),
    })
}
