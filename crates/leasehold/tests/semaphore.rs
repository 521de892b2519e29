//! The semaphore against real redis-server processes.

mod common;

use common::client;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use leasehold::{Client, Error};
use leasehold_testkit::{Proxy, ProxyMode, RedisServer};
use redis::Commands;

const KEY: &str = "leasehold:{exports}:lock";

/// The permits' members with their expiry scores.
fn permits(server: &RedisServer) -> Vec<(String, i64)> {
    server.connection().zrange_withscores(KEY, 0, -1).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn three_permits_under_twelve_tasks_never_have_more_than_three_holders() {
    let server = RedisServer::start();
    let holders = Arc::new(AtomicUsize::new(0));
    let most = Arc::new(AtomicUsize::new(0));
    let mut tasks = Vec::new();
    for c in 0..3 {
        // Four tasks on each of three clients.
        let client = client(&server).await;
        for _ in 0..4 {
            let sem = client
                .semaphore("exports", 3)
                .wait(Duration::from_secs(120));
            let (holders, most) = (Arc::clone(&holders), Arc::clone(&most));
            tasks.push(tokio::spawn(async move {
                for _ in 0..5 {
                    let permit = sem.acquire().await.expect("acquire");
                    let now = holders.fetch_add(1, Ordering::SeqCst) + 1;
                    most.fetch_max(now, Ordering::SeqCst);
                    tokio::time::sleep(Duration::from_millis(20)).await;
                    holders.fetch_sub(1, Ordering::SeqCst);
                    permit.release().await.expect("release");
                }
                c
            }));
        }
    }
    let started = Instant::now();
    for task in tasks {
        tokio::time::timeout(Duration::from_secs(120), task)
            .await
            .expect("every task finishes")
            .unwrap();
    }
    let most = most.load(Ordering::SeqCst);
    assert!(most <= 3, "{most} holders at once");
    assert_eq!(most, 3, "the tasks should have contended for all three");
    // 60 holds of 20 ms, three at a time, woken by events; the fallback
    // timers (30 s TTL) would take far longer.
    assert!(
        started.elapsed() < Duration::from_secs(30),
        "{:?}",
        started.elapsed()
    );
    assert!(permits(&server).is_empty(), "every permit was given back");
}

#[tokio::test]
async fn a_killed_holders_permit_returns_after_its_ttl_and_no_other_changes() {
    let server = RedisServer::start();
    let client = client(&server).await;
    let proxy = Proxy::start(server.port());
    let doomed = Client::connect(&proxy.url()).await.unwrap();
    let ttl = Duration::from_millis(800);
    let killed = doomed
        .semaphore("exports", 3)
        .ttl(ttl)
        .acquire()
        .await
        .unwrap();
    let sem = client.semaphore("exports", 3).ttl(Duration::from_secs(20));
    let a = sem.acquire().await.unwrap();
    let b = sem.acquire().await.unwrap();
    assert!(sem.try_acquire().await.unwrap().is_none(), "all three held");
    let others: Vec<(String, i64)> = permits(&server)
        .into_iter()
        .filter(|(m, _)| !m.ends_with(killed.token()))
        .collect();
    assert_eq!(others.len(), 2);

    // The holder's connection goes dark: it can neither renew nor release.
    proxy.set_mode(ProxyMode::Blackhole);
    let killed_at = Instant::now();
    let back = sem
        .clone()
        .wait(Duration::from_secs(10))
        .acquire()
        .await
        .expect("the dead holder's permit comes back");
    let waited = killed_at.elapsed();
    assert!(
        waited <= ttl + Duration::from_millis(1500),
        "the permit came back after {waited:?}"
    );
    assert!(killed.is_lost(), "the dead holder's guard knows");
    let now: Vec<(String, i64)> = permits(&server)
        .into_iter()
        .filter(|(m, _)| !m.ends_with(back.token()))
        .collect();
    assert_eq!(now, others, "the other permits are untouched");
    assert!(back.fence() > b.fence() && b.fence() > a.fence());
    for permit in [a, b, back] {
        permit.release().await.unwrap();
    }
    drop(killed);
}

#[tokio::test]
async fn clients_that_disagree_on_the_permits_get_a_clear_error() {
    let server = RedisServer::start();
    let three = client(&server).await.semaphore("exports", 3);
    let five = client(&server).await.semaphore("exports", 5);
    let permit = three.acquire().await.unwrap();
    let err = five.try_acquire().await.unwrap_err();
    assert!(
        matches!(
            err,
            Error::PermitsMismatch {
                permits: 5,
                held_with: 3,
                ..
            }
        ),
        "{err:?}"
    );
    let message = err.to_string();
    assert!(message.contains('3') && message.contains('5'), "{message}");
    let started = Instant::now();
    assert!(matches!(
        five.acquire().await,
        Err(Error::PermitsMismatch { .. })
    ));
    assert!(
        started.elapsed() < Duration::from_secs(1),
        "acquire fails at once, without waiting"
    );
    permit.release().await.unwrap();
    // Once no permit is held, the next caller's count holds.
    let permit = five.try_acquire().await.unwrap().expect("free");
    assert!(matches!(
        three.try_acquire().await,
        Err(Error::PermitsMismatch {
            permits: 3,
            held_with: 5,
            ..
        })
    ));
    permit.release().await.unwrap();
}

#[tokio::test]
async fn a_release_wakes_a_waiter_at_once() {
    let server = RedisServer::start();
    let holder = client(&server).await;
    let other = client(&server).await;
    let sem = holder.semaphore("exports", 1).ttl(Duration::from_secs(20));
    let permit = sem.acquire().await.unwrap();
    let waiter = {
        let sem = other.semaphore("exports", 1).wait(Duration::from_secs(15));
        tokio::spawn(async move {
            let permit = sem.acquire().await.unwrap();
            (Instant::now(), permit)
        })
    };
    tokio::time::sleep(Duration::from_millis(300)).await;
    let released = Instant::now();
    permit.release().await.unwrap();
    let (woke, permit) = waiter.await.unwrap();
    let delay = woke - released;
    assert!(
        delay < Duration::from_secs(2),
        "the waiter took {delay:?}; the fallback timer would take 20 s"
    );
    permit.release().await.unwrap();
}

#[tokio::test]
async fn permits_are_renewed_and_have_ttls() {
    let server = RedisServer::start();
    let client = client(&server).await;
    let sem = client
        .semaphore("exports", 2)
        .ttl(Duration::from_millis(300));
    let permit = sem.acquire().await.unwrap();
    let fence: i64 = server
        .connection()
        .pttl("leasehold:{exports}:fence")
        .unwrap();
    assert!(
        fence > 0 && fence <= 300,
        "the fence key is kept as long as the lease: {fence}"
    );
    tokio::time::sleep(Duration::from_millis(1200)).await;
    assert!(!permit.is_lost(), "the watchdog renews the permit");
    assert_eq!(permits(&server).len(), 1);
    let pttl: i64 = server.connection().pttl(KEY).unwrap();
    assert!(pttl > 0 && pttl <= 300, "the key has a TTL: {pttl}");
    // Renewals do not keep the fence key: fences rise without it.
    let fence: i64 = server
        .connection()
        .pttl("leasehold:{exports}:fence")
        .unwrap();
    assert_eq!(fence, -2, "the fence key outlived its memory");
    permit.extend(Duration::from_secs(5)).await.expect("extend");
    permit.release().await.expect("release");
}

#[tokio::test]
async fn status_counts_live_permits_only_and_changes_nothing() {
    let server = RedisServer::start();
    let client = client(&server).await;
    // No renewals: nothing but the calls under test touches the key.
    let sem = client
        .semaphore("exports", 3)
        .ttl(Duration::from_secs(60))
        .watchdog(false);

    let free = sem.status().await.unwrap();
    assert_eq!(free.name, "exports");
    assert_eq!((free.permits, free.held, free.fence), (None, 0, None));
    assert!(free.holders.is_empty());

    let short = sem
        .clone()
        .ttl(Duration::from_secs(2))
        .acquire()
        .await
        .unwrap();
    let long = sem.acquire().await.unwrap();
    let status = sem.status().await.unwrap();
    assert_eq!((status.permits, status.held), (Some(3), 2), "{status:?}");
    let shown: Vec<&str> = status.holders.iter().map(|h| h.holder.as_str()).collect();
    assert_eq!(
        shown,
        [&short.token()[..8], &long.token()[..8]],
        "soonest first"
    );
    let left = status.holders[1].remaining;
    assert!(
        // The server keeps a lease a tick (16 ms) longer than its holder
        // counts it (lease.rs SERVER_TICK).
        left > Duration::from_secs(30) && left <= Duration::from_millis(60_016),
        "{left:?}"
    );
    assert_eq!(status.fence, Some(long.fence()));

    // The short permit's lease ends; its entry stays until the next change,
    // and status neither counts nor removes it.
    tokio::time::sleep(Duration::from_secs(3)).await;
    let before = common::snapshot(&server, KEY);
    let status = sem.status().await.unwrap();
    let after = common::snapshot(&server, KEY);
    assert_eq!(after.0, before.0, "the set changed");
    assert!(after.1 <= before.1, "the expiry grew");
    assert_eq!(permits(&server).len(), 2, "the expired permit was pruned");
    assert_eq!((status.permits, status.held), (Some(3), 1), "{status:?}");
    assert_eq!(status.holders.len(), 1);
    assert_eq!(status.holders[0].holder, long.token()[..8]);
    drop((short, long));
}

#[tokio::test]
async fn status_of_a_key_of_another_type_is_wrong_type_and_changes_nothing() {
    let server = RedisServer::start();
    let client = client(&server).await;
    let _: () = server.connection().hset(KEY, "f", "v").unwrap();
    let before = common::snapshot(&server, KEY);
    match client.semaphore("exports", 2).status().await {
        Err(Error::WrongType { key }) => assert_eq!(key, KEY),
        other => panic!("expected WrongType, got {other:?}"),
    }
    assert_eq!(common::snapshot(&server, KEY), before);

    // An RwLock's set has the same Redis type, but not a semaphore's members.
    let read = client.rw_lock("shared").read().await.unwrap();
    let rw_key = "leasehold:{shared}:lock";
    let before: Vec<(String, i64)> = server
        .connection()
        .zrange_withscores(rw_key, 0, -1)
        .unwrap();
    match client.semaphore("shared", 2).status().await {
        Err(Error::WrongType { key }) => assert_eq!(key, rw_key),
        other => panic!("expected WrongType, got {other:?}"),
    }
    let after: Vec<(String, i64)> = server
        .connection()
        .zrange_withscores(rw_key, 0, -1)
        .unwrap();
    assert_eq!(after, before);
    let permit = client.semaphore("counted", 2).acquire().await.unwrap();
    match client.rw_lock("counted").status().await {
        Err(Error::WrongType { key }) => assert_eq!(key, "leasehold:{counted}:lock"),
        other => panic!("expected WrongType, got {other:?}"),
    }
    drop((read, permit));
}
