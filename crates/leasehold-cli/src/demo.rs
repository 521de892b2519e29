//! `leasehold demo`: several workers contend for one lock around a
//! read-modify-write of a counter in Redis; first without the lock (updates
//! get lost), then with it (the counter comes out exact). Prints wait and
//! hand-off latencies, checks that fences strictly increased and that no two
//! holders overlapped, and ends with a `VERDICT:` line.

use std::time::{Duration, Instant};

use leasehold::Client;
use redis::aio::MultiplexedConnection;
use serde_json::{Value, json};
use tokio::sync::Barrier;
use tokio::task::JoinSet;

use crate::args::{DemoArgs, Global};
use crate::exit::{self, Failure};
use crate::measure::{Tenure, handoff_gaps, hold, pct, percentile};
use crate::output::{emit, emit_json, short};
use crate::session::connect_to;
use crate::session::{Stop, Target, plain_connection};

/// The lock the workers contend for.
const LOCK_NAME: &str = "demo:counter";
/// Its lease length.
const LOCK_TTL: Duration = Duration::from_secs(5);
/// How long one acquire may wait.
const LOCK_WAIT: Duration = Duration::from_secs(30);
/// The time a worker spends between reading and writing the counter: long
/// enough that without a lock other workers interleave.
const HOLD: Duration = Duration::from_micros(200);
/// Expiry of the demo's counter keys, so nothing is left behind for long.
const COUNTER_TTL_MS: u64 = 10 * 60 * 1000;

/// `leasehold demo`. Exit 0 on `VERDICT: PASS`, 1 on `VERDICT: FAIL`.
pub(crate) async fn demo(global: &Global, args: DemoArgs) -> Result<u8, Failure> {
    // Caught from here on, so that Ctrl-C or SIGTERM, even during the
    // server's start, ends the demo through the path that stops the server.
    let mut stop = Stop::install()?;
    let target = Target::open(global).await?;
    let place = target.place();
    if !global.json {
        emit(&format!(
            "leasehold demo: {} workers, each with its own connection, increment one counter \
             {} times each, on {place}",
            args.workers, args.iterations
        ));
    }

    // Stop on Ctrl-C or SIGTERM too, so the private server never outlives us.
    let result = tokio::select! {
        r = scenario(&target.url, &global.prefix, &args) => r,
        code = stop.next() => Err(Failure::with_code(code, "demo interrupted")),
    };
    drop(target);
    let report = result?;
    if global.json {
        emit_json(&report.to_json(&args));
    } else {
        emit(&report.to_human(&args));
    }
    Ok(if report.pass() { 0 } else { 1 })
}

/// One acquisition of the lock by one worker.
#[derive(Debug, Clone, Copy)]
struct Record {
    /// Which worker.
    worker: usize,
    /// The fencing token it got.
    fence: u64,
    /// When it called `acquire`.
    asked: Instant,
    /// When `acquire` returned the guard.
    acquired: Instant,
    /// When it called `release`.
    released: Instant,
}

/// What the demo measured.
#[derive(Debug)]
struct Report {
    /// Increments each phase should have made.
    expected: u64,
    /// The counter after the phase without a lock.
    unlocked_final: u64,
    /// The counter after the phase with the lock.
    locked_final: u64,
    /// Acquisitions per worker.
    per_worker: Vec<usize>,
    /// Time from calling `acquire` to holding the guard, sorted.
    waits: Vec<Duration>,
    /// Time from one holder's `release` call to the next holder's guard, sorted.
    handoffs: Vec<Duration>,
    /// Fences, in acquisition order, strictly increased.
    fences_increasing: bool,
    /// Consecutive holders (by fence) whose hold times overlapped.
    overlaps: usize,
    /// Wall time of the phase with the lock.
    locked_elapsed: Duration,
}

/// Runs both phases against the Redis at `url`.
async fn scenario(url: &str, prefix: &str, args: &DemoArgs) -> Result<Report, Failure> {
    let workers = usize::from(args.workers);
    let iterations = args.iterations;
    let expected = u64::from(args.workers) * u64::from(iterations);
    let unlocked_key = format!("{prefix}:demo:counter-without-lock");
    let locked_key = format!("{prefix}:demo:counter-with-lock");

    // Each worker has its own leasehold client (own connection, own
    // subscription, own watchdog) and its own plain connection for the counter.
    let mut clients = Vec::with_capacity(workers);
    let mut connections = Vec::with_capacity(workers);
    for _ in 0..workers {
        clients.push(connect_to(url, prefix).await?);
        connections.push(plain_connection(url).await?);
    }
    let mut admin = plain_connection(url).await?;

    // Phase 1: the same read-modify-write without a lock.
    reset(&mut admin, &unlocked_key).await?;
    let mut set = JoinSet::new();
    let barrier = std::sync::Arc::new(Barrier::new(workers));
    for con in connections.iter().cloned() {
        let key = unlocked_key.clone();
        let barrier = barrier.clone();
        set.spawn(async move {
            let mut con = con;
            barrier.wait().await;
            for _ in 0..iterations {
                increment(&mut con, &key).await?;
            }
            Ok::<_, Failure>(())
        });
    }
    while let Some(joined) = set.join_next().await {
        joined.map_err(task_failure)??;
    }
    let unlocked_final = read(&mut admin, &unlocked_key).await?;

    // Phase 2: the same work, each increment under the lock.
    reset(&mut admin, &locked_key).await?;
    let mut set = JoinSet::new();
    let barrier = std::sync::Arc::new(Barrier::new(workers));
    let started = Instant::now();
    for (worker, (client, con)) in clients.into_iter().zip(connections).enumerate() {
        let key = locked_key.clone();
        let barrier = barrier.clone();
        set.spawn(async move {
            barrier.wait().await;
            locked_worker(worker, client, con, &key, iterations).await
        });
    }
    let mut records = Vec::with_capacity(usize::try_from(expected).unwrap_or(0));
    while let Some(joined) = set.join_next().await {
        records.extend(joined.map_err(task_failure)??);
    }
    let locked_elapsed = started.elapsed();
    let locked_final = read(&mut admin, &locked_key).await?;

    // Best effort: the keys expire anyway.
    let _: redis::RedisResult<()> = redis::cmd("DEL")
        .arg(&unlocked_key)
        .arg(&locked_key)
        .query_async(&mut admin)
        .await;

    Ok(analyse(
        expected,
        unlocked_final,
        locked_final,
        workers,
        records,
        locked_elapsed,
    ))
}

/// One worker of the locked phase: `iterations` increments, each under the lock.
async fn locked_worker(
    worker: usize,
    client: Client,
    mut con: MultiplexedConnection,
    key: &str,
    iterations: u32,
) -> Result<Vec<Record>, Failure> {
    let lock = client.lock(LOCK_NAME).ttl(LOCK_TTL).wait(LOCK_WAIT);
    let mut records = Vec::with_capacity(usize::try_from(iterations).unwrap_or(0));
    for _ in 0..iterations {
        let asked = Instant::now();
        let guard = lock.acquire().await?;
        let acquired = Instant::now();
        increment(&mut con, key).await?;
        let fence = guard.fence();
        let released = Instant::now();
        guard.release().await?;
        records.push(Record {
            worker,
            fence,
            asked,
            acquired,
            released,
        });
    }
    Ok(records)
}

/// Turns the raw records into the report.
fn analyse(
    expected: u64,
    unlocked_final: u64,
    locked_final: u64,
    workers: usize,
    mut records: Vec<Record>,
    locked_elapsed: Duration,
) -> Report {
    let mut per_worker = vec![0; workers];
    for r in &records {
        per_worker[r.worker] += 1;
    }
    let mut waits: Vec<Duration> = records.iter().map(|r| r.acquired - r.asked).collect();
    waits.sort();

    // In fence order, each holder must have got the lock after the previous
    // one let go, and fences must never repeat.
    records.sort_by_key(|r| r.fence);
    let fences_increasing = records
        .windows(2)
        .all(|p| p[1].fence > p[0].fence && p[1].acquired > p[0].acquired);
    let held: Vec<Tenure<Instant>> = records
        .iter()
        .map(|r| Tenure {
            acquired: r.acquired,
            released: r.released,
        })
        .collect();
    let (handoffs, overlaps) = handoff_gaps(&held);
    Report {
        expected,
        unlocked_final,
        locked_final,
        per_worker,
        waits,
        handoffs,
        fences_increasing,
        overlaps,
        locked_elapsed,
    }
}

impl Report {
    /// Every acquisition happened, the counter is exact, fences strictly
    /// increased and no two holders overlapped.
    fn pass(&self) -> bool {
        self.failures().is_empty()
    }

    /// What went wrong, one phrase each.
    fn failures(&self) -> Vec<String> {
        let mut out = Vec::new();
        let acquisitions: usize = self.per_worker.iter().sum();
        if u64::try_from(acquisitions).ok() != Some(self.expected) {
            out.push(format!(
                "{acquisitions} acquisitions instead of {}",
                self.expected
            ));
        }
        if self.locked_final != self.expected {
            out.push(format!(
                "counter {} instead of {}",
                self.locked_final, self.expected
            ));
        }
        if !self.fences_increasing {
            out.push("fences did not strictly increase".to_owned());
        }
        if self.overlaps > 0 {
            out.push(format!("{} overlapping holders", self.overlaps));
        }
        out
    }

    /// Updates lost without the lock.
    fn lost_without_lock(&self) -> u64 {
        self.expected.saturating_sub(self.unlocked_final)
    }

    /// Acquisitions per second in the locked phase.
    fn throughput(&self) -> f64 {
        let n: usize = self.per_worker.iter().sum();
        n as f64 / self.locked_elapsed.as_secs_f64().max(1e-9)
    }

    /// The report for people.
    fn to_human(&self, args: &DemoArgs) -> String {
        let per_worker: Vec<String> = self.per_worker.iter().map(ToString::to_string).collect();
        let verdict = if self.pass() {
            format!(
                "VERDICT: PASS: the counter is exact ({}) with the lock, fences strictly \
                 increased and no two holders overlapped",
                self.locked_final
            )
        } else {
            format!("VERDICT: FAIL: {}", self.failures().join("; "))
        };
        let lines = [
            format!(
                "without a lock: expected {}, counter {} -> {} of {} updates lost",
                self.expected,
                self.unlocked_final,
                self.lost_without_lock(),
                self.expected
            ),
            format!(
                "with leasehold: expected {}, counter {} -> {} updates lost",
                self.expected,
                self.locked_final,
                self.expected.saturating_sub(self.locked_final)
            ),
            format!(
                "acquisitions per worker ({} workers x {}): {}",
                args.workers,
                args.iterations,
                per_worker.join(" ")
            ),
            format!(
                "wait for the lock:  p50 {}  p99 {}  max {}",
                pct(&self.waits, 50.0),
                pct(&self.waits, 99.0),
                self.waits.last().copied().map_or("-".into(), short)
            ),
            format!(
                "hand-off latency:   p50 {}  p99 {}  (one holder's release -> the next holder's guard)",
                pct(&self.handoffs, 50.0),
                pct(&self.handoffs, 99.0)
            ),
            format!(
                "fences: {} issued, {}; overlapping holders: {}",
                self.waits.len(),
                if self.fences_increasing {
                    "strictly increasing in acquisition order"
                } else {
                    "NOT strictly increasing"
                },
                self.overlaps
            ),
            format!(
                "throughput: {:.0} acquisitions/s ({} in {})",
                self.throughput(),
                self.waits.len(),
                short(self.locked_elapsed)
            ),
            verdict,
        ];
        lines.join("\n")
    }

    /// The report as one JSON object.
    fn to_json(&self, args: &DemoArgs) -> Value {
        let us = |d: Option<Duration>| d.map(|d| u64::try_from(d.as_micros()).unwrap_or(u64::MAX));
        json!({
            "workers": args.workers,
            "iterations": args.iterations,
            "lock": LOCK_NAME,
            "without_lock": {
                "expected": self.expected,
                "counter": self.unlocked_final,
                "lost_updates": self.lost_without_lock(),
            },
            "with_lock": {
                "expected": self.expected,
                "counter": self.locked_final,
                "lost_updates": self.expected.saturating_sub(self.locked_final),
            },
            "acquisitions_per_worker": self.per_worker,
            "wait_us": {
                "p50": us(percentile(&self.waits, 50.0)),
                "p99": us(percentile(&self.waits, 99.0)),
                "max": us(self.waits.last().copied()),
            },
            "handoff_us": {
                "p50": us(percentile(&self.handoffs, 50.0)),
                "p99": us(percentile(&self.handoffs, 99.0)),
            },
            "fences_strictly_increasing": self.fences_increasing,
            "overlapping_holders": self.overlaps,
            "acquisitions_per_second": self.throughput().round(),
            "verdict": if self.pass() { "PASS" } else { "FAIL" },
            "failures": self.failures(),
        })
    }
}

/// Read, hold, write: the increment that loses updates when not exclusive.
async fn increment(con: &mut MultiplexedConnection, key: &str) -> Result<(), Failure> {
    let value = read(con, key).await?;
    hold(HOLD).await;
    redis::cmd("SET")
        .arg(key)
        .arg(value + 1)
        .arg("KEEPTTL")
        .query_async::<()>(con)
        .await
        .map_err(redis_failure)
}

/// The counter's value (0 when missing).
async fn read(con: &mut MultiplexedConnection, key: &str) -> Result<u64, Failure> {
    let value: Option<u64> = redis::cmd("GET")
        .arg(key)
        .query_async(con)
        .await
        .map_err(redis_failure)?;
    Ok(value.unwrap_or(0))
}

/// Sets the counter to 0, with an expiry.
async fn reset(con: &mut MultiplexedConnection, key: &str) -> Result<(), Failure> {
    redis::cmd("SET")
        .arg(key)
        .arg(0)
        .arg("PX")
        .arg(COUNTER_TTL_MS)
        .query_async::<()>(con)
        .await
        .map_err(redis_failure)
}

/// Maps an error on the counter connection to an exit code.
fn redis_failure(e: redis::RedisError) -> Failure {
    crate::session::redis_failure(e, "on the demo counter")
}

/// A worker task that panicked or was cancelled.
fn task_failure(e: tokio::task::JoinError) -> Failure {
    Failure::with_code(exit::SOFTWARE, format!("a demo worker failed: {e}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(worker: usize, fence: u64, base: Instant, at_ms: u64, hold_ms: u64) -> Record {
        let acquired = base + Duration::from_millis(at_ms);
        Record {
            worker,
            fence,
            asked: base,
            acquired,
            released: acquired + Duration::from_millis(hold_ms),
        }
    }

    #[test]
    fn overlapping_holders_and_repeated_fences_fail_the_verdict() {
        let base = Instant::now();
        let good = vec![record(0, 1, base, 1, 1), record(1, 2, base, 3, 1)];
        let report = analyse(2, 1, 2, 2, good, Duration::from_millis(5));
        assert!(report.pass(), "{:?}", report.failures());
        assert_eq!(report.handoffs, [Duration::from_millis(1)]);

        let overlap = vec![record(0, 1, base, 1, 5), record(1, 2, base, 3, 1)];
        let report = analyse(2, 1, 2, 2, overlap, Duration::from_millis(5));
        assert_eq!(report.overlaps, 1);
        assert!(!report.pass());

        let repeated = vec![record(0, 1, base, 1, 1), record(1, 1, base, 3, 1)];
        let report = analyse(2, 1, 2, 2, repeated, Duration::from_millis(5));
        assert!(!report.fences_increasing);
        assert!(!report.pass());

        let short_count = vec![record(0, 1, base, 1, 1), record(1, 2, base, 3, 1)];
        let report = analyse(2, 1, 1, 2, short_count, Duration::from_millis(5));
        assert!(!report.pass());
    }
}
