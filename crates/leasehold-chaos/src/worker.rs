//! A worker process: acquire, read, sleep, write read + 1, release; again.
//!
//! Runs in its own OS process (the checker re-executes its own binary with
//! the hidden `worker` subcommand), so SIGSTOP freezes the client together
//! with its watchdog, and SIGKILL kills both.
//!
//! Workers deliberately do not check `is_lost()` before writing: no check
//! can close the window between the check and the write (a pause can fall
//! right after it), and the checker exists to show what happens in that
//! window. They do watch `lost()` throughout and report when it fires.

use std::time::Duration;

use leasehold::{Client, Error, LockGuard};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::net::TcpStream;

use crate::clock::now_us;
use crate::history::{Micros, Outcome, WorkerId};
use crate::proto::{Reply, Request};
use crate::rng::Rng;

/// How a worker runs; passed on its command line.
#[derive(Debug, Clone)]
pub struct WorkerConfig {
    /// This worker's id.
    pub id: WorkerId,
    /// The Redis URL (possibly a fault proxy); several: the Redlock nodes.
    pub urls: Vec<String>,
    /// The resource server's loopback port.
    pub resource_port: u16,
    /// The lock every worker contends for.
    pub lock: String,
    /// Lease TTL.
    pub ttl: Duration,
    /// How long one `acquire()` waits for the lock.
    pub wait: Duration,
    /// The client's command timeout.
    pub command_timeout: Duration,
    /// Stop starting new acquisitions at this `CLOCK_MONOTONIC` time.
    pub until: Micros,
    /// Seed of the worker's sleeps and probes.
    pub seed: u64,
    /// Longest sleep between read and write.
    pub max_sleep: Duration,
    /// Whether to announce "holding" (and obey the answer) each time.
    pub announce: bool,
    /// Whether to tell the checker before each `acquire()` (and wait for
    /// its answer: it may freeze Redis meanwhile).
    pub report_acquiring: bool,
    /// Whether to announce "holding" after an `acquire()` that took longer
    /// than the TTL (when not announcing every time).
    pub announce_slow: bool,
    /// Whether to probe now and then with the token of an acquisition
    /// already released (off while the checker reads give-backs off the
    /// server: a second release of a token is what it looks for).
    pub probes: bool,
    /// Leases to hold on locks of the worker's own, dropped when the
    /// checker says it froze Redis (and taken anew on fresh names at the
    /// next iteration).
    pub ballast: usize,
    /// The URLs are nodes of one Redis Cluster (`Client::cluster`).
    pub cluster: bool,
    /// Locks held on the side for the whole run (TTL `ttl`, renewed by the
    /// watchdog) on masters that are never frozen: each loss is reported
    /// ([`Request::HeldLost`]) and the lock taken again.
    pub held_healthy: Vec<String>,
    /// The same on the master the checker freezes.
    pub held_frozen: Vec<String>,
}

/// Longest pause the checker may impose after a failed `acquire()`.
const MAX_HOLD_MS: u64 = 10_000;
/// One in this many iterations probes with the last released token.
const PROBE_EVERY: u64 = 8;
/// TTL of the ballast leases: long, so they are renewed seldom.
const BALLAST_TTL: Duration = Duration::from_secs(10);

/// A worker's connection to the checker's resource server.
pub(crate) struct Resource {
    reader: BufReader<tokio::net::tcp::OwnedReadHalf>,
    writer: tokio::net::tcp::OwnedWriteHalf,
}

impl Resource {
    /// Connects and says who is talking.
    pub(crate) async fn connect(port: u16, id: WorkerId) -> std::io::Result<Resource> {
        let stream = TcpStream::connect(("127.0.0.1", port)).await?;
        stream.set_nodelay(true)?;
        let (r, w) = stream.into_split();
        let mut resource = Resource {
            reader: BufReader::new(r),
            writer: w,
        };
        resource.call(&Request::Hello { worker: id }).await?;
        Ok(resource)
    }

    /// Sends one request and reads its reply.
    pub(crate) async fn call(&mut self, request: &Request) -> std::io::Result<Reply> {
        let mut line = request.encode();
        line.push('\n');
        self.writer.write_all(line.as_bytes()).await?;
        let mut reply = String::new();
        if self.reader.read_line(&mut reply).await? == 0 {
            return Err(std::io::ErrorKind::UnexpectedEof.into());
        }
        match Reply::parse(&reply) {
            Some(Reply::Error(e)) => Err(std::io::Error::other(e)),
            Some(r) => Ok(r),
            None => Err(std::io::Error::other(format!("bad reply {reply:?}"))),
        }
    }
}

fn outcome<T>(result: &Result<T, Error>) -> Outcome {
    match result {
        Ok(_) => Outcome::Ok,
        Err(Error::Lost { .. }) => Outcome::Lost,
        Err(Error::NotOwner { .. }) => Outcome::NotOwner,
        Err(_) => Outcome::Error,
    }
}

/// Runs the worker loop until `config.until`.
///
/// # Errors
///
/// When the resource server cannot be reached (the checker is gone) or
/// the client cannot be built.
pub async fn run(config: WorkerConfig) -> Result<(), String> {
    let mut resource = Resource::connect(config.resource_port, config.id)
        .await
        .map_err(|e| format!("cannot reach the resource: {e}"))?;
    let builder = match config.urls.as_slice() {
        urls if config.cluster => Client::builder().cluster(urls.iter().cloned()),
        [url] => Client::builder().url(url),
        urls => Client::builder().redlock(urls.iter().cloned()),
    };
    let client = builder
        .command_timeout(config.command_timeout)
        .build()
        .await
        .map_err(|e| format!("cannot build the client: {e}"))?;
    let (held_lost, mut held_losses) = tokio::sync::mpsc::unbounded_channel();
    let held: Vec<_> = config
        .held_healthy
        .iter()
        .map(|name| (name, true))
        .chain(config.held_frozen.iter().map(|name| (name, false)))
        .map(|(name, healthy)| {
            let lock = client.lock(name).ttl(config.ttl).wait(Duration::MAX);
            let lost = held_lost.clone();
            tokio::spawn(hold_on(lock, healthy, lost))
        })
        .collect();
    let lock = client.lock(&config.lock).ttl(config.ttl).wait(config.wait);
    let mut rng = Rng::new(config.seed ^ u64::from(config.id).wrapping_mul(0x9E37_79B9));
    let mut released: Option<(u64, String)> = None;
    let io = |e: std::io::Error| format!("resource connection: {e}");
    let mut iteration = 0u64;
    let mut ballast: Vec<LockGuard> = Vec::new();
    while now_us() < config.until {
        iteration += 1;
        if ballast.is_empty() && config.ballast > 0 {
            for i in 0..config.ballast {
                let name = format!("{}-ballast-{}-{iteration}-{i}", config.lock, config.id);
                let guard = client.lock(&name).ttl(BALLAST_TTL).try_acquire().await;
                match guard {
                    Ok(Some(guard)) => ballast.push(guard),
                    Ok(None) => return Err(format!("ballast lock {name} was taken")),
                    Err(e) => return Err(format!("ballast lock {name}: {e}")),
                }
            }
        }
        if config.report_acquiring {
            let reply = resource
                .call(&Request::Acquiring { t: now_us() })
                .await
                .map_err(io)?;
            if reply == Reply::Frozen {
                // Their releases go to the watchdog, ahead of anything
                // this acquire() might hand it.
                ballast.clear();
            }
        }
        let started = now_us();
        let guard = match lock.acquire().await {
            Ok(guard) => guard,
            Err(e) => {
                let t = now_us();
                let quorum = matches!(e, Error::QuorumNotReached { .. });
                let error = e.to_string().replace('\n', " ");
                let reply = resource
                    .call(&Request::AcquireFailed { t, quorum, error })
                    .await
                    .map_err(io)?;
                let pause = match reply {
                    Reply::Hold(ms) => Duration::from_millis(ms.min(MAX_HOLD_MS)),
                    _ => Duration::from_millis(20),
                };
                tokio::time::sleep(pause).await;
                continue;
            }
        };
        let fence = guard.fence();
        let token = guard.token().to_owned();
        tracing::debug!(fence, token = %token, "worker acquired");
        let reply = resource
            .call(&Request::Acquired {
                started,
                t: now_us(),
                fence,
                token: token.clone(),
            })
            .await
            .map_err(io)?;
        // An acquire() that spanned a freeze may have met a late grant.
        let slow = now_us().saturating_sub(started) > config.ttl.as_micros() as u64;
        let announce = config.announce || (config.announce_slow && slow);
        let sleep = rng.below(config.max_sleep.as_micros() as u64 + 1);
        let given_up = match reply {
            // Long work done right, before touching the resource: stop as
            // soon as the lease is lost.
            Reply::Hold(ms) => tokio::select! {
                biased;
                () = guard.lost() => Some(now_us()),
                () = tokio::time::sleep(Duration::from_millis(ms.min(MAX_HOLD_MS))) => None,
            },
            _ => None,
        };
        let lost_at = match given_up {
            Some(t) => Some(t),
            None => critical_section(&mut resource, &guard, announce, sleep)
                .await
                .map_err(io)?,
        };
        if let Some(t) = lost_at {
            resource
                .call(&Request::Lost { t, fence })
                .await
                .map_err(io)?;
        }
        let result = guard.release().await;
        let released_ok = result.is_ok();
        tracing::debug!(fence, ok = released_ok, "worker released");
        resource
            .call(&Request::Released {
                t: now_us(),
                fence,
                outcome: outcome(&result),
            })
            .await
            .map_err(io)?;
        // Probe with a token whose release was confirmed: it can never own
        // the lock again, so success would be a non-owner release or extend.
        if let Some((old_fence, old_token)) = released.take()
            && iteration.is_multiple_of(PROBE_EVERY)
            && config.probes
        {
            let extend = rng.below(2) == 0;
            let result = if extend {
                lock.extend_by_token(&old_token, config.ttl).await
            } else {
                lock.release_by_token(&old_token).await
            };
            resource
                .call(&Request::Probe {
                    t: now_us(),
                    kind: if extend { "extend" } else { "release" }.into(),
                    fence: old_fence,
                    outcome: outcome(&result),
                })
                .await
                .map_err(io)?;
        }
        if released_ok {
            released = Some((fence, token));
        }
        while let Ok((t, healthy)) = held_losses.try_recv() {
            resource
                .call(&Request::HeldLost { t, healthy })
                .await
                .map_err(io)?;
        }
    }
    for task in &held {
        task.abort();
    }
    while let Ok((t, healthy)) = held_losses.try_recv() {
        resource
            .call(&Request::HeldLost { t, healthy })
            .await
            .map_err(io)?;
    }
    Ok(())
}

/// Holds `lock` for as long as the worker runs: taken (waiting as long as
/// it takes), held until `lost()`, whose time goes to `lost` with
/// `healthy`, and taken again.
async fn hold_on(
    lock: leasehold::Lock,
    healthy: bool,
    lost: tokio::sync::mpsc::UnboundedSender<(Micros, bool)>,
) {
    loop {
        match lock.acquire().await {
            Ok(guard) => {
                guard.lost().await;
                if lost.send((now_us(), healthy)).is_err() {
                    return;
                }
            }
            Err(_) => tokio::time::sleep(Duration::from_millis(50)).await,
        }
    }
}

/// Read, (announce,) sleep, write; returns when the guard was seen lost.
async fn critical_section(
    resource: &mut Resource,
    guard: &LockGuard,
    announce: bool,
    sleep_us: u64,
) -> std::io::Result<Option<Micros>> {
    let fence = guard.fence();
    let token = guard.token().to_owned();
    let mut lost_at = None;
    let work = async {
        let Reply::Values { unfenced, fenced } = resource
            .call(&Request::Read {
                fence,
                token: token.clone(),
            })
            .await?
        else {
            return Err(std::io::Error::other("READ: unexpected reply"));
        };
        if announce && let Reply::Hold(ms) = resource.call(&Request::Holding { fence }).await? {
            // Long work done right: abandon it as soon as the lease is lost.
            tokio::select! {
                () = tokio::time::sleep(Duration::from_millis(ms)) => {}
                () = guard.lost() => return Ok(Some(now_us())),
            }
        }
        tokio::time::sleep(Duration::from_micros(sleep_us)).await;
        resource
            .call(&Request::Write {
                fence,
                token: token.clone(),
                unfenced: unfenced + 1,
                fenced: fenced.map(|v| v + 1),
            })
            .await?;
        Ok(None)
    };
    tokio::pin!(work);
    loop {
        tokio::select! {
            result = &mut work => {
                let aborted_at = result?;
                lost_at = lost_at.or(aborted_at);
                break;
            }
            () = guard.lost(), if lost_at.is_none() => lost_at = Some(now_us()),
        }
    }
    if lost_at.is_none() && guard.is_lost() {
        lost_at = Some(now_us());
    }
    Ok(lost_at)
}
