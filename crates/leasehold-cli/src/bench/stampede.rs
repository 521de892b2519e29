//! Scenario 6: `leasehold run` under a stampede, against flock(1).
//!
//! N jobs of one lock, P at a time, each `sh -c 'read c < counter; sleep S;
//! echo $((c+1)) > counter'`: once as `leasehold run --ttl 5s stampede --
//! ...` against the bench's Redis, once as `flock FILE ...` on a local
//! file, in turn (leasehold first in even rounds, flock first in odd ones),
//! so load from elsewhere falls on both alike. Figures: both wall times,
//! the per-job overhead of each (wall / N - S), their ratio, the counter
//! (exact, or the lock failed), the keys left under the jobs' prefix.
//!
//! The jobs write when each step of a run happened (`run/timing.rs`, the
//! bench build's `LEASEHOLD_BENCH_RUN_TIMES`), which gives the breakdown
//! of one job: startup, connect, wait, then the critical path from one
//! command's exit to the next one's exec: release, hand-off, spawn.
//!
//! Then one run alone: `leasehold -q run --ttl 5s one -- true` and `flock
//! FILE true`, interleaved, wall and CPU (getrusage of the reaped child,
//! its own children included) of each.
//!
//! Every job is a child of the bench, killed by PID if the round runs past
//! its bound; the temporary directory is removed at the end.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

use futures_util::StreamExt;
use futures_util::stream::FuturesUnordered;
use serde_json::{Value, json};

use super::report::{Figure, Goal, Row, Section, Unit};
use super::{Context, server};
use crate::exit::{self, Failure};
use crate::measure::monotonic_ns;
use crate::measure::percentile;
use crate::session::plain_connection;

/// The target: the stampede's wall time at most this many times flock's
/// (DESIGN.md 8).
pub(crate) const MAX_RATIO: f64 = 1.5;
/// The lease of every job (the command line).
const TTL: &str = "5s";
/// How long after the last leasehold round the keys are counted.
const KEYS_AFTER: Duration = Duration::from_secs(2);

/// The sizes of scenario 6.
#[derive(Debug, Clone)]
pub(crate) struct Plan {
    /// Jobs per round and tool.
    pub(crate) jobs: usize,
    /// Jobs at a time.
    pub(crate) parallel: usize,
    /// The critical section (`sleep`) of each job.
    pub(crate) section: Duration,
    /// Rounds (each runs both tools).
    pub(crate) rounds: usize,
    /// Runs of each tool alone, interleaved.
    pub(crate) alone: usize,
}

impl Plan {
    /// The plan as JSON.
    pub(crate) fn to_json(&self) -> Value {
        json!({
            "jobs": self.jobs,
            "parallel": self.parallel,
            "section_ms": self.section.as_secs_f64() * 1e3,
            "rounds": self.rounds,
            "alone_runs": self.alone,
        })
    }

    /// How long one round of one tool may take before its jobs are killed:
    /// ten times the critical sections back to back, plus a minute.
    fn bound(&self) -> Duration {
        self.section * u32::try_from(self.jobs).unwrap_or(u32::MAX) * 10 + Duration::from_secs(60)
    }
}

/// Which tool a round runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Tool {
    /// `leasehold run`.
    Leasehold,
    /// `flock(1)`.
    Flock,
}

/// One job as the bench saw it.
#[derive(Debug, Clone, Copy)]
struct Job {
    /// Its PID (the `run` process's for leasehold).
    pid: u32,
    /// CLOCK_MONOTONIC when it was spawned, µs.
    spawned: u64,
    /// When it was reaped, µs.
    reaped: u64,
    /// Whether it exited 0.
    ok: bool,
}

/// One tool's round.
#[derive(Debug, Clone)]
struct Round {
    /// First spawn to last reap.
    wall: Duration,
    /// The counter at the end.
    counter: i64,
    /// Jobs that did not exit 0 (or were killed at the bound).
    failed: usize,
    /// Every job.
    jobs: Vec<Job>,
}

/// Where the scenario works: a temporary directory with the counter, the
/// flock file and the timing files.
struct Place {
    /// The directory.
    dir: PathBuf,
}

impl Drop for Place {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// Runs scenario 6.
pub(crate) async fn run(ctx: &Context<'_>) -> Result<Section, Failure> {
    let plan = &ctx.settings.stampede;
    let flock = which("flock").ok_or_else(|| {
        Failure::with_code(
            exit::UNAVAILABLE,
            "run-stampede compares with flock(1), which is not on PATH (util-linux)",
        )
    })?;
    let exe = std::env::current_exe()
        .map_err(|e| Failure::with_code(exit::SOFTWARE, format!("cannot find this binary: {e}")))?;
    let place = Place {
        dir: std::env::temp_dir().join(format!("leasehold-bench-stampede-{}", std::process::id())),
    };
    std::fs::create_dir_all(&place.dir).map_err(|e| io_failure("create", &place.dir, &e))?;
    let prefix = format!("{}-stampede-{}", ctx.prefix, std::process::id());
    let job = format!(
        "read c < counter; sleep {:.3}; echo $((c+1)) > counter",
        plan.section.as_secs_f64()
    );
    let lh = |times: &Path| {
        let mut cmd = tokio::process::Command::new(&exe);
        cmd.args([
            "--url", ctx.url, "--prefix", &prefix, "-q", "run", "--ttl", TTL,
        ])
        .args(["stampede", "--", "sh", "-c", &job])
        .env(crate::run::TIMES_VAR, times);
        cmd
    };
    let fl = || {
        let mut cmd = tokio::process::Command::new(&flock);
        cmd.arg(place.dir.join("lockfile")).args(["sh", "-c", &job]);
        cmd
    };

    let mut rounds: Vec<(Round, Round)> = Vec::new();
    let mut marks: Vec<HashMap<u32, Steps>> = Vec::new();
    let mut last_leasehold = Instant::now();
    for r in 0..plan.rounds {
        let times = place.dir.join(format!("times-{r}"));
        let order = if r % 2 == 0 {
            [Tool::Leasehold, Tool::Flock]
        } else {
            [Tool::Flock, Tool::Leasehold]
        };
        let (mut l, mut f) = (None, None);
        for tool in order {
            match tool {
                Tool::Leasehold => {
                    l = Some(stampede(&place.dir, plan, || lh(&times)).await?);
                    last_leasehold = Instant::now();
                }
                Tool::Flock => f = Some(stampede(&place.dir, plan, fl).await?),
            }
        }
        if let (Some(l), Some(f)) = (l, f) {
            rounds.push((l, f));
        }
        marks.push(read_marks(&times));
    }
    let since = last_leasehold.elapsed();
    if since < KEYS_AFTER {
        tokio::time::sleep(KEYS_AFTER - since).await;
    }
    let mut admin = plain_connection(ctx.url).await?;
    let left = server::keys_under(&mut admin, &format!("{prefix}:")).await?;

    let alone = alone(&place.dir, plan, ctx.url, &prefix, &exe, &flock).await?;
    Ok(section(plan, &rounds, &marks, &left, &alone))
}

/// The steps of one `run`, µs, from its timing file.
type Steps = HashMap<String, u64>;

/// Every run's steps in a timing file, by `run` PID.
fn read_marks(path: &Path) -> HashMap<u32, Steps> {
    let mut runs: HashMap<u32, Steps> = HashMap::new();
    let text = std::fs::read_to_string(path).unwrap_or_default();
    for line in text.lines() {
        let mut parts = line.split_whitespace();
        let (Some(pid), Some(step), Some(us)) = (parts.next(), parts.next(), parts.next()) else {
            continue;
        };
        if let (Ok(pid), Ok(us)) = (pid.parse(), us.parse()) {
            runs.entry(pid).or_default().insert(step.to_owned(), us);
        }
    }
    runs
}

/// One tool's round: `plan.jobs` jobs built by `command`, `plan.parallel`
/// at a time, the counter reset to 0 first.
async fn stampede(
    dir: &Path,
    plan: &Plan,
    command: impl Fn() -> tokio::process::Command,
) -> Result<Round, Failure> {
    let counter = dir.join("counter");
    std::fs::write(&counter, "0\n").map_err(|e| io_failure("write", &counter, &e))?;
    let deadline = tokio::time::Instant::now() + plan.bound();
    let started = Instant::now();
    let mut running = FuturesUnordered::new();
    let mut jobs = Vec::with_capacity(plan.jobs);
    let mut failed = 0;
    let mut next = 0;
    while next < plan.jobs || !running.is_empty() {
        while next < plan.jobs && running.len() < plan.parallel {
            let mut cmd = command();
            cmd.current_dir(dir)
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(Stdio::inherit())
                .kill_on_drop(true);
            let spawned = monotonic_ns() / 1000;
            let mut child = cmd.spawn().map_err(|e| {
                Failure::with_code(exit::SOFTWARE, format!("cannot start a job: {e}"))
            })?;
            let pid = child.id().unwrap_or(0);
            running.push(async move {
                let status = child.wait().await;
                Job {
                    pid,
                    spawned,
                    reaped: monotonic_ns() / 1000,
                    ok: status.is_ok_and(|s| s.success()),
                }
            });
            next += 1;
        }
        match tokio::time::timeout_at(deadline, running.next()).await {
            Ok(Some(job)) => {
                failed += usize::from(!job.ok);
                jobs.push(job);
            }
            Ok(None) => {}
            Err(_) => {
                // Dropping the futures kills the jobs left (kill_on_drop, by PID).
                failed += running.len() + plan.jobs - next;
                break;
            }
        }
    }
    let wall = started.elapsed();
    let counter = std::fs::read_to_string(&counter)
        .ok()
        .and_then(|c| c.trim().parse().ok())
        .unwrap_or(-1);
    Ok(Round {
        wall,
        counter,
        failed,
        jobs,
    })
}

/// One run alone of each tool, `plan.alone` times in turn: (wall, CPU) of
/// each run, leasehold's then flock's.
async fn alone(
    dir: &Path,
    plan: &Plan,
    url: &str,
    prefix: &str,
    exe: &Path,
    flock: &Path,
) -> Result<[Vec<(Duration, Duration)>; 2], Failure> {
    let (dir, url, prefix) = (dir.to_owned(), url.to_owned(), prefix.to_owned());
    let (exe, flock, runs) = (exe.to_owned(), flock.to_owned(), plan.alone);
    tokio::task::spawn_blocking(move || {
        let mut out = [Vec::new(), Vec::new()];
        // One warm-up of each first, uncounted.
        for i in 0..=runs {
            let mut lh = std::process::Command::new(&exe);
            lh.args([
                "--url", &url, "--prefix", &prefix, "-q", "run", "--ttl", TTL,
            ])
            .args(["one", "--", "true"]);
            let mut fl = std::process::Command::new(&flock);
            fl.arg(dir.join("one")).arg("true");
            for (k, cmd) in [lh, fl].iter_mut().enumerate() {
                let took = timed(cmd.current_dir(&dir))?;
                if i > 0 {
                    out[k].push(took);
                }
            }
        }
        Ok(out)
    })
    .await
    .map_err(|e| Failure::with_code(exit::SOFTWARE, format!("the alone runs failed: {e}")))?
}

/// Runs `cmd` to its end: its wall time and its CPU time (user + system,
/// with its children's), from the bench's RUSAGE_CHILDREN around it. Only
/// this child is reaped meanwhile: the scenario runs nothing else then.
fn timed(cmd: &mut std::process::Command) -> Result<(Duration, Duration), Failure> {
    use nix::sys::resource::{UsageWho, getrusage};
    let cpu = || {
        getrusage(UsageWho::RUSAGE_CHILDREN).map_or(Duration::ZERO, |u| {
            let t = |tv: nix::sys::time::TimeVal| {
                Duration::from_secs(u64::try_from(tv.tv_sec()).unwrap_or(0))
                    + Duration::from_micros(u64::try_from(tv.tv_usec()).unwrap_or(0))
            };
            t(u.user_time()) + t(u.system_time())
        })
    };
    let before = cpu();
    let started = Instant::now();
    let status = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .status()
        .map_err(|e| Failure::with_code(exit::SOFTWARE, format!("cannot run {cmd:?}: {e}")))?;
    let wall = started.elapsed();
    if !status.success() {
        return Err(Failure::with_code(
            exit::SOFTWARE,
            format!("{cmd:?} failed: {status}"),
        ));
    }
    Ok((wall, cpu().saturating_sub(before)))
}

/// The breakdown of leasehold's jobs over every round, µs per step:
/// medians of each.
#[derive(Debug, Default)]
struct Breakdown {
    /// Spawned by the bench -> `run` entered (exec, runtime).
    startup: Vec<f64>,
    /// `run` entered -> connected.
    connect: Vec<f64>,
    /// Connected -> acquired (mostly the other jobs' turns).
    wait: Vec<f64>,
    /// Acquired -> the command's exec.
    spawn: Vec<f64>,
    /// The command's exec -> its exit seen by `run`.
    command: Vec<f64>,
    /// Its exit -> the release answered.
    release: Vec<f64>,
    /// Its exit -> nothing of its group left (one look at /proc).
    leftovers: Vec<f64>,
    /// The release answered -> the next holder acquired.
    handoff: Vec<f64>,
    /// One command's exit -> the next command's exec (the critical path).
    between: Vec<f64>,
    /// Released -> reaped by the bench.
    tail: Vec<f64>,
}

impl Breakdown {
    /// From the rounds' jobs and their marks.
    fn of(rounds: &[(Round, Round)], marks: &[HashMap<u32, Steps>]) -> Breakdown {
        let mut b = Breakdown::default();
        for ((l, _), marks) in rounds.iter().zip(marks) {
            let mut held: Vec<&Steps> = Vec::new();
            for job in &l.jobs {
                let Some(s) = marks.get(&job.pid) else {
                    continue;
                };
                let d = |from: u64, to: Option<&u64>| to.map(|t| t.saturating_sub(from) as f64);
                if let Some(v) = d(job.spawned, s.get("start")) {
                    b.startup.push(v);
                }
                let step = |a: &str, z: &str| s.get(a).and_then(|a| d(*a, s.get(z)));
                b.connect.extend(step("start", "connected"));
                b.wait.extend(step("connected", "acquired"));
                b.spawn.extend(step("acquired", "exec"));
                b.command.extend(step("exec", "exited"));
                b.release.extend(step("exited", "released"));
                b.leftovers.extend(step("exited", "group-gone"));
                if let Some(r) = s.get("released") {
                    b.tail.push(job.reaped.saturating_sub(*r) as f64);
                }
                if s.contains_key("acquired") {
                    held.push(s);
                }
            }
            held.sort_by_key(|s| s["acquired"]);
            for pair in held.windows(2) {
                let (a, b2) = (pair[0], pair[1]);
                if let (Some(r), Some(q)) = (a.get("released"), b2.get("acquired")) {
                    b.handoff.push(q.saturating_sub(*r) as f64);
                }
                if let (Some(x), Some(e)) = (a.get("exited"), b2.get("exec")) {
                    b.between.push(e.saturating_sub(*x) as f64);
                }
            }
        }
        b
    }

    /// (name, what it covers, median µs) for each step.
    fn rows(&self) -> Vec<(&'static str, &'static str, f64)> {
        vec![
            (
                "startup",
                "bench spawns run -> run entered",
                median(&self.startup),
            ),
            ("connect", "run entered -> connected", median(&self.connect)),
            (
                "wait",
                "connected -> acquired (the others' turns)",
                median(&self.wait),
            ),
            (
                "spawn",
                "acquired -> the command's exec",
                median(&self.spawn),
            ),
            (
                "command",
                "exec -> exit seen (sh + sleep)",
                median(&self.command),
            ),
            (
                "release",
                "exit seen -> release answered",
                median(&self.release),
            ),
            (
                "leftovers",
                "exit seen -> its group found empty (part of release)",
                median(&self.leftovers),
            ),
            (
                "hand-off",
                "release answered -> next acquired",
                median(&self.handoff),
            ),
            (
                "between",
                "exit -> next holder's exec (critical path)",
                median(&self.between),
            ),
            (
                "tail",
                "release answered -> process reaped",
                median(&self.tail),
            ),
        ]
    }
}

/// The median of unsorted `v`; NaN when empty.
fn median(v: &[f64]) -> f64 {
    percentile_of(v, 50.0)
}

/// Percentile `p` of unsorted `v`; NaN when empty.
fn percentile_of(v: &[f64], p: f64) -> f64 {
    let mut v = v.to_vec();
    v.sort_by(f64::total_cmp);
    percentile(&v, p).unwrap_or(f64::NAN)
}

/// The section: figures, breakdown, the runs alone.
fn section(
    plan: &Plan,
    rounds: &[(Round, Round)],
    marks: &[HashMap<u32, Steps>],
    left: &[String],
    alone: &[Vec<(Duration, Duration)>; 2],
) -> Section {
    let us = |d: Duration| d.as_secs_f64() * 1e6;
    let jobs = plan.jobs as f64;
    let overhead = |r: &Round| us(r.wall) / jobs - us(plan.section);
    let walls: Vec<(f64, f64)> = rounds
        .iter()
        .map(|(l, f)| (us(l.wall), us(f.wall)))
        .collect();
    let ratios: Vec<f64> = walls.iter().map(|(l, f)| l / f).collect();
    let med_l = median(&walls.iter().map(|w| w.0).collect::<Vec<_>>());
    let med_f = median(&walls.iter().map(|w| w.1).collect::<Vec<_>>());
    let over_l = median(&rounds.iter().map(|(l, _)| overhead(l)).collect::<Vec<_>>());
    let over_f = median(&rounds.iter().map(|(_, f)| overhead(f)).collect::<Vec<_>>());
    let off = |r: &Round| (r.counter - plan.jobs as i64).unsigned_abs() as f64;
    let counter_l: f64 = rounds.iter().map(|(l, _)| off(l)).sum();
    let counter_f: f64 = rounds.iter().map(|(_, f)| off(f)).sum();
    let failed_l: usize = rounds.iter().map(|(l, _)| l.failed).sum();
    let failed_f: usize = rounds.iter().map(|(_, f)| f.failed).sum();
    let worst = ratios.iter().copied().fold(f64::NAN, f64::max);

    let micros = |v: f64| Figure::new(v, Unit::Micros);
    let mut rows = vec![
        Row::plain(
            format!(
                "{} jobs, {} at a time: wall (median)",
                plan.jobs, plan.parallel
            ),
            micros(med_l),
        )
        .beside(micros(med_f)),
        Row::plain("per-job overhead (wall / jobs - section)", micros(over_l))
            .beside(micros(over_f)),
        Row::goal(
            "wall: leasehold / flock, worst round",
            Figure::new(worst, Unit::Times),
            Goal::at_most(MAX_RATIO, Unit::Times),
        )
        .because("the watcher and the launcher that never leave the command running unlocked"),
        Row::goal(
            "counter off by (all rounds)",
            Figure::new(counter_l, Unit::Count),
            Goal::at_most(0.0, Unit::Count),
        )
        .beside(Figure::new(counter_f, Unit::Count)),
        Row::goal(
            "jobs that did not exit 0",
            Figure::new(failed_l as f64, Unit::Count),
            Goal::at_most(0.0, Unit::Count),
        )
        .beside(Figure::new(failed_f as f64, Unit::Count)),
        Row::goal(
            "keys left under the jobs' prefix",
            Figure::new(left.len() as f64, Unit::Count),
            Goal::at_most(0.0, Unit::Count),
        ),
    ];
    let breakdown = Breakdown::of(rounds, marks);
    for (name, what, v) in breakdown.rows() {
        rows.push(Row::plain(format!("job, median {name}: {what}"), micros(v)));
    }
    // The median hides the tail the wall time also pays.
    let between_p99 = percentile_of(&breakdown.between, 99.0);
    rows.push(Row::plain(
        "job, p99 between: exit -> next holder's exec (critical path)",
        micros(between_p99),
    ));
    let wall_of = |k: usize| median(&alone[k].iter().map(|t| us(t.0)).collect::<Vec<_>>());
    let cpu_of = |k: usize| median(&alone[k].iter().map(|t| us(t.1)).collect::<Vec<_>>());
    rows.push(
        Row::plain("one run alone: wall (median)", micros(wall_of(0))).beside(micros(wall_of(1))),
    );
    rows.push(
        Row::plain("one run alone: CPU (median)", micros(cpu_of(0))).beside(micros(cpu_of(1))),
    );

    let ratio_list: Vec<String> = ratios.iter().map(|r| format!("{r:.2}x")).collect();
    let notes = vec![
        format!(
            "each job: `sh -c 'read c < counter; sleep {:.3}; echo $((c+1)) > counter'` under \
             `leasehold -q run --ttl {TTL} stampede` (the bench's Redis) or `flock FILE` (a local \
             file); the tools take turns, {} rounds; ratios per round: {}",
            plan.section.as_secs_f64(),
            rounds.len(),
            ratio_list.join(", ")
        ),
        "breakdown from the jobs' own marks (CLOCK_MONOTONIC, feature `bench` only): between = \
         release + hand-off + spawn; flock's per-job overhead is the same figure for flock"
            .into(),
        format!(
            "one run alone: `leasehold -q run --ttl {TTL} one -- true` against `flock FILE true`, \
             {} of each in turn after one warm-up; CPU = user + system of the process and its \
             children",
            plan.alone
        ),
    ];
    let round_json: Vec<Value> = rounds
        .iter()
        .map(|(l, f)| {
            json!({
                "leasehold_wall_ms": l.wall.as_secs_f64() * 1e3,
                "flock_wall_ms": f.wall.as_secs_f64() * 1e3,
                "ratio": us(l.wall) / us(f.wall),
                "leasehold_counter": l.counter,
                "flock_counter": f.counter,
                "leasehold_failed": l.failed,
                "flock_failed": f.failed,
            })
        })
        .collect();
    let steps: serde_json::Map<String, Value> = breakdown
        .rows()
        .into_iter()
        .map(|(name, _, v)| (name.to_owned(), json!(v)))
        .collect();
    let alone_json = |k: usize| {
        json!({
            "wall_us": alone[k].iter().map(|t| us(t.0)).collect::<Vec<_>>(),
            "cpu_us": alone[k].iter().map(|t| us(t.1)).collect::<Vec<_>>(),
        })
    };
    Section {
        key: "run_stampede",
        title: format!(
            "6. run-stampede: {} `leasehold run` jobs of one lock, {} at a time, {} each, against flock(1)",
            plan.jobs,
            plan.parallel,
            crate::output::short(plan.section)
        ),
        peer: Some("flock"),
        rows,
        notes,
        data: json!({
            "plan": plan.to_json(),
            "rounds": round_json,
            "per_job_overhead_us": {"leasehold": over_l, "flock": over_f},
            "breakdown_median_us": steps,
            "between_p99_us": between_p99,
            "keys_left": left,
            "alone": {"leasehold": alone_json(0), "flock": alone_json(1)},
        }),
    }
}

/// `program` on PATH, if there.
fn which(program: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|d| d.join(program))
        .find(|p| p.is_file())
}

/// A failure to `what` `path`.
fn io_failure(what: &str, path: &Path, e: &std::io::Error) -> Failure {
    Failure::with_code(
        exit::SOFTWARE,
        format!("cannot {what} {}: {e}", path.display()),
    )
}
