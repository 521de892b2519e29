//! The simulated world under the shipped client: servers, the network
//! between them and the client processes, clocks and faults.
//!
//! Every lock node is reached the way a deployment reaches it: the
//! library's own connections (redis-rs's `MultiplexedConnection` under the
//! connection manager for one server, Replicated, Redlock's nodes and the
//! Sentinel master; redis-rs's cluster connection for a cluster) run over a
//! [`SimSocket`] that the world opens for the address the driver dials
//! (`p<process>-<node>:6379`, [`World::socket`]). Each command read off a
//! socket is a request of a connection ([`SimWire`], the socket's
//! [`Carrier`]): it is carried to its node after a delay drawn from the
//! seed (a connection is FIFO both ways, as TCP is), run there by the
//! simulated server at the node's own clock, and its reply carried back
//! after another delay. A request outlives a caller that gave up on it: it
//! still runs on the server, as on a real network. Faults come from the
//! [`Faults`] of the schedule: a connection reset before or after the
//! server ran the request (the socket's stream ends with an error; the
//! driver above reconnects, and the library resubscribes, as shipped), a
//! request run twice (see [`Faults::twice`]), a node paused, restarted
//! empty or from its AOF, failed over, its script cache flushed, its clock
//! stepped.
//!
//! `--set seam=wire` keeps the older seam for the seeds found on it: a
//! `sim://<node>` URL's connection is a [`SimWire`] as the library's
//! `leasehold::sim::Wire` (`ProcessDialer::dial`), which reconnects,
//! resubscribes and tells the client of the disconnection itself.
//!
//! Everything runs on one current-thread runtime with the paused clock:
//! time advances only when every task waits, and the order of events is a
//! function of the seed.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex, MutexGuard, Weak};
use std::time::Duration;

use leasehold::sim::{Dialer, OnPush, Wire, WireFuture};
use redis::{Cmd, PushInfo, PushKind, RedisError, Value};
use tokio::sync::oneshot;
use tokio::time::Instant;

use crate::cluster::ClusterMap;
use crate::history::History;
use crate::rng::Rng;
use crate::server::{Flavor, Server};
use crate::socket::{Carrier, Deliver, Shared as SocketShared, SimSocket};

/// The server clock at the simulation's start: 2026-11-27, in µs.
const EPOCH_US: u64 = 1_795_000_000_000_000;

/// How often faults and delays happen in one schedule.
#[derive(Debug, Clone, Default)]
pub struct Faults {
    /// Longest one-way delay of a message, in ms (0: none).
    pub max_delay_ms: u64,
    /// Chance that a message is slow (its delay drawn up to the maximum);
    /// the others take 0-1 ms.
    pub slow: f64,
    /// Chance per request of a connection reset before the server runs it.
    pub reset_before: f64,
    /// Chance per request of a connection reset after the server ran it
    /// (the reply is lost).
    pub reset_after: f64,
    /// Chance that a slow reply to a plain lock's acquisition (one delayed
    /// by more than half the longest delay: often a grant later than the
    /// lease) finds the node's script cache flushed as it arrives, so the
    /// give-back that follows meets NOSCRIPT and is sent again.
    pub flush_after_late_grant: f64,
    /// Chance per request of a duplicate delivery. On a cluster: the
    /// server runs it, the connection drops before the reply, and
    /// redis-rs's cluster driver sends it again on its new connection,
    /// where it runs a second time. Elsewhere (one server, Replicated,
    /// Sentinel): a retrying proxy in front of the server (Envoy,
    /// twemproxy) lost its own connection to the server after it ran the
    /// request and sends it again; the client's connection stays up and
    /// gets the second reply (the client's connection manager itself
    /// never re-sends). On the wire seam (`--set seam=wire`): the wire
    /// resets and sends again. Never on the fenced resource (the
    /// application's own connection).
    pub twice: f64,
}

/// A server the world holds, with what faults do to it.
struct Node {
    server: Server,
    flavor: Flavor,
    /// The node's clock minus the world's, in µs (a step moves it).
    clock_offset_us: i64,
    /// Until when the node runs nothing (SIGSTOP).
    paused_until: Option<Instant>,
    /// Its replica's copy of the data, as of the last replication.
    replica: Option<Server>,
    /// The granularity of its clock in µs (0: continuous): a server reads
    /// a clock that ticks (1 ms on some hosts, 15.6 ms on others).
    tick_us: u64,
    /// How fast its clock runs against the world's, in parts per million.
    drift_ppm: i64,
}

/// Simulated sentinels and the servers they watch.
#[derive(Debug, Clone)]
struct Sentinels {
    /// The master's name they monitor it under.
    name: String,
    /// What each sentinel names: a master and the config epoch of its word.
    views: BTreeMap<String, (String, u64)>,
    /// Each watched server: the master it replicates, None for a master.
    replica_of: BTreeMap<String, Option<String>>,
    /// The newest config epoch.
    epoch: u64,
}

/// The world's state, behind one lock (one thread runs it all).
struct State {
    start: Instant,
    rng: Rng,
    faults: Faults,
    nodes: BTreeMap<String, Node>,
    conns: BTreeMap<u64, Weak<Conn>>,
    next_conn: u64,
    history: History,
    /// Server commands run, over all nodes.
    commands: u64,
    /// Scripts run (EVALSHA and EVAL): the lock operations the servers did.
    scripts: u64,
    /// FNV-1a over every command run: when, where, what.
    wire_digest: u64,
    /// Writes the fenced resource (the node "resource") accepted, in the
    /// order it ran them: key and fence of each `fenced::set` answered OK.
    accepted: Vec<(String, u64)>,
    /// Until when a process's messages are held (its sockets stall).
    stalled: BTreeMap<usize, Instant>,
    /// Tokens of plain-lock guards whose `release()` was called.
    releasing: BTreeSet<Vec<u8>>,
    /// Where the release of a guard (one called by `release()`, not the
    /// give-back of an attempt, which may share the token) ran: (node,
    /// token) -> when (ms from the start).
    released: BTreeMap<(String, Vec<u8>), u128>,
    /// Released leases set back (see [`World::retaken_after_release`]).
    retaken_after_release: Vec<String>,
    /// The operator's process (its requests' removals are breaks).
    operator: Option<usize>,
    /// Holds an operator's request removed: (node, hold, when).
    broken: Vec<(String, String, Instant)>,
    /// Second deliveries that removed another owner's hold (one line each).
    resent_removals: Vec<String>,
    /// Which process first sent each owner token (32 hex digits).
    sent_by: BTreeMap<Vec<u8>, usize>,
    /// The server TTL (ms) each token's first `lock_acquire` asked for.
    asked_ttl: BTreeMap<Vec<u8>, Vec<u8>>,
    /// Requests delivered twice.
    duplicates: u64,
    /// Owner tokens of requests delivered twice.
    resent_tokens: BTreeSet<Vec<u8>>,
    /// (key, argument) of every script call delivered twice: the reentrant
    /// owner a second delivery may take a key for after `close()`.
    resent_named: BTreeSet<(Vec<u8>, Vec<u8>)>,
    /// A Redis Cluster's slot map, if the lock nodes are one.
    cluster: Option<ClusterMap>,
    /// Connections that sent ASKING (for their next command).
    asking: BTreeSet<u64>,
    /// Sentinels and the roles of the servers they watch, if the lock
    /// server is a Sentinel-watched master.
    sentinel: Option<Sentinels>,
    /// Nodes that are down: their connections dropped, new ones refused.
    down: BTreeSet<String>,
    /// Requests whose reply a reset lost on a driver's socket, by process:
    /// the driver may send them again (a second delivery).
    lost_replies: BTreeSet<(usize, Vec<Vec<u8>>)>,
    /// Break notices (a message on a `…:broken` channel) that reached a
    /// client process on a live connection: (process, payload, when).
    notices: Vec<(usize, Vec<u8>, Instant)>,
    /// Holds a reentrant release of "any one hold" (`release_by_token`)
    /// gave back at its first delivery: (node, hold id, when).
    given_back: Vec<(String, String, Instant)>,
    /// Since when a majority of the sentinels name a master other than
    /// this watched server (it is demoted in their word).
    demoted_since: BTreeMap<String, Instant>,
    /// Each process's latest round of questions to the sentinels.
    rounds: BTreeMap<usize, Round>,
    /// The clients' command timeout (a sentinel not answered within it
    /// counts as failed for the client).
    command_timeout: Duration,
    /// Clients sent back to a demoted master (one line each).
    sent_back: Vec<String>,
}

/// A client's round of questions to the sentinels: every sentinel is
/// asked at once, each on a connection of its own.
#[derive(Debug, Clone)]
struct Round {
    /// When the round began (its connections were opened).
    start: Instant,
    /// Its connections to the sentinels.
    conns: Vec<u64>,
    /// Those whose answer (the `SENTINEL MASTER` reply) reached the client.
    answered: BTreeSet<u64>,
    /// When the client hung up a connection of the round whose answer
    /// could still come (not dropped, within the command timeout), and how
    /// many answers it had then.
    abandoned: Option<(Instant, usize)>,
}

impl Round {
    fn new(start: Instant) -> Round {
        Round {
            start,
            conns: Vec::new(),
            answered: BTreeSet::new(),
            abandoned: None,
        }
    }
}

/// Every shipped script's name by its SHA1, as EVALSHA names it.
fn script_name(sha: &[u8]) -> Option<&'static str> {
    static NAMES: std::sync::OnceLock<BTreeMap<Vec<u8>, &'static str>> = std::sync::OnceLock::new();
    NAMES
        .get_or_init(|| {
            leasehold::sim_script_names()
                .into_iter()
                .map(|(sha, name)| (sha.into_bytes(), name))
                .collect()
        })
        .get(sha)
        .copied()
}

/// A shipped script's call: its name, KEYS and ARGV.
type ScriptCall<'a> = (&'static str, &'a [Vec<u8>], &'a [Vec<u8>]);

/// The plain lock's scripts that set, renew or delete a lock key: the
/// script's name, its KEYS and its ARGV (None for any other command).
fn lock_script(args: &[Vec<u8>]) -> Option<ScriptCall<'_>> {
    script_call(args).filter(|(name, _, _)| {
        matches!(
            *name,
            "lock_acquire" | "lock_release" | "lock_extend" | "lock_retake"
        )
    })
}

/// Any shipped script's call: its name, KEYS and ARGV (None for any other
/// command).
fn script_call(args: &[Vec<u8>]) -> Option<ScriptCall<'_>> {
    if !args.first()?.eq_ignore_ascii_case(b"EVALSHA") {
        return None;
    }
    let sha = args.get(1)?;
    // The library sends its SHA1s in lower case: no copy for those.
    let name = if sha.iter().any(u8::is_ascii_uppercase) {
        script_name(&sha.to_ascii_lowercase())
    } else {
        script_name(sha)
    }?;
    let numkeys: usize = std::str::from_utf8(args.get(2)?).ok()?.parse().ok()?;
    let keys = args.get(3..3 + numkeys)?;
    Some((name, keys, &args[3 + numkeys..]))
}

/// An owner token as the library draws them: 32 lower-case hex digits.
fn is_token(arg: &[u8]) -> bool {
    arg.len() == 32
        && arg
            .iter()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(b))
}

/// The holds a lock key shows at `now_ms`: a lock's or leader's string
/// (its holder's token), a reentrant lock's owner (while a hold of it
/// lives), the live members of an
/// RwLock's or a semaphore's sorted set (waiting writers among them).
pub fn holds_in(key: Option<&crate::server::KeyDump>, now_ms: i64) -> BTreeSet<String> {
    use crate::server::DumpValue;
    let Some(key) = key else {
        return BTreeSet::new();
    };
    match &key.value {
        DumpValue::String(v) => [String::from_utf8_lossy(v).into_owned()].into(),
        // A reentrant lock's owner, while one of its holds (`h:<id>` ->
        // expiry, server ms) lives: a hash whose holds all ended is free.
        DumpValue::Hash(fields) => {
            let live = fields.iter().any(|(f, v)| {
                f.starts_with(b"h:")
                    && std::str::from_utf8(v)
                        .ok()
                        .and_then(|v| v.parse::<i64>().ok())
                        .is_some_and(|expiry| expiry > now_ms)
            });
            fields
                .iter()
                .filter(|(f, _)| live && f == b"owner")
                .map(|(_, v)| String::from_utf8_lossy(v).into_owned())
                .collect()
        }
        DumpValue::ZSet(z) => z
            .iter()
            .filter(|(_, score)| *score > now_ms as f64)
            .map(|(m, _)| String::from_utf8_lossy(m).into_owned())
            .collect(),
    }
}

impl State {
    /// Notes a request that may be delivered twice: its owner tokens, and
    /// the (key, argument) pairs of a script call (a reentrant owner).
    fn note_resent(&mut self, args: &[Vec<u8>]) {
        for arg in args.iter().filter(|a| is_token(a)) {
            self.resent_tokens.insert(arg.clone());
        }
        if let Some((_, keys, argv)) = script_call(args) {
            for key in keys {
                for arg in argv {
                    self.resent_named.insert((key.clone(), arg.clone()));
                }
            }
        }
    }

    /// Which watched servers a majority of the sentinels no longer name,
    /// and since when.
    fn note_views(&mut self) {
        let Some(t) = &self.sentinel else { return };
        let majority = t.views.len() / 2 + 1;
        let now = Instant::now();
        for server in t.replica_of.keys() {
            let others = t.views.values().filter(|(m, _)| m != server).count();
            if others >= majority {
                self.demoted_since.entry(server.clone()).or_insert(now);
            } else {
                self.demoted_since.remove(server);
            }
        }
    }

    /// Process `process` opens a connection to `node` now: a round of
    /// questions to the sentinels (every one asked at once, each on a
    /// connection of its own), or a connection to a watched server. One
    /// made as the client stops listening to its round (its last answer
    /// just came), to a server a majority of the sentinels had demoted
    /// before the round began, on fewer answers than a majority while the
    /// others could still come (their connections not dropped, the command
    /// timeout not reached) is the client sent back by a sentinel that
    /// missed the failover. (With fewer than a majority answering, each
    /// failed or timed out, the client goes by the answers it has; a
    /// reconnect of a connection already on the old master is not asked
    /// of the sentinels.)
    fn note_connect(&mut self, process: usize, node: &str, conn: u64) {
        let Some(t) = &self.sentinel else { return };
        let now = Instant::now();
        if t.views.contains_key(node) {
            let round = self
                .rounds
                .entry(process)
                .or_insert_with(|| Round::new(now));
            if round.start != now {
                *round = Round::new(now);
            }
            round.conns.push(conn);
            return;
        }
        let majority = t.views.len() / 2 + 1;
        let (Some(round), Some(&since)) = (self.rounds.get(&process), self.demoted_since.get(node))
        else {
            return;
        };
        if let Some((at, answers)) = round.abandoned
            && at == now
            && answers < majority
            && round.start > since
        {
            let line = format!(
                "at {} ms, p{process} connects to {node}, demoted by a majority of the sentinels \
                 since {} ms, on {answers} answer(s) of a round begun at {} ms",
                now.duration_since(self.start).as_millis(),
                since.duration_since(self.start).as_millis(),
                round.start.duration_since(self.start).as_millis()
            );
            self.sent_back.push(line);
        }
    }

    /// Notes a Redlock re-take (`lock_retake`) that ran on a node after
    /// the guard's release ran there: it sets the released lease back
    /// there, held for a TTL after its holder let it go.
    fn check_renewals(&mut self, node: &str, script: &str, argv: &[Vec<u8>], reply: &Value) {
        let now = Instant::now().duration_since(self.start).as_millis();
        // Only a re-take can set a key back (SET NX); an extend that lands
        // after the release finds the key gone or another's.
        if script != "lock_retake" {
            return;
        }
        // One answer per lease: 1 if set back (a re-take that found the key
        // taken, as a second delivery may, changed nothing).
        let set_back = |i: usize| match reply {
            Value::Array(answers) => matches!(answers.get(i), Some(Value::Int(1))),
            _ => false,
        };
        for (i, token) in argv.iter().step_by(2).enumerate() {
            if !set_back(i) {
                continue;
            }
            let at = (node.to_owned(), token.clone());
            if let Some(released) = self.released.get(&at) {
                let line = format!(
                    "at {now} ms, {node}: {script} of token {} after its guard's release ran there at {released} ms",
                    String::from_utf8_lossy(&token[..token.len().min(8)])
                );
                self.retaken_after_release.push(line);
            }
        }
    }

    /// The live connections to `node`.
    fn conns_to(&self, node: &str) -> Vec<Arc<Conn>> {
        self.conns
            .values()
            .filter_map(Weak::upgrade)
            .filter(|c| c.node == node)
            .collect()
    }

    /// Adds one command run (where, at what server time, for which
    /// connection, what) to the wire digest (FNV-1a's multiply, eight bytes
    /// at a time: every request of every schedule goes through it).
    fn digest_command(&mut self, node: &str, now_us: u64, conn: u64, args: &[Vec<u8>]) {
        const PRIME: u64 = 0x0100_0000_01b3;
        let mut h = self.wire_digest;
        let (at, id) = (now_us.to_le_bytes(), conn.to_le_bytes());
        for part in [node.as_bytes(), &at, &id]
            .into_iter()
            .chain(args.iter().map(Vec::as_slice))
        {
            let mut words = part.chunks_exact(8);
            for word in &mut words {
                let w = u64::from_le_bytes(word.try_into().expect("eight bytes"));
                h = (h ^ w).wrapping_mul(PRIME);
                h ^= h >> 29;
            }
            let mut last = [0u8; 8];
            last[..words.remainder().len()].copy_from_slice(words.remainder());
            h = (h ^ u64::from_le_bytes(last)).wrapping_mul(PRIME);
            h = (h ^ part.len() as u64 ^ 0xff00).wrapping_mul(PRIME);
            h ^= h >> 29;
        }
        self.wire_digest = h;
    }
}

/// The simulated world; cheap to clone.
#[derive(Clone)]
pub struct World(Arc<Mutex<State>>);

/// What happens to one request on the network.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Fate {
    Delivered,
    ResetBefore,
    ResetAfter,
    /// Run, reply lost, sent again and run again (see [`Faults::twice`]).
    Twice,
}

impl World {
    /// A world of `nodes` (name and flavor), its choices from `rng`.
    pub fn new(rng: Rng, faults: Faults, nodes: &[(&str, Flavor)]) -> World {
        let nodes = nodes
            .iter()
            .map(|&(name, flavor)| {
                let node = Node {
                    server: Server::new(flavor),
                    flavor,
                    clock_offset_us: 0,
                    paused_until: None,
                    replica: None,
                    tick_us: 0,
                    drift_ppm: 0,
                };
                (name.to_owned(), node)
            })
            .collect();
        World(Arc::new(Mutex::new(State {
            start: Instant::now(),
            rng,
            faults,
            nodes,
            conns: BTreeMap::new(),
            next_conn: 1,
            history: History::default(),
            commands: 0,
            scripts: 0,
            wire_digest: 0xcbf2_9ce4_8422_2325,
            stalled: BTreeMap::new(),
            accepted: Vec::new(),
            releasing: BTreeSet::new(),
            released: BTreeMap::new(),
            retaken_after_release: Vec::new(),
            operator: None,
            broken: Vec::new(),
            resent_removals: Vec::new(),
            sent_by: BTreeMap::new(),
            asked_ttl: BTreeMap::new(),
            duplicates: 0,
            resent_tokens: BTreeSet::new(),
            resent_named: BTreeSet::new(),
            cluster: None,
            sentinel: None,
            down: BTreeSet::new(),
            asking: BTreeSet::new(),
            lost_replies: BTreeSet::new(),
            notices: Vec::new(),
            given_back: Vec::new(),
            demoted_since: BTreeMap::new(),
            rounds: BTreeMap::new(),
            command_timeout: Duration::from_secs(3600),
            sent_back: Vec::new(),
        })))
    }

    fn state(&self) -> MutexGuard<'_, State> {
        self.0.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Simulated ms since the start (for the history).
    pub fn now_ms(&self) -> f64 {
        let start = self.state().start;
        Instant::now().duration_since(start).as_secs_f64() * 1000.0
    }

    /// Appends a line to the history (and its digest).
    pub fn log(&self, line: impl FnOnce() -> String) {
        let mut s = self.state();
        let at = Instant::now().duration_since(s.start);
        s.history.push(at, line());
    }

    /// Runs `f` on the history.
    pub fn with_history<T>(&self, f: impl FnOnce(&mut History) -> T) -> T {
        f(&mut self.state().history)
    }

    /// Server commands run so far, over all nodes.
    pub fn commands(&self) -> u64 {
        self.state().commands
    }

    /// The fenced writes the resource accepted, in the order it ran them.
    pub fn accepted_writes(&self) -> Vec<(String, u64)> {
        self.state().accepted.clone()
    }

    /// Records that the guard of `token` (a plain lock's) is being
    /// released: its `release()` is called now.
    pub fn releasing(&self, token: &str) {
        self.state().releasing.insert(token.as_bytes().to_vec());
    }

    /// The token of a guard's release in `args`, if that is what they are:
    /// a `lock_release` sent after the guard's `release()` was called (a
    /// give-back of an attempt, sent before, may carry the same token).
    /// The operator's break of a lock sends the same script with the
    /// holder's token, and is not its guard's release.
    fn guard_release(&self, process: usize, args: &[Vec<u8>]) -> Option<Vec<u8>> {
        let (script, _, argv) = lock_script(args)?;
        let token = argv.first()?;
        let s = self.state();
        (script == "lock_release" && s.operator != Some(process) && s.releasing.contains(token))
            .then(|| token.clone())
    }

    /// Records that a guard's release of `token` ran on `node` now.
    fn guard_released(&self, node: &str, token: Vec<u8>) {
        let mut s = self.state();
        let now = Instant::now().duration_since(s.start).as_millis();
        s.released.entry((node.to_owned(), token)).or_insert(now);
    }

    /// Redlock re-takes a node ran for a lease after its guard's release
    /// had run there: the key of a released lease must not outlive its
    /// release. One line each.
    pub fn retaken_after_release(&self) -> Vec<String> {
        self.state().retaken_after_release.clone()
    }

    /// Scripts run so far (EVALSHA and EVAL), over all nodes.
    pub fn scripts(&self) -> u64 {
        self.state().scripts
    }

    /// A digest of every command run so far (node, server time, connection, arguments).
    pub fn wire_digest(&self) -> u64 {
        self.state().wire_digest
    }

    /// Fault: another program writes `args` (a SET, HSET or ZADD of a key
    /// of its own) on `node`, where a lock's key would be, if no key is
    /// there now; returns the key as it is then, to hold against what is
    /// there later.
    pub fn plant(&self, node: &str, args: &[&str]) -> Option<crate::server::KeyDump> {
        let args: Vec<Vec<u8>> = args.iter().map(|a| a.as_bytes().to_vec()).collect();
        let key = args.get(1)?.clone();
        if self
            .dump_key(node, &String::from_utf8_lossy(&key))
            .is_some()
        {
            self.log(|| {
                format!(
                    "{} is taken: nothing planted",
                    String::from_utf8_lossy(&key)
                )
            });
            return None;
        }
        self.exec(node, 0, &args);
        self.log(|| {
            format!(
                "FAULT another program writes {}",
                String::from_utf8_lossy(&key)
            )
        });
        let s = self.state();
        let n = s.nodes.get(node)?;
        n.server.dump_key(&key, World::node_now_us(&s, n))
    }

    /// `key` on `node` now, if it is live.
    pub fn dump_key(&self, node: &str, key: &str) -> Option<crate::server::KeyDump> {
        let s = self.state();
        let n = s.nodes.get(node)?;
        n.server.dump_key(key.as_bytes(), World::node_now_us(&s, n))
    }

    /// Marks `process` as the operator's: the holds its requests remove
    /// are breaks ([`World::broken`]).
    pub fn set_operator(&self, process: usize) {
        self.state().operator = Some(process);
    }

    /// Sets `node`'s clock: its granularity in µs (0: continuous) and its
    /// drift in parts per million.
    pub fn set_clock(&self, node: &str, tick_us: u64, drift_ppm: i64) {
        if let Some(n) = self.state().nodes.get_mut(node) {
            n.tick_us = tick_us;
            n.drift_ppm = drift_ppm;
        }
    }

    /// Holds the operator's requests removed: (node, hold as the key shows
    /// it, when the server ran the request).
    pub fn broken(&self) -> Vec<(String, String, Instant)> {
        self.state().broken.clone()
    }

    /// Second deliveries of a request that removed a hold of an owner the
    /// request does not name: what a request delivered once would not have
    /// done. One line each.
    pub fn resent_removals(&self) -> Vec<String> {
        self.state().resent_removals.clone()
    }

    /// Break notices that reached a client process: (process, payload,
    /// when it arrived there).
    pub fn notices(&self) -> Vec<(usize, Vec<u8>, Instant)> {
        self.state().notices.clone()
    }

    /// Holds `release_by_token` gave back at a call's first delivery:
    /// (node, hold id, when the server ran it).
    pub fn given_back(&self) -> Vec<(String, String, Instant)> {
        self.state().given_back.clone()
    }

    /// The clients' command timeout, for the Sentinel invariant.
    pub fn set_command_timeout(&self, timeout: Duration) {
        self.state().command_timeout = timeout;
    }

    /// Clients sent back to a demoted master by a sentinel that missed its
    /// failover (SAFETY.md: "among the answers of a majority the highest
    /// config epoch wins, so a sentinel that missed a failover cannot send
    /// the client back to the demoted master"). One line each.
    pub fn sent_back(&self) -> Vec<String> {
        self.state().sent_back.clone()
    }

    /// Requests delivered twice so far.
    pub fn duplicates(&self) -> u64 {
        self.state().duplicates
    }

    /// The holds on `nodes`' lock keys (`…:lock`, `…:leader`) that carry an
    /// owner token first sent by `process`, or its reentrant `owner`: what
    /// `close()` must have given back. Left out: tokens of requests
    /// delivered twice, and the owner on a key a script call naming it was
    /// delivered twice for (a second delivery can land after `close()` gave
    /// the lease back; SAFETY.md says what it leaves); a leader record whose
    /// lease no longer holds its token. (node, key, hold) each.
    pub fn holds_of(
        &self,
        process: usize,
        owner: &str,
        nodes: &[String],
    ) -> Vec<(String, String, String)> {
        let s = self.state();
        let mine: Vec<String> = s
            .sent_by
            .iter()
            .filter(|(t, p)| **p == process && !s.resent_tokens.contains(*t))
            .map(|(t, _)| String::from_utf8_lossy(t).into_owned())
            .chain([owner.to_owned()])
            .collect();
        let mut out = Vec::new();
        for node in nodes {
            let Some(n) = s.nodes.get(node) else { continue };
            let now_us = World::node_now_us(&s, n);
            for key in n.server.dump(now_us) {
                if !(key.key.ends_with(":lock") || key.key.ends_with(":leader")) {
                    continue;
                }
                let resent_owner = s
                    .resent_named
                    .contains(&(key.key.as_bytes().to_vec(), owner.as_bytes().to_vec()));
                // An election's leader record ('<term> <token> <value>') is
                // believed only while its token holds the lease
                // (election_leader.lua): one whose lease is gone (broken, say)
                // holds nothing, and lives out the lease's time.
                let lease = key.key.strip_suffix(":leader").map(|prefix| {
                    holds_in(
                        n.server
                            .dump_key(format!("{prefix}:lock").as_bytes(), now_us)
                            .as_ref(),
                        (now_us / 1000) as i64,
                    )
                });
                for hold in holds_in(Some(&key), (now_us / 1000) as i64) {
                    if resent_owner && hold == owner {
                        continue;
                    }
                    if let Some(lease) = &lease
                        && hold
                            .split(' ')
                            .nth(1)
                            .is_none_or(|token| !lease.contains(token))
                    {
                        continue;
                    }
                    if mine.iter().any(|m| hold.contains(m.as_str())) {
                        out.push((node.clone(), key.key.clone(), hold));
                    }
                }
            }
        }
        out
    }

    /// Notes the owner tokens in a request of `process` (the first sender
    /// of a token is the process that drew it).
    fn note_tokens(&self, process: usize, args: &[Vec<u8>]) {
        let mut s = self.state();
        for arg in args.iter().filter(|a| is_token(a)) {
            s.sent_by.entry(arg.clone()).or_insert(process);
        }
        if let Some(("lock_acquire", _, [token, ttl, ..])) = lock_script(args) {
            s.asked_ttl
                .entry(token.clone())
                .or_insert_with(|| ttl.clone());
        }
    }

    /// The server TTL in ms the first `lock_acquire` of `token` asked for
    /// (a lease's TTL, plus its `lock_delay`).
    pub fn asked_ttl_ms(&self, token: &str) -> Option<u64> {
        let s = self.state();
        let ttl = s.asked_ttl.get(token.as_bytes())?;
        std::str::from_utf8(ttl).ok()?.parse().ok()
    }

    /// Runs a request of `process` as [`World::exec`] does; a script's
    /// effect on its lock key (KEYS[1]) is watched when the operator sent
    /// it (the holds it removed are broken) or when it is a second delivery
    /// (`again`: it may remove nothing of an owner it does not name).
    fn exec_request(
        &self,
        node: &str,
        conn: u64,
        process: usize,
        args: &[Vec<u8>],
        again: bool,
    ) -> Value {
        if let Some(reply) = self.serve_here(node, conn, process, args) {
            return reply;
        }
        let operator = self.state().operator == Some(process);
        // `release_by_token` of a reentrant lock: "any one hold" of the
        // owner (ARGV[2] empty); what its first delivery gives back is the
        // call's, what a second one does is judged below.
        let any_hold = script_call(args).is_some_and(|(name, _, argv)| {
            name == "reentrant_release" && argv.get(1).is_some_and(Vec::is_empty)
        });
        let watched = (operator || again || any_hold)
            .then(|| script_call(args))
            .flatten()
            .and_then(|(name, keys, _)| Some((name, keys.first()?.clone())));
        let Some((script, key)) = watched else {
            return self.exec(node, conn, args);
        };
        let fields = |w: &World| -> BTreeSet<Vec<u8>> {
            let s = w.state();
            let n = s.nodes.get(node).expect("a node of the world");
            match n.server.dump_key(&key, World::node_now_us(&s, n)) {
                Some(crate::server::KeyDump {
                    value: crate::server::DumpValue::Hash(h),
                    ..
                }) => h.iter().map(|(f, _)| f.clone()).collect(),
                _ => BTreeSet::new(),
            }
        };
        let fields_before = any_hold.then(|| fields(self));
        let holds = |w: &World| {
            let s = w.state();
            let n = s.nodes.get(node).expect("a node of the world");
            let now_us = World::node_now_us(&s, n);
            holds_in(
                n.server.dump_key(&key, now_us).as_ref(),
                (now_us / 1000) as i64,
            )
        };
        let before = holds(self);
        let reply = self.exec(node, conn, args);
        let after = holds(self);
        if let (Some(fields_before), false) = (fields_before, again) {
            let fields_after = fields(self);
            let mut s = self.state();
            for field in fields_before.difference(&fields_after) {
                if let Some(id) = field.strip_prefix(b"h:") {
                    let id = String::from_utf8_lossy(id).into_owned();
                    s.given_back.push((node.to_owned(), id, Instant::now()));
                }
            }
        }
        let removed: Vec<String> = before.difference(&after).cloned().collect();
        if removed.is_empty() {
            return reply;
        }
        let mut s = self.state();
        let at = Instant::now().duration_since(s.start).as_micros() as u64;
        if operator {
            for hold in &removed {
                s.broken
                    .push((node.to_owned(), hold.clone(), Instant::now()));
            }
        }
        if again {
            let (_, _, argv) = script_call(args).expect("a script call");
            let named = |hold: &str| {
                argv.iter()
                    .filter(|a| a.len() >= 8)
                    .any(|a| hold.contains(String::from_utf8_lossy(a).as_ref()))
            };
            for hold in removed.iter().filter(|h| !named(h)) {
                let line = format!(
                    "at {} ms, {node}: {script} delivered a second time removed {} of {}",
                    at / 1000,
                    &hold[..hold.len().min(40)],
                    String::from_utf8_lossy(&key)
                );
                s.resent_removals.push(line);
            }
        }
        reply
    }

    /// The reply to a command a node answers without its keyspace: the
    /// connection's own commands (HELLO, CLIENT, ASKING, READONLY) and a
    /// cluster's (CLUSTER SLOTS, and the redirection of a command whose
    /// slot this node does not serve). None: the command runs.
    fn serve_here(&self, node: &str, conn: u64, process: usize, args: &[Vec<u8>]) -> Option<Value> {
        let name = String::from_utf8_lossy(args.first()?).to_ascii_uppercase();
        let mut s = self.state();
        let asking = s.asking.remove(&conn);
        let reply = match name.as_str() {
            "HELLO" => Value::Map(vec![
                (
                    Value::SimpleString("server".into()),
                    Value::BulkString(b"redis".to_vec()),
                ),
                (
                    Value::SimpleString("version".into()),
                    Value::BulkString(b"7.2.4".to_vec()),
                ),
                (Value::SimpleString("proto".into()), Value::Int(3)),
                (Value::SimpleString("id".into()), Value::Int(conn as i64)),
                (
                    Value::SimpleString("mode".into()),
                    Value::BulkString(
                        if s.cluster.is_some() {
                            "cluster"
                        } else {
                            "standalone"
                        }
                        .into(),
                    ),
                ),
                (
                    Value::SimpleString("role".into()),
                    Value::BulkString(b"master".to_vec()),
                ),
                (Value::SimpleString("modules".into()), Value::Array(vec![])),
            ]),
            "CLIENT" | "READONLY" | "READWRITE" => Value::Okay,
            "SENTINEL"
                if s.sentinel
                    .as_ref()
                    .is_some_and(|t| t.views.contains_key(node)) =>
            {
                let t = s.sentinel.as_ref().expect("checked");
                let (master, epoch) = t.views[node].clone();
                let sub = args
                    .get(1)
                    .map(|a| a.to_ascii_uppercase())
                    .unwrap_or_default();
                let named = args
                    .get(2)
                    .is_some_and(|n| n.as_slice() == t.name.as_bytes());
                match sub.as_slice() {
                    _ if !named => Value::Nil,
                    b"GET-MASTER-ADDR-BY-NAME" => Value::Array(vec![
                        Value::BulkString(ClusterMap::host(process, &master).into_bytes()),
                        Value::BulkString(crate::cluster::PORT.to_string().into_bytes()),
                    ]),
                    b"MASTER" => Value::Map(vec![
                        (
                            Value::BulkString(b"name".to_vec()),
                            Value::BulkString(t.name.clone().into_bytes()),
                        ),
                        (
                            Value::BulkString(b"config-epoch".to_vec()),
                            Value::BulkString(epoch.to_string().into_bytes()),
                        ),
                    ]),
                    _ => crate::server::error_value("ERR unknown sentinel subcommand"),
                }
            }
            "ROLE"
                if s.sentinel
                    .as_ref()
                    .is_some_and(|t| t.replica_of.contains_key(node)) =>
            {
                let t = s.sentinel.as_ref().expect("checked");
                match &t.replica_of[node] {
                    None => Value::Array(vec![
                        Value::BulkString(b"master".to_vec()),
                        Value::Int(0),
                        Value::Array(vec![]),
                    ]),
                    Some(master) => Value::Array(vec![
                        Value::BulkString(b"slave".to_vec()),
                        Value::BulkString(ClusterMap::host(process, master).into_bytes()),
                        Value::Int(i64::from(crate::cluster::PORT)),
                        Value::BulkString(b"connected".to_vec()),
                        Value::Int(0),
                    ]),
                }
            }
            "EVAL" | "EVALSHA" | "SET" | "DEL" | "ZADD" | "HSET" | "PEXPIRE"
                if s.sentinel
                    .as_ref()
                    .is_some_and(|t| t.replica_of.get(node).is_some_and(Option::is_some)) =>
            {
                crate::server::error_value("READONLY You can't write against a read only replica.")
            }
            "ASKING" => {
                s.asking.insert(conn);
                Value::Okay
            }
            "CLUSTER" => match s.cluster.as_ref().filter(|m| m.has(node)) {
                Some(map)
                    if args
                        .get(1)
                        .is_some_and(|a| a.eq_ignore_ascii_case(b"SLOTS")) =>
                {
                    map.slots_reply(process)
                }
                _ => crate::server::error_value("ERR This instance has cluster support disabled"),
            },
            _ => {
                let map = s.cluster.as_ref().filter(|m| m.has(node))?;
                let keys = crate::cluster::keys_of(args);
                let n = s.nodes.get(node)?;
                let now_us = World::node_now_us(&s, n);
                let routed = map.route(node, process, &keys, asking, |key| {
                    n.server.dump_key(key, now_us).is_some()
                });
                match routed {
                    Ok(()) => return None,
                    Err(redirect) => redirect,
                }
            }
        };
        s.commands += 1;
        let now_us = s
            .nodes
            .get(node)
            .map(|n| World::node_now_us(&s, n))
            .unwrap_or(0);
        s.digest_command(node, now_us, conn, args);
        drop(s);
        if let Value::ServerError(e) = &reply {
            let code = e.code().to_owned();
            let what = match script_call(args) {
                Some((script, keys, _)) => format!(
                    "{script} {:?}",
                    keys.first().map(|k| String::from_utf8_lossy(k))
                ),
                None => String::from_utf8_lossy(&args[0]).into_owned(),
            };
            self.log(|| format!("CLUSTER {node} answers {code} to p{process} conn {conn}: {what}"));
        }
        Some(reply)
    }

    /// Makes the lock nodes a Redis Cluster: `masters` own the slots in
    /// equal ranges, `replicas` (replica, master) copy their masters.
    pub fn make_cluster(&self, masters: &[String], replicas: &[(String, String)]) {
        self.state().cluster = Some(ClusterMap::new(masters, replicas));
    }

    /// The nodes that hold lock keys now: a cluster's masters that own
    /// slots (a dead master and a replica's copy are not), else `names`.
    pub fn serving(&self, names: &[String]) -> Vec<String> {
        let s = self.state();
        match &s.cluster {
            Some(map) => {
                let mut owners: Vec<String> = (0..crate::cluster::SLOTS)
                    .map(|slot| map.owner(slot).to_owned())
                    .collect();
                owners.sort();
                owners.dedup();
                owners
            }
            None => match &s.sentinel {
                Some(t) => t
                    .replica_of
                    .iter()
                    .filter(|(n, of)| of.is_none() && !s.down.contains(*n))
                    .map(|(n, _)| n.clone())
                    .collect(),
                None => names.to_vec(),
            },
        }
    }

    /// Makes `servers[0]` a master watched by `sentinels` under `name`, the
    /// other servers its replicas.
    pub fn make_sentinels(&self, name: &str, servers: &[String], sentinels: &[String]) {
        let master = servers[0].clone();
        self.state().sentinel = Some(Sentinels {
            name: name.to_owned(),
            views: sentinels
                .iter()
                .map(|s| (s.clone(), (master.clone(), 1)))
                .collect(),
            replica_of: servers
                .iter()
                .map(|n| (n.clone(), (n != &master).then(|| master.clone())))
                .collect(),
            epoch: 1,
        });
    }

    /// The master's replicas now: (replica, master).
    pub fn sentinel_replicas(&self) -> Vec<(String, String)> {
        let s = self.state();
        s.sentinel
            .iter()
            .flat_map(|t| t.replica_of.iter())
            .filter_map(|(n, of)| Some((n.clone(), of.clone()?)))
            .collect()
    }

    /// Fault: a Sentinel failover. The replica `to` is promoted (with every
    /// write of the master if `caught_up`), the other replicas follow it, and
    /// each sentinel learns of it after its own delay (one of them, if
    /// `one_misses`, never). The old master dies, or (`old_lives`) keeps
    /// answering as a master for that long until it is turned into a replica
    /// of the new one (its data then the new master's).
    pub async fn sentinel_failover(
        &self,
        to: &str,
        caught_up: bool,
        old_lives: Option<Duration>,
        one_misses: bool,
        mut rng: Rng,
    ) {
        let Some(old) = self.serving(&[]).into_iter().find(|n| n != to) else {
            return;
        };
        if caught_up {
            self.replicate_to(to, &old);
        }
        let (epoch, sentinels, conns) = {
            let mut s = self.state();
            let conns = if old_lives.is_none() {
                s.down.insert(old.clone());
                s.conns_to(&old)
            } else {
                Vec::new()
            };
            let Some(t) = &mut s.sentinel else { return };
            t.epoch += 1;
            for (node, of) in t.replica_of.iter_mut() {
                if node == to {
                    *of = None;
                } else if *node != old {
                    *of = Some(to.to_owned());
                }
            }
            (t.epoch, t.views.keys().cloned().collect::<Vec<_>>(), conns)
        };
        self.log(|| {
            format!(
                "FAULT sentinel failover from {old} to {to} ({}, the old master {})",
                if caught_up {
                    "caught up"
                } else {
                    "missing writes"
                },
                match old_lives {
                    Some(d) => format!("answering for {d:?}"),
                    None => "dead".to_owned(),
                }
            )
        });
        for conn in conns {
            conn.reset();
        }
        let missing = one_misses.then(|| rng.below(sentinels.len() as u64) as usize);
        for (i, sentinel) in sentinels.iter().enumerate() {
            if Some(i) == missing {
                self.log(|| format!("{sentinel} misses the failover"));
                continue;
            }
            let (world, sentinel, to) = (self.clone(), sentinel.clone(), to.to_owned());
            let after = Duration::from_millis(rng.below(1500));
            tokio::spawn(async move {
                tokio::time::sleep(after).await;
                {
                    let mut s = world.state();
                    if let Some(t) = &mut s.sentinel {
                        t.views.insert(sentinel.clone(), (to.clone(), epoch));
                    }
                    s.note_views();
                }
                world.log(|| format!("{sentinel} names {to} (epoch {epoch})"));
            });
        }
        if let Some(lives) = old_lives {
            tokio::time::sleep(lives).await;
            if let Some(t) = &mut self.state().sentinel {
                t.replica_of.insert(old.clone(), Some(to.to_owned()));
            }
            self.replicate_to(&old, to);
            self.log(|| format!("{old} is turned into a replica of {to}"));
        }
    }

    /// The cluster's slot map now.
    pub fn cluster_map(&self) -> Option<ClusterMap> {
        self.state().cluster.clone()
    }

    /// The replica copies every write of its master so far (asynchronous
    /// replication, caught up).
    pub fn replicate_to(&self, replica: &str, master: &str) {
        let mut s = self.state();
        // Only while it is that master's replica (a promoted one is not).
        if s.cluster
            .as_ref()
            .is_some_and(|m| m.replica_of.get(replica).is_none_or(|of| of != master))
            || s.sentinel.as_ref().is_some_and(|t| {
                t.replica_of
                    .get(replica)
                    .is_none_or(|of| of.as_deref() != Some(master))
            })
        {
            return;
        }
        let Some(data) = s.nodes.get(master).map(|m| m.server.data_copy()) else {
            return;
        };
        if let Some(r) = s.nodes.get_mut(replica) {
            r.server.copy_data_from(&data);
        }
    }

    /// Fault: a cluster master dies (its connections drop, new ones are
    /// refused) and its replica takes over its slots, with the data it has.
    pub fn kill_and_promote(&self, master: &str, replica: &str) {
        let mut s = self.state();
        let conns = s.conns_to(master);
        if let Some(map) = &mut s.cluster {
            map.down.insert(master.to_owned());
            map.take_over(master, replica);
        }
        drop(s);
        self.log(|| format!("FAULT {master} dies; its replica {replica} takes over its slots"));
        for conn in conns {
            conn.reset();
        }
    }

    /// Fault, in steps: `slot` migrates from its owner to `to`. Each key
    /// of the slot moves after its own delay (MIGRATE), meanwhile the
    /// owner answers ASK for keys already gone and TRYAGAIN for a split
    /// command; at the end the slot is `to`'s (MOVED from then on).
    pub async fn migrate_slot(&self, slot: u16, to: &str, mut rng: Rng) {
        let from = {
            let mut s = self.state();
            let Some(map) = &mut s.cluster else { return };
            let from = map.owner(slot).to_owned();
            // One migration of a slot at a time, as Redis refuses another
            // (CLUSTER SETSLOT .. MIGRATING of a slot being migrated; seeds
            // 29009 and 10025 split a lock's keys over three nodes so).
            if from == to
                || map.down.contains(to)
                || map.down.contains(&from)
                || map.migrating.contains_key(&slot)
            {
                return;
            }
            map.migrating.insert(slot, to.to_owned());
            from
        };
        self.log(|| format!("FAULT slot {slot} migrates from {from} to {to}"));
        loop {
            tokio::time::sleep(Duration::from_millis(rng.range(1, 50))).await;
            let moved = {
                let mut s = self.state();
                if s.cluster
                    .as_ref()
                    .is_none_or(|m| m.migrating.get(&slot).is_none_or(|t| t != to))
                {
                    return; // a failover ended the migration
                }
                if !(s.nodes.contains_key(&from) && s.nodes.contains_key(to)) {
                    return;
                }
                let mut a = s.nodes.remove(&from).expect("checked");
                let mut b = s.nodes.remove(to).expect("checked");
                // One key of the slot per step (MIGRATE moves one).
                let first = a
                    .server
                    .key_names()
                    .into_iter()
                    .find(|k| crate::cluster::slot(k) == slot);
                let n = match &first {
                    Some(key) => a.server.move_keys(&mut b.server, |k| k == key),
                    None => 0,
                };
                s.nodes.insert(from.clone(), a);
                s.nodes.insert(to.to_owned(), b);
                n > 0 && first.is_some()
            };
            if !moved {
                break;
            }
        }
        let pushes = {
            let mut s = self.state();
            if let Some(map) = &mut s.cluster {
                map.assign(slot, to);
            }
            let Some(n) = s.nodes.get_mut(&from) else {
                return;
            };
            n.server
                .end_sharded(|channel| crate::cluster::slot(channel) == slot);
            let deliveries = n.server.take_deliveries();
            let mut pushes = Vec::new();
            for d in deliveries {
                if let Some(target) = s.conns.get(&d.conn).and_then(Weak::upgrade) {
                    let delay = World::delay(&mut s);
                    pushes.push((target, d.push, delay));
                }
            }
            pushes
        };
        self.log(|| format!("slot {slot} is {to}'s now"));
        for (target, push, delay) in pushes {
            target.push_later(push, delay);
        }
    }

    /// A dialer for the library: the sockets of every address a driver
    /// dials (whose process the address names), and the library-level
    /// wire of `sim://<node>` URLs for the process `process`
    /// (`--set seam=wire`).
    pub fn dialer(&self, process: usize) -> Arc<dyn Dialer> {
        Arc::new(ProcessDialer {
            world: self.clone(),
            process,
        })
    }

    /// A direct connection to `node` for the workload's own commands (the
    /// fenced resource); no faults.
    pub fn plain(&self, node: &str) -> SimWire {
        let conn = self.connect(
            node,
            usize::MAX,
            Duration::from_secs(3600),
            Arc::new(|_| {}),
        );
        SimWire {
            conn,
            faultless: true,
            waiter_task: false,
        }
    }

    fn connect(&self, node: &str, process: usize, timeout: Duration, on_push: OnPush) -> Arc<Conn> {
        self.connect_with(node, process, timeout, on_push, None)
    }

    /// A driver's socket to `node` for `process` (see [`ClusterMap::host`]);
    /// refused while the node is down.
    pub fn socket(&self, host: &str) -> Result<SimSocket, RedisError> {
        let refused = || {
            RedisError::from(std::io::Error::new(
                std::io::ErrorKind::ConnectionRefused,
                format!("simulated node {host} refuses"),
            ))
        };
        let (process, node) = ClusterMap::parse_host(host).ok_or_else(refused)?;
        {
            let mut s = self.state();
            let id = s.next_conn;
            s.note_connect(process, &node, id);
            if !s.nodes.contains_key(&node)
                || s.down.contains(&node)
                || s.cluster.as_ref().is_some_and(|m| m.down.contains(&node))
            {
                return Err(refused());
            }
        }
        let shared = Arc::new(SocketShared::default());
        let pushed = Arc::clone(&shared);
        // Connecting takes a handshake's delay; one connection in ten waits
        // for a lost SYN to be sent again (1 s): a driver's request sent
        // again after a reset may run long after its first delivery.
        let connecting = {
            let mut s = self.state();
            let handshake = World::delay(&mut s);
            if s.rng.chance(0.1) {
                handshake + Duration::from_secs(1)
            } else {
                handshake
            }
        };
        let conn = self.connect_with(
            &node,
            process,
            Duration::from_secs(3600),
            Arc::new(move |push| pushed.push(push)),
            Some(Arc::clone(&shared)),
        );
        conn.lines().to_server = Instant::now() + connecting;
        let waiter_task = self.state().cluster.is_some();
        Ok(SimSocket::new(
            shared,
            Arc::new(SimWire {
                conn,
                faultless: false,
                waiter_task,
            }),
        ))
    }

    fn connect_with(
        &self,
        node: &str,
        process: usize,
        timeout: Duration,
        on_push: OnPush,
        socket: Option<Arc<SocketShared>>,
    ) -> Arc<Conn> {
        let mut s = self.state();
        assert!(s.nodes.contains_key(node), "no simulated node {node:?}");
        let id = s.next_conn;
        s.next_conn += 1;
        let now = Instant::now();
        let conn = Arc::new(Conn {
            world: self.clone(),
            id,
            node: node.to_owned(),
            process,
            timeout,
            on_push,
            lines: Mutex::new(Lines {
                subscribed: BTreeSet::new(),
                epoch: 0,
                blocked_until: now,
                to_server: now,
                to_client: now,
                sent: 0,
                ran: 0,
            }),
            turn: tokio::sync::Notify::new(),
            socket,
        });
        s.conns.insert(id, Arc::downgrade(&conn));
        conn
    }

    /// The server time of `node` now, in µs: the world's, run at the
    /// node's drift, stepped by its offset, read at its clock's ticks.
    fn node_now_us(s: &State, node: &Node) -> u64 {
        let elapsed = Instant::now().duration_since(s.start).as_micros() as i64;
        let drifted = elapsed + elapsed * node.drift_ppm / 1_000_000;
        let us = (EPOCH_US as i64 + drifted + node.clock_offset_us) as u64;
        match node.tick_us {
            0 => us,
            tick => us - us % tick,
        }
    }

    /// Draws one message's delay.
    fn delay(s: &mut State) -> Duration {
        let f = &s.faults;
        let (slow, max) = (f.slow, f.max_delay_ms);
        let us = if max > 0 && s.rng.chance(slow) {
            s.rng.below(max * 1000)
        } else {
            s.rng.below(1000)
        };
        Duration::from_micros(us)
    }

    fn fate(s: &mut State) -> Fate {
        let (before, after) = (s.faults.reset_before, s.faults.reset_after);
        if s.rng.chance(before) {
            Fate::ResetBefore
        } else if s.rng.chance(after) {
            Fate::ResetAfter
        // No draw at all without it: earlier seeds keep their schedules.
        } else if s.faults.twice > 0.0 && s.rng.chance(s.faults.twice) {
            Fate::Twice
        } else {
            Fate::Delivered
        }
    }

    /// Until when `node` is paused, if it is now.
    fn paused_until(&self, node: &str) -> Option<Instant> {
        let s = self.state();
        let until = s.nodes.get(node)?.paused_until?;
        (until > Instant::now()).then_some(until)
    }

    /// Runs `args` on `node` for connection `conn` now, and carries what it
    /// published to the subscribers.
    fn exec(&self, node: &str, conn: u64, args: &[Vec<u8>]) -> Value {
        let mut s = self.state();
        s.commands += 1;
        if args
            .first()
            .is_some_and(|a| a.eq_ignore_ascii_case(b"EVALSHA") || a.eq_ignore_ascii_case(b"EVAL"))
        {
            s.scripts += 1;
        }
        let n = s.nodes.get(node).expect("a node of the world");
        let now_us = World::node_now_us(&s, n);
        s.digest_command(node, now_us, conn, args);
        let n = s.nodes.get_mut(node).expect("a node of the world");
        let reply = n.server.exec(conn, now_us, args);
        let deliveries = n.server.take_deliveries();
        if let Some((script, _, argv)) = lock_script(args) {
            s.check_renewals(node, script, argv, &reply);
        }
        // EVALSHA sha 2 key fence_key fence value expiry: fenced::set.
        if node == "resource"
            && args.len() == 8
            && matches!(&reply, Value::Okay)
            && let (Ok(key), Some(fence)) = (
                std::str::from_utf8(&args[3]),
                std::str::from_utf8(&args[5])
                    .ok()
                    .and_then(|f| f.parse().ok()),
            )
        {
            s.accepted.push((key.to_owned(), fence));
        }
        if s.history.full.is_some() && std::env::var_os("LEASEHOLD_SIM_WIRE").is_some() {
            let at = Instant::now().duration_since(s.start);
            let short = |a: &[u8]| String::from_utf8_lossy(&a[..a.len().min(24)]).into_owned();
            let shown: Vec<String> = match self::lock_script(args) {
                // The script by name, its first key and ARGV[1] (a token).
                Some((name, keys, argv)) => [name.to_owned()]
                    .into_iter()
                    .chain(keys.first().map(|k| short(k)))
                    .chain(argv.first().map(|a| short(a)))
                    .collect(),
                None => args.iter().take(4).map(|a| short(a)).collect(),
            };
            s.history.push(
                at,
                format!("WIRE {node} conn {conn} {shown:?} -> {reply:?}"),
            );
        }
        let mut pushes = Vec::new();
        for d in deliveries {
            if let Some(target) = s.conns.get(&d.conn).and_then(Weak::upgrade) {
                let delay = World::delay(&mut s);
                pushes.push((target, d.push, delay));
            }
        }
        drop(s);
        for (target, push, delay) in pushes {
            target.push_later(push, delay);
        }
        reply
    }

    /// The timeout of a WAIT command, if `args` is one.
    fn wait_args(args: &[Vec<u8>]) -> Option<Duration> {
        if !args.first()?.eq_ignore_ascii_case(b"WAIT") {
            return None;
        }
        let ms: u64 = std::str::from_utf8(args.get(2)?).ok()?.parse().ok()?;
        Some(Duration::from_millis(ms))
    }

    /// A WAIT for one replica on `node`: the replica acknowledges nine in
    /// ten at once (it then has every write so far); the others it misses,
    /// and the WAIT blocks its connection until its timeout.
    fn wait_acked(&self, node: &str, conn: u64, args: &[Vec<u8>]) -> bool {
        let mut s = self.state();
        s.commands += 1;
        let n = s.nodes.get(node).expect("a node of the world");
        let now_us = World::node_now_us(&s, n);
        s.digest_command(node, now_us, conn, args);
        let acked = s.rng.chance(0.9);
        let n = s.nodes.get_mut(node).expect("a node of the world");
        let Some(replica) = &mut n.replica else {
            return false;
        };
        if acked {
            replica.copy_data_from(&n.server);
        }
        acked
    }

    /// Fault: `node` runs nothing for `length` (requests wait, as on a
    /// SIGSTOPped server).
    pub fn pause(&self, node: &str, length: Duration) {
        let mut s = self.state();
        if let Some(n) = s.nodes.get_mut(node) {
            n.paused_until = Some(Instant::now() + length);
        }
        drop(s);
        self.log(|| format!("FAULT pause {node} for {length:?}"));
    }

    /// Fault: nothing process `process` sends or is sent moves for
    /// `length` (a process stopped, or its host's network stalled; its
    /// timers still run, so the library sees the time pass as it would).
    pub fn stall_process(&self, process: usize, length: Duration) {
        self.state()
            .stalled
            .insert(process, Instant::now() + length);
        self.log(|| format!("FAULT process p{process} stalls for {length:?}"));
    }

    /// Until when `process`'s messages are held, if they are now.
    fn stalled_until(&self, process: usize) -> Option<Instant> {
        let s = self.state();
        let until = *s.stalled.get(&process)?;
        (until > Instant::now()).then_some(until)
    }

    /// Fault: `node`'s clock jumps by `step_us` (negative: back).
    pub fn step_clock(&self, node: &str, step_us: i64) {
        if let Some(n) = self.state().nodes.get_mut(node) {
            n.clock_offset_us += step_us;
        }
        self.log(|| format!("FAULT clock of {node} steps {step_us} us"));
    }

    /// Fault: SCRIPT FLUSH on `node`.
    pub fn flush_scripts(&self, node: &str) {
        if let Some(n) = self.state().nodes.get_mut(node) {
            n.server.flush_scripts();
        }
        self.log(|| format!("FAULT script cache of {node} flushed"));
    }

    /// Fault: `node` restarts, from its AOF (every write kept: appendfsync
    /// always) or empty; every connection to it drops.
    pub fn restart(&self, node: &str, from_aof: bool) {
        let mut s = self.state();
        let conns = s.conns_to(node);
        if let Some(n) = s.nodes.get_mut(node) {
            n.server = if from_aof {
                n.server.data_copy()
            } else {
                Server::new(n.flavor)
            };
        }
        drop(s);
        self.log(|| {
            format!(
                "FAULT restart {node} {}",
                if from_aof { "from AOF" } else { "empty" }
            )
        });
        for conn in conns {
            conn.reset();
        }
    }

    /// Gives `node` a replica (empty until the first replication).
    pub fn add_replica(&self, node: &str) {
        if let Some(n) = self.state().nodes.get_mut(node) {
            n.replica = Some(Server::new(n.flavor));
        }
    }

    /// Asynchronous replication: the replica catches up with every write so far.
    pub fn replicate(&self, node: &str) {
        if let Some(n) = self.state().nodes.get_mut(node)
            && let Some(replica) = &mut n.replica
        {
            replica.copy_data_from(&n.server);
        }
    }

    /// Fault: the replica of `node` takes over, without the writes it had
    /// not received yet; every connection drops.
    pub fn failover(&self, node: &str) {
        let mut s = self.state();
        let conns = s.conns_to(node);
        if let Some(n) = s.nodes.get_mut(node)
            && let Some(replica) = &n.replica
        {
            n.server = replica.data_copy();
        }
        drop(s);
        self.log(|| format!("FAULT failover of {node} to its replica"));
        for conn in conns {
            conn.reset();
        }
    }

    /// `node`'s server time now, in ms.
    pub fn node_now_ms(&self, node: &str) -> i64 {
        let s = self.state();
        let n = s.nodes.get(node).expect("a node of the world");
        (World::node_now_us(&s, n) / 1000) as i64
    }

    /// Every live key of `node` now.
    pub fn dump(&self, node: &str) -> Vec<crate::server::KeyDump> {
        let s = self.state();
        let n = s.nodes.get(node).expect("a node of the world");
        let now = World::node_now_us(&s, n);
        n.server.dump(now)
    }

    /// The names of the world's nodes.
    pub fn nodes(&self) -> Vec<String> {
        self.state().nodes.keys().cloned().collect()
    }
}

struct ProcessDialer {
    world: World,
    process: usize,
}

impl Dialer for ProcessDialer {
    fn dial(
        &self,
        name: &str,
        command_timeout: Duration,
        on_push: OnPush,
    ) -> Result<Arc<dyn Wire>, RedisError> {
        let conn = self
            .world
            .connect(name, self.process, command_timeout, on_push);
        Ok(Arc::new(SimWire {
            conn,
            faultless: false,
            waiter_task: false,
        }))
    }

    fn dial_socket(
        &self,
        host: &str,
        _port: u16,
    ) -> Result<Box<dyn leasehold::sim::Socket>, RedisError> {
        Ok(Box::new(self.world.socket(host)?))
    }
}

/// One simulated connection.
struct Conn {
    world: World,
    id: u64,
    node: String,
    process: usize,
    timeout: Duration,
    on_push: OnPush,
    lines: Mutex<Lines>,
    /// Woken whenever a request of this connection is done at the server,
    /// so the next one may run ([`Lines::ran`]).
    turn: tokio::sync::Notify,
    /// The driver's socket, for a connection a driver opened (a cluster
    /// node's): a reset ends its stream and the driver reconnects itself.
    socket: Option<Arc<SocketShared>>,
}

/// The connection's two directions (FIFO each) and its subscriptions.
struct Lines {
    subscribed: BTreeSet<String>,
    /// Bumped by each reset: a request sent on an earlier connection fails
    /// whether it had reached the server or not, as everything in flight
    /// on a dropped TCP connection does.
    epoch: u64,
    /// Until when the server runs nothing more of this connection (a WAIT
    /// without its acknowledgements blocks its client until its timeout).
    blocked_until: Instant,
    /// When the last request sent reaches the server.
    to_server: Instant,
    /// When the last reply or push sent reaches the client.
    to_client: Instant,
    /// Requests sent on this connection so far: each is numbered as it
    /// is sent.
    sent: u64,
    /// Requests done at the server: the one numbered so runs next. The
    /// server runs a connection's requests in the order they were sent,
    /// also those held up together by a pause (each one waits for its
    /// own wake-up, and the timer's order at one instant is not the
    /// sending order: seed 532 ran a release before the acquisition
    /// sent ahead of it on the same connection, across three pauses).
    ran: u64,
}

/// A request's place in its connection's order: done (the next may run)
/// when dropped, whatever became of it.
struct Turn(Arc<Conn>);

impl Drop for Turn {
    fn drop(&mut self) {
        self.0.lines().ran += 1;
        self.0.turn.notify_waiters();
    }
}

impl Conn {
    fn lines(&self) -> MutexGuard<'_, Lines> {
        self.lines.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// When a message sent now after `delay` arrives, after every earlier
    /// one in that direction.
    fn arrival(&self, delay: Duration, to_server: bool) -> Instant {
        let stalled = self.world.stalled_until(self.process);
        let mut lines = self.lines();
        let line = if to_server {
            &mut lines.to_server
        } else {
            &mut lines.to_client
        };
        *line = (*line).max(Instant::now() + delay);
        if let Some(until) = stalled {
            *line = (*line).max(until + delay);
        }
        *line
    }

    fn push_later(self: Arc<Self>, push: PushInfo, delay: Duration) {
        let at = self.arrival(delay, false);
        tokio::spawn(async move {
            tokio::time::sleep_until(at).await;
            // A break notice that reaches a live connection: its holder's
            // guard is lost from now on (World::notices).
            let live = self.socket.as_ref().is_none_or(|s| !s.is_closed());
            if let (true, [channel, payload]) = (live, push.data.as_slice())
                && matches!(push.kind, PushKind::Message | PushKind::SMessage)
                && let (Value::BulkString(channel), Value::BulkString(payload)) = (channel, payload)
                && channel.ends_with(b":broken")
            {
                let mut s = self.world.state();
                s.notices
                    .push((self.process, payload.clone(), Instant::now()));
            }
            (self.on_push)(push);
        });
    }

    /// The connection drops: the server forgets its subscriptions; the
    /// client reconnects, subscribes every channel again, then is told of
    /// the disconnection (which wakes its waiters), as `Managed` does.
    fn reset(self: &Arc<Self>) {
        self.lines().epoch += 1;
        let node = self.node.clone();
        {
            let mut s = self.world.state();
            if let Some(n) = s.nodes.get_mut(&node) {
                n.server.disconnect(self.id);
            }
        }
        let (id, process) = (self.id, self.process);
        self.world
            .log(|| format!("NET p{process} conn {id} to {node} reset"));
        if let Some(socket) = &self.socket {
            socket.close();
            return;
        }
        let conn = Arc::clone(self);
        tokio::spawn(async move {
            let delay = {
                let mut s = conn.world.state();
                Duration::from_millis(s.rng.range(5, 60))
            };
            tokio::time::sleep(delay).await;
            while let Some(until) = conn.world.paused_until(&conn.node) {
                tokio::time::sleep_until(until).await;
            }
            let channels: Vec<String> = conn.lines().subscribed.iter().cloned().collect();
            for channel in channels {
                let args = vec![b"SUBSCRIBE".to_vec(), channel.into_bytes()];
                conn.world.exec(&conn.node, conn.id, &args);
            }
            (conn.on_push)(PushInfo {
                kind: PushKind::Disconnection,
                data: vec![],
            });
        });
    }
}

/// The library's side of a simulated connection.
pub struct SimWire {
    conn: Arc<Conn>,
    faultless: bool,
    /// A cluster node's socket: each reply reaches the socket through a
    /// task of its own that waits for it, as before the other topologies
    /// moved to sockets, so the cluster seeds of regressions.txt replay the
    /// schedules that found them (one task less per request elsewhere).
    waiter_task: bool,
}

fn args_of(cmd: &Cmd) -> Vec<Vec<u8>> {
    cmd.args_iter()
        .map(|arg| match arg {
            redis::Arg::Simple(bytes) => bytes.to_vec(),
            other => panic!("the simulator does not model the argument {other:?}"),
        })
        .collect()
}

fn io_error(kind: std::io::ErrorKind, what: &str) -> RedisError {
    RedisError::from(std::io::Error::new(kind, what.to_owned()))
}

impl SimWire {
    /// Sends `args` and gives the reply, with the network's delays and
    /// faults; the request runs on the server even if the caller drops the
    /// future or times out.
    fn send(&self, args: Vec<Vec<u8>>) -> WireFuture<Result<Value, RedisError>> {
        let (tx, rx) = oneshot::channel();
        self.dispatch(
            args,
            Box::new(move |reply| {
                let _ = tx.send(reply);
            }),
        );
        let timeout = self.conn.timeout;
        Box::pin(async move {
            match tokio::time::timeout(timeout, rx).await {
                Ok(Ok(reply)) => reply,
                Ok(Err(_)) => Err(io_error(std::io::ErrorKind::ConnectionReset, "dropped")),
                Err(_) => Err(io_error(std::io::ErrorKind::TimedOut, "timed out")),
            }
        })
    }

    /// Sends `args` with the network's delays and faults, and hands the
    /// reply (or the connection's reset) to `deliver` when it arrives; the
    /// request runs on the server whatever became of its caller.
    fn dispatch(&self, args: Vec<Vec<u8>>, deliver: Deliver) {
        let conn = Arc::clone(&self.conn);
        let socket = conn.socket.is_some();
        let (out, fate, again, driver_resends) = {
            let mut s = conn.world.state();
            let delay = World::delay(&mut s);
            let fate = match self.faultless {
                true => Fate::Delivered,
                false => World::fate(&mut s),
            };
            // Who sends a request twice: on a cluster, the driver itself
            // (the reply is lost with the connection, and redis-rs's cluster
            // connection sends the request again once it has reconnected);
            // elsewhere the client's connection (a connection manager's)
            // never re-sends, and a retrying proxy in front of the server
            // (Envoy, twemproxy) does: the server runs the request twice and
            // the client's connection stays up ([`Fate::Twice`]).
            let driver_resends = socket && s.cluster.is_some();
            let fate = match fate {
                Fate::Twice if driver_resends => Fate::ResetAfter,
                // An operator's break on a driver's socket (the scripts that
                // remove holds), where a
                // schedule draws re-sends at all: its first delivery's
                // reply is lost every other time (a break is rare, and a
                // break run twice must break no holder that came after it).
                Fate::Delivered
                    if socket
                        && s.operator == Some(conn.process)
                        && s.faults.twice > 0.0
                        && script_call(&args).is_some_and(|(name, _, _)| {
                            // What a break runs: lease_break, or a plain
                            // lock's release with its holder's token.
                            name == "lease_break" || name.ends_with("_release")
                        })
                        && !s.lost_replies.contains(&(conn.process, args.clone()))
                        && s.rng.chance(0.5) =>
                {
                    if driver_resends {
                        Fate::ResetAfter
                    } else {
                        Fate::Twice
                    }
                }
                fate => fate,
            };
            // The same request again from the same process, after a reset
            // lost its reply: a second delivery (the driver's re-send).
            let again = driver_resends && s.lost_replies.remove(&(conn.process, args.clone()));
            if again {
                s.duplicates += 1;
            }
            (delay, fate, again, driver_resends)
        };
        if again {
            let (p, id) = (conn.process, conn.id);
            conn.world
                .log(|| format!("NET p{p} conn {id}: a request whose reply was lost, sent again"));
        }
        let arrive = conn.arrival(out, true);
        let (mut epoch, seq) = {
            let mut lines = conn.lines();
            lines.sent += 1;
            (lines.epoch, lines.sent - 1)
        };
        if !self.faultless {
            conn.world.note_tokens(conn.process, &args);
        }
        let guard_release = conn.world.guard_release(conn.process, &args);
        let server_side = Arc::clone(&conn);
        tokio::spawn(async move {
            let conn = server_side;
            let reset = || Err(io_error(std::io::ErrorKind::ConnectionReset, "reset"));
            tokio::time::sleep_until(arrive).await;
            loop {
                let turn = conn.turn.notified();
                tokio::pin!(turn);
                turn.as_mut().enable();
                let (blocked, ran) = {
                    let lines = conn.lines();
                    (lines.blocked_until, lines.ran)
                };
                if let Some(until) = conn.world.paused_until(&conn.node) {
                    tokio::time::sleep_until(until).await;
                } else if blocked > Instant::now() {
                    tokio::time::sleep_until(blocked).await;
                } else if ran < seq {
                    turn.await;
                } else {
                    break;
                }
            }
            let mut turn = Some(Turn(Arc::clone(&conn)));
            if conn.lines().epoch != epoch {
                deliver(reset());
                return;
            }
            if fate == Fate::ResetBefore {
                conn.reset();
                deliver(reset());
                return;
            }
            let reply = match World::wait_args(&args) {
                Some(timeout) => {
                    if conn.world.wait_acked(&conn.node, conn.id, &args) {
                        Value::Int(1)
                    } else {
                        // Blocks this connection's later requests too.
                        let until = Instant::now() + timeout;
                        conn.lines().blocked_until = until;
                        tokio::time::sleep_until(until).await;
                        Value::Int(0)
                    }
                }
                None => {
                    let mut reply =
                        conn.world
                            .exec_request(&conn.node, conn.id, conn.process, &args, again);
                    if fate == Fate::Twice {
                        if socket {
                            // A proxy's connection to the server dropped
                            // after the server ran it: the proxy sends it
                            // again on a new one; the client's stays up.
                        } else {
                            // The reply is lost with the connection; the
                            // library-level wire sends the request again
                            // once it has reconnected.
                            conn.reset();
                            epoch = conn.lines().epoch;
                        }
                        // Sent again on another connection: it takes no
                        // place in the order of the first one.
                        turn = None;
                        let again = {
                            let mut s = conn.world.state();
                            s.duplicates += 1;
                            s.note_resent(&args);
                            Duration::from_millis(s.rng.range(5, 60))
                        };
                        let process = conn.process;
                        conn.world.log(|| {
                            format!(
                                "NET p{process} conn {} request sent again{}",
                                conn.id,
                                if socket { " by a proxy" } else { "" }
                            )
                        });
                        tokio::time::sleep(again).await;
                        while let Some(until) = conn.world.paused_until(&conn.node) {
                            tokio::time::sleep_until(until).await;
                        }
                        if conn.lines().epoch != epoch {
                            deliver(reset());
                            return;
                        }
                        // A first delivery refused whole (NOSCRIPT, say) ran
                        // nothing: the second is the one that runs.
                        let first_ran = !matches!(reply, Value::ServerError(_));
                        reply = conn.world.exec_request(
                            &conn.node,
                            conn.id,
                            conn.process,
                            &args,
                            first_ran,
                        );
                    }
                    // A release met by NOSCRIPT did not run; its re-send will.
                    if let Some(token) = guard_release
                        && !matches!(reply, Value::ServerError(_))
                    {
                        conn.world.guard_released(&conn.node, token);
                    }
                    reply
                }
            };
            // Done at the server: the next request may run; its reply's
            // way back is its own.
            drop(turn.take());
            if fate == Fate::ResetAfter {
                if driver_resends {
                    let mut s = conn.world.state();
                    s.note_resent(&args);
                    s.lost_replies.insert((conn.process, args.clone()));
                }
                conn.reset();
                deliver(reset());
                return;
            }
            let (back, flush) = {
                let mut s = conn.world.state();
                let back = World::delay(&mut s);
                let late = back.as_millis() as u64 * 2 > s.faults.max_delay_ms
                    && lock_script(&args).is_some_and(|(name, _, _)| name == "lock_acquire");
                let chance = s.faults.flush_after_late_grant;
                // No draw at all without it: earlier seeds keep their schedules.
                (back, late && chance > 0.0 && s.rng.chance(chance))
            };
            let at = conn.arrival(back, false);
            tokio::time::sleep_until(at).await;
            if conn.lines().epoch != epoch {
                deliver(reset());
                return;
            }
            if flush {
                conn.world.flush_scripts(&conn.node);
            }
            deliver(Ok(reply));
        });
    }
}

impl Carrier for SimWire {
    fn dispatch(&self, args: Vec<Vec<u8>>, deliver: Deliver) {
        // A sentinel's answer (its `SENTINEL MASTER` reply, the second of
        // its two) that reaches the client counts for its round.
        let answer = args.len() >= 2
            && args[0].eq_ignore_ascii_case(b"SENTINEL")
            && args[1].eq_ignore_ascii_case(b"MASTER");
        let deliver: Deliver = if answer {
            let conn = Arc::clone(&self.conn);
            Box::new(move |reply| {
                if reply.is_ok() {
                    let mut s = conn.world.state();
                    if let Some(round) = s
                        .rounds
                        .get_mut(&conn.process)
                        .filter(|r| r.conns.contains(&conn.id))
                    {
                        round.answered.insert(conn.id);
                    }
                }
                deliver(reply);
            })
        } else {
            deliver
        };
        if self.waiter_task {
            let reply = SimWire::send(self, args);
            tokio::spawn(async move { deliver(reply.await) });
        } else {
            SimWire::dispatch(self, args, deliver);
        }
    }

    /// The driver dropped its socket: the server forgets its subscriptions.
    fn hang_up(&self) {
        let mut s = self.conn.world.state();
        // A sentinel's connection of a round, hung up before its answer
        // came although it could still come.
        let (now, timeout) = (Instant::now(), s.command_timeout);
        let live = self.conn.lines().epoch == 0;
        if let Some(round) = s.rounds.get_mut(&self.conn.process)
            && round.conns.contains(&self.conn.id)
            && !round.answered.contains(&self.conn.id)
            && live
            && now.duration_since(round.start) < timeout
            && round.abandoned.is_none()
        {
            round.abandoned = Some((now, round.answered.len()));
        }
        s.asking.remove(&self.conn.id);
        if let Some(n) = s.nodes.get_mut(&self.conn.node) {
            n.server.disconnect(self.conn.id);
        }
    }
}

impl Wire for SimWire {
    fn request(&self, cmd: &Cmd) -> WireFuture<Result<Value, RedisError>> {
        self.send(args_of(cmd))
    }

    fn pipeline(&self, cmds: Vec<Cmd>) -> WireFuture<Result<Vec<Value>, RedisError>> {
        let replies: Vec<_> = cmds.iter().map(|c| self.send(args_of(c))).collect();
        Box::pin(async move {
            let mut out = Vec::with_capacity(replies.len());
            for reply in replies {
                out.push(reply.await?);
            }
            Ok(out)
        })
    }

    fn subscribe(&self, channel: &str) -> WireFuture<Result<(), RedisError>> {
        let reply = self.send(vec![b"SUBSCRIBE".to_vec(), channel.as_bytes().to_vec()]);
        let conn = Arc::clone(&self.conn);
        let channel = channel.to_owned();
        Box::pin(async move {
            match reply.await? {
                Value::ServerError(e) => Err(e.into()),
                _ => {
                    conn.lines().subscribed.insert(channel);
                    Ok(())
                }
            }
        })
    }

    fn unsubscribe(&self, channel: &str) -> WireFuture<Result<(), RedisError>> {
        let reply = self.send(vec![b"UNSUBSCRIBE".to_vec(), channel.as_bytes().to_vec()]);
        let conn = Arc::clone(&self.conn);
        let channel = channel.to_owned();
        Box::pin(async move {
            conn.lines().subscribed.remove(&channel);
            match reply.await? {
                Value::ServerError(e) => Err(e.into()),
                _ => Ok(()),
            }
        })
    }
}

impl redis::aio::ConnectionLike for SimWire {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a Cmd) -> redis::RedisFuture<'a, Value> {
        let reply = self.send(args_of(cmd));
        Box::pin(async move { reply.await?.extract_error() })
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        pipeline: &'a redis::Pipeline,
        _offset: usize,
        _count: usize,
    ) -> redis::RedisFuture<'a, Vec<Value>> {
        Wire::pipeline(self, pipeline.cmd_iter().cloned().collect())
    }

    fn get_db(&self) -> i64 {
        0
    }
}
