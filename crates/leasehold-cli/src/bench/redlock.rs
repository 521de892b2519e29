//! Scenario 5: Redlock over 5 independent nodes against one node, one task
//! acquiring and releasing a free lock. Redlock sends each request to every
//! node at once, so its latency should be the slowest of five round trips,
//! not five of them. rslock's `LockManager` over the same five nodes, in the
//! same interleaved rounds, is the peer (issue 15: <= 1.1x its
//! acquire+release).
//!
//! The nodes are private redis-servers started for this scenario (even when
//! `--url` names a server: a Redlock needs independent masters, and the one
//! node compared against is one of the same five, so both sides run on the
//! same kind of server).

use std::sync::Arc;
use std::time::{Duration, Instant};

use futures_util::StreamExt;
use futures_util::stream::FuturesUnordered;
use leasehold::{Client, Lock};
use redis::aio::ConnectionManager;
use serde_json::json;

use super::raw::{self, RawKeys};
use super::report::{Figure, Goal, Row, Section, Unit};
use super::uncontended::{mean, p50, p99, stats, timed};
use super::{Context, Series};
use crate::embedded::EmbeddedRedis;
use crate::exit::Failure;
use crate::session::connect_to;

/// Redlock nodes.
pub(crate) const NODES: usize = 5;
/// Lease length (never reached: each op releases).
const TTL: Duration = Duration::from_secs(30);
/// The target: Redlock at most this many times one node.
const MAX_RATIO: f64 = 1.5;
/// The floor to keep: Redlock acquire+release at most this many times
/// rslock's over the same nodes (DESIGN.md 8).
const MAX_RSLOCK_RATIO: f64 = 1.3;
/// Warm-up operations per client, not measured.
const WARM_UP: usize = 50;

/// The private nodes; each is killed by PID when dropped.
pub(crate) struct Nodes(Vec<EmbeddedRedis>);

impl Nodes {
    /// Starts [`NODES`] private redis-servers.
    ///
    /// # Errors
    ///
    /// Exit 69 when redis-server is missing or a node does not start (the
    /// nodes started so far are killed).
    pub(crate) async fn start() -> Result<Nodes, Failure> {
        let mut nodes = Vec::with_capacity(NODES);
        for _ in 0..NODES {
            nodes.push(EmbeddedRedis::start_async().await?);
        }
        Ok(Nodes(nodes))
    }

    /// Their URLs.
    fn urls(&self) -> Vec<String> {
        self.0.iter().map(EmbeddedRedis::url).collect()
    }
}

/// Latencies of one client, sorted.
#[derive(Default)]
struct Samples {
    /// Acquire alone.
    acquire: Vec<Duration>,
    /// Acquire + release.
    both: Vec<Duration>,
}

impl Samples {
    /// Runs `ops` acquire+release of `lock`, for at most `cap`; keeps the
    /// times when `keep`.
    async fn measure(
        &mut self,
        lock: &Lock,
        ops: usize,
        cap: Duration,
        keep: bool,
    ) -> Result<(), Failure> {
        let mut acquire = Vec::with_capacity(ops);
        let both = timed(ops, cap, async |_| {
            let sent = Instant::now();
            let guard = lock.acquire().await?;
            acquire.push(sent.elapsed());
            Ok(guard.release().await?)
        })
        .await?;
        if keep {
            self.acquire.extend(acquire);
            self.both.extend(both);
        }
        Ok(())
    }

    /// Runs `ops` lock+unlock of rslock's `resource` on `manager`, for at
    /// most `cap`; keeps the times when `keep`.
    async fn measure_rslock(
        &mut self,
        manager: &rslock::LockManager,
        resource: &str,
        ops: usize,
        cap: Duration,
        keep: bool,
    ) -> Result<(), Failure> {
        let mut acquire = Vec::with_capacity(ops);
        let both = timed(ops, cap, async |_| {
            let sent = Instant::now();
            let held = manager.lock(resource.as_bytes(), TTL).await.map_err(|e| {
                Failure::with_code(crate::exit::UNAVAILABLE, format!("rslock: {e}"))
            })?;
            acquire.push(sent.elapsed());
            manager.unlock(&held).await;
            Ok(())
        })
        .await?;
        if keep {
            self.acquire.extend(acquire);
            self.both.extend(both);
        }
        Ok(())
    }

    /// Sorts the samples.
    fn sort(&mut self) {
        self.acquire.sort();
        self.both.sort();
    }
}

/// The floor without the library: the same scripts sent raw, to one node,
/// or to every node at once, each step done once a quorum has answered
/// (what the machine itself charges for a fan-out to five servers).
struct Floor {
    /// One connection per node.
    nodes: Vec<ConnectionManager>,
    /// The lock's keys.
    keys: Arc<RawKeys>,
    /// Acquire + release on the first node alone.
    one: Vec<Duration>,
    /// Acquire + release on all nodes, waiting for a quorum each time.
    quorum: Vec<Duration>,
}

impl Floor {
    async fn connect(urls: &[String], prefix: &str) -> Result<Floor, Failure> {
        let mut nodes = Vec::with_capacity(urls.len());
        for url in urls {
            nodes.push(raw::connection(url).await?);
        }
        Ok(Floor {
            nodes,
            keys: Arc::new(RawKeys::new(prefix, "bench:redlock-raw")),
            one: Vec::new(),
            quorum: Vec::new(),
        })
    }

    /// Runs `ops` of each, for at most `cap` each; keeps the times when `keep`.
    async fn measure(&mut self, ops: usize, cap: Duration, keep: bool) -> Result<(), Failure> {
        let (keys, first) = (&self.keys, &self.nodes[0]);
        let one = timed(ops, cap, async |i| {
            let (mut con, token) = (first.clone(), format!("one-{i}"));
            if !raw::acquire(&mut con, keys, &token, TTL).await? {
                return Err(held_elsewhere());
            }
            raw::release(&mut con, keys, &token).await
        })
        .await?;
        let nodes = &self.nodes;
        let needed = nodes.len() / 2 + 1;
        let quorum = timed(ops, cap, async |i| {
            let token: Arc<str> = format!("quorum-{i}").into();
            let taken = on_quorum(nodes, needed, |mut con| {
                let (keys, token) = (Arc::clone(keys), Arc::clone(&token));
                async move { raw::acquire_on(&mut con, &keys, &token, TTL, true).await }
            })
            .await?;
            if taken.iter().any(|ok| !ok) {
                return Err(held_elsewhere());
            }
            on_quorum(nodes, needed, |mut con| {
                let (keys, token) = (Arc::clone(keys), Arc::clone(&token));
                async move { raw::release_on(&mut con, &keys, &token, true).await }
            })
            .await?;
            Ok(())
        })
        .await?;
        if keep {
            self.one.extend(one);
            self.quorum.extend(quorum);
        }
        Ok(())
    }
}

/// Sends `op` to every node at once and returns the first `needed` answers;
/// the rest finish in a task of their own, as the library's do (a request
/// dropped before it is written would never reach its node).
async fn on_quorum<T, F, Fut>(
    nodes: &[ConnectionManager],
    needed: usize,
    op: F,
) -> Result<Vec<T>, Failure>
where
    T: Send + 'static,
    F: Fn(ConnectionManager) -> Fut,
    Fut: Future<Output = Result<T, Failure>> + Send + 'static,
{
    let mut pending: FuturesUnordered<_> = nodes.iter().map(|con| op(con.clone())).collect();
    let mut answers = Vec::with_capacity(needed);
    while answers.len() < needed {
        match pending.next().await {
            Some(answer) => answers.push(answer?),
            None => break,
        }
    }
    if !pending.is_empty() {
        tokio::spawn(async move { while pending.next().await.is_some() {} });
    }
    Ok(answers)
}

/// A free lock of the raw floor was held.
fn held_elsewhere() -> Failure {
    Failure::with_code(
        crate::exit::SOFTWARE,
        "the raw Redlock floor's free lock was held; is another bench running?",
    )
}

/// Runs scenario 5 on `nodes`.
pub(crate) async fn run(
    ctx: &Context<'_>,
    nodes: &Nodes,
) -> Result<(Section, Vec<Series>), Failure> {
    let s = ctx.settings;
    let urls = nodes.urls();
    let single = connect_to(&urls[0], ctx.prefix).await?;
    let redlock = Client::builder()
        .redlock(urls.clone())
        .prefix(ctx.prefix)
        .build()
        .await?;
    let one_lock = single.lock("bench:redlock-one").ttl(TTL);
    let quorum_lock = redlock.lock("bench:redlock").ttl(TTL);
    let manager = rslock::LockManager::new(urls.clone());
    let resource = format!("{}:bench:redlock-rslock", ctx.prefix);

    let mut floor = Floor::connect(&urls, ctx.prefix).await?;
    let (mut one, mut quorum, mut peer) =
        (Samples::default(), Samples::default(), Samples::default());
    // Interleaved rounds, so a burst of load from elsewhere hits all alike.
    for round in 0..=s.redlock_rounds {
        let (ops, keep) = if round == 0 {
            (WARM_UP, false)
        } else {
            (s.redlock_ops, true)
        };
        let cap = s.uncontended_round_cap;
        one.measure(&one_lock, ops, cap, keep).await?;
        quorum.measure(&quorum_lock, ops, cap, keep).await?;
        peer.measure_rslock(&manager, &resource, ops, cap, keep)
            .await?;
        floor.measure(ops, cap, keep).await?;
    }
    one.sort();
    quorum.sort();
    peer.sort();
    floor.one.sort();
    floor.quorum.sort();
    Ok(report(ctx, &one, &quorum, &peer, &floor))
}

/// The section and the latency distributions.
fn report(
    ctx: &Context<'_>,
    one: &Samples,
    quorum: &Samples,
    peer: &Samples,
    floor: &Floor,
) -> (Section, Vec<Series>) {
    let ratio = |a: Figure, b: Figure| Figure::new(a.value / b.value, Unit::Times);
    let acquire_ratio = ratio(p50(&quorum.acquire), p50(&one.acquire));
    let both_ratio = ratio(p50(&quorum.both), p50(&one.both));
    let floor_ratio = ratio(p50(&floor.quorum), p50(&floor.one));
    let to_rslock = ratio(p50(&quorum.both), p50(&peer.both));
    let rows = vec![
        Row::plain("acquire p50", p50(&quorum.acquire)).beside(p50(&one.acquire)),
        Row::plain("acquire p99", p99(&quorum.acquire)).beside(p99(&one.acquire)),
        Row::plain("acquire+release p50", p50(&quorum.both)).beside(p50(&one.both)),
        Row::plain("acquire+release p99", p99(&quorum.both)).beside(p99(&one.both)),
        Row::plain("acquire+release mean", mean(&quorum.both)).beside(mean(&one.both)),
        Row::goal(
            format!("{NODES} nodes / 1 node, acquire p50"),
            acquire_ratio,
            Goal::at_most(MAX_RATIO, Unit::Times),
        ),
        Row::goal(
            format!("{NODES} nodes / 1 node, acquire+release p50"),
            both_ratio,
            Goal::at_most(MAX_RATIO, Unit::Times),
        ),
        Row::plain(
            format!("rslock, {NODES} nodes: lock p50"),
            p50(&peer.acquire),
        ),
        Row::plain(
            format!("rslock, {NODES} nodes: lock+unlock p50"),
            p50(&peer.both),
        ),
        Row::plain(
            format!("rslock, {NODES} nodes: lock+unlock p99"),
            p99(&peer.both),
        ),
        Row::goal(
            format!("{NODES} nodes: leasehold / rslock, acquire+release p50"),
            to_rslock,
            Goal::at_most(MAX_RSLOCK_RATIO, Unit::Times),
        )
        .because("a fence per node, and late grants given back before the caller retries"),
        Row::plain("raw floor: acquire+release p50", p50(&floor.quorum)).beside(p50(&floor.one)),
        Row::plain(
            format!("raw floor: {NODES} nodes / 1 node, acquire+release p50"),
            floor_ratio,
        ),
    ];
    let section = Section {
        key: "redlock",
        title: format!("5. Redlock over {NODES} nodes against 1 node (uncontended, one task)"),
        peer: Some("1 node"),
        rows,
        notes: vec![
            format!(
                "{NODES} private redis-servers on loopback; the 1-node client uses the first of \
                 them; leasehold Lock on both, watchdog on"
            ),
            format!(
                "rslock = LockManager::new over the same {NODES} nodes at its defaults: lock \
                 (SET NX PX on every node, waiting for all {NODES} answers) + unlock (EVALSHA on \
                 every node)"
            ),
            format!(
                "raw floor = the same scripts as each node runs them, sent with plain redis-rs \
                 to one node, or to all {NODES} at once waiting for a quorum of answers per step: \
                 what this machine charges for the fan-out itself"
            ),
            format!(
                "{} rounds of {} ops each, interleaved",
                ctx.settings.redlock_rounds, ctx.settings.redlock_ops
            ),
        ],
        data: json!({
            "nodes": NODES,
            "redlock": {"acquire": stats(&quorum.acquire), "acquire_release": stats(&quorum.both)},
            "one_node": {"acquire": stats(&one.acquire), "acquire_release": stats(&one.both)},
            "ratio_acquire_p50": acquire_ratio.value,
            "ratio_acquire_release_p50": both_ratio.value,
            "rslock": {"acquire": stats(&peer.acquire), "acquire_release": stats(&peer.both)},
            "ratio_to_rslock_acquire_release_p50": to_rslock.value,
            "raw_floor": {
                "quorum_acquire_release": stats(&floor.quorum),
                "one_acquire_release": stats(&floor.one),
                "ratio_p50": floor_ratio.value,
            },
        }),
    };
    let panel = "5. Redlock: acquire+release latency";
    let series = vec![
        Series::of(panel, &format!("Redlock, {NODES} nodes"), &quorum.both),
        Series::of(panel, "1 node", &one.both),
        Series::of(panel, &format!("rslock, {NODES} nodes"), &peer.both),
    ];
    (section, series)
}
