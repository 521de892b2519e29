//! What the CLI's integration tests share: the binary, a temporary
//! directory, a `leasehold` process we started and what it did, the
//! processes its command started, and bounded waits for files.
//!
//! Every process is ended by PID, never by name.

#![allow(dead_code, unreachable_pub)]

use std::ffi::OsStr;
use std::io::Read;
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;
use serde_json::Value;

/// Longest any wait for an observable state (a file written, a process
/// gone) may take before the test fails.
pub const BOUND: Duration = Duration::from_secs(30);

/// The binary, with a clean environment for the variables it reads (every
/// `LEASEHOLD_*` and `RUST_LOG`), and backtraces switched on so a panic
/// would show.
pub fn leasehold() -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_leasehold"));
    for (name, _) in std::env::vars_os() {
        if name.to_string_lossy().starts_with("LEASEHOLD_") {
            cmd.env_remove(name);
        }
    }
    cmd.env_remove("RUST_LOG")
        .env("RUST_BACKTRACE", "1")
        .stdin(Stdio::null());
    cmd
}

/// `leasehold --url U... ARGS` in `dir`, one `--url` per entry.
pub fn leasehold_in(dir: &Path, urls: &[impl AsRef<OsStr>], args: &[&str]) -> Command {
    let mut cmd = leasehold();
    cmd.current_dir(dir);
    for url in urls {
        cmd.arg("--url").arg(url);
    }
    cmd.args(args);
    cmd
}

/// Starts `leasehold --url U... ARGS` in `dir`, one `--url` per entry,
/// stdout and stderr captured.
pub fn spawn_in(dir: &Path, urls: &[impl AsRef<OsStr>], args: &[&str]) -> Proc {
    Proc::spawn(leasehold_in(dir, urls, args))
}

/// `leasehold --url URL ARGS -- sh -c SCRIPT` in `dir`.
pub fn script_command(dir: &Path, url: &str, args: &[&str], script: &str) -> Command {
    leasehold_in(dir, &[url], &[args, &["--", "sh", "-c", script]].concat())
}

/// Starts `leasehold --url URL ARGS -- sh -c SCRIPT` in `dir`, stdout and
/// stderr captured.
pub fn spawn_script(dir: &Path, url: &str, args: &[&str], script: &str) -> Proc {
    Proc::spawn(script_command(dir, url, args, script))
}

/// Reads `pipe` to its end on a thread; the text arrives on the channel.
pub fn read_in_background(mut pipe: impl Read + Send + 'static) -> mpsc::Receiver<String> {
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let mut s = String::new();
        let _ = pipe.read_to_string(&mut s);
        let _ = tx.send(s);
    });
    rx
}

/// A fresh temporary directory, removed on drop.
pub fn temp_dir() -> tempfile::TempDir {
    tempfile::Builder::new()
        .prefix("leasehold-cli-test-")
        .tempdir()
        .expect("temp dir")
}

/// What one finished invocation did.
#[derive(Debug)]
pub struct Outcome {
    /// How it exited.
    pub status: ExitStatus,
    /// All of stdout (empty if it was not captured).
    pub stdout: String,
    /// All of stderr.
    pub stderr: String,
    /// From spawn to exit.
    pub elapsed: Duration,
}

impl Outcome {
    /// The exit code; panics if it died by a signal.
    pub fn code(&self) -> i32 {
        self.status
            .code()
            .unwrap_or_else(|| panic!("leasehold died by a signal: {self:?}"))
    }

    /// Stdout parsed as JSON.
    pub fn json(&self) -> Value {
        serde_json::from_str(&self.stdout)
            .unwrap_or_else(|e| panic!("stdout is not JSON ({e}): {self:?}"))
    }

    /// The result `run --json` writes as the last line of stderr.
    pub fn run_result(&self) -> Value {
        let last = self.stderr.lines().last().unwrap_or_default();
        serde_json::from_str(last)
            .unwrap_or_else(|e| panic!("stderr's last line is not JSON ({e}): {self:?}"))
    }

    /// Exactly one line on stderr, starting `leasehold: `, no panic.
    pub fn assert_one_error_line(&self) {
        let lines: Vec<&str> = self.stderr.lines().collect();
        assert_eq!(lines.len(), 1, "want one stderr line: {self:?}");
        assert!(lines[0].starts_with("leasehold: "), "{self:?}");
        assert!(!self.stderr.contains("panicked"), "{self:?}");
        assert!(
            !self.stderr.to_lowercase().contains("backtrace"),
            "{self:?}"
        );
    }
}

/// A `leasehold` process we started. On drop, unless it already exited,
/// it gets SIGCONT and SIGKILL (by PID) and is reaped; so do its direct
/// children (the command, leasehold's helper) as last noted.
pub struct Proc {
    /// The process.
    pub child: Child,
    /// Its direct children, as last seen ([`Proc::note_children`]), each
    /// with its start time (see [`started_at`]).
    pub children: Vec<(Pid, Option<u64>)>,
    /// When it was spawned.
    pub started: Instant,
}

impl Proc {
    /// Spawns `cmd` with its stdio as `cmd` sets it.
    pub fn start(mut cmd: Command) -> Proc {
        let started = Instant::now();
        let child = cmd.spawn().expect("spawn leasehold");
        Proc {
            child,
            children: Vec::new(),
            started,
        }
    }

    /// Spawns `cmd` with stdout and stderr captured.
    pub fn spawn(mut cmd: Command) -> Proc {
        cmd.stdout(Stdio::piped()).stderr(Stdio::piped());
        Proc::start(cmd)
    }

    /// Spawns `cmd` in a new process group (as a shell job would be, so
    /// job-control signals to it are not discarded), stdout discarded and
    /// stderr captured.
    pub fn spawn_as_job(mut cmd: Command) -> Proc {
        cmd.stdout(Stdio::null())
            .stderr(Stdio::piped())
            .process_group(0);
        Proc::start(cmd)
    }

    /// Its PID.
    pub fn pid(&self) -> Pid {
        Pid::from_raw(i32::try_from(self.child.id()).expect("pid fits"))
    }

    /// Sends `sig` to it (it is not reaped yet, so the PID is ours).
    pub fn signal(&self, sig: Signal) {
        kill(self.pid(), sig).expect("signal our child");
    }

    /// Remembers its current children, for the cleanup on drop.
    pub fn note_children(&mut self) {
        for pid in children_of(self.pid()) {
            if !self.children.iter().any(|(p, _)| *p == pid) {
                self.children.push((pid, started_at(pid)));
            }
        }
    }

    /// Whether it has exited (not reaped: [`Proc::finish_within`] still
    /// reports it).
    pub fn child_exited(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(Some(_)))
    }

    /// Waits up to `limit` for the exit and collects the output.
    pub fn finish_within(mut self, limit: Duration) -> Outcome {
        self.note_children();
        let stdout = self.child.stdout.take().map(read_in_background);
        let stderr = self.child.stderr.take().expect("piped stderr");
        let err = read_in_background(stderr);
        let deadline = Instant::now() + limit;
        let status = loop {
            if let Some(status) = self.child.try_wait().expect("try_wait") {
                break status;
            }
            assert!(
                Instant::now() < deadline,
                "leasehold did not exit within {limit:?}"
            );
            std::thread::sleep(Duration::from_millis(5));
        };
        let elapsed = self.started.elapsed();
        // A process the command left behind may still hold the pipes open.
        let collect = |rx: mpsc::Receiver<String>| {
            rx.recv_timeout(Duration::from_secs(10))
                .unwrap_or_else(|_| "<pipe still held open by a leftover process>".to_owned())
        };
        Outcome {
            status,
            stdout: stdout.map(collect).unwrap_or_default(),
            stderr: collect(err),
            elapsed,
        }
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            self.note_children();
            let _ = kill(self.pid(), Signal::SIGCONT);
            let _ = kill(self.pid(), Signal::SIGKILL);
            let _ = self.child.wait();
        }
        for &(pid, started) in &self.children {
            reap_by_pid(pid, started);
        }
    }
}

/// A process started by a command we ran (its PID read from a file);
/// SIGCONT and SIGKILL on drop if it still runs, and is still that
/// process: its start time, read when it was named, tells it from a later
/// process given the same PID (the machine's PIDs wrap at 32,768, and the
/// stubborn loops here start a hundred processes a second each: a
/// grandchild of one test killed by PID on another test's drop was seen
/// once under the full suite).
pub struct Grandchild(pub Pid, Option<u64>);

impl Grandchild {
    /// The process whose PID the command writes to `path`, once written.
    pub fn from_pid_file(path: &Path) -> Grandchild {
        Grandchild::of(pid_in(path))
    }

    /// The process `pid` is now.
    pub fn of(pid: Pid) -> Grandchild {
        Grandchild(pid, started_at(pid))
    }

    /// Whether a process with this PID still exists, a zombie included.
    pub fn exists(&self) -> bool {
        kill(self.0, None).is_ok()
    }
}

impl Drop for Grandchild {
    fn drop(&mut self) {
        reap_by_pid(self.0, self.1);
    }
}

/// The direct children of `pid`, from `/proc`.
pub fn children_of(pid: Pid) -> Vec<Pid> {
    let mut out = Vec::new();
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
        return out;
    };
    for task in tasks.flatten() {
        let path = task.path().join("children");
        if let Ok(text) = std::fs::read_to_string(path) {
            out.extend(
                text.split_whitespace()
                    .filter_map(|p| p.parse().ok())
                    .map(Pid::from_raw),
            );
        }
    }
    out
}

/// SIGCONT and SIGKILL to `pid` if it still runs (a process one of our
/// commands started; its PID came from a file it wrote, or from `/proc`).
pub fn reap_by_pid(pid: Pid, started: Option<u64>) {
    if alive(pid) && started.is_some() && started_at(pid) == started {
        let _ = kill(pid, Signal::SIGCONT);
        let _ = kill(pid, Signal::SIGKILL);
    }
}

/// When `pid` started (clock ticks since boot, `/proc/PID/stat` field 22),
/// or `None` once it is gone: with its PID, it names one process.
pub fn started_at(pid: Pid) -> Option<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // Fields after the command name (which may hold ')'): state is field 3,
    // the start time field 22.
    stat[stat.rfind(')')? + 1..]
        .split_whitespace()
        .nth(19)?
        .parse()
        .ok()
}

/// The scheduler state of `pid` (`R`, `S`, `T`, `Z`, ...), or `None` once
/// it is gone.
pub fn state(pid: Pid) -> Option<char> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name may hold spaces and parentheses; the state follows
    // the last ')'.
    let rest = &stat[stat.rfind(')')? + 1..];
    rest.split_whitespace().next()?.chars().next()
}

/// Whether `pid` exists and is not a zombie.
pub fn alive(pid: Pid) -> bool {
    !matches!(state(pid), None | Some('Z' | 'X'))
}

/// Waits up to [`BOUND`] for `ready`; panics saying `what` otherwise.
pub fn wait_until(what: &str, mut ready: impl FnMut() -> bool) {
    let deadline = Instant::now() + BOUND;
    while !ready() {
        assert!(Instant::now() < deadline, "timed out waiting until {what}");
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// Waits until `path` holds a full line and returns it, trimmed.
pub fn wait_for_line(path: &Path) -> String {
    let mut line = String::new();
    wait_until(
        &format!("{} is written", path.display()),
        || match std::fs::read_to_string(path) {
            Ok(text) if text.ends_with('\n') => {
                line = text.trim().to_owned();
                true
            }
            _ => false,
        },
    );
    line
}

/// The PID written to `path`, once written.
pub fn pid_in(path: &Path) -> Pid {
    Pid::from_raw(wait_for_line(path).parse().expect("a pid"))
}
