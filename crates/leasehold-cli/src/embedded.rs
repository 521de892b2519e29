//! A private, throwaway `redis-server` for `leasehold demo` and `bench` when
//! no URL is given (and for the bench's Redlock nodes): a free loopback port (never 6379), a temporary directory, no
//! persistence, killed by its PID (SIGKILL, then reaped) when dropped.

use std::io::{self, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::os::unix::fs::DirBuilderExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;

use crate::exit::{self, Failure};

/// How long the server may take to answer PING.
const READY_TIMEOUT: Duration = Duration::from_secs(10);
/// Fresh ports tried when another process takes the chosen one first.
const START_ATTEMPTS: usize = 5;
/// The port of a system Redis, which is never used.
const DEFAULT_REDIS_PORT: u16 = 6379;
/// The command that installs redis-server on Debian and Ubuntu.
pub(crate) const INSTALL_HINT: &str = "sudo apt-get install -y redis-server";

/// A running throwaway `redis-server`.
#[derive(Debug)]
pub(crate) struct EmbeddedRedis {
    /// The process; `None` once killed.
    child: Option<Child>,
    /// Its port on 127.0.0.1.
    port: u16,
    /// Working directory and log; removed on drop, after the process is gone.
    dir: PrivateDir,
}

impl EmbeddedRedis {
    /// Starts `redis-server` from PATH and waits until it answers PING.
    ///
    /// # Errors
    ///
    /// Exit 69 when redis-server is missing (with the install command), does
    /// not start, or does not answer in time.
    pub(crate) fn start() -> Result<EmbeddedRedis, Failure> {
        let binary = find_binary().ok_or_else(|| {
            Failure::with_code(
                exit::UNAVAILABLE,
                format!(
                    "redis-server not found on PATH, needed to start a private Redis: install it \
                     with `{INSTALL_HINT}`, or point demo or bench at a Redis with --url (the \
                     bench's Redlock scenario always starts its own)"
                ),
            )
        })?;
        for _ in 0..START_ATTEMPTS {
            let dir = PrivateDir::create()
                .map_err(|e| unavailable(format!("cannot create a temporary directory: {e}")))?;
            let port = free_port()?;
            let child = spawn(&binary, dir.path(), port)?;
            let mut server = EmbeddedRedis {
                child: Some(child),
                port,
                dir,
            };
            match server.wait_ready() {
                Ok(()) => return Ok(server),
                // Dropping `server` kills what is left of it.
                Err(Startup::PortTaken) => continue,
                Err(Startup::Failed(message)) => return Err(unavailable(message)),
            }
        }
        Err(unavailable(format!(
            "redis-server could not bind a free port in {START_ATTEMPTS} attempts"
        )))
    }

    /// [`EmbeddedRedis::start`] on a blocking thread, for async callers.
    ///
    /// # Errors
    ///
    /// As [`EmbeddedRedis::start`].
    pub(crate) async fn start_async() -> Result<EmbeddedRedis, Failure> {
        tokio::task::spawn_blocking(EmbeddedRedis::start)
            .await
            .map_err(|e| {
                Failure::with_code(exit::SOFTWARE, format!("starting redis-server: {e}"))
            })?
    }

    /// `redis://127.0.0.1:PORT`.
    pub(crate) fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }

    /// The loopback port.
    pub(crate) fn port(&self) -> u16 {
        self.port
    }

    /// Polls until the server answers PING, it exits, or time runs out.
    fn wait_ready(&mut self) -> Result<(), Startup> {
        let deadline = Instant::now() + READY_TIMEOUT;
        let log = self.dir.path().join("redis.log");
        loop {
            if let Some(child) = self.child.as_mut() {
                match child.try_wait() {
                    Ok(None) => {}
                    Ok(Some(status)) => {
                        self.child = None;
                        let text = std::fs::read_to_string(&log).unwrap_or_default();
                        if text.contains("Address already in use") {
                            return Err(Startup::PortTaken);
                        }
                        let last = text.lines().last().unwrap_or("no log").trim().to_owned();
                        return Err(Startup::Failed(format!(
                            "the private redis-server exited at start with {status}: {last}"
                        )));
                    }
                    Err(e) => {
                        return Err(Startup::Failed(format!(
                            "cannot watch the private redis-server: {e}"
                        )));
                    }
                }
            }
            // PING proves something answers on the port; the line in our own
            // log proves it is our server and not someone else's.
            if ping(self.port)
                && std::fs::read_to_string(&log)
                    .is_ok_and(|t| t.contains("Ready to accept connections"))
            {
                return Ok(());
            }
            if Instant::now() >= deadline {
                return Err(Startup::Failed(format!(
                    "the private redis-server on port {} did not answer within {READY_TIMEOUT:?}",
                    self.port
                )));
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    /// SIGKILL by PID, then reap. Does nothing when already done.
    fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            // Not reaped yet, so the PID is still our child's.
            if let Ok(pid) = i32::try_from(child.id()) {
                let _ = kill(Pid::from_raw(pid), Signal::SIGKILL);
            }
            let _ = child.wait();
        }
    }
}

impl Drop for EmbeddedRedis {
    fn drop(&mut self) {
        self.kill();
    }
}

/// A fresh directory under the system's temporary directory, readable by
/// us alone, removed with its contents on drop. (std only: the tempfile
/// crate is a test dependency, not part of the shipped binary.)
#[derive(Debug)]
struct PrivateDir(PathBuf);

impl PrivateDir {
    /// Creates `leasehold-demo-<pid>-<nanos>-<n>`, mode 0700. `create` fails
    /// on any existing entry (a symlink included), so a name someone else
    /// made first is skipped, never used.
    fn create() -> io::Result<PrivateDir> {
        let base = std::env::temp_dir();
        let nanos = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.subsec_nanos());
        let mut last = None;
        for n in 0..100 {
            let path = base.join(format!("leasehold-demo-{}-{nanos}-{n}", std::process::id()));
            match std::fs::DirBuilder::new().mode(0o700).create(&path) {
                Ok(()) => return Ok(PrivateDir(path)),
                Err(e) if e.kind() == io::ErrorKind::AlreadyExists => last = Some(e),
                Err(e) => return Err(e),
            }
        }
        Err(last.unwrap_or_else(|| io::Error::other("no free name")))
    }

    /// The directory.
    fn path(&self) -> &Path {
        &self.0
    }
}

impl Drop for PrivateDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Why a start attempt failed.
enum Startup {
    /// Another process bound the port first; try another.
    PortTaken,
    /// Anything else, as a one-line message.
    Failed(String),
}

/// An exit-69 failure.
fn unavailable(message: String) -> Failure {
    Failure::with_code(exit::UNAVAILABLE, message)
}

/// `redis-server` on PATH.
fn find_binary() -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|dir| dir.join("redis-server"))
        .find(|candidate| candidate.is_file())
}

/// A free loopback port other than 6379, from the kernel.
fn free_port() -> Result<u16, Failure> {
    for _ in 0..20 {
        let listener = TcpListener::bind(("127.0.0.1", 0))
            .map_err(|e| unavailable(format!("cannot bind a loopback port: {e}")))?;
        let port = listener
            .local_addr()
            .map_err(|e| unavailable(format!("cannot read a loopback port: {e}")))?
            .port();
        if port != DEFAULT_REDIS_PORT {
            return Ok(port);
        }
    }
    Err(unavailable("no free loopback port".to_owned()))
}

/// Spawns the server: loopback only, no persistence, log in `dir`.
fn spawn(binary: &Path, dir: &Path, port: u16) -> Result<Child, Failure> {
    Command::new(binary)
        .arg("--port")
        .arg(port.to_string())
        .args(["--bind", "127.0.0.1", "--protected-mode", "yes"])
        .args(["--save", "", "--appendonly", "no", "--daemonize", "no"])
        .arg("--dir")
        .arg(dir)
        .arg("--logfile")
        .arg(dir.join("redis.log"))
        .current_dir(dir)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .map_err(|e| match e.kind() {
            io::ErrorKind::NotFound => unavailable(format!(
                "redis-server not found; install it with `{INSTALL_HINT}`"
            )),
            _ => unavailable(format!("cannot start {}: {e}", binary.display())),
        })
}

/// True when the server on `port` answers an inline PING with `+PONG`.
fn ping(port: u16) -> bool {
    let addr = SocketAddr::from(([127, 0, 0, 1], port));
    let Ok(mut stream) = TcpStream::connect_timeout(&addr, Duration::from_millis(200)) else {
        return false;
    };
    let timeout = Some(Duration::from_millis(500));
    if stream.set_read_timeout(timeout).is_err() || stream.write_all(b"PING\r\n").is_err() {
        return false;
    }
    let mut reply = [0u8; 7];
    stream.read_exact(&mut reply).is_ok() && reply.starts_with(b"+PONG")
}
