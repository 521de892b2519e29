//! The blocking [`ReentrantLock`] and its [`ReentrantGuard`].

use super::guard::Guard;
use super::handle::Handle;

/// The blocking twin of [`crate::ReentrantLock`], made by
/// [`Client::reentrant_lock`](super::Client::reentrant_lock): the same
/// methods, each blocking the calling thread until done.
///
/// # Example
///
/// ```no_run
/// # fn run(client: leasehold::blocking::Client) -> Result<(), leasehold::Error> {
/// let lock = client.reentrant_lock("orders:42").owner("job-7");
/// let outer = lock.acquire()?;
/// let inner = lock.acquire()?; // the same owner enters again
/// inner.release()?;
/// outer.release()?;
/// # Ok(()) }
/// ```
pub type ReentrantLock = Handle<crate::primitives::reentrant::ReentrantLock>;

/// The blocking twin of [`crate::ReentrantGuard`]: one hold.
pub type ReentrantGuard = Guard<crate::primitives::reentrant::ReentrantGuard>;
