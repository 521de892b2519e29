//! `min_replicas`: WAIT after acquiring; too few acks release and fail.

use std::time::{Duration, Instant};

use leasehold::{Client, Error};
use leasehold_testkit::{Proxy, ProxyMode, RedisServer};

/// A master and one replica that reaches it through a proxy.
fn master_and_replica() -> (RedisServer, Proxy, RedisServer) {
    let master = RedisServer::start();
    let proxy = Proxy::start(master.port());
    let replica = RedisServer::builder()
        .arg("replicaof", &format!("127.0.0.1 {}", proxy.port()))
        .start();
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let info: String = redis::cmd("INFO")
            .arg("replication")
            .query(&mut replica.connection())
            .unwrap();
        if info.contains("master_link_status:up") {
            break;
        }
        assert!(Instant::now() < deadline, "replica never synced");
        std::thread::sleep(Duration::from_millis(50));
    }
    (master, proxy, replica)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn acquisitions_wait_for_the_replica() {
    let (master, _proxy, _replica) = master_and_replica();
    let client = Client::builder()
        .url(master.url())
        .min_replicas(1, Duration::from_secs(2))
        .build()
        .await
        .unwrap();
    let guard = client.lock("replicated").acquire().await.expect("acquire");
    guard.release().await.expect("release");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_blackholed_replica_fails_the_acquisition_and_frees_the_lock() {
    let (master, proxy, _replica) = master_and_replica();
    let client = Client::builder()
        .url(master.url())
        .min_replicas(1, Duration::from_millis(300))
        .build()
        .await
        .unwrap();
    proxy.set_mode(ProxyMode::Blackhole);
    let err = client
        .lock("unreplicated")
        .acquire()
        .await
        .expect_err("no replica acknowledges");
    assert!(
        matches!(
            err,
            Error::ReplicasNotReached {
                acked: 0,
                needed: 1,
                ..
            }
        ),
        "got {err:?}"
    );
    assert!(err.to_string().contains("min_replicas"), "{err}");
    let held: bool = redis::cmd("EXISTS")
        .arg("leasehold:{unreplicated}:lock")
        .query(&mut master.connection())
        .unwrap();
    assert!(!held, "the lock was left held");
    // Without min_replicas the same lock is free.
    let plain = Client::connect(&master.url()).await.unwrap();
    let guard = plain.lock("unreplicated").try_acquire().await.unwrap();
    assert!(guard.is_some(), "the lock is free");
}

/// Found by review: a close while an acquisition waited for its replica
/// acks (WAIT) let the acquisition return a guard after `close()` had
/// returned, instead of `Error::Closed`; the watchdog then gave the lease
/// back in the background. Once the acks come, the acquisition sees the
/// close, gives the lease back and fails.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_close_during_the_replica_wait_fails_the_acquisition_and_gives_the_lock_back() {
    let (master, proxy, _replica) = master_and_replica();
    let client = Client::builder()
        .url(master.url())
        .min_replicas(1, Duration::from_secs(10))
        .build()
        .await
        .unwrap();
    // The replica acknowledges late: the acquisition waits in WAIT.
    proxy.set_mode(ProxyMode::Delay(Duration::from_millis(500)));
    let acquiring = tokio::spawn({
        let client = client.clone();
        async move { client.lock("closing").acquire().await }
    });
    let started = Instant::now();
    loop {
        let info: String = redis::cmd("INFO")
            .arg("clients")
            .query(&mut master.connection())
            .unwrap();
        if info.contains("blocked_clients:1") {
            break;
        }
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "WAIT never started"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    client.close().await.expect("close");
    let outcome = acquiring.await.expect("join");
    assert!(matches!(outcome, Err(Error::Closed)), "{outcome:?}");
    let held: bool = redis::cmd("EXISTS")
        .arg("leasehold:{closing}:lock")
        .query(&mut master.connection())
        .unwrap();
    assert!(!held, "the lock was left held");
}
