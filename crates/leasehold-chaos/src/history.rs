//! What a run recorded: the raw material of the checkers.
//!
//! Worker-side events carry the worker's own `CLOCK_MONOTONIC` timestamps
//! ([`crate::now_us`]); operations on the resource carry the resource's
//! timestamp and a global sequence number, which orders them exactly.

use std::fmt;

/// Identifies one worker process of a run.
pub type WorkerId = u32;

/// Microseconds on `CLOCK_MONOTONIC`.
pub type Micros = u64;

/// One of the two registers of the resource.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Register {
    /// Accepts everything: shows what happens without fencing.
    Unfenced,
    /// Rejects operations whose fence is lower than the highest seen, or
    /// equal to it from another owner.
    Fenced,
}

impl fmt::Display for Register {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Register::Unfenced => "unfenced",
            Register::Fenced => "fenced",
        })
    }
}

/// Read or write.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OpKind {
    /// Read the register.
    Read,
    /// Overwrite the register with the value read plus one.
    Write,
}

/// One operation that reached the resource.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Op {
    /// Position in the resource's total order of operations.
    pub seq: u64,
    /// When the resource applied (or rejected) it.
    pub t: Micros,
    /// The worker that sent it.
    pub worker: WorkerId,
    /// The sender's fencing token.
    pub fence: u64,
    /// The sender's owner token.
    pub token: String,
    /// Which register.
    pub register: Register,
    /// Read or write.
    pub kind: OpKind,
    /// For a read, the value returned; for a write, the value written.
    pub value: i64,
    /// The register's value before the operation.
    pub before: i64,
    /// False when the fenced register rejected it (nothing changed).
    pub accepted: bool,
}

/// A successful acquisition, as the worker saw it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Acquisition {
    /// The worker.
    pub worker: WorkerId,
    /// When `acquire()` was called.
    pub started: Micros,
    /// When it returned the guard.
    pub t: Micros,
    /// The guard's fencing token.
    pub fence: u64,
    /// The guard's owner token.
    pub token: String,
}

/// The guard's `lost()` resolved (or `is_lost()` turned true).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LostEvent {
    /// The worker.
    pub worker: WorkerId,
    /// When the worker noticed.
    pub t: Micros,
    /// The fence of the lost guard.
    pub fence: u64,
}

/// A lease a worker held on the side (`cluster-master-frozen`: on a
/// healthy master, or on the frozen one) was lost.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HeldLost {
    /// The worker.
    pub worker: WorkerId,
    /// When its `lost()` resolved.
    pub t: Micros,
    /// Whether the lease was on a master that was never frozen.
    pub healthy: bool,
}

/// How an owner-checked release or extend came out.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// It succeeded.
    Ok,
    /// `Error::Lost`: nobody held the lock.
    Lost,
    /// `Error::NotOwner`: someone else held it.
    NotOwner,
    /// Any other error (connection trouble).
    Error,
}

impl Outcome {
    /// The protocol word for it.
    pub fn as_str(self) -> &'static str {
        match self {
            Outcome::Ok => "ok",
            Outcome::Lost => "lost",
            Outcome::NotOwner => "notowner",
            Outcome::Error => "error",
        }
    }

    /// Parses [`Outcome::as_str`].
    pub fn parse(s: &str) -> Option<Outcome> {
        Some(match s {
            "ok" => Outcome::Ok,
            "lost" => Outcome::Lost,
            "notowner" => Outcome::NotOwner,
            "error" => Outcome::Error,
            _ => return None,
        })
    }
}

/// A guard's `release()`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Release {
    /// The worker.
    pub worker: WorkerId,
    /// When it returned.
    pub t: Micros,
    /// The guard's fence.
    pub fence: u64,
    /// What it returned.
    pub outcome: Outcome,
}

/// A release or extend sent with the owner token of an acquisition that was
/// already released: it must never succeed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Probe {
    /// The worker.
    pub worker: WorkerId,
    /// When it returned.
    pub t: Micros,
    /// `"release"` or `"extend"`.
    pub kind: String,
    /// The fence of the released acquisition whose token was used.
    pub fence: u64,
    /// What it returned.
    pub outcome: Outcome,
}

/// What the checker did to the system.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FaultKind {
    /// A holder was SIGSTOPped until another holder had written.
    PauseLong,
    /// A holder was SIGSTOPped for less than the renewal margin.
    PauseShort,
    /// A holder was killed with SIGKILL.
    Kill,
    /// Redis was killed and restarted with an empty dataset.
    RestartEmpty,
    /// Redis was killed and restarted from its fsynced AOF.
    RestartAof,
    /// A holder's Redis connection was blackholed.
    Blackhole,
    /// `SCRIPT FLUSH` on the server.
    ScriptFlush,
    /// The Redis server was frozen with SIGSTOP, right before a worker's
    /// `acquire()` (its target) sent its first attempt.
    RedisPaused,
    /// The frozen Redis server was continued (SIGCONT).
    RedisResumed,
    /// A `leasehold run` wrapper was killed with SIGKILL while its command
    /// (the target) held the lock; the command itself was not signalled.
    WrapperKilled,
    /// A holder whose `acquire()` had waited in the lock's queue (called
    /// while another worker held the lock, which let go only once every
    /// other worker was queued) was SIGSTOPped right as that `acquire()`
    /// returned, for `for_ms`, then continued (SIGCONT).
    HandOffPaused {
        /// How long it was stopped, in ms.
        for_ms: u64,
    },
    /// Waiters queued for the lock were killed with SIGKILL while the
    /// holder was held; the holder let go right after, so its release
    /// found dead waiters at the head of the queue.
    WaitersKilled {
        /// Workers killed: every worker but the holder, each inside
        /// `acquire()` for a while.
        killed: u32,
        /// Waiters the lock's status counted just before the kill.
        queued: u32,
    },
    /// Redlock nodes were stopped under a holder: `killed` with kill -9,
    /// `paused` with SIGSTOP, out of `nodes`. Recorded once they are all
    /// stopped.
    NodesDown {
        /// Nodes killed.
        killed: u32,
        /// Nodes frozen.
        paused: u32,
        /// Nodes in the deployment.
        nodes: u32,
        /// Nodes left running that stored the holder's lease.
        holder_on: u32,
    },
    /// The stopped nodes are about to come back (restart, SIGCONT).
    /// Recorded before the first of them does.
    NodesBack,
    /// One cluster master (not the contended lock's) was frozen with
    /// SIGSTOP for `for_ms`, then continued. Recorded once it is frozen.
    MasterFrozen {
        /// How long it stays frozen, in ms.
        for_ms: u64,
    },
    /// One Redlock node was killed with kill -9 and started again at once
    /// with an empty dataset (no delayed restart), one of a rolling
    /// restart. Recorded once it is dead, before it starts again.
    NodeRestarted {
        /// The node's index.
        node: u32,
        /// Nodes in the deployment.
        nodes: u32,
        /// Other nodes (left running) that stored the lease of the holder
        /// the node restarted under, read just before the kill; 0 with no
        /// holder.
        holder_on: u32,
    },
}

impl FaultKind {
    /// For [`FaultKind::NodesDown`]: whether so many nodes are stopped
    /// that no quorum (a strict majority) is left.
    pub fn majority_down(self) -> bool {
        match self {
            FaultKind::NodesDown {
                killed,
                paused,
                nodes,
                ..
            } => nodes - (killed + paused).min(nodes) < quorum(nodes),
            _ => false,
        }
    }

    /// For [`FaultKind::NodesDown`] and [`FaultKind::NodeRestarted`]:
    /// whether the holder's lease is still on a quorum of the running
    /// nodes, so it can be renewed and must be kept.
    pub fn lease_survives(self) -> bool {
        match self {
            FaultKind::NodesDown {
                nodes, holder_on, ..
            }
            | FaultKind::NodeRestarted {
                nodes, holder_on, ..
            } => holder_on >= quorum(nodes),
            _ => false,
        }
    }
}

/// Redlock's quorum among `nodes`: a strict majority.
fn quorum(nodes: u32) -> u32 {
    nodes / 2 + 1
}

/// One injected fault.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Fault {
    /// When it started.
    pub t: Micros,
    /// What it was.
    pub kind: FaultKind,
    /// The holder it targeted, with its fence, if any.
    pub target: Option<(WorkerId, u64)>,
}

/// An `acquire()` that returned an error.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AcquireError {
    /// The worker.
    pub worker: WorkerId,
    /// When it returned.
    pub t: Micros,
    /// Whether it was `Error::QuorumNotReached`.
    pub quorum: bool,
    /// The error, for humans.
    pub error: String,
}

/// The lock as one live Redlock node stored it, read while a majority of
/// nodes was down and no worker was inside `acquire()`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeCheck {
    /// When it was read.
    pub t: Micros,
    /// The node's index in the deployment.
    pub node: usize,
    /// The holder the node stored (first characters of its token), if any.
    pub holder: Option<String>,
    /// Why the node could not be read, if it could not.
    pub error: Option<String>,
}

/// Everything one run recorded.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct History {
    /// Successful acquisitions.
    pub acquisitions: Vec<Acquisition>,
    /// `acquire()` calls that returned an error.
    pub acquire_errors: Vec<AcquireError>,
    /// Operations at the resource, in `seq` order.
    pub ops: Vec<Op>,
    /// Lost notifications.
    pub lost: Vec<LostEvent>,
    /// Leases held on the side that were lost (`cluster-master-frozen`).
    pub held_lost: Vec<HeldLost>,
    /// Guard releases.
    pub releases: Vec<Release>,
    /// Non-owner probes.
    pub probes: Vec<Probe>,
    /// Injected faults.
    pub faults: Vec<Fault>,
    /// Reads of the lock on live Redlock nodes while a majority was down.
    pub node_checks: Vec<NodeCheck>,
}

impl History {
    /// Operations the fenced register rejected.
    pub fn stale_rejected(&self) -> usize {
        self.ops.iter().filter(|op| !op.accepted).count()
    }
}
