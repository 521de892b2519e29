//! A live reshard under load: slots (and their lock keys) move between the
//! masters of a cluster while many tasks of one client take and give back
//! locks. No two holders of one name may overlap, fences must follow the
//! order of the holds, no command may see another command's reply, and the
//! client must work afterwards.

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use common::holds::{self, Load, violations};
use leasehold::Client;
use leasehold_testkit::RedisCluster;

/// Names locked; enough that every master holds some and the moved slots
/// carry some.
const NAMES: usize = 64;
/// Tasks of the one client.
const TASKS: usize = 32;
/// Slots moved by each reshard.
const SLOTS: usize = 2000;
/// Bound on the attempts of one task.
const MAX_ATTEMPTS: usize = 20_000;
/// Bound on the whole load, reshards included.
const LOAD_LIMIT: Duration = Duration::from_secs(45);
/// Errors tolerated in the whole run: a command caught by a slot's move
/// after the driver's own retries (TRYAGAIN while a script's keys are split
/// between two nodes, a connection being replaced). A crossed reply is
/// never tolerated, whatever its count.
const ERRORS_TOLERATED: usize = 20;

fn name(i: usize) -> String {
    format!("reshard:{i}")
}

/// One task: takes names in a task-specific order, holds each briefly, and
/// records every hold and every error. Even tasks wait (short), odd ones
/// only try. Stops when `stop` is set or its own bounds are reached.
async fn worker(client: Client, task: usize, stop: Arc<AtomicBool>, deadline: Instant) -> Load {
    let mut out = Load::default();
    let ttl = Duration::from_millis(1500);
    for attempt in 0..MAX_ATTEMPTS {
        if stop.load(Ordering::Relaxed) || Instant::now() >= deadline {
            break;
        }
        let i = (task * 7 + attempt * 13) % NAMES;
        let lock = client.lock(name(i)).ttl(ttl);
        let Some(guard) = out.attempt(lock, task, &name(i)).await else {
            continue;
        };
        let start = Instant::now();
        if attempt % 4 == 0 {
            tokio::time::sleep(Duration::from_millis(1)).await;
        } else {
            tokio::task::yield_now().await;
        }
        out.give_back(guard, (i, &name(i)), task, start).await;
    }
    out
}

/// Every pair of holds of one name that overlap, and every pair whose
/// fences do not follow their order, as messages.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn live_reshard_crosses_no_replies_and_overlaps_no_holds() {
    let began = Instant::now();
    let cluster = Arc::new(RedisCluster::start(3, 0));
    let masters = cluster.master_ports();
    assert_eq!(masters.len(), 3, "three masters");
    let client = Client::cluster(cluster.urls()).await.expect("connect");

    let stop = Arc::new(AtomicBool::new(false));
    let deadline = Instant::now() + LOAD_LIMIT;
    let workers: Vec<_> = (0..TASKS)
        .map(|task| tokio::spawn(worker(client.clone(), task, Arc::clone(&stop), deadline)))
        .collect();

    // Let the load reach every name (and subscribe its channels) before
    // the first move, then move slots one way and another way.
    tokio::time::sleep(Duration::from_millis(500)).await;
    let moves = [(masters[0], masters[1]), (masters[1], masters[2])];
    let mut moved = Vec::new();
    for (from, to) in moves {
        let cluster = Arc::clone(&cluster);
        let before = (cluster.slot_count(from), cluster.slot_count(to));
        let t = Instant::now();
        tokio::task::spawn_blocking(move || {
            cluster.reshard(from, to, SLOTS);
            (cluster.slot_count(from), cluster.slot_count(to))
        })
        .await
        .map(|after| {
            assert_eq!(after.0 + SLOTS, before.0, "{from} gave {SLOTS} slots");
            assert_eq!(after.1, before.1 + SLOTS, "{to} took {SLOTS} slots");
        })
        .expect("reshard");
        moved.push(t.elapsed());
    }
    // A little load after the moves, on the new slot map.
    tokio::time::sleep(Duration::from_millis(500)).await;
    stop.store(true, Ordering::Relaxed);

    let mut load = Load::default();
    for w in workers {
        load.add(w.await.expect("worker"));
    }
    let Load {
        holds,
        errors,
        acquired,
    } = load;
    assert!(
        Instant::now() < deadline,
        "the load ran into its time bound ({LOAD_LIMIT:?})"
    );
    let (overlaps, fences) = violations(&holds, name);
    let wrong: Vec<&String> = errors.iter().filter(|e| holds::is_wrong_reply(e)).collect();
    let summary = format!(
        "{acquired} holds, {} errors ({} of the wrong-reply class), {} overlaps, {} fences \
         out of order; reshards took {moved:?}",
        errors.len(),
        wrong.len(),
        overlaps.len(),
        fences.len()
    );
    eprintln!("{summary}");
    for e in errors.iter().take(10) {
        eprintln!("  error: {e}");
    }
    holds::assert_holds_in_order(&overlaps, &fences, &summary);
    holds::assert_no_wrong_replies(&wrong, &summary);
    assert!(
        errors.len() <= ERRORS_TOLERATED,
        "{} errors, at most {ERRORS_TOLERATED} tolerated: {:#?}\n{summary}",
        errors.len(),
        errors.iter().take(20).collect::<Vec<_>>()
    );
    assert!(acquired >= NAMES, "the load ran: {summary}");

    // The client works afterwards, on every name, wherever it lives now.
    for i in 0..NAMES {
        let guard = client
            .lock(name(i))
            .wait(Duration::from_secs(5))
            .acquire()
            .await
            .unwrap_or_else(|e| panic!("acquire {} after the reshards: {e}\n{summary}", name(i)));
        guard
            .release()
            .await
            .unwrap_or_else(|e| panic!("release {} after the reshards: {e}\n{summary}", name(i)));
    }
    eprintln!("whole test: {:?}", began.elapsed());
}

/// Waits, off the runtime's threads, until `cluster` reports ok again.
async fn wait_until_ok(cluster: &Arc<RedisCluster>) {
    let settle = Arc::clone(cluster);
    tokio::task::spawn_blocking(move || settle.wait_until_ok())
        .await
        .expect("cluster ok again");
}

/// The nodes (by port) whose `PUBSUB <sub>` (`CHANNELS`, `SHARDCHANNELS`)
/// lists a channel starting with `prefix`.
fn subscribed_on(cluster: &RedisCluster, sub: &str, prefix: &str) -> Vec<u16> {
    cluster
        .nodes()
        .iter()
        .filter(|n| n.is_running())
        .filter(|n| {
            let channels: Vec<String> = redis::cmd("PUBSUB")
                .arg(sub)
                .arg(format!("{prefix}*"))
                .query(&mut n.connection())
                .unwrap_or_default();
            !channels.is_empty()
        })
        .map(|n| n.port())
        .collect()
}

/// Waits (bounded) until exactly one running node has a subscription
/// (`PUBSUB <sub>`) to a channel starting with `prefix`; returns its port.
async fn wait_subscribed(cluster: &RedisCluster, sub: &str, prefix: &str) -> u16 {
    let deadline = Instant::now() + Duration::from_secs(15);
    loop {
        if let [port] = subscribed_on(cluster, sub, prefix)[..] {
            return port;
        }
        assert!(
            Instant::now() < deadline,
            "no node subscribed to {prefix}* in time"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Waits (bounded) until the node on `port`, and only it, has a
/// subscription (`PUBSUB <sub>`) to a channel starting with `prefix`.
async fn wait_subscribed_at(cluster: &RedisCluster, sub: &str, prefix: &str, port: u16) {
    let deadline = Instant::now() + Duration::from_secs(15);
    loop {
        let on = subscribed_on(cluster, sub, prefix);
        if on == [port] {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "{prefix}* is subscribed on {on:?}, not on {port} alone"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Waits (bounded) until the waiters' subscription to channels starting
/// with `prefix` is where the client puts it: by SSUBSCRIBE at the master on
/// `port`, or, on Redis 6.2, which has no sharded pub/sub, by SUBSCRIBE on
/// one running node, wherever (README, "Deployments").
async fn wait_subscribed_for_slot(cluster: &RedisCluster, prefix: &str, port: u16) {
    if leasehold_testkit::server_version() >= (7, 0) {
        wait_subscribed_at(cluster, "SHARDCHANNELS", prefix, port).await;
    } else {
        wait_subscribed(cluster, "CHANNELS", prefix).await;
    }
}

/// The way of a client whose user may not run SPUBLISH and SSUBSCRIBE (as
/// every cluster client before sharded pub/sub): all its subscriptions on
/// one node, any one, moved to another when that node dies.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn plain_pubsub_moves_to_another_node_when_its_node_dies() {
    let mut cluster = RedisCluster::start(3, 1);
    let urls = common::user_on_every_node(&cluster, "plain", common::PLAIN_PUBSUB_RULES);
    let holder = Client::cluster(urls.clone()).await.expect("connect");
    let waiter = Client::cluster(urls).await.expect("connect");

    // A first wait puts the waiter's pub/sub connection on some node.
    let probe = holder.lock("probe").acquire().await.expect("acquire");
    let probing = {
        let waiter = waiter.clone();
        tokio::spawn(async move {
            waiter
                .lock("probe")
                .wait(Duration::from_secs(20))
                .acquire()
                .await
        })
    };
    let node = wait_subscribed(&cluster, "CHANNELS", "leasehold:{probe}:released").await;
    probe.release().await.expect("release");
    probing
        .await
        .expect("task")
        .expect("probe acquired")
        .release()
        .await
        .expect("release");

    // A lock on another master than that node, so its death moves only
    // the subscriptions, not the lease.
    let name = (0..100)
        .map(|i| format!("wake:{i}"))
        .find(|n| cluster.master_of(&format!("leasehold:{{{n}}}:lock")) != node)
        .expect("a name on another master");
    let guard = holder
        .lock(name.as_str())
        .ttl(Duration::from_secs(30))
        .acquire()
        .await
        .expect("acquire");
    let waiting = {
        let (waiter, name) = (waiter.clone(), name.clone());
        tokio::spawn(async move {
            let got = waiter
                .lock(name)
                .wait(Duration::from_secs(40))
                .acquire()
                .await;
            (got, Instant::now())
        })
    };
    let prefix = format!("leasehold:{{{name}}}:released");
    assert_eq!(
        wait_subscribed(&cluster, "CHANNELS", &prefix).await,
        node,
        "the waiter subscribes on its client's one pub/sub node"
    );

    let port = node;
    let index = cluster
        .nodes()
        .iter()
        .position(|n| n.port() == port)
        .expect("node");
    let killed = Instant::now();
    cluster.nodes_mut()[index].kill();
    let moved_to = wait_subscribed(&cluster, "CHANNELS", &prefix).await;
    assert_ne!(moved_to, node, "subscribed again on a live node");
    eprintln!(
        "pub/sub moved from {node} to {moved_to} in {:?}",
        killed.elapsed()
    );
    let cluster = Arc::new(cluster);
    wait_until_ok(&cluster).await;

    // The waiter's attempts failed while the cluster was down; once it is
    // ok again, one heartbeat (at most a second) puts it back in the queue.
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let released = Instant::now();
    guard.release().await.expect("release");
    let (got, at) = waiting.await.expect("task");
    let got = got.expect("the waiter gets the lock after the release");
    eprintln!("waiter took the lock {:?} after the release", at - released);
    assert!(at >= released, "not before the release");
    // Woken by the hand-off message on the new node; without it the
    // waiter's next heartbeat (up to a second later) would find the lease.
    assert!(
        at - released < Duration::from_millis(500),
        "the waiter was woken by the release message ({:?})",
        at - released
    );
    got.release().await.expect("release");
}

/// Awaits `attempt` again after an error, 100 ms later, for at most 30 s.
async fn persist<T, F: std::future::Future<Output = leasehold::Result<T>>>(
    who: &str,
    mut attempt: impl FnMut() -> F,
) -> T {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        match attempt().await {
            Ok(got) => return got,
            Err(e) => {
                eprintln!("{who}: {e}; waiting again");
                assert!(Instant::now() < deadline, "{who} gave up: {e}");
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
    }
}

/// A lock (hand-off channel, fallback: the queue heartbeat of 1 s) and an
/// RwLock (lock channel, fallback: the holder's TTL of 30 s), each held by
/// `holder` with a waiter on `waiter`; their channels' subscriptions are
/// looked for by `prefixes`.
struct Waited {
    lock: leasehold::LockGuard,
    rw: leasehold::WriteGuard,
    lock_waiter: tokio::task::JoinHandle<(leasehold::LockGuard, Instant)>,
    rw_waiter: tokio::task::JoinHandle<(leasehold::ReadGuard, Instant)>,
    prefixes: [String; 2],
}

impl Waited {
    async fn start(holder: &Client, waiter: &Client, lock: &str, rw: &str) -> Waited {
        let ttl = Duration::from_secs(30);
        let wait = Duration::from_secs(60);
        let lock_guard = holder.lock(lock).ttl(ttl).acquire().await.expect("hold");
        let rw_guard = holder.rw_lock(rw).ttl(ttl).write().await.expect("hold");
        // An attempt caught by the failover fails (the driver's retries
        // ran out); the waiter then waits again, as a caller would.
        let lock_waiter = {
            let handle = waiter.lock(lock).ttl(ttl).wait(wait);
            tokio::spawn(async move {
                let got = persist("the lock waiter", || handle.acquire()).await;
                (got, Instant::now())
            })
        };
        let rw_waiter = {
            let handle = waiter.rw_lock(rw).ttl(ttl).wait(wait);
            tokio::spawn(async move {
                let got = persist("the reader", || handle.read()).await;
                (got, Instant::now())
            })
        };
        Waited {
            lock: lock_guard,
            rw: rw_guard,
            lock_waiter,
            rw_waiter,
            prefixes: [lock, rw].map(|n| format!("leasehold:{{{n}}}:released")),
        }
    }

    /// Releases both holds; each waiter must be woken by its release
    /// message, far sooner than its fallback. Then the lock is taken and
    /// released with a waiter twice more, on the same connections.
    async fn release_and_check(self, holder: &Client, waiter: &Client, lock: &str) {
        let released = Instant::now();
        self.rw.release().await.expect("release the write hold");
        let (read, at) = self.rw_waiter.await.expect("task");
        let rw_woke = at.saturating_duration_since(released);
        read.release().await.expect("release the read hold");

        let released = Instant::now();
        self.lock.release().await.expect("release the lock");
        let (got, at) = self.lock_waiter.await.expect("task");
        let mut lock_woke = vec![at.saturating_duration_since(released)];
        got.release().await.expect("release");
        for _ in 0..2 {
            let held = holder.lock(lock).acquire().await.expect("hold again");
            let handle = waiter.lock(lock).wait(Duration::from_secs(20));
            let waiting = tokio::spawn(async move {
                let got = handle.acquire().await.expect("the lock waiter acquires");
                (got, Instant::now())
            });
            // Refused and queued (its hand-off channel is subscribed).
            tokio::time::sleep(Duration::from_millis(300)).await;
            let released = Instant::now();
            held.release().await.expect("release");
            let (got, at) = waiting.await.expect("task");
            lock_woke.push(at.saturating_duration_since(released));
            got.release().await.expect("release");
        }
        eprintln!("the reader woke {rw_woke:?} after the release, the lock waiter {lock_woke:?}");
        assert!(
            rw_woke < Duration::from_secs(2),
            "the reader was woken by the release message, not its 30 s fallback ({rw_woke:?})"
        );
        assert!(
            lock_woke.iter().all(|w| *w < Duration::from_millis(500)),
            "the lock waiter was woken by the hand-off message, not its 1 s heartbeat \
             ({lock_woke:?})"
        );
    }
}

/// Two names (a lock, an RwLock) whose slots one master serves, other than
/// `not`.
fn names_on_one_master(
    cluster: &RedisCluster,
    tag: &str,
    not: Option<u16>,
) -> (String, String, u16) {
    let master_of = |n: &str| cluster.master_of(&format!("leasehold:{{{n}}}:lock"));
    let lock = (0..100)
        .map(|i| format!("{tag}:lock:{i}"))
        .find(|n| Some(master_of(n)) != not)
        .expect("a name");
    let master = master_of(&lock);
    let rw = (0..100)
        .map(|i| format!("{tag}:rw:{i}"))
        .find(|n| master_of(n) == master)
        .expect("a name on that master");
    (lock, rw, master)
}

/// Sharded pub/sub: a node ends its shard subscriptions when their slot
/// leaves it (`sunsubscribe` pushed on its own), and releases are then
/// published at the slot's new master. The waiters' channels must follow
/// their slots, and each waiter still wake on its release message. (On
/// Redis 6.2, plain pub/sub: the waiters still wake after the move.)
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn sharded_waiters_wake_after_their_slot_moved() {
    let cluster = Arc::new(RedisCluster::start(3, 0));
    let holder = Client::cluster(cluster.urls()).await.expect("connect");
    let waiter = Client::cluster(cluster.urls()).await.expect("connect");
    let (lock, rw, from) = names_on_one_master(&cluster, "moving", None);
    let waited = Waited::start(&holder, &waiter, &lock, &rw).await;
    for prefix in &waited.prefixes {
        wait_subscribed_for_slot(&cluster, prefix, from).await;
    }
    if leasehold_testkit::server_version() >= (7, 0) {
        assert!(
            subscribed_on(&cluster, "CHANNELS", "leasehold:").is_empty(),
            "no plain subscription"
        );
    }

    let to = cluster
        .master_ports()
        .into_iter()
        .find(|p| *p != from)
        .expect("another master");
    let moving = Arc::clone(&cluster);
    let keys = [&lock, &rw].map(|n| format!("leasehold:{{{n}}}:lock"));
    tokio::task::spawn_blocking(move || {
        for key in keys {
            moving.move_slot_of(&key, to);
        }
    })
    .await
    .expect("slots moved");
    for prefix in &waited.prefixes {
        wait_subscribed_for_slot(&cluster, prefix, to).await;
    }
    // The lock waiter, woken once its channel followed, queues again at the
    // new master within a heartbeat.
    tokio::time::sleep(Duration::from_millis(1500)).await;
    waited.release_and_check(&holder, &waiter, &lock).await;
}

/// Sharded pub/sub: the master of the waiters' slots dies and its replica
/// takes over; the subscriptions move to the new master, and each waiter
/// still wakes on its release message. (On Redis 6.2, plain pub/sub.)
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn sharded_waiters_wake_after_their_master_failed_over() {
    let mut cluster = RedisCluster::start(3, 1);
    let holder = Client::cluster(cluster.urls()).await.expect("connect");
    let waiter = Client::cluster(cluster.urls()).await.expect("connect");
    let (lock, rw, master) = names_on_one_master(&cluster, "failing", None);
    let waited = Waited::start(&holder, &waiter, &lock, &rw).await;
    for prefix in &waited.prefixes {
        wait_subscribed_for_slot(&cluster, prefix, master).await;
    }
    let index = cluster
        .nodes()
        .iter()
        .position(|n| n.port() == master)
        .expect("node");
    // The holds reach the replica before the master dies: a write after
    // them on the master, then WAIT for one replica to have it (the
    // replication stream is in order). A sleep here lost the race about
    // half the time under load (the promoted replica had no holds).
    let mut on_master = cluster.nodes()[index].connection();
    let _: () = redis::cmd("SET")
        .arg(format!("leasehold:{{{lock}}}:probe"))
        .arg("1")
        .arg("PX")
        .arg(60_000)
        .query(&mut on_master)
        .expect("probe");
    let acked: i64 = redis::cmd("WAIT")
        .arg(1)
        .arg(10_000)
        .query(&mut on_master)
        .expect("WAIT");
    assert_eq!(acked, 1, "the replica has the holds");
    let killed = Instant::now();
    cluster.nodes_mut()[index].kill();
    let key = format!("leasehold:{{{lock}}}:lock");
    let deadline = Instant::now() + Duration::from_secs(30);
    let promoted = loop {
        let serving = cluster
            .nodes()
            .iter()
            .filter(|n| n.is_running())
            .find_map(|n| {
                let slots: Vec<Vec<redis::Value>> = redis::cmd("CLUSTER")
                    .arg("SLOTS")
                    .query(&mut n.connection())
                    .ok()?;
                let slot: i64 = redis::cmd("CLUSTER")
                    .arg("KEYSLOT")
                    .arg(&key)
                    .query(&mut n.connection())
                    .ok()?;
                slots.iter().find_map(|range| match range.as_slice() {
                    [
                        redis::Value::Int(start),
                        redis::Value::Int(end),
                        redis::Value::Array(m),
                        ..,
                    ] if (*start..=*end).contains(&slot) => match m.get(1) {
                        Some(redis::Value::Int(p)) => u16::try_from(*p).ok(),
                        _ => None,
                    },
                    _ => None,
                })
            });
        if let Some(port) = serving
            && port != master
        {
            break port;
        }
        assert!(
            Instant::now() < deadline,
            "no replica took over from {master}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    for prefix in &waited.prefixes {
        wait_subscribed_for_slot(&cluster, prefix, promoted).await;
    }
    eprintln!(
        "shard subscriptions moved from {master} to {promoted} in {:?}",
        killed.elapsed()
    );
    let cluster = Arc::new(cluster);
    wait_until_ok(&cluster).await;
    // The lock waiter's attempts failed while the slot had no master; one
    // heartbeat puts it back in the queue.
    tokio::time::sleep(Duration::from_millis(1500)).await;
    waited.release_and_check(&holder, &waiter, &lock).await;
}
