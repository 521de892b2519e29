//! The launcher: the `leasehold` binary run again as `run-exec`, in the
//! command's new process group, before it becomes the command.
//!
//! It exists for two orderings a plain spawn cannot give without `unsafe`
//! code between fork and exec:
//!
//! 1. The watcher learns the command's process group before the command
//!    runs. The launcher inherits a descriptor of the watcher's pipe, writes
//!    its process group there and closes it; until then the watcher cannot
//!    see end-of-file, so even a `leasehold` killed the moment after the
//!    fork leaves the watcher knowing which group to kill.
//! 2. The command owns the terminal before it runs (as a shell's child
//!    takes it before exec), so a `read` at once does not hit SIGTTIN.

use std::ffi::OsString;
use std::fs::OpenOptions;
use std::io::{self, Write};
use std::os::fd::{AsRawFd, BorrowedFd};
use std::os::unix::fs::OpenOptionsExt;
use std::os::unix::process::CommandExt;
use std::process::{Child, Command};

use nix::unistd::{Pid, getpgrp, getpid};

use crate::cli::RunExecArgs;
use crate::exit::{self, Failure};
use crate::run::tty;

/// Starts the launcher for `command` in a new process group, with `envs`
/// added to its environment. `report` is the watcher's pipe; the launcher
/// gets its own copy. `foreground_of`: take the terminal on stdin from
/// this process group, if it still has it.
pub(crate) fn spawn(
    command: &[OsString],
    envs: &[(&str, String)],
    report: BorrowedFd<'_>,
    foreground_of: Option<Pid>,
) -> io::Result<Child> {
    // dup(2) leaves FD_CLOEXEC clear, so the copy survives into the
    // launcher (and only there: it is closed here right after the spawn,
    // and nothing else in leasehold starts processes meanwhile).
    let inherited = nix::unistd::dup(report)?;
    let mut launcher = Command::new("/proc/self/exe");
    launcher
        .arg0("leasehold")
        .arg("run-exec")
        .arg("--report-fd")
        .arg(inherited.as_raw_fd().to_string());
    if let Some(group) = foreground_of {
        launcher.arg("--foreground-of").arg(group.to_string());
    }
    launcher
        .arg("--")
        .args(command)
        .envs(envs.iter().map(|(k, v)| (k, v)))
        .process_group(0);
    let child = launcher.spawn();
    drop(inherited);
    child
}

/// `leasehold run-exec`: reports the process group, takes the terminal if
/// asked, and executes the command. Returns only if it cannot.
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
    if let Err(e) = report(args.report_fd, group) {
        return Failure::with_code(
            exit::SOFTWARE,
            format!(
                "cannot tell the watcher the command's process group ({e}); not running the \
                 command, which could otherwise outlive leasehold"
            ),
        )
        .report();
    }
    if let Some(from) = args.foreground_of {
        tty::hand_over(Pid::from_raw(from), group);
    }
    let Some((program, rest)) = args.command.split_first() else {
        return Failure::usage("no command given after `--`").report();
    };
    super::timing::mark(nix::unistd::getppid(), "exec");
    // Resets the signal mask and SIGPIPE to their defaults, as for any
    // command std starts.
    let e = Command::new(program).args(rest).exec();
    spawn_failure(&program.to_string_lossy(), &e).report()
}

/// Writes `group` to the watcher's pipe, inherited as descriptor `fd`,
/// and closes that descriptor so the command does not inherit it.
fn report(fd: i32, group: Pid) -> io::Result<()> {
    // A fresh open of the same pipe gives a descriptor std owns, with no
    // unsafe code. O_NONBLOCK: with no reader left (the watcher is gone)
    // the open fails with ENXIO instead of waiting for one.
    let mut pipe = OpenOptions::new()
        .write(true)
        .custom_flags(nix::libc::O_NONBLOCK)
        .open(format!("/proc/self/fd/{fd}"))?;
    pipe.write_all(format!("group {group}\n").as_bytes())?;
    drop(pipe);
    nix::unistd::close(fd)?;
    Ok(())
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
