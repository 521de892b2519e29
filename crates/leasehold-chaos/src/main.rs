//! `leasehold-chaos`: run the safety scenarios (see the library docs).

use std::process::ExitCode;
use std::time::Duration;

use clap::{Parser, Subcommand};
use std::path::PathBuf;

use leasehold_chaos::{
    CommandConfig, RunOptions, SCENARIOS, WorkerConfig, find, run, run_command, run_worker, table,
};

/// Runs leasehold's safety scenarios: worker processes, a fenced resource
/// and real faults.
#[derive(Parser)]
#[command(name = "leasehold-chaos")]
struct Cli {
    #[command(subcommand)]
    command: Option<Command>,
    /// Scenario to run, or `ci` for the deterministic CI set.
    #[arg(long, default_value = "ci")]
    scenario: String,
    /// Run length per scenario (default: each scenario's CI length).
    #[arg(long, value_parser = humantime::parse_duration)]
    duration: Option<Duration>,
    /// Worker processes.
    #[arg(long, default_value_t = 4)]
    workers: u32,
    /// Seed of the workers' sleeps and probes.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// List the scenarios and exit.
    #[arg(long)]
    list: bool,
    /// The `leasehold` binary, for scenarios whose workers are `leasehold
    /// run` (default: `leasehold` next to this binary, as cargo builds it).
    #[arg(long, value_name = "PATH")]
    leasehold: Option<PathBuf>,
}

#[derive(Subcommand)]
enum Command {
    /// One worker process (started by the checker itself).
    #[command(hide = true)]
    Worker(WorkerArgs),
    /// The critical section run by `leasehold run` (started through it).
    #[command(hide = true)]
    Command(CommandArgs),
}

#[derive(clap::Args)]
struct CommandArgs {
    #[arg(long)]
    id: u32,
    #[arg(long)]
    resource_port: u16,
    #[arg(long)]
    started_us: u64,
    #[arg(long)]
    seed: u64,
    #[arg(long)]
    max_sleep_us: u64,
    #[arg(long)]
    announce: bool,
}

#[derive(clap::Args)]
struct WorkerArgs {
    #[arg(long)]
    id: u32,
    /// Repeated: the Redlock nodes.
    #[arg(long, required = true)]
    url: Vec<String>,
    #[arg(long)]
    resource_port: u16,
    #[arg(long)]
    lock: String,
    #[arg(long)]
    ttl_ms: u64,
    #[arg(long)]
    wait_ms: u64,
    #[arg(long)]
    command_timeout_ms: u64,
    #[arg(long)]
    until_us: u64,
    #[arg(long)]
    seed: u64,
    #[arg(long)]
    max_sleep_us: u64,
    #[arg(long)]
    announce: bool,
    #[arg(long)]
    report_acquiring: bool,
    #[arg(long)]
    announce_slow: bool,
    #[arg(long)]
    no_probes: bool,
    #[arg(long, default_value_t = 0)]
    ballast: usize,
    #[arg(long)]
    cluster: bool,
    /// Repeated: locks held on the side on masters never frozen.
    #[arg(long)]
    held_healthy: Vec<String>,
    /// Repeated: locks held on the side on the frozen master.
    #[arg(long)]
    held_frozen: Vec<String>,
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    match cli.command {
        Some(Command::Worker(args)) => return worker(args),
        Some(Command::Command(args)) => return command(args),
        None => {}
    }
    if cli.list {
        for s in SCENARIOS {
            println!("{:24} {:24} {}", s.name, s.class.to_string(), s.checks);
        }
        return ExitCode::SUCCESS;
    }
    let scenarios: Vec<_> = if cli.scenario == "ci" {
        SCENARIOS.iter().collect()
    } else {
        match find(&cli.scenario) {
            Some(s) => vec![s],
            None => {
                eprintln!(
                    "unknown scenario {:?}; `leasehold-chaos --list` shows them",
                    cli.scenario
                );
                return ExitCode::from(64);
            }
        }
    };
    let worker_exe = match std::env::current_exe() {
        Ok(exe) => exe,
        Err(e) => {
            eprintln!("cannot find this binary to start workers: {e}");
            return ExitCode::FAILURE;
        }
    };
    let leasehold_exe = cli
        .leasehold
        .unwrap_or_else(|| worker_exe.with_file_name("leasehold"));
    let mut reports = Vec::new();
    for scenario in scenarios {
        let options = RunOptions {
            duration: cli.duration.unwrap_or(scenario.ci_duration),
            workers: cli.workers,
            seed: cli.seed,
            worker_exe: worker_exe.clone(),
            leasehold_exe: Some(leasehold_exe.clone()),
        };
        let report = run(scenario, &options);
        print!("{}", report.summary());
        reports.push(report);
    }
    println!("\n{}", table(&reports));
    if reports.iter().all(|r| r.passed()) {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}

fn worker(args: WorkerArgs) -> ExitCode {
    let config = WorkerConfig {
        id: args.id,
        urls: args.url,
        resource_port: args.resource_port,
        lock: args.lock,
        ttl: Duration::from_millis(args.ttl_ms),
        wait: Duration::from_millis(args.wait_ms),
        command_timeout: Duration::from_millis(args.command_timeout_ms),
        until: args.until_us,
        seed: args.seed,
        max_sleep: Duration::from_micros(args.max_sleep_us),
        announce: args.announce,
        report_acquiring: args.report_acquiring,
        announce_slow: args.announce_slow,
        probes: !args.no_probes,
        ballast: args.ballast,
        cluster: args.cluster,
        held_healthy: args.held_healthy,
        held_frozen: args.held_frozen,
    };
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("worker {}: cannot start the runtime: {e}", config.id);
            return ExitCode::FAILURE;
        }
    };
    let id = config.id;
    log_to_file(id);
    let result = runtime.block_on(run_worker(config));
    // A release handed to the background must not hold the exit up.
    runtime.shutdown_timeout(Duration::from_millis(100));
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("worker {id}: {e}");
            ExitCode::FAILURE
        }
    }
}

fn command(args: CommandArgs) -> ExitCode {
    let config = CommandConfig {
        id: args.id,
        resource_port: args.resource_port,
        started: args.started_us,
        seed: args.seed,
        max_sleep: Duration::from_micros(args.max_sleep_us),
        announce: args.announce,
    };
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("command {}: cannot start the runtime: {e}", config.id);
            return ExitCode::FAILURE;
        }
    };
    let id = config.id;
    match runtime.block_on(run_command(config)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("command {id}: {e}");
            ExitCode::FAILURE
        }
    }
}

/// With `LEASEHOLD_CHAOS_LOG=DIR`, the worker writes the library's debug
/// events (wall-clock times, comparable with fences) to `DIR/worker-ID.log`.
fn log_to_file(id: u32) {
    let Some(dir) = std::env::var_os("LEASEHOLD_CHAOS_LOG") else {
        return;
    };
    let path = std::path::Path::new(&dir).join(format!("worker-{id}.log"));
    match std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(&path)
    {
        Ok(file) => tracing_subscriber::fmt()
            .with_writer(std::sync::Mutex::new(file))
            .with_ansi(false)
            .with_env_filter(tracing_subscriber::EnvFilter::new(
                "leasehold=trace,leasehold_chaos=debug",
            ))
            .init(),
        Err(e) => eprintln!("worker {id}: cannot open {}: {e}", path.display()),
    }
}
