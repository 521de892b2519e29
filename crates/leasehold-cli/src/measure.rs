//! Small measuring tools shared by `demo` and `bench`: percentiles, a busy
//! hold, and the hand-off gaps between consecutive holders.

use std::time::{Duration, Instant};

/// CLOCK_MONOTONIC now, in nanoseconds: the same clock in every process
/// (the bench's workers, and `run`'s steps under `run-stampede`).
#[cfg(feature = "bench")]
pub(crate) fn monotonic_ns() -> u64 {
    // CLOCK_MONOTONIC always exists on Linux; 0 would only make a record odd.
    use nix::time::{ClockId, clock_gettime};
    clock_gettime(ClockId::CLOCK_MONOTONIC).map_or(0, |t| {
        let secs = u64::try_from(t.tv_sec()).unwrap_or(0);
        let nanos = u64::try_from(t.tv_nsec()).unwrap_or(0);
        secs * 1_000_000_000 + nanos
    })
}

/// Nearest-rank percentile of sorted `values`.
pub(crate) fn percentile<T: Copy>(sorted: &[T], p: f64) -> Option<T> {
    if sorted.is_empty() {
        return None;
    }
    let rank = (p / 100.0 * sorted.len() as f64).ceil() as usize;
    Some(sorted[rank.clamp(1, sorted.len()) - 1])
}

/// A percentile for people, `-` when there were no samples.
pub(crate) fn pct(sorted: &[Duration], p: f64) -> String {
    percentile(sorted, p).map_or_else(|| "-".to_owned(), crate::output::short)
}

/// Stays busy for `d` while letting other tasks run (tokio's timers are too
/// coarse for a few hundred microseconds).
pub(crate) async fn hold(d: Duration) {
    let until = Instant::now() + d;
    while Instant::now() < until {
        tokio::task::yield_now().await;
    }
}

/// One holder's time with the lock, on any clock both ends share.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Tenure<T> {
    /// When the holder got the lock.
    pub(crate) acquired: T,
    /// When it called release.
    pub(crate) released: T,
}

/// What consecutive holders (in the order given) show: the gap from each
/// release to the next acquisition, sorted, and how many pairs overlapped
/// (the next acquired before the previous released).
pub(crate) fn handoff_gaps<T, D>(in_order: &[Tenure<T>]) -> (Vec<D>, usize)
where
    T: Copy + Ord + std::ops::Sub<Output = D>,
    D: Ord,
{
    let mut gaps = Vec::with_capacity(in_order.len());
    let mut overlaps = 0;
    for pair in in_order.windows(2) {
        let (prev, next) = (&pair[0], &pair[1]);
        if next.acquired <= prev.released {
            overlaps += 1;
        } else {
            gaps.push(next.acquired - prev.released);
        }
    }
    gaps.sort();
    (gaps, overlaps)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nearest_rank_percentiles() {
        let v: Vec<Duration> = (1..=100).map(Duration::from_millis).collect();
        assert_eq!(percentile(&v, 50.0), Some(Duration::from_millis(50)));
        assert_eq!(percentile(&v, 99.0), Some(Duration::from_millis(99)));
        assert_eq!(percentile(&v, 100.0), Some(Duration::from_millis(100)));
        assert_eq!(percentile::<Duration>(&[], 50.0), None);
        assert_eq!(
            percentile(&[Duration::from_millis(3)], 99.0),
            Some(Duration::from_millis(3))
        );
    }

    #[test]
    fn gaps_run_from_one_release_to_the_next_acquisition() {
        let held = [
            Tenure {
                acquired: 0u64,
                released: 10,
            },
            Tenure {
                acquired: 13,
                released: 20,
            },
            Tenure {
                acquired: 19,
                released: 30,
            },
            Tenure {
                acquired: 35,
                released: 40,
            },
        ];
        let (gaps, overlaps) = handoff_gaps(&held);
        assert_eq!(gaps, [3, 5]);
        assert_eq!(overlaps, 1);
    }
}
