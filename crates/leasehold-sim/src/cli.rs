//! The command line of `leasehold-sim`.
//!
//! ```text
//! leasehold-sim --seed N [--trace] [--set key=value ...]   replay one schedule
//! leasehold-sim --seeds K [--from S] [--jobs J]            run K schedules
//! leasehold-sim --minutes M [--from S] [--jobs J]          run schedules for M minutes
//! ```
//!
//! Exit status: 0 when no SAFE schedule broke an invariant, 1 otherwise,
//! 2 for bad arguments.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use leasehold_sim::schedule::{self, Config, Outcome};

struct Args {
    seed: Option<u64>,
    seeds: Option<u64>,
    minutes: Option<f64>,
    from: u64,
    jobs: usize,
    trace: bool,
    shrink: bool,
    first: bool,
    twice: bool,
    regressions: Option<String>,
    sets: Vec<(String, String)>,
    /// Only schedules drawn on this topology (its name, lower case).
    topology: Option<String>,
}

fn parse() -> Result<Args, String> {
    let mut args = Args {
        seed: None,
        seeds: None,
        minutes: None,
        from: 1,
        jobs: 1,
        trace: false,
        shrink: true,
        first: false,
        twice: false,
        regressions: None,
        topology: None,
        sets: Vec::new(),
    };
    let mut it = std::env::args().skip(1);
    while let Some(arg) = it.next() {
        let mut value = |flag: &str| it.next().ok_or(format!("{flag} needs a value"));
        match arg.as_str() {
            "--seed" => args.seed = Some(number(&value("--seed")?, "--seed")?),
            "--seeds" => args.seeds = Some(number(&value("--seeds")?, "--seeds")?),
            "--minutes" => {
                let v = value("--minutes")?;
                args.minutes = Some(
                    v.parse()
                        .map_err(|_| format!("--minutes: not a number: {v}"))?,
                );
            }
            "--from" => args.from = number(&value("--from")?, "--from")?,
            "--jobs" => args.jobs = number(&value("--jobs")?, "--jobs")?.max(1) as usize,
            "--trace" => args.trace = true,
            "--no-shrink" => args.shrink = false,
            "--first" => args.first = true,
            "--twice" => args.twice = true,
            "--topology" => args.topology = Some(value("--topology")?.to_ascii_lowercase()),
            "--regressions" => args.regressions = Some(value("--regressions")?),
            "--set" => {
                let v = value("--set")?;
                let (k, val) = v
                    .split_once('=')
                    .ok_or(format!("--set takes key=value, got {v}"))?;
                args.sets.push((k.to_owned(), val.to_owned()));
            }
            "-h" | "--help" => return Err(String::new()),
            other => return Err(format!("unknown argument {other}")),
        }
    }
    if args.seed.is_none()
        && args.seeds.is_none()
        && args.minutes.is_none()
        && args.regressions.is_none()
    {
        return Err("give --seed N, --seeds K or --minutes M".into());
    }
    Ok(args)
}

fn number(v: &str, flag: &str) -> Result<u64, String> {
    v.parse().map_err(|_| format!("{flag}: not a number: {v}"))
}

const USAGE: &str = "usage: leasehold-sim --seed N [--trace] [--set key=value ...] [--no-shrink]
       leasehold-sim --seeds K [--from S] [--jobs J]
       leasehold-sim --minutes M [--from S] [--jobs J]
       leasehold-sim --regressions FILE                      replay the seeds of FILE (one per line: seed, then why)
       --twice: run every schedule twice and fail if the two histories differ (determinism)
       --topology T: only the seeds drawn on T (single, replicated, redlock, cluster, sentinel)
       --first: stop at the first violation in a SAFE schedule (prints its seed and the time taken)
with --seed N --trace: LEASEHOLD_SIM_WIRE=1 adds every request a server ran and its reply (WIRE lines);
       LEASEHOLD_SIM_LOG=debug (any tracing filter) adds the library's own events (LIB lines)
keys for --set: cluster=0 (a schedule drawn on a Redis Cluster stays on one server) processes tasks names ops ttl_ms length_ms delay_ms slow reset_before reset_after injected (count kept)
       clocks=continuous (no tick, no drift) or clocks=<tick in us> (every node's clock ticks so)
       seam=wire (one server, Replicated and Redlock on the library-level seam, sim:// URLs, as seeds found before the seam moved to the socket) or seam=socket (the default)";

/// The configuration of `seed` with the `--set` changes.
fn config(seed: u64, sets: &[(String, String)]) -> Result<Config, String> {
    let clusters = !sets.iter().any(|(k, v)| k == "cluster" && v == "0");
    let mut c = Config::draw_with(seed, clusters);
    for (k, v) in sets {
        let n = || {
            v.parse::<u64>()
                .map_err(|_| format!("--set {k}: not a number: {v}"))
        };
        let f = || {
            v.parse::<f64>()
                .map_err(|_| format!("--set {k}: not a number: {v}"))
        };
        match k.as_str() {
            "processes" => c.processes = n()? as usize,
            "tasks" => c.tasks = n()? as usize,
            "names" => c.names = n()? as usize,
            "ops" => c.ops = n()? as usize,
            "ttl_ms" => c.ttl = Duration::from_millis(n()?),
            "length_ms" => c.length = Duration::from_millis(n()?),
            "delay_ms" => c.faults.max_delay_ms = n()?,
            "slow" => c.faults.slow = f()?,
            "reset_before" => c.faults.reset_before = f()?,
            "reset_after" => c.faults.reset_after = f()?,
            "close_at_deadline" => c.close_at_deadline = f()?,
            "twice" => c.faults.twice = f()?,
            "breaks" if v.is_empty() => c.breaks.clear(),
            // Applied by the draw above.
            "cluster" if v == "0" => {}
            "foreign" if v.is_empty() => c.foreign = None,
            // One server, Replicated and Redlock on the library-level seam,
            // as before it moved to the socket (its seeds replay so).
            "seam" if v == "wire" => c.wire_seam = true,
            "seam" if v == "socket" => c.wire_seam = false,
            "clocks" if v == "continuous" => c.clocks.iter_mut().for_each(|c| *c = (0, 0)),
            // Every node's clock ticks by this many µs (its drift kept).
            "clocks" => {
                let tick = n()?;
                c.clocks.iter_mut().for_each(|c| c.0 = tick);
            }
            // The schedule as drawn before issue 32 added duplicate
            // deliveries, breaks and ticking clocks (its seeds replay so).
            "new_ground" if v == "0" => {
                c.faults.twice = 0.0;
                c.breaks.clear();
                c.clocks.iter_mut().for_each(|c| *c = (0, 0));
                c.foreign = None;
            }
            "injected" => {
                let keep: Vec<usize> = if v.is_empty() {
                    Vec::new()
                } else {
                    v.split(',')
                        .map(|i| {
                            i.parse()
                                .map_err(|_| format!("--set injected: indexes, got {v}"))
                        })
                        .collect::<Result<_, _>>()?
                };
                c.injected = keep
                    .iter()
                    .filter_map(|&i| c.injected.get(i).cloned())
                    .collect();
            }
            other => return Err(format!("--set: unknown key {other}")),
        }
    }
    Ok(c)
}

pub(crate) fn main() -> i32 {
    let args = match parse() {
        Ok(args) => args,
        Err(e) => {
            if !e.is_empty() {
                eprintln!("leasehold-sim: {e}");
            }
            eprintln!("{USAGE}");
            return 2;
        }
    };
    if let Some(seed) = args.seed {
        return replay(seed, &args);
    }
    if let Some(file) = &args.regressions {
        return regressions(file);
    }
    many(&args)
}

fn replay(seed: u64, args: &Args) -> i32 {
    let config = match config(seed, &args.sets) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("leasehold-sim: {e}");
            return 2;
        }
    };
    let started = Instant::now();
    let outcome = schedule::run(&config, args.trace);
    if let Some(full) = &outcome.full {
        for line in full {
            println!("{line}");
        }
    }
    println!("config: {:?}", outcome.config);
    println!(
        "seed {seed}: {} acquisitions, {} operations, {} server commands, {} events in {:.2?}",
        outcome.acquisitions,
        outcome.operations,
        outcome.commands,
        outcome.events,
        started.elapsed()
    );
    println!("history digest {:016x}", outcome.digest);
    if outcome.violations.is_empty() {
        println!("no violations");
        return 0;
    }
    report(&outcome);
    if args.shrink {
        shrink(seed, args, &outcome);
    }
    let open_only = outcome
        .violations
        .iter()
        .all(|v| leasehold_sim::history::OPEN_FINDINGS.contains(&v.invariant));
    i32::from(config.unsafe_label().is_none() && !open_only)
}

fn report(outcome: &Outcome) {
    if outcome.full.is_none() {
        println!("--- the last {} events:", outcome.recent.len());
        for line in &outcome.recent {
            println!("{line}");
        }
    }
    let label = outcome
        .config
        .unsafe_label()
        .map_or("SAFE".to_owned(), |l| format!("UNSAFE ({l}, documented)"));
    println!(
        "--- {} violations in a {label} schedule:",
        outcome.violations.len()
    );
    for v in &outcome.violations {
        println!("{}: {}", v.invariant, v.detail);
    }
}

/// Tries smaller versions of a failing schedule and prints the smallest
/// that still breaks the same invariant, with the command to replay it.
fn shrink(seed: u64, args: &Args, failed: &Outcome) {
    let invariant = failed.violations[0].invariant;
    let fails = |sets: &[(String, String)]| -> bool {
        config(seed, sets).is_ok_and(|c| {
            schedule::run(&c, false)
                .violations
                .iter()
                .any(|v| v.invariant == invariant)
        })
    };
    let mut sets = args.sets.clone();
    let base = &failed.config;
    let mut candidates: Vec<(&str, Vec<String>)> = vec![
        ("injected", {
            let mut v = vec![String::new()];
            for i in 0..base.injected.len() {
                v.push(i.to_string());
            }
            v
        }),
        ("reset_before", vec!["0".into()]),
        ("reset_after", vec!["0".into()]),
        ("slow", vec!["0".into()]),
        ("twice", vec!["0".into()]),
        ("breaks", vec![String::new()]),
        ("foreign", vec![String::new()]),
        ("clocks", vec!["continuous".into()]),
    ];
    for (key, max) in [
        ("processes", base.processes),
        ("tasks", base.tasks),
        ("names", base.names),
        ("ops", base.ops),
    ] {
        candidates.push((key, (1..max).map(|n| n.to_string()).collect()));
    }
    for (key, values) in candidates {
        for value in values {
            let mut trial = sets.clone();
            trial.retain(|(k, _)| k != key);
            trial.push((key.to_owned(), value));
            if fails(&trial) {
                sets = trial;
                break;
            }
        }
    }
    let flags: Vec<String> = sets.iter().map(|(k, v)| format!("--set {k}={v}")).collect();
    println!(
        "--- shrunk: still breaks '{invariant}' with: leasehold-sim --seed {seed} --trace {}",
        flags.join(" ")
    );
}

fn many(args: &Args) -> i32 {
    let started = Instant::now();
    let budget = args.minutes.map(|m| Duration::from_secs_f64(m * 60.0));
    let limit = args.seeds.unwrap_or(u64::MAX);
    let next = std::sync::atomic::AtomicU64::new(0);
    let found = std::sync::atomic::AtomicBool::new(false);
    let results = std::sync::Mutex::new(Vec::<Outcome>::new());
    std::thread::scope(|scope| {
        for _ in 0..args.jobs {
            scope.spawn(|| {
                loop {
                    if budget.is_some_and(|b| started.elapsed() >= b)
                        || found.load(std::sync::atomic::Ordering::Relaxed)
                    {
                        return;
                    }
                    let i = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                    if i >= limit {
                        return;
                    }
                    let seed = args.from + i;
                    let config = Config::draw(seed);
                    if let Some(t) = &args.topology {
                        let drawn = format!("{:?}", config.topology).to_ascii_lowercase();
                        if !drawn.starts_with(t.as_str()) {
                            continue;
                        }
                    }
                    let mut outcome = schedule::run(&config, false);
                    if args.twice {
                        let again = schedule::run(&Config::draw(seed), false);
                        if again.digest != outcome.digest {
                            outcome.violations.push(leasehold_sim::history::Violation {
                                invariant: "a seed replayed differently",
                                detail: format!(
                                    "history digests {:016x} and {:016x}",
                                    outcome.digest, again.digest
                                ),
                            });
                        }
                    }
                    if !outcome.violations.is_empty() {
                        let label = outcome.config.unsafe_label();
                        // The first that is not an open finding, if any.
                        let shown = outcome
                            .violations
                            .iter()
                            .find(|v| !leasehold_sim::history::OPEN_FINDINGS.contains(&v.invariant))
                            .unwrap_or(&outcome.violations[0]);
                        println!(
                            "seed {seed}: {} ({}){}",
                            shown.invariant,
                            shown.detail,
                            label.map_or(String::new(), |l| format!(" [documented unsafe: {l}]"))
                        );
                        let determinism = outcome
                            .violations
                            .iter()
                            .any(|v| v.invariant == "a seed replayed differently");
                        let open_only = outcome
                            .violations
                            .iter()
                            .all(|v| leasehold_sim::history::OPEN_FINDINGS.contains(&v.invariant));
                        if args.first && ((label.is_none() && !open_only) || determinism) {
                            println!(
                                "first violation: seed {seed} after {:.1} s and {} schedules",
                                started.elapsed().as_secs_f64(),
                                i + 1
                            );
                            found.store(true, std::sync::atomic::Ordering::Relaxed);
                        }
                    }
                    let mut light = outcome;
                    light.recent.clear();
                    results
                        .lock()
                        .unwrap_or_else(|e| e.into_inner())
                        .push(light);
                }
            });
        }
    });
    let results = results.into_inner().unwrap_or_else(|e| e.into_inner());
    let wall = started.elapsed().as_secs_f64();
    let acquisitions: u64 = results.iter().map(|o| o.acquisitions).sum();
    let operations: u64 = results.iter().map(|o| o.operations).sum();
    let commands: u64 = results.iter().map(|o| o.commands).sum();
    let scripts: u64 = results.iter().map(|o| o.scripts).sum();
    let cpu = cpu_seconds();
    let mut safe: BTreeMap<&str, Vec<u64>> = BTreeMap::new();
    let mut unsafe_: BTreeMap<(&str, &str), u64> = BTreeMap::new();
    let mut unsafe_runs = 0;
    for o in &results {
        match o.config.unsafe_label() {
            None => {
                for v in &o.violations {
                    let seeds = safe.entry(v.invariant).or_default();
                    if seeds.last() != Some(&o.config.seed) {
                        seeds.push(o.config.seed);
                    }
                }
            }
            Some(label) => {
                unsafe_runs += 1;
                for v in &o.violations {
                    // Determinism is owed by every schedule.
                    if v.invariant == "a seed replayed differently" {
                        safe.entry(v.invariant).or_default().push(o.config.seed);
                        continue;
                    }
                    *unsafe_.entry((label, v.invariant)).or_default() += 1;
                }
            }
        }
    }
    println!(
        "schedules run: {} ({} with documented-unsafe faults)",
        results.len(),
        unsafe_runs
    );
    println!(
        "simulated acquisitions: {acquisitions}; lock operations: {operations} calls of the API, \
         {scripts} scripts run by the servers; server commands: {commands}"
    );
    println!(
        "wall {wall:.1} s on {} thread(s): {:.1} schedules/s, {:.0} API calls/s, {:.0} scripts/s, {:.0} acquisitions/s",
        args.jobs,
        results.len() as f64 / wall,
        operations as f64 / wall,
        scripts as f64 / wall,
        acquisitions as f64 / wall
    );
    if let Some(cpu) = cpu {
        println!(
            "per CPU second ({cpu:.1} s of CPU): {:.0} API calls, {:.0} scripts, {:.0} acquisitions",
            operations as f64 / cpu,
            scripts as f64 / cpu,
            acquisitions as f64 / cpu
        );
    }
    let open: BTreeMap<&str, Vec<u64>> = safe
        .iter()
        .filter(|(inv, _)| leasehold_sim::history::OPEN_FINDINGS.contains(inv))
        .map(|(inv, seeds)| (*inv, seeds.clone()))
        .collect();
    safe.retain(|inv, _| !leasehold_sim::history::OPEN_FINDINGS.contains(inv));
    let mut topologies: BTreeMap<String, (u64, u64)> = BTreeMap::new();
    for o in &results {
        let t = topologies
            .entry(format!("{:?}", o.config.topology))
            .or_default();
        t.0 += 1;
        t.1 += o.acquisitions;
    }
    for (topology, (schedules, acquisitions)) in &topologies {
        println!("  {topology}: {schedules} schedules, {acquisitions} acquisitions");
    }
    let drawn = |f: &dyn Fn(&Outcome) -> bool| results.iter().filter(|o| f(o)).count();
    println!(
        "faults drawn: duplicate deliveries in {} schedules ({} requests), operator breaks in {}, \
         ticking server clocks in {}, drifting ones in {}",
        drawn(&|o| o.config.faults.twice > 0.0),
        results.iter().map(|o| o.duplicates).sum::<u64>(),
        drawn(&|o| !o.config.breaks.is_empty()),
        drawn(&|o| o.config.clocks.iter().any(|c| c.0 > 0)),
        drawn(&|o| o.config.clocks.iter().any(|c| c.1 != 0)),
    );
    for (inv, seeds) in &open {
        let shown: Vec<String> = seeds.iter().take(10).map(u64::to_string).collect();
        println!(
            "open finding (known, not failed; docs/SAFETY.md): {inv}: {} SAFE schedules (seeds {})",
            seeds.len(),
            shown.join(" ")
        );
    }
    if safe.is_empty() {
        println!("violations in SAFE schedules: 0");
    } else {
        println!("violations in SAFE schedules, by invariant:");
        for (inv, seeds) in &safe {
            let shown: Vec<String> = seeds.iter().take(10).map(u64::to_string).collect();
            println!(
                "  {inv}: {} schedules (seeds {})",
                seeds.len(),
                shown.join(" ")
            );
        }
    }
    for ((label, inv), n) in &unsafe_ {
        println!("  documented unsafe ({label}): {inv}: {n}");
    }
    i32::from(!safe.is_empty())
}

/// Replays every seed of `file` (a line: the seed, then what it found;
/// `#` starts a comment); fails if any breaks an invariant again.
fn regressions(file: &str) -> i32 {
    let text = match std::fs::read_to_string(file) {
        Ok(text) => text,
        Err(e) => {
            eprintln!("leasehold-sim: --regressions {file}: {e}");
            return 2;
        }
    };
    let mut failed = 0;
    let mut run = 0;
    for line in text.lines().map(str::trim) {
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let mut words = line.split_whitespace();
        let Some(Ok(seed)) = words.next().map(str::parse::<u64>) else {
            eprintln!("leasehold-sim: --regressions {file}: not a seed: {line}");
            return 2;
        };
        // `--set key=value` after the seed, as `--seed` takes them.
        let mut sets = Vec::new();
        while let Some("--set") = words.next() {
            match words.next().and_then(|kv| kv.split_once('=')) {
                Some((k, v)) => sets.push((k.to_owned(), v.to_owned())),
                None => {
                    eprintln!("leasehold-sim: --regressions {file}: --set takes key=value: {line}");
                    return 2;
                }
            }
        }
        let config = match config(seed, &sets) {
            Ok(config) => config,
            Err(e) => {
                eprintln!("leasehold-sim: --regressions {file}: {e}");
                return 2;
            }
        };
        run += 1;
        let outcome = schedule::run(&config, false);
        if outcome.violations.is_empty() {
            println!("seed {seed}: ok ({line})");
        } else {
            failed += 1;
            println!("seed {seed}: FAILS AGAIN ({line})");
            report(&outcome);
        }
    }
    println!("{run} regression seeds replayed, {failed} failing");
    i32::from(failed > 0)
}

/// CPU time this process has used (user + system), from /proc/self/stat.
fn cpu_seconds() -> Option<f64> {
    let stat = std::fs::read_to_string("/proc/self/stat").ok()?;
    // Fields after the command name (which may hold spaces) in parentheses.
    let rest = &stat[stat.rfind(')')? + 2..];
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let utime: f64 = fields.get(11)?.parse().ok()?;
    let stime: f64 = fields.get(12)?.parse().ok()?;
    // Clock ticks: 100 per second on Linux (USER_HZ).
    Some((utime + stime) / 100.0)
}
