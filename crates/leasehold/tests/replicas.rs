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
