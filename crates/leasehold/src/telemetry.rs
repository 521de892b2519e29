//! What the library reports to an application's metrics recorder: the
//! `metrics` facade (feature `metrics`), whose calls do
//! nothing until the application installs a recorder. Names and labels are
//! in the crate docs' table; no label carries a lock name (cardinality).
//!
//! Every call site goes through these functions, so the names live here
//! only and a build without the feature compiles them to nothing.

use std::time::Duration;

use crate::kind::LockKind;

/// `leasehold_acquisitions_total{kind, outcome}`.
#[cfg(feature = "metrics")]
pub(crate) const ACQUISITIONS: &str = "leasehold_acquisitions_total";
/// `leasehold_acquire_wait_seconds{kind}`.
#[cfg(feature = "metrics")]
pub(crate) const ACQUIRE_WAIT: &str = "leasehold_acquire_wait_seconds";
/// `leasehold_held_leases`.
#[cfg(feature = "metrics")]
pub(crate) const HELD_LEASES: &str = "leasehold_held_leases";
/// `leasehold_renewals_total`.
#[cfg(feature = "metrics")]
pub(crate) const RENEWALS: &str = "leasehold_renewals_total";
/// `leasehold_renewal_batches_total`.
#[cfg(feature = "metrics")]
pub(crate) const RENEWAL_BATCHES: &str = "leasehold_renewal_batches_total";
/// `leasehold_leases_lost_total{reason}`.
#[cfg(feature = "metrics")]
pub(crate) const LEASES_LOST: &str = "leasehold_leases_lost_total";
/// `leasehold_handoffs_total`.
#[cfg(feature = "metrics")]
pub(crate) const HANDOFFS: &str = "leasehold_handoffs_total";

/// How one acquire call ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Outcome {
    Acquired,
    /// The wait ran out.
    Timeout,
    /// A try without waiting found the lock held.
    Busy,
    Error,
}

impl Outcome {
    pub(crate) fn label(self) -> &'static str {
        match self {
            Outcome::Acquired => "acquired",
            Outcome::Timeout => "timeout",
            Outcome::Busy => "busy",
            Outcome::Error => "error",
        }
    }
}

/// Why a lease was lost, as far as this client knows: what a guard's
/// `lost_reason()` tells (and the `reason` label of
/// `leasehold_leases_lost_total`).
///
/// ```no_run
/// # async fn run(client: leasehold::Client) -> Result<(), leasehold::Error> {
/// let guard = client.lock("orders:42").acquire().await?;
/// guard.lost().await;
/// if guard.lost_reason() == Some(leasehold::LostReason::Unreachable) {
///     eprintln!("Redis did not answer the renewals of {}", guard.name());
/// }
/// # Ok(()) }
/// ```
#[non_exhaustive]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LostReason {
    /// The lease ran out: gone from the server when renewed or released,
    /// or its validity passed with no renewal waiting for an answer (this
    /// process was paused, or too busy to renew).
    Expired,
    /// Another owner holds it.
    Taken,
    /// Redis did not answer the renewals sent before the lease's validity
    /// ran out (unreachable, paused or too slow).
    Unreachable,
    /// [`Client::close`](crate::Client::close) gave it back.
    Closed,
    /// An operator broke it: `leasehold release --force`, or
    /// [`Client::break_lease`](crate::Client::break_lease), which tells the
    /// holder's client at once (it hears the break on its prefix's
    /// `<prefix>:broken` channel). A client that missed the notice (its
    /// connection dropped at that moment) learns of the loss at its next
    /// renewal instead, as [`Expired`](LostReason::Expired) or
    /// [`Taken`](LostReason::Taken).
    Broken,
}

impl LostReason {
    pub(crate) fn code(self) -> u8 {
        match self {
            LostReason::Expired => 1,
            LostReason::Taken => 2,
            LostReason::Unreachable => 3,
            LostReason::Closed => 4,
            LostReason::Broken => 5,
        }
    }

    pub(crate) fn from_code(code: u8) -> Option<LostReason> {
        Some(match code {
            1 => LostReason::Expired,
            2 => LostReason::Taken,
            3 => LostReason::Unreachable,
            4 => LostReason::Closed,
            5 => LostReason::Broken,
            _ => return None,
        })
    }
}

impl std::fmt::Display for LostReason {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            LostReason::Expired => "it expired before it was renewed",
            LostReason::Taken => "another owner took it",
            LostReason::Unreachable => {
                "Redis did not answer its renewals before it ran out (unreachable, paused or \
                 too slow)"
            }
            LostReason::Closed => "the client was closed",
            LostReason::Broken => {
                "an operator broke it (leasehold release --force, or Client::break_lease)"
            }
        })
    }
}

impl LostReason {
    pub(crate) fn label(self) -> &'static str {
        match self {
            LostReason::Expired => "expired",
            LostReason::Taken => "taken",
            LostReason::Unreachable => "unreachable",
            LostReason::Closed => "closed",
            LostReason::Broken => "broken",
        }
    }
}

/// One acquire call ended with `outcome` after `waited`; the wait is
/// recorded for acquisitions.
pub(crate) fn acquisition(kind: LockKind, outcome: Outcome, waited: Duration) {
    #[cfg(feature = "metrics")]
    {
        metrics::counter!(ACQUISITIONS, "kind" => kind.as_str(), "outcome" => outcome.label())
            .increment(1);
        if outcome == Outcome::Acquired {
            metrics::histogram!(ACQUIRE_WAIT, "kind" => kind.as_str()).record(waited);
        }
    }
    #[cfg(not(feature = "metrics"))]
    let _ = (kind, outcome, waited);
}

/// `leases` leases were renewed (one batch call).
pub(crate) fn renewed(leases: usize) {
    #[cfg(feature = "metrics")]
    metrics::counter!(RENEWALS).increment(leases as u64);
    #[cfg(not(feature = "metrics"))]
    let _ = leases;
}

/// One renewal call was sent (a batch of leases of one kind and slot).
pub(crate) fn renewal_batch() {
    #[cfg(feature = "metrics")]
    metrics::counter!(RENEWAL_BATCHES).increment(1);
}

/// A lease was lost.
pub(crate) fn lost(reason: LostReason) {
    #[cfg(feature = "metrics")]
    metrics::counter!(LEASES_LOST, "reason" => reason.label()).increment(1);
    #[cfg(not(feature = "metrics"))]
    let _ = reason;
}

/// A waiter took a lease handed to it whole at release.
pub(crate) fn handoff() {
    #[cfg(feature = "metrics")]
    metrics::counter!(HANDOFFS).increment(1);
}

/// Counts a held lease in `leasehold_held_leases` while it lives.
pub(crate) struct HeldLease(());

impl HeldLease {
    pub(crate) fn count() -> HeldLease {
        #[cfg(feature = "metrics")]
        metrics::gauge!(HELD_LEASES).increment(1.0);
        HeldLease(())
    }
}

impl Drop for HeldLease {
    fn drop(&mut self) {
        #[cfg(feature = "metrics")]
        metrics::gauge!(HELD_LEASES).decrement(1.0);
    }
}
