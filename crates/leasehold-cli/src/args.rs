//! The clap definition of the command line: every command, flag and help
//! text, and the parsers of its values. Pure (clap, humantime and std
//! only): build.rs includes this file to write the man page, so it names
//! nothing else of the crate.

use std::ffi::OsString;
use std::path::PathBuf;
use std::time::Duration;

use clap::builder::BoolishValueParser;
use clap::{ArgAction, Args, Parser, Subcommand};

/// Distributed locks on Redis from the shell: run a command under a lock
/// (a distributed flock(1)), hand leases between processes, inspect locks.
#[derive(Debug, Parser)]
#[command(name = "leasehold", version, after_help = after_help())]
pub(crate) struct Cli {
    /// Options that apply to every command.
    #[command(flatten)]
    pub(crate) global: Global,

    /// What to do.
    #[command(subcommand)]
    pub(crate) command: Command,
}

/// Options shared by every command. Each also comes from its `LEASEHOLD_*`
/// variable (the flag wins); `hide_env_values` keeps the variables' values
/// (a URL's password) out of `--help` and out of the man page, which
/// build.rs renders in its own environment. Its `Debug` counts the URLs
/// without showing them (a URL may carry a password).
#[derive(Args)]
#[command(next_help_heading = "Global options")]
pub(crate) struct Global {
    /// Redis server: redis://[user:password@]host:port[/db], rediss:// for
    /// TLS, or unix:///path/to/redis.sock for a Unix socket. Defaults to
    /// redis://127.0.0.1:6379. Three or more distinct servers (independent
    /// masters) mean Redlock, for the plain lock only: run and status
    /// (without --read/--write/--permits/--reentrant), acquire, extend,
    /// release, list. With --cluster, nodes of one cluster; with
    /// --sentinel, the sentinels. LEASEHOLD_URL holds one URL, or several
    /// separated by spaces.
    #[arg(
        long = "url",
        value_name = "URL",
        global = true,
        env = "LEASEHOLD_URL",
        hide_env_values = true
    )]
    pub(crate) urls: Vec<String>,

    /// The --url are nodes of one Redis Cluster (any one is enough; more
    /// are tried in turn when one is down).
    #[arg(long, global = true, env = "LEASEHOLD_CLUSTER", hide_env_values = true,
          value_parser = BoolishValueParser::new())]
    pub(crate) cluster: bool,

    /// The --url are Redis Sentinels: use the master they monitor as
    /// MASTER, and follow it through failovers.
    #[arg(
        long,
        value_name = "MASTER",
        global = true,
        env = "LEASEHOLD_SENTINEL",
        hide_env_values = true
    )]
    pub(crate) sentinel: Option<String>,

    /// Trust this CA certificate (PEM) for rediss:// servers instead of the
    /// system's trust store.
    #[arg(
        long,
        value_name = "FILE",
        global = true,
        env = "LEASEHOLD_TLS_CA",
        hide_env_values = true
    )]
    pub(crate) tls_ca: Option<PathBuf>,

    /// Present this certificate chain (PEM) to rediss:// servers that ask
    /// for one (mutual TLS); needs --tls-key.
    #[arg(
        long,
        value_name = "FILE",
        global = true,
        env = "LEASEHOLD_TLS_CERT",
        hide_env_values = true
    )]
    pub(crate) tls_cert: Option<PathBuf>,

    /// The private key (PEM) of --tls-cert.
    #[arg(
        long,
        value_name = "FILE",
        global = true,
        env = "LEASEHOLD_TLS_KEY",
        hide_env_values = true
    )]
    pub(crate) tls_key: Option<PathBuf>,

    /// How long connecting to Redis (and its checks) may take in all before
    /// giving up with exit 69. With --sentinel, `run` and `acquire` wait
    /// for a failover while connecting (the master named is dead or not a
    /// master yet) for as long as their --wait instead. Defaults to 3s.
    #[arg(long, value_name = "DURATION", default_value = "3s", hide_default_value = true,
          value_parser = parse_duration, global = true,
          env = "LEASEHOLD_CONNECT_TIMEOUT", hide_env_values = true)]
    pub(crate) connect_timeout: Duration,

    /// Redlock only (three or more --url): how long one node may take to
    /// answer a request before it counts as failed, e.g. 50ms. Keep it far
    /// below --ttl (it is capped at half of it). Defaults to 200ms.
    #[arg(long, value_name = "DURATION", value_parser = parse_duration, global = true,
          env = "LEASEHOLD_NODE_TIMEOUT", hide_env_values = true)]
    pub(crate) node_timeout: Option<Duration>,

    /// Prefix of every Redis key and channel leasehold uses.
    #[arg(long, value_name = "P", default_value = DEFAULT_PREFIX, global = true,
          env = "LEASEHOLD_PREFIX", hide_env_values = true)]
    pub(crate) prefix: String,

    /// Print results as JSON on stdout, and every line on stderr (errors,
    /// warnings, events) as a JSON object. `run` and `elect` leave stdout to
    /// CMD: their result (one object when they end) is the last line of
    /// stderr, or goes to --json-file. Every line on stderr has the fields
    /// timestamp (RFC 3339, UTC), level and message, and its own beside them
    /// (an error's exit_code).
    #[arg(long, global = true, env = "LEASEHOLD_JSON", hide_env_values = true,
          value_parser = BoolishValueParser::new())]
    pub(crate) json: bool,

    /// Say more on stderr: -v the library's info events, -vv debug events
    /// too. Warnings are shown without it. RUST_LOG, when set, chooses
    /// instead (e.g. RUST_LOG=leasehold=trace). LEASEHOLD_VERBOSE is the
    /// count (2 is -vv).
    #[arg(short, long, action = ArgAction::Count, global = true,
          env = "LEASEHOLD_VERBOSE", hide_env_values = true)]
    pub(crate) verbose: u8,

    /// Say nothing on stderr but errors and what happens to the command (a
    /// lost lease): no warnings, no events, no progress line.
    #[arg(short, long, global = true, env = "LEASEHOLD_QUIET", hide_env_values = true,
          value_parser = BoolishValueParser::new())]
    pub(crate) quiet: bool,

    /// The ids of the options above whose value came from their variable
    /// (set by `parse::parse`), so that a message names what the user wrote.
    #[arg(skip)]
    pub(crate) from_env: Vec<(String, String)>,

    /// Warnings for the variables not read because a `--url` on the
    /// command line takes its topology from there (set by `parse::parse`).
    #[arg(skip)]
    pub(crate) unused_env: Vec<String>,
}

impl std::fmt::Debug for Global {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Global")
            .field(
                "urls",
                &format_args!("[{} URL(s), not shown]", self.urls.len()),
            )
            .field("cluster", &self.cluster)
            .field("sentinel", &self.sentinel)
            .field("tls_ca", &self.tls_ca)
            .field("tls_cert", &self.tls_cert)
            .field("tls_key", &self.tls_key)
            .field("connect_timeout", &self.connect_timeout)
            .field("node_timeout", &self.node_timeout)
            .field("prefix", &self.prefix)
            .field("json", &self.json)
            .field("verbose", &self.verbose)
            .field("quiet", &self.quiet)
            .field("from_env", &self.from_env)
            .field("unused_env", &self.unused_env)
            .finish()
    }
}

/// The exit codes, for `--help` and the man page's EXIT STATUS.
pub(crate) const EXIT_CODES: &[(&str, &str)] = &[
    (
        "0",
        "Success. `run` and `elect` exit with CMD's own code instead (128+N if it died by \
         signal N); a conflict exits 0 with -E 0.",
    ),
    (
        "64",
        "Usage error (also: semaphore users that disagree on --permits, and \
         --read/--write/--permits/--reentrant on Redlock).",
    ),
    (
        "65",
        "NAME is held as another kind of lock (the message says which, and the flag that \
         takes it), or a key of NAME holds another data type (left untouched).",
    ),
    (
        "69",
        "Redis or the Redlock quorum unreachable, TLS failed, or a server too old.",
    ),
    ("70", "Lease lost: CMD was stopped."),
    (
        "75",
        "Lock busy, wait timed out (or the code given with -E), or not the owner.",
    ),
    ("77", "Authentication or permission refused."),
];

/// The variables leasehold reads or sets, for the man page's ENVIRONMENT
/// (build.rs checks that every global option's variable is here).
#[allow(dead_code)] // Read by build.rs only.
pub(crate) const ENVIRONMENT: &[(&str, &str)] = &[
    (
        "LEASEHOLD_URL",
        "--url: one URL, or several separated by spaces (three or more: Redlock). The URL may \
         carry a password; leasehold never prints it.",
    ),
    (
        "LEASEHOLD_CLUSTER",
        "--cluster, as 1/true/yes/on or 0/false/no/off. Not read with a --url on the command \
         line (a warning names it).",
    ),
    (
        "LEASEHOLD_SENTINEL",
        "--sentinel: the master's name. Not read with a --url on the command line (a warning \
         names it).",
    ),
    ("LEASEHOLD_TLS_CA", "--tls-ca: a PEM file."),
    ("LEASEHOLD_TLS_CERT", "--tls-cert: a PEM file."),
    ("LEASEHOLD_TLS_KEY", "--tls-key: a PEM file."),
    (
        "LEASEHOLD_CONNECT_TIMEOUT",
        "--connect-timeout: a duration (500ms, 3s).",
    ),
    (
        "LEASEHOLD_NODE_TIMEOUT",
        "--node-timeout: a duration (50ms).",
    ),
    ("LEASEHOLD_PREFIX", "--prefix."),
    (
        "LEASEHOLD_JSON",
        "--json, as 1/true/yes/on or 0/false/no/off.",
    ),
    (
        "LEASEHOLD_VERBOSE",
        "--verbose: a count (1 is -v, 2 is -vv).",
    ),
    (
        "LEASEHOLD_QUIET",
        "--quiet, as 1/true/yes/on or 0/false/no/off.",
    ),
    (
        "RUST_LOG",
        "Which events show on stderr, instead of -v/-q (e.g. leasehold=trace).",
    ),
    (
        "LEASEHOLD_FENCE, LEASEHOLD_TOKEN, LEASEHOLD_FENCES",
        "Set by `run` and `elect` for CMD: the fence (an election's term) and owner token of \
         the first NAME, and name=fence for every NAME (sorted, space-separated).",
    ),
];

/// Examples, for `--help` and the man page's EXAMPLES.
pub(crate) const EXAMPLES: &[(&str, &str)] = &[
    (
        "leasehold run nightly-backup -- ./backup.sh",
        "wait until free, then run",
    ),
    (
        "leasehold run -n -E 0 nightly -- ./job.sh",
        "skip quietly when busy (cron)",
    ),
    (
        "leasehold run --wait 5m deploy -- ./deploy.sh",
        "give up after 5 minutes (exit 75)",
    ),
    (
        "leasehold --cluster --url redis://127.0.0.1:7000 status deploy",
        "a lock on a Redis Cluster",
    ),
    (
        "LEASEHOLD_URL=unix:///run/redis/redis.sock leasehold list",
        "the server from the environment, on a Unix socket",
    ),
];

/// `--help`'s closing text: exit codes, the variables, examples.
fn after_help() -> String {
    let mut text = String::from("Exit codes:\n");
    for (code, meaning) in EXIT_CODES {
        text.push_str(&format!("  {code:<4}{meaning}\n"));
    }
    text.push_str(
        "\nEvery global option also comes from its LEASEHOLD_* variable ([env: ...] above; \
         the flag wins, and a --url on the command line takes --cluster and --sentinel from \
         the command line only); see ENVIRONMENT in `leasehold man`.\n\nExamples:\n",
    );
    for (example, what) in EXAMPLES {
        text.push_str(&format!("  {example}\n      {what}\n"));
    }
    text.trim_end().to_owned()
}

/// The key prefix when --prefix is not given; the library's
/// `leasehold::DEFAULT_PREFIX` (a unit test keeps them equal).
pub(crate) const DEFAULT_PREFIX: &str = "leasehold";

/// The subcommands.
#[derive(Debug, Subcommand)]
pub(crate) enum Command {
    /// Run CMD while holding the lock NAME (or every NAME given); release
    /// it when CMD exits.
    ///
    /// Waits until the lock is free unless --wait or --no-wait says
    /// otherwise; on a terminal, a wait longer than a second shows who
    /// holds the lock on one line of stderr.
    /// With --read or --write NAME is a read-write lock (many readers or one
    /// writer); with --permits N a semaphore (up to N holders at once).
    /// Several NAMEs (`run a b c -- CMD`, plain lock only) are taken all or
    /// none, in sorted order so that runs naming overlapping sets in any
    /// order cannot deadlock; CMD starts only once all are held.
    /// CMD gets LEASEHOLD_FENCE and LEASEHOLD_TOKEN (of the first NAME) and
    /// LEASEHOLD_FENCES (`name=fence` for every NAME, sorted, space-separated)
    /// in its environment and runs in its own process group. The lease is renewed while CMD runs.
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

    /// Run CMD while this process leads the election NAME (leader election).
    ///
    /// Campaigns with --value (default: this host's name) and waits until
    /// elected, as `run` waits for a lock; then runs CMD as `run` does, with
    /// LEASEHOLD_FENCE set to the term (it grows with every new leader).
    /// When the leadership is lost, CMD is stopped and leasehold exits 70;
    /// when CMD ends, leasehold resigns and the next candidate leads within
    /// milliseconds. `leasehold status NAME` shows the leader's value.
    Elect(ElectArgs),

    /// Take the lock and keep it after exiting; prints the token and fence.
    ///
    /// Waits until the lock is free unless --wait or --no-wait says
    /// otherwise. The lease is not renewed: it ends after --ttl unless
    /// extended with `leasehold extend` or released with `leasehold release`.
    Acquire(AcquireArgs),

    /// Set the lease held under TOKEN to end --ttl from now.
    Extend(ExtendArgs),

    /// Release the lease held under TOKEN, or with --force whatever holds NAME.
    ///
    /// --force breaks a stuck lock of any kind (lock, election, reentrant,
    /// rwlock, semaphore) without its token and says what it removed: the
    /// kind, each holder's token prefix and the time its lease had left.
    /// It breaks mutual exclusion: the holder is not told and runs on until
    /// its next renewal fails, beside the next holder. A waiter queued for
    /// a lock gets it at once. The last fence is kept, so the next holder's
    /// fence is above the broken one's. Asks first when stdin is a terminal
    /// (anything but y exits 1, having changed nothing); never otherwise.
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

    /// Print a completion script for SHELL on stdout.
    ///
    /// bash: leasehold completions bash > ~/.local/share/bash-completion/completions/leasehold;
    /// zsh: leasehold completions zsh > ~/.zfunc/_leasehold (with ~/.zfunc in $fpath);
    /// fish: leasehold completions fish > ~/.config/fish/completions/leasehold.fish
    Completions(CompletionsArgs),

    /// Print the man page, leasehold(1), on stdout (roff).
    ///
    /// mkdir -p ~/.local/share/man/man1 && leasehold man > ~/.local/share/man/man1/leasehold.1
    Man,

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
    /// 5 nodes against 1), run-stampede (6: 200 `run` jobs of one lock, 40 at
    /// a time, against flock(1)). Each figure is printed with its target and PASS
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

/// How long to wait for the lock, and what to say when it stays taken.
#[derive(Debug, Args)]
pub(crate) struct WaitArgs {
    /// How long to wait for the lock while someone else holds it: a
    /// duration (500ms, 30s, 2m), plain seconds (5, 0.5, as flock -w takes
    /// them) or forever (also inf); 0 is --no-wait (as flock -w 0). Past
    /// it, exit 75 (or -E). Defaults to forever: wait until acquired, as
    /// flock(1) does.
    #[arg(short = 'w', long, value_name = "DURATION|forever", value_parser = parse_wait, conflicts_with = "no_wait")]
    pub(crate) wait: Option<Wait>,

    /// Fail at once (exit 75, or -E) when someone else holds the lock.
    #[arg(short = 'n', long)]
    pub(crate) no_wait: bool,

    /// The exit code when the lock is busy (--no-wait) or the wait ran out,
    /// so a command's own 75 can be told apart; 0 skips quietly (cron): exit 0
    /// and nothing printed, as `flock -n` does.
    #[arg(short = 'E', long, value_name = "N", default_value_t = 75)]
    pub(crate) conflict_exit_code: u8,
}

/// How long to wait: a bound, or until acquired.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Wait {
    /// Until acquired.
    Forever,
    /// At most this long.
    For(Duration),
}

impl Wait {
    /// As the library takes it: `Duration::MAX` waits until acquired.
    pub(crate) fn duration(self) -> Duration {
        match self {
            Wait::Forever => Duration::MAX,
            Wait::For(d) => d,
        }
    }
}

/// Arguments of `run`.
#[derive(Debug, Args)]
pub(crate) struct RunArgs {
    /// The lock name.
    pub(crate) name: String,

    /// More lock names, held together with NAME: all or none (the plain
    /// lock only; a name given twice counts once).
    #[arg(value_name = "NAME")]
    pub(crate) more: Vec<String>,

    /// Lease length, renewed while CMD runs: it bounds how long a crashed
    /// leasehold keeps others out (10ms to 24h; a duration such as 30s, or
    /// plain seconds such as 30).
    #[arg(long, value_name = "DURATION", default_value = "30s", value_parser = parse_ttl)]
    pub(crate) ttl: Duration,

    /// How long to wait.
    #[command(flatten)]
    pub(crate) wait: WaitArgs,

    /// What to hold: the plain lock, a read or the write hold, or a permit.
    #[command(flatten)]
    pub(crate) hold: HoldArgs,

    /// After a lost lease, how long CMD gets between SIGTERM and SIGKILL.
    #[arg(long, value_name = "DURATION", default_value = "10s", value_parser = parse_duration)]
    pub(crate) kill_grace: Duration,

    /// Keep the lock until at least DURATION after it was taken, however
    /// soon CMD ends (up to 24h): the same job started a little later on
    /// another host (clock skew, cron jitter) finds it taken and does not
    /// run twice. With --no-wait, the recipe for cron on many hosts.
    #[arg(long, value_name = "DURATION", value_parser = parse_at_most_a_day)]
    pub(crate) at_least: Option<Duration>,

    /// If leasehold dies (kill -9, a crash, a cut network) instead of
    /// releasing, keep everyone out for DURATION after the lease ends too
    /// (up to 24h; the plain lock only): time for a stalled CMD to be gone
    /// before the next holder starts. A clean end frees the lock at once.
    #[arg(long, value_name = "DURATION", value_parser = parse_at_most_a_day,
          conflicts_with_all = ["read", "write", "permits"])]
    pub(crate) lock_delay: Option<Duration>,

    /// Write the result object (as --json does on stderr, with or without
    /// --json) to FILE instead, when the run ends.
    #[arg(long, value_name = "FILE")]
    pub(crate) json_file: Option<PathBuf>,

    /// The command and its arguments, after `--`.
    #[arg(last = true, required = true, value_name = "CMD")]
    pub(crate) command: Vec<OsString>,

    /// `elect`: campaign with this value instead of taking the lock.
    #[arg(skip)]
    pub(crate) elect: Option<String>,
}

/// Arguments of `elect`.
#[derive(Debug, Args)]
pub(crate) struct ElectArgs {
    /// The election's name (a lock name).
    pub(crate) name: String,

    /// What this candidate campaigns with, shown by `status` while it
    /// leads (an address, a host name). Defaults to this host's name.
    #[arg(long, value_name = "V")]
    pub(crate) value: Option<String>,

    /// Lease length, renewed while CMD runs: how long a crashed leader
    /// keeps the others waiting (10ms to 24h; a duration such as 30s, or
    /// plain seconds such as 30).
    #[arg(long, value_name = "DURATION", default_value = "30s", value_parser = parse_ttl)]
    pub(crate) ttl: Duration,

    /// How long to wait to be elected.
    #[command(flatten)]
    pub(crate) wait: WaitArgs,

    /// After a lost leadership, how long CMD gets between SIGTERM and SIGKILL.
    #[arg(long, value_name = "DURATION", default_value = "10s", value_parser = parse_duration)]
    pub(crate) kill_grace: Duration,

    /// Write the result object (as --json does on stderr, with or without
    /// --json) to FILE instead, when the run ends.
    #[arg(long, value_name = "FILE")]
    pub(crate) json_file: Option<PathBuf>,

    /// The command and its arguments, after `--`.
    #[arg(last = true, required = true, value_name = "CMD")]
    pub(crate) command: Vec<OsString>,
}

impl ElectArgs {
    /// The `run` this is: the election's lock, taken by campaigning with
    /// the value (`default_value` when --value is not given).
    pub(crate) fn into_run(self, default_value: impl FnOnce() -> String) -> RunArgs {
        let value = self.value.unwrap_or_else(default_value);
        RunArgs {
            name: self.name,
            more: Vec::new(),
            ttl: self.ttl,
            wait: self.wait,
            hold: HoldArgs::default(),
            kill_grace: self.kill_grace,
            at_least: None,
            lock_delay: None,
            json_file: self.json_file,
            command: self.command,
            elect: Some(value),
        }
    }
}

/// What `run` holds: the plain lock unless one of these is given.
#[derive(Debug, Default, Args)]
pub(crate) struct HoldArgs {
    /// NAME is a read-write lock; hold a read lock of it: many readers at
    /// once, none while a writer holds it or waits for it.
    #[arg(long, conflicts_with_all = ["write", "permits"])]
    pub(crate) read: bool,

    /// NAME is a read-write lock; hold its write lock: alone, once the
    /// readers left; new readers wait while it waits.
    #[arg(long, conflicts_with = "permits")]
    pub(crate) write: bool,

    /// NAME is a semaphore of N permits; hold one of them: up to N commands
    /// at once. Everyone using NAME must pass the same N.
    #[arg(long, value_name = "N", value_parser = parse_permits)]
    pub(crate) permits: Option<u32>,
}

/// Which kind of lock `status` shows, when the kind found on the server is
/// not what is wanted: none of these finds it out.
#[derive(Debug, Default, Args)]
pub(crate) struct KindArgs {
    /// Show NAME as a read-write lock: its writer, readers and waiting writers.
    #[arg(long, conflicts_with_all = ["write", "permits", "reentrant"])]
    pub(crate) read: bool,

    /// The same as --read.
    #[arg(long, conflicts_with_all = ["permits", "reentrant"])]
    pub(crate) write: bool,

    /// Show NAME as a semaphore of N permits: the permits held and by whom.
    #[arg(long, value_name = "N", value_parser = parse_permits)]
    pub(crate) permits: Option<u32>,

    /// Show NAME as a reentrant lock: its owner (id prefix) and holds.
    #[arg(long, conflicts_with = "permits")]
    pub(crate) reentrant: bool,
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

    /// Lease length. Not renewed: the lease ends this long after the
    /// acquisition unless `leasehold extend` moves it (10ms to 24h; a
    /// duration such as 30s, or plain seconds such as 30).
    #[arg(long, value_name = "DURATION", default_value = "30s", value_parser = parse_ttl)]
    pub(crate) ttl: Duration,

    /// How long to wait.
    #[command(flatten)]
    pub(crate) wait: WaitArgs,
}

/// Arguments of `extend`.
#[derive(Debug, Args)]
pub(crate) struct ExtendArgs {
    /// The lock name.
    pub(crate) name: String,

    /// The owner token printed by `leasehold acquire`.
    pub(crate) token: String,

    /// The new lease length, from now (10ms to 24h; a duration such as 30s,
    /// or plain seconds such as 30).
    #[arg(long, value_name = "DURATION", default_value = "30s", value_parser = parse_ttl)]
    pub(crate) ttl: Duration,
}

/// Arguments of `release`.
#[derive(Debug, Args)]
pub(crate) struct ReleaseArgs {
    /// The lock name.
    pub(crate) name: String,

    /// The owner token printed by `leasehold acquire`.
    #[arg(required_unless_present = "force")]
    pub(crate) token: Option<String>,

    /// Break the lock whatever holds it, without its token (see above).
    #[arg(long, conflicts_with = "token")]
    pub(crate) force: bool,
}

/// Arguments of `status`.
#[derive(Debug, Args)]
pub(crate) struct StatusArgs {
    /// The lock name.
    pub(crate) name: String,

    /// Which kind of lock to show; found out from the server when not given.
    #[command(flatten)]
    pub(crate) kind: KindArgs,
}

/// Arguments of `list`.
#[derive(Debug, Args)]
pub(crate) struct ListArgs {
    /// Glob over lock names (`*` and `?`).
    #[arg(default_value = "*")]
    pub(crate) pattern: String,
}

/// Arguments of `completions`.
#[derive(Debug, Args)]
pub(crate) struct CompletionsArgs {
    /// The shell.
    #[arg(value_enum)]
    pub(crate) shell: Shell,
}

/// The shells `completions` writes for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub(crate) enum Shell {
    /// GNU bash.
    Bash,
    /// Z shell.
    Zsh,
    /// fish.
    Fish,
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

    /// run-stampede: jobs per round and tool. Defaults to 200, or 40 with --quick.
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(2..=10_000))]
    pub(crate) jobs: Option<u32>,

    /// run-stampede: jobs at a time. Defaults to 40, or 10 with --quick.
    #[arg(long, value_name = "P", value_parser = clap::value_parser!(u32).range(1..=200))]
    pub(crate) parallel: Option<u32>,

    /// run-stampede: each job's critical section (a sleep). Defaults to 10ms.
    #[arg(long, value_name = "DURATION", value_parser = parse_duration)]
    pub(crate) section: Option<Duration>,

    /// run-stampede: rounds, each running leasehold and flock(1) in turn.
    /// Defaults to 3, or 1 with --quick.
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..=20))]
    pub(crate) rounds: Option<u32>,

    /// The round trip (PING p50, measured first) above which the machine is
    /// too noisy to judge: every figure is printed, no verdict ("noisy: floors
    /// not judged"). Defaults to 50us (a quiet machine's is ~21us).
    #[arg(long, value_name = "DURATION", value_parser = parse_duration)]
    pub(crate) quiet_rtt: Option<Duration>,

    /// The load from elsewhere (percent of all cores busy while the bench
    /// sleeps, from /proc/stat) above which the machine is too noisy to
    /// judge. Defaults to 15.
    #[arg(long, value_name = "PERCENT", value_parser = clap::value_parser!(u8).range(0..=100))]
    pub(crate) quiet_load: Option<u8>,
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
    /// 6: N `leasehold run` jobs of one lock, P at a time, against flock(1).
    #[value(alias = "6")]
    RunStampede,
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
    /// An inherited descriptor of the pipe `run` writes its go-ahead on
    /// (the environment to add, the group to take the terminal from); the
    /// launcher closes it before executing CMD, and without a whole
    /// go-ahead exits without running anything.
    #[arg(long, value_name = "FD")]
    pub(crate) go_fd: i32,
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

/// Parses a human duration ("500ms", "30s", "2m") or plain seconds ("5",
/// "0.5", as flock(1) takes them); zero is refused because every duration
/// here bounds something that must be able to happen.
pub(crate) fn parse_duration(s: &str) -> Result<Duration, String> {
    match parse_span(s)? {
        d if d.is_zero() => Err("must be above zero".to_owned()),
        d => Ok(d),
    }
}

/// What a duration flag says: plain seconds or a human duration, zero
/// included.
fn parse_span(s: &str) -> Result<Duration, String> {
    const EXPECTED: &str = "expected seconds (5, 0.5) or a duration like 500ms, 30s or 2m";
    if let Some(seconds) = plain_seconds(s.trim()) {
        return seconds;
    }
    match humantime::parse_duration(s) {
        Ok(d) => Ok(d),
        Err(humantime::DurationError::NumberOverflow) => {
            Err(format!("too large, or finer than 1ns; {EXPECTED}"))
        }
        Err(_) => Err(EXPECTED.to_owned()),
    }
}

/// Plain seconds, `digits[.digits]` (flock's `-w 5`, `-w 0.5`), to the
/// nanosecond: `None` for anything else. Read as decimal digits, not as a
/// float, so 0.1 is 100ms exactly.
fn plain_seconds(s: &str) -> Option<Result<Duration, String>> {
    let (whole, fraction) = s.split_once('.').unwrap_or((s, ""));
    let digits = |part: &str| !part.is_empty() && part.bytes().all(|b| b.is_ascii_digit());
    if !digits(whole) || (s.contains('.') && !digits(fraction)) {
        return None;
    }
    if fraction.len() > 9 {
        return Some(Err(format!(
            "{s} seconds is finer than 1ns; give at most 9 decimals"
        )));
    }
    let Ok(secs) = whole.parse::<u64>() else {
        return Some(Err(format!("{s} seconds is too large")));
    };
    // Nine digits of nanoseconds: "5" is 500_000_000.
    let nanos = if fraction.is_empty() {
        0
    } else {
        format!("{fraction:0<9}").parse::<u32>().ok()?
    };
    Some(Ok(Duration::new(secs, nanos)))
}

/// The lease lengths the library accepts by default (its `ttl_bounds`).
const TTL_BOUNDS: (Duration, Duration) =
    (Duration::from_millis(10), Duration::from_secs(24 * 3600));

/// Parses a lease length: a duration within [`TTL_BOUNDS`], checked here so
/// a bad one is a usage error before anything connects.
pub(crate) fn parse_ttl(s: &str) -> Result<Duration, String> {
    let ttl = parse_duration(s)?;
    let (min, max) = TTL_BOUNDS;
    if ttl < min || ttl > max {
        return Err(format!(
            "a lease lasts 10ms to 24h; {} is out of range",
            humantime::format_duration(ttl)
        ));
    }
    Ok(ttl)
}

/// Parses a duration of at most a day (`--at-least`, `--lock-delay`).
pub(crate) fn parse_at_most_a_day(s: &str) -> Result<Duration, String> {
    let d = parse_duration(s)?;
    if d > TTL_BOUNDS.1 {
        return Err(format!(
            "at most 24h; {} is out of range",
            humantime::format_duration(d)
        ));
    }
    Ok(d)
}

/// Parses `--wait`: a duration or plain seconds, forever (`forever`,
/// `inf`, `infinity`), or zero (`0`, `0s`, `0.0`: no wait, as flock's `-w 0`).
pub(crate) fn parse_wait(s: &str) -> Result<Wait, String> {
    match s.trim().to_ascii_lowercase().as_str() {
        "forever" | "inf" | "infinity" => Ok(Wait::Forever),
        _ => parse_span(s)
            .map(Wait::For)
            .map_err(|e| format!("{e}, or forever")),
    }
}

/// Parses a permit count; zero is refused, since nobody could ever hold one.
pub(crate) fn parse_permits(s: &str) -> Result<u32, String> {
    match s.parse::<u32>() {
        Ok(0) => Err("must be at least 1: with 0 permits no command could ever run".to_owned()),
        Ok(n) => Ok(n),
        Err(_) => Err("expected a whole number of permits, like 4".to_owned()),
    }
}
