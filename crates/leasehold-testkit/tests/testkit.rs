//! Tests of the test kit itself, against real `redis-server` processes.

use std::io::Write;
use std::net::{SocketAddr, TcpStream};
use std::process::Command;
use std::time::{Duration, Instant};

use leasehold_testkit::{
    INSTALL_HINT, PostgresServer, Proxy, ProxyMode, RedisCluster, RedisServer, start_servers,
};
use redis::{Connection, RedisResult};

const SHORT: Duration = Duration::from_millis(300);

fn ping(con: &mut Connection) -> RedisResult<String> {
    redis::cmd("PING").query(con)
}

fn set(con: &mut Connection, key: &str, value: &str) {
    let () = redis::cmd("SET").arg(key).arg(value).query(con).unwrap();
}

fn get(con: &mut Connection, key: &str) -> Option<String> {
    redis::cmd("GET").arg(key).query(con).unwrap()
}

fn connect(url: &str, timeout: Duration) -> RedisResult<Connection> {
    redis::Client::open(url)?.get_connection_with_timeout(timeout)
}

fn port_accepts(port: u16) -> bool {
    let addr = SocketAddr::from(([127, 0, 0, 1], port));
    TcpStream::connect_timeout(&addr, SHORT).is_ok()
}

#[test]
fn start_and_ping() {
    let server = RedisServer::start();
    assert_ne!(server.port(), 6379);
    assert_eq!(server.url(), format!("redis://127.0.0.1:{}", server.port()));
    assert!(server.is_running());
    assert!(server.dir().is_dir());
    assert!(server.log().contains("Ready to accept connections"));
    assert_eq!(ping(&mut server.connection()).unwrap(), "PONG");
    let mut con = connect(&server.url(), SHORT).unwrap();
    assert_eq!(ping(&mut con).unwrap(), "PONG");
}

#[test]
fn password_is_required() {
    let server = RedisServer::builder().password("s3cret p@ss").start();

    // Without credentials: the handshake or the first command is refused.
    let refused = connect(&server.url(), Duration::from_secs(2)).and_then(|mut c| ping(&mut c));
    let err = refused.expect_err("unauthenticated PING must fail");
    assert!(
        err.to_string().contains("NOAUTH"),
        "unexpected error: {err}"
    );

    // Wrong password.
    let wrong = connect(&server.url_with_auth(None, "nope"), Duration::from_secs(2))
        .and_then(|mut c| ping(&mut c));
    assert!(wrong.is_err());

    // Right password, via the URL (percent-encoded) and via connection().
    let mut con = connect(&server.url_with_auth(None, "s3cret p@ss"), SHORT).unwrap();
    assert_eq!(ping(&mut con).unwrap(), "PONG");
    assert_eq!(ping(&mut server.connection()).unwrap(), "PONG");
}

#[test]
fn kill_stops_the_process() {
    let mut server = RedisServer::start();
    let port = server.port();
    assert!(port_accepts(port));
    server.kill();
    assert!(!server.is_running());
    assert!(!port_accepts(port));
    server.kill(); // idempotent
    assert!(!server.is_running());
}

#[test]
fn drop_kills_the_process() {
    let server = RedisServer::start();
    let port = server.port();
    let dir = server.dir().to_path_buf();
    drop(server);
    assert!(!port_accepts(port));
    assert!(!dir.exists(), "temp dir must be removed on drop");
}

#[test]
fn drop_while_panicking_kills_and_does_not_abort() {
    let port = std::thread::spawn(|| {
        let server = RedisServer::start();
        let port = server.port();
        std::panic::catch_unwind(std::panic::AssertUnwindSafe(move || {
            let _server = server;
            panic!("deliberate panic; the redis log below is expected");
        }))
        .expect_err("closure panics");
        port
    })
    .join()
    .unwrap();
    assert!(!port_accepts(port));
}

#[test]
fn pause_and_resume() {
    let server = RedisServer::start();
    let mut con = server.connection();
    con.set_read_timeout(Some(SHORT)).unwrap();
    assert_eq!(ping(&mut con).unwrap(), "PONG");

    server.pause();
    assert!(server.is_running(), "a paused server is still running");
    let started = Instant::now();
    let err = ping(&mut con).expect_err("paused server must not answer");
    assert!(err.is_timeout(), "expected a timeout, got {err}");
    assert!(started.elapsed() >= SHORT - Duration::from_millis(50));

    server.resume();
    let mut fresh = server.connection();
    fresh
        .set_read_timeout(Some(Duration::from_secs(2)))
        .unwrap();
    assert_eq!(ping(&mut fresh).unwrap(), "PONG");
}

#[test]
fn restart_without_persistence_loses_data() {
    let mut server = RedisServer::start();
    let (port, pid) = (server.port(), server.pid());
    set(&mut server.connection(), "k", "v");
    server.restart_without_persistence();
    assert_eq!(server.port(), port);
    assert_ne!(server.pid(), pid);
    assert!(server.is_running());
    assert_eq!(get(&mut server.connection(), "k"), None);
}

#[test]
fn restart_without_appendonly_loses_data() {
    let mut server = RedisServer::start();
    set(&mut server.connection(), "k", "v");
    server.restart();
    assert_eq!(get(&mut server.connection(), "k"), None);
}

#[test]
fn restart_with_appendonly_keeps_acknowledged_writes() {
    let mut server = RedisServer::builder().appendonly(true).start();
    let (port, pid) = (server.port(), server.pid());
    set(&mut server.connection(), "k", "v");
    server.restart(); // SIGKILL right after the acknowledged write
    assert_eq!(server.port(), port);
    assert_ne!(server.pid(), pid);
    assert_eq!(get(&mut server.connection(), "k").as_deref(), Some("v"));

    // ...and restart_without_persistence wipes the AOF too.
    server.restart_without_persistence();
    assert_eq!(get(&mut server.connection(), "k"), None);
}

#[test]
fn restart_after_kill_and_with_password() {
    let mut server = RedisServer::builder().password("pw").start();
    server.kill();
    server.restart();
    assert!(server.is_running());
    assert_eq!(ping(&mut server.connection()).unwrap(), "PONG");
}

#[test]
fn extra_args_are_applied() {
    let server = RedisServer::builder().arg("maxclients", "77").start();
    let cfg: Vec<String> = redis::cmd("CONFIG")
        .arg("GET")
        .arg("maxclients")
        .query(&mut server.connection())
        .unwrap();
    assert_eq!(cfg, ["maxclients", "77"]);
}

#[test]
#[should_panic(expected = "no-such-directive")]
fn bad_config_panics_with_the_log() {
    let _server = RedisServer::builder().arg("no-such-directive", "1").start();
}

#[test]
fn start_servers_gives_independent_masters() {
    let servers = start_servers(3);
    assert_eq!(servers.len(), 3);
    let mut ports: Vec<u16> = servers.iter().map(RedisServer::port).collect();
    ports.sort_unstable();
    ports.dedup();
    assert_eq!(ports.len(), 3);
    set(&mut servers[0].connection(), "only-here", "1");
    assert_eq!(get(&mut servers[1].connection(), "only-here"), None);
    assert_eq!(get(&mut servers[2].connection(), "only-here"), None);
}

#[test]
fn proxy_pass_forwards() {
    let server = RedisServer::start();
    let proxy = Proxy::start(server.port());
    assert_eq!(proxy.url(), format!("redis://127.0.0.1:{}", proxy.port()));
    let mut con = connect(&proxy.url(), SHORT).unwrap();
    assert_eq!(ping(&mut con).unwrap(), "PONG");
    set(&mut con, "via-proxy", "yes");
    assert_eq!(
        get(&mut server.connection(), "via-proxy").as_deref(),
        Some("yes")
    );
}

#[test]
fn proxy_blackhole_times_out_then_pass_recovers() {
    let server = RedisServer::start();
    let proxy = Proxy::start(server.port());
    let mut con = connect(&proxy.url(), SHORT).unwrap();
    con.set_read_timeout(Some(SHORT)).unwrap();
    assert_eq!(ping(&mut con).unwrap(), "PONG");

    proxy.set_mode(ProxyMode::Blackhole);
    let err = ping(&mut con).expect_err("blackholed PING must not be answered");
    assert!(err.is_timeout(), "expected a timeout, got {err}");
    // New connections are accepted but the handshake never gets an answer.
    let err = connect(&proxy.url(), SHORT)
        .map(drop)
        .expect_err("handshake must time out");
    assert!(err.is_timeout(), "expected a timeout, got {err}");

    proxy.set_mode(ProxyMode::Pass);
    let mut fresh = connect(&proxy.url(), Duration::from_secs(2)).unwrap();
    assert_eq!(ping(&mut fresh).unwrap(), "PONG");
}

#[test]
fn proxy_reset_errors_then_pass_recovers() {
    let server = RedisServer::start();
    let proxy = Proxy::start(server.port());
    let mut con = connect(&proxy.url(), SHORT).unwrap();
    con.set_read_timeout(Some(Duration::from_secs(2))).unwrap();
    assert_eq!(ping(&mut con).unwrap(), "PONG");

    proxy.set_mode(ProxyMode::Reset);
    let started = Instant::now();
    let err = ping(&mut con).expect_err("reset connection must fail");
    assert!(!err.is_timeout(), "expected a reset, not a timeout: {err}");
    assert!(started.elapsed() < Duration::from_secs(1));
    // New connections are reset right after accept.
    let res = connect(&proxy.url(), Duration::from_secs(2)).and_then(|mut c| ping(&mut c));
    let err = res.expect_err("new connection must be reset");
    assert!(!err.is_timeout(), "expected a reset, not a timeout: {err}");

    proxy.set_mode(ProxyMode::Pass);
    let mut fresh = connect(&proxy.url(), Duration::from_secs(2)).unwrap();
    assert_eq!(ping(&mut fresh).unwrap(), "PONG");
    // The old connection stays dead even though the mode is Pass again.
    assert!(ping(&mut con).is_err());
}

#[test]
fn proxy_delay_adds_latency() {
    let server = RedisServer::start();
    let proxy = Proxy::start(server.port());
    let mut con = connect(&proxy.url(), SHORT).unwrap();
    con.set_read_timeout(Some(Duration::from_secs(2))).unwrap();
    let delay = Duration::from_millis(100);
    proxy.set_mode(ProxyMode::Delay(delay));
    let started = Instant::now();
    assert_eq!(ping(&mut con).unwrap(), "PONG");
    // Delayed on the way there and on the way back.
    assert!(started.elapsed() >= 2 * delay, "{:?}", started.elapsed());
}

#[test]
fn proxy_drop_is_prompt_and_closes_connections() {
    let server = RedisServer::start();
    let proxy = Proxy::start(server.port());
    let proxy_port = proxy.port();
    let mut con = connect(&proxy.url(), SHORT).unwrap();
    con.set_read_timeout(Some(Duration::from_secs(2))).unwrap();
    assert_eq!(ping(&mut con).unwrap(), "PONG");
    // A pump thread sleeping in a long delay must not hold up the drop.
    proxy.set_mode(ProxyMode::Delay(Duration::from_secs(30)));
    let mut raw = TcpStream::connect(("127.0.0.1", proxy_port)).unwrap();
    raw.write_all(b"PING\r\n").unwrap();
    std::thread::sleep(Duration::from_millis(50));

    let started = Instant::now();
    drop(proxy);
    assert!(
        started.elapsed() < Duration::from_secs(1),
        "{:?}",
        started.elapsed()
    );
    assert!(ping(&mut con).is_err());
    assert!(!port_accepts(proxy_port));
}

/// Runs the test `name` of this binary again as a child process, marked by
/// the variable `mark` and with `var` set to its value; fails unless the
/// child fails. Returns its stdout and stderr.
fn failing_child(name: &str, mark: &str, (var, value): (&str, &str)) -> (String, String) {
    let out = Command::new(std::env::current_exe().unwrap())
        .args(["--exact", name, "--nocapture"])
        .env(mark, "1")
        .env(var, value)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        !out.status.success(),
        "child must fail:\n{stdout}\n{stderr}"
    );
    (stdout, stderr)
}

/// Runs this test binary again with `LEASEHOLD_REDIS_SERVER` pointing nowhere;
/// the child's start() must panic with the install command.
#[test]
fn missing_binary_panics_with_install_command() {
    const CHILD: &str = "LEASEHOLD_TESTKIT_MISSING_BINARY_CHILD";
    if std::env::var_os(CHILD).is_some() {
        let _server = RedisServer::start();
        unreachable!("start() must panic when the binary is missing");
    }
    let (stdout, stderr) = failing_child(
        "missing_binary_panics_with_install_command",
        CHILD,
        ("LEASEHOLD_REDIS_SERVER", "/nonexistent/redis-server"),
    );
    assert!(
        stderr.contains(INSTALL_HINT),
        "no install hint:\n{stdout}\n{stderr}"
    );
    assert!(stderr.contains("/nonexistent/redis-server"), "{stderr}");
}

/// Runs this test binary again with `LEASEHOLD_REDIS_CLI` pointing nowhere;
/// the child's cluster must panic naming the variable, before any node runs.
#[test]
fn missing_cli_panics_naming_the_variable() {
    const CHILD: &str = "LEASEHOLD_TESTKIT_MISSING_CLI_CHILD";
    if std::env::var_os(CHILD).is_some() {
        let _cluster = RedisCluster::start(3, 0);
        unreachable!("start() must panic when the cli is missing");
    }
    let (stdout, stderr) = failing_child(
        "missing_cli_panics_naming_the_variable",
        CHILD,
        ("LEASEHOLD_REDIS_CLI", "/nonexistent/valkey-cli"),
    );
    assert!(
        stderr.contains("LEASEHOLD_REDIS_CLI=/nonexistent/valkey-cli"),
        "{stderr}"
    );
    assert!(
        stderr.contains(INSTALL_HINT),
        "no install hint:\n{stdout}\n{stderr}"
    );
}

#[test]
fn postgres_listens_on_loopback_and_is_gone_after_drop() {
    let pg = PostgresServer::start();
    let port = pg.port();
    assert_ne!(port, 5432, "never the default port");
    assert!(port_accepts(port), "accepts on 127.0.0.1:{port}");
    assert!(pg.connection_string().contains(&format!("port={port}")));
    // Its unix socket is in its own directory, not in /var/run/postgresql.
    assert!(
        pg.dir().join(format!(".s.PGSQL.{port}")).exists(),
        "socket in {}",
        pg.dir().display()
    );
    let pid = pg.pid();
    assert!(std::path::Path::new(&format!("/proc/{pid}")).exists());
    drop(pg);
    assert!(!port_accepts(port), "nothing listens after drop");
    assert!(
        !std::path::Path::new(&format!("/proc/{pid}")).exists(),
        "the server process was reaped"
    );
}
