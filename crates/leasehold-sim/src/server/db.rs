//! The keyspace: strings, hashes and sorted sets with per-key expiry on the
//! server's clock, and the data commands on them.
//!
//! Expiry is Redis's (`keyIsExpired`): a key whose expiry time is `when`
//! (ms) is gone once `now > when`, checked when the key is touched; at
//! `now == when` it lives, with a PTTL of 0. A script runs at one instant,
//! its start (Redis 7 freezes the expiry clock for a script; here every
//! command of one `exec` sees the same time).

use std::cmp::Ordering;
use std::collections::{BTreeMap, BTreeSet, HashMap};

use super::reply::{NOT_INTEGER, Reply, SYNTAX, WRONGTYPE, fmt_g17, glob, parse_f64, parse_i64};
use super::{DumpValue, Flavor, KeyDump};

/// A hash's fields and values, in insertion order.
pub(super) type Fields = Vec<(Vec<u8>, Vec<u8>)>;

/// One key's value.
#[derive(Debug, Clone)]
pub(super) enum Data {
    Str(Vec<u8>),
    /// Fields in insertion order, as a small hash (listpack: up to 128
    /// fields of up to 64 bytes) keeps them, which HKEYS shows.
    Hash(Fields),
    ZSet(ZSet),
}

impl Data {
    fn type_name(&self) -> &'static str {
        match self {
            Data::Str(_) => "string",
            Data::Hash(_) => "hash",
            Data::ZSet(_) => "zset",
        }
    }
}

/// A score: ordered as Redis orders them (NaN never gets in; -0 equals 0).
#[derive(Debug, Clone, Copy)]
pub(super) struct Score(pub(super) f64);

impl PartialEq for Score {
    fn eq(&self, other: &Self) -> bool {
        self.cmp(other) == Ordering::Equal
    }
}
impl Eq for Score {}
impl PartialOrd for Score {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}
impl Ord for Score {
    fn cmp(&self, other: &Self) -> Ordering {
        self.0.partial_cmp(&other.0).expect("scores are never NaN")
    }
}

/// A sorted set: by member, and in order (score, then member bytes).
#[derive(Debug, Clone, Default)]
pub(super) struct ZSet {
    scores: HashMap<Vec<u8>, f64>,
    order: BTreeSet<(Score, Vec<u8>)>,
}

impl ZSet {
    fn len(&self) -> usize {
        self.scores.len()
    }

    fn score(&self, member: &[u8]) -> Option<f64> {
        self.scores.get(member).copied()
    }

    /// Sets member's score; whether it is new.
    fn insert(&mut self, member: &[u8], score: f64) -> bool {
        match self.scores.insert(member.to_vec(), score) {
            Some(old) => {
                self.order.remove(&(Score(old), member.to_vec()));
                self.order.insert((Score(score), member.to_vec()));
                false
            }
            None => {
                self.order.insert((Score(score), member.to_vec()));
                true
            }
        }
    }

    fn remove(&mut self, member: &[u8]) -> bool {
        match self.scores.remove(member) {
            Some(old) => {
                self.order.remove(&(Score(old), member.to_vec()));
                true
            }
            None => false,
        }
    }

    fn iter(&self) -> impl DoubleEndedIterator<Item = (&[u8], f64)> {
        self.order.iter().map(|(s, m)| (m.as_slice(), s.0))
    }
}

/// A key: its value and its expiry (ms since the epoch), if any.
#[derive(Debug, Clone)]
pub(super) struct Entry {
    pub(super) data: Data,
    pub(super) expire_ms: Option<i64>,
}

/// A score bound of ZRANGE BYSCORE / ZREMRANGEBYSCORE: value, exclusive.
#[derive(Debug, Clone, Copy)]
struct Bound(f64, bool);

impl Bound {
    fn parse(b: &[u8]) -> Option<Bound> {
        match b.split_first() {
            Some((b'(', rest)) => parse_f64(rest).map(|v| Bound(v, true)),
            _ => parse_f64(b).map(|v| Bound(v, false)),
        }
    }

    fn above_min(self, score: f64) -> bool {
        if self.1 {
            score > self.0
        } else {
            score >= self.0
        }
    }

    fn below_max(self, score: f64) -> bool {
        if self.1 {
            score < self.0
        } else {
            score <= self.0
        }
    }
}

/// The keyspace. Sorted by key, so SCAN and dumps come out in one order.
#[derive(Debug, Clone, Default)]
pub(super) struct Db {
    keys: BTreeMap<Vec<u8>, Entry>,
}

/// How a data command's reply is shaped: scripts speak RESP2, clients RESP3
/// (scores as doubles, WITHSCORES as pairs).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Resp {
    Two,
    Three,
}

fn wrong_args(name: &str) -> Reply {
    Reply::err(format!(
        "ERR wrong number of arguments for '{}' command",
        name.to_ascii_lowercase()
    ))
}

/// A score as a reply: a double for RESP3, Redis's text for RESP2.
fn score_reply(score: f64, resp: Resp) -> Reply {
    match resp {
        Resp::Three => Reply::Double(score),
        Resp::Two => Reply::Bulk(fmt_g17(score).into_bytes()),
    }
}

impl Db {
    /// Every live key at `now_ms`, sorted by name.
    pub(super) fn dump(&self, now_ms: i64) -> Vec<KeyDump> {
        self.keys
            .iter()
            .filter(|(_, e)| e.expire_ms.is_none_or(|w| now_ms <= w))
            .map(|(k, e)| KeyDump {
                key: String::from_utf8_lossy(k).into_owned(),
                value: match &e.data {
                    Data::Str(v) => DumpValue::String(v.clone()),
                    Data::Hash(fields) => {
                        let mut fields = fields.clone();
                        fields.sort();
                        DumpValue::Hash(fields)
                    }
                    Data::ZSet(z) => {
                        DumpValue::ZSet(z.iter().map(|(m, s)| (m.to_vec(), s)).collect())
                    }
                },
                pttl_ms: e.expire_ms.map(|w| (w - now_ms).max(0)),
            })
            .collect()
    }

    /// Every key's name, expired or not.
    pub(super) fn names(&self) -> Vec<Vec<u8>> {
        self.keys.keys().cloned().collect()
    }

    /// Removes and gives every key `f` picks.
    pub(super) fn take_where(&mut self, f: impl Fn(&[u8]) -> bool) -> Vec<(Vec<u8>, Entry)> {
        let picked: Vec<Vec<u8>> = self.keys.keys().filter(|k| f(k)).cloned().collect();
        picked
            .into_iter()
            .filter_map(|k| self.keys.remove(&k).map(|e| (k, e)))
            .collect()
    }

    /// Sets `key` to `entry`, as RESTORE .. REPLACE does.
    pub(super) fn put(&mut self, key: Vec<u8>, entry: Entry) {
        self.keys.insert(key, entry);
    }

    /// `key` as [`Db::dump`] shows it, if it is live at `now_ms`.
    pub(super) fn dump_key(&self, key: &[u8], now_ms: i64) -> Option<KeyDump> {
        let e = self.keys.get(key)?;
        if e.expire_ms.is_some_and(|w| now_ms > w) {
            return None;
        }
        let value = match &e.data {
            Data::Str(v) => DumpValue::String(v.clone()),
            Data::Hash(fields) => DumpValue::Hash(fields.clone()),
            Data::ZSet(z) => DumpValue::ZSet(z.iter().map(|(m, s)| (m.to_vec(), s)).collect()),
        };
        Some(KeyDump {
            key: String::from_utf8_lossy(key).into_owned(),
            value,
            pttl_ms: e.expire_ms.map(|w| (w - now_ms).max(0)),
        })
    }

    /// Deletes `key` if it has expired at `now`.
    fn expire_if_needed(&mut self, key: &[u8], now: i64) {
        let expired = self
            .keys
            .get(key)
            .and_then(|e| e.expire_ms)
            .is_some_and(|when| now > when);
        if expired {
            self.keys.remove(key);
        }
    }

    fn live(&mut self, key: &[u8], now: i64) -> Option<&mut Entry> {
        self.expire_if_needed(key, now);
        self.keys.get_mut(key)
    }

    fn delete(&mut self, key: &[u8], now: i64) -> bool {
        self.expire_if_needed(key, now);
        self.keys.remove(key).is_some()
    }

    /// The live string at key (None: no key), or WRONGTYPE.
    fn string(&mut self, key: &[u8], now: i64) -> Result<Option<&Vec<u8>>, Reply> {
        match self.live(key, now) {
            None => Ok(None),
            Some(Entry {
                data: Data::Str(v), ..
            }) => Ok(Some(v)),
            Some(_) => Err(Reply::err(WRONGTYPE)),
        }
    }

    fn hash(&mut self, key: &[u8], now: i64) -> Result<Option<&mut Fields>, Reply> {
        match self.live(key, now) {
            None => Ok(None),
            Some(Entry {
                data: Data::Hash(h),
                ..
            }) => Ok(Some(h)),
            Some(_) => Err(Reply::err(WRONGTYPE)),
        }
    }

    fn zset(&mut self, key: &[u8], now: i64) -> Result<Option<&mut ZSet>, Reply> {
        match self.live(key, now) {
            None => Ok(None),
            Some(Entry {
                data: Data::ZSet(z),
                ..
            }) => Ok(Some(z)),
            Some(_) => Err(Reply::err(WRONGTYPE)),
        }
    }

    /// Removes key if its hash or sorted set is empty (Redis never keeps one).
    fn drop_if_empty(&mut self, key: &[u8]) {
        let empty = match self.keys.get(key).map(|e| &e.data) {
            Some(Data::Hash(h)) => h.is_empty(),
            Some(Data::ZSet(z)) => z.len() == 0,
            _ => false,
        };
        if empty {
            self.keys.remove(key);
        }
    }

    /// Runs one data command (name upper-cased by the caller) at `now`
    /// (ms); `None` if the command is not a data command.
    pub(super) fn command(
        &mut self,
        flavor: Flavor,
        now: i64,
        now_us: u64,
        name: &str,
        args: &[Vec<u8>],
        resp: Resp,
    ) -> Option<Reply> {
        let arity: i32 = match name {
            "GET" | "PTTL" | "TTL" | "TYPE" | "HKEYS" | "HLEN" | "HGETALL" | "ZCARD" => 2,
            "SET" => -3,
            "DEL" | "EXISTS" | "MGET" | "ZPOPMIN" | "SCAN" => -2,
            "PEXPIRE" if flavor == Flavor::Redis62 => 3,
            "PEXPIRE" => -3,
            "TIME" | "DBSIZE" => 1,
            "HGET" | "HEXISTS" | "ZSCORE" => 3,
            "HSET" | "ZADD" | "ZRANGE" => -4,
            "HDEL" | "ZREM" => -3,
            "ZREMRANGEBYSCORE" => 4,
            "FLUSHALL" => -1,
            _ => return None,
        };
        let n = args.len() as i32;
        if (arity > 0 && n != arity) || (arity < 0 && n < -arity) {
            return Some(wrong_args(name));
        }
        let reply = match name {
            "GET" => self
                .string(&args[1], now)
                .map(|v| v.map_or(Reply::Nil, |v| Reply::Bulk(v.clone()))),
            "SET" => self.set(flavor, now, args),
            "DEL" => Ok(Reply::Int(
                args[1..].iter().filter(|k| self.delete(k, now)).count() as i64,
            )),
            "EXISTS" => Ok(Reply::Int(
                args[1..]
                    .iter()
                    .filter(|k| self.live(k, now).is_some())
                    .count() as i64,
            )),
            "MGET" => Ok(Reply::Array(
                args[1..]
                    .iter()
                    .map(|k| match self.string(k, now) {
                        Ok(Some(v)) => Reply::Bulk(v.clone()),
                        _ => Reply::Nil,
                    })
                    .collect(),
            )),
            "PEXPIRE" => self.pexpire(now, args),
            "PTTL" | "TTL" => Ok(Reply::Int(match self.live(&args[1], now) {
                None => -2,
                Some(Entry {
                    expire_ms: None, ..
                }) => -1,
                Some(Entry {
                    expire_ms: Some(when),
                    ..
                }) => {
                    let ms = (*when - now).max(0);
                    if name == "PTTL" {
                        ms
                    } else {
                        (ms + 500) / 1000
                    }
                }
            })),
            "TYPE" => Ok(Reply::Status(
                self.live(&args[1], now)
                    .map_or("none", |e| e.data.type_name())
                    .to_owned(),
            )),
            "TIME" => Ok(Reply::Array(vec![
                Reply::Bulk((now_us / 1_000_000).to_string().into_bytes()),
                Reply::Bulk((now_us % 1_000_000).to_string().into_bytes()),
            ])),
            "DBSIZE" => Ok(Reply::Int(
                self.keys
                    .values()
                    .filter(|e| e.expire_ms.is_none_or(|w| now <= w))
                    .count() as i64,
            )),
            "FLUSHALL" => {
                self.keys.clear();
                Ok(Reply::ok())
            }
            "HGET" => self.hash(&args[1], now).map(|h| {
                h.and_then(|h| h.iter().find(|(f, _)| *f == args[2]))
                    .map_or(Reply::Nil, |(_, v)| Reply::Bulk(v.clone()))
            }),
            "HSET" => self.hset(now, args),
            "HDEL" => self.hdel(now, args),
            "HEXISTS" => self.hash(&args[1], now).map(|h| {
                Reply::Int(
                    h.is_some_and(|h| h.iter().any(|(f, _)| *f == args[2]))
                        .into(),
                )
            }),
            "HKEYS" => self.hash(&args[1], now).map(|h| {
                Reply::Array(h.map_or(vec![], |h| {
                    h.iter().map(|(f, _)| Reply::Bulk(f.clone())).collect()
                }))
            }),
            "HLEN" => self
                .hash(&args[1], now)
                .map(|h| Reply::Int(h.map_or(0, |h| h.len() as i64))),
            "HGETALL" => self.hash(&args[1], now).map(|h| {
                let pairs = h.map_or(vec![], |h| {
                    h.iter()
                        .map(|(f, v)| (Reply::Bulk(f.clone()), Reply::Bulk(v.clone())))
                        .collect()
                });
                match resp {
                    Resp::Three => Reply::Map(pairs),
                    Resp::Two => {
                        Reply::Array(pairs.into_iter().flat_map(|(f, v)| [f, v]).collect())
                    }
                }
            }),
            "ZADD" => self.zadd(now, args),
            "ZCARD" => self
                .zset(&args[1], now)
                .map(|z| Reply::Int(z.map_or(0, |z| z.len() as i64))),
            "ZSCORE" => self.zset(&args[1], now).map(|z| {
                z.and_then(|z| z.score(&args[2]))
                    .map_or(Reply::Nil, |s| score_reply(s, resp))
            }),
            "ZREM" => self.zrem(now, args),
            "ZPOPMIN" => self.zpopmin(now, args, resp),
            "ZRANGE" => self.zrange(now, args, resp),
            "ZREMRANGEBYSCORE" => self.zremrangebyscore(now, args),
            "SCAN" => self.scan(now, args),
            _ => unreachable!("every name with an arity is handled"),
        };
        Some(reply.unwrap_or_else(|e| e))
    }

    /// SET key value [NX|XX] [GET] [EX s|PX ms|EXAT s|PXAT ms|KEEPTTL].
    fn set(&mut self, flavor: Flavor, now: i64, args: &[Vec<u8>]) -> Result<Reply, Reply> {
        #[derive(PartialEq, Clone, Copy)]
        enum Unit {
            Ex,
            Px,
            ExAt,
            PxAt,
        }
        let (mut nx, mut xx, mut get, mut keepttl) = (false, false, false, false);
        let mut expire: Option<(Unit, &[u8])> = None;
        let mut j = 3;
        while j < args.len() {
            let opt = args[j].to_ascii_uppercase();
            let next = args.get(j + 1);
            let unit = match opt.as_slice() {
                b"EX" => Some(Unit::Ex),
                b"PX" => Some(Unit::Px),
                b"EXAT" => Some(Unit::ExAt),
                b"PXAT" => Some(Unit::PxAt),
                _ => None,
            };
            match opt.as_slice() {
                // 6.2 refuses NX with GET (7.0 brought it).
                b"NX" if !(xx || (get && flavor == Flavor::Redis62)) => nx = true,
                b"XX" if !nx => xx = true,
                b"GET" if !(nx && flavor == Flavor::Redis62) => get = true,
                b"KEEPTTL" if expire.is_none() => keepttl = true,
                _ if unit.is_some()
                    && next.is_some()
                    && !keepttl
                    && expire.is_none_or(|(u, _)| Some(u) == unit) =>
                {
                    expire = Some((unit.expect("checked"), next.expect("checked")));
                    j += 1;
                }
                _ => return Err(Reply::err(SYNTAX)),
            }
            j += 1;
        }
        let when = match expire {
            None => None,
            Some((unit, value)) => {
                let v = parse_i64(value).ok_or_else(|| Reply::err(NOT_INTEGER))?;
                let invalid = || Reply::err("ERR invalid expire time in 'set' command");
                if v <= 0 {
                    return Err(invalid());
                }
                let ms = match unit {
                    Unit::Ex | Unit::ExAt => v.checked_mul(1000).ok_or_else(invalid)?,
                    Unit::Px | Unit::PxAt => v,
                };
                Some(match unit {
                    Unit::Ex | Unit::Px => ms.checked_add(now).ok_or_else(invalid)?,
                    Unit::ExAt | Unit::PxAt => ms,
                })
            }
        };
        let old = if get {
            Some(self.string(&args[1], now)?.cloned())
        } else {
            None
        };
        let found = self.live(&args[1], now).is_some();
        let abort = || match &old {
            Some(old) => Reply::from_opt_bulk(old.clone()),
            None => Reply::Nil,
        };
        if (nx && found) || (xx && !found) {
            return Ok(abort());
        }
        let keep = if keepttl {
            self.keys.get(&args[1]).and_then(|e| e.expire_ms)
        } else {
            None
        };
        self.keys.insert(
            args[1].clone(),
            Entry {
                data: Data::Str(args[2].clone()),
                expire_ms: when.or(keep),
            },
        );
        Ok(match old {
            Some(old) => Reply::from_opt_bulk(old),
            None => Reply::ok(),
        })
    }

    /// PEXPIRE key ms [NX|XX|GT|LT] (the flags from 7.0).
    fn pexpire(&mut self, now: i64, args: &[Vec<u8>]) -> Result<Reply, Reply> {
        let (mut nx, mut xx, mut gt, mut lt) = (false, false, false, false);
        for opt in &args[3..] {
            match opt.to_ascii_uppercase().as_slice() {
                b"NX" => nx = true,
                b"XX" => xx = true,
                b"GT" => gt = true,
                b"LT" => lt = true,
                _ => {
                    return Err(Reply::err(format!(
                        "ERR Unsupported option {}",
                        String::from_utf8_lossy(opt)
                    )));
                }
            }
        }
        if nx && (xx || gt || lt) {
            return Err(Reply::err(
                "ERR NX and XX, GT or LT options at the same time are not compatible",
            ));
        }
        if gt && lt {
            return Err(Reply::err(
                "ERR GT and LT options at the same time are not compatible",
            ));
        }
        let ms = parse_i64(&args[2]).ok_or_else(|| Reply::err(NOT_INTEGER))?;
        let when = ms
            .checked_add(now)
            .ok_or_else(|| Reply::err("ERR invalid expire time in 'pexpire' command"))?;
        let Some(entry) = self.live(&args[1], now) else {
            return Ok(Reply::Int(0));
        };
        let current = entry.expire_ms;
        let refused = (nx && current.is_some())
            || (xx && current.is_none())
            // No expiry counts as infinite: GT never beats it.
            || (gt && current.is_none_or(|c| when <= c))
            || (lt && current.is_some_and(|c| when >= c));
        if refused {
            return Ok(Reply::Int(0));
        }
        if when <= now {
            self.keys.remove(&args[1]);
        } else {
            entry.expire_ms = Some(when);
        }
        Ok(Reply::Int(1))
    }

    /// HDEL key field [field ...].
    fn hdel(&mut self, now: i64, args: &[Vec<u8>]) -> Result<Reply, Reply> {
        let Some(h) = self.hash(&args[1], now)? else {
            return Ok(Reply::Int(0));
        };
        let mut removed = 0;
        for field in &args[2..] {
            if let Some(i) = h.iter().position(|(f, _)| f == field) {
                h.remove(i);
                removed += 1;
            }
        }
        self.drop_if_empty(&args[1]);
        Ok(Reply::Int(removed))
    }

    /// ZREM key member [member ...].
    fn zrem(&mut self, now: i64, args: &[Vec<u8>]) -> Result<Reply, Reply> {
        let Some(z) = self.zset(&args[1], now)? else {
            return Ok(Reply::Int(0));
        };
        let removed = args[2..].iter().filter(|m| z.remove(m)).count();
        self.drop_if_empty(&args[1]);
        Ok(Reply::Int(removed as i64))
    }

    /// HSET key field value [field value ...].
    fn hset(&mut self, now: i64, args: &[Vec<u8>]) -> Result<Reply, Reply> {
        if !args.len().is_multiple_of(2) {
            return Err(wrong_args("HSET"));
        }
        let key = &args[1];
        if self.hash(key, now)?.is_none() {
            self.keys.insert(
                key.clone(),
                Entry {
                    data: Data::Hash(vec![]),
                    expire_ms: None,
                },
            );
        }
        let h = self.hash(key, now)?.expect("just made");
        let mut added = 0;
        for pair in args[2..].chunks(2) {
            match h.iter_mut().find(|(f, _)| *f == pair[0]) {
                Some((_, v)) => *v = pair[1].clone(),
                None => {
                    h.push((pair[0].clone(), pair[1].clone()));
                    added += 1;
                }
            }
        }
        Ok(Reply::Int(added))
    }

    /// ZADD key [NX|XX] [GT|LT] [CH] score member [score member ...].
    fn zadd(&mut self, now: i64, args: &[Vec<u8>]) -> Result<Reply, Reply> {
        let (mut nx, mut xx, mut gt, mut lt, mut ch) = (false, false, false, false, false);
        let mut j = 2;
        while j < args.len() {
            match args[j].to_ascii_uppercase().as_slice() {
                b"NX" => nx = true,
                b"XX" => xx = true,
                b"GT" => gt = true,
                b"LT" => lt = true,
                b"CH" => ch = true,
                b"INCR" => panic!("sim server: unmodelled command ZADD .. INCR"),
                _ => break,
            }
            j += 1;
        }
        let pairs = &args[j..];
        if pairs.is_empty() || !pairs.len().is_multiple_of(2) {
            return Err(Reply::err(SYNTAX));
        }
        if nx && xx {
            return Err(Reply::err(
                "ERR XX and NX options at the same time are not compatible",
            ));
        }
        if (nx && (gt || lt)) || (gt && lt) {
            return Err(Reply::err(
                "ERR GT, LT, and/or NX options at the same time are not compatible",
            ));
        }
        let mut scores = Vec::with_capacity(pairs.len() / 2);
        for pair in pairs.chunks(2) {
            scores.push(
                parse_f64(&pair[0]).ok_or_else(|| Reply::err("ERR value is not a valid float"))?,
            );
        }
        let key = &args[1];
        if self.zset(key, now)?.is_none() {
            if xx {
                return Ok(Reply::Int(0));
            }
            self.keys.insert(
                key.clone(),
                Entry {
                    data: Data::ZSet(ZSet::default()),
                    expire_ms: None,
                },
            );
        }
        let z = self.zset(key, now)?.expect("just made");
        let (mut added, mut changed) = (0, 0);
        for (pair, score) in pairs.chunks(2).zip(scores) {
            let member = &pair[1];
            match z.score(member) {
                Some(old) => {
                    if nx || (gt && score <= old) || (lt && score >= old) {
                        continue;
                    }
                    if score != old {
                        z.insert(member, score);
                        changed += 1;
                    }
                }
                None => {
                    if xx {
                        continue;
                    }
                    z.insert(member, score);
                    added += 1;
                }
            }
        }
        self.drop_if_empty(key);
        Ok(Reply::Int(if ch { added + changed } else { added }))
    }

    /// ZPOPMIN key (one member; the count form only for scripts).
    fn zpopmin(&mut self, now: i64, args: &[Vec<u8>], resp: Resp) -> Result<Reply, Reply> {
        if args.len() > 3 {
            return Err(Reply::err(SYNTAX));
        }
        let count = match args.get(2) {
            None => 1,
            Some(c) => {
                if resp == Resp::Three {
                    panic!(
                        "sim server: unmodelled command ZPOPMIN with a count from a RESP3 client"
                    );
                }
                match parse_i64(c) {
                    Some(c) if c >= 0 => c as usize,
                    Some(_) => {
                        return Err(Reply::err("ERR value is out of range, must be positive"));
                    }
                    None => return Err(Reply::err(NOT_INTEGER)),
                }
            }
        };
        let Some(z) = self.zset(&args[1], now)? else {
            return Ok(Reply::Array(vec![]));
        };
        let mut out = vec![];
        for _ in 0..count {
            let Some((member, score)) = z.iter().next().map(|(m, s)| (m.to_vec(), s)) else {
                break;
            };
            z.remove(&member);
            out.push(Reply::Bulk(member));
            out.push(score_reply(score, resp));
        }
        self.drop_if_empty(&args[1]);
        Ok(Reply::Array(out))
    }

    /// ZRANGE key start stop [BYSCORE] [REV] [LIMIT offset count] [WITHSCORES].
    fn zrange(&mut self, now: i64, args: &[Vec<u8>], resp: Resp) -> Result<Reply, Reply> {
        let (mut byscore, mut rev, mut withscores) = (false, false, false);
        let mut limit: Option<(i64, i64)> = None;
        let mut j = 4;
        while j < args.len() {
            match args[j].to_ascii_uppercase().as_slice() {
                b"BYSCORE" => byscore = true,
                b"BYLEX" => panic!("sim server: unmodelled command ZRANGE .. BYLEX"),
                b"REV" => rev = true,
                b"WITHSCORES" => withscores = true,
                b"LIMIT" if j + 2 < args.len() => {
                    let offset = parse_i64(&args[j + 1]).ok_or_else(|| Reply::err(NOT_INTEGER))?;
                    let count = parse_i64(&args[j + 2]).ok_or_else(|| Reply::err(NOT_INTEGER))?;
                    limit = Some((offset, count));
                    j += 2;
                }
                _ => return Err(Reply::err(SYNTAX)),
            }
            j += 1;
        }
        if limit.is_some() && !byscore {
            return Err(Reply::err(
                "ERR syntax error, LIMIT is only supported in combination with either BYSCORE or BYLEX",
            ));
        }
        let picked: Vec<(Vec<u8>, f64)> = if byscore {
            // REV takes the range as max min.
            let (min, max) = if rev {
                (&args[3], &args[2])
            } else {
                (&args[2], &args[3])
            };
            let (Some(min), Some(max)) = (Bound::parse(min), Bound::parse(max)) else {
                return Err(Reply::err("ERR min or max is not a float"));
            };
            let Some(z) = self.zset(&args[1], now)? else {
                return Ok(Reply::Array(vec![]));
            };
            let in_range = |&(_, s): &(&[u8], f64)| min.above_min(s) && max.below_max(s);
            let (offset, count) = limit.unwrap_or((0, -1));
            if offset < 0 {
                return Ok(Reply::Array(vec![]));
            }
            let take = if count < 0 {
                usize::MAX
            } else {
                count as usize
            };
            let items: Box<dyn Iterator<Item = (&[u8], f64)>> = if rev {
                Box::new(z.iter().rev())
            } else {
                Box::new(z.iter())
            };
            items
                .filter(in_range)
                .skip(offset as usize)
                .take(take)
                .map(|(m, s)| (m.to_vec(), s))
                .collect()
        } else {
            let start = parse_i64(&args[2]).ok_or_else(|| Reply::err(NOT_INTEGER))?;
            let stop = parse_i64(&args[3]).ok_or_else(|| Reply::err(NOT_INTEGER))?;
            let Some(z) = self.zset(&args[1], now)? else {
                return Ok(Reply::Array(vec![]));
            };
            let len = z.len() as i64;
            let start = if start < 0 {
                (len + start).max(0)
            } else {
                start
            };
            let stop = if stop < 0 {
                len + stop
            } else {
                stop.min(len - 1)
            };
            if start > stop || start >= len {
                return Ok(Reply::Array(vec![]));
            }
            let n = (stop - start + 1) as usize;
            let items: Box<dyn Iterator<Item = (&[u8], f64)>> = if rev {
                Box::new(z.iter().rev())
            } else {
                Box::new(z.iter())
            };
            items
                .skip(start as usize)
                .take(n)
                .map(|(m, s)| (m.to_vec(), s))
                .collect()
        };
        let mut out = Vec::with_capacity(picked.len() * if withscores { 2 } else { 1 });
        for (member, score) in picked {
            if !withscores {
                out.push(Reply::Bulk(member));
            } else if resp == Resp::Three {
                out.push(Reply::Array(vec![
                    Reply::Bulk(member),
                    Reply::Double(score),
                ]));
            } else {
                out.push(Reply::Bulk(member));
                out.push(score_reply(score, resp));
            }
        }
        Ok(Reply::Array(out))
    }

    /// ZREMRANGEBYSCORE key min max.
    fn zremrangebyscore(&mut self, now: i64, args: &[Vec<u8>]) -> Result<Reply, Reply> {
        let (Some(min), Some(max)) = (Bound::parse(&args[2]), Bound::parse(&args[3])) else {
            return Err(Reply::err("ERR min or max is not a float"));
        };
        let Some(z) = self.zset(&args[1], now)? else {
            return Ok(Reply::Int(0));
        };
        let gone: Vec<Vec<u8>> = z
            .iter()
            .filter(|&(_, s)| min.above_min(s) && max.below_max(s))
            .map(|(m, _)| m.to_vec())
            .collect();
        for m in &gone {
            z.remove(m);
        }
        self.drop_if_empty(&args[1]);
        Ok(Reply::Int(gone.len() as i64))
    }

    /// SCAN cursor [MATCH pattern] [COUNT n] [TYPE type]: every matching key
    /// in one page (COUNT is a hint Redis may exceed), cursor 0.
    fn scan(&mut self, now: i64, args: &[Vec<u8>]) -> Result<Reply, Reply> {
        let cursor = std::str::from_utf8(&args[1])
            .ok()
            .and_then(|c| c.parse::<u64>().ok())
            .ok_or_else(|| Reply::err("ERR invalid cursor"))?;
        let (mut pattern, mut kind): (Option<&[u8]>, Option<Vec<u8>>) = (None, None);
        let mut j = 2;
        while j < args.len() {
            let Some(value) = args.get(j + 1) else {
                return Err(Reply::err(SYNTAX));
            };
            match args[j].to_ascii_uppercase().as_slice() {
                b"MATCH" => pattern = Some(value),
                b"COUNT" => match parse_i64(value) {
                    Some(c) if c >= 1 => {}
                    Some(_) => return Err(Reply::err(SYNTAX)),
                    None => return Err(Reply::err(NOT_INTEGER)),
                },
                b"TYPE" => kind = Some(value.to_ascii_lowercase()),
                _ => return Err(Reply::err(SYNTAX)),
            }
            j += 2;
        }
        let keys = if cursor != 0 {
            vec![]
        } else {
            self.keys
                .iter()
                .filter(|(_, e)| e.expire_ms.is_none_or(|w| now <= w))
                .filter(|(k, _)| pattern.is_none_or(|p| glob(p, k)))
                .filter(|(_, e)| {
                    kind.as_deref()
                        .is_none_or(|t| t == e.data.type_name().as_bytes())
                })
                .map(|(k, _)| Reply::Bulk(k.clone()))
                .collect()
        };
        Ok(Reply::Array(vec![
            Reply::Bulk(b"0".to_vec()),
            Reply::Array(keys),
        ]))
    }
}

impl Reply {
    fn from_opt_bulk(v: Option<Vec<u8>>) -> Reply {
        v.map_or(Reply::Nil, Reply::Bulk)
    }
}
