//! Scenario 1: one task, acquire+release of a free lock, against the raw
//! floor (the same two scripts without the library) and rslock.

use std::time::{Duration, Instant};

use serde_json::{Value, json};

use super::report::{Figure, Goal, Row, Section, Unit};
use super::{Context, Series, raw};
use crate::commands::connect_to;
use crate::exit::{self, Failure};
use crate::measure::percentile;

/// Lease length for every implementation (never reached: each op releases).
const TTL: Duration = Duration::from_secs(30);
/// The target: leasehold at most this many times the raw floor.
const MAX_RATIO: f64 = 1.2;
/// Warm-up operations per implementation, not measured.
const WARM_UP: usize = 50;

/// Per-op latencies of each implementation, sorted.
struct Samples {
    /// leasehold's acquire + release.
    leasehold: Vec<Duration>,
    /// The raw floor.
    raw: Vec<Duration>,
    /// rslock's lock + unlock.
    rslock: Vec<Duration>,
}

/// Runs scenario 1.
pub(crate) async fn run(ctx: &Context<'_>) -> Result<(Section, Vec<Series>), Failure> {
    let s = ctx.settings;
    let client = connect_to(ctx.url, ctx.prefix).await?;
    let lock = client.lock("bench:uncontended").ttl(TTL);
    let mut con = raw::connection(ctx.url).await?;
    let keys = raw::RawKeys::new(ctx.prefix, "bench:uncontended-raw");
    let manager = rslock::LockManager::new(vec![ctx.url.to_owned()]);
    let resource = format!("{}:bench:uncontended-rslock", ctx.prefix);

    let mut samples = Samples {
        leasehold: Vec::new(),
        raw: Vec::new(),
        rslock: Vec::new(),
    };
    // Interleaved rounds, so a burst of load from elsewhere hits all three alike.
    for round in 0..=s.uncontended_rounds {
        let ops = if round == 0 {
            WARM_UP
        } else {
            s.uncontended_ops
        };
        let keep = round > 0;
        let cap = s.uncontended_round_cap;
        let raw_times = timed(ops, cap, async |i| {
            let token = format!("raw-{round}-{i}");
            if !raw::acquire(&mut con, &keys, &token, TTL).await? {
                return Err(busy("the raw loop's"));
            }
            raw::release(&mut con, &keys, &token).await
        })
        .await?;
        let leasehold_times = timed(ops, cap, async |_| {
            let guard = lock.acquire().await?;
            Ok(guard.release().await?)
        })
        .await?;
        let rslock_times = timed(ops, cap, async |_| {
            let held = manager
                .lock(resource.as_bytes(), TTL)
                .await
                .map_err(|e| Failure::with_code(exit::UNAVAILABLE, format!("rslock: {e}")))?;
            manager.unlock(&held).await;
            Ok(())
        })
        .await?;
        if keep {
            samples.raw.extend(raw_times);
            samples.leasehold.extend(leasehold_times);
            samples.rslock.extend(rslock_times);
        }
    }
    for v in [
        &mut samples.leasehold,
        &mut samples.raw,
        &mut samples.rslock,
    ] {
        v.sort();
    }
    Ok(report(ctx, &samples))
}

/// Runs `op(0..ops)` one after another, for at most `cap`; the time each took.
pub(super) async fn timed(
    ops: usize,
    cap: Duration,
    mut op: impl AsyncFnMut(usize) -> Result<(), Failure>,
) -> Result<Vec<Duration>, Failure> {
    let end = Instant::now() + cap;
    let mut times = Vec::with_capacity(ops);
    for i in 0..ops {
        let t = Instant::now();
        op(i).await?;
        times.push(t.elapsed());
        if Instant::now() >= end {
            break;
        }
    }
    Ok(times)
}

/// A lock that should have been free was not.
fn busy(whose: &str) -> Failure {
    Failure::with_code(
        exit::SOFTWARE,
        format!("{whose} uncontended lock was held by someone else; is another bench running?"),
    )
}

/// The section and the latency distributions.
fn report(ctx: &Context<'_>, samples: &Samples) -> (Section, Vec<Series>) {
    let (l50, r50) = (p50(&samples.leasehold), p50(&samples.raw));
    let ratio = Figure::new(l50.value / r50.value, Unit::Times);
    let rtt_us = ctx.rtt.as_secs_f64() * 1e6;
    let rows = vec![
        Row::plain("acquire+release p50", l50).beside(r50),
        Row::plain("acquire+release p99", p99(&samples.leasehold)).beside(p99(&samples.raw)),
        Row::plain("acquire+release mean", mean(&samples.leasehold)).beside(mean(&samples.raw)),
        Row::goal(
            "leasehold / raw (p50)",
            ratio,
            Goal::at_most(MAX_RATIO, Unit::Times),
        ),
        Row::plain(
            "acquire+release p50 in RTT",
            Figure::new(l50.value / rtt_us, Unit::Rtt),
        )
        .beside(Figure::new(r50.value / rtt_us, Unit::Rtt)),
        Row::plain("rslock lock+unlock p50", p50(&samples.rslock)),
        Row::plain("rslock lock+unlock p99", p99(&samples.rslock)),
        Row::plain(
            "leasehold / rslock (p50)",
            Figure::new(l50.value / p50(&samples.rslock).value, Unit::Times),
        ),
    ];
    let section = Section {
        key: "uncontended",
        title: "1. uncontended acquire+release (one task, one connection)".into(),
        peer: Some("raw"),
        rows,
        notes: vec![
            raw::DESCRIPTION.to_owned(),
            "rslock = LockManager::lock (SET NX PX) + unlock (EVALSHA), at its defaults".into(),
            format!(
                "{} rounds of {} ops each, interleaved; RTT (PING p50) {:.1}us",
                ctx.settings.uncontended_rounds, ctx.settings.uncontended_ops, rtt_us
            ),
        ],
        data: json!({
            "leasehold": stats(&samples.leasehold),
            "raw": stats(&samples.raw),
            "rslock": stats(&samples.rslock),
            "ratio_to_raw": ratio.value,
            "raw_floor": raw::DESCRIPTION,
        }),
    };
    let series = [
        ("leasehold", &samples.leasehold),
        ("raw floor", &samples.raw),
        ("rslock", &samples.rslock),
    ]
    .into_iter()
    .map(|(label, v)| Series::of("1. uncontended: acquire+release latency", label, v))
    .collect();
    (section, series)
}

/// The median of sorted `v`.
pub(super) fn p50(v: &[Duration]) -> Figure {
    Figure::micros(percentile(v, 50.0))
}

/// The 99th percentile of sorted `v`.
pub(super) fn p99(v: &[Duration]) -> Figure {
    Figure::micros(percentile(v, 99.0))
}

/// The mean of `v`.
pub(super) fn mean(v: &[Duration]) -> Figure {
    let sum: Duration = v.iter().sum();
    Figure::micros((!v.is_empty()).then(|| sum / u32::try_from(v.len()).unwrap_or(u32::MAX)))
}

/// Count, p50, p99 and mean of sorted `v`, for JSON.
pub(super) fn stats(v: &[Duration]) -> Value {
    json!({
        "ops": v.len(),
        "p50_us": p50(v).value,
        "p99_us": p99(v).value,
        "mean_us": mean(v).value,
    })
}
