//! The command's process group as `/proc` and `kill(2)` show it.

use nix::errno::Errno;
use nix::sys::signal::{Signal, killpg};
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

/// Whether any live (not zombie) process other than `leader` is in the
/// process group `leader` leads. The leader itself may be an unreaped
/// zombie, which keeps the group's id from being reused.
pub(crate) fn others_alive(leader: Pid) -> bool {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        // Without /proc, fall back on kill(2), which counts the leader too.
        return killpg(leader, None).is_ok();
    };
    entries.flatten().any(|entry| {
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
        stat_head(pid)
            .and_then(|stat| stat_fields(&stat))
            .is_some_and(|(state, pgrp)| pgrp == leader.as_raw() && !matches!(state, 'Z' | 'X'))
    })
}

/// The start of `/proc/PID/stat`, through the process group field at
/// least: one open and one read into a buffer on the stack (no stat(2),
/// no allocation for the file), since [`others_alive`] reads every
/// process's.
fn stat_head(pid: i32) -> Option<String> {
    use std::io::Read;
    // PID, the command name (at most 64 bytes in parentheses), state,
    // ppid, pgrp: well inside 256 bytes.
    let mut buf = [0u8; 256];
    let mut file = std::fs::File::open(format!("/proc/{pid}/stat")).ok()?;
    let n = file.read(&mut buf).ok()?;
    Some(String::from_utf8_lossy(&buf[..n]).into_owned())
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
