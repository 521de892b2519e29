//! Part of scenario 1: lock names used once leave no key behind. 200 names
//! are each acquired once at the library's defaults (all held together, so
//! the count while they are held shows that the count sees the library's
//! keys) and released; 2 s after the last release, the keys under the
//! prefix are counted.
//!
//! The names live under a prefix of their own (the bench's prefix plus this
//! process's id), so the count is every key the library wrote for them and
//! nothing another scenario, or another bench, left.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use super::Context;
use super::server;
use crate::exit::{self, Failure};
use crate::session::connect_to;
use crate::session::plain_connection;

/// Lock names, each used once.
pub(crate) const NAMES: usize = 200;
/// How long after the last release the keys are counted.
pub(crate) const AFTER: Duration = Duration::from_secs(2);
/// Bound on acquiring, or releasing, all of them.
const PHASE_LIMIT: Duration = Duration::from_secs(30);

/// What the names left behind.
#[derive(Debug, Clone)]
pub(crate) struct Leftovers {
    /// The prefix the names were used under.
    pub(crate) prefix: String,
    /// Keys under it while every name was held.
    pub(crate) while_held: usize,
    /// Keys under it [`AFTER`] the last release, sorted.
    pub(crate) left: Vec<String>,
    /// Their remaining TTLs in ms, in the same order (-1: none, -2: gone since).
    pub(crate) pttl_ms: Vec<i64>,
    /// From the last release to the count.
    pub(crate) waited: Duration,
}

impl Leftovers {
    /// Keys left; NaN (no verdict but "n/a") when the count while held saw
    /// fewer keys than names, so a 0 afterwards would prove nothing.
    pub(crate) fn left_figure(&self) -> f64 {
        if self.while_held < NAMES {
            f64::NAN
        } else {
            self.left.len() as f64
        }
    }

    /// Keys left by kind: what follows the last `:` (`lock`, `fence`, ...).
    pub(crate) fn by_kind(&self) -> BTreeMap<String, usize> {
        let mut kinds = BTreeMap::new();
        for key in &self.left {
            let kind = key.rsplit_once(':').map_or(key.as_str(), |(_, k)| k);
            *kinds.entry(kind.to_owned()).or_insert(0) += 1;
        }
        kinds
    }

    /// The longest remaining TTL of a key left, in ms (-1 when one never
    /// expires), if any key was left.
    pub(crate) fn longest_pttl_ms(&self) -> Option<i64> {
        if self.pttl_ms.contains(&-1) {
            return Some(-1);
        }
        self.pttl_ms.iter().copied().max()
    }

    /// One line for people under the table.
    pub(crate) fn note(&self) -> String {
        let mut line = format!(
            "names used once = {NAMES} lock names under {}:, each acquired once at the library's \
             defaults (TTL {}), all held together, then released; keys counted (SCAN) while held \
             and {} after the last release",
            self.prefix,
            crate::output::short(leasehold::DEFAULT_TTL),
            crate::output::short(self.waited)
        );
        if !self.left.is_empty() {
            let kinds: Vec<String> = self
                .by_kind()
                .iter()
                .map(|(kind, n)| format!("{n} x :{kind}"))
                .collect();
            let expiry = match self.longest_pttl_ms() {
                Some(-1) => "some without expiry".to_owned(),
                Some(ms) => format!(
                    "the last expires in {}",
                    crate::output::short(Duration::from_millis(ms.max(0).unsigned_abs()))
                ),
                None => String::new(),
            };
            line.push_str(&format!("; left: {} ({expiry})", kinds.join(", ")));
        }
        line
    }

    /// For JSON.
    pub(crate) fn to_json(&self) -> Value {
        json!({
            "names": NAMES,
            "prefix": self.prefix,
            "ttl_ms": leasehold::DEFAULT_TTL.as_millis(),
            "keys_while_held": self.while_held,
            "waited_ms": self.waited.as_millis(),
            "keys_left": self.left.len(),
            "keys_left_by_kind": self.by_kind(),
            "longest_pttl_ms": self.longest_pttl_ms(),
            "examples": self.left.iter().take(3).collect::<Vec<_>>(),
        })
    }
}

/// Uses [`NAMES`] names once each and counts what they leave.
pub(crate) async fn run(ctx: &Context<'_>) -> Result<Leftovers, Failure> {
    let prefix = format!("{}:bench-once-{}", ctx.prefix, std::process::id());
    let under = format!("{prefix}:");
    let client = connect_to(ctx.url, &prefix).await?;
    let mut admin = plain_connection(ctx.url).await?;

    let guards = tokio::time::timeout(PHASE_LIMIT, async {
        let mut guards = Vec::with_capacity(NAMES);
        for i in 0..NAMES {
            let name = format!("once:{i}");
            match client.lock(&name).try_acquire().await? {
                Some(guard) => guards.push(guard),
                None => {
                    return Err(Failure::with_code(
                        exit::SOFTWARE,
                        format!("lock {name} under {prefix} is held by someone else"),
                    ));
                }
            }
        }
        Ok(guards)
    })
    .await
    .map_err(|_| slow("acquiring"))??;
    let while_held = server::keys_under(&mut admin, &under).await?.len();
    tokio::time::timeout(PHASE_LIMIT, async {
        for guard in guards {
            guard.release().await?;
        }
        Ok::<_, Failure>(())
    })
    .await
    .map_err(|_| slow("releasing"))??;
    let released = Instant::now();
    tokio::time::sleep_until((released + AFTER).into()).await;
    let left = server::keys_under(&mut admin, &under).await?;
    let waited = released.elapsed();
    let pttl_ms = server::pttls(&mut admin, &left).await?;
    Ok(Leftovers {
        prefix,
        while_held,
        left,
        pttl_ms,
        waited,
    })
}

/// A phase that ran past its bound.
fn slow(phase: &str) -> Failure {
    Failure::with_code(
        exit::SOFTWARE,
        format!("{phase} {NAMES} free locks took longer than {PHASE_LIMIT:?}"),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn leftovers(while_held: usize, left: &[&str], pttl_ms: &[i64]) -> Leftovers {
        Leftovers {
            prefix: "p:bench-once-1".into(),
            while_held,
            left: left.iter().map(|k| (*k).to_owned()).collect(),
            pttl_ms: pttl_ms.to_vec(),
            waited: AFTER,
        }
    }

    #[test]
    fn keys_left_are_counted_by_kind_with_the_longest_ttl() {
        let l = leftovers(
            400,
            &[
                "p:bench-once-1:{once:1}:fence",
                "p:bench-once-1:{once:2}:fence",
                "p:bench-once-1:{once:2}:queue",
            ],
            &[28_000, 27_500, 900],
        );
        assert_eq!(l.left_figure(), 3.0);
        let kinds: Vec<(String, usize)> = l.by_kind().into_iter().collect();
        assert_eq!(kinds, vec![("fence".into(), 2), ("queue".into(), 1)]);
        assert_eq!(l.longest_pttl_ms(), Some(28_000));
        assert!(l.note().contains("2 x :fence, 1 x :queue"), "{}", l.note());
        assert_eq!(leftovers(200, &["k"], &[-1, 5]).longest_pttl_ms(), Some(-1));
    }

    #[test]
    fn nothing_left_passes_only_when_the_count_saw_the_held_keys() {
        assert_eq!(leftovers(200, &[], &[]).left_figure(), 0.0);
        assert_eq!(leftovers(200, &[], &[]).longest_pttl_ms(), None);
        // A count that did not even see the held locks cannot vouch for 0.
        assert!(leftovers(0, &[], &[]).left_figure().is_nan());
    }
}
