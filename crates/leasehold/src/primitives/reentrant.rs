//! The reentrant lock: one owner at a time, who may acquire it again and again.

use std::sync::Arc;
use std::time::Duration;

use crate::acquire::acquire;
use crate::error::{Error, Result};
use crate::inner::Inner;
use crate::key::{validate_name, validate_owner};
use crate::kind::LockKind;
use crate::primitives::guard::{Guard, hold};
use crate::primitives::handle::{Handle, handle_api, owner_api};
use crate::scripts::Owned;
use crate::token::{Token, redact};

/// A handle to one named reentrant lock; made by [`Client::reentrant_lock`](crate::Client::reentrant_lock).
///
/// The lock belongs to an *owner*, a string you choose with
/// [`owner`](ReentrantLock::owner): every handle with the same owner id may
/// acquire it while that owner holds it, from any task or process. Each
/// acquisition is one hold with its own [`ReentrantGuard`]; the lock is
/// free again when every hold is released (or has expired). A handle
/// without an owner id is not reentrant: each of its acquisitions is its
/// own owner, so its clones exclude each other as any two holders do (the
/// crate docs' "Who holds a lock").
///
/// Re-entries share the fence issued when the owner took the free lock.
/// Each hold has its own expiry on the server (its TTL from its last
/// acquisition or renewal): a hold nobody renews any more (its process
/// crashed) ends on its own, however long the owner's other holds last,
/// and once none is live the lock is free. The key's own expiry only ever
/// grows, so a hold with a short TTL never cuts short another hold of the
/// same owner.
///
/// # Example
///
/// ```no_run
/// # async fn run(client: leasehold::Client) -> Result<(), leasehold::Error> {
/// let lock = client.reentrant_lock("orders:42").owner("job-7");
/// let outer = lock.acquire().await?;
/// let inner = lock.acquire().await?; // same owner: no waiting
/// assert_eq!(inner.fence(), outer.fence());
/// inner.release().await?;
/// outer.release().await?; // the last hold frees the lock
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct ReentrantLock {
    h: Handle,
    owner: Option<Token>,
}

handle_api!(ReentrantLock, "acquire");
owner_api!(ReentrantLock, "client.reentrant_lock(\"orders:42\")");

impl ReentrantLock {
    pub(crate) fn new(inner: Arc<Inner>, name: String) -> ReentrantLock {
        ReentrantLock {
            h: Handle::new(inner, name),
            owner: None,
        }
    }

    /// Takes the lock, or one more hold on it if this owner holds it
    /// already, waiting up to [`ReentrantLock::wait`] for another owner to
    /// release.
    ///
    /// # Errors
    ///
    /// [`Error::Timeout`](crate::Error::Timeout) when the wait ran out; [`Error::InvalidArgument`](crate::Error::InvalidArgument)
    /// for a bad name, owner or TTL; [`Error::WrongType`](crate::Error::WrongType) when the name is in
    /// use by another kind of lock (a [`Lock`](crate::Lock) or
    /// [`RwLock`](crate::RwLock)); connection errors if Redis stayed
    /// unreachable until the wait ran out.
    ///
    /// # Cancel safety
    ///
    /// Dropping the future leaves nothing held: if an attempt may have
    /// succeeded on the server, that hold is released in the background
    /// (the owner's other holds stay).
    ///
    /// # Example
    ///
    /// ```no_run
    /// # async fn run(client: leasehold::Client) -> Result<(), leasehold::Error> {
    /// let guard = client.reentrant_lock("orders:42").owner("job-7").acquire().await?;
    /// guard.release().await?;
    /// # Ok(()) }
    /// ```
    pub async fn acquire(&self) -> Result<ReentrantGuard> {
        self.acquire_within(Some(self.h.wait))
            .await?
            .ok_or_else(|| self.h.timeout())
    }

    crate::primitives::run::run_api!(
        run,
        acquire,
        "hold",
        "client.reentrant_lock(\"orders:42\").owner(\"job-7\")"
    );

    /// As [`ReentrantLock::acquire`], without waiting: `Ok(None)` when
    /// another owner holds the lock.
    ///
    /// # Errors
    ///
    /// As [`ReentrantLock::acquire`], except [`Error::Timeout`](crate::Error::Timeout).
    ///
    /// # Cancel safety
    ///
    /// As [`ReentrantLock::acquire`].
    ///
    /// # Example
    ///
    /// ```no_run
    /// # async fn run(client: leasehold::Client) -> Result<(), leasehold::Error> {
    /// if let Some(guard) = client.reentrant_lock("orders:42").try_acquire().await? {
    ///     guard.release().await?;
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn try_acquire(&self) -> Result<Option<ReentrantGuard>> {
        self.acquire_within(None).await
    }

    /// Gives back one hold of `owner`, for holders that kept only the owner
    /// id. The last hold frees the lock and wakes waiters. If a guard of
    /// that owner still lives, the hold may be its own: it will find it
    /// lost at its next renewal or release.
    ///
    /// One call gives back one hold, also when a cluster's driver runs it
    /// twice (it re-sends a call whose connection dropped before the reply
    /// came back): the call leaves a record of its outcome, in the lock's
    /// slot, that expires after a minute, and a second run answers from it.
    ///
    /// # Errors
    ///
    /// [`Error::NotOwner`](crate::Error::NotOwner) when another owner holds the lock (nothing is
    /// changed); [`Error::Lost`](crate::Error::Lost) when nobody holds it; connection errors.
    ///
    /// # Example
    ///
    /// ```no_run
    /// # async fn run(client: leasehold::Client) -> Result<(), leasehold::Error> {
    /// client.reentrant_lock("orders:42").release_by_token("job-7").await?;
    /// # Ok(()) }
    /// ```
    pub async fn release_by_token(&self, owner: &str) -> Result<()> {
        validate_name(&self.h.name)?;
        validate_owner(owner)?;
        let call = Token::random();
        let servers = &self.h.inner.servers;
        match servers
            .reentrant_release_any(&self.h.keys, owner, call.as_str())
            .await?
        {
            Owned::Done => Ok(()),
            Owned::Missing => Err(Error::Lost {
                name: self.h.name.clone(),
            }),
            Owned::OtherOwner => Err(Error::NotOwner {
                name: self.h.name.clone(),
            }),
        }
    }

    /// Reads which owner holds the lock, with how many holds, for how much
    /// longer, and its fencing token. Changes nothing.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidArgument`](crate::Error::InvalidArgument) for a bad name; [`Error::WrongType`](crate::Error::WrongType) when
    /// the name is in use by another kind of lock; [`Error::Unsupported`](crate::Error::Unsupported) on
    /// a Redlock client; connection errors.
    ///
    /// # Example
    ///
    /// ```no_run
    /// # async fn run(client: leasehold::Client) -> Result<(), leasehold::Error> {
    /// let status = client.reentrant_lock("orders:42").status().await?;
    /// if let Some(owner) = &status.owner {
    ///     println!("{owner}… holds it {} times, {:?} left", status.holds, status.remaining);
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn status(&self) -> Result<ReentrantStatus> {
        validate_name(&self.h.name)?;
        let stored = self.h.inner.servers.reentrant_status(&self.h.keys).await?;
        Ok(ReentrantStatus {
            name: self.h.name.clone(),
            owner: stored.owner.as_deref().map(|o| redact(o).to_owned()),
            holds: stored.holds,
            remaining: stored.remaining,
            fence: stored.fence,
        })
    }

    async fn acquire_within(&self, wait: Option<Duration>) -> Result<Option<ReentrantGuard>> {
        self.h.validate()?;
        let owner_token = self.acquisition_owner();
        validate_owner(owner_token.as_str())?;
        let servers = &self.h.inner.servers;
        let hold = Token::random();
        let owner = owner_token.as_str();
        let target = self.h.target(LockKind::Reentrant, hold.as_str());
        let acquired = acquire(&target, wait, || {
            let memory = self.h.fence_memory();
            let ttl = self.h.server_ttl();
            servers.reentrant_acquire(&self.h.keys, owner, hold.as_str(), ttl, memory)
        })
        .await?;
        Ok(acquired.map(|won| {
            let id = (
                LockKind::Reentrant,
                owner_token.clone(),
                hold.as_str().to_owned(),
            );
            Guard::new(self.h.hold(id, won), hold::Reentrant)
        }))
    }
}

/// A reentrant lock's state at one moment, from [`ReentrantLock::status`].
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct ReentrantStatus {
    /// The lock name.
    pub name: String,
    /// The first 8 characters of the owner id, or `None` when free. Owner
    /// ids are chosen by users and may be guessable, and anyone who knows
    /// one can take and release the lock as that owner, so it is never
    /// shown whole.
    pub owner: Option<String>,
    /// How many live holds the owner has (each acquisition is one; a hold
    /// past its own expiry does not count); 0 when free.
    pub holds: usize,
    /// The lock's remaining lease (shared by the owner's holds), or `None`
    /// when free.
    pub remaining: Option<Duration>,
    /// The fencing token of the owner's holds while held; when free, the
    /// last one issued for this name, if still kept: for the lease's TTL
    /// after it was issued, or the client's
    /// [`fence_memory`](crate::ClientBuilder::fence_memory) if longer.
    pub fence: Option<u64>,
}

/// One hold on a [`ReentrantLock`]; renewed while it lives.
///
/// [`token`](ReentrantGuard::token) is the owner id. Dropping the guard
/// stops its renewal and gives back its hold in the background; the lock is
/// free once every hold of the owner is given back.
///
/// A release left to a runtime that is shutting down is never sent; see
/// [`LockGuard`](crate::LockGuard) and [`Client::close`](crate::Client::close).
pub type ReentrantGuard = Guard<hold::Reentrant>;
