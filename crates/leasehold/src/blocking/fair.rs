//! The blocking [`FairLock`] (its guard is a [`LockGuard`](super::LockGuard)).

use super::handle::Handle;

/// The blocking twin of [`crate::FairLock`], made by
/// [`Client::fair_lock`](super::Client::fair_lock): the same methods, each
/// blocking the calling thread until done.
///
/// # Example
///
/// ```no_run
/// # fn run(client: leasehold::blocking::Client) -> Result<(), leasehold::Error> {
/// let fair = client.fair_lock("payouts");
/// let guard = fair.acquire()?; // after every live waiter that came before
/// println!("{} waiting", fair.status()?.waiters);
/// guard.release()?;
/// # Ok(()) }
/// ```
pub type FairLock = Handle<crate::primitives::fair::FairLock>;
