//! The blocking [`Lock`] and its [`LockGuard`].

use super::guard::Guard;
use super::handle::Handle;

/// The blocking twin of [`crate::Lock`], made by
/// [`Client::lock`](super::Client::lock): the same methods, each blocking
/// the calling thread until done.
///
/// # Example
///
/// ```no_run
/// # fn run(client: leasehold::blocking::Client) -> Result<(), leasehold::Error> {
/// use std::time::Duration;
///
/// let lock = client.lock("orders:42").ttl(Duration::from_secs(30));
/// let guard = lock.acquire()?;
/// // ... write to the resource, passing guard.fence() ...
/// guard.extend(Duration::from_secs(60))?;
/// guard.release()?;
///
/// let token = lock.acquire()?.detach();
/// lock.release_by_token(&token)?;
/// # Ok(()) }
/// ```
pub type Lock = Handle<crate::primitives::lock::Lock>;

/// The blocking twin of [`crate::LockGuard`], given by [`Lock`] and
/// [`FairLock`](super::FairLock).
pub type LockGuard = Guard<crate::primitives::lock::LockGuard>;

impl LockGuard {
    /// Stops renewal and hands back the owner token without releasing; see
    /// [`crate::LockGuard::detach`].
    pub fn detach(self) -> String {
        self.inner.detach()
    }
}
