//! Renewal shared by every primitive: one task per client.
//!
//! Each held lease is renewed at a third of its TTL. Leases due at about
//! the same time are renewed together: one script call per kind of lease
//! (lock, reentrant hold, RwLock hold), each kind by its own script. A renewal that
//! finds the lease missing or held by another owner marks it lost at once;
//! one that cannot reach Redis is retried until the lease's `valid_until`,
//! and then the lease is marked lost.
//!
//! The task also performs the releases of dropped guards, so `Drop` never
//! blocks and never needs a runtime of its own.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::sync::mpsc;

use crate::error::Result;

use crate::key::{LockKeys, slot};
use crate::lease::{Kind, Lease, Snapshot};
use crate::scripts::{Extension, Owned};
use crate::servers::Servers;

/// Leases due within this much of each other share one renewal call.
const COALESCE: Duration = Duration::from_millis(20);
/// Most leases renewed by one script call.
const MAX_BATCH: usize = 512;
/// Most renewal calls in flight at once.
const MAX_BATCHES_IN_FLIGHT: usize = 16;

enum Command {
    /// Renew this lease (again: its TTL may have changed).
    Track(Arc<Lease>),
    /// Stop renewing.
    Untrack(u64),
    /// Release a lease in the background, owner-checked.
    Release {
        kind: Kind,
        keys: Arc<LockKeys>,
        hold: String,
    },
}

/// Handle to the client's watchdog task. The task ends when every handle is dropped.
#[derive(Clone)]
pub(crate) struct Watchdog {
    tx: mpsc::UnboundedSender<Command>,
}

impl Watchdog {
    pub(crate) fn start(servers: Servers) -> Watchdog {
        let (tx, rx) = mpsc::unbounded_channel();
        tokio::spawn(run(servers, rx));
        Watchdog { tx }
    }

    // Sends below ignore a closed channel: the task only ends with the
    // client, and then Redis expires the leases by their TTL.

    /// Starts (or reschedules) renewal of `lease`.
    pub(crate) fn track(&self, lease: Arc<Lease>) {
        let _ = self.tx.send(Command::Track(lease));
    }

    /// Stops renewing the lease with this id.
    pub(crate) fn untrack(&self, id: u64) {
        let _ = self.tx.send(Command::Untrack(id));
    }

    /// Releases in the background; never blocks. `hold` is the lease's
    /// identity in its kind's scripts (see [`Lease::hold`]).
    pub(crate) fn release(&self, kind: Kind, keys: Arc<LockKeys>, hold: String) {
        let _ = self.tx.send(Command::Release { kind, keys, hold });
    }
}

struct Tracked {
    lease: Arc<Lease>,
    due: Instant,
}

struct State {
    servers: Servers,
    leases: HashMap<u64, Tracked>,
    queue: BTreeMap<(Instant, u64), ()>,
}

async fn run(servers: Servers, mut rx: mpsc::UnboundedReceiver<Command>) {
    let mut state = State {
        servers,
        leases: HashMap::new(),
        queue: BTreeMap::new(),
    };
    loop {
        let next = state.queue.first_key_value().map(|((due, _), ())| *due);
        tokio::select! {
            command = rx.recv() => match command {
                Some(command) => state.handle(command).await,
                None => return,
            },
            () = sleep_until(next), if next.is_some() => state.renew_due().await,
        }
    }
}

async fn sleep_until(at: Option<Instant>) {
    if let Some(at) = at {
        tokio::time::sleep_until(at.into()).await;
    }
}

/// How soon to retry a renewal that failed to reach Redis.
fn retry_delay(ttl: Duration) -> Duration {
    (ttl / 10).clamp(Duration::from_millis(5), Duration::from_millis(500))
}

impl State {
    async fn handle(&mut self, command: Command) {
        match command {
            Command::Track(lease) => {
                let due = Instant::now() + lease.snapshot().ttl / 3;
                self.schedule(lease, due);
            }
            Command::Untrack(id) => self.untrack(id),
            Command::Release { kind, keys, hold } => {
                if let Err(e) = self.servers.release(kind, &keys, &hold).await {
                    tracing::warn!(key = %keys.lock(), error = %e,
                        "background release failed; the lease will expire by its TTL");
                }
            }
        }
    }

    fn schedule(&mut self, lease: Arc<Lease>, due: Instant) {
        let id = lease.id;
        if let Some(old) = self.leases.insert(id, Tracked { lease, due }) {
            self.queue.remove(&(old.due, id));
        }
        self.queue.insert((due, id), ());
    }

    fn untrack(&mut self, id: u64) {
        if let Some(old) = self.leases.remove(&id) {
            self.queue.remove(&(old.due, id));
        }
    }

    /// Renews every lease that is due (or nearly due) now.
    async fn renew_due(&mut self) {
        let now = Instant::now();
        let mut due: Vec<(Arc<Lease>, Snapshot)> = Vec::new();
        let horizon = now + COALESCE;
        let candidates: Vec<(Instant, u64)> = self
            .queue
            .range(..=(horizon, u64::MAX))
            .map(|(k, ())| *k)
            .collect();
        for (at, id) in candidates {
            let Some(tracked) = self.leases.get(&id) else {
                continue;
            };
            let snapshot = tracked.lease.snapshot();
            // Renew early only by a small part of the period.
            if at > now + COALESCE.min(snapshot.ttl / 12) {
                continue;
            }
            let lease = Arc::clone(&tracked.lease);
            self.untrack(id);
            if lease.is_lost() {
                lease.mark_lost();
                continue;
            }
            due.push((lease, snapshot));
        }
        // On a cluster one call may only touch keys of one slot.
        let cluster = self.servers.is_cluster();
        due.sort_by_key(|(lease, _)| (lease.kind, cluster.then(|| slot(lease.keys.lock()))));
        let batches: Vec<&[(Arc<Lease>, Snapshot)]> = due
            .chunk_by(|(a, _), (b, _)| {
                a.kind == b.kind && (!cluster || slot(a.keys.lock()) == slot(b.keys.lock()))
            })
            .flat_map(|same_kind| same_kind.chunks(MAX_BATCH))
            .collect();
        // Batches go out together, pipelined on the connection, so the
        // renewal rate is bounded by the server, not by round trips.
        let mut outcomes = Vec::with_capacity(batches.len());
        for wave in batches.chunks(MAX_BATCHES_IN_FLIGHT) {
            let calls = wave.iter().map(|batch| renew_batch(&self.servers, batch));
            outcomes.extend(wave.iter().zip(futures_util::future::join_all(calls).await));
        }
        for (batch, (sent, outcome)) in outcomes {
            self.renewed(batch, sent, outcome);
        }
    }

    /// Records the outcome of renewing `batch` (sent at `sent`).
    fn renewed(
        &mut self,
        batch: &[(Arc<Lease>, Snapshot)],
        sent: Instant,
        outcome: Result<Vec<Option<Owned>>>,
    ) {
        let now = Instant::now();
        let results = match outcome {
            Ok(results) => results,
            Err(e) => {
                tracing::warn!(error = %e, leases = batch.len(),
                    "renewal failed; retrying until the leases' validity runs out");
                vec![None; batch.len()]
            }
        };
        for ((lease, snap), result) in batch.iter().zip(results) {
            match result {
                Some(Owned::Done) => {
                    lease.renewed(sent, *snap);
                    self.schedule(Arc::clone(lease), sent + snap.ttl / 3);
                }
                Some(Owned::Missing | Owned::OtherOwner) => lease.mark_lost(),
                // Not known: keep trying while the lease may still be valid.
                None => {
                    let valid_until = lease.snapshot().valid_until;
                    if now >= valid_until {
                        lease.mark_lost();
                    } else {
                        let retry = (now + retry_delay(snap.ttl)).min(valid_until);
                        self.schedule(Arc::clone(lease), retry);
                    }
                }
            }
        }
    }
}

/// Renews one batch of leases of one kind; returns when it was sent.
async fn renew_batch(
    servers: &Servers,
    batch: &[(Arc<Lease>, Snapshot)],
) -> (Instant, Result<Vec<Option<Owned>>>) {
    let kind = batch[0].0.kind;
    let extensions: Vec<Extension<'_>> = batch
        .iter()
        .map(|(lease, snap)| Extension {
            key: lease.keys.lock(),
            hold: &lease.hold,
            ttl: snap.ttl,
        })
        .collect();
    let sent = Instant::now();
    (sent, servers.extend(kind, &extensions).await)
}

#[cfg(test)]
mod tests {
    use crate::key::{LockKeys, slot};

    #[test]
    fn renewal_batches_split_by_slot() {
        // Every key of one lock shares a slot; different names spread out.
        let a = LockKeys::new("leasehold", "orders:1");
        let b = LockKeys::new("leasehold", "orders:2");
        assert_eq!(slot(a.lock()), slot(a.fence()));
        assert_eq!(slot(a.lock()), slot(a.channel()));
        assert_ne!(slot(a.lock()), slot(b.lock()));
    }
}
