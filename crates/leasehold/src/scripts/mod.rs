//! Server-side operations: one `.lua` file each, one typed caller each.
//!
//! Scripts are constants; every variable goes through KEYS and ARGV, and all
//! keys of one call share one hash tag. Primitives call these functions and
//! never build Redis commands themselves.

use std::sync::{Arc, LazyLock};
use std::time::Duration;

use futures_util::future::BoxFuture;
use redis::{Script, ScriptInvocation};

use crate::backend::Backend;
use crate::error::{Error, Result};
use crate::key::LockKeys;
use crate::kind::LockKind;
use crate::telemetry::LostReason;

mod breaking;
mod election;
#[cfg(test)]
mod shake;
mod status;

pub(crate) use breaking::{BrokenSet, lease_break, lock_break};
use election::election_release;
pub(crate) use election::{Leading, election_announce, election_leader};
pub(crate) use status::{
    ReentrantState, STATUS_MOST_ENTRIES, SetStatus, Status, describe, lock_status,
    reentrant_status, rw_status, subscribers, who,
};

/// The prelude every script starts with: the helpers they share (server
/// time, fences, the batched renewal loop).
#[cfg(test)]
const PRELUDE: &str = include_str!("prelude.lua");

/// Every script, by name, as written in its file (without the prelude).
const BODIES: &[(&str, &str)] = &[
    ("lock_acquire", include_str!("lock_acquire.lua")),
    ("lock_release", include_str!("lock_release.lua")),
    ("lock_extend", include_str!("lock_extend.lua")),
    ("lock_retake", include_str!("lock_retake.lua")),
    ("lock_status", include_str!("lock_status.lua")),
    ("reentrant_acquire", include_str!("reentrant_acquire.lua")),
    ("reentrant_release", include_str!("reentrant_release.lua")),
    ("reentrant_extend", include_str!("reentrant_extend.lua")),
    ("reentrant_status", include_str!("reentrant_status.lua")),
    ("rw_acquire", include_str!("rw_acquire.lua")),
    ("rw_release", include_str!("rw_release.lua")),
    ("rw_extend", include_str!("rw_extend.lua")),
    ("rw_downgrade", include_str!("rw_downgrade.lua")),
    ("rw_status", include_str!("rw_status.lua")),
    ("sem_acquire", include_str!("sem_acquire.lua")),
    ("election_announce", include_str!("election_announce.lua")),
    ("election_leader", include_str!("election_leader.lua")),
    ("election_vacate", include_str!("election_vacate.lua")),
    ("election_extend", include_str!("election_extend.lua")),
    ("lease_break", include_str!("lease_break.lua")),
];

// `SHIPPED`: every script's text as shipped, by name, written by build.rs:
// its file with the part of prelude.lua it uses put in at its top, without
// comment lines, blank lines and indentation (shake.rs).
include!(concat!(env!("OUT_DIR"), "/shipped_scripts.rs"));

/// The script `name` as it is shipped: its file with the part of
/// [`PRELUDE`] it uses put in at its top, comment lines left out
/// (`shake.rs`, at build time).
/// `None` for an unknown name.
///
/// No script has a `#!lua` line (script flags such as `no-writes`): Redis
/// 6.2 refuses them as a syntax error, and one text for every server keeps
/// the scripts tested exactly as shipped.
pub(crate) fn source(name: &str) -> Option<String> {
    BODIES.iter().find(|(n, _)| *n == name)?;
    let (_, text) = SHIPPED.iter().find(|(n, _)| *n == name)?;
    Some((*text).to_owned())
}

/// Every shipped script's SHA1 (lower-case hex, as EVALSHA carries it) and
/// name, so a simulator can tell which script a request runs (exported as
/// `leasehold::sim_script_names` in simulation builds only).
#[cfg(leasehold_sim)]
pub fn script_names() -> Vec<(String, &'static str)> {
    BODIES
        .iter()
        .map(|(name, _)| (load(name).get_hash().to_owned(), *name))
        .collect()
}

fn load(name: &str) -> Script {
    Script::new(&source(name).expect("every script is listed in BODIES"))
}

static LOCK_ACQUIRE: LazyLock<Script> = LazyLock::new(|| load("lock_acquire"));
static LOCK_RELEASE: LazyLock<Script> = LazyLock::new(|| load("lock_release"));
static LOCK_EXTEND: LazyLock<Script> = LazyLock::new(|| load("lock_extend"));
static LOCK_RETAKE: LazyLock<Script> = LazyLock::new(|| load("lock_retake"));
static LOCK_STATUS: LazyLock<Script> = LazyLock::new(|| load("lock_status"));
static REENTRANT_ACQUIRE: LazyLock<Script> = LazyLock::new(|| load("reentrant_acquire"));
static REENTRANT_RELEASE: LazyLock<Script> = LazyLock::new(|| load("reentrant_release"));
static REENTRANT_EXTEND: LazyLock<Script> = LazyLock::new(|| load("reentrant_extend"));
static REENTRANT_STATUS: LazyLock<Script> = LazyLock::new(|| load("reentrant_status"));
static RW_ACQUIRE: LazyLock<Script> = LazyLock::new(|| load("rw_acquire"));
static RW_RELEASE: LazyLock<Script> = LazyLock::new(|| load("rw_release"));
static RW_EXTEND: LazyLock<Script> = LazyLock::new(|| load("rw_extend"));
static RW_DOWNGRADE: LazyLock<Script> = LazyLock::new(|| load("rw_downgrade"));
static RW_STATUS: LazyLock<Script> = LazyLock::new(|| load("rw_status"));
static SEM_ACQUIRE: LazyLock<Script> = LazyLock::new(|| load("sem_acquire"));
static ELECTION_ANNOUNCE: LazyLock<Script> = LazyLock::new(|| load("election_announce"));
static ELECTION_LEADER: LazyLock<Script> = LazyLock::new(|| load("election_leader"));
static ELECTION_VACATE: LazyLock<Script> = LazyLock::new(|| load("election_vacate"));
static ELECTION_EXTEND: LazyLock<Script> = LazyLock::new(|| load("election_extend"));
static LEASE_BREAK: LazyLock<Script> = LazyLock::new(|| load("lease_break"));

/// What the core needs to know about one kind of lease, as data. It is the
/// one place a kind is told apart: the wait loop, the watchdog, background
/// releases and Redlock read it, and none of them matches on the kind.
pub(crate) struct Description {
    /// Renews a batch of its leases (KEYS: each lease's key, followed by
    /// `renews_too` of it if set; ARGV: its hold and TTL in ms), answering
    /// one code per lease as [`Owned`].
    extend: &'static LazyLock<Script>,
    /// A key renewed with each lease, named from the lease's key (an
    /// election's leader record).
    renews_too: Option<fn(&str) -> String>,
    /// Gives one lease back by its hold, waking waiters if that frees the
    /// lock: an explicit release, a dropped guard, a cancelled acquire.
    release: for<'a> fn(&'a Backend, &'a LockKeys, &'a str, Spread) -> BoxFuture<'a, Result<Owned>>,
    /// Its waiters queue (on one server) and a release hands the lease
    /// straight to the first of them.
    pub(crate) hands_off: bool,
    /// On Redlock, a quorum's renewal or acquisition puts the lease back on
    /// the nodes that lost it (only a lock has a Redlock form).
    pub(crate) retakes_on_redlock: bool,
}

static LOCK: Description = Description {
    extend: &LOCK_EXTEND,
    renews_too: None,
    release: |b, k, hold, spread| Box::pin(lock_release(b, k, hold, spread)),
    hands_off: true,
    retakes_on_redlock: true,
};
/// A lease lock (its queue, hand-off and fences) whose leader record lives
/// and ends with the lease.
static ELECTION: Description = Description {
    extend: &ELECTION_EXTEND,
    renews_too: Some(crate::key::leader_key),
    release: |b, k, hold, spread| Box::pin(election_release(b, k, hold, spread)),
    hands_off: true,
    retakes_on_redlock: false,
};
static REENTRANT: Description = Description {
    extend: &REENTRANT_EXTEND,
    renews_too: None,
    // Any owner's hold, by its id.
    release: |b, k, hold, _| Box::pin(reentrant_release(b, k, "", hold, None)),
    hands_off: false,
    retakes_on_redlock: false,
};
static RW: Description = Description {
    extend: &RW_EXTEND,
    renews_too: None,
    release: |b, k, member, _| Box::pin(rw_release(b, k, member)),
    hands_off: false,
    retakes_on_redlock: false,
};
/// A permit is an entry of a sorted set, as an RwLock hold.
static SEMAPHORE: Description = Description {
    extend: &RW_EXTEND,
    renews_too: None,
    release: |b, k, member, _| Box::pin(sem_release(b, k, member)),
    hands_off: false,
    retakes_on_redlock: false,
};

impl LockKind {
    /// This kind's [`Description`].
    pub(crate) fn describe(self) -> &'static Description {
        match self {
            LockKind::Lock => &LOCK,
            LockKind::Reentrant => &REENTRANT,
            LockKind::RwLock => &RW,
            LockKind::Semaphore => &SEMAPHORE,
            LockKind::Election => &ELECTION,
        }
    }
}

/// The fence memory argument of the acquire scripts: how long the last
/// fence of a name is kept at least (`prelude.lua`), in ms, never 0.
fn memory_ms(fence_memory: Duration) -> u64 {
    millis(fence_memory).max(1)
}

/// The least a lease handed off at release waits for the waiter it was
/// handed to. It waits until the waiter's queue deadline (a live waiter
/// tries again before that, message or not), and at least this long.
/// Normally the waiter takes it within a round trip; if it died since its
/// last attempt, the lease is free again after its deadline.
pub(crate) const HANDOFF_GRACE: Duration = Duration::from_millis(500);

/// How long a waiter stays in a lock's queue without trying again. Waiters
/// try at least every third of it ([`QUEUE_HEARTBEAT`]), so only a dead
/// waiter drops out.
pub(crate) const QUEUE_WINDOW: Duration = Duration::from_secs(3);

/// The longest a queued waiter sleeps between attempts.
pub(crate) const QUEUE_HEARTBEAT: Duration = Duration::from_secs(1);

/// Reply of [`lock_acquire`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Acquire {
    /// The caller holds the lease, with this fencing token.
    Acquired {
        /// The fencing token.
        fence: u64,
    },
    /// Another owner holds it.
    Held {
        /// The holder's remaining lease, if the key has an expiry.
        remaining: Option<Duration>,
        /// Redlock: some node did not answer, so the attempt may have taken
        /// the lease there; it must be given back if the caller gives up
        /// (the caller's own retries find it already theirs).
        unsettled: bool,
        /// A lease lock's waiter: queued until this deadline (ms of server
        /// time), which a lease handed to it names (`lock_release.lua`).
        queued_until: Option<u64>,
    },
}

/// Outcome of an owner-checked change to one lease.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Owned {
    /// The change was made: the caller owned the lease.
    Done,
    /// No lease exists (it expired or was released).
    Missing,
    /// Another owner holds the lease; nothing was changed.
    OtherOwner,
}

impl Owned {
    /// The reason a renewal, extend or release that found the lease not
    /// ours gives.
    pub(crate) fn lost_reason(self) -> LostReason {
        match self {
            Owned::OtherOwner => LostReason::Taken,
            Owned::Missing | Owned::Done => LostReason::Expired,
        }
    }

    fn from_code(code: i64) -> Owned {
        match code {
            1 => Owned::Done,
            0 => Owned::Missing,
            _ => Owned::OtherOwner,
        }
    }
}

/// Whether a lock attempt joins the queue of waiters when refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Queueing {
    /// The caller does not wait (`try_acquire`), or waits without queueing
    /// (Redlock, where queues on separate nodes could disagree).
    No,
    /// The caller waits; `already` if an earlier attempt was refused, so it
    /// may be queued and must leave the queue when it acquires.
    Wait { already: bool },
}

/// How a lock is spread over servers, as its scripts need to know.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Spread {
    /// One server: queue-based hand-off. `queued`: the TTL the hold queued
    /// with, if it may be a queued waiter (a cancelled acquire); its member
    /// of the queue names it, and the release takes it out.
    One { queued: Option<Duration> },
    /// One of several Redlock nodes: fences at least the server clock (so the
    /// nodes' fences are comparable), and releases wake non-queued waiters.
    Quorum,
    /// A Redlock node, giving back what an attempt a quorum refused took:
    /// wakes nobody, since a quorum still refuses. Waking waiters there
    /// made them retry at once, take the node again and give it back
    /// again, so a node that restarted empty under a holder stayed busy
    /// with attempts and the holder's re-take (which sets only a missing
    /// key) rarely found it free.
    QuorumQuiet,
}

/// Takes the lease `keys.lock()` for `token` if it is free or already
/// `token`'s (a retry, or a hand-off), issuing a new fencing token; when
/// refused and waiting, joins the queue. With `fair`, a free lease goes to
/// the caller only if no live waiter is ahead of it in the queue.
pub(crate) async fn lock_acquire(
    backend: &Backend,
    keys: &LockKeys,
    token: &str,
    ttl: Duration,
    queueing: Queueing,
    fair: bool,
    fence_memory: Duration,
) -> Result<Acquire> {
    let invocation = lock_acquire_call(
        keys,
        token,
        ttl,
        queueing,
        fair,
        fence_memory,
        backend.id(),
        backend.is_cluster(),
    );
    let reply: Vec<i64> = invoke_typed(backend, &invocation, keys).await?;
    match *reply.as_slice() {
        [acquired, value] => Ok(Acquire::from_pair((acquired, value))),
        [0, pttl, deadline] => Ok(Acquire::Held {
            remaining: u64::try_from(pttl).ok().map(Duration::from_millis),
            unsettled: false,
            queued_until: u64::try_from(deadline).ok(),
        }),
        _ => Err(Error::Unsupported(format!(
            "the lock acquire script replied {reply:?}"
        ))),
    }
}

/// The call [`lock_acquire`] sends from the connection `connection`:
/// every key and argument, in the script's order. `resent`: the driver may
/// run the call twice (a cluster), so a first attempt that is granted
/// leaves the queue its first run may have put it in.
#[allow(clippy::too_many_arguments)]
pub(crate) fn lock_acquire_call(
    keys: &LockKeys,
    token: &str,
    ttl: Duration,
    queueing: Queueing,
    fair: bool,
    fence_memory: Duration,
    connection: &str,
    resent: bool,
) -> ScriptInvocation<'static> {
    let queues = match queueing {
        Queueing::No => "0",
        Queueing::Wait { already: false } if resent => "3",
        Queueing::Wait { already: false } => "1",
        Queueing::Wait { already: true } => "2",
    };
    let mut invocation = LOCK_ACQUIRE.prepare_invoke();
    invocation
        .key(keys.lock())
        .key(keys.fence())
        .key(keys.queue())
        .key(keys.alive())
        .arg(token)
        .arg(millis(ttl))
        .arg(memory_ms(fence_memory))
        .arg(millis(QUEUE_WINDOW))
        .arg(queues)
        .arg(if fair { "1" } else { "0" })
        .arg(connection);
    invocation
}

/// Runs an acquire script replying `{1, fence}` or `{0, pttl}`.
async fn acquire_reply(
    backend: &Backend,
    invocation: &redis::ScriptInvocation<'_>,
    keys: &LockKeys,
) -> Result<Acquire> {
    invoke_typed(backend, invocation, keys)
        .await
        .map(Acquire::from_pair)
}

/// Runs a script on the lock `keys`. A key of another type is refused by
/// the script itself, which names it (`refuse_key` in `prelude.lua`), so
/// [`Error::WrongType`] carries exactly the key that holds it.
async fn invoke_typed<T: redis::FromRedisValue>(
    backend: &Backend,
    invocation: &redis::ScriptInvocation<'_>,
    keys: &LockKeys,
) -> Result<T> {
    backend.invoke(invocation, keys.lock()).await
}

impl Acquire {
    fn from_pair((acquired, value): (i64, i64)) -> Acquire {
        if acquired == 1 {
            Acquire::Acquired {
                fence: u64::try_from(value).unwrap_or(0),
            }
        } else {
            Acquire::Held {
                remaining: u64::try_from(value).ok().map(Duration::from_millis),
                unsettled: false,
                queued_until: None,
            }
        }
    }
}

/// Gives the lease back if `token` owns it, handing it to the first live
/// waiter (and waking only that one); otherwise only takes `token` out of
/// the queue of waiters.
pub(crate) async fn lock_release(
    backend: &Backend,
    keys: &LockKeys,
    token: &str,
    spread: Spread,
) -> Result<Owned> {
    let invocation = lock_release_call(
        keys,
        token,
        spread,
        backend.id(),
        sharded(backend),
        !backend.keeps_fences(),
    );
    let code: i64 = backend.invoke(&invocation, keys.lock()).await?;
    Ok(Owned::from_code(code))
}

/// The release scripts' last argument: '1' to drop the name's last fence
/// when a release frees the lock, unless the client keeps fences longer
/// (`ClientBuilder::fence_memory`).
fn drops_fence(backend: &Backend) -> &'static str {
    if backend.keeps_fences() { "0" } else { "1" }
}

/// The call [`lock_release`] sends from the connection `connection`;
/// `sharded` publishes by SPUBLISH (ARGV[7], see [`sharded`]); with
/// `drops_fence` a release that frees the lock drops the name's last fence
/// too (ARGV[8]: the client keeps no fence beyond its lease).
pub(crate) fn lock_release_call(
    keys: &LockKeys,
    token: &str,
    spread: Spread,
    connection: &str,
    sharded: &str,
    drops_fence: bool,
) -> ScriptInvocation<'static> {
    let mut invocation = LOCK_RELEASE.prepare_invoke();
    invocation
        .key(keys.lock())
        .key(keys.channel())
        .key(keys.queue())
        .key(keys.alive())
        .key(keys.fence())
        .arg(token)
        .arg(millis(HANDOFF_GRACE))
        .arg(if spread == Spread::Quorum { "1" } else { "0" })
        .arg(connection)
        .arg(millis(QUEUE_WINDOW))
        .arg(match spread {
            Spread::One { queued: Some(ttl) } => millis(ttl).to_string(),
            _ => String::new(),
        })
        .arg(sharded)
        .arg(if drops_fence { "1" } else { "0" });
    invocation
}

/// One hold as a release names it: its kind (whose scripts release it), its
/// lock's keys, its identity in those scripts (see [`Extension`]) and, for
/// a waiter of a lease lock that may be queued (a cancelled acquire), the
/// TTL it queued with: its member of the queue names it, and the release
/// takes it out (on one server only: Redlock's waiters do not queue).
#[derive(Clone, Copy)]
pub(crate) struct LeaseId<'a> {
    pub(crate) kind: LockKind,
    pub(crate) keys: &'a LockKeys,
    pub(crate) hold: &'a str,
    pub(crate) queued: Option<Duration>,
}

impl LeaseId<'_> {
    /// The same hold, owned: for a release that outlives the caller's borrow.
    pub(crate) fn owned(self) -> OwnedLeaseId {
        OwnedLeaseId {
            kind: self.kind,
            keys: Arc::new(self.keys.clone()),
            hold: self.hold.to_owned(),
            queued: self.queued,
        }
    }
}

/// A [`LeaseId`] that owns its parts: a release handed to a task.
pub(crate) struct OwnedLeaseId {
    pub(crate) kind: LockKind,
    pub(crate) keys: Arc<LockKeys>,
    pub(crate) hold: String,
    pub(crate) queued: Option<Duration>,
}

impl OwnedLeaseId {
    pub(crate) fn id(&self) -> LeaseId<'_> {
        LeaseId {
            kind: self.kind,
            keys: &self.keys,
            hold: &self.hold,
            queued: self.queued,
        }
    }
}

/// One lease to renew: its key, its identity in its kind's scripts (the
/// owner token of a lock, the hold id of a reentrant lock, the member of an
/// RwLock) and its new TTL.
#[derive(Clone, Copy)]
pub(crate) struct Extension<'a> {
    pub(crate) key: &'a str,
    pub(crate) hold: &'a str,
    pub(crate) ttl: Duration,
}

/// Renews leases of one kind in one call: each that is still held is set
/// to last `ttl` from now. All keys must share one hash slot when the server
/// is a cluster.
pub(crate) async fn extend(
    backend: &Backend,
    kind: LockKind,
    leases: &[Extension<'_>],
) -> Result<Vec<Owned>> {
    let description = kind.describe();
    let codes = per_lease(
        backend,
        description.extend,
        leases,
        description.renews_too,
        &format!("{kind:?} renewal"),
    )
    .await?;
    Ok(codes.into_iter().map(Owned::from_code).collect())
}

/// Sets lock leases back to their owner for their TTL on this server (a
/// Redlock node that lost them or where a waiter's attempt holds the key);
/// only for leases a quorum of the other nodes holds. A key of another type
/// is left alone. Says, per lease, whether it was set back.
pub(crate) async fn lock_retake(backend: &Backend, leases: &[Extension<'_>]) -> Result<Vec<bool>> {
    let codes = per_lease(backend, &LOCK_RETAKE, leases, None, "lock re-take").await?;
    Ok(codes.into_iter().map(|code| code == 1).collect())
}

/// Runs `script` over `leases` (KEYS: each lease's key, and after it
/// `renews_too` of it if given; ARGV: its hold and TTL), which answers one
/// code per lease.
async fn per_lease(
    backend: &Backend,
    script: &Script,
    leases: &[Extension<'_>],
    renews_too: Option<fn(&str) -> String>,
    what: &str,
) -> Result<Vec<i64>> {
    let Some(first) = leases.first() else {
        return Ok(Vec::new());
    };
    let mut invocation = script.prepare_invoke();
    for lease in leases {
        invocation.key(lease.key);
        if let Some(beside) = renews_too {
            invocation.key(beside(lease.key));
        }
        invocation.arg(lease.hold).arg(millis(lease.ttl));
    }
    let codes: Vec<i64> = backend.invoke(&invocation, first.key).await?;
    if codes.len() != leases.len() {
        return Err(Error::Unsupported(format!(
            "the {what} returned {} results for {} leases",
            codes.len(),
            leases.len()
        )));
    }
    Ok(codes)
}

/// Gives back one lease of any kind by its identity, waking waiters if that
/// frees the lock. `spread` says how the lock is spread over servers (on
/// one server, [`Spread::One`] carries `id.queued`).
pub(crate) async fn release(backend: &Backend, id: LeaseId<'_>, spread: Spread) -> Result<Owned> {
    (id.kind.describe().release)(backend, id.keys, id.hold, spread).await
}

/// Adds hold `hold` for `owner` to the reentrant lock if it is free or
/// already `owner`'s; the fence is the one issued when `owner` took it.
pub(crate) async fn reentrant_acquire(
    backend: &Backend,
    keys: &LockKeys,
    owner: &str,
    hold: &str,
    ttl: Duration,
    fence_memory: Duration,
) -> Result<Acquire> {
    let mut invocation = REENTRANT_ACQUIRE.prepare_invoke();
    invocation
        .key(keys.lock())
        .key(keys.fence())
        .arg(owner)
        .arg(hold)
        .arg(millis(ttl))
        .arg(memory_ms(fence_memory));
    acquire_reply(backend, &invocation, keys).await
}

/// Gives back one hold of a reentrant lock: hold `hold` of `owner` (or of
/// whoever holds it, if `owner` is empty); or, with `hold` empty, any one
/// hold of `owner`, once for the call `call` (a unique id, required then):
/// run twice, the script answers what its first run did. Frees the lock and
/// wakes waiters when no hold is left.
pub(crate) async fn reentrant_release(
    backend: &Backend,
    keys: &LockKeys,
    owner: &str,
    hold: &str,
    call: Option<&str>,
) -> Result<Owned> {
    let mut invocation = REENTRANT_RELEASE.prepare_invoke();
    invocation
        .key(keys.lock())
        .key(keys.channel())
        .key(keys.fence());
    if let Some(call) = call {
        invocation.key(keys.call(call));
    }
    invocation
        .arg(owner)
        .arg(hold)
        .arg(sharded(backend))
        .arg(drops_fence(backend));
    let code: i64 = backend.invoke(&invocation, keys.lock()).await?;
    Ok(Owned::from_code(code))
}

/// Reply of [`rw_acquire`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum RwAcquire {
    /// Taken, or blocked (as for a lock).
    Lock(Acquire),
    /// A write by an owner that holds only reads: refused.
    Upgrade,
}

/// Read or write mode of an RwLock hold.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Mode {
    Read,
    Write,
}

impl Mode {
    fn code(self) -> &'static str {
        match self {
            Mode::Read => "r",
            Mode::Write => "w",
        }
    }

    /// The sorted-set member of hold `hold` of `owner` in this mode.
    pub(crate) fn member(self, hold: &str, owner: &str) -> String {
        format!("{}:{hold}:{owner}", self.code())
    }
}

/// One attempt at an RwLock hold, from [`rw_acquire`].
#[derive(Debug, Clone, Copy)]
pub(crate) struct RwAttempt<'a> {
    pub(crate) mode: Mode,
    pub(crate) owner: &'a str,
    pub(crate) hold: &'a str,
    pub(crate) ttl: Duration,
    /// A blocked writer registers as waiting (for `ttl`), which stops new
    /// readers.
    pub(crate) waits: bool,
    /// How long the fence issued is kept at least.
    pub(crate) fence_memory: Duration,
}

/// Takes a read or write hold on an RwLock.
pub(crate) async fn rw_acquire(
    backend: &Backend,
    keys: &LockKeys,
    RwAttempt {
        mode,
        owner,
        hold,
        ttl,
        waits,
        fence_memory,
    }: RwAttempt<'_>,
) -> Result<RwAcquire> {
    let mut invocation = RW_ACQUIRE.prepare_invoke();
    invocation
        .key(keys.lock())
        .key(keys.fence())
        .key(keys.writers())
        .arg(mode.code())
        .arg(owner)
        .arg(hold)
        .arg(millis(ttl))
        .arg(memory_ms(fence_memory))
        .arg(if waits { "1" } else { "0" });
    match invoke_typed::<(i64, i64)>(backend, &invocation, keys).await? {
        (-1, _) => Ok(RwAcquire::Upgrade),
        (-2, _) => Err(Error::WrongType {
            key: keys.lock().to_owned(),
        }),
        pair => Ok(RwAcquire::Lock(Acquire::from_pair(pair))),
    }
}

/// Removes one member of an RwLock (a hold or a waiting writer) and wakes
/// every waiter.
pub(crate) async fn rw_release(backend: &Backend, keys: &LockKeys, member: &str) -> Result<Owned> {
    zset_release(backend, keys, member, "all", Some(&keys.writers())).await
}

/// Removes one entry of a sorted set of leases and publishes `payload`.
async fn zset_release(
    backend: &Backend,
    keys: &LockKeys,
    member: &str,
    payload: &str,
    writers: Option<&str>,
) -> Result<Owned> {
    let mut invocation = RW_RELEASE.prepare_invoke();
    invocation
        .key(keys.lock())
        .key(keys.channel())
        .key(keys.fence());
    if let Some(writers) = writers {
        invocation.key(writers);
    }
    let code: i64 = backend
        .invoke(
            invocation
                .arg(member)
                .arg(payload)
                .arg(sharded(backend))
                .arg(drops_fence(backend)),
            keys.lock(),
        )
        .await?;
    Ok(Owned::from_code(code))
}

/// Reply of [`sem_acquire`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum SemAcquire {
    /// Taken, or every permit held (as for a lock).
    Lock(Acquire),
    /// Live permits were taken by clients that count this many permits.
    Mismatch(u64),
}

/// Takes one of `permits` permits of a semaphore as hold `hold`; the
/// permit's member in the set (its identity for release and extend) is
/// [`sem_member`].
pub(crate) async fn sem_acquire(
    backend: &Backend,
    keys: &LockKeys,
    permits: u32,
    hold: &str,
    ttl: Duration,
    fence_memory: Duration,
) -> Result<SemAcquire> {
    let mut invocation = SEM_ACQUIRE.prepare_invoke();
    invocation
        .key(keys.lock())
        .key(keys.fence())
        .arg(permits)
        .arg(hold)
        .arg(millis(ttl))
        .arg(memory_ms(fence_memory));
    match invoke_typed::<(i64, i64)>(backend, &invocation, keys).await? {
        (-1, theirs) => Ok(SemAcquire::Mismatch(u64::try_from(theirs).unwrap_or(0))),
        (-2, _) => Err(Error::WrongType {
            key: keys.lock().to_owned(),
        }),
        pair => Ok(SemAcquire::Lock(Acquire::from_pair(pair))),
    }
}

/// The member of hold `hold` in a semaphore of `permits` permits.
pub(crate) fn sem_member(permits: u32, hold: &str) -> String {
    format!("{permits}:{hold}")
}

/// Gives back one permit (by its member) and wakes one waiter per client:
/// one permit frees, so one waiter can take it.
pub(crate) async fn sem_release(backend: &Backend, keys: &LockKeys, member: &str) -> Result<Owned> {
    zset_release(backend, keys, member, "", None).await
}

/// Replaces write hold `write` by read hold `read` lasting `ttl`, atomically.
pub(crate) async fn rw_downgrade(
    backend: &Backend,
    keys: &LockKeys,
    write: &str,
    read: &str,
    ttl: Duration,
) -> Result<Owned> {
    let code: i64 = backend
        .invoke(
            RW_DOWNGRADE
                .key(keys.lock())
                .key(keys.channel())
                .arg(write)
                .arg(read)
                .arg(millis(ttl))
                .arg(sharded(backend)),
            keys.lock(),
        )
        .await?;
    Ok(Owned::from_code(code))
}

/// The last argument of every script that publishes (`publish` in
/// `prelude.lua`): `"1"` where release messages go by SPUBLISH (a cluster
/// whose masters all have it, see [`Backend::sharded_pubsub`]), else `"0"`.
pub(crate) fn sharded(backend: &Backend) -> &'static str {
    if backend.sharded_pubsub() { "1" } else { "0" }
}

/// Whole milliseconds, at least 1 (Redis refuses `PX 0`).
pub(crate) fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX).max(1)
}

#[cfg(test)]
mod tests {
    use super::shake::{definitions, identifiers, prelude_for, shipped};
    use super::{BODIES, PRELUDE, source};

    /// Each script gets every prelude definition it uses, directly or through
    /// another one, and the lock's own scripts none they do not use.
    #[test]
    fn each_script_carries_the_prelude_definitions_it_uses() {
        let all: Vec<&str> = PRELUDE.split("\n\n").flat_map(definitions).collect();
        assert!(all.len() > 10, "{all:?}");
        for (name, body) in BODIES {
            let prelude = prelude_for(PRELUDE, body);
            let text = shipped(PRELUDE, body);
            // As build.rs wrote it.
            assert_eq!(source(name).as_deref(), Some(text.as_str()), "{name}");
            let present: Vec<&str> = prelude.split("\n\n").flat_map(definitions).collect();
            for used in identifiers(&text) {
                if all.contains(&used) {
                    assert!(present.contains(&used), "{name}.lua uses {used} without it");
                }
            }
        }
        let acquire = prelude_for(PRELUDE, include_str!("lock_acquire.lua"));
        assert!(acquire.contains("local function next_fence("), "{acquire}");
        assert!(
            !acquire.contains("local function handed_fence("),
            "{acquire}"
        );
        assert!(!acquire.contains("local function live_holds("), "{acquire}");
    }

    /// Shipped without comment lines, blank lines or indentation; a line
    /// of code keeps all of it, a `--` in a string or after the code too.
    #[test]
    fn scripts_ship_without_comment_lines_and_keep_every_line_of_code() {
        let prelude = "-- about\n\n-- what f does\nlocal function f(x)\n  return x -- why\nend\n";
        let body = "-- header\n\nlocal s = '--x'\nif true then\n  -- inside\n  return f(s)\nend\n";
        assert_eq!(
            shipped(prelude, body),
            "local function f(x)\nreturn x -- why\nend\nlocal s = '--x'\nif true then\nreturn f(s)\nend\n"
        );
        for (name, body) in BODIES {
            let text = source(name).expect("shipped");
            assert!(text.len() < body.len() + PRELUDE.len(), "{name}");
            let code = |t: &str| -> Vec<String> {
                t.lines()
                    .map(str::trim)
                    .filter(|l| !l.is_empty() && !l.starts_with("--"))
                    .map(str::to_owned)
                    .collect()
            };
            // The body's code, every line of it, in order, at the end.
            assert!(
                text.lines()
                    .map(str::to_owned)
                    .collect::<Vec<_>>()
                    .ends_with(&code(body)),
                "{name}"
            );
        }
    }

    /// Redis 6.2 refuses a script that starts with `#!lua` (flags) as a
    /// syntax error. (What else 6.2 lacks is taken only where the prelude's
    /// `modern` says the server has it: the library's tests run on 6.2.)
    #[test]
    fn no_script_has_a_shebang_line() {
        for (name, text) in BODIES.iter().chain([&("prelude", PRELUDE)]) {
            assert!(!text.starts_with("#!"), "{name}.lua starts with a #! line");
        }
    }
}
