//! `leasehold run`: a command under a lock, the distributed flock(1), or
//! under a read or write hold or a semaphore permit ([`Held`]).
//!
//! The command runs in its own process group, so that a lost lease can stop
//! everything it started (SIGTERM, then SIGKILL after `--kill-grace`) and so
//! that a terminal's Ctrl-C reaches it only through leasehold, which forwards
//! it. All lock work (acquire, renewal, loss detection, release) is the
//! library's.

use std::io;
use std::os::unix::process::ExitStatusExt;
use std::process::ExitStatus;
use std::time::Duration;

use leasehold::Error;
use nix::errno::Errno;
use nix::sys::signal::{Signal, killpg};
use nix::unistd::Pid;
use tokio::process::{Child, Command};
use tokio::signal::unix::SignalKind;
use tokio::time::Instant;

use crate::cli::{Global, RunArgs};
use crate::commands::connect;
use crate::exit::{self, Failure};
use crate::hold::{Held, take_hold};
use crate::session::catch;

/// `leasehold run NAME -- CMD...`: returns CMD's exit code, or 70 when the
/// lease was lost while it ran.
pub(crate) async fn run(global: &Global, args: RunArgs) -> Result<u8, Failure> {
    let client = connect(global).await?;
    let guard = take_hold(&client, &args.name, &args.lease, args.hold.mode()).await?;

    // Handlers go in before the child exists, so a signal that arrives
    // while it starts is forwarded instead of killing leasehold.
    let mut forwarded = Forwarded::install()?;

    let (program, rest) = args
        .command
        .split_first()
        .ok_or_else(|| Failure::usage("no command given after `--`"))?;
    let mut command = Command::new(program);
    command
        .args(rest)
        .env("LEASEHOLD_FENCE", guard.fence().to_string())
        .env("LEASEHOLD_TOKEN", guard.token())
        .process_group(0);
    let mut child = match command.spawn() {
        Ok(child) => child,
        Err(e) => {
            let _ = guard.release().await;
            let program = program.to_string_lossy();
            return Err(spawn_failure(&program, &e));
        }
    };
    let group = child
        .id()
        .and_then(|id| i32::try_from(id).ok())
        .map(Pid::from_raw)
        .ok_or_else(|| Failure::with_code(exit::SOFTWARE, "the command has no process id"))?;

    let outcome = supervise(&mut child, group, &guard, &mut forwarded, args.kill_grace).await;
    finish(guard, outcome).await
}

/// How the command ended.
enum Outcome {
    /// It exited while the lease held.
    Exited(ExitStatus),
    /// The lease was lost while it ran; it was terminated.
    Lost,
    /// Waiting for it failed.
    WaitFailed(io::Error),
}

/// Waits for the child, forwarding signals and stopping it if the lease is lost.
async fn supervise(
    child: &mut Child,
    group: Pid,
    guard: &Held,
    forwarded: &mut Forwarded,
    kill_grace: Duration,
) -> Outcome {
    // Set once the lease is lost: when the process group gets SIGKILL.
    let mut kill_at: Option<Instant> = None;
    let mut killed = false;
    loop {
        tokio::select! {
            status = child.wait() => {
                return match (status, kill_at) {
                    (Err(e), _) => Outcome::WaitFailed(e),
                    (Ok(_), Some(deadline)) => {
                        // The leader is gone; the rest of its group gets the
                        // same grace before SIGKILL.
                        reap_group(group, deadline).await;
                        Outcome::Lost
                    }
                    (Ok(status), None) => Outcome::Exited(status),
                };
            }
            sig = forwarded.next() => {
                signal_group(group, sig);
            }
            () = guard.lost(), if kill_at.is_none() => {
                eprintln!(
                    "leasehold: the lease on {} was lost while the command ran (it expired or \
                     another owner took it); stopping the command (SIGTERM, SIGKILL after {})",
                    guard.what(),
                    humantime::format_duration(kill_grace)
                );
                signal_group(group, Signal::SIGTERM);
                kill_at = Some(Instant::now() + kill_grace);
            }
            () = sleep_until_some(kill_at), if !killed => {
                signal_group(group, Signal::SIGKILL);
                killed = true;
            }
        }
    }
}

/// Releases the lock after the command ended and picks the exit code.
async fn finish(guard: Held, outcome: Outcome) -> Result<u8, Failure> {
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
                Ok(()) | Err(Error::Lost { .. }) => Err(Failure::with_code(
                    exit::SOFTWARE,
                    format!(
                        "the lease on {what} was lost before the command finished (it exited \
                         with {code}); it may have run without the lock"
                    ),
                )),
                Err(e) => {
                    // The lease ends by its TTL at the latest; the command
                    // itself ran under the lock.
                    eprintln!(
                        "leasehold: warning: could not release {what} ({}); it frees itself \
                         when its TTL runs out",
                        exit::one_line(e.to_string())
                    );
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

/// Sends `sig` to the command's process group. The group may already be
/// empty (ESRCH); nothing else can go wrong with a group we created.
fn signal_group(group: Pid, sig: Signal) {
    match killpg(group, sig) {
        Ok(()) | Err(Errno::ESRCH) => {}
        Err(e) => eprintln!("leasehold: warning: cannot send {sig} to the command: {e}"),
    }
}

/// After the group leader exited following a lost lease: waits until the
/// rest of the group is gone or `deadline`, then SIGKILLs what is left.
async fn reap_group(group: Pid, deadline: Instant) {
    while group_alive(group) && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    if group_alive(group) {
        signal_group(group, Signal::SIGKILL);
    }
}

/// Whether any process is left in the group.
fn group_alive(group: Pid) -> bool {
    killpg(group, None).is_ok()
}

/// Sleeps until `at`, or forever when `None`.
async fn sleep_until_some(at: Option<Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}

/// The signals leasehold passes on to the command.
struct Forwarded {
    /// SIGINT (Ctrl-C).
    interrupt: tokio::signal::unix::Signal,
    /// SIGTERM.
    terminate: tokio::signal::unix::Signal,
    /// SIGHUP.
    hangup: tokio::signal::unix::Signal,
}

impl Forwarded {
    /// Catches SIGINT, SIGTERM and SIGHUP from now on.
    fn install() -> Result<Forwarded, Failure> {
        Ok(Forwarded {
            interrupt: catch(SignalKind::interrupt())?,
            terminate: catch(SignalKind::terminate())?,
            hangup: catch(SignalKind::hangup())?,
        })
    }

    /// The next signal received.
    async fn next(&mut self) -> Signal {
        tokio::select! {
            Some(()) = self.interrupt.recv() => Signal::SIGINT,
            Some(()) = self.terminate.recv() => Signal::SIGTERM,
            Some(()) = self.hangup.recv() => Signal::SIGHUP,
            else => std::future::pending().await,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
