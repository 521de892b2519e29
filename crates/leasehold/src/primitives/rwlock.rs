//! The read-write lock: many readers or one writer, each hold its own lease.

use std::sync::Arc;
use std::time::Duration;

use crate::clock::Instant;

use crate::acquire::acquire;
use crate::error::{Error, Result};
use crate::inner::Inner;
use crate::key::{LockKeys, validate_name, validate_owner};
use crate::kind::LockKind;
use crate::lease::Lease;
use crate::primitives::guard::{Guard, Held, describe_hold, hold};
use crate::primitives::handle::{Handle, HoldStatus, at_least_api, handle_api, owner_api};
use crate::scripts::{Acquire, Mode, Owned, OwnedLeaseId, RwAcquire, RwAttempt};
use crate::token::{Token, redact};

/// A handle to one named read-write lock; made by [`Client::rw_lock`](crate::Client::rw_lock).
///
/// Many readers or one writer at a time:
///
/// - **Each reader holds its own lease.** A reader that dies stops counting
///   after its own TTL; the other readers' leases are not touched by it.
/// - **Each acquisition is its own holder** (the crate docs' "Who holds a
///   lock"): clones of a handle, and two calls on one handle, exclude each
///   other as any two holders do. Only handles given the same
///   [`owner`](RwLock::owner) id share their holds (reentrancy, across
///   tasks and processes): such an owner may read many times, write many
///   times, and a writer may also read.
/// - **Writers in the order they came.** A writer that has to wait takes
///   its place on the server at its first attempt; no other owner's writer
///   that comes after it, whether it waits or only tries
///   ([`try_write`](RwLock::try_write)), writes before it. (A writer of an
///   earlier version of this crate does not queue: see the CHANGELOG.)
/// - **No writer starvation by readers.** A writer that waits stops every
///   new read, a second [`read`](RwLock::read) of a task that reads
///   already included: that task waits for the writer, which waits for the
///   task's first read, until the second read's wait runs out with
///   [`Error::Timeout`](crate::Error::Timeout) (hold one read guard at a
///   time, or release the first before reading again). The one exception
///   is an owner shared on purpose: one that already holds the lock may
///   read again past a waiting writer, since a re-entry must never wait for
///   itself, so such an owner that keeps re-entering hand over hand (a new
///   read before releasing the old) keeps writers out for as long as it
///   goes on. If the waiting writer dies, the block ends within one TTL;
///   if it gives up, at once.
/// - **Downgrade, never upgrade.** [`WriteGuard::downgrade`] turns a write
///   into a read in one step (no writer can slip in between). An owner
///   shared on purpose that holds only reads and asks to write gets
///   [`Error::UpgradeRefused`](crate::Error::UpgradeRefused): two readers upgrading at once would wait for
///   each other forever. A read guard dropped before the write does not
///   count: the write waits for its release in the background first.
///   (Without an owner id, a write waits for every read, the caller's own
///   included, as a second read does above.)
///
/// Every guard gets a fresh fence, strictly greater than every earlier one
/// of this name (a downgraded read keeps its writer's fence).
///
/// # Example
///
/// ```no_run
/// # async fn run(client: leasehold::Client) -> Result<(), leasehold::Error> {
/// let catalog = client.rw_lock("catalog");
/// let read = catalog.read().await?;
/// // ... many readers at once ...
/// read.release().await?;
/// let write = catalog.write().await?;
/// // ... alone ...
/// let read = write.downgrade().await?; // readers may enter, writers may not
/// read.release().await?;
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct RwLock {
    h: Handle,
    owner: Option<Token>,
}

at_least_api!(RwLock);
handle_api!(RwLock, "write");
owner_api!(RwLock, "client.rw_lock(\"catalog\")");

impl RwLock {
    pub(crate) fn new(inner: Arc<Inner>, name: String) -> RwLock {
        RwLock {
            h: Handle::new(inner, name),
            owner: None,
        }
    }

    /// Takes a read hold, waiting up to [`RwLock::wait`] while another
    /// owner writes or waits to write (a task's own earlier read guard does
    /// not let it past a waiting writer unless the handle has an
    /// [`owner`](RwLock::owner) id: see [`RwLock`]).
    ///
    /// # Errors
    ///
    /// [`Error::Timeout`](crate::Error::Timeout) when the wait ran out; [`Error::InvalidArgument`](crate::Error::InvalidArgument)
    /// for a bad name, owner or TTL; [`Error::WrongType`](crate::Error::WrongType) when the name is in
    /// use by another kind of lock; connection errors if Redis stayed
    /// unreachable until the wait ran out.
    ///
    /// # Cancel safety
    ///
    /// Dropping the future leaves nothing held: if an attempt may have
    /// succeeded on the server, that hold is released in the background.
    ///
    /// # Example
    ///
    /// ```no_run
    /// # async fn run(client: leasehold::Client) -> Result<(), leasehold::Error> {
    /// let guard = client.rw_lock("catalog").read().await?;
    /// guard.release().await?;
    /// # Ok(()) }
    /// ```
    pub async fn read(&self) -> Result<ReadGuard> {
        let held = self.take(Mode::Read, Some(self.h.wait)).await?;
        let held = held.ok_or_else(|| self.h.timeout())?;
        Ok(Guard::new(held, hold::Read))
    }

    crate::primitives::run::run_api!(run_read, read, "read hold", "client.rw_lock(\"catalog\")");

    /// As [`RwLock::read`], without waiting: `Ok(None)` while another owner
    /// writes or waits to write.
    ///
    /// # Errors
    ///
    /// As [`RwLock::read`], except [`Error::Timeout`](crate::Error::Timeout).
    ///
    /// # Cancel safety
    ///
    /// As [`RwLock::read`].
    ///
    /// # Example
    ///
    /// ```no_run
    /// # async fn run(client: leasehold::Client) -> Result<(), leasehold::Error> {
    /// if let Some(guard) = client.rw_lock("catalog").try_read().await? {
    ///     guard.release().await?;
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn try_read(&self) -> Result<Option<ReadGuard>> {
        let held = self.take(Mode::Read, None).await?;
        Ok(held.map(|held| Guard::new(held, hold::Read)))
    }

    /// Takes the write hold, waiting up to [`RwLock::wait`] for other
    /// owners' readers and writer to leave, and for the writers that came
    /// before it. While it waits, owners that do not hold the lock yet
    /// cannot start reading, and writers that come after it go behind it.
    ///
    /// # Errors
    ///
    /// [`Error::UpgradeRefused`](crate::Error::UpgradeRefused) when this owner holds reads but no write
    /// (a read guard of this client dropped before the call is not one: its
    /// release in the background goes first, waited for up to the command
    /// timeout); otherwise as [`RwLock::read`].
    ///
    /// # Cancel safety
    ///
    /// As [`RwLock::read`]; the block on new readers, and the writer's
    /// place, are withdrawn in the background.
    ///
    /// # Example
    ///
    /// ```no_run
    /// # async fn run(client: leasehold::Client) -> Result<(), leasehold::Error> {
    /// let guard = client.rw_lock("catalog").write().await?;
    /// guard.release().await?;
    /// # Ok(()) }
    /// ```
    pub async fn write(&self) -> Result<WriteGuard> {
        let held = self.take(Mode::Write, Some(self.h.wait)).await?;
        let held = held.ok_or_else(|| self.h.timeout())?;
        Ok(Guard::new(held, hold::Write))
    }

    crate::primitives::run::run_api!(
        run_write,
        write,
        "write hold",
        "client.rw_lock(\"catalog\")"
    );

    /// As [`RwLock::write`], without waiting (and without blocking new
    /// readers or taking a place among the writers): `Ok(None)` while
    /// another owner reads or writes, or another owner's writer waits.
    ///
    /// # Errors
    ///
    /// As [`RwLock::write`], except [`Error::Timeout`](crate::Error::Timeout).
    ///
    /// # Cancel safety
    ///
    /// As [`RwLock::read`].
    ///
    /// # Example
    ///
    /// ```no_run
    /// # async fn run(client: leasehold::Client) -> Result<(), leasehold::Error> {
    /// if let Some(guard) = client.rw_lock("catalog").try_write().await? {
    ///     guard.release().await?;
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn try_write(&self) -> Result<Option<WriteGuard>> {
        let held = self.take(Mode::Write, None).await?;
        Ok(held.map(|held| Guard::new(held, hold::Write)))
    }

    /// Reads who holds the lock: the writer, the readers (at most 100
    /// listed, all counted), whether writers wait, and the last fencing
    /// token. Only live holds count: one whose lease ended is left out
    /// (and left in place: this changes nothing).
    ///
    /// # Errors
    ///
    /// [`Error::InvalidArgument`](crate::Error::InvalidArgument) for a bad name; [`Error::WrongType`](crate::Error::WrongType) when
    /// the name is in use by another kind of lock (a
    /// [`Semaphore`](crate::Semaphore) too); [`Error::Unsupported`](crate::Error::Unsupported) on a
    /// Redlock client; connection errors.
    ///
    /// # Example
    ///
    /// ```no_run
    /// # async fn run(client: leasehold::Client) -> Result<(), leasehold::Error> {
    /// let status = client.rw_lock("catalog").status().await?;
    /// if let Some(writer) = &status.writer {
    ///     println!("written by {}…, {:?} left", writer.holder, writer.remaining);
    /// }
    /// println!("{} read holds, {} writers waiting", status.reader_count, status.waiting_writers);
    /// # Ok(()) }
    /// ```
    pub async fn status(&self) -> Result<RwLockStatus> {
        validate_name(&self.h.name)?;
        let servers = &self.h.inner.servers;
        let stored = servers.set_status("RwLock", &self.h.keys).await?;
        let mut status = RwLockStatus {
            name: self.h.name.clone(),
            writer: None,
            readers: Vec::new(),
            reader_count: 0,
            waiting_writers: 0,
            fence: stored.fence,
        };
        // What the listed holds say of their holders, in one read.
        let members: Vec<String> = stored
            .groups
            .iter()
            .filter(|g| g.prefix == "r" || g.prefix == "w")
            .flat_map(|g| {
                g.entries
                    .iter()
                    .map(|(rest, _)| format!("{}:{rest}", g.prefix))
            })
            .collect();
        let keys: Vec<String> = members.iter().map(|m| self.h.keys.who(m)).collect();
        let about: std::collections::HashMap<String, String> = members
            .into_iter()
            .zip(servers.who(&keys).await?)
            .filter_map(|(member, about)| Some((member, about?)))
            .collect();
        for group in stored.groups {
            let holds = group.entries.iter().map(|(rest, left)| HoldStatus {
                // A hold's member ends `<hold id>:<owner>`; hold ids have no ':'.
                holder: redact(
                    rest.split_once(':')
                        .map_or(rest.as_str(), |(_, owner)| owner),
                )
                .to_owned(),
                remaining: *left,
                about: about.get(&format!("{}:{rest}", group.prefix)).cloned(),
            });
            match group.prefix.as_str() {
                // One owner writes at a time; its last write hold to end counts.
                "w" => status.writer = holds.max_by_key(|h| h.remaining),
                "r" => {
                    status.readers = holds.collect();
                    status.reader_count = group.count;
                }
                "i" => status.waiting_writers = group.count,
                // A semaphore's set has the same shape; its members start with a number.
                _ => {
                    return Err(Error::WrongType {
                        key: self.h.keys.lock().to_owned(),
                    });
                }
            }
        }
        Ok(status)
    }

    async fn take(&self, mode: Mode, wait: Option<Duration>) -> Result<Option<Held>> {
        self.h.validate()?;
        let owner = self.acquisition_owner();
        validate_owner(owner.as_str())?;
        let inner = &self.h.inner;
        if mode == Mode::Write {
            // A read guard of this owner dropped just before is released in
            // the background; a write that reached the server first would be
            // refused as an upgrade although the caller holds no read. So
            // the releases this client handed over for the name go first
            // (each is bounded by the command timeout once sent).
            let settled = inner.watchdog.settled(self.h.keys.lock());
            if tokio::time::timeout(inner.command_timeout, settled)
                .await
                .is_err()
            {
                tracing::debug!(lock = %self.h.name,
                    "background releases of the name still running; writing all the same");
            }
        }
        let servers = &inner.servers;
        let hold = Token::random();
        let member = mode.member(hold.as_str(), owner.as_str());
        let attempt = RwAttempt {
            mode,
            owner: owner.as_str(),
            hold: hold.as_str(),
            ttl: self.h.server_ttl(),
            waits: wait.is_some(),
            fence_memory: self.h.fence_memory(),
        };
        // A waiting writer leaves an entry that blocks new readers; take it
        // away if we leave without the lock (the script removes it on success).
        let mut intent = (mode == Mode::Write && wait.is_some()).then(|| WithdrawOnDrop {
            inner: &self.h.inner,
            keys: &self.h.keys,
            member: format!("i:{}:{}", hold.as_str(), owner.as_str()),
        });
        let target = self.h.target(LockKind::RwLock, &member);
        let name = &self.h.name;
        let acquired = acquire(&target, wait, || {
            attempt_once(servers, &self.h.keys, name, attempt)
        })
        .await?;
        let Some(won) = acquired else {
            return Ok(None);
        };
        if let Some(intent) = intent.as_mut() {
            intent.member.clear();
        }
        let id = (LockKind::RwLock, owner, member);
        Ok(Some(self.h.hold(id, won)))
    }
}

/// An RwLock's state at one moment, from [`RwLock::status`].
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct RwLockStatus {
    /// The lock name.
    pub name: String,
    /// The owner that writes, and when its last write hold ends; `None`
    /// when nobody writes.
    pub writer: Option<HoldStatus>,
    /// The read holds, soonest to end first: at most 100 (see
    /// [`reader_count`](RwLockStatus::reader_count) for all). An owner that
    /// read several times is listed once per hold.
    pub readers: Vec<HoldStatus>,
    /// How many read holds are live.
    pub reader_count: usize,
    /// Blocked writers waiting for the lock; while there are any, owners
    /// that hold nothing yet cannot start reading.
    pub waiting_writers: usize,
    /// The last fencing token issued for this name, if still kept: for the
    /// lease's TTL after it was issued, or the client's
    /// [`fence_memory`](crate::ClientBuilder::fence_memory) if longer.
    pub fence: Option<u64>,
}

/// One attempt, shaped for the shared wait loop.
async fn attempt_once(
    servers: &crate::servers::Servers,
    keys: &LockKeys,
    name: &str,
    attempt: RwAttempt<'_>,
) -> Result<Acquire> {
    match servers.rw_acquire(keys, attempt).await? {
        RwAcquire::Lock(Acquire::Held { remaining, .. }) if attempt.mode == Mode::Write => {
            // Retry well before our waiting entry (it lasts one TTL) expires.
            let refresh = attempt.ttl / 3;
            Ok(Acquire::Held {
                remaining: Some(remaining.map_or(refresh, |r| r.min(refresh))),
                unsettled: false,
                queued_until: None,
            })
        }
        RwAcquire::Lock(reply) => Ok(reply),
        RwAcquire::Upgrade => Err(Error::UpgradeRefused {
            name: name.to_owned(),
        }),
    }
}

/// Removes an RwLock entry in the background when dropped, unless its
/// `member` was cleared.
struct WithdrawOnDrop<'a> {
    inner: &'a Arc<Inner>,
    keys: &'a Arc<LockKeys>,
    member: String,
}

impl Drop for WithdrawOnDrop<'_> {
    fn drop(&mut self) {
        if !self.member.is_empty() {
            let member = std::mem::take(&mut self.member);
            self.inner.watchdog.release(OwnedLeaseId {
                kind: LockKind::RwLock,
                keys: Arc::clone(self.keys),
                hold: member,
                queued: None,
            });
        }
    }
}

/// A read hold on an [`RwLock`]; renewed while it lives.
///
/// Its lease is its own: renewing it, or its expiring, changes no other
/// reader's. Dropping the guard stops renewal and releases it in the
/// background.
///
/// A release left to a runtime that is shutting down is never sent; see
/// [`LockGuard`](crate::LockGuard) and [`Client::close`](crate::Client::close).
pub type ReadGuard = Guard<hold::Read>;

/// The write hold on an [`RwLock`]; renewed while it lives.
///
/// Dropping the guard stops renewal and releases it in the background.
///
/// A release left to a runtime that is shutting down is never sent; see
/// [`LockGuard`](crate::LockGuard) and [`Client::close`](crate::Client::close).
pub type WriteGuard = Guard<hold::Write>;

impl WriteGuard {
    /// Turns the write hold into a read hold in one step on the server:
    /// waiting readers may enter at once, and no writer can enter in
    /// between. The read guard keeps this guard's fence, TTL and watchdog
    /// setting.
    ///
    /// # Errors
    ///
    /// [`Error::Lost`](crate::Error::Lost) if the write hold had expired or was taken (nothing
    /// is held then); connection errors (the write hold is then released in
    /// the background).
    ///
    /// # Cancel safety
    ///
    /// If dropped, nothing stays held: the write hold, or the read hold it
    /// may have become, is released in the background.
    ///
    /// # Example
    ///
    /// ```no_run
    /// # async fn run(client: leasehold::Client) -> Result<(), leasehold::Error> {
    /// let write = client.rw_lock("catalog").write().await?;
    /// // ... update ...
    /// let read = write.downgrade().await?;
    /// // ... keep reading what was written, alongside other readers ...
    /// read.release().await?;
    /// # Ok(()) }
    /// ```
    pub async fn downgrade(self) -> Result<ReadGuard> {
        let lease = Arc::clone(&self.held.lease);
        let inner = self.held.inner().clone();
        if lease.is_lost() {
            return Err(self.held.lost_error());
        }
        let hold = Token::random();
        let read = Mode::Read.member(hold.as_str(), lease.token.as_str());
        let ttl = lease.snapshot().ttl;
        let mut pending = WithdrawOnDrop {
            inner: &inner,
            keys: &lease.keys,
            member: read.clone(),
        };
        let sent = Instant::now();
        // On an error the outcome is unknown: returning drops `pending` and
        // `self`, which release both holds in the background.
        let outcome = inner
            .servers
            .rw_downgrade(&lease.keys, &lease.hold, &read, lease.server_ttl(ttl))
            .await?;
        pending.member.clear();
        let (fence, watchdog) = (self.held.fence(), self.held.watchdog());
        let error = self.held.lost_error();
        // Either way the write hold is gone from the server: nothing to release.
        self.held.detach();
        match outcome {
            Owned::Done => {
                let mut next = Lease::new(
                    lease.name.clone(),
                    Arc::clone(&lease.keys),
                    LockKind::RwLock,
                    lease.token.clone(),
                    read,
                    ttl,
                    sent,
                );
                // hold_at_least counts from the write hold's acquisition.
                if let Some(until) = lease.kept_until() {
                    next = next.keep_until(until);
                }
                // The description moves to the read hold.
                next = next.described(lease.about.clone());
                let held = Held::new(&inner, next, fence, watchdog);
                describe_hold(&inner, &held.lease, lease.who());
                Ok(Guard::new(held, hold::Read))
            }
            gone @ (Owned::Missing | Owned::OtherOwner) => {
                lease.mark_lost(gone.lost_reason());
                Err(error)
            }
        }
    }
}
