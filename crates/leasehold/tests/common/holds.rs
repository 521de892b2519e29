//! Hold histories of tasks that share lock names: the holds that overlap,
//! and the fences that do not follow the order of the holds.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use leasehold::{Lock, LockGuard};

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

/// What load tasks saw: each hold (by name index), each error, and how
/// many grants they had.
#[derive(Default)]
pub struct Load {
    pub holds: Vec<(usize, Hold)>,
    pub errors: Vec<String>,
    pub acquired: usize,
}

impl Load {
    /// One attempt of load task `task` on `lock` (spelled `name`): even
    /// tasks wait briefly, odd ones only try ([`take`]). An error is
    /// recorded, then a 5 ms pause: an error loop must not spin.
    pub async fn attempt(&mut self, lock: Lock, task: usize, name: &str) -> Option<LockGuard> {
        match take(lock, task.is_multiple_of(2)).await {
            Ok(Some(guard)) => {
                self.acquired += 1;
                Some(guard)
            }
            Ok(None) => None,
            Err(e) => {
                self.errors.push(format!("acquire {name}: {e}"));
                tokio::time::sleep(Duration::from_millis(5)).await;
                None
            }
        }
    }

    /// Records `task`'s hold of the name numbered `i` (spelled `name`)
    /// from `start` until now, then gives `guard` back; a failed release
    /// is recorded, then a 5 ms pause.
    pub async fn give_back(
        &mut self,
        guard: LockGuard,
        (i, name): (usize, &str),
        task: usize,
        start: Instant,
    ) {
        let fence = guard.fence();
        let end = Instant::now();
        self.holds.push((
            i,
            Hold {
                start,
                end,
                fence,
                task,
            },
        ));
        if let Err(e) = guard.release().await {
            self.errors.push(format!("release {name}: {e}"));
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }

    /// Adds another task's record to this one.
    pub fn add(&mut self, other: Load) {
        self.holds.extend(other.holds);
        self.errors.extend(other.errors);
        self.acquired += other.acquired;
    }
}

/// Whether an error says a command got a reply of another shape than its
/// own: the mark of a reply delivered to the wrong command.
pub fn is_wrong_reply(error: &str) -> bool {
    [
        "ncompatible type",
        "Not a",
        "value was",
        "unexpected reply",
        "Response was",
    ]
    .iter()
    .any(|mark| error.contains(mark))
}

/// Fails the test if two holds of one name overlapped or fences did not
/// follow the order of the holds (as [`violations`] reports them).
pub fn assert_holds_in_order(overlaps: &[String], fences: &[String], summary: &str) {
    assert!(
        overlaps.is_empty(),
        "two holders of one name: {overlaps:#?}\n{summary}"
    );
    assert!(
        fences.is_empty(),
        "fences out of hold order: {fences:#?}\n{summary}"
    );
}

/// Fails the test if any error in `wrong` (those [`is_wrong_reply`]
/// marks) was seen: a reply delivered to the wrong command.
pub fn assert_no_wrong_replies(wrong: &[&String], summary: &str) {
    assert!(
        wrong.is_empty(),
        "replies seen by the wrong command: {:#?}\n{summary}",
        wrong.iter().take(10).collect::<Vec<_>>()
    );
}
