//! The worker processes of a run, signalled and killed by PID only.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, Instant};

use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;

use crate::clock::now_us;
use crate::history::WorkerId;
use crate::worker::WorkerConfig;

/// Worker children by id. Dropping it SIGKILLs and reaps every one still
/// running (also when unwinding from a panic).
pub(crate) struct Procs {
    exe: PathBuf,
    /// The `leasehold` binary, when workers are `leasehold run` processes.
    wrapper: Option<PathBuf>,
    children: Mutex<BTreeMap<WorkerId, Child>>,
}

impl Procs {
    /// Workers will be started from `exe` (this binary, or
    /// `CARGO_BIN_EXE_leasehold-chaos` in tests); with `wrapper`, each is a
    /// `leasehold run` of that binary whose command is `exe`'s critical
    /// section (see [`Procs::spawn`]).
    pub(crate) fn new(exe: PathBuf, wrapper: Option<PathBuf>) -> Procs {
        Procs {
            exe,
            wrapper,
            children: Mutex::new(BTreeMap::new()),
        }
    }

    fn children(&self) -> MutexGuard<'_, BTreeMap<WorkerId, Child>> {
        self.children.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Starts a worker process: the worker loop, or with a wrapper one
    /// `leasehold run` (one acquisition, then it exits).
    ///
    /// # Panics
    ///
    /// If the binary cannot be started.
    pub(crate) fn spawn(&self, config: &WorkerConfig) {
        if let Some(wrapper) = &self.wrapper {
            return self.spawn_wrapped(wrapper, config);
        }
        let mut cmd = Command::new(&self.exe);
        cmd.arg("worker")
            .arg(format!("--id={}", config.id))
            .args(config.urls.iter().map(|url| format!("--url={url}")))
            .arg(format!("--resource-port={}", config.resource_port))
            .arg(format!("--lock={}", config.lock))
            .arg(format!("--ttl-ms={}", config.ttl.as_millis()))
            .arg(format!("--wait-ms={}", config.wait.as_millis()))
            .arg(format!(
                "--command-timeout-ms={}",
                config.command_timeout.as_millis()
            ))
            .arg(format!("--until-us={}", config.until))
            .arg(format!("--seed={}", config.seed))
            .arg(format!("--max-sleep-us={}", config.max_sleep.as_micros()))
            .stdin(Stdio::null())
            .stdout(Stdio::null());
        if config.announce {
            cmd.arg("--announce");
        }
        if config.report_acquiring {
            cmd.arg("--report-acquiring");
        }
        if config.announce_slow {
            cmd.arg("--announce-slow");
        }
        if !config.probes {
            cmd.arg("--no-probes");
        }
        if config.ballast > 0 {
            cmd.arg(format!("--ballast={}", config.ballast));
        }
        if config.cluster {
            cmd.arg("--cluster");
        }
        cmd.args(
            config
                .held_healthy
                .iter()
                .map(|name| format!("--held-healthy={name}")),
        );
        cmd.args(
            config
                .held_frozen
                .iter()
                .map(|name| format!("--held-frozen={name}")),
        );
        let child = cmd
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start worker {}: {e}", self.exe.display()));
        self.children().insert(config.id, child);
    }

    /// Starts `leasehold run` on the lock with this binary's critical
    /// section as the command, run by `sh` in the background (`& wait`):
    /// the critical section is a grandchild of the wrapper, as the work of
    /// many real commands is, and must be stopped with everything else the
    /// command started. Its PID is the worker's: faults target the wrapper.
    fn spawn_wrapped(&self, wrapper: &Path, config: &WorkerConfig) {
        let mut cmd = Command::new(wrapper);
        cmd.args(config.urls.iter().map(|url| format!("--url={url}")))
            .arg("run")
            .arg(format!("--ttl={}ms", config.ttl.as_millis()))
            .arg(format!("--wait={}ms", config.wait.as_millis()))
            .arg(&config.lock)
            .arg("--")
            .args(["sh", "-c", "\"$0\" \"$@\" & wait $!"])
            .arg(&self.exe)
            .arg("command")
            .arg(format!("--id={}", config.id))
            .arg(format!("--resource-port={}", config.resource_port))
            .arg(format!("--started-us={}", now_us()))
            .arg(format!("--seed={}", config.seed))
            .arg(format!("--max-sleep-us={}", config.max_sleep.as_micros()))
            .stdin(Stdio::null())
            .stdout(Stdio::null());
        if config.announce {
            cmd.arg("--announce");
        }
        let child = cmd
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start {}: {e}", wrapper.display()));
        self.children().insert(config.id, child);
    }

    /// The workers started and not yet reaped.
    pub(crate) fn ids(&self) -> Vec<WorkerId> {
        self.children().keys().copied().collect()
    }

    /// Sends `signal` to a running worker; false if it is not running.
    pub(crate) fn signal(&self, id: WorkerId, signal: Signal) -> bool {
        let mut children = self.children();
        // Holding the lock on an unreaped child means the PID is still ours.
        let Some(child) = children.get_mut(&id) else {
            return false;
        };
        if !matches!(child.try_wait(), Ok(None)) {
            return false;
        }
        kill(pid(child), signal).is_ok()
    }

    /// Reaps workers that exited; returns their ids, each with whether it
    /// exited successfully (a worker does only after its run ended).
    pub(crate) fn reap(&self) -> Vec<(WorkerId, bool)> {
        let mut children = self.children();
        let done: Vec<(WorkerId, bool)> = children
            .iter_mut()
            .filter_map(|(id, c)| match c.try_wait() {
                Ok(None) => None,
                Ok(Some(status)) => Some((*id, status.success())),
                Err(_) => Some((*id, false)),
            })
            .collect();
        for (id, _) in &done {
            children.remove(id);
        }
        done
    }

    /// Waits up to `timeout` for every worker to exit by itself, then kills
    /// the rest. Returns how many had to be killed, and the ids of those
    /// that exited with a failure.
    pub(crate) fn finish(&self, timeout: Duration) -> (usize, Vec<WorkerId>) {
        let deadline = Instant::now() + timeout;
        let mut failed = Vec::new();
        loop {
            failed.extend(
                self.reap()
                    .into_iter()
                    .filter(|(_, ok)| !ok)
                    .map(|(id, _)| id),
            );
            if self.children().is_empty() {
                return (0, failed);
            }
            if Instant::now() >= deadline {
                return (self.kill_all(), failed);
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    fn kill_all(&self) -> usize {
        let mut children = self.children();
        let n = children.len();
        for (_, mut child) in std::mem::take(&mut *children) {
            let _ = kill(pid(&child), Signal::SIGKILL);
            let _ = child.wait();
        }
        n
    }
}

impl Drop for Procs {
    fn drop(&mut self) {
        self.kill_all();
    }
}

fn pid(child: &Child) -> Pid {
    Pid::from_raw(i32::try_from(child.id()).expect("pid fits in i32"))
}
