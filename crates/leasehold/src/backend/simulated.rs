//! A connection on the simulator's wire (`--cfg leasehold_sim` only): a
//! `sim://` URL's commands and subscriptions cross a [`Wire`] the simulator
//! installed, instead of the driver. Registered by one line in
//! [`Backend::connect`] and one in [`Backend::connect_tolerant`]. The older
//! seam, kept for the regression seeds found on it (the simulator's `--set
//! seam=wire`): every other simulated connection is the backend's own, over
//! a simulated socket (see `crate::sim`).

use std::sync::Arc;

use redis::aio::ConnectionLike;
use redis::{Cmd, RedisFuture, Value};

use super::connection::{Commands, DeploymentConnection, Pending};
use super::{Backend, ConnectOptions, OnPush};
use crate::error::{Error, Result};
use crate::sim::{Wire, WireFuture};

/// The backend of `url` if it is a `sim://` URL and this thread has a
/// simulator's dialer (see `sim::install`); None otherwise.
pub(super) async fn dial(
    url: &str,
    options: &ConnectOptions,
    on_push: &OnPush,
) -> Option<Result<Backend>> {
    let wire = crate::sim::dial(url, options.command_timeout, Arc::clone(on_push))?;
    Some(connect(url, wire, options).await)
}

async fn connect(
    url: &str,
    wire: std::result::Result<Arc<dyn Wire>, redis::RedisError>,
    options: &ConnectOptions,
) -> Result<Backend> {
    let wire = wire.map_err(|e| Error::from_redis(e, url, ""))?;
    let simulated = Simulated {
        wire,
        url: url.to_owned(),
    };
    let backend = Backend::new(Arc::new(simulated), url.to_owned(), options);
    backend.check_server().await?;
    Ok(backend)
}

struct Simulated {
    wire: Arc<dyn Wire>,
    /// For messages.
    url: String,
}

impl DeploymentConnection for Simulated {
    fn commands(&self) -> Commands {
        Commands::new(WireConn(Arc::clone(&self.wire)))
    }

    fn subscribe<'a>(&'a self, channel: &'a str) -> Pending<'a, Result<()>> {
        self.named(self.wire.subscribe(channel))
    }

    fn unsubscribe<'a>(&'a self, channel: &'a str) -> Pending<'a, Result<()>> {
        self.named(self.wire.unsubscribe(channel))
    }
}

impl Simulated {
    /// The wire's outcome, its error named by this connection's URL.
    fn named(&self, sent: WireFuture<redis::RedisResult<()>>) -> Pending<'_, Result<()>> {
        Box::pin(async move { sent.await.map_err(|e| Error::from_redis(e, &self.url, "")) })
    }
}

/// The wire as the connection one command goes out on.
struct WireConn(Arc<dyn Wire>);

impl ConnectionLike for WireConn {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a Cmd) -> RedisFuture<'a, Value> {
        let reply = self.0.request(cmd);
        Box::pin(async move { reply.await?.extract_error() })
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        pipeline: &'a redis::Pipeline,
        offset: usize,
        count: usize,
    ) -> RedisFuture<'a, Vec<Value>> {
        assert!(
            offset == 0 && count == pipeline.len(),
            "the simulator models plain pipelines, not MULTI"
        );
        let replies = self.0.pipeline(pipeline.cmd_iter().cloned().collect());
        Box::pin(replies)
    }

    fn get_db(&self) -> i64 {
        0
    }
}
