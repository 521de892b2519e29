//! Orderings that once let two holders overlap (issue 13), each forced
//! against a real redis-server: a grant that arrives later than its TTL, a
//! watchdog busy with thousands of background releases, an extend to a
//! shorter TTL whose answer never comes, `lost()` after a shortening extend,
//! and a program that ends with its guards still alive. The hand-off to a
//! waiter that stalls is checked at the script level (`scripts.rs`), and the
//! renewal-versus-extend orderings in-process on tokio's paused clock
//! (`src/watchdog.rs`, `src/lease.rs`).

mod common;

use common::{client, wait_until};

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use leasehold::Client;
use leasehold_testkit::RedisServer;
use redis::Commands;

/// The key a lock's lease lives in, for the default prefix.
fn lock_key(name: &str) -> String {
    format!("leasehold:{{{name}}}:lock")
}

fn get(server: &RedisServer, key: &str) -> Option<String> {
    server.connection().get(key).expect("GET")
}

/// `count` locks named `<tag>:<i>`, held without renewal, for their guards
/// to be dropped at once.
async fn hold_many(client: &Client, tag: &str, count: usize) -> Vec<leasehold::LockGuard> {
    let mut guards = Vec::with_capacity(count);
    for i in 0..count {
        let guard = client
            .lock(format!("{tag}:{i}"))
            .ttl(Duration::from_secs(120))
            .watchdog(false)
            .try_acquire()
            .await
            .expect("try_acquire")
            .expect("free");
        guards.push(guard);
    }
    guards
}

/// Issue 13, item 1. The server freezes while an acquire is in flight, so
/// its grant arrives after the TTL; the client gives it back and tries
/// again. The give-back used to be queued behind the watchdog's other
/// background releases while the retry, sent at once with the same token,
/// found the lease "already ours": the guard it returned was then deleted
/// by the queued give-back, and a second client got the lock while the
/// first guard still said it held.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_grant_later_than_its_ttl_never_yields_a_guard_that_is_then_released() {
    let server = RedisServer::start();
    let client = client(&server).await;
    let busy = hold_many(&client, "busy", 1000).await;

    server.pause();
    let lock = client
        .lock("late")
        .ttl(Duration::from_secs(1))
        .wait(Duration::from_secs(30));
    let acquiring = tokio::spawn(async move { lock.acquire().await });
    // The background releases of 1000 dropped guards queue up in the
    // watchdog (the first one waits on the frozen server) before the late
    // grant's reply can arrive: the server is frozen longer than the TTL.
    drop(busy);
    tokio::time::sleep(Duration::from_millis(1300)).await;
    server.resume();

    let guard = acquiring.await.expect("join").expect("acquire");
    // Every release queued before the reply is done once a release queued
    // after it is: a marker guard dropped now.
    let marker = hold_many(&client, "marker", 1).await;
    drop(marker);
    wait_until("the marker's background release is done", || {
        get(&server, &lock_key("marker:0")).is_none()
    })
    .await;
    wait_until("every busy lock is released", || {
        (0..1000).all(|i| get(&server, &lock_key(&format!("busy:{i}"))).is_none())
    })
    .await;

    assert!(!guard.is_lost(), "the guard still says it holds");
    assert_eq!(
        get(&server, &lock_key("late")).as_deref(),
        Some(guard.token()),
        "the lease of a guard that says it holds was released behind its back"
    );
    let other = client
        .lock("late")
        .try_acquire()
        .await
        .expect("try_acquire");
    assert!(
        other.is_none(),
        "a second holder got the lock while the first guard holds"
    );
    guard.release().await.expect("release");
}

/// Issue 13, item 6. A batch ends and drops thousands of guards at once;
/// their background releases must not hold up the renewal of a short lease
/// that stays held. Releases used to be awaited one by one in the
/// watchdog's loop, ahead of any renewal that fell due meanwhile.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn thousands_of_dropped_guards_do_not_delay_a_renewal() {
    let server = RedisServer::start();
    let client = client(&server).await;
    let batch = hold_many(&client, "batch", 5000).await;

    // The batch ends just before a new lease is taken: 5000 releases, one
    // round trip each, queue up ahead of the new lease's registration with
    // the watchdog, and take far longer than its 300 ms TTL.
    drop(batch);
    let short = client
        .lock("short")
        .ttl(Duration::from_millis(300))
        .acquire()
        .await
        .expect("acquire");
    let started = Instant::now();
    while started.elapsed() < Duration::from_millis(1500) {
        assert!(
            !short.is_lost(),
            "the short lease was lost {:?} after the batch was dropped",
            started.elapsed()
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    assert_eq!(
        get(&server, &lock_key("short")).as_deref(),
        Some(short.token())
    );
    short.release().await.expect("release");
    wait_until("every batch lock is released", || {
        get(&server, &lock_key("batch:4999")).is_none()
    })
    .await;
}

/// Issue 13, item 8. `Client::close` gives back every lease the client
/// holds (renewed or not), finishes queued background releases, and
/// refuses new acquisitions; guards still alive report the lease lost.
#[tokio::test]
async fn close_gives_back_every_lease_and_takes_no_more_locks() {
    let server = RedisServer::start();
    let client = client(&server).await;
    let renewed = client
        .lock("close:renewed")
        .acquire()
        .await
        .expect("acquire");
    let unrenewed = client
        .lock("close:unrenewed")
        .watchdog(false)
        .acquire()
        .await
        .expect("acquire");
    let reader = client.rw_lock("close:rw").read().await.expect("read");
    let dropped = hold_many(&client, "close:dropped", 100).await;
    drop(dropped);

    client.close().await.expect("close");

    for name in ["close:renewed", "close:unrenewed"] {
        assert_eq!(
            get(&server, &lock_key(name)),
            None,
            "{name} was not released"
        );
    }
    let readers: i64 = server
        .connection()
        .zcard(lock_key("close:rw"))
        .expect("ZCARD");
    assert_eq!(readers, 0, "the read hold was not released");
    for i in 0..100 {
        assert_eq!(get(&server, &lock_key(&format!("close:dropped:{i}"))), None);
    }
    assert!(renewed.is_lost() && unrenewed.is_lost() && reader.is_lost());
    assert!(client.is_closed());
    assert!(matches!(
        client.lock("close:new").try_acquire().await,
        Err(leasehold::Error::Closed)
    ));
    // Closing again is harmless; releasing a closed guard says it is gone.
    client.close().await.expect("close again");
    assert!(matches!(
        renewed.release().await,
        Err(leasehold::Error::Lost { .. })
    ));
}

/// Issue 13, item 8. A short program drops its guard as `main` ends: the
/// runtime shuts down before the watchdog task can release it, so the lock
/// stays held for its TTL (the documented behaviour). With `close` before
/// the end, the lock is free at once.
#[test]
fn a_program_that_ends_frees_its_lock_only_with_close() {
    let server = RedisServer::start();
    let run_program = |close: bool, name: &'static str| {
        let url = server.url();
        std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .expect("runtime");
            rt.block_on(async move {
                let client = Client::connect(&url).await.expect("connect");
                let guard = client.lock(name).acquire().await.expect("acquire");
                if close {
                    client.close().await.expect("close");
                }
                drop(guard);
            });
            // `main` returns: the runtime and its tasks are dropped.
        })
        .join()
        .expect("program");
    };
    run_program(false, "end:without-close");
    run_program(true, "end:with-close");
    let pttl: i64 = server
        .connection()
        .pttl(lock_key("end:without-close"))
        .expect("PTTL");
    assert!(
        pttl > 20_000,
        "without close the lock stays held until its TTL (documented): {pttl}"
    );
    assert_eq!(get(&server, &lock_key("end:with-close")), None);
}

/// A 30 s lease on `name`, with the extend script already loaded so that a
/// frozen server later gets a plain EVALSHA.
async fn held_for_30s(client: &Client, name: &str) -> leasehold::LockGuard {
    let guard = client
        .lock(name)
        .ttl(Duration::from_secs(30))
        .acquire()
        .await
        .expect("acquire");
    guard.extend(Duration::from_secs(30)).await.expect("extend");
    guard
}

/// After an extend of `guard` to 300 ms whose answer never came (the server
/// applied it): once that runs out, either nobody else can take `name` or
/// the guard knows it lost the lease; never two holders.
async fn assert_never_two_holders(
    server: &RedisServer,
    other: &Client,
    name: &str,
    guard: &leasehold::LockGuard,
) {
    tokio::time::sleep(Duration::from_millis(600)).await;
    let second = other.lock(name).try_acquire().await.expect("try_acquire");
    let holder: Option<String> = server.connection().get(lock_key(name)).unwrap();
    assert!(
        second.is_none() || guard.is_lost(),
        "two holders: the second client holds {:?}, the first guard says it holds (is_lost() = {})",
        holder.map(|h| h[..8].to_owned()),
        guard.is_lost()
    );
}

/// Found in review of issue 13. An extend to a SHORTER TTL whose future is
/// dropped after the command was sent (a `tokio::time::timeout` / `select!`
/// around it; the docs say "the extension may or may not have happened"):
/// the server applies the short TTL. The client used to keep the old
/// validity, so once the key expired another client took the lock while
/// the first guard still said it held.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancelled_shortening_extend_never_leaves_two_holders() {
    let server = RedisServer::start();
    let client = client(&server).await;
    let other = common::client(&server).await;
    let guard = held_for_30s(&client, "shorten").await;

    server.pause();
    let cancelled = tokio::time::timeout(
        Duration::from_millis(200),
        guard.extend(Duration::from_millis(300)),
    )
    .await;
    assert!(cancelled.is_err(), "the extend was cancelled in flight");
    server.resume();

    assert_never_two_holders(&server, &other, "shorten", &guard).await;
}

/// The same with no cancellation: the extend fails with the command
/// timeout (server slow), so its outcome is unknown.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_timed_out_shortening_extend_never_leaves_two_holders() {
    let server = RedisServer::start();
    let client = Client::builder()
        .url(server.url())
        .command_timeout(Duration::from_millis(200))
        .build()
        .await
        .expect("connect");
    let other = common::client(&server).await;
    let guard = held_for_30s(&client, "shorten2").await;

    server.pause();
    let failed = guard.extend(Duration::from_millis(300)).await;
    assert!(failed.is_err(), "the extend timed out: {failed:?}");
    server.resume();

    assert_never_two_holders(&server, &other, "shorten2", &guard).await;
}

/// `lost()` sleeps until the `valid_until` it read; a successful extend to a
/// SHORTER TTL moves `valid_until` earlier without waking it, so (with no
/// watchdog to mark the lease lost) `lost()` resolves at the old end, long
/// after `is_lost()` turned true and another client took the lock.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lost_resolves_when_a_shortening_extend_runs_out() {
    let server = RedisServer::start();
    let client = client(&server).await;
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
    guard
        .extend(Duration::from_millis(300))
        .await
        .expect("extend");
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

/// Issue 13, item 8 (found in review). A caller waiting to acquire when its
/// client is closed gets `Error::Closed` at once, not when its wait or the
/// holder's lease runs out, and leaves the queue of waiters.
#[tokio::test]
async fn close_ends_the_waits_of_its_callers() {
    let server = RedisServer::start();
    let holder = client(&server).await;
    let _held = holder
        .lock("busy")
        .ttl(Duration::from_secs(60))
        .acquire()
        .await
        .expect("acquire");
    let waiting = client(&server).await;
    let lock = waiting.lock("busy").wait(Duration::from_secs(60));
    let task = tokio::spawn(async move { lock.acquire().await });
    let queue = "leasehold:{busy}:queue";
    wait_until("the waiter is queued", || {
        server.connection().zcard::<_, i64>(queue).expect("ZCARD") == 1
    })
    .await;
    let started = Instant::now();
    waiting.close().await.expect("close");
    let outcome = tokio::time::timeout(Duration::from_secs(5), task)
        .await
        .expect("the wait ended")
        .expect("join");
    assert!(
        matches!(outcome, Err(leasehold::Error::Closed)),
        "{outcome:?}"
    );
    assert!(started.elapsed() < Duration::from_secs(5));
    wait_until("the waiter left the queue", || {
        server.connection().zcard::<_, i64>(queue).expect("ZCARD") == 0
    })
    .await;
}

/// Found by review: the last try at a waiter's deadline took the lease
/// and returned a guard even when the client had been closed while that
/// try was in flight (the close check covered the other attempts only).
/// It gives the lease back and fails with `Closed`, as `close` says.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_close_during_the_last_try_at_the_deadline_fails_it_and_frees_the_lock() {
    let server = RedisServer::start();
    let proxy = leasehold_testkit::Proxy::start(server.port());
    let holder = client(&server).await;
    let waiter = Client::connect(&proxy.url()).await.expect("connect");
    let key = "leasehold:{last-try}:lock";
    let held = holder
        .lock("last-try")
        .ttl(Duration::from_secs(30))
        .acquire()
        .await
        .expect("hold");
    let wait = Duration::from_millis(800);
    let acquiring = tokio::spawn({
        let lock = waiter.lock("last-try").wait(wait);
        async move { lock.acquire().await }
    });
    wait_until("the waiter queued", || {
        server
            .connection()
            .zcard::<_, i64>("leasehold:{last-try}:queue")
            .unwrap()
            == 1
    })
    .await;
    // The lock frees without a release message (nobody is woken), and
    // the waiter's requests now take 2 x 600 ms: its last try, at the
    // deadline, takes the lease and its reply is still on the way when
    // the client closes.
    proxy.set_mode(leasehold_testkit::ProxyMode::Delay(Duration::from_millis(
        600,
    )));
    let _: () = server.connection().del(key).unwrap();
    let started = Instant::now();
    loop {
        let holder_now: Option<String> = server.connection().get(key).unwrap();
        if holder_now.is_some() {
            break;
        }
        assert!(
            started.elapsed() < Duration::from_secs(5),
            "the last try never ran"
        );
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    waiter.close().await.expect("close");
    let outcome = acquiring.await.expect("join");
    assert!(
        matches!(outcome, Err(leasehold::Error::Closed)),
        "{outcome:?}"
    );
    let left: bool = server.connection().exists(key).unwrap();
    assert!(!left, "the lock was left held");
    drop(held);
}

/// The number of lock keys on `server` whose names match `pattern`.
fn lock_keys(server: &RedisServer, pattern: &str) -> usize {
    let keys: Vec<String> = server.connection().keys(pattern).expect("KEYS");
    keys.len()
}

/// A program's runtime, dropped when `main` returns, and its tasks with
/// it. One thread, so that an acquisition that lands (and wakes `close`)
/// records its outcome in the same poll, before `close` can look.
fn program_runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime")
}

/// Issue 24, item 5: acquisitions in flight when `close` is called. The
/// first attempts have reached the server (their leases are taken) and
/// every reply is still on its way, held back by a proxy; then `close`,
/// then the program ends. `close` returned at once and the runtime's end dropped
/// the acquisitions before their replies came, so their grants stayed held
/// for the whole TTL. `close` now returns only once every acquisition in
/// flight has returned (`Closed`, its lease given back).
#[test]
fn close_waits_for_the_acquisitions_in_flight_so_nothing_stays_held() {
    const N: usize = 16;
    let server = RedisServer::start();
    let proxy = leasehold_testkit::Proxy::start(server.port());
    let rt = program_runtime();
    let (at_close, at_return, outcomes) = rt.block_on(async {
        let client = Client::builder()
            .url(proxy.url())
            .command_timeout(Duration::from_secs(10))
            .build()
            .await
            .expect("connect");
        // The script is loaded before the proxy slows everything down.
        let warm = client.lock("fly:warm").acquire().await.expect("acquire");
        warm.release().await.expect("release");
        // Each request and each reply now waits 300 ms in the proxy.
        proxy.set_mode(leasehold_testkit::ProxyMode::Delay(Duration::from_millis(
            300,
        )));
        let returned = Arc::new(Mutex::new(Vec::new()));
        for i in 0..N {
            let lock = client.lock(format!("fly:{i}"));
            let returned = Arc::clone(&returned);
            tokio::spawn(async move {
                let outcome = lock.acquire().await;
                returned.lock().unwrap().push(outcome.map(drop));
            });
        }
        // The first leases are taken: no reply can be back before 300 ms
        // from now, and the later requests are still on their way.
        wait_until("the first attempts reached the server", || {
            lock_keys(&server, "leasehold:{fly:[0-9]*}:lock") > 0
        })
        .await;
        let at_close = returned.lock().unwrap().len();
        client.close().await.expect("close");
        let at_return = returned.lock().unwrap().len();
        let outcomes = std::mem::take(&mut *returned.lock().unwrap());
        (at_close, at_return, outcomes)
    });
    // `main` returns.
    drop(rt);
    assert_eq!(
        at_close, 0,
        "an acquisition returned before close was called"
    );
    assert_eq!(
        lock_keys(&server, "leasehold:{fly:*}:lock"),
        0,
        "grants left held after the program ended"
    );
    assert_eq!(at_return, N, "close returned with acquisitions in flight");
    for outcome in outcomes {
        assert!(
            matches!(outcome, Err(leasehold::Error::Closed)),
            "{outcome:?}"
        );
    }
}

/// Issue 24, item 5: an explicit `release()` in flight when `close` is
/// called. The guard is off the watchdog's books (the release took it
/// off), so `close` had nothing to wait for and returned at once; the
/// program's end then dropped the release before it reached the server.
/// `close` now waits for it.
#[test]
fn close_waits_for_a_release_in_flight() {
    let server = RedisServer::start();
    let proxy = leasehold_testkit::Proxy::start(server.port());
    let key = lock_key("releasing");
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    let (left_at_close, released_at_return) = rt.block_on(async {
        let client = Client::builder()
            .url(proxy.url())
            .command_timeout(Duration::from_secs(10))
            .build()
            .await
            .expect("connect");
        let guard = client.lock("releasing").acquire().await.expect("acquire");
        proxy.set_mode(leasehold_testkit::ProxyMode::Delay(Duration::from_millis(
            300,
        )));
        let released = Arc::new(Mutex::new(None));
        tokio::spawn({
            let released = Arc::clone(&released);
            async move {
                let outcome = guard.release().await;
                *released.lock().unwrap() = Some(outcome);
            }
        });
        // On this one thread the release runs now, up to its request.
        tokio::task::yield_now().await;
        let left_at_close = get(&server, &key).is_some();
        client.close().await.expect("close");
        let released_at_return = released.lock().unwrap().take();
        (left_at_close, released_at_return)
    });
    drop(rt);
    assert!(left_at_close, "the release reached the server before close");
    assert!(
        matches!(released_at_return, Some(Ok(()))),
        "close returned before the release did: {released_at_return:?}"
    );
    assert_eq!(get(&server, &key), None, "the lock was left held");
}
