//! A 3-master Redis Cluster with one replica each.

mod common;

use std::collections::HashSet;
use std::time::{Duration, Instant};

use leasehold::Client;
use leasehold_testkit::RedisCluster;

/// Ports of the replicas of the master on `port`, from its ROLE.
/// The replicas a master reports, once it reports any (a replica's link may
/// be up a moment before its master lists it).
fn replicas_of(cluster: &RedisCluster, port: u16) -> Vec<u16> {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let role: (String, i64, Vec<(String, String, String)>) = redis::cmd("ROLE")
            .query(&mut cluster.node(port).connection())
            .expect("ROLE");
        let replicas: Vec<u16> = role.2.iter().map(|(_, p, _)| p.parse().unwrap()).collect();
        if !replicas.is_empty() {
            return replicas;
        }
        assert!(Instant::now() < deadline, "master {port} lists no replica");
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn cluster_runs_the_locks_spread_over_every_master() {
    let cluster = RedisCluster::start(3, 1);
    let client = Client::cluster(cluster.urls()).await.expect("connect");
    common::lock_suite(&client, "cluster").await;
    common::contract::run_all(&common::contract::Deployment::Cluster(&cluster)).await;

    // Many names: held at once, renewed by the watchdog in per-slot
    // batches (a cross-slot batch would fail), spread over all masters.
    let ttl = Duration::from_millis(900);
    let mut guards = Vec::new();
    let mut masters = HashSet::new();
    for i in 0..48 {
        let name = format!("spread:{i}");
        masters.insert(cluster.master_of(&format!("leasehold:{{{name}}}:lock")));
        guards.push(client.lock(name).ttl(ttl).acquire().await.expect("acquire"));
    }
    assert_eq!(masters.len(), 3, "locks live on every master");
    // list scans every master, not the one a keyless command lands on.
    let listed = client.list("spread:*").await.expect("list");
    assert_eq!(listed.len(), 48, "listed {} of 48", listed.len());
    tokio::time::sleep(ttl * 3).await;
    for guard in &guards {
        assert!(!guard.is_lost(), "the watchdog kept every lease");
    }
    for guard in guards {
        guard.release().await.expect("release");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn coordinated_failover_of_a_master_loses_no_lock() {
    let cluster = RedisCluster::start(3, 1);
    let client = Client::cluster(cluster.urls()).await.expect("connect");
    let other = Client::cluster(cluster.urls()).await.expect("connect");
    let ttl = Duration::from_secs(3);
    let guard = client
        .lock("moved")
        .ttl(ttl)
        .acquire()
        .await
        .expect("acquire");
    let master = cluster.master_of("leasehold:{moved}:lock");
    let replica = replicas_of(&cluster, master)[0];
    let _: String = redis::cmd("CLUSTER")
        .arg("FAILOVER")
        .query(&mut cluster.node(replica).connection())
        .expect("CLUSTER FAILOVER");
    let deadline = Instant::now() + Duration::from_secs(20);
    while cluster.master_of("leasehold:{moved}:lock") != replica {
        assert!(Instant::now() < deadline, "failover did not complete");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    cluster.wait_until_ok();
    // Renewals go on at the new master, past the old TTL.
    tokio::time::sleep(ttl + ttl / 2).await;
    assert!(!guard.is_lost(), "the lease survived the failover");
    assert!(
        other
            .lock("moved")
            .try_acquire()
            .await
            .expect("try")
            .is_none(),
        "nobody else got the lock"
    );
    guard.release().await.expect("release at the new master");
    let again = other.lock("moved").try_acquire().await.expect("try");
    assert!(again.is_some(), "free after release");
}
