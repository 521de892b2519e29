//! The blocking [`Client`]: connects, owns the runtime thread, and makes
//! the blocking handles.

use super::handle::Handle;
use super::runtime::{Rt, refuse_inside_async};
use super::{Election, FairLock, Lock, MultiLock, ReentrantLock, RwLock, Semaphore};
use crate::error::Result;

/// The blocking twin of [`crate::Client`]: a connection to Redis from which
/// blocking locks are made.
///
/// Cheap to clone; clones share one connection, one watchdog and one
/// runtime thread, which ends when the last clone and the last guard are
/// dropped.
///
/// # Panics
///
/// Its constructors and the methods that talk to Redis panic inside an
/// async runtime: use [`crate::Client`] there.
///
/// # Example
///
/// ```no_run
/// # fn run() -> Result<(), leasehold::Error> {
/// let client = leasehold::blocking::Client::connect("redis://127.0.0.1:6379")?;
/// let guard = client.lock("orders:42").acquire()?;
/// guard.release()?;
/// client.close()?;
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct Client {
    inner: crate::client::Client,
    rt: Rt,
}

impl std::fmt::Debug for Client {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_tuple("blocking::Client")
            .field(&self.inner)
            .finish()
    }
}

impl Client {
    /// The blocking form of [`crate::Client::connect`].
    ///
    /// # Errors
    ///
    /// As the async method; [`crate::Error::Unsupported`] if the runtime thread
    /// cannot be started.
    #[track_caller]
    pub fn connect(url: &str) -> Result<Client> {
        Client::build(crate::client::Client::builder().url(url))
    }

    /// Connects with the options of an async [`crate::ClientBuilder`]; the
    /// blocking form of [`crate::ClientBuilder::build`].
    ///
    /// # Errors
    ///
    /// As the async method; [`crate::Error::Unsupported`] if the runtime thread
    /// cannot be started.
    #[track_caller]
    pub fn build(builder: crate::client::builder::ClientBuilder) -> Result<Client> {
        refuse_inside_async();
        let rt = Rt::start()?;
        let inner = rt.block_on(builder.build())?;
        Ok(Client { inner, rt })
    }

    /// The blocking form of [`crate::Client::redlock`].
    ///
    /// # Errors
    ///
    /// As the async method; [`crate::Error::Unsupported`] if the runtime thread
    /// cannot be started.
    #[track_caller]
    pub fn redlock<I, S>(urls: I) -> Result<Client>
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        Client::build(crate::client::Client::builder().redlock(urls))
    }

    /// The blocking form of [`crate::Client::cluster`] (feature `cluster`).
    ///
    /// # Errors
    ///
    /// As the async method; [`crate::Error::Unsupported`] if the runtime thread
    /// cannot be started.
    #[cfg(feature = "cluster")]
    #[track_caller]
    pub fn cluster<I, S>(urls: I) -> Result<Client>
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        Client::build(crate::client::Client::builder().cluster(urls))
    }

    /// The blocking form of [`crate::Client::sentinel`] (feature `sentinel`).
    ///
    /// # Errors
    ///
    /// As the async method; [`crate::Error::Unsupported`] if the runtime thread
    /// cannot be started.
    #[cfg(feature = "sentinel")]
    #[track_caller]
    pub fn sentinel<I, S>(sentinel_urls: I, master_name: &str) -> Result<Client>
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        Client::build(crate::client::Client::builder().sentinel(sentinel_urls, master_name))
    }

    /// A handle to the lease lock `name`; see [`crate::Client::lock`].
    pub fn lock(&self, name: impl Into<String>) -> Lock {
        self.handle(self.inner.lock(name))
    }

    /// A handle to the reentrant lock `name`; see
    /// [`crate::Client::reentrant_lock`].
    pub fn reentrant_lock(&self, name: impl Into<String>) -> ReentrantLock {
        self.handle(self.inner.reentrant_lock(name))
    }

    /// A handle to the read-write lock `name`; see [`crate::Client::rw_lock`].
    pub fn rw_lock(&self, name: impl Into<String>) -> RwLock {
        self.handle(self.inner.rw_lock(name))
    }

    /// A handle to the semaphore `name` with `permits` permits; see
    /// [`crate::Client::semaphore`].
    pub fn semaphore(&self, name: impl Into<String>, permits: u32) -> Semaphore {
        self.handle(self.inner.semaphore(name, permits))
    }

    /// A handle to the leader election `name`; see [`crate::Client::election`].
    pub fn election(&self, name: impl Into<String>) -> Election {
        self.handle(self.inner.election(name))
    }

    /// A handle to the fair lock `name`; see [`crate::Client::fair_lock`].
    pub fn fair_lock(&self, name: impl Into<String>) -> FairLock {
        self.handle(self.inner.fair_lock(name))
    }

    /// A handle to several lease locks taken together, all or none; see
    /// [`crate::Client::multi_lock`].
    pub fn multi_lock<I>(&self, names: I) -> MultiLock
    where
        I: IntoIterator,
        I::Item: Into<String>,
    {
        self.handle(self.inner.multi_lock(names))
    }

    /// The blocking form of [`crate::Client::list`].
    ///
    /// # Errors
    ///
    /// As the async method.
    #[track_caller]
    pub fn list(&self, pattern: &str) -> Result<Vec<crate::primitives::lock::LockStatus>> {
        self.rt.block_on(self.inner.list(pattern))
    }

    /// The blocking form of [`crate::Client::kind`]: which kind of lock
    /// holds `name`, if any.
    ///
    /// # Errors
    ///
    /// As the async method.
    #[track_caller]
    pub fn kind(&self, name: &str) -> Result<Option<crate::LockKind>> {
        self.rt.block_on(self.inner.kind(name))
    }

    /// The blocking form of [`crate::Client::list_kinds`]: every held name
    /// matching `pattern`, with its kind.
    ///
    /// # Errors
    ///
    /// As the async method.
    #[track_caller]
    pub fn list_kinds(&self, pattern: &str) -> Result<Vec<(String, crate::LockKind)>> {
        self.rt.block_on(self.inner.list_kinds(pattern))
    }

    /// The blocking form of [`crate::Client::break_lease`]: removes whatever
    /// holds `name`, whatever its token. Breaks mutual exclusion for the
    /// holder; for an operator's tools only.
    ///
    /// # Errors
    ///
    /// As the async method.
    #[track_caller]
    pub fn break_lease(&self, name: &str) -> Result<Option<crate::BrokenLease>> {
        self.rt.block_on(self.inner.break_lease(name))
    }

    /// The key prefix every key and channel of this client starts with.
    pub fn prefix(&self) -> &str {
        self.inner.prefix()
    }

    /// The blocking form of [`crate::Client::close`]: gives back every lease
    /// this client holds. Call it before the program ends.
    ///
    /// # Errors
    ///
    /// As the async method.
    #[track_caller]
    pub fn close(&self) -> Result<()> {
        self.rt.block_on(self.inner.close())
    }

    /// Whether [`Client::close`] was called (on this client or a clone).
    pub fn is_closed(&self) -> bool {
        self.inner.is_closed()
    }

    fn handle<H>(&self, inner: H) -> Handle<H> {
        Handle {
            inner,
            rt: self.rt.clone(),
        }
    }
}
