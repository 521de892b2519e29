//! `leasehold run`: a command under a lock, the distributed flock(1), or
//! under a read or write hold or a semaphore permit ([`AnyGuard`]).
//!
//! All lock work (acquire, renewal, loss detection, release) is the
//! library's. This module keeps one promise: the command, and everything it
//! started in its process group, never runs without the lease, whatever
//! happens to the `leasehold` process.
//!
//! - The command runs in a process group of its own, so a lost lease (or
//!   the end of the command) can stop everything it started without
//!   touching leasehold or its pipeline neighbours. It is started through a
//!   launcher ([`exec`]) that waits for leasehold's go-ahead; leasehold tells
//!   the watcher the launcher's group before it gives it.
//! - Both helpers start before leasehold connects, so their start-up runs
//!   while it connects and waits: once the lock is held only the exec of
//!   the command is left, and once the command and its group are gone the
//!   release goes out before any clean-up.
//! - A watcher process ([`watch`]) in yet another group SIGKILLs the
//!   command's group the moment leasehold dies (SIGKILL, a crash), and
//!   SIGSTOPs it while leasehold is stopped by a signal it cannot catch
//!   (SIGSTOP, SIGTTIN, SIGTTOU).
//! - Signals that would end leasehold (SIGHUP, SIGINT, SIGQUIT, SIGTERM,
//!   SIGUSR1, SIGUSR2, SIGALRM, SIGVTALRM, SIGPROF, SIGIO, SIGPWR) and
//!   SIGWINCH are passed on to the command's group; leasehold waits for
//!   the command to end, then releases.
//! - Job control as a shell does it: when stdin is the terminal and
//!   leasehold's group is in its foreground, the command's group gets the
//!   terminal (so it reads typed input, and Ctrl-C and Ctrl-Z reach it);
//!   when the command stops on Ctrl-Z, leasehold takes the terminal back
//!   and stops its own group too, so the shell sees the job stopped.
//!   SIGTSTP sent to leasehold stops the command first. On SIGCONT (`fg`,
//!   `bg`) leasehold checks the lease before the command may run again:
//!   held, the command gets the terminal (in the foreground) and SIGCONT;
//!   lost, the lost-lease path below.
//! - A lost lease: SIGTERM, SIGKILL after `--kill-grace`, exit 70. A
//!   command stopped at that moment is never continued; a lease lost
//!   before the command was spawned (leasehold stopped or paused between
//!   acquiring and spawning) means the command is not run at all: exit 70.
//! - When the command exits, processes it left running in its group get
//!   the same SIGTERM / SIGKILL treatment before the lock is released.
//!   leasehold adopts the orphans of the command's tree (it is a child
//!   subreaper), so in the common case one look at its own children tells
//!   that nothing is left ([`group::Leftovers`]).

mod exec;
mod group;
mod timing;
mod tty;
mod watch;

pub(crate) use exec::exec;
#[cfg(feature = "bench")]
pub(crate) use timing::VAR as TIMES_VAR;
pub(crate) use watch::watch;

use std::future::poll_fn;
use std::io;
use std::os::unix::process::ExitStatusExt;
use std::process::ExitStatus;
use std::task::Poll;
use std::time::Duration;

use leasehold::Error;
use nix::errno::Errno;
use nix::sys::signal::{Signal, raise};
use nix::sys::wait::{Id, WaitPidFlag, WaitStatus, waitid};
use nix::unistd::{Pid, getpgrp};
use tokio::signal::unix::SignalKind;
use tokio::time::Instant;

use crate::args::{Global, RunArgs};
use crate::exit::{self, Failure};
use crate::hold::{AnyGuard, take_all, take_hold, take_leadership};
use crate::parse::LeaseArgs;
use crate::session::catch;
use crate::session::connect_for;
use exec::Launcher;
use watch::Watcher;

/// `run-exec` or `run-watch` exactly as `run` starts them ([`Launcher`],
/// [`Watcher`]) runs here, in `main` before the command line's parser:
/// building the whole CLI's definition took 0.65 ms of a helper's 1.75 ms
/// of CPU, and `run` starts two. Returns the exit code, or `None` for
/// anything else, which clap then parses (the same commands typed by hand
/// included).
pub(crate) fn helper(args: &[std::ffi::OsString]) -> Option<u8> {
    match helper_args(args)? {
        HelperArgs::Exec(args) => Some(exec(args)),
        HelperArgs::Watch(args) => Some(watch(&args)),
    }
}

/// The arguments of a helper, as [`helper`] reads them.
#[derive(Debug)]
enum HelperArgs {
    /// `run-exec --go-fd FD -- CMD...`.
    Exec(crate::args::RunExecArgs),
    /// `run-watch --pid PID --poll-ms MS`.
    Watch(crate::args::RunWatchArgs),
}

/// `args` (the program's name first) as one of the two shapes `run`
/// starts, or `None`.
fn helper_args(args: &[std::ffi::OsString]) -> Option<HelperArgs> {
    let word = |i: usize| args.get(i).and_then(|a| a.to_str());
    match (word(1)?, word(2)?, word(4)?) {
        ("run-watch", "--pid", "--poll-ms") if args.len() == 6 => {
            Some(HelperArgs::Watch(crate::args::RunWatchArgs {
                pid: word(3)?.parse().ok()?,
                poll_ms: word(5)?.parse().ok()?,
            }))
        }
        ("run-exec", "--go-fd", "--") if args.len() > 5 => {
            Some(HelperArgs::Exec(crate::args::RunExecArgs {
                go_fd: word(3)?.parse().ok()?,
                command: args[5..].to_vec(),
            }))
        }
        _ => None,
    }
}

/// `leasehold run NAME [NAME]... -- CMD...`: returns CMD's exit code, or 70 when the
/// lease was lost while it ran.
pub(crate) async fn run(global: &Global, args: RunArgs) -> Result<u8, Failure> {
    if args.command.is_empty() {
        return Err(Failure::usage("no command given after `--`"));
    }
    let me = nix::unistd::getpid();
    timing::mark(me, "start");
    let started = Instant::now();
    // Before anything is started: whatever the command leaves behind when
    // its parent exits comes to this process (see group::Leftovers).
    let adopting = group::adopt_orphans();
    let mut helpers = Helpers::start(&args.command, poll_period(args.ttl), adopting).await?;
    timing::mark(me, "helpers");
    let mut lease = LeaseArgs {
        at_least: args.at_least,
        lock_delay: args.lock_delay.unwrap_or_default(),
        about: Some(who_runs(&args.command)),
        ..LeaseArgs::new(args.ttl, &args.wait, global)
    };
    let client = match connect_for(global, &lease).await {
        Ok(client) => client,
        Err(failure) => {
            helpers.dismiss().await;
            return Err(failure);
        }
    };
    timing::mark(me, "connected");
    // --wait covers riding through a failover while connecting too.
    lease.spend(started.elapsed());
    let outcome = run_locked(&client, global, args, &lease, &mut helpers).await;
    // What the command did not use (the lock was not had, or the command
    // not run): sent away, reaped.
    helpers.dismiss().await;
    // Nothing stays held when leasehold exits: a release that failed above
    // went to the background, and the runtime's shutdown would drop it.
    if let Err(e) = client.close().await {
        exit::warning(Failure::from(e).message);
    }
    timing::mark(me, "end");
    outcome
}

/// What `run`'s hold says of its holder (`leasehold status` and `list` show
/// it): `<host> pid <pid>: <program>`, this process's pid and the command's
/// program as given, cut to fit the library's 512 bytes. Not its arguments:
/// a command line may carry a secret (a password given as an argument), and
/// whoever can read the lock's keys reads this.
fn who_runs(command: &[std::ffi::OsString]) -> String {
    const MOST: usize = 512;
    let host = nix::unistd::gethostname()
        .map_or_else(|_| "?".to_owned(), |h| h.to_string_lossy().into_owned());
    let program = command
        .first()
        .map_or_else(String::new, |p| p.to_string_lossy().into_owned());
    let mut who = format!("{host} pid {}: {program}", std::process::id());
    if who.len() > MOST {
        let mut end = MOST - "…".len();
        while !who.is_char_boundary(end) {
            end -= 1;
        }
        who.truncate(end);
        who.push('…');
    }
    who
}

/// The processes `run` starts before it connects: the watcher, and the
/// launcher waiting to become the command.
struct Helpers {
    /// The watcher.
    watcher: Watcher,
    /// The launcher, until it is told to run the command or sent away.
    launcher: Option<Launcher>,
    /// Whether this process adopts its descendants' orphans.
    adopting: bool,
}

impl Helpers {
    /// Starts both; exit 70 if either cannot start (nothing connected or
    /// held yet). The launcher first: when the lock is free, its start-up
    /// (an exec of leasehold) is what the command waits for once the lock
    /// is held, while the watcher only has to be there to read its pipe.
    async fn start(
        command: &[std::ffi::OsString],
        poll: Duration,
        adopting: bool,
    ) -> Result<Helpers, Failure> {
        let launcher = Launcher::start(command).map_err(|e| {
            Failure::with_code(
                exit::SOFTWARE,
                format!(
                    "cannot start the command's launcher (leasehold itself): {e}; the command \
                     was not run"
                ),
            )
        })?;
        match Watcher::spawn(poll) {
            Ok(watcher) => Ok(Helpers {
                watcher,
                launcher: Some(launcher),
                adopting,
            }),
            Err(e) => {
                launcher.dismiss().await;
                Err(Failure::with_code(
                    exit::SOFTWARE,
                    format!(
                        "cannot start the watcher process that stops the command if leasehold \
                         dies ({e}); the command was not run"
                    ),
                ))
            }
        }
    }

    /// Sends away what is left: a launcher never told to go exits without
    /// running anything, the watcher without touching anything.
    async fn dismiss(&mut self) {
        if let Some(launcher) = self.launcher.take() {
            launcher.dismiss().await;
        }
        self.watcher.done().await;
    }
}

/// [`run`] once connected: takes the hold, runs the command under it;
/// with `--json` or `--json-file`, one object when it ends (stdout is
/// the command's).
async fn run_locked(
    client: &leasehold::Client,
    global: &Global,
    args: RunArgs,
    lease: &LeaseArgs,
    helpers: &mut Helpers,
) -> Result<u8, Failure> {
    let started = Instant::now();
    let guard = match &args.elect {
        Some(value) => take_leadership(client, &args.name, lease, value).await?,
        None if args.more.is_empty() => {
            take_hold(client, &args.name, lease, args.hold.mode()).await?
        }
        None => {
            let names: Vec<String> = std::iter::once(&args.name)
                .chain(&args.more)
                .cloned()
                .collect();
            take_all(client, &names, lease).await?
        }
    };
    let acquired = Instant::now();
    timing::mark(nix::unistd::getpid(), "acquired");
    let summary = (global.json || args.json_file.is_some()).then(|| Summary {
        name: args.name.clone(),
        kind: guard.kind(),
        fence: guard.fence(),
        fences: guard.fences(),
        waited: acquired - started,
        acquired,
    });
    let mut lost = false;
    let result = run_held(guard, &args, &mut lost, helpers).await;
    if let Some(summary) = summary {
        summary.emit(&result, lost, args.json_file.as_deref());
    }
    result
}

/// What `run --json` prints when it ends.
struct Summary {
    /// The lock name.
    name: String,
    /// `lock`, `rwlock` or `semaphore`.
    kind: &'static str,
    /// The fence of the hold (of the first NAME).
    fence: u64,
    /// Every name held with its fence, sorted by name.
    fences: Vec<(String, u64)>,
    /// How long taking the hold took.
    waited: Duration,
    /// When it was taken.
    acquired: Instant,
}

impl Summary {
    /// One JSON object, on a line of stderr or in `file`: the hold, the
    /// times, whether the lease was lost, and the exit code. Never on
    /// stdout, which is the command's.
    fn emit(self, result: &Result<u8, Failure>, lost: bool, file: Option<&std::path::Path>) {
        let code = match result {
            Ok(code) => *code,
            Err(failure) => failure.code,
        };
        let names: Vec<&str> = self.fences.iter().map(|(n, _)| n.as_str()).collect();
        let fences: serde_json::Map<String, serde_json::Value> = self
            .fences
            .iter()
            .map(|(n, f)| (n.clone(), (*f).into()))
            .collect();
        let object = serde_json::json!({
            "name": self.name,
            "names": names,
            "kind": self.kind,
            "fence": self.fence,
            "fences": fences,
            "waited_ms": crate::output::millis(self.waited),
            "held_ms": crate::output::millis(self.acquired.elapsed()),
            "lost": lost,
            "exit_code": code,
        });
        match file {
            Some(path) => {
                if let Err(e) = std::fs::write(path, format!("{object}\n")) {
                    exit::warning(format!(
                        "cannot write the result to {}: {e}",
                        path.display()
                    ));
                }
            }
            None => crate::output::emit_json_stderr(&object),
        }
    }
}

/// Runs the command under `guard` and returns the exit code; sets `lost`
/// when the lease was lost while the command ran.
async fn run_held(
    guard: AnyGuard,
    args: &RunArgs,
    lost: &mut bool,
    helpers: &mut Helpers,
) -> Result<u8, Failure> {
    // Handlers go in before the command may run, so a signal that arrives
    // while it starts is handled instead of killing leasehold.
    let mut signals = Signals::install()?;

    let own_group = getpgrp();
    let terminal = tty::on_stdin();
    let foreground_of = (terminal && tty::foreground() == Some(own_group)).then_some(own_group);
    let envs = [
        ("LEASEHOLD_FENCE", guard.fence().to_string()),
        ("LEASEHOLD_TOKEN", guard.token().to_owned()),
        ("LEASEHOLD_FENCES", fences_env(&guard.fences())),
    ];
    stop_here_for_tests();
    // Checked last before the command starts: leasehold may have been
    // stopped or paused since it acquired (the watcher has no group to stop
    // yet), and a command spawned now would run without the lease until
    // the supervisor saw the loss.
    let launcher = helpers.launcher.take();
    if guard.is_lost() {
        if let Some(launcher) = launcher {
            launcher.dismiss().await;
        }
        *lost = true;
        let what = guard.what();
        let _ = guard.release().await;
        return Err(Failure::with_code(
            exit::SOFTWARE,
            format!(
                "the lease on {what} was lost before the command started (leasehold was stopped \
                 or paused longer than the lease lasts, or Redis did not renew it in time); the \
                 command was not run"
            ),
        ));
    }
    let Some(mut launcher) = launcher else {
        let _ = guard.release().await;
        return Err(Failure::with_code(
            exit::SOFTWARE,
            "the command's launcher is gone; the command was not run",
        ));
    };
    let leader = launcher.pid();
    // The watcher learns the command's group before the command may run:
    // from here on, a leasehold that dies takes that group with it.
    let told = helpers
        .watcher
        .watch_group(leader)
        .and_then(|()| launcher.go(&envs, foreground_of));
    let mut child = launcher.into_child();
    if let Err(e) = told {
        group::signal(leader, Signal::SIGKILL);
        helpers.watcher.done().await;
        let _ = child.wait();
        let _ = guard.release().await;
        return Err(Failure::with_code(
            exit::SOFTWARE,
            format!("cannot start the command through its launcher (leasehold itself): {e}"),
        ));
    }
    timing::mark(nix::unistd::getpid(), "spawned");

    let mut supervisor = Supervisor {
        guard: &guard,
        leader,
        leftovers: group::Leftovers::new(leader, helpers.watcher.pid(), helpers.adopting),
        own_group,
        terminal,
        kill_grace: args.kill_grace,
        kill_at: None,
        killed: false,
        job_stopped: false,
        status: None,
    };
    let outcome = supervisor
        .supervise(&mut signals, &mut helpers.watcher)
        .await;
    *lost = matches!(outcome, Outcome::Lost) || guard.is_lost();
    timing::mark(nix::unistd::getpid(), "group-gone");
    // Nothing of the command's group runs any more: the release goes out
    // first, the clean-up after it.
    let result = finish(guard, outcome, lost).await;
    // The watcher leaves before the command is reaped: until then the
    // group's id cannot be reused, so the watcher never kills a stranger.
    helpers.watcher.done().await;
    let _ = child.wait();
    result
}

/// Debug builds only (the tests'): with `LEASEHOLD_TEST_STOP_BEFORE_SPAWN`
/// set, stops this process (SIGSTOP) right before the command is spawned,
/// as a pause of the whole process there would, so a test can let the
/// lease lapse between acquiring and spawning and then continue it.
fn stop_here_for_tests() {
    #[cfg(debug_assertions)]
    if std::env::var_os("LEASEHOLD_TEST_STOP_BEFORE_SPAWN").is_some() {
        let _ = raise(Signal::SIGSTOP);
    }
}

/// LEASEHOLD_FENCES: `name=fence` for every name held, sorted by name,
/// separated by spaces (a name with spaces in it makes that ambiguous;
/// split a pair at its last `=`).
fn fences_env(fences: &[(String, u64)]) -> String {
    let pairs: Vec<String> = fences.iter().map(|(n, f)| format!("{n}={f}")).collect();
    pairs.join(" ")
}

/// How often the watcher checks whether leasehold is stopped: a tenth of
/// the TTL, between 5 ms and 100 ms, so the command is stopped long before
/// a lease that nobody renews can expire.
fn poll_period(ttl: Duration) -> Duration {
    (ttl / 10).clamp(Duration::from_millis(5), Duration::from_millis(100))
}

/// How the command ended.
enum Outcome {
    /// It exited while the lease held.
    Exited(ExitStatus),
    /// The lease was lost while it ran; it was terminated.
    Lost,
    /// Waiting for it failed; its group was killed.
    WaitFailed(io::Error),
}

/// What woke the supervisor.
enum Event {
    /// SIGCHLD: the command, the watcher or an orphan `run` adopted
    /// changed state.
    Child,
    /// A signal to pass on to the command's group.
    Forward(Signal),
    /// SIGTSTP to leasehold.
    Stop,
    /// SIGCONT to leasehold.
    Continue,
    /// The watcher stopped the command while leasehold was stopped.
    WatcherStopped,
    /// The lease is lost.
    Lost,
    /// The grace after SIGTERM is over.
    KillNow,
}

/// The command while it runs, and what leasehold did to it.
struct Supervisor<'a> {
    /// The lease.
    guard: &'a AnyGuard,
    /// The command's PID (first the launcher's, which becomes it), also
    /// its process group's id.
    leader: Pid,
    /// What the command leaves behind in its group.
    leftovers: group::Leftovers,
    /// leasehold's own process group.
    own_group: Pid,
    /// Whether stdin is leasehold's controlling terminal.
    terminal: bool,
    /// Time between SIGTERM and SIGKILL.
    kill_grace: Duration,
    /// Set once the lease is lost: when the process group gets SIGKILL.
    kill_at: Option<Instant>,
    /// Whether SIGKILL was sent.
    killed: bool,
    /// Set while leasehold stops itself with its command, for job control.
    job_stopped: bool,
    /// How the command ended, once it did (read without reaping it).
    status: Option<ExitStatus>,
}

impl Supervisor<'_> {
    /// Waits for the command to end, passing signals on, following job
    /// control and stopping the command if the lease is lost.
    async fn supervise(&mut self, signals: &mut Signals, watcher: &mut Watcher) -> Outcome {
        loop {
            // Checked before every wait: each state change also raises
            // SIGCHLD, so none is missed between a check and the wait.
            match self.check_command() {
                Ok(true) => {
                    timing::mark(nix::unistd::getpid(), "exited");
                    return self.after_exit().await;
                }
                Ok(false) => {}
                Err(e) => {
                    group::signal(self.leader, Signal::SIGKILL);
                    return Outcome::WaitFailed(e);
                }
            }
            let guard = self.guard;
            let kill_at = self.kill_at;
            let event = tokio::select! {
                caught = signals.next() => caught,
                () = watcher.stopped_command() => Event::WatcherStopped,
                () = guard.lost(), if kill_at.is_none() => Event::Lost,
                () = sleep_until_some(kill_at), if !self.killed => Event::KillNow,
            };
            match event {
                // Orphans of the command that exited: reaped now, so that
                // they do not pile up while a long command runs.
                Event::Child => self.leftovers.reap_exited(),
                Event::Forward(sig) => group::signal(self.leader, sig),
                Event::Stop => self.job_stop(watcher),
                Event::Continue => self.resume(watcher),
                Event::WatcherStopped => {
                    // Stopped by the watcher after leasehold was continued
                    // (it looks every few ms): decide again.
                    if !self.job_stopped {
                        self.resume(watcher);
                    }
                }
                Event::Lost => self.start_lost(),
                Event::KillNow => {
                    group::signal(self.leader, Signal::SIGKILL);
                    self.killed = true;
                }
            }
        }
    }

    /// True once the command exited (it is left unreaped, so its PID, the
    /// group's id, cannot be reused yet; its status is kept). Acts on a
    /// stop reported meanwhile.
    fn check_command(&mut self) -> io::Result<bool> {
        let flags = WaitPidFlag::WEXITED | WaitPidFlag::WNOHANG | WaitPidFlag::WNOWAIT;
        let raw = match waitid(Id::Pid(self.leader), flags) {
            Ok(WaitStatus::Exited(_, code)) => Some((code & 0xff) << 8),
            Ok(WaitStatus::Signaled(_, sig, core)) => {
                Some(sig as i32 | if core { 0x80 } else { 0 })
            }
            Ok(_) => None,
            // With WEXITED only, EINVAL comes from nix naming the signal
            // the command died of (a real-time one): it exited all the
            // same, and /proc still shows the zombie's status.
            Err(Errno::EINVAL) => Some(group::wait_status(self.leader).unwrap_or(0x7f)),
            Err(e) => return Err(e.into()),
        };
        if let Some(raw) = raw {
            self.status = Some(ExitStatus::from_raw(raw));
            return Ok(true);
        }
        let flags = WaitPidFlag::WSTOPPED | WaitPidFlag::WCONTINUED | WaitPidFlag::WNOHANG;
        if let WaitStatus::Stopped(_, sig) = waitid(Id::Pid(self.leader), flags)? {
            self.command_stopped(sig);
        }
        Ok(false)
    }

    /// The command stopped. On a job-control stop (Ctrl-Z, or reading the
    /// terminal from the background) leasehold stops too, as the job's
    /// shell expects; on SIGSTOP (leasehold's own, the watcher's, or a
    /// user's) it keeps renewing the lease while the command waits.
    fn command_stopped(&mut self, sig: Signal) {
        if self.job_stopped || self.kill_at.is_some() {
            return;
        }
        if !matches!(sig, Signal::SIGTSTP | Signal::SIGTTIN | Signal::SIGTTOU) {
            return;
        }
        // Our own SIGTSTP handler does the rest ([`Supervisor::job_stop`]).
        let stopped = if self.take_terminal() {
            // The terminal had sent SIGTSTP to the command's group only:
            // the rest of leasehold's job (a pipeline, a script) stops too.
            nix::sys::signal::killpg(self.own_group, Signal::SIGTSTP)
        } else {
            raise(Signal::SIGTSTP)
        };
        if let Err(e) = stopped {
            exit::warning(format!("cannot stop leasehold with its command: {e}"));
        }
    }

    /// SIGTSTP to leasehold: stops the command's group first, takes the
    /// terminal back, stops leasehold; once continued, [`Self::resume`].
    fn job_stop(&mut self, watcher: &mut Watcher) {
        self.job_stopped = true;
        group::signal(self.leader, Signal::SIGSTOP);
        self.take_terminal();
        if let Err(e) = raise(Signal::SIGSTOP) {
            exit::warning(format!("cannot stop leasehold: {e}"));
        }
        // Here only once continued.
        self.resume(watcher);
    }

    /// leasehold was continued (or the watcher stopped the command): the
    /// command runs again only if the lease is still held.
    fn resume(&mut self, watcher: &mut Watcher) {
        self.job_stopped = false;
        if self.kill_at.is_some() {
            // Lost: a stopped command is never continued (see start_lost).
            return;
        }
        if self.guard.is_lost() {
            self.start_lost();
            return;
        }
        // Before the command runs again: a stop of leasehold from now on is
        // a new one, which the watcher must act on even if it never saw
        // leasehold running in between.
        watcher.continuing();
        self.give_terminal();
        group::signal(self.leader, Signal::SIGCONT);
    }

    /// The lease is lost: SIGTERM now, SIGKILL after the grace. A stopped
    /// command is not continued: SIGTERM still ends at once what keeps its
    /// default action (the kernel turns a fatal signal into a kill, stopped
    /// or not); what catches or ignores it stays stopped until SIGKILL, so
    /// nothing of it runs again without the lease.
    fn start_lost(&mut self) {
        let grace = humantime::format_duration(self.kill_grace);
        let what = self.guard.what();
        if group::state(self.leader) == Some('T') {
            exit::notice(format!(
                "the lease on {what} was lost while the command was stopped (leasehold was \
                 stopped or paused longer than the lease lasts); ending the command without \
                 resuming it (SIGTERM, SIGKILL after {grace})"
            ));
        } else if self.guard.lost_reason() == Some(leasehold::LostReason::Broken) {
            exit::notice(format!(
                "the lease on {what} was broken by an operator (leasehold release --force) \
                 while the command ran; stopping the command (SIGTERM, SIGKILL after {grace})"
            ));
        } else {
            let why = self.guard.lost_reason().map_or_else(
                || "it expired or another owner took it".to_owned(),
                |reason| reason.to_string(),
            );
            exit::notice(format!(
                "the lease on {what} was lost while the command ran ({why}); stopping the \
                 command (SIGTERM, SIGKILL after {grace})"
            ));
        }
        group::signal(self.leader, Signal::SIGTERM);
        self.kill_at = Some(Instant::now() + self.kill_grace);
    }

    /// Takes the terminal back from the command's group, if it has it.
    fn take_terminal(&self) -> bool {
        self.terminal && tty::hand_over(self.leader, self.own_group)
    }

    /// Gives the terminal to the command's group, if leasehold's group has
    /// it (leasehold runs in the foreground).
    fn give_terminal(&self) {
        if self.terminal {
            tty::hand_over(self.own_group, self.leader);
        }
    }

    /// The command exited: ends what it left running in its group. It is
    /// reaped after the release ([`run_held`]).
    async fn after_exit(&mut self) -> Outcome {
        self.take_terminal();
        // It stands between the command's exit and the release: one look
        // at this process's children when nothing is left, the common case
        // (a walk of all of /proc otherwise, see group::Leftovers).
        let deadline = match self.kill_at {
            Some(deadline) => Some(deadline),
            None if self.leftovers.others_alive() => {
                exit::notice(format!(
                    "the command exited with processes of its group still running; stopping \
                     them (SIGTERM, SIGKILL after {}) before releasing {}",
                    humantime::format_duration(self.kill_grace),
                    self.guard.what()
                ));
                group::signal(self.leader, Signal::SIGTERM);
                group::signal(self.leader, Signal::SIGCONT);
                Some(Instant::now() + self.kill_grace)
            }
            None => None,
        };
        if let Some(deadline) = deadline {
            while self.leftovers.others_alive() && Instant::now() < deadline {
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            if self.leftovers.others_alive() {
                group::signal(self.leader, Signal::SIGKILL);
            }
        }
        match (self.status, self.kill_at) {
            (_, Some(_)) => Outcome::Lost,
            (Some(status), None) => Outcome::Exited(status),
            (None, None) => {
                Outcome::WaitFailed(io::Error::other("the command's status is unknown"))
            }
        }
    }
}

/// Releases the lock after the command ended and picks the exit code;
/// sets `lost` when the release finds the lease gone.
async fn finish(guard: AnyGuard, outcome: Outcome, lost: &mut bool) -> Result<u8, Failure> {
    let result = finish_release(guard, outcome, lost).await;
    timing::mark(nix::unistd::getpid(), "released");
    result
}

/// [`finish`]'s release and exit code.
async fn finish_release(guard: AnyGuard, outcome: Outcome, lost: &mut bool) -> Result<u8, Failure> {
    let what = guard.what();
    match outcome {
        Outcome::Lost => {
            // Owner-checked: frees the lock only if Redis still has our lease.
            let _ = guard.release().await;
            Ok(exit::SOFTWARE)
        }
        Outcome::WaitFailed(e) => {
            let _ = guard.release().await;
            Err(Failure::with_code(
                exit::SOFTWARE,
                format!("cannot wait for the command: {e}"),
            ))
        }
        Outcome::Exited(status) => {
            let code = exit_code_of(status);
            // The lease may have lapsed in the moment the command exited.
            let lapsed = guard.is_lost();
            match guard.release().await {
                Ok(()) if !lapsed => Ok(code),
                Ok(()) | Err(Error::Lost { .. }) => {
                    *lost = true;
                    Err(Failure::with_code(
                        exit::SOFTWARE,
                        format!(
                            "the lease on {what} was lost before the command finished (it exited \
                         with {code}); it may have run without the lock"
                        ),
                    ))
                }
                Err(e) => {
                    // The lease ends by its TTL at the latest; the command
                    // itself ran under the lock.
                    exit::warning(format!(
                        "could not release {what} ({}); it frees itself when its TTL runs out",
                        Failure::from(e).message
                    ));
                    Ok(code)
                }
            }
        }
    }
}

/// The shell's view of an exit status: the code, or 128 + the signal.
fn exit_code_of(status: ExitStatus) -> u8 {
    if let Some(code) = status.code() {
        return u8::try_from(code & 0xff).unwrap_or(u8::MAX);
    }
    match status.signal() {
        Some(sig) => u8::try_from(128 + (sig & 0x7f)).unwrap_or(u8::MAX),
        None => exit::SOFTWARE,
    }
}

/// Sleeps until `at`, or forever when `None`.
async fn sleep_until_some(at: Option<Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}

/// The signals leasehold handles while its command runs.
struct Signals {
    /// Those passed on to the command's group, with their numbers.
    forwarded: Vec<(tokio::signal::unix::Signal, Signal)>,
    /// SIGTSTP.
    stop: tokio::signal::unix::Signal,
    /// SIGCONT.
    cont: tokio::signal::unix::Signal,
    /// SIGCHLD.
    child: tokio::signal::unix::Signal,
}

/// Signals whose default would end leasehold (and SIGWINCH): passed on.
/// SIGKILL cannot be caught (the watcher covers it); SIGSEGV and the like
/// mean a crash (so does the watcher).
const FORWARDED: [Signal; 12] = [
    Signal::SIGHUP,
    Signal::SIGINT,
    Signal::SIGQUIT,
    Signal::SIGTERM,
    Signal::SIGUSR1,
    Signal::SIGUSR2,
    Signal::SIGALRM,
    Signal::SIGVTALRM,
    Signal::SIGPROF,
    Signal::SIGIO,
    Signal::SIGPWR,
    Signal::SIGWINCH,
];

impl Signals {
    /// Catches them all from now on.
    fn install() -> Result<Signals, Failure> {
        let forwarded = FORWARDED
            .iter()
            .map(|&sig| Ok((catch(SignalKind::from_raw(sig as i32))?, sig)))
            .collect::<Result<_, Failure>>()?;
        Ok(Signals {
            forwarded,
            stop: catch(SignalKind::from_raw(Signal::SIGTSTP as i32))?,
            cont: catch(SignalKind::from_raw(Signal::SIGCONT as i32))?,
            child: catch(SignalKind::child())?,
        })
    }

    /// The next signal caught, as an event for the supervisor.
    async fn next(&mut self) -> Event {
        poll_fn(|cx| {
            let mut ready = |stream: &mut tokio::signal::unix::Signal| {
                // tokio never ends these streams.
                matches!(stream.poll_recv(cx), Poll::Ready(Some(())))
            };
            if ready(&mut self.child) {
                return Poll::Ready(Event::Child);
            }
            if ready(&mut self.stop) {
                return Poll::Ready(Event::Stop);
            }
            if ready(&mut self.cont) {
                return Poll::Ready(Event::Continue);
            }
            for (stream, sig) in &mut self.forwarded {
                if ready(stream) {
                    return Poll::Ready(Event::Forward(*sig));
                }
            }
            Poll::Pending
        })
        .await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The helpers' command lines as `run` starts them, read without
    /// clap, give what clap gives; anything else is left to clap.
    #[test]
    fn helper_command_lines_read_as_clap_reads_them() {
        use std::ffi::OsString;
        use std::os::unix::ffi::OsStringExt;
        let line = |words: &[&str]| -> Vec<OsString> {
            std::iter::once("leasehold")
                .chain(words.iter().copied())
                .map(OsString::from)
                .collect()
        };
        let by_clap = |args: &[OsString]| match crate::parse::parse(args.to_vec()) {
            Ok(crate::parse::Parsed::Run(cli)) => format!("{:?}", cli.command),
            _ => panic!("clap refused {args:?}"),
        };
        let mut exec = line(&[
            "run-exec", "--go-fd", "7", "--", "sh", "-c", "x", "--", "-v",
        ]);
        exec.push(OsString::from_vec(vec![0xff, b'x']));
        let watch = line(&["run-watch", "--pid", "42", "--poll-ms", "100"]);
        for args in [exec, watch] {
            let ours = match helper_args(&args) {
                Some(HelperArgs::Exec(a)) => format!("{:?}", crate::args::Command::RunExec(a)),
                Some(HelperArgs::Watch(a)) => format!("{:?}", crate::args::Command::RunWatch(a)),
                None => panic!("not read: {args:?}"),
            };
            assert_eq!(ours, by_clap(&args));
        }
        for words in [
            &["run-exec", "--go-fd", "7", "--"][..],
            &["run-exec", "--go-fd", "x", "--", "true"],
            &["run-exec", "--", "true"],
            &["run-watch", "--pid", "42", "--poll-ms"],
            &["run-watch", "--pid", "42", "--poll-ms", "100", "extra"],
            &["run-watch", "--poll-ms", "100", "--pid", "42"],
            &["run", "x", "--", "true"],
            &["--version"],
            &[],
        ] {
            assert!(helper_args(&line(words)).is_none(), "{words:?}");
        }
    }

    #[test]
    fn exit_codes_follow_the_shell() {
        assert_eq!(exit_code_of(ExitStatus::from_raw(7 << 8)), 7);
        assert_eq!(exit_code_of(ExitStatus::from_raw(0)), 0);
        // Killed by SIGTERM (15).
        assert_eq!(exit_code_of(ExitStatus::from_raw(15)), 143);
        // Killed by SIGKILL (9).
        assert_eq!(exit_code_of(ExitStatus::from_raw(9)), 137);
    }
}
