//! What happened in one schedule: a digest of every event (the same seed
//! gives the same digest), the last lines for a report, and the holds the
//! checker judges.

use std::collections::{BTreeMap, VecDeque};
use std::time::Duration;

/// Lines kept for the report of a violation.
const KEPT: usize = 400;

/// The events of one schedule.
#[derive(Debug, Default)]
pub struct History {
    digest: u64,
    events: u64,
    recent: VecDeque<String>,
    /// Every line, when asked for (`--seed` with `--trace`).
    pub full: Option<Vec<String>>,
}

impl History {
    /// Appends one event at `at` (simulated time since the start).
    pub fn push(&mut self, at: Duration, line: String) {
        let line = format!("{:>10.3}ms {line}", at.as_secs_f64() * 1000.0);
        // FNV-1a over every line: equal histories, equal digests.
        let mut h = if self.events == 0 {
            0xcbf2_9ce4_8422_2325
        } else {
            self.digest
        };
        for b in line.bytes().chain(std::iter::once(b'\n')) {
            h ^= u64::from(b);
            h = h.wrapping_mul(0x0100_0000_01b3);
        }
        self.digest = h;
        self.events += 1;
        if let Some(full) = &mut self.full {
            full.push(line.clone());
        }
        if self.recent.len() == KEPT {
            self.recent.pop_front();
        }
        self.recent.push_back(line);
    }

    /// The digest of every event so far.
    pub fn digest(&self) -> u64 {
        self.digest
    }

    /// How many events.
    pub fn events(&self) -> u64 {
        self.events
    }

    /// The last lines (at most 400).
    pub fn recent(&self) -> impl Iterator<Item = &String> {
        self.recent.iter()
    }
}

/// How a primitive's holds may overlap.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Sharing {
    /// One holder at a time (Lock, FairLock, MultiLock's names).
    Exclusive,
    /// Holds of one owner may overlap, of two owners never (ReentrantLock).
    PerOwner,
    /// Readers together, a writer alone (RwLock).
    ReadWrite,
    /// At most this many at once (Semaphore).
    Permits(u32),
}

/// One guard's life as the workload saw it.
#[derive(Debug, Clone)]
pub struct Hold {
    /// Who: process and task.
    pub who: String,
    /// The process (the client) whose guard it is.
    pub process: usize,
    /// What the scripts know the hold by (`Guard::sim_hold`): the id a
    /// break notice and a `release_by_token` give-back name it by.
    pub hold: String,
    /// Its client heard break notices when the guard was handed out
    /// (`Client::sim_hears_breaks`; a subscription is kept for good).
    pub hears_breaks: bool,
    /// The owner (reentrant locks), else the token.
    pub owner: String,
    /// A reader (RwLock).
    pub read: bool,
    /// The fence the guard was given.
    pub fence: u64,
    /// When the acquisition was asked for (simulated µs).
    pub asked_us: u64,
    /// When the acquisition returned the guard (simulated µs).
    pub from_us: u64,
    /// The last moment the guard said it held (not lost, valid for more
    /// than zero); the hold is believed on `from_us..=last_us`.
    pub last_us: u64,
}

/// Invariants the simulator checks whose violations are known and not
/// fixed yet: reported apart, with their seeds, as open findings, and not
/// failed (docs/SAFETY.md lists them and why each is still open). A fix
/// takes its invariant off this list, and its seeds go to regressions.txt.
/// Empty today: "a lock held after close() returned" left it once the
/// watchdog sent failed releases again at close and kept leases lost by
/// the client's clock on its books (seeds in regressions.txt).
pub const OPEN_FINDINGS: &[&str] = &[];

/// A broken invariant.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Violation {
    /// Which invariant.
    pub invariant: &'static str,
    /// What, with the holders involved.
    pub detail: String,
}

/// Checks the holds of one name: no two that each believe they hold
/// overlap (as `sharing` allows), and fences rise with the order of
/// acquisition (equal only for one reentrant owner's holds).
pub fn check_holds(name: &str, sharing: Sharing, holds: &[Hold]) -> Vec<Violation> {
    let mut out = Vec::new();
    let mut sorted: Vec<&Hold> = holds.iter().collect();
    sorted.sort_by_key(|h| (h.from_us, h.last_us));
    // Overlaps: a hold that began strictly before another's last belief.
    for (i, a) in sorted.iter().enumerate() {
        for b in &sorted[i + 1..] {
            if b.from_us >= a.last_us {
                continue;
            }
            let conflict = match sharing {
                Sharing::Exclusive => true,
                Sharing::PerOwner => a.owner != b.owner,
                Sharing::ReadWrite => !(a.read && b.read),
                Sharing::Permits(_) => false,
            };
            if conflict {
                out.push(Violation {
                    invariant: "two holders at once",
                    detail: format!(
                        "{name}: {} (fence {}, held {}..{} us) and {} (fence {}, from {} us)",
                        a.who, a.fence, a.from_us, a.last_us, b.who, b.fence, b.from_us
                    ),
                });
            }
        }
    }
    if let Sharing::Permits(n) = sharing {
        let mut edges: Vec<(u64, i32)> = Vec::new();
        for h in &sorted {
            if h.last_us > h.from_us {
                edges.push((h.from_us, 1));
                edges.push((h.last_us, -1));
            }
        }
        // Ends before starts at one instant: a hold ending at t and one
        // starting at t do not overlap.
        edges.sort();
        let mut count = 0i32;
        for (at, step) in edges {
            count += step;
            if count > n as i32 {
                out.push(Violation {
                    invariant: "more permits than the semaphore has",
                    detail: format!("{name}: {count} holders of {n} permits at {at} us"),
                });
                break;
            }
        }
    }
    // Fences: in acquisition order, each above every earlier one of
    // another owner (writers and exclusive holds; readers share).
    if matches!(
        sharing,
        Sharing::Exclusive | Sharing::PerOwner | Sharing::ReadWrite
    ) {
        let mut highest: BTreeMap<&str, u64> = BTreeMap::new();
        // Readers' fences are not ordered among holders: only writers'.
        for h in sorted.iter().filter(|h| !h.read) {
            let other_max = highest
                .iter()
                .filter(|(o, _)| sharing != Sharing::PerOwner || **o != h.owner.as_str())
                .map(|(_, f)| *f)
                .max();
            if let Some(max) = other_max
                && h.fence <= max
            {
                out.push(Violation {
                    invariant: "fence not above an earlier holder's",
                    detail: format!("{name}: {} got fence {} after fence {max}", h.who, h.fence),
                });
            }
            let e = highest.entry(h.owner.as_str()).or_insert(0);
            *e = (*e).max(h.fence);
        }
    }
    out
}

/// The lock key and the hold ids of a break notice as the library
/// publishes it (`watchdog.rs` `broken_notice`: each part as
/// `<length in bytes>:<text>`); None for anything else.
pub fn parse_notice(mut payload: &[u8]) -> Option<(String, Vec<String>)> {
    let mut parts = Vec::new();
    while !payload.is_empty() {
        let colon = payload.iter().position(|&b| b == b':')?;
        let len: usize = std::str::from_utf8(&payload[..colon]).ok()?.parse().ok()?;
        let rest = &payload[colon + 1..];
        parts.push(String::from_utf8_lossy(rest.get(..len)?).into_owned());
        payload = &rest[len..];
    }
    let mut parts = parts.into_iter();
    let key = parts.next()?;
    Some((key, parts.collect()))
}

/// A break stops its holder (docs/SAFETY.md: "each holder's guard is lost
/// at once (`LostReason::Broken`)" once the notice reaches its client; the
/// documented limits, a notice that never arrives or arrives at a client
/// stuck, leave no arrival here, and a client whose subscription was not
/// made yet when the guard was handed out is not judged: seed 8239, its
/// SUBSCRIBE ran but the answer came after the command timeout): no guard
/// of `name` still believes it holds after a break notice naming its hold
/// reached its process on a live connection. `notices`: (process, payload, when it
/// arrived, µs from the start). A notice that arrived before the guard was
/// handed out is not one the guard could act on (the hold was broken
/// before its lease was on the watchdog's books, and the guard learns it
/// at its first renewal, as a hold broken before it came back); the
/// checker ends such a hold at the break.
pub fn check_notices(
    name: &str,
    holds: &[Hold],
    notices: &[(usize, Vec<u8>, u64)],
) -> Vec<Violation> {
    let tag = format!("{{{name}}}");
    let mut out = Vec::new();
    for h in holds.iter().filter(|h| h.hears_breaks) {
        let heard = notices
            .iter()
            .filter(|(p, _, at)| *p == h.process && *at > h.from_us)
            .filter(|(_, payload, _)| {
                parse_notice(payload)
                    .is_some_and(|(key, ids)| key.contains(&tag) && ids.contains(&h.hold))
            })
            .map(|(_, _, at)| *at)
            .min();
        if let Some(at) = heard
            && h.last_us > at
        {
            out.push(Violation {
                invariant: "a broken guard still held after its break notice arrived",
                detail: format!(
                    "{name}: {} (fence {}) heard the break at {at} us and still held at {} us",
                    h.who, h.fence, h.last_us
                ),
            });
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hold(who: &str, fence: u64, from_us: u64, last_us: u64) -> Hold {
        Hold {
            who: who.into(),
            process: 0,
            hold: who.into(),
            hears_breaks: true,
            owner: who.into(),
            read: false,
            fence,
            asked_us: from_us,
            from_us,
            last_us,
        }
    }

    #[test]
    fn holds_one_after_another_pass_and_overlapping_ones_are_caught() {
        let fine = [hold("a", 1, 0, 10), hold("b", 2, 10, 20)];
        assert!(check_holds("n", Sharing::Exclusive, &fine).is_empty());
        let both = [hold("a", 1, 0, 10), hold("b", 2, 5, 20)];
        let v = check_holds("n", Sharing::Exclusive, &both);
        assert_eq!(v.len(), 1);
        assert_eq!(v[0].invariant, "two holders at once");
    }

    #[test]
    fn a_fence_that_goes_back_is_caught() {
        let v = check_holds(
            "n",
            Sharing::Exclusive,
            &[hold("a", 5, 0, 10), hold("b", 4, 11, 20)],
        );
        assert_eq!(v[0].invariant, "fence not above an earlier holder's");
    }

    #[test]
    fn a_guard_held_after_its_break_notice_arrived_is_caught() {
        let notice = |id: &str| {
            let key = "leasehold:{n}:lock";
            format!("{}:{key}{}:{id}", key.len(), id.len()).into_bytes()
        };
        let h = hold("a", 1, 0, 50);
        // Heard at 40 us, held until 50: caught; heard at 50: not.
        let v = check_notices("n", std::slice::from_ref(&h), &[(0, notice("a"), 40)]);
        assert_eq!(v.len(), 1);
        assert_eq!(
            v[0].invariant,
            "a broken guard still held after its break notice arrived"
        );
        assert!(check_notices("n", std::slice::from_ref(&h), &[(0, notice("a"), 50)]).is_empty());
        // Another hold's notice, another process's, another name's, or one
        // heard before the guard was handed out: nothing.
        assert!(check_notices("n", std::slice::from_ref(&h), &[(0, notice("b"), 40)]).is_empty());
        assert!(check_notices("n", std::slice::from_ref(&h), &[(1, notice("a"), 40)]).is_empty());
        assert!(check_notices("m", std::slice::from_ref(&h), &[(0, notice("a"), 40)]).is_empty());
        let late = hold("a", 1, 45, 50);
        assert!(check_notices("n", &[late], &[(0, notice("a"), 40)]).is_empty());
        let deaf = Hold {
            hears_breaks: false,
            ..h.clone()
        };
        assert!(check_notices("n", &[deaf], &[(0, notice("a"), 40)]).is_empty());
        assert_eq!(
            parse_notice(b"3:key2:ab1:c"),
            Some(("key".into(), vec!["ab".into(), "c".into()]))
        );
        assert_eq!(parse_notice(b"9:short"), None);
    }

    #[test]
    fn readers_share_writers_do_not_and_permits_are_counted() {
        let mut r1 = hold("r1", 1, 0, 10);
        let mut r2 = hold("r2", 2, 5, 15);
        r1.read = true;
        r2.read = true;
        assert!(check_holds("n", Sharing::ReadWrite, &[r1.clone(), r2.clone()]).is_empty());
        let w = hold("w", 3, 8, 20);
        assert_eq!(check_holds("n", Sharing::ReadWrite, &[r1, r2, w]).len(), 2);
        let three = [
            hold("a", 1, 0, 10),
            hold("b", 2, 1, 10),
            hold("c", 3, 2, 10),
        ];
        assert!(check_holds("n", Sharing::Permits(3), &three).is_empty());
        assert_eq!(check_holds("n", Sharing::Permits(2), &three).len(), 1);
    }
}
