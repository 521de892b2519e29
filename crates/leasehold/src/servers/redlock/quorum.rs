//! Quorum maths for Redlock. Pure: no I/O, no clocks.

use std::time::Duration;

use crate::lease::validity;

/// The number of nodes that must agree among `n`: a strict majority.
pub(crate) fn quorum(n: usize) -> usize {
    n / 2 + 1
}

/// Whether a re-take may still be sent for a lease of `ttl` whose renewal
/// was sent `elapsed` ago: only while the quorum's answer
/// is fresh, at most half the TTL old and with validity left. A client
/// starved longer may be acting on a lease that lapsed meanwhile, and its
/// re-take would overwrite a new holder's token on the nodes it is sent to.
pub(crate) fn retake_in_time(ttl: Duration, elapsed: Duration) -> bool {
    elapsed <= ttl / 2 && validity(ttl, elapsed).is_some()
}

/// What the answers of `n` nodes to one request add up to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Verdict {
    /// A quorum agreed.
    Agreed,
    /// So many refused that no quorum is possible whatever the rest say.
    Refused,
    /// Neither: too many nodes failed to answer.
    Undecided,
}

/// The verdict of `n` nodes of which `agreed` said yes and `refused` said
/// no (the rest did not answer).
pub(crate) fn verdict(n: usize, agreed: usize, refused: usize) -> Verdict {
    let q = quorum(n);
    if agreed >= q {
        Verdict::Agreed
    } else if refused > n - q {
        Verdict::Refused
    } else {
        Verdict::Undecided
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::lease::drift;
    use proptest::prelude::*;

    #[test]
    fn quorums_are_strict_majorities() {
        assert_eq!(quorum(1), 1);
        assert_eq!(quorum(3), 2);
        assert_eq!(quorum(4), 3);
        assert_eq!(quorum(5), 3);
    }

    #[test]
    fn a_retake_is_sent_only_on_a_fresh_answer() {
        let ttl = Duration::from_secs(10);
        assert!(retake_in_time(ttl, Duration::ZERO));
        assert!(retake_in_time(ttl, Duration::from_secs(5)));
        assert!(!retake_in_time(ttl, Duration::from_millis(5001)));
        // Starved past the lease's validity: never.
        assert!(!retake_in_time(ttl, Duration::from_secs(11)));
        // A TTL so short that the drift eats half of it.
        let tiny = Duration::from_millis(4);
        assert!(!retake_in_time(tiny, Duration::from_millis(2)));
    }

    proptest! {
        #[test]
        fn two_owners_never_both_reach_a_quorum(n in 1usize..12, split in 0usize..12) {
            let a = split.min(n);
            let b = n - a;
            // Each node holds for at most one owner: a and b partition them.
            prop_assert!(!(verdict(n, a, b) == Verdict::Agreed && verdict(n, b, a) == Verdict::Agreed));
        }

        #[test]
        fn a_verdict_is_never_both_agreed_and_refused(n in 1usize..12, agreed in 0usize..12, refused in 0usize..12) {
            prop_assume!(agreed + refused <= n);
            let v = verdict(n, agreed, refused);
            if agreed >= quorum(n) {
                prop_assert_eq!(v, Verdict::Agreed);
            }
            if v == Verdict::Refused {
                prop_assert!(agreed + (n - agreed - refused) < quorum(n));
            }
            if v == Verdict::Undecided {
                // Some answers of the silent nodes could still give a quorum either way.
                prop_assert!(agreed + (n - agreed - refused) >= quorum(n));
            }
        }

        #[test]
        fn validity_never_exceeds_the_ttl_less_elapsed(ttl_ms in 10u64..100_000, elapsed_ms in 0u64..200_000) {
            let ttl = Duration::from_millis(ttl_ms);
            let elapsed = Duration::from_millis(elapsed_ms);
            if let Some(v) = validity(ttl, elapsed) {
                prop_assert!(v + elapsed < ttl);
            } else {
                prop_assert!(elapsed + drift(ttl) >= ttl);
            }
        }
    }
}
