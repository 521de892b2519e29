//! `leasehold bench`: the benchmarks of the design's performance section,
//! each figure printed beside its target with PASS or SHORT.
//!
//! 1. uncontended acquire+release against the raw floor and rslock, with
//!    Redis commands per acquisition, and the keys 200 names used once leave;
//! 2. one key, 4/16/64 waiter processes, against rslock (Redis commands and
//!    CPU per acquisition too);
//! 3. 10,000 keys, 256 tasks on one client, against the raw scripts;
//! 4. 100,000 leases held on one client, renewed by the watchdog;
//! 5. Redlock over 5 private nodes against one node and against rslock
//!    over the same nodes;
//! 6. `leasehold run` jobs of one lock under a stampede, against flock(1).
//!
//! Every loop is bounded in count and time. With no URL the bench starts a
//! private redis-server (loopback) and kills it, and every worker process,
//! by PID at the end; scenario 5 always starts (and kills) its own nodes.

mod calibration;
mod contended;
mod held;
mod many_keys;
mod once;
mod raw;
mod redlock;
mod report;
mod server;
mod stampede;
mod svg;
mod uncontended;
pub(crate) mod worker;

use std::time::Duration;

use serde_json::{Value, json};

use crate::args::{BenchArgs, Global, Scenario};
use crate::exit::{self, Failure};
use crate::output::{emit, emit_json};
use crate::session::{Stop, Target, plain_connection};

use report::Section;

/// How big and how long each scenario runs.
#[derive(Debug, Clone)]
pub(crate) struct Settings {
    /// Measured ops per implementation per round in scenario 1.
    uncontended_ops: usize,
    /// Rounds in scenario 1.
    uncontended_rounds: usize,
    /// Time bound of one implementation's round in scenario 1.
    uncontended_round_cap: Duration,
    /// Waiter counts in scenario 2.
    waiters: Vec<usize>,
    /// Hold time in scenario 2.
    hold: Duration,
    /// Length of one run in scenario 2.
    contended_run: Duration,
    /// Keys in scenario 3.
    keys: u64,
    /// Tasks in scenario 3.
    tasks: usize,
    /// Length of one round in scenario 3.
    many_keys_run: Duration,
    /// Rounds per implementation in scenario 3.
    many_keys_rounds: usize,
    /// Leases held in scenario 4.
    leases: u32,
    /// Their TTL (renewed every third of it).
    lease_ttl: Duration,
    /// Renewal periods the leases are held for while counting.
    lease_periods: u32,
    /// Measured ops per client per round in scenario 5.
    redlock_ops: usize,
    /// Rounds in scenario 5.
    redlock_rounds: usize,
    /// Scenario 6.
    stampede: stampede::Plan,
}

impl Settings {
    /// The settings `args` ask for.
    fn from_args(args: &BenchArgs) -> Settings {
        let quick = args.quick;
        Settings {
            uncontended_ops: if quick { 200 } else { 1000 },
            uncontended_rounds: if quick { 3 } else { 5 },
            uncontended_round_cap: Duration::from_secs(if quick { 1 } else { 3 }),
            waiters: vec![4, 16, 64],
            hold: Duration::from_micros(200),
            contended_run: args.duration.unwrap_or(if quick {
                Duration::from_millis(600)
            } else {
                Duration::from_secs(3)
            }),
            keys: 10_000,
            tasks: 256,
            many_keys_run: Duration::from_millis(if quick { 500 } else { 1500 }),
            many_keys_rounds: if quick { 1 } else { 2 },
            leases: args.leases.unwrap_or(if quick { 10_000 } else { 100_000 }),
            lease_ttl: Duration::from_secs(3),
            lease_periods: if quick { 2 } else { 3 },
            redlock_ops: if quick { 200 } else { 1000 },
            redlock_rounds: if quick { 3 } else { 5 },
            stampede: stampede::Plan {
                jobs: args
                    .jobs
                    .map_or(if quick { 40 } else { 200 }, |n| n as usize),
                parallel: args
                    .parallel
                    .map_or(if quick { 10 } else { 40 }, |n| n as usize),
                section: args.section.unwrap_or(Duration::from_millis(10)),
                rounds: args
                    .rounds
                    .map_or(if quick { 1 } else { 3 }, |n| n as usize),
                alone: if quick { 5 } else { 20 },
            },
        }
    }

    /// The settings as JSON.
    fn to_json(&self) -> Value {
        json!({
            "uncontended_ops_per_round": self.uncontended_ops,
            "uncontended_rounds": self.uncontended_rounds,
            "waiters": self.waiters,
            "hold_us": self.hold.as_micros(),
            "contended_run_ms": self.contended_run.as_millis(),
            "keys": self.keys,
            "tasks": self.tasks,
            "many_keys_round_ms": self.many_keys_run.as_millis(),
            "many_keys_rounds": self.many_keys_rounds,
            "leases": self.leases,
            "lease_ttl_ms": self.lease_ttl.as_millis(),
            "lease_periods": self.lease_periods,
            "redlock_nodes": redlock::NODES,
            "redlock_ops_per_round": self.redlock_ops,
            "redlock_rounds": self.redlock_rounds,
            "names_used_once": once::NAMES,
            "names_used_once_counted_after_ms": once::AFTER.as_millis(),
            "run_stampede": self.stampede.to_json(),
        })
    }
}

/// What every scenario needs.
pub(crate) struct Context<'a> {
    /// The Redis URL.
    url: &'a str,
    /// Key prefix.
    prefix: &'a str,
    /// True when the server is our private one (CONFIG RESETSTAT allowed).
    private: bool,
    /// Round-trip time measured at the start.
    rtt: Duration,
    /// Sizes and durations.
    settings: &'a Settings,
}

/// One line of a latency plot: microseconds, sorted.
#[derive(Debug, Clone)]
pub(crate) struct Series {
    /// The panel it is drawn in.
    panel: String,
    /// Its legend.
    label: String,
    /// The samples.
    sorted_us: Vec<f64>,
}

impl Series {
    /// The line `label` in `panel`, from sorted durations.
    fn of(panel: &str, label: &str, sorted: &[Duration]) -> Series {
        Series {
            panel: panel.into(),
            label: label.into(),
            sorted_us: sorted.iter().map(|d| d.as_secs_f64() * 1e6).collect(),
        }
    }
}

/// `leasehold bench`. Exits 0 when the benchmarks ran, whatever the verdicts:
/// a SHORT figure is a finding, not a failure of the tool.
pub(crate) async fn bench(global: &Global, args: BenchArgs) -> Result<u8, Failure> {
    let mut stop = Stop::install()?;
    let target = Target::open(global).await?;
    let settings = Settings::from_args(&args);
    let selected: Vec<Scenario> = match args.scenario {
        Some(one) => vec![one],
        None => vec![
            Scenario::Uncontended,
            Scenario::Contended,
            Scenario::ManyKeys,
            Scenario::HeldLeases,
            Scenario::Redlock,
            Scenario::RunStampede,
        ],
    };
    if !global.json {
        emit(&format!(
            "leasehold bench{}: {} on {}",
            if args.quick { " --quick" } else { "" },
            selected
                .iter()
                .map(|s| scenario_name(*s))
                .collect::<Vec<_>>()
                .join(", "),
            target.place()
        ));
    }
    let quiet = calibration::Quiet {
        rtt: args.quiet_rtt.unwrap_or(calibration::Quiet::DEFAULT.rtt),
        load_percent: args
            .quiet_load
            .map_or(calibration::Quiet::DEFAULT.load_percent, f64::from),
    };
    let result = tokio::select! {
        r = run_all(&target, global, &settings, &selected, quiet) => r,
        code = stop.next() => Err(Failure::with_code(code, "bench interrupted")),
    };
    // Stops the private server (the workers are gone with their futures).
    drop(target);
    let (mut machine, sections, series, calibration) = result?;
    let judged = calibration.noisy().is_none();
    let sections: Vec<Section> = if judged {
        sections
    } else {
        sections.into_iter().map(Section::unjudged).collect()
    };
    // The machine is shared: how busy it was at the end says as much about
    // the figures as how busy it was at the start.
    machine["load_1min_at_end"] = json!(load_average());
    let (pass, short) = report::tally(&sections);
    if let Some(path) = &args.svg {
        let title = format!(
            "leasehold bench: latency CDFs ({} x {}, redis {})",
            machine["nproc"],
            machine["cpu"].as_str().unwrap_or("?"),
            machine["redis_version"].as_str().unwrap_or("?")
        );
        std::fs::write(path, svg::render(&title, &series)).map_err(|e| {
            Failure::with_code(
                exit::SOFTWARE,
                format!("cannot write the SVG to {}: {e}", path.display()),
            )
        })?;
    }
    if global.json {
        let scenarios: serde_json::Map<String, Value> = sections
            .iter()
            .map(|s| (s.key.to_owned(), s.to_json()))
            .collect();
        let summary = if judged {
            json!({"judged": true, "pass": pass, "short": short})
        } else {
            json!({"judged": false, "verdict": format!("noisy: floors not judged ({})",
                calibration.noisy().unwrap_or_default())})
        };
        emit_json(&json!({
            "machine": machine,
            "calibration": calibration.to_json(),
            "settings": settings.to_json(),
            "quick": args.quick,
            "scenarios": scenarios,
            "summary": summary,
        }));
    } else {
        emit(&machine_line(&machine));
        emit(&calibration.line());
        for section in &sections {
            emit("");
            emit(&section.to_human());
        }
        emit("");
        let plot = args
            .svg
            .as_ref()
            .map(|p| format!("; wait-time plot written to {}", p.display()))
            .unwrap_or_default();
        match calibration.noisy() {
            None => emit(&format!(
                "{pass} figures PASS, {short} SHORT of their targets{plot}"
            )),
            Some(why) => emit(&format!("noisy: floors not judged ({why}){plot}")),
        }
    }
    Ok(0)
}

/// The scenario's name on the command line.
fn scenario_name(s: Scenario) -> &'static str {
    match s {
        Scenario::Uncontended => "uncontended",
        Scenario::Contended => "contended",
        Scenario::ManyKeys => "many-keys",
        Scenario::HeldLeases => "held-leases",
        Scenario::Redlock => "redlock",
        Scenario::RunStampede => "run-stampede",
    }
}

/// Runs the selected scenarios; sections come back in scenario order.
async fn run_all(
    target: &Target,
    global: &Global,
    settings: &Settings,
    selected: &[Scenario],
    quiet: calibration::Quiet,
) -> Result<(Value, Vec<Section>, Vec<Series>, calibration::Calibration), Failure> {
    let mut admin = plain_connection(&target.url).await?;
    let rtt = server::round_trip(&mut admin, 500).await?;
    // Before any scenario: the machine as the figures will find it.
    let calibration = calibration::Calibration::measure(rtt, quiet).await;
    let machine = machine(&mut admin, rtt).await?;
    let ctx = Context {
        url: &target.url,
        prefix: &global.prefix,
        private: target.is_private(),
        rtt,
        settings,
    };
    // Started first, so a missing redis-server fails the run before the
    // long scenarios, not after them.
    let nodes = if selected.contains(&Scenario::Redlock) {
        Some(redlock::Nodes::start().await?)
    } else {
        None
    };
    let mut sections = Vec::new();
    let mut series = Vec::new();
    // Held leases first, while the heap is fresh, so its RSS growth is the
    // leases' own and not memory freed by an earlier scenario being reused.
    if selected.contains(&Scenario::HeldLeases) {
        sections.push(held::run(&ctx).await?);
    }
    if selected.contains(&Scenario::Uncontended) {
        let (section, s) = uncontended::run(&ctx).await?;
        sections.push(section);
        series.extend(s);
    }
    if selected.contains(&Scenario::Contended) {
        let (section, s) = contended::run(&ctx).await?;
        sections.push(section);
        series.extend(s);
    }
    if selected.contains(&Scenario::ManyKeys) {
        sections.push(many_keys::run(&ctx).await?);
    }
    if let Some(nodes) = &nodes {
        let (section, s) = redlock::run(&ctx, nodes).await?;
        sections.push(section);
        series.extend(s);
    }
    if selected.contains(&Scenario::RunStampede) {
        sections.push(stampede::run(&ctx).await?);
    }
    let order = [
        "uncontended",
        "contended",
        "many_keys",
        "held_leases",
        "redlock",
        "run_stampede",
    ];
    sections.sort_by_key(|s| order.iter().position(|k| *k == s.key));
    Ok((machine, sections, series, calibration))
}

/// The machine the figures come from.
async fn machine(
    admin: &mut redis::aio::MultiplexedConnection,
    rtt: Duration,
) -> Result<Value, Failure> {
    let cpuinfo = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
    let cpu = cpuinfo
        .lines()
        .find_map(|l| l.strip_prefix("model name"))
        .and_then(|l| l.split_once(':'))
        .map_or("unknown", |(_, v)| v.trim())
        .to_owned();
    let load = load_average();
    Ok(json!({
        "nproc": std::thread::available_parallelism().map_or(0, usize::from),
        "cpu": cpu,
        "load_1min_at_start": load,
        "redis_version": server::version(admin).await?,
        "build": if cfg!(debug_assertions) { "debug" } else { "release" },
        "rtt_us": rtt.as_secs_f64() * 1e6,
    }))
}

/// The 1-minute load average (/proc/loadavg), `?` when unreadable.
fn load_average() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .ok()
        .and_then(|l| l.split_whitespace().next().map(str::to_owned))
        .unwrap_or_else(|| "?".to_owned())
}

/// The machine as one line for people.
fn machine_line(m: &Value) -> String {
    let debug = if m["build"] == "debug" {
        " -- a DEBUG build: build with --release for figures worth comparing"
    } else {
        ""
    };
    format!(
        "machine: {} cores, {}, redis {}, load {} at start, {} at end; RTT (PING p50) {:.1}us; {} build{debug}",
        m["nproc"],
        m["cpu"].as_str().unwrap_or("?"),
        m["redis_version"].as_str().unwrap_or("?"),
        m["load_1min_at_start"].as_str().unwrap_or("?"),
        m["load_1min_at_end"].as_str().unwrap_or("?"),
        m["rtt_us"].as_f64().unwrap_or(f64::NAN),
        m["build"].as_str().unwrap_or("?"),
    )
}
