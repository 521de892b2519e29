//! A loopback TCP proxy that injects per-client network faults.

use std::io::{self, Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use nix::sys::socket::{setsockopt, sockopt};

use crate::redis_url;

/// How often blocked threads wake up to look at the mode and the stop flag.
const POLL: Duration = Duration::from_millis(10);
/// Bound on connecting to the target.
const CONNECT_TIMEOUT: Duration = Duration::from_millis(500);

/// What a [`Proxy`] does with traffic. Applies to existing and new connections.
///
/// ```
/// use std::time::Duration;
/// use leasehold_testkit::{Proxy, ProxyMode, RedisServer};
///
/// let server = RedisServer::start();
/// let proxy = Proxy::start(server.port());
/// proxy.set_mode(ProxyMode::Delay(Duration::from_millis(50)));
/// proxy.set_mode(ProxyMode::Pass);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum ProxyMode {
    /// Forward bytes both ways (the initial mode).
    Pass,
    /// Silent partition: connections stay open, but every byte in either
    /// direction is discarded; new connections are accepted and get nothing.
    Blackhole,
    /// Forward each chunk of bytes (in both directions) after this delay.
    Delay(Duration),
    /// Abort all current connections (RST via `SO_LINGER` 0) and reset every
    /// new connection right after accepting it.
    Reset,
    /// Forward what clients send to the server, and discard what the server
    /// sends back: a request runs, its reply is lost (a reset then drops
    /// the connection after the server ran it).
    DropReplies,
}

/// A TCP proxy on a free loopback port forwarding to `127.0.0.1:target_port`,
/// for network faults that affect only the clients connected through it.
///
/// One thread accepts, two threads per connection pump bytes; all of them
/// poll every few milliseconds, so mode changes apply immediately and dropping
/// the proxy stops every thread (and closes every connection) promptly.
///
/// ```
/// use std::time::Duration;
/// use leasehold_testkit::{Proxy, ProxyMode, RedisServer};
///
/// let server = RedisServer::start();
/// let proxy = Proxy::start(server.port());
/// let client = redis::Client::open(proxy.url()).unwrap();
/// let mut con = client.get_connection_with_timeout(Duration::from_secs(2)).unwrap();
/// let _: String = redis::cmd("PING").query(&mut con).unwrap();
///
/// proxy.set_mode(ProxyMode::Blackhole);
/// con.set_read_timeout(Some(Duration::from_millis(100))).unwrap();
/// assert!(redis::cmd("PING").query::<String>(&mut con).is_err());
/// ```
#[derive(Debug)]
pub struct Proxy {
    port: u16,
    shared: Arc<Shared>,
    acceptor: Option<JoinHandle<()>>,
}

#[derive(Debug)]
struct Shared {
    target: SocketAddr,
    mode: Mutex<ProxyMode>,
    /// Bumped by every `set_mode(Reset)`; a connection born in an older epoch
    /// is reset even if the mode has already changed back.
    epoch: AtomicU64,
    stop: AtomicBool,
}

impl Shared {
    fn mode(&self) -> ProxyMode {
        *self.mode.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// State shared by the two pump threads of one proxied connection.
#[derive(Debug)]
struct Conn {
    epoch: u64,
    /// Set when either side closed or failed; the other pump then exits.
    done: AtomicBool,
}

impl Proxy {
    /// Listens on `127.0.0.1:<free port>` and forwards to
    /// `127.0.0.1:target_port`, starting in [`ProxyMode::Pass`].
    ///
    /// ```
    /// let server = leasehold_testkit::RedisServer::start();
    /// let proxy = leasehold_testkit::Proxy::start(server.port());
    /// assert_ne!(proxy.port(), server.port());
    /// ```
    pub fn start(target_port: u16) -> Proxy {
        let listener = TcpListener::bind(("127.0.0.1", 0))
            .unwrap_or_else(|e| panic!("leasehold-testkit: proxy cannot bind 127.0.0.1:0: {e}"));
        listener
            .set_nonblocking(true)
            .expect("leasehold-testkit: proxy listener set_nonblocking");
        let port = listener
            .local_addr()
            .expect("leasehold-testkit: proxy local_addr")
            .port();
        let shared = Arc::new(Shared {
            target: SocketAddr::from(([127, 0, 0, 1], target_port)),
            mode: Mutex::new(ProxyMode::Pass),
            epoch: AtomicU64::new(0),
            stop: AtomicBool::new(false),
        });
        let acceptor = {
            let shared = Arc::clone(&shared);
            std::thread::Builder::new()
                .name(format!("testkit-proxy-{port}"))
                .spawn(move || accept_loop(&listener, &shared))
                .expect("leasehold-testkit: spawn proxy thread")
        };
        Proxy {
            port,
            shared,
            acceptor: Some(acceptor),
        }
    }

    /// The port the proxy listens on.
    ///
    /// ```
    /// let server = leasehold_testkit::RedisServer::start();
    /// let proxy = leasehold_testkit::Proxy::start(server.port());
    /// assert!(proxy.url().ends_with(&proxy.port().to_string()));
    /// ```
    pub fn port(&self) -> u16 {
        self.port
    }

    /// `redis://127.0.0.1:PROXYPORT`.
    ///
    /// ```
    /// let server = leasehold_testkit::RedisServer::start();
    /// let proxy = leasehold_testkit::Proxy::start(server.port());
    /// let client = redis::Client::open(proxy.url()).unwrap();
    /// # drop(client);
    /// ```
    pub fn url(&self) -> String {
        redis_url(self.port, None)
    }

    /// Like [`url`](Self::url) but with credentials, for a password-protected
    /// target: `redis://[USER]:PASSWORD@127.0.0.1:PROXYPORT`.
    ///
    /// ```
    /// let server = leasehold_testkit::RedisServer::builder().password("pw").start();
    /// let proxy = leasehold_testkit::Proxy::start(server.port());
    /// let mut con = redis::Client::open(proxy.url_with_auth(None, "pw"))
    ///     .unwrap()
    ///     .get_connection()
    ///     .unwrap();
    /// let _: String = redis::cmd("PING").query(&mut con).unwrap();
    /// ```
    pub fn url_with_auth(&self, user: Option<&str>, password: &str) -> String {
        redis_url(self.port, Some((user, password)))
    }

    /// Switches the fault mode; it applies to existing and new connections
    /// within a few milliseconds.
    ///
    /// ```
    /// use leasehold_testkit::{Proxy, ProxyMode, RedisServer};
    ///
    /// let server = RedisServer::start();
    /// let proxy = Proxy::start(server.port());
    /// proxy.set_mode(ProxyMode::Reset);
    /// proxy.set_mode(ProxyMode::Pass);
    /// ```
    pub fn set_mode(&self, mode: ProxyMode) {
        let mut current = self.shared.mode.lock().unwrap_or_else(|e| e.into_inner());
        *current = mode;
        if mode == ProxyMode::Reset {
            self.shared.epoch.fetch_add(1, Ordering::SeqCst);
        }
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.shared.stop.store(true, Ordering::SeqCst);
        if let Some(acceptor) = self.acceptor.take() {
            // Every thread polls `stop` at least every POLL (connects are
            // bounded by CONNECT_TIMEOUT), so this join is prompt.
            let _ = acceptor.join();
        }
    }
}

fn accept_loop(listener: &TcpListener, shared: &Arc<Shared>) {
    let mut conns: Vec<JoinHandle<()>> = Vec::new();
    while !shared.stop.load(Ordering::SeqCst) {
        match listener.accept() {
            Ok((client, _)) => {
                if shared.mode() == ProxyMode::Reset {
                    reset(&client);
                    continue;
                }
                let shared = Arc::clone(shared);
                let spawned = std::thread::Builder::new()
                    .name("testkit-proxy-conn".to_owned())
                    .spawn(move || serve(client, &shared));
                if let Ok(handle) = spawned {
                    conns.push(handle);
                }
            }
            Err(_) => std::thread::sleep(POLL),
        }
        conns.retain(|h| !h.is_finished());
    }
    for handle in conns {
        let _ = handle.join();
    }
}

/// Runs one proxied connection: connects to the target, pumps both ways.
fn serve(client: TcpStream, shared: &Arc<Shared>) {
    let epoch = shared.epoch.load(Ordering::SeqCst);
    let Ok(upstream) = TcpStream::connect_timeout(&shared.target, CONNECT_TIMEOUT) else {
        reset(&client);
        return;
    };
    let setup = |s: &TcpStream| -> io::Result<()> {
        s.set_nonblocking(false)?;
        s.set_nodelay(true)?;
        s.set_read_timeout(Some(POLL))?;
        s.set_write_timeout(Some(POLL))
    };
    let clones = setup(&client)
        .and_then(|()| setup(&upstream))
        .and_then(|()| Ok((client.try_clone()?, upstream.try_clone()?)));
    let Ok((client2, upstream2)) = clones else {
        reset(&client);
        return;
    };
    let conn = Arc::new(Conn {
        epoch,
        done: AtomicBool::new(false),
    });
    let back = {
        let (shared, conn) = (Arc::clone(shared), Arc::clone(&conn));
        std::thread::Builder::new()
            .name("testkit-proxy-pump".to_owned())
            .spawn(move || pump(upstream2, client2, false, &shared, &conn))
    };
    pump(client, upstream, true, shared, &conn);
    conn.done.store(true, Ordering::SeqCst);
    if let Ok(back) = back {
        let _ = back.join();
    }
}

/// Copies `from` -> `to` (`to_server`: a client's bytes to the server)
/// according to the mode until either side closes, the connection is reset
/// (both sockets then close with RST), or the proxy stops.
fn pump(from: TcpStream, to: TcpStream, to_server: bool, shared: &Shared, conn: &Conn) {
    let mut buf = vec![0u8; 16 * 1024];
    loop {
        match check(shared, conn) {
            Check::Go => {}
            Check::Stop => break,
            Check::Reset => {
                reset(&from);
                reset(&to);
                break;
            }
        }
        let n = match (&from).read(&mut buf) {
            Ok(0) => break,
            Ok(n) => n,
            Err(e) if is_poll_timeout(&e) => continue,
            Err(_) => break,
        };
        let ok = match shared.mode() {
            ProxyMode::Pass => write_all(&to, &buf[..n], shared, conn),
            ProxyMode::Blackhole => true,
            ProxyMode::DropReplies if to_server => write_all(&to, &buf[..n], shared, conn),
            ProxyMode::DropReplies => true,
            ProxyMode::Delay(d) => {
                sleep_unless_stopped(d, shared, conn) && write_all(&to, &buf[..n], shared, conn)
            }
            // Handled by `check` at the top of the loop.
            ProxyMode::Reset => true,
        };
        if !ok {
            break;
        }
    }
    conn.done.store(true, Ordering::SeqCst);
}

enum Check {
    Go,
    Stop,
    Reset,
}

fn check(shared: &Shared, conn: &Conn) -> Check {
    if shared.epoch.load(Ordering::SeqCst) != conn.epoch || shared.mode() == ProxyMode::Reset {
        Check::Reset
    } else if shared.stop.load(Ordering::SeqCst) || conn.done.load(Ordering::SeqCst) {
        Check::Stop
    } else {
        Check::Go
    }
}

/// Writes everything, waking up every POLL to see whether to give up.
fn write_all(mut to: &TcpStream, mut data: &[u8], shared: &Shared, conn: &Conn) -> bool {
    while !data.is_empty() {
        if !matches!(check(shared, conn), Check::Go) {
            return false;
        }
        match to.write(data) {
            Ok(0) => return false,
            Ok(n) => data = &data[n..],
            Err(e) if is_poll_timeout(&e) => {}
            Err(_) => return false,
        }
    }
    true
}

/// Sleeps `d` in POLL steps; false if the connection should end meanwhile.
fn sleep_unless_stopped(d: Duration, shared: &Shared, conn: &Conn) -> bool {
    let until = Instant::now() + d;
    loop {
        if !matches!(check(shared, conn), Check::Go) {
            return false;
        }
        let now = Instant::now();
        if now >= until {
            return true;
        }
        std::thread::sleep((until - now).min(POLL));
    }
}

fn is_poll_timeout(e: &io::Error) -> bool {
    matches!(
        e.kind(),
        io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut | io::ErrorKind::Interrupted
    )
}

/// Makes the final close of this socket send RST instead of FIN, and stops
/// further use of it. The RST goes out when the last descriptor is closed.
fn reset(stream: &TcpStream) {
    let abort = nix::libc::linger {
        l_onoff: 1,
        l_linger: 0,
    };
    if setsockopt(stream, sockopt::Linger, &abort).is_err() {
        // Fall back to an orderly close; the peer still sees the connection end.
        let _ = stream.shutdown(Shutdown::Both);
    }
}
