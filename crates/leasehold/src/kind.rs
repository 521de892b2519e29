//! The kinds of lock: one enum for the public API (what holds a name,
//! [`Client::kind`](crate::Client::kind)) and for the library's own use
//! (which scripts renew and release a lease). A leaf: it imports nothing.

/// The kinds of lock a name can be held as, told apart by what the server
/// stores under the name ([`Client::kind`](crate::Client::kind)); inside the
/// library, which primitive a lease belongs to, which decides the scripts
/// that renew and release it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
#[non_exhaustive]
pub enum LockKind {
    /// A [`Lock`](crate::Lock) or a [`FairLock`](crate::FairLock): a string
    /// key holding the owner token. Both store the same lease, so the
    /// server cannot tell them apart.
    Lock,
    /// A [`ReentrantLock`](crate::ReentrantLock): one hold in the owner's hash.
    Reentrant,
    /// An [`RwLock`](crate::RwLock): readers, a writer or waiting writers,
    /// one member each of the sorted set of holds.
    RwLock,
    /// A [`Semaphore`](crate::Semaphore): one member of the sorted set of
    /// permits.
    Semaphore,
    /// An [`Election`](crate::Election): a lease lock with its leader
    /// record (`:leader`), renewed and dropped with it.
    Election,
}

impl LockKind {
    /// A short lower-case name: `lock`, `reentrant`, `rwlock`, `semaphore`,
    /// `election`.
    pub fn as_str(self) -> &'static str {
        match self {
            LockKind::Lock => "lock",
            LockKind::Reentrant => "reentrant",
            LockKind::RwLock => "rwlock",
            LockKind::Semaphore => "semaphore",
            LockKind::Election => "election",
        }
    }
}

impl std::fmt::Display for LockKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}
