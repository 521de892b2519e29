//! One schedule: a world drawn from a seed, simulated processes running the
//! shipped client against it, faults, and the checker's verdict.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use leasehold::{Client, Error};
use tokio::time::Instant;

use crate::history::{Hold, Sharing, Violation, check_holds, check_notices};
use crate::rng::Rng;
use crate::server::{DumpValue, Flavor};
use crate::world::{Faults, World};

/// How long a waiter stays queued without trying again (the library's
/// queue window, `lock_acquire.lua` ARGV[4]).
const QUEUE_WINDOW: Duration = Duration::from_secs(3);

/// Which servers the clients use.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Topology {
    /// One server.
    Single,
    /// Redlock over this many independent masters.
    Redlock(usize),
    /// One master with a replica; clients ask for `min_replicas(1, ..)`.
    Replicated,
    /// A Redis Cluster of three masters (c0, c1, c2), each with a replica
    /// (c0r, ..), reached through redis-rs's cluster driver as shipped.
    Cluster,
    /// A master (m0) with two replicas (m1, m2), watched by three sentinels
    /// (s0, s1, s2), followed by the library's own Sentinel code.
    Sentinel,
}

/// The primitive a schedule's names are used as.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// `Client::lock`.
    Lock,
    /// `Client::fair_lock`.
    FairLock,
    /// `Client::reentrant_lock`, one owner per process.
    Reentrant,
    /// `Client::rw_lock`: readers and writers.
    RwLock,
    /// `Client::semaphore` with this many permits.
    Semaphore(u32),
    /// `Client::election`: campaigns; a leadership is a hold.
    Election,
}

impl Kind {
    fn sharing(self) -> Sharing {
        match self {
            Kind::Lock | Kind::FairLock | Kind::Election => Sharing::Exclusive,
            Kind::Reentrant => Sharing::PerOwner,
            Kind::RwLock => Sharing::ReadWrite,
            Kind::Semaphore(n) => Sharing::Permits(n),
        }
    }
}

/// A fault the schedule injects at a drawn moment.
#[derive(Debug, Clone, PartialEq)]
pub enum Injected {
    /// A node runs nothing for a while.
    Pause(String, Duration),
    /// SCRIPT FLUSH.
    FlushScripts(String),
    /// A restart from an AOF written with appendfsync always.
    RestartAof(String),
    /// A restart with no data (no persistence): UNSAFE, documented.
    RestartEmpty(String),
    /// The server clock steps by µs: UNSAFE beyond the documented bound.
    ClockStep(String, i64),
    /// The replica takes over, missing the writes since the last
    /// replication: UNSAFE, documented.
    Failover(String),
    /// Nothing this process sends or receives moves for a while.
    Stall(usize, Duration),
    /// A cluster master dies and its replica takes over its slots: with
    /// every write the master had (true), or missing those since the last
    /// replication (UNSAFE, documented).
    Promote(String, bool),
    /// The slot of lock name `n<i>` migrates to another master (MIGRATING,
    /// IMPORTING, ASK, then MOVED).
    Migrate(usize, String),
    /// A Sentinel failover to this replica: with every write of the master
    /// (else UNSAFE, documented); the old master dead, or answering as a
    /// master for this long (UNSAFE, documented: a split brain); one
    /// sentinel missing it.
    SentinelFailover {
        /// The replica promoted.
        to: String,
        /// It had every write of the master.
        caught_up: bool,
        /// How long the old master answers as one (None: it died).
        old_lives: Option<Duration>,
        /// One sentinel never learns of the failover.
        one_misses: bool,
    },
    /// `Client::close()` of this process, whatever its tasks are doing.
    Close(usize),
}

impl Injected {
    /// The documented unsafety this fault brings, if any: violations in a
    /// schedule with one are counted apart, never as failures.
    pub fn unsafe_label(&self) -> Option<&'static str> {
        match self {
            Injected::RestartEmpty(_) => Some("restart without persistence"),
            Injected::ClockStep(..) => Some("server clock step"),
            Injected::Failover(_) => Some("failover to a replica missing writes"),
            Injected::Promote(_, false) => Some("failover to a replica missing writes"),
            Injected::SentinelFailover {
                caught_up: false, ..
            } => Some("failover to a replica missing writes"),
            Injected::SentinelFailover {
                old_lives: Some(_), ..
            } => Some("an old master answering after its failover"),
            _ => None,
        }
    }
}

/// Everything a seed decides before the schedule runs.
#[derive(Debug, Clone)]
pub struct Config {
    /// The seed.
    pub seed: u64,
    /// Servers.
    pub topology: Topology,
    /// The primitive.
    pub kind: Kind,
    /// Simulated client processes (one `Client` each).
    pub processes: usize,
    /// Tasks per process, each a loop of operations.
    pub tasks: usize,
    /// Lock names shared by all.
    pub names: usize,
    /// Lease TTL.
    pub ttl: Duration,
    /// Operations per task, at most.
    pub ops: usize,
    /// The clients' command timeout.
    pub command_timeout: Duration,
    /// Network faults.
    pub faults: Faults,
    /// Node faults and when (from the start).
    pub injected: Vec<(Duration, Injected)>,
    /// Simulated time the workload runs for.
    pub length: Duration,
    /// Chance per waiting acquisition that its process closes its client
    /// right at the acquisition's deadline (within a few ms either side):
    /// the last try at a deadline meets `close()`.
    pub close_at_deadline: f64,
    /// When an operator breaks a name (`Client::break_lease` from a
    /// process of its own), from the start.
    pub breaks: Vec<Duration>,
    /// Each lock node's clock: its granularity in µs (0: continuous) and
    /// its drift in parts per million.
    pub clocks: Vec<(u64, i64)>,
    /// Another program writes a key of its own where one of name `n0`'s
    /// keys is (one server only): when, the key's suffix (`lock`, `fence`,
    /// `queue`, `alive`, `leader`, `writers`) and its type (`string`,
    /// `hash`, `zset`).
    pub foreign: Option<(Duration, &'static str, &'static str)>,
    /// One server, Replicated and Redlock on the library-level seam
    /// (`sim://` URLs, the world's `SimWire` as the library's `Wire`), as
    /// before the seam moved to the socket (`--set seam=wire`): the
    /// regression seeds found there replay their schedules so.
    pub wire_seam: bool,
}

impl Config {
    /// The configuration `seed` draws.
    pub fn draw(seed: u64) -> Config {
        Config::draw_with(seed, true)
    }

    /// The configuration `seed` draws; `clusters`: false keeps a schedule
    /// drawn as one server on one server (as seeds were before Redis Cluster
    /// was simulated: `--set cluster=0`).
    pub fn draw_with(seed: u64, clusters: bool) -> Config {
        let mut r = Rng::new(seed);
        let topology = match r.below(11) {
            0..=5 => Topology::Single,
            10 => Topology::Replicated,
            6..=8 => Topology::Redlock(3),
            _ => Topology::Redlock(5),
        };
        let kind = if topology == Topology::Single {
            match r.below(7) {
                0 | 1 => Kind::Lock,
                2 => Kind::FairLock,
                3 => Kind::Reentrant,
                4 => Kind::RwLock,
                5 => Kind::Election,
                _ => Kind::Semaphore(r.range(1, 3) as u32),
            }
        } else {
            // Redlock serves Lock only.
            Kind::Lock
        };
        let ttl = Duration::from_millis(*r.pick(&[100, 300, 1000, 3000]));
        let slow_network = r.chance(0.5);
        let faults = Faults {
            max_delay_ms: if slow_network {
                r.range(1, ttl.as_millis() as u64 * 2)
            } else {
                2
            },
            slow: if slow_network {
                r.range(1, 20) as f64 / 100.0
            } else {
                0.0
            },
            reset_before: if r.chance(0.4) { 0.01 } else { 0.0 },
            reset_after: if r.chance(0.4) { 0.01 } else { 0.0 },
            flush_after_late_grant: 0.0,
            twice: 0.0,
        };
        let length = Duration::from_secs(r.range(3, 12));
        let nodes = node_names(topology);
        let mut injected = Vec::new();
        for _ in 0..r.below(4) {
            let at = Duration::from_millis(r.below(length.as_millis() as u64));
            let node = r.pick(&nodes).clone();
            let fault = match r.below(if topology == Topology::Replicated {
                11
            } else {
                10
            }) {
                0..=3 => Injected::Pause(
                    node,
                    Duration::from_millis(r.range(1, ttl.as_millis() as u64 * 3)),
                ),
                4..=5 => Injected::FlushScripts(node),
                6..=7 => Injected::RestartAof(node),
                8 => Injected::RestartEmpty(node),
                9 => Injected::ClockStep(node, r.range(1, 2_000_000) as i64 - 1_000_000),
                _ => Injected::Failover(node),
            };
            injected.push((at, fault));
        }
        if matches!(topology, Topology::Redlock(_)) {
            // Script flushes in bursts: a give-back re-sent after NOSCRIPT
            // may land after the attempt that follows it.
            let at = r.below(length.as_millis() as u64);
            for i in 0..r.below(6) {
                let node = r.pick(&nodes).clone();
                injected.push((
                    Duration::from_millis(at + i * r.range(1, 50)),
                    Injected::FlushScripts(node),
                ));
            }
        }
        let processes = r.range(2, 4) as usize;
        if r.chance(0.2) {
            let at = Duration::from_millis(r.below(length.as_millis() as u64));
            injected.push((at, Injected::Close(r.below(processes as u64) as usize)));
        }
        if r.chance(0.3) {
            let at = Duration::from_millis(r.below(length.as_millis() as u64));
            let p = r.below(processes as u64) as usize;
            let stall = Duration::from_millis(r.range(1, ttl.as_millis() as u64 * 3));
            injected.push((at, Injected::Stall(p, stall)));
        }
        let mut config = Config {
            seed,
            topology,
            kind,
            processes,
            tasks: r.range(1, 3) as usize,
            names: r.range(1, 2) as usize,
            ttl,
            ops: 40,
            command_timeout: Duration::from_millis(*r.pick(&[500, 2000])),
            faults,
            injected,
            length,
            // Drawn last: the draws above stay what they were for every seed.
            close_at_deadline: if r.chance(0.15) { 0.1 } else { 0.0 },
            breaks: Vec::new(),
            clocks: Vec::new(),
            foreign: None,
            wire_seam: false,
        };
        if matches!(topology, Topology::Redlock(_)) && r.chance(0.3) {
            config.faults.flush_after_late_grant = 0.5;
        }
        // Drawn after everything above, which stays what it was for every
        // seed: duplicate deliveries, an operator's breaks, server clocks.
        // Not on Redlock: its masters are independent servers reached by
        // plain connections (redis-rs's multiplexed connection and its
        // connection manager), which never send a request twice, and the
        // library's own retries are new requests sent after the last one's
        // answer or failure (SAFETY.md; seeds 7132, 8058 and 15577 broke
        // Redlock only by a re-send run after later requests of its client).
        // On one server, a Replicated master and Sentinel it is a retrying
        // proxy in front of the server; on a cluster the driver as shipped
        // sends again (world.rs, `Faults::twice`).
        if r.chance(0.3) && !matches!(topology, Topology::Redlock(_)) {
            config.faults.twice = *r.pick(&[0.01, 0.03]);
        }
        if r.chance(0.3) {
            for _ in 0..r.range(1, 4) {
                config
                    .breaks
                    .push(Duration::from_millis(r.below(length.as_millis() as u64)));
            }
            config.breaks.sort();
        }
        config.clocks = nodes
            .iter()
            .map(|_| {
                let tick = *r.pick(&[0, 0, 1_000, 15_625]);
                let drift = if r.chance(0.5) {
                    r.range(0, 100) as i64 - 50
                } else {
                    0
                };
                (tick, drift)
            })
            .collect();
        if topology == Topology::Single && r.chance(0.2) {
            let at = Duration::from_millis(r.below(length.as_millis() as u64));
            let suffix = *r.pick(&["lock", "fence", "queue", "alive", "leader", "writers"]);
            let kind = *r.pick(&["string", "hash", "zset"]);
            // A sorted set at a waiters' key is read as waiters (KEYS.md
            // says so): that one is not drawn.
            let kind = if matches!(suffix, "queue" | "alive" | "writers") && kind == "zset" {
                "hash"
            } else {
                kind
            };
            config.foreign = Some((at, suffix, kind));
        }
        // Drawn last: a quarter of the one-server schedules run on a Redis
        // Cluster instead, their faults moved to its masters.
        if topology == Topology::Single && r.chance(0.25) && clusters {
            config.clustered(&mut r);
        } else if topology == Topology::Single && r.chance(0.25) && clusters {
            config.sentineled(&mut r);
        }
        config
    }

    /// This schedule on a Sentinel-watched master: the one server's faults
    /// go to the master (m0), a failover becomes a Sentinel failover, and
    /// more failovers are added, one of them perhaps as clients start.
    fn sentineled(&mut self, r: &mut Rng) {
        self.topology = Topology::Sentinel;
        self.foreign = None;
        let servers = node_names(Topology::Sentinel);
        let failover = |r: &mut Rng| Injected::SentinelFailover {
            to: r.pick(&servers[1..]).clone(),
            caught_up: r.chance(0.7),
            old_lives: r
                .chance(0.3)
                .then(|| Duration::from_millis(r.range(100, 3000))),
            one_misses: r.chance(0.4),
        };
        for (_, fault) in &mut self.injected {
            *fault = match std::mem::replace(fault, Injected::Close(0)) {
                Injected::Pause(_, d) => Injected::Pause(servers[0].clone(), d),
                Injected::FlushScripts(_) => Injected::FlushScripts(servers[0].clone()),
                Injected::RestartAof(_) => Injected::RestartAof(servers[0].clone()),
                Injected::RestartEmpty(_) => Injected::RestartEmpty(servers[0].clone()),
                Injected::ClockStep(_, us) => Injected::ClockStep(servers[0].clone(), us),
                Injected::Failover(_) => failover(r),
                other => other,
            };
        }
        if r.chance(0.5) {
            let at = if r.chance(0.3) {
                // The master dies as the clients start.
                Duration::from_millis(r.below(20))
            } else {
                Duration::from_millis(r.below(self.length.as_millis() as u64))
            };
            let f = failover(r);
            self.injected.push((at, f));
        }
        self.clocks = vec![(*r.pick(&[0, 0, 1_000, 15_625]), r.range(0, 100) as i64 - 50)];
    }

    /// This schedule on a Redis Cluster: each fault of the one server goes
    /// to the master of `n0`'s slot or to another; a failover becomes a
    /// master's death and its replica's promotion; slot migrations of the
    /// names' slots are added.
    fn clustered(&mut self, r: &mut Rng) {
        self.topology = Topology::Cluster;
        self.foreign = None;
        let masters = node_names(Topology::Cluster);
        let map = crate::cluster::ClusterMap::new(&masters, &[]);
        let n0 = map.owner(crate::cluster::slot(b"n0")).to_owned();
        for (_, fault) in &mut self.injected {
            let node = if r.chance(0.6) {
                n0.clone()
            } else {
                r.pick(&masters).clone()
            };
            *fault = match std::mem::replace(fault, Injected::Close(0)) {
                Injected::Pause(_, d) => Injected::Pause(node, d),
                Injected::FlushScripts(_) => Injected::FlushScripts(node),
                Injected::RestartAof(_) => Injected::RestartAof(node),
                Injected::RestartEmpty(_) => Injected::RestartEmpty(node),
                Injected::ClockStep(_, us) => Injected::ClockStep(node, us),
                Injected::Failover(_) => Injected::Promote(node, r.chance(0.5)),
                other => other,
            };
        }
        for _ in 0..r.below(3) {
            let at = Duration::from_millis(r.below(self.length.as_millis() as u64));
            let name = r.below(self.names as u64) as usize;
            let to = r.pick(&masters).clone();
            self.injected.push((at, Injected::Migrate(name, to)));
        }
        if r.chance(0.3) {
            let at = Duration::from_millis(r.below(self.length.as_millis() as u64));
            let node = r.pick(&masters).clone();
            self.injected
                .push((at, Injected::Promote(node, r.chance(0.7))));
        }
        self.clocks = masters
            .iter()
            .map(|_| (*r.pick(&[0, 0, 1_000, 15_625]), r.range(0, 100) as i64 - 50))
            .collect();
    }

    /// The documented unsafety of this schedule's faults, if any. A Redlock
    /// node restarted empty is SAFE: it stays down two TTLs first (the
    /// delayed restart Redlock requires of a node without persistence).
    pub fn unsafe_label(&self) -> Option<&'static str> {
        // A server clock that ticks by g dates an expiry up to g early;
        // every lease is asked of the server for a tick more than its
        // holder counts (lease.rs SERVER_TICK: 16 ms), which covers ticks up
        // to that and no coarser (SAFETY.md; seeds 12599 and 22841 found
        // 15.625 ms ticks ending leases early before it was added).
        if self.clocks.iter().any(|&(tick, _)| tick > 16_000) {
            return Some("a server clock that ticks coarser than 16 ms");
        }
        self.injected.iter().find_map(|(_, f)| match f {
            Injected::RestartEmpty(_) if matches!(self.topology, Topology::Redlock(_)) => None,
            f => f.unsafe_label(),
        })
    }
}

fn node_names(topology: Topology) -> Vec<String> {
    match topology {
        Topology::Single | Topology::Replicated => vec!["redis".to_owned()],
        Topology::Redlock(n) => (0..n).map(|i| format!("node{i}")).collect(),
        Topology::Cluster => (0..3).map(|i| format!("c{i}")).collect(),
        Topology::Sentinel => (0..3).map(|i| format!("m{i}")).collect(),
    }
}

/// The sentinels of [`Topology::Sentinel`].
fn sentinel_names() -> Vec<String> {
    (0..3).map(|i| format!("s{i}")).collect()
}

/// A cluster master's replica.
fn replica(master: &str) -> String {
    format!("{master}r")
}

/// The URL of one lock node for process `p`: its simulated socket's
/// address (see [`crate::cluster::ClusterMap::host`]), or on the wire seam
/// (`--set seam=wire`) its `sim://` name.
fn node_url(p: usize, node: &str, wire_seam: bool) -> String {
    if wire_seam {
        return format!("sim://{node}");
    }
    format!(
        "redis://{}:{}/",
        crate::cluster::ClusterMap::host(p, node),
        crate::cluster::PORT
    )
}

/// The URLs process `p` is given for `topology`'s lock nodes.
fn cluster_urls(p: usize, names: &[String]) -> Vec<String> {
    names
        .iter()
        .map(|n| {
            format!(
                "redis://{}:{}",
                crate::cluster::ClusterMap::host(p, n),
                crate::cluster::PORT
            )
        })
        .collect()
}

/// What one schedule did and found.
#[derive(Debug, Clone)]
pub struct Outcome {
    /// The configuration run.
    pub config: Config,
    /// The history's digest: equal for equal histories.
    pub digest: u64,
    /// Events in the history.
    pub events: u64,
    /// Guards handed out.
    pub acquisitions: u64,
    /// Lock operations (acquire, try, extend, release) completed.
    pub operations: u64,
    /// Server commands run.
    pub commands: u64,
    /// Scripts the servers ran (each a lock operation at a server:
    /// acquire, renew, release, status, fenced writes).
    pub scripts: u64,
    /// Requests delivered twice.
    pub duplicates: u64,
    /// Broken invariants.
    pub violations: Vec<Violation>,
    /// The last lines of the history (for a report).
    pub recent: Vec<String>,
    /// The whole history, when traced.
    pub full: Option<Vec<String>>,
}

/// The record the tasks of one schedule share.
#[derive(Default)]
struct Record {
    holds: BTreeMap<String, Vec<Hold>>,
    acquisitions: u64,
    operations: u64,
    violations: Vec<Violation>,
    /// Fenced read-modify-writes (`fenced::get`, then `fenced::set` of the
    /// value + 1) accepted, per counter key.
    increments: BTreeMap<String, u64>,
    /// When each process's `close()` returned (µs from the start).
    closed: BTreeMap<usize, u64>,
    /// When each process's `close()` was called (µs from the start).
    closing: BTreeMap<usize, u64>,
    /// Tokens of guards taken with `hold_at_least` (a release keeps their
    /// lease until then) or `lock_delay` (a lease that ended without a
    /// release keeps the lock for the delay): by design, `close()` included.
    kept: Vec<String>,
    /// The server TTLs (ms) asked by multi-lock acquisitions with
    /// `lock_delay` (the TTL plus the delay): a lease a multi-lock took with its delay
    /// and, lost by its clock before the rest were taken, did not give back
    /// (the delay keeps a lease that ended without a release) is kept by
    /// design too, though no guard of it was handed out to record its token.
    delayed_ttls: BTreeSet<u64>,
}

type Shared = Arc<Mutex<Record>>;

fn record(shared: &Shared) -> std::sync::MutexGuard<'_, Record> {
    shared.lock().unwrap_or_else(|e| e.into_inner())
}

/// Runs the schedule of `config` on a runtime of its own (current thread,
/// paused clock, seeded).
pub fn run(config: &Config, trace: bool) -> Outcome {
    // A thread of its own: std's hasher keys and `rand`'s thread generator
    // are drawn once per thread, here from the seed (see entropy.rs), so
    // the drivers' iteration orders and random picks replay.
    std::thread::scope(|scope| {
        std::thread::Builder::new()
            .name(format!("schedule {}", config.seed))
            .stack_size(16 << 20)
            .spawn_scoped(scope, || {
                #[cfg(target_os = "linux")]
                crate::entropy::seed(Some(config.seed ^ 0x5851_f42d_4c95_7f2d));
                run_here(config, trace)
            })
            .expect("a thread for the schedule")
            .join()
            .unwrap_or_else(|panic| std::panic::resume_unwind(panic))
    })
}

/// Runs one schedule on this thread.
fn run_here(config: &Config, trace: bool) -> Outcome {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .start_paused(true)
        .rng_seed(tokio::runtime::RngSeed::from_bytes(
            &config.seed.to_le_bytes(),
        ))
        .build()
        .expect("a current-thread runtime");
    leasehold::sim::seed_random(Some(config.seed.wrapping_mul(0x2545_f491_4f6c_dd1d)));
    let outcome = runtime.block_on(schedule(config.clone(), trace));
    crate::libtrace::stop();
    leasehold::sim::install(None);
    leasehold::sim::install_sockets(None);
    leasehold::sim::seed_random(None);
    outcome
}

async fn schedule(config: Config, trace: bool) -> Outcome {
    let mut rng = Rng::new(config.seed ^ 0xa076_1d64_78bd_642f);
    let names = node_names(config.topology);
    let replicas: Vec<(String, String)> = match config.topology {
        Topology::Cluster => names.iter().map(|m| (replica(m), m.clone())).collect(),
        _ => Vec::new(),
    };
    let sentinels = match config.topology {
        Topology::Sentinel => sentinel_names(),
        _ => Vec::new(),
    };
    let mut nodes: Vec<(&str, Flavor)> = names
        .iter()
        .chain(replicas.iter().map(|(r, _)| r))
        .chain(&sentinels)
        .map(|n| (n.as_str(), Flavor::Redis7))
        .collect();
    nodes.push(("resource", Flavor::Redis7));
    let world = World::new(rng.fork(), config.faults.clone(), &nodes);
    if config.topology == Topology::Replicated {
        world.add_replica("redis");
    }
    if config.topology == Topology::Cluster {
        world.make_cluster(&names, &replicas);
    }
    if config.topology == Topology::Sentinel {
        world.set_command_timeout(config.command_timeout);
        world.make_sentinels("mymaster", &names, &sentinels);
    }
    // Every topology's connections are the drivers' own, over simulated
    // sockets the address names (the `sim://` URLs of `--set seam=wire`
    // excepted: those cross the library-level wire).
    leasehold::sim::install_sockets(Some(world.dialer(usize::MAX)));
    for (node, &(tick, drift)) in names.iter().zip(&config.clocks) {
        world.set_clock(node, tick, drift);
    }
    if trace {
        world.with_history(|h| h.full = Some(Vec::new()));
        if let Some(filter) = std::env::var_os("LEASEHOLD_SIM_LOG") {
            crate::libtrace::start(&world, &filter.to_string_lossy());
        }
    }
    world.log(|| format!("CONFIG {config:?}"));
    let shared: Shared = Arc::default();

    // Each with its process: the one whose dialer it connected through,
    // whose tokens the checker finds on the wire (a process that could not
    // connect leaves a gap; seed 2597 took p2's client for p1's).
    let mut clients: Vec<(usize, Client)> = Vec::new();
    for p in 0..config.processes {
        leasehold::sim::install(Some(world.dialer(p)));
        let builder = Client::builder()
            .command_timeout(config.command_timeout)
            .ttl_bounds(Duration::from_millis(10), Duration::from_secs(3600));
        let url = |node: &str| node_url(p, node, config.wire_seam);
        let builder = match config.topology {
            Topology::Single => builder.url(url("redis")),
            Topology::Replicated => builder
                .url(url("redis"))
                .min_replicas(1, Duration::from_millis(100)),
            Topology::Redlock(_) => builder.redlock(names.iter().map(|n| url(n))),
            Topology::Cluster => builder.cluster(cluster_urls(p, &names)),
            Topology::Sentinel => builder.sentinel(cluster_urls(p, &sentinels), "mymaster"),
        };
        match builder.build().await {
            Ok(client) => clients.push((p, client)),
            Err(e) => {
                world.log(|| format!("p{p} could not connect: {e}"));
            }
        }
    }
    // The operator: a process of its own that breaks names by hand.
    let operator = if config.breaks.is_empty() {
        None
    } else {
        let p = config.processes;
        world.set_operator(p);
        leasehold::sim::install(Some(world.dialer(p)));
        let builder = Client::builder().command_timeout(config.command_timeout);
        let url = |node: &str| node_url(p, node, config.wire_seam);
        let builder = match config.topology {
            Topology::Single | Topology::Replicated => builder.url(url("redis")),
            Topology::Redlock(_) => builder.redlock(names.iter().map(|n| url(n))),
            Topology::Cluster => builder.cluster(cluster_urls(p, &names)),
            Topology::Sentinel => builder.sentinel(cluster_urls(p, &sentinels), "mymaster"),
        };
        match builder.build().await {
            Ok(client) => Some(client),
            Err(e) => {
                world.log(|| format!("operator could not connect: {e}"));
                None
            }
        }
    };
    leasehold::sim::install(None);

    let start = Instant::now();
    let end = start + config.length;
    let mut tasks = tokio::task::JoinSet::new();
    if config.topology == Topology::Replicated {
        let world = world.clone();
        let mut r = rng.fork();
        tasks.spawn(async move {
            while Instant::now() < end {
                tokio::time::sleep(Duration::from_millis(r.range(1, 200))).await;
                world.replicate("redis");
            }
        });
    }
    // A cluster's replicas, and the Sentinel master's, catch up with their
    // masters now and then.
    if matches!(config.topology, Topology::Cluster | Topology::Sentinel) {
        let world = world.clone();
        let mut r = rng.fork();
        let replicas = replicas.clone();
        tasks.spawn(async move {
            while Instant::now() < end {
                tokio::time::sleep(Duration::from_millis(r.range(1, 200))).await;
                for (replica, master) in replicas.iter().cloned().chain(world.sentinel_replicas()) {
                    world.replicate_to(&replica, &master);
                }
            }
        });
    }
    for &(p, ref client) in &clients {
        for t in 0..config.tasks {
            let task = Task {
                who: format!("p{p}t{t}"),
                process: p,
                owner: format!("owner-p{p}"),
                client: client.clone(),
                world: world.clone(),
                shared: Arc::clone(&shared),
                rng: rng.fork(),
                extra: Rng::new(config.seed ^ 0x7465_6574_6800_0000 ^ ((p as u64) << 8 | t as u64)),
                config: config.clone(),
                end,
                resource: world.plain("resource"),
            };
            tasks.spawn(task.run());
        }
    }
    if let Some(operator) = operator.clone() {
        let world = world.clone();
        let mut r = rng.fork();
        // The take-overs' draws, apart from `r`: the breaks stay where they were.
        let mut take = Rng::new(config.seed ^ 0x6f70_6572_6174_6f72);
        let (breaks, names) = (config.breaks.clone(), config.names);
        let (shared, config) = (Arc::clone(&shared), config.clone());
        tasks.spawn(async move {
            let mut taken = 0;
            for at in breaks {
                tokio::time::sleep_until(start + at).await;
                let name = format!("n{}", r.below(names as u64));
                // As `leasehold release --force` users do: the lock broken,
                // then taken at once by the operator's own client, and
                // perhaps broken and taken again at once (issue 32 item 8,
                // mutation 23: within one tick of a coarse server clock,
                // the next fence comes from the kept fence key alone).
                let mut guards = Vec::new();
                let rounds = if take.chance(0.5) {
                    1 + u64::from(take.chance(0.6))
                } else {
                    0
                };
                world.log(|| format!("FAULT the operator breaks {name}"));
                let broken = operator.break_lease(&name).await;
                world.log(|| format!("operator break {name}: {broken:?}"));
                for round in 0..rounds {
                    if round > 0 {
                        world.log(|| format!("FAULT the operator breaks {name} again"));
                        let broken = operator.break_lease(&name).await;
                        world.log(|| format!("operator break {name}: {broken:?}"));
                    }
                    taken += 1;
                    let owner = format!("owner-op{taken:04}");
                    let asked_us = now_us(start);
                    let got = take_over(&operator, &config, &name, &owner).await;
                    world.log(|| match &got {
                        Ok(Some(g)) => {
                            format!("operator takes {name} as {owner}: {:?}", g.fences())
                        }
                        Ok(None) => format!("operator takes {name} as {owner}: not taken"),
                        Err(e) => format!("operator takes {name} as {owner}: {e}"),
                    });
                    if let Ok(Some(guard)) = got {
                        let from_us = now_us(start);
                        let fence = guard.fences().first().map_or(0, |(_, f)| *f);
                        let hold = guard.sim_holds().first().map(|(_, h)| h.clone());
                        let owner = if config.kind == Kind::Reentrant {
                            owner
                        } else {
                            guard.token()
                        };
                        if guard.believes() {
                            record(&shared)
                                .holds
                                .entry(name.clone())
                                .or_default()
                                .push(Hold {
                                    who: format!("op{taken}"),
                                    process: config.processes,
                                    hold: hold.unwrap_or_default(),
                                    hears_breaks: operator.sim_hears_breaks(),
                                    owner,
                                    read: false,
                                    fence,
                                    asked_us,
                                    from_us,
                                    last_us: from_us,
                                });
                        }
                        guards.push(guard);
                    }
                }
                for guard in guards {
                    let released = guard.release().await;
                    world.log(|| format!("operator release {name}: {released:?}"));
                }
            }
            let _ = operator.close().await;
        });
    }
    // Another program's key where one of n0's keys is: it must come out
    // unchanged, and no guard of n0 asked for after it is handed out while
    // it sits at the lock or the fence key.
    let planted: Arc<Mutex<Option<(u64, String, crate::server::KeyDump)>>> = Arc::default();
    if let Some((at, suffix, kind)) = config.foreign {
        let (world, planted, node) = (world.clone(), Arc::clone(&planted), names[0].clone());
        tasks.spawn(async move {
            tokio::time::sleep_until(start + at).await;
            let key = format!("leasehold:{{n0}}:{suffix}");
            let args: Vec<&str> = match kind {
                "string" => vec!["SET", &key, "precious"],
                "hash" => vec!["HSET", &key, "field", "precious"],
                _ => vec!["ZADD", &key, "7", "precious"],
            };
            if let Some(dump) = world.plant(&node, &args) {
                *planted.lock().unwrap_or_else(|e| e.into_inner()) =
                    Some((now_us(start), key, dump));
            }
        });
    }
    // Redlock's nodes restart empty only after two TTLs down, as the
    // algorithm requires of a node without persistence (the chaos runs'
    // Redlock scenarios do the same).
    let delayed_restart = matches!(config.topology, Topology::Redlock(_)).then_some(config.ttl * 2);
    for (at, fault) in config.injected.clone() {
        let world = world.clone();
        let shared = Arc::clone(&shared);
        let lock_nodes = names.clone();
        let client = match fault {
            Injected::Close(p) => clients
                .iter()
                .find(|(q, _)| *q == p)
                .map(|(_, client)| client.clone()),
            _ => None,
        };
        let mut r = rng.fork();
        tasks.spawn(async move {
            tokio::time::sleep_until(start + at).await;
            inject(&world, &fault, delayed_restart);
            match &fault {
                Injected::Migrate(name, to) => {
                    let slot = crate::cluster::slot(format!("n{name}").as_bytes());
                    world.migrate_slot(slot, to, r.fork()).await;
                }
                Injected::SentinelFailover {
                    to,
                    caught_up,
                    old_lives,
                    one_misses,
                } => {
                    world
                        .sentinel_failover(to, *caught_up, *old_lives, *one_misses, r.fork())
                        .await;
                }
                Injected::Promote(master, caught_up) => {
                    if *caught_up {
                        world.replicate_to(&replica(master), master);
                    }
                    world.kill_and_promote(master, &replica(master));
                }
                _ => {}
            }
            if let (Some(client), Injected::Close(p)) = (client, &fault) {
                record(&shared).closing.entry(*p).or_insert(now_us(start));
                let closed = client.close().await;
                world.log(|| format!("p{p} close() returned {closed:?}"));
                record(&shared).closed.entry(*p).or_insert(now_us(start));
                if closed.is_ok() {
                    left_after_close(&world, &shared, *p, &lock_nodes);
                }
            }
        });
    }
    // Keys stay bounded by their live holders and waiters: no waiter's
    // entry outlives its deadline by more than a queue window and a TTL
    // (cleaning up is lazy, but bounded), and no key holds more members
    // than every task of every process waiting at once, sixteen times over
    // (those that gave up within the last window may still be there, and a
    // paused server runs their leaves late: seed 4428 had 42 in a queue of
    // 8 tasks through a 2.4 s pause, all gone once the leaves ran).
    let bound = (config.processes * config.tasks * 16) as u64 + 16;
    let stale_after_ms = (QUEUE_WINDOW * 2 + config.ttl * 2).as_millis() as i64;
    {
        let world = world.clone();
        let shared = Arc::clone(&shared);
        let names = names.clone();
        tasks.spawn(async move {
            while Instant::now() < end {
                tokio::time::sleep(Duration::from_millis(200)).await;
                for node in &world.serving(&names) {
                    let now_ms = world.node_now_ms(node);
                    for key in world.dump(node) {
                        let size = match &key.value {
                            DumpValue::Hash(h) => h.len() as u64,
                            DumpValue::ZSet(z) => z.len() as u64,
                            DumpValue::String(_) => 0,
                        };
                        let stale = match &key.value {
                            // Heartbeats: waiter -> deadline (ms).
                            DumpValue::ZSet(z) if key.key.ends_with(":alive") => z
                                .iter()
                                .find(|(_, deadline)| (*deadline as i64) < now_ms - stale_after_ms)
                                .map(|(m, d)| (String::from_utf8_lossy(m).into_owned(), *d as i64)),
                            _ => None,
                        };
                        if let Some((member, deadline)) = stale {
                            record(&shared).violations.push(Violation {
                                invariant: "a dead waiter's entry outlives its deadline",
                                detail: format!(
                                    "{node} {}: {member} (deadline {deadline}, {} ms ago; {size} members)",
                                    key.key,
                                    now_ms - deadline
                                ),
                            });
                            return;
                        }
                        if size > bound {
                            record(&shared).violations.push(Violation {
                                invariant: "a key grows beyond its live holders and waiters",
                                detail: format!("{node} {}: {size} members, bound {bound}", key.key),
                            });
                            return;
                        }
                    }
                }
            }
        });
    }
    // Every task ends by itself: its operations are bounded by their
    // waits and the command timeout; one still running long after is stuck.
    let stuck_after =
        config.length + config.ttl * 8 + config.command_timeout * 8 + Duration::from_secs(15);
    let all_done = tokio::time::timeout(stuck_after, async {
        while let Some(done) = tasks.join_next().await {
            if let Err(e) = done
                && e.is_panic()
            {
                std::panic::resume_unwind(e.into_panic());
            }
        }
    })
    .await;
    if all_done.is_err() {
        record(&shared).violations.push(Violation {
            invariant: "an operation never ended",
            detail: format!("tasks still running {stuck_after:?} after the start"),
        });
    }
    for &(p, ref client) in &clients {
        if record(&shared).closed.contains_key(&p) {
            continue;
        }
        // Client::close's documented bound: six command timeouts for the
        // flights, three for its own releases, the replicas' WAIT (100 ms)
        // with min_replicas; and a second of slack for the schedule's own
        // tasks. (It was four command timeouts and a second, stricter than
        // the docs: seed 406310's releases, through a reconnect's three
        // connection attempts and a script reload, outlived it.)
        let closing = tokio::time::timeout(
            config.command_timeout * 9 + Duration::from_millis(1100),
            client.close(),
        )
        .await;
        world.log(|| format!("p{p} close: {closing:?}"));
        if matches!(closing, Ok(Ok(()))) {
            left_after_close(&world, &shared, p, &names);
        }
        if closing.is_err() {
            record(&shared).violations.push(Violation {
                invariant: "close() never ended",
                detail: format!("p{p}"),
            });
        }
    }
    drop(clients);
    // Nothing left behind: once every lease and queue window has passed.
    tokio::time::sleep(config.ttl * 2 + config.command_timeout + Duration::from_secs(8)).await;
    let planted = planted.lock().unwrap_or_else(|e| e.into_inner()).clone();
    if let Some((at_us, key, before)) = &planted {
        let after = world.dump_key(&names[0], key);
        if after.as_ref() != Some(before) {
            record(&shared).violations.push(Violation {
                invariant: "another program's key was changed",
                detail: format!("{key}: {before:?} became {after:?}"),
            });
        }
        let blocks = key.ends_with(":lock") || key.ends_with(":fence");
        let over: Vec<String> = record(&shared)
            .holds
            .get("n0")
            .into_iter()
            .flatten()
            .filter(|h| blocks && h.asked_us > *at_us)
            .map(|h| format!("{} from {} us", h.who, h.from_us))
            .collect();
        if !over.is_empty() {
            record(&shared).violations.push(Violation {
                invariant: "a guard handed out over another program's key",
                detail: format!("{key} written at {at_us} us: {}", over.join(", ")),
            });
        }
    }
    for node in &world.serving(&names) {
        let mut left = world.dump(node);
        left.retain(|k| planted.as_ref().is_none_or(|(_, key, _)| &k.key != key));
        // The record of a `release_by_token` call (KEYS.md: kept a minute,
        // so that a call run twice gives back one hold).
        left.retain(|k| !(k.key.contains("}:call:") && k.pttl_ms.is_some_and(|t| t <= 60_000)));
        if !left.is_empty() {
            let keys: Vec<String> = left
                .iter()
                .map(|k| format!("{} (pttl {:?})", k.key, k.pttl_ms))
                .collect();
            record(&shared).violations.push(Violation {
                invariant: "keys left behind",
                detail: format!("{node}: {}", keys.join(", ")),
            });
        }
    }

    if all_done.is_ok() {
        let counters = world.dump("resource");
        let increments = record(&shared).increments.clone();
        for (key, accepted) in increments {
            let value = counters
                .iter()
                .find(|k| k.key == key)
                .and_then(|k| match &k.value {
                    DumpValue::String(v) => std::str::from_utf8(v).ok()?.parse::<u64>().ok(),
                    _ => None,
                });
            if value != Some(accepted) {
                record(&shared).violations.push(Violation {
                    invariant: "a fenced read-modify-write lost an update",
                    detail: format!(
                        "{key}: {accepted} increments accepted, the value is {value:?}"
                    ),
                });
            }
        }
    }
    let mut rec = std::mem::take(&mut *record(&shared));
    let mut violations = std::mem::take(&mut rec.violations);
    for line in world.retaken_after_release() {
        violations.push(Violation {
            invariant: "a released lease set back by a re-take",
            detail: line,
        });
    }
    for line in world.sent_back() {
        violations.push(Violation {
            invariant: "a client sent back to a demoted master",
            detail: line,
        });
    }
    for line in world.resent_removals() {
        violations.push(Violation {
            invariant: "a request delivered twice changed more than delivered once",
            detail: line,
        });
    }
    // A hold an operator broke is believed only until the break ran: the
    // break is documented to end mutual exclusion for its holder. One the
    // break removed before its guard came back was never held alone and
    // is left out (its fence, issued before the break, may be below a
    // later holder's that came back sooner); the resource still judges
    // its writes.
    let broken: Vec<(String, String, u64)> = world
        .broken()
        .into_iter()
        .map(|(node, id, at)| {
            (
                node,
                id,
                at.saturating_duration_since(start).as_micros() as u64,
            )
        })
        .collect();
    let since_start = |at: Instant| at.saturating_duration_since(start).as_micros() as u64;
    let notices: Vec<(usize, Vec<u8>, u64)> = world
        .notices()
        .into_iter()
        .map(|(p, payload, at)| (p, payload, since_start(at)))
        .collect();
    // A hold `release_by_token` gave back (its first delivery: "any one
    // hold" of the owner, perhaps a live guard's) is believed only until
    // then: the docs say such a guard finds it lost at its next renewal.
    let given_back: Vec<(String, u64)> = world
        .given_back()
        .into_iter()
        .map(|(_, id, at)| (id, since_start(at)))
        .collect();
    for (name, holds) in &mut rec.holds {
        // Before a broken hold is ended at its break: a break stops its
        // holder once the notice reaches it.
        violations.extend(check_notices(name, holds, &notices));
        for hold in holds.iter_mut() {
            let ended = broken
                .iter()
                .filter(|(_, id, at)| {
                    id.contains(hold.owner.as_str()) && (hold.asked_us..=hold.last_us).contains(at)
                })
                .map(|(_, _, at)| *at)
                .min();
            if let Some(at) = ended {
                world.log(|| format!("{} {name} broken at {at} us", hold.who));
                hold.last_us = at;
            }
            let given = given_back
                .iter()
                .filter(|(id, at)| *id == hold.hold && (hold.asked_us..=hold.last_us).contains(at))
                .map(|(_, at)| *at)
                .min();
            if let Some(at) = given {
                world.log(|| format!("{} {name} given back by token at {at} us", hold.who));
                hold.last_us = at;
            }
        }
        holds.retain(|h| h.last_us >= h.from_us);
        let found = check_holds(name, config.kind.sharing(), holds);
        // Redlock's fences are best-effort (SAFETY.md: the quorum's largest,
        // raised to the node clocks), and node clocks that tick and drift
        // apart can issue one below the last: not judged there.
        violations.extend(found.into_iter().filter(|v| {
            !(matches!(config.topology, Topology::Redlock(_))
                && v.invariant == "fence not above an earlier holder's")
        }));
    }
    // In the order the resource ran them, each key's accepted fences
    // never go down.
    let mut highest: BTreeMap<String, u64> = BTreeMap::new();
    for (key, fence) in world.accepted_writes() {
        let top = highest.entry(key.clone()).or_insert(0);
        if fence < *top {
            violations.push(Violation {
                invariant: "a fenced resource accepted a stale write",
                detail: format!("{key}: fence {fence} accepted after {top}"),
            });
        }
        *top = (*top).max(fence);
    }
    for v in &violations {
        world.log(|| format!("VIOLATION {}: {}", v.invariant, v.detail));
    }
    let (commands, wire) = (world.commands(), world.wire_digest());
    world.log(|| format!("END {commands} server commands, wire digest {wire:016x}"));
    let (digest, events, recent, full) = world.with_history(|h| {
        (
            h.digest(),
            h.events(),
            h.recent().cloned().collect(),
            h.full.take(),
        )
    });
    Outcome {
        config,
        digest,
        events,
        acquisitions: rec.acquisitions,
        operations: rec.operations,
        commands: world.commands(),
        scripts: world.scripts(),
        duplicates: world.duplicates(),
        violations,
        recent,
        full,
    }
}

/// The operator's acquisition of `name` right after its break: a writer,
/// a permit, a hold of its own owner; within a TTL's wait.
async fn take_over(
    c: &Client,
    config: &Config,
    name: &str,
    owner: &str,
) -> leasehold::Result<Option<Guard>> {
    let (ttl, wait) = (config.ttl, config.ttl);
    Ok(Some(match config.kind {
        Kind::Lock => Guard::Lock(c.lock(name).ttl(ttl).wait(wait).acquire().await?),
        Kind::FairLock => Guard::Lock(c.fair_lock(name).ttl(ttl).wait(wait).acquire().await?),
        Kind::Reentrant => Guard::Reentrant(
            c.reentrant_lock(name)
                .owner(owner.to_owned())
                .ttl(ttl)
                .wait(wait)
                .acquire()
                .await?,
        ),
        Kind::RwLock => Guard::Write(c.rw_lock(name).ttl(ttl).wait(wait).write().await?),
        Kind::Semaphore(n) => {
            Guard::Permit(c.semaphore(name, n).ttl(ttl).wait(wait).acquire().await?)
        }
        // An election is not taken over by hand.
        Kind::Election => return Ok(None),
    }))
}

/// After process `p`'s `close()` returned: nothing on any lock node may
/// hold a token of it (SAFETY.md: "`Client::close()` frees everything
/// before a program ends"); on Redlock, no majority of the nodes (a
/// release returns once a majority has answered, and a late node's copy
/// is one no quorum can use).
fn left_after_close(world: &World, shared: &Shared, p: usize, nodes: &[String]) {
    let kept = record(shared).kept.clone();
    let mut held: BTreeMap<(String, String), Vec<String>> = BTreeMap::new();
    let redlock = nodes.iter().all(|n| n.starts_with("node"));
    let nodes = &world.serving(nodes);
    let delayed = record(shared).delayed_ttls.clone();
    for (node, key, hold) in world.holds_of(p, &format!("owner-p{p}"), nodes) {
        let kept_by_delay = world
            .asked_ttl_ms(&hold)
            .is_some_and(|ttl| delayed.contains(&ttl));
        if !kept_by_delay && !kept.iter().any(|k| hold.contains(k.as_str())) {
            held.entry((key, hold)).or_default().push(node);
        }
    }
    let majority = nodes.len() / 2 + 1;
    let lock_nodes = if nodes.len() > 1 && redlock {
        majority
    } else {
        1
    };
    let left: Vec<String> = held
        .into_iter()
        .filter(|(_, on)| on.len() >= lock_nodes)
        .map(|((key, hold), on)| format!("{key}: {hold} on {}", on.join(" ")))
        .collect();
    if !left.is_empty() {
        record(shared).violations.push(Violation {
            invariant: "a lock held after close() returned",
            detail: format!("p{p}: {}", left.join(", ")),
        });
    }
}

/// Carries out `fault`. `delayed_restart`: a node restarted empty stays
/// down that long first (Redlock's delayed restart).
fn inject(world: &World, fault: &Injected, delayed_restart: Option<Duration>) {
    match fault {
        Injected::Pause(node, length) => world.pause(node, *length),
        Injected::FlushScripts(node) => world.flush_scripts(node),
        Injected::RestartAof(node) => world.restart(node, true),
        Injected::RestartEmpty(node) => {
            world.restart(node, false);
            if let Some(down) = delayed_restart {
                world.pause(node, down);
            }
        }
        Injected::ClockStep(node, us) => world.step_clock(node, *us),
        Injected::Failover(node) => world.failover(node),
        Injected::Stall(p, length) => world.stall_process(*p, *length),
        Injected::Close(p) => world.log(|| format!("FAULT p{p} closes its client")),
        // Carried out by the schedule (they take time, or the replica).
        Injected::Promote(..) | Injected::Migrate(..) | Injected::SentinelFailover { .. } => {}
    }
}

/// A guard of any primitive.
enum Guard {
    Lock(leasehold::LockGuard),
    Reentrant(leasehold::ReentrantGuard),
    Read(leasehold::ReadGuard),
    Write(leasehold::WriteGuard),
    Permit(leasehold::Permit),
    Multi(leasehold::MultiLockGuard),
    Leader(leasehold::Leadership),
}

macro_rules! each {
    ($g:expr, $x:ident => $body:expr) => {
        match $g {
            Guard::Lock($x) => $body,
            Guard::Reentrant($x) => $body,
            Guard::Read($x) => $body,
            Guard::Write($x) => $body,
            Guard::Permit($x) => $body,
            Guard::Multi($x) => $body,
            Guard::Leader($x) => $body,
        }
    };
}

impl Guard {
    /// Each name held, with its fence.
    fn fences(&self) -> Vec<(String, u64)> {
        match self {
            Guard::Multi(g) => g.fences().to_vec(),
            Guard::Lock(g) => vec![(g.name().to_owned(), g.fence())],
            Guard::Reentrant(g) => vec![(g.name().to_owned(), g.fence())],
            Guard::Read(g) => vec![(g.name().to_owned(), g.fence())],
            Guard::Write(g) => vec![(g.name().to_owned(), g.fence())],
            Guard::Permit(g) => vec![(g.name().to_owned(), g.fence())],
            Guard::Leader(g) => vec![(g.name().to_owned(), g.fence())],
        }
    }
    fn token(&self) -> String {
        match self {
            Guard::Multi(g) => g
                .names()
                .first()
                .and_then(|n| g.token(n))
                .unwrap_or_default()
                .to_owned(),
            Guard::Lock(g) => g.token().to_owned(),
            Guard::Reentrant(g) => g.token().to_owned(),
            Guard::Read(g) => g.token().to_owned(),
            Guard::Write(g) => g.token().to_owned(),
            Guard::Permit(g) => g.token().to_owned(),
            Guard::Leader(g) => g.token().to_owned(),
        }
    }
    /// The tokens of a plain lock's guard (one per name), whose keys the
    /// `lock_*` scripts keep; none for other primitives.
    fn lock_tokens(&self) -> Vec<String> {
        match self {
            Guard::Lock(g) => vec![g.token().to_owned()],
            Guard::Multi(g) => g
                .names()
                .iter()
                .filter_map(|n| g.token(n))
                .map(str::to_owned)
                .collect(),
            _ => Vec::new(),
        }
    }
    /// Each name held, with what the scripts know the hold by (a break
    /// notice and a `release_by_token` give-back name it so).
    fn sim_holds(&self) -> Vec<(String, String)> {
        match self {
            Guard::Multi(g) => g
                .names()
                .iter()
                .filter_map(|n| Some(((*n).to_owned(), g.token(n)?.to_owned())))
                .collect(),
            Guard::Lock(g) => vec![(g.name().to_owned(), g.sim_hold().to_owned())],
            Guard::Reentrant(g) => vec![(g.name().to_owned(), g.sim_hold().to_owned())],
            Guard::Read(g) => vec![(g.name().to_owned(), g.sim_hold().to_owned())],
            Guard::Write(g) => vec![(g.name().to_owned(), g.sim_hold().to_owned())],
            Guard::Permit(g) => vec![(g.name().to_owned(), g.sim_hold().to_owned())],
            Guard::Leader(g) => vec![(g.name().to_owned(), g.sim_hold().to_owned())],
        }
    }
    fn believes(&self) -> bool {
        each!(self, g => !g.is_lost() && !g.valid_for().is_zero())
    }
    async fn extend(&self, ttl: Duration) -> leasehold::Result<()> {
        each!(self, g => g.extend(ttl).await)
    }
    async fn release(self) -> leasehold::Result<()> {
        each!(self, g => g.release().await)
    }
}

/// How one acquisition is asked for.
struct Ask {
    ttl: Duration,
    wait: Duration,
    watchdog: bool,
    read: bool,
    try_only: bool,
    /// MultiLock over every name (Kind::Lock on one server).
    multi: bool,
    /// `hold_at_least`, where the handle has it.
    at_least: Option<Duration>,
    /// `lock_delay` (Lock, FairLock).
    delay: Option<Duration>,
}

/// One task of a simulated process: a loop of random operations.
struct Task {
    who: String,
    process: usize,
    owner: String,
    client: Client,
    world: World,
    shared: Shared,
    rng: Rng,
    /// Draws of the steps added after the seeds' schedules were fixed
    /// (`release_by_token`): apart from `rng`, so those stay the same.
    extra: Rng,
    config: Config,
    end: Instant,
    resource: crate::world::SimWire,
}

fn now_us(start: Instant) -> u64 {
    Instant::now().duration_since(start).as_micros() as u64
}

impl Task {
    async fn run(mut self) {
        let origin = self.end - self.config.length;
        for _ in 0..self.config.ops {
            if Instant::now() >= self.end {
                break;
            }
            let name = format!("n{}", self.rng.below(self.config.names as u64));
            let ttl = self.config.ttl;
            let kind = self.config.kind;
            let ask = Ask {
                ttl,
                wait: Duration::from_millis(self.rng.below(ttl.as_millis() as u64 * 3)),
                watchdog: self.rng.chance(0.8),
                read: kind == Kind::RwLock && self.rng.chance(0.5),
                try_only: self.rng.chance(0.2),
                multi: kind == Kind::Lock
                    && self.config.topology == Topology::Single
                    && self.config.names > 1
                    && self.rng.chance(0.15),
                at_least: self
                    .rng
                    .chance(0.1)
                    .then(|| Duration::from_millis(self.rng.range(1, ttl.as_millis() as u64 * 2))),
                delay: self
                    .rng
                    .chance(0.1)
                    .then(|| Duration::from_millis(self.rng.range(1, ttl.as_millis() as u64))),
            };
            // A caller that gives up: the acquisition's future is dropped
            // at whatever await point it has reached.
            let cancel_after = self
                .rng
                .chance(0.1)
                .then(|| Duration::from_micros(self.rng.below(ask.wait.as_micros() as u64 + 5000)));
            let who = self.who.clone();
            self.world.log(|| {
                format!(
                    "{who} acquire {} wait {:?} try {} read {} at_least {:?} delay {:?}",
                    if ask.multi {
                        "every name".to_owned()
                    } else {
                        name.clone()
                    },
                    ask.wait,
                    ask.try_only,
                    ask.read,
                    ask.at_least,
                    ask.delay
                )
            });
            // No draw at all without it: the schedules of earlier seeds
            // stay what they were.
            if !ask.try_only
                && self.config.close_at_deadline > 0.0
                && self.rng.chance(self.config.close_at_deadline)
            {
                self.close_near(ask.wait);
            }
            if let (true, Some(delay)) = (ask.multi, ask.delay) {
                // What its attempts ask the server for (lease.rs
                // server_ttl): without the tick, as before the clocks
                // session added it, no lease matched (seed 34262).
                let asked = (ask.ttl + delay + leasehold::sim::SERVER_TICK).as_millis() as u64;
                record(&self.shared).delayed_ttls.insert(asked);
            }
            let asked_us = now_us(origin);
            let attempt = self.acquire(&name, &ask);
            let result = match cancel_after {
                Some(after) => match tokio::time::timeout(after, attempt).await {
                    Ok(r) => r,
                    Err(_) => {
                        self.world.log(|| format!("{who} cancelled acquire {name}"));
                        continue;
                    }
                },
                None => attempt.await,
            };
            record(&self.shared).operations += 1;
            let guard = match result {
                Ok(Some(guard)) => guard,
                Ok(None) => {
                    self.world.log(|| format!("{who} {name} busy"));
                    continue;
                }
                Err(e) => {
                    self.world.log(|| format!("{who} acquire {name}: {e}"));
                    if matches!(e, Error::Closed) {
                        return;
                    }
                    continue;
                }
            };
            let from_us = now_us(origin);
            let hears_breaks = self.client.sim_hears_breaks();
            let closing = record(&self.shared).closing.get(&self.process).copied();
            if let Some(closing) = closing
                && closing < from_us
            {
                record(&self.shared).violations.push(Violation {
                    invariant: "a guard handed out after close() was called",
                    detail: format!(
                        "{who} got {name} at {from_us} us; close() was called at {closing} us"
                    ),
                });
            }
            let closed = record(&self.shared).closed.get(&self.process).copied();
            if let Some(closed) = closed {
                record(&self.shared).violations.push(Violation {
                    invariant: "a guard handed out after close() returned",
                    detail: format!(
                        "{who} got {name} at {from_us} us; close() returned at {closed} us"
                    ),
                });
            }
            let believed = guard.believes();
            if !believed {
                record(&self.shared).violations.push(Violation {
                    invariant: "acquire returned a guard already lost",
                    detail: format!("{who} {name} at {from_us} us"),
                });
            }
            let fences = guard.fences();
            let token = guard.token();
            let owner = if kind == Kind::Reentrant {
                self.owner.clone()
            } else {
                token.clone()
            };
            let mut last_us = from_us;
            record(&self.shared).acquisitions += 1;
            if ask.at_least.is_some() || ask.delay.is_some() {
                let mut r = record(&self.shared);
                r.kept.push(token.clone());
                r.kept.extend(guard.lock_tokens());
            }
            self.world.log(|| {
                format!(
                    "{who} HOLDS {fences:?} token {}",
                    &token[..8.min(token.len())]
                )
            });
            // ReentrantLock::release_by_token (issue 32 item 8, mutation 21):
            // the owner enters again, gives back "one of its holds" by its
            // owner id (any one: perhaps this guard's, or another task's),
            // then lets the re-entry's guard go; this guard works on. A
            // guard whose hold it gave back finds it lost at its next
            // renewal (the docs), and believes only until then for the
            // checker. Drawn apart, so the other draws stay what they were.
            if kind == Kind::Reentrant && self.extra.chance(0.3) {
                self.give_back_by_token(&name, ttl).await;
            }
            let steps = self.rng.range(1, 3);
            for _ in 0..steps {
                // Mostly short steps (a quarter TTL at most); one in five as
                // long as one and a half TTLs, past what the lease lasts
                // without its watchdog.
                let longest = if self.rng.chance(0.2) {
                    ttl * 3 / 2
                } else {
                    ttl / 4
                };
                let nap = Duration::from_micros(self.rng.below(longest.as_micros() as u64));
                tokio::time::sleep(nap).await;
                if !guard.believes() {
                    self.world.log(|| format!("{who} {fences:?} lost"));
                    break;
                }
                last_us = now_us(origin);
                let exclusive = matches!(
                    kind,
                    Kind::Lock | Kind::FairLock | Kind::RwLock | Kind::Election
                );
                if !ask.read && exclusive && self.rng.chance(0.5) {
                    for (name, fence) in &fences {
                        self.fenced_write(name, *fence).await;
                    }
                }
                if self.rng.chance(0.3) {
                    // As short as a tenth of the TTL: an extend may shorten.
                    let ttl2 = Duration::from_millis(
                        self.rng
                            .range(ttl.as_millis() as u64 / 10 + 10, ttl.as_millis() as u64 * 2),
                    );
                    // One in four given up at some await point: the
                    // server may or may not have applied it.
                    let extended = if self.rng.chance(0.25) {
                        let after =
                            Duration::from_micros(self.rng.below(ttl.as_micros() as u64 / 4 + 1));
                        match tokio::time::timeout(after, guard.extend(ttl2)).await {
                            Ok(extended) => format!("{extended:?}"),
                            Err(_) => format!("given up after {after:?}"),
                        }
                    } else {
                        format!("{:?}", guard.extend(ttl2).await)
                    };
                    record(&self.shared).operations += 1;
                    self.world
                        .log(|| format!("{who} extend {name} {ttl2:?}: {extended}"));
                }
            }
            // The last moment it believes, right before letting go (its
            // fenced writes and extends took time since the last look).
            if guard.believes() {
                last_us = now_us(origin);
            }
            if believed {
                let sim_holds = guard.sim_holds();
                let mut r = record(&self.shared);
                for (name, fence) in &fences {
                    // Each name of a MultiLock has a token of its own.
                    let owner = match &guard {
                        Guard::Multi(g) => g.token(name).unwrap_or(&owner).to_owned(),
                        _ => owner.clone(),
                    };
                    let hold = sim_holds
                        .iter()
                        .find(|(n, _)| n == name)
                        .map(|(_, h)| h.clone())
                        .unwrap_or_default();
                    r.holds.entry(name.clone()).or_default().push(Hold {
                        who: who.clone(),
                        process: self.process,
                        hold,
                        hears_breaks,
                        owner,
                        read: ask.read,
                        fence: *fence,
                        asked_us,
                        from_us,
                        last_us,
                    });
                }
            }
            match self.rng.below(10) {
                0..=6 => {
                    for token in guard.lock_tokens() {
                        self.world.releasing(&token);
                    }
                    let released = guard.release().await;
                    record(&self.shared).operations += 1;
                    self.world
                        .log(|| format!("{who} release {name}: {released:?}"));
                }
                7 => {
                    // A release whose caller gives up at some await point.
                    let after =
                        Duration::from_micros(self.rng.below(ttl.as_micros() as u64 / 4 + 1));
                    for token in guard.lock_tokens() {
                        self.world.releasing(&token);
                    }
                    let released = tokio::time::timeout(after, guard.release()).await;
                    self.world.log(|| {
                        format!("{who} release {name} given up after {after:?}: {released:?}")
                    });
                }
                _ => {
                    drop(guard);
                    self.world.log(|| format!("{who} dropped {name}"));
                }
            }
        }
    }

    /// A re-entry of `name`, one hold of the owner given back by its owner
    /// id (`ReentrantLock::release_by_token`), then the re-entry's guard
    /// released.
    async fn give_back_by_token(&mut self, name: &str, ttl: Duration) {
        let who = self.who.clone();
        let lock = self.client.reentrant_lock(name).owner(self.owner.clone());
        let again = lock.ttl(ttl).try_acquire().await;
        record(&self.shared).operations += 1;
        let again = match again {
            Ok(Some(g)) => g,
            other => {
                let other = other.map(|g| g.map(|g| g.fence()));
                self.world
                    .log(|| format!("{who} enters {name} again: {other:?}"));
                return;
            }
        };
        let given = self
            .client
            .reentrant_lock(name)
            .release_by_token(&self.owner)
            .await;
        self.world
            .log(|| format!("{who} release_by_token {name}: {given:?}"));
        let released = again.release().await;
        let mut r = record(&self.shared);
        r.operations += 2;
        drop(r);
        self.world
            .log(|| format!("{who} release {name}'s re-entry: {released:?}"));
    }

    /// Closes this task's client `wait` from now, give or take a few ms
    /// (once per process: a later call finds it closing already).
    fn close_near(&mut self, wait: Duration) {
        let at = (wait + Duration::from_micros(self.rng.below(4000)))
            .saturating_sub(Duration::from_micros(1000));
        let (client, shared, world, p) = (
            self.client.clone(),
            Arc::clone(&self.shared),
            self.world.clone(),
            self.process,
        );
        let nodes = node_names(self.config.topology);
        let origin = self.end - self.config.length;
        tokio::spawn(async move {
            tokio::time::sleep(at).await;
            if record(&shared).closing.contains_key(&p) {
                return;
            }
            world.log(|| format!("FAULT p{p} closes its client at a waiter's deadline"));
            record(&shared).closing.insert(p, now_us(origin));
            let closed = client.close().await;
            world.log(|| format!("p{p} close() returned {closed:?}"));
            record(&shared).closed.insert(p, now_us(origin));
            if closed.is_ok() {
                left_after_close(&world, &shared, p, &nodes);
            }
        });
    }

    async fn acquire(&self, name: &str, ask: &Ask) -> leasehold::Result<Option<Guard>> {
        let c = &self.client;
        macro_rules! go {
            ($handle:expr, $variant:ident, $acquire:ident, $try:ident) => {{
                let h = $handle;
                if ask.try_only {
                    Ok(h.$try().await?.map(Guard::$variant))
                } else {
                    Ok(Some(Guard::$variant(h.$acquire().await?)))
                }
            }};
        }
        macro_rules! common {
            ($handle:expr) => {
                $handle.ttl(ask.ttl).wait(ask.wait).watchdog(ask.watchdog)
            };
        }
        macro_rules! at_least {
            ($handle:expr) => {{
                let h = $handle;
                match ask.at_least {
                    Some(d) => h.hold_at_least(d),
                    None => h,
                }
            }};
        }
        macro_rules! delay {
            ($handle:expr) => {{
                let h = $handle;
                match ask.delay {
                    Some(d) => h.lock_delay(d),
                    None => h,
                }
            }};
        }
        match self.config.kind {
            Kind::Lock if ask.multi => {
                let names: Vec<String> = (0..self.config.names).map(|i| format!("n{i}")).collect();
                go!(
                    delay!(at_least!(common!(c.multi_lock(names)))),
                    Multi,
                    acquire,
                    try_acquire
                )
            }
            Kind::Lock => go!(
                delay!(at_least!(common!(c.lock(name)))),
                Lock,
                acquire,
                try_acquire
            ),
            Kind::FairLock => go!(
                delay!(at_least!(common!(c.fair_lock(name)))),
                Lock,
                acquire,
                try_acquire
            ),
            Kind::Reentrant => go!(
                common!(c.reentrant_lock(name).owner(self.owner.clone())),
                Reentrant,
                acquire,
                try_acquire
            ),
            Kind::RwLock if ask.read => {
                go!(at_least!(common!(c.rw_lock(name))), Read, read, try_read)
            }
            Kind::RwLock => go!(at_least!(common!(c.rw_lock(name))), Write, write, try_write),
            Kind::Semaphore(n) => go!(
                at_least!(common!(c.semaphore(name, n))),
                Permit,
                acquire,
                try_acquire
            ),
            Kind::Election => {
                let election = c.election(name).ttl(ask.ttl);
                if ask.try_only {
                    Ok(election
                        .try_campaign(self.who.clone())
                        .await?
                        .map(Guard::Leader))
                } else {
                    // campaign() waits until it leads: the caller's wait bounds it.
                    match tokio::time::timeout(ask.wait, election.campaign(self.who.clone())).await
                    {
                        Ok(led) => Ok(Some(Guard::Leader(led?))),
                        Err(_) => Ok(None),
                    }
                }
            }
        }
    }

    /// A write to the fenced resource under the lock, as a holder would.
    async fn fenced_write(&mut self, name: &str, fence: u64) {
        let key = format!("res:{name}");
        let who = self.who.clone();
        // A read-modify-write under the lock, as the README's recipe does
        // it: claim and read, then write the value + 1.
        let read: leasehold::Result<Option<u64>> =
            leasehold::fenced::get(&mut self.resource, &key, fence, None).await;
        self.world
            .log(|| format!("{who} fenced read {key} fence {fence}: {read:?}"));
        let Ok(value) = read else { return };
        let next = value.unwrap_or(0) + 1;
        let written = leasehold::fenced::set(&mut self.resource, &key, fence, next, None).await;
        self.world
            .log(|| format!("{who} fenced write {key} = {next} fence {fence}: {written:?}"));
        if written.is_ok() {
            *record(&self.shared).increments.entry(key).or_default() += 1;
        }
    }
}
