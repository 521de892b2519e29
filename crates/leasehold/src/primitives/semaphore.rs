//! The semaphore: up to N holders at once, each permit its own lease.

use std::sync::Arc;
use std::time::Duration;

use crate::acquire::acquire;
use crate::error::{Error, Result};
use crate::inner::Inner;
use crate::key::validate_name;
use crate::kind::LockKind;
use crate::primitives::guard::{Guard, hold};
use crate::primitives::handle::{Handle, HoldStatus, at_least_api, handle_api};
use crate::scripts::{self, STATUS_MOST_ENTRIES, SemAcquire};
use crate::token::{Token, redact};

/// A handle to one named semaphore of N permits; made by
/// [`Client::semaphore`](crate::Client::semaphore).
///
/// - **Each permit is its own lease**, renewed by the watchdog while its
///   [`Permit`] lives. A holder that dies gives its permit back after its
///   TTL; the other permits are not touched by it.
/// - **Every client must count the same N.** A client that asks for a
///   permit with another N while permits are held gets
///   [`Error::PermitsMismatch`](crate::Error::PermitsMismatch) with both numbers. (Once every permit is
///   gone, the next caller's N counts.)
/// - **Waiting is event-driven**: a release wakes one waiter in each client
///   at once; permits that expire are noticed when the first of them would
///   end.
/// - Not fair: when a permit frees, any waiter (or a newcomer) may get it.
///
/// Every permit gets a fence strictly greater than every earlier one of
/// this name.
///
/// # Example
///
/// ```no_run
/// # async fn run(client: leasehold::Client) -> Result<(), leasehold::Error> {
/// let exports = client.semaphore("exports", 4); // at most 4 exports at once
/// let permit = exports.acquire().await?;
/// // ... run one export, passing permit.fence() to the resource ...
/// permit.release().await?;
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct Semaphore {
    h: Handle,
    permits: u32,
}

at_least_api!(Semaphore);
handle_api!(Semaphore, "acquire");

impl Semaphore {
    pub(crate) fn new(inner: Arc<Inner>, name: String, permits: u32) -> Semaphore {
        Semaphore {
            h: Handle::new(inner, name),
            permits,
        }
    }

    /// The number of permits this handle counts.
    pub fn permits(&self) -> u32 {
        self.permits
    }

    /// Takes a permit, waiting up to [`Semaphore::wait`] for a holder to
    /// release one (or for one to expire).
    ///
    /// # Errors
    ///
    /// [`Error::Timeout`](crate::Error::Timeout) when the wait ran out; [`Error::PermitsMismatch`](crate::Error::PermitsMismatch)
    /// when the permits held now were taken with another number of permits;
    /// [`Error::InvalidArgument`](crate::Error::InvalidArgument) for a bad name or TTL or zero permits;
    /// [`Error::WrongType`](crate::Error::WrongType) when the name is in use by another kind of lock;
    /// connection errors if Redis stayed unreachable until the wait ran out.
    ///
    /// # Cancel safety
    ///
    /// Dropping the future leaves nothing held: if an attempt may have
    /// succeeded on the server, the permit is released in the background.
    ///
    /// # Example
    ///
    /// ```no_run
    /// # async fn run(client: leasehold::Client) -> Result<(), leasehold::Error> {
    /// let permit = client.semaphore("exports", 4).acquire().await?;
    /// permit.release().await?;
    /// # Ok(()) }
    /// ```
    pub async fn acquire(&self) -> Result<Permit> {
        self.take(Some(self.h.wait))
            .await?
            .ok_or_else(|| self.h.timeout())
    }

    crate::primitives::run::run_api!(run, acquire, "permit", "client.semaphore(\"exports\", 4)");

    /// Takes a permit if one is free, without waiting: `Ok(None)` when all
    /// are held.
    ///
    /// # Errors
    ///
    /// As [`Semaphore::acquire`], except [`Error::Timeout`](crate::Error::Timeout).
    ///
    /// # Cancel safety
    ///
    /// As [`Semaphore::acquire`].
    ///
    /// # Example
    ///
    /// ```no_run
    /// # async fn run(client: leasehold::Client) -> Result<(), leasehold::Error> {
    /// match client.semaphore("exports", 4).try_acquire().await? {
    ///     Some(permit) => permit.release().await?,
    ///     None => println!("four exports run already"),
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn try_acquire(&self) -> Result<Option<Permit>> {
        self.take(None).await
    }

    /// Reads how many permits are held now and by whom (at most 100
    /// listed, all counted), the number of permits the holders count, and
    /// the last fencing token. Only live permits count: one whose lease
    /// ended is left out (and left in place: this changes nothing).
    ///
    /// # Errors
    ///
    /// [`Error::InvalidArgument`](crate::Error::InvalidArgument) for a bad name; [`Error::WrongType`](crate::Error::WrongType) when
    /// the name is in use by another kind of lock (an
    /// [`RwLock`](crate::RwLock) too); [`Error::Unsupported`](crate::Error::Unsupported) on a Redlock
    /// client; connection errors.
    ///
    /// # Example
    ///
    /// ```no_run
    /// # async fn run(client: leasehold::Client) -> Result<(), leasehold::Error> {
    /// let status = client.semaphore("exports", 4).status().await?;
    /// println!("{} of {:?} permits held", status.held, status.permits);
    /// for permit in &status.holders {
    ///     println!("{}… {:?} left", permit.holder, permit.remaining);
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn status(&self) -> Result<SemaphoreStatus> {
        validate_name(&self.h.name)?;
        let servers = &self.h.inner.servers;
        let stored = servers.set_status("Semaphore", &self.h.keys).await?;
        // Members start with the N their permit counted; an RwLock's set has
        // the same shape, but its members start with a letter.
        let counted = stored
            .groups
            .iter()
            .map(|g| g.prefix.parse::<u32>())
            .collect::<std::result::Result<Vec<_>, _>>()
            .map_err(|_| Error::WrongType {
                key: self.h.keys.lock().to_owned(),
            })?;
        let holders: Vec<(String, &(String, Duration))> = stored
            .groups
            .iter()
            .flat_map(|g| {
                g.entries
                    .iter()
                    .map(|e| (format!("{}:{}", g.prefix, e.0), e))
            })
            .take(STATUS_MOST_ENTRIES)
            .collect();
        let keys: Vec<String> = holders.iter().map(|(m, _)| self.h.keys.who(m)).collect();
        let about = servers.who(&keys).await?;
        Ok(SemaphoreStatus {
            name: self.h.name.clone(),
            // Every live permit was taken counting the same N (sem_acquire.lua).
            permits: counted.first().copied(),
            held: stored.groups.iter().map(|g| g.count).sum(),
            holders: holders
                .iter()
                .zip(about)
                .map(|((_, (hold, left)), about)| HoldStatus {
                    holder: redact(hold).to_owned(),
                    remaining: *left,
                    about,
                })
                .collect(),
            fence: stored.fence,
        })
    }

    async fn take(&self, wait: Option<Duration>) -> Result<Option<Permit>> {
        self.h.validate()?;
        if self.permits == 0 {
            return Err(Error::InvalidArgument(format!(
                "semaphore {:?} has 0 permits: nobody could ever acquire it; pass at least 1",
                self.h.name
            )));
        }
        let servers = &self.h.inner.servers;
        let hold = Token::random();
        let member = scripts::sem_member(self.permits, hold.as_str());
        let target = self.h.target(LockKind::Semaphore, &member);
        let acquired = acquire(&target, wait, || async {
            match servers
                .sem_acquire(
                    &self.h.keys,
                    self.permits,
                    hold.as_str(),
                    self.h.server_ttl(),
                    self.h.fence_memory(),
                )
                .await?
            {
                SemAcquire::Lock(reply) => Ok(reply),
                SemAcquire::Mismatch(held_with) => Err(Error::PermitsMismatch {
                    name: self.h.name.clone(),
                    permits: self.permits,
                    held_with,
                }),
            }
        })
        .await?;
        Ok(acquired.map(|won| {
            let held = self
                .h
                .hold((LockKind::Semaphore, hold, member.clone()), won);
            Guard::new(held, hold::SemaphorePermit)
        }))
    }
}

/// A semaphore's state at one moment, from [`Semaphore::status`].
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct SemaphoreStatus {
    /// The semaphore name.
    pub name: String,
    /// The number of permits (N) the current holders counted when they
    /// took theirs, as stored; `None` when no permit is held (then the next
    /// caller's N counts).
    pub permits: Option<u32>,
    /// How many permits are held now.
    pub held: usize,
    /// The permits held, soonest to end first: at most 100 (see
    /// [`held`](SemaphoreStatus::held) for all).
    pub holders: Vec<HoldStatus>,
    /// The last fencing token issued for this name, if still kept: for the
    /// lease's TTL after it was issued, or the client's
    /// [`fence_memory`](crate::ClientBuilder::fence_memory) if longer.
    pub fence: Option<u64>,
}

/// One permit of a [`Semaphore`]; its lease is renewed while it lives.
///
/// Its lease is its own: renewing it, or its expiring, changes no other
/// permit. Dropping the permit stops renewal and gives it back in the
/// background (never blocking, never panicking).
///
/// A release left to a runtime that is shutting down is never sent; see
/// [`LockGuard`](crate::LockGuard) and [`Client::close`](crate::Client::close).
pub type Permit = Guard<hold::SemaphorePermit>;
