//! A simulated Redis server: what the library and its scripts use, and
//! nothing else (an unmodelled command panics, naming it).
//!
//! Time is given by the caller with every command (the server's own clock,
//! in µs since the Unix epoch, which a fault may step); keys expire on it.
//! Scripts are the shipped `.lua` files, run unchanged in Lua 5.1.

use redis::Value;

/// Which server the simulator plays: what scripts see of the version
/// (`redis.REDIS_VERSION`, 7.0's commands) and what INFO says.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Flavor {
    /// Redis 7.0 (and Valkey 8, which answers the library's commands alike).
    Redis7,
    /// Redis 6.2: no `redis.REDIS_VERSION`, no SET .. NX .. GET, no PEXPIRE .. GT.
    Redis62,
}

/// A message a PUBLISH (or SPUBLISH) delivered to a subscribed connection.
#[derive(Debug, Clone, PartialEq)]
pub struct Delivery {
    /// The connection subscribed to the channel.
    pub conn: u64,
    /// The push frame as redis-rs gives it (`PushKind::Message` or `SMessage`).
    pub push: redis::PushInfo,
}

/// One server's data and scripts.
pub struct Server {
    _private: (),
}

impl Server {
    /// An empty server of `flavor`.
    pub fn new(flavor: Flavor) -> Server {
        let _ = flavor;
        todo!("server")
    }

    /// Runs one command sent by connection `conn` at server time `now_us`;
    /// the reply as a RESP3 client (redis-rs) receives it, errors as
    /// `Value::ServerError`. Messages it published are taken with
    /// [`Server::take_deliveries`].
    pub fn exec(&mut self, conn: u64, now_us: u64, args: &[Vec<u8>]) -> Value {
        let _ = (conn, now_us, args);
        todo!("server")
    }

    /// The messages published since the last call, in order.
    pub fn take_deliveries(&mut self) -> Vec<Delivery> {
        todo!("server")
    }

    /// Forgets `conn`'s subscriptions (its connection dropped).
    pub fn disconnect(&mut self, conn: u64) {
        let _ = conn;
        todo!("server")
    }

    /// SCRIPT FLUSH: every EVALSHA answers NOSCRIPT until loaded again.
    pub fn flush_scripts(&mut self) {
        todo!("server")
    }

    /// A copy of the keyspace (for a replica, an AOF restart), without
    /// subscriptions or loaded scripts.
    pub fn data_copy(&self) -> Server {
        todo!("server")
    }

    /// Every live key at `now_us`, sorted by name: its type, value and
    /// remaining TTL in ms (None: no expiry).
    pub fn dump(&self, now_us: u64) -> Vec<KeyDump> {
        let _ = now_us;
        todo!("server")
    }
}

/// One key as [`Server::dump`] shows it.
#[derive(Debug, Clone, PartialEq)]
pub struct KeyDump {
    /// The key's name.
    pub key: String,
    /// The value in a form two servers can compare (see `dump`'s docs).
    pub value: DumpValue,
    /// Remaining time to live in ms, None without expiry.
    pub pttl_ms: Option<i64>,
}

/// A key's value as dumped.
#[derive(Debug, Clone, PartialEq)]
pub enum DumpValue {
    /// A string.
    String(Vec<u8>),
    /// A hash, sorted by field.
    Hash(Vec<(Vec<u8>, Vec<u8>)>),
    /// A sorted set, in score order (then member).
    ZSet(Vec<(Vec<u8>, f64)>),
}
