//! `leasehold`: distributed locks on Redis from the shell.
//!
//! `leasehold run NAME -- CMD` is a distributed flock(1); `acquire`,
//! `extend` and `release` hand a lease between processes by its token;
//! `status` and `list` inspect locks of every kind; `completions` and `man`
//! print the shell completions and the man page (written by build.rs from
//! src/args.rs); `demo` shows workers contending for
//! one lock on a private Redis; `bench` (feature `bench`, off by default)
//! measures the library against a raw redis-rs loop and rslock. A thin
//! layer over the `leasehold` library: every lock operation is the
//! library's.
//!
//! Exit codes follow sysexits; see [`exit`].

mod args;
#[cfg(feature = "bench")]
mod bench;
mod collapse;
mod commands;
mod demo;
mod embedded;
mod exit;
mod hold;
mod measure;
mod output;
mod parse;
mod progress;
mod run;
mod session;

use std::process::ExitCode;
use std::time::Duration;

use crate::collapse::Collapsing;
use crate::exit::Failure;
use crate::parse::Parsed;

/// Parses the command line, runs the command on a Tokio runtime, and exits
/// with its code (one line on stderr on failure).
fn main() -> ExitCode {
    install_panic_hook();
    let args: Vec<std::ffi::OsString> = std::env::args_os().collect();
    // `run`'s helpers, as `run` starts them: no clap (the whole command
    // line's definition), which is most of a helper's start-up.
    if let Some(code) = run::helper(&args) {
        return ExitCode::from(code);
    }
    // Known before parsing, so a usage error is JSON too.
    if parse::json_asked(&args) {
        exit::json_errors();
    }
    let cli = match parse::parse(args) {
        Ok(Parsed::Run(cli)) => cli,
        Ok(Parsed::Done) => return ExitCode::SUCCESS,
        Err(failure) => return ExitCode::from(failure.report()),
    };
    if !matches!(
        cli.command,
        args::Command::RunExec(_) | args::Command::RunWatch(_)
    ) {
        if cli.global.quiet {
            exit::quiet();
        }
        // -q without RUST_LOG shows no event at all: no subscriber, as
        // building one that filters them all out cost a one-shot `run`
        // about 100,000 instructions (issue 34).
        if !cli.global.quiet || rust_log().is_some() {
            install_logging(&cli.global);
        }
        for warning in &cli.global.unused_env {
            exit::warning(warning.clone());
        }
    }
    // `run`'s helper processes: small, synchronous, no runtime of their own.
    let cli = match cli.command {
        args::Command::RunExec(args) => return ExitCode::from(run::exec(args)),
        args::Command::RunWatch(args) => return ExitCode::from(run::watch(&args)),
        command => args::Cli {
            global: cli.global,
            command,
        },
    };
    // One thread for the commands that hold or inspect one lock: they wait on
    // Redis, a child and signals, never on CPU, and a one-shot `run` spends
    // more starting worker threads than it does on the lock (issue 34). The
    // bench, its workers and the demo run many tasks at once, as a
    // `#[tokio::main]` program does: all cores.
    let mut builder = if many_tasks(&cli.command) {
        tokio::runtime::Builder::new_multi_thread()
    } else {
        tokio::runtime::Builder::new_current_thread()
    };
    let runtime = match builder.enable_all().build() {
        Ok(runtime) => runtime,
        Err(e) => {
            let failure = Failure::with_code(
                exit::SOFTWARE,
                format!("cannot start the async runtime: {e}"),
            );
            return ExitCode::from(failure.report());
        }
    };
    let code = match runtime.block_on(commands::dispatch(cli)) {
        Ok(code) => code,
        Err(failure) => failure.report(),
    };
    // Background work left (a release handed to the watchdog, a reconnect)
    // must not hold the exit up; Redis ends any lease by its TTL.
    runtime.shutdown_timeout(Duration::from_millis(200));
    ExitCode::from(code)
}

/// Whether `command` runs many tasks at once and gets a worker thread per
/// core; every other command runs on one thread.
fn many_tasks(command: &args::Command) -> bool {
    match command {
        args::Command::Demo(_) => true,
        #[cfg(feature = "bench")]
        args::Command::Bench(_) | args::Command::BenchWorker(_) => true,
        _ => false,
    }
}

/// Prints the library's tracing events on stderr: warnings by default,
/// info with -v, debug with -vv, trace with -vvv, nothing with -q; RUST_LOG,
/// when set, chooses instead.
fn install_logging(global: &args::Global) {
    use tracing_subscriber::EnvFilter;
    let level = if global.quiet {
        "off"
    } else {
        match global.verbose {
            // A lost lease is reported by the tool itself, in its words.
            0 => "warn,leasehold::lease=error",
            1 => "info",
            2 => "debug",
            _ => "trace",
        }
    };
    let filter = match rust_log() {
        Some(directives) => EnvFilter::try_new(directives.trim()).unwrap_or_else(|e| {
            exit::warning(format!("RUST_LOG is not a filter ({e}); ignoring it"));
            EnvFilter::new(level)
        }),
        None => EnvFilter::new(level),
    };
    // -v: each acquisition's span (lock, kind, outcome, waited) when it closes.
    let spans = if global.verbose > 0 {
        tracing_subscriber::fmt::format::FmtSpan::CLOSE
    } else {
        tracing_subscriber::fmt::format::FmtSpan::NONE
    };
    let format = tracing_subscriber::fmt::format().with_target(global.verbose > 0);
    // A second subscriber cannot happen here (main sets the only one).
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_span_events(spans)
        .with_writer(std::io::stderr)
        .with_ansi(false);
    // Under --json every line on stderr is a JSON object, events included.
    // Either way a warning that keeps coming is shown less and less often.
    let _ = if global.json {
        builder
            .fmt_fields(tracing_subscriber::fmt::format::JsonFields::new())
            // The schema of exit::json_line: timestamp (RFC 3339 UTC),
            // level, message, and the event's other fields (its span's too)
            // beside them.
            .event_format(Collapsing::new(format.json().flatten_event(true)))
            .try_init()
    } else {
        builder
            .event_format(Collapsing::new(format.without_time()))
            .try_init()
    };
}

/// RUST_LOG when it is set to something other than blanks.
fn rust_log() -> Option<String> {
    std::env::var("RUST_LOG")
        .ok()
        .filter(|directives| !directives.trim().is_empty())
}

/// Replaces the default multi-line panic report (and backtrace hint) with
/// one line: a panic is a bug in leasehold, never the user's input.
fn install_panic_hook() {
    std::panic::set_hook(Box::new(|info| {
        let message = info
            .payload()
            .downcast_ref::<&str>()
            .map(|s| (*s).to_owned())
            .or_else(|| info.payload().downcast_ref::<String>().cloned())
            .unwrap_or_else(|| "unknown panic".to_owned());
        let place = info
            .location()
            .map(|l| format!(" at {}:{}", l.file(), l.line()))
            .unwrap_or_default();
        eprintln!(
            "leasehold: internal error{place}: {}; this is a bug, please report it",
            exit::one_line(message)
        );
    }));
}
