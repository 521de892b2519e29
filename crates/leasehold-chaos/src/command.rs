//! The critical section as a command of `leasehold run`: read the
//! resource, (announce,) sleep, write read + 1, exit.
//!
//! `leasehold run` takes the lock, starts the command with the lease's
//! `LEASEHOLD_FENCE` and `LEASEHOLD_TOKEN` in its environment, renews the
//! lease while the command runs and releases it when the command exits. The
//! command knows nothing of Redis: whether it ever writes after the lease
//! could have expired depends only on the wrapper, which is what the
//! `run-wrapper-kill` scenario tests.

use std::time::Duration;

use crate::clock::now_us;
use crate::history::{Micros, WorkerId};
use crate::proto::{Reply, Request};
use crate::rng::Rng;
use crate::worker::Resource;

/// How a command runs; passed on its command line (the lease comes from
/// the environment).
#[derive(Debug, Clone)]
pub struct CommandConfig {
    /// The id of the `leasehold run` process that runs it.
    pub id: WorkerId,
    /// The resource server's loopback port.
    pub resource_port: u16,
    /// When its `leasehold run` was started: no later than its `acquire()`.
    pub started: Micros,
    /// Seed of the sleep.
    pub seed: u64,
    /// Longest sleep between read and write.
    pub max_sleep: Duration,
    /// Whether to announce "holding" (and obey the answer).
    pub announce: bool,
}

/// Runs the critical section once, with the lease `leasehold run` holds.
///
/// # Errors
///
/// When `LEASEHOLD_FENCE` or `LEASEHOLD_TOKEN` is missing, or the resource
/// server cannot be reached.
pub async fn run(config: CommandConfig) -> Result<(), String> {
    let fence: u64 = std::env::var("LEASEHOLD_FENCE")
        .map_err(|e| format!("LEASEHOLD_FENCE: {e}"))?
        .parse()
        .map_err(|e| format!("LEASEHOLD_FENCE: {e}"))?;
    let token = std::env::var("LEASEHOLD_TOKEN").map_err(|e| format!("LEASEHOLD_TOKEN: {e}"))?;
    let io = |e: std::io::Error| format!("resource connection: {e}");
    let mut resource = Resource::connect(config.resource_port, config.id)
        .await
        .map_err(|e| format!("cannot reach the resource: {e}"))?;
    resource
        .call(&Request::Acquired {
            started: config.started,
            t: now_us(),
            fence,
            token: token.clone(),
        })
        .await
        .map_err(io)?;
    let Reply::Values { unfenced, fenced } = resource
        .call(&Request::Read {
            fence,
            token: token.clone(),
        })
        .await
        .map_err(io)?
    else {
        return Err("READ: unexpected reply".to_owned());
    };
    if config.announce {
        // The checker may kill our wrapper meanwhile; a command that
        // outlives it carries on here, as any command would.
        if let Reply::Hold(ms) = resource
            .call(&Request::Holding { fence })
            .await
            .map_err(io)?
        {
            tokio::time::sleep(Duration::from_millis(ms)).await;
        }
    }
    let mut rng = Rng::new(config.seed ^ u64::from(config.id).wrapping_mul(0x9E37_79B9));
    let sleep = rng.below(config.max_sleep.as_micros() as u64 + 1);
    tokio::time::sleep(Duration::from_micros(sleep)).await;
    resource
        .call(&Request::Write {
            fence,
            token,
            unfenced: unfenced + 1,
            fenced: fenced.map(|v| v + 1),
        })
        .await
        .map_err(io)?;
    Ok(())
}
