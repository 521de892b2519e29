//! The blocking [`Semaphore`] and its [`Permit`].

use super::guard::Guard;
use super::handle::Handle;

/// The blocking twin of [`crate::Semaphore`], made by
/// [`Client::semaphore`](super::Client::semaphore): the same methods, each
/// blocking the calling thread until done.
///
/// # Example
///
/// ```no_run
/// # fn run(client: leasehold::blocking::Client) -> Result<(), leasehold::Error> {
/// let exports = client.semaphore("exports", 4);
/// let permit = exports.acquire()?; // one of 4
/// println!("{} held", exports.status()?.held);
/// permit.release()?;
/// # Ok(()) }
/// ```
pub type Semaphore = Handle<crate::primitives::semaphore::Semaphore>;

/// The blocking twin of [`crate::Permit`].
pub type Permit = Guard<crate::primitives::semaphore::Permit>;

impl Semaphore {
    /// The number of permits this handle counts.
    pub fn permits(&self) -> u32 {
        self.inner.permits()
    }
}
