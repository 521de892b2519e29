//! Key and channel names. Pure: no I/O.
//!
//! Every key and channel of one lock is `<prefix>:{<tag>}...`, so they share
//! one cluster hash tag and every script touches one slot. The tag is the
//! lock name itself when the name holds no `{` or `}`; otherwise it is a
//! hash of the name and the name follows the tag, so distinct names never
//! share a key.

use crate::error::{Error, Result};

/// Longest accepted lock name, in bytes.
pub(crate) const MAX_NAME_LEN: usize = 512;
/// Longest accepted key prefix, in bytes.
pub(crate) const MAX_PREFIX_LEN: usize = 128;

/// Checks an owner id: non-empty and at most [`MAX_NAME_LEN`] bytes.
pub(crate) fn validate_owner(owner: &str) -> Result<()> {
    if owner.is_empty() || owner.len() > MAX_NAME_LEN {
        return Err(Error::InvalidArgument(format!(
            "owner id must be 1 to {MAX_NAME_LEN} bytes, got {}",
            owner.len()
        )));
    }
    Ok(())
}

/// Checks a lock name: non-empty and at most [`MAX_NAME_LEN`] bytes.
pub(crate) fn validate_name(name: &str) -> Result<()> {
    if name.is_empty() {
        return Err(Error::InvalidArgument(
            "lock name is empty: give every lock a name, e.g. \"orders:42\"".into(),
        ));
    }
    if name.len() > MAX_NAME_LEN {
        return Err(Error::InvalidArgument(format!(
            "lock name is {} bytes long, over the limit of {MAX_NAME_LEN}: use a shorter name \
             (for example a hash of the long one)",
            name.len()
        )));
    }
    Ok(())
}

/// Checks a key prefix: non-empty, short, and without `{`, `}` or whitespace,
/// which would change which part of a key Redis Cluster hashes.
pub(crate) fn validate_prefix(prefix: &str) -> Result<()> {
    if prefix.is_empty() || prefix.len() > MAX_PREFIX_LEN {
        return Err(Error::InvalidArgument(format!(
            "key prefix must be 1 to {MAX_PREFIX_LEN} bytes, got {}",
            prefix.len()
        )));
    }
    if prefix.contains(['{', '}', '*', '?', '[', ']', '\\']) || prefix.contains(char::is_whitespace)
    {
        return Err(Error::InvalidArgument(format!(
            "key prefix {prefix:?} must not contain braces, glob characters (*?[]\\) or whitespace"
        )));
    }
    Ok(())
}

/// The keys and channel of one lock. One allocation holds all five names
/// (a client holding 100,000 leases holds 100,000 of these).
#[derive(Clone, PartialEq, Eq)]
pub(crate) struct LockKeys {
    /// The names one after another, in the order of [`SUFFIXES`].
    names: Box<str>,
    /// Where each name ends in `names`.
    ends: [u32; SUFFIXES.len()],
}

/// What follows `<prefix>:{<tag>}` in each name, in storage order.
const SUFFIXES: [&str; 5] = [":lock", ":fence", ":released", ":queue", ":alive"];

impl LockKeys {
    /// Builds the keys of lock `name` under `prefix`; both must be valid.
    pub(crate) fn new(prefix: &str, name: &str) -> LockKeys {
        let base = base(prefix, name);
        let mut names = String::with_capacity(SUFFIXES.len() * base.len() + 32);
        let mut ends = [0; SUFFIXES.len()];
        for (end, suffix) in ends.iter_mut().zip(SUFFIXES) {
            names.push_str(&base);
            names.push_str(suffix);
            // Names are at most a few KiB (bounded name and prefix).
            *end = u32::try_from(names.len()).unwrap_or(u32::MAX);
        }
        LockKeys {
            names: names.into_boxed_str(),
            ends,
        }
    }

    fn name(&self, i: usize) -> &str {
        let start = if i == 0 { 0 } else { self.ends[i - 1] as usize };
        &self.names[start..self.ends[i] as usize]
    }

    /// The lease itself (a string holding the owner token, or the hash or
    /// sorted set of the other kinds).
    pub(crate) fn lock(&self) -> &str {
        self.name(0)
    }

    /// The last fencing token issued for this name.
    pub(crate) fn fence(&self) -> &str {
        self.name(1)
    }

    /// Where releases are published.
    pub(crate) fn channel(&self) -> &str {
        self.name(2)
    }

    /// Where leases handed to the waiters of the connection `connection`
    /// are announced: `<channel>:<connection>`, so that only that
    /// connection's process wakes. `lock_release.lua` builds the same name
    /// from a queue member `<connection>:<token>` (checked by a test below).
    pub(crate) fn handoff_channel(&self, connection: &str) -> String {
        format!("{}:{connection}", self.channel())
    }

    /// The record of one call `id` whose second run must not do more (a
    /// cluster driver re-sends a call whose connection dropped before the
    /// reply): `<prefix>:{<tag>}:call:<id>`, in the lock's slot.
    pub(crate) fn call(&self, id: &str) -> String {
        let lock = self.lock();
        format!("{}:call:{id}", &lock[..lock.len() - ":lock".len()])
    }

    /// What one hold says of its holder (`describe`, `leasehold run`'s host,
    /// pid and command): `<prefix>:{<tag>}:who:<hold>`, in the lock's slot,
    /// where `hold` is the id the hold's lease knows it by (a lock's token,
    /// a reentrant hold id, an RwLock's or a semaphore's member). It lives as
    /// long as the lease: set with its TTL, renewed with it, deleted with
    /// its release.
    pub(crate) fn who(&self, hold: &str) -> String {
        let lock = self.lock();
        format!("{}:who:{hold}", &lock[..lock.len() - ":lock".len()])
    }

    /// Waiters of a lease lock in arrival order (a sorted set).
    pub(crate) fn queue(&self) -> &str {
        self.name(3)
    }

    /// The deadline by which each queued waiter must try again (a sorted set).
    pub(crate) fn alive(&self) -> &str {
        self.name(4)
    }

    /// An RwLock's waiting writers in arrival order (a sorted set). Built
    /// on demand, as [`LockKeys::leader`].
    pub(crate) fn writers(&self) -> String {
        beside(self.lock(), ":writers")
    }

    /// An election's leader record, next to its lease (see [`leader_key`]).
    /// Built on demand: only elections use it, and a client holding many
    /// leases should not carry it in every [`LockKeys`].
    pub(crate) fn leader(&self) -> String {
        leader_key(self.lock())
    }

    /// Where an election's changes of leader are published.
    pub(crate) fn elected(&self) -> String {
        beside(self.lock(), ":elected")
    }
}

/// Where `Client::break_lease` tells the holders' clients which holds it
/// broke (`watchdog::broken_notice`): `<prefix>:broken`, one channel per
/// prefix (a break is rare; a client subscribes once, not per lease). It
/// has no `{`, so no lock's key or channel is named the same.
pub(crate) fn broken_channel(prefix: &str) -> String {
    format!("{prefix}:broken")
}

/// The leader record of the election whose lease is `lock_key`:
/// `<prefix>:{<tag>}...:leader`, under the lease's hash tag. The watchdog
/// renews it with the lease from the lease's key alone.
pub(crate) fn leader_key(lock_key: &str) -> String {
    beside(lock_key, ":leader")
}

/// The name with `suffix` in place of the lock key's `:lock`.
fn beside(lock_key: &str, suffix: &str) -> String {
    let base = lock_key.strip_suffix(":lock").unwrap_or(lock_key);
    format!("{base}{suffix}")
}

impl std::fmt::Debug for LockKeys {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LockKeys")
            .field("lock", &self.lock())
            .finish()
    }
}

/// The lock name a lock key belongs to, if `key` is a lock key under `prefix`.
pub(crate) fn name_of_lock_key(prefix: &str, key: &str) -> Option<String> {
    let rest = key.strip_prefix(prefix)?.strip_prefix(":{")?;
    let rest = rest.strip_suffix(":lock")?;
    let name = match rest.strip_prefix('#') {
        // `#<16 hex>}<name>`: a name with braces.
        Some(hashed) if hashed.get(16..17) == Some("}") => &hashed[17..],
        _ => rest.strip_suffix('}')?,
    };
    (LockKeys::new(prefix, name).lock() == key).then(|| name.to_owned())
}

/// `text` as a glob pattern that matches only itself (for SCAN's MATCH or
/// PUBSUB CHANNELS): every glob character is escaped.
pub(crate) fn glob_escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        if matches!(c, '*' | '?' | '[' | ']' | '\\') {
            out.push('\\');
        }
        out.push(c);
    }
    out
}

/// Glob match with `*` (any run) and `?` (any one character), as SCAN's MATCH.
pub(crate) fn glob_match(pattern: &str, text: &str) -> bool {
    let (p, t): (Vec<char>, Vec<char>) = (pattern.chars().collect(), text.chars().collect());
    let (mut pi, mut ti) = (0, 0);
    let mut backtrack: Option<(usize, usize)> = None;
    while ti < t.len() {
        if pi < p.len() && (p[pi] == '?' || p[pi] == t[ti]) {
            pi += 1;
            ti += 1;
        } else if pi < p.len() && p[pi] == '*' {
            backtrack = Some((pi, ti));
            pi += 1;
        } else if let Some((star, matched)) = backtrack {
            pi = star + 1;
            ti = matched + 1;
            backtrack = Some((star, matched + 1));
        } else {
            return false;
        }
    }
    p[pi..].iter().all(|&c| c == '*')
}

/// `<prefix>:{<name>}`, or `<prefix>:{#<hash>}<name>` for names with braces.
fn base(prefix: &str, name: &str) -> String {
    if name.contains(['{', '}']) {
        format!("{prefix}:{{#{:016x}}}{name}", fnv1a64(name.as_bytes()))
    } else {
        format!("{prefix}:{{{name}}}")
    }
}

/// FNV-1a, 64 bit. Only needs to be stable across clients and releases:
/// a collision merely puts two locks in one slot, their keys still differ.
fn fnv1a64(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |hash, &b| {
        (hash ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
    })
}

/// The Redis Cluster hash slot of `key`: CRC16 (XMODEM) of its hash tag,
/// or of the whole key without a non-empty one, modulo 16384.
pub(crate) fn slot(key: &str) -> u16 {
    let key = key.as_bytes();
    let tagged = key.iter().position(|&b| b == b'{').and_then(|open| {
        let rest = &key[open + 1..];
        let close = rest.iter().position(|&b| b == b'}')?;
        (close > 0).then(|| &rest[..close])
    });
    let mut crc: u16 = 0;
    for &byte in tagged.unwrap_or(key) {
        crc ^= u16::from(byte) << 8;
        for _ in 0..8 {
            crc = if crc & 0x8000 != 0 {
                (crc << 1) ^ 0x1021
            } else {
                crc << 1
            };
        }
    }
    crc % 16384
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// The name `lock_release.lua` publishes a hand-off on for the member
    /// `conn1:<token>`: `tests/scripts.rs` checks the script publishes on
    /// exactly this literal (`HANDOFF`).
    #[test]
    fn handoff_channels_are_the_release_channel_and_the_connection() {
        let keys = LockKeys::new("t", "n");
        assert_eq!(keys.handoff_channel("conn1"), "t:{n}:released:conn1");
        assert_eq!(keys.call("c1"), "t:{n}:call:c1");
        assert_eq!(slot(&keys.call("c1")), slot(keys.lock()));
        assert_eq!(slot(&keys.handoff_channel("conn1")), slot(keys.lock()));
    }

    #[test]
    fn an_election_keeps_its_leader_and_changes_beside_its_lease() {
        let keys = LockKeys::new("leasehold", "scheduler");
        assert_eq!(keys.leader(), "leasehold:{scheduler}:leader");
        assert_eq!(keys.elected(), "leasehold:{scheduler}:elected");
        assert_eq!(leader_key(keys.lock()), keys.leader());
    }

    #[test]
    fn glob_escape_escapes_every_glob_character() {
        assert_eq!(glob_escape("a*b?[c]\\d"), "a\\*b\\?\\[c\\]\\\\d");
        assert_eq!(glob_escape("plain:{name}"), "plain:{name}");
    }

    #[test]
    fn slots_match_cluster_keyslot() {
        // CLUSTER KEYSLOT's answers.
        assert_eq!(slot("foo"), 12182);
        assert_eq!(slot("bar"), 5061);
        assert_eq!(slot("x:{foo}:lock"), 12182);
        assert_eq!(slot("{}foo"), slot("{}foo"));
        assert_ne!(slot("{}foo"), slot("foo"));
        assert_eq!(slot("a{bar}b{foo}"), 5061);
    }

    /// The part of a key Redis Cluster hashes (its rule, written out).
    fn hashed_part(key: &str) -> &str {
        if let Some(open) = key.find('{')
            && let Some(len) = key[open + 1..].find('}')
            && len > 0
        {
            return &key[open + 1..open + 1 + len];
        }
        key
    }

    #[test]
    fn plain_names_are_their_own_tag() {
        let k = LockKeys::new("leasehold", "orders:42");
        assert_eq!(k.lock(), "leasehold:{orders:42}:lock");
        assert_eq!(k.fence(), "leasehold:{orders:42}:fence");
        assert_eq!(k.channel(), "leasehold:{orders:42}:released");
    }

    #[test]
    fn bad_names_and_prefixes_are_refused() {
        assert!(validate_name("").is_err());
        assert!(validate_name(&"x".repeat(MAX_NAME_LEN)).is_ok());
        assert!(validate_name(&"x".repeat(MAX_NAME_LEN + 1)).is_err());
        assert!(validate_prefix("").is_err());
        assert!(validate_prefix("a{b").is_err());
        assert!(validate_prefix("a b").is_err());
        assert!(validate_prefix("a*").is_err());
        assert!(validate_prefix("myapp").is_ok());
    }

    #[test]
    fn globs_match_like_redis() {
        assert!(glob_match("*", "anything"));
        assert!(glob_match("orders:*", "orders:42"));
        assert!(!glob_match("orders:*", "order:42"));
        assert!(glob_match("a?c", "abc"));
        assert!(glob_match("*:4*", "orders:42"));
        assert!(!glob_match("a", "ab"));
    }

    #[test]
    fn only_lock_keys_have_names() {
        assert_eq!(name_of_lock_key("p", "p:{x}:fence"), None);
        assert_eq!(name_of_lock_key("p", "q:{x}:lock"), None);
        assert_eq!(name_of_lock_key("p", "p:{x}:lock").as_deref(), Some("x"));
    }

    proptest! {
        #[test]
        fn lock_keys_give_back_their_names(name in "\\PC{1,40}|[{}#a-z:]{1,12}") {
            let key = LockKeys::new("leasehold", &name).lock().to_owned();
            prop_assert_eq!(name_of_lock_key("leasehold", &key), Some(name));
        }

        #[test]
        fn every_key_of_a_lock_hashes_to_one_slot(name in "\\PC{1,64}|[{}a-z]{1,12}") {
            let k = LockKeys::new("leasehold", &name);
            let tag = hashed_part(k.lock());
            prop_assert!(!tag.is_empty());
            prop_assert_ne!(tag, k.lock());
            prop_assert_eq!(hashed_part(k.fence()), tag);
            prop_assert_eq!(hashed_part(k.channel()), tag);
            prop_assert_eq!(hashed_part(k.queue()), tag);
            prop_assert_eq!(hashed_part(k.alive()), tag);
            let (leader, elected, writers) = (k.leader(), k.elected(), k.writers());
            prop_assert_eq!(hashed_part(&leader), tag);
            prop_assert_eq!(hashed_part(&elected), tag);
            prop_assert_eq!(hashed_part(&writers), tag);
            prop_assert!(k.leader().starts_with("leasehold:"));
            prop_assert!(k.lock().starts_with("leasehold:"));
            prop_assert!(k.channel().starts_with("leasehold:"));
        }

        #[test]
        fn distinct_names_never_share_a_key(a in "[{}a-c:]{1,8}", b in "[{}a-c:]{1,8}") {
            prop_assume!(a != b);
            let (ka, kb) = (LockKeys::new("p", &a), LockKeys::new("p", &b));
            prop_assert_ne!(ka.lock(), kb.lock());
            prop_assert_ne!(ka.leader(), kb.leader());
        }
    }
}
