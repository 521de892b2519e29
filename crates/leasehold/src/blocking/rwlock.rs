//! The blocking [`RwLock`] and its [`ReadGuard`] and [`WriteGuard`].

use std::future::Future;

use super::guard::Guard;
use super::handle::Handle;
use crate::error::Result;

/// The blocking twin of [`crate::RwLock`], made by
/// [`Client::rw_lock`](super::Client::rw_lock): the same methods, each
/// blocking the calling thread until done.
///
/// # Example
///
/// ```no_run
/// # fn run(client: leasehold::blocking::Client) -> Result<(), leasehold::Error> {
/// let catalog = client.rw_lock("catalog");
/// let write = catalog.write()?;
/// // ... rebuild, then keep reading what was written ...
/// let read = write.downgrade()?;
/// read.release()?;
/// # Ok(()) }
/// ```
pub type RwLock = Handle<crate::primitives::rwlock::RwLock>;

/// The blocking twin of [`crate::ReadGuard`].
pub type ReadGuard = Guard<crate::primitives::rwlock::ReadGuard>;

/// The blocking twin of [`crate::WriteGuard`].
pub type WriteGuard = Guard<crate::primitives::rwlock::WriteGuard>;

impl RwLock {
    /// The blocking form of [`crate::RwLock::read`].
    ///
    /// # Errors
    ///
    /// As the async method.
    #[track_caller]
    pub fn read(&self) -> Result<ReadGuard> {
        self.take(self.inner.read())
    }

    /// The blocking form of [`crate::RwLock::write`].
    ///
    /// # Errors
    ///
    /// As the async method.
    #[track_caller]
    pub fn write(&self) -> Result<WriteGuard> {
        self.take(self.inner.write())
    }

    /// The blocking form of [`crate::RwLock::try_read`].
    ///
    /// # Errors
    ///
    /// As the async method.
    #[track_caller]
    pub fn try_read(&self) -> Result<Option<ReadGuard>> {
        self.try_take(self.inner.try_read())
    }

    /// The blocking form of [`crate::RwLock::try_write`].
    ///
    /// # Errors
    ///
    /// As the async method.
    #[track_caller]
    pub fn try_write(&self) -> Result<Option<WriteGuard>> {
        self.try_take(self.inner.try_write())
    }

    /// The blocking form of [`crate::RwLock::run_read`]; the work is a
    /// future for the reason given at [`Handle::run`].
    ///
    /// # Errors
    ///
    /// As the async method.
    #[track_caller]
    pub fn run_read<F, Fut, T>(&self, work: F) -> Result<T>
    where
        F: FnOnce(u64) -> Fut,
        Fut: Future<Output = T>,
    {
        self.block_on(self.inner.run_read(work))
    }

    /// The blocking form of [`crate::RwLock::run_write`]; the work is a
    /// future for the reason given at [`Handle::run`].
    ///
    /// # Errors
    ///
    /// As the async method.
    #[track_caller]
    pub fn run_write<F, Fut, T>(&self, work: F) -> Result<T>
    where
        F: FnOnce(u64) -> Fut,
        Fut: Future<Output = T>,
    {
        self.block_on(self.inner.run_write(work))
    }

    /// The blocking form of [`crate::RwLock::status`]; changes nothing.
    ///
    /// # Errors
    ///
    /// As the async method.
    #[track_caller]
    pub fn status(&self) -> Result<crate::primitives::rwlock::RwLockStatus> {
        self.block_on(self.inner.status())
    }
}

impl WriteGuard {
    /// The blocking form of [`crate::WriteGuard::downgrade`]: the write hold
    /// becomes a read hold in one step.
    ///
    /// # Errors
    ///
    /// As the async method.
    #[track_caller]
    pub fn downgrade(self) -> Result<ReadGuard> {
        let (read, rt) = self.finish(crate::primitives::rwlock::WriteGuard::downgrade);
        Ok(Guard { inner: read?, rt })
    }
}
