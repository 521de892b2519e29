//! The scenarios: a fault, the class of outcome it is expected to have, and
//! the verdict that compares the two.

use std::fmt;
use std::time::Duration;

use crate::check::Violation;

/// What a scenario is expected to show.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Class {
    /// No violation of any kind.
    Safe,
    /// The unfenced register may lose updates and see overlapping holders;
    /// the fenced register must reject every stale operation, and every
    /// other property must hold.
    UnsafeWithoutFencing,
    /// A documented limit: violations of any kind may occur.
    Unsafe,
}

impl fmt::Display for Class {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Class::Safe => "SAFE",
            Class::UnsafeWithoutFencing => "UNSAFE-WITHOUT-FENCING",
            Class::Unsafe => "UNSAFE",
        })
    }
}

/// The fault a scenario injects.
///
/// Holder faults fire when the targeted worker announces that it holds the
/// lock and has read the resource, right before its write, so they are
/// deterministic; they repeat every two TTLs while the run lasts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fault {
    /// Nothing.
    None,
    /// SIGSTOP the holder until another holder has written (so longer than
    /// the TTL), then SIGCONT: its stale write arrives.
    PauseLong,
    /// SIGSTOP the holder for a quarter of the TTL (less than the renewal
    /// margin), then SIGCONT.
    PauseShort,
    /// SIGKILL the holder.
    KillHolder,
    /// kill -9 Redis and restart it at once with an empty dataset; the
    /// holder writes after another holder has.
    RestartEmpty,
    /// kill -9 Redis (AOF, `appendfsync always`) and restart it from its
    /// AOF; the holder keeps holding across a renewal.
    RestartAof,
    /// Blackhole the holder's Redis connection (a TCP proxy) and have it
    /// hold for three TTLs, abandoning the work when `lost()` fires.
    Blackhole,
    /// `SCRIPT FLUSH` every 250 ms.
    ScriptFlush,
    /// SIGSTOP the Redis server for 1.4 TTLs right before a worker's
    /// `acquire()` sends its first attempt, then SIGCONT; again a TTL after
    /// each resume while the run lasts. Every worker reports each
    /// `acquire()` before calling it, and the client's command timeout
    /// outlasts the freeze, so the attempt's reply arrives 1.4 TTLs after
    /// it was sent: a grant that came too late to use, which the client
    /// must give back before it tries again with the same token. The
    /// server's commands are watched (`MONITOR`) to count such give-backs;
    /// a run with none fails (the fault did not reach the path it tests),
    /// and so does one where a give-back came after the retry.
    ///
    /// The worker the freeze fell on first drops 200 leases it held on
    /// locks of its own, so its watchdog has a backlog of releases, and
    /// every worker whose `acquire()` took longer than the TTL holds for a
    /// quarter TTL before it writes: a give-back queued behind the backlog,
    /// as before 4df6ea7, then lands while the guard the retry returned is
    /// in use, and the next holder's write falls inside its critical
    /// section. After each resume some worker must get the lock within
    /// TTL + 1 s. (The non-owner probes are off: they release old tokens
    /// a second time.)
    PauseRedis,
    /// Workers are `leasehold run` processes (one acquisition each) whose
    /// command is the critical section, started by `sh` in the background.
    /// When the announcing command holds the lock and has read, its
    /// `leasehold run` (the wrapper, not the command) is killed with
    /// SIGKILL; the command is told to go on once another holder has
    /// written. A command that outlived its wrapper then writes after the
    /// lease expired: an overlap and a lost update.
    KillRunWrapper,
    /// SIGSTOP a holder that got the lock by waiting in the queue, right
    /// as its `acquire()` returns, for longer than its lease can last, then
    /// SIGCONT.
    ///
    /// Every worker reports each `acquire()` before calling it. When a
    /// holder announces, it is kept (still holding, renewing) until every
    /// other worker has been inside `acquire()` for 200 ms and the lock's
    /// status counts that many queued waiters; then it lets go. The first
    /// of those waiters whose `acquire()` returns is stopped before it
    /// touches the resource: its `acquire()` was called while another
    /// worker held the lock, so it was refused and queued, and it got the
    /// lock from a release. It stays stopped past its lease (longer than
    /// the TTL and than [`QUEUE_WINDOW`], the longest a lease handed to a
    /// waiter stays reserved for it) and until another worker has written,
    /// then is told to hold half a TTL first, abandoning its work as soon
    /// as `lost()` fires. It must be told `lost()` within that half TTL of
    /// being continued, must never operate, and another worker must get
    /// the lock within max(TTL, [`QUEUE_WINDOW`]) + [`QUEUE_HEARTBEAT`] +
    /// 1 s of the pause.
    PauseHandedOff,
    /// SIGKILL every queued waiter while the holder holds, then let the
    /// holder release: the lock is handed to a dead waiter.
    ///
    /// When a holder announces, it is kept (still holding, renewing) until
    /// every other worker has been inside `acquire()` for 200 ms and the
    /// lock's status counts that many queued waiters; they are killed with
    /// SIGKILL (and replaced), and the holder lets go at once. The lease a
    /// release hands to a dead waiter stays reserved for it at most until
    /// that waiter's queue deadline, [`QUEUE_WINDOW`] after its last
    /// attempt (which came before the kill); a live waiter, such as the
    /// holder queueing again behind the dead ones, tries at least every
    /// [`QUEUE_HEARTBEAT`]. So some live worker must get the lock within
    /// [`QUEUE_WINDOW`] + [`QUEUE_HEARTBEAT`] + 1 s of the kill.
    KillQueuedWaiters,
    /// Redlock: stop nodes, one stretch after another (see [`NodeStop`]).
    ///
    /// A stretch starts when a holder announces (its lease is then on every
    /// node), lasts two TTLs, and ends with the killed nodes restarted with
    /// an empty dataset (later than a TTL, as Redlock's delayed restart
    /// requires) and the frozen ones continued; the next stretch starts a
    /// TTL later. While a quorum is left, the holder holds across a renewal
    /// and must keep its lease, and the others must keep getting the lock.
    /// Without a quorum, the holder holds on until `lost()` fires, which
    /// must be within its validity; no acquisition may be granted; some
    /// must fail with `QuorumNotReached`; at the end of the stretch the
    /// workers are kept out of `acquire()` while the live nodes are read,
    /// and neither may still store a lease; once the nodes are back the
    /// lock must work again.
    StopNodes(&'static [NodeStop]),
    /// Redlock: restart the nodes one at a time, in turn (0, 1, …, 0, …)
    /// while the run lasts, each killed with kill -9 and started again at
    /// once with an empty dataset (no delayed restart), 0.7 TTL apart (two
    /// renewal periods and a little more).
    ///
    /// The first restart happens 0.7 TTL after a holder announces (a lease
    /// acquired on a bare quorum is put back on the other nodes only by its
    /// first renewal, at ttl/3: no lease survives losing one node of a bare
    /// quorum before that); the holder is held across three restarts and a
    /// TTL more, then writes. A renewal granted by a
    /// quorum takes the lease back on the node that restarted, so before
    /// each restart the lease must be on a quorum of the other nodes, and
    /// the holder must keep it (no `lost()`, release ok); without the
    /// re-take it is on two nodes after the third restart, and the three
    /// empty ones grant the lock to another worker. After each restart no
    /// holder is held across, some worker must get the lock within
    /// TTL + 1 s.
    RollingRestart,
    /// Redis Cluster: freeze one master (not the contended lock's) with
    /// SIGSTOP for two TTLs, then SIGCONT; again a TTL after each resume
    /// while the run lasts.
    ///
    /// Every worker also holds locks on the side for the whole run, with
    /// the scenario's TTL, renewed by its watchdog: some on the healthy
    /// masters, some on the frozen one (taken again whenever lost). Their
    /// renewals share the client, so a renewal held up behind the frozen
    /// master (as before issue 24) cost the healthy ones their lease. No
    /// lease on a healthy master may be lost; some on the frozen master
    /// must be (the freeze bit); the contended lock, on a healthy master,
    /// keeps being taken during each freeze.
    FreezeMaster,
}

/// One stretch of a [`Fault::StopNodes`]: which Redlock nodes stop, by index.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NodeStop {
    /// Killed with kill -9.
    pub killed: &'static [usize],
    /// Frozen with SIGSTOP: slow nodes whose connections stay open while
    /// nothing is answered (requests pile up and run when they continue).
    pub paused: &'static [usize],
}

impl NodeStop {
    /// Whether node `i` stops.
    pub fn stops(&self, i: usize) -> bool {
        self.killed.contains(&i) || self.paused.contains(&i)
    }
}

/// The Redis deployment the workers use.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Topology {
    /// One Redis server.
    Single,
    /// Independent Redis masters; the workers use `Client::redlock` with
    /// every node's URL.
    Redlock {
        /// How many.
        nodes: usize,
    },
    /// A Redis Cluster of masters without replicas; the workers use
    /// `Client::cluster` with every node's URL.
    Cluster {
        /// How many masters.
        masters: usize,
    },
}

/// One scenario of the fault matrix.
#[derive(Debug, Clone, Copy)]
pub struct Scenario {
    /// Its name on the command line.
    pub name: &'static str,
    /// What it is expected to show.
    pub class: Class,
    /// The fault.
    pub fault: Fault,
    /// The Redis deployment.
    pub topology: Topology,
    /// True when the fault is placed so that an expected violation must show.
    pub deterministic: bool,
    /// Lease TTL the workers use.
    pub ttl: Duration,
    /// Run length in the CI set.
    pub ci_duration: Duration,
    /// What it checks, for humans.
    pub checks: &'static str,
}

const TTL: Duration = Duration::from_secs(1);

/// How long the library keeps a waiter queued without it trying again
/// (`QUEUE_WINDOW` in `crates/leasehold/src/scripts/mod.rs`): a waiter's
/// queue deadline is this long after its last attempt, and a lease handed to
/// a waiter that does not claim it stays reserved for it at most until then.
pub const QUEUE_WINDOW: Duration = Duration::from_secs(3);

/// The longest a queued waiter sleeps between two attempts
/// (`QUEUE_HEARTBEAT` in `crates/leasehold/src/scripts/mod.rs`).
pub const QUEUE_HEARTBEAT: Duration = Duration::from_secs(1);
const REDLOCK: Topology = Topology::Redlock { nodes: 5 };

/// Every scenario, in the order of the results table.
pub const SCENARIOS: &[Scenario] = &[
    Scenario {
        name: "no-faults",
        class: Class::Safe,
        fault: Fault::None,
        topology: Topology::Single,
        deterministic: true,
        ttl: TTL,
        ci_duration: Duration::from_secs(12),
        checks: "mutual exclusion at the resource, no lost increment, unique and increasing \
                 fences, released tokens cannot release or extend",
    },
    Scenario {
        name: "client-pause-past-ttl",
        class: Class::UnsafeWithoutFencing,
        fault: Fault::PauseLong,
        topology: Topology::Single,
        deterministic: true,
        ttl: TTL,
        ci_duration: Duration::from_secs(6),
        checks: "the paused holder's write loses an update on the unfenced register, the fenced \
                 register rejects it, its lost() fires, the lock is free within TTL + 1 s",
    },
    Scenario {
        name: "client-pause-short",
        class: Class::Safe,
        fault: Fault::PauseShort,
        topology: Topology::Single,
        deterministic: true,
        ttl: TTL,
        ci_duration: Duration::from_secs(5),
        checks: "a pause shorter than the renewal margin keeps the lease (no lost(), release ok)",
    },
    Scenario {
        name: "client-kill",
        class: Class::Safe,
        fault: Fault::KillHolder,
        topology: Topology::Single,
        deterministic: true,
        ttl: TTL,
        ci_duration: Duration::from_secs(6),
        checks: "a killed holder's lock is free again within TTL + 1 s",
    },
    Scenario {
        name: "redis-restart-empty",
        class: Class::UnsafeWithoutFencing,
        fault: Fault::RestartEmpty,
        topology: Topology::Single,
        deterministic: true,
        ttl: TTL,
        ci_duration: Duration::from_secs(6),
        checks: "the lease vanishes with the dataset, so a second holder overlaps the first; \
                 fences still increase across the restart and the fenced register rejects \
                 the stale write",
    },
    Scenario {
        name: "redis-restart-aof",
        class: Class::Safe,
        fault: Fault::RestartAof,
        topology: Topology::Single,
        deterministic: true,
        ttl: TTL,
        ci_duration: Duration::from_secs(6),
        checks: "with appendfsync always the lease (absolute expiry) and fence survive kill -9; \
                 the holder renews across the outage and keeps its lease",
    },
    Scenario {
        name: "client-blackhole",
        class: Class::Safe,
        fault: Fault::Blackhole,
        topology: Topology::Single,
        deterministic: true,
        ttl: TTL,
        ci_duration: Duration::from_secs(7),
        checks: "a holder cut off from Redis learns it lost the lease no later than its validity \
                 ends, and stops before another holder writes",
    },
    Scenario {
        name: "script-flush",
        class: Class::Safe,
        fault: Fault::ScriptFlush,
        topology: Topology::Single,
        deterministic: true,
        ttl: TTL,
        ci_duration: Duration::from_secs(5),
        checks: "scripts reloaded after SCRIPT FLUSH (NOSCRIPT) without a failed acquisition \
                 turning into a violation",
    },
    Scenario {
        name: "redis-pause-past-ttl",
        class: Class::Safe,
        fault: Fault::PauseRedis,
        topology: Topology::Single,
        deterministic: true,
        ttl: TTL,
        ci_duration: Duration::from_secs(12),
        checks: "Redis frozen for 1.4 TTLs as an acquire() sends its first attempt, repeatedly: \
                 grants that come back too late are given back before the retry (counted on \
                 the server; none fails the run), no overlap or lost update, fences unique and \
                 increasing, the lock granted within TTL + 1 s of each resume",
    },
    Scenario {
        name: "run-wrapper-kill",
        class: Class::Safe,
        fault: Fault::KillRunWrapper,
        topology: Topology::Single,
        deterministic: true,
        ttl: TTL,
        ci_duration: Duration::from_secs(8),
        checks: "workers are `leasehold run` processes; SIGKILL of a wrapper (not its command) \
                 while its command holds: the command and what it started never write after \
                 the lease could have expired (no overlap, both counters exact), the lock is \
                 free within TTL + 1 s",
    },
    Scenario {
        name: "handoff-pause-past-lease",
        class: Class::Safe,
        fault: Fault::PauseHandedOff,
        topology: Topology::Single,
        deterministic: true,
        ttl: TTL,
        ci_duration: Duration::from_secs(10),
        checks: "a waiter handed the lock is SIGSTOPped as its acquire() returns, past its lease \
                 (TTL and the 3 s queue window) until another holder wrote: it is told lost() \
                 within half a TTL of waking and never operates, no overlap or lost update, \
                 another worker gets the lock within max(TTL, 3 s) + 1 s + 1 s",
    },
    Scenario {
        name: "queued-waiters-kill",
        class: Class::Safe,
        fault: Fault::KillQueuedWaiters,
        topology: Topology::Single,
        deterministic: true,
        ttl: TTL,
        ci_duration: Duration::from_secs(10),
        checks: "every queued waiter (all workers but the holder, counted by the lock's status) \
                 SIGKILLed, then the holder releases to a dead waiter: a live worker gets the \
                 lock within 3 s (queue window) + 1 s (heartbeat) + 1 s of the kill, no overlap",
    },
    Scenario {
        name: "redlock-no-faults",
        class: Class::Safe,
        fault: Fault::None,
        topology: REDLOCK,
        deterministic: true,
        ttl: TTL,
        ci_duration: Duration::from_secs(4),
        checks: "Redlock over 5 nodes: mutual exclusion, no lost increment, unique and \
                 increasing fences (one machine, one clock), released tokens cannot release or \
                 extend",
    },
    Scenario {
        name: "redlock-1-of-5-stopped",
        class: Class::Safe,
        fault: Fault::StopNodes(&[
            NodeStop {
                killed: &[0],
                paused: &[],
            },
            NodeStop {
                killed: &[],
                paused: &[1],
            },
        ]),
        topology: REDLOCK,
        deterministic: true,
        ttl: TTL,
        ci_duration: Duration::from_secs(8),
        checks: "one node killed, later one frozen: the holder keeps its lease if it is still \
                 on a quorum (else is told lost() in time), the others get the lock within \
                 TTL + 1 s, everything of no-faults",
    },
    Scenario {
        name: "redlock-2-of-5-stopped",
        class: Class::Safe,
        fault: Fault::StopNodes(&[
            NodeStop {
                killed: &[0, 1],
                paused: &[],
            },
            NodeStop {
                killed: &[2],
                paused: &[3],
            },
        ]),
        topology: REDLOCK,
        deterministic: true,
        ttl: TTL,
        ci_duration: Duration::from_secs(8),
        checks: "two nodes killed, later one killed and one frozen (the quorum then needs the \
                 restarted ones): as redlock-1-of-5-stopped",
    },
    Scenario {
        name: "redlock-3-of-5-stopped",
        class: Class::Safe,
        fault: Fault::StopNodes(&[NodeStop {
            killed: &[0, 1, 2],
            paused: &[],
        }]),
        topology: REDLOCK,
        deterministic: true,
        ttl: TTL,
        ci_duration: Duration::from_secs(7),
        checks: "no quorum: no acquisition granted, acquisitions fail with QuorumNotReached, \
                 the holder learns it lost the lease within its validity, nothing left held on \
                 the 2 live nodes; after the restart the lock works again",
    },
    Scenario {
        name: "redlock-rolling-restart",
        class: Class::Safe,
        fault: Fault::RollingRestart,
        topology: REDLOCK,
        deterministic: true,
        ttl: TTL,
        ci_duration: Duration::from_secs(7),
        checks: "nodes restarted empty one at a time, 0.7 TTL apart, starting 0.7 TTL after a \
                 holder announced (after its first renewal) and under it for three restarts: its lease is taken back on each restarted node \
                 (on a quorum of the others before every restart), it keeps it (no lost(), \
                 release ok), no overlap or lost update, the others get the lock within \
                 TTL + 1 s of each later restart",
    },
    Scenario {
        name: "cluster-master-frozen",
        class: Class::Safe,
        fault: Fault::FreezeMaster,
        topology: Topology::Cluster { masters: 3 },
        deterministic: true,
        ttl: TTL,
        ci_duration: Duration::from_secs(8),
        checks: "a 3-master cluster, one master (not the contended lock's) frozen for two TTLs, \
                 twice, while every worker holds leases on the side on every master: none on a \
                 healthy master is lost, some on the frozen one are, the contended lock is \
                 taken during each freeze, no overlap or lost update",
    },
];

/// The scenario called `name`.
pub fn find(name: &str) -> Option<&'static Scenario> {
    SCENARIOS.iter().find(|s| s.name == name)
}

/// Compares what a run showed with what its class allows; the reasons it
/// fails, if any.
///
/// `stale_rejected` is how many operations the fenced register rejected;
/// `injected` how many times the fault fired.
pub fn verdict(
    scenario: &Scenario,
    violations: &[Violation],
    stale_rejected: usize,
    injected: usize,
) -> Vec<String> {
    let mut failures = Vec::new();
    let (unfenced, hard): (Vec<&Violation>, Vec<&Violation>) =
        violations.iter().partition(|v| v.is_unfenced());
    if scenario.fault != Fault::None && injected == 0 {
        failures.push("the fault was never injected".to_owned());
    }
    match scenario.class {
        Class::Safe => {
            if let Some(v) = violations.first() {
                failures.push(format!(
                    "SAFE scenario showed {} violation(s), first: {v}",
                    violations.len()
                ));
            }
        }
        Class::UnsafeWithoutFencing => {
            if let Some(v) = hard.first() {
                failures.push(format!(
                    "{} violation(s) fencing should have prevented or that break other \
                     properties, first: {v}",
                    hard.len()
                ));
            }
            if scenario.deterministic && unfenced.is_empty() {
                failures.push(
                    "expected a violation on the unfenced register and saw none: the fault or \
                     the checker did not work"
                        .to_owned(),
                );
            }
            if scenario.deterministic && stale_rejected == 0 {
                failures.push("the fenced register rejected no stale operation".to_owned());
            }
        }
        Class::Unsafe => {
            if scenario.deterministic && violations.is_empty() {
                failures.push(
                    "expected a violation and saw none: the fault or the checker did not work"
                        .to_owned(),
                );
            }
        }
    }
    failures
}
