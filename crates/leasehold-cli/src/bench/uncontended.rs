//! Scenario 1: one task, acquire+release of a free lock, against the raw
//! floor (the same two scripts without the library) and rslock: latency,
//! and the Redis commands each acquisition costs (INFO commandstats around
//! each measured round). Then 200 names used once, and the keys they leave
//! ([`once`]).

use std::time::{Duration, Instant};

use serde_json::{Value, json};

use super::once::{self, Leftovers};
use super::report::{Figure, Goal, Row, Section, Unit};
use super::server::{self, CommandStats};
use super::{Context, Series, raw};
use crate::args::Library;
use crate::exit::{self, Failure};
use crate::measure::percentile;
use crate::session::connect_to;
use crate::session::plain_connection;

/// Lease length for every implementation (never reached: each op releases).
const TTL: Duration = Duration::from_secs(30);
/// The target: leasehold at most this many times the raw floor.
const MAX_RATIO: f64 = 1.2;
/// The floor to keep: leasehold at most this many times rslock (DESIGN.md 8).
const MAX_RSLOCK_RATIO: f64 = 1.45;
/// The floor to keep: most commands per acquisition counting the ones
/// scripts run, EVALSHA itself one (DESIGN.md 8).
const MAX_COMMANDS_WITH_LUA: f64 = 9.0;
/// Warm-up operations per implementation, not measured.
const WARM_UP: usize = 50;

/// One implementation's measured rounds.
#[derive(Debug, Default)]
struct Measured {
    /// Per-op latencies, sorted once every round is in.
    times: Vec<Duration>,
    /// Commands the server counted during the measured rounds.
    commands: CommandStats,
}

impl Measured {
    /// Keeps one round's times and commands.
    fn keep(&mut self, times: Vec<Duration>, commands: &CommandStats) {
        self.times.extend(times);
        server::add(&mut self.commands, commands);
    }

    /// Commands per acquire+release: (client calls, incl. Lua-internal).
    fn per_op(&self, library: Library) -> (f64, f64) {
        server::classify(library, &self.commands).per(self.times.len())
    }
}

/// Each implementation's rounds.
struct Samples {
    /// leasehold's acquire + release.
    leasehold: Measured,
    /// The raw floor.
    raw: Measured,
    /// rslock's lock + unlock.
    rslock: Measured,
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
    let mut admin = plain_connection(ctx.url).await?;

    let mut samples = Samples {
        leasehold: Measured::default(),
        raw: Measured::default(),
        rslock: Measured::default(),
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
        let (raw_times, raw_commands) = counted(&mut admin, async {
            timed(ops, cap, async |i| {
                let token = format!("raw-{round}-{i}");
                if !raw::acquire(&mut con, &keys, &token, TTL).await? {
                    return Err(busy("the raw loop's"));
                }
                raw::release(&mut con, &keys, &token).await
            })
            .await
        })
        .await?;
        let (leasehold_times, leasehold_commands) = counted(&mut admin, async {
            timed(ops, cap, async |_| {
                let guard = lock.acquire().await?;
                Ok(guard.release().await?)
            })
            .await
        })
        .await?;
        let (rslock_times, rslock_commands) = counted(&mut admin, async {
            timed(ops, cap, async |_| {
                let held = manager
                    .lock(resource.as_bytes(), TTL)
                    .await
                    .map_err(|e| Failure::with_code(exit::UNAVAILABLE, format!("rslock: {e}")))?;
                manager.unlock(&held).await;
                Ok(())
            })
            .await
        })
        .await?;
        if keep {
            samples.raw.keep(raw_times, &raw_commands);
            samples.leasehold.keep(leasehold_times, &leasehold_commands);
            samples.rslock.keep(rslock_times, &rslock_commands);
        }
    }
    for m in [
        &mut samples.leasehold,
        &mut samples.raw,
        &mut samples.rslock,
    ] {
        m.times.sort();
    }
    let leftovers = once::run(ctx).await?;
    Ok(report(ctx, &samples, &leftovers))
}

/// Runs `work` and returns its outcome with the commands the server counted
/// meanwhile (INFO commandstats before and after; the admin connection's
/// own calls left out).
async fn counted<T>(
    admin: &mut redis::aio::MultiplexedConnection,
    work: impl Future<Output = Result<T, Failure>>,
) -> Result<(T, CommandStats), Failure> {
    let before = server::command_stats(admin).await?;
    let out = work.await?;
    let after = server::command_stats(admin).await?;
    Ok((out, server::difference(&before, &after)))
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
fn report(ctx: &Context<'_>, samples: &Samples, leftovers: &Leftovers) -> (Section, Vec<Series>) {
    let (ours, floor, peer) = (
        &samples.leasehold.times,
        &samples.raw.times,
        &samples.rslock.times,
    );
    let (l50, r50, s50) = (p50(ours), p50(floor), p50(peer));
    let ratio = Figure::new(l50.value / r50.value, Unit::Times);
    let to_rslock = Figure::new(l50.value / s50.value, Unit::Times);
    let rtt_us = ctx.rtt.as_secs_f64() * 1e6;
    let (l_top, l_total) = samples.leasehold.per_op(Library::Leasehold);
    // The raw floor sends the library's own calls.
    let (r_top, r_total) = samples.raw.per_op(Library::Leasehold);
    let (s_top, s_total) = samples.rslock.per_op(Library::Rslock);
    let count = |v| Figure::new(v, Unit::Count);
    let rows = vec![
        Row::plain("acquire+release p50", l50).beside(r50),
        Row::plain("acquire+release p99", p99(ours)).beside(p99(floor)),
        Row::plain("acquire+release mean", mean(ours)).beside(mean(floor)),
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
        Row::plain("rslock lock+unlock p50", s50),
        Row::plain("rslock lock+unlock p99", p99(peer)),
        Row::goal(
            "leasehold / rslock (p50)",
            to_rslock,
            Goal::at_most(MAX_RSLOCK_RATIO, Unit::Times),
        )
        .because("owner-checked release and a fence per acquisition that survives clock steps and failovers, where rslock sends SET NX and an unchecked script"),
        Row::plain("commands/acquisition, client calls", count(l_top)).beside(count(r_top)),
        Row::goal(
            "commands/acquisition, incl. Lua-internal",
            count(l_total),
            Goal::at_most(MAX_COMMANDS_WITH_LUA, Unit::Count),
        )
        .beside(count(r_total))
        .because("the fence max(stored + 1, server time) read and kept, the queue checked, nothing left behind"),
        Row::plain(
            "rslock commands/acquisition, incl. Lua-internal",
            count(s_total),
        ),
        Row::plain(
            format!("{} names used once: keys while held", once::NAMES),
            count(leftovers.while_held as f64),
        ),
        Row::goal(
            format!(
                "{} names used once: keys left {} after release",
                once::NAMES,
                crate::output::short(once::AFTER)
            ),
            count(leftovers.left_figure()),
            Goal::at_most(0.0, Unit::Count),
        )
        .because("names used once leave nothing in Redis: no key grows without bound"),
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
            format!(
                "commands = INFO commandstats before and after each measured round, per \
                 acquire+release; an EVALSHA counts one and so does each call its script makes \
                 (incl. Lua-internal); rslock: {s_top:.2} client calls{}",
                if ctx.private {
                    ""
                } else {
                    "; on a shared server (--url) other clients' commands count too"
                }
            ),
            leftovers.note(),
        ],
        data: json!({
            "leasehold": stats(ours),
            "raw": stats(floor),
            "rslock": stats(peer),
            "ratio_to_raw": ratio.value,
            "ratio_to_rslock": to_rslock.value,
            "raw_floor": raw::DESCRIPTION,
            "commands_per_acquisition": {
                "leasehold": {"client_calls": l_top, "including_lua_internal": l_total},
                "raw": {"client_calls": r_top, "including_lua_internal": r_total},
                "rslock": {"client_calls": s_top, "including_lua_internal": s_total},
            },
            "commands": {
                "leasehold": samples.leasehold.commands,
                "raw": samples.raw.commands,
                "rslock": samples.rslock.commands,
            },
            "names_used_once": leftovers.to_json(),
        }),
    };
    let series = [("leasehold", ours), ("raw floor", floor), ("rslock", peer)]
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
