//! The command line: clap types, duration parsing, and one-line usage errors.

use std::ffi::OsString;
use std::time::Duration;

use clap::error::ErrorKind;
use clap::{Args, Parser, Subcommand, ValueEnum};

use crate::exit::{self, Failure};

/// Environment variable read when no `--url` is given.
pub(crate) const URL_ENV: &str = "LEASEHOLD_URL";
/// The server used when neither `--url` nor `LEASEHOLD_URL` is given.
pub(crate) const DEFAULT_URL: &str = "redis://127.0.0.1:6379";

/// Distributed locks on Redis from the shell: run a command under a lock
/// (a distributed flock(1)), hand leases between processes, inspect locks.
#[derive(Debug, Parser)]
#[command(
    name = "leasehold",
    version,
    after_help = "Exit codes: the command's own for `run` (128+N if it died by signal N); \
                  64 usage error; 65 a lock key holds another data type; 69 Redis unreachable \
                  or unsupported; 70 lease lost; 75 lock busy, wait timed out or not the owner; \
                  77 authentication or permission refused."
)]
pub(crate) struct Cli {
    /// Options that apply to every command.
    #[command(flatten)]
    pub(crate) global: Global,

    /// What to do.
    #[command(subcommand)]
    pub(crate) command: Command,
}

/// Options shared by every command.
#[derive(Debug, Args)]
pub(crate) struct Global {
    /// Redis server, redis://[user:password@]host:port[/db]. Defaults to
    /// $LEASEHOLD_URL, else redis://127.0.0.1:6379. Three or more mean
    /// Redlock (not available in this version).
    #[arg(long = "url", value_name = "URL", global = true)]
    pub(crate) urls: Vec<String>,

    /// Prefix of every Redis key and channel leasehold uses.
    #[arg(long, value_name = "P", default_value = leasehold::DEFAULT_PREFIX, global = true)]
    pub(crate) prefix: String,

    /// Print results as JSON on stdout.
    #[arg(long, global = true)]
    pub(crate) json: bool,
}

/// The subcommands.
#[derive(Debug, Subcommand)]
pub(crate) enum Command {
    /// Run CMD while holding the lock NAME; release it when CMD exits.
    ///
    /// CMD gets LEASEHOLD_FENCE and LEASEHOLD_TOKEN in its environment and
    /// runs in its own process group. The lease is renewed while CMD runs.
    /// SIGINT, SIGTERM and SIGHUP sent to leasehold are forwarded to CMD's
    /// process group. If the lease is lost, the group gets SIGTERM, then
    /// SIGKILL after --kill-grace, and leasehold exits 70. Otherwise
    /// leasehold exits with CMD's code (128+N if it died by signal N).
    /// If leasehold itself is killed with SIGKILL, CMD keeps running and
    /// the lock frees itself after --ttl.
    Run(RunArgs),

    /// Take the lock and keep it after exiting; prints the token and fence.
    ///
    /// The lease is not renewed: it ends after --ttl unless extended with
    /// `leasehold extend` or released with `leasehold release`.
    Acquire(AcquireArgs),

    /// Set the lease held under TOKEN to end --ttl from now.
    Extend(ExtendArgs),

    /// Release the lease held under TOKEN.
    Release(ReleaseArgs),

    /// Show a lock's holder (token prefix), remaining TTL, last fence and waiters.
    Status(StatusArgs),

    /// List the locks held under the prefix whose names match PATTERN.
    List(ListArgs),

    /// See several workers contend for one lock and the counter come out exact.
    ///
    /// With no --url (and no LEASEHOLD_URL) it starts a private, throwaway
    /// redis-server from PATH on a free loopback port and stops it at the end.
    Demo(DemoArgs),

    /// Measure leasehold against a raw redis-rs loop and rslock (see docs/BENCHMARKS.md).
    ///
    /// Scenarios: uncontended (1), contended (2: one key, 4/16/64 waiter
    /// processes), many-keys (3: 10,000 keys, 256 tasks on one client),
    /// held-leases (4: 100,000 leases renewed by the watchdog). Each figure
    /// is printed with its target and PASS or SHORT. With no --url (and no
    /// LEASEHOLD_URL) it starts a private redis-server and stops it at the end.
    /// Build with --release for figures worth comparing.
    Bench(BenchArgs),

    /// One waiter process of `bench contended` (started by `bench` itself).
    #[command(hide = true, name = "bench-worker")]
    BenchWorker(BenchWorkerArgs),
}

/// How long to hold and how long to wait.
#[derive(Debug, Args)]
pub(crate) struct LeaseArgs {
    /// Lease length; renewed while the holder lives (`run`), so it bounds how
    /// long a crashed holder blocks others.
    #[arg(long, value_name = "DURATION", default_value = "30s", value_parser = parse_duration)]
    pub(crate) ttl: Duration,

    /// How long to wait for the lock when someone else holds it.
    #[arg(
        long,
        value_name = "DURATION",
        default_value = "10s",
        value_parser = parse_duration,
        conflicts_with = "no_wait"
    )]
    pub(crate) wait: Duration,

    /// Fail at once (exit 75) when someone else holds the lock.
    #[arg(long)]
    pub(crate) no_wait: bool,
}

/// Arguments of `run`.
#[derive(Debug, Args)]
pub(crate) struct RunArgs {
    /// The lock name.
    pub(crate) name: String,

    /// Lease length and wait.
    #[command(flatten)]
    pub(crate) lease: LeaseArgs,

    /// After a lost lease, how long CMD gets between SIGTERM and SIGKILL.
    #[arg(long, value_name = "DURATION", default_value = "10s", value_parser = parse_duration)]
    pub(crate) kill_grace: Duration,

    /// The command and its arguments, after `--`.
    #[arg(last = true, required = true, value_name = "CMD")]
    pub(crate) command: Vec<OsString>,
}

/// Arguments of `acquire`.
#[derive(Debug, Args)]
pub(crate) struct AcquireArgs {
    /// The lock name.
    pub(crate) name: String,

    /// Lease length and wait.
    #[command(flatten)]
    pub(crate) lease: LeaseArgs,
}

/// Arguments of `extend`.
#[derive(Debug, Args)]
pub(crate) struct ExtendArgs {
    /// The lock name.
    pub(crate) name: String,

    /// The owner token printed by `leasehold acquire`.
    pub(crate) token: String,

    /// The new lease length, from now.
    #[arg(long, value_name = "DURATION", default_value = "30s", value_parser = parse_duration)]
    pub(crate) ttl: Duration,
}

/// Arguments of `release`.
#[derive(Debug, Args)]
pub(crate) struct ReleaseArgs {
    /// The lock name.
    pub(crate) name: String,

    /// The owner token printed by `leasehold acquire`.
    pub(crate) token: String,
}

/// Arguments of `status`.
#[derive(Debug, Args)]
pub(crate) struct StatusArgs {
    /// The lock name.
    pub(crate) name: String,
}

/// Arguments of `list`.
#[derive(Debug, Args)]
pub(crate) struct ListArgs {
    /// Glob over lock names (`*` and `?`).
    #[arg(default_value = "*")]
    pub(crate) pattern: String,
}

/// Arguments of `demo`.
#[derive(Debug, Args)]
pub(crate) struct DemoArgs {
    /// Concurrent workers, each with its own client and connection.
    #[arg(long, default_value_t = 8, value_parser = clap::value_parser!(u16).range(2..=64))]
    pub(crate) workers: u16,

    /// Increments per worker.
    #[arg(long, default_value_t = 50, value_parser = clap::value_parser!(u32).range(1..=10_000))]
    pub(crate) iterations: u32,
}

/// Arguments of `bench`.
#[derive(Debug, Args)]
pub(crate) struct BenchArgs {
    /// The scenario to run; all of them when omitted.
    #[arg(value_enum)]
    pub(crate) scenario: Option<Scenario>,

    /// Shorter runs and smaller counts (well under 20 s in all), for a smoke test.
    #[arg(long)]
    pub(crate) quick: bool,

    /// How long each contended run lasts (one per waiter count and library).
    /// Defaults to 3s, or 600ms with --quick.
    #[arg(long, value_name = "DURATION", value_parser = parse_duration)]
    pub(crate) duration: Option<Duration>,

    /// Leases held at once in held-leases. Defaults to 100000, or 10000 with --quick.
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..=1_000_000))]
    pub(crate) leases: Option<u32>,

    /// Also write an SVG plot of the wait-time distributions to FILE.
    #[arg(long, value_name = "FILE")]
    pub(crate) svg: Option<std::path::PathBuf>,
}

/// The scenarios of `bench`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub(crate) enum Scenario {
    /// 1: one task, acquire+release on a free lock, against a raw loop and rslock.
    #[value(alias = "1")]
    Uncontended,
    /// 2: one key, 4/16/64 waiter processes, hold 200us; leasehold and rslock.
    #[value(alias = "2")]
    Contended,
    /// 3: 10,000 keys, 256 tasks on one client, against a raw loop.
    #[value(alias = "3")]
    ManyKeys,
    /// 4: many leases held on one client, renewed by the watchdog.
    #[value(alias = "4")]
    HeldLeases,
}

/// The lock libraries a bench worker can use.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub(crate) enum Library {
    /// This library.
    Leasehold,
    /// The rslock crate at its defaults.
    Rslock,
}

/// Arguments of the hidden `bench-worker`.
#[derive(Debug, Args)]
pub(crate) struct BenchWorkerArgs {
    /// Which library to use.
    #[arg(long, value_enum)]
    pub(crate) library: Library,

    /// The lock (resource) name.
    #[arg(long)]
    pub(crate) name: String,

    /// Time spent holding the lock each time, in microseconds.
    #[arg(long)]
    pub(crate) hold_us: u64,

    /// Lease TTL, in milliseconds.
    #[arg(long)]
    pub(crate) ttl_ms: u64,

    /// How long to keep acquiring after the go signal, in milliseconds.
    #[arg(long)]
    pub(crate) run_ms: u64,

    /// Most acquisitions to make.
    #[arg(long)]
    pub(crate) max_count: u64,
}

/// Parses a human duration ("500ms", "30s", "2m"); zero is refused because
/// every duration here bounds something that must be able to happen.
fn parse_duration(s: &str) -> Result<Duration, String> {
    match humantime::parse_duration(s) {
        Ok(d) if d.is_zero() => Err("must be above zero".to_owned()),
        Ok(d) => Ok(d),
        Err(_) => Err("expected a duration like 500ms, 30s or 2m".to_owned()),
    }
}

/// What the process should do after parsing the command line.
#[derive(Debug)]
pub(crate) enum Parsed {
    /// Run this command.
    Run(Box<Cli>),
    /// Help or version was printed; exit 0.
    Done,
}

/// Parses `args` (program name first). Help and version are printed here;
/// every other clap error becomes a one-line usage [`Failure`] (exit 64).
pub(crate) fn parse<I, T>(args: I) -> Result<Parsed, Failure>
where
    I: IntoIterator<Item = T>,
    T: Into<OsString> + Clone,
{
    let args: Vec<OsString> = args.into_iter().map(Into::into).collect();
    match Cli::try_parse_from(&args) {
        Ok(cli) => Ok(Parsed::Run(Box::new(cli))),
        Err(e) if matches!(e.kind(), ErrorKind::DisplayHelp | ErrorKind::DisplayVersion) => {
            // Printing help can only fail on a closed stdout; nothing to add then.
            let _ = e.print();
            Ok(Parsed::Done)
        }
        Err(e) => Err(Failure::usage(one_line(&e, &args))),
    }
}

/// Reduces clap's multi-line error (usage, tips) to one line plus a hint.
fn one_line(err: &clap::Error, args: &[OsString]) -> String {
    if err.kind() == ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand {
        return "no command given; see `leasehold --help`".to_owned();
    }
    // The message is the first paragraph (a list of missing arguments may
    // follow the first line); usage and tips come after a blank line.
    let rendered = err.render().to_string();
    let paragraph: Vec<&str> = rendered
        .lines()
        .map(str::trim)
        .skip_while(|l| l.is_empty())
        .take_while(|l| !l.is_empty())
        .collect();
    let joined = if paragraph.is_empty() {
        "invalid command line".to_owned()
    } else {
        paragraph.join(" ")
    };
    let first = joined.strip_prefix("error: ").unwrap_or(&joined);
    let is_run = args.iter().skip(1).any(|a| a == "run");
    let has_separator = args.iter().any(|a| a == "--");
    if is_run
        && !has_separator
        && matches!(
            err.kind(),
            ErrorKind::UnknownArgument
                | ErrorKind::MissingRequiredArgument
                | ErrorKind::TooManyValues
        )
    {
        return format!(
            "{first}; put `--` before the command: leasehold run NAME [OPTIONS] -- CMD [ARGS...]"
        );
    }
    format!("{first}; see `leasehold --help`")
}

impl Global {
    /// The server URLs to use: `--url`s, else `$LEASEHOLD_URL`, else the
    /// default. `None` when neither flag nor environment gave one.
    pub(crate) fn given_urls(&self) -> Option<Vec<String>> {
        if !self.urls.is_empty() {
            return Some(self.urls.clone());
        }
        match std::env::var(URL_ENV) {
            Ok(url) if !url.trim().is_empty() => Some(vec![url.trim().to_owned()]),
            _ => None,
        }
    }

    /// The one server URL to connect to.
    ///
    /// # Errors
    ///
    /// A usage failure for two URLs, or for three or more (Redlock, not
    /// available in this version).
    pub(crate) fn single_url(&self) -> Result<String, Failure> {
        let urls = self
            .given_urls()
            .unwrap_or_else(|| vec![DEFAULT_URL.to_owned()]);
        check_single(urls)
    }
}

/// The only URL of `urls`, or why several cannot be used.
pub(crate) fn check_single(mut urls: Vec<String>) -> Result<String, Failure> {
    match urls.len() {
        1 => Ok(urls.remove(0)),
        0 => Err(Failure::usage("no Redis URL given; pass --url URL")),
        2 => Err(Failure::usage(
            "two --url given: pass one URL for one Redis (three or more would mean Redlock)",
        )),
        n => Err(Failure::with_code(
            exit::USAGE,
            format!(
                "{n} --url given, which means Redlock, and Redlock is not available in this \
                 version of leasehold; pass a single --url"
            ),
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_are_human_and_above_zero() {
        assert_eq!(parse_duration("500ms"), Ok(Duration::from_millis(500)));
        assert_eq!(parse_duration("2m"), Ok(Duration::from_secs(120)));
        assert!(parse_duration("0s").is_err());
        assert!(parse_duration("0").is_err());
        assert!(parse_duration("banana").is_err());
        assert!(parse_duration("").is_err());
    }

    #[test]
    fn clap_definition_is_consistent() {
        use clap::CommandFactory;
        Cli::command().debug_assert();
    }

    #[test]
    fn usage_errors_are_one_line() {
        let cases: &[&[&str]] = &[
            &["leasehold", "run", "x", "sleep", "1"],
            &["leasehold", "run", "x"],
            &["leasehold", "run", "--ttl", "0", "x", "--", "true"],
            &["leasehold", "acquire", "x", "--ttl", "banana"],
            &["leasehold", "--bogus", "list"],
            &["leasehold"],
            &["leasehold", "acquire", "x", "--wait", "1s", "--no-wait"],
        ];
        for args in cases {
            let err = parse(args.iter().copied()).expect_err("must be a usage error");
            assert_eq!(err.code, exit::USAGE, "{args:?}");
            assert!(!err.message.contains('\n'), "{args:?}: {}", err.message);
        }
        let err = parse(["leasehold", "run", "x", "sleep", "1"]).unwrap_err();
        assert!(err.message.contains("`--`"), "{}", err.message);
    }

    #[test]
    fn three_urls_mean_redlock_which_is_unavailable() {
        let urls = vec!["redis://a".into(), "redis://b".into(), "redis://c".into()];
        let err = check_single(urls).unwrap_err();
        assert_eq!(err.code, exit::USAGE);
        assert!(err.message.contains("Redlock"));
        assert_eq!(check_single(vec!["redis://a".into()]).unwrap(), "redis://a");
    }
}
