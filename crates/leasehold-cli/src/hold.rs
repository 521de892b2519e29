//! What `run` holds while its command runs: the plain lock, a read or the
//! write hold of a read-write lock, or a semaphore permit. The library's
//! guards share their methods but no trait, so one enum lets `run`
//! supervise any of them the same way.

use leasehold::{Client, Leadership, LockGuard, Permit, ReadGuard, WriteGuard};

use crate::cli::{LeaseArgs, Mode};
use crate::commands::{per_lease, take};
use crate::exit::Failure;
use crate::progress::Watch;

/// A guard of any primitive `run` can hold.
#[derive(Debug)]
pub(crate) enum Held {
    /// The plain lease lock.
    Lock(LockGuard),
    /// A read hold of a read-write lock.
    Read(ReadGuard),
    /// The write hold of a read-write lock.
    Write(WriteGuard),
    /// A semaphore permit.
    Permit(Permit),
    /// The leadership of an election (`elect`).
    Leader(Leadership),
}

/// Evaluates `$body` with `$guard` bound to whichever guard `$held` is.
macro_rules! each {
    ($held:expr, $guard:ident => $body:expr) => {
        match $held {
            Held::Lock($guard) => $body,
            Held::Read($guard) => $body,
            Held::Write($guard) => $body,
            Held::Permit($guard) => $body,
            Held::Leader($guard) => $body,
        }
    };
}

impl Held {
    /// The fencing token.
    pub(crate) fn fence(&self) -> u64 {
        each!(self, g => g.fence())
    }

    /// The owner token.
    pub(crate) fn token(&self) -> &str {
        each!(self, g => g.token())
    }

    /// True once the lease may have expired or was taken.
    pub(crate) fn is_lost(&self) -> bool {
        each!(self, g => g.is_lost())
    }

    /// Resolves when the lease is lost.
    pub(crate) async fn lost(&self) {
        each!(self, g => g.lost().await);
    }

    /// Gives the hold back, owner-checked.
    pub(crate) async fn release(self) -> leasehold::Result<()> {
        each!(self, g => g.release().await)
    }

    /// The kind, for `run --json`: `lock`, `rwlock` or `semaphore`.
    pub(crate) fn kind(&self) -> &'static str {
        match self {
            Held::Lock(_) => "lock",
            Held::Read(_) | Held::Write(_) => "rwlock",
            Held::Permit(_) => "semaphore",
            Held::Leader(_) => "election",
        }
    }

    /// What is held, for messages: `lock "x"`, `write lock "x"`, ...
    pub(crate) fn what(&self) -> String {
        let kind = match self {
            Held::Lock(_) => "lock",
            Held::Read(_) => "read lock",
            Held::Write(_) => "write lock",
            Held::Permit(_) => "permit of semaphore",
            Held::Leader(_) => "leadership of election",
        };
        format!(
            "{kind} {:?}",
            crate::output::printable(each!(self, g => g.name()))
        )
    }
}

/// Campaigns in the election `name` with `value` until elected, per
/// `lease` (`--no-wait`: one try; `--wait`: bounded).
///
/// # Errors
///
/// The conflict code when another candidate leads and `--no-wait` was
/// given or the wait ran out; the library's errors otherwise.
pub(crate) async fn take_leadership(
    client: &Client,
    name: &str,
    lease: &LeaseArgs,
    value: &str,
) -> Result<Held, Failure> {
    let election = client.election(name).ttl(lease.ttl);
    let lead = per_lease(
        lease,
        async || election.try_campaign(value).await,
        // Campaigning is cancel-safe: a wait that runs out leaves nothing.
        async || match tokio::time::timeout(lease.wait, election.campaign(value)).await {
            Ok(outcome) => outcome,
            Err(_) => Err(leasehold::Error::Timeout {
                name: name.to_owned(),
                waited: lease.wait,
            }),
        },
        || format!("election {name:?} has a leader; see it with `leasehold status {name}`"),
        Watch::lock(client, name),
    );
    lead.await.map(Held::Leader)
}

/// Takes what `mode` names on `name`, per `lease`.
///
/// # Errors
///
/// Exit 75 when it is taken and `--no-wait` was given; the library's
/// errors otherwise (on a Redlock client, every mode but the plain lock is
/// [`leasehold::Error::Unsupported`]).
pub(crate) async fn take_hold(
    client: &Client,
    name: &str,
    lease: &LeaseArgs,
    mode: Mode,
) -> Result<Held, Failure> {
    let rw = || {
        let rw = client.rw_lock(name).ttl(lease.ttl).wait(lease.wait);
        match lease.at_least {
            Some(at_least) => rw.hold_at_least(at_least),
            None => rw,
        }
    };
    match mode {
        Mode::Lock => take(client, name, lease).await.map(Held::Lock),
        Mode::Read => {
            let rw = rw();
            let busy = || format!("read-write lock {name:?} has a writer, or one waits");
            let read = per_lease(
                lease,
                async || rw.try_read().await,
                async || rw.read().await,
                busy,
                Watch::of(client, name, mode),
            );
            read.await.map(Held::Read)
        }
        Mode::Write => {
            let rw = rw();
            let busy = || format!("read-write lock {name:?} has readers or a writer");
            let write = per_lease(
                lease,
                async || rw.try_write().await,
                async || rw.write().await,
                busy,
                Watch::of(client, name, mode),
            );
            write.await.map(Held::Write)
        }
        Mode::Permits(permits) => {
            let mut sem = client
                .semaphore(name, permits)
                .ttl(lease.ttl)
                .wait(lease.wait);
            if let Some(at_least) = lease.at_least {
                sem = sem.hold_at_least(at_least);
            }
            let busy = || format!("all {permits} permits of semaphore {name:?} are held");
            let permit = per_lease(
                lease,
                async || sem.try_acquire().await,
                async || sem.acquire().await,
                busy,
                Watch::of(client, name, mode),
            );
            permit.await.map(Held::Permit)
        }
    }
}
