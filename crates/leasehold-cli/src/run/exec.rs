//! The launcher: the `leasehold` binary run again as `run-exec`, in the
//! command's new process group, before it becomes the command.
//!
//! `run` starts it before it connects, so that its start (an exec of
//! leasehold, a few milliseconds of CPU) is done while `run` connects and
//! waits; once the lock is held only its exec of the command is left. It
//! waits on a pipe that only `run` writes (close-on-exec in `run`, so
//! nothing else inherits the write end):
//!
//! - `go`, with the command's environment (the fence and token) and
//!   whether to take the terminal: it takes the terminal if asked (as a
//!   shell's child takes it before exec, so a `read` at once does not hit
//!   SIGTTIN) and executes the command;
//! - anything else, or end-of-file (`run` gave up, failed, or died): it
//!   exits without running anything.
//!
//! `run` tells the watcher the launcher's process group (its PID, which
//! stays reserved while `run` has not reaped it) before it writes `go`, so
//! the watcher knows which group to kill before the command can run, even
//! if `run` is killed right after.

use std::ffi::OsString;
use std::fs::{File, OpenOptions};
use std::io::{self, Read, Write};
use std::os::fd::AsRawFd;
use std::os::unix::fs::OpenOptionsExt;
use std::os::unix::process::CommandExt;
use std::process::{Child, Command};

use nix::fcntl::{FcntlArg, OFlag, fcntl};
use nix::unistd::{Pid, getpgrp, getpid};

use crate::args::RunExecArgs;
use crate::exit::{self, Failure};
use crate::run::tty;

/// The first field of the message that lets the launcher run the command.
const GO: &str = "go";
/// The last field: a message cut short (`run` died while writing) lacks it.
const END: &str = "end";

/// A launcher started ahead, waiting for `go`.
#[derive(Debug)]
pub(crate) struct Launcher {
    /// The process (the command's group leader once it runs).
    child: Child,
    /// The write end of its pipe; `None` once `go` was written.
    go: Option<File>,
}

impl Launcher {
    /// Starts the launcher of `command` in a new process group. It waits
    /// for [`Launcher::go`].
    pub(crate) fn start(command: &[OsString]) -> io::Result<Launcher> {
        let (read, write) = nix::unistd::pipe2(OFlag::O_CLOEXEC)?;
        // dup(2) leaves FD_CLOEXEC clear, so the copy survives into the
        // launcher (and only there: it is closed here right after the
        // spawn, and nothing else in leasehold starts processes meanwhile).
        let inherited = nix::unistd::dup(&read)?;
        let child = Command::new("/proc/self/exe")
            .arg0("leasehold")
            .arg("run-exec")
            .arg("--go-fd")
            .arg(inherited.as_raw_fd().to_string())
            .arg("--")
            .args(command)
            .process_group(0)
            .spawn();
        drop(inherited);
        drop(read);
        Ok(Launcher {
            child: child?,
            go: Some(File::from(write)),
        })
    }

    /// Its PID, which is also its process group's id.
    pub(crate) fn pid(&self) -> Pid {
        Pid::from_raw(i32::try_from(self.child.id()).unwrap_or(i32::MAX))
    }

    /// Lets it run the command with `envs` added to its environment,
    /// taking the terminal on stdin from `foreground_of` first if that
    /// group still has it.
    pub(crate) fn go(
        &mut self,
        envs: &[(&str, String)],
        foreground_of: Option<Pid>,
    ) -> io::Result<()> {
        let mut message = vec![
            GO.to_owned(),
            foreground_of.map(|p| p.to_string()).unwrap_or_default(),
        ];
        message.extend(envs.iter().map(|(k, v)| format!("{k}={v}")));
        message.push(END.to_owned());
        let mut bytes = message.join("\0").into_bytes();
        bytes.push(0);
        let mut pipe = self
            .go
            .take()
            .ok_or_else(|| io::Error::other("the launcher was already told"))?;
        // One write; the pipe closes right after, which ends the message.
        pipe.write_all(&bytes)
    }

    /// The launcher, now the command (or about to become it).
    pub(crate) fn into_child(self) -> Child {
        self.child
    }

    /// Sends it away without running anything: it reads end-of-file and
    /// exits. Reaps it (2 s at most).
    pub(crate) async fn dismiss(mut self) {
        let exits = super::watch::Exits::watch();
        drop(self.go.take());
        super::watch::reap(&mut self.child, exits).await;
    }
}

/// `leasehold run-exec`: waits for `go`, takes the terminal if asked, and
/// executes the command. Returns only if it cannot, or is not to.
pub(crate) fn exec(args: RunExecArgs) -> u8 {
    let group = getpgrp();
    if group != getpid() {
        // The watcher would kill this group, which is `run`'s own.
        return Failure::with_code(
            exit::SOFTWARE,
            "the command launcher is not in a process group of its own; not running the command",
        )
        .report();
    }
    let message = match read_go(args.go_fd) {
        Ok(message) => message,
        Err(e) => {
            return Failure::with_code(
                exit::SOFTWARE,
                format!("cannot read leasehold's go-ahead ({e}); not running the command"),
            )
            .report();
        }
    };
    // Not told to go (`run` gave up or died before it held the lock):
    // nothing to say, `run` says what happened.
    let Some((foreground_of, envs)) = parse_go(&message) else {
        return exit::SOFTWARE;
    };
    if let Some(from) = foreground_of {
        tty::hand_over(from, group);
    }
    let Some((program, rest)) = args.command.split_first() else {
        return Failure::usage("no command given after `--`").report();
    };
    super::timing::mark(nix::unistd::getppid(), "exec");
    // Resets the signal mask and SIGPIPE to their defaults, as for any
    // command std starts.
    let e = Command::new(program).args(rest).envs(envs).exec();
    spawn_failure(&program.to_string_lossy(), &e).report()
}

/// Reads `run`'s message on the pipe inherited as descriptor `fd`, to
/// its end, and closes that descriptor so the command does not inherit it.
fn read_go(fd: i32) -> io::Result<Vec<u8>> {
    // A fresh open of the same pipe gives a descriptor std owns, with no
    // unsafe code. O_NONBLOCK: with no writer left (`run` is gone) a
    // blocking open would wait for one; then back to blocking reads.
    let mut pipe = OpenOptions::new()
        .read(true)
        .custom_flags(nix::libc::O_NONBLOCK)
        .open(format!("/proc/self/fd/{fd}"))?;
    fcntl(&pipe, FcntlArg::F_SETFL(OFlag::empty()))?;
    nix::unistd::close(fd)?;
    let mut message = Vec::new();
    pipe.read_to_end(&mut message)?;
    Ok(message)
}

/// What the go-ahead says: the group to take the terminal from, and the
/// environment to add.
type GoAhead = (Option<Pid>, Vec<(String, String)>);

/// The go-ahead in `message`; `None` unless the message is whole.
fn parse_go(message: &[u8]) -> Option<GoAhead> {
    let text = std::str::from_utf8(message).ok()?;
    let mut fields: Vec<&str> = text.strip_suffix('\0')?.split('\0').collect();
    if fields.first() != Some(&GO) || fields.last() != Some(&END) || fields.len() < 3 {
        return None;
    }
    fields.pop();
    let foreground_of = match fields[1] {
        "" => None,
        pid => Some(Pid::from_raw(pid.parse().ok()?)),
    };
    let envs = fields[2..]
        .iter()
        .map(|kv| {
            kv.split_once('=')
                .map(|(k, v)| (k.to_owned(), v.to_owned()))
        })
        .collect::<Option<Vec<_>>>()?;
    Some((foreground_of, envs))
}

/// The failure for a command that could not be started, with the exit codes
/// shells use: 127 not found, 126 found but not executable.
fn spawn_failure(program: &str, e: &io::Error) -> Failure {
    match e.kind() {
        io::ErrorKind::NotFound => Failure::with_code(
            exit::NOT_FOUND,
            format!("command not found: {program} (check the name and PATH)"),
        ),
        io::ErrorKind::PermissionDenied => Failure::with_code(
            exit::CANNOT_EXECUTE,
            format!("cannot execute {program}: permission denied"),
        ),
        _ => Failure::with_code(
            exit::CANNOT_EXECUTE,
            format!("cannot execute {program}: {e}"),
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_whole_go_ahead_runs_the_command() {
        let whole = b"go\x0042\x00LEASEHOLD_FENCE=7\x00LEASEHOLD_FENCES=a=7 b=8\x00end\x00";
        let (fg, envs) = parse_go(whole).expect("a whole message");
        assert_eq!(fg, Some(Pid::from_raw(42)));
        assert_eq!(
            envs[1],
            ("LEASEHOLD_FENCES".to_owned(), "a=7 b=8".to_owned())
        );
        assert_eq!(
            parse_go(b"go\x00\x00end\x00").map(|(fg, e)| (fg, e.len())),
            Some((None, 0))
        );
        // Cut short anywhere (run died while writing), or nothing at all.
        for cut in 0..whole.len() {
            assert!(parse_go(&whole[..cut]).is_none(), "cut at {cut}");
        }
    }
}
