//! The same locks for code without an async runtime.
//!
//! Every type here is its async namesake made blocking: the same methods,
//! each blocking the calling thread until done, documented by a link to
//! the async item. A [`Client`] owns a small Tokio runtime with one worker
//! thread of its own, where the watchdog renews held leases and releases of
//! dropped guards happen, so renewal keeps running while the caller's
//! thread blocks or computes.
//!
//! The handles are one wrapper, [`Handle`], around each async handle, and
//! the guards one wrapper, [`Guard`], around each async guard:
//! [`LockGuard`] is `Guard<leasehold::LockGuard>`, and so on. What differs
//! from the async API:
//!
//! - Only for threads outside an async runtime: inside one, every call that
//!   talks to Redis panics with a message pointing to the async API
//!   (blocking there would stall the runtime's thread). Dropping a guard
//!   never blocks and never panics, inside a runtime or not.
//! - `run` and `lead` still take the work as a future (see [`Handle::run`]).
//! - Guards are `Send`: they may move between threads.
//!
//! Needs the `blocking` feature.
//!
//! # Example
//!
//! ```no_run
//! use std::time::Duration;
//!
//! fn main() -> Result<(), leasehold::Error> {
//!     let client = leasehold::blocking::Client::connect("redis://127.0.0.1:6379")?;
//!     let lock = client.lock("orders:42").ttl(Duration::from_secs(30));
//!     let guard = lock.acquire()?;
//!     // ... write to the resource, passing guard.fence() ...
//!     guard.release()?;
//!     Ok(())
//! }
//! ```

/// `impl $trait for` each type, with the same body for each.
macro_rules! impl_each {
    ($trait:ident for $($ty:ty),+ => $body:tt) => {
        $(impl $trait for $ty $body)+
    };
}

mod client;
mod election;
mod fair;
mod guard;
mod handle;
mod lock;
mod multi;
mod reentrant;
mod runtime;
mod rwlock;
mod semaphore;
mod twins;

pub use client::Client;
pub use election::{Election, LeaderChanges, Leadership};
pub use fair::FairLock;
pub use guard::Guard;
pub use handle::Handle;
pub use lock::{Lock, LockGuard};
pub use multi::{MultiLock, MultiLockGuard};
pub use reentrant::{ReentrantGuard, ReentrantLock};
pub use rwlock::{ReadGuard, RwLock, WriteGuard};
pub use semaphore::{Permit, Semaphore};
