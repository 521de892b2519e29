//! Subscriptions per connection, exact channels only: broadcast (SUBSCRIBE,
//! PUBLISH) and sharded (SSUBSCRIBE, SPUBLISH) apart, as Redis 7 keeps them.
//! A message goes to its subscribers in the order of their connection ids
//! (Redis: in the order they subscribed; one connection hears a message
//! once either way).

use std::collections::{BTreeMap, BTreeSet};

use redis::{PushInfo, PushKind, Value};

use super::Delivery;
use super::reply::Reply;

/// The channels of one kind (broadcast or sharded).
#[derive(Debug, Default)]
struct Channels {
    by_channel: BTreeMap<Vec<u8>, BTreeSet<u64>>,
    by_conn: BTreeMap<u64, BTreeSet<Vec<u8>>>,
}

impl Channels {
    fn count(&self, conn: u64) -> i64 {
        self.by_conn.get(&conn).map_or(0, |c| c.len() as i64)
    }

    fn add(&mut self, conn: u64, channel: &[u8]) {
        self.by_channel
            .entry(channel.to_vec())
            .or_default()
            .insert(conn);
        self.by_conn
            .entry(conn)
            .or_default()
            .insert(channel.to_vec());
    }

    fn remove(&mut self, conn: u64, channel: &[u8]) {
        if let Some(conns) = self.by_channel.get_mut(channel) {
            conns.remove(&conn);
            if conns.is_empty() {
                self.by_channel.remove(channel);
            }
        }
        if let Some(channels) = self.by_conn.get_mut(&conn) {
            channels.remove(channel);
            if channels.is_empty() {
                self.by_conn.remove(&conn);
            }
        }
    }

    fn of(&self, conn: u64) -> Vec<Vec<u8>> {
        self.by_conn
            .get(&conn)
            .map_or(vec![], |c| c.iter().cloned().collect())
    }
}

/// Every connection's subscriptions.
#[derive(Debug, Default)]
pub(super) struct PubSub {
    broadcast: Channels,
    sharded: Channels,
}

impl PubSub {
    /// PUBLISH (or SPUBLISH when `sharded`): queues one delivery per
    /// subscriber; how many there were.
    pub(super) fn publish(
        &self,
        sharded: bool,
        channel: &[u8],
        message: &[u8],
        out: &mut Vec<Delivery>,
    ) -> usize {
        let (channels, kind) = if sharded {
            (&self.sharded, PushKind::SMessage)
        } else {
            (&self.broadcast, PushKind::Message)
        };
        let Some(conns) = channels.by_channel.get(channel) else {
            return 0;
        };
        for &conn in conns {
            out.push(Delivery {
                conn,
                push: PushInfo {
                    kind: kind.clone(),
                    data: vec![
                        Value::BulkString(channel.to_vec()),
                        Value::BulkString(message.to_vec()),
                    ],
                },
            });
        }
        conns.len()
    }

    /// SUBSCRIBE, UNSUBSCRIBE, SSUBSCRIBE or SUNSUBSCRIBE (`verb`, upper
    /// case) of `channels` by `conn`: one confirmation per channel, each
    /// with the connection's count of subscriptions of that kind after it.
    /// An unsubscribe naming no channel ends them all (confirming nothing
    /// when there were none, as Redis does: one frame with a nil channel).
    pub(super) fn subscription(
        &mut self,
        conn: u64,
        verb: &str,
        channels: &[Vec<u8>],
    ) -> Vec<Reply> {
        let sharded = verb == "SSUBSCRIBE" || verb == "SUNSUBSCRIBE";
        let subscribe = !verb.contains("UNSUB");
        let kind = match (sharded, subscribe) {
            (false, true) => PushKind::Subscribe,
            (false, false) => PushKind::Unsubscribe,
            (true, true) => PushKind::SSubscribe,
            (true, false) => PushKind::SUnsubscribe,
        };
        if subscribe && channels.is_empty() {
            return vec![Reply::err(format!(
                "ERR wrong number of arguments for '{}' command",
                verb.to_ascii_lowercase()
            ))];
        }
        let table = if sharded {
            &mut self.sharded
        } else {
            &mut self.broadcast
        };
        let named: Vec<Vec<u8>> = if channels.is_empty() {
            table.of(conn)
        } else {
            channels.to_vec()
        };
        if named.is_empty() {
            return vec![Reply::Push(
                kind,
                vec![Reply::Nil, Reply::Int(table.count(conn))],
            )];
        }
        named
            .into_iter()
            .map(|channel| {
                if subscribe {
                    table.add(conn, &channel);
                } else {
                    table.remove(conn, &channel);
                }
                let count = table.count(conn);
                Reply::Push(kind.clone(), vec![Reply::Bulk(channel), Reply::Int(count)])
            })
            .collect()
    }

    /// Ends every sharded subscription to a channel `ended` picks (its
    /// slot moved away): a `sunsubscribe` push to each subscriber, as Redis
    /// 7 sends when a slot leaves the node.
    pub(super) fn end_sharded(&mut self, ended: impl Fn(&[u8]) -> bool, out: &mut Vec<Delivery>) {
        let picked: Vec<(u64, Vec<u8>)> = self
            .sharded
            .by_conn
            .iter()
            .flat_map(|(conn, channels)| channels.iter().map(move |c| (*conn, c.clone())))
            .filter(|(_, c)| ended(c))
            .collect();
        for (conn, channel) in picked {
            self.sharded.remove(conn, &channel);
            out.push(Delivery {
                conn,
                push: PushInfo {
                    kind: PushKind::SUnsubscribe,
                    data: vec![
                        Value::BulkString(channel),
                        Value::Int(self.sharded.count(conn)),
                    ],
                },
            });
        }
    }

    /// Ends every subscription of `conn`.
    pub(super) fn disconnect(&mut self, conn: u64) {
        for table in [&mut self.broadcast, &mut self.sharded] {
            for channel in table.of(conn) {
                table.remove(conn, &channel);
            }
        }
    }
}
