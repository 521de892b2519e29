//! The checkers: pure functions over a recorded [`History`].
//!
//! Each returns the violations it found, so a scenario can tell which
//! property broke and on which register.

use std::collections::{BTreeMap, HashMap};
use std::fmt;
use std::time::Duration;

use crate::history::{
    AcquireError, Acquisition, Fault, FaultKind, History, LostEvent, Micros, NodeCheck, Op, OpKind,
    Outcome, Probe, Register, Release, WorkerId,
};

/// Which property a violation breaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Property {
    /// Two holders' operations interleaved at the resource.
    Overlap,
    /// A write overwrote a value other than the one its writer read.
    LostUpdate,
    /// Two acquisitions got the same fence.
    DuplicateFence,
    /// An acquisition that started after another finished got a fence no
    /// greater than it.
    FenceRegression,
    /// A release or extend with a released token succeeded.
    NonOwnerSuccess,
    /// A dead or frozen holder's lock was not free again in time.
    Liveness,
    /// A holder that lost its lease was not told, or was told too late.
    LostNotice,
    /// A holder whose lease should have survived a fault lost it.
    LeaseKept,
    /// An acquisition was granted while a majority of Redlock nodes was down.
    GrantWithoutQuorum,
    /// A live Redlock node still stored a lease after the failed attempts
    /// of an outage (or could not be read).
    LeftHeld,
}

impl fmt::Display for Property {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Property::Overlap => "overlap",
            Property::LostUpdate => "lost update",
            Property::DuplicateFence => "duplicate fence",
            Property::FenceRegression => "fence regression",
            Property::NonOwnerSuccess => "non-owner success",
            Property::Liveness => "liveness",
            Property::LostNotice => "lost notice",
            Property::LeaseKept => "lease kept",
            Property::GrantWithoutQuorum => "grant without quorum",
            Property::LeftHeld => "lease left on a live node",
        })
    }
}

/// One broken property, with what shows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Violation {
    /// The property.
    pub property: Property,
    /// The register, for properties checked at the resource.
    pub register: Option<Register>,
    /// The evidence, for a human.
    pub detail: String,
}

impl Violation {
    fn new(property: Property, register: Option<Register>, detail: String) -> Violation {
        Violation {
            property,
            register,
            detail,
        }
    }

    /// True for violations that fencing is meant to stop: overlaps and lost
    /// updates on the unfenced register.
    pub fn is_unfenced(&self) -> bool {
        self.register == Some(Register::Unfenced)
    }
}

impl fmt::Display for Violation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.register {
            Some(r) => write!(f, "{} ({r} register): {}", self.property, self.detail),
            None => write!(f, "{}: {}", self.property, self.detail),
        }
    }
}

/// Timing bounds for the time-based checkers.
#[derive(Debug, Clone, Copy)]
pub struct Bounds {
    /// The lease TTL the workers used.
    pub ttl: Duration,
    /// Extra time a dead holder's lock may take to be free again.
    pub liveness_slack: Duration,
    /// Scheduling allowance for a lost notice.
    pub notice_slack: Duration,
    /// The library's queue window ([`crate::QUEUE_WINDOW`]): a lease handed
    /// to a waiter is reserved for it at most this long after its last
    /// attempt.
    pub queue_window: Duration,
    /// The longest a queued waiter sleeps between attempts
    /// ([`crate::QUEUE_HEARTBEAT`]).
    pub queue_heartbeat: Duration,
}

/// How long a holder stopped right after a hand-off ([`FaultKind::HandOffPaused`])
/// may take, once continued, to be told `lost()`: it is told to hold this
/// long before touching the resource, abandoning the work when `lost()`
/// fires; its lease ended while it was stopped, so `lost()` must fire at once.
pub fn woken_notice(ttl: Duration) -> Duration {
    ttl / 2
}

fn us(d: Duration) -> Micros {
    u64::try_from(d.as_micros()).unwrap_or(u64::MAX)
}

/// Runs every checker.
pub fn check_all(history: &History, bounds: Bounds) -> Vec<Violation> {
    let mut out = Vec::new();
    for register in [Register::Unfenced, Register::Fenced] {
        out.extend(overlaps(&history.ops, register));
        out.extend(lost_updates(&history.ops, register));
    }
    out.extend(duplicate_fences(&history.acquisitions));
    out.extend(fence_regressions(&history.acquisitions));
    out.extend(non_owner_successes(&history.probes));
    out.extend(liveness(
        &history.acquisitions,
        &history.acquire_errors,
        &history.faults,
        bounds,
    ));
    out.extend(recoveries(
        &history.acquisitions,
        &history.acquire_errors,
        &history.faults,
        bounds,
    ));
    out.extend(grants_without_quorum(
        &history.acquisitions,
        &history.faults,
        bounds,
    ));
    out.extend(left_held(&history.node_checks));
    out.extend(lost_notices(&history.lost, &history.faults, bounds));
    out.extend(kept_leases(
        &history.lost,
        &history.releases,
        &history.faults,
    ));
    out
}

/// Holders (fence and owner token) whose accepted operations on `register`
/// interleave with another holder's.
///
/// A holder's span runs from its first to its last accepted operation in
/// the resource's order; with mutual exclusion the spans are disjoint.
pub fn overlaps(ops: &[Op], register: Register) -> Vec<Violation> {
    let mut spans: HashMap<(u64, &str), (u64, u64)> = HashMap::new();
    for op in ops
        .iter()
        .filter(|op| op.register == register && op.accepted)
    {
        let span = spans
            .entry((op.fence, op.token.as_str()))
            .or_insert((op.seq, op.seq));
        span.0 = span.0.min(op.seq);
        span.1 = span.1.max(op.seq);
    }
    let mut sorted: Vec<_> = spans.into_iter().collect();
    sorted.sort_by_key(|(_, (first, _))| *first);
    let mut out = Vec::new();
    let mut open: Option<((u64, &str), u64)> = None;
    for (holder, (first, last)) in sorted {
        if let Some((other, other_last)) = open {
            if first < other_last {
                out.push(Violation::new(
                    Property::Overlap,
                    Some(register),
                    format!(
                        "holder with fence {} operated (seq {first}) inside the span of fence {} \
                         (until seq {other_last})",
                        holder.0, other.0
                    ),
                ));
            }
            if last > other_last {
                open = Some((holder, last));
            }
        } else {
            open = Some((holder, last));
        }
    }
    out
}

/// Accepted writes on `register` that did not find the value their writer
/// read: an increment in between was overwritten.
pub fn lost_updates(ops: &[Op], register: Register) -> Vec<Violation> {
    ops.iter()
        .filter(|op| op.register == register && op.accepted && op.kind == OpKind::Write)
        .filter(|op| op.before + 1 != op.value)
        .map(|op| {
            Violation::new(
                Property::LostUpdate,
                Some(register),
                format!(
                    "fence {} wrote {} over {} (seq {}): {} increment(s) lost",
                    op.fence,
                    op.value,
                    op.before,
                    op.seq,
                    op.before + 1 - op.value
                ),
            )
        })
        .collect()
}

/// Fences handed out to more than one acquisition.
pub fn duplicate_fences(acquisitions: &[Acquisition]) -> Vec<Violation> {
    let mut seen: BTreeMap<u64, usize> = BTreeMap::new();
    for a in acquisitions {
        *seen.entry(a.fence).or_default() += 1;
    }
    seen.into_iter()
        .filter(|(_, n)| *n > 1)
        .map(|(fence, n)| {
            Violation::new(
                Property::DuplicateFence,
                None,
                format!("fence {fence} issued {n} times"),
            )
        })
        .collect()
}

/// Acquisitions that started after another acquisition had returned, yet
/// got a fence no greater than it: fences must increase over time, also
/// across Redis restarts.
pub fn fence_regressions(acquisitions: &[Acquisition]) -> Vec<Violation> {
    let mut by_end: Vec<&Acquisition> = acquisitions.iter().collect();
    by_end.sort_by_key(|a| a.t);
    let mut by_start: Vec<&Acquisition> = acquisitions.iter().collect();
    by_start.sort_by_key(|a| a.started);
    let mut out = Vec::new();
    let mut done = 0;
    let mut highest: Option<&Acquisition> = None;
    for b in by_start {
        while done < by_end.len() && by_end[done].t < b.started {
            if highest.is_none_or(|h| by_end[done].fence > h.fence) {
                highest = Some(by_end[done]);
            }
            done += 1;
        }
        if let Some(h) = highest
            && b.fence <= h.fence
        {
            out.push(Violation::new(
                Property::FenceRegression,
                None,
                format!(
                    "worker {} got fence {} after worker {} had already got fence {}",
                    b.worker, b.fence, h.worker, h.fence
                ),
            ));
        }
    }
    out
}

/// Probes (release or extend with an already released token) that succeeded.
pub fn non_owner_successes(probes: &[Probe]) -> Vec<Violation> {
    probes
        .iter()
        .filter(|p| p.outcome == Outcome::Ok)
        .map(|p| {
            Violation::new(
                Property::NonOwnerSuccess,
                None,
                format!(
                    "worker {}: {} with the released token of fence {} succeeded",
                    p.worker, p.kind, p.fence
                ),
            )
        })
        .collect()
}

/// After a holder was killed or frozen, or its `leasehold run` wrapper
/// killed, another worker must get the lock within the TTL plus slack (its
/// lease was renewed at the latest at the fault); so too after a minority
/// of Redlock nodes stopped under a holder. After a Redlock node restarted
/// with no holder held across it, or a frozen Redis server continued, or
/// another cluster master than the lock's froze, some worker must get the
/// lock within the same bound.
///
/// Waiting in the queue adds to that: the lease of a holder stopped right
/// after a hand-off may have been reserved for it until its queue deadline,
/// and a lease handed to a dead waiter is reserved until that waiter's
/// deadline; both end at most a queue window after the fault, and a live
/// waiter tries again at least every queue heartbeat. So after a hand-off
/// pause another worker must get the lock within max(TTL, queue window) +
/// heartbeat + slack, and after queued waiters were killed some worker
/// within queue window + heartbeat + slack.
///
/// Faults too close to the end of the history (its last acquisition or
/// failed acquisition) to be judged are skipped.
pub fn liveness(
    acquisitions: &[Acquisition],
    errors: &[AcquireError],
    faults: &[Fault],
    bounds: Bounds,
) -> Vec<Violation> {
    let ends = acquisitions.iter().map(|a| a.t);
    let end = ends.chain(errors.iter().map(|e| e.t)).max().unwrap_or(0);
    let mut out = Vec::new();
    for fault in faults {
        let retry = bounds.queue_heartbeat + bounds.liveness_slack;
        let limit = us(match fault.kind {
            FaultKind::HandOffPaused { .. } => bounds.ttl.max(bounds.queue_window) + retry,
            FaultKind::WaitersKilled { .. } => bounds.queue_window + retry,
            _ => bounds.ttl + bounds.liveness_slack,
        });
        let (victim, what) = match (fault.kind, fault.target) {
            (FaultKind::HandOffPaused { .. }, Some((w, fence))) => (
                Some(w),
                format!("its holder (fence {fence}), handed the lock after waiting, stopped"),
            ),
            (FaultKind::WaitersKilled { killed, .. }, _) => {
                (None, format!("{killed} queued waiter(s) were killed"))
            }
            (FaultKind::Kill | FaultKind::PauseLong, Some((w, fence))) => {
                (Some(w), format!("its holder (fence {fence}) stopped"))
            }
            (FaultKind::WrapperKilled, Some((w, fence))) => (
                Some(w),
                format!("the wrapper of its holder (fence {fence}) was killed"),
            ),
            (FaultKind::RedisResumed, None) => (None, "Redis continued after a freeze".to_owned()),
            (FaultKind::MasterFrozen { .. }, None) => {
                (None, "another cluster master froze".to_owned())
            }
            (FaultKind::NodesDown { .. }, Some((w, fence))) if !fault.kind.majority_down() => (
                Some(w),
                format!("nodes stopped under the holder of fence {fence}"),
            ),
            (FaultKind::NodeRestarted { node, .. }, None) => {
                (None, format!("node {node} restarted empty"))
            }
            _ => continue,
        };
        let next = acquisitions
            .iter()
            .filter(|a| Some(a.worker) != victim && a.t > fault.t)
            .map(|a| a.t)
            .min();
        match next {
            Some(t) if t - fault.t <= limit => {}
            Some(t) => out.push(Violation::new(
                Property::Liveness,
                None,
                format!(
                    "lock free again only {} ms after {what} (bound {} ms)",
                    (t - fault.t) / 1000,
                    limit / 1000
                ),
            )),
            None if end > fault.t + limit => out.push(Violation::new(
                Property::Liveness,
                None,
                format!("nobody got the lock after {what}"),
            )),
            None => {}
        }
    }
    out
}

/// A frozen holder must learn it lost the lease once it runs again, and
/// one frozen right after a hand-off within [`woken_notice`] of running
/// again (its lease ended while it was frozen); a blackholed one, or one whose lease was left on fewer than a quorum of
/// running Redlock nodes, must learn it no later than its lease's validity
/// ends (at most one TTL after the fault began, plus scheduling slack).
pub fn lost_notices(lost: &[LostEvent], faults: &[Fault], bounds: Bounds) -> Vec<Violation> {
    let mut out = Vec::new();
    for fault in faults {
        let deadline = match fault.kind {
            FaultKind::PauseLong => None,
            FaultKind::HandOffPaused { for_ms } => {
                Some(fault.t + for_ms * 1000 + us(woken_notice(bounds.ttl) + bounds.notice_slack))
            }
            FaultKind::Blackhole => Some(fault.t + us(bounds.ttl + bounds.notice_slack)),
            FaultKind::NodesDown { .. } if !fault.kind.lease_survives() => {
                Some(fault.t + us(bounds.ttl + bounds.notice_slack))
            }
            _ => continue,
        };
        let Some((worker, fence)) = fault.target else {
            continue;
        };
        let notice = lost.iter().find(|l| l.worker == worker && l.fence == fence);
        match (notice, deadline) {
            (None, _) => out.push(Violation::new(
                Property::LostNotice,
                None,
                format!("worker {worker} never reported losing the lease of fence {fence}"),
            )),
            (Some(l), Some(deadline)) if l.t > deadline => out.push(Violation::new(
                Property::LostNotice,
                None,
                format!(
                    "worker {worker} learned it lost fence {fence} {} ms after the fault \
                     began (bound: TTL + {} ms)",
                    (l.t - fault.t) / 1000,
                    bounds.notice_slack.as_millis()
                ),
            )),
            _ => {}
        }
    }
    out
}

/// A holder paused for less than its renewal margin, holding across a
/// restart of Redis from an fsynced AOF, or across a renewal while Redlock
/// nodes are stopped but its lease is still on a quorum, keeps its lease:
/// no lost notice, and its release succeeds.
///
/// So does a holder held across a rolling restart of Redlock nodes (one at
/// a time, each restarted empty at once, at least two renewal periods
/// apart): each renewal a quorum grants takes the lease back on the node
/// that restarted, so before each restart the lease must still be on a
/// quorum of the other nodes. Fewer is a violation by itself: the nodes
/// without it are then a quorum another client can take the lock on.
pub fn kept_leases(lost: &[LostEvent], releases: &[Release], faults: &[Fault]) -> Vec<Violation> {
    let mut out = Vec::new();
    for fault in faults {
        let keeps = match fault.kind {
            FaultKind::PauseShort | FaultKind::RestartAof | FaultKind::NodeRestarted { .. } => true,
            FaultKind::NodesDown { .. } => fault.kind.lease_survives(),
            _ => false,
        };
        if !keeps {
            continue;
        }
        let Some((worker, fence)) = fault.target else {
            continue;
        };
        if let FaultKind::NodeRestarted {
            node,
            nodes,
            holder_on,
        } = fault.kind
            && !fault.kind.lease_survives()
        {
            out.push(Violation::new(
                Property::LeaseKept,
                None,
                format!(
                    "the lease of worker {worker}'s fence {fence} was on only {holder_on} of \
                         the {} other nodes when node {node} restarted: not taken back on the \
                         nodes restarted before, so the nodes without it are a quorum",
                    nodes - 1
                ),
            ));
        }
        if lost.iter().any(|l| l.worker == worker && l.fence == fence) {
            out.push(Violation::new(
                Property::LeaseKept,
                None,
                format!(
                    "worker {worker} lost the lease of fence {fence} during {:?}",
                    fault.kind
                ),
            ));
        }
        let release = releases
            .iter()
            .find(|r| r.worker == worker && r.fence == fence);
        if let Some(r) = release.filter(|r| r.outcome != Outcome::Ok) {
            out.push(Violation::new(
                Property::LeaseKept,
                None,
                format!(
                    "worker {worker}'s release of fence {fence} after {:?} returned {}",
                    fault.kind,
                    r.outcome.as_str()
                ),
            ));
        }
    }
    out
}

/// A stretch of time during which Redlock nodes were stopped: from the
/// moment all of them were down to the moment the first came back.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Outage {
    /// When every node of the stretch was stopped.
    pub from: Micros,
    /// When the first came back; `None` if none did.
    pub until: Option<Micros>,
    /// Nodes stopped.
    pub stopped: u32,
    /// Nodes in the deployment.
    pub nodes: u32,
    /// Running nodes that stored the holder's lease.
    pub holder_on: u32,
    /// Whether no quorum was left.
    pub majority: bool,
    /// The holder the nodes stopped under.
    pub target: Option<(WorkerId, u64)>,
}

impl Outage {
    /// Whether `t` falls inside it.
    pub fn contains(&self, t: Micros) -> bool {
        t >= self.from && self.until.is_none_or(|u| t <= u)
    }
}

/// The outages of a history: each `NodesDown` up to the next `NodesBack`.
pub fn outages(faults: &[Fault]) -> Vec<Outage> {
    let mut sorted: Vec<&Fault> = faults.iter().collect();
    sorted.sort_by_key(|f| f.t);
    let mut out: Vec<Outage> = Vec::new();
    for fault in sorted {
        match fault.kind {
            FaultKind::NodesDown {
                killed,
                paused,
                nodes,
                holder_on,
            } => out.push(Outage {
                from: fault.t,
                until: None,
                stopped: killed + paused,
                nodes,
                holder_on,
                majority: fault.kind.majority_down(),
                target: fault.target,
            }),
            FaultKind::NodesBack => {
                if let Some(open) = out.last_mut().filter(|o| o.until.is_none()) {
                    open.until = Some(fault.t);
                }
            }
            _ => {}
        }
    }
    out
}

/// Acquisitions granted while a majority of Redlock nodes was down.
///
/// One that returned inside such an outage had every attempt inside it if
/// `acquire()` was called after the outage began; an attempt sent before
/// cannot end later than a TTL into it (the node timeout is at most half
/// the TTL, and a reply slower than the TTL is never used), so returning
/// later than that is a violation whenever the call began.
pub fn grants_without_quorum(
    acquisitions: &[Acquisition],
    faults: &[Fault],
    bounds: Bounds,
) -> Vec<Violation> {
    let mut out = Vec::new();
    for outage in outages(faults).iter().filter(|o| o.majority) {
        for a in acquisitions.iter().filter(|a| outage.contains(a.t)) {
            if a.started >= outage.from || a.t >= outage.from + us(bounds.ttl) {
                out.push(Violation::new(
                    Property::GrantWithoutQuorum,
                    None,
                    format!(
                        "worker {} got fence {} {} ms into an outage of a majority of the \
                         nodes (acquire() called {})",
                        a.worker,
                        a.fence,
                        (a.t - outage.from) / 1000,
                        if a.started >= outage.from {
                            "inside it"
                        } else {
                            "before it"
                        }
                    ),
                ));
            }
        }
    }
    out
}

/// Once a majority of Redlock nodes is back, some worker must get the lock
/// within the TTL plus slack.
///
/// Outages too close to the end of the history (its last acquisition or
/// failed acquisition) to be judged are skipped.
pub fn recoveries(
    acquisitions: &[Acquisition],
    errors: &[AcquireError],
    faults: &[Fault],
    bounds: Bounds,
) -> Vec<Violation> {
    let limit = us(bounds.ttl + bounds.liveness_slack);
    let ends = acquisitions.iter().map(|a| a.t);
    let end = ends.chain(errors.iter().map(|e| e.t)).max().unwrap_or(0);
    let mut out = Vec::new();
    for outage in outages(faults).iter().filter(|o| o.majority) {
        let Some(back) = outage.until else { continue };
        let next = acquisitions.iter().map(|a| a.t).filter(|&t| t > back).min();
        match next {
            Some(t) if t - back <= limit => {}
            Some(t) => out.push(Violation::new(
                Property::Liveness,
                None,
                format!(
                    "the lock worked again only {} ms after the nodes came back (bound {} ms)",
                    (t - back) / 1000,
                    limit / 1000
                ),
            )),
            None if end > back + limit => out.push(Violation::new(
                Property::Liveness,
                None,
                "nobody got the lock after the nodes came back".to_owned(),
            )),
            None => {}
        }
    }
    out
}

/// Reads of live nodes, taken while a majority was down and no worker was
/// inside `acquire()`, that found a lease (or could not tell): a failed
/// attempt must give back what it took.
pub fn left_held(checks: &[NodeCheck]) -> Vec<Violation> {
    checks
        .iter()
        .filter_map(|c| {
            let detail = match (&c.holder, &c.error) {
                (_, Some(e)) => format!("node {} could not be read: {e}", c.node),
                (Some(h), None) => format!(
                    "node {} still stored a lease (holder {h}…) after the failed attempts",
                    c.node
                ),
                (None, None) => return None,
            };
            Some(Violation::new(Property::LeftHeld, None, detail))
        })
        .collect()
}

/// Outages of a majority in which no `acquire()` failed with
/// `QuorumNotReached`: the fault did not take (or the workers never
/// tried), so the absence of grants proves nothing.
pub fn unproven_outages(errors: &[AcquireError], faults: &[Fault]) -> Vec<String> {
    outages(faults)
        .iter()
        .filter(|o| o.majority)
        .filter(|o| !errors.iter().any(|e| e.quorum && o.contains(e.t)))
        .map(|o| {
            format!(
                "no acquire() failed with QuorumNotReached in the outage of a majority that \
                 began at {} µs",
                o.from
            )
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: u64 = 1000;

    fn bounds() -> Bounds {
        Bounds {
            ttl: Duration::from_secs(1),
            liveness_slack: Duration::from_secs(1),
            notice_slack: Duration::from_millis(100),
            queue_window: Duration::from_secs(3),
            queue_heartbeat: Duration::from_secs(1),
        }
    }

    /// One holder's read and write on both registers, `n` = value read.
    fn cycle(seq: &mut u64, worker: u32, fence: u64, read: i64, before_write: i64) -> Vec<Op> {
        let mut ops = Vec::new();
        for (kind, value, before) in [
            (OpKind::Read, read, read),
            (OpKind::Write, read + 1, before_write),
        ] {
            *seq += 1;
            ops.push(Op {
                seq: *seq,
                t: *seq * MS,
                worker,
                fence,
                token: format!("tok{fence}"),
                register: Register::Unfenced,
                kind,
                value,
                before,
                accepted: true,
            });
        }
        ops
    }

    fn acq(worker: u32, started: u64, t: u64, fence: u64) -> Acquisition {
        Acquisition {
            worker,
            started,
            t,
            fence,
            token: format!("tok{fence}"),
        }
    }

    #[test]
    fn clean_history_has_no_violations() {
        let mut seq = 0;
        let mut ops = cycle(&mut seq, 1, 10, 0, 0);
        ops.extend(cycle(&mut seq, 2, 11, 1, 1));
        let history = History {
            acquisitions: vec![acq(1, 0, MS, 10), acq(2, 0, 5 * MS, 11)],
            ops,
            ..History::default()
        };
        assert_eq!(check_all(&history, bounds()), vec![]);
    }

    #[test]
    fn overlap_is_reported() {
        // Holder 10 reads, holder 11 reads and writes, holder 10 writes.
        let mut seq = 0;
        let mut a = cycle(&mut seq, 1, 10, 0, 0);
        let b = cycle(&mut seq, 2, 11, 0, 0);
        a[1].seq = seq + 1;
        a[1].before = 1;
        let mut ops = vec![a[0].clone()];
        ops.extend(b);
        ops.push(a[1].clone());
        let found = overlaps(&ops, Register::Unfenced);
        assert_eq!(found.len(), 1, "{found:?}");
        assert_eq!(found[0].property, Property::Overlap);
        assert!(found[0].is_unfenced());
        assert!(overlaps(&ops, Register::Fenced).is_empty());
    }

    #[test]
    fn lost_update_is_reported() {
        let mut seq = 0;
        // Read 0, but the register held 1 at the write: one increment lost.
        let ops = cycle(&mut seq, 1, 10, 0, 1);
        let found = lost_updates(&ops, Register::Unfenced);
        assert_eq!(found.len(), 1);
        assert_eq!(found[0].property, Property::LostUpdate);
        assert!(
            found[0].detail.contains("1 increment(s) lost"),
            "{}",
            found[0]
        );
    }

    #[test]
    fn rejected_operations_are_not_violations() {
        let mut seq = 0;
        let mut ops = cycle(&mut seq, 1, 10, 0, 5);
        for op in &mut ops {
            op.register = Register::Fenced;
            op.accepted = false;
        }
        assert!(lost_updates(&ops, Register::Fenced).is_empty());
        assert!(overlaps(&ops, Register::Fenced).is_empty());
    }

    #[test]
    fn duplicate_fence_is_reported() {
        let found = duplicate_fences(&[acq(1, 0, 1, 7), acq(2, 2, 3, 7), acq(1, 4, 5, 8)]);
        assert_eq!(found.len(), 1);
        assert_eq!(found[0].property, Property::DuplicateFence);
        assert!(found[0].detail.contains("fence 7 issued 2 times"));
    }

    #[test]
    fn fence_going_back_is_reported_but_concurrent_attempts_are_not() {
        // Worker 2 started after worker 1 returned fence 100, got 50.
        let found = fence_regressions(&[acq(1, 0, 10, 100), acq(2, 20, 30, 50)]);
        assert_eq!(found.len(), 1);
        assert_eq!(found[0].property, Property::FenceRegression);
        // Overlapping attempts may come back in any order.
        assert!(fence_regressions(&[acq(1, 0, 10, 100), acq(2, 5, 30, 50)]).is_empty());
    }

    #[test]
    fn non_owner_success_is_reported() {
        let probe = |outcome| Probe {
            worker: 3,
            t: 1,
            kind: "release".into(),
            fence: 9,
            outcome,
        };
        let found = non_owner_successes(&[probe(Outcome::NotOwner), probe(Outcome::Ok)]);
        assert_eq!(found.len(), 1);
        assert_eq!(found[0].property, Property::NonOwnerSuccess);
    }

    #[test]
    fn slow_recovery_after_a_kill_is_reported() {
        let kill = |t| Fault {
            t,
            kind: FaultKind::Kill,
            target: Some((1, 10)),
        };
        // Free again 1.5 s after the kill: within TTL (1 s) + slack (1 s).
        let ok = [acq(1, 0, 1, 10), acq(2, 0, 1_500 * MS, 11)];
        assert!(liveness(&ok, &[], &[kill(0)], bounds()).is_empty());
        let late = [acq(1, 0, 1, 10), acq(2, 0, 2_500 * MS, 11)];
        let found = liveness(&late, &[], &[kill(0)], bounds());
        assert_eq!(found.len(), 1);
        assert_eq!(found[0].property, Property::Liveness);
        // The holder's own later acquisitions do not count.
        let same = [acq(1, 0, 1_200 * MS, 11), acq(2, 0, 3_000 * MS, 12)];
        assert_eq!(liveness(&same, &[], &[kill(0)], bounds()).len(), 1);
    }

    #[test]
    fn lock_not_granted_soon_after_redis_resumed_is_reported() {
        let resumed = [Fault {
            t: 1_000 * MS,
            kind: FaultKind::RedisResumed,
            target: None,
        }];
        // Any worker counts, the one that held last included.
        let soon = [acq(1, 0, 500 * MS, 9), acq(1, 500 * MS, 2_900 * MS, 10)];
        assert!(liveness(&soon, &[], &resumed, bounds()).is_empty());
        let late = [acq(1, 0, 500 * MS, 9), acq(2, 500 * MS, 3_100 * MS, 10)];
        let found = liveness(&late, &[], &resumed, bounds());
        assert_eq!(found.len(), 1, "{found:?}");
        assert!(found[0].detail.contains("after a freeze"), "{}", found[0]);
        // The freeze itself asks nothing.
        let paused = [Fault {
            t: 0,
            kind: FaultKind::RedisPaused,
            target: None,
        }];
        assert!(liveness(&late, &[], &paused, bounds()).is_empty());
    }

    #[test]
    fn lock_not_free_soon_after_a_wrapper_was_killed_is_reported() {
        let killed = [Fault {
            t: 0,
            kind: FaultKind::WrapperKilled,
            target: Some((1, 10)),
        }];
        let ok = [acq(1, 0, 1, 10), acq(2, 0, 1_900 * MS, 11)];
        assert!(liveness(&ok, &[], &killed, bounds()).is_empty());
        let late = [acq(1, 0, 1, 10), acq(2, 0, 2_100 * MS, 11)];
        assert_eq!(liveness(&late, &[], &killed, bounds()).len(), 1);
    }

    #[test]
    fn late_or_missing_lost_notice_is_reported() {
        let blackhole = Fault {
            t: 0,
            kind: FaultKind::Blackhole,
            target: Some((1, 10)),
        };
        let lost = |t| LostEvent {
            worker: 1,
            t,
            fence: 10,
        };
        assert!(
            lost_notices(
                &[lost(990 * MS)],
                std::slice::from_ref(&blackhole),
                bounds()
            )
            .is_empty()
        );
        assert_eq!(
            lost_notices(
                &[lost(1_200 * MS)],
                std::slice::from_ref(&blackhole),
                bounds()
            )
            .len(),
            1
        );
        assert_eq!(lost_notices(&[], &[blackhole], bounds()).len(), 1);
    }

    #[test]
    fn lease_lost_despite_a_short_pause_is_reported() {
        let pause = Fault {
            t: 0,
            kind: FaultKind::PauseShort,
            target: Some((1, 10)),
        };
        let release = |outcome| Release {
            worker: 1,
            t: 5,
            fence: 10,
            outcome,
        };
        assert!(kept_leases(&[], &[release(Outcome::Ok)], std::slice::from_ref(&pause)).is_empty());
        let found = kept_leases(&[], &[release(Outcome::Lost)], &[pause]);
        assert_eq!(found.len(), 1);
        assert_eq!(found[0].property, Property::LeaseKept);
    }

    fn down(t: u64, killed: u32, holder_on: u32) -> Fault {
        Fault {
            t,
            kind: FaultKind::NodesDown {
                killed,
                paused: 0,
                nodes: 5,
                holder_on,
            },
            target: Some((1, 10)),
        }
    }

    fn back(t: u64) -> Fault {
        Fault {
            t,
            kind: FaultKind::NodesBack,
            target: None,
        }
    }

    fn failed(t: u64, quorum: bool) -> AcquireError {
        AcquireError {
            worker: 2,
            t,
            quorum,
            error: "x".into(),
        }
    }

    #[test]
    fn majority_and_surviving_leases_follow_the_quorum() {
        assert!(!down(0, 2, 3).kind.majority_down());
        assert!(down(0, 3, 2).kind.majority_down());
        assert!(down(0, 1, 3).kind.lease_survives());
        assert!(!down(0, 1, 2).kind.lease_survives());
        let windows = outages(&[down(100, 3, 2), back(900), down(1_000, 1, 4)]);
        assert_eq!(windows.len(), 2);
        assert_eq!(windows[0].until, Some(900));
        assert!(windows[0].majority && !windows[1].majority);
        assert_eq!(windows[1].until, None);
    }

    #[test]
    fn acquisition_granted_while_a_majority_was_down_is_reported() {
        let faults = [down(1_000 * MS, 3, 2), back(4_000 * MS)];
        // Called and granted inside the outage.
        let inside = [acq(2, 1_500 * MS, 1_600 * MS, 11)];
        let found = grants_without_quorum(&inside, &faults, bounds());
        assert_eq!(found.len(), 1, "{found:?}");
        assert_eq!(found[0].property, Property::GrantWithoutQuorum);
        // Called before, granted more than a TTL into it: no attempt sent
        // before the outage can end that late.
        let late = [acq(2, 900 * MS, 2_100 * MS, 11)];
        assert_eq!(grants_without_quorum(&late, &faults, bounds()).len(), 1);
        // Decided by nodes answering just before the outage began; or
        // granted after the nodes came back; or with a minority down.
        let fine = [
            acq(2, 900 * MS, 1_050 * MS, 11),
            acq(3, 3_900 * MS, 4_100 * MS, 12),
        ];
        assert!(grants_without_quorum(&fine, &faults, bounds()).is_empty());
        let minority = [down(1_000 * MS, 2, 3), back(4_000 * MS)];
        assert!(grants_without_quorum(&inside, &minority, bounds()).is_empty());
    }

    #[test]
    fn outage_without_a_quorum_error_is_unproven() {
        let faults = [down(1_000, 3, 2), back(5_000)];
        assert_eq!(unproven_outages(&[], &faults).len(), 1);
        // Only QuorumNotReached inside the outage counts.
        let others = [failed(2_000, false), failed(6_000, true)];
        assert_eq!(unproven_outages(&others, &faults).len(), 1);
        assert!(unproven_outages(&[failed(2_000, true)], &faults).is_empty());
        // A minority outage needs no such proof.
        assert!(unproven_outages(&[], &[down(1_000, 2, 3)]).is_empty());
    }

    #[test]
    fn lease_left_on_a_live_node_is_reported() {
        let check = |holder: Option<&str>, error: Option<&str>| NodeCheck {
            t: 1,
            node: 3,
            holder: holder.map(Into::into),
            error: error.map(Into::into),
        };
        assert!(left_held(&[check(None, None)]).is_empty());
        let found = left_held(&[check(Some("ab12cd34"), None), check(None, Some("refused"))]);
        assert_eq!(found.len(), 2);
        assert!(found.iter().all(|v| v.property == Property::LeftHeld));
        assert!(found[0].detail.contains("ab12cd34"), "{}", found[0]);
    }

    #[test]
    fn lock_not_working_again_after_the_nodes_came_back_is_reported() {
        let faults = [down(1_000 * MS, 3, 2), back(3_000 * MS)];
        let soon = [acq(2, 3_000 * MS, 3_500 * MS, 11)];
        assert!(recoveries(&soon, &[], &faults, bounds()).is_empty());
        let late = [acq(2, 3_000 * MS, 5_500 * MS, 11)];
        let found = recoveries(&late, &[], &faults, bounds());
        assert_eq!(found.len(), 1);
        assert_eq!(found[0].property, Property::Liveness);
        // Never again while workers kept failing long enough to tell; too
        // close to the end of the history to tell.
        let before = [acq(2, 0, 500 * MS, 9)];
        let never = recoveries(&before, &[failed(6_000 * MS, false)], &faults, bounds());
        assert_eq!(never.len(), 1);
        assert!(recoveries(&before, &[failed(3_500 * MS, false)], &faults, bounds()).is_empty());
    }

    fn restart(t: u64, node: u32, holder_on: u32, target: Option<(u32, u64)>) -> Fault {
        Fault {
            t,
            kind: FaultKind::NodeRestarted {
                node,
                nodes: 5,
                holder_on,
            },
            target,
        }
    }

    #[test]
    fn holder_held_across_a_rolling_restart_must_keep_its_lease() {
        let held = Some((1, 10));
        let lost = |t| LostEvent {
            worker: 1,
            t,
            fence: 10,
        };
        let release = |outcome| Release {
            worker: 1,
            t: 3_000 * MS,
            fence: 10,
            outcome,
        };
        // Taken back on each restarted node: on 4, then 3 or 4, of the
        // other nodes before each restart; no lost(), release ok.
        let kept = [
            restart(0, 0, 4, held),
            restart(700 * MS, 1, 3, held),
            restart(1_400 * MS, 2, 4, held),
        ];
        assert!(kept_leases(&[], &[release(Outcome::Ok)], &kept).is_empty());
        assert!(!kept[1].kind.majority_down());
        // Not taken back: on 2 of the others at the third restart, which
        // is a violation even before the holder hears of it.
        let eroded = [
            restart(0, 0, 4, held),
            restart(700 * MS, 1, 3, held),
            restart(1_400 * MS, 2, 2, held),
        ];
        let found = kept_leases(&[], &[release(Outcome::Ok)], &eroded);
        assert_eq!(found.len(), 1, "{found:?}");
        assert_eq!(found[0].property, Property::LeaseKept);
        assert!(found[0].detail.contains("only 2 of the 4"), "{}", found[0]);
        // Told lost() or a failed release after a restart under the holder.
        let found = kept_leases(&[lost(900 * MS)], &[release(Outcome::Lost)], &kept[..1]);
        assert_eq!(found.len(), 2, "{found:?}");
        // A restart no holder was held across asks nothing of anyone.
        let free = [restart(0, 3, 0, None)];
        assert!(kept_leases(&[lost(10)], &[release(Outcome::Lost)], &free).is_empty());
        assert!(lost_notices(&[], &free, bounds()).is_empty());
    }

    #[test]
    fn lock_not_granted_soon_after_a_restart_nobody_held_across_is_reported() {
        let free = [restart(1_000 * MS, 3, 0, None)];
        // Any worker counts, even the one that held last.
        let soon = [acq(1, 0, 500 * MS, 9), acq(1, 1_000 * MS, 1_900 * MS, 10)];
        assert!(liveness(&soon, &[], &free, bounds()).is_empty());
        let late = [acq(1, 0, 500 * MS, 9), acq(2, 1_000 * MS, 3_100 * MS, 10)];
        let found = liveness(&late, &[], &free, bounds());
        assert_eq!(found.len(), 1, "{found:?}");
        assert_eq!(found[0].property, Property::Liveness);
        assert!(found[0].detail.contains("node 3 restarted"), "{}", found[0]);
        // Nothing granted after it yet: too close to the end to judge.
        assert!(liveness(&soon[..1], &[], &free, bounds()).is_empty());
        // A restart under a held holder: the others wait for it on purpose.
        let held = [restart(1_000 * MS, 3, 4, Some((1, 9)))];
        assert!(liveness(&late, &[], &held, bounds()).is_empty());
    }

    #[test]
    fn holder_cut_off_by_stopped_nodes_must_learn_it_within_its_validity() {
        let lost = |t| LostEvent {
            worker: 1,
            t,
            fence: 10,
        };
        // Lease left on 2 running nodes: lost() due within TTL + slack.
        let cut = down(0, 1, 2);
        assert!(lost_notices(&[lost(950 * MS)], std::slice::from_ref(&cut), bounds()).is_empty());
        assert_eq!(
            lost_notices(&[], std::slice::from_ref(&cut), bounds()).len(),
            1
        );
        // Lease still on a quorum: it must be kept instead.
        let kept = down(0, 1, 3);
        assert!(lost_notices(&[], std::slice::from_ref(&kept), bounds()).is_empty());
        assert_eq!(kept_leases(&[lost(500 * MS)], &[], &[kept]).len(), 1);
        assert!(kept_leases(&[lost(500 * MS)], &[], &[cut]).is_empty());
    }

    fn handoff_pause(t: u64, for_ms: u64) -> Fault {
        Fault {
            t,
            kind: FaultKind::HandOffPaused { for_ms },
            target: Some((1, 10)),
        }
    }

    fn waiters_killed(t: u64) -> Fault {
        Fault {
            t,
            kind: FaultKind::WaitersKilled {
                killed: 3,
                queued: 3,
            },
            target: None,
        }
    }

    #[test]
    fn lock_not_granted_soon_after_a_holder_paused_past_a_handoff_is_reported() {
        let paused = [handoff_pause(0, 3_500)];
        // Bound: max(TTL 1 s, queue window 3 s) + heartbeat 1 s + slack 1 s.
        let ok = [acq(1, 0, 1, 10), acq(2, 0, 4_900 * MS, 11)];
        assert!(liveness(&ok, &[], &paused, bounds()).is_empty());
        let late = [acq(1, 0, 1, 10), acq(2, 0, 5_100 * MS, 11)];
        let found = liveness(&late, &[], &paused, bounds());
        assert_eq!(found.len(), 1, "{found:?}");
        assert!(found[0].detail.contains("handed the lock"), "{}", found[0]);
        // The paused holder's own later acquisitions do not count.
        let own = [acq(1, 0, 4_000 * MS, 11), acq(2, 0, 5_100 * MS, 12)];
        assert_eq!(liveness(&own, &[], &paused, bounds()).len(), 1);
    }

    #[test]
    fn lock_not_granted_soon_after_queued_waiters_were_killed_is_reported() {
        let killed = [waiters_killed(1_000 * MS)];
        // Bound: queue window 3 s + heartbeat 1 s + slack 1 s; any worker.
        let ok = [acq(1, 0, 500 * MS, 9), acq(1, 900 * MS, 5_900 * MS, 10)];
        assert!(liveness(&ok, &[], &killed, bounds()).is_empty());
        let late = [acq(1, 0, 500 * MS, 9), acq(2, 900 * MS, 6_100 * MS, 10)];
        let found = liveness(&late, &[], &killed, bounds());
        assert_eq!(found.len(), 1, "{found:?}");
        assert!(
            found[0].detail.contains("3 queued waiter(s)"),
            "{}",
            found[0]
        );
        // Never granted again, while acquire() kept failing long enough to
        // tell (a lease handed to a dead waiter that never expires).
        let stuck = liveness(&ok[..1], &[failed(7_000 * MS, false)], &killed, bounds());
        assert_eq!(stuck.len(), 1, "{stuck:?}");
        assert!(
            stuck[0].detail.contains("nobody got the lock"),
            "{}",
            stuck[0]
        );
        // Failures too close to the kill to tell.
        assert!(liveness(&ok[..1], &[failed(5_000 * MS, false)], &killed, bounds()).is_empty());
    }

    #[test]
    fn holder_paused_after_a_handoff_must_be_told_lost_soon_after_waking() {
        let paused = handoff_pause(0, 3_500);
        let lost = |t| LostEvent {
            worker: 1,
            t,
            fence: 10,
        };
        // Woken at 3.5 s: told within half a TTL plus the notice slack.
        let ok = [lost(3_900 * MS)];
        assert!(lost_notices(&ok, std::slice::from_ref(&paused), bounds()).is_empty());
        let late = [lost(4_200 * MS)];
        let found = lost_notices(&late, std::slice::from_ref(&paused), bounds());
        assert_eq!(found.len(), 1, "{found:?}");
        assert_eq!(found[0].property, Property::LostNotice);
        assert_eq!(lost_notices(&[], &[paused], bounds()).len(), 1);
    }
}
