//! The resource side of fencing: a write to a Redis key that is refused
//! when it comes from a holder whose lease has been superseded.
//!
//! A lease cannot stop a paused holder from writing late (a GC pause, a
//! frozen VM, a request that sat in a socket): it wakes believing it still
//! holds the lock. Every acquisition's [`fence`](crate::LockGuard::fence) is
//! strictly greater than every earlier one of that lock name, so a
//! resource that remembers the highest fence it has seen, and refuses
//! lower ones, turns such a late write into an error instead of a lost
//! update.
//!
//! [`set`] does that for a Redis key, in one atomic script ([`SET_SCRIPT`]):
//! the value is written only if the writer's fence is at least the highest
//! seen for the key (equal is allowed: one holder may write many times), and
//! the fence is kept beside it, at [`fence_key`]. The resource may be any
//! Redis, not necessarily the one the locks live on; the script uses no
//! leasehold key and needs no leasehold client, so any Redis client can run
//! it. From the shell:
//!
//! ```sh
//! redis-cli EVAL "$(cat crates/leasehold/src/scripts/fenced_set.lua)" 2 \
//!     report:latest '{report:latest}:fence' "$LEASEHOLD_FENCE" 'the value'
//! # a stale fence:
//! # (error) STALE fence 17 is below 42, the highest seen for this key: ...
//! ```
//!
//! (`leasehold run` passes the fence to its command as `LEASEHOLD_FENCE`.)
//!
//! Fences from a Redlock client are comparable across holders only as far
//! as its nodes' clocks are (each node issues its own, the guard keeps the
//! highest of a quorum), and an equal fence passes: two Redlock holders
//! that met equal fences would both be let through. On one server,
//! Sentinel or a cluster every acquisition's fence is strictly greater
//! than the ones before as long as the server's clock does not step back
//! (see `scripts/prelude.lua`); the holds of one reentrant owner share one
//! fence.
//!
//! For a read-modify-write, read with [`get`]: it claims the key with the
//! reader's fence before reading, so that a stale holder's write cannot
//! land between this holder's read and its write ([`set`] alone checks the
//! fence only when writing).
//!
//! The fence key must live as long as the value and as long as a stale
//! writer might still write: it has no expiry unless one is asked for. A
//! [`set`] with an expiry gives both keys that one; a [`get`] with one makes
//! the fence key last at least that long (never shorter than it would
//! have); a [`get`] without one leaves the fence key with no expiry, so
//! where the values expire, claim with an expiry too, or one fence key per
//! value stays behind. Writers of one key must all go through the fence
//! check; a plain `SET` bypasses it.
//!
//! For SQL the same idea is a condition on the row; see the README's
//! fencing recipe and `examples/fenced_postgres.rs`.

use std::sync::LazyLock;
use std::time::Duration;

use redis::ToRedisArgs;

use crate::error::{Error, Result};

/// The fenced write as a standalone Lua script, for any Redis client:
/// `EVAL <script> 2 <key> <fence key> <fence> <value> [<expiry ms>]`.
///
/// It sets `<key>` to `<value>` and `<fence key>` to `<fence>` if `<fence>`
/// is at least the number stored at `<fence key>` (or none is), and returns
/// `<fence>`; otherwise it changes nothing and replies with an error that
/// starts with `STALE`. Both keys must be in one cluster slot (see
/// [`fence_key`]). With `<expiry ms>`, both keys expire after that long.
///
/// ```
/// assert!(leasehold::fenced::SET_SCRIPT.contains("KEYS[2]"));
/// ```
pub const SET_SCRIPT: &str = include_str!("scripts/fenced_set.lua");

static SCRIPT: LazyLock<redis::Script> = LazyLock::new(|| redis::Script::new(SET_SCRIPT));

/// The fenced read as a standalone Lua script, for any Redis client:
/// `EVAL <script> 2 <key> <fence key> <fence> [<claim ms>]`. If `<fence>`
/// is at least the number stored at `<fence key>` (or none is), it stores
/// `<fence>` there and returns `<key>`'s value; otherwise it changes
/// nothing and replies with an error that starts with `STALE`. With
/// `<claim ms>`, the fence key expires no sooner than that (nor sooner than
/// it would have); without, it has no expiry. See [`get`]. Redis 6.0 or
/// later.
///
/// ```
/// assert!(leasehold::fenced::GET_SCRIPT.contains("KEYS[2]"));
/// ```
pub const GET_SCRIPT: &str = include_str!("scripts/fenced_get.lua");

static GET: LazyLock<redis::Script> = LazyLock::new(|| redis::Script::new(GET_SCRIPT));

/// Where [`set`] keeps the highest fence seen for `key`: in the same
/// cluster slot as `key`.
///
/// `key` with a hash tag (`orders:{42}`) gives `key` + `:fence`; a key
/// without one gives `{key}:fence`, whose tag is the whole key. A key
/// that is one hash tag and nothing else (`{42}`) gives `key` +
/// `:fence:tag`, since `{42}:fence` is the fence key of `42`. A key
/// without a hash tag that contains `}` cannot be tagged that way and
/// gives `key:fence`, which a cluster refuses (`CROSSSLOT`): give such a
/// key a hash tag. No two keys share a fence key.
///
/// ```
/// use leasehold::fenced::fence_key;
/// assert_eq!(fence_key("report:latest"), "{report:latest}:fence");
/// assert_eq!(fence_key("orders:{42}:total"), "orders:{42}:total:fence");
/// assert_eq!(fence_key("{42}"), "{42}:fence:tag");
/// ```
pub fn fence_key(key: &str) -> String {
    if key.starts_with('{') && key.find('}') == Some(key.len() - 1) {
        // `{x}`: `{x}:fence` is the fence key of `x`. A fence key of the
        // other forms ends with `:fence`, so this one cannot be theirs.
        format!("{key}:fence:tag")
    } else if has_hash_tag(key) || key.contains('}') {
        format!("{key}:fence")
    } else {
        format!("{{{key}}}:fence")
    }
}

/// Whether Redis Cluster hashes only part of `key`: a `{` followed later
/// by a `}` with at least one byte between them.
fn has_hash_tag(key: &str) -> bool {
    key.find('{').is_some_and(|open| {
        key[open + 1..]
            .find('}')
            .is_some_and(|close_after| close_after > 0)
    })
}

/// Sets `key` to `value` if `fence` is at least the highest fence seen for
/// `key`, and keeps `fence` as the highest (at [`fence_key`]`(key)`); with
/// `expiry`, both keys expire after it. One atomic script ([`SET_SCRIPT`])
/// on `conn`, which may be any Redis connection (it need not be the
/// locks' server): an async connection of [`crate::redis`], the driver
/// leasehold re-exports, so its version is leasehold's.
///
/// ```no_run
/// # async fn run(client: leasehold::Client) -> Result<(), leasehold::Error> {
/// use leasehold::{Error, fenced};
///
/// let redis = leasehold::redis::Client::open("redis://127.0.0.1:6379").map_err(Error::Redis)?;
/// let mut conn = redis.get_multiplexed_async_connection().await.map_err(Error::Redis)?;
/// let guard = client.lock("report").acquire().await?;
/// // ... long work; the lease may be lost meanwhile ...
/// match fenced::set(&mut conn, "report:latest", guard.fence(), "done", None).await {
///     Ok(()) => guard.release().await?,
///     Err(Error::StaleFence { highest, .. }) => eprintln!("superseded by fence {highest}"),
///     Err(e) => return Err(e),
/// }
/// # Ok(()) }
/// ```
///
/// # Errors
///
/// [`Error::StaleFence`] when a higher fence has been seen for `key`
/// (nothing is changed); [`Error::InvalidArgument`] for an expiry under a
/// millisecond; [`Error::WrongType`] naming the key when `key` holds another
/// type than a string, or its fence key another type or a string that is
/// not a fence (nothing is changed: neither key is written, and the one
/// named keeps its value and its expiry); other Redis and connection errors.
///
/// # Cancel safety
///
/// If dropped, the write may or may not have happened.
pub async fn set<C, V>(
    conn: &mut C,
    key: &str,
    fence: u64,
    value: V,
    expiry: Option<Duration>,
) -> Result<()>
where
    C: redis::aio::ConnectionLike,
    V: ToRedisArgs,
{
    let reply: redis::RedisResult<String> = SCRIPT
        .key(key)
        .key(fence_key(key))
        .arg(fence)
        .arg(value)
        .arg(expiry_ms(key, expiry)?)
        .invoke_async(conn)
        .await;
    reply
        .map(drop)
        .map_err(|e| stale_or(e, key, fence, "the connection given to fenced::set"))
}

/// Reads `key` for the holder of `fence`, claiming it first: `fence`
/// becomes the highest seen for `key` (at [`fence_key`]`(key)`), so every
/// later [`set`] with a lower fence is refused for as long as the claim
/// lasts. One atomic script ([`GET_SCRIPT`]) on `conn`, as for [`set`].
///
/// `expiry`: how long the claim lasts at least (the fence key expires no
/// sooner, nor sooner than it would have); `None` keeps the fence with no
/// expiry. Where the keys are written with an expiry, claim for at least as
/// long as a stale writer could still write: a claim that expired lets a
/// stale write through again.
///
/// Use it for a read-modify-write under the lock. [`set`] alone checks
/// the fence only when writing: a stale holder's write could then land
/// between this holder's read and its write, and both would build on the
/// same value (a lost update). Read with `get`, and that stale write is
/// refused.
///
/// ```no_run
/// # async fn run(client: leasehold::Client) -> Result<(), leasehold::Error> {
/// use leasehold::{Error, fenced};
///
/// let redis = leasehold::redis::Client::open("redis://127.0.0.1:6379").map_err(Error::Redis)?;
/// let mut conn = redis.get_multiplexed_async_connection().await.map_err(Error::Redis)?;
/// let guard = client.lock("ledger").acquire().await?;
/// let fence = guard.fence();
/// let total: u64 = fenced::get(&mut conn, "ledger:total", fence, None).await?.unwrap_or(0);
/// fenced::set(&mut conn, "ledger:total", fence, total + 1, None).await?;
/// guard.release().await?;
/// # Ok(()) }
/// ```
///
/// # Errors
///
/// [`Error::StaleFence`] when a higher fence has been seen for `key`
/// (nothing is changed); [`Error::InvalidArgument`] for an expiry under a
/// millisecond; [`Error::WrongType`] naming the key when `key` holds another
/// type than a string, or its fence key another type or a string that is
/// not a fence (nothing is changed: neither key is written, and the one
/// named keeps its value and its expiry); other Redis and connection errors.
///
/// # Cancel safety
///
/// If dropped, the claim may or may not have happened.
pub async fn get<C, T>(
    conn: &mut C,
    key: &str,
    fence: u64,
    expiry: Option<Duration>,
) -> Result<Option<T>>
where
    C: redis::aio::ConnectionLike,
    T: redis::FromRedisValue,
{
    let reply: redis::RedisResult<Option<T>> = GET
        .key(key)
        .key(fence_key(key))
        .arg(fence)
        .arg(expiry_ms(key, expiry)?)
        .invoke_async(conn)
        .await;
    reply.map_err(|e| stale_or(e, key, fence, "the connection given to fenced::get"))
}

/// `expiry` in milliseconds for the scripts ('' for none).
fn expiry_ms(key: &str, expiry: Option<Duration>) -> Result<String> {
    match expiry {
        None => Ok(String::new()),
        Some(d) if d.as_millis() == 0 => Err(Error::InvalidArgument(format!(
            "expiry of fenced key {key:?} must be at least 1 ms, got {d:?}"
        ))),
        Some(d) => Ok(d.as_millis().to_string()),
    }
}

/// `e` as [`Error::StaleFence`] when it is a `STALE` reply, else as a Redis
/// error of the call `what`.
fn stale_or(e: redis::RedisError, key: &str, fence: u64, what: &str) -> Error {
    if e.code() == Some("STALE") {
        Error::StaleFence {
            key: key.to_owned(),
            fence,
            highest: highest_in(&e.to_string()).unwrap_or(u64::MAX),
        }
    } else {
        Error::from_redis(e, what, key)
    }
}

/// The highest fence named in a `STALE` reply: the number after "is below".
fn highest_in(reply: &str) -> Option<u64> {
    let rest = &reply[reply.find("is below ")? + "is below ".len()..];
    let digits = rest.split(|c: char| !c.is_ascii_digit()).next()?;
    digits.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::key::slot;

    #[test]
    fn the_highest_fence_is_read_from_a_stale_reply() {
        let reply = "STALE: fence 17 is below 42, the highest seen for this key: a newer";
        assert_eq!(highest_in(reply), Some(42));
        assert_eq!(highest_in("something else"), None);
    }

    #[test]
    fn hash_tags_are_found_as_cluster_finds_them() {
        assert!(has_hash_tag("a{b}c"));
        assert!(!has_hash_tag("a{}b"));
        assert!(!has_hash_tag("a}b{"));
        assert!(!has_hash_tag("plain"));
    }

    /// Issue 24, item 5: `x` and `{x}` (a key that is one hash tag and
    /// nothing else) are different keys and must not share a fence key.
    #[test]
    fn a_key_and_the_same_key_as_a_hash_tag_have_their_own_fence_keys() {
        assert_ne!(fence_key("x"), fence_key("{x}"));
        assert_eq!(fence_key("x"), "{x}:fence");
        assert_eq!(fence_key("{x}:total"), "{x}:total:fence");
        assert_ne!(fence_key(""), fence_key("{}"));
    }

    proptest::proptest! {
        /// No two keys share a fence key.
        #[test]
        fn fence_keys_differ_for_different_keys(
            a in "[{}a-c:]{1,8}",
            b in "[{}a-c:]{1,8}",
        ) {
            if a != b {
                proptest::prop_assert_ne!(fence_key(&a), fence_key(&b), "{} {}", a, b);
            }
        }

        #[test]
        fn a_fence_key_shares_its_keys_slot(key in "\\PC{1,40}|[{}a-c:]{1,12}") {
            let fence = fence_key(&key);
            // The one case left to Redis to refuse: no tag, but a `}`.
            if has_hash_tag(&key) || !key.contains('}') {
                proptest::prop_assert_eq!(slot(&key), slot(&fence), "{} {}", key, fence);
            }
        }
    }
}
