//! The metrics the library reports (feature `metrics`), read with the
//! `metrics-util` debugging recorder while real locks are taken, waited
//! for, handed over, renewed and lost on a real server.

mod common;

use std::cell::RefCell;
use std::collections::HashMap;
use std::time::{Duration, Instant};

use leasehold::{Client, Error};
use leasehold_testkit::RedisServer;
use metrics_util::debugging::{DebugValue, DebuggingRecorder, Snapshotter};
use redis::Commands;

fn lock_key(name: &str) -> String {
    format!("leasehold:{{{name}}}:lock")
}

/// What the debugging recorder saw so far. Each snapshot hands over what
/// changed since the last one (counters and gauges as deltas, histogram
/// samples), so this adds them up.
struct Seen {
    snapshotter: Snapshotter,
    totals: RefCell<HashMap<String, (f64, usize)>>,
}

impl Seen {
    fn new(snapshotter: Snapshotter) -> Seen {
        Seen {
            snapshotter,
            totals: RefCell::default(),
        }
    }

    /// The total of `name` with exactly `labels`, and how many histogram
    /// samples it has.
    fn total(&self, name: &str, labels: &[(&str, &str)]) -> (f64, usize) {
        let mut totals = self.totals.borrow_mut();
        for (key, _, _, value) in self.snapshotter.snapshot().into_vec() {
            let key = key.key();
            let mut tags: Vec<String> = key
                .labels()
                .map(|l| format!("{}={}", l.key(), l.value()))
                .collect();
            tags.sort_unstable();
            let entry = totals
                .entry(format!("{}{{{}}}", key.name(), tags.join(",")))
                .or_default();
            match value {
                DebugValue::Counter(n) => entry.0 += n as f64,
                DebugValue::Gauge(v) => entry.0 += v.into_inner(),
                DebugValue::Histogram(samples) => entry.1 += samples.len(),
            }
        }
        let mut tags: Vec<String> = labels.iter().map(|(k, v)| format!("{k}={v}")).collect();
        tags.sort_unstable();
        totals
            .get(&format!("{name}{{{}}}", tags.join(",")))
            .copied()
            .unwrap_or_default()
    }

    fn counter(&self, name: &str, labels: &[(&str, &str)]) -> u64 {
        self.total(name, labels).0 as u64
    }
}

async fn until(what: &str, mut done: impl FnMut() -> bool) {
    let started = Instant::now();
    while !done() {
        assert!(started.elapsed() < Duration::from_secs(10), "{what}");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

/// One current-thread runtime: the recorder is the thread's default, and
/// the clients' watchdog tasks run on that thread too.
#[tokio::test]
async fn every_metric_counts_what_happened() {
    let recorder = DebuggingRecorder::new();
    let seen = Seen::new(recorder.snapshotter());
    let _local = metrics::set_default_local_recorder(&recorder);
    let server = RedisServer::start();
    let a = common::client(&server).await;
    let b = common::client(&server).await;
    let acquisitions = |outcome| {
        seen.counter(
            "leasehold_acquisitions_total",
            &[("kind", "lock"), ("outcome", outcome)],
        )
    };
    let held = || seen.total("leasehold_held_leases", &[]).0;

    // Acquired, then busy and a timeout on the held lock.
    let first = a.lock("m").acquire().await.expect("acquire");
    assert_eq!(acquisitions("acquired"), 1);
    assert!((held() - 1.0).abs() < f64::EPSILON, "one lease held");
    assert!(b.lock("m").try_acquire().await.expect("try").is_none());
    assert_eq!(acquisitions("busy"), 1);
    let timed_out = b.lock("m").wait(Duration::from_millis(50)).acquire().await;
    assert!(matches!(timed_out, Err(Error::Timeout { .. })));
    assert_eq!(acquisitions("timeout"), 1);

    // A hand-off: b waits, a releases, b holds with no attempt of its own.
    let waiter = tokio::spawn({
        let b = b.clone();
        async move { b.lock("m").wait(Duration::from_secs(10)).acquire().await }
    });
    let status = a.lock("m");
    let started = Instant::now();
    while status.status().await.expect("status").waiters < 1 {
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "b never queued"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    first.release().await.expect("release");
    let second = waiter.await.expect("join").expect("b acquires");
    assert_eq!(acquisitions("acquired"), 2);
    assert_eq!(seen.counter("leasehold_handoffs_total", &[]), 1);
    let (_, waits) = seen.total("leasehold_acquire_wait_seconds", &[("kind", "lock")]);
    assert_eq!(waits, 2, "the wait of each acquisition is recorded");
    assert!((held() - 1.0).abs() < f64::EPSILON, "still one lease held");

    // Taken: another owner writes the key; b's extend finds it.
    let _: () = server.connection().set(lock_key("m"), "intruder").unwrap();
    assert!(second.extend(Duration::from_secs(30)).await.is_err());
    assert_eq!(
        seen.counter("leasehold_leases_lost_total", &[("reason", "taken")]),
        1
    );
    drop(second);

    // Expired: the key is gone when the guard releases it.
    let gone = a.lock("e").acquire().await.expect("acquire");
    let _: () = server.connection().del(lock_key("e")).unwrap();
    assert!(gone.release().await.is_err());
    assert_eq!(
        seen.counter("leasehold_leases_lost_total", &[("reason", "expired")]),
        1
    );
    until("the guards' leases are no longer counted", || held() == 0.0).await;

    // Renewals: a short lease held across two renewal periods.
    let renewed = a
        .lock("r")
        .ttl(Duration::from_millis(300))
        .acquire()
        .await
        .expect("acquire");
    until("two renewals", || {
        seen.counter("leasehold_renewals_total", &[]) >= 2
    })
    .await;
    assert!(seen.counter("leasehold_renewal_batches_total", &[]) >= 2);
    renewed.release().await.expect("release");
    a.close().await.expect("close");
    b.close().await.expect("close");
}

/// Unreachable: the server is frozen past a short lease's validity, so its
/// renewals get no answer in time.
#[tokio::test]
async fn a_lease_whose_renewals_get_no_answer_is_lost_as_unreachable() {
    let recorder = DebuggingRecorder::new();
    let seen = Seen::new(recorder.snapshotter());
    let _local = metrics::set_default_local_recorder(&recorder);
    let server = RedisServer::start();
    let client = Client::builder()
        .url(server.url())
        .command_timeout(Duration::from_millis(200))
        .build()
        .await
        .expect("connect");
    let guard = client
        .lock("u")
        .ttl(Duration::from_millis(600))
        .acquire()
        .await
        .expect("acquire");
    server.pause();
    until("the lease is lost", || {
        seen.counter("leasehold_leases_lost_total", &[("reason", "unreachable")]) == 1
    })
    .await;
    server.resume();
    assert!(guard.is_lost());
    drop(guard);
}
