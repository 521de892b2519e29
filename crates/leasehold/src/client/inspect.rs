//! What holds a name, found from what its key stores, for tools that
//! inspect locks without knowing how they were taken.

use crate::client::Client;
use crate::error::{Error, Result};
use crate::key::{glob_match, name_of_lock_key};
use crate::kind::LockKind;

/// Moves on to the next kind when the lock's key `lock` holds another type
/// (another kind's); a key of another type beside it (a fence, a queue) is
/// reported as it is.
fn or_other<T>(result: Result<T>, lock: &str) -> Result<Option<T>> {
    match result {
        Ok(t) => Ok(Some(t)),
        Err(Error::WrongType { key }) if key == lock => Ok(None),
        Err(e) => Err(e),
    }
}

impl Client {
    /// Which kind of lock holds `name` now, or `None` when nothing holds it
    /// (only live holds count; waiting writers count for an RwLock; a lock
    /// with a leader recorded is an [`Election`](LockKind::Election)). Reads
    /// only; each kind's `status` is asked in turn until one recognises
    /// what the name's key stores.
    ///
    /// # Errors
    ///
    /// Connection errors; [`Error::WrongType`] naming the key when the
    /// name's key holds data no lock of this library wrote, or a key beside
    /// it (its fence, queue, heartbeats or leader record) holds another type.
    ///
    /// # Example
    ///
    /// ```no_run
    /// # async fn run(client: leasehold::Client) -> Result<(), leasehold::Error> {
    /// if let Some(kind) = client.kind("catalog").await? {
    ///     println!("catalog is held as a {kind}");
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn kind(&self, name: &str) -> Result<Option<LockKind>> {
        let lock = crate::key::LockKeys::new(self.prefix(), name);
        let lock = lock.lock();
        if let Some(status) = or_other(self.lock(name).status().await, lock)? {
            if status.holder.is_none() {
                return Ok(None);
            }
            // An election's lease is a lock's, with its leader record
            // beside (a Redlock client has no elections).
            return match self.election(name).leader().await {
                Ok(Some(_)) => Ok(Some(LockKind::Election)),
                Ok(None) | Err(Error::Unsupported(_)) => Ok(Some(LockKind::Lock)),
                Err(e) => Err(e),
            };
        }
        if let Some(status) = or_other(self.reentrant_lock(name).status().await, lock)? {
            return Ok(status.owner.is_some().then_some(LockKind::Reentrant));
        }
        if let Some(status) = or_other(self.rw_lock(name).status().await, lock)? {
            let held =
                status.writer.is_some() || status.reader_count > 0 || status.waiting_writers > 0;
            return Ok(held.then_some(LockKind::RwLock));
        }
        // Its status reads the permit count from the holds, not from this 1.
        let status = self.semaphore(name, 1).status().await?;
        Ok((status.held > 0).then_some(LockKind::Semaphore))
    }

    /// What Redis stores at `key`: its type as `TYPE` names it (`"string"`,
    /// `"hash"`, `"list"`, `"set"`, `"zset"`, `"stream"`, or `"none"` when
    /// there is no key); on Redlock, the first node's that holds it. For
    /// tools that explain an [`Error::WrongType`], whose `key` this takes.
    /// Reads only; the user needs `+type`.
    ///
    /// # Errors
    ///
    /// Connection errors.
    ///
    /// # Example
    ///
    /// ```no_run
    /// # async fn run(client: leasehold::Client) -> Result<(), leasehold::Error> {
    /// if let Err(leasehold::Error::WrongType { key }) = client.lock("jobs").try_acquire().await {
    ///     println!("{key} holds a {}", client.key_type(&key).await?);
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn key_type(&self, key: &str) -> Result<String> {
        self.inner.servers.key_type(key).await
    }

    /// The names held under this client's prefix that match the glob
    /// `pattern` (`*` and `?`), of every kind, sorted by name. Like
    /// [`Client::list`], which lists plain locks with their status, it
    /// uses SCAN: a lock taken or released during the scan may or may not
    /// appear.
    ///
    /// # Errors
    ///
    /// Connection errors.
    ///
    /// # Example
    ///
    /// ```no_run
    /// # async fn run(client: leasehold::Client) -> Result<(), leasehold::Error> {
    /// for (name, kind) in client.list_kinds("*").await? {
    ///     println!("{kind:<10} {name}");
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn list_kinds(&self, pattern: &str) -> Result<Vec<(String, LockKind)>> {
        let prefix = self.prefix();
        let mut names = Vec::new();
        for stored in ["string", "hash", "zset"] {
            let keys = self
                .inner
                .servers
                .scan(&format!("{prefix}:{{*:lock"), stored)
                .await?;
            names.extend(
                keys.iter()
                    .filter_map(|key| name_of_lock_key(prefix, key))
                    .filter(|name| glob_match(pattern, name)),
            );
        }
        names.sort();
        names.dedup();
        let mut out = Vec::with_capacity(names.len());
        for name in names {
            // A name with a key of another type is no kind's: left out.
            match self.kind(&name).await {
                Ok(Some(kind)) => out.push((name, kind)),
                Ok(None) | Err(Error::WrongType { .. }) => {}
                Err(e) => return Err(e),
            }
        }
        Ok(out)
    }
}
