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

/// What [`lease_break`] read or removed: the kind the key's type and
/// members say (`lock` for a string key, which it leaves to [`lock_break`];
/// `none` for no key), the last fence, and the holds.
pub(crate) struct BrokenSet {
    pub(crate) kind: String,
    pub(crate) fence: Option<u64>,
    pub(crate) holds: Vec<SetHold>,
}

/// One hold [`lease_break`] read or removed.
pub(crate) struct SetHold {
    /// Its member, or a reentrant lock's owner.
    pub(crate) id: String,
    /// The time it had left.
    pub(crate) left: Option<Duration>,
    /// How many holds it stands for (a reentrant owner's), else 1.
    pub(crate) count: usize,
    /// A reentrant lock's fence, which names the owner's tenure; else empty.
    pub(crate) fence: String,
    /// The ids its guards' leases know it by: a reentrant lock's hold ids,
    /// else the member.
    pub(crate) leases: Vec<String>,
}

impl BrokenSet {
    /// What a break of these holds names (`lease_break.lua`'s ARGV[3..]).
    pub(crate) fn names(&self) -> Vec<&str> {
        if self.kind == "reentrant" {
            self.holds
                .iter()
                .flat_map(|h| [h.id.as_str(), h.fence.as_str()])
                .collect()
        } else {
            self.holds.iter().map(|h| h.id.as_str()).collect()
        }
    }
}

/// Reads the live holds of a reentrant lock, RwLock (not its waiting
/// writers) or semaphore, changing nothing (`holds` `None`); or removes
/// those of `holds` (what a read answered, by [`BrokenSet::names`], for
/// the kind `kind`) that are still live, whatever their owner, wakes the
/// waiters and keeps the fence key (`lease_break.lua`). Naming them makes
/// the break safe to run twice: a re-sent call finds none of them once
/// they are gone, and leaves a holder that came after them alone.
pub(crate) async fn lease_break(
    backend: &Backend,
    keys: &LockKeys,
    holds: Option<(&str, &[&str])>,
) -> Result<BrokenSet> {
    type Reply = (
        String,
        Vec<(String, i64, usize, String, Vec<String>)>,
        Option<u64>,
    );
    let mut invocation = LEASE_BREAK.prepare_invoke();
    invocation
        .key(keys.lock())
        .key(keys.channel())
        .key(keys.fence())
        .arg(sharded(backend));
    match holds {
        None => {
            invocation.arg("");
        }
        Some((kind, names)) => {
            invocation.arg(kind);
            for name in names {
                invocation.arg(*name);
            }
        }
    }
    let (kind, holds, fence): Reply = backend.invoke(&invocation, keys.lock()).await?;
    Ok(BrokenSet {
        kind,
        fence,
        holds: holds
            .into_iter()
            .map(|(id, left, count, fence, leases)| SetHold {
                id,
                left: u64::try_from(left).ok().map(Duration::from_millis),
                count,
                fence,
                leases,
            })
            .collect(),
    })
}
