//! Reviewer's tests for the issue-13 ordering fixes (wt-review only).

mod common;

use std::time::Duration;

use leasehold::Client;
use leasehold_testkit::RedisServer;
use redis::Commands;

fn lock_key(name: &str) -> String {
    format!("leasehold:{{{name}}}:lock")
}

/// An extend to a SHORTER TTL whose future is dropped after the command was
/// sent (a `tokio::time::timeout` / `select!` around it, the doc says "the
/// extension may or may not have happened"): the server applies the short
/// TTL, the client keeps the old validity. The key expires, another client
/// takes the lock, and the first guard still says it holds.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancelled_shortening_extend_leaves_a_guard_that_says_held_while_another_holds() {
    let server = RedisServer::start();
    let client = common::client(&server).await;
    let other = common::client(&server).await;
    let guard = client
        .lock("shorten")
        .ttl(Duration::from_secs(30))
        .acquire()
        .await
        .expect("acquire");
    // Load the extend script, so the frozen server gets a plain EVALSHA.
    guard.extend(Duration::from_secs(30)).await.expect("extend");

    server.pause();
    let cancelled =
        tokio::time::timeout(Duration::from_millis(200), guard.extend(Duration::from_millis(300)))
            .await;
    assert!(cancelled.is_err(), "the extend was cancelled in flight");
    server.resume();

    // The short TTL landed; wait for it to run out.
    tokio::time::sleep(Duration::from_millis(600)).await;
    let second = other
        .lock("shorten")
        .try_acquire()
        .await
        .expect("try_acquire");
    let holder: Option<String> = server.connection().get(lock_key("shorten")).unwrap();
    assert!(
        second.is_none() || guard.is_lost(),
        "two holders: the second client holds {:?}, the first guard says it holds (is_lost() = {})",
        holder.map(|h| h[..8].to_owned()),
        guard.is_lost()
    );
}

/// The same with no cancellation: the extend fails with the command
/// timeout (server slow), the outcome is unknown, the client keeps the old
/// (longer) validity.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_timed_out_shortening_extend_leaves_a_guard_that_says_held_while_another_holds() {
    let server = RedisServer::start();
    let client = Client::builder()
        .url(server.url())
        .command_timeout(Duration::from_millis(200))
        .build()
        .await
        .expect("connect");
    let other = common::client(&server).await;
    let guard = client
        .lock("shorten2")
        .ttl(Duration::from_secs(30))
        .acquire()
        .await
        .expect("acquire");
    guard.extend(Duration::from_secs(30)).await.expect("extend");

    server.pause();
    let failed = guard.extend(Duration::from_millis(300)).await;
    assert!(failed.is_err(), "the extend timed out: {failed:?}");
    server.resume();

    tokio::time::sleep(Duration::from_millis(600)).await;
    let second = other
        .lock("shorten2")
        .try_acquire()
        .await
        .expect("try_acquire");
    assert!(
        second.is_none() || guard.is_lost(),
        "two holders: the second client got the lock while the first guard says it holds"
    );
}

/// `lost()` sleeps until the `valid_until` it read; a successful extend to a
/// SHORTER TTL moves `valid_until` earlier without waking it, so (with no
/// watchdog to mark the lease lost) `lost()` resolves at the old end, long
/// after `is_lost()` turned true and another client took the lock.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lost_resolves_when_a_shortening_extend_runs_out() {
    let server = RedisServer::start();
    let client = common::client(&server).await;
    let other = common::client(&server).await;
    let guard = std::sync::Arc::new(
        client
            .lock("shorten3")
            .ttl(Duration::from_secs(30))
            .watchdog(false)
            .acquire()
            .await
            .expect("acquire"),
    );
    let watching = {
        let guard = std::sync::Arc::clone(&guard);
        tokio::spawn(async move { guard.lost().await })
    };
    tokio::time::sleep(Duration::from_millis(50)).await;
    guard.extend(Duration::from_millis(300)).await.expect("extend");
    tokio::time::sleep(Duration::from_millis(600)).await;
    assert!(guard.is_lost(), "is_lost() sees the short TTL run out");
    let second = other.lock("shorten3").try_acquire().await.expect("try");
    assert!(second.is_some(), "another client holds the lock now");
    let resolved = tokio::time::timeout(Duration::from_secs(2), watching).await;
    assert!(
        resolved.is_ok(),
        "guard.lost() still pending 2 s after the lease ran out and another client took it"
    );
}
