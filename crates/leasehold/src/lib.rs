//! Distributed locks on Redis: leases with fencing tokens, watchdog renewal
//! and event-driven waiting.
//!
//! # Primitives
//!
//! - [`Lock`]: a lease lock, one owner at a time (`SET NX PX` done right:
//!   owner-checked release and extend, fencing tokens, automatic renewal).
//! - [`ReentrantLock`]: a lease lock that its owner (an id you choose) may
//!   take again while holding it; free once every hold is given back.
//! - [`RwLock`]: many readers or one writer, each holder with its own lease;
//!   writers are served in the order they came, and a waiting writer stops
//!   new readers; a writer may downgrade to a reader.
//! - [`FairLock`]: the lease lock with waiters served strictly in arrival
//!   order; a dead waiter leaves the queue within seconds.
//! - [`Semaphore`]: up to N holders at once, each [`Permit`] its own lease.
//! - [`MultiLock`]: several lease locks taken together, all or none, with
//!   a fence per name ([`Client::multi_lock`]).
//! - [`Election`]: leader election: [`Election::campaign`] waits until it
//!   leads and gives a [`Leadership`] (its [`term`](Leadership::term) rises
//!   with every leader), [`Election::leader`] says who leads with what value,
//!   [`Election::observe`] streams each change as it is published.
//! - [`fenced`]: the resource side of fencing, a Redis write refused when
//!   its fence is lower than one already seen for the key.
//! - [`blocking`]: the same types and names without async, for threads
//!   outside an async runtime (renewal runs on a thread of the client's own;
//!   feature `blocking`).
//!
//! Clients: [`Client::connect`] (one Redis) and [`Client::redlock`] (one
//! lease over N independent masters, held while a majority agrees; [`Lock`]
//! only).
//!
//! # Which lock should you use?
//!
//! Use [`Lock`] to keep a critical section to one process at a time across
//! hosts. Hold the guard for the whole section; the client's watchdog renews
//! the lease every `ttl / 3` while the guard lives. Or let [`Lock::run`]
//! hold it: it runs the section as a future and drops that future as soon
//! as the lease is lost (every primitive has it; `run_read` and `run_write`
//! on [`RwLock`]).
//!
//! Use [`ReentrantLock`] when code that holds the lock may call code that
//! takes it again (the owner is an id you choose, so this works across tasks
//! and processes, not per thread). Use [`RwLock`] when many may read at once
//! but writes need to be alone; each reader holds its own lease, so a reader
//! that dies blocks writers for one TTL at most.
//!
//! [`Lock`] already hands a release to its longest waiter, but a newcomer
//! may still take a lock that is free for a moment; use [`FairLock`] when
//! no caller may ever be overtaken (at the cost of a hand-off per holder).
//!
//! Use [`MultiLock`] when one critical section needs several resources at
//! once (a transfer between two accounts): it takes every name or none, in
//! sorted order whatever order they are given in, so callers asking for
//! overlapping sets cannot deadlock, and it works with the names on
//! different cluster slots. The [`MultiLockGuard`] has a fence per name.
//!
//! ```no_run
//! # async fn run(client: leasehold::Client) -> Result<(), leasehold::Error> {
//! let guard = client.multi_lock(["account:7", "account:3"]).acquire().await?;
//! for (name, fence) in guard.fences() {
//!     println!("{name}: pass fence {fence} with its writes");
//! }
//! guard.release().await?;
//! # Ok(()) }
//! ```
//!
//! Use [`Semaphore`] to bound how many processes do something at once
//! (exports, connections to a fragile service) rather than to exclude them
//! all: a holder that dies takes its permit with it for one TTL at most.
//!
//! Use [`Election`] when one of many processes should act for all of them
//! (a scheduler, a primary) and the others need to know which one: it is
//! the [`Lock`] of the same name with the leader's value beside it. A
//! standby leads within a round trip of a resignation, and within the TTL
//! (plus at most a second) of a leader's crash; pass
//! [`Leadership::term`] to what the leader writes, as a fence.
//! [`Election::lead`] runs work only while leading, as [`Lock::run`] does
//! under a lock.
//!
//! ```no_run
//! # async fn run(client: leasehold::Client) -> Result<(), leasehold::Error> {
//! use futures_util::StreamExt;
//! use std::time::Duration;
//!
//! let election = client.election("scheduler").ttl(Duration::from_secs(10));
//! // Elsewhere: who leads, and each change as it happens.
//! let mut leaders = election.observe();
//! tokio::spawn(async move {
//!     while let Some(Ok(leader)) = leaders.next().await {
//!         println!("leader now: {leader:?}");
//!     }
//! });
//! let leadership = election.campaign("host-a:8080").await?; // waits until it leads
//! tokio::select! {
//!     () = leadership.lost() => eprintln!("deposed (lease lost): stop acting as leader"),
//!     () = tokio::time::sleep(Duration::from_secs(60)) => leadership.resign().await?,
//! }
//! # Ok(()) }
//! ```
//!
//! One Redis server is one point of failure: if it restarts without
//! persistence, or fails over to a replica that missed the write, two
//! holders can overlap. Use [`Client::redlock`] over independent masters
//! when the lock must survive a minority of them failing; its fences are
//! best-effort (see there).
//!
//! What no lease can promise: a process that is paused (GC, SIGSTOP, a
//! swapped-out VM) longer than its TTL can wake up still *believing* it holds
//! the lock while another process holds it. [`LockGuard::is_lost`] and
//! [`LockGuard::lost`] tell you as soon as the client can know, but a write
//! already in flight cannot be recalled. That is what **fencing tokens** are
//! for: every acquisition gets a [`LockGuard::fence`] strictly greater than
//! every earlier one for that name; pass it to the resource and have the
//! resource reject writes with a lower fence than it has seen. [`fenced`]
//! is that check for a Redis key (a script any client can send); in SQL it
//! is a condition on the row (`UPDATE .. WHERE last_fence <= $fence`; see
//! `examples/fenced_postgres.rs`).
//!
//! Fences keep increasing across release, expiry, a restart of Redis
//! without persistence and a failover to a replica that missed the last
//! acquisitions: each is `max(last kept + 1, server time in µs)`, and the
//! server time is above every earlier fence as long as the server clock does
//! not step back. The last fence lives as long as its lease (longer with
//! [`ClientBuilder::fence_memory`]), so names used once leave nothing
//! behind. A clock step back while it is kept changes nothing; one while it
//! is not, or a failover to a replica whose clock is behind, can make fences
//! go back by up to the step.
//!
//! # Who holds a lock
//!
//! One rule for every kind: **each acquisition is its own holder.** Its
//! guard holds it, and any two guards exclude each other as the kind says,
//! whether they came from one handle, from clones of it (handed to other
//! tasks) or from other clients, as with tokio's locks. Only an owner
//! shared on purpose changes that: handles given the same id with
//! [`ReentrantLock::owner`] or [`RwLock::owner`] share their holds, in any
//! task or process, which is what reentrancy is. Without such an id a
//! [`ReentrantLock`] re-enters nothing, and a task that holds an
//! [`RwLock`] read and asks to read or write again waits behind its own
//! read like anyone else (see [`RwLock`] for where that ends).
//!
//! # Features
//!
//! Without any feature you get what most users need: every primitive on one
//! server ([`Client::connect`]) or on Redlock's nodes ([`Client::redlock`]),
//! over TCP or a unix socket (`unix:///path/to/redis.sock`), on Tokio. The
//! rest is opt-in, as redis-rs keeps TLS and cluster opt-in:
//!
//! ```toml
//! leasehold = { version = "0.1", features = ["tls-ring", "sentinel"] }
//! ```
//!
//! | feature | what it adds |
//! |---|---|
//! | `tls` | `rediss://` URLs through rustls, [`ClientBuilder::tls_ca_cert`], [`ClientBuilder::tls_client_cert`]; chooses no crypto provider |
//! | `tls-ring` | ring as the crypto provider when the application installed none (implies `tls`) |
//! | `cluster` | [`Client::cluster`], [`ClientBuilder::cluster`] (redis's `cluster-async`) |
//! | `sentinel` | [`Client::sentinel`], [`ClientBuilder::sentinel`] |
//! | `blocking` | [`blocking`], the synchronous facade (a Tokio multi-thread runtime of its own) |
//! | `metrics` | the counters, gauge and histogram below, through the `metrics` facade |
//!
//! On docs.rs every item that needs a feature is labelled with it.
//!
//! A `rediss://` URL in a build without `tls` fails with
//! [`Error::Unsupported`], which names the feature.
//!
//! **TLS crypto provider.** rustls runs on a process-level
//! `CryptoProvider`. leasehold never replaces one the application
//! installed: an application on aws-lc-rs (rustls's default) that calls
//! `rustls::crypto::aws_lc_rs::default_provider().install_default()` at
//! startup gets aws-lc-rs for Redis too. When none is installed at the first
//! `rediss://` connection, `tls-ring` installs ring as the process default
//! (what rustls does itself when ring is its only provider); without
//! `tls-ring` the connection fails with [`Error::Unsupported`] saying to
//! install one. So an application that wants only aws-lc-rs compiled in
//! depends on leasehold with `default-features = false` and
//! `features = ["tls", ...]`, and installs its provider before connecting.
//!
//! # Metrics and tracing
//!
//! With the `metrics` feature the library reports through
//! the [`metrics`](https://docs.rs/metrics/0.24) facade: nothing is recorded
//! until the application installs a recorder (a Prometheus exporter, for
//! one: `examples/metrics.rs`). No label carries a lock name, so the number
//! of series stays fixed however many names are used.
//!
//! | name | type | labels | what |
//! |---|---|---|---|
//! | `leasehold_acquisitions_total` | counter | `kind`, `outcome` | acquire calls that ended: `acquired`, `timeout` (the wait ran out), `busy` (a try found it held), `error` |
//! | `leasehold_acquire_wait_seconds` | histogram | `kind` | how long each acquisition took, waiting included |
//! | `leasehold_held_leases` | gauge | | guards alive in this process |
//! | `leasehold_renewals_total` | counter | | leases the watchdog renewed |
//! | `leasehold_renewal_batches_total` | counter | | renewal calls (each renews a batch of leases) |
//! | `leasehold_leases_lost_total` | counter | `reason` | leases lost: `expired` (gone from the server, or validity passed before a renewal went out), `taken` (another owner holds it), `unreachable` (renewals got no answer until the validity ran out), `broken` (an operator broke it: `Client::break_lease`, `leasehold release --force`) |
//! | `leasehold_handoffs_total` | counter | | acquisitions by a lease handed over whole at release |
//!
//! `kind` is `lock` (also [`FairLock`], and each name of a [`MultiLock`],
//! counted as its own acquisition), `reentrant`, `rwlock`, `semaphore` or
//! `election` (a campaign's lease). Without the feature the facade is not
//! built in.
//!
//! [`tracing`](https://docs.rs/tracing) spans: `leasehold.acquire` (INFO;
//! fields `lock`, `kind`, `outcome`, `waited`), `leasehold.release` (INFO;
//! `lock`, `kind`) and `leasehold.renew` (DEBUG; `kind`, `leases`, one per
//! renewal call); events: a lost lease (WARN, with its `reason`), renewals
//! failing to reach Redis (WARN once per outage, INFO when it ends), failed
//! releases (WARN), hand-offs and retries (DEBUG).
//!
//! # Example
//!
//! ```no_run
//! use std::time::Duration;
//! use leasehold::Client;
//!
//! # async fn run() -> Result<(), leasehold::Error> {
//! let client = Client::connect("redis://127.0.0.1:6379").await?;
//! let lock = client.lock("orders:42").ttl(Duration::from_secs(30)).wait(Duration::from_secs(5));
//! let guard = lock.acquire().await?;
//! // ... write to the resource, passing guard.fence() ...
//! guard.release().await?;
//! # Ok(()) }
//! ```

// Items behind a feature this build lacks are linked on docs.rs (built with
// every feature), so `cargo doc` warns of no unresolved link in any build.
#![cfg_attr(
    not(feature = "tls"),
    doc = "\n[`ClientBuilder::tls_ca_cert`]: https://docs.rs/leasehold/latest/leasehold/struct.ClientBuilder.html#method.tls_ca_cert",
    doc = "[`ClientBuilder::tls_client_cert`]: https://docs.rs/leasehold/latest/leasehold/struct.ClientBuilder.html#method.tls_client_cert"
)]
#![cfg_attr(
    not(feature = "cluster"),
    doc = "\n[`Client::cluster`]: https://docs.rs/leasehold/latest/leasehold/struct.Client.html#method.cluster",
    doc = "[`ClientBuilder::cluster`]: https://docs.rs/leasehold/latest/leasehold/struct.ClientBuilder.html#method.cluster"
)]
#![cfg_attr(
    not(feature = "sentinel"),
    doc = "\n[`Client::sentinel`]: https://docs.rs/leasehold/latest/leasehold/struct.Client.html#method.sentinel",
    doc = "[`ClientBuilder::sentinel`]: https://docs.rs/leasehold/latest/leasehold/struct.ClientBuilder.html#method.sentinel"
)]
#![cfg_attr(
    not(feature = "blocking"),
    doc = "\n[`blocking`]: https://docs.rs/leasehold/latest/leasehold/blocking/index.html"
)]
// docs.rs (package.metadata.docs.rs): each item that needs a feature says which.
#![cfg_attr(docsrs, feature(doc_cfg))]

mod acquire;
mod backend;
#[cfg(feature = "blocking")]
pub mod blocking;
mod client;
mod clock;
mod error;
mod events;
pub mod fenced;
mod inner;
mod key;
mod kind;
mod lease;
mod primitives;
#[cfg(feature = "_raw")]
#[doc(hidden)]
pub mod raw;
mod scripts;
mod servers;
#[cfg(leasehold_sim)]
#[doc(hidden)]
pub mod sim;
/// Simulation builds only: the shipped scripts' SHA1s and names (here, not
/// in `sim`, which the connection layer imports: `sim` importing the
/// scripts would tie them in a circle).
#[cfg(leasehold_sim)]
#[doc(hidden)]
pub use scripts::script_names as sim_script_names;
mod telemetry;

/// The READMEs' Rust examples compile: rustdoc builds their `rust` blocks
/// as doc tests (the workspace README is outside the package, and is read
/// only while collecting doc tests).
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
#[doc = include_str!("../../../README.md")]
struct ReadmeExamples;
mod token;
mod watchdog;

pub use backend::redact_url;
pub use client::Client;
pub use client::break_lease::{BrokenHold, BrokenLease};
pub use client::builder::{ClientBuilder, DEFAULT_PREFIX};
pub use error::{Error, Result};
pub use kind::LockKind;
pub use primitives::election::{Election, Leader, LeaderChanges, Leadership, MAX_VALUE_LEN};
pub use primitives::fair::FairLock;
pub use primitives::guard::{Guard, hold};
pub use primitives::handle::{DEFAULT_TTL, DEFAULT_WAIT, HoldStatus};
pub use primitives::lock::{Lock, LockGuard, LockStatus};
pub use primitives::multi::{MultiLock, MultiLockGuard};
pub use primitives::reentrant::{ReentrantGuard, ReentrantLock, ReentrantStatus};
pub use primitives::rwlock::{ReadGuard, RwLock, RwLockStatus, WriteGuard};
pub use primitives::semaphore::{Permit, Semaphore, SemaphoreStatus};
pub use telemetry::LostReason;

/// The `redis` crate leasehold is built with. [`Error::Redis`] and the
/// sources of [`Error::Unreachable`], [`Error::Tls`] and [`Error::Auth`] are
/// its `RedisError`; naming it through this path needs no `redis` dependency
/// of your own, and cannot pick a different 1.x than leasehold's.
///
/// ```
/// use leasehold::{Error, redis};
///
/// fn is_io(err: &Error) -> bool {
///     matches!(err, Error::Redis(e) if e.kind() == redis::ErrorKind::Io)
/// }
/// ```
pub use redis;
