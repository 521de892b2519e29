//! Sentinel: 1 master, 2 replicas, 3 sentinels, a coordinated failover.

mod common;

use std::io::{BufRead, BufReader, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU16, Ordering};
use std::time::{Duration, Instant};

use leasehold::Client;
use leasehold_testkit::SentinelSet;

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn sentinel_client_follows_a_failover() {
    let set = SentinelSet::start("mymaster", 2, 3);
    let client = Client::sentinel(set.sentinel_urls(), set.name())
        .await
        .expect("connect through the sentinels");
    common::lock_suite(&client, "sentinel").await;
    common::contract::run_all(&common::contract::Deployment::sentinel(&set)).await;

    let held = client
        .lock("across")
        .ttl(Duration::from_secs(2))
        .acquire()
        .await
        .expect("acquire");
    let new_master = set.failover();
    // The client asks the sentinels every 0.5 s: within that window an
    // acquisition may still reach the old master (a documented limit).
    tokio::time::sleep(Duration::from_millis(1200)).await;

    let new_master_conn = || {
        set.servers()
            .iter()
            .find(|s| s.port() == new_master)
            .expect("the new master is one of the set")
            .connection()
    };

    // New acquisitions reach the new master, promptly.
    let deadline = Instant::now() + Duration::from_secs(20);
    let guard = common::try_acquire_after_failover(&client.lock("after"), deadline).await;
    let on_new: bool = redis::cmd("EXISTS")
        .arg("leasehold:{after}:lock")
        .query(&mut new_master_conn())
        .unwrap();
    assert!(on_new, "the acquisition went to the new master");
    guard.release().await.expect("release");
    // The held guard either kept its lease (renewed at the new master) or
    // reports it lost; it never hangs.
    tokio::time::sleep(Duration::from_secs(3)).await;
    let on_new_master: Option<String> = redis::cmd("GET")
        .arg("leasehold:{across}:lock")
        .query(&mut new_master_conn())
        .unwrap();
    // Past its 2 s TTL: only renewals at the new master can have kept it.
    let kept = on_new_master.as_deref() == Some(held.token());
    assert!(
        kept || held.is_lost(),
        "the guard neither kept its lease on the new master nor reports it lost"
    );
    let outcome = tokio::time::timeout(Duration::from_secs(10), held.release()).await;
    let released = outcome.expect("release hung after the failover");
    if kept {
        released.expect("a kept lease releases");
    }
}

/// A sentinel that missed a failover: it names the old master, under
/// config epoch 0, to `SENTINEL MASTER` and `SENTINEL
/// GET-MASTER-ADDR-BY-NAME` alike, and answers a RESP3 client's handshake.
/// A loopback RESP server of the test's own, since a real sentinel learns
/// of the failover from the others within seconds.
struct StaleSentinel {
    port: u16,
    /// The port of the master it names.
    names: Arc<AtomicU16>,
    stop: Arc<AtomicBool>,
    acceptor: Option<std::thread::JoinHandle<()>>,
}

impl StaleSentinel {
    fn start(master_port: u16) -> StaleSentinel {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
        listener.set_nonblocking(true).expect("nonblocking");
        let port = listener.local_addr().expect("addr").port();
        let stop = Arc::new(AtomicBool::new(false));
        let names = Arc::new(AtomicU16::new(master_port));
        let acceptor = std::thread::spawn({
            let (stop, names) = (Arc::clone(&stop), Arc::clone(&names));
            move || {
                while !stop.load(Ordering::Relaxed) {
                    match listener.accept() {
                        Ok((conn, _)) => {
                            let master_port = names.load(Ordering::SeqCst);
                            std::thread::spawn(move || serve_stale(conn, master_port));
                        }
                        Err(_) => std::thread::sleep(Duration::from_millis(10)),
                    }
                }
            }
        });
        StaleSentinel {
            port,
            names,
            stop,
            acceptor: Some(acceptor),
        }
    }

    fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }
}

impl Drop for StaleSentinel {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(acceptor) = self.acceptor.take() {
            let _ = acceptor.join();
        }
    }
}

/// Answers one connection's requests (RESP arrays of bulk strings) until
/// it closes.
fn serve_stale(conn: TcpStream, master_port: u16) {
    let _ = conn.set_read_timeout(Some(Duration::from_secs(30)));
    let mut reader = BufReader::new(conn.try_clone().expect("clone"));
    let mut writer = conn;
    let bulk = |s: &str| format!("${}\r\n{s}\r\n", s.len());
    while let Some(args) = read_request(&mut reader) {
        let port = master_port.to_string();
        let reply = match args
            .iter()
            .map(String::as_str)
            .collect::<Vec<_>>()
            .as_slice()
        {
            ["HELLO", ..] => format!(
                "%3\r\n{}{}{}{}{}:3\r\n",
                bulk("server"),
                bulk("redis"),
                bulk("version"),
                bulk("7.0.0"),
                bulk("proto")
            ),
            ["SENTINEL", "MASTER", ..] => format!(
                "%3\r\n{}{}{}{}{}{}",
                bulk("ip"),
                bulk("127.0.0.1"),
                bulk("port"),
                bulk(&port),
                bulk("config-epoch"),
                bulk("0")
            ),
            ["SENTINEL", "GET-MASTER-ADDR-BY-NAME", ..] => {
                format!("*2\r\n{}{}", bulk("127.0.0.1"), bulk(&port))
            }
            ["PING", ..] => "+PONG\r\n".to_owned(),
            _ => "+OK\r\n".to_owned(),
        };
        if writer.write_all(reply.as_bytes()).is_err() {
            return;
        }
    }
}

/// One request (a RESP array of bulk strings), upper-cased; `None` when
/// the connection closes or sends anything else.
fn read_request(reader: &mut impl BufRead) -> Option<Vec<String>> {
    let count = read_header(reader, '*')?;
    let mut args = Vec::with_capacity(count);
    for _ in 0..count {
        let len = read_header(reader, '$')?;
        let mut data = vec![0; len + 2];
        reader.read_exact(&mut data).ok()?;
        args.push(String::from_utf8_lossy(&data[..len]).to_uppercase());
    }
    Some(args)
}

/// The length in a RESP header line that starts with `kind` (`*` an
/// array's, `$` a bulk string's).
fn read_header(reader: &mut impl BufRead, kind: char) -> Option<usize> {
    let mut line = String::new();
    if reader.read_line(&mut line).unwrap_or(0) == 0 {
        return None;
    }
    line.trim_end().strip_prefix(kind)?.parse().ok()
}

/// Issue 24, item 2: a sentinel that missed the failover answers first
/// (it is listed first, and it is quick), naming the demoted master. The
/// client took the first answer, found that server a replica and failed to
/// connect; it now asks every sentinel and trusts the highest config
/// epoch among a majority's answers.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stale_sentinel_answering_first_does_not_name_the_master() {
    let set = SentinelSet::start("stale", 1, 3);
    let old = set.master_port();
    let new = set.failover();
    let stale = StaleSentinel::start(old);
    let mut urls = vec![stale.url()];
    urls.extend(set.sentinel_urls());
    let client = Client::sentinel(urls, set.name())
        .await
        .expect("connect through the sentinels");
    let guard = client
        .lock("where")
        .try_acquire()
        .await
        .expect("try_acquire")
        .expect("free");
    let on_new: bool = redis::cmd("EXISTS")
        .arg("leasehold:{where}:lock")
        .query(
            &mut set
                .servers()
                .iter()
                .find(|s| s.port() == new)
                .expect("the new master")
                .connection(),
        )
        .expect("EXISTS");
    assert!(
        on_new,
        "the lock was taken on the new master ({new}), not {old}"
    );
    guard.release().await.expect("release");
    client.close().await.expect("close");
}

/// Issue 24, item 2: a client that connects while the master is dead (kill
/// -9, before the sentinels have failed it over) keeps asking the
/// sentinels until they name a master it can reach, within
/// `ClientBuilder::failover_wait`, instead of failing at once on the dead
/// address (`leasehold run` exited 69 so, 10 runs in 100).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connecting_while_the_master_is_dead_waits_for_the_failover() {
    let set = SentinelSet::start("dead", 1, 3);
    let old = set.master_port();
    let pid = set.servers()[0].pid();
    let killed = std::process::Command::new("kill")
        .arg("-9")
        .arg(pid.to_string())
        .status()
        .expect("kill");
    assert!(killed.success());
    let started = Instant::now();
    let client = Client::builder()
        .sentinel(set.sentinel_urls(), set.name())
        .failover_wait(Duration::from_secs(30))
        .build()
        .await
        .expect("connected once the sentinels named the new master");
    let waited = started.elapsed();
    let guard = client
        .lock("after-death")
        .try_acquire()
        .await
        .expect("try_acquire")
        .expect("free");
    let new = set.servers()[1].port();
    let on_new: bool = redis::cmd("EXISTS")
        .arg("leasehold:{after-death}:lock")
        .query(&mut set.servers()[1].connection())
        .expect("EXISTS");
    assert!(on_new, "taken on the new master {new} (not {old})");
    eprintln!("connected {waited:?} after the master was killed");
    guard.release().await.expect("release");
    client.close().await.expect("close");
}

/// How many connections the sentinels behind `conns` (one open connection
/// to each, the test's only ones) have accepted, all together: asking the
/// sentinels for the master connects to each.
fn connections_accepted(conns: &mut [redis::Connection]) -> u64 {
    conns
        .iter_mut()
        .map(|c| {
            let stats: String = redis::cmd("INFO").arg("stats").query(c).expect("INFO");
            stats
                .lines()
                .find_map(|l| l.strip_prefix("total_connections_received:"))
                .and_then(|n| n.trim().parse::<u64>().ok())
                .expect("total_connections_received")
        })
        .sum()
}

/// Issue 24, item 2: an acquire on a connected client whose master dies
/// (the sentinels still naming it) keeps trying within its wait and takes
/// the lock on the master the sentinels name after the failover, which
/// the test starts only after the client has asked them again many command
/// timeouts long.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_acquire_while_the_master_is_dead_waits_for_the_failover() {
    let set = SentinelSet::start("acq", 1, 3);
    for sentinel in set.sentinels() {
        let _: String = redis::cmd("SENTINEL")
            .arg("SET")
            .arg("acq")
            .arg("down-after-milliseconds")
            .arg("600000")
            .query(&mut sentinel.connection())
            .expect("SENTINEL SET");
    }
    let client = Client::builder()
        .sentinel(set.sentinel_urls(), set.name())
        .command_timeout(Duration::from_millis(200))
        .build()
        .await
        .expect("connect");
    let killed = std::process::Command::new("kill")
        .arg("-9")
        .arg(set.servers()[0].pid().to_string())
        .status()
        .expect("kill");
    assert!(killed.success());
    let mut sentinels: Vec<_> = set.sentinels().iter().map(|s| s.connection()).collect();
    let before = connections_accepted(&mut sentinels);
    let lock = client.lock("acq:1").wait(Duration::from_secs(60));
    let acquiring = tokio::spawn(async move { lock.acquire().await });
    // Ten rounds of asking the three sentinels (0.5 s apart, sooner after
    // a failed command): ten command timeouts and more.
    let deadline = Instant::now() + Duration::from_secs(60);
    while connections_accepted(&mut sentinels) < before + 30 {
        assert!(!acquiring.is_finished(), "{:?}", acquiring.await);
        assert!(Instant::now() < deadline, "the client stopped asking");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(!acquiring.is_finished(), "{:?}", acquiring.await);
    let new = tokio::task::spawn_blocking(move || (set.failover(), set))
        .await
        .expect("failover");
    let (new, set) = new;
    let guard = acquiring
        .await
        .expect("join")
        .expect("acquired after the failover");
    let on_new: Option<String> = redis::cmd("GET")
        .arg("leasehold:{acq:1}:lock")
        .query(
            &mut set
                .servers()
                .iter()
                .find(|s| s.port() == new)
                .expect("the new master")
                .connection(),
        )
        .expect("GET");
    assert_eq!(
        on_new.as_deref(),
        Some(guard.token()),
        "held on the new master"
    );
    guard.release().await.expect("release");
    client.close().await.expect("close");
}

/// A master that dies right after it confirmed it is one: it answers the
/// handshake and `ROLE` (master), then, at the next command, closes the
/// connection and stops listening, and makes `sentinel` name `next`, as the
/// sentinels would after failing it over.
struct DyingMaster {
    port: u16,
    acceptor: Option<std::thread::JoinHandle<()>>,
}

impl DyingMaster {
    fn start(sentinel: Arc<AtomicU16>, next: u16) -> DyingMaster {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
        let port = listener.local_addr().expect("addr").port();
        let acceptor = std::thread::spawn(move || {
            // One connection (the client's manager); the listener closes
            // with this thread.
            let Ok((conn, _)) = listener.accept() else {
                return;
            };
            let _ = conn.set_read_timeout(Some(Duration::from_secs(30)));
            let mut reader = BufReader::new(conn.try_clone().expect("clone"));
            let mut writer = conn;
            let bulk = |s: &str| format!("${}\r\n{s}\r\n", s.len());
            while let Some(args) = read_command(&mut reader) {
                let reply = match args.first().map(String::as_str) {
                    Some("HELLO") => format!(
                        "%3\r\n{}{}{}{}{}:3\r\n",
                        bulk("server"),
                        bulk("redis"),
                        bulk("version"),
                        bulk("7.0.0"),
                        bulk("proto")
                    ),
                    Some("ROLE") => format!("*3\r\n{}:0\r\n*0\r\n", bulk("master")),
                    Some("CLIENT") => "+OK\r\n".to_owned(),
                    // Dies here: the sentinels name the next master.
                    _ => {
                        sentinel.store(next, Ordering::SeqCst);
                        return;
                    }
                };
                if writer.write_all(reply.as_bytes()).is_err() {
                    return;
                }
            }
        });
        DyingMaster {
            port,
            acceptor: Some(acceptor),
        }
    }
}

impl Drop for DyingMaster {
    fn drop(&mut self) {
        if let Some(acceptor) = self.acceptor.take() {
            let _ = acceptor.join();
        }
    }
}

/// One request (a RESP array of bulk strings), its words upper-cased;
/// `None` once the connection closed.
fn read_command(reader: &mut impl BufRead) -> Option<Vec<String>> {
    let mut line = String::new();
    if reader.read_line(&mut line).ok()? == 0 {
        return None;
    }
    let count: usize = line.trim_end().strip_prefix('*')?.parse().ok()?;
    let mut args = Vec::with_capacity(count);
    for _ in 0..count {
        let mut header = String::new();
        reader.read_line(&mut header).ok()?;
        let len: usize = header.trim_end().strip_prefix('$')?.parse().ok()?;
        let mut data = vec![0; len + 2];
        reader.read_exact(&mut data).ok()?;
        args.push(String::from_utf8_lossy(&data[..len]).to_uppercase());
    }
    Some(args)
}

/// Issue 24, item 2: the master dies between confirming it is one (ROLE)
/// and the client's first command on it (the server check while
/// connecting): connecting rides through that too, within
/// `failover_wait`, to the master the sentinels name next. It failed with
/// `Error::Unreachable` (`leasehold run` exited 69: 1 job in 100 of
/// `scripts/sentinel-kill9`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_master_that_dies_right_after_it_is_confirmed_is_ridden_through() {
    let next = leasehold_testkit::RedisServer::start();
    let sentinel = StaleSentinel::start(0);
    let dying = DyingMaster::start(Arc::clone(&sentinel.names), next.port());
    sentinel.names.store(dying.port, Ordering::SeqCst);
    let client = Client::builder()
        .sentinel([sentinel.url()], "any")
        .failover_wait(Duration::from_secs(30))
        .build()
        .await
        .expect("connected to the next master");
    let guard = client
        .lock("next")
        .try_acquire()
        .await
        .expect("try_acquire")
        .expect("free");
    let on_next: bool = redis::cmd("EXISTS")
        .arg("leasehold:{next}:lock")
        .query(&mut next.connection())
        .expect("EXISTS");
    assert!(on_next, "taken on the next master");
    guard.release().await.expect("release");
    client.close().await.expect("close");
    drop(dying);
}
