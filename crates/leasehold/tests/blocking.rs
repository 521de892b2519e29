//! The blocking API from plain threads, against real redis-server processes.

// A build without the feature this test needs fails here, loudly,
// rather than leaving the test out.
#[cfg(not(feature = "blocking"))]
compile_error!(
    "this test needs leasehold's `blocking` feature: `cargo test -p leasehold --all-features`"
);

use std::panic::AssertUnwindSafe;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use leasehold::Error;
use leasehold::blocking::Client;
use leasehold_testkit::{RedisCluster, RedisServer, SentinelSet, start_servers};
use redis::Commands;

fn client(server: &RedisServer) -> Client {
    Client::connect(&server.url()).expect("connect to the test server")
}

fn wait_until(what: &str, mut done: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(5);
    while !done() {
        assert!(Instant::now() < deadline, "timed out waiting until {what}");
        std::thread::sleep(Duration::from_millis(10));
    }
}

#[test]
fn sixteen_threads_on_four_clients_count_exactly() {
    let server = RedisServer::start();
    let mut threads = Vec::new();
    for _ in 0..4 {
        let client = client(&server);
        for _ in 0..4 {
            let lock = client.lock("counter").wait(Duration::from_secs(120));
            let mut conn = server.connection();
            threads.push(std::thread::spawn(move || {
                for _ in 0..200 {
                    let guard = lock.acquire().expect("acquire");
                    // Non-atomic read-modify-write: loses updates without the lock.
                    let value: Option<u64> = conn.get("resource").unwrap();
                    std::thread::yield_now();
                    let _: () = conn.set("resource", value.unwrap_or(0) + 1).unwrap();
                    guard.release().expect("release");
                }
            }));
        }
    }
    for thread in threads {
        thread.join().unwrap();
    }
    let total: u64 = server.connection().get("resource").unwrap();
    assert_eq!(total, 3200);
}

#[test]
fn a_guard_held_for_four_ttls_in_a_busy_thread_is_still_owned() {
    let server = RedisServer::start();
    let client = client(&server);
    let ttl = Duration::from_millis(400);
    let lock = client.lock("long").ttl(ttl);
    let guard = lock.acquire().unwrap();
    // The caller's thread does not come back to the library meanwhile.
    std::thread::sleep(ttl * 4);
    assert!(!guard.is_lost(), "renewal ran on the client's own thread");
    let holder: String = server.connection().get("leasehold:{long}:lock").unwrap();
    assert_eq!(holder, guard.token());
    assert!(lock.try_acquire().unwrap().is_none());
    guard.extend(Duration::from_secs(5)).unwrap();
    guard.release().unwrap();
    let again = lock.try_acquire().unwrap().expect("free after release");
    again.release().unwrap();
}

#[test]
fn a_lost_lease_is_reported_and_a_dropped_guard_is_released() {
    let server = RedisServer::start();
    let client = client(&server);
    let lock = client
        .lock("gone")
        .ttl(Duration::from_millis(200))
        .watchdog(false);
    let guard = lock.acquire().unwrap();
    let started = Instant::now();
    guard.lost();
    assert!(started.elapsed() < Duration::from_secs(2));
    assert!(guard.is_lost());
    // The client's view ends a little before Redis's (drift); let Redis's end too.
    std::thread::sleep(Duration::from_millis(100));
    assert!(matches!(guard.release(), Err(Error::Lost { .. })));

    let key = "leasehold:{dropped}:lock";
    let dropped = client.lock("dropped").acquire().unwrap();
    drop(dropped);
    wait_until("the dropped guard is released", || {
        !server.connection().exists::<_, bool>(key).unwrap()
    });
    // Dropping the client right after a guard still releases it.
    let guard = client.lock("dropped").acquire().unwrap();
    drop(guard);
    drop(client);
    wait_until("the guard dropped with its client is released", || {
        !server.connection().exists::<_, bool>(key).unwrap()
    });
}

#[test]
fn a_semaphore_of_two_is_never_held_by_three_threads() {
    let server = RedisServer::start();
    let client = client(&server);
    let holders = Arc::new(AtomicUsize::new(0));
    let most = Arc::new(AtomicUsize::new(0));
    let threads: Vec<_> = (0..6)
        .map(|_| {
            let sem = client.semaphore("exports", 2).wait(Duration::from_secs(60));
            let (holders, most) = (Arc::clone(&holders), Arc::clone(&most));
            std::thread::spawn(move || {
                for _ in 0..3 {
                    let permit = sem.acquire().unwrap();
                    let now = holders.fetch_add(1, Ordering::SeqCst) + 1;
                    most.fetch_max(now, Ordering::SeqCst);
                    std::thread::sleep(Duration::from_millis(10));
                    holders.fetch_sub(1, Ordering::SeqCst);
                    permit.release().unwrap();
                }
            })
        })
        .collect();
    for thread in threads {
        thread.join().unwrap();
    }
    assert!(most.load(Ordering::SeqCst) <= 2);

    let sem = client.semaphore("exports", 2);
    assert_eq!((sem.permits(), sem.name()), (2, "exports"));
    let permit = sem.acquire().unwrap();
    let status = sem.status().unwrap();
    assert_eq!((status.permits, status.held), (Some(2), 1));
    assert_eq!(status.fence, Some(permit.fence()));
    let second = sem.try_acquire().unwrap().expect("a second permit");
    assert!(sem.try_acquire().unwrap().is_none(), "both permits held");
    second.release().unwrap();
    permit.release().unwrap();
}

#[test]
fn an_rwlock_shares_reads_excludes_writes_and_downgrades() {
    let server = RedisServer::start();
    let client = client(&server);
    let rw = client.rw_lock("catalog");
    let write = rw.clone().owner("w").write().unwrap();
    assert!(rw.clone().owner("r").try_read().unwrap().is_none());
    assert!(rw.clone().owner("r").try_write().unwrap().is_none());
    let status = rw.status().unwrap();
    assert_eq!(status.writer.map(|w| w.holder).as_deref(), Some("w"));
    let read = write.downgrade().unwrap();
    assert!(!read.is_lost());
    let other = rw
        .clone()
        .owner("r")
        .try_read()
        .unwrap()
        .expect("readers share");
    assert_eq!(rw.status().unwrap().reader_count, 2);
    other.release().unwrap();
    read.release().unwrap();
    let fence = rw.run_write(|fence| async move { fence }).unwrap();
    let read = rw.read().unwrap();
    assert!(read.fence() > fence, "fences increase");
    read.release().unwrap();
}

#[test]
fn a_fair_lock_excludes_and_frees_on_release() {
    let server = RedisServer::start();
    let client = client(&server);
    let fair = client.fair_lock("fair");
    let held = fair.acquire().unwrap();
    assert!(fair.try_acquire().unwrap().is_none());
    held.release().unwrap();
    let out = fair.run(|fence| async move { fence + 1 }).unwrap();
    let again = fair.try_acquire().unwrap().expect("free");
    assert!(again.fence() >= out, "fences increase");
    again.release().unwrap();
}

#[test]
fn a_reentrant_lock_is_entered_twice_by_its_owner_only() {
    let server = RedisServer::start();
    let client = client(&server);
    let re = client.reentrant_lock("orders").owner("job-7");
    assert_eq!(re.owner_id(), Some("job-7"));
    let first = re.acquire().unwrap();
    let second = re.try_acquire().unwrap().expect("reentrant");
    assert_eq!(first.fence(), second.fence());
    let other = client.reentrant_lock("orders").owner("job-8");
    assert!(other.try_acquire().unwrap().is_none());
    let status = re.status().unwrap();
    assert_eq!((status.owner.as_deref(), status.holds), (Some("job-7"), 2));
    assert_eq!(status.fence, Some(first.fence()));
    second.release().unwrap();
    first.release().unwrap();
    let theirs = other.try_acquire().unwrap().expect("free after both holds");
    theirs.release().unwrap();
}

#[test]
fn a_multi_lock_takes_all_or_none_and_gives_each_name_a_fence() {
    let server = RedisServer::start();
    let client = client(&server);
    let pair = client
        .multi_lock(["b", "a", "b"])
        .ttl(Duration::from_secs(5));
    assert_eq!(pair.names(), ["a", "b"]);
    let guard = pair.acquire().unwrap();
    assert_eq!(guard.names(), ["a", "b"]);
    assert_eq!(guard.fence("a"), Some(guard.fences()[0].1));
    assert_eq!(guard.fence("z"), None);
    let holder: String = server.connection().get("leasehold:{b}:lock").unwrap();
    assert_eq!(guard.token("b"), Some(holder.as_str()));
    // "b" is held, so "c" is given back: none of the set stays taken.
    let overlapping = client.multi_lock(["b", "c"]);
    assert!(overlapping.try_acquire().unwrap().is_none());
    assert!(
        !server
            .connection()
            .exists::<_, bool>("leasehold:{c}:lock")
            .unwrap()
    );
    guard.extend(Duration::from_secs(60)).unwrap();
    assert!(guard.valid_for() > Duration::from_secs(50));
    assert!(guard.lost_names().is_empty());
    guard.release().unwrap();
    let fences = overlapping.run(|fences| async move { fences }).unwrap();
    assert_eq!(fences.len(), 2);
}

#[test]
fn an_election_is_led_by_one_candidate_at_a_time() {
    let server = RedisServer::start();
    let client = client(&server);
    let election = client.election("scheduler").ttl(Duration::from_secs(20));
    assert_eq!(election.name(), "scheduler");
    let leadership = election.campaign("host-a").unwrap();
    assert_eq!(leadership.value(), "host-a");
    assert_eq!(leadership.name(), "scheduler");
    let rival = client.election("scheduler");
    assert!(rival.try_campaign("host-b").unwrap().is_none());
    let term = leadership.term();
    leadership.resign().unwrap();
    let led = rival.lead("host-b", |term| async move { term }).unwrap();
    assert!(led > term, "terms increase");
    assert_eq!(election.leader().unwrap(), None, "lead resigns at the end");
}

#[test]
fn a_lock_is_extended_listed_and_released_by_its_token() {
    let server = RedisServer::start();
    let client = client(&server);
    let lock = client.lock("deploy").ttl(Duration::from_secs(2));
    let token = lock.acquire().unwrap().detach();
    lock.extend_by_token(&token, Duration::from_secs(60))
        .unwrap();
    let ttl: i64 = server.connection().pttl("leasehold:{deploy}:lock").unwrap();
    assert!(ttl > 50_000, "extend to 60 s left {ttl} ms");
    assert!(matches!(
        lock.extend_by_token(&token, Duration::ZERO),
        Err(Error::InvalidArgument(_))
    ));
    let held = client.list("dep*").unwrap();
    assert_eq!(held.len(), 1);
    assert_eq!(held[0].name, "deploy");
    assert!(client.list("orders:*").unwrap().is_empty());
    let other = "0123456789abcdef0123456789abcdef";
    assert!(matches!(
        lock.extend_by_token(other, Duration::from_secs(1)),
        Err(Error::NotOwner { .. })
    ));
    lock.release_by_token(&token).unwrap();
    assert!(client.list("*").unwrap().is_empty());
    assert!(matches!(
        lock.extend_by_token(&token, Duration::from_secs(1)),
        Err(Error::Lost { .. })
    ));
}

/// An operator's tools from a plain thread, as the async client has them:
/// what kind holds a name, every name of a kind, and breaking a stuck one.
#[test]
fn a_stuck_lock_is_found_by_kind_and_broken_from_a_thread() {
    let server = RedisServer::start();
    let client = client(&server);
    let stuck = client.semaphore("nightly", 2);
    let permit = stuck.acquire().unwrap();
    let _detached = client.lock("deploy").acquire().unwrap().detach();
    assert_eq!(
        client.kind("nightly").unwrap(),
        Some(leasehold::LockKind::Semaphore)
    );
    assert_eq!(client.kind("free").unwrap(), None);
    let mut kinds = client.list_kinds("*").unwrap();
    kinds.sort();
    assert_eq!(
        kinds,
        [
            ("deploy".to_owned(), leasehold::LockKind::Lock),
            ("nightly".to_owned(), leasehold::LockKind::Semaphore),
        ]
    );
    let broken = client.break_lease("nightly").unwrap().expect("it was held");
    assert_eq!(broken.kind, leasehold::LockKind::Semaphore);
    assert_eq!(broken.holds.len(), 1);
    assert_eq!(
        client
            .break_lease("nightly")
            .unwrap()
            .map(|b| b.holds.len()),
        None
    );
    assert!(matches!(permit.release(), Err(Error::Lost { .. })));
    assert!(!client.is_closed());
    client.close().unwrap();
    assert!(client.is_closed());
}

#[test]
fn a_fair_lock_released_by_its_token_goes_to_the_waiting_thread() {
    let server = RedisServer::start();
    let holder = client(&server);
    let fair = holder.fair_lock("payouts").ttl(Duration::from_secs(2));
    let token = fair.acquire().unwrap().detach();
    let waiter = client(&server)
        .fair_lock("payouts")
        .wait(Duration::from_secs(60));
    let thread = std::thread::spawn(move || {
        let guard = waiter.acquire().unwrap();
        let token = guard.token().to_owned();
        guard.release().unwrap();
        token
    });
    wait_until("the waiter queued", || fair.status().unwrap().waiters == 1);
    fair.extend_by_token(&token, Duration::from_secs(60))
        .unwrap();
    let status = fair.status().unwrap();
    assert!(
        status
            .remaining
            .is_some_and(|r| r > Duration::from_secs(50)),
        "{status:?}"
    );
    fair.release_by_token(&token).unwrap();
    let theirs = thread.join().unwrap();
    assert_ne!(theirs, token);
    assert!(matches!(
        fair.release_by_token(&token),
        Err(Error::Lost { .. })
    ));
    assert_eq!(fair.status().unwrap().holder, None);
}

#[test]
fn redlock_cluster_and_sentinel_clients_are_made_from_a_thread() {
    let nodes = start_servers(3);
    let redlock = Client::redlock(nodes.iter().map(|n| n.url())).unwrap();
    let guard = redlock.lock("orders:42").acquire().unwrap();
    // Acquire returns once a quorum (2 of 3) agreed; the third node's
    // answer may come just after.
    let deadline = Instant::now() + Duration::from_secs(5);
    for node in &nodes {
        loop {
            let holder: Option<String> =
                node.connection().get("leasehold:{orders:42}:lock").unwrap();
            if holder.is_some() {
                break;
            }
            assert!(
                Instant::now() < deadline,
                "Redlock acquires on every live node"
            );
            std::thread::sleep(Duration::from_millis(10));
        }
    }
    assert_eq!(redlock.list("*").unwrap().len(), 1);
    guard.release().unwrap();

    let cluster = RedisCluster::start(3, 0);
    let client = Client::cluster(cluster.urls()).unwrap();
    let guard = client.lock("orders:42").acquire().unwrap();
    assert!(client.lock("orders:42").try_acquire().unwrap().is_none());
    guard.release().unwrap();

    let set = SentinelSet::start("mymaster", 0, 1);
    let client = Client::sentinel(set.sentinel_urls(), set.name()).unwrap();
    let guard = client.lock("orders:42").acquire().unwrap();
    let holder: String = set.servers()[0]
        .connection()
        .get("leasehold:{orders:42}:lock")
        .unwrap();
    assert_eq!(holder, guard.token());
    guard.release().unwrap();
}

#[tokio::test]
#[should_panic(expected = "use the async API")]
async fn calling_it_inside_an_async_runtime_panics_with_a_pointer_to_the_async_api() {
    let _ = Client::connect("redis://127.0.0.1:1");
}

/// What a blocking call panics with inside `runtime`.
fn panic_inside<T>(runtime: &tokio::runtime::Runtime, call: impl FnOnce() -> T) -> String {
    let caught = runtime.block_on(async { std::panic::catch_unwind(AssertUnwindSafe(call)) });
    let Err(payload) = caught else {
        panic!("the blocking call returned inside a runtime")
    };
    match payload.downcast::<&str>() {
        Ok(message) => (*message).to_owned(),
        Err(payload) => *payload.downcast::<String>().expect("a text message"),
    }
}

#[test]
fn handles_and_guards_made_outside_a_runtime_panic_inside_one() {
    let server = RedisServer::start();
    let client = client(&server);
    let lock = client.lock("inside");
    let guard = lock.acquire().unwrap();
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let expected = "leasehold::blocking was called from inside an async runtime, where blocking \
                    would stall the runtime's thread: use the async API (leasehold::Client) there";
    assert_eq!(panic_inside(&runtime, || lock.try_acquire()), expected);
    assert_eq!(
        panic_inside(&runtime, || guard.extend(Duration::from_secs(9))),
        expected
    );
    assert_eq!(panic_inside(&runtime, || client.list("*")), expected);
    // Nothing was done: the guard still holds, and works outside again.
    assert!(!guard.is_lost());
    guard.release().unwrap();
}

#[test]
fn a_guard_dropped_inside_an_async_runtime_is_released_without_panicking() {
    let server = RedisServer::start();
    let client = client(&server);
    let guard = client.lock("dropped-inside").acquire().unwrap();
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async move { drop(guard) });
    wait_until("the guard dropped inside a runtime is released", || {
        !server
            .connection()
            .exists::<_, bool>("leasehold:{dropped-inside}:lock")
            .unwrap()
    });
}

/// `wait(Duration::MAX)` through the blocking facade: no overflow panic,
/// the waiter blocks until the holder releases.
#[test]
fn a_wait_of_duration_max_blocks_until_acquired_without_panicking() {
    let server = RedisServer::start();
    let client = client(&server);
    let lock = client.lock("max").wait(Duration::MAX);
    lock.acquire().expect("free").release().expect("release");

    let holder = lock.acquire().expect("holder");
    let waiter = {
        let lock = lock.clone();
        std::thread::spawn(move || lock.acquire().map(|g| g.release()))
    };
    wait_until("the waiter queued", || {
        client.lock("max").status().unwrap().waiting_clients > 0
    });
    assert!(!waiter.is_finished());
    holder.release().expect("release");
    let released = waiter.join().expect("no panic").expect("acquired");
    released.expect("release");
}
