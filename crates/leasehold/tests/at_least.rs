//! `hold_at_least` (issue 18, item 4; ShedLock's `lockAtLeastFor`): a
//! release made too soon keeps the lease until the time asked, on every kind
//! of lease but ReentrantLock's and every way a lease is given back (release, a dropped guard,
//! `Client::close`); a release after that frees the lock at once.

mod common;

use std::time::{Duration, Instant};

use leasehold::Error;
use leasehold_testkit::RedisServer;

const AT_LEAST: Duration = Duration::from_millis(800);

/// The lock key's PTTL on the server (-2: no key).
/// Tries `try_take` every 20 ms until it succeeds (bounded: 5 s); returns
/// when it did.
async fn taken_at<F, Fut, G>(mut try_take: F) -> (Instant, G)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<G>>,
{
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        if let Some(guard) = try_take().await {
            return (Instant::now(), guard);
        }
        assert!(Instant::now() < deadline, "never free again");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_release_before_the_time_keeps_the_lock_until_then() {
    let server = RedisServer::start();
    let (client, other) = (common::client(&server).await, common::client(&server).await);
    let started = Instant::now();
    let guard = client
        .lock("job")
        .ttl(Duration::from_secs(30))
        .hold_at_least(AT_LEAST)
        .acquire()
        .await
        .expect("acquire");
    guard.release().await.expect("release");
    // Kept, for what is left of the 800 ms, not the 30 s TTL.
    let left = common::lock_pttl(&server, "job");
    assert!(
        left > 0 && left <= AT_LEAST.as_millis() as i64,
        "PTTL {left} after the release"
    );
    let lock = other.lock("job");
    assert!(lock.try_acquire().await.expect("try").is_none(), "kept");
    let (at, again) = taken_at(|| async { lock.try_acquire().await.expect("try") }).await;
    assert!(
        at - started >= AT_LEAST,
        "taken again {:?} after the first acquire started",
        at - started
    );
    again.release().await.expect("release");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_release_after_the_time_frees_the_lock_at_once() {
    let server = RedisServer::start();
    let client = common::client(&server).await;
    let lock = client
        .lock("late")
        .hold_at_least(Duration::from_millis(100));
    let guard = lock.acquire().await.expect("acquire");
    tokio::time::sleep(Duration::from_millis(150)).await;
    guard.release().await.expect("release");
    assert_eq!(common::lock_pttl(&server, "late"), -2, "freed at once");
    assert!(lock.try_acquire().await.expect("try").is_some());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dropped_guard_and_close_keep_the_lock_until_then() {
    let server = RedisServer::start();
    let client = common::client(&server).await;
    let other = common::client(&server).await;
    let lock = client
        .lock("dropped")
        .ttl(Duration::from_secs(30))
        .hold_at_least(AT_LEAST);
    let started = Instant::now();
    drop(lock.acquire().await.expect("acquire"));
    // The background task sets the lease to what is left: wait (bounded)
    // for it, then check the lock is still taken.
    common::wait_until("the dropped guard's lease shortened", || {
        let left = common::lock_pttl(&server, "dropped");
        left > 0 && left <= AT_LEAST.as_millis() as i64
    })
    .await;
    let theirs = other.lock("dropped");
    assert!(theirs.try_acquire().await.expect("try").is_none(), "kept");
    let (at, again) = taken_at(|| async { theirs.try_acquire().await.expect("try") }).await;
    assert!(at - started >= AT_LEAST, "{:?}", at - started);
    again.release().await.expect("release");

    // Client::close gives a held lease back the same way.
    let kept = client
        .lock("closed")
        .ttl(Duration::from_secs(30))
        .hold_at_least(AT_LEAST)
        .acquire()
        .await
        .expect("acquire");
    client.close().await.expect("close");
    let left = common::lock_pttl(&server, "closed");
    assert!(
        left > 0 && left <= AT_LEAST.as_millis() as i64,
        "PTTL {left} after close"
    );
    drop(kept);
}

/// Every kind of lease that has it: a semaphore's permit, a read-write
/// lock's write hold and a fair lock are kept the same way. (ReentrantLock
/// has no `hold_at_least`: its holds share one expiry that only grows.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_kind_is_kept_until_then() {
    let server = RedisServer::start();
    let client = common::client(&server).await;
    let other = common::client(&server).await;
    let ttl = Duration::from_secs(30);

    let started = Instant::now();
    let permit = client
        .semaphore("sem", 1)
        .ttl(ttl)
        .hold_at_least(AT_LEAST)
        .acquire()
        .await
        .expect("permit");
    permit.release().await.expect("release");
    let sem = other.semaphore("sem", 1);
    assert!(
        sem.try_acquire().await.expect("try").is_none(),
        "permit kept"
    );
    let (at, p) = taken_at(|| async { sem.try_acquire().await.expect("try") }).await;
    assert!(at - started >= AT_LEAST, "semaphore: {:?}", at - started);
    p.release().await.expect("release");

    let started = Instant::now();
    let write = client
        .rw_lock("rw")
        .ttl(ttl)
        .hold_at_least(AT_LEAST)
        .write()
        .await
        .expect("write");
    write.release().await.expect("release");
    let rw = other.rw_lock("rw");
    assert!(rw.try_read().await.expect("try").is_none(), "write kept");
    let (at, r) = taken_at(|| async { rw.try_read().await.expect("try") }).await;
    assert!(at - started >= AT_LEAST, "rw: {:?}", at - started);
    r.release().await.expect("release");

    let started = Instant::now();
    let fair = client
        .fair_lock("fair")
        .ttl(ttl)
        .hold_at_least(AT_LEAST)
        .acquire()
        .await
        .expect("fair");
    fair.release().await.expect("release");
    let theirs = other.fair_lock("fair");
    assert!(theirs.try_acquire().await.expect("try").is_none(), "kept");
    let (at, f) = taken_at(|| async { theirs.try_acquire().await.expect("try") }).await;
    assert!(at - started >= AT_LEAST, "fair: {:?}", at - started);
    f.release().await.expect("release");
}

#[tokio::test]
async fn a_time_above_the_longest_ttl_is_refused_before_anything_is_sent() {
    let server = RedisServer::start();
    let client = common::client(&server).await;
    let lock = client
        .lock("too-long")
        .hold_at_least(Duration::from_secs(25 * 3600));
    match lock.try_acquire().await {
        Err(Error::InvalidArgument(message)) => {
            assert!(message.contains("hold_at_least"), "{message}")
        }
        other => panic!("expected InvalidArgument, got {other:?}"),
    }
    assert_eq!(common::lock_pttl(&server, "too-long"), -2);
}

#[test]
fn the_blocking_api_keeps_the_lock_until_then() {
    let server = RedisServer::start();
    let client = leasehold::blocking::Client::connect(&server.url()).expect("connect");
    let started = Instant::now();
    let guard = client
        .lock("blocking")
        .hold_at_least(AT_LEAST)
        .acquire()
        .expect("acquire");
    guard.release().expect("release");
    let lock = client.lock("blocking");
    assert!(lock.try_acquire().expect("try").is_none(), "kept");
    let deadline = Instant::now() + Duration::from_secs(5);
    let again = loop {
        if let Some(g) = lock.try_acquire().expect("try") {
            break g;
        }
        assert!(Instant::now() < deadline, "never free again");
        std::thread::sleep(Duration::from_millis(20));
    };
    assert!(started.elapsed() >= AT_LEAST);
    again.release().expect("release");
}

/// `release_by_token` does not know when the lease was taken, so it cannot
/// keep it until `hold_at_least` after: on a handle that asks for it, the
/// call is refused before anything is sent, and the lease stays as it was.
#[tokio::test]
async fn release_by_token_on_a_handle_that_holds_at_least_is_refused_and_changes_nothing() {
    let server = RedisServer::start();
    let client = common::client(&server).await;
    let guard = client.lock("by-token").acquire().await.expect("acquire");
    let token = guard.token().to_owned();
    let fair = client
        .fair_lock("by-token-fair")
        .acquire()
        .await
        .expect("acquire");
    let fair_token = fair.token().to_owned();
    let refused = [
        client
            .lock("by-token")
            .hold_at_least(AT_LEAST)
            .release_by_token(&token)
            .await,
        client
            .fair_lock("by-token-fair")
            .hold_at_least(AT_LEAST)
            .release_by_token(&fair_token)
            .await,
    ];
    for outcome in refused {
        match outcome {
            Err(Error::InvalidArgument(message)) => assert!(
                message.contains("release_by_token") && message.contains("hold_at_least"),
                "{message}"
            ),
            other => panic!("expected InvalidArgument, got {other:?}"),
        }
    }
    for name in ["by-token", "by-token-fair"] {
        let left = common::lock_pttl(&server, name);
        assert!(left > 20_000, "{name}: PTTL {left}: the lease was changed");
    }
    guard.release().await.expect("release");
    fair.release().await.expect("release");
}
