//! The contract every guard keeps, written once and run for every kind of
//! lock ([`Kind::ALL`]) on every deployment ([`Deployment`]).
//!
//! Each contract is one `async fn(&Deployment, Kind)`; `tests/contract.rs`
//! runs each one per kind on a server of its own, and the cluster and
//! Sentinel tests run them all ([`run_all`]) on their topology.
//!
//! A kind is tested against its *rival*: a kind that, while held, makes it
//! wait. For the exclusive kinds that is the kind itself (another owner);
//! a reader waits for a writer and a writer for a reader.

use std::time::{Duration, Instant};

use leasehold::{
    Client, Error, FairLock, Lock, LockGuard, Permit, ReadGuard, ReentrantGuard, ReentrantLock,
    RwLock, Semaphore, WriteGuard,
};
use leasehold_testkit::{RedisCluster, RedisServer, SentinelSet};

use super::{snapshot, wait_until};

/// One kind of guard, and how it is taken.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Lock,
    Reentrant,
    /// `RwLock::read`.
    Read,
    /// `RwLock::write`.
    Write,
    /// A `Semaphore` of one permit, so that a held permit makes others wait.
    Semaphore,
    Fair,
}

impl Kind {
    pub const ALL: [Kind; 6] = [
        Kind::Lock,
        Kind::Reentrant,
        Kind::Read,
        Kind::Write,
        Kind::Semaphore,
        Kind::Fair,
    ];

    /// The kind that, held by another owner, makes this one wait.
    pub fn rival(self) -> Kind {
        match self {
            Kind::Read => Kind::Write,
            Kind::Write => Kind::Read,
            other => other,
        }
    }

    /// A handle of this kind on `name`, with an owner of its own.
    pub fn on(self, client: &Client, name: &str) -> Handle {
        match self {
            Kind::Lock => Handle::Lock(client.lock(name)),
            Kind::Reentrant => Handle::Reentrant(client.reentrant_lock(name)),
            Kind::Read => Handle::Read(client.rw_lock(name)),
            Kind::Write => Handle::Write(client.rw_lock(name)),
            Kind::Semaphore => Handle::Semaphore(client.semaphore(name, 1)),
            Kind::Fair => Handle::Fair(client.fair_lock(name)),
        }
    }

    /// Handles of this kind that are wrong in a way of their own
    /// (beyond name and TTL), and the word the error must name.
    fn bad_handles(self, client: &Client, name: &str) -> Vec<(Handle, &'static str)> {
        match self {
            Kind::Reentrant => vec![(
                Handle::Reentrant(client.reentrant_lock(name).owner("")),
                "owner",
            )],
            Kind::Read => vec![(Handle::Read(client.rw_lock(name).owner("")), "owner")],
            Kind::Write => vec![(Handle::Write(client.rw_lock(name).owner("")), "owner")],
            Kind::Semaphore => vec![(Handle::Semaphore(client.semaphore(name, 0)), "0 permits")],
            Kind::Lock | Kind::Fair => Vec::new(),
        }
    }
}

/// A handle of any kind, with the calls the contracts make.
#[derive(Clone)]
pub enum Handle {
    Lock(Lock),
    Reentrant(ReentrantLock),
    Read(RwLock),
    Write(RwLock),
    Semaphore(Semaphore),
    Fair(FairLock),
}

/// Applies one handle setter whatever the kind.
macro_rules! each_handle {
    ($handle:expr, $h:ident => $e:expr) => {
        match $handle {
            Handle::Lock($h) => Handle::Lock($e),
            Handle::Reentrant($h) => Handle::Reentrant($e),
            Handle::Read($h) => Handle::Read($e),
            Handle::Write($h) => Handle::Write($e),
            Handle::Semaphore($h) => Handle::Semaphore($e),
            Handle::Fair($h) => Handle::Fair($e),
        }
    };
}

impl Handle {
    pub fn ttl(self, ttl: Duration) -> Handle {
        each_handle!(self, h => h.ttl(ttl))
    }

    pub fn wait(self, wait: Duration) -> Handle {
        each_handle!(self, h => h.wait(wait))
    }

    pub fn watchdog(self, renew: bool) -> Handle {
        each_handle!(self, h => h.watchdog(renew))
    }

    /// The call that waits, as the docs name it.
    pub fn acquire_call(&self) -> &'static str {
        match self {
            Handle::Lock(_) => "Lock::acquire",
            Handle::Reentrant(_) => "ReentrantLock::acquire",
            Handle::Read(_) => "RwLock::read",
            Handle::Write(_) => "RwLock::write",
            Handle::Semaphore(_) => "Semaphore::acquire",
            Handle::Fair(_) => "FairLock::acquire",
        }
    }

    pub async fn acquire(&self) -> Result<Guard, Error> {
        Ok(match self {
            Handle::Lock(h) => Guard::Lock(h.acquire().await?),
            Handle::Reentrant(h) => Guard::Reentrant(h.acquire().await?),
            Handle::Read(h) => Guard::Read(h.read().await?),
            Handle::Write(h) => Guard::Write(h.write().await?),
            Handle::Semaphore(h) => Guard::Permit(h.acquire().await?),
            Handle::Fair(h) => Guard::Lock(h.acquire().await?),
        })
    }

    pub async fn try_acquire(&self) -> Result<Option<Guard>, Error> {
        Ok(match self {
            Handle::Lock(h) => h.try_acquire().await?.map(Guard::Lock),
            Handle::Reentrant(h) => h.try_acquire().await?.map(Guard::Reentrant),
            Handle::Read(h) => h.try_read().await?.map(Guard::Read),
            Handle::Write(h) => h.try_write().await?.map(Guard::Write),
            Handle::Semaphore(h) => h.try_acquire().await?.map(Guard::Permit),
            Handle::Fair(h) => h.try_acquire().await?.map(Guard::Lock),
        })
    }

    /// `status()`, its answer dropped: the contracts look at the server.
    pub async fn status(&self) -> Result<(), Error> {
        match self {
            Handle::Lock(h) => h.status().await.map(drop),
            Handle::Reentrant(h) => h.status().await.map(drop),
            Handle::Read(h) | Handle::Write(h) => h.status().await.map(drop),
            Handle::Semaphore(h) => h.status().await.map(drop),
            Handle::Fair(h) => h.status().await.map(drop),
        }
    }

    /// `release_by_token`, where the kind offers it.
    pub async fn release_by_token(&self, token: &str) -> Option<Result<(), Error>> {
        match self {
            Handle::Lock(h) => Some(h.release_by_token(token).await),
            Handle::Reentrant(h) => Some(h.release_by_token(token).await),
            Handle::Fair(h) => Some(h.release_by_token(token).await),
            Handle::Read(_) | Handle::Write(_) | Handle::Semaphore(_) => None,
        }
    }

    /// `extend_by_token`, where the kind offers it.
    pub async fn extend_by_token(&self, token: &str, ttl: Duration) -> Option<Result<(), Error>> {
        match self {
            Handle::Lock(h) => Some(h.extend_by_token(token, ttl).await),
            Handle::Fair(h) => Some(h.extend_by_token(token, ttl).await),
            _ => None,
        }
    }
}

/// A guard of any kind (a `FairLock` gives a `LockGuard`).
pub enum Guard {
    Lock(LockGuard),
    Reentrant(ReentrantGuard),
    Read(ReadGuard),
    Write(WriteGuard),
    Permit(Permit),
}

/// Calls one guard method whatever the kind.
macro_rules! each_guard {
    ($guard:expr, $g:ident => $e:expr) => {
        match $guard {
            Guard::Lock($g) => $e,
            Guard::Reentrant($g) => $e,
            Guard::Read($g) => $e,
            Guard::Write($g) => $e,
            Guard::Permit($g) => $e,
        }
    };
}

impl Guard {
    pub fn fence(&self) -> u64 {
        each_guard!(self, g => g.fence())
    }

    pub fn token(&self) -> &str {
        each_guard!(self, g => g.token())
    }

    pub fn is_lost(&self) -> bool {
        each_guard!(self, g => g.is_lost())
    }

    pub async fn lost(&self) {
        each_guard!(self, g => g.lost().await)
    }

    pub async fn extend(&self, ttl: Duration) -> Result<(), Error> {
        each_guard!(self, g => g.extend(ttl).await)
    }

    pub async fn release(self) -> Result<(), Error> {
        each_guard!(self, g => g.release().await)
    }
}

/// Where the contracts run: the servers a client talks to, and how to see
/// what is stored on them.
pub enum Deployment<'a> {
    Single(&'a RedisServer),
    Cluster(&'a RedisCluster),
    /// The set, and the port of its master when the contracts started.
    Sentinel(&'a SentinelSet, u16),
}

/// Commands that servers, sentinels and the client's topology checks send
/// on their own; everything else on a master comes from a lock call.
const BACKGROUND_COMMANDS: [&str; 7] = [
    "info", "ping", "publish", "role", "replconf", "cluster", "hello",
];

impl Deployment<'_> {
    pub fn sentinel(set: &SentinelSet) -> Deployment<'_> {
        Deployment::Sentinel(set, set.master_port())
    }

    /// A new client, so that no subscription or renewal of another
    /// contract runs beside the one under test.
    pub async fn client(&self) -> Client {
        let connected = match self {
            Deployment::Single(server) => Client::connect(&server.url()).await,
            Deployment::Cluster(cluster) => Client::cluster(cluster.urls()).await,
            Deployment::Sentinel(set, _) => Client::sentinel(set.sentinel_urls(), set.name()).await,
        };
        connected.expect("connect to the test deployment")
    }

    /// The servers that hold keys.
    fn masters(&self) -> Vec<&RedisServer> {
        match self {
            Deployment::Single(server) => vec![server],
            Deployment::Cluster(cluster) => cluster
                .master_ports()
                .into_iter()
                .map(|port| cluster.node(port))
                .collect(),
            Deployment::Sentinel(set, port) => vec![
                set.servers()
                    .iter()
                    .find(|s| s.port() == *port)
                    .expect("the master is one of the set"),
            ],
        }
    }

    /// Every data node, replicas included (a subscription may live on any).
    fn nodes(&self) -> &[RedisServer] {
        match self {
            Deployment::Single(server) => std::slice::from_ref(*server),
            Deployment::Cluster(cluster) => cluster.nodes(),
            Deployment::Sentinel(set, _) => set.servers(),
        }
    }

    /// The server that holds `key`.
    pub fn server_of(&self, key: &str) -> &RedisServer {
        match self {
            Deployment::Cluster(cluster) => cluster.node(cluster.master_of(key)),
            _ => self.masters()[0],
        }
    }

    /// Commands the masters ran so far (`INFO commandstats`, which counts
    /// the commands scripts call too), but for [`BACKGROUND_COMMANDS`].
    pub fn lock_commands(&self) -> u64 {
        self.masters()
            .into_iter()
            .flat_map(command_calls)
            .filter(|(command, _)| !BACKGROUND_COMMANDS.contains(&command.as_str()))
            .map(|(_, calls)| calls)
            .sum()
    }

    /// Scripts the masters ran so far (`EVALSHA`, `EVAL`).
    pub fn scripts_run(&self) -> u64 {
        self.masters()
            .into_iter()
            .flat_map(command_calls)
            .filter(|(command, _)| command.starts_with("eval"))
            .map(|(_, calls)| calls)
            .sum()
    }

    /// Keys stored under any name starting with `name` (on every master).
    pub fn keys_of(&self, name: &str) -> Vec<String> {
        let mut keys = Vec::new();
        for server in self.masters() {
            let found: Vec<String> = redis::cmd("KEYS")
                .arg(format!("leasehold:{{{name}*"))
                .query(&mut server.connection())
                .expect("KEYS");
            keys.extend(found);
        }
        keys
    }

    /// Channels of lock `name` someone listens on, over every node: plain
    /// ones and shard channels (a cluster with sharded pub/sub).
    pub fn channels_of(&self, name: &str) -> usize {
        self.nodes()
            .iter()
            .flat_map(|node| {
                // Shard channels are Redis 7's.
                let subs: &[&str] = if leasehold_testkit::server_version() < (7, 0) {
                    &["CHANNELS"]
                } else {
                    &["CHANNELS", "SHARDCHANNELS"]
                };
                subs.iter().map(move |sub| (node, *sub))
            })
            .map(|(node, sub)| {
                let channels: Vec<String> = redis::cmd("PUBSUB")
                    .arg(sub)
                    .arg(format!("leasehold:{{{name}}}:*"))
                    .query(&mut node.connection())
                    .unwrap_or_else(|e| panic!("PUBSUB {sub}: {e}"));
                channels.len()
            })
            .sum()
    }

    /// What lock `name` has on the server: holds (live or expired but not
    /// yet pruned) and waiting entries (queued waiters, waiting writers).
    pub fn footprint(&self, name: &str) -> Footprint {
        let key = format!("leasehold:{{{name}}}:lock");
        let queue = format!("leasehold:{{{name}}}:queue");
        let mut con = self.server_of(&key).connection();
        let kind: String = redis::cmd("TYPE").arg(&key).query(&mut con).unwrap();
        let (holds, waiting_writers) = match kind.as_str() {
            "none" => (0, 0),
            "string" => (1, 0),
            "hash" => {
                let fields: Vec<String> = redis::cmd("HKEYS").arg(&key).query(&mut con).unwrap();
                (fields.iter().filter(|f| f.starts_with("h:")).count(), 0)
            }
            "zset" => {
                let members: Vec<String> = redis::cmd("ZRANGE")
                    .arg(&key)
                    .arg(0)
                    .arg(-1)
                    .query(&mut con)
                    .unwrap();
                let intents = members.iter().filter(|m| m.starts_with("i:")).count();
                (members.len() - intents, intents)
            }
            other => panic!("{key} is a {other}"),
        };
        let queued: usize = redis::cmd("ZCARD").arg(&queue).query(&mut con).unwrap();
        Footprint {
            holds,
            waiting: queued + waiting_writers,
        }
    }

    /// `DUMP` and `PTTL` of every key of lock `name`.
    fn snapshot_of(&self, name: &str) -> Vec<(Option<Vec<u8>>, i64)> {
        ["lock", "fence", "queue", "alive"]
            .iter()
            .map(|suffix| {
                let key = format!("leasehold:{{{name}}}:{suffix}");
                snapshot(self.server_of(&key), &key)
            })
            .collect()
    }
}

/// Each command `server` ran (a subcommand counted as its command) and
/// how many times, from `INFO commandstats`, but for `CLIENT SETINFO`:
/// redis-rs sends two on every new connection, this count's own included,
/// and Valkey 8 runs them where Redis 7.0 refuses them uncounted (unknown
/// subcommand). Redis 6.2 counts every CLIENT subcommand as `client`, and
/// its refused SETINFO as a call that failed: there, failed CLIENT calls
/// are left out.
fn command_calls(server: &RedisServer) -> Vec<(String, u64)> {
    let info: String = redis::cmd("INFO")
        .arg("commandstats")
        .query(&mut server.connection())
        .expect("INFO commandstats");
    info.lines()
        .filter_map(|line| {
            // cmdstat_client|list:calls=3,usec=...
            let (name, stats) = line.strip_prefix("cmdstat_")?.split_once(':')?;
            if name == "client|setinfo" {
                return None;
            }
            let command = name.split('|').next().unwrap_or(name);
            let field = |field: &str| -> u64 {
                stats
                    .split(',')
                    .find_map(|s| s.strip_prefix(field)?.strip_prefix('='))
                    .map_or(0, |n| n.parse().expect("a count"))
            };
            let mut calls = field("calls");
            if name == "client" {
                calls -= field("failed_calls");
            }
            Some((command.to_owned(), calls))
        })
        .collect()
}

/// See [`Deployment::footprint`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Footprint {
    pub holds: usize,
    pub waiting: usize,
}

const NOTHING: Footprint = Footprint {
    holds: 0,
    waiting: 0,
};

/// A name for one contract on one kind, so that contracts sharing a
/// deployment never meet.
fn name_for(contract: &str, kind: Kind) -> String {
    format!("{contract}:{kind:?}")
}

/// Polls `footprint` until it is `want` (bounded, see [`wait_until`]).
async fn footprint_becomes(on: &Deployment<'_>, name: &str, want: Footprint, what: &str) {
    wait_until(what, || on.footprint(name) == want).await;
}

/// `try_acquire` on `handle` gets the lock (then gives it back).
async fn free_at_once(handle: &Handle) {
    let guard = handle.try_acquire().await.expect("try_acquire");
    let guard = guard.expect("free for the next caller at once");
    guard.release().await.expect("release");
}

/// A guard of `handle` with a 30 s lease that is never renewed: its keys
/// change only by the calls under test.
async fn hold_unrenewed(handle: &Handle) -> Guard {
    handle
        .clone()
        .ttl(Duration::from_secs(30))
        .watchdog(false)
        .acquire()
        .await
        .expect("acquire")
}

fn expect_invalid<T>(result: Result<T, Error>, call: &str, word: &str) {
    match result {
        Err(Error::InvalidArgument(message)) => assert!(
            message.contains(word),
            "{call}: the message should name the {word}: {message}"
        ),
        Err(other) => panic!("{call}: expected InvalidArgument, got {other:?}"),
        Ok(_) => panic!("{call}: expected InvalidArgument, got Ok"),
    }
}

fn expect_err<T>(result: Result<T, Error>, want: fn(&Error) -> bool, call: &str) {
    match result {
        Err(e) if want(&e) => {}
        Err(e) => panic!("{call}: wrong error {e:?}"),
        Ok(_) => panic!("{call}: expected an error, got Ok"),
    }
}

fn is_lost(e: &Error) -> bool {
    matches!(e, Error::Lost { .. })
}

fn is_not_owner(e: &Error) -> bool {
    matches!(e, Error::NotOwner { .. })
}

/// Bad names, TTLs out of bounds and the kind's own bad arguments are
/// refused with `InvalidArgument` by every call that takes them, and
/// nothing reaches the server.
pub async fn bad_inputs_are_refused_before_anything_is_sent(on: &Deployment<'_>, kind: Kind) {
    let client = on.client().await;
    let name = name_for("bad", kind);
    let long = "x".repeat(513);
    let mut bad: Vec<(Handle, &str)> = vec![
        (kind.on(&client, ""), "empty"),
        (kind.on(&client, &long), "513 bytes"),
    ];
    for ttl in [
        Duration::ZERO,
        Duration::from_millis(5),
        Duration::from_secs(25 * 3600),
    ] {
        bad.push((kind.on(&client, &name).ttl(ttl), "TTL"));
    }
    bad.extend(kind.bad_handles(&client, &name));

    let sent = on.lock_commands();
    for (handle, word) in &bad {
        let call = handle.acquire_call();
        expect_invalid(handle.acquire().await, call, word);
        expect_invalid(handle.try_acquire().await, &format!("try of {call}"), word);
    }
    for (handle, word) in &bad[..2] {
        let call = handle.acquire_call();
        expect_invalid(handle.status().await, &format!("status of {call}"), word);
        if let Some(r) = handle.release_by_token("some-token").await {
            expect_invalid(r, &format!("release_by_token of {call}"), word);
        }
        if let Some(r) = handle
            .extend_by_token("some-token", Duration::from_secs(1))
            .await
        {
            expect_invalid(r, &format!("extend_by_token of {call}"), word);
        }
    }
    let handle = kind.on(&client, &name);
    for ttl in [Duration::ZERO, Duration::from_secs(25 * 3600)] {
        if let Some(r) = handle.extend_by_token("some-token", ttl).await {
            expect_invalid(r, "extend_by_token", "TTL");
        }
    }
    assert_eq!(
        on.lock_commands(),
        sent,
        "{kind:?}: a refused call sent commands"
    );
    for written in [on.keys_of(&name), on.keys_of(&long[..64])] {
        assert_eq!(written, Vec::<String>::new(), "{kind:?}: keys written");
    }

    // A held guard refuses a bad extend and its lease is left as it was.
    let guard = hold_unrenewed(&handle).await;
    let (before, sent) = (on.snapshot_of(&name), on.lock_commands());
    for ttl in [Duration::ZERO, Duration::from_secs(25 * 3600)] {
        expect_invalid(guard.extend(ttl).await, "extend", "TTL");
    }
    assert_eq!(
        on.lock_commands(),
        sent,
        "{kind:?}: a refused extend sent commands"
    );
    let after = on.snapshot_of(&name);
    assert_eq!(after[0].0, before[0].0, "{kind:?}: the lease changed");
    assert!(after[0].1 <= before[0].1, "{kind:?}: the expiry grew");
    assert!(!guard.is_lost());
    guard.release().await.expect("release");
}

/// Release and extend by another owner's token are refused and change
/// nothing; once the lock is free they report it lost. Only for the kinds
/// with by-token calls (Lock, FairLock; ReentrantLock releases by owner id).
pub async fn another_token_changes_nothing(on: &Deployment<'_>, kind: Kind) {
    let client = on.client().await;
    let name = name_for("owner", kind);
    let handle = kind.on(&client, &name);
    let other = "0123456789abcdef0123456789abcdef";
    if handle.release_by_token(other).await.is_none() {
        // No by-token calls: nothing to check (the guard is the only way in).
        return;
    }
    let guard = hold_unrenewed(&handle).await;
    let before = on.snapshot_of(&name);
    let r = handle.release_by_token(other).await.expect("by-token kind");
    expect_err(r, is_not_owner, "release_by_token of another");
    if let Some(r) = handle
        .extend_by_token(other, Duration::from_secs(600))
        .await
    {
        expect_err(r, is_not_owner, "extend_by_token of another");
    }
    let after = on.snapshot_of(&name);
    assert_eq!(after[0].0, before[0].0, "{kind:?}: the lease changed");
    assert!(after[0].1 <= before[0].1, "{kind:?}: the expiry grew");
    assert!(!guard.is_lost());

    guard.release().await.expect("release");
    let r = handle.release_by_token(other).await.expect("by-token kind");
    expect_err(r, is_lost, "release_by_token when free");
    if let Some(r) = handle.extend_by_token(other, Duration::from_secs(1)).await {
        expect_err(r, is_lost, "extend_by_token when free");
    }
    assert_eq!(on.footprint(&name), NOTHING, "{kind:?}");
}

/// A dropped guard gives its lease back soon (in the background, without
/// blocking): another client's rival gets it long before the TTL.
pub async fn a_dropped_guard_frees_the_lock(on: &Deployment<'_>, kind: Kind) {
    let (client, other) = (on.client().await, on.client().await);
    let name = name_for("drop", kind);
    let ttl = Duration::from_secs(30);
    let guard = kind.on(&client, &name).ttl(ttl).acquire().await.unwrap();
    // With the server paused, a release that blocked would wait for the
    // command timeout (2 s); a drop hands it to the background at once.
    let server = on.server_of(&format!("leasehold:{{{name}}}:lock"));
    server.pause();
    let dropping = Instant::now();
    drop(guard);
    let took = dropping.elapsed();
    server.resume();
    assert!(
        took < Duration::from_millis(200),
        "{kind:?}: drop blocked for {took:?}"
    );
    let rival = kind.rival().on(&other, &name).wait(Duration::from_secs(2));
    let started = Instant::now();
    let taken = rival.acquire().await.expect("the dropped lease comes back");
    let waited = started.elapsed();
    assert!(
        waited < Duration::from_millis(500),
        "{kind:?}: freed after {waited:?}"
    );
    taken.release().await.unwrap();
    assert_eq!(on.footprint(&name), NOTHING, "{kind:?}");
}

/// Without the watchdog, a lease that runs out makes its guard lost:
/// `is_lost()`, `lost()` resolves, `extend` and `release` report `Lost`.
pub async fn an_expired_lease_makes_the_guard_lost(on: &Deployment<'_>, kind: Kind) {
    let client = on.client().await;
    let name = name_for("expiry", kind);
    let guard = kind
        .on(&client, &name)
        .ttl(Duration::from_millis(300))
        .watchdog(false)
        .acquire()
        .await
        .unwrap();
    assert!(!guard.is_lost());
    tokio::time::timeout(Duration::from_secs(3), guard.lost())
        .await
        .unwrap_or_else(|_| panic!("{kind:?}: lost() did not resolve"));
    assert!(guard.is_lost());
    // The client's view ends a little before Redis's (drift); let Redis's end too.
    footprint_becomes(on, &name, NOTHING, "the server expires the lease").await;
    expect_err(
        guard.extend(Duration::from_secs(1)).await,
        is_lost,
        "extend",
    );
    expect_err(guard.release().await, is_lost, "release");
}

/// An acquire dropped while it waits leaves no trace (no queue entry, no
/// waiting writer), the holder is untouched, and the lock is free for the
/// next caller once the holder releases.
pub async fn an_acquire_cancelled_while_waiting_leaves_nothing(on: &Deployment<'_>, kind: Kind) {
    let (client, other) = (on.client().await, on.client().await);
    let name = name_for("cancel-wait", kind);
    let holder = kind.rival().on(&other, &name).acquire().await.unwrap();
    let waiter = kind.on(&client, &name).wait(Duration::from_secs(20));
    let waiting = tokio::spawn(async move { waiter.acquire().await.map(drop) });
    // Refused and listening for the release: the waiter is now waiting.
    wait_until("the waiter subscribes", || on.channels_of(&name) > 0).await;
    waiting.abort();
    assert!(waiting.await.unwrap_err().is_cancelled());
    let held = Footprint {
        holds: 1,
        waiting: 0,
    };
    footprint_becomes(on, &name, held, "the cancelled waiter leaves").await;
    assert!(!holder.is_lost());
    holder.release().await.unwrap();
    footprint_becomes(on, &name, NOTHING, "the lock is free").await;
    free_at_once(&kind.on(&client, &name)).await;
}

/// An acquire dropped while its attempt is in flight (the server is paused,
/// so it runs after the caller gave up) is given back: no hold is left and
/// the next caller gets the lock at once.
pub async fn an_acquire_cancelled_in_flight_leaves_nothing(on: &Deployment<'_>, kind: Kind) {
    let client = on.client().await;
    let name = name_for("cancel-flight", kind);
    let handle = kind.on(&client, &name).wait(Duration::from_secs(10));
    let server = on.server_of(&format!("leasehold:{{{name}}}:lock"));
    // Load the kind's scripts first: a paused attempt answered NOSCRIPT
    // would never run, and the check would prove nothing.
    handle.acquire().await.unwrap().release().await.unwrap();
    let ran = on.scripts_run();
    server.pause();
    let cut = tokio::time::timeout(Duration::from_millis(100), handle.acquire()).await;
    server.resume();
    assert!(cut.is_err(), "{kind:?}: the acquire was not cut off");
    // The attempt ran (its give-back follows it on the same connection).
    wait_until("the attempt ran", || on.scripts_run() > ran).await;
    footprint_becomes(on, &name, NOTHING, "the hold is given back").await;
    free_at_once(&handle).await;
}

/// `status()` reads and writes nothing: every key of the lock is as it
/// was, held or free.
pub async fn status_writes_nothing(on: &Deployment<'_>, kind: Kind) {
    let client = on.client().await;
    let name = name_for("status", kind);
    let handle = kind
        .on(&client, &name)
        .ttl(Duration::from_secs(60))
        .watchdog(false);
    handle.status().await.expect("status of a free lock");
    assert_eq!(on.keys_of(&name), Vec::<String>::new(), "{kind:?}");

    let guard = handle.acquire().await.unwrap();
    let before = on.snapshot_of(&name);
    handle.status().await.expect("status");
    let after = on.snapshot_of(&name);
    for (key, (a, b)) in after.iter().zip(&before).enumerate() {
        assert_eq!(a.0, b.0, "{kind:?}: key {key} changed");
        assert!(a.1 <= b.1, "{kind:?}: key {key}'s expiry grew");
    }
    guard.release().await.unwrap();
}

/// Each acquisition gets a fence above every earlier one, whichever client
/// or handle takes it.
pub async fn fences_increase_across_acquisitions(on: &Deployment<'_>, kind: Kind) {
    let (client, other) = (on.client().await, on.client().await);
    let name = name_for("fence", kind);
    let mut last = 0;
    for c in [&client, &other, &client] {
        let guard = kind.on(c, &name).acquire().await.unwrap();
        assert!(
            guard.fence() > last,
            "{kind:?}: fence {} after {last}",
            guard.fence()
        );
        last = guard.fence();
        guard.release().await.unwrap();
    }
}

/// While a rival holds the lock, `try_acquire` returns `None` at once and
/// `acquire` times out after its wait; the holder is untouched.
pub async fn a_held_lock_refuses_try_acquire(on: &Deployment<'_>, kind: Kind) {
    let (client, other) = (on.client().await, on.client().await);
    let name = name_for("held", kind);
    let holder = kind.rival().on(&other, &name).acquire().await.unwrap();
    let handle = kind.on(&client, &name);
    assert!(handle.try_acquire().await.unwrap().is_none(), "{kind:?}");
    let wait = Duration::from_millis(200);
    let started = Instant::now();
    let timed_out = handle.clone().wait(wait).acquire().await;
    expect_err(timed_out, |e| matches!(e, Error::Timeout { .. }), "acquire");
    let waited = started.elapsed();
    assert!(waited >= wait, "{kind:?}: gave up after {waited:?}");
    assert!(
        waited < wait + Duration::from_millis(500),
        "{kind:?}: {waited:?}"
    );
    assert!(!holder.is_lost());
    holder.release().await.unwrap();
    free_at_once(&handle).await;
}

/// Hands the name of every contract to the macro `$then`, so that the
/// list is written once (`run_all`, `tests/contract.rs`).
macro_rules! contracts {
    ($then:ident) => {
        $then! {
            bad_inputs_are_refused_before_anything_is_sent,
            another_token_changes_nothing,
            a_dropped_guard_frees_the_lock,
            an_expired_lease_makes_the_guard_lost,
            an_acquire_cancelled_while_waiting_leaves_nothing,
            an_acquire_cancelled_in_flight_leaves_nothing,
            status_writes_nothing,
            fences_increase_across_acquisitions,
            a_held_lock_refuses_try_acquire,
        }
    };
}

#[allow(unused_imports)] // used by tests/contract.rs only
pub(crate) use contracts;

/// Every contract for every kind on `on`, one after the other (some
/// contracts count the server's commands or pause it).
pub async fn run_all(on: &Deployment<'_>) {
    macro_rules! run {
        ($($contract:ident),* $(,)?) => {
            $(
                for kind in Kind::ALL {
                    $contract(on, kind).await;
                }
            )*
        };
    }
    contracts!(run);
}
