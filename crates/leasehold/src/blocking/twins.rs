//! The async twins' methods that the blocking wrappers are generic over:
//! one sealed trait per group of methods, implemented here for the async
//! types that have them. The traits are public only to be named in the
//! bounds of [`Guard`](super::Guard) and [`Handle`](super::Handle)'s
//! methods; nothing outside the crate can name or implement them.
//!
//! Each impl body calls the async type's own method of the same name:
//! `Self::x` finds the inherent method before the trait's.

use std::future::Future;
use std::time::Duration;

use crate::error::Result;

/// What every async guard can do that its blocking [`Guard`] blocks on.
/// Implemented for the library's guards only (it is not nameable outside).
pub trait AsyncGuard {
    fn is_lost(&self) -> bool;
    fn lost_reason(&self) -> Option<crate::telemetry::LostReason>;
    fn valid_for(&self) -> Duration;
    fn lost(&self) -> impl Future<Output = ()>;
    fn extend(&self, ttl: Duration) -> impl Future<Output = Result<()>>;
    fn release(self) -> impl Future<Output = Result<()>>;
}

/// An async guard of one lease: its fence, owner token and name. Every
/// guard but [`crate::MultiLockGuard`], which holds one lease per name.
pub trait AsyncLease: AsyncGuard {
    fn fence(&self) -> u64;
    fn token(&self) -> &str;
    fn name(&self) -> &str;
}

/// Every single-lease guard: the one generic [`crate::Guard`].
impl<K: crate::hold::Kind> AsyncGuard for crate::Guard<K> {
    fn is_lost(&self) -> bool {
        Self::is_lost(self)
    }
    fn lost_reason(&self) -> Option<crate::telemetry::LostReason> {
        Self::lost_reason(self)
    }
    fn valid_for(&self) -> Duration {
        Self::valid_for(self)
    }
    fn lost(&self) -> impl Future<Output = ()> {
        Self::lost(self)
    }
    fn extend(&self, ttl: Duration) -> impl Future<Output = Result<()>> {
        Self::extend(self, ttl)
    }
    fn release(self) -> impl Future<Output = Result<()>> {
        Self::release(self)
    }
}

impl<K: crate::hold::Kind> AsyncLease for crate::Guard<K> {
    fn fence(&self) -> u64 {
        Self::fence(self)
    }
    fn token(&self) -> &str {
        Self::token(self)
    }
    fn name(&self) -> &str {
        Self::name(self)
    }
}

/// The guard of several names at once, one lease each.
impl AsyncGuard for crate::primitives::multi::MultiLockGuard {
    fn is_lost(&self) -> bool {
        Self::is_lost(self)
    }
    fn lost_reason(&self) -> Option<crate::telemetry::LostReason> {
        Self::lost_reason(self)
    }
    fn valid_for(&self) -> Duration {
        Self::valid_for(self)
    }
    fn lost(&self) -> impl Future<Output = ()> {
        Self::lost(self)
    }
    fn extend(&self, ttl: Duration) -> impl Future<Output = Result<()>> {
        Self::extend(self, ttl)
    }
    fn release(self) -> impl Future<Output = Result<()>> {
        Self::release(self)
    }
}

/// Async handles with `ttl`, `wait`, `watchdog` and `describe`.
pub trait Settings: Sized {
    fn ttl(self, ttl: Duration) -> Self;
    fn wait(self, wait: Duration) -> Self;
    fn watchdog(self, renew: bool) -> Self;
    fn describe(self, about: String) -> Self;
}

/// Async handles of one named lock.
pub trait Named {
    fn name(&self) -> &str;
}

/// Async handles with `hold_at_least`.
pub trait AtLeast: Sized {
    fn hold_at_least(self, at_least: Duration) -> Self;
}

/// Async handles whose holds belong to an owner id.
pub trait Owned: Sized {
    fn owner(self, id: impl Into<String>) -> Self;
    fn owner_id(&self) -> Option<&str>;
}

/// The exclusive locks: `lock_delay`, and a lease released or extended by
/// its owner token alone.
pub trait Exclusive: Sized {
    fn lock_delay(self, delay: Duration) -> Self;
    fn release_by_token(&self, token: &str) -> impl Future<Output = Result<()>>;
    fn extend_by_token(&self, token: &str, ttl: Duration) -> impl Future<Output = Result<()>>;
}

/// What an acquire of an async handle gives, and what its `status` reads.
pub trait Hold {
    /// The async guard an acquire gives.
    type Guard;
    /// What `status` reads.
    type Status;
}

/// Async handles with one kind of hold: `acquire`, `try_acquire`, `run`
/// and `status`.
pub trait Acquire: Hold {
    fn acquire(&self) -> impl Future<Output = Result<Self::Guard>>;
    fn try_acquire(&self) -> impl Future<Output = Result<Option<Self::Guard>>>;
    fn run<F, Fut, T>(&self, work: F) -> impl Future<Output = Result<T>>
    where
        F: FnOnce(u64) -> Fut,
        Fut: Future<Output = T>;
    fn status(&self) -> impl Future<Output = Result<Self::Status>>;
}

impl_each!(Settings for crate::primitives::lock::Lock, crate::primitives::fair::FairLock, crate::primitives::reentrant::ReentrantLock, crate::primitives::rwlock::RwLock,
    crate::primitives::semaphore::Semaphore, crate::primitives::multi::MultiLock => {
    fn ttl(self, ttl: Duration) -> Self {
        Self::ttl(self, ttl)
    }
    fn wait(self, wait: Duration) -> Self {
        Self::wait(self, wait)
    }
    fn watchdog(self, renew: bool) -> Self {
        Self::watchdog(self, renew)
    }
    fn describe(self, about: String) -> Self {
        Self::describe(self, about)
    }
});

impl_each!(Named for crate::primitives::lock::Lock, crate::primitives::fair::FairLock, crate::primitives::reentrant::ReentrantLock, crate::primitives::rwlock::RwLock,
    crate::primitives::semaphore::Semaphore, crate::primitives::election::Election => {
    fn name(&self) -> &str {
        Self::name(self)
    }
});

impl_each!(AtLeast for crate::primitives::lock::Lock, crate::primitives::fair::FairLock, crate::primitives::rwlock::RwLock, crate::primitives::semaphore::Semaphore,
    crate::primitives::multi::MultiLock => {
    fn hold_at_least(self, at_least: Duration) -> Self {
        Self::hold_at_least(self, at_least)
    }
});

impl_each!(Owned for crate::primitives::reentrant::ReentrantLock, crate::primitives::rwlock::RwLock => {
    fn owner(self, id: impl Into<String>) -> Self {
        Self::owner(self, id)
    }
    fn owner_id(&self) -> Option<&str> {
        Self::owner_id(self)
    }
});

impl_each!(Exclusive for crate::primitives::lock::Lock, crate::primitives::fair::FairLock => {
    fn lock_delay(self, delay: Duration) -> Self {
        Self::lock_delay(self, delay)
    }
    fn release_by_token(&self, token: &str) -> impl Future<Output = Result<()>> {
        Self::release_by_token(self, token)
    }
    fn extend_by_token(&self, token: &str, ttl: Duration) -> impl Future<Output = Result<()>> {
        Self::extend_by_token(self, token, ttl)
    }
});

impl_each!(Acquire for crate::primitives::lock::Lock, crate::primitives::fair::FairLock, crate::primitives::reentrant::ReentrantLock, crate::primitives::semaphore::Semaphore => {
    fn acquire(&self) -> impl Future<Output = Result<Self::Guard>> {
        Self::acquire(self)
    }
    fn try_acquire(&self) -> impl Future<Output = Result<Option<Self::Guard>>> {
        Self::try_acquire(self)
    }
    fn run<F, Fut, T>(&self, work: F) -> impl Future<Output = Result<T>>
    where
        F: FnOnce(u64) -> Fut,
        Fut: Future<Output = T>,
    {
        Self::run(self, work)
    }
    fn status(&self) -> impl Future<Output = Result<Self::Status>> {
        Self::status(self)
    }
});

/// `impl Hold` for each handle: `handle => guard, status;`.
macro_rules! holds {
    ($($handle:ty => $guard:ty, $status:ty;)+) => {
        $(impl Hold for $handle {
            type Guard = $guard;
            type Status = $status;
        })+
    };
}

holds! {
    crate::primitives::lock::Lock => crate::primitives::lock::LockGuard, crate::primitives::lock::LockStatus;
    crate::primitives::fair::FairLock => crate::primitives::lock::LockGuard, crate::primitives::lock::LockStatus;
    crate::primitives::reentrant::ReentrantLock => crate::primitives::reentrant::ReentrantGuard, crate::primitives::reentrant::ReentrantStatus;
    crate::primitives::semaphore::Semaphore => crate::primitives::semaphore::Permit, crate::primitives::semaphore::SemaphoreStatus;
}
