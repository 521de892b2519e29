//! Scenario 4: many leases held at once on one client with the watchdog on:
//! how the renewals are batched, what a held lease costs in client memory,
//! and that none is lost.

use std::time::{Duration, Instant};

use leasehold::LockGuard;
use serde_json::json;
use tokio::task::JoinSet;

use super::report::{Figure, Goal, Row, Section, Unit};
use super::{Context, server};
use crate::exit::{self, Failure};
use crate::session::connect_to;

/// Tasks that acquire (and later release) the leases.
const TASKS: usize = 256;
/// Bound on acquiring or releasing all of them.
const PHASE_LIMIT: Duration = Duration::from_secs(120);
/// The targets.
const MIN_PER_COMMAND: f64 = 50.0;
/// Most client memory per held lease.
const MAX_BYTES_PER_LEASE: f64 = 1024.0;

/// Runs scenario 4.
pub(crate) async fn run(ctx: &Context<'_>) -> Result<Section, Failure> {
    let s = ctx.settings;
    let leases = s.leases as usize;
    let ttl = s.lease_ttl;
    let mut admin = crate::session::plain_connection(ctx.url).await?;
    let client = connect_to(ctx.url, ctx.prefix).await?;
    let rss_before = rss_bytes()?;

    let acquiring = Instant::now();
    let mut set = JoinSet::new();
    for task in 0..TASKS {
        let client = client.clone();
        set.spawn(async move {
            let mut guards = Vec::with_capacity(leases / TASKS + 1);
            for i in (task..leases).step_by(TASKS) {
                let lock = client.lock(format!("bench:held:{i}")).ttl(ttl);
                match lock.try_acquire().await? {
                    Some(guard) => guards.push(guard),
                    None => {
                        return Err(Failure::with_code(
                            exit::SOFTWARE,
                            format!("lease bench:held:{i} is held by someone else; is another bench running?"),
                        ));
                    }
                }
            }
            Ok(guards)
        });
    }
    let mut guards: Vec<LockGuard> = Vec::with_capacity(leases);
    let joined = tokio::time::timeout(PHASE_LIMIT, async {
        while let Some(joined) = set.join_next().await {
            guards.extend(joined.map_err(task_failure)??);
        }
        Ok::<_, Failure>(())
    })
    .await;
    joined.map_err(|_| slow("acquiring"))??;
    let acquire_time = acquiring.elapsed();
    let rss_held = rss_bytes()?;
    // Acquiring at full speed on the same client can delay the first renewals.
    let lost_while_acquiring = guards.iter().filter(|g| g.is_lost()).count();

    // Only the watchdog talks to Redis from here on.
    server::reset_stats(&mut admin, ctx.private).await?;
    let before = server::command_stats(&mut admin).await?;
    let holding = Instant::now();
    tokio::time::sleep(ttl / 3 * s.lease_periods + ttl / 12).await;
    let after = server::command_stats(&mut admin).await?;
    let held_for = holding.elapsed();
    let counted = server::difference(&before, &after);
    let lost = guards.iter().filter(|g| g.is_lost()).count();

    let releasing = Instant::now();
    let mut set = JoinSet::new();
    let mut chunks = Vec::new();
    while !guards.is_empty() {
        let take = guards.len().min(leases.div_ceil(TASKS).max(1));
        chunks.push(guards.split_off(guards.len() - take));
    }
    for chunk in chunks {
        set.spawn(async move {
            let mut failed = 0usize;
            for guard in chunk {
                if guard.release().await.is_err() {
                    failed += 1;
                }
            }
            failed
        });
    }
    let mut release_failures = 0;
    let released = tokio::time::timeout(PHASE_LIMIT, async {
        while let Some(joined) = set.join_next().await {
            release_failures += joined.map_err(task_failure)?;
        }
        Ok::<_, Failure>(())
    })
    .await;
    released.map_err(|_| slow("releasing"))??;
    let release_time = releasing.elapsed();

    let commands =
        counted.get("evalsha").copied().unwrap_or(0) + counted.get("eval").copied().unwrap_or(0);
    let renewed = counted.get("pexpire").copied().unwrap_or(0);
    let per_command = if commands > 0 {
        renewed as f64 / commands as f64
    } else {
        f64::NAN
    };
    let per_second = commands as f64 / held_for.as_secs_f64();
    let bytes_per_lease = rss_held.saturating_sub(rss_before) as f64 / leases as f64;
    let expected_renewals = leases as f64 * held_for.as_secs_f64() / (ttl / 3).as_secs_f64();
    let rows = vec![
        Row::plain("renewal commands/s", Figure::new(per_second, Unit::PerSec)),
        Row::goal(
            "leases renewed per renewal command",
            Figure::new(per_command, Unit::Count),
            Goal::at_least(MIN_PER_COMMAND, Unit::Count),
        )
        .because(
            "renewals batched per script call, so 100,000 leases do not cost 100,000 commands",
        ),
        Row::plain(
            "leases renewed per second",
            Figure::new(renewed as f64 / held_for.as_secs_f64(), Unit::PerSec),
        ),
        Row::goal(
            "client RSS per held lease",
            Figure::new(bytes_per_lease, Unit::Bytes),
            Goal::at_most(MAX_BYTES_PER_LEASE, Unit::Bytes),
        )
        .because("a held lease costs the client little: the watchdog keeps one small entry"),
        Row::goal(
            "leases lost while acquiring them all",
            Figure::new(lost_while_acquiring as f64, Unit::Count),
            Goal::at_most(0.0, Unit::Count),
        ),
        Row::goal(
            "leases lost by the end of the hold",
            Figure::new(lost as f64, Unit::Count),
            Goal::at_most(0.0, Unit::Count),
        ),
        Row::goal(
            "releases that failed at the end",
            Figure::new(release_failures as f64, Unit::Count),
            Goal::at_most(0.0, Unit::Count),
        ),
    ];
    Ok(Section {
        key: "held_leases",
        title: format!(
            "4. {leases} leases held on one client, watchdog on, ttl {} (renewed every {})",
            crate::output::short(ttl),
            crate::output::short(ttl / 3)
        ),
        peer: None,
        rows,
        notes: vec![
            format!(
                "held {} while counting: renewal commands = EVALSHA calls, leases renewed = \
                 PEXPIRE calls inside the script (INFO commandstats); ~{expected_renewals:.0} \
                 renewals expected",
                crate::output::short(held_for)
            ),
            format!(
                "RSS (VmRSS) {} KiB before, {} KiB holding; acquired in {}, released in {}",
                rss_before / 1024,
                rss_held / 1024,
                crate::output::short(acquire_time),
                crate::output::short(release_time)
            ),
        ],
        data: json!({
            "leases": leases,
            "ttl_ms": ttl.as_millis(),
            "held_ms": held_for.as_millis(),
            "renewal_commands": commands,
            "leases_renewed": renewed,
            "expected_renewals": expected_renewals,
            "renewal_commands_per_s": per_second,
            "leases_per_renewal_command": per_command,
            "rss_before_bytes": rss_before,
            "rss_holding_bytes": rss_held,
            "rss_bytes_per_lease": bytes_per_lease,
            "lost": lost,
            "lost_while_acquiring": lost_while_acquiring,
            "release_failures": release_failures,
            "acquire_ms": acquire_time.as_millis(),
            "release_ms": release_time.as_millis(),
            "commands": counted,
        }),
    })
}

/// This process's resident set size, from /proc/self/status (VmRSS).
fn rss_bytes() -> Result<u64, Failure> {
    let status = std::fs::read_to_string("/proc/self/status").map_err(|e| {
        Failure::with_code(
            exit::SOFTWARE,
            format!("cannot read /proc/self/status: {e}"),
        )
    })?;
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
        .map(|kib| kib * 1024)
        .ok_or_else(|| Failure::with_code(exit::SOFTWARE, "no VmRSS in /proc/self/status"))
}

/// A task that panicked.
fn task_failure(e: tokio::task::JoinError) -> Failure {
    Failure::with_code(exit::SOFTWARE, format!("a bench task failed: {e}"))
}

/// A phase that ran past its bound.
fn slow(phase: &str) -> Failure {
    Failure::with_code(
        exit::SOFTWARE,
        format!("{phase} the leases took longer than {PHASE_LIMIT:?}; try fewer with --leases"),
    )
}
