//! Keys of another type (issue 36): a key leasehold would write that holds
//! something else is refused with `Error::WrongType` naming exactly that key,
//! and left byte for byte as it was, with its TTL; a release still gives the
//! lease back. First the three cases, then the contract matrix over
//! every kind, every key its scripts touch, every type Redis has and the
//! moments of a lease's life.

mod common;

use std::fmt;
use std::time::{Duration, Instant};

use common::snapshot;
use leasehold::{Client, Error};
use leasehold_testkit::RedisServer;
use redis::{Commands, Connection};

/// A foreign key's expiry, planted with it: a script that set or cleared
/// an expiry would show in its PTTL.
const FOREIGN_TTL_MS: i64 = 600_000;

/// The lock key and the other keys of lock `name` (default prefix).
fn key(name: &str, role: &str) -> String {
    format!("leasehold:{{{name}}}:{role}")
}

/// An async connection to `server`, for the fenced calls.
async fn resource(server: &RedisServer) -> leasehold::redis::aio::MultiplexedConnection {
    leasehold::redis::Client::open(server.url())
        .unwrap()
        .get_multiplexed_async_connection()
        .await
        .expect("connect to the resource")
}

/// Issue 36, case 1: `fenced::set` replaced a hash at the value key.
#[tokio::test]
async fn fenced_set_refuses_a_value_key_of_another_type_and_leaves_it() {
    let server = RedisServer::start();
    let mut conn = server.connection();
    let _: () = conn.hset("res", "field", "precious").unwrap();
    let before = snapshot(&server, "res");
    let mut resource = resource(&server).await;
    match leasehold::fenced::set(&mut resource, "res", 5, "v", None).await {
        Err(Error::WrongType { key }) => assert_eq!(key, "res"),
        other => panic!("expected WrongType naming res, got {other:?}"),
    }
    assert_eq!(snapshot(&server, "res"), before, "the hash is untouched");
    let fence: bool = conn.exists(leasehold::fenced::fence_key("res")).unwrap();
    assert!(!fence, "no fence was written either");
}

/// Issue 36, case 2: a reentrant lock took over a foreign hash at its key
/// (and its release later left the user's field to expire with it).
#[tokio::test]
async fn a_reentrant_lock_refuses_a_foreign_hash_at_its_key() {
    let server = RedisServer::start();
    let client = common::client(&server).await;
    let lock = key("h", "lock");
    let _: () = server.connection().hset(&lock, "f", "v").unwrap();
    let before = snapshot(&server, &lock);
    match client.reentrant_lock("h").try_acquire().await {
        Err(Error::WrongType { key }) => assert_eq!(key, lock),
        other => panic!("expected WrongType naming {lock}, got {other:?}"),
    }
    assert_eq!(snapshot(&server, &lock), before, "the hash is untouched");
    let fence: bool = server.connection().exists(key("h", "fence")).unwrap();
    assert!(!fence, "no fence was issued");
}

/// Issue 36, case 3: a hash at a lock's queue let the acquire through, then
/// the release failed naming the lock key (the lock stayed held for its TTL)
/// and the next acquire failed naming the fence key. Now an uncontended
/// acquire and its release do not touch the queue (no waiter can be in a
/// key of another type), so both succeed and leave it alone; a waiter,
/// which would queue there, is refused naming the queue.
#[tokio::test]
async fn a_foreign_queue_is_named_to_a_waiter_and_never_keeps_the_lock_held() {
    let server = RedisServer::start();
    let client = common::client(&server).await;
    let queue = key("q", "queue");
    let _: () = server.connection().hset(&queue, "f", "v").unwrap();
    let before = snapshot(&server, &queue);
    for _ in 0..2 {
        let guard = client.lock("q").acquire().await.expect("acquire");
        // A waiter would queue: refused, naming the queue, nothing written.
        let waiter = client.lock("q").wait(Duration::from_secs(5));
        match waiter.acquire().await {
            Err(Error::WrongType { key }) => assert_eq!(key, queue),
            other => panic!("expected WrongType naming {queue}, got {other:?}"),
        }
        guard
            .release()
            .await
            .expect("the release gives the lease back");
        assert_eq!(common::lock_pttl(&server, "q"), -2, "the lock is free");
        assert_eq!(snapshot(&server, &queue), before, "the hash is untouched");
    }
}

// The contract matrix.

/// Every kind of lock, as the matrix takes and gives back its leases.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    Lock,
    Fair,
    Election,
    /// A `MultiLock` over `<name>-a` and `<name>`; the foreign key is planted
    /// among `<name>`'s keys.
    Multi,
    Reentrant,
    Read,
    Write,
    Semaphore,
}

const KINDS: [Kind; 8] = [
    Kind::Lock,
    Kind::Fair,
    Kind::Election,
    Kind::Multi,
    Kind::Reentrant,
    Kind::Read,
    Kind::Write,
    Kind::Semaphore,
];

/// The keys of a name (docs/KEYS.md): `:lock`, `:fence`, `:queue`,
/// `:alive`, an election's `:leader` and an RwLock's `:writers`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Role {
    Lock,
    Fence,
    Queue,
    Alive,
    Leader,
    Writers,
}

impl Role {
    fn suffix(self) -> &'static str {
        match self {
            Role::Lock => "lock",
            Role::Fence => "fence",
            Role::Queue => "queue",
            Role::Alive => "alive",
            Role::Leader => "leader",
            Role::Writers => "writers",
        }
    }
}

impl Kind {
    /// The keys its scripts touch.
    fn roles(self) -> &'static [Role] {
        match self {
            Kind::Lock | Kind::Fair | Kind::Multi => {
                &[Role::Lock, Role::Fence, Role::Queue, Role::Alive]
            }
            Kind::Election => &[
                Role::Lock,
                Role::Fence,
                Role::Queue,
                Role::Alive,
                Role::Leader,
            ],
            Kind::Read | Kind::Write => &[Role::Lock, Role::Fence, Role::Writers],
            Kind::Reentrant | Kind::Semaphore => &[Role::Lock, Role::Fence],
        }
    }

    /// The type leasehold keeps at `role` for this kind.
    fn own_type(self, role: Role) -> Type {
        match (self, role) {
            (Kind::Reentrant, Role::Lock) => Type::Hash,
            (Kind::Read | Kind::Write | Kind::Semaphore, Role::Lock) => Type::Zset,
            (_, Role::Queue | Role::Alive | Role::Writers) => Type::Zset,
            _ => Type::String,
        }
    }

    /// Its lease lock's key holds an owner token: a foreign string there is
    /// another holder's.
    fn is_lease_lock(self) -> bool {
        matches!(self, Kind::Lock | Kind::Fair | Kind::Election | Kind::Multi)
    }
}

/// Every type Redis has.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Type {
    String,
    Hash,
    List,
    Set,
    Zset,
    Stream,
}

const TYPES: [Type; 6] = [
    Type::String,
    Type::Hash,
    Type::List,
    Type::Set,
    Type::Zset,
    Type::Stream,
];

/// Plants a key of type `ty` at `key`, with content no leasehold lock
/// wrote (a string that is neither a token nor a fence, a hash without an
/// owner, a sorted set whose member is no lease) and an expiry.
fn plant(conn: &mut Connection, key: &str, ty: Type) {
    let _: () = conn.del(key).unwrap();
    let _: () = match ty {
        Type::String => conn.set(key, "precious").unwrap(),
        Type::Hash => conn.hset(key, "field", "precious").unwrap(),
        Type::List => conn.rpush(key, &["a", "b"]).unwrap(),
        Type::Set => conn.sadd(key, "a").unwrap(),
        Type::Zset => conn.zadd(key, "a", 1).unwrap(),
        Type::Stream => redis::cmd("XADD")
            .arg(key)
            .arg("*")
            .arg("field")
            .arg("precious")
            .query::<String>(conn)
            .map(drop)
            .unwrap(),
    };
    let _: () = conn.pexpire(key, FOREIGN_TTL_MS).unwrap();
}

/// When the foreign key is planted, and which call meets it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Moment {
    /// Before the acquisition, which meets it.
    BeforeAcquire,
    /// While held (at the lock key: in place of the lease); a renewal meets
    /// it, then the release.
    WhileHeld,
    /// While held; the release meets it.
    BeforeRelease,
    /// While held; an operator's look meets it (`Client::kind`, which reads
    /// every kind's status until one recognises the name's key).
    Status,
    /// While held; an operator's break meets it (`Client::break_lease`).
    Break,
}

const MOMENTS: [Moment; 5] = [
    Moment::BeforeAcquire,
    Moment::WhileHeld,
    Moment::BeforeRelease,
    Moment::Status,
    Moment::Break,
];

/// What the call that meets the foreign key answers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Outcome {
    /// `Error::WrongType` naming exactly the foreign key.
    Refused,
    /// Success: the call does not touch that key on its path.
    Done,
    /// The acquisition finds the lock held (a string at a lease lock's key
    /// is another holder's token).
    Busy,
    /// The lease is gone (`Error::Lost`): the renewal or release finds the
    /// lock key holding someone else's.
    Lost,
}

/// The contract: what the call meeting a foreign key of type `ty` at
/// `role` answers.
fn expected(kind: Kind, role: Role, ty: Type, moment: Moment) -> Outcome {
    let own = ty == kind.own_type(role);
    match (role, moment) {
        // An RwLock's acquisition keeps the waiting writers' places there;
        // nothing else reads it (a release of another type's key there
        // gives the lease back and leaves the key alone).
        (Role::Writers, Moment::BeforeAcquire) => Outcome::Refused,
        (Role::Writers, _) => Outcome::Done,
        (Role::Lock, Moment::BeforeAcquire) if own && kind.is_lease_lock() => Outcome::Busy,
        (Role::Lock, Moment::BeforeAcquire) => Outcome::Refused,
        // The lease was replaced: its renewal finds it gone.
        (Role::Lock, Moment::WhileHeld) => Outcome::Lost,
        (Role::Lock, Moment::BeforeRelease) if own && kind.is_lease_lock() => Outcome::Lost,
        (Role::Lock, Moment::BeforeRelease) => Outcome::Refused,
        // A fair lock's acquisition reads its queue whenever the lock is free.
        (Role::Queue | Role::Alive, Moment::BeforeAcquire) if kind == Kind::Fair => {
            Outcome::Refused
        }
        // Every acquisition writes a fence; an election's records its leader.
        (Role::Fence | Role::Leader, Moment::BeforeAcquire) => Outcome::Refused,
        // A string at the leader key reads as a record of no one (the
        // lease's holder is not in it).
        (Role::Leader, Moment::Status) if own => Outcome::Done,
        // Status reads every other key of the name, and refuses what it
        // cannot read, and a string at the lock key that no lock wrote (not
        // a token); a break reads the status first.
        (_, Moment::Status) => Outcome::Refused,
        // A break of an election whose record key holds something else
        // breaks it as a plain lock (the record left alone).
        (Role::Leader, Moment::Break) => Outcome::Done,
        (_, Moment::Break) => Outcome::Refused,
        // A try (it does not wait, so it does not queue), a renewal, a
        // release: none writes to a foreign key at these, and a release
        // still gives the lease back.
        _ => Outcome::Done,
    }
}

/// A sorted set at a lock's queue (or heartbeats) is read as waiters: its
/// members would be taken for queued waiters, handed the lease or pruned.
/// Telling them apart would cost a command on every contended acquisition
/// (docs/KEYS.md); these cases are left out of the matrix.
fn out_of_contract(kind: Kind, role: Role, ty: Type) -> bool {
    ty == Type::Zset
        && ((matches!(role, Role::Queue | Role::Alive) && kind.is_lease_lock())
            || role == Role::Writers)
}

/// A lease of any kind, as the matrix holds it.
enum Guard {
    Lock(leasehold::LockGuard),
    Multi(leasehold::MultiLockGuard),
    Leader(leasehold::Leadership),
    Reentrant(leasehold::ReentrantGuard),
    Read(leasehold::ReadGuard),
    Write(leasehold::WriteGuard),
    Permit(leasehold::Permit),
}

impl Guard {
    async fn extend(&self) -> leasehold::Result<()> {
        let ttl = Duration::from_secs(30);
        match self {
            Guard::Lock(g) => g.extend(ttl).await,
            Guard::Multi(g) => g.extend(ttl).await,
            Guard::Leader(g) => g.extend(ttl).await,
            Guard::Reentrant(g) => g.extend(ttl).await,
            Guard::Read(g) => g.extend(ttl).await,
            Guard::Write(g) => g.extend(ttl).await,
            Guard::Permit(g) => g.extend(ttl).await,
        }
    }

    async fn release(self) -> leasehold::Result<()> {
        match self {
            Guard::Lock(g) => g.release().await,
            Guard::Multi(g) => g.release().await,
            Guard::Leader(g) => g.resign().await,
            Guard::Reentrant(g) => g.release().await,
            Guard::Read(g) => g.release().await,
            Guard::Write(g) => g.release().await,
            Guard::Permit(g) => g.release().await,
        }
    }
}

/// Tries to take `kind` on `name` without waiting.
async fn try_take(client: &Client, kind: Kind, name: &str) -> leasehold::Result<Option<Guard>> {
    Ok(match kind {
        Kind::Lock => client.lock(name).try_acquire().await?.map(Guard::Lock),
        Kind::Fair => client.fair_lock(name).try_acquire().await?.map(Guard::Lock),
        Kind::Election => client
            .election(name)
            .try_campaign("candidate")
            .await?
            .map(Guard::Leader),
        Kind::Multi => client
            .multi_lock([format!("{name}-a"), name.to_owned()])
            .try_acquire()
            .await?
            .map(Guard::Multi),
        Kind::Reentrant => client
            .reentrant_lock(name)
            .try_acquire()
            .await?
            .map(Guard::Reentrant),
        Kind::Read => client.rw_lock(name).try_read().await?.map(Guard::Read),
        Kind::Write => client.rw_lock(name).try_write().await?.map(Guard::Write),
        Kind::Semaphore => client
            .semaphore(name, 2)
            .try_acquire()
            .await?
            .map(Guard::Permit),
    })
}

/// One case of the matrix, for its report.
struct Case {
    kind: Kind,
    role: Role,
    ty: Type,
    moment: Moment,
}

impl fmt::Display for Case {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{:?} at {:?}, a {:?} planted {:?}",
            self.kind, self.role, self.ty, self.moment
        )
    }
}

/// Whether `result` is `outcome` for the foreign key `foreign`.
fn answers<T>(result: &Result<T, &Error>, outcome: Outcome, foreign: &str) -> bool {
    match (outcome, result) {
        (Outcome::Refused, Err(Error::WrongType { key })) => key == foreign,
        (Outcome::Lost, Err(Error::Lost { .. })) => true,
        (Outcome::Done | Outcome::Busy, Ok(_)) => true,
        _ => false,
    }
}

/// The foreign key is as it was: the same bytes (DUMP) and an expiry that
/// only ran down, by no more than the time from before its first read to
/// after its second (and 1 ms of rounding each).
fn unchanged(
    before: &(Option<Vec<u8>>, i64),
    after: &(Option<Vec<u8>>, i64),
    since: Instant,
) -> Result<(), String> {
    if before.0 != after.0 {
        return Err(format!(
            "the foreign key changed: {:?} became {:?}",
            before.0, after.0
        ));
    }
    let ran = i64::try_from(since.elapsed().as_millis()).unwrap() + 2;
    if after.1 > before.1 || before.1 - after.1 > ran {
        return Err(format!(
            "its expiry went from {} to {} ms in {ran} ms",
            before.1, after.1
        ));
    }
    Ok(())
}

/// The names a case takes (a multi-lock's two).
fn names_of(kind: Kind, name: &str) -> Vec<String> {
    let mut names = vec![name.to_owned()];
    if kind == Kind::Multi {
        names.push(format!("{name}-a"));
    }
    names
}

/// Runs one case: plants the foreign key at its moment, checks what the call
/// meeting it answers, that the key is unchanged, and that no lease is left
/// held on the name. Every key of the name is deleted after, pass or fail.
async fn run_case(server: &RedisServer, client: &Client, case: &Case) -> Result<(), String> {
    let name = format!(
        "{:?}-{:?}-{:?}-{:?}",
        case.kind, case.role, case.ty, case.moment
    )
    .to_lowercase();
    let checked = check_case(server, client, case, &name).await;
    let mut conn = server.connection();
    for held in names_of(case.kind, &name) {
        for role in [
            Role::Lock,
            Role::Fence,
            Role::Queue,
            Role::Alive,
            Role::Leader,
        ] {
            let _: () = conn.del(key(&held, role.suffix())).unwrap();
        }
    }
    checked.map_err(|e| format!("{case}: {e}"))
}

async fn check_case(
    server: &RedisServer,
    client: &Client,
    case: &Case,
    name: &str,
) -> Result<(), String> {
    let Case {
        kind,
        role,
        ty,
        moment,
    } = *case;
    let foreign = key(name, role.suffix());
    let mut conn = server.connection();
    let outcome = expected(kind, role, ty, moment);

    let (before, since) = if moment == Moment::BeforeAcquire {
        plant(&mut conn, &foreign, ty);
        let since = Instant::now();
        let before = snapshot(server, &foreign);
        let taken = try_take(client, kind, name).await;
        let answer = taken.as_ref().map(Option::is_some);
        let fits = match (answer, outcome) {
            (Ok(false), Outcome::Busy) | (Ok(true), Outcome::Done) => true,
            (Ok(_), _) => false,
            (Err(_), _) => answers(&answer, outcome, &foreign),
        };
        if !fits {
            return Err(format!(
                "expected {outcome:?}, got {answer:?} (Ok(true): a lease)"
            ));
        }
        if let Ok(Some(guard)) = taken {
            guard.release().await.map_err(|e| format!("release: {e}"))?;
        }
        (before, since)
    } else {
        let guard = try_take(client, kind, name)
            .await
            .map_err(|e| format!("taking it first: {e}"))?
            .ok_or("the name is not free")?;
        plant(&mut conn, &foreign, ty);
        let since = Instant::now();
        let before = snapshot(server, &foreign);
        if matches!(moment, Moment::Status | Moment::Break) {
            let looked = if moment == Moment::Status {
                client.kind(name).await.map(drop)
            } else {
                client.break_lease(name).await.map(drop)
            };
            if !answers(&looked.as_ref(), outcome, &foreign) {
                return Err(format!(
                    "expected {outcome:?} of the {moment:?}, got {looked:?}"
                ));
            }
            // Given back (or already broken): either way nothing is held.
            let _ = guard.release().await;
        } else if moment == Moment::WhileHeld {
            let renewed = guard.extend().await;
            if !answers(&renewed.as_ref(), outcome, &foreign) {
                return Err(format!(
                    "expected {outcome:?} of the renewal, got {renewed:?}"
                ));
            }
            let released = guard.release().await;
            if role != Role::Lock {
                released.map_err(|e| format!("the release after the renewal: {e}"))?;
            }
        } else {
            let released = guard.release().await;
            if !answers(&released.as_ref(), outcome, &foreign) {
                return Err(format!(
                    "expected {outcome:?} of the release, got {released:?}"
                ));
            }
        }
        (before, since)
    };
    unchanged(&before, &snapshot(server, &foreign), since)?;

    // No lease is left held: every lock key of the name is gone but a
    // foreign one (a refused campaign or multi-lock lets what it took go in
    // the background: a bounded wait for it).
    for held in names_of(kind, name) {
        let lock = key(&held, "lock");
        if lock == foreign {
            continue;
        }
        let deadline = Instant::now() + Duration::from_secs(5);
        while conn.exists::<_, bool>(&lock).unwrap() {
            if Instant::now() > deadline {
                return Err(format!("{lock} is still held"));
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }
    Ok(())
}

/// Issue 36, item 2: every kind, every key its scripts touch, every type,
/// at each moment of a lease (see `expected` for what each call answers and
/// `out_of_contract` for the cases left out). One server, one client, a
/// name per case.
#[tokio::test]
async fn every_kind_refuses_or_passes_by_every_foreign_key_and_leaves_it_untouched() {
    let server = RedisServer::start();
    let client = common::client(&server).await;
    let (mut run, mut left_out, mut failed) = (0, 0, Vec::new());
    for kind in KINDS {
        for &role in kind.roles() {
            for ty in TYPES {
                for moment in MOMENTS {
                    if out_of_contract(kind, role, ty) {
                        left_out += 1;
                        continue;
                    }
                    let case = Case {
                        kind,
                        role,
                        ty,
                        moment,
                    };
                    if let Err(e) = run_case(&server, &client, &case).await {
                        failed.push(e);
                    }
                    run += 1;
                }
            }
        }
    }
    let roles: usize = KINDS.iter().map(|k| k.roles().len()).sum();
    assert_eq!(run + left_out, roles * TYPES.len() * MOMENTS.len());
    assert!(
        failed.is_empty(),
        "{} of {run} cases failed:\n{}",
        failed.len(),
        failed.join("\n")
    );
    println!(
        "matrix: {} kinds, {roles} (kind, key) pairs x {} types x {} moments = {} cases: \
         {run} run, {left_out} left out (a sorted set at a lease lock's queue or heartbeats, or at an RwLock's writers key)",
        KINDS.len(),
        TYPES.len(),
        MOMENTS.len(),
        run + left_out
    );
    client.close().await.expect("close");
}

/// Issue 36, item 2, for the fenced writes: `fenced::set` and `fenced::get`
/// meet a key of each type at the value key and at its fence key. A string
/// at the value key is the value itself: `get` reads it, unchanged, and
/// `set` replacing it is what it is for (left out).
#[tokio::test]
async fn fenced_set_and_get_refuse_every_foreign_key_and_leave_it_untouched() {
    let server = RedisServer::start();
    let mut resource = resource(&server).await;
    let mut conn = server.connection();
    let mut run = 0;
    for ty in TYPES {
        for at_fence in [false, true] {
            for write in [true, false] {
                if ty == Type::String && !at_fence && write {
                    continue;
                }
                let value = format!("fenced-{ty:?}-{at_fence}-{write}").to_lowercase();
                let foreign = if at_fence {
                    leasehold::fenced::fence_key(&value)
                } else {
                    value.clone()
                };
                plant(&mut conn, &foreign, ty);
                let since = Instant::now();
                let before = snapshot(&server, &foreign);
                let result = if write {
                    leasehold::fenced::set(&mut resource, &value, 7, "new", None).await
                } else {
                    leasehold::fenced::get::<_, Option<String>>(&mut resource, &value, 7, None)
                        .await
                        .map(drop)
                };
                let case = format!(
                    "fenced {} with a {ty:?} at {foreign}",
                    if write { "set" } else { "get" }
                );
                let reads_its_value = ty == Type::String && !at_fence;
                match result {
                    Ok(()) if reads_its_value => {}
                    Err(Error::WrongType { key }) if !reads_its_value => {
                        assert_eq!(key, foreign, "{case}");
                    }
                    other => panic!("{case}: got {other:?}"),
                }
                let after = snapshot(&server, &foreign);
                assert_eq!(before.0, after.0, "{case}: the foreign key changed");
                let ran = i64::try_from(since.elapsed().as_millis()).unwrap() + 2;
                assert!(
                    after.1 <= before.1 && before.1 - after.1 <= ran,
                    "{case}: its expiry changed"
                );
                if !reads_its_value {
                    let other = if at_fence {
                        value.clone()
                    } else {
                        leasehold::fenced::fence_key(&value)
                    };
                    assert!(
                        !conn.exists::<_, bool>(&other).unwrap(),
                        "{case}: {other} was written"
                    );
                }
                run += 1;
            }
        }
    }
    println!(
        "fenced matrix: 2 keys x {} types x 2 calls = {run} cases run, 1 left out",
        TYPES.len()
    );
}
