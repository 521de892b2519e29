//! The command's process group as `/proc` and `kill(2)` show it.

use nix::errno::Errno;
use nix::sys::signal::{Signal, killpg};
use nix::sys::wait::{Id, WaitPidFlag, WaitStatus, waitid};
use nix::unistd::Pid;

/// Sends `sig` to process group `group`. The group may already be empty
/// (ESRCH); nothing else can go wrong with a group we created.
pub(crate) fn signal(group: Pid, sig: Signal) {
    match killpg(group, sig) {
        Ok(()) | Err(Errno::ESRCH) => {}
        Err(e) => crate::exit::warning(format!("cannot send {sig} to the command: {e}")),
    }
}

/// The scheduler state of `pid` (`R`, `S`, `T` for stopped, `Z` for a
/// zombie, ...), or `None` once it is gone.
pub(crate) fn state(pid: Pid) -> Option<char> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    stat_fields(&stat).map(|(state, _)| state)
}

/// The wait status (as waitpid(2) gives it) of `pid`, a zombie not yet
/// reaped: field 52 of `/proc/PID/stat`.
pub(crate) fn wait_status(pid: Pid) -> Option<i32> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // Fields 3 on follow the command name; field 52 is the 50th of them.
    stat[stat.rfind(')')? + 1..]
        .split_whitespace()
        .nth(49)?
        .parse()
        .ok()
}

/// The state and process group in a `/proc/PID/stat` line. The command
/// name (second field) may hold spaces and parentheses, so the fields are
/// read after its last `)`.
fn stat_fields(stat: &str) -> Option<(char, i32)> {
    let mut rest = stat[stat.rfind(')')? + 1..].split_whitespace();
    let state = rest.next()?.chars().next()?;
    let _ppid = rest.next()?;
    let pgrp = rest.next()?.parse().ok()?;
    Some((state, pgrp))
}

/// Makes this process the reaper of its descendants' orphans
/// (`PR_SET_CHILD_SUBREAPER`): from now on a process started below it
/// whose parent exits becomes its child, not init's. Returns whether it
/// is one; if not, [`Leftovers`] walks all of `/proc` every time.
pub(crate) fn adopt_orphans() -> bool {
    nix::sys::prctl::set_child_subreaper(true).is_ok()
}

/// What the command left running in its group, once it exited.
///
/// # Why one look at `run`'s own children is exact
///
/// The question is whether any live (not zombie) process other than the
/// leader is in the leader's group. The old answer read every process's
/// `/proc/PID/stat` (3.8 ms at ~250 processes, between the command's exit
/// and the release). `run` is a child subreaper ([`adopt_orphans`], set
/// before it starts anything), so:
///
/// 1. Every process the command started, and everything those started, is
///    `run`'s descendant for as long as it lives: an orphan goes to its
///    nearest subreaper ancestor, `run` or one below it, never outside.
///    (Processes in a new PID namespace below go to that namespace's init,
///    itself below `run`.)
/// 2. When `run` sees the leader exited (a zombie), the kernel has already
///    handed the leader's children to `run` (it does so before the exit is
///    reported, under the same lock). A zombie has no children.
/// 3. `run`'s children are the leader, the watcher (which starts
///    nothing) and the orphans it adopted; it starts nothing else. Only
///    `run` takes a child off its list, by reaping it. (The list is per
///    thread: the helpers are started from the main thread, orphans go to
///    it as the first live thread, and it lives until `run` exits, so no
///    child moves between threads; every thread's list is read anyway.)
///
/// So if, after the leader's exit, `run`'s children are only the leader
/// and the watcher, no process the command started is alive, in its group
/// or not, and none can appear (only a live descendant can start one). If
/// there is any other child (alive, or a zombie that reaping does not
/// settle), this falls back on the walk of all of `/proc`, which also
/// sees what a walk of the tree could miss: a descendant's `children`
/// file skips entries when its list changes while it is read, and a
/// process moves from one list to another when its parent exits. `run`'s
/// own list only grows while it is read (nothing reaps meanwhile), so it
/// is read whole.
///
/// What this misses that the walk of `/proc` saw: a process from outside
/// the command's tree (started by something else in the same session)
/// that moved itself into the command's group with `setpgid(2)`, knowing
/// its id, after the command started. It is nothing the command started,
/// which is the promise (see the `run` module); no shell or tool does
/// that by chance: a job's group id is the PID of its first process, and
/// the leader's PID stays in use (unreaped) until after the release.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Leftovers {
    /// The command's PID, its group's id.
    leader: Pid,
    /// The watcher: `run`'s only other child that is not the command's.
    watcher: Pid,
    /// Whether `run` adopts orphans; if not, every answer walks `/proc`.
    adopting: bool,
}

/// How many rounds of "reap the exited orphans, read the children
/// again" [`Leftovers::others_alive`] takes before it walks `/proc`
/// instead (a command that keeps leaving orphans that exit at once).
const REAP_ROUNDS: usize = 4;

impl Leftovers {
    /// The command led by `leader`, watched by `watcher`.
    pub(crate) fn new(leader: Pid, watcher: Pid, adopting: bool) -> Leftovers {
        Leftovers {
            leader,
            watcher,
            adopting,
        }
    }

    /// Whether any live (not zombie) process other than the leader is in
    /// the process group the leader leads. The leader is never reaped
    /// here: its zombie keeps the group's id from being reused. Exited
    /// orphans `run` adopted are reaped.
    pub(crate) fn others_alive(&self) -> bool {
        if self.adopting {
            for _ in 0..REAP_ROUNDS {
                match self.reap_adopted() {
                    // Nothing of the command's tree is left (see above).
                    Some(Adopted::None) => return false,
                    // Some exited and were reaped; their children (if
                    // any) came to `run` before they did: look again.
                    Some(Adopted::Reaped) => {}
                    Some(Adopted::Alive) | None => break,
                }
            }
        }
        others_in_group(self.leader)
    }

    /// Reaps the orphans `run` adopted that have exited (so they do not
    /// pile up while a long command runs). Never the leader or the watcher.
    pub(crate) fn reap_exited(&self) {
        if self.adopting {
            let _ = self.reap_adopted();
        }
    }

    /// Reads `run`'s children once and reaps those that are neither the
    /// leader nor the watcher and have exited; `None` without the
    /// `children` files (a kernel without CONFIG_PROC_CHILDREN).
    fn reap_adopted(&self) -> Option<Adopted> {
        let (mut alive, mut reaped) = (false, false);
        for pid in own_children()? {
            if pid == self.leader || pid == self.watcher {
                continue;
            }
            let flags = WaitPidFlag::WEXITED | WaitPidFlag::WNOHANG;
            match waitid(Id::Pid(pid), flags) {
                Ok(WaitStatus::StillAlive) => alive = true,
                // Reaped (EINVAL: nix could not name the real-time signal
                // it died of, after the kernel reaped it); ECHILD: gone.
                Ok(_) | Err(Errno::EINVAL | Errno::ECHILD) => reaped = true,
                Err(_) => alive = true,
            }
        }
        Some(if alive {
            Adopted::Alive
        } else if reaped {
            Adopted::Reaped
        } else {
            Adopted::None
        })
    }
}

/// What one look at `run`'s adopted children found.
enum Adopted {
    /// None: only the leader and the watcher are `run`'s children.
    None,
    /// Some, all exited, now reaped.
    Reaped,
    /// At least one still runs (or could not be waited for).
    Alive,
}

/// This process's children: the `children` file of each of its threads.
/// `None` if this kernel has no such files, or if any could not be read
/// (out of file descriptors, say): a list with a thread's children
/// missing would read as "nothing left", so the caller walks `/proc`.
fn own_children() -> Option<Vec<Pid>> {
    let mut children = Vec::new();
    let mut any = false;
    for task in std::fs::read_dir("/proc/self/task").ok()? {
        let task = task.ok()?;
        let text = match std::fs::read_to_string(task.path().join("children")) {
            Ok(text) => text,
            // A thread that ended since the directory was read has none.
            Err(e) if gone(&e) => continue,
            Err(_) => return None,
        };
        any = true;
        children.extend(
            text.split_ascii_whitespace()
                .filter_map(|pid| pid.parse().ok())
                .map(Pid::from_raw),
        );
    }
    any.then_some(children)
}

/// Whether any live (not zombie) process other than `leader` is in the
/// process group `leader` leads, from every process's `/proc/PID/stat`.
/// The leader itself may be an unreaped zombie, which keeps the group's
/// id from being reused.
///
/// A process whose stat cannot be read for any cause but its end (out of
/// file descriptors, say: the command may lower leasehold's limit) counts
/// as left: "nothing is left" must never be an answer by default.
fn others_in_group(leader: Pid) -> bool {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        // Without /proc, fall back on kill(2), which counts the leader too.
        return killpg(leader, None).is_ok();
    };
    entries.into_iter().any(|entry| {
        let Ok(entry) = entry else {
            return true;
        };
        let Some(pid) = entry
            .file_name()
            .to_str()
            .and_then(|n| n.parse::<i32>().ok())
        else {
            return false;
        };
        if pid == leader.as_raw() {
            return false;
        }
        match stat_head(pid) {
            Ok(stat) => stat_fields(&stat)
                .is_none_or(|(state, pgrp)| pgrp == leader.as_raw() && !matches!(state, 'Z' | 'X')),
            Err(e) => !gone(&e),
        }
    })
}

/// Whether reading a process's (or thread's) `/proc` file failed because
/// it ended: ENOENT, or ESRCH for one that ended while it was read.
fn gone(err: &std::io::Error) -> bool {
    err.kind() == std::io::ErrorKind::NotFound || err.raw_os_error() == Some(Errno::ESRCH as i32)
}

/// The start of `/proc/PID/stat`, through the process group field at
/// least: one open and one read into a buffer on the stack (no stat(2),
/// no allocation for the file), since [`others_in_group`] reads every
/// process's.
fn stat_head(pid: i32) -> std::io::Result<String> {
    use std::io::Read;
    // PID, the command name (at most 64 bytes in parentheses), state,
    // ppid, pgrp: well inside 256 bytes.
    let mut buf = [0u8; 256];
    let mut file = std::fs::File::open(format!("/proc/{pid}/stat"))?;
    let n = file.read(&mut buf)?;
    Ok(String::from_utf8_lossy(&buf[..n]).into_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stat_lines_are_read_after_the_command_name() {
        let line = "4242 (a (b) c) T 1 4240 4240 34817 4240 4194560 0 0";
        assert_eq!(stat_fields(line), Some(('T', 4240)));
        assert_eq!(stat_fields("garbage"), None);
    }

    #[test]
    fn this_process_is_seen_in_its_own_group() {
        let me = nix::unistd::getpid();
        assert!(matches!(state(me), Some('R' | 'S')));
        let head = stat_head(me.as_raw()).expect("our own stat");
        assert_eq!(
            stat_fields(&head).map(|(_, pgrp)| pgrp),
            Some(nix::unistd::getpgrp().as_raw())
        );
    }
}
