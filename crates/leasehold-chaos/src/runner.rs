//! Runs one scenario: Redis, the resource, the workers, the faults, the
//! checkers.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;
use std::path::PathBuf;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use leasehold_testkit::{Proxy, ProxyMode, RedisCluster, RedisServer, start_servers};
use nix::sys::signal::Signal;

use crate::check::{Bounds, Outage, Violation, check_all, outages, unproven_outages, woken_notice};
use crate::clock::now_us;
use crate::history::{self, Acquisition, FaultKind, History, Micros, NodeCheck, WorkerId};
use crate::monitor::{self, Call, GiveBacks, Monitor};
use crate::procs::Procs;
use crate::proto::Reply;
use crate::resource::{Resource, ResourceView};
use crate::scenario::{
    Class, Fault, NodeStop, QUEUE_HEARTBEAT, QUEUE_WINDOW, Scenario, Topology, verdict,
};
use crate::worker::WorkerConfig;

/// How to run a scenario.
#[derive(Debug, Clone)]
pub struct RunOptions {
    /// Run length (workers stop starting acquisitions after it).
    pub duration: Duration,
    /// Number of worker processes.
    pub workers: u32,
    /// Seed of the workers' sleeps and probes.
    pub seed: u64,
    /// The `leasehold-chaos` binary, started with `worker` for each worker.
    pub worker_exe: PathBuf,
    /// The `leasehold` binary, for scenarios whose workers are `leasehold
    /// run` processes (`run-wrapper-kill`).
    pub leasehold_exe: Option<PathBuf>,
}

/// What one run showed.
#[derive(Debug, Clone)]
pub struct Report {
    /// The scenario's name.
    pub scenario: &'static str,
    /// Its expected class.
    pub class: Class,
    /// Successful acquisitions.
    pub acquisitions: usize,
    /// Times the fault fired.
    pub faults: usize,
    /// Every violation the checkers found.
    pub violations: Vec<Violation>,
    /// Operations the fenced register rejected.
    pub stale_rejected: usize,
    /// Why the run fails its class (empty: it passes).
    pub failures: Vec<String>,
    /// The whole record, for scenario-specific assertions.
    pub history: History,
    /// Where the server's commands were watched (`redis-pause-past-ttl`):
    /// grants that came back later than their TTL and were given back;
    /// `[0]` before the first freeze, `[i]` from the start of freeze `i` to
    /// the start of the next.
    pub late_grants: Option<Vec<GiveBacks>>,
}

impl Report {
    /// True when the run showed what its class allows and expects.
    pub fn passed(&self) -> bool {
        self.failures.is_empty()
    }

    /// Violations on the unfenced register (what fencing is for).
    pub fn unfenced_violations(&self) -> usize {
        self.violations.iter().filter(|v| v.is_unfenced()).count()
    }

    /// A few lines for humans.
    pub fn summary(&self) -> String {
        let mut s = format!(
            "{} [{}]: {} acquisitions, {} fault(s), {} violation(s) ({} on the unfenced \
             register), {} stale operation(s) rejected, {} lost notice(s): {}\n",
            self.scenario,
            self.class,
            self.acquisitions,
            self.faults,
            self.violations.len(),
            self.unfenced_violations(),
            self.stale_rejected,
            self.history.lost.len(),
            if self.passed() { "PASS" } else { "FAIL" }
        );
        for o in outages(&self.history.faults) {
            let _ = writeln!(s, "  {}", self.describe(&o));
        }
        for line in self.describe_restarts() {
            let _ = writeln!(s, "  {line}");
        }
        for line in self.describe_queue_faults() {
            let _ = writeln!(s, "  {line}");
        }
        if self
            .history
            .faults
            .iter()
            .any(|f| matches!(f.kind, FaultKind::MasterFrozen { .. }))
        {
            let healthy = self.history.held_lost.iter().filter(|l| l.healthy).count();
            let _ = writeln!(
                s,
                "  leases held on the side lost: {healthy} on healthy masters, {} on the frozen \
                 one",
                self.history.held_lost.len() - healthy
            );
        }
        if let Some(late) = &self.late_grants {
            let total = |f: fn(&GiveBacks) -> usize| late.iter().map(f).sum::<usize>();
            let per_freeze: Vec<usize> = late.iter().skip(1).map(|g| g.total()).collect();
            let _ = writeln!(
                s,
                "  grants given back for arriving later than their TTL: {} before the retry, {} \
                 after it ({} before the first freeze; from each freeze on: {per_freeze:?})",
                total(|g| g.before_retry),
                total(|g| g.after_retry),
                late.first().map_or(0, |g| g.total()),
            );
        }
        for v in self.violations.iter().take(5) {
            let _ = writeln!(s, "  violation: {v}");
        }
        for f in &self.failures {
            let _ = writeln!(s, "  FAIL: {f}");
        }
        s
    }
}

impl Report {
    /// `acquire()` calls that failed with `QuorumNotReached`.
    pub fn quorum_errors(&self) -> usize {
        self.history
            .acquire_errors
            .iter()
            .filter(|e| e.quorum)
            .count()
    }

    /// One line per hand-off pause or kill of queued waiters.
    fn describe_queue_faults(&self) -> Vec<String> {
        let h = &self.history;
        let ms = |us: u64| us / 1000;
        let mut lines = Vec::new();
        for f in &h.faults {
            let victim = f.target.map(|(w, _)| w);
            let next = h
                .acquisitions
                .iter()
                .filter(|a| Some(a.worker) != victim && a.t > f.t)
                .min_by_key(|a| a.t);
            let granted = next.map_or("nobody got the lock after it".to_owned(), |a| {
                format!(
                    "worker {} got the lock {} ms later",
                    a.worker,
                    ms(a.t - f.t)
                )
            });
            match (f.kind, f.target) {
                (FaultKind::HandOffPaused { for_ms }, Some((w, fence))) => {
                    let mut line = format!("worker {w} (fence {fence}) stopped for {for_ms} ms");
                    let acquired = h
                        .acquisitions
                        .iter()
                        .find(|a| a.worker == w && a.fence == fence);
                    // The holder before it: the highest fence below its own.
                    let before = h
                        .acquisitions
                        .iter()
                        .filter(|a| a.fence < fence)
                        .max_by_key(|a| a.fence);
                    let let_go = before.and_then(|b| {
                        h.releases
                            .iter()
                            .find(|r| r.worker == b.worker && r.fence == b.fence)
                    });
                    if let Some(a) = acquired {
                        let _ = write!(
                            line,
                            " as its acquire() returned after {} ms",
                            ms(a.t - a.started)
                        );
                        if let Some(r) = let_go {
                            let _ = write!(
                                line,
                                " (called {} ms before the holder before it released)",
                                ms(r.t.saturating_sub(a.started))
                            );
                        }
                    }
                    let resumed = f.t + for_ms * 1000;
                    let told = h.lost.iter().find(|l| l.worker == w && l.fence == fence);
                    let ops = h
                        .ops
                        .iter()
                        .filter(|op| op.worker == w && op.fence == fence && op.t > f.t)
                        .count();
                    let _ = write!(
                        line,
                        "; {granted}; {}; {ops} operation(s) of its after the stop",
                        told.map_or("never told lost()".to_owned(), |l| format!(
                            "told lost() {} ms after it was continued",
                            ms(l.t.saturating_sub(resumed))
                        )),
                    );
                    lines.push(line);
                }
                (FaultKind::WaitersKilled { killed, queued }, _) => lines.push(format!(
                    "{killed} waiter(s) killed while queued ({queued} counted by the lock's \
                     status), then the holder let go; {granted}"
                )),
                _ => {}
            }
        }
        lines
    }

    /// One line per node restart of a rolling restart, then one per holder
    /// held across restarts.
    fn describe_restarts(&self) -> Vec<String> {
        let h = &self.history;
        let mut restarts: Vec<&history::Fault> = h
            .faults
            .iter()
            .filter(|f| matches!(f.kind, FaultKind::NodeRestarted { .. }))
            .collect();
        restarts.sort_by_key(|f| f.t);
        let Some(first) = restarts.first().map(|f| f.t) else {
            return Vec::new();
        };
        let mut lines = Vec::new();
        let mut holders: Vec<(WorkerId, u64, usize)> = Vec::new();
        for (i, f) in restarts.iter().enumerate() {
            let FaultKind::NodeRestarted {
                node,
                nodes,
                holder_on,
            } = f.kind
            else {
                continue;
            };
            let next = restarts.get(i + 1).map(|n| n.t);
            let granted = h
                .acquisitions
                .iter()
                .filter(|a| a.t > f.t && next.is_none_or(|n| a.t <= n))
                .count();
            let mut line = format!(
                "node {node} restarted empty at +{} ms",
                (f.t - first) / 1000
            );
            if let Some((w, fence)) = f.target {
                let _ = write!(
                    line,
                    " under the holder of fence {fence} (its lease on {holder_on} of the {} \
                     other nodes)",
                    nodes - 1
                );
                match holders
                    .iter_mut()
                    .find(|(hw, hf, _)| (*hw, *hf) == (w, fence))
                {
                    Some(held) => held.2 += 1,
                    None => holders.push((w, fence, 1)),
                }
            }
            let _ = write!(line, ", {granted} acquisition(s) granted until the next");
            lines.push(line);
        }
        for (w, fence, n) in holders {
            let since = restarts
                .iter()
                .find(|f| f.target == Some((w, fence)))
                .map_or(first, |f| f.t);
            let lost = h.lost.iter().find(|l| l.worker == w && l.fence == fence);
            let release = h
                .releases
                .iter()
                .find(|r| r.worker == w && r.fence == fence);
            // Others granted the lock while it still held it, as far as it
            // knew (before its lost() notice, or its release).
            let until = lost.map(|l| l.t).or(release.map(|r| r.t));
            let others = h
                .acquisitions
                .iter()
                .filter(|a| a.worker != w && a.t > since && until.is_some_and(|u| a.t < u))
                .count();
            lines.push(format!(
                "holder of fence {fence} (worker {w}) held across {n} restart(s): {}, release {}, \
                 {others} acquisition(s) by others granted before it knew",
                lost.map_or("never told lost()".to_owned(), |l| format!(
                    "told lost() {} ms after the first",
                    l.t.saturating_sub(since) / 1000
                )),
                release.map_or("missing", |r| r.outcome.as_str()),
            ));
        }
        lines
    }

    /// One line on what happened during an outage of Redlock nodes.
    fn describe(&self, o: &Outage) -> String {
        let h = &self.history;
        let ms = |us: u64| us / 1000;
        let granted = h.acquisitions.iter().filter(|a| o.contains(a.t)).count();
        let failed = h.acquire_errors.iter().filter(|e| o.contains(e.t));
        let quorum = failed.clone().filter(|e| e.quorum).count();
        let mut line = format!(
            "{} of {} nodes stopped{}: {granted} acquisition(s) granted, {} acquire() \
             failure(s) ({quorum} QuorumNotReached)",
            o.stopped,
            o.nodes,
            o.until
                .map(|u| format!(" for {} ms", ms(u - o.from)))
                .unwrap_or_default(),
            failed.count(),
        );
        if let Some(back) = o.until {
            let next = h
                .acquisitions
                .iter()
                .map(|a| a.t)
                .filter(|&t| t > back)
                .min();
            if let Some(t) = next {
                let _ = write!(
                    line,
                    ", lock granted {} ms after the nodes came back",
                    ms(t - back)
                );
            }
        }
        if let Some((w, f)) = o.target {
            let _ = write!(line, ", holder's lease on {} running node(s)", o.holder_on);
            if let Some(l) = h.lost.iter().find(|l| l.worker == w && l.fence == f) {
                let _ = write!(
                    line,
                    ", told lost after {} ms",
                    ms(l.t.saturating_sub(o.from))
                );
            }
        }
        let reads = h.node_checks.iter().filter(|c| o.contains(c.t)).count();
        if reads > 0 {
            let _ = write!(line, ", {reads} live node(s) read");
        }
        line
    }
}

/// Client command timeout: well below the TTL, so a blackholed renewal
/// fails in time for a retry. While Redis is frozen, longer than the
/// freeze: a reply that arrives after it is what the scenario is about.
/// With a cluster master frozen, the library's default (2 s), longer than
/// a lease lasts unrenewed: a renewal of a healthy master's lease held up
/// behind one stuck on the frozen master (as before issue 24) then costs
/// the healthy lease, which a short timeout would hide.
fn command_timeout(fault: Fault, ttl: Duration) -> Duration {
    match fault {
        Fault::PauseRedis => freeze(ttl) + ttl,
        Fault::FreezeMaster => Duration::from_secs(2),
        _ => ttl / 4,
    }
}

/// How long Redis stays frozen: longer than the TTL, so an attempt sent as
/// it freezes is answered too late to use, and every lease set before it
/// has expired when it resumes.
fn freeze(ttl: Duration) -> Duration {
    ttl * REDIS_FREEZE_TENTHS / 10
}

/// How long a [`Fault::FreezeMaster`] keeps the master frozen: longer
/// than the TTL, so every lease on it is lost.
fn master_freeze(ttl: Duration) -> Duration {
    ttl * 2
}

/// Locks each worker holds on the side in `cluster-master-frozen`: on the
/// healthy masters, and on the frozen one.
const HELD_HEALTHY: usize = 4;
const HELD_FROZEN: usize = 2;

/// The lock every worker contends for.
const LOCK: &str = "chaos";
/// Lets the system settle before the first fault.
const WARM_UP: Duration = Duration::from_secs(1);
/// How long Redlock nodes stay stopped, in TTLs: longer than one, so a
/// killed node restarted empty cannot have held a lease that is still valid
/// (Redlock's delayed restart).
const NODES_DOWN_TTLS: u32 = 2;
/// How long a worker waits in one `acquire()` on Redlock, in TTL fractions:
/// short, so an outage of the quorum shows as failures while it lasts.
const REDLOCK_WAIT_DIVISOR: u32 = 2;
/// How long a worker waits in one `acquire()` on one server.
const SINGLE_WAIT: Duration = Duration::from_secs(5);
/// Bound on how long a long pause or an empty restart waits for another
/// holder's write, in TTLs.
const WAIT_FOR_OTHER_TTLS: u32 = 5;
/// Rolling restart: time between two node restarts, in tenths of the TTL.
/// Two renewal periods (the watchdog renews every third of the TTL) and a
/// little more, so that a renewal granted by a quorum takes the lease back
/// on the restarted node before the next one goes down.
const ROLLING_SPACING_TENTHS: u32 = 7;
/// Rolling restart: how many restarts a holder is held across (then a TTL
/// more). Without the re-take, the third leaves its lease on two nodes.
const ROLLING_HELD_RESTARTS: u32 = 3;
/// Redis freeze: its length, in tenths of the TTL (see [`freeze`]).
const REDIS_FREEZE_TENTHS: u32 = 14;
/// Queue faults: how long every other worker must have been inside
/// `acquire()` before the holder lets go (or they are killed), so that each
/// was refused and queued; the lock's status must count them too.
const QUEUED_FOR: Duration = Duration::from_millis(200);
/// Queue faults: the longest the announcing holder is kept waiting for the
/// others to queue (it holds and renews meanwhile) before the fault is
/// tried again with a later holder.
const QUEUE_GATE: Duration = Duration::from_secs(2);
/// Hand-off pause: the longest the stopped holder waits for another
/// holder's write (the lock must be granted to another within 5 s).
const HANDOFF_PAUSE_MAX: Duration = Duration::from_secs(8);
/// Redis freeze: leases each worker holds on locks of its own and drops as
/// the server freezes, so its watchdog has a backlog of releases (more than
/// it runs at once) when the late grant arrives. A give-back handed to the
/// watchdog, as before 4df6ea7, would wait behind them while the retry
/// found the lease "already ours".
const BALLAST: usize = 200;

struct Injector {
    fault: Fault,
    ttl: Duration,
    end: Instant,
    view: ResourceView,
    procs: Arc<Procs>,
    servers: Mutex<Vec<RedisServer>>,
    proxy: Option<Proxy>,
    /// Workers in the run (the quiet phase waits for all of them).
    workers: usize,
    /// Reads the Redlock nodes (`None` on one server).
    reader: Option<NodeReader>,
    /// Longest `acquire()` of a worker.
    wait: Duration,
    state: Mutex<InjectorState>,
    /// The cluster master a [`Fault::FreezeMaster`] freezes.
    frozen_master: Option<nix::unistd::Pid>,
    /// Held through each rolling restart, so a hold cannot end halfway
    /// through one (its lease read, then released).
    rolling: Mutex<()>,
}

/// One-server clients of each Redlock node, to read what it stores for
/// the lock through the public API (not the key layout).
struct NodeReader {
    runtime: tokio::runtime::Runtime,
    clients: Vec<Option<leasehold::Client>>,
}

/// What one node stores for the lock: the holder's first characters, if any.
type Stored = Result<Option<String>, String>;

impl NodeReader {
    /// Connects to every node.
    ///
    /// # Panics
    ///
    /// If a Tokio runtime cannot be built.
    fn connect(urls: &[String]) -> NodeReader {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
            .expect("a Tokio runtime for the node reader");
        let clients = urls
            .iter()
            .map(|url| runtime.block_on(leasehold::Client::connect(url)).ok())
            .collect();
        NodeReader { runtime, clients }
    }

    /// What node `i` stores for the lock. Tries three times: the first
    /// command on a connection to a restarted node may fail.
    fn read(&self, i: usize) -> Stored {
        let mut result = self.read_once(i);
        for _ in 1..3 {
            if result.is_ok() {
                break;
            }
            std::thread::sleep(Duration::from_millis(20));
            result = self.read_once(i);
        }
        result
    }

    fn read_once(&self, i: usize) -> Stored {
        self.status(i).map(|status| status.holder)
    }

    /// The lock's status on node `i` (the server, on one server), through
    /// the public API.
    fn status(&self, i: usize) -> Result<leasehold::LockStatus, String> {
        let Some(client) = &self.clients[i] else {
            return Err("no client (the node was unreachable at the start)".to_owned());
        };
        let lock = client.lock(LOCK);
        let status = lock.status();
        match self
            .runtime
            .block_on(async { tokio::time::timeout(Duration::from_secs(1), status).await })
        {
            Ok(Ok(status)) => Ok(status),
            Ok(Err(e)) => Err(e.to_string()),
            Err(_) => Err("no answer within 1 s".to_owned()),
        }
    }
}

/// Redlock nodes stopped under a holder, until `back_at`.
#[derive(Clone, Copy)]
struct Stopped {
    stop: NodeStop,
    back_at: Instant,
    majority: bool,
}

/// Workers kept out of `acquire()` (each told to wait until `wake` when its
/// attempt fails) so the live nodes can be read with no attempt in flight.
struct Quiet {
    deadline: Instant,
    wake: Instant,
    held: BTreeSet<WorkerId>,
}

struct InjectorState {
    next_arm: Instant,
    injected: usize,
    /// Blackholed holder waiting for the network to heal.
    restore: Option<(WorkerId, u64, Instant)>,
    /// Workers the injector killed (to be replaced).
    killed: Vec<WorkerId>,
    /// The next stretch of a [`Fault::StopNodes`].
    stretch: usize,
    /// Nodes stopped now.
    outage: Option<Stopped>,
    /// The quiet phase at the end of an outage of a majority.
    quiet: Option<Quiet>,
    /// The schedule of a [`Fault::RollingRestart`], once it has begun.
    rolling: Option<Rolling>,
    /// The holder a rolling restart is going on under.
    held: Option<(WorkerId, u64)>,
    /// When frozen Redis is due to continue.
    frozen_until: Option<Instant>,
    /// When the frozen cluster master is due to continue.
    master_frozen_until: Option<Instant>,
    /// A hand-off pause waiting for its target's acquisition.
    handoff: Option<Handoff>,
    notes: Vec<String>,
}

/// An armed [`Fault::PauseHandedOff`]: the first acquisition by one of
/// `waiters` whose `acquire()` was called before `before` is stopped.
struct Handoff {
    /// Workers that were queued while the holder was kept.
    waiters: BTreeSet<WorkerId>,
    /// When the holder was let go (it held until then).
    before: Micros,
    /// Disarmed if nothing matched by then.
    until: Instant,
}

/// Every worker but the holder, found queued for the lock.
struct Queued {
    waiters: Vec<WorkerId>,
    /// Queued waiters the lock's status counted.
    counted: usize,
}

/// Shortest stop of a [`Fault::PauseHandedOff`]: past the holder's lease,
/// whether the TTL or the queue window bounds it.
fn handoff_pause_floor(ttl: Duration) -> Duration {
    ttl.max(QUEUE_WINDOW) + Duration::from_millis(500)
}

/// How long a queue fault needs after it fires for its outcome to show: a
/// live worker must get the lock within the bound of
/// [`crate::check::liveness`] while the workers still start acquisitions.
fn queue_aftermath(ttl: Duration) -> Duration {
    ttl.max(QUEUE_WINDOW) + QUEUE_HEARTBEAT + Duration::from_millis(1500)
}

/// The next restart of a [`Fault::RollingRestart`].
#[derive(Clone, Copy)]
struct Rolling {
    /// Which node.
    node: usize,
    /// When it is due.
    at: Instant,
    /// When the last one began (its fault's time).
    last: Option<Micros>,
}

impl Injector {
    fn state(&self) -> MutexGuard<'_, InjectorState> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The Redis servers: one, or the Redlock nodes.
    fn servers(&self) -> MutexGuard<'_, Vec<RedisServer>> {
        self.servers.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn record(&self, kind: FaultKind, target: Option<(WorkerId, u64)>) -> u64 {
        let t = now_us();
        self.view.record_fault(history::Fault { t, kind, target });
        t
    }

    /// Called from the holder's connection thread while it waits for the answer.
    fn on_holding(&self, worker: WorkerId, fence: u64) -> Reply {
        if self.fault == Fault::PauseRedis {
            // A holder whose acquire() spanned a freeze holds a quarter of
            // the TTL: less than its first renewal, longer than a give-back
            // queued behind the ballast's releases takes to land.
            return Reply::Hold(millis(self.ttl / 4));
        }
        if matches!(self.fault, Fault::PauseHandedOff | Fault::KillQueuedWaiters) {
            return self.queue_fault(worker);
        }
        let stretch = {
            let mut st = self.state();
            let now = Instant::now();
            if now < st.next_arm || st.restore.is_some() || st.outage.is_some() || st.held.is_some()
            {
                return Reply::Go;
            }
            let stretch = match self.fault {
                Fault::StopNodes(stretches) => match stretches.get(st.stretch) {
                    Some(stop) => Some(*stop),
                    None => return Reply::Go,
                },
                _ => None,
            };
            // Leave time at the end for the aftermath to show.
            let aftermath = match stretch {
                Some(stop) if self.nodes_down(stop, 0).majority_down() => {
                    self.ttl * (NODES_DOWN_TTLS + 3)
                }
                Some(_) => self.ttl * (NODES_DOWN_TTLS + 1),
                None if self.fault == Fault::RollingRestart => {
                    self.rolling_hold() + self.spacing() * 2 + self.ttl
                }
                None => self.ttl * 3,
            };
            if now + aftermath > self.end {
                return Reply::Go;
            }
            if self.fault == Fault::RollingRestart {
                // Held across restarts from its acquisition on: a restart
                // between the two would have no holder recorded.
                let last = st.rolling.and_then(|r| r.last);
                let acquired = self.view.acquired_at(worker, fence);
                if last.is_some_and(|last| acquired.is_none_or(|a| a <= last)) {
                    return Reply::Go;
                }
                st.held = Some((worker, fence));
                // The first restart a spacing after the announce: the lease
                // may have been acquired on a bare quorum, and only its first
                // renewal (at ttl/3) puts it back on the other nodes; no
                // lease survives losing one of a bare quorum before that.
                st.rolling.get_or_insert(Rolling {
                    node: 0,
                    at: now + self.spacing(),
                    last: None,
                });
            }
            st.stretch += 1;
            // A rolling restart counts its restarts, not its holders.
            if self.fault != Fault::RollingRestart {
                st.injected += 1;
            }
            st.next_arm = Instant::now() + self.ttl * 30;
            stretch
        };
        let target = Some((worker, fence));
        let wait_other = self.ttl * WAIT_FOR_OTHER_TTLS;
        let reply = match self.fault {
            Fault::PauseLong => {
                let stopped = Instant::now();
                self.procs.signal(worker, Signal::SIGSTOP);
                self.record(FaultKind::PauseLong, target);
                let other_wrote = self.view.wait_for_write_above(fence, wait_other);
                let floor = self.ttl + Duration::from_millis(100);
                if stopped.elapsed() < floor {
                    std::thread::sleep(floor - stopped.elapsed());
                }
                self.procs.signal(worker, Signal::SIGCONT);
                if !other_wrote {
                    self.note(format!(
                        "no other holder wrote while fence {fence} was paused"
                    ));
                }
                Reply::Go
            }
            Fault::PauseShort => {
                self.procs.signal(worker, Signal::SIGSTOP);
                self.record(FaultKind::PauseShort, target);
                std::thread::sleep(self.ttl / 4);
                self.procs.signal(worker, Signal::SIGCONT);
                Reply::Go
            }
            Fault::KillHolder => {
                self.record(FaultKind::Kill, target);
                self.procs.signal(worker, Signal::SIGKILL);
                self.state().killed.push(worker);
                Reply::Go
            }
            Fault::KillRunWrapper => {
                // `worker` is the `leasehold run` process (the announcing
                // command reports under its id); its command is not ours
                // to signal.
                self.state().killed.push(worker);
                self.record(FaultKind::WrapperKilled, target);
                if !self.procs.signal(worker, Signal::SIGKILL) {
                    self.note(format!(
                        "the wrapper of fence {fence} had exited before it could be killed"
                    ));
                } else if !self.view.wait_for_write_above(fence, wait_other) {
                    self.note(format!(
                        "no other holder wrote after the wrapper of fence {fence} was killed"
                    ));
                }
                // A command still alive now writes after another holder.
                Reply::Go
            }
            Fault::RestartEmpty => {
                self.record(FaultKind::RestartEmpty, target);
                self.servers()[0].restart_without_persistence();
                if !self.view.wait_for_write_above(fence, wait_other) {
                    self.note(format!(
                        "no other holder wrote after the restart (fence {fence})"
                    ));
                }
                Reply::Go
            }
            Fault::RestartAof => {
                self.record(FaultKind::RestartAof, target);
                self.servers()[0].restart();
                // Hold across at least one renewal against the restarted server.
                std::thread::sleep(self.ttl / 2);
                Reply::Go
            }
            Fault::Blackhole => {
                if let Some(proxy) = &self.proxy {
                    proxy.set_mode(ProxyMode::Blackhole);
                }
                self.record(FaultKind::Blackhole, target);
                self.state().restore = Some((worker, fence, Instant::now() + self.ttl * 3));
                Reply::Hold(millis(self.ttl * 3))
            }
            Fault::StopNodes(_) => match stretch {
                Some(stop) => self.stop_nodes(stop, target),
                None => Reply::Go,
            },
            Fault::RollingRestart => {
                // Held (then it writes) from the first restart due across
                // the restarts the runner's loop does, and a TTL more; a
                // later holder waits for the next one due.
                let first = self.state().rolling.map_or(Instant::now(), |r| r.at);
                self.roll();
                let until = first.max(Instant::now()) + self.rolling_hold();
                std::thread::sleep(until.saturating_duration_since(Instant::now()));
                let _between_restarts = self.rolling.lock().unwrap_or_else(|e| e.into_inner());
                self.state().held = None;
                Reply::Go
            }
            Fault::None
            | Fault::ScriptFlush
            | Fault::PauseRedis
            | Fault::PauseHandedOff
            | Fault::KillQueuedWaiters
            | Fault::FreezeMaster => Reply::Go,
        };
        self.state().next_arm = Instant::now() + self.ttl * 2;
        reply
    }

    /// A holder announced in a queue scenario: keeps it (holding) until
    /// every other worker is queued, then kills them all
    /// ([`Fault::KillQueuedWaiters`]) or arms the pause of the first of them
    /// to be handed the lock ([`Fault::PauseHandedOff`]), and lets it go.
    fn queue_fault(&self, holder: WorkerId) -> Reply {
        {
            let mut st = self.state();
            let now = Instant::now();
            if now < st.next_arm
                || st.handoff.is_some()
                || now + queue_aftermath(self.ttl) > self.end
            {
                return Reply::Go;
            }
            st.next_arm = now + self.ttl * 30;
        }
        let queued = self.all_queued(holder);
        // Leave time at the end for the aftermath to show.
        let Some(queued) =
            queued.filter(|_| Instant::now() + queue_aftermath(self.ttl) <= self.end)
        else {
            // Someone was not queued in time (a replacement starting, a
            // waiter between attempts): the next holder tries again.
            self.state().next_arm = Instant::now();
            return Reply::Go;
        };
        if self.fault == Fault::PauseHandedOff {
            self.state().handoff = Some(Handoff {
                waiters: queued.waiters.iter().copied().collect(),
                before: now_us(),
                until: Instant::now() + self.wait + self.ttl,
            });
            return Reply::Go;
        }
        let t = now_us();
        // Marked before the kill, so the runner's loop replaces them.
        self.state().killed.extend(&queued.waiters);
        for &w in &queued.waiters {
            if !self.procs.signal(w, Signal::SIGKILL) {
                self.note(format!(
                    "queued waiter {w} had exited before it could be killed"
                ));
            }
        }
        self.view.record_fault(history::Fault {
            t,
            kind: FaultKind::WaitersKilled {
                killed: count(queued.waiters.len()),
                queued: count(queued.counted),
            },
            target: None,
        });
        let mut st = self.state();
        st.injected += 1;
        // Their queue deadlines pass before the next kill.
        st.next_arm = Instant::now() + QUEUE_WINDOW + self.ttl;
        Reply::Go
    }

    /// Waits (at most [`QUEUE_GATE`]) until every running worker but
    /// `holder` has been inside `acquire()` for [`QUEUED_FOR`] and the
    /// lock's status counts as many queued waiters: each of them was
    /// refused while `holder` held, and waits in the queue.
    fn all_queued(&self, holder: WorkerId) -> Option<Queued> {
        let reader = self.reader.as_ref()?;
        let deadline = Instant::now() + QUEUE_GATE;
        loop {
            let killed = self.state().killed.clone();
            let waiters: Vec<WorkerId> = self
                .procs
                .ids()
                .into_iter()
                .filter(|w| *w != holder && !killed.contains(w))
                .collect();
            let acquiring = self.view.acquiring();
            let now = now_us();
            let settled = !waiters.is_empty()
                && waiters.iter().all(|w| {
                    acquiring
                        .get(w)
                        .is_some_and(|&since| now.saturating_sub(since) >= micros(QUEUED_FOR))
                });
            if settled {
                match reader.status(0) {
                    Ok(status) if status.waiters == waiters.len() => {
                        return Some(Queued {
                            counted: status.waiters,
                            waiters,
                        });
                    }
                    Ok(_) => {}
                    Err(e) => self.note(format!("cannot read the lock's status: {e}")),
                }
            }
            if Instant::now() >= deadline {
                return None;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Called when a worker's `acquire()` returned a guard: stops it if it
    /// is the waiter an armed [`Fault::PauseHandedOff`] waits for, past its
    /// lease and until another holder wrote, then has it hold (abandoning
    /// its work on `lost()`) for [`woken_notice`].
    fn on_acquired(&self, a: &Acquisition) -> Reply {
        if self.fault != Fault::PauseHandedOff {
            return Reply::Ok;
        }
        {
            let mut st = self.state();
            let Some(armed) = &st.handoff else {
                return Reply::Ok;
            };
            if Instant::now() >= armed.until {
                st.handoff = None;
                st.next_arm = Instant::now();
                return Reply::Ok;
            }
            if !armed.waiters.contains(&a.worker) || a.started >= armed.before {
                return Reply::Ok;
            }
            st.handoff = None;
        }
        let target = Some((a.worker, a.fence));
        let t = now_us();
        let stopped = Instant::now();
        if !self.procs.signal(a.worker, Signal::SIGSTOP) {
            self.note(format!(
                "worker {} exited before it could be stopped after its hand-off",
                a.worker
            ));
            self.state().next_arm = Instant::now();
            return Reply::Ok;
        }
        let other_wrote = self.view.wait_for_write_above(a.fence, HANDOFF_PAUSE_MAX);
        let floor = handoff_pause_floor(self.ttl);
        if stopped.elapsed() < floor {
            std::thread::sleep(floor - stopped.elapsed());
        }
        // Recorded before SIGCONT: the lost notice is due from here.
        self.view.record_fault(history::Fault {
            t,
            kind: FaultKind::HandOffPaused {
                for_ms: millis(stopped.elapsed()),
            },
            target,
        });
        self.procs.signal(a.worker, Signal::SIGCONT);
        if !other_wrote {
            self.note(format!(
                "no other holder wrote while fence {} was stopped after its hand-off",
                a.fence
            ));
        }
        let mut st = self.state();
        st.injected += 1;
        st.next_arm = Instant::now() + self.ttl * 2;
        Reply::Hold(millis(woken_notice(self.ttl)))
    }

    /// Called when a worker is about to call `acquire()`: when a freeze is
    /// due, Redis is frozen before the worker is told to go on, so its
    /// first attempt waits in the frozen server.
    fn on_acquiring(&self) -> Reply {
        if self.fault != Fault::PauseRedis {
            return Reply::Go;
        }
        let freeze = freeze(self.ttl);
        let n = {
            let mut st = self.state();
            let now = Instant::now();
            // Leave time after the resume to judge the lock's recovery.
            if now < st.next_arm
                || st.frozen_until.is_some()
                || now + freeze + self.ttl * 2 > self.end
            {
                return Reply::Go;
            }
            st.injected += 1;
            st.frozen_until = Some(now + freeze);
            st.next_arm = now + freeze + self.ttl;
            st.injected
        };
        let servers = self.servers();
        // A marker in the server's command stream, so give-backs can be
        // told apart by freeze.
        let echoed: redis::RedisResult<String> = redis::cmd("ECHO")
            .arg(format!("freeze {n}"))
            .query(&mut servers[0].connection());
        if let Err(e) = echoed {
            self.note(format!("cannot mark freeze {n} on the server: {e}"));
        }
        servers[0].pause();
        self.record(FaultKind::RedisPaused, None);
        Reply::Frozen
    }

    /// Continues frozen Redis when it is due; the next freeze may come a
    /// TTL later.
    fn resume_redis(&self) {
        let due = self
            .state()
            .frozen_until
            .is_some_and(|u| Instant::now() >= u);
        if !due {
            return;
        }
        self.record(FaultKind::RedisResumed, None);
        self.servers()[0].resume();
        let mut st = self.state();
        st.frozen_until = None;
        st.next_arm = Instant::now() + self.ttl;
    }

    fn note(&self, note: String) {
        self.state().notes.push(note);
    }

    /// The fault event of stopping `stop` under a holder whose lease is on
    /// `holder_on` of the nodes left running.
    fn nodes_down(&self, stop: NodeStop, holder_on: u32) -> FaultKind {
        FaultKind::NodesDown {
            killed: count(stop.killed.len()),
            paused: count(stop.paused.len()),
            nodes: count(self.servers().len()),
            holder_on,
        }
    }

    /// How many nodes that `stops` leaves running store the lease of
    /// `worker`'s `fence`.
    fn holder_on(&self, worker: WorkerId, fence: u64, stops: impl Fn(usize) -> bool) -> u32 {
        let (Some(reader), Some(token)) = (&self.reader, self.view.token_of(worker, fence)) else {
            return 0;
        };
        let live = (0..reader.clients.len()).filter(|i| !stops(*i));
        let mut on = 0;
        for i in live {
            match reader.read(i) {
                Ok(Some(holder)) if token.starts_with(holder.as_str()) => on += 1,
                Ok(_) => {}
                Err(e) => self.note(format!("cannot read node {i} under the holder: {e}")),
            }
        }
        on
    }

    /// Stops the nodes of `stop` under the holder `target`. If its lease
    /// stays on a quorum of nodes it holds across a renewal, which must
    /// succeed; if not (Redlock renews only where the lease is, and an
    /// acquisition needs only a quorum) it holds until `lost()` fires.
    fn stop_nodes(&self, stop: NodeStop, target: Option<(WorkerId, u64)>) -> Reply {
        let holder_on = target.map_or(0, |(w, f)| self.holder_on(w, f, |i| stop.stops(i)));
        {
            let mut servers = self.servers();
            for &i in stop.killed {
                servers[i].kill();
            }
            for &i in stop.paused {
                servers[i].pause();
            }
        }
        let kind = self.nodes_down(stop, holder_on);
        self.record(kind, target);
        self.state().outage = Some(Stopped {
            stop,
            back_at: Instant::now() + self.ttl * NODES_DOWN_TTLS,
            majority: kind.majority_down(),
        });
        if !kind.lease_survives() {
            Reply::Hold(millis(self.ttl * 3))
        } else {
            // The watchdog renews at a third of the TTL.
            std::thread::sleep(self.ttl / 2);
            Reply::Go
        }
    }

    /// Time between two restarts of a [`Fault::RollingRestart`].
    fn spacing(&self) -> Duration {
        self.ttl * ROLLING_SPACING_TENTHS / 10
    }

    /// How long a holder is held from the first restart under it.
    fn rolling_hold(&self) -> Duration {
        self.spacing() * (ROLLING_HELD_RESTARTS - 1) + self.ttl
    }

    /// Restarts the next node of a rolling restart if it is due (and the
    /// run is not about to end): kill -9, then a start with an empty
    /// dataset at once. Under a holder, first reads how many of the other
    /// nodes store its lease.
    fn roll(&self) {
        let _one_at_a_time = self.rolling.lock().unwrap_or_else(|e| e.into_inner());
        let (node, target, t) = {
            let mut st = self.state();
            let now = Instant::now();
            let Some(rolling) = &mut st.rolling else {
                return;
            };
            if now < rolling.at || now + self.ttl > self.end {
                return;
            }
            let node = rolling.node;
            rolling.node = (node + 1) % self.servers().len();
            rolling.at = now + self.spacing();
            // Stamped with the holder it goes on under: a holder that
            // acquires later is only held across later restarts.
            let t = now_us();
            rolling.last = Some(t);
            st.injected += 1;
            (node, st.held, t)
        };
        let holder_on = target.map_or(0, |(w, f)| self.holder_on(w, f, |i| i == node));
        let mut servers = self.servers();
        servers[node].kill();
        self.view.record_fault(history::Fault {
            t,
            kind: FaultKind::NodeRestarted {
                node: count(node),
                nodes: count(servers.len()),
                holder_on,
            },
            target,
        });
        servers[node].restart_without_persistence();
    }

    /// Called when a worker's `acquire()` failed: during the quiet phase it
    /// is told to stay out of `acquire()` until the nodes are back.
    fn on_failed(&self, worker: WorkerId) -> Reply {
        let mut st = self.state();
        match &mut st.quiet {
            Some(quiet) => {
                quiet.held.insert(worker);
                let left = quiet.wake.saturating_duration_since(Instant::now());
                Reply::Hold(millis(left).max(1))
            }
            None => Reply::Ok,
        }
    }

    /// Ends an outage that is due: a minority comes back at once; for a
    /// majority, the workers are first kept out of `acquire()` and the
    /// live nodes read.
    fn end_outage(&self) {
        let Some(outage) = self.state().outage else {
            return;
        };
        let now = Instant::now();
        if now < outage.back_at {
            return;
        }
        if outage.majority {
            let mut st = self.state();
            let Some(quiet) = &st.quiet else {
                let deadline = now + self.wait + Duration::from_millis(300);
                st.quiet = Some(Quiet {
                    deadline,
                    wake: deadline + Duration::from_millis(100),
                    held: BTreeSet::new(),
                });
                return;
            };
            let all = quiet.held.len() >= self.workers;
            if !all && now < quiet.deadline {
                return;
            }
            drop(st);
            if all {
                self.read_live_nodes(outage.stop);
            } else {
                self.note(
                    "not every worker could be kept out of acquire(), so the live nodes were \
                     not read"
                        .to_owned(),
                );
            }
        }
        self.record(FaultKind::NodesBack, None);
        {
            let mut servers = self.servers();
            for &i in outage.stop.killed {
                servers[i].restart();
            }
            for &i in outage.stop.paused {
                servers[i].resume();
            }
        }
        let mut st = self.state();
        st.outage = None;
        st.quiet = None;
        st.next_arm = Instant::now() + self.ttl;
    }

    /// The give-backs `monitor` saw, per freeze (see [`Report::late_grants`]).
    /// A last marker, once seen, means every earlier command was read.
    fn late_grants(&self, monitor: &Monitor) -> Vec<GiveBacks> {
        const END: &str = "end of run";
        let echoed: redis::RedisResult<String> = redis::cmd("ECHO")
            .arg(END)
            .query(&mut self.servers()[0].connection());
        let deadline = Instant::now() + Duration::from_secs(5);
        let mut calls = monitor.calls();
        while echoed.is_ok()
            && calls.last() != Some(&Call::Marker(END.to_owned()))
            && Instant::now() < deadline
        {
            std::thread::sleep(Duration::from_millis(20));
            calls = monitor.calls();
        }
        if calls.last() == Some(&Call::Marker(END.to_owned())) {
            calls.pop();
        } else {
            self.note("the server's command stream was not read to its end".to_owned());
        }
        monitor::give_backs(&calls)
    }

    /// Records what the nodes that were not stopped store for the lock.
    fn read_live_nodes(&self, stop: NodeStop) {
        let Some(reader) = &self.reader else { return };
        let live = (0..reader.clients.len()).filter(|i| !stop.stops(*i));
        for node in live {
            let (holder, error) = match reader.read(node) {
                Ok(holder) => (holder, None),
                Err(e) => (None, Some(e)),
            };
            self.view.record_node_check(NodeCheck {
                t: now_us(),
                node,
                holder,
                error,
            });
        }
    }

    /// Periodic work from the runner's loop: bring stopped nodes back, heal
    /// a blackhole once the holder reported the loss (or gave up), flush
    /// scripts.
    fn tick(&self, next_flush: &mut Instant) {
        self.freeze_master();
        self.end_outage();
        self.roll();
        self.resume_redis();
        let restore = self.state().restore;
        if let (Some((worker, fence, deadline)), Some(proxy)) = (restore, &self.proxy)
            && (self.view.has_lost(worker, fence) || Instant::now() >= deadline)
        {
            // Reset first: connections that lived through the blackhole
            // may hold half a reply; new ones then pass.
            proxy.set_mode(ProxyMode::Reset);
            std::thread::sleep(Duration::from_millis(20));
            proxy.set_mode(ProxyMode::Pass);
            self.state().restore = None;
        }
        if self.fault == Fault::ScriptFlush && Instant::now() >= *next_flush {
            let mut con = self.servers()[0].connection();
            let flushed: redis::RedisResult<()> = redis::cmd("SCRIPT").arg("FLUSH").query(&mut con);
            if flushed.is_ok() {
                self.record(FaultKind::ScriptFlush, None);
                self.state().injected += 1;
            }
            *next_flush = Instant::now() + Duration::from_millis(250);
        }
    }
}

impl Injector {
    /// [`Fault::FreezeMaster`]: freezes the master once armed (and only if
    /// the freeze ends a TTL before the run does), continues it when due,
    /// and arms the next freeze a TTL later.
    fn freeze_master(&self) {
        let Some(pid) = self.frozen_master else {
            return;
        };
        let now = Instant::now();
        let freeze = master_freeze(self.ttl);
        let mut st = self.state();
        match st.master_frozen_until {
            Some(until) if now >= until => {
                nix::sys::signal::kill(pid, Signal::SIGCONT).expect("continue the master");
                st.master_frozen_until = None;
                st.next_arm = now + self.ttl;
            }
            Some(_) => {}
            None if now >= st.next_arm && now + freeze + self.ttl <= self.end => {
                nix::sys::signal::kill(pid, Signal::SIGSTOP).expect("freeze the master");
                st.master_frozen_until = Some(now + freeze);
                st.injected += 1;
                drop(st);
                self.record(
                    FaultKind::MasterFrozen {
                        for_ms: millis(freeze),
                    },
                    None,
                );
            }
            None => {}
        }
    }

    /// Continues a master still frozen (the run ended meanwhile).
    fn continue_master(&self) {
        if let Some(pid) = self.frozen_master
            && self.state().master_frozen_until.take().is_some()
        {
            nix::sys::signal::kill(pid, Signal::SIGCONT).expect("continue the master");
        }
    }
}

/// The cluster of a `Topology::Cluster` run, the master it freezes and
/// the locks each worker holds on the side: by worker slot, those on the
/// healthy masters and those on the frozen one.
struct ClusterSetup {
    cluster: RedisCluster,
    frozen: u16,
    held: Vec<(Vec<String>, Vec<String>)>,
}

impl ClusterSetup {
    /// Starts `masters` masters without replicas; a node that misses the
    /// frozen master for longer than the run does not mark it failed (the
    /// cluster would then refuse every slot). The frozen master is one that
    /// does not serve the contended lock.
    fn start(masters: usize, workers: usize) -> ClusterSetup {
        let cluster = RedisCluster::start(masters, 0);
        for node in cluster.nodes() {
            let _: () = redis::cmd("CONFIG")
                .arg("SET")
                .arg("cluster-node-timeout")
                .arg("60000")
                .query(&mut node.connection())
                .expect("CONFIG SET cluster-node-timeout");
        }
        let master_of = |name: &str| cluster.master_of(&format!("leasehold:{{{name}}}:lock"));
        let lock_master = master_of(LOCK);
        let frozen = cluster
            .master_ports()
            .into_iter()
            .find(|&port| port != lock_master)
            .expect("a master besides the lock's");
        let mut names = (0..).map(|i| format!("{LOCK}-held-{i}"));
        let held = (0..workers)
            .map(|_| {
                let (mut healthy, mut on_frozen) = (Vec::new(), Vec::new());
                while healthy.len() < HELD_HEALTHY || on_frozen.len() < HELD_FROZEN {
                    let name = names.next().expect("endless");
                    if master_of(&name) == frozen {
                        if on_frozen.len() < HELD_FROZEN {
                            on_frozen.push(name);
                        }
                    } else if healthy.len() < HELD_HEALTHY {
                        healthy.push(name);
                    }
                }
                (healthy, on_frozen)
            })
            .collect();
        ClusterSetup {
            cluster,
            frozen,
            held,
        }
    }
}

/// Runs `scenario` and checks the history it recorded.
///
/// # Panics
///
/// If `redis-server` or the worker binary cannot be started (the testkit's
/// message says how to install Redis), or a worker cannot reach the
/// resource.
pub fn run(scenario: &Scenario, options: &RunOptions) -> Report {
    let ttl = scenario.ttl;
    let (servers, wait) = match scenario.topology {
        Topology::Single => {
            let server = match scenario.fault {
                Fault::RestartAof => RedisServer::builder().appendonly(true).start(),
                _ => RedisServer::start(),
            };
            (vec![server], SINGLE_WAIT)
        }
        Topology::Redlock { nodes } => (start_servers(nodes), ttl / REDLOCK_WAIT_DIVISOR),
        Topology::Cluster { .. } => (Vec::new(), SINGLE_WAIT),
    };
    let cluster = match scenario.topology {
        Topology::Cluster { masters } => Some(ClusterSetup::start(
            masters,
            usize::try_from(options.workers.max(1)).expect("fits"),
        )),
        _ => None,
    };
    let resource = Resource::start();
    let proxy = (scenario.fault == Fault::Blackhole).then(|| Proxy::start(servers[0].port()));
    let proxy_url = proxy.as_ref().map(Proxy::url);
    let direct_urls: Vec<String> = match &cluster {
        Some(c) => c.cluster.urls(),
        None => servers.iter().map(RedisServer::url).collect(),
    };
    let workers = options.workers.max(1);
    let wrapper = (scenario.fault == Fault::KillRunWrapper).then(|| {
        let exe = options.leasehold_exe.clone().unwrap_or_default();
        assert!(
            exe.is_file(),
            "{} needs the `leasehold` binary (`cargo build -p leasehold-cli`); not found at {:?}",
            scenario.name,
            exe
        );
        exe
    });
    let procs = Arc::new(Procs::new(options.worker_exe.clone(), wrapper));
    // Started before any worker, so it sees every attempt.
    let monitor = (scenario.fault == Fault::PauseRedis).then(|| Monitor::start(servers[0].port()));
    let queue_fault = matches!(
        scenario.fault,
        Fault::PauseHandedOff | Fault::KillQueuedWaiters
    );
    let started = Instant::now();
    let end = started + options.duration;
    let until = now_us() + u64::try_from(options.duration.as_micros()).unwrap_or(u64::MAX);
    let injector = Arc::new(Injector {
        fault: scenario.fault,
        ttl,
        end,
        view: resource.view(),
        procs: Arc::clone(&procs),
        servers: Mutex::new(servers),
        proxy,
        workers: workers as usize,
        reader: (matches!(scenario.topology, Topology::Redlock { .. }) || queue_fault)
            .then(|| NodeReader::connect(&direct_urls)),
        wait,
        state: Mutex::new(InjectorState {
            next_arm: started + WARM_UP.max(ttl),
            injected: 0,
            restore: None,
            killed: Vec::new(),
            stretch: 0,
            outage: None,
            quiet: None,
            rolling: None,
            held: None,
            frozen_until: None,
            master_frozen_until: None,
            handoff: None,
            notes: Vec::new(),
        }),
        frozen_master: cluster
            .as_ref()
            .filter(|_| scenario.fault == Fault::FreezeMaster)
            .map(|c| {
                nix::unistd::Pid::from_raw(
                    i32::try_from(c.cluster.node(c.frozen).pid()).expect("pid fits"),
                )
            }),
        rolling: Mutex::new(()),
    });
    {
        // Weak: the injector owns the view, so a strong reference would be a
        // cycle that keeps Redis and the workers alive after a panic.
        let injector = Arc::downgrade(&injector);
        resource.view().set_hook(Arc::new(move |w, f| {
            injector.upgrade().map_or(Reply::Go, |i| i.on_holding(w, f))
        }));
    }
    {
        let injector = Arc::downgrade(&injector);
        resource.view().set_failed_hook(Arc::new(move |w| {
            injector.upgrade().map_or(Reply::Ok, |i| i.on_failed(w))
        }));
    }
    {
        let injector = Arc::downgrade(&injector);
        resource.view().set_acquired_hook(Arc::new(move |a| {
            injector.upgrade().map_or(Reply::Ok, |i| i.on_acquired(a))
        }));
    }
    {
        let injector = Arc::downgrade(&injector);
        resource.view().set_acquiring_hook(Arc::new(move |_| {
            injector.upgrade().map_or(Reply::Go, |i| i.on_acquiring())
        }));
    }
    let holder_faults = !matches!(
        scenario.fault,
        Fault::None | Fault::ScriptFlush | Fault::PauseRedis | Fault::FreezeMaster
    );
    let config = |id: WorkerId, slot: u32| WorkerConfig {
        id,
        urls: match (&proxy_url, slot) {
            (Some(url), 0) => vec![url.clone()],
            _ => direct_urls.clone(),
        },
        resource_port: resource.port(),
        lock: LOCK.into(),
        ttl,
        wait,
        command_timeout: command_timeout(scenario.fault, ttl),
        until,
        seed: options.seed,
        max_sleep: Duration::from_millis(2),
        // A queue fault may fall on any holder: every worker announces.
        announce: holder_faults && (slot == 0 || queue_fault),
        report_acquiring: scenario.fault == Fault::PauseRedis || queue_fault,
        announce_slow: scenario.fault == Fault::PauseRedis,
        probes: scenario.fault != Fault::PauseRedis,
        ballast: if scenario.fault == Fault::PauseRedis {
            BALLAST
        } else {
            0
        },
        cluster: cluster.is_some(),
        held_healthy: cluster
            .as_ref()
            .map(|c| c.held[slot as usize].0.clone())
            .unwrap_or_default(),
        held_frozen: cluster
            .as_ref()
            .map(|c| c.held[slot as usize].1.clone())
            .unwrap_or_default(),
    };
    let mut slots: BTreeMap<WorkerId, u32> = BTreeMap::new();
    let mut next_id: WorkerId = 1;
    for slot in 0..workers {
        procs.spawn(&config(next_id, slot));
        slots.insert(next_id, slot);
        next_id += 1;
    }
    let mut failures = Vec::new();
    let mut next_flush = started + WARM_UP;
    while Instant::now() < end {
        std::thread::sleep(Duration::from_millis(20));
        injector.tick(&mut next_flush);
        for (id, success) in procs.reap() {
            let slot = slots.remove(&id).unwrap_or(0);
            let killed = injector.state().killed.contains(&id);
            if !killed && !success {
                failures.push(format!("worker {id} failed (its error is on stderr)"));
            } else if Instant::now() + ttl < end {
                procs.spawn(&config(next_id, slot));
                slots.insert(next_id, slot);
                next_id += 1;
            }
        }
    }
    injector.continue_master();
    // Workers finish their iteration (an acquire may wait several TTLs).
    let (stragglers, failed) = procs.finish(wait + ttl * 3 + Duration::from_secs(1));
    injector.tick(&mut next_flush);
    for id in failed
        .into_iter()
        .filter(|id| !injector.state().killed.contains(id))
    {
        failures.push(format!("worker {id} failed (its error is on stderr)"));
    }
    if stragglers > 0 {
        failures.push(format!(
            "{stragglers} worker(s) did not stop in time and were killed"
        ));
    }
    let late_grants = monitor.map(|m| injector.late_grants(&m));
    let history = resource.view().history();
    drop(resource);
    let bounds = Bounds {
        ttl,
        liveness_slack: Duration::from_secs(1),
        notice_slack: Duration::from_millis(150),
        queue_window: QUEUE_WINDOW,
        queue_heartbeat: QUEUE_HEARTBEAT,
    };
    let violations = check_all(&history, bounds);
    let stale_rejected = history.stale_rejected();
    let injected = injector.state().injected;
    let mut all_failures = verdict(scenario, &violations, stale_rejected, injected);
    all_failures.extend(failures);
    all_failures.extend(
        unproven_outages(&history.acquire_errors, &history.faults)
            .into_iter()
            .map(|n| format!("fault did not play out: {n}")),
    );
    if scenario.fault == Fault::FreezeMaster {
        let (healthy, frozen): (Vec<_>, Vec<_>) = history.held_lost.iter().partition(|l| l.healthy);
        if !healthy.is_empty() {
            all_failures.push(format!(
                "{} lease(s) held on healthy masters lost while another master was frozen",
                healthy.len()
            ));
        }
        if frozen.is_empty() {
            all_failures.push(
                "fault did not play out: no lease held on the frozen master was lost".to_owned(),
            );
        }
    }
    if let Some(late) = &late_grants {
        if late.iter().all(|g| g.total() == 0) {
            all_failures.push(
                "fault did not play out: no grant came back later than its TTL (none was given \
                 back), so the path the freezes test was never taken"
                    .to_owned(),
            );
        }
        let after: usize = late.iter().map(|g| g.after_retry).sum();
        if after > 0 {
            all_failures.push(format!(
                "{after} late grant(s) given back after the retry with the same token: the \
                 give-back released the lease of the guard the retry returned"
            ));
        }
    }
    all_failures.extend(
        injector
            .state()
            .notes
            .iter()
            .map(|n| format!("fault did not play out: {n}")),
    );
    Report {
        scenario: scenario.name,
        class: scenario.class,
        acquisitions: history.acquisitions.len(),
        faults: injected,
        violations,
        stale_rejected,
        failures: all_failures,
        history,
        late_grants,
    }
}

/// The results table (Markdown) for a set of reports.
pub fn table(reports: &[Report]) -> String {
    let mut s = String::from(
        "| scenario | class | acquisitions | faults injected | violations caught (unfenced / other) | stale ops rejected | QuorumNotReached | result |\n\
         |---|---|---:|---:|---:|---:|---:|---|\n",
    );
    for r in reports {
        let unfenced = r.unfenced_violations();
        let _ = writeln!(
            s,
            "| {} | {} | {} | {} | {} / {} | {} | {} | {} |",
            r.scenario,
            r.class,
            r.acquisitions,
            r.faults,
            unfenced,
            r.violations.len() - unfenced,
            r.stale_rejected,
            r.quorum_errors(),
            if r.passed() { "pass" } else { "FAIL" }
        );
    }
    s
}

fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

fn micros(d: Duration) -> Micros {
    u64::try_from(d.as_micros()).unwrap_or(u64::MAX)
}

fn count(n: usize) -> u32 {
    u32::try_from(n).unwrap_or(u32::MAX)
}
