//! The machine measured before anything is judged: the loopback round trip
//! (PING p50) and the load from elsewhere (the share of every core busy,
//! from /proc/stat, while the bench itself sleeps). On a quiet machine the
//! round trip is ~21 us and the other load 0% (DESIGN.md section 8); when
//! either is far above that, a ratio of two libraries measures the noise
//! more than the libraries, so the bench prints every figure and target
//! but no verdict: "noisy: floors not judged".

use std::time::Duration;

use serde_json::{Value, json};

/// How long the other load is sampled.
const LOAD_SAMPLE: Duration = Duration::from_millis(500);

/// Above these the machine is too noisy to judge.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct Quiet {
    /// Most round trip (PING p50).
    pub(crate) rtt: Duration,
    /// Most share of all cores busy with other work, in percent.
    pub(crate) load_percent: f64,
}

impl Quiet {
    /// The defaults: about 2.5x a quiet machine's 21 us round trip, and a
    /// sixth of a 2-core machine's time busy elsewhere.
    pub(crate) const DEFAULT: Quiet = Quiet {
        rtt: Duration::from_micros(50),
        load_percent: 15.0,
    };
}

/// What was measured, and against what.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Calibration {
    /// PING p50 on the bench's own connection.
    pub(crate) rtt: Duration,
    /// Share of all cores busy while the bench slept, in percent; `None`
    /// where /proc/stat cannot be read.
    pub(crate) load_percent: Option<f64>,
    /// The bounds.
    pub(crate) quiet: Quiet,
}

impl Calibration {
    /// Measures the other load (sleeping [`LOAD_SAMPLE`]) beside `rtt`.
    pub(crate) async fn measure(rtt: Duration, quiet: Quiet) -> Calibration {
        let before = cpu_times();
        tokio::time::sleep(LOAD_SAMPLE).await;
        let after = cpu_times();
        let load_percent = before.zip(after).and_then(|(b, a)| busy_percent(b, a));
        Calibration {
            rtt,
            load_percent,
            quiet,
        }
    }

    /// Why the machine is too noisy to judge, or `None` when it is quiet.
    pub(crate) fn noisy(&self) -> Option<String> {
        let mut why = Vec::new();
        if self.rtt > self.quiet.rtt {
            why.push(format!(
                "round trip {:.1}us above {:.1}us (--quiet-rtt)",
                micros(self.rtt),
                micros(self.quiet.rtt)
            ));
        }
        if let Some(load) = self.load_percent
            && load > self.quiet.load_percent
        {
            why.push(format!(
                "other load {load:.0}% of all cores above {:.0}% (--quiet-load)",
                self.quiet.load_percent
            ));
        }
        (!why.is_empty()).then(|| why.join("; "))
    }

    /// One line for people.
    pub(crate) fn line(&self) -> String {
        let load = self
            .load_percent
            .map_or_else(|| "?".to_owned(), |l| format!("{l:.0}%"));
        let verdict = match self.noisy() {
            Some(why) => format!("noisy: floors not judged ({why})"),
            None => "quiet: figures judged".to_owned(),
        };
        format!(
            "calibration: RTT (PING p50) {:.1}us (quiet <= {:.1}us), other load {load} of all \
             cores (quiet <= {:.0}%): {verdict}",
            micros(self.rtt),
            micros(self.quiet.rtt),
            self.quiet.load_percent
        )
    }

    /// As JSON.
    pub(crate) fn to_json(&self) -> Value {
        json!({
            "rtt_us": micros(self.rtt),
            "other_load_percent": self.load_percent,
            "quiet_rtt_us": micros(self.quiet.rtt),
            "quiet_load_percent": self.quiet.load_percent,
            "judged": self.noisy().is_none(),
            "noisy": self.noisy(),
        })
    }
}

fn micros(d: Duration) -> f64 {
    d.as_secs_f64() * 1e6
}

/// The first line of /proc/stat: (busy, total) jiffies of all cores.
fn cpu_times() -> Option<(u64, u64)> {
    let stat = std::fs::read_to_string("/proc/stat").ok()?;
    parse_cpu_line(stat.lines().next()?)
}

/// `cpu  user nice system idle iowait irq softirq steal ...` into (busy,
/// total): idle and iowait are not busy; guest time is inside user already.
fn parse_cpu_line(line: &str) -> Option<(u64, u64)> {
    let mut fields = line.split_whitespace();
    if fields.next()? != "cpu" {
        return None;
    }
    let values: Vec<u64> = fields
        .take(8)
        .map(str::parse)
        .collect::<Result<_, _>>()
        .ok()?;
    if values.len() < 4 {
        return None;
    }
    let total: u64 = values.iter().sum();
    let idle = values[3] + values.get(4).copied().unwrap_or(0);
    Some((total - idle, total))
}

/// Busy share between two samples, in percent.
fn busy_percent(before: (u64, u64), after: (u64, u64)) -> Option<f64> {
    let total = after.1.checked_sub(before.1)?;
    let busy = after.0.checked_sub(before.0)?;
    (total > 0).then(|| busy as f64 * 100.0 / total as f64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn proc_stat_busy_share_leaves_idle_and_iowait_out() {
        let before = parse_cpu_line("cpu  100 0 50 800 50 0 0 0 0 0").expect("parses");
        let after = parse_cpu_line("cpu  130 0 60 950 60 0 0 0 0 0").expect("parses");
        assert_eq!(before, (150, 1000));
        assert_eq!(busy_percent(before, after), Some(20.0));
        assert!(parse_cpu_line("cpu0 1 2 3 4").is_none());
    }

    #[test]
    fn a_run_is_judged_only_below_both_bounds() {
        let quiet = Quiet::DEFAULT;
        let at = |rtt_us, load| Calibration {
            rtt: Duration::from_micros(rtt_us),
            load_percent: load,
            quiet,
        };
        assert_eq!(at(21, Some(0.0)).noisy(), None);
        assert!(at(21, Some(0.0)).line().contains("quiet: figures judged"));
        let slow = at(300, Some(0.0));
        assert!(slow.noisy().is_some_and(|w| w.contains("--quiet-rtt")));
        assert!(slow.line().contains("noisy: floors not judged"));
        let busy = at(21, Some(60.0));
        assert!(busy.noisy().is_some_and(|w| w.contains("--quiet-load")));
        assert_eq!(busy.to_json()["judged"], false);
        // Unreadable load: judged on the round trip alone.
        assert_eq!(at(21, None).noisy(), None);
    }
}
