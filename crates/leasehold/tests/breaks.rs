//! An operator's break (`Client::break_lease`, `leasehold release --force`)
//! tells the holder's client at once (issue 33, item 6): the guard is lost
//! within a round trip of the break, with `LostReason::Broken`, not at its
//! next renewal a third of its TTL later.

mod common;

use std::future::Future;
use std::time::{Duration, Instant};

use common::client;
use leasehold::{Client, LostReason};
use leasehold_testkit::RedisServer;

/// The lease every holder here takes: its first renewal comes at a third of
/// it, 20 s after the acquisition, far beyond [`HEARD_WITHIN`].
const TTL: Duration = Duration::from_secs(60);

/// How soon after the break returned its holder must have heard it: many
/// round trips on loopback, far below the first renewal (TTL / 3).
const HEARD_WITHIN: Duration = Duration::from_secs(2);

/// Waits until `clients` connections in all listen for the break notices
/// on `servers` (`PUBSUB NUMSUB`, and `SHARDNUMSUB` where the server has
/// it). A client subscribes at its first acquisition, in the background
/// (no acquisition waits for it); the tests break only once it has.
async fn hearing(servers: &[&RedisServer], clients: i64) {
    common::wait_until("the clients listen for break notices", || {
        let mut n = 0;
        for server in servers {
            n += server.subscribers("leasehold:broken");
            let sharded: redis::RedisResult<(String, i64)> = redis::cmd("PUBSUB")
                .arg(&["SHARDNUMSUB", "leasehold:broken"])
                .query(&mut server.connection());
            n += sharded.map_or(0, |(_, k)| k);
        }
        n >= clients
    })
    .await;
}

/// Breaks `name` from `operator` and waits for `lost` (the holder's
/// guard's `lost()`), which must resolve within [`HEARD_WITHIN`]; returns
/// how long after the break returned it did.
async fn broken_at_once(operator: &Client, name: &str, lost: impl Future<Output = ()>) -> Duration {
    let broken = operator
        .break_lease(name)
        .await
        .expect("break")
        .unwrap_or_else(|| panic!("nothing held {name}"));
    let at = Instant::now();
    assert_eq!(broken.name, name);
    tokio::time::timeout(HEARD_WITHIN, lost)
        .await
        .unwrap_or_else(|_| {
            panic!("the holder of {name} was not told of the break within {HEARD_WITHIN:?}")
        });
    at.elapsed()
}

#[tokio::test]
async fn a_broken_guard_of_every_kind_is_lost_at_once_and_says_an_operator_broke_it() {
    let server = RedisServer::start();
    let holder = client(&server).await;
    let operator = client(&server).await;

    let lock = holder.lock("lock").ttl(TTL).acquire().await.unwrap();
    hearing(&[&server], 1).await;
    // Another lease of the same client, on another name, is not touched.
    let other = holder.lock("other").ttl(TTL).acquire().await.unwrap();
    broken_at_once(&operator, "lock", lock.lost()).await;
    assert_eq!(lock.lost_reason(), Some(LostReason::Broken));
    assert!(!other.is_lost(), "a lease on another name was lost");

    let fair = holder.fair_lock("fair").ttl(TTL).acquire().await.unwrap();
    broken_at_once(&operator, "fair", fair.lost()).await;
    assert_eq!(fair.lost_reason(), Some(LostReason::Broken));

    let reentrant = holder.reentrant_lock("re").owner("job-7").ttl(TTL);
    let (first, second) = (
        reentrant.acquire().await.unwrap(),
        reentrant.acquire().await.unwrap(),
    );
    broken_at_once(&operator, "re", first.lost()).await;
    tokio::time::timeout(HEARD_WITHIN, second.lost())
        .await
        .expect("the owner's second hold was not lost with the first");
    assert_eq!(first.lost_reason(), Some(LostReason::Broken));
    assert_eq!(second.lost_reason(), Some(LostReason::Broken));

    let rw = holder.rw_lock("rw").ttl(TTL);
    let write = rw.write().await.unwrap();
    broken_at_once(&operator, "rw", write.lost()).await;
    assert_eq!(write.lost_reason(), Some(LostReason::Broken));
    let read = holder.rw_lock("rw").ttl(TTL).read().await.unwrap();
    let other_read = operator.rw_lock("rw").ttl(TTL).read().await.unwrap();
    hearing(&[&server], 2).await;
    broken_at_once(&operator, "rw", read.lost()).await;
    assert_eq!(read.lost_reason(), Some(LostReason::Broken));
    // The breaker's own read was broken too, and its client told as well.
    tokio::time::timeout(HEARD_WITHIN, other_read.lost())
        .await
        .expect("the other reader was not told");

    let sem = holder.semaphore("sem", 2).ttl(TTL);
    let (p1, p2) = (sem.acquire().await.unwrap(), sem.acquire().await.unwrap());
    broken_at_once(&operator, "sem", p1.lost()).await;
    tokio::time::timeout(HEARD_WITHIN, p2.lost())
        .await
        .expect("the second permit was not lost");
    assert_eq!(p1.lost_reason(), Some(LostReason::Broken));

    let leadership = holder
        .election("leader")
        .ttl(TTL)
        .campaign("host-a")
        .await
        .unwrap();
    broken_at_once(&operator, "leader", leadership.lost()).await;
    assert_eq!(leadership.lost_reason(), Some(LostReason::Broken));
    assert!(!other.is_lost());
}

/// The break names the holds it broke, so a holder that took the lock
/// after it is not told anything: B acquires once A was broken and keeps
/// its lease, and a second break then breaks B (and tells B).
#[tokio::test]
async fn the_next_holder_after_a_break_is_not_lost_by_it() {
    let server = RedisServer::start();
    let (a, b) = (client(&server).await, client(&server).await);
    let operator = client(&server).await;
    let first = a.rw_lock("rw").ttl(TTL).write().await.unwrap();
    hearing(&[&server], 1).await;
    broken_at_once(&operator, "rw", first.lost()).await;
    let next = b.rw_lock("rw").ttl(TTL).write().await.unwrap();
    hearing(&[&server], 2).await;
    // Its notice went out before B acquired; a round trip of B's client
    // later, B still holds.
    b.lock("probe").try_acquire().await.unwrap();
    assert!(!next.is_lost(), "the holder after the break was lost");
    broken_at_once(&operator, "rw", next.lost()).await;
    assert_eq!(next.lost_reason(), Some(LostReason::Broken));
}

/// Redlock: the break releases the lease on the nodes as its holder would,
/// and the notice goes out on every node; the holder's guard is lost at
/// once with `Broken` (its notice used to say it expired).
#[tokio::test]
async fn a_broken_redlock_lease_is_lost_at_once() {
    let servers = leasehold_testkit::start_servers(3);
    let urls: Vec<String> = servers.iter().map(RedisServer::url).collect();
    let holder = Client::redlock(urls.clone()).await.unwrap();
    let operator = Client::redlock(urls).await.unwrap();
    let guard = holder.lock("job").ttl(TTL).acquire().await.unwrap();
    hearing(&servers.iter().collect::<Vec<_>>(), 1).await;
    broken_at_once(&operator, "job", guard.lost()).await;
    assert_eq!(guard.lost_reason(), Some(LostReason::Broken));
}

/// A cluster: the notice goes by SPUBLISH to the shard of `<prefix>:broken`
/// (by PUBLISH where the masters lack sharded pub/sub), whichever slot the
/// lock's name has; the holder hears it there.
#[tokio::test]
async fn a_broken_lease_on_a_cluster_is_lost_at_once() {
    let cluster = leasehold_testkit::RedisCluster::start(3, 0);
    let holder = Client::cluster(cluster.urls()).await.unwrap();
    let operator = Client::cluster(cluster.urls()).await.unwrap();
    for name in ["a", "b", "c", "d"] {
        let guard = holder.rw_lock(name).ttl(TTL).write().await.unwrap();
        hearing(&cluster.nodes().iter().collect::<Vec<_>>(), 1).await;
        broken_at_once(&operator, name, guard.lost()).await;
        assert_eq!(guard.lost_reason(), Some(LostReason::Broken));
        let guard = holder.lock(name).ttl(TTL).acquire().await.unwrap();
        broken_at_once(&operator, name, guard.lost()).await;
        assert_eq!(guard.lost_reason(), Some(LostReason::Broken));
    }
}
