//! The read-only calls: what holds a name, of each kind, and who waits.

use std::collections::HashMap;
use std::time::Duration;

use super::{LOCK_STATUS, QUEUE_WINDOW, REENTRANT_STATUS, RW_STATUS, invoke_typed, millis};
use crate::backend::Backend;
use crate::error::Result;
use crate::key::LockKeys;

/// A lock's state as stored, from [`lock_status`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Status {
    /// The holder's owner token.
    pub(crate) holder: Option<String>,
    /// The lease's remaining time, if held with an expiry.
    pub(crate) remaining: Option<Duration>,
    /// The last fencing token issued.
    pub(crate) fence: Option<u64>,
    /// Live waiters in the queue.
    pub(crate) waiters: usize,
}

/// Reads a lock's holder, remaining lease and last fence; changes nothing.
pub(crate) async fn lock_status(backend: &Backend, keys: &LockKeys) -> Result<Status> {
    let (holder, pttl, fence, waiters): (Option<String>, i64, Option<u64>, usize) = backend
        .invoke(
            LOCK_STATUS
                .key(keys.lock())
                .key(keys.fence())
                .key(keys.queue())
                .key(keys.alive())
                .arg(millis(QUEUE_WINDOW)),
            keys.lock(),
        )
        .await?;
    Ok(Status {
        holder,
        remaining: u64::try_from(pttl).ok().map(Duration::from_millis),
        fence,
        waiters,
    })
}

/// The most entries of one kind [`rw_status`] lists (it counts them all):
/// enough to see who holds, small enough for one reply.
pub(crate) const STATUS_MOST_ENTRIES: usize = 100;

/// The live entries of an RwLock or a semaphore, from [`rw_status`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct SetStatus {
    /// The last fencing token issued.
    pub(crate) fence: Option<u64>,
    /// The entries, grouped by the text before the first `:` of their
    /// member: an RwLock's kind (`r`, `w`, `i`), a semaphore's permits.
    pub(crate) groups: Vec<EntryGroup>,
}

/// Live entries whose members start alike, from [`rw_status`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct EntryGroup {
    /// What their members start with, up to the first `:`.
    pub(crate) prefix: String,
    /// How many there are.
    pub(crate) count: usize,
    /// The first [`STATUS_MOST_ENTRIES`] of them, soonest to expire first:
    /// the rest of the member (after `prefix:`) and the time left.
    pub(crate) entries: Vec<(String, Duration)>,
}

/// Reads the live entries of an RwLock or a semaphore and the last fence;
/// changes nothing (expired entries are skipped, not pruned).
pub(crate) async fn rw_status(backend: &Backend, keys: &LockKeys) -> Result<SetStatus> {
    type Group = (String, usize, Vec<(String, u64)>);
    let mut invocation = RW_STATUS.prepare_invoke();
    invocation
        .key(keys.lock())
        .key(keys.fence())
        .arg(STATUS_MOST_ENTRIES);
    let (fence, groups): (Option<u64>, Vec<Group>) =
        invoke_typed(backend, &invocation, keys).await?;
    let groups = groups
        .into_iter()
        .map(|(prefix, count, entries)| EntryGroup {
            prefix,
            count,
            entries: entries
                .into_iter()
                .map(|(rest, left)| (rest, Duration::from_millis(left)))
                .collect(),
        })
        .collect();
    Ok(SetStatus { fence, groups })
}

/// A reentrant lock's state as stored, from [`reentrant_status`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ReentrantState {
    /// The owner id.
    pub(crate) owner: Option<String>,
    /// The owner's holds.
    pub(crate) holds: usize,
    /// The lock's remaining time, if held with an expiry.
    pub(crate) remaining: Option<Duration>,
    /// The owner's fence while held, else the last one issued.
    pub(crate) fence: Option<u64>,
}

/// Reads a reentrant lock's owner, holds, remaining lease and fence;
/// changes nothing.
pub(crate) async fn reentrant_status(backend: &Backend, keys: &LockKeys) -> Result<ReentrantState> {
    let mut invocation = REENTRANT_STATUS.prepare_invoke();
    invocation.key(keys.lock()).key(keys.fence());
    let (owner, holds, pttl, fence): (Option<String>, usize, i64, Option<u64>) =
        invoke_typed(backend, &invocation, keys).await?;
    Ok(ReentrantState {
        owner,
        holds,
        remaining: u64::try_from(pttl).ok().map(Duration::from_millis),
        fence,
    })
}

/// How many connections listen for the releases of the lock whose release
/// channel is `channel` (clients waiting for it, or that did so in the last
/// seconds): those on the channel itself, and one per hand-off channel
/// `<channel>:<connection id>` (each belongs to one connection), over every
/// node of a cluster. Where servers have sharded pub/sub, shard
/// subscriptions count too (a client without it, e.g. an ACL user without
/// SSUBSCRIBE, still subscribes the plain way).
pub(crate) async fn subscribers(backend: &Backend, channel: &str) -> Result<usize> {
    let mut kinds = vec![("NUMSUB", "CHANNELS")];
    if backend.sharded_pubsub() {
        kinds.push(("SHARDNUMSUB", "SHARDCHANNELS"));
    }
    let mut count = 0;
    for (numsub, channels) in kinds {
        let on_channel: Vec<HashMap<String, usize>> = backend
            .query_each_node(redis::cmd("PUBSUB").arg(numsub).arg(channel))
            .await?;
        let handoff: Vec<Vec<String>> = backend
            .query_each_node(
                redis::cmd("PUBSUB")
                    .arg(channels)
                    .arg(format!("{}:*", crate::key::glob_escape(channel))),
            )
            .await?;
        count += on_channel.iter().flat_map(HashMap::values).sum::<usize>();
        count += handoff.iter().map(Vec::len).sum::<usize>();
    }
    Ok(count)
}

/// Writes what a hold says of its holder at `key` ([`LockKeys::who`]): the
/// text `about` for `ttl` (`Some` both), or renews it for `ttl` where it is
/// still there (`about` `None`), or deletes it (`ttl` `None`). Plain
/// commands, not owner-checked: the text is only ever read for a hold that
/// is live, by its id.
pub(crate) async fn describe(
    backend: &Backend,
    key: &str,
    about: Option<&str>,
    ttl: Option<Duration>,
) -> Result<()> {
    let cmd = match (about, ttl) {
        (Some(about), Some(ttl)) => {
            let mut cmd = redis::cmd("SET");
            cmd.arg(key).arg(about).arg("PX").arg(millis(ttl));
            cmd
        }
        (None, Some(ttl)) => {
            let mut cmd = redis::cmd("PEXPIRE");
            cmd.arg(key).arg(millis(ttl));
            cmd
        }
        (_, None) => {
            let mut cmd = redis::cmd("DEL");
            cmd.arg(key);
            cmd
        }
    };
    backend.query::<redis::Value>(&cmd, key).await.map(|_| ())
}

/// What the holds at `keys` ([`LockKeys::who`], all of one lock, so of one
/// slot) say of their holders, in order; `None` where nothing is said.
pub(crate) async fn who(backend: &Backend, keys: &[String]) -> Result<Vec<Option<String>>> {
    let Some(first) = keys.first() else {
        return Ok(Vec::new());
    };
    let mut cmd = redis::cmd("MGET");
    for key in keys {
        cmd.arg(key);
    }
    backend.query(&cmd, first).await
}
