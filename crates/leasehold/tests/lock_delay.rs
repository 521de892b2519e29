//! `lock_delay` (issue 18, item 5; Chubby's lock-delay): when a lease ends
//! without a release (the holder crashed, paused or was cut off), nobody
//! gets the lock until the delay has passed as well; a clean release frees
//! it at once. The holder itself counts its lease as the TTL only, so the
//! delay is time in which no one, not even a zombie holder, believes it
//! holds the lock. (The kill -9 of a holder process: the CLI's
//! `--lock-delay` test in crates/leasehold-cli/tests/cli.rs.)

mod common;

use std::time::{Duration, Instant};

use leasehold::{Client, Error};
use leasehold_testkit::{Proxy, ProxyMode, RedisServer};
use redis::Commands;

const TTL: Duration = Duration::from_millis(600);
const DELAY: Duration = Duration::from_millis(900);

/// A holder cut off from the server (its renewals and release never
/// arrive): the lock stays taken for its TTL and then the delay, while the
/// holder reports its lease lost after the TTL alone.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_holder_cut_off_blocks_the_lock_for_ttl_and_delay() {
    for fair in [false, true] {
        let server = RedisServer::start();
        let proxy = Proxy::start(server.port());
        let holder = Client::connect(&proxy.url()).await.expect("connect");
        let other = common::client(&server).await;
        let started = Instant::now();
        let guard = if fair {
            let lock = holder.fair_lock("cut").ttl(TTL).lock_delay(DELAY);
            lock.acquire().await.expect("acquire")
        } else {
            let lock = holder.lock("cut").ttl(TTL).lock_delay(DELAY);
            lock.acquire().await.expect("acquire")
        };
        assert!(guard.valid_for() <= TTL, "the holder counts the TTL only");
        proxy.set_mode(ProxyMode::Blackhole);

        // The holder gives up at its TTL (by its own clock)...
        tokio::time::timeout(TTL + Duration::from_millis(300), guard.lost())
            .await
            .expect("the holder saw its lease end at its TTL");
        let lost_at = started.elapsed();
        // ... but the lock is still taken on the server, for the delay.
        assert!(common::lock_pttl(&server, "cut") > 0, "kept for the delay");
        let deadline = Instant::now() + Duration::from_secs(10);
        let taken = loop {
            let got = if fair {
                other.fair_lock("cut").try_acquire().await.expect("try")
            } else {
                other.lock("cut").try_acquire().await.expect("try")
            };
            if let Some(got) = got {
                break (started.elapsed(), got);
            }
            assert!(Instant::now() < deadline, "never free");
            tokio::time::sleep(Duration::from_millis(20)).await;
        };
        assert!(
            taken.0 >= TTL + DELAY,
            "fair {fair}: taken after {:?}, before TTL + delay",
            taken.0
        );
        assert!(lost_at < TTL + DELAY, "fair {fair}: lost at {lost_at:?}");
        taken.1.release().await.expect("release");
        drop(guard);
    }
}

/// A clean release frees the lock at once, and a waiter gets it within
/// milliseconds, as without a delay.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_clean_release_frees_the_lock_at_once() {
    let server = RedisServer::start();
    let client = common::client(&server).await;
    let other = common::client(&server).await;
    let lock = client.lock("clean").ttl(TTL).lock_delay(DELAY);
    let guard = lock.acquire().await.expect("acquire");
    // The server keeps the key for the TTL and the delay; the watchdog's
    // renewals keep doing so.
    assert!(common::lock_pttl(&server, "clean") > TTL.as_millis() as i64);
    tokio::time::sleep(TTL).await;
    assert!(!guard.is_lost(), "renewed");
    assert!(
        common::lock_pttl(&server, "clean") > TTL.as_millis() as i64,
        "renewed with the delay"
    );

    let waiting = other
        .lock("clean")
        .ttl(TTL)
        .lock_delay(DELAY)
        .wait(Duration::from_secs(10));
    let waiter = tokio::spawn(async move {
        let got = waiting.acquire().await.expect("waiter");
        (Instant::now(), got)
    });
    common::wait_until("the waiter queued", || {
        let queued: i64 = server
            .connection()
            .zcard("leasehold:{clean}:queue")
            .expect("ZCARD");
        queued == 1
    })
    .await;
    let released = Instant::now();
    guard.release().await.expect("release");
    let (at, got) = waiter.await.expect("join");
    assert!(
        at - released < Duration::from_millis(300),
        "the waiter got it {:?} after the release",
        at - released
    );
    assert!(got.valid_for() <= TTL);
    got.release().await.expect("release");
    assert_eq!(common::lock_pttl(&server, "clean"), -2, "freed at once");
}

#[tokio::test]
async fn a_delay_above_the_longest_ttl_is_refused_before_anything_is_sent() {
    let server = RedisServer::start();
    let client = common::client(&server).await;
    match client
        .lock("long")
        .lock_delay(Duration::from_secs(25 * 3600))
        .try_acquire()
        .await
    {
        Err(Error::InvalidArgument(message)) => {
            assert!(message.contains("lock_delay"), "{message}")
        }
        other => panic!("expected InvalidArgument, got {other:?}"),
    }
    assert_eq!(common::lock_pttl(&server, "long"), -2);
}
