//! What `run` holds while its command runs: the plain lock (one name, or
//! several at once), a read or the write hold of a read-write lock, or a
//! semaphore permit, or an election's leadership (`elect`). Every guard of
//! one lease is the library's one [`leasehold::Guard`] with its kind
//! forgotten, so `run` supervises any of them the same way; several names
//! at once are a [`MultiLockGuard`].

use leasehold::{Client, Guard, Lock, LockGuard, LockKind, MultiLockGuard};

use crate::args::Mode;
use crate::exit::Failure;
use crate::parse::LeaseArgs;
use crate::progress::Watch;

/// A guard of any primitive `run` can hold.
#[derive(Debug)]
pub(crate) enum AnyGuard {
    /// One lease: a plain lock, a read or write hold, a permit or a
    /// leadership, as `hold` says.
    One {
        /// The lease.
        guard: Guard,
        /// What it holds.
        hold: Hold,
    },
    /// Several plain locks at once; `first` is the NAME given first, whose
    /// fence and token are LEASEHOLD_FENCE and LEASEHOLD_TOKEN.
    Multi {
        /// Every name's lease.
        guard: MultiLockGuard,
        /// The first NAME on the command line.
        first: String,
    },
}

/// What one lease holds, for messages and `--json`.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Hold {
    /// The plain lease lock.
    Lock,
    /// A read hold of a read-write lock.
    Read,
    /// The write hold of a read-write lock.
    Write,
    /// A semaphore permit.
    Permit,
    /// The leadership of an election (`elect`).
    Leader,
}

impl AnyGuard {
    /// One lease, `guard` of any kind, holding `hold`.
    fn one<K: leasehold::hold::Kind>(guard: Guard<K>, hold: Hold) -> AnyGuard {
        AnyGuard::One {
            guard: guard.into_any(),
            hold,
        }
    }

    /// The fencing token (of the first NAME, when several are held).
    pub(crate) fn fence(&self) -> u64 {
        match self {
            AnyGuard::One { guard, .. } => guard.fence(),
            AnyGuard::Multi { guard, first } => guard.fence(first).unwrap_or_default(),
        }
    }

    /// Every name held with its fence, sorted by name.
    pub(crate) fn fences(&self) -> Vec<(String, u64)> {
        match self {
            AnyGuard::One { guard, .. } => vec![(guard.name().to_owned(), guard.fence())],
            AnyGuard::Multi { guard, .. } => guard.fences().to_vec(),
        }
    }

    /// The owner token (of the first NAME, when several are held).
    pub(crate) fn token(&self) -> &str {
        match self {
            AnyGuard::One { guard, .. } => guard.token(),
            AnyGuard::Multi { guard, first } => guard.token(first).unwrap_or_default(),
        }
    }

    /// True once the lease may have expired or was taken.
    pub(crate) fn is_lost(&self) -> bool {
        match self {
            AnyGuard::One { guard, .. } => guard.is_lost(),
            AnyGuard::Multi { guard, .. } => guard.is_lost(),
        }
    }

    /// Why the lease was lost, if it is.
    pub(crate) fn lost_reason(&self) -> Option<leasehold::LostReason> {
        match self {
            AnyGuard::One { guard, .. } => guard.lost_reason(),
            AnyGuard::Multi { guard, .. } => guard.lost_reason(),
        }
    }

    /// Resolves when the lease is lost.
    pub(crate) async fn lost(&self) {
        match self {
            AnyGuard::One { guard, .. } => guard.lost().await,
            AnyGuard::Multi { guard, .. } => guard.lost().await,
        }
    }

    /// Gives the hold back, owner-checked.
    pub(crate) async fn release(self) -> leasehold::Result<()> {
        match self {
            AnyGuard::One { guard, .. } => guard.release().await,
            AnyGuard::Multi { guard, .. } => guard.release().await,
        }
    }

    /// The kind, for `run --json`: `lock`, `rwlock`, `semaphore` or `election`.
    pub(crate) fn kind(&self) -> &'static str {
        match self {
            AnyGuard::One {
                hold: Hold::Lock, ..
            }
            | AnyGuard::Multi { .. } => "lock",
            AnyGuard::One {
                hold: Hold::Read | Hold::Write,
                ..
            } => "rwlock",
            AnyGuard::One {
                hold: Hold::Permit, ..
            } => "semaphore",
            AnyGuard::One {
                hold: Hold::Leader, ..
            } => "election",
        }
    }

    /// What is held, for messages: `lock "x"`, `write lock "x"`, ...
    pub(crate) fn what(&self) -> String {
        let (guard, hold) = match self {
            AnyGuard::One { guard, hold } => (guard, hold),
            AnyGuard::Multi { guard, .. } => {
                let names: Vec<String> = guard
                    .names()
                    .into_iter()
                    .map(|n| format!("{:?}", crate::output::printable(n)))
                    .collect();
                return format!("locks {}", names.join(", "));
            }
        };
        let kind = match hold {
            Hold::Lock => "lock",
            Hold::Read => "read lock",
            Hold::Write => "write lock",
            Hold::Permit => "permit of semaphore",
            Hold::Leader => "leadership of election",
        };
        format!("{kind} {:?}", crate::output::printable(guard.name()))
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
) -> Result<AnyGuard, Failure> {
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
        LockKind::Election,
    );
    lead.await.map(|g| AnyGuard::one(g, Hold::Leader))
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
) -> Result<AnyGuard, Failure> {
    let rw = || {
        let mut rw = client.rw_lock(name).ttl(lease.ttl).wait(lease.wait);
        if let Some(about) = &lease.about {
            rw = rw.describe(about.as_str());
        }
        match lease.at_least {
            Some(at_least) => rw.hold_at_least(at_least),
            None => rw,
        }
    };
    match mode {
        Mode::Lock => take(client, name, lease)
            .await
            .map(|g| AnyGuard::one(g, Hold::Lock)),
        Mode::Read => {
            let rw = rw();
            let busy = || format!("read-write lock {name:?} has a writer, or one waits");
            let read = per_lease(
                lease,
                async || rw.try_read().await,
                async || rw.read().await,
                busy,
                Watch::of(client, name, mode),
                LockKind::RwLock,
            );
            read.await.map(|g| AnyGuard::one(g, Hold::Read))
        }
        Mode::Write => {
            let rw = rw();
            let busy =
                || format!("read-write lock {name:?} has readers or a writer, or a writer waits");
            let write = per_lease(
                lease,
                async || rw.try_write().await,
                async || rw.write().await,
                busy,
                Watch::of(client, name, mode),
                LockKind::RwLock,
            );
            write.await.map(|g| AnyGuard::one(g, Hold::Write))
        }
        Mode::Permits(permits) => {
            let mut sem = client
                .semaphore(name, permits)
                .ttl(lease.ttl)
                .wait(lease.wait);
            if let Some(at_least) = lease.at_least {
                sem = sem.hold_at_least(at_least);
            }
            if let Some(about) = &lease.about {
                sem = sem.describe(about.as_str());
            }
            let busy = || format!("all {permits} permits of semaphore {name:?} are held");
            let permit = per_lease(
                lease,
                async || sem.try_acquire().await,
                async || sem.acquire().await,
                busy,
                Watch::of(client, name, mode),
                LockKind::Semaphore,
            );
            permit.await.map(|g| AnyGuard::one(g, Hold::Permit))
        }
    }
}

/// Takes the plain locks `names` together (all or none), per `lease`;
/// `names[0]` is the first NAME given, whose fence and token the command
/// gets as LEASEHOLD_FENCE and LEASEHOLD_TOKEN.
///
/// # Errors
///
/// Exit 75 (or `-E`) when one is taken and `--no-wait` was given, or the
/// wait ran out (naming that lock); the library's errors otherwise.
pub(crate) async fn take_all(
    client: &Client,
    names: &[String],
    lease: &LeaseArgs,
) -> Result<AnyGuard, Failure> {
    let mut multi = client
        .multi_lock(names)
        .ttl(lease.ttl)
        .wait(lease.wait)
        .lock_delay(lease.lock_delay);
    if let Some(at_least) = lease.at_least {
        multi = multi.hold_at_least(at_least);
    }
    if let Some(about) = &lease.about {
        multi = multi.describe(about.as_str());
    }
    let sorted = multi.names().join(" ");
    let watch = Watch::several(client, &multi.names());
    let held = |guard| AnyGuard::Multi {
        guard,
        first: names[0].clone(),
    };
    if lease.no_wait {
        let names: Vec<String> = multi.names().iter().map(|n| (*n).to_owned()).collect();
        match multi.try_acquire().await {
            Ok(Some(guard)) => return Ok(held(guard)),
            Ok(None) => {}
            Err(err) => return Err(explain(client, &names, LockKind::Lock, err).await),
        }
        // Nothing of ours is held any more: a name held now is another's.
        let mut busy = None;
        for name in multi.names() {
            if let Ok(status) = client.lock(name).status().await
                && status.holder.is_some()
            {
                busy = Some(name.to_owned());
                break;
            }
        }
        let message = match busy {
            Some(name) => format!(
                "lock {name:?} is held by someone else, so none of {sorted} was taken; see who \
                 with `leasehold status {name}`"
            ),
            None => {
                format!("one of the locks {sorted} was held by someone else, so none was taken")
            }
        };
        return Err(Failure::with_code(
            lease.conflict,
            format!("{message} (--no-wait); try later, or wait with --wait"),
        ));
    }
    let guard = per_lease(
        lease,
        async || multi.try_acquire().await,
        async || multi.acquire().await,
        || format!("one of the locks {sorted} is held by someone else"),
        watch,
        LockKind::Lock,
    )
    .await?;
    Ok(held(guard))
}

/// Takes the lock `name` per `lease`.
pub(crate) async fn take(
    client: &Client,
    name: &str,
    lease: &LeaseArgs,
) -> Result<LockGuard, Failure> {
    let mut lock: Lock = client
        .lock(name)
        .ttl(lease.ttl)
        .wait(lease.wait)
        .lock_delay(lease.lock_delay);
    if let Some(at_least) = lease.at_least {
        lock = lock.hold_at_least(at_least);
    }
    if let Some(about) = &lease.about {
        lock = lock.describe(about.as_str());
    }
    per_lease(
        lease,
        async || lock.try_acquire().await,
        async || lock.acquire().await,
        || format!("lock {name:?} is held by someone else; see who with `leasehold status {name}`"),
        crate::progress::Watch::lock(client, name),
        LockKind::Lock,
    )
    .await
}

/// Acquires per `lease`: `wait` (the handle waits up to `--wait`, for
/// ever by default), or with `--no-wait` `once`, which fails when the hold
/// is taken; `busy` says by whom, for that message. Both failures exit
/// with `-E` (75 unless given). While it waits on a terminal, `watch`
/// keeps a one-line status on stderr. `wanted` is the kind taken: a name
/// held as another kind is named with its own ([`explain`]).
pub(crate) async fn per_lease<G>(
    lease: &LeaseArgs,
    once: impl AsyncFnOnce() -> leasehold::Result<Option<G>>,
    wait: impl AsyncFnOnce() -> leasehold::Result<G>,
    busy: impl FnOnce() -> String,
    watch: crate::progress::Watch,
    wanted: LockKind,
) -> Result<G, Failure> {
    let (client, names) = (watch.client().clone(), watch.names());
    if lease.no_wait {
        return match once().await {
            Ok(Some(guard)) => Ok(guard),
            Ok(None) => Err(Failure::with_code(
                lease.conflict,
                format!("{} (--no-wait); try later, or wait with --wait", busy()),
            )),
            Err(err) => Err(explain(&client, &names, wanted, err).await),
        };
    }
    let waited = if lease.progress {
        crate::progress::while_waiting(watch, wait()).await
    } else {
        wait().await
    };
    match waited {
        Ok(guard) => Ok(guard),
        Err(err @ leasehold::Error::Timeout { .. }) => Err(Failure::with_code(
            lease.conflict,
            Failure::from(err).message,
        )),
        Err(err) => Err(explain(&client, &names, wanted, err).await),
    }
}

/// `err` from taking `wanted` on `names`, in the CLI's words. A key of
/// another type (exit 65) is explained: a name's lock key held by another
/// kind names that kind and the flag that takes it ("\"x\" is a semaphore:
/// use --permits N"); any other key, what it holds.
pub(crate) async fn explain(
    client: &Client,
    names: &[String],
    wanted: LockKind,
    err: leasehold::Error,
) -> Failure {
    let leasehold::Error::WrongType { key } = &err else {
        return Failure::from(err);
    };
    if key.ends_with(":lock") {
        for name in names {
            if let Ok(Some(kind)) = client.kind(name).await
                && kind != wanted
            {
                return Failure::with_code(
                    crate::exit::DATAERR,
                    format!(
                        "{:?} is {}: {}; `leasehold status {}` shows it",
                        crate::output::printable(name),
                        a_kind(kind),
                        flag_for(kind),
                        crate::output::printable(name)
                    ),
                );
            }
        }
    }
    foreign_key(client, key).await
}

/// A key that holds something no lock of the kind wrote: which key, and what
/// it holds (exit 65).
pub(crate) async fn foreign_key(client: &Client, key: &str) -> Failure {
    let held = match client.key_type(key).await {
        Ok(found) if found != "none" => format!("holds a {found}"),
        // Gone since, or unreadable: say what the library said.
        _ => "held a value of another type".to_owned(),
    };
    Failure::with_code(
        crate::exit::DATAERR,
        format!(
            "key {:?} {held}, which no leasehold lock wrote; it was left untouched: remove it \
             if it is stale, or use another name or --prefix",
            crate::output::printable(key)
        ),
    )
}

/// `kind` with its article, as a sentence names it.
fn a_kind(kind: LockKind) -> &'static str {
    match kind {
        LockKind::Lock => "a lock",
        LockKind::Reentrant => "a reentrant lock",
        LockKind::RwLock => "a read-write lock",
        LockKind::Semaphore => "a semaphore",
        LockKind::Election => "an election",
        _ => "another kind of lock",
    }
}

/// What takes `kind` from the command line.
fn flag_for(kind: LockKind) -> &'static str {
    match kind {
        LockKind::Lock => "use none of --read, --write and --permits",
        LockKind::RwLock => "use --read or --write",
        LockKind::Semaphore => "use --permits N",
        LockKind::Election => "take part with `leasehold elect`",
        LockKind::Reentrant => {
            "`leasehold run` does not take reentrant locks; wait for it or use another name"
        }
        _ => "use the kind it holds",
    }
}
