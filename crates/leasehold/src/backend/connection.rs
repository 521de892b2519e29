//! What a [`Backend`](super::Backend) asks of the deployment it talks to:
//! one trait, [`DeploymentConnection`], implemented once per deployment
//! (`single.rs`, `cluster.rs`, `sentinel.rs`, and the simulator's wire in
//! `simulated.rs`). Its provided methods send everything on the one
//! connection [`commands`](DeploymentConnection::commands) gives, which is
//! all a server, a Sentinel master or the simulator's wire needs; a cluster
//! routes per slot instead and overrides them.

use redis::aio::ConnectionLike;
use redis::{Cmd, RedisFuture, RedisResult, ScriptInvocation, Value};

use super::{scan_command, scan_page};
use crate::error::{Error, Result};

/// A boxed future of a deployment's connection: one Box per request, which
/// is nothing next to a round trip.
pub(crate) type Pending<'a, T> = futures_util::future::BoxFuture<'a, T>;

/// The connection one command (or pipeline, or script call) goes out on.
pub(crate) struct Commands(Box<dyn ConnectionLike + Send>);

impl Commands {
    pub(crate) fn new(conn: impl ConnectionLike + Send + 'static) -> Commands {
        Commands(Box::new(conn))
    }
}

impl ConnectionLike for Commands {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a Cmd) -> RedisFuture<'a, Value> {
        self.0.req_packed_command(cmd)
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        pipeline: &'a redis::Pipeline,
        offset: usize,
        count: usize,
    ) -> RedisFuture<'a, Vec<Value>> {
        self.0.req_packed_commands(pipeline, offset, count)
    }

    fn get_db(&self) -> i64 {
        self.0.get_db()
    }
}

/// A connection to one deployment (a server, a cluster, a Sentinel-watched
/// master, the simulator's wire): what [`Backend`](super::Backend) needs of
/// it. Errors are the driver's; the backend names its address and key.
pub(crate) trait DeploymentConnection: Send + Sync {
    /// The connection the next command goes out on (Sentinel: to the master
    /// in use now).
    fn commands(&self) -> Commands;

    /// Runs a script: EVALSHA, then SCRIPT LOAD and EVALSHA again on a
    /// NOSCRIPT reply. `key` is the script's first key.
    fn invoke<'a>(
        &'a self,
        invocation: &'a ScriptInvocation<'a>,
        key: &'a str,
    ) -> Pending<'a, RedisResult<Value>> {
        let _ = key;
        let mut conn = self.commands();
        Box::pin(async move { invocation.invoke_async(&mut conn).await })
    }

    /// Runs `cmd` on the server that holds `key` (a cluster: its master).
    fn on_master_of<'a>(&'a self, cmd: Cmd, key: &'a str) -> Pending<'a, RedisResult<Value>> {
        let _ = key;
        let mut conn = self.commands();
        Box::pin(async move { cmd.query_async(&mut conn).await })
    }

    /// Runs `cmd` on every node (a cluster's masters and replicas).
    fn on_every_node<'a>(&'a self, cmd: &'a Cmd) -> Pending<'a, RedisResult<PerNode>> {
        let mut conn = self.commands();
        Box::pin(async move {
            let reply = cmd.query_async(&mut conn).await?;
            Ok(Ok(vec![reply]))
        })
    }

    /// Every key `SCAN .. MATCH pattern TYPE kind` names, on every master,
    /// in the order found (repeats possible).
    fn scan<'a>(
        &'a self,
        pattern: &'a str,
        kind: &'a str,
    ) -> Pending<'a, RedisResult<Vec<String>>> {
        let mut conn = self.commands();
        Box::pin(async move {
            let mut keys = Vec::new();
            let mut cursor = 0;
            loop {
                let reply = scan_command(cursor, pattern, kind)
                    .query_async(&mut conn)
                    .await?;
                cursor = scan_page(reply, &mut keys)?;
                if cursor == 0 {
                    return Ok(keys);
                }
            }
        })
    }

    /// Subscribes to an exact channel (never a pattern); returns once
    /// confirmed.
    fn subscribe<'a>(&'a self, channel: &'a str) -> Pending<'a, Result<()>>;

    /// As [`subscribe`](Self::subscribe), but a server that cannot be
    /// reached now is subscribed once it is back (until
    /// [`forget`](Self::forget) or an unsubscribe). Only one server keeps
    /// such a wish: a Redlock node.
    fn subscribe_or_later<'a>(&'a self, channel: &'a str) -> Pending<'a, Result<()>> {
        self.subscribe(channel)
    }

    /// Drops a channel [`subscribe_or_later`](Self::subscribe_or_later)
    /// kept wanted, sending nothing.
    fn forget(&self, channel: &str) {
        let _ = channel;
    }

    /// Ends a subscription made by [`subscribe`](Self::subscribe).
    fn unsubscribe<'a>(&'a self, channel: &'a str) -> Pending<'a, Result<()>>;

    /// A call failed with `e`: Sentinel asks the sentinels again when the
    /// master could not be reached.
    fn note(&self, e: &Error) {
        let _ = e;
    }

    /// Whether keys of different hash slots may live on different servers.
    fn is_cluster(&self) -> bool {
        false
    }

    /// Waits until every request on `key` whose caller stopped waiting is
    /// done (a cluster, where one may run after a later request: see
    /// `abandoned.rs`). One connection, in order, needs no wait: a request
    /// sent later queues behind it.
    fn settled<'a>(&'a self, key: &'a str) -> Pending<'a, ()> {
        let _ = key;
        Box::pin(std::future::ready(()))
    }

    /// Whether release messages go by SPUBLISH and SSUBSCRIBE.
    fn sharded_pubsub(&self) -> bool {
        false
    }
}

/// Each node's reply (errors still in it), or what the deployment answered
/// instead of one reply per node.
pub(crate) type PerNode = std::result::Result<Vec<Value>, String>;
