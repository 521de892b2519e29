//! The terminal on stdin and which process group it serves, as a shell
//! moves it between jobs (tcsetpgrp).

use nix::sys::signal::{SigSet, SigmaskHow, Signal, pthread_sigmask};
use nix::unistd::{Pid, isatty, tcgetpgrp, tcsetpgrp};

/// True when stdin is a terminal and it is this process's controlling
/// terminal (so its foreground group can be asked and moved).
pub(crate) fn on_stdin() -> bool {
    let stdin = std::io::stdin();
    isatty(&stdin).unwrap_or(false) && tcgetpgrp(&stdin).is_ok()
}

/// The process group in the foreground of the terminal on stdin.
pub(crate) fn foreground() -> Option<Pid> {
    tcgetpgrp(std::io::stdin()).ok()
}

/// Moves the terminal on stdin from process group `from` to `to`, only if
/// `from` has it now; true if it moved. SIGTTOU is blocked on this thread
/// meanwhile: a process outside the foreground group may then take the
/// terminal instead of being stopped for trying.
pub(crate) fn hand_over(from: Pid, to: Pid) -> bool {
    if foreground() != Some(from) {
        return false;
    }
    let mut ttou = SigSet::empty();
    ttou.add(Signal::SIGTTOU);
    let mut before = SigSet::empty();
    if pthread_sigmask(SigmaskHow::SIG_BLOCK, Some(&ttou), Some(&mut before)).is_err() {
        return false;
    }
    let moved = tcsetpgrp(std::io::stdin(), to).is_ok();
    // Restoring a mask read a moment ago cannot fail.
    let _ = pthread_sigmask(SigmaskHow::SIG_SETMASK, Some(&before), None);
    moved
}
