//! The watcher: the `leasehold` binary run again as `run-watch`, in a
//! process group of its own, so the terminal's signals and `kill %job`
//! (which reach `run`'s group) never reach it.
//!
//! `run` starts it before it connects. Its stdin is a pipe whose write
//! end only `run` holds (close-on-exec, so neither the launcher nor the
//! command inherits it); `run` writes the command's process group there
//! before it lets the launcher run the command (see [`super::exec`]).
//! Until then it has nothing to kill or stop. Then:
//!
//! - `run` dies, however (SIGKILL, a crash): the kernel closes the pipe,
//!   the watcher reads end-of-file and SIGKILLs the command's process
//!   group at once, long before the lease can expire.
//! - `run` is stopped (`/proc/PID/stat` state `T`, checked every
//!   `--poll-ms`): the watcher SIGSTOPs the command's group and tells `run`
//!   on its stdout; `run`, once continued, decides whether the command
//!   may go on (the lease still held) or must end (lost).
//! - `run` writes `cont` before it continues the command: a stop of `run`
//!   seen after that is a new one, even if the watcher never saw `run`
//!   running in between (stopped, continued and stopped again between two
//!   of its looks), and stops the command again.
//! - `run` writes `done` (the command ended and nothing of its group is
//!   left): the watcher exits without touching anything.
//!
//! It never starts a process: `run` counts on that to tell, from its own
//! children alone, that nothing of the command is left
//! ([`super::group::Leftovers`]).

use std::io::{self, BufRead, Write};
use std::os::fd::OwnedFd;
use std::os::unix::process::CommandExt;
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

use nix::sys::signal::{Signal, killpg};
use nix::unistd::{Pid, getpid};
use tokio::io::AsyncReadExt;
use tokio::net::unix::pipe;

use crate::args::RunWatchArgs;
use crate::run::group;

/// What `run` holds of its watcher.
#[derive(Debug)]
pub(crate) struct Watcher {
    /// The process.
    child: Child,
    /// The write end of its stdin; dropped by [`Watcher::done`].
    orders: Option<ChildStdin>,
    /// Its stdout: one byte per time it stopped the command.
    notes: Option<pipe::Receiver>,
    /// Set once it exited before being told `done`, and `run` said so.
    gone: bool,
}

impl Watcher {
    /// Starts the watcher of this process, checking every `poll` whether
    /// it is stopped. Must run inside the Tokio runtime.
    pub(crate) fn spawn(poll: Duration) -> io::Result<Watcher> {
        let poll_ms = poll.as_millis().max(1).to_string();
        let mut child = Command::new("/proc/self/exe")
            .arg0("leasehold")
            .args(["run-watch", "--pid", &getpid().to_string()])
            .args(["--poll-ms", &poll_ms])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .current_dir("/")
            .process_group(0)
            .spawn()?;
        let orders = child.stdin.take();
        let notes = child
            .stdout
            .take()
            .map(|out| pipe::Receiver::from_owned_fd(OwnedFd::from(out)))
            .transpose();
        let notes = match notes {
            Ok(notes) => notes,
            Err(e) => {
                let _ = child.kill();
                let _ = child.wait();
                return Err(e);
            }
        };
        Ok(Watcher {
            child,
            orders,
            notes,
            gone: false,
        })
    }

    /// Its PID.
    pub(crate) fn pid(&self) -> Pid {
        Pid::from_raw(i32::try_from(self.child.id()).unwrap_or(i32::MAX))
    }

    /// Tells the watcher the command's process group, before the command
    /// may run. Once this returns the line is in the pipe: a `run` killed
    /// right after leaves the watcher reading it, then end-of-file.
    pub(crate) fn watch_group(&mut self, group: Pid) -> io::Result<()> {
        let orders = self
            .orders
            .as_mut()
            .ok_or_else(|| io::Error::other("the watcher's pipe is closed"))?;
        orders.write_all(format!("group {group}\n").as_bytes())?;
        orders.flush()
    }

    /// Resolves each time the watcher stopped the command because this
    /// process was stopped; never, once the watcher is gone.
    pub(crate) async fn stopped_command(&mut self) {
        let mut byte = [0u8; 64];
        loop {
            let Some(notes) = self.notes.as_mut() else {
                return std::future::pending().await;
            };
            match notes.read(&mut byte).await {
                Ok(n) if n > 0 => return,
                _ => {
                    self.notes = None;
                    self.warn_if_gone();
                }
            }
        }
    }

    /// Says once on stderr that the watcher exited early: from now on a
    /// killed leasehold leaves its command running until the lease expires.
    fn warn_if_gone(&mut self) {
        if self.orders.is_some() && !self.gone {
            self.gone = true;
            eprintln!(
                "leasehold: warning: the watcher process {} exited; if leasehold is killed \
                 now, its command keeps running",
                self.child.id()
            );
        }
    }

    /// Tells the watcher that this process is about to continue the
    /// command, so that its next stop is acted on as a new one.
    pub(crate) fn continuing(&mut self) {
        if let Some(orders) = self.orders.as_mut() {
            // A watcher already gone cannot be told (see warn_if_gone).
            let _ = orders.write_all(b"cont\n").and_then(|()| orders.flush());
        }
    }

    /// Tells the watcher the command's group is gone (or never was),
    /// closes its pipe and reaps it (it exits at once; waits 2 s at most).
    pub(crate) async fn done(&mut self) {
        if let Some(mut orders) = self.orders.take() {
            // A watcher already gone cannot be told, and needs not be.
            let _ = orders.write_all(b"done\n");
        }
        let deadline = tokio::time::Instant::now() + REAP_WITHIN;
        // Its stdout closes as it exits: waiting for that, rather than
        // looking every millisecond, sees the exit as soon as it happens.
        if let Some(mut notes) = self.notes.take() {
            let mut bytes = [0u8; 64];
            let _ = tokio::time::timeout_at(deadline, async {
                while matches!(notes.read(&mut bytes).await, Ok(n) if n > 0) {}
            })
            .await;
        }
        reap_until(&mut self.child, deadline).await;
    }
}

/// How long [`reap`] waits for a helper told to exit.
const REAP_WITHIN: Duration = Duration::from_secs(2);

/// Waits for `child` to exit and reaps it: 2 s at most, looking every
/// millisecond (it is told to exit just before).
pub(crate) async fn reap(child: &mut Child) {
    reap_until(child, tokio::time::Instant::now() + REAP_WITHIN).await;
}

/// [`reap`], until `deadline`. A process becomes a zombie a moment after
/// its descriptors close: a few quick looks first, then every millisecond.
async fn reap_until(child: &mut Child, deadline: tokio::time::Instant) {
    for _ in 0..20 {
        if !matches!(child.try_wait(), Ok(None)) {
            return;
        }
        tokio::task::yield_now().await;
    }
    while tokio::time::Instant::now() < deadline {
        if !matches!(child.try_wait(), Ok(None)) {
            return;
        }
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
}

/// A line from `run`, or the end of the pipe.
enum Order {
    /// A line.
    Line(String),
    /// End of file: every writer is gone.
    End,
}

/// `leasehold run-watch`: see the module docs.
pub(crate) fn watch(args: &RunWatchArgs) -> u8 {
    let run = Pid::from_raw(args.pid);
    let poll = Duration::from_millis(args.poll_ms.max(1));
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        for line in io::stdin().lock().lines() {
            match line {
                Ok(line) => {
                    if tx.send(Order::Line(line)).is_err() {
                        return;
                    }
                }
                Err(_) => break,
            }
        }
        let _ = tx.send(Order::End);
    });
    let mut command: Option<Pid> = None;
    let mut run_was_stopped = false;
    let mut notes = io::stdout();
    loop {
        match rx.recv_timeout(poll) {
            Ok(Order::Line(line)) => {
                if line == "done" {
                    return 0;
                }
                if line == "cont" {
                    run_was_stopped = false;
                }
                if let Some(group) = line.strip_prefix("group ") {
                    command = group.trim().parse().ok().map(Pid::from_raw);
                }
            }
            Ok(Order::End) | Err(mpsc::RecvTimeoutError::Disconnected) => {
                // `run` is gone without saying `done`.
                if let Some(group) = command {
                    let _ = killpg(group, Signal::SIGKILL);
                }
                return 0;
            }
            Err(mpsc::RecvTimeoutError::Timeout) => {}
        }
        let Some(group) = command else { continue };
        let run_is_stopped = group::state(run) == Some('T');
        if run_is_stopped && !run_was_stopped {
            let _ = killpg(group, Signal::SIGSTOP);
            // `run` reads it once continued; if it is gone, so is the pipe.
            let _ = notes.write_all(b"s").and_then(|()| notes.flush());
        }
        run_was_stopped = run_is_stopped;
    }
}
