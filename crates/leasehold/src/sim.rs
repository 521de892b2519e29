//! The simulation seam: built only with `--cfg leasehold_sim` (`scripts/sim`),
//! never in a build a user links, and not part of the public API.
//!
//! A simulator installs a [`Dialer`] on its thread; a URL `sim://<name>` then
//! connects through it instead of the driver, and every command, pipeline,
//! subscription and push frame of that connection crosses a [`Wire`]. What
//! is above the wire (primitives, the wait loop, watchdog, events, Redlock,
//! `close()`) is the shipped code. Tokens and jitter are drawn from the
//! simulator's seed ([`seed_random`]) so a schedule replays bit for bit.

use std::cell::RefCell;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

pub use redis::{Cmd, PushInfo, RedisError, Value};

/// A boxed future of the wire.
pub type WireFuture<T> = Pin<Box<dyn Future<Output = T> + Send>>;

/// One simulated connection to one server.
pub trait Wire: Send + Sync {
    /// Sends one command; the reply, a server error as `Err`, or a lost
    /// connection / timeout as an I/O error.
    fn request(&self, cmd: &Cmd) -> WireFuture<Result<Value, RedisError>>;
    /// Sends commands as one pipeline (not MULTI): one reply per command,
    /// server errors among them as `Value::ServerError`.
    fn pipeline(&self, cmds: Vec<Cmd>) -> WireFuture<Result<Vec<Value>, RedisError>>;
    /// Subscribes the connection to `channel` (kept across its reconnects).
    fn subscribe(&self, channel: &str) -> WireFuture<Result<(), RedisError>>;
    /// Ends that subscription.
    fn unsubscribe(&self, channel: &str) -> WireFuture<Result<(), RedisError>>;
}

/// Where pushes of a connection go (release messages, disconnections).
pub type OnPush = Arc<dyn Fn(PushInfo) + Send + Sync>;

/// Makes the simulated connections of `sim://` URLs.
pub trait Dialer {
    /// Connects to the server `name` with each reply bounded by
    /// `command_timeout`; pushes go to `on_push`.
    fn dial(
        &self,
        name: &str,
        command_timeout: Duration,
        on_push: OnPush,
    ) -> Result<Arc<dyn Wire>, RedisError>;
}

thread_local! {
    static DIALER: RefCell<Option<Arc<dyn Dialer>>> = const { RefCell::new(None) };
    static RANDOM: RefCell<Option<u64>> = const { RefCell::new(None) };
    static LEASE_IDS: std::cell::Cell<u64> = const { std::cell::Cell::new(1) };
}

/// Installs the dialer of this thread's `sim://` URLs (None: uninstall).
pub fn install(dialer: Option<Arc<dyn Dialer>>) {
    DIALER.with(|d| *d.borrow_mut() = dialer);
}

/// Seeds this thread's random choices (tokens, jitter); None: the OS source.
/// Lease ids restart at 1 too, so a schedule does not depend on what ran
/// before it on this thread.
pub fn seed_random(seed: Option<u64>) {
    RANDOM.with(|r| *r.borrow_mut() = seed);
    LEASE_IDS.with(|ids| ids.set(1));
}

/// The next lease id of this thread's schedule, if it has a seed.
pub(crate) fn next_lease_id() -> Option<u64> {
    RANDOM
        .with(|r| r.borrow().is_some())
        .then(|| LEASE_IDS.with(|ids| ids.replace(ids.get() + 1)))
}

pub(crate) fn dial(
    url: &str,
    command_timeout: Duration,
    on_push: OnPush,
) -> Option<Result<Arc<dyn Wire>, RedisError>> {
    let name = url.strip_prefix("sim://")?;
    let dialer = DIALER.with(|d| d.borrow().clone())?;
    Some(dialer.dial(name, command_timeout, on_push))
}

/// Fills `bytes` from the seeded generator, if this thread has one
/// (splitmix64: fast, and every schedule of a seed draws the same values).
pub(crate) fn fill(bytes: &mut [u8]) -> bool {
    RANDOM.with(|r| {
        let mut r = r.borrow_mut();
        let Some(state) = r.as_mut() else {
            return false;
        };
        for chunk in bytes.chunks_mut(8) {
            *state = state.wrapping_add(0x9e37_79b9_7f4a_7c15);
            let mut z = *state;
            z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
            z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
            z ^= z >> 31;
            chunk.copy_from_slice(&z.to_le_bytes()[..chunk.len()]);
        }
        true
    })
}

/// A number in [0, 1) from the seeded generator, if this thread has one.
pub(crate) fn unit() -> Option<f64> {
    let mut bytes = [0u8; 8];
    fill(&mut bytes).then(|| (u64::from_le_bytes(bytes) >> 11) as f64 / (1u64 << 53) as f64)
}

/// Maps whose iteration order is the same in every run (std's default
/// hasher is seeded per process), so the client's batches and wake-ups
/// replay in the same order.
pub(crate) type HashMap<K, V> =
    std::collections::HashMap<K, V, std::hash::BuildHasherDefault<std::hash::DefaultHasher>>;
/// As [`HashMap`].
pub(crate) type HashSet<K> =
    std::collections::HashSet<K, std::hash::BuildHasherDefault<std::hash::DefaultHasher>>;
