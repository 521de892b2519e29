//! The command line: clap types, duration parsing, and one-line usage errors.

use std::ffi::OsString;
use std::time::Duration;

use clap::error::ErrorKind;
use clap::{Args, Parser, Subcommand};

use crate::exit::Failure;

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
                  64 usage error (also: semaphore users that disagree on --permits); 65 a lock \
                  key holds another data type; 69 Redis or the Redlock quorum unreachable, or \
                  unsupported (--read/--write/--permits/--reentrant on Redlock); 70 lease lost; 75 lock busy, \
                  wait timed out or not the owner; 77 authentication or permission refused."
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
    /// $LEASEHOLD_URL, else redis://127.0.0.1:6379. Three or more (independent
    /// masters) mean Redlock, for the plain lock only: run and status
    /// (without --read/--write/--permits/--reentrant), acquire, extend,
    /// release, list.
    #[arg(long = "url", value_name = "URL", global = true)]
    pub(crate) urls: Vec<String>,

    /// Redlock only (three or more --url): how long one node may take to
    /// answer a request before it counts as failed, e.g. 50ms. Keep it far
    /// below --ttl (it is capped at half of it). Defaults to 200ms.
    #[arg(long, value_name = "DURATION", value_parser = parse_duration, global = true)]
    pub(crate) node_timeout: Option<Duration>,

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
    /// With --read or --write NAME is a read-write lock (many readers or one
    /// writer); with --permits N a semaphore (up to N holders at once).
    /// CMD gets LEASEHOLD_FENCE and LEASEHOLD_TOKEN in its environment and
    /// runs in its own process group. The lease is renewed while CMD runs.
    /// SIGHUP, SIGINT, SIGQUIT, SIGTERM, SIGUSR1, SIGUSR2, SIGWINCH and the
    /// other signals that would end leasehold are passed on to CMD's group.
    /// If the lease is lost, the group gets SIGTERM, then SIGKILL after
    /// --kill-grace, and leasehold exits 70. Otherwise leasehold exits with
    /// CMD's code (128+N if it died by signal N), after ending what CMD
    /// left running in its group (SIGTERM, SIGKILL after --kill-grace).
    /// If leasehold is killed (even with SIGKILL) or crashes, a watcher
    /// process kills CMD's group at once; while leasehold is stopped, CMD
    /// is stopped too, and it resumes only if the lease is still held.
    /// With stdin a terminal, CMD gets the terminal as a shell job would
    /// (it reads typed input; Ctrl-C and Ctrl-Z reach it; fg resumes it).
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
    ///
    /// With --read or --write NAME is a read-write lock: its writer, readers
    /// and waiting writers; with --permits N a semaphore: the permits held
    /// and by whom; with --reentrant a reentrant lock: its owner (id prefix)
    /// and holds. Only live holds count. Nothing is changed.
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
    /// held-leases (4: 100,000 leases renewed by the watchdog), redlock (5:
    /// 5 nodes against 1). Each figure is printed with its target and PASS
    /// or SHORT. With no --url (and no LEASEHOLD_URL) it starts a private
    /// redis-server and stops it at the end; redlock always starts its own 5.
    /// Build with --release for figures worth comparing.
    #[cfg(feature = "bench")]
    Bench(BenchArgs),

    /// One waiter process of `bench contended` (started by `bench` itself).
    #[cfg(feature = "bench")]
    #[command(hide = true, name = "bench-worker")]
    BenchWorker(BenchWorkerArgs),

    /// Not in this build: says how to build `bench` (feature `bench`).
    #[cfg(not(feature = "bench"))]
    #[command(hide = true, disable_help_flag = true)]
    Bench(NoBenchArgs),

    /// `run`'s launcher: reports its process group to the watcher, takes
    /// the terminal if asked, then executes CMD (started by `run` itself).
    #[command(hide = true, name = "run-exec")]
    RunExec(RunExecArgs),

    /// `run`'s watcher: kills CMD's process group when `run` dies, stops it
    /// while `run` is stopped (started by `run` itself).
    #[command(hide = true, name = "run-watch")]
    RunWatch(RunWatchArgs),
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

    /// What to hold: the plain lock, a read or the write hold, or a permit.
    #[command(flatten)]
    pub(crate) hold: HoldArgs,

    /// After a lost lease, how long CMD gets between SIGTERM and SIGKILL.
    #[arg(long, value_name = "DURATION", default_value = "10s", value_parser = parse_duration)]
    pub(crate) kill_grace: Duration,

    /// The command and its arguments, after `--`.
    #[arg(last = true, required = true, value_name = "CMD")]
    pub(crate) command: Vec<OsString>,
}

/// Which primitive NAME is (`run` holds it, `status` shows it): the plain
/// lock unless one of these is given.
#[derive(Debug, Args)]
pub(crate) struct HoldArgs {
    /// NAME is a read-write lock; `run` holds a read lock of it: many
    /// readers at once, none while a writer holds it or waits for it.
    #[arg(long, conflicts_with_all = ["write", "permits"])]
    pub(crate) read: bool,

    /// NAME is a read-write lock; `run` holds its write lock: alone, once
    /// the readers left; new readers wait while it waits.
    #[arg(long, conflicts_with = "permits")]
    pub(crate) write: bool,

    /// NAME is a semaphore of N permits; `run` holds one of them: up to N
    /// commands at once. Everyone using NAME must pass the same N.
    #[arg(long, value_name = "N", value_parser = parse_permits)]
    pub(crate) permits: Option<u32>,
}

/// Which primitive `run` holds or `status` shows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Mode {
    /// The plain lease lock.
    Lock,
    /// A read hold of a read-write lock.
    Read,
    /// The write hold of a read-write lock.
    Write,
    /// A permit of a semaphore with this many permits.
    Permits(u32),
}

impl HoldArgs {
    /// The primitive the flags ask for (clap keeps them exclusive).
    pub(crate) fn mode(&self) -> Mode {
        match (self.read, self.write, self.permits) {
            (true, _, _) => Mode::Read,
            (_, true, _) => Mode::Write,
            (_, _, Some(n)) => Mode::Permits(n),
            _ => Mode::Lock,
        }
    }
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

    /// Which primitive NAME is: the plain lock, a read-write lock or a
    /// semaphore.
    #[command(flatten)]
    pub(crate) hold: HoldArgs,

    /// NAME is a reentrant lock (the library's ReentrantLock).
    #[arg(long, conflicts_with_all = ["read", "write", "permits"])]
    pub(crate) reentrant: bool,
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

/// What `leasehold bench` says in a build without the `bench` feature.
#[cfg(not(feature = "bench"))]
pub(crate) const NO_BENCH: &str = "`bench` is not in this build of leasehold (it carries the \
     benchmark's peer, rslock): build it with `cargo build --release -p leasehold-cli --features \
     bench` and run ./target/release/leasehold bench (see docs/BENCHMARKS.md)";

/// Whatever follows `bench` in a build without the `bench` feature.
#[cfg(not(feature = "bench"))]
#[derive(Debug, Args)]
pub(crate) struct NoBenchArgs {
    /// Ignored: the command fails with [`NO_BENCH`] whatever it is given.
    #[arg(trailing_var_arg = true, allow_hyphen_values = true, hide = true)]
    pub(crate) ignored: Vec<OsString>,
}

/// Arguments of `bench`.
#[cfg(feature = "bench")]
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
#[cfg(feature = "bench")]
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
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
    /// 5: Redlock over 5 private nodes against one node, uncontended.
    #[value(alias = "5")]
    Redlock,
}

/// The lock libraries a bench worker can use.
#[cfg(feature = "bench")]
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub(crate) enum Library {
    /// This library.
    Leasehold,
    /// The rslock crate at its defaults.
    Rslock,
}

/// Arguments of the hidden `bench-worker`.
#[cfg(feature = "bench")]
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

/// Arguments of the hidden `run-exec`.
#[derive(Debug, Args)]
pub(crate) struct RunExecArgs {
    /// An inherited descriptor of the watcher's pipe: the launcher writes
    /// its process group there, then closes it before executing CMD.
    #[arg(long, value_name = "FD")]
    pub(crate) report_fd: i32,

    /// Take the terminal on stdin for the new process group, if this
    /// process group (`run`'s) still has it.
    #[arg(long, value_name = "PGID")]
    pub(crate) foreground_of: Option<i32>,

    /// The command and its arguments, after `--`.
    #[arg(last = true, required = true, value_name = "CMD")]
    pub(crate) command: Vec<OsString>,
}

/// Arguments of the hidden `run-watch`.
#[derive(Debug, Args)]
pub(crate) struct RunWatchArgs {
    /// The `leasehold run` process watched.
    #[arg(long, value_name = "PID")]
    pub(crate) pid: i32,

    /// How often to check whether it is stopped, in milliseconds.
    #[arg(long, value_name = "MS")]
    pub(crate) poll_ms: u64,
}

/// Parses a human duration ("500ms", "30s", "2m"); zero is refused because
/// every duration here bounds something that must be able to happen.
fn parse_duration(s: &str) -> Result<Duration, String> {
    match humantime::parse_duration(s) {
        Ok(d) if d.is_zero() => Err("must be above zero".to_owned()),
        Ok(d) => Ok(d),
        Err(humantime::DurationError::NumberOverflow) => Err(
            "too large, or finer than 1ns; expected a duration like 500ms, 30s or 2m".to_owned(),
        ),
        Err(_) => Err("expected a duration like 500ms, 30s or 2m".to_owned()),
    }
}

/// Parses a permit count; zero is refused, since nobody could ever hold one.
fn parse_permits(s: &str) -> Result<u32, String> {
    match s.parse::<u32>() {
        Ok(0) => Err("must be at least 1: with 0 permits no command could ever run".to_owned()),
        Ok(n) => Ok(n),
        Err(_) => Err("expected a whole number of permits, like 4".to_owned()),
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
        Ok(cli) => {
            cli.global.check_node_timeout()?;
            Ok(Parsed::Run(Box::new(cli)))
        }
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

    /// The servers to use: one, or the masters of a Redlock.
    ///
    /// # Errors
    ///
    /// A usage failure for two URLs.
    pub(crate) fn servers(&self) -> Result<Servers, Failure> {
        servers_of(
            self.given_urls()
                .unwrap_or_else(|| vec![DEFAULT_URL.to_owned()]),
        )
    }

    /// Refuses `--node-timeout` unless the URLs name a Redlock, the only
    /// topology that sends each request to several nodes.
    ///
    /// # Errors
    ///
    /// A usage failure for `--node-timeout` with fewer than three URLs.
    fn check_node_timeout(&self) -> Result<(), Failure> {
        if self.node_timeout.is_none() {
            return Ok(());
        }
        match self.servers()? {
            Servers::Redlock(_) => Ok(()),
            Servers::One(_) => Err(Failure::usage(
                "--node-timeout is for Redlock (three or more --url), but one Redis is given; \
                 drop --node-timeout, or pass three or more --url",
            )),
        }
    }

    /// The one server URL to connect to.
    ///
    /// # Errors
    ///
    /// A usage failure for two URLs, or for three or more (Redlock).
    #[cfg(feature = "bench")]
    pub(crate) fn single_url(&self) -> Result<String, Failure> {
        single(self.servers()?)
    }
}

/// What the `--url`s name.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Servers {
    /// One Redis.
    One(String),
    /// Independent masters of a Redlock (three or more).
    Redlock(Vec<String>),
}

/// One URL is one Redis, three or more a Redlock; zero or two are refused.
pub(crate) fn servers_of(mut urls: Vec<String>) -> Result<Servers, Failure> {
    match urls.len() {
        0 => Err(Failure::usage("no Redis URL given; pass --url URL")),
        1 => Ok(Servers::One(urls.remove(0))),
        2 => Err(Failure::usage(
            "two --url given: Redlock needs at least 3 independent masters (with 2, one \
             node's failure stops every lock); pass one --url for one Redis, or three or more",
        )),
        _ => Ok(Servers::Redlock(urls)),
    }
}

/// The URL of `servers` when it is one Redis.
///
/// # Errors
///
/// A usage failure for a Redlock: demo and bench run on one Redis.
pub(crate) fn single(servers: Servers) -> Result<String, Failure> {
    match servers {
        Servers::One(url) => Ok(url),
        Servers::Redlock(urls) => Err(Failure::usage(format!(
            "{} --url given, which means Redlock, but this command runs on one Redis (Redlock \
             is for run, acquire, extend, release, status and list); pass a single --url",
            urls.len()
        ))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::exit;

    #[test]
    fn durations_are_human_and_above_zero() {
        assert_eq!(parse_duration("500ms"), Ok(Duration::from_millis(500)));
        assert_eq!(parse_duration("2m"), Ok(Duration::from_secs(120)));
        assert!(parse_duration("0s").is_err());
        assert!(parse_duration("0").is_err());
        assert!(parse_duration("banana").is_err());
        assert!(
            parse_duration("99999999999999999999999s")
                .unwrap_err()
                .contains("too large")
        );
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
    fn three_urls_mean_redlock_and_two_are_refused() {
        let urls = |n: usize| (0..n).map(|i| format!("redis://n{i}")).collect::<Vec<_>>();
        assert_eq!(
            servers_of(urls(1)).unwrap(),
            Servers::One("redis://n0".into())
        );
        let err = servers_of(urls(2)).unwrap_err();
        assert_eq!(err.code, exit::USAGE);
        assert!(err.message.contains("at least 3"), "{}", err.message);
        assert_eq!(servers_of(urls(3)).unwrap(), Servers::Redlock(urls(3)));
        assert_eq!(servers_of(urls(5)).unwrap(), Servers::Redlock(urls(5)));
        assert_eq!(servers_of(vec![]).unwrap_err().code, exit::USAGE);
        let err = single(Servers::Redlock(urls(3))).unwrap_err();
        assert_eq!(err.code, exit::USAGE);
        assert!(err.message.contains("Redlock"), "{}", err.message);
    }

    #[test]
    fn node_timeout_is_for_redlock_only() {
        let with = |urls: usize, timeout: &str| {
            let mut args = vec!["leasehold".to_owned()];
            for i in 0..urls {
                args.extend(["--url".to_owned(), format!("redis://n{i}")]);
            }
            args.extend(["--node-timeout", timeout, "status", "x"].map(str::to_owned));
            parse(args)
        };
        match with(3, "50ms") {
            Ok(Parsed::Run(cli)) => {
                assert_eq!(cli.global.node_timeout, Some(Duration::from_millis(50)));
            }
            other => panic!("{other:?}"),
        }
        let err = with(1, "50ms").unwrap_err();
        assert_eq!(err.code, exit::USAGE);
        assert!(err.message.contains("Redlock"), "{}", err.message);
        let err = with(2, "50ms").unwrap_err();
        assert!(err.message.contains("at least 3"), "{}", err.message);
        let err = with(3, "0s").unwrap_err();
        assert_eq!(err.code, exit::USAGE);
        assert!(err.message.contains("above zero"), "{}", err.message);
    }

    #[test]
    fn run_holds_a_lock_a_read_a_write_or_a_permit() {
        let mode = |args: &[&str]| {
            let mut all = vec!["leasehold", "run", "x"];
            all.extend_from_slice(args);
            all.extend_from_slice(&["--", "true"]);
            match parse(all).map_err(|f| f.code) {
                Ok(Parsed::Run(cli)) => match cli.command {
                    Command::Run(run) => Ok(run.hold.mode()),
                    other => panic!("{other:?}"),
                },
                Ok(Parsed::Done) => panic!("help printed"),
                Err(code) => Err(code),
            }
        };
        assert_eq!(mode(&[]), Ok(Mode::Lock));
        assert_eq!(mode(&["--read"]), Ok(Mode::Read));
        assert_eq!(mode(&["--write"]), Ok(Mode::Write));
        assert_eq!(mode(&["--permits", "3"]), Ok(Mode::Permits(3)));
        for bad in [
            &["--permits", "0"][..],
            &["--permits", "-1"],
            &["--permits", "many"],
            &["--read", "--write"],
            &["--write", "--permits", "2"],
            &["--read", "--permits", "2"],
        ] {
            assert_eq!(mode(bad), Err(exit::USAGE), "{bad:?}");
        }
    }
}
