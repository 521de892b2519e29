//! The blocking [`Election`], its [`Leadership`] and [`LeaderChanges`].

use std::future::Future;
use std::time::Duration;

use super::guard::Guard;
use super::handle::Handle;
use super::runtime::Rt;
use crate::error::Result;

/// The blocking twin of [`crate::Election`], made by
/// [`Client::election`](super::Client::election): the same methods, each
/// blocking the calling thread until done.
///
/// # Example
///
/// ```no_run
/// # fn run(client: leasehold::blocking::Client) -> Result<(), leasehold::Error> {
/// let election = client.election("scheduler");
/// let leadership = election.campaign("host-a")?; // blocks until this caller leads
/// println!("term {}", leadership.term());
/// leadership.resign()?;
/// for leader in election.observe() {
///     println!("{:?}", leader?);
/// }
/// # Ok(()) }
/// ```
pub type Election = Handle<crate::primitives::election::Election>;

/// The blocking twin of [`crate::Leadership`]: renewed while it lives.
pub type Leadership = Guard<crate::primitives::election::Leadership>;

impl Election {
    /// The length of a leader's lease; see [`crate::Election::ttl`].
    ///
    /// Defaults to 30 s.
    pub fn ttl(self, ttl: Duration) -> Self {
        self.map(|e| e.ttl(ttl))
    }

    /// The blocking form of [`crate::Election::campaign`].
    ///
    /// # Errors
    ///
    /// As the async method.
    #[track_caller]
    pub fn campaign(&self, value: impl Into<String>) -> Result<Leadership> {
        self.take(self.inner.campaign(value))
    }

    /// The blocking form of [`crate::Election::try_campaign`].
    ///
    /// # Errors
    ///
    /// As the async method.
    #[track_caller]
    pub fn try_campaign(&self, value: impl Into<String>) -> Result<Option<Leadership>> {
        self.try_take(self.inner.try_campaign(value))
    }

    /// The blocking form of [`crate::Election::lead`]; the work is a future
    /// for the reason given at [`Handle::run`].
    ///
    /// # Errors
    ///
    /// As the async method.
    #[track_caller]
    pub fn lead<F, Fut, T>(&self, value: impl Into<String>, work: F) -> Result<T>
    where
        F: FnOnce(u64) -> Fut,
        Fut: Future<Output = T>,
    {
        self.block_on(self.inner.lead(value, work))
    }

    /// The blocking form of [`crate::Election::leader`].
    ///
    /// # Errors
    ///
    /// As the async method.
    #[track_caller]
    pub fn leader(&self) -> Result<Option<crate::primitives::election::Leader>> {
        self.block_on(self.inner.leader())
    }

    /// The blocking form of [`crate::Election::observe`]: an iterator whose
    /// `next` blocks until the leader changes.
    pub fn observe(&self) -> LeaderChanges {
        LeaderChanges {
            inner: self.inner.observe(),
            rt: self.rt.clone(),
        }
    }
}

impl Leadership {
    /// The term; see [`crate::Leadership::term`].
    pub fn term(&self) -> u64 {
        self.inner.term()
    }

    /// The value this leader campaigned with.
    pub fn value(&self) -> &str {
        self.inner.value()
    }

    /// The blocking form of [`crate::Leadership::resign`].
    ///
    /// # Errors
    ///
    /// As the async method.
    #[track_caller]
    pub fn resign(self) -> Result<()> {
        self.finish(crate::primitives::election::Leadership::resign)
            .0
    }
}

/// The blocking twin of [`crate::LeaderChanges`], from [`Election::observe`]:
/// each `next` blocks until the leader changes (the first returns who leads
/// now).
pub struct LeaderChanges {
    inner: crate::primitives::election::LeaderChanges,
    rt: Rt,
}

impl std::fmt::Debug for LeaderChanges {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("blocking::LeaderChanges")
            .finish_non_exhaustive()
    }
}

impl Iterator for LeaderChanges {
    type Item = Result<Option<crate::primitives::election::Leader>>;

    #[track_caller]
    fn next(&mut self) -> Option<Self::Item> {
        use futures_util::StreamExt;
        self.rt.block_on(self.inner.next())
    }
}
