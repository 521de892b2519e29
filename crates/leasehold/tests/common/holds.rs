//! Hold histories of tasks that share lock names: the holds that overlap,
//! and the fences that do not follow the order of the holds.

use std::collections::HashMap;
use std::time::Instant;

/// One hold of one name: from the acquire's return to the release's send,
/// on the monotonic clock.
#[derive(Debug, Clone, Copy)]
pub struct Hold {
    pub start: Instant,
    pub end: Instant,
    pub fence: u64,
    pub task: usize,
}

/// Every pair of holds of one name (`holds` pairs a name's index with a
/// hold; `name` spells the index) that overlap, and every pair whose fences
/// do not follow their order, as messages: `(overlaps, fences)`.
pub fn violations(
    holds: &[(usize, Hold)],
    name: impl Fn(usize) -> String,
) -> (Vec<String>, Vec<String>) {
    let mut by_name: HashMap<usize, Vec<Hold>> = HashMap::new();
    for (i, hold) in holds {
        by_name.entry(*i).or_default().push(*hold);
    }
    let (mut overlaps, mut fences) = (Vec::new(), Vec::new());
    for (i, mut holds) in by_name {
        holds.sort_by_key(|h| h.start);
        // The hold that ends last among those started so far: any later
        // start before its end overlaps it.
        let mut latest: Option<Hold> = None;
        for (k, hold) in holds.iter().enumerate() {
            if let Some(prev) = latest
                && hold.start < prev.end
            {
                overlaps.push(format!(
                    "{}: task {} (fence {}) held until {:?} after task {} (fence {}) took it",
                    name(i),
                    prev.task,
                    prev.fence,
                    prev.end - hold.start,
                    hold.task,
                    hold.fence
                ));
            }
            if k > 0 && hold.fence <= holds[k - 1].fence {
                fences.push(format!(
                    "{}: fence {} (task {}) after fence {} (task {})",
                    name(i),
                    hold.fence,
                    hold.task,
                    holds[k - 1].fence,
                    holds[k - 1].task
                ));
            }
            if latest.is_none_or(|l| hold.end > l.end) {
                latest = Some(*hold);
            }
        }
    }
    (overlaps, fences)
}

/// One attempt of a load task on `lock`: waiting a short while (200 ms)
/// when `waits`, else only trying. `Ok(None)` when someone else held it.
pub async fn take(
    lock: leasehold::Lock,
    waits: bool,
) -> leasehold::Result<Option<leasehold::LockGuard>> {
    if !waits {
        return lock.try_acquire().await;
    }
    match lock
        .wait(std::time::Duration::from_millis(200))
        .acquire()
        .await
    {
        Ok(guard) => Ok(Some(guard)),
        Err(leasehold::Error::Timeout { .. }) => Ok(None),
        Err(e) => Err(e),
    }
}
