//! Fencing tokens through the client, for every kind of lock: they leave no
//! key behind a name used once, and they keep rising across a failover to a
//! replica that missed the last acquisitions.

mod common;

use std::time::{Duration, Instant};

use common::contract::Kind;
use leasehold::Client;
use leasehold_testkit::{RedisServer, SentinelSet};

/// Fails if the server holds any key.
fn assert_no_keys(server: &RedisServer) {
    let keys: Vec<String> = redis::cmd("KEYS")
        .arg("*")
        .query(&mut server.connection())
        .unwrap();
    assert!(
        keys.is_empty(),
        "{} keys left, e.g. {:?}",
        keys.len(),
        &keys[..keys.len().min(3)]
    );
}

/// The library's default lease TTL.
const DEFAULT_TTL: Duration = Duration::from_secs(30);

/// Takes `name` once with a guard of `kind` (TTL `ttl`) and gives it back.
async fn use_once(client: &Client, kind: Kind, name: &str, ttl: Duration) {
    kind.on(client, name)
        .ttl(ttl)
        .acquire()
        .await
        .expect("acquire")
        .release()
        .await
        .expect("release");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_key_remains_after_names_used_once() {
    let server = RedisServer::start();
    let client = common::client(&server).await;
    let ttl = Duration::from_millis(300);
    for i in 0..200 {
        use_once(
            &client,
            Kind::ALL[i % Kind::ALL.len()],
            &format!("once-{i}"),
            ttl,
        )
        .await;
    }
    // Past the leases' TTL (nobody queued, so no queue keys were written).
    tokio::time::sleep(ttl + Duration::from_millis(700)).await;
    assert_no_keys(&server);
    let size: i64 = redis::cmd("DBSIZE")
        .query(&mut server.connection())
        .unwrap();
    assert_eq!(size, 0, "expired keys not yet reclaimed");
}

/// Issue 15, item 3, at the library's defaults (a 30 s TTL): a release
/// that frees the lock drops the name's last fence with the lease, so 200
/// lock names used once, and a name of every other kind, leave nothing at
/// all once released (the fence keys used to stay for the TTL: 200 keys for
/// 30 s).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn names_used_once_at_the_default_ttl_leave_nothing_once_released() {
    let server = RedisServer::start();
    let client = common::client(&server).await;
    for i in 0..200 {
        let guard = client.lock(format!("order-{i}")).acquire().await.unwrap();
        guard.release().await.unwrap();
    }
    // Every kind, at its default TTL.
    for (i, kind) in Kind::ALL.into_iter().enumerate() {
        use_once(&client, kind, &format!("kind-{i}"), DEFAULT_TTL).await;
    }
    assert_no_keys(&server);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn fences_rise_across_a_failover_to_a_replica_that_missed_the_last_acquisitions() {
    let set = SentinelSet::start("fencemaster", 1, 3);
    let client = Client::sentinel(set.sentinel_urls(), set.name())
        .await
        .expect("connect through the sentinels");
    let lock = client.lock("f").ttl(Duration::from_secs(30));
    let mut fences = Vec::new();
    let mut stale = None;
    for i in 0..4 {
        let guard = lock.acquire().await.expect("acquire");
        fences.push(guard.fence());
        if i == 1 {
            // The fence key as the replica would hold it had it missed the
            // acquisitions from here on (read while held: a release drops
            // it with the lease).
            let (value, pttl): (String, i64) = redis::pipe()
                .cmd("GET")
                .arg("leasehold:{f}:fence")
                .cmd("PTTL")
                .arg("leasehold:{f}:fence")
                .query(&mut set.servers()[0].connection())
                .unwrap();
            stale = Some((value, pttl));
        }
        guard.release().await.expect("release");
    }
    let (value, pttl) = stale.expect("taken");
    assert!(pttl > 0, "the fence key expires");
    // Wait until the replica has every write, then set its fence key back:
    // the state of a replica that missed the last two acquisitions.
    let mut master = set.servers()[0].connection();
    let acked: i64 = redis::cmd("WAIT")
        .arg(1)
        .arg(5000)
        .query(&mut master)
        .unwrap();
    assert_eq!(acked, 1);
    let mut replica = set.servers()[1].connection();
    let _: () = redis::cmd("CONFIG")
        .arg("SET")
        .arg("replica-read-only")
        .arg("no")
        .query(&mut replica)
        .unwrap();
    let _: () = redis::cmd("SET")
        .arg("leasehold:{f}:fence")
        .arg(&value)
        .arg("PX")
        .arg(pttl)
        .query(&mut replica)
        .unwrap();

    let new_master = set.failover();
    assert_eq!(new_master, set.servers()[1].port());
    let on_new: String = redis::cmd("GET")
        .arg("leasehold:{f}:fence")
        .query(&mut set.servers()[1].connection())
        .unwrap();
    assert_eq!(on_new, value, "the new master holds the stale fence");
    // The client asks the sentinels every 0.5 s: until it switches, its
    // acquisitions may reach the old master (still a master for a moment,
    // then a replica that refuses). Those fences count as earlier ones too;
    // retry until an acquisition is made on the new master.
    let on_new_master = || -> bool {
        redis::cmd("EXISTS")
            .arg("leasehold:{f}:lock")
            .query(&mut set.servers()[1].connection())
            .unwrap()
    };
    let deadline = Instant::now() + Duration::from_secs(20);
    let fence = loop {
        let guard = common::try_acquire_after_failover(&lock, deadline).await;
        let fence = guard.fence();
        if on_new_master() {
            guard.release().await.expect("release");
            break fence;
        }
        fences.push(fence);
        // On the old master; its fate there is not what is tested.
        let _ = guard.release().await;
        tokio::time::sleep(Duration::from_millis(50)).await;
        assert!(
            Instant::now() < deadline,
            "no acquisition on the new master"
        );
    };
    let earlier = fences.iter().max().copied().unwrap_or(0);
    assert!(
        fence > earlier,
        "fence {fence} after the failover is not above the earlier {earlier} (of {} fences)",
        fences.len()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_fence_is_kept_for_the_lease_or_the_longer_fence_memory() {
    let server = RedisServer::start();
    let mut conn = server.connection();
    let fence_pttl = |conn: &mut redis::Connection, name: &str| -> i64 {
        redis::cmd("PTTL")
            .arg(format!("leasehold:{{{name}}}:fence"))
            .query(conn)
            .unwrap()
    };
    let plain = common::client(&server).await;
    let lock = plain.lock("plain").ttl(Duration::from_millis(800));
    let guard = lock.acquire().await.unwrap();
    let pttl = fence_pttl(&mut conn, "plain");
    assert!(
        pttl > 0 && pttl <= 800,
        "fence kept {pttl} ms for an 800 ms lease"
    );
    // Issue 15, item 3: it lives no longer than the lease.
    guard.release().await.unwrap();
    assert_eq!(fence_pttl(&mut conn, "plain"), -2, "dropped with the lease");

    let keeping = Client::builder()
        .url(server.url())
        .fence_memory(Duration::from_secs(60))
        .build()
        .await
        .unwrap();
    let names = ["kept-lock", "kept-re", "kept-rw", "kept-sem"];
    let kinds = [Kind::Lock, Kind::Reentrant, Kind::Write, Kind::Semaphore];
    for (kind, name) in kinds.into_iter().zip(names) {
        use_once(&keeping, kind, name, Duration::from_millis(800)).await;
    }
    for name in names {
        let pttl = fence_pttl(&mut conn, name);
        assert!(
            pttl > 59_000 && pttl <= 60_000,
            "{name}: fence kept {pttl} ms"
        );
    }
    // A lease longer than the memory keeps the fence for the lease.
    let long = Duration::from_secs(90);
    use_once(&keeping, Kind::Lock, "long", long).await;
    let pttl = fence_pttl(&mut conn, "long");
    assert!(
        pttl > 89_000 && pttl <= 90_000,
        "fence kept {pttl} ms for a 90 s lease"
    );
}
