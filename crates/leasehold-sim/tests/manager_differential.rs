//! The simulation build's connection manager against redis-rs's own.
//!
//! In the simulator, one server, a Replicated master, each Redlock node and
//! the Sentinel master are reached through `leasehold::sim::ConnectionManager`,
//! a model of redis-rs 1.8's `ConnectionManager` (redis-rs's dials TCP
//! itself and cannot be handed a simulated socket). Here both drive a real
//! redis-server (the test kit's), each through a proxy of its own that
//! drops connections before a request reaches the server, after the server
//! ran it (its reply lost), or swallows a request (a reply that never
//! comes), and refuses new connections for a while. The model's dialer
//! opens a real loopback TCP socket (a tokio `TcpStream` is a
//! `leasehold::sim::Socket`). The same sequences of steps run on both; what
//! each caller sees must be the same at every step: the reply or the
//! error's kind, whether the manager reconnected, whether it sent a request
//! again (the server's own count), the Disconnection pushes, and the
//! messages of its subscriptions (which neither resubscribes by itself: the
//! library's `Managed` does, above either).
//!
//! Built only in the simulator's build (`--cfg leasehold_sim`):
//! `CARGO_TARGET_DIR=target/sim RUSTFLAGS="--cfg leasehold_sim --cfg tokio_unstable"
//! cargo test --profile sim -p leasehold-sim --test manager_differential -- --nocapture`
#![cfg(leasehold_sim)]

use std::sync::{Arc, Mutex};
use std::time::Duration;

use leasehold_testkit::{Proxy, ProxyMode, RedisServer};
use redis::aio::ConnectionLike;
use redis::{Cmd, PushInfo, PushKind, RedisError, Value};

/// Each reply's bound, for both managers.
const RESPONSE_TIMEOUT: Duration = Duration::from_millis(300);

/// Opens real loopback TCP sockets for the model (and nothing else).
struct TcpDialer;

impl leasehold::sim::Dialer for TcpDialer {
    fn dial(
        &self,
        name: &str,
        _command_timeout: Duration,
        _on_push: leasehold::sim::OnPush,
    ) -> Result<Arc<dyn leasehold::sim::Wire>, RedisError> {
        panic!("no sim:// URL here ({name})")
    }

    fn dial_socket(
        &self,
        host: &str,
        port: u16,
    ) -> Result<Box<dyn leasehold::sim::Socket>, RedisError> {
        assert_eq!(host, "127.0.0.1", "loopback only");
        let stream = std::net::TcpStream::connect((host, port))?;
        stream.set_nonblocking(true)?;
        stream.set_nodelay(true)?;
        Ok(Box::new(tokio::net::TcpStream::from_std(stream)?))
    }
}

/// What one manager's push sender got.
#[derive(Default)]
struct Pushes {
    disconnections: u64,
    messages: Vec<String>,
}

#[derive(Clone)]
enum Manager {
    Real(redis::aio::ConnectionManager),
    Model(leasehold::sim::ConnectionManager),
}

impl Manager {
    async fn connect(model: bool, url: &str, pushes: Arc<Mutex<Pushes>>) -> Manager {
        let client = redis::Client::open(format!("{url}?protocol=resp3")).unwrap();
        let push = move |p: PushInfo| -> Result<(), std::convert::Infallible> {
            let mut pushes = pushes.lock().unwrap();
            match p.kind {
                PushKind::Disconnection => pushes.disconnections += 1,
                PushKind::Message => pushes.messages.push(format!("{:?}", p.data)),
                _ => {}
            }
            Ok(())
        };
        if model {
            let config = leasehold::sim::ConnectionManagerConfig::new()
                .set_response_timeout(Some(RESPONSE_TIMEOUT))
                .set_connection_timeout(Some(RESPONSE_TIMEOUT))
                .set_number_of_retries(2)
                .set_min_delay(Duration::from_millis(20))
                .set_max_delay(Duration::from_millis(100))
                .set_push_sender(push);
            Manager::Model(
                leasehold::sim::ConnectionManager::new_with_config(client, config)
                    .await
                    .unwrap(),
            )
        } else {
            let config = redis::aio::ConnectionManagerConfig::new()
                .set_response_timeout(Some(RESPONSE_TIMEOUT))
                .set_connection_timeout(Some(RESPONSE_TIMEOUT))
                .set_number_of_retries(2)
                .set_min_delay(Duration::from_millis(20))
                .set_max_delay(Duration::from_millis(100))
                .set_push_sender(push);
            Manager::Real(
                redis::aio::ConnectionManager::new_with_config(client, config)
                    .await
                    .unwrap(),
            )
        }
    }

    async fn query(&mut self, cmd: &Cmd) -> redis::RedisResult<Value> {
        match self {
            Manager::Real(m) => m.req_packed_command(cmd).await,
            Manager::Model(m) => m.req_packed_command(cmd).await,
        }
    }

    async fn pipeline(&mut self, p: &redis::Pipeline) -> redis::RedisResult<Vec<Value>> {
        match self {
            Manager::Real(m) => m.req_packed_commands(p, 0, p.len()).await,
            Manager::Model(m) => m.req_packed_commands(p, 0, p.len()).await,
        }
    }

    async fn subscribe(&mut self, channel: &str) -> redis::RedisResult<()> {
        match self {
            Manager::Real(m) => m.subscribe(channel).await,
            Manager::Model(m) => m.subscribe(channel).await,
        }
    }

    async fn unsubscribe(&mut self, channel: &str) -> redis::RedisResult<()> {
        match self {
            Manager::Real(m) => m.unsubscribe(channel).await,
            Manager::Model(m) => m.unsubscribe(channel).await,
        }
    }
}

/// An outcome as a caller tells outcomes apart: the reply, or the error's
/// kind and what it says about the connection.
fn outcome<T: std::fmt::Debug>(r: &redis::RedisResult<T>) -> String {
    match r {
        Ok(v) => format!("Ok({v:?})"),
        Err(e) => format!(
            "Err({:?}{}{}{}{})",
            e.kind(),
            if e.is_io_error() { " io" } else { "" },
            if e.is_timeout() { " timeout" } else { "" },
            if e.is_connection_dropped() {
                " dropped"
            } else {
                ""
            },
            if e.is_unrecoverable_error() {
                " reconnect"
            } else {
                ""
            },
        ),
    }
}

/// One step of a sequence.
#[derive(Debug, Clone, Copy)]
enum Step {
    /// INCR c: a write the server's count shows.
    Incr,
    /// A server error (INCR of a string), and WRONGTYPE.
    ServerErrors,
    /// A pipeline of three commands, one of them refused.
    Pipeline,
    /// The connection reset before the request reaches the server.
    ResetBefore,
    /// The server runs INCR c, its reply is lost, the connection resets.
    ResetAfter,
    /// The request is swallowed (no reply within the response timeout),
    /// then the connection drops.
    Swallowed,
    /// New connections are reset too for two requests' time, then let through.
    Down,
    /// The connection drops, and the new one's handshake takes longer
    /// than the connection timeout (every byte held up twice that long).
    SlowConnect,
    /// SUBSCRIBE ch, then a PUBLISH from elsewhere.
    Subscribe,
    /// UNSUBSCRIBE ch, then a PUBLISH from elsewhere.
    Unsubscribe,
}

const STEPS: [Step; 10] = [
    Step::Incr,
    Step::ServerErrors,
    Step::Pipeline,
    Step::ResetBefore,
    Step::ResetAfter,
    Step::Swallowed,
    Step::Down,
    Step::SlowConnect,
    Step::Subscribe,
    Step::Unsubscribe,
];

/// Runs `steps` on one manager (the model if `model`) against its own
/// server and proxy; one observation per step.
async fn run(model: bool, steps: &[Step]) -> Vec<String> {
    let server = RedisServer::start();
    let proxy = Proxy::start(server.port());
    let direct = redis::Client::open(server.url()).unwrap();
    let mut direct = direct.get_multiplexed_async_connection().await.unwrap();
    let pushes = Arc::new(Mutex::new(Pushes::default()));
    let mut m = Manager::connect(model, &proxy.url(), Arc::clone(&pushes)).await;
    let count = |d: &mut redis::aio::MultiplexedConnection| {
        let mut d = d.clone();
        async move {
            redis::cmd("GET")
                .arg("c")
                .query_async::<Option<i64>>(&mut d)
                .await
                .unwrap()
                .unwrap_or(0)
        }
    };
    let client_id = |m: &mut Manager| {
        let mut m = m.clone();
        async move { outcome(&m.query(&redis::cmd("CLIENT").arg("ID").clone()).await) }
    };
    let mut seen = Vec::new();
    let mut published = 0;
    for (i, step) in steps.iter().enumerate() {
        let started = std::time::Instant::now();
        let id_before = client_id(&mut m).await;
        let count_before = count(&mut direct).await;
        let mut what = Vec::new();
        match step {
            Step::Incr => what.push(outcome(
                &m.query(&redis::cmd("INCR").arg("c").clone()).await,
            )),
            Step::ServerErrors => {
                let _: () = redis::cmd("SET")
                    .arg("s")
                    .arg("text")
                    .query_async(&mut direct)
                    .await
                    .unwrap();
                what.push(outcome(
                    &m.query(&redis::cmd("INCR").arg("s").clone()).await,
                ));
                what.push(outcome(
                    &m.query(&redis::cmd("HGET").arg("s").arg("f").clone()).await,
                ));
            }
            Step::Pipeline => {
                let mut p = redis::pipe();
                p.cmd("INCR")
                    .arg("c")
                    .cmd("INCR")
                    .arg("s")
                    .cmd("GET")
                    .arg("c");
                what.push(outcome(&m.pipeline(&p).await));
            }
            Step::ResetBefore => {
                proxy.set_mode(ProxyMode::Reset);
                what.push(outcome(
                    &m.query(&redis::cmd("INCR").arg("c").clone()).await,
                ));
                proxy.set_mode(ProxyMode::Pass);
            }
            Step::ResetAfter => {
                proxy.set_mode(ProxyMode::DropReplies);
                let mut sender = m.clone();
                let request = tokio::spawn(async move {
                    outcome(&sender.query(&redis::cmd("INCR").arg("c").clone()).await)
                });
                // The server ran it (its count moved): then the connection drops.
                let mut ran = false;
                for _ in 0..200 {
                    if count(&mut direct).await > count_before {
                        ran = true;
                        break;
                    }
                    tokio::time::sleep(Duration::from_millis(2)).await;
                }
                assert!(ran, "the server never ran the request");
                proxy.set_mode(ProxyMode::Reset);
                what.push(request.await.unwrap());
                proxy.set_mode(ProxyMode::Pass);
            }
            Step::Swallowed => {
                proxy.set_mode(ProxyMode::Blackhole);
                what.push(outcome(
                    &m.query(&redis::cmd("INCR").arg("c").clone()).await,
                ));
                // Then the connection drops (TCP loses no bytes on a
                // connection that lives: a request swallowed for good
                // would shift every later reply by one, in both).
                proxy.set_mode(ProxyMode::Reset);
                what.push(outcome(
                    &m.query(&redis::cmd("INCR").arg("c").clone()).await,
                ));
                proxy.set_mode(ProxyMode::Pass);
            }
            Step::SlowConnect => {
                proxy.set_mode(ProxyMode::Reset);
                what.push(outcome(
                    &m.query(&redis::cmd("INCR").arg("c").clone()).await,
                ));
                proxy.set_mode(ProxyMode::Delay(RESPONSE_TIMEOUT * 2));
                what.push(outcome(
                    &m.query(&redis::cmd("INCR").arg("c").clone()).await,
                ));
                proxy.set_mode(ProxyMode::Pass);
                // Bytes already held up arrive late: let them land before
                // the server's count is read.
                tokio::time::sleep(RESPONSE_TIMEOUT * 5).await;
            }
            Step::Down => {
                proxy.set_mode(ProxyMode::Reset);
                for _ in 0..2 {
                    what.push(outcome(
                        &m.query(&redis::cmd("INCR").arg("c").clone()).await,
                    ));
                }
                proxy.set_mode(ProxyMode::Pass);
                // The first request after: a failed connection's error once more,
                // or a new connection's reply.
                what.push(outcome(
                    &m.query(&redis::cmd("INCR").arg("c").clone()).await,
                ));
            }
            Step::Subscribe => {
                what.push(outcome(&m.subscribe("ch").await));
            }
            Step::Unsubscribe => {
                what.push(outcome(&m.unsubscribe("ch").await));
            }
        }
        // Until the manager answers again (bounded): requests after a
        // reconnect reach the server.
        let mut settled = String::new();
        for _ in 0..5 {
            settled = outcome(&m.query(&redis::cmd("PING").clone()).await);
            if settled.starts_with("Ok") {
                break;
            }
        }
        what.push(format!("then {settled}"));
        // A message published now reaches the manager before the reply to
        // its next request (one connection, in order), if it subscribes.
        published += 1;
        let _: i64 = redis::cmd("PUBLISH")
            .arg("ch")
            .arg(published)
            .query_async(&mut direct)
            .await
            .unwrap();
        let _ = m.query(&redis::cmd("PING").clone()).await;
        let count_after = count(&mut direct).await;
        let id_after = client_id(&mut m).await;
        let (disconnections, messages) = {
            let mut p = pushes.lock().unwrap();
            let messages = std::mem::take(&mut p.messages);
            (std::mem::take(&mut p.disconnections), messages)
        };
        what.push(format!(
            "server ran {} INCR c; reconnected: {}; disconnection pushes: {}; messages: {:?}",
            count_after - count_before,
            id_before != id_after,
            disconnections,
            messages
        ));
        seen.push(format!("{i} {step:?}: {}", what.join(" | ")));
        if std::env::var_os("MANAGER_DIFFERENTIAL_SHOW").is_some() {
            eprintln!(
                "{} {:?} {}",
                if model { "model" } else { "redis-rs" },
                started.elapsed(),
                seen.last().unwrap()
            );
        }
    }
    seen
}

/// A seeded sequence of `n` steps (xorshift; the sequences are the same in
/// every run).
fn sequence(seed: u64, n: usize) -> Vec<Step> {
    let mut x = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
    (0..n)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            STEPS[(x % STEPS.len() as u64) as usize]
        })
        .collect()
}

#[tokio::test(flavor = "current_thread")]
async fn the_model_sees_what_redis_rs_connection_manager_sees() {
    leasehold::sim::install_sockets(Some(Arc::new(TcpDialer)));
    // Every step once, a subscription before each connection fault (the
    // manager does not subscribe again by itself: `Managed` does), then
    // seeded sequences of them.
    use Step::*;
    let mut sequences = vec![vec![
        Incr,
        ServerErrors,
        Pipeline,
        Subscribe,
        ResetBefore,
        Subscribe,
        ResetAfter,
        Subscribe,
        Swallowed,
        Subscribe,
        Down,
        Subscribe,
        SlowConnect,
        Subscribe,
        Unsubscribe,
    ]];
    let more: u64 = std::env::var("MANAGER_DIFFERENTIAL_SEQUENCES")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(12);
    sequences.extend((1..=more).map(|seed| sequence(seed, 10)));
    let mut compared = 0;
    let mut differences = Vec::new();
    for steps in &sequences {
        let real = run(false, steps).await;
        let model = run(true, steps).await;
        assert_eq!(real.len(), model.len());
        for (r, m) in real.iter().zip(&model) {
            compared += 1;
            if r != m {
                differences.push(format!("redis-rs: {r}\n   model: {m}"));
            }
        }
    }
    leasehold::sim::install_sockets(None);
    println!(
        "{compared} steps compared over {} sequences, {} differences",
        sequences.len(),
        differences.len()
    );
    assert!(
        differences.is_empty(),
        "the model differs from redis-rs's ConnectionManager:\n{}",
        differences.join("\n")
    );
}
