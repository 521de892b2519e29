//! Sentinel: 1 master, 2 replicas, 3 sentinels, a coordinated failover.

mod common;

use std::time::{Duration, Instant};

use leasehold::Client;
use leasehold_testkit::SentinelSet;

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn sentinel_client_follows_a_failover() {
    let set = SentinelSet::start("mymaster", 2, 3);
    let client = Client::sentinel(set.sentinel_urls(), set.name())
        .await
        .expect("connect through the sentinels");
    common::lock_suite(&client, "sentinel").await;
    common::contract::run_all(&common::contract::Deployment::sentinel(&set)).await;

    let held = client
        .lock("across")
        .ttl(Duration::from_secs(2))
        .acquire()
        .await
        .expect("acquire");
    let new_master = set.failover();
    // The client asks the sentinels every 0.5 s: within that window an
    // acquisition may still reach the old master (a documented limit).
    tokio::time::sleep(Duration::from_millis(1200)).await;

    let new_master_conn = || {
        set.servers()
            .iter()
            .find(|s| s.port() == new_master)
            .expect("the new master is one of the set")
            .connection()
    };

    // New acquisitions reach the new master, promptly.
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        match client.lock("after").try_acquire().await {
            Ok(Some(guard)) => {
                let on_new: bool = redis::cmd("EXISTS")
                    .arg("leasehold:{after}:lock")
                    .query(&mut new_master_conn())
                    .unwrap();
                assert!(on_new, "the acquisition went to the new master");
                guard.release().await.expect("release");
                break;
            }
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
    // The held guard either kept its lease (renewed at the new master) or
    // reports it lost; it never hangs.
    tokio::time::sleep(Duration::from_secs(3)).await;
    let on_new_master: Option<String> = redis::cmd("GET")
        .arg("leasehold:{across}:lock")
        .query(&mut new_master_conn())
        .unwrap();
    // Past its 2 s TTL: only renewals at the new master can have kept it.
    let kept = on_new_master.as_deref() == Some(held.token());
    assert!(
        kept || held.is_lost(),
        "the guard neither kept its lease on the new master nor reports it lost"
    );
    let outcome = tokio::time::timeout(Duration::from_secs(10), held.release()).await;
    let released = outcome.expect("release hung after the failover");
    if kept {
        released.expect("a kept lease releases");
    }
}
