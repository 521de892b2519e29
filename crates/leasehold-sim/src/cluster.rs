//! A simulated Redis Cluster's slot map and the redirections its nodes
//! answer (Redis's `getNodeByQuery`): MOVED to a slot's owner, ASK to the
//! node a migrating slot's missing keys went to, TRYAGAIN for a multi-key
//! command whose keys are split by a migration, CROSSSLOT. The world runs
//! a command on a node only when this says the node serves it.
//!
//! Node addresses name the client process too (`p3-c1:7000`): a socket is
//! dialled by the driver of one simulated process, so the address it got
//! from CLUSTER SLOTS says whose connection it opens.

use std::collections::{BTreeMap, BTreeSet};

use redis::Value;

use crate::server::error_value;

/// Hash slots of a cluster.
pub const SLOTS: u16 = 16384;

/// The slot of `key` (CRC16-XMODEM of its hash tag, if it has one).
pub fn slot(key: &[u8]) -> u16 {
    let tagged = key
        .iter()
        .position(|&b| b == b'{')
        .and_then(|open| {
            let rest = &key[open + 1..];
            let close = rest.iter().position(|&b| b == b'}')?;
            (close > 0).then(|| &rest[..close])
        })
        .unwrap_or(key);
    let mut crc: u16 = 0;
    for &b in tagged {
        crc ^= u16::from(b) << 8;
        for _ in 0..8 {
            crc = if crc & 0x8000 != 0 {
                (crc << 1) ^ 0x1021
            } else {
                crc << 1
            };
        }
    }
    crc % SLOTS
}

/// The keys a command names, as a cluster routes it: a script's KEYS, a
/// sharded channel, a key command's key; none for the rest.
pub fn keys_of(args: &[Vec<u8>]) -> Vec<&[u8]> {
    let Some(name) = args.first() else {
        return Vec::new();
    };
    let name = String::from_utf8_lossy(name).to_ascii_uppercase();
    match name.as_str() {
        "EVAL" | "EVALSHA" | "EVAL_RO" | "EVALSHA_RO" => {
            let n: usize = args
                .get(2)
                .and_then(|n| std::str::from_utf8(n).ok())
                .and_then(|n| n.parse().ok())
                .unwrap_or(0);
            args.iter().skip(3).take(n).map(Vec::as_slice).collect()
        }
        "SSUBSCRIBE" | "SUNSUBSCRIBE" => args[1..].iter().map(Vec::as_slice).collect(),
        "SPUBLISH" | "GET" | "SET" | "DEL" | "EXISTS" | "TYPE" | "PTTL" | "TTL" | "HGET"
        | "HGETALL" | "HLEN" | "ZRANGE" | "ZCARD" | "ZSCORE" | "ZADD" | "ZREM" | "HSET"
        | "STRLEN" | "PEXPIRE" | "DUMP" => args.get(1).map(Vec::as_slice).into_iter().collect(),
        _ => Vec::new(),
    }
}

/// Who serves which slot, and which node is whose replica.
#[derive(Debug, Clone)]
pub struct ClusterMap {
    /// The master that owns each slot.
    owner: Vec<String>,
    /// Slots migrating: slot -> the node importing it.
    pub migrating: BTreeMap<u16, String>,
    /// Replica -> its master.
    pub replica_of: BTreeMap<String, String>,
    /// Nodes that are down: connections to them are refused.
    pub down: BTreeSet<String>,
    /// Every node of the cluster, masters and replicas.
    nodes: BTreeSet<String>,
}

/// The port every simulated node's address carries.
pub const PORT: u16 = 7000;

impl ClusterMap {
    /// `masters` with the slots split evenly in that order, and their
    /// replicas (replica, master).
    pub fn new(masters: &[String], replicas: &[(String, String)]) -> ClusterMap {
        let per = SLOTS as usize / masters.len();
        let owner = (0..SLOTS as usize)
            .map(|s| masters[(s / per).min(masters.len() - 1)].clone())
            .collect();
        ClusterMap {
            owner,
            migrating: BTreeMap::new(),
            replica_of: replicas.iter().cloned().collect(),
            down: BTreeSet::new(),
            nodes: masters
                .iter()
                .chain(replicas.iter().map(|(r, _)| r))
                .cloned()
                .collect(),
        }
    }

    /// Whether `node` is one of the cluster's.
    pub fn has(&self, node: &str) -> bool {
        self.nodes.contains(node)
    }

    /// The master that owns `slot`.
    pub fn owner(&self, slot: u16) -> &str {
        &self.owner[slot as usize]
    }

    /// Gives `slot` to `node` (CLUSTER SETSLOT .. NODE; the migration, if
    /// any, ends).
    pub fn assign(&mut self, slot: u16, node: &str) {
        self.owner[slot as usize] = node.to_owned();
        self.migrating.remove(&slot);
    }

    /// Gives every slot of `from` to `to` (a replica promoted).
    pub fn take_over(&mut self, from: &str, to: &str) {
        for owner in self.owner.iter_mut().filter(|o| *o == from) {
            *owner = to.to_owned();
        }
        for target in self.migrating.values_mut().filter(|t| *t == from) {
            *target = to.to_owned();
        }
        self.replica_of.remove(to);
        // The old master's other replicas, if any, follow the new one.
        for master in self.replica_of.values_mut().filter(|m| *m == from) {
            *master = to.to_owned();
        }
    }

    /// The address of `node` as process `process` is told it.
    pub fn host(process: usize, node: &str) -> String {
        format!("p{process}-{node}")
    }

    /// The process and node of an address's host.
    pub fn parse_host(host: &str) -> Option<(usize, String)> {
        let (p, node) = host.strip_prefix('p')?.split_once('-')?;
        Some((p.parse().ok()?, node.to_owned()))
    }

    /// CLUSTER SLOTS as `process` is told it: each range of one owner, its
    /// master and replicas that are up.
    pub fn slots_reply(&self, process: usize) -> Value {
        let addr = |node: &str| {
            Value::Array(vec![
                Value::BulkString(ClusterMap::host(process, node).into_bytes()),
                Value::Int(i64::from(PORT)),
                Value::BulkString(format!("{node:0<40}").into_bytes()),
            ])
        };
        let mut ranges = Vec::new();
        let mut start = 0usize;
        for s in 1..=SLOTS as usize {
            if s < SLOTS as usize && self.owner[s] == self.owner[start] {
                continue;
            }
            let master = &self.owner[start];
            let mut entry = vec![
                Value::Int(start as i64),
                Value::Int(s as i64 - 1),
                addr(master),
            ];
            for (replica, _) in self
                .replica_of
                .iter()
                .filter(|(r, m)| *m == master && !self.down.contains(*r))
            {
                entry.push(addr(replica));
            }
            ranges.push(Value::Array(entry));
            start = s;
        }
        Value::Array(ranges)
    }

    /// Whether `node` serves a command naming `keys` (Ok), or the
    /// redirection it answers. `asking`: the connection sent ASKING just
    /// before; `present`: whether a key is on `node` now.
    pub fn route(
        &self,
        node: &str,
        process: usize,
        keys: &[&[u8]],
        asking: bool,
        present: impl Fn(&[u8]) -> bool,
    ) -> Result<(), Value> {
        let Some(first) = keys.first() else {
            return Ok(());
        };
        let slot = slot(first);
        if keys.iter().any(|k| self::slot(k) != slot) {
            return Err(error_value(
                "CROSSSLOT Keys in request don't hash to the same slot",
            ));
        }
        let moved = |to: &str, kind: &str| {
            error_value(&format!(
                "{kind} {slot} {}:{PORT}",
                ClusterMap::host(process, to)
            ))
        };
        let owner = self.owner(slot);
        let missing = keys.iter().filter(|k| !present(k)).count();
        let multiple = keys.len() > 1;
        let unstable = || error_value("TRYAGAIN Multiple keys request during rehashing of slot");
        if node == owner {
            return match self.migrating.get(&slot) {
                Some(target) if missing > 0 => {
                    if multiple && missing < keys.len() {
                        Err(unstable())
                    } else {
                        Err(moved(target, "ASK"))
                    }
                }
                _ => Ok(()),
            };
        }
        if asking && self.migrating.get(&slot).is_some_and(|t| t == node) {
            return if multiple && missing > 0 {
                Err(unstable())
            } else {
                Ok(())
            };
        }
        Err(moved(owner, "MOVED"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slots_are_redis_s() {
        // Values from Redis's CLUSTER KEYSLOT.
        assert_eq!(slot(b"foo"), 12182);
        assert_eq!(slot(b"leasehold:{n0}:lock"), slot(b"n0"));
        assert_eq!(slot(b"{}x"), slot(b"{}x"));
        assert_eq!(slot(b"123456789"), 12739);
    }

    #[test]
    fn a_migrating_slot_asks_for_keys_gone_and_splits_refuse() {
        let masters = vec!["a".to_owned(), "b".to_owned()];
        let mut map = ClusterMap::new(&masters, &[]);
        let k: &[u8] = b"{x}1";
        let s = slot(k);
        let (owner, other) = if map.owner(s) == "a" {
            ("a", "b")
        } else {
            ("b", "a")
        };
        assert!(map.route(owner, 0, &[k], false, |_| false).is_ok());
        assert!(map.route(other, 0, &[k], false, |_| true).is_err());
        map.migrating.insert(s, other.to_owned());
        let code = |v: Value| match v {
            Value::ServerError(e) => e.code().to_owned(),
            other => panic!("not an error: {other:?}"),
        };
        let ask = map.route(owner, 0, &[k], false, |_| false).unwrap_err();
        assert_eq!(code(ask), "ASK");
        let split = map.route(owner, 0, &[k, b"{x}2"], false, |key| key == k);
        assert_eq!(code(split.unwrap_err()), "TRYAGAIN");
        assert!(map.route(other, 0, &[k], true, |_| true).is_ok());
        assert!(map.route(other, 0, &[k], false, |_| true).is_err());
        map.assign(s, other);
        assert!(map.route(other, 0, &[k], false, |_| true).is_ok());
    }
}
