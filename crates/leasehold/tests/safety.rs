//! Orderings that once let two holders overlap (issue 13), each forced
//! against a real redis-server: a grant that arrives later than its TTL, a
//! watchdog busy with thousands of background releases, a renewal racing an
//! explicit extend, a hand-off to a waiter that stalls, and a program that
//! ends with its guards still alive.

mod common;

use common::{client, wait_until};

use std::time::{Duration, Instant};

use leasehold::Client;
use leasehold_testkit::RedisServer;
use redis::Commands;

/// The key a lock's lease lives in, for the default prefix.
fn lock_key(name: &str) -> String {
    format!("leasehold:{{{name}}}:lock")
}

fn get(server: &RedisServer, key: &str) -> Option<String> {
    server.connection().get(key).expect("GET")
}

/// `count` locks named `<tag>:<i>`, held without renewal, for their guards
/// to be dropped at once.
async fn hold_many(client: &Client, tag: &str, count: usize) -> Vec<leasehold::LockGuard> {
    let mut guards = Vec::with_capacity(count);
    for i in 0..count {
        let guard = client
            .lock(format!("{tag}:{i}"))
            .ttl(Duration::from_secs(120))
            .watchdog(false)
            .try_acquire()
            .await
            .expect("try_acquire")
            .expect("free");
        guards.push(guard);
    }
    guards
}

/// Issue 13, item 1. The server freezes while an acquire is in flight, so
/// its grant arrives after the TTL; the client gives it back and tries
/// again. The give-back used to be queued behind the watchdog's other
/// background releases while the retry, sent at once with the same token,
/// found the lease "already ours": the guard it returned was then deleted
/// by the queued give-back, and a second client got the lock while the
/// first guard still said it held.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_grant_later_than_its_ttl_never_yields_a_guard_that_is_then_released() {
    let server = RedisServer::start();
    let client = client(&server).await;
    let busy = hold_many(&client, "busy", 1000).await;

    server.pause();
    let lock = client
        .lock("late")
        .ttl(Duration::from_secs(1))
        .wait(Duration::from_secs(30));
    let acquiring = tokio::spawn(async move { lock.acquire().await });
    // The background releases of 1000 dropped guards queue up in the
    // watchdog (the first one waits on the frozen server) before the late
    // grant's reply can arrive: the server is frozen longer than the TTL.
    drop(busy);
    tokio::time::sleep(Duration::from_millis(1300)).await;
    server.resume();

    let guard = acquiring.await.expect("join").expect("acquire");
    // Every release queued before the reply is done once a release queued
    // after it is: a marker guard dropped now.
    let marker = hold_many(&client, "marker", 1).await;
    drop(marker);
    wait_until("the marker's background release is done", || {
        get(&server, &lock_key("marker:0")).is_none()
    })
    .await;
    wait_until("every busy lock is released", || {
        (0..1000).all(|i| get(&server, &lock_key(&format!("busy:{i}"))).is_none())
    })
    .await;

    assert!(!guard.is_lost(), "the guard still says it holds");
    assert_eq!(
        get(&server, &lock_key("late")).as_deref(),
        Some(guard.token()),
        "the lease of a guard that says it holds was released behind its back"
    );
    let other = client
        .lock("late")
        .try_acquire()
        .await
        .expect("try_acquire");
    assert!(
        other.is_none(),
        "a second holder got the lock while the first guard holds"
    );
    guard.release().await.expect("release");
}

/// Issue 13, item 6. A batch ends and drops thousands of guards at once;
/// their background releases must not hold up the renewal of a short lease
/// that stays held. Releases used to be awaited one by one in the
/// watchdog's loop, ahead of any renewal that fell due meanwhile.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn thousands_of_dropped_guards_do_not_delay_a_renewal() {
    let server = RedisServer::start();
    let client = client(&server).await;
    let batch = hold_many(&client, "batch", 5000).await;

    // The batch ends just before a new lease is taken: 5000 releases, one
    // round trip each, queue up ahead of the new lease's registration with
    // the watchdog, and take far longer than its 300 ms TTL.
    drop(batch);
    let short = client
        .lock("short")
        .ttl(Duration::from_millis(300))
        .acquire()
        .await
        .expect("acquire");
    let started = Instant::now();
    while started.elapsed() < Duration::from_millis(1500) {
        assert!(
            !short.is_lost(),
            "the short lease was lost {:?} after the batch was dropped",
            started.elapsed()
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    assert_eq!(
        get(&server, &lock_key("short")).as_deref(),
        Some(short.token())
    );
    short.release().await.expect("release");
    wait_until("every batch lock is released", || {
        get(&server, &lock_key("batch:4999")).is_none()
    })
    .await;
}
