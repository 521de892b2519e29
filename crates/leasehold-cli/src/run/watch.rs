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

use std::io::{self, Write};
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::os::unix::process::CommandExt;
use std::process::{Child, ChildStdin, Command, Stdio};
use std::time::Duration;

use nix::errno::Errno;
use nix::poll::{PollFd, PollFlags, PollTimeout};
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
        // Before it may exit: its SIGCHLD is not missed.
        let mut exits = Exits::watch();
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
        exits.reap(&mut self.child, deadline).await;
    }
}

/// How long a helper told to exit is waited for.
const REAP_WITHIN: Duration = Duration::from_secs(2);

/// This process's children's exits (SIGCHLD), seen from before a child is
/// told to exit, so that its exit wakes the wait for it: a process becomes
/// a zombie a moment after its descriptors close, and on a busy machine
/// that moment was often past a few quick looks, and then each look more
/// cost a millisecond's sleep (issue 34).
pub(crate) struct Exits(Option<tokio::signal::unix::Signal>);

impl Exits {
    /// Watches from now on. Must run inside the Tokio runtime; if SIGCHLD
    /// cannot be caught, [`Exits::reap`] looks every millisecond instead.
    pub(crate) fn watch() -> Exits {
        Exits(tokio::signal::unix::signal(tokio::signal::unix::SignalKind::child()).ok())
    }

    /// Waits for `child` to exit and reaps it, until `deadline` at most:
    /// it looks again each time a child of this process exits.
    pub(crate) async fn reap(&mut self, child: &mut Child, deadline: tokio::time::Instant) {
        while matches!(child.try_wait(), Ok(None)) && tokio::time::Instant::now() < deadline {
            match self.0.as_mut() {
                Some(exits) => {
                    let _ = tokio::time::timeout_at(deadline, exits.recv()).await;
                }
                None => tokio::time::sleep(Duration::from_millis(1)).await,
            }
        }
    }
}

/// Waits for `child`, told to exit after `exits` began watching, and reaps
/// it (2 s at most).
pub(crate) async fn reap(child: &mut Child, mut exits: Exits) {
    exits
        .reap(child, tokio::time::Instant::now() + REAP_WITHIN)
        .await;
}

/// `leasehold run-watch`: see the module docs. One thread: it waits for
/// `run`'s orders on its stdin (`poll(2)`, up to `--poll-ms`), and looks
/// at `run`'s state between them. (A thread of its own for stdin cost the
/// watcher's start a thread, and its exit the wait for that thread.)
pub(crate) fn watch(args: &RunWatchArgs) -> u8 {
    let run = Pid::from_raw(args.pid);
    let poll = PollTimeout::try_from(args.poll_ms.max(1)).unwrap_or(PollTimeout::MAX);
    let stdin = io::stdin();
    let mut orders = Orders::default();
    let mut command: Option<Pid> = None;
    let mut run_was_stopped = false;
    let mut notes = io::stdout();
    loop {
        let mut ready = [PollFd::new(stdin.as_fd(), PollFlags::POLLIN)];
        match nix::poll::poll(&mut ready, poll) {
            Ok(0) | Err(Errno::EINTR) => {}
            Ok(_) => match orders.read(stdin.as_fd()) {
                Some(lines) => {
                    for line in lines {
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
                }
                None => {
                    // `run` is gone without saying `done`.
                    if let Some(group) = command {
                        let _ = killpg(group, Signal::SIGKILL);
                    }
                    return 0;
                }
            },
            // Nothing to wait on any more: as if `run` were gone.
            Err(_) => {
                if let Some(group) = command {
                    let _ = killpg(group, Signal::SIGKILL);
                }
                return 0;
            }
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

/// What `run` wrote on the watcher's stdin and was not read as a whole
/// line yet.
#[derive(Default)]
struct Orders {
    /// The start of a line whose end has not come yet.
    partial: Vec<u8>,
}

impl Orders {
    /// Reads what is there (one `read(2)`): the whole lines it completes,
    /// or `None` at end of file (every writer is gone) or on an error.
    fn read(&mut self, stdin: BorrowedFd<'_>) -> Option<Vec<String>> {
        let mut bytes = [0u8; 512];
        let n = loop {
            match nix::unistd::read(stdin, &mut bytes) {
                Err(Errno::EINTR) => {}
                Ok(0) | Err(_) => return None,
                Ok(n) => break n,
            }
        };
        self.partial.extend_from_slice(&bytes[..n]);
        let mut lines = Vec::new();
        while let Some(end) = self.partial.iter().position(|&b| b == b'\n') {
            let line: Vec<u8> = self.partial.drain(..=end).collect();
            lines.push(String::from_utf8_lossy(&line[..end]).into_owned());
        }
        Some(lines)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Orders come as whole lines, however the pipe cuts them: a line
    /// split over two reads is one order, two lines in one read are two,
    /// and end-of-file is the end.
    #[test]
    fn orders_are_whole_lines_however_the_pipe_cuts_them() {
        let (read, write) = nix::unistd::pipe().expect("pipe");
        let mut write = std::fs::File::from(write);
        let mut orders = Orders::default();
        write.write_all(b"group 4").expect("write");
        assert_eq!(orders.read(read.as_fd()), Some(Vec::new()));
        write.write_all(b"2\ncont\ndo").expect("write");
        assert_eq!(
            orders.read(read.as_fd()),
            Some(vec!["group 42".to_owned(), "cont".to_owned()])
        );
        write.write_all(b"ne\n").expect("write");
        assert_eq!(orders.read(read.as_fd()), Some(vec!["done".to_owned()]));
        drop(write);
        assert_eq!(orders.read(read.as_fd()), None);
    }

    /// A child told to exit after the watch began is reaped by it: its
    /// SIGCHLD wakes the wait, whenever it comes.
    #[tokio::test(flavor = "current_thread")]
    async fn a_child_told_to_exit_is_reaped_when_it_exits() {
        let mut child = Command::new("cat")
            .stdin(Stdio::piped())
            .spawn()
            .expect("cat");
        let stdin = child.stdin.take();
        let exits = Exits::watch();
        assert!(exits.0.is_some(), "SIGCHLD is caught");
        // Told to exit: end-of-file on its stdin.
        drop(stdin);
        reap(&mut child, exits).await;
        assert!(
            matches!(child.try_wait(), Ok(Some(status)) if status.success()),
            "reaped, exit 0"
        );
    }
}
