//! A Redis Cluster: redis-rs's async cluster connection for commands (one
//! multiplexed RESP3 connection per node, MOVED/ASK and slot migration
//! followed by the driver), each call routed by its first key, built without
//! a push sender so it carries no subscription; pub/sub on connections of
//! their own (see [`subscriber`](super::subscriber) for why: the driver's
//! resubscription crossed replies between commands): where every master has
//! sharded pub/sub and the user may run it (Redis or Valkey 7+, asked once
//! at connect), release messages go by SPUBLISH, which reaches only the
//! channel's shard, and each channel is subscribed by SSUBSCRIBE at its
//! slot's master; otherwise by PUBLISH, which the cluster forwards to every
//! node, all subscribed on one node.

use std::collections::HashSet;
use std::sync::Arc;
use std::time::Duration;

use redis::aio::ConnectionLike;
use redis::cluster_routing::{
    MultipleNodeRoutingInfo, Route, RoutingInfo, SingleNodeRoutingInfo, SlotAddr,
};
use redis::{Cmd, RedisFuture, RedisResult, ScriptInvocation, Value};

use super::abandoned::Abandoned;
use super::connection::{Commands, DeploymentConnection, Pending, PerNode};
use super::subscriber::{ClusterConnection, Mode, Subscriber};
use super::{ConnectOptions, OnPush, parse_url, scan_command, scan_page};
use crate::error::{Error, Result};

pub(crate) struct Cluster {
    /// Commands, on the driver's connection (without push sender, so
    /// without subscriptions).
    conn: ClusterConnection,
    /// Pub/sub, on connections of its own.
    subscriber: Arc<Subscriber>,
    /// Every master has sharded pub/sub and lets this user run it.
    sharded: bool,
    /// Script calls whose caller stopped waiting, which a release on their
    /// key waits for ([`DeploymentConnection::settled`]), at most this long.
    abandoned: (Arc<Abandoned>, Duration),
}

/// How many times the driver sends a request again (after a redirection, a
/// dropped connection, a timeout) before it gives up.
const RETRIES: u32 = 3;

impl Cluster {
    /// Connects through any of its nodes (`urls`); the driver discovers the
    /// rest and follows slot moves and failovers. Also gives the cluster's
    /// name for messages.
    pub(crate) async fn connect(
        urls: &[String],
        options: &ConnectOptions,
        on_push: OnPush,
    ) -> Result<(Cluster, String)> {
        let infos = urls
            .iter()
            .map(|url| parse_url(url, options))
            .collect::<Result<Vec<_>>>()?;
        let addr = format!(
            "cluster {}",
            infos
                .iter()
                .map(|i| i.addr().to_string())
                .collect::<Vec<_>>()
                .join(",")
        );
        // No push sender: the driver then tracks no subscriptions and never
        // resends them on this connection (see `subscriber`).
        #[cfg_attr(not(any(feature = "tls", leasehold_sim)), allow(unused_mut))]
        let mut builder = redis::cluster::ClusterClientBuilder::new(infos.clone())
            .use_protocol(redis::ProtocolVersion::RESP3)
            .connection_timeout(options.command_timeout)
            .response_timeout(options.command_timeout)
            .retries(RETRIES);
        // Without `tls`, `parse_url` refused every TLS URL.
        #[cfg(feature = "tls")]
        if infos
            .iter()
            .any(|i| matches!(i.addr(), redis::ConnectionAddr::TcpTls { .. }))
        {
            builder = builder.certs(options.tls.certificates());
        }
        // The simulator pins the back-off's jitter (drawn from the seed):
        // the driver draws it from the thread's own random source.
        #[cfg(leasehold_sim)]
        {
            let wait = crate::sim::retry_wait_ms();
            builder = builder.min_retry_wait(wait).max_retry_wait(wait);
        }
        let client = builder
            .build()
            .map_err(|e| Error::from_redis(e, &addr, ""))?;
        #[cfg(not(leasehold_sim))]
        let conn = client.get_async_connection().await;
        #[cfg(leasehold_sim)]
        let conn = client
            .get_async_generic_connection::<crate::sim::NodeConn>()
            .await;
        let conn = conn.map_err(|e| Error::from_redis(e, &addr, ""))?;
        let sharded = sharded_pubsub(&conn, &addr).await;
        let mode = if sharded {
            Mode::Sharded
        } else {
            Mode::Broadcast
        };
        let subscriber = Subscriber::start(mode, infos, options.clone(), on_push, conn.clone());
        let cluster = Cluster {
            conn,
            subscriber,
            sharded,
            // As long as the driver keeps a request: each of its tries (the
            // first and `RETRIES` more) may connect and then wait for the
            // reply, each bounded by the command timeout.
            abandoned: (Arc::default(), options.command_timeout * 2 * (RETRIES + 1)),
        };
        Ok((cluster, addr))
    }

    /// The first slot of each master's first range (`CLUSTER SLOTS`): a
    /// route to every master, one each.
    async fn one_slot_per_master(&self) -> RedisResult<Vec<u16>> {
        let ranges: Vec<Value> = redis::cmd("CLUSTER")
            .arg("SLOTS")
            .query_async(&mut self.conn.clone())
            .await?;
        let mut masters = HashSet::new();
        let mut slots = Vec::new();
        for range in ranges {
            let Value::Array(range) = range else { continue };
            let (Some(Value::Int(start)), Some(Value::Array(master))) =
                (range.first(), range.get(2))
            else {
                continue;
            };
            let address = (master.first().cloned(), master.get(1).cloned());
            if let Ok(slot) = u16::try_from(*start)
                && masters.insert(format!("{address:?}"))
            {
                slots.push(slot);
            }
        }
        Ok(slots)
    }
}

impl DeploymentConnection for Cluster {
    /// The driver's connection, which routes each command by its first key.
    fn commands(&self) -> Commands {
        Commands::new(self.conn.clone())
    }

    fn invoke<'a>(
        &'a self,
        invocation: &'a ScriptInvocation<'a>,
        key: &'a str,
    ) -> Pending<'a, RedisResult<Value>> {
        Box::pin(async move {
            let mut routed = KeyRouted {
                conn: self.conn.clone(),
                key,
                abandoned: &self.abandoned.0,
                load_everywhere: false,
            };
            match invocation.invoke_async(&mut routed).await {
                // Loaded where the driver's slot map put the key, but run
                // where the slot is now (a failover moved it, on Redis 6.2
                // seen in cluster_reshard's failover test): load it on every
                // master, as the driver does. NOSCRIPT means it never ran, so
                // running it again is safe.
                Err(e)
                    if e.kind() == redis::ErrorKind::Server(redis::ServerErrorKind::NoScript) =>
                {
                    routed.load_everywhere = true;
                    invocation.invoke_async(&mut routed).await
                }
                other => other,
            }
        })
    }

    fn on_master_of<'a>(&'a self, cmd: Cmd, key: &'a str) -> Pending<'a, RedisResult<Value>> {
        let route = Route::with_key(key.as_bytes(), SlotAddr::Master);
        let routing = RoutingInfo::SingleNode(SingleNodeRoutingInfo::SpecificNode(route));
        let mut conn = self.conn.clone();
        Box::pin(async move { conn.route_command(cmd, routing).await })
    }

    /// One reply per node: the driver's own adding up expects RESP2 arrays
    /// where RESP3 servers answer maps.
    fn on_every_node<'a>(&'a self, cmd: &'a Cmd) -> Pending<'a, RedisResult<PerNode>> {
        let every_node = RoutingInfo::MultiNode((MultipleNodeRoutingInfo::AllNodes, None));
        let mut conn = self.conn.clone();
        Box::pin(async move {
            Ok(match conn.route_command(cmd.clone(), every_node).await? {
                Value::Map(per_node) => Ok(per_node.into_iter().map(|(_, reply)| reply).collect()),
                reply => Err(format!(
                    "the cluster answered {reply:?} for one reply per node"
                )),
            })
        })
    }

    fn scan<'a>(
        &'a self,
        pattern: &'a str,
        kind: &'a str,
    ) -> Pending<'a, RedisResult<Vec<String>>> {
        Box::pin(async move {
            let mut keys = Vec::new();
            let mut conn = self.conn.clone();
            for slot in self.one_slot_per_master().await? {
                let route = Route::new(slot, SlotAddr::Master);
                let routing = RoutingInfo::SingleNode(SingleNodeRoutingInfo::SpecificNode(route));
                let mut cursor = 0;
                loop {
                    let cmd = scan_command(cursor, pattern, kind);
                    let reply = conn.route_command(cmd, routing.clone()).await?;
                    cursor = scan_page(reply, &mut keys)?;
                    if cursor == 0 {
                        break;
                    }
                }
            }
            Ok(keys)
        })
    }

    /// At the channel's master (sharded pub/sub), or on any one node (a
    /// PUBLISH reaches every node over the cluster bus).
    fn subscribe<'a>(&'a self, channel: &'a str) -> Pending<'a, Result<()>> {
        Box::pin(self.subscriber.subscribe(channel))
    }

    fn unsubscribe<'a>(&'a self, channel: &'a str) -> Pending<'a, Result<()>> {
        Box::pin(self.subscriber.unsubscribe(channel))
    }

    fn is_cluster(&self) -> bool {
        true
    }

    /// A script call whose caller stopped waiting may still be on a
    /// connection the driver has since replaced (it replaces one whose PING
    /// check fails while requests on it are in flight): a release sent now
    /// on the new one would not queue behind it (seed 10025).
    fn settled<'a>(&'a self, key: &'a str) -> Pending<'a, ()> {
        Box::pin(async move {
            let (abandoned, bound) = &self.abandoned;
            if !abandoned.settled(key, *bound).await {
                tracing::debug!(%key, ?bound, "a request whose caller stopped waiting is still \
                    in flight; releasing anyway");
            }
        })
    }

    fn sharded_pubsub(&self) -> bool {
        self.sharded
    }
}

/// The cluster connection for one script call on `key`: the driver sends a
/// `SCRIPT LOAD` (after a NOSCRIPT reply) to every master and waits for all
/// of them, so one frozen master held up every call that had to load its
/// script, and its timeout then set the driver reconnecting, which holds
/// back every command. Here it goes to the master of `key` only, the one
/// that runs the script (issue 24, item 1).
struct KeyRouted<'k> {
    conn: ClusterConnection,
    key: &'k str,
    /// A request whose caller stops waiting goes on to its end, counted.
    abandoned: &'k Arc<Abandoned>,
    /// A SCRIPT LOAD goes to every master, as the driver sends it.
    load_everywhere: bool,
}

impl KeyRouted<'_> {
    fn is_script_load(cmd: &Cmd) -> bool {
        let mut args = cmd.args_iter().map(|arg| match arg {
            redis::Arg::Simple(bytes) => Some(bytes),
            _ => None,
        });
        matches!(
            (args.next().flatten(), args.next().flatten()),
            (Some(a), Some(b)) if a.eq_ignore_ascii_case(b"SCRIPT") && b.eq_ignore_ascii_case(b"LOAD")
        )
    }
}

impl ConnectionLike for KeyRouted<'_> {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a Cmd) -> RedisFuture<'a, Value> {
        let (mut conn, cmd) = (self.conn.clone(), cmd.clone());
        if self.load_everywhere || self.key.is_empty() || !KeyRouted::is_script_load(&cmd) {
            let request = async move { conn.req_packed_command(&cmd).await };
            return Box::pin(self.abandoned.run(self.key, request));
        }
        let route = Route::with_key(self.key.as_bytes(), SlotAddr::Master);
        let routing = RoutingInfo::SingleNode(SingleNodeRoutingInfo::SpecificNode(route));
        let request = async move { conn.route_command(cmd, routing).await };
        Box::pin(self.abandoned.run(self.key, request))
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        pipeline: &'a redis::Pipeline,
        offset: usize,
        count: usize,
    ) -> RedisFuture<'a, Vec<Value>> {
        self.conn.req_packed_commands(pipeline, offset, count)
    }

    fn get_db(&self) -> i64 {
        self.conn.get_db()
    }
}

/// Says, per master, whether the server has SPUBLISH, SSUBSCRIBE and
/// SUNSUBSCRIBE and lets this user run them: `redis.acl_check_cmd` exists
/// from Redis 7.0 (and Valkey), as sharded pub/sub does. Lua's true is 1.
const SHARDED_PUBSUB_PROBE: &str = "return redis.acl_check_cmd('spublish') \
    and redis.acl_check_cmd('ssubscribe') and redis.acl_check_cmd('sunsubscribe')";

/// Whether the cluster's release messages can go by SPUBLISH and
/// SSUBSCRIBE: every master answers [`SHARDED_PUBSUB_PROBE`] with yes.
/// Asked once at connect; otherwise (Redis 6, an ACL user without those
/// commands, a master that did not answer) they go by PUBLISH, which the
/// cluster forwards to every node.
async fn sharded_pubsub(conn: &ClusterConnection, addr: &str) -> bool {
    let mut probe = redis::cmd("EVAL");
    probe.arg(SHARDED_PUBSUB_PROBE).arg(0);
    let every_master = RoutingInfo::MultiNode((MultipleNodeRoutingInfo::AllMasters, None));
    let answers = match conn.clone().route_command(probe, every_master).await {
        Ok(Value::Map(per_master)) => per_master,
        other => {
            tracing::info!(%addr, reply = ?other, "release messages go by PUBLISH to every node: \
                cannot tell whether the masters have sharded pub/sub");
            return false;
        }
    };
    let refused: Vec<String> = answers
        .iter()
        .filter(|(_, answer)| *answer != Value::Int(1))
        .map(|(node, answer)| format!("{node:?}: {answer:?}"))
        .collect();
    if answers.is_empty() || !refused.is_empty() {
        tracing::info!(%addr, ?refused, "release messages go by PUBLISH to every node: some \
            master lacks sharded pub/sub (Redis or Valkey 7+) or does not let this user run \
            SPUBLISH, SSUBSCRIBE and SUNSUBSCRIBE");
        return false;
    }
    tracing::debug!(%addr, "release messages go by SPUBLISH to their shard");
    true
}
