//! The blocking [`MultiLock`] and its [`MultiLockGuard`].

use std::future::Future;
use std::time::Duration;

use super::guard::Guard;
use super::handle::Handle;
use crate::error::Result;

/// The blocking twin of [`crate::MultiLock`], made by
/// [`Client::multi_lock`](super::Client::multi_lock): the same methods,
/// each blocking the calling thread until done.
///
/// # Example
///
/// ```no_run
/// # fn run(client: leasehold::blocking::Client) -> Result<(), leasehold::Error> {
/// let guard = client.multi_lock(["account:1", "account:2"]).acquire()?;
/// println!("{:?}", guard.fences());
/// guard.release()?;
/// # Ok(()) }
/// ```
pub type MultiLock = Handle<crate::primitives::multi::MultiLock>;

/// The blocking twin of [`crate::MultiLockGuard`]: one lease per name, each
/// renewed while it lives, all released when it is dropped.
pub type MultiLockGuard = Guard<crate::primitives::multi::MultiLockGuard>;

impl MultiLock {
    /// See [`crate::MultiLock::lock_delay`].
    ///
    /// Defaults to zero.
    pub fn lock_delay(self, delay: Duration) -> Self {
        self.map(|m| m.lock_delay(delay))
    }

    /// The names, sorted and without duplicates: the order they are taken in.
    pub fn names(&self) -> Vec<&str> {
        self.inner.names()
    }

    /// The blocking form of [`crate::MultiLock::acquire`]: nothing is left
    /// held when it fails.
    ///
    /// # Errors
    ///
    /// As the async method.
    #[track_caller]
    pub fn acquire(&self) -> Result<MultiLockGuard> {
        self.take(self.inner.acquire())
    }

    /// The blocking form of [`crate::MultiLock::try_acquire`].
    ///
    /// # Errors
    ///
    /// As the async method.
    #[track_caller]
    pub fn try_acquire(&self) -> Result<Option<MultiLockGuard>> {
        self.try_take(self.inner.try_acquire())
    }

    /// The blocking form of [`crate::MultiLock::run`]; the work is a future
    /// for the reason given at [`Handle::run`].
    ///
    /// # Errors
    ///
    /// As the async method.
    #[track_caller]
    pub fn run<F, Fut, T>(&self, work: F) -> Result<T>
    where
        F: FnOnce(Vec<(String, u64)>) -> Fut,
        Fut: Future<Output = T>,
    {
        self.block_on(self.inner.run(work))
    }
}

impl MultiLockGuard {
    /// Each name with its fencing token, sorted by name.
    pub fn fences(&self) -> &[(String, u64)] {
        self.inner.fences()
    }

    /// The fencing token of `name`, if it is one of this guard's names.
    pub fn fence(&self, name: &str) -> Option<u64> {
        self.inner.fence(name)
    }

    /// The owner token of `name` (a capability: do not log it whole).
    pub fn token(&self, name: &str) -> Option<&str> {
        self.inner.token(name)
    }

    /// The names, sorted.
    pub fn names(&self) -> Vec<&str> {
        self.inner.names()
    }

    /// The names whose lease is lost.
    pub fn lost_names(&self) -> Vec<&str> {
        self.inner.lost_names()
    }
}
