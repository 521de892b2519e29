//! Scenario 2: one key, N waiter processes holding it 200us each time,
//! leasehold and rslock in turn: throughput, waits, hand-off gaps, Redis
//! commands and Redis CPU per acquisition, and fairness.

use std::time::{Duration, Instant};

use serde_json::{Value, json};

use super::report::{Figure, Goal, Row, Section, Unit};
use super::server::{self, Commands};
use super::worker::{Assignment, GRACE, WorkerResult, Workers};
use super::{Context, Series};
use crate::args::Library;
use crate::exit::Failure;
use crate::measure::{Tenure, handoff_gaps, percentile};

/// Lease length (never reached: holds are 200us).
const TTL: Duration = Duration::from_secs(10);
/// Most acquisitions one worker makes in one run.
const MAX_PER_WORKER: u64 = 200_000;
/// Targets.
const MAX_GAP_RTT: f64 = 3.0;
/// Most client commands per acquisition (issue 9).
const MAX_COMMANDS: f64 = 4.0;
/// The floor to keep: most commands per acquisition counting the ones
/// scripts run, at 64 waiters (DESIGN.md 8).
const MAX_COMMANDS_WITH_LUA: f64 = 13.5;
/// "Flat": commands per acquisition at the most waiters within this factor of the fewest.
const FLAT_FACTOR: f64 = 1.25;
/// The floor to keep: Redis CPU per acquisition at 16 waiters, at most
/// this many times rslock's (DESIGN.md 8).
const MAX_CPU_RATIO: f64 = 2.2;
/// The floor to keep: wait p99 at 16 and 64 waiters, at most this share of
/// rslock's (DESIGN.md 8).
const MAX_P99_SHARE: f64 = 0.15;
/// The floor to keep: acquisitions/s at 16 and 64 waiters, at least this
/// share of rslock's (DESIGN.md 8).
const MIN_RATE_SHARE: f64 = 0.75;
/// How often the RTT is sampled during a run, and at most how many times.
const PING_EVERY: Duration = Duration::from_millis(2);
const MAX_PINGS: usize = 100_000;
/// Fairness (min/max acquisitions per waiter) at 16 and 64 waiters.
const MIN_FAIRNESS: f64 = 0.9;
/// The waiter counts at which acquisitions/s and fairness have targets.
const GOAL_WAITERS: [usize; 2] = [16, 64];
/// The waiter count at which commands incl. Lua-internal have a target.
const LUA_GOAL_WAITERS: usize = 64;
/// The waiter count at which Redis CPU per acquisition has a target.
const CPU_GOAL_WAITERS: usize = 16;
/// The long-hold runs (issue 34): each holder keeps the lock this long, so
/// a polling peer pays for every poll while it waits; Redis CPU per
/// acquisition and wait p99 at most rslock's, at these waiter counts.
const LONG_HOLD: Duration = Duration::from_millis(20);
const LONG_HOLD_WAITERS: [usize; 2] = [16, 64];

/// One run: one library, one number of waiters.
#[derive(Debug, Clone)]
pub(crate) struct Run {
    /// The library.
    library: Library,
    /// Waiter processes.
    waiters: usize,
    /// Acquisitions in all.
    acquisitions: usize,
    /// Acquisitions per second, from the first ask to the last release.
    per_second: f64,
    /// Wait (ask -> acquired) of each acquisition, ns, sorted.
    waits: Vec<u64>,
    /// Release -> next acquisition, ns, sorted.
    gaps: Vec<u64>,
    /// Consecutive holders that overlapped (must be 0).
    overlaps: usize,
    /// Acquisitions per waiter.
    per_waiter: Vec<usize>,
    /// Commands counted by the server during the run.
    commands: Commands,
    /// The server's CPU time during the run (INFO cpu, user + system), in seconds.
    cpu_seconds: f64,
    /// Those commands by name.
    by_name: server::CommandStats,
    /// Acquisitions that timed out.
    timeouts: u64,
    /// PING p50 sampled by the bench process during the run, under the
    /// same load as the hand-offs: the unit of its hand-off gaps.
    rtt: Duration,
}

impl Run {
    /// min/max acquisitions per waiter.
    fn fairness(&self) -> f64 {
        let min = self.per_waiter.iter().min().copied().unwrap_or(0) as f64;
        let max = self.per_waiter.iter().max().copied().unwrap_or(0) as f64;
        if max > 0.0 { min / max } else { f64::NAN }
    }

    /// Commands per acquisition: (client calls, all calls).
    fn per_acquisition(&self) -> (f64, f64) {
        self.commands.per(self.acquisitions)
    }

    /// The server's CPU time per acquisition, in microseconds.
    fn cpu_us_per_acquisition(&self) -> f64 {
        if self.acquisitions == 0 {
            return f64::NAN;
        }
        self.cpu_seconds * 1e6 / self.acquisitions as f64
    }

    /// A wait percentile in microseconds.
    fn wait_us(&self, p: f64) -> f64 {
        percentile(&self.waits, p).map_or(f64::NAN, |ns| ns as f64 / 1e3)
    }

    /// A gap percentile in microseconds.
    fn gap_us(&self, p: f64) -> f64 {
        percentile(&self.gaps, p).map_or(f64::NAN, |ns| ns as f64 / 1e3)
    }

    /// A gap percentile in units of the run's RTT.
    fn gap_rtt(&self, p: f64) -> f64 {
        self.gap_us(p) / self.rtt_us()
    }

    fn rtt_us(&self) -> f64 {
        self.rtt.as_secs_f64() * 1e6
    }

    /// The run as JSON.
    fn to_json(&self) -> Value {
        let (top, total) = self.per_acquisition();
        json!({
            "library": library_name(self.library),
            "waiters": self.waiters,
            "acquisitions": self.acquisitions,
            "acquisitions_per_s": self.per_second,
            "wait_us": {"p50": self.wait_us(50.0), "p99": self.wait_us(99.0), "max": self.wait_us(100.0)},
            "handoff_gap_us": {"p50": self.gap_us(50.0), "p99": self.gap_us(99.0)},
            "rtt_us": self.rtt_us(),
            "handoff_gap_rtt": {"p50": self.gap_rtt(50.0), "p99": self.gap_rtt(99.0)},
            "commands_per_acquisition": {"client_calls": top, "including_lua_internal": total},
            "redis_cpu_s": self.cpu_seconds,
            "redis_cpu_us_per_acquisition": self.cpu_us_per_acquisition(),
            "commands": self.by_name,
            "acquisitions_per_waiter": self.per_waiter,
            "fairness": self.fairness(),
            "overlapping_holders": self.overlaps,
            "timeouts": self.timeouts,
        })
    }
}

/// The library's name in output.
fn library_name(library: Library) -> &'static str {
    match library {
        Library::Leasehold => "leasehold",
        Library::Rslock => "rslock",
    }
}

/// Runs scenario 2: for each waiter count, leasehold then rslock; then the
/// long holds, the same way.
pub(crate) async fn run(ctx: &Context<'_>) -> Result<(Section, Vec<Series>), Failure> {
    let mut admin = crate::session::plain_connection(ctx.url).await?;
    let mut runs = Vec::new();
    for &waiters in &ctx.settings.waiters {
        for library in [Library::Leasehold, Library::Rslock] {
            runs.push(one(ctx, &mut admin, library, waiters, ctx.settings.hold).await?);
        }
    }
    let mut long = Vec::new();
    for waiters in LONG_HOLD_WAITERS {
        for library in [Library::Leasehold, Library::Rslock] {
            long.push(one(ctx, &mut admin, library, waiters, LONG_HOLD).await?);
        }
    }
    Ok(report(ctx, &runs, &long))
}

/// One run with `waiters` worker processes of `library`.
async fn one(
    ctx: &Context<'_>,
    admin: &mut redis::aio::MultiplexedConnection,
    library: Library,
    waiters: usize,
    hold: Duration,
) -> Result<Run, Failure> {
    let s = ctx.settings;
    let hold_us = hold.as_micros();
    let name = match library {
        Library::Leasehold => format!("bench:contended:{waiters}:{hold_us}"),
        Library::Rslock => format!("{}:bench:contended-rslock:{waiters}:{hold_us}", ctx.prefix),
    };
    let job = Assignment {
        library,
        url: ctx.url.to_owned(),
        prefix: ctx.prefix.to_owned(),
        name,
        hold,
        ttl: TTL,
        run: s.contended_run,
        max_count: MAX_PER_WORKER,
    };
    let mut workers = Workers::start(waiters, &job).await?;
    server::reset_stats(admin, ctx.private).await?;
    let before = server::command_stats(admin).await?;
    let cpu_before = server::cpu_seconds(admin).await?;
    workers.go().await?;
    let pings = tokio::spawn(sample_rtt(admin.clone(), s.contended_run));
    let results = workers
        .results(Instant::now() + s.contended_run + GRACE + Duration::from_secs(10))
        .await?;
    let mut pings = pings.await.unwrap_or_default();
    pings.sort();
    let rtt = percentile(&pings, 50.0).unwrap_or(ctx.rtt);
    let cpu_after = server::cpu_seconds(admin).await?;
    let after = server::command_stats(admin).await?;
    let by_name = server::difference(&before, &after);
    let commands = server::classify(library, &by_name);
    Ok(Run {
        rtt,
        cpu_seconds: cpu_after - cpu_before,
        ..analyse(library, waiters, &results, commands, by_name)
    })
}

/// PINGs sent every [`PING_EVERY`] for `run` (at most [`MAX_PINGS`]), each
/// timed: the round trip under the run's load, from a process that sleeps
/// between requests as a waiter does. PING is left out of the command counts.
async fn sample_rtt(mut con: redis::aio::MultiplexedConnection, run: Duration) -> Vec<Duration> {
    let end = Instant::now() + run;
    let mut times = Vec::new();
    while Instant::now() < end && times.len() < MAX_PINGS {
        let Ok(took) = server::ping(&mut con).await else {
            break;
        };
        times.push(took);
        tokio::time::sleep(PING_EVERY).await;
    }
    times
}

/// Turns the workers' records into a run's figures.
fn analyse(
    library: Library,
    waiters: usize,
    results: &[WorkerResult],
    commands: Commands,
    by_name: server::CommandStats,
) -> Run {
    let mut all: Vec<[u64; 3]> = results.iter().flat_map(|r| r.records.clone()).collect();
    let per_waiter: Vec<usize> = results.iter().map(|r| r.records.len()).collect();
    let timeouts = results.iter().map(|r| r.timeouts).sum();
    let mut waits: Vec<u64> = all.iter().map(|[a, b, _]| b.saturating_sub(*a)).collect();
    waits.sort_unstable();
    all.sort_unstable_by_key(|r| r[1]);
    let held: Vec<Tenure<u64>> = all
        .iter()
        .map(|[_, acquired, released]| Tenure {
            acquired: *acquired,
            released: *released,
        })
        .collect();
    let (gaps, overlaps) = handoff_gaps(&held);
    let first = all.iter().map(|r| r[0]).min().unwrap_or(0);
    let last = all.iter().map(|r| r[2]).max().unwrap_or(0);
    let span = last.saturating_sub(first) as f64 / 1e9;
    Run {
        library,
        waiters,
        acquisitions: all.len(),
        per_second: if span > 0.0 {
            all.len() as f64 / span
        } else {
            f64::NAN
        },
        waits,
        gaps,
        overlaps,
        per_waiter,
        commands,
        by_name,
        timeouts,
        rtt: Duration::ZERO,
        cpu_seconds: f64::NAN,
    }
}

/// How commands per acquisition grow from run `fewest` to run `most`
/// waiters: (client calls, incl. Lua-internal), each `most / fewest`.
fn flatness(fewest: &Run, most: &Run) -> (f64, f64) {
    let (a_top, a_total) = fewest.per_acquisition();
    let (b_top, b_total) = most.per_acquisition();
    (b_top / a_top, b_total / a_total)
}

/// The long-hold rows: Redis CPU per acquisition and wait p99 beside
/// rslock's, each at most rslock's, per waiter count.
fn long_hold_rows(long: &[Run]) -> Vec<Row> {
    let find = |library, waiters| {
        long.iter()
            .find(|r| r.library == library && r.waiters == waiters)
    };
    let ms = LONG_HOLD.as_millis();
    let us = |v| Figure::new(v, Unit::Micros);
    let mut rows = Vec::new();
    for n in LONG_HOLD_WAITERS {
        let (Some(l), Some(r)) = (find(Library::Leasehold, n), find(Library::Rslock, n)) else {
            continue;
        };
        rows.push(
            Row::plain(
                format!("hold {ms}ms, {n} waiters: acquisitions"),
                Figure::new(l.acquisitions as f64, Unit::Count),
            )
            .beside(Figure::new(r.acquisitions as f64, Unit::Count)),
        );
        let (l_cpu, r_cpu) = (l.cpu_us_per_acquisition(), r.cpu_us_per_acquisition());
        rows.push(
            Row::goal(
                format!(
                    "hold {ms}ms, {n} waiters: Redis CPU/acquisition ({:.2}x rslock)",
                    l_cpu / r_cpu
                ),
                us(l_cpu),
                Goal::AtMost(r_cpu, "<= rslock".into()),
            )
            .beside(us(r_cpu)),
        );
        rows.push(
            Row::goal(
                format!("hold {ms}ms, {n} waiters: wait p99"),
                us(l.wait_us(99.0)),
                Goal::AtMost(r.wait_us(99.0), "<= rslock".into()),
            )
            .beside(us(r.wait_us(99.0))),
        );
    }
    rows
}

/// The section and the wait distributions.
fn report(ctx: &Context<'_>, runs: &[Run], long: &[Run]) -> (Section, Vec<Series>) {
    let find = |library, waiters| {
        runs.iter()
            .find(|r| r.library == library && r.waiters == waiters)
    };
    let mut rows = Vec::new();
    for &n in &ctx.settings.waiters {
        let (Some(l), Some(r)) = (find(Library::Leasehold, n), find(Library::Rslock, n)) else {
            continue;
        };
        let us = |v| Figure::new(v, Unit::Micros);
        let (l_top, l_total) = l.per_acquisition();
        let (r_top, r_total) = r.per_acquisition();
        let per_s = Figure::new(l.per_second, Unit::PerSec);
        rows.push(
            if GOAL_WAITERS.contains(&n) {
                Row::goal(
                    format!("{n} waiters: acquisitions/s"),
                    per_s,
                    Goal::AtLeast(
                        MIN_RATE_SHARE * r.per_second,
                        format!(">= {MIN_RATE_SHARE}x rslock"),
                    ),
                )
                .because("a FIFO queue served by hand-off, where rslock's releaser barges back in while the others poll")
            } else {
                Row::plain(format!("{n} waiters: acquisitions/s"), per_s)
            }
            .beside(Figure::new(r.per_second, Unit::PerSec)),
        );
        rows.push(
            Row::plain(format!("{n} waiters: wait p50"), us(l.wait_us(50.0)))
                .beside(us(r.wait_us(50.0))),
        );
        let p99 = us(l.wait_us(99.0));
        rows.push(
            if GOAL_WAITERS.contains(&n) {
                Row::goal(
                    format!("{n} waiters: wait p99"),
                    p99,
                    Goal::AtMost(
                        MAX_P99_SHARE * r.wait_us(99.0),
                        format!("<= {MAX_P99_SHARE}x rslock"),
                    ),
                )
                .because("waiters served in arrival order: no waiter starves")
            } else {
                Row::plain(format!("{n} waiters: wait p99"), p99)
            }
            .beside(us(r.wait_us(99.0))),
        );
        rows.push(
            Row::plain(format!("{n} waiters: wait max"), us(l.wait_us(100.0)))
                .beside(us(r.wait_us(100.0))),
        );
        rows.push(
            Row::goal(
                format!(
                    "{n} waiters: hand-off gap p50 ({:.0}us; RTT {:.0}us)",
                    l.gap_us(50.0),
                    l.rtt_us()
                ),
                Figure::new(l.gap_rtt(50.0), Unit::Rtt),
                Goal::at_most(MAX_GAP_RTT, Unit::Rtt),
            )
            .beside(Figure::new(r.gap_rtt(50.0), Unit::Rtt)),
        );
        rows.push(
            Row::plain(
                format!("{n} waiters: hand-off gap p99 ({:.0}us)", l.gap_us(99.0)),
                Figure::new(l.gap_rtt(99.0), Unit::Rtt),
            )
            .beside(Figure::new(r.gap_rtt(99.0), Unit::Rtt)),
        );
        rows.push(
            Row::goal(
                format!("{n} waiters: commands/acquisition, client calls"),
                Figure::new(l_top, Unit::Count),
                Goal::at_most(MAX_COMMANDS, Unit::Count),
            )
            .beside(Figure::new(r_top, Unit::Count)),
        );
        let with_lua = format!("{n} waiters: commands/acquisition, incl. Lua-internal");
        let with_lua_figure = Figure::new(l_total, Unit::Count);
        rows.push(
            if n == LUA_GOAL_WAITERS {
                Row::goal(
                    with_lua,
                    with_lua_figure,
                    Goal::at_most(MAX_COMMANDS_WITH_LUA, Unit::Count),
                )
                .because("the release hands over in its own script: the next holder's fence issued, dead waiters dropped")
            } else {
                Row::plain(with_lua, with_lua_figure)
            }
            .beside(Figure::new(r_total, Unit::Count)),
        );
        let (l_cpu, r_cpu) = (l.cpu_us_per_acquisition(), r.cpu_us_per_acquisition());
        let cpu = format!(
            "{n} waiters: Redis CPU/acquisition ({:.2}x rslock)",
            l_cpu / r_cpu
        );
        rows.push(
            if n == CPU_GOAL_WAITERS {
                Row::goal(
                    cpu,
                    us(l_cpu),
                    Goal::AtMost(MAX_CPU_RATIO * r_cpu, format!("<= {MAX_CPU_RATIO}x rslock")),
                )
                .because("the queue's bookkeeping and the fences, in Lua on the server")
            } else {
                Row::plain(cpu, us(l_cpu))
            }
            .beside(us(r_cpu)),
        );
        let fairness = Figure::new(l.fairness(), Unit::Count);
        rows.push(
            if GOAL_WAITERS.contains(&n) {
                Row::goal(
                    format!("{n} waiters: fairness (min/max per waiter)"),
                    fairness,
                    Goal::at_least(MIN_FAIRNESS, Unit::Count),
                )
                .because("every waiter gets its turn (rslock's fairness falls to 0.02)")
            } else {
                Row::plain(
                    format!("{n} waiters: fairness (min/max per waiter)"),
                    fairness,
                )
            }
            .beside(Figure::new(r.fairness(), Unit::Count)),
        );
        rows.push(
            Row::goal(
                format!("{n} waiters: overlapping holders"),
                Figure::new(l.overlaps as f64, Unit::Count),
                Goal::at_most(0.0, Unit::Count),
            )
            .beside(Figure::new(r.overlaps as f64, Unit::Count)),
        );
    }
    let fewest = ctx.settings.waiters.iter().min().copied();
    let most = ctx.settings.waiters.iter().max().copied();
    let ends = fewest.zip(most).filter(|(lo, hi)| lo != hi);
    if let Some((lo, hi)) = ends
        && let (Some(a), Some(b)) = (find(Library::Leasehold, lo), find(Library::Leasehold, hi))
    {
        let (flat_top, flat_total) = flatness(a, b);
        rows.push(Row::goal(
            format!("commands/acquisition (client calls), {hi} vs {lo} waiters"),
            Figure::new(flat_top, Unit::Times),
            Goal::at_most(FLAT_FACTOR, Unit::Times),
        ));
        rows.push(Row::goal(
            format!("commands/acquisition (incl. Lua-internal), {hi} vs {lo} waiters"),
            Figure::new(flat_total, Unit::Times),
            Goal::at_most(FLAT_FACTOR, Unit::Times),
        ));
    }
    rows.extend(long_hold_rows(long));
    let section = Section {
        key: "contended",
        title: format!(
            "2. one key, waiters as separate processes, hold {}us, {} per run",
            ctx.settings.hold.as_micros(),
            crate::output::short(ctx.settings.contended_run)
        ),
        peer: Some("rslock"),
        rows,
        notes: vec![
            "RTT = PING p50 sampled every 2 ms by the bench process during each run (the same load as the hand-offs; idle-machine RTT in the header); hand-off gap = one holder's release call -> the next holder's acquisition (CLOCK_MONOTONIC across processes)".into(),
            "client calls = commands the clients sent (EVALSHA, SUBSCRIBE, ...; rslock: SET NX PX, EVALSHA); incl. Lua-internal = also the GET/SET/TIME/PUBLISH/... scripts ran, as INFO commandstats counts them".into(),
            "rslock = LockManager::lock at its defaults (3 tries, 0-200ms apart), called again until acquired; the wait counts from the first try".into(),
            format!("hold {}ms = the long holds: the same workers holding {}ms each time, so a polling peer pays for every poll while it waits (a FIFO's p99 at 64 waiters cannot be below ~63 holds)", LONG_HOLD.as_millis(), LONG_HOLD.as_millis()),
            "Redis CPU/acquisition = INFO cpu used_cpu_user + used_cpu_sys (the whole redis-server, same server for both) from just before the go signal until every worker has reported and exited, / acquisitions; includes the bench's own PINGs (one every 2 ms) and the workers' disconnects".into(),
        ],
        data: json!({
            "hold_us": ctx.settings.hold.as_micros(),
            "run_ms": ctx.settings.contended_run.as_millis(),
            "runs": runs.iter().map(Run::to_json).collect::<Vec<_>>(),
            "long_hold_ms": LONG_HOLD.as_millis(),
            "long_hold_runs": long.iter().map(Run::to_json).collect::<Vec<_>>(),
        }),
    };
    let long_panel = |r: &Run| {
        format!(
            "2. one key, hold {}ms, {} waiters: wait time",
            LONG_HOLD.as_millis(),
            r.waiters
        )
    };
    let series = runs
        .iter()
        .map(|r| (format!("2. one key, {} waiters: wait time", r.waiters), r))
        .chain(long.iter().map(|r| (long_panel(r), r)))
        .map(|(panel, r)| Series {
            panel,
            label: library_name(r.library).into(),
            sorted_us: r.waits.iter().map(|ns| *ns as f64 / 1e3).collect(),
        })
        .collect();
    (section, series)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_from_several_processes_become_gaps_waits_and_fairness() {
        let results = vec![
            WorkerResult {
                records: vec![[0, 10, 20], [40, 50, 60]],
                timeouts: 0,
            },
            WorkerResult {
                records: vec![[0, 25, 35]],
                timeouts: 0,
            },
        ];
        let run = analyse(
            Library::Leasehold,
            2,
            &results,
            Commands {
                top_level: 6,
                total: 27,
            },
            Default::default(),
        );
        assert_eq!(run.acquisitions, 3);
        assert_eq!(run.waits, vec![10, 10, 25]);
        assert_eq!(run.gaps, vec![5, 15]);
        assert_eq!(run.overlaps, 0);
        assert_eq!(run.fairness(), 0.5);
        assert_eq!(run.per_acquisition(), (2.0, 9.0));
        // CPU is unknown until the run sets it.
        assert!(run.cpu_us_per_acquisition().is_nan());
        let run = Run {
            cpu_seconds: 0.000_06,
            ..run
        };
        assert!((run.cpu_us_per_acquisition() - 20.0).abs() < 1e-9);
    }

    #[test]
    fn flatness_compares_commands_per_acquisition_at_the_ends() {
        let run = |acquisitions, top_level, total| Run {
            acquisitions,
            ..analyse(
                Library::Leasehold,
                4,
                &[],
                Commands { top_level, total },
                Default::default(),
            )
        };
        let (top, total) = flatness(&run(1000, 2000, 10_000), &run(500, 1100, 6000));
        assert!((top - 1.1).abs() < 1e-9, "{top}");
        assert!((total - 1.2).abs() < 1e-9, "{total}");
        let none = run(0, 0, 0);
        let (top, total) = flatness(&none, &run(500, 1100, 6000));
        assert!(top.is_nan() && total.is_nan());
        assert!(none.cpu_us_per_acquisition().is_nan());
    }
}
