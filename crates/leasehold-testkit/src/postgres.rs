//! A real, private PostgreSQL server: `initdb` in a temporary directory, then
//! `postgres` on a free loopback port, killed on drop.

use std::ffi::OsString;
use std::fs::{self, File};
use std::io::Read;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use nix::sys::signal::{self, Signal};
use nix::unistd::{Gid, Pid, Uid, User};
use tempfile::TempDir;

use crate::ports::{PortGuard, reserve_free_port};

/// The command that installs the PostgreSQL binaries; part of the panic
/// message when `initdb` or `postgres` cannot be found.
///
/// ```
/// assert!(leasehold_testkit::POSTGRES_INSTALL_HINT.contains("apt-get install -y postgresql"));
/// ```
pub const POSTGRES_INSTALL_HINT: &str = "apt-get update && apt-get install -y postgresql";

/// Environment variable naming the directory of `initdb` and `postgres`.
const BIN_DIR_ENV: &str = "LEASEHOLD_POSTGRES_BIN";
/// Where Debian's `postgresql` package puts the binaries (`<version>/bin`).
const DEBIAN_DIR: &str = "/usr/lib/postgresql";
/// The database superuser `initdb` creates; connections use it.
const SUPERUSER: &str = "postgres";
/// How long the server may take to accept connections after being spawned.
const READY_TIMEOUT: Duration = Duration::from_secs(30);
/// How long an immediate shutdown (SIGQUIT) may take before SIGKILL.
const STOP_TIMEOUT: Duration = Duration::from_secs(5);
/// What the server logs once it accepts connections.
const READY_MARK: &str = "database system is ready to accept connections";
/// Name of the server's log file inside its directory.
const LOG_FILE: &str = "postgres.log";
/// Lines of server log printed when a test panics.
const LOG_TAIL_LINES: usize = 100;

/// One real PostgreSQL server on a free loopback port.
///
/// `initdb` makes a fresh cluster in a temporary directory (removed on
/// drop); `postgres` serves it on `127.0.0.1` only (`listen_addresses`), with
/// its unix socket in that directory too, trust authentication for the
/// superuser `postgres`, and no fsync (a test's data need not survive a
/// crash). Dropping the value stops the server (SIGQUIT to its PID, SIGKILL
/// after 5 s) and reaps it; if the thread is panicking, the tail of the
/// server log is printed first.
///
/// The binaries come from the directory in `LEASEHOLD_POSTGRES_BIN` if set,
/// else from `PATH`, else from the newest `/usr/lib/postgresql/<version>/bin`
/// (where Debian's `postgresql` package puts them, off `PATH`). If none has
/// them, the kit panics with the command that installs them.
///
/// `initdb` and `postgres` refuse to run as root. Run as root (CI is), the
/// kit runs them as the user `postgres` (which Debian's package creates),
/// else as `nobody`, and gives that user the temporary directory.
///
/// ```no_run
/// let pg = leasehold_testkit::PostgresServer::start();
/// let params = pg.connection_string(); // for tokio-postgres, psql, ...
/// assert!(params.contains("host=127.0.0.1"));
/// ```
#[derive(Debug)]
pub struct PostgresServer {
    port: PortGuard,
    dir: TempDir,
    child: Option<Child>,
}

impl PostgresServer {
    /// Makes a fresh cluster and starts a server on it; returns once it
    /// accepts connections.
    ///
    /// Panics, with the log and the install command, if the binaries are
    /// missing or the server does not come up within 30 s.
    pub fn start() -> PostgresServer {
        let bin = bin_dir();
        let run_as = unprivileged_user();
        let dir = tempfile::Builder::new()
            .prefix("leasehold-pg-")
            .tempdir()
            .unwrap_or_else(|e| {
                panic!("leasehold-testkit: cannot make a temporary directory: {e}")
            });
        if let Some((uid, gid)) = run_as {
            std::os::unix::fs::chown(dir.path(), Some(uid.as_raw()), Some(gid.as_raw()))
                .unwrap_or_else(|e| {
                    panic!(
                        "leasehold-testkit: cannot give {} to uid {uid}: {e}",
                        dir.path().display()
                    )
                });
        }
        let data = dir.path().join("data");
        let log_path = dir.path().join(LOG_FILE);
        let mut initdb = Command::new(bin.join("initdb"));
        initdb
            .arg("-D")
            .arg(&data)
            .args([
                "-U",
                SUPERUSER,
                "--auth=trust",
                "--no-locale",
                "-E",
                "UTF8",
                "--no-sync",
            ])
            .current_dir(dir.path())
            .stdin(Stdio::null());
        as_user(&mut initdb, run_as);
        let out = initdb
            .output()
            .unwrap_or_else(|e| panic!("{}", missing(&bin.join("initdb"), &e)));
        assert!(
            out.status.success(),
            "leasehold-testkit: initdb failed ({}):\n{}{}",
            out.status,
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );

        let port = reserve_free_port();
        let log = File::create(&log_path).unwrap_or_else(|e| {
            panic!(
                "leasehold-testkit: cannot create {}: {e}",
                log_path.display()
            )
        });
        let mut postgres = Command::new(bin.join("postgres"));
        postgres
            .arg("-D")
            .arg(&data)
            .arg("-p")
            .arg(port.port().to_string())
            .arg("-c")
            .arg("listen_addresses=127.0.0.1")
            .arg("-c")
            .arg(format!("unix_socket_directories={}", dir.path().display()))
            .args(["-c", "fsync=off", "-c", "full_page_writes=off"])
            .current_dir(dir.path())
            .stdin(Stdio::null())
            .stdout(log.try_clone().expect("clone the log file handle"))
            .stderr(log);
        as_user(&mut postgres, run_as);
        let child = postgres
            .spawn()
            .unwrap_or_else(|e| panic!("{}", missing(&bin.join("postgres"), &e)));
        let mut server = PostgresServer {
            port,
            dir,
            child: Some(child),
        };
        server.wait_ready();
        server
    }

    /// The loopback port the server listens on.
    pub fn port(&self) -> u16 {
        self.port.port()
    }

    /// The server process's PID.
    pub fn pid(&self) -> u32 {
        self.child.as_ref().map_or(0, Child::id)
    }

    /// libpq-style connection parameters (what `tokio_postgres::connect`
    /// and `psql` take): the superuser on 127.0.0.1 at [`port`](Self::port),
    /// database `postgres`.
    pub fn connection_string(&self) -> String {
        format!(
            "host=127.0.0.1 port={} user={SUPERUSER} dbname=postgres",
            self.port()
        )
    }

    /// The server's temporary directory (its data in `data/`, its log).
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    /// The server log so far.
    pub fn log(&self) -> String {
        let mut text = String::new();
        if let Ok(mut file) = File::open(self.dir.path().join(LOG_FILE)) {
            let _ = file.read_to_string(&mut text);
        }
        text
    }

    fn wait_ready(&mut self) {
        let deadline = Instant::now() + READY_TIMEOUT;
        loop {
            if self.log().contains(READY_MARK) {
                return;
            }
            if let Some(child) = self.child.as_mut()
                && let Ok(Some(status)) = child.try_wait()
            {
                panic!(
                    "leasehold-testkit: postgres exited ({status}) before accepting connections:\n{}",
                    self.log()
                );
            }
            assert!(
                Instant::now() < deadline,
                "leasehold-testkit: postgres did not accept connections within {READY_TIMEOUT:?}:\n{}",
                self.log()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for PostgresServer {
    fn drop(&mut self) {
        if std::thread::panicking() {
            let log = self.log();
            let lines: Vec<&str> = log.lines().collect();
            let tail = &lines[lines.len().saturating_sub(LOG_TAIL_LINES)..];
            eprintln!(
                "---- postgres on port {} (last {} lines of its log) ----\n{}",
                self.port(),
                tail.len(),
                tail.join("\n")
            );
        }
        let Some(mut child) = self.child.take() else {
            return;
        };
        // Not reaped yet, so the PID is still our child's. SIGQUIT is an
        // immediate shutdown: the postmaster stops its own backends first.
        let pid = Pid::from_raw(i32::try_from(child.id()).expect("pid fits i32"));
        let _ = signal::kill(pid, Signal::SIGQUIT);
        let deadline = Instant::now() + STOP_TIMEOUT;
        while Instant::now() < deadline {
            if let Ok(Some(_)) = child.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        let _ = signal::kill(pid, Signal::SIGKILL);
        let _ = child.wait();
    }
}

/// The directory holding `initdb` and `postgres`; panics with the install
/// command when there is none.
fn bin_dir() -> PathBuf {
    find_bin_dir(
        std::env::var_os(BIN_DIR_ENV),
        std::env::var_os("PATH"),
        Path::new(DEBIAN_DIR),
    )
    .unwrap_or_else(|message| panic!("leasehold-testkit: {message}"))
}

/// The directory named by `env` (`LEASEHOLD_POSTGRES_BIN`), else the first
/// on `path` with both binaries, else the newest `<debian>/<major>/bin`.
fn find_bin_dir(
    env: Option<OsString>,
    path: Option<OsString>,
    debian: &Path,
) -> Result<PathBuf, String> {
    let has_both = |dir: &Path| dir.join("initdb").is_file() && dir.join("postgres").is_file();
    if let Some(dir) = env {
        let dir = PathBuf::from(dir);
        if has_both(&dir) {
            return Ok(dir);
        }
        return Err(format!(
            "{BIN_DIR_ENV}={} has no initdb and postgres. Unset it, or install PostgreSQL \
             with:\n    {POSTGRES_INSTALL_HINT}",
            dir.display()
        ));
    }
    if let Some(dir) = path.and_then(|p| std::env::split_paths(&p).find(|d| has_both(d))) {
        return Ok(dir);
    }
    // Debian: /usr/lib/postgresql/<major>/bin, off PATH; the newest wins.
    let mut versions: Vec<(u32, PathBuf)> = fs::read_dir(debian)
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|entry| {
            let major = entry.file_name().to_str()?.parse::<u32>().ok()?;
            let bin = entry.path().join("bin");
            has_both(&bin).then_some((major, bin))
        })
        .collect();
    versions.sort();
    versions.pop().map(|(_, bin)| bin).ok_or_else(|| {
        format!(
            "PostgreSQL's initdb and postgres are neither on PATH nor in {}/<version>/bin; \
             the fencing tests need a real PostgreSQL. Install it with:\n    \
             {POSTGRES_INSTALL_HINT}\nor point {BIN_DIR_ENV} at the directory of initdb \
             and postgres.",
            debian.display()
        )
    })
}

/// The user to run PostgreSQL as when this process is root (PostgreSQL
/// refuses root): `postgres` if it exists, else `nobody`. `None` when not
/// root: the server then runs as us.
fn unprivileged_user() -> Option<(Uid, Gid)> {
    if !Uid::effective().is_root() {
        return None;
    }
    for name in ["postgres", "nobody"] {
        if let Ok(Some(user)) = User::from_name(name) {
            return Some((user.uid, user.gid));
        }
    }
    panic!(
        "leasehold-testkit: running as root, and PostgreSQL refuses root, but there is no user \
         `postgres` or `nobody` to run it as; create one (`useradd postgres`) or run the \
         tests as another user"
    )
}

fn as_user(command: &mut Command, user: Option<(Uid, Gid)>) {
    if let Some((uid, gid)) = user {
        // PostgreSQL checks the effective uid. Root's supplementary groups
        // stay (dropping them needs setgroups in pre_exec: unsafe code).
        command.uid(uid.as_raw()).gid(gid.as_raw());
    }
}

fn missing(binary: &Path, e: &std::io::Error) -> String {
    format!(
        "leasehold-testkit: cannot run {}: {e}. Install PostgreSQL with:\n    {POSTGRES_INSTALL_HINT}",
        binary.display()
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fake_bin(dir: &Path) {
        fs::create_dir_all(dir).unwrap();
        File::create(dir.join("initdb")).unwrap();
        File::create(dir.join("postgres")).unwrap();
    }

    #[test]
    fn missing_binaries_fail_with_the_install_command() {
        let empty = tempfile::tempdir().unwrap();
        let err = find_bin_dir(None, Some(empty.path().into()), empty.path()).unwrap_err();
        assert!(err.contains("apt-get install -y postgresql"), "{err}");
        let err = find_bin_dir(Some(empty.path().into()), None, empty.path()).unwrap_err();
        assert!(
            err.contains(BIN_DIR_ENV) && err.contains("apt-get install"),
            "{err}"
        );
    }

    #[test]
    fn debians_newest_version_is_found_off_path() {
        let debian = tempfile::tempdir().unwrap();
        fake_bin(&debian.path().join("9/bin"));
        fake_bin(&debian.path().join("15/bin"));
        fs::create_dir_all(debian.path().join("16/bin")).unwrap(); // no binaries
        let found = find_bin_dir(None, Some("/nonexistent".into()), debian.path()).unwrap();
        assert_eq!(found, debian.path().join("15/bin"));
    }
}
