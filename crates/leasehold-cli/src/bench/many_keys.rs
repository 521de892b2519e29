//! Scenario 3: 256 tasks on one client acquire and release random keys among
//! 10,000, against the same scripts sent raw by 256 tasks on one connection.

use std::time::{Duration, Instant};

use serde_json::json;
use tokio::task::JoinSet;

use super::report::{Figure, Goal, Row, Section, Unit};
use super::{Context, raw};
use crate::exit::{self, Failure};
use crate::session::connect_to;

/// Lease length (never reached: each lease is released at once).
const TTL: Duration = Duration::from_secs(10);
/// The target: leasehold reaches at least this share of the raw throughput.
const MIN_SHARE: f64 = 0.6;
/// Most acquisitions one task makes in one run.
const MAX_PER_TASK: u64 = 1_000_000;

/// Acquisitions made and keys found busy in one run.
#[derive(Debug, Clone, Copy, Default)]
struct Tally {
    /// Acquire+release pairs done.
    acquired: u64,
    /// Attempts that found the key held by another task (skipped).
    busy: u64,
}

impl std::ops::AddAssign for Tally {
    fn add_assign(&mut self, other: Tally) {
        self.acquired += other.acquired;
        self.busy += other.busy;
    }
}

/// A small xorshift generator: key choice needs speed, not quality.
struct Keys(u64);

impl Keys {
    /// A different sequence per task.
    fn new(seed: u64) -> Keys {
        Keys(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1)
    }

    /// The next key index below `n`.
    fn next(&mut self, n: u64) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0 % n
    }
}

/// Runs scenario 3.
pub(crate) async fn run(ctx: &Context<'_>) -> Result<super::report::Section, Failure> {
    let s = ctx.settings;
    let mut leasehold = Vec::new();
    let mut raw_rates = Vec::new();
    let mut tallies = (Tally::default(), Tally::default());
    // Alternate, so load from elsewhere falls on both alike; report the best
    // round of each, the least disturbed.
    for _ in 0..s.many_keys_rounds {
        let (t, rate) = raw_round(ctx).await?;
        tallies.1 += t;
        raw_rates.push(rate);
        let (t, rate) = leasehold_round(ctx).await?;
        tallies.0 += t;
        leasehold.push(rate);
    }
    let best = |v: &[f64]| v.iter().copied().fold(f64::NAN, f64::max);
    let (l, r) = (best(&leasehold), best(&raw_rates));
    let share = Figure::new(l / r, Unit::Times);
    let rows = vec![
        Row::plain("acquire+release pairs/s", Figure::new(l, Unit::PerSec))
            .beside(Figure::new(r, Unit::PerSec)),
        Row::goal(
            "leasehold / raw",
            share,
            Goal::at_least(MIN_SHARE, Unit::Times),
        )
        .because("the client's own work (watchdog, events, cancel safety) stays small beside the scripts"),
    ];
    Ok(Section {
        key: "many_keys",
        title: format!(
            "3. {} keys, {} tasks on one client, {} per round",
            s.keys,
            s.tasks,
            crate::output::short(s.many_keys_run)
        ),
        peer: Some("raw"),
        rows,
        notes: vec![
            format!(
                "{}; the raw loop runs {} tasks on one connection",
                raw::DESCRIPTION,
                s.tasks
            ),
            "each task picks a random key, acquires it without waiting (try_acquire) and \
             releases it; a key another task holds is skipped; best of the rounds"
                .into(),
        ],
        data: json!({
            "keys": s.keys,
            "tasks": s.tasks,
            "round_ms": s.many_keys_run.as_millis(),
            "leasehold_per_s": leasehold,
            "raw_per_s": raw_rates,
            "leasehold_best_per_s": l,
            "raw_best_per_s": r,
            "share": share.value,
            "leasehold_acquired": tallies.0.acquired,
            "leasehold_busy": tallies.0.busy,
            "raw_acquired": tallies.1.acquired,
            "raw_busy": tallies.1.busy,
        }),
    })
}

/// One round through the library: (tally, pairs per second).
async fn leasehold_round(ctx: &Context<'_>) -> Result<(Tally, f64), Failure> {
    let s = ctx.settings;
    let client = connect_to(ctx.url, ctx.prefix).await?;
    let started = Instant::now();
    let end = started + s.many_keys_run;
    let mut set = JoinSet::new();
    for task in 0..s.tasks {
        let client = client.clone();
        let keys = s.keys;
        set.spawn(async move {
            let mut pick = Keys::new(task as u64 + 1);
            let mut tally = Tally::default();
            while Instant::now() < end && tally.acquired < MAX_PER_TASK {
                let name = format!("bench:keys:{}", pick.next(keys));
                match client.lock(name).ttl(TTL).try_acquire().await? {
                    Some(guard) => {
                        guard.release().await?;
                        tally.acquired += 1;
                    }
                    None => tally.busy += 1,
                }
            }
            Ok::<_, Failure>(tally)
        });
    }
    finish(set, started).await
}

/// One round of the raw loop: (tally, pairs per second).
async fn raw_round(ctx: &Context<'_>) -> Result<(Tally, f64), Failure> {
    let s = ctx.settings;
    let con = raw::connection(ctx.url).await?;
    let started = Instant::now();
    let end = started + s.many_keys_run;
    let mut set = JoinSet::new();
    for task in 0..s.tasks {
        let mut con = con.clone();
        let keys = s.keys;
        let prefix = ctx.prefix.to_owned();
        set.spawn(async move {
            let mut pick = Keys::new(task as u64 + 1);
            let mut tally = Tally::default();
            let mut n = 0u64;
            while Instant::now() < end && tally.acquired < MAX_PER_TASK {
                let lock =
                    raw::RawKeys::new(&prefix, &format!("bench:raw-keys:{}", pick.next(keys)));
                n += 1;
                let token = format!("raw-{task}-{n}");
                if raw::acquire(&mut con, &lock, &token, TTL).await? {
                    raw::release(&mut con, &lock, &token).await?;
                    tally.acquired += 1;
                } else {
                    tally.busy += 1;
                }
            }
            Ok::<_, Failure>(tally)
        });
    }
    finish(set, started).await
}

/// Joins the tasks of a round.
async fn finish(
    mut set: JoinSet<Result<Tally, Failure>>,
    started: Instant,
) -> Result<(Tally, f64), Failure> {
    let mut tally = Tally::default();
    while let Some(joined) = set.join_next().await {
        tally += joined.map_err(|e| {
            Failure::with_code(exit::SOFTWARE, format!("a bench task failed: {e}"))
        })??;
    }
    let elapsed = started.elapsed().as_secs_f64();
    Ok((tally, tally.acquired as f64 / elapsed.max(1e-9)))
}
