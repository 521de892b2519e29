//! A live reshard under load: slots (and their lock keys) move between the
//! masters of a cluster while many tasks of one client take and give back
//! locks. No two holders of one name may overlap, fences must follow the
//! order of the holds, no command may see another command's reply, and the
//! client must work afterwards.

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use common::holds::{Hold, take, violations};
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

#[derive(Default)]
struct Outcome {
    holds: Vec<(usize, Hold)>,
    errors: Vec<String>,
    acquired: usize,
}

/// Whether an error says a command got a reply of another shape than its
/// own: the mark of a reply delivered to the wrong command.
fn is_wrong_reply(error: &str) -> bool {
    [
        "ncompatible type",
        "Not a",
        "value was",
        "unexpected reply",
        "Response was",
    ]
    .iter()
    .any(|mark| error.contains(mark))
}

fn name(i: usize) -> String {
    format!("reshard:{i}")
}

/// One task: takes names in a task-specific order, holds each briefly, and
/// records every hold and every error. Even tasks wait (short), odd ones
/// only try. Stops when `stop` is set or its own bounds are reached.
async fn worker(client: Client, task: usize, stop: Arc<AtomicBool>, deadline: Instant) -> Outcome {
    let mut out = Outcome::default();
    let ttl = Duration::from_millis(1500);
    for attempt in 0..MAX_ATTEMPTS {
        if stop.load(Ordering::Relaxed) || Instant::now() >= deadline {
            break;
        }
        let i = (task * 7 + attempt * 13) % NAMES;
        let lock = client.lock(name(i)).ttl(ttl);
        let result = take(lock, task % 2 == 0).await;
        let guard = match result {
            Ok(Some(guard)) => guard,
            Ok(None) => continue,
            Err(e) => {
                out.errors.push(format!("acquire {}: {e}", name(i)));
                // Never retry at once: an error loop must not spin.
                tokio::time::sleep(Duration::from_millis(5)).await;
                continue;
            }
        };
        let start = Instant::now();
        out.acquired += 1;
        if attempt % 4 == 0 {
            tokio::time::sleep(Duration::from_millis(1)).await;
        } else {
            tokio::task::yield_now().await;
        }
        let fence = guard.fence();
        let end = Instant::now();
        out.holds.push((
            i,
            Hold {
                start,
                end,
                fence,
                task,
            },
        ));
        if let Err(e) = guard.release().await {
            out.errors.push(format!("release {}: {e}", name(i)));
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
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

    let mut holds = Vec::new();
    let mut errors = Vec::new();
    let mut acquired = 0;
    for w in workers {
        let out = w.await.expect("worker");
        holds.extend(out.holds);
        errors.extend(out.errors);
        acquired += out.acquired;
    }
    assert!(
        Instant::now() < deadline,
        "the load ran into its time bound ({LOAD_LIMIT:?})"
    );
    let (overlaps, fences) = violations(&holds, name);
    let wrong: Vec<&String> = errors.iter().filter(|e| is_wrong_reply(e)).collect();
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
    assert!(
        overlaps.is_empty(),
        "two holders of one name: {overlaps:#?}\n{summary}"
    );
    assert!(
        fences.is_empty(),
        "fences out of hold order: {fences:#?}\n{summary}"
    );
    assert!(
        wrong.is_empty(),
        "replies seen by the wrong command: {:#?}\n{summary}",
        wrong.iter().take(10).collect::<Vec<_>>()
    );
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
    let settle = Arc::clone(&cluster);
    tokio::task::spawn_blocking(move || settle.wait_until_ok())
        .await
        .expect("cluster ok again");

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
