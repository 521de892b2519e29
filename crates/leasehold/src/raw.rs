//! Not part of the API, and under no semver promise: the lock's two
//! scripts exactly as a client sends them (every key, every argument), for
//! `leasehold bench`'s raw floor, which runs them on a plain redis-rs
//! connection to measure what the library adds. Keeping this here, made by
//! the same functions the client calls, means the floor can never drift
//! from what the library really sends. Also every script's text as the
//! client loads it ([`script_source`]), for the script contract tests.

use std::time::Duration;

use redis::ScriptInvocation;

use crate::key::{LockKeys, validate_name};
use crate::scripts::{self, Queueing, Spread};

/// The acquire and release calls of one lock name, from one connection id.
#[derive(Debug)]
pub struct LockCalls {
    keys: LockKeys,
    connection: String,
}

impl LockCalls {
    /// The calls for the lock `name` under `prefix`, as sent by a client
    /// whose connection id is `connection` (it names hand-off channels).
    ///
    /// # Errors
    ///
    /// [`Error::InvalidArgument`](crate::Error::InvalidArgument) for a name
    /// a client would refuse.
    pub fn new(prefix: &str, name: &str, connection: &str) -> crate::error::Result<LockCalls> {
        validate_name(name)?;
        Ok(LockCalls {
            keys: LockKeys::new(prefix, name),
            connection: connection.to_owned(),
        })
    }

    /// An attempt that does not wait (so never queues), as on one server
    /// or on one Redlock node: the two send the same call (`redlock_node`
    /// changes nothing; fences are issued alike). Replies `[1, fence]` when
    /// `token` holds the lease, `[0, pttl]` otherwise.
    pub fn acquire(
        &self,
        token: &str,
        ttl: Duration,
        _redlock_node: bool,
    ) -> ScriptInvocation<'static> {
        scripts::lock_acquire_call(
            &self.keys,
            token,
            ttl,
            Queueing::No,
            false,
            ttl,
            &self.connection,
            false,
        )
    }

    /// A release by `token`, publishing by PUBLISH as on one server or a
    /// Redlock node (a cluster with sharded pub/sub sends SPUBLISH), and
    /// dropping the name's last fence with the lease (the default client).
    /// Replies 1 released, 0 missing, -1 another owner's.
    pub fn release(&self, token: &str, redlock_node: bool) -> ScriptInvocation<'static> {
        scripts::lock_release_call(
            &self.keys,
            token,
            spread(redlock_node),
            &self.connection,
            "0",
            true,
        )
    }
}

fn spread(redlock_node: bool) -> Spread {
    if redlock_node {
        Spread::Quorum
    } else {
        Spread::One { queued: None }
    }
}

/// The script `name` (its file's name without `.lua`, e.g. `lock_acquire`)
/// exactly as the client loads it: the shared prelude included. For the
/// script contract tests, so they run what ships. `None` for an unknown
/// name.
pub fn script_source(name: &str) -> Option<String> {
    scripts::source(name)
}
