//! The checks every topology runs: Lock, ReentrantLock and RwLock basics,
//! and a waiter woken promptly by a release.

#![allow(dead_code, unreachable_pub)]

// The contract runs on every deployment, and the tests use every feature:
// a build without one fails here, loudly, rather than leaving tests out.
#[cfg(not(all(
    feature = "tls-ring",
    feature = "cluster",
    feature = "sentinel",
    feature = "blocking",
    feature = "metrics",
    feature = "_raw"
)))]
compile_error!(
    "leasehold's tests need every feature: `cargo test -p leasehold --all-features` \
     (scripts/test builds them with scripts/lib.sh's TEST_FEATURES)"
);

use std::time::{Duration, Instant};

pub mod contract;
pub mod holds;

use leasehold::{Client, Error, Lock, LockGuard};
use leasehold_testkit::{Proxy, ProxyMode, RedisCluster, RedisServer};

/// A client on the test server `server`.
pub async fn client(server: &RedisServer) -> Client {
    Client::connect(&server.url())
        .await
        .expect("connect to the test server")
}

/// Takes the lock `name` on `client` and gives it back: the client works.
pub async fn acquire_and_release(client: &Client, name: &str) {
    let guard = client.lock(name).acquire().await.expect("acquire");
    guard.release().await.expect("release");
}

/// The PTTL of the lock key of `name` (default prefix) on `server`: -2
/// when there is no key.
pub fn lock_pttl(server: &RedisServer, name: &str) -> i64 {
    redis::cmd("PTTL")
        .arg(format!("leasehold:{{{name}}}:lock"))
        .query(&mut server.connection())
        .expect("PTTL")
}

/// Exactly `count` leasehold keys on `server`, each with a TTL: nothing a
/// lock writes outlives its leases.
pub fn assert_every_key_has_a_ttl(server: &RedisServer, count: usize) {
    let mut conn = server.connection();
    let keys: Vec<String> = redis::cmd("KEYS")
        .arg("leasehold:*")
        .query(&mut conn)
        .unwrap();
    assert_eq!(keys.len(), count, "{keys:?}");
    for key in keys {
        let ttl: i64 = redis::cmd("PTTL").arg(&key).query(&mut conn).unwrap();
        assert!(ttl > 0, "{key} has no TTL");
    }
}

/// `key` as stored (`DUMP`; `None` when missing) and its remaining time in
/// ms (`PTTL`), to show that a call left it exactly as it was.
pub fn snapshot(server: &RedisServer, key: &str) -> (Option<Vec<u8>>, i64) {
    let mut con = server.connection();
    let dump: Option<Vec<u8>> = redis::cmd("DUMP").arg(key).query(&mut con).unwrap();
    let pttl: i64 = redis::cmd("PTTL").arg(key).query(&mut con).unwrap();
    (dump, pttl)
}

/// Lock, ReentrantLock and RwLock on `client`, under names starting with `tag`.
pub async fn lock_suite(client: &Client, tag: &str) {
    // Lock: exclusive, fenced, owner-checked.
    let lock = client
        .lock(format!("{tag}:lock"))
        .wait(Duration::from_secs(10));
    let guard = lock.acquire().await.expect("acquire");
    assert!(lock.try_acquire().await.expect("try_acquire").is_none());
    let fence = guard.fence();
    guard.extend(Duration::from_secs(20)).await.expect("extend");
    guard.release().await.expect("release");
    let again = lock.acquire().await.expect("acquire again");
    assert!(again.fence() > fence, "fences increase");
    again.release().await.expect("release");

    waiter_wakes_on_release(client, &format!("{tag}:wake")).await;

    // ReentrantLock: the same owner enters twice; others wait.
    let mine = client.reentrant_lock(format!("{tag}:re")).owner("job-1");
    let theirs = client.reentrant_lock(format!("{tag}:re")).owner("job-2");
    let first = mine.acquire().await.expect("reentrant acquire");
    let second = mine.acquire().await.expect("reentrant re-entry");
    assert!(theirs.try_acquire().await.expect("try").is_none());
    second.release().await.expect("release inner");
    assert!(theirs.try_acquire().await.expect("try").is_none());
    first.release().await.expect("release outer");
    theirs
        .try_acquire()
        .await
        .expect("try")
        .expect("free after both releases")
        .release()
        .await
        .expect("release");

    // RwLock: readers share, a writer excludes, downgrade keeps a read.
    let rw = client.rw_lock(format!("{tag}:rw"));
    let other = client.rw_lock(format!("{tag}:rw"));
    let probe = client.rw_lock(format!("{tag}:rw"));
    let r1 = rw.read().await.expect("read 1");
    let r2 = other.read().await.expect("read 2");
    assert!(probe.try_write().await.expect("try_write").is_none());
    r1.release().await.expect("release r1");
    r2.release().await.expect("release r2");
    let w = rw.write().await.expect("write");
    assert!(probe.try_read().await.expect("try_read").is_none());
    let r = w.downgrade().await.expect("downgrade");
    r.release().await.expect("release downgraded");
}

/// A waiter on another client wakes within a second of the release, far
/// sooner than the holder's TTL would end.
pub async fn waiter_wakes_on_release(client: &Client, name: &str) {
    let ttl = Duration::from_secs(30);
    let held = client.lock(name).ttl(ttl).acquire().await.expect("hold");
    let waiter = client.lock(name).ttl(ttl).wait(Duration::from_secs(20));
    let task = tokio::spawn(async move {
        let guard = waiter.acquire().await?;
        let at = Instant::now();
        guard.release().await?;
        Ok::<Instant, Error>(at)
    });
    tokio::time::sleep(Duration::from_millis(300)).await;
    let released = Instant::now();
    held.release().await.expect("release");
    let acquired_at = task.await.expect("join").expect("waiter acquires");
    let woke_after = acquired_at.duration_since(released);
    assert!(
        woke_after < Duration::from_secs(2),
        "the waiter took {woke_after:?} to wake"
    );
}

/// Two holders of one lock in turn, for fencing tests: A reaches the
/// locks' Redis through a proxy that goes silent on [`take_over`], so its
/// renewals stop getting through, as for a process paused past its TTL; B
/// reaches it directly. Both take the lock with a short TTL (600 ms).
///
/// [`take_over`]: PausedHolder::take_over
pub struct PausedHolder {
    pub proxy: Proxy,
    a: Client,
    b: Client,
}

impl PausedHolder {
    const TTL: Duration = Duration::from_millis(600);

    pub async fn start(server: &RedisServer) -> PausedHolder {
        let proxy = Proxy::start(server.port());
        let a = Client::connect(&proxy.url()).await.unwrap();
        let b = client(server).await;
        PausedHolder { proxy, a, b }
    }

    /// A takes the lock `name`.
    pub async fn a_acquires(&self, name: &str) -> LockGuard {
        self.a.lock(name).ttl(Self::TTL).acquire().await.unwrap()
    }

    /// Cuts A off and waits (up to 10 s) until B holds `name`, which it
    /// gets only once A's lease has ended on the server.
    pub async fn take_over(&self, name: &str) -> LockGuard {
        self.proxy.set_mode(ProxyMode::Blackhole);
        self.b
            .lock(name)
            .ttl(Self::TTL)
            .wait(Duration::from_secs(10))
            .acquire()
            .await
            .unwrap()
    }
}

/// The first guard `lock.try_acquire` returns after a failover: errors
/// (the client still reaching the old master, or reconnecting) are retried
/// every 100 ms until `deadline`; a lock held by someone else fails the
/// test, as nobody else takes it.
pub async fn try_acquire_after_failover(lock: &Lock, deadline: Instant) -> LockGuard {
    loop {
        match lock.try_acquire().await {
            Ok(Some(guard)) => return guard,
            Ok(None) => panic!("nobody else holds this lock"),
            Err(e) => {
                assert!(
                    Instant::now() < deadline,
                    "no acquisition after failover: {e}"
                );
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
    }
}

/// Polls `done` every 10 ms until it holds, failing the test with `what`
/// after 5 s (generous for a busy machine).
pub async fn wait_until(what: &str, mut done: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(5);
    while !done() {
        assert!(Instant::now() < deadline, "timed out waiting until {what}");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// The README's least-privilege rules with a cluster's extra ones, and no
/// sharded pub/sub (`+spublish +ssubscribe +sunsubscribe`): such a user's
/// client publishes and subscribes the plain way, as every cluster client
/// did before sharded pub/sub.
pub const PLAIN_PUBSUB_RULES: &str = "+evalsha +eval +script|load +subscribe +unsubscribe +ping \
    +hello +wait +get +mget +set +del +exists +pexpire +pttl +time +publish +hget +hset +hdel \
    +hexists +hkeys +hlen +zadd +zrem +zrange +zrangebyscore +zremrangebyscore +zscore \
    +zcard +zcount +zpopmin +type +cluster|slots +cluster|shards ~leasehold:* &leasehold:*";

/// Adds the user `name` (password `pw`) with `rules` on every node (a
/// cluster does not share ACLs) and returns its URLs.
pub fn user_on_every_node(cluster: &RedisCluster, name: &str, rules: &str) -> Vec<String> {
    for node in cluster.nodes() {
        // resetchannels: Redis 6.2 starts a reset user with every channel
        // (7.0 with none), and refuses a channel pattern after that.
        let mut args = vec!["SETUSER", name, "reset", "resetchannels", "on", ">pw"];
        args.extend(rules.split_whitespace());
        let _: () = redis::cmd("ACL")
            .arg(&args)
            .query(&mut node.connection())
            .expect("ACL SETUSER");
    }
    cluster
        .nodes()
        .iter()
        .map(|n| n.url_with_auth(Some(name), "pw"))
        .collect()
}
