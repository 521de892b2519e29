//! An operator's way out of a stuck lock: [`Client::break_lease`] removes
//! whatever holds a name, whatever its token, for tools that break locks
//! by hand (`leasehold release --force`).

use std::time::Duration;

use crate::client::Client;
use crate::error::{Error, Result};
use crate::key::{LockKeys, validate_name};
use crate::kind::LockKind;
use crate::scripts::Owned;
use crate::token::redact;

/// What [`Client::break_lease`] removed.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct BrokenLease {
    /// The lock name.
    pub name: String,
    /// The kind of lock that held the name.
    pub kind: LockKind,
    /// The holds removed: one for a lock, an election or a reentrant lock
    /// (its owner), one per read or write hold of an RwLock, one per
    /// permit of a semaphore.
    pub holds: Vec<BrokenHold>,
    /// The name's last fence, kept: the next holder's fence is above it.
    pub fence: Option<u64>,
}

/// One hold [`Client::break_lease`] removed.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct BrokenHold {
    /// The first 8 characters of the holder's id, as a status shows it:
    /// the owner token of a lock or an election, the owner id of a
    /// reentrant lock or of an RwLock hold, the permit's token of a
    /// semaphore.
    pub holder: String,
    /// How long its lease had left; `None` if it had no expiry.
    pub remaining: Option<Duration>,
    /// How many holds it stood for: a reentrant owner's count, else 1.
    pub holds: usize,
}

impl Client {
    /// **Breaks mutual exclusion for the holder**: removes whatever holds
    /// `name` now, whatever its owner token, for an operator freeing a
    /// lock whose holder is stuck (a hung process, a lost token). The
    /// holder's client is told at once: the break publishes the holds it
    /// broke on the prefix's `<prefix>:broken` channel, which every client
    /// subscribes to at its first acquisition, and the guard of each is lost
    /// at once ([`LostReason::Broken`](crate::LostReason::Broken): its
    /// `lost()` resolves, `leasehold run` stops its command). A holder
    /// that does not hear it (its connection dropped at that moment, it is
    /// stuck, or the break came before its client's subscription, which is
    /// made in the background beside its first acquisition) learns it at
    /// its next renewal, and meanwhile the next
    /// holder may run beside it. Only fencing tokens
    /// protect a resource from the broken holder's late writes; the name's
    /// last fence is kept (with its expiry), so the next holder's fence is
    /// above the broken one's whatever the client's fence memory.
    ///
    /// A lock or an election is released as its holder would release it
    /// (an election's leader record first): handed to its first live
    /// waiter at once, who wakes without waiting for its timer. A
    /// reentrant lock loses its owner with all its holds; an RwLock every
    /// read and write hold (waiting writers stay, and go first); a
    /// semaphore every permit; their waiters are woken.
    ///
    /// The break removes exactly the holds it read first (a lock's token, a
    /// reentrant owner's tenure by its fence, each RwLock hold or permit by
    /// its id), so the same call delivered twice (a driver re-sends a call
    /// whose connection dropped before the reply) never breaks a holder
    /// that came after it; a hold taken between the read and the break is
    /// not broken either. Returns `None`, having changed nothing, when
    /// nothing held the name, or when none of the holds read first was
    /// still held at the break (released, expired, or handed on: call again
    /// to break the new holder).
    ///
    /// # Errors
    ///
    /// [`Error::InvalidArgument`] for a bad name; [`Error::WrongType`]
    /// naming the key when a key of the name holds data no lock of this
    /// library wrote (a string at its key that is not a token included),
    /// which is left untouched;
    /// [`Error::Unsupported`] for a reentrant lock, RwLock or semaphore on
    /// a Redlock client; connection errors.
    ///
    /// # Cancel safety
    ///
    /// Dropping the future may leave the break done or not; call
    /// [`Client::kind`] to see what holds the name now.
    ///
    /// # Example
    ///
    /// ```no_run
    /// # async fn run(client: leasehold::Client) -> Result<(), leasehold::Error> {
    /// if let Some(broken) = client.break_lease("nightly-backup").await? {
    ///     for hold in &broken.holds {
    ///         println!("broke the {} held by {}…", broken.kind, hold.holder);
    ///     }
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn break_lease(&self, name: &str) -> Result<Option<BrokenLease>> {
        validate_name(name)?;
        let keys = LockKeys::new(self.prefix(), name);
        let servers = &self.inner.servers;
        match servers.lock_status(&keys).await {
            Ok(status) => {
                let Some(token) = status.holder else {
                    return Ok(None);
                };
                // A string no lock wrote: breaking it "as its holder" would
                // delete someone else's key (issue 36).
                if !crate::token::is_random_token(&token) {
                    return Err(Error::WrongType {
                        key: keys.lock().to_owned(),
                    });
                }
                let election = matches!(self.election(name).leader().await, Ok(Some(_)));
                match servers.lock_break(&keys, &token, election).await? {
                    Owned::Done => {
                        self.tell_holders(&keys, &[token.as_str()]).await;
                        Ok(Some(BrokenLease {
                            name: name.to_owned(),
                            kind: if election {
                                LockKind::Election
                            } else {
                                LockKind::Lock
                            },
                            holds: vec![BrokenHold {
                                holder: redact(&token).to_owned(),
                                remaining: status.remaining,
                                holds: 1,
                            }],
                            fence: status.fence,
                        }))
                    }
                    Owned::Missing | Owned::OtherOwner => Ok(None),
                }
            }
            // Not a lease lock's string: one of the sets of holds. (A
            // foreign key beside it is named as it is.)
            Err(Error::WrongType { key }) if key == keys.lock() => {
                // Read first, then break exactly what was read: a break
                // re-sent by a driver (a connection dropped before the reply)
                // then finds none of it, and never breaks a holder that came
                // after (issue 32).
                let read = servers.lease_break(&keys, None).await?;
                if read.holds.is_empty() {
                    return Ok(None);
                }
                let names = read.names();
                let broken = servers
                    .lease_break(&keys, Some((read.kind.as_str(), &names)))
                    .await?;
                let kind = match broken.kind.as_str() {
                    "reentrant" => LockKind::Reentrant,
                    "rwlock" => LockKind::RwLock,
                    "semaphore" => LockKind::Semaphore,
                    // Gone, or a lock again, since the status read.
                    _ => return Ok(None),
                };
                if broken.holds.is_empty() {
                    return Ok(None);
                }
                let leases: Vec<&str> = broken
                    .holds
                    .iter()
                    .flat_map(|hold| hold.leases.iter().map(String::as_str))
                    .collect();
                self.tell_holders(&keys, &leases).await;
                let holds = broken
                    .holds
                    .iter()
                    .map(|hold| BrokenHold {
                        holder: redact(holder_of(kind, &hold.id)).to_owned(),
                        remaining: hold.left,
                        holds: hold.count,
                    })
                    .collect();
                Ok(Some(BrokenLease {
                    name: name.to_owned(),
                    kind,
                    holds,
                    fence: broken.fence,
                }))
            }
            Err(e) => Err(e),
        }
    }
}

impl Client {
    /// Tells the clients of the holds broken (`holds`: the ids their leases
    /// know them by) on the prefix's break channel, so that each marks its
    /// guard lost at once ([`LostReason::Broken`](crate::LostReason::Broken)).
    /// The break is done whatever happens here: a notice that does not go
    /// out is logged, and the holder then learns it at its next renewal.
    async fn tell_holders(&self, keys: &LockKeys, holds: &[&str]) {
        let channel = crate::key::broken_channel(self.prefix());
        let notice = crate::watchdog::broken_notice(keys.lock(), holds);
        if let Err(e) = self.inner.servers.publish(&channel, &notice).await {
            tracing::warn!(
                %channel,
                error = %e,
                "the lease was broken, but its holder could not be told; it learns it at its next \
                 renewal"
            );
        }
    }
}

/// The holder's id in what `lease_break.lua` answers for a hold: a
/// reentrant lock's owner as it is; an RwLock member `<r|w>:<hold>:<owner>`
/// its owner; a semaphore member `<permits>:<hold>` its hold (hold ids
/// have no ':').
fn holder_of(kind: LockKind, member: &str) -> &str {
    match kind {
        LockKind::RwLock => member.splitn(3, ':').nth(2).unwrap_or(member),
        LockKind::Semaphore => member.split_once(':').map_or(member, |(_, hold)| hold),
        _ => member,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_holder_is_read_from_each_kind_of_member() {
        assert_eq!(holder_of(LockKind::RwLock, "r:h1:owner:x"), "owner:x");
        assert_eq!(holder_of(LockKind::Semaphore, "3:h1"), "h1");
        assert_eq!(holder_of(LockKind::Reentrant, "own:er"), "own:er");
    }
}
