//! The fair lock against real redis-server processes.

mod common;

use common::client;

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use leasehold::{Client, Error, FairLock};
use leasehold_testkit::{Proxy, ProxyMode, RedisServer};
use redis::Commands;

/// The key of the fair lock "queue" under the default prefix.
const KEY: &str = "leasehold:{queue}:lock";

/// Waits until `n` waiters are queued for `lock`.
async fn queued(lock: &FairLock, n: usize) {
    let deadline = Instant::now() + Duration::from_secs(5);
    while lock.status().await.unwrap().waiters != n {
        assert!(Instant::now() < deadline, "waiter {n} never queued");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

type Log = Arc<Mutex<Vec<(usize, Instant)>>>;

/// A waiter that records when it got the lock, holds it briefly and releases.
fn waiter(lock: FairLock, i: usize, log: &Log) -> tokio::task::JoinHandle<()> {
    let log = Arc::clone(log);
    tokio::spawn(async move {
        let guard = lock.acquire().await.unwrap();
        log.lock().unwrap().push((i, Instant::now()));
        tokio::time::sleep(Duration::from_millis(20)).await;
        guard.release().await.unwrap();
    })
}

/// `n` waiters on `lock`'s name, waiter `i` on the client `on(i)`, each
/// queued before the next arrives.
async fn queue_waiters<'a>(
    lock: &FairLock,
    n: usize,
    on: impl Fn(usize) -> &'a Client,
    log: &Log,
) -> Vec<tokio::task::JoinHandle<()>> {
    let mut tasks = Vec::new();
    for i in 0..n {
        tasks.push(waiter(
            on(i).fair_lock("queue").wait(Duration::from_secs(60)),
            i,
            log,
        ));
        queued(lock, i + 1).await;
    }
    tasks
}

/// Waits until each of `tasks` has had its turn (60 s at most each); the
/// order the waiters got the lock in, as `log` has it.
async fn turns(tasks: Vec<tokio::task::JoinHandle<()>>, log: &Log) -> Vec<usize> {
    for task in tasks {
        tokio::time::timeout(Duration::from_secs(60), task)
            .await
            .expect("every live waiter gets its turn")
            .unwrap();
    }
    log.lock().unwrap().iter().map(|(i, _)| *i).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ten_waiters_acquire_in_exactly_their_arrival_order() {
    let server = RedisServer::start();
    let first = client(&server).await;
    let second = client(&server).await;
    let lock = first.fair_lock("queue").wait(Duration::from_secs(60));
    let guard = lock.acquire().await.unwrap();
    let log: Log = Arc::default();
    // Waiters alternate between two clients.
    let on = |i: usize| if i.is_multiple_of(2) { &first } else { &second };
    let tasks = queue_waiters(&lock, 10, on, &log).await;
    // Nobody barges in while they wait, not even the holder's own client.
    guard.release().await.unwrap();
    assert!(lock.try_acquire().await.unwrap().is_none());
    assert_eq!(turns(tasks, &log).await, (0..10).collect::<Vec<_>>());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiter_killed_in_the_middle_of_the_queue_is_skipped_within_the_bound() {
    let server = RedisServer::start();
    let client = client(&server).await;
    let proxy = Proxy::start(server.port());
    let doomed = Client::connect(&proxy.url()).await.unwrap();
    let lock = client.fair_lock("queue").wait(Duration::from_secs(60));
    let guard = lock.acquire().await.unwrap();
    let log: Log = Arc::default();
    let on = |i: usize| if i == 5 { &doomed } else { &client };
    let mut tasks = queue_waiters(&lock, 10, on, &log).await;
    let killed = tasks.remove(5);
    // Waiter 5's connection goes dark: no more heartbeats, no hand-off reaches it.
    proxy.set_mode(ProxyMode::Blackhole);
    // A newcomer keeps trying to slip in, e.g. while waiter 5's turn lapses.
    let barger = {
        let (lock, log) = (lock.clone(), Arc::clone(&log));
        tokio::spawn(async move {
            loop {
                if let Some(guard) = lock.try_acquire().await.unwrap() {
                    log.lock().unwrap().push((99, Instant::now()));
                    guard.release().await.unwrap();
                }
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        })
    };
    guard.release().await.unwrap();
    let order = turns(tasks, &log).await;
    barger.abort();
    let log = log.lock().unwrap().clone();
    assert_eq!(
        order[..9],
        [0, 1, 2, 3, 4, 6, 7, 8, 9],
        "queued waiters in arrival order, the dead one skipped, nobody barging in"
    );
    // The gap the dead waiter left: at most its queue window (3 s, which
    // its reservation lasts at most) plus the next waiter's heartbeat (1 s),
    // plus slack.
    let gap = log[5].1 - log[4].1;
    assert!(
        gap < Duration::from_millis(5500),
        "the dead waiter held up the queue for {gap:?}"
    );
    assert!(
        gap > Duration::from_millis(300),
        "waiter 6 got the lock {gap:?} after 4: the dead waiter's turn was not even tried"
    );
    killed.abort();
}

#[tokio::test]
async fn a_waiter_that_gives_up_leaves_the_queue_at_once() {
    let server = RedisServer::start();
    let client = client(&server).await;
    let lock = client.fair_lock("queue");
    let guard = lock.acquire().await.unwrap();
    let impatient = lock.clone().wait(Duration::from_millis(300));
    assert!(matches!(
        impatient.acquire().await,
        Err(Error::Timeout { .. })
    ));
    queued(&lock, 0).await;
    guard.release().await.unwrap();
    let next = lock
        .try_acquire()
        .await
        .unwrap()
        .expect("free, nobody waits");
    next.release().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn release_by_token_hands_the_lock_to_the_queued_waiters_in_order() {
    let server = RedisServer::start();
    let first = client(&server).await;
    let second = client(&server).await;
    let lock = first.fair_lock("queue").wait(Duration::from_secs(60));
    // The holder keeps only the token, as another process would.
    let token = lock.acquire().await.unwrap().detach();
    let log: Log = Arc::default();
    let on = |i: usize| if i.is_multiple_of(2) { &first } else { &second };
    let tasks = queue_waiters(&lock, 4, on, &log).await;
    lock.release_by_token(&token).await.unwrap();
    // Handed to the first waiter, not left free for a newcomer.
    assert!(lock.try_acquire().await.unwrap().is_none());
    assert_eq!(turns(tasks, &log).await, [0, 1, 2, 3]);
    assert!(matches!(
        lock.release_by_token(&token).await,
        Err(Error::Lost { .. })
    ));
}

#[tokio::test]
async fn extend_by_token_sets_the_remaining_lease() {
    let server = RedisServer::start();
    let client = client(&server).await;
    let lock = client.fair_lock("queue").ttl(Duration::from_secs(2));
    let token = lock.acquire().await.unwrap().detach();
    lock.extend_by_token(&token, Duration::from_secs(60))
        .await
        .unwrap();
    // The server keeps a lease 16 ms (a server clock tick) longer than
    // its holder counts it (lease.rs SERVER_TICK).
    let ttl: i64 = server.connection().pttl(KEY).unwrap();
    assert!(
        (50_000..=60_016).contains(&ttl),
        "extend to 60 s left {ttl} ms"
    );
    lock.extend_by_token(&token, Duration::from_secs(5))
        .await
        .unwrap();
    let ttl: i64 = server.connection().pttl(KEY).unwrap();
    assert!((1..=5_016).contains(&ttl), "extend to 5 s left {ttl} ms");
    lock.release_by_token(&token).await.unwrap();
    assert!(!server.connection().exists::<_, bool>(KEY).unwrap());
}
