//! The same locks for code without an async runtime.
//!
//! Every type here wraps its async namesake and blocks the calling thread
//! until the call is done. A [`Client`] owns a small Tokio runtime with one
//! worker thread of its own, where the watchdog renews held leases and
//! releases of dropped guards happen, so renewal keeps running while the
//! caller's thread blocks or computes.
//!
//! Only for threads outside an async runtime: inside one, every call panics
//! with a message pointing to the async API (blocking there would stall the
//! runtime's thread). Guards are `Send`: they may move between threads.
//!
//! Needs the `blocking` feature (on by default).
//!
//! # Example
//!
//! ```no_run
//! use std::time::{Duration, Instant};
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

use std::future::Future;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::error::{Error, Result};

/// The runtime a blocking client and its guards share.
#[derive(Clone)]
struct Rt(Arc<RtInner>);

struct RtInner(Option<tokio::runtime::Runtime>);

/// How long a dropped client's runtime may keep running to finish the
/// releases of guards dropped just before it.
const SHUTDOWN_GRACE: Duration = Duration::from_secs(5);

impl Drop for RtInner {
    fn drop(&mut self) {
        let Some(rt) = self.0.take() else { return };
        // The client's tasks end once the client and its guards are gone,
        // after the background releases queued before. Let them finish, on a
        // thread of its own: Drop never blocks.
        let wind_down = move || {
            let deadline = Instant::now() + SHUTDOWN_GRACE;
            while rt.metrics().num_alive_tasks() > 0 && Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(5));
            }
            rt.shutdown_background();
        };
        if let Err(e) = std::thread::Builder::new()
            .name("leasehold-blocking-shutdown".into())
            .spawn(wind_down)
        {
            tracing::warn!(error = %e, "cannot start the shutdown thread; leases still held end by their TTL");
        }
    }
}

impl Rt {
    fn start() -> Result<Rt> {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .thread_name("leasehold-blocking")
            .enable_all()
            .build()
            .map_err(|e| {
                Error::Unsupported(format!(
                    "cannot start the runtime thread of the blocking client: {e}"
                ))
            })?;
        Ok(Rt(Arc::new(RtInner(Some(rt)))))
    }

    /// Runs `f` to completion on the client's runtime, blocking this thread.
    #[track_caller]
    fn block_on<F: Future>(&self, f: F) -> F::Output {
        refuse_inside_async();
        match &self.0.0 {
            Some(rt) => rt.block_on(f),
            None => unreachable!("the runtime lives as long as its handles"),
        }
    }
}

#[track_caller]
fn refuse_inside_async() {
    if tokio::runtime::Handle::try_current().is_ok() {
        panic!(
            "leasehold::blocking was called from inside an async runtime, where blocking \
             would stall the runtime's thread: use the async API (leasehold::Client) there"
        );
    }
}

/// A connection to Redis from which blocking locks are made; the blocking
/// twin of [`crate::Client`].
///
/// Cheap to clone; clones share one connection, one watchdog and one
/// runtime thread, which ends when the last clone and the last guard are
/// dropped.
///
/// # Example
///
/// ```no_run
/// # fn run() -> Result<(), leasehold::Error> {
/// let client = leasehold::blocking::Client::connect("redis://127.0.0.1:6379")?;
/// let guard = client.lock("orders:42").acquire()?;
/// guard.release()?;
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct Client {
    inner: crate::Client,
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
    /// Connects to one Redis server with default options; see
    /// [`crate::Client::connect`].
    ///
    /// # Errors
    ///
    /// As [`crate::Client::connect`]; [`Error::Unsupported`] if the runtime
    /// thread cannot be started.
    ///
    /// # Panics
    ///
    /// Inside an async runtime: use [`crate::Client::connect`] there.
    ///
    /// # Example
    ///
    /// ```no_run
    /// # fn run() -> Result<(), leasehold::Error> {
    /// let client = leasehold::blocking::Client::connect("redis://127.0.0.1:6379")?;
    /// # Ok(()) }
    /// ```
    #[track_caller]
    pub fn connect(url: &str) -> Result<Client> {
        Client::build(crate::Client::builder().url(url))
    }

    /// Connects with the options of an async [`crate::ClientBuilder`].
    ///
    /// # Errors
    ///
    /// As [`crate::ClientBuilder::build`]; [`Error::Unsupported`] if the
    /// runtime thread cannot be started.
    ///
    /// # Panics
    ///
    /// Inside an async runtime: use [`crate::ClientBuilder::build`] there.
    ///
    /// # Example
    ///
    /// ```no_run
    /// # fn run() -> Result<(), leasehold::Error> {
    /// let builder = leasehold::Client::builder().url("redis://127.0.0.1:6379").prefix("myapp");
    /// let client = leasehold::blocking::Client::build(builder)?;
    /// # Ok(()) }
    /// ```
    #[track_caller]
    pub fn build(builder: crate::ClientBuilder) -> Result<Client> {
        refuse_inside_async();
        let rt = Rt::start()?;
        let inner = rt.block_on(builder.build())?;
        Ok(Client { inner, rt })
    }

    /// Connects to independent Redis masters for Redlock; see
    /// [`crate::Client::redlock`].
    ///
    /// # Errors
    ///
    /// As [`crate::Client::redlock`]; [`Error::Unsupported`] if the runtime
    /// thread cannot be started.
    ///
    /// # Panics
    ///
    /// Inside an async runtime: use [`crate::Client::redlock`] there.
    ///
    /// # Example
    ///
    /// ```no_run
    /// # fn run() -> Result<(), leasehold::Error> {
    /// let client = leasehold::blocking::Client::redlock([
    ///     "redis://10.0.0.1:6379",
    ///     "redis://10.0.0.2:6379",
    ///     "redis://10.0.0.3:6379",
    /// ])?;
    /// # Ok(()) }
    /// ```
    #[track_caller]
    pub fn redlock<I, S>(urls: I) -> Result<Client>
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        Client::build(crate::Client::builder().redlock(urls))
    }

    /// Connects to a Redis Cluster through any of its nodes; see
    /// [`crate::Client::cluster`]. Needs the `cluster` feature (on by
    /// default).
    ///
    /// # Errors
    ///
    /// As [`crate::Client::cluster`]; [`Error::Unsupported`] if the runtime
    /// thread cannot be started.
    ///
    /// # Panics
    ///
    /// Inside an async runtime: use [`crate::Client::cluster`] there.
    ///
    /// # Example
    ///
    /// ```no_run
    /// # fn run() -> Result<(), leasehold::Error> {
    /// let client = leasehold::blocking::Client::cluster(["redis://10.0.0.1:7000"])?;
    /// # Ok(()) }
    /// ```
    #[cfg(feature = "cluster")]
    #[track_caller]
    pub fn cluster<I, S>(urls: I) -> Result<Client>
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        Client::build(crate::Client::builder().cluster(urls))
    }

    /// Connects to the master that Redis Sentinel monitors as
    /// `master_name`, and follows it through failovers; see
    /// [`crate::Client::sentinel`]. Needs the `sentinel` feature (on by
    /// default).
    ///
    /// # Errors
    ///
    /// As [`crate::Client::sentinel`]; [`Error::Unsupported`] if the runtime
    /// thread cannot be started.
    ///
    /// # Panics
    ///
    /// Inside an async runtime: use [`crate::Client::sentinel`] there.
    ///
    /// # Example
    ///
    /// ```no_run
    /// # fn run() -> Result<(), leasehold::Error> {
    /// let client = leasehold::blocking::Client::sentinel(["redis://10.0.0.1:26379"], "mymaster")?;
    /// # Ok(()) }
    /// ```
    #[cfg(feature = "sentinel")]
    #[track_caller]
    pub fn sentinel<I, S>(sentinel_urls: I, master_name: &str) -> Result<Client>
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        Client::build(crate::Client::builder().sentinel(sentinel_urls, master_name))
    }

    /// A handle to the lease lock `name`; see [`crate::Client::lock`].
    ///
    /// # Example
    ///
    /// ```no_run
    /// # fn run(client: leasehold::blocking::Client) -> Result<(), leasehold::Error> {
    /// let guard = client.lock("orders:42").acquire()?;
    /// # Ok(()) }
    /// ```
    pub fn lock(&self, name: impl Into<String>) -> Lock {
        Lock {
            inner: self.inner.lock(name),
            rt: self.rt.clone(),
        }
    }

    /// A handle to the reentrant lock `name`; see
    /// [`crate::Client::reentrant_lock`].
    ///
    /// # Example
    ///
    /// ```no_run
    /// # fn run(client: leasehold::blocking::Client) -> Result<(), leasehold::Error> {
    /// let guard = client.reentrant_lock("orders:42").owner("job-7").acquire()?;
    /// # Ok(()) }
    /// ```
    pub fn reentrant_lock(&self, name: impl Into<String>) -> ReentrantLock {
        ReentrantLock {
            inner: self.inner.reentrant_lock(name),
            rt: self.rt.clone(),
        }
    }

    /// A handle to the read-write lock `name`; see
    /// [`crate::Client::rw_lock`].
    ///
    /// # Example
    ///
    /// ```no_run
    /// # fn run(client: leasehold::blocking::Client) -> Result<(), leasehold::Error> {
    /// let guard = client.rw_lock("catalog").read()?;
    /// # Ok(()) }
    /// ```
    pub fn rw_lock(&self, name: impl Into<String>) -> RwLock {
        RwLock {
            inner: self.inner.rw_lock(name),
            rt: self.rt.clone(),
        }
    }

    /// A handle to the semaphore `name` with `permits` permits; see
    /// [`crate::Client::semaphore`].
    ///
    /// # Example
    ///
    /// ```no_run
    /// # fn run(client: leasehold::blocking::Client) -> Result<(), leasehold::Error> {
    /// let permit = client.semaphore("exports", 4).acquire()?;
    /// # Ok(()) }
    /// ```
    pub fn semaphore(&self, name: impl Into<String>, permits: u32) -> Semaphore {
        Semaphore {
            inner: self.inner.semaphore(name, permits),
            rt: self.rt.clone(),
        }
    }

    /// A handle to the leader election `name`; see [`crate::Client::election`].
    ///
    /// # Example
    ///
    /// ```no_run
    /// # fn run(client: leasehold::blocking::Client) -> Result<(), leasehold::Error> {
    /// let leadership = client.election("scheduler").campaign("host-a")?;
    /// # Ok(()) }
    /// ```
    pub fn election(&self, name: impl Into<String>) -> Election {
        Election {
            inner: self.inner.election(name),
            rt: self.rt.clone(),
        }
    }

    /// A handle to the fair lock `name`; see [`crate::Client::fair_lock`].
    ///
    /// # Example
    ///
    /// ```no_run
    /// # fn run(client: leasehold::blocking::Client) -> Result<(), leasehold::Error> {
    /// let guard = client.fair_lock("payouts").acquire()?;
    /// # Ok(()) }
    /// ```
    pub fn fair_lock(&self, name: impl Into<String>) -> FairLock {
        FairLock {
            inner: self.inner.fair_lock(name),
            rt: self.rt.clone(),
        }
    }

    /// A handle to several lease locks taken together, all or none; see
    /// [`crate::Client::multi_lock`].
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
    pub fn multi_lock<I>(&self, names: I) -> MultiLock
    where
        I: IntoIterator,
        I::Item: Into<String>,
    {
        MultiLock {
            inner: self.inner.multi_lock(names),
            rt: self.rt.clone(),
        }
    }

    /// The held locks whose names match the glob `pattern`; see
    /// [`crate::Client::list`].
    ///
    /// # Errors
    ///
    /// As the async method.
    ///
    /// # Panics
    ///
    /// Inside an async runtime.
    ///
    /// # Example
    ///
    /// ```no_run
    /// # fn run(client: leasehold::blocking::Client) -> Result<(), leasehold::Error> {
    /// for status in client.list("orders:*")? {
    ///     println!("{} {:?}", status.name, status.remaining);
    /// }
    /// # Ok(()) }
    /// ```
    #[track_caller]
    pub fn list(&self, pattern: &str) -> Result<Vec<crate::LockStatus>> {
        self.rt.block_on(self.inner.list(pattern))
    }

    /// The key prefix every key and channel of this client starts with.
    pub fn prefix(&self) -> &str {
        self.inner.prefix()
    }

    /// Gives back every lease this client holds and stops renewing; see
    /// [`crate::Client::close`]. Call it before the program ends.
    ///
    /// # Errors
    ///
    /// As the async method.
    ///
    /// # Panics
    ///
    /// Inside an async runtime.
    ///
    /// # Example
    ///
    /// ```no_run
    /// # fn run(client: leasehold::blocking::Client) -> Result<(), leasehold::Error> {
    /// let guard = client.lock("nightly-report").acquire()?;
    /// // ... work ...
    /// client.close()?; // frees the lock even though `guard` is still alive
    /// # Ok(()) }
    /// ```
    #[track_caller]
    pub fn close(&self) -> Result<()> {
        self.rt.block_on(self.inner.close())
    }
}

/// A blocking handle: wraps the async `$async`, with its setters.
macro_rules! blocking_handle {
    ($handle:ident, $async:ident, $make:literal) => {
        #[doc = concat!("The blocking twin of [`crate::", stringify!($async), "`]; made by `", $make, "`.")]
        ///
        /// Cheap to clone; holds no lease itself.
        #[derive(Clone)]
        pub struct $handle {
            inner: crate::$async,
            rt: Rt,
        }

        impl std::fmt::Debug for $handle {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.debug_tuple(concat!("blocking::", stringify!($handle)))
                    .field(&self.inner)
                    .finish()
            }
        }

        impl $handle {
            #[doc = concat!("The length of each lease; see [`crate::", stringify!($async), "::ttl`].")]
            ///
            /// Defaults to 30 s.
            pub fn ttl(self, ttl: Duration) -> Self {
                Self {
                    inner: self.inner.ttl(ttl),
                    rt: self.rt,
                }
            }

            /// How long a waiting acquire blocks at most; `Duration::MAX`
            /// blocks until acquired.
            ///
            /// Defaults to 10 s.
            pub fn wait(self, wait: Duration) -> Self {
                Self {
                    inner: self.inner.wait(wait),
                    rt: self.rt,
                }
            }

            /// Whether the client's watchdog renews held leases.
            ///
            /// Defaults to `true`.
            pub fn watchdog(self, renew: bool) -> Self {
                Self {
                    inner: self.inner.watchdog(renew),
                    rt: self.rt,
                }
            }

            /// The lock's name.
            pub fn name(&self) -> &str {
                self.inner.name()
            }

            fn guard<G>(&self, g: G) -> Guard<G> {
                Guard {
                    inner: g,
                    rt: self.rt.clone(),
                }
            }
        }
    };
}

/// `hold_at_least` on a blocking handle (every kind but ReentrantLock, as
/// the async handles).
macro_rules! blocking_at_least {
    ($name:ident) => {
        impl $name {
            /// A release sooner than `at_least` after the acquisition keeps
            /// the lease until then instead of freeing the lock (scheduled
            /// jobs); see the async handle's `hold_at_least`.
            ///
            /// Defaults to none.
            pub fn hold_at_least(self, at_least: Duration) -> Self {
                Self {
                    inner: self.inner.hold_at_least(at_least),
                    rt: self.rt,
                }
            }
        }
    };
}

/// `lock_delay` on the blocking Lock and FairLock, as the async handles.
macro_rules! blocking_lock_delay {
    ($name:ident) => {
        impl $name {
            /// When a lease ends without a release, nobody gets the lock
            /// until `delay` has passed as well; a clean release frees it at
            /// once. See the async handle's `lock_delay`.
            ///
            /// Defaults to zero.
            pub fn lock_delay(self, delay: Duration) -> Self {
                Self {
                    inner: self.inner.lock_delay(delay),
                    rt: self.rt,
                }
            }
        }
    };
}

/// A blocking handle whose holds belong to an owner id.
macro_rules! blocking_owner {
    ($handle:ident, $make:literal) => {
        impl $handle {
            /// The owner id: handles with the same id share the lock's holds.
            ///
            /// Defaults to a random id per handle.
            ///
            /// # Example
            ///
            /// ```no_run
            /// # fn run(client: leasehold::blocking::Client) {
            #[doc = concat!("let lock = ", $make, ".owner(\"job-7\");")]
            /// assert_eq!(lock.owner_id(), "job-7");
            /// # }
            /// ```
            pub fn owner(self, id: impl Into<String>) -> Self {
                Self {
                    inner: self.inner.owner(id),
                    rt: self.rt,
                }
            }

            /// The owner id of this handle.
            pub fn owner_id(&self) -> &str {
                self.inner.owner_id()
            }
        }
    };
}

/// A held guard of any primitive and the runtime that renews it.
struct Guard<G> {
    inner: G,
    rt: Rt,
}

/// A blocking guard: wraps the async guard `$async` in a [`Guard`].
macro_rules! blocking_guard {
    ($guard:ident, $async:ident, $what:literal, $acquire:literal) => {
        #[doc = concat!("The blocking twin of [`crate::", stringify!($async), "`]: the ", $what, " is renewed on the client's runtime thread while it lives.")]
        ///
        /// Dropping it stops renewal and releases in the background (never
        /// blocking, never panicking).
        #[must_use = "dropping the guard releases at once"]
        pub struct $guard(Guard<crate::$async>);

        impl std::fmt::Debug for $guard {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                self.0.inner.fmt(f)
            }
        }

        impl $guard {
            /// The fencing token; see the async guard.
            pub fn fence(&self) -> u64 {
                self.0.inner.fence()
            }

            /// This holder's owner token (a capability: do not log it whole).
            pub fn token(&self) -> &str {
                self.0.inner.token()
            }

            /// The lock's name.
            pub fn name(&self) -> &str {
                self.0.inner.name()
            }

            #[doc = concat!("True once the ", $what, " may have expired or was taken by another owner.")]
            pub fn is_lost(&self) -> bool {
                self.0.inner.is_lost()
            }

            #[doc = concat!("How long the ", $what, " is certain to last from now, by this client's clock;")]
            /// zero once it is lost.
            pub fn valid_for(&self) -> std::time::Duration {
                self.0.inner.valid_for()
            }

            #[doc = concat!("Blocks until the ", $what, " is lost: another owner took it, or it could")]
            /// not be renewed before its validity ran out (see the async
            /// guard's `lost`). Call it on a thread that watches the lease.
            ///
            /// # Panics
            ///
            /// Inside an async runtime: use the async API there.
            #[track_caller]
            pub fn lost(&self) {
                self.0.rt.block_on(self.0.inner.lost());
            }

            #[doc = concat!("Sets the ", $what, " to end `ttl` from now, if this guard still holds it.")]
            ///
            /// ```no_run
            /// # fn run(client: leasehold::blocking::Client) -> Result<(), leasehold::Error> {
            #[doc = concat!("let guard = ", $acquire, ";")]
            /// guard.extend(std::time::Duration::from_secs(60))?;
            /// # Ok(()) }
            /// ```
            ///
            /// # Errors
            ///
            /// As the async guard's `extend`.
            ///
            /// # Panics
            ///
            /// Inside an async runtime: use the async API there.
            #[track_caller]
            pub fn extend(&self, ttl: Duration) -> Result<()> {
                self.0.rt.block_on(self.0.inner.extend(ttl))
            }

            #[doc = concat!("Gives back the ", $what, ", if this guard still holds it, and wakes waiters.")]
            ///
            /// ```no_run
            /// # fn run(client: leasehold::blocking::Client) -> Result<(), leasehold::Error> {
            #[doc = concat!("let guard = ", $acquire, ";")]
            /// guard.release()?;
            /// # Ok(()) }
            /// ```
            ///
            /// # Errors
            ///
            /// As the async guard's `release`.
            ///
            /// # Panics
            ///
            /// Inside an async runtime: use the async API there.
            #[track_caller]
            pub fn release(self) -> Result<()> {
                let Guard { inner, rt } = self.0;
                rt.block_on(inner.release())
            }
        }
    };
}

/// A blocking acquire method `$name` calling the async `$name`, with its docs.
macro_rules! blocking_acquire {
    ($name:ident, $guard:ident, $doc:literal, $example:literal) => {
        #[doc = $doc]
        ///
        /// # Errors
        ///
        /// As the async method of the same name.
        ///
        /// # Panics
        ///
        /// Inside an async runtime: use the async API there.
        ///
        /// # Example
        ///
        /// ```no_run
        /// # fn run(client: leasehold::blocking::Client) -> Result<(), leasehold::Error> {
        #[doc = $example]
        /// # Ok(()) }
        /// ```
        #[track_caller]
        pub fn $name(&self) -> Result<$guard> {
            let g = self.rt.block_on(self.inner.$name())?;
            Ok($guard(self.guard(g)))
        }
    };
    (try $name:ident, $guard:ident, $doc:literal, $example:literal) => {
        #[doc = $doc]
        ///
        /// # Errors
        ///
        /// As the async method of the same name.
        ///
        /// # Panics
        ///
        /// Inside an async runtime: use the async API there.
        ///
        /// # Example
        ///
        /// ```no_run
        /// # fn run(client: leasehold::blocking::Client) -> Result<(), leasehold::Error> {
        #[doc = $example]
        /// # Ok(()) }
        /// ```
        #[track_caller]
        pub fn $name(&self) -> Result<Option<$guard>> {
            let g = self.rt.block_on(self.inner.$name())?;
            Ok(g.map(|g| $guard(self.guard(g))))
        }
    };
}

/// A blocking `run` method `$run` calling the async one, with its docs.
macro_rules! blocking_run {
    ($run:ident, $what:literal, $make:literal) => {
        #[doc = concat!("Takes the ", $what, ", runs `work(fence)` under it on this thread, releases it")]
        /// and returns the work's output; if the lease is lost before the
        /// work finishes, the work is dropped at once and the call returns
        /// [`Error::Lost`]. See [`crate::Lock::run`] for what "dropped" means
        /// for work already sent elsewhere, and why the fence still matters.
        ///
        /// The work is a future even here, because only a future can be
        /// stopped from outside: a plain closure would run to its end under
        /// a lost lease. It runs on the calling thread inside the client's
        /// runtime, so Tokio timers and I/O work in it. Purely synchronous
        /// work cannot be dropped midway: take a guard instead and check
        /// its `is_lost()` between steps.
        ///
        /// ```no_run
        /// # fn run(client: leasehold::blocking::Client) -> Result<(), leasehold::Error> {
        #[doc = concat!("let out = ", $make, ".", stringify!($run), "(|fence| async move {")]
        ///     tokio::time::sleep(std::time::Duration::from_millis(10)).await; // dropped here if lost
        ///     fence
        /// })?;
        /// # Ok(()) }
        /// ```
        ///
        /// # Errors
        ///
        /// As the async method.
        ///
        /// # Panics
        ///
        /// Inside an async runtime: use the async API there.
        #[track_caller]
        pub fn $run<F, Fut, T>(&self, work: F) -> Result<T>
        where
            F: FnOnce(u64) -> Fut,
            Fut: Future<Output = T>,
        {
            self.rt.block_on(self.inner.$run(work))
        }
    };
}

/// Blocking `release_by_token` and `extend_by_token` calling the async ones
/// of `$handle`, with their docs; `$make` is example code yielding a handle.
macro_rules! blocking_by_token {
    ($handle:ident, $make:literal) => {
        #[doc = concat!("Releases the lease held under `token`; see [`crate::", stringify!($handle), "::release_by_token`].")]
        ///
        /// # Errors
        ///
        /// As the async method.
        ///
        /// # Panics
        ///
        /// Inside an async runtime.
        ///
        /// # Example
        ///
        /// ```no_run
        /// # fn run(client: leasehold::blocking::Client, token: String) -> Result<(), leasehold::Error> {
        #[doc = concat!($make, ".release_by_token(&token)?;")]
        /// # Ok(()) }
        /// ```
        #[track_caller]
        pub fn release_by_token(&self, token: &str) -> Result<()> {
            self.rt.block_on(self.inner.release_by_token(token))
        }

        #[doc = concat!("Sets the lease held under `token` to end `ttl` from now; see [`crate::", stringify!($handle), "::extend_by_token`].")]
        ///
        /// # Errors
        ///
        /// As the async method.
        ///
        /// # Panics
        ///
        /// Inside an async runtime.
        ///
        /// # Example
        ///
        /// ```no_run
        /// # fn run(client: leasehold::blocking::Client, token: String) -> Result<(), leasehold::Error> {
        /// use std::time::Duration;
        #[doc = concat!($make, ".extend_by_token(&token, Duration::from_secs(60))?;")]
        /// # Ok(()) }
        /// ```
        #[track_caller]
        pub fn extend_by_token(&self, token: &str, ttl: Duration) -> Result<()> {
            self.rt.block_on(self.inner.extend_by_token(token, ttl))
        }
    };
}

/// A blocking `status` method calling the async one of `$handle`, with its docs.
macro_rules! blocking_status {
    ($handle:ident, $status:ident, $example:literal) => {
        #[doc = concat!(
                                            "Reads who holds it; changes nothing. See [`crate::",
                                            stringify!($handle),
                                            "::status`]."
                                        )]
        ///
        /// # Errors
        ///
        /// As the async method.
        ///
        /// # Panics
        ///
        /// Inside an async runtime.
        ///
        /// # Example
        ///
        /// ```no_run
        /// # fn run(client: leasehold::blocking::Client) -> Result<(), leasehold::Error> {
        #[doc = $example]
        /// # Ok(()) }
        /// ```
        #[track_caller]
        pub fn status(&self) -> Result<crate::$status> {
            self.rt.block_on(self.inner.status())
        }
    };
}

blocking_at_least!(Lock);
blocking_lock_delay!(Lock);
blocking_handle!(Lock, Lock, "blocking::Client::lock");
blocking_guard!(
    LockGuard,
    LockGuard,
    "lease",
    "client.lock(\"migration\").acquire()?"
);

impl Lock {
    blocking_acquire!(
        acquire,
        LockGuard,
        "Takes the lock, blocking up to [`Lock::wait`] for the holder to release.",
        "let guard = client.lock(\"orders:42\").acquire()?;"
    );
    blocking_acquire!(
        try try_acquire,
        LockGuard,
        "Takes the lock if it is free, without waiting: `Ok(None)` when held.",
        "let maybe = client.lock(\"orders:42\").try_acquire()?;"
    );
    blocking_run!(run, "lock", "client.lock(\"orders:42\")");

    blocking_by_token!(Lock, "client.lock(\"deploy\")");

    blocking_status!(
        Lock,
        LockStatus,
        "println!(\"{:?}\", client.lock(\"deploy\").status()?.remaining);"
    );
}

impl LockGuard {
    /// Stops renewal and hands back the owner token without releasing; see
    /// [`crate::LockGuard::detach`].
    pub fn detach(self) -> String {
        self.0.inner.detach()
    }
}

blocking_handle!(
    ReentrantLock,
    ReentrantLock,
    "blocking::Client::reentrant_lock"
);
blocking_owner!(ReentrantLock, "client.reentrant_lock(\"orders:42\")");
blocking_guard!(
    ReentrantGuard,
    ReentrantGuard,
    "hold",
    "client.reentrant_lock(\"orders:42\").acquire()?"
);

impl ReentrantLock {
    blocking_acquire!(
        acquire,
        ReentrantGuard,
        "Takes a hold, blocking up to [`ReentrantLock::wait`] while another owner holds it.",
        "let guard = client.reentrant_lock(\"orders:42\").acquire()?;"
    );
    blocking_acquire!(
        try try_acquire,
        ReentrantGuard,
        "Takes a hold if the lock is free or this owner's, without waiting.",
        "let maybe = client.reentrant_lock(\"orders:42\").try_acquire()?;"
    );
    blocking_run!(run, "hold", "client.reentrant_lock(\"orders:42\")");
    blocking_status!(
        ReentrantLock,
        ReentrantStatus,
        "println!(\"{:?}\", client.reentrant_lock(\"orders:42\").status()?.owner);"
    );
}

blocking_at_least!(RwLock);
blocking_handle!(RwLock, RwLock, "blocking::Client::rw_lock");
blocking_owner!(RwLock, "client.rw_lock(\"catalog\")");
blocking_guard!(
    ReadGuard,
    ReadGuard,
    "read hold",
    "client.rw_lock(\"catalog\").read()?"
);
blocking_guard!(
    WriteGuard,
    WriteGuard,
    "write hold",
    "client.rw_lock(\"catalog\").write()?"
);

impl RwLock {
    blocking_acquire!(
        read,
        ReadGuard,
        "Takes a read hold, blocking up to [`RwLock::wait`] while another owner writes.",
        "let guard = client.rw_lock(\"catalog\").read()?;"
    );
    blocking_acquire!(
        try try_read,
        ReadGuard,
        "Takes a read hold without waiting: `Ok(None)` while another owner writes.",
        "let maybe = client.rw_lock(\"catalog\").try_read()?;"
    );
    blocking_acquire!(
        write,
        WriteGuard,
        "Takes the write hold, blocking up to [`RwLock::wait`] for other owners to leave.",
        "let guard = client.rw_lock(\"catalog\").write()?;"
    );
    blocking_acquire!(
        try try_write,
        WriteGuard,
        "Takes the write hold without waiting: `Ok(None)` while another owner holds it.",
        "let maybe = client.rw_lock(\"catalog\").try_write()?;"
    );
    blocking_run!(run_read, "read hold", "client.rw_lock(\"catalog\")");
    blocking_run!(run_write, "write hold", "client.rw_lock(\"catalog\")");
    blocking_status!(
        RwLock,
        RwLockStatus,
        "println!(\"{:?}\", client.rw_lock(\"catalog\").status()?.reader_count);"
    );
}

impl WriteGuard {
    /// Turns the write hold into a read hold in one step; see
    /// [`crate::WriteGuard::downgrade`].
    ///
    /// # Errors
    ///
    /// As the async method.
    ///
    /// # Panics
    ///
    /// Inside an async runtime.
    ///
    /// # Example
    ///
    /// ```no_run
    /// # fn run(client: leasehold::blocking::Client) -> Result<(), leasehold::Error> {
    /// let read = client.rw_lock("catalog").write()?.downgrade()?;
    /// # Ok(()) }
    /// ```
    #[track_caller]
    pub fn downgrade(self) -> Result<ReadGuard> {
        let Guard { inner, rt } = self.0;
        let read = rt.block_on(inner.downgrade())?;
        Ok(ReadGuard(Guard { inner: read, rt }))
    }
}

blocking_at_least!(Semaphore);
blocking_handle!(Semaphore, Semaphore, "blocking::Client::semaphore");
blocking_guard!(
    Permit,
    Permit,
    "permit",
    "client.semaphore(\"exports\", 4).acquire()?"
);

impl Semaphore {
    blocking_acquire!(
        acquire,
        Permit,
        "Takes a permit, blocking up to [`Semaphore::wait`] for one to free.",
        "let permit = client.semaphore(\"exports\", 4).acquire()?;"
    );
    blocking_acquire!(
        try try_acquire,
        Permit,
        "Takes a permit if one is free, without waiting: `Ok(None)` when all are held.",
        "let maybe = client.semaphore(\"exports\", 4).try_acquire()?;"
    );
    blocking_run!(run, "permit", "client.semaphore(\"exports\", 4)");

    blocking_status!(
        Semaphore,
        SemaphoreStatus,
        "println!(\"{:?}\", client.semaphore(\"exports\", 4).status()?.held);"
    );

    /// The number of permits this handle counts.
    pub fn permits(&self) -> u32 {
        self.inner.permits()
    }
}

blocking_at_least!(FairLock);
blocking_lock_delay!(FairLock);
blocking_handle!(FairLock, FairLock, "blocking::Client::fair_lock");

impl FairLock {
    blocking_acquire!(
        acquire,
        LockGuard,
        "Takes the lock after every live waiter that came before, blocking up to [`FairLock::wait`].",
        "let guard = client.fair_lock(\"payouts\").acquire()?;"
    );
    blocking_acquire!(
        try try_acquire,
        LockGuard,
        "Takes the lock if it is free and nobody waits for it: `Ok(None)` otherwise.",
        "let maybe = client.fair_lock(\"payouts\").try_acquire()?;"
    );
    blocking_run!(run, "lock", "client.fair_lock(\"payouts\")");

    blocking_by_token!(FairLock, "client.fair_lock(\"payouts\")");

    blocking_status!(
        FairLock,
        LockStatus,
        "println!(\"{} waiting\", client.fair_lock(\"payouts\").status()?.waiters);"
    );
}

/// The blocking twin of [`crate::Election`]; made by
/// `blocking::Client::election`.
///
/// Cheap to clone; holds no leadership itself.
///
/// # Example
///
/// ```no_run
/// # fn run(client: leasehold::blocking::Client) -> Result<(), leasehold::Error> {
/// let election = client.election("scheduler");
/// for leader in election.observe() {
///     println!("{:?}", leader?);
/// }
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct Election {
    inner: crate::Election,
    rt: Rt,
}

impl std::fmt::Debug for Election {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_tuple("blocking::Election")
            .field(&self.inner)
            .finish()
    }
}

impl Election {
    /// The length of a leader's lease; see [`crate::Election::ttl`].
    ///
    /// Defaults to 30 s.
    pub fn ttl(self, ttl: Duration) -> Self {
        Self {
            inner: self.inner.ttl(ttl),
            rt: self.rt,
        }
    }

    /// The election's name.
    pub fn name(&self) -> &str {
        self.inner.name()
    }

    /// Blocks until this caller leads, then records `value`; see
    /// [`crate::Election::campaign`].
    ///
    /// # Errors
    ///
    /// As [`crate::Election::campaign`].
    ///
    /// # Example
    ///
    /// ```no_run
    /// # fn run(client: leasehold::blocking::Client) -> Result<(), leasehold::Error> {
    /// let leadership = client.election("scheduler").campaign("host-a")?;
    /// println!("term {}", leadership.term());
    /// # Ok(()) }
    /// ```
    #[track_caller]
    pub fn campaign(&self, value: impl Into<String>) -> Result<Leadership> {
        let inner = self.rt.block_on(self.inner.campaign(value))?;
        Ok(Leadership(Guard {
            inner,
            rt: self.rt.clone(),
        }))
    }

    /// Leads if nobody does, without waiting: `Ok(None)` when another
    /// candidate leads; see [`crate::Election::try_campaign`].
    ///
    /// # Errors
    ///
    /// As [`crate::Election::campaign`].
    #[track_caller]
    pub fn try_campaign(&self, value: impl Into<String>) -> Result<Option<Leadership>> {
        let won = self.rt.block_on(self.inner.try_campaign(value))?;
        Ok(won.map(|inner| {
            Leadership(Guard {
                inner,
                rt: self.rt.clone(),
            })
        }))
    }

    /// Campaigns, runs `work(term)` on this thread while leading, then
    /// resigns; see [`crate::Election::lead`]. The work is a future, polled
    /// on the client's runtime as in the async API.
    ///
    /// # Errors
    ///
    /// As [`crate::Election::lead`].
    ///
    /// # Example
    ///
    /// ```no_run
    /// # fn run(client: leasehold::blocking::Client) -> Result<(), leasehold::Error> {
    /// let term = client.election("scheduler").lead("host-a", |term| async move { term })?;
    /// # Ok(()) }
    /// ```
    #[track_caller]
    pub fn lead<F, Fut, T>(&self, value: impl Into<String>, work: F) -> Result<T>
    where
        F: FnOnce(u64) -> Fut,
        Fut: Future<Output = T>,
    {
        self.rt.block_on(self.inner.lead(value, work))
    }

    /// Who leads now; see [`crate::Election::leader`].
    ///
    /// # Errors
    ///
    /// As [`crate::Election::leader`].
    #[track_caller]
    pub fn leader(&self) -> Result<Option<crate::Leader>> {
        self.rt.block_on(self.inner.leader())
    }

    /// An iterator over the election's leaders: who leads now, then each
    /// change, blocking for the next; see [`crate::Election::observe`].
    pub fn observe(&self) -> LeaderChanges {
        LeaderChanges {
            inner: self.inner.observe(),
            rt: self.rt.clone(),
        }
    }
}

/// The iterator of [`Election::observe`]: each `next` blocks until the
/// leader changes (the first returns who leads now).
pub struct LeaderChanges {
    inner: crate::LeaderChanges,
    rt: Rt,
}

impl std::fmt::Debug for LeaderChanges {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("blocking::LeaderChanges")
            .finish_non_exhaustive()
    }
}

impl Iterator for LeaderChanges {
    type Item = Result<Option<crate::Leader>>;

    #[track_caller]
    fn next(&mut self) -> Option<Self::Item> {
        use futures_util::StreamExt;
        self.rt.block_on(self.inner.next())
    }
}

blocking_guard!(
    Leadership,
    Leadership,
    "leadership",
    "client.election(\"scheduler\").campaign(\"host-a\")?"
);

impl Leadership {
    /// The term: strictly greater than every earlier leader's; see
    /// [`crate::Leadership::term`].
    pub fn term(&self) -> u64 {
        self.0.inner.term()
    }

    /// The value this leader campaigned with.
    pub fn value(&self) -> &str {
        self.0.inner.value()
    }

    /// Steps down; see [`crate::Leadership::resign`].
    ///
    /// # Errors
    ///
    /// As [`crate::Leadership::resign`].
    #[track_caller]
    pub fn resign(self) -> Result<()> {
        let Guard { inner, rt } = self.0;
        rt.block_on(inner.resign())
    }
}

/// The blocking twin of [`crate::MultiLock`]; made by
/// `blocking::Client::multi_lock`.
///
/// Cheap to clone; holds no lease itself.
#[derive(Clone)]
pub struct MultiLock {
    inner: crate::MultiLock,
    rt: Rt,
}

impl std::fmt::Debug for MultiLock {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_tuple("blocking::MultiLock")
            .field(&self.inner)
            .finish()
    }
}

impl MultiLock {
    fn with(self, set: impl FnOnce(crate::MultiLock) -> crate::MultiLock) -> MultiLock {
        MultiLock {
            inner: set(self.inner),
            rt: self.rt,
        }
    }

    /// The lease length of every name; see [`crate::MultiLock::ttl`].
    ///
    /// Defaults to 30 s.
    pub fn ttl(self, ttl: Duration) -> Self {
        self.with(|m| m.ttl(ttl))
    }

    /// How long an acquire blocks at most, for all names together;
    /// `Duration::MAX` blocks until acquired.
    ///
    /// Defaults to 10 s.
    pub fn wait(self, wait: Duration) -> Self {
        self.with(|m| m.wait(wait))
    }

    /// Whether the client's watchdog renews the leases.
    ///
    /// Defaults to `true`.
    pub fn watchdog(self, renew: bool) -> Self {
        self.with(|m| m.watchdog(renew))
    }

    /// See [`crate::MultiLock::hold_at_least`].
    ///
    /// Defaults to none.
    pub fn hold_at_least(self, at_least: Duration) -> Self {
        self.with(|m| m.hold_at_least(at_least))
    }

    /// See [`crate::MultiLock::lock_delay`].
    ///
    /// Defaults to zero.
    pub fn lock_delay(self, delay: Duration) -> Self {
        self.with(|m| m.lock_delay(delay))
    }

    /// The names, sorted and without duplicates: the order they are taken in.
    pub fn names(&self) -> Vec<&str> {
        self.inner.names()
    }

    fn guard(&self, g: crate::MultiLockGuard) -> MultiLockGuard {
        MultiLockGuard(Guard {
            inner: g,
            rt: self.rt.clone(),
        })
    }

    /// Takes every name, blocking up to [`MultiLock::wait`] in all; nothing
    /// is left held when it fails.
    ///
    /// # Errors
    ///
    /// As [`crate::MultiLock::acquire`].
    ///
    /// # Panics
    ///
    /// Inside an async runtime: use the async API there.
    ///
    /// # Example
    ///
    /// ```no_run
    /// # fn run(client: leasehold::blocking::Client) -> Result<(), leasehold::Error> {
    /// let guard = client.multi_lock(["a", "b"]).acquire()?;
    /// # Ok(()) }
    /// ```
    #[track_caller]
    pub fn acquire(&self) -> Result<MultiLockGuard> {
        let g = self.rt.block_on(self.inner.acquire())?;
        Ok(self.guard(g))
    }

    /// Takes every name if all are free, without waiting: `Ok(None)`, with
    /// nothing left held, when any is held.
    ///
    /// # Errors
    ///
    /// As [`crate::MultiLock::try_acquire`].
    ///
    /// # Panics
    ///
    /// Inside an async runtime: use the async API there.
    #[track_caller]
    pub fn try_acquire(&self) -> Result<Option<MultiLockGuard>> {
        let g = self.rt.block_on(self.inner.try_acquire())?;
        Ok(g.map(|g| self.guard(g)))
    }

    /// Takes every name, runs `work(fences)` under them on this thread and
    /// releases them; see [`crate::MultiLock::run`] (the work is a future
    /// for the reason given at [`Lock::run`]).
    ///
    /// # Errors
    ///
    /// As the async method.
    ///
    /// # Panics
    ///
    /// Inside an async runtime: use the async API there.
    #[track_caller]
    pub fn run<F, Fut, T>(&self, work: F) -> Result<T>
    where
        F: FnOnce(Vec<(String, u64)>) -> Fut,
        Fut: Future<Output = T>,
    {
        self.rt.block_on(self.inner.run(work))
    }
}

/// The blocking twin of [`crate::MultiLockGuard`]: every lease is renewed
/// on the client's runtime thread while it lives.
///
/// Dropping it stops renewal and releases every name in the background
/// (never blocking, never panicking).
#[must_use = "dropping the guard releases every name at once"]
pub struct MultiLockGuard(Guard<crate::MultiLockGuard>);

impl std::fmt::Debug for MultiLockGuard {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.0.inner.fmt(f)
    }
}

impl MultiLockGuard {
    /// Each name with its fencing token, sorted by name.
    pub fn fences(&self) -> &[(String, u64)] {
        self.0.inner.fences()
    }

    /// The fencing token of `name`, if it is one of this guard's names.
    pub fn fence(&self, name: &str) -> Option<u64> {
        self.0.inner.fence(name)
    }

    /// The owner token of `name` (a capability: do not log it whole).
    pub fn token(&self, name: &str) -> Option<&str> {
        self.0.inner.token(name)
    }

    /// The names, sorted.
    pub fn names(&self) -> Vec<&str> {
        self.0.inner.names()
    }

    /// True once any name's lease may have expired or was taken.
    pub fn is_lost(&self) -> bool {
        self.0.inner.is_lost()
    }

    /// The names whose lease is lost.
    pub fn lost_names(&self) -> Vec<&str> {
        self.0.inner.lost_names()
    }

    /// How long every lease is certain to last from now: the shortest.
    pub fn valid_for(&self) -> Duration {
        self.0.inner.valid_for()
    }

    /// Blocks until any name's lease is lost.
    ///
    /// # Panics
    ///
    /// Inside an async runtime: use the async API there.
    #[track_caller]
    pub fn lost(&self) {
        self.0.rt.block_on(self.0.inner.lost());
    }

    /// Sets every lease to end `ttl` from now, if still held.
    ///
    /// # Errors
    ///
    /// As [`crate::MultiLockGuard::extend`].
    ///
    /// # Panics
    ///
    /// Inside an async runtime: use the async API there.
    #[track_caller]
    pub fn extend(&self, ttl: Duration) -> Result<()> {
        self.0.rt.block_on(self.0.inner.extend(ttl))
    }

    /// Gives back every name.
    ///
    /// # Errors
    ///
    /// As [`crate::MultiLockGuard::release`].
    ///
    /// # Panics
    ///
    /// Inside an async runtime: use the async API there.
    #[track_caller]
    pub fn release(self) -> Result<()> {
        let Guard { inner, rt } = self.0;
        rt.block_on(inner.release())
    }
}
