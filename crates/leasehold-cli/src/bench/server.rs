//! What the bench asks the Redis server itself: command counts (INFO
//! commandstats), its CPU time (INFO cpu), the keys under a prefix, the
//! round-trip time, the version.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use redis::aio::MultiplexedConnection;

use crate::args::Library;
use crate::exit::Failure;
use crate::measure::percentile;
use crate::session::redis_failure;

/// Calls per command name (`get`, `evalsha`, `client|setinfo`, ...).
pub(crate) type CommandStats = BTreeMap<String, u64>;

/// Commands the bench's own admin connection sends; never counted.
const ADMIN: &[&str] = &["info", "config|resetstat", "config|get", "ping"];

/// The commands each library's client sends itself; everything else a run
/// shows was called from inside a Lua script (Redis counts those too).
fn top_level(library: Library, command: &str) -> bool {
    let connection = command == "hello"
        || command == "select"
        || command.starts_with("client|")
        || command.starts_with("script|");
    connection
        || match library {
            Library::Leasehold => matches!(
                command,
                "evalsha" | "eval" | "subscribe" | "unsubscribe" | "ssubscribe" | "sunsubscribe"
            ),
            // rslock takes the lock with a plain SET NX PX and releases with a script.
            Library::Rslock => matches!(command, "set" | "evalsha" | "eval"),
        }
}

/// Reads INFO commandstats.
pub(crate) async fn command_stats(
    con: &mut MultiplexedConnection,
) -> Result<CommandStats, Failure> {
    let info: String = redis::cmd("INFO")
        .arg("commandstats")
        .query_async(con)
        .await
        .map_err(|e| redis_failure(e, "reading INFO commandstats"))?;
    Ok(parse_command_stats(&info))
}

/// `cmdstat_get:calls=3,usec=...` lines into name -> calls.
fn parse_command_stats(info: &str) -> CommandStats {
    info.lines()
        .filter_map(|l| l.trim().strip_prefix("cmdstat_"))
        .filter_map(|l| {
            let (name, rest) = l.split_once(':')?;
            let calls = rest
                .split(',')
                .find_map(|kv| kv.strip_prefix("calls="))?
                .parse()
                .ok()?;
            Some((name.to_owned(), calls))
        })
        .collect()
}

/// Zeroes the server's statistics; only on a server the bench started,
/// never on someone else's (the before/after difference is used either way).
pub(crate) async fn reset_stats(
    con: &mut MultiplexedConnection,
    private: bool,
) -> Result<(), Failure> {
    if !private {
        return Ok(());
    }
    redis::cmd("CONFIG")
        .arg("RESETSTAT")
        .query_async::<()>(con)
        .await
        .map_err(|e| redis_failure(e, "on CONFIG RESETSTAT"))
}

/// Commands counted between two snapshots, the admin connection's left out.
pub(crate) fn difference(before: &CommandStats, after: &CommandStats) -> CommandStats {
    after
        .iter()
        .filter(|(name, _)| !ADMIN.contains(&name.as_str()))
        .filter_map(|(name, calls)| {
            // After a reset, `before` may be higher; the reset zeroed it.
            let earlier = before.get(name).copied().unwrap_or(0);
            let n = if *calls >= earlier {
                calls - earlier
            } else {
                *calls
            };
            (n > 0).then(|| (name.clone(), n))
        })
        .collect()
}

/// Adds the counts of `more` to `into`, name by name.
pub(crate) fn add(into: &mut CommandStats, more: &CommandStats) {
    for (name, calls) in more {
        *into.entry(name.clone()).or_insert(0) += calls;
    }
}

/// Commands of one run: those sent by clients, and all (Lua-internal too).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(crate) struct Commands {
    /// Calls the clients made (EVALSHA, SET, SUBSCRIBE, ...).
    pub(crate) top_level: u64,
    /// Those plus the calls scripts made inside Redis (GET, SET, PUBLISH, ...).
    pub(crate) total: u64,
}

impl Commands {
    /// Per each of `n` acquisitions: (client calls, all calls); NaN for none.
    pub(crate) fn per(self, n: usize) -> (f64, f64) {
        if n == 0 {
            return (f64::NAN, f64::NAN);
        }
        let n = n as f64;
        (self.top_level as f64 / n, self.total as f64 / n)
    }
}

/// Splits `counted` into what `library`'s clients sent and the total.
pub(crate) fn classify(library: Library, counted: &CommandStats) -> Commands {
    let total = counted.values().sum();
    let top_level = counted
        .iter()
        .filter(|(name, _)| top_level(library, name))
        .map(|(_, n)| n)
        .sum();
    Commands { top_level, total }
}

/// The server's CPU time so far, user and system, in seconds: the sum of
/// `used_cpu_user` and `used_cpu_sys` of INFO cpu (getrusage of the whole
/// redis-server process, every thread).
pub(crate) async fn cpu_seconds(con: &mut MultiplexedConnection) -> Result<f64, Failure> {
    let info: String = redis::cmd("INFO")
        .arg("cpu")
        .query_async(con)
        .await
        .map_err(|e| redis_failure(e, "reading INFO cpu"))?;
    parse_cpu_seconds(&info).ok_or_else(|| {
        Failure::with_code(
            crate::exit::SOFTWARE,
            "INFO cpu has no used_cpu_sys or used_cpu_user line",
        )
    })
}

/// `used_cpu_sys` + `used_cpu_user` of INFO cpu (not the `_children` or
/// `_main_thread` lines); `None` when either is missing.
fn parse_cpu_seconds(info: &str) -> Option<f64> {
    let field = |name: &str| {
        info.lines()
            .find_map(|l| l.trim().strip_prefix(name)?.strip_prefix(':'))
            .and_then(|v| v.trim().parse::<f64>().ok())
    };
    Some(field("used_cpu_sys")? + field("used_cpu_user")?)
}

/// Most SCAN calls [`keys_under`] makes: 10,000 of COUNT 1000 walk ten
/// million keys, far more than a bench server holds.
const MAX_SCANS: usize = 10_000;

/// Every key whose name starts with `prefix` (which holds no glob
/// character: the library refuses such prefixes), by SCAN.
///
/// # Errors
///
/// A Redis failure, or a keyspace too big to walk in [`MAX_SCANS`] calls.
pub(crate) async fn keys_under(
    con: &mut MultiplexedConnection,
    prefix: &str,
) -> Result<Vec<String>, Failure> {
    let pattern = format!("{prefix}*");
    let mut keys = Vec::new();
    let mut cursor: u64 = 0;
    for _ in 0..MAX_SCANS {
        let (next, batch): (u64, Vec<String>) = redis::cmd("SCAN")
            .arg(cursor)
            .arg("MATCH")
            .arg(&pattern)
            .arg("COUNT")
            .arg(1000)
            .query_async(con)
            .await
            .map_err(|e| redis_failure(e, "on SCAN"))?;
        keys.extend(batch);
        if next == 0 {
            // SCAN may return a key twice.
            keys.sort();
            keys.dedup();
            return Ok(keys);
        }
        cursor = next;
    }
    Err(Failure::with_code(
        crate::exit::SOFTWARE,
        format!("SCAN for {pattern} did not finish in {MAX_SCANS} calls"),
    ))
}

/// The remaining TTL of each of `keys` in ms (PTTL, one pipeline): -1 for a
/// key without expiry, -2 for one gone since.
pub(crate) async fn pttls(
    con: &mut MultiplexedConnection,
    keys: &[String],
) -> Result<Vec<i64>, Failure> {
    if keys.is_empty() {
        return Ok(Vec::new());
    }
    let mut pipe = redis::pipe();
    for key in keys {
        pipe.cmd("PTTL").arg(key);
    }
    pipe.query_async(con)
        .await
        .map_err(|e| redis_failure(e, "on PTTL"))
}

/// PINGs sent and not timed before [`round_trip`] times its samples: the
/// first ones after a pause, or on a server just started, are slower.
const WARM_UP_PINGS: usize = 200;

/// How long one PING takes on `con`.
pub(crate) async fn ping(con: &mut MultiplexedConnection) -> Result<Duration, Failure> {
    let sent = Instant::now();
    redis::cmd("PING")
        .query_async::<()>(con)
        .await
        .map_err(|e| redis_failure(e, "on PING"))?;
    Ok(sent.elapsed())
}

/// The median of `samples` PINGs on `con`, after a warm-up.
pub(crate) async fn round_trip(
    con: &mut MultiplexedConnection,
    samples: usize,
) -> Result<Duration, Failure> {
    let mut times = Vec::with_capacity(samples + WARM_UP_PINGS);
    for _ in 0..samples + WARM_UP_PINGS {
        times.push(ping(con).await?);
    }
    let mut times = times.split_off(WARM_UP_PINGS);
    times.sort();
    Ok(percentile(&times, 50.0).unwrap_or_default())
}

/// The server's `redis_version`.
pub(crate) async fn version(con: &mut MultiplexedConnection) -> Result<String, Failure> {
    let info: String = redis::cmd("INFO")
        .arg("server")
        .query_async(con)
        .await
        .map_err(|e| redis_failure(e, "reading INFO server"))?;
    Ok(info
        .lines()
        .find_map(|l| l.strip_prefix("redis_version:"))
        .unwrap_or("unknown")
        .trim()
        .to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn commandstats_split_into_client_calls_and_script_calls() {
        let before = parse_command_stats(
            "# Commandstats\r\ncmdstat_evalsha:calls=2,usec=5,usec_per_call=2.5\r\n",
        );
        let after = parse_command_stats(
            "# Commandstats\r\n\
             cmdstat_evalsha:calls=12,usec=50,usec_per_call=4.1,rejected_calls=0,failed_calls=0\r\n\
             cmdstat_get:calls=10,usec=5\r\ncmdstat_set:calls=7,usec=5\r\n\
             cmdstat_info:calls=4,usec=5\r\ncmdstat_subscribe:calls=1,usec=5\r\n",
        );
        let counted = difference(&before, &after);
        assert_eq!(counted.get("evalsha"), Some(&10));
        assert_eq!(counted.get("info"), None);
        let leasehold = classify(Library::Leasehold, &counted);
        assert_eq!(
            leasehold,
            Commands {
                top_level: 11,
                total: 28
            }
        );
        // rslock sends SET itself.
        let rslock = classify(Library::Rslock, &counted);
        assert_eq!(
            rslock,
            Commands {
                top_level: 17,
                total: 28
            }
        );
    }

    #[test]
    fn commands_per_acquisition_divide_both_counts() {
        let counted = Commands {
            top_level: 4000,
            total: 19_000,
        };
        assert_eq!(counted.per(2000), (2.0, 9.5));
        let (top, total) = counted.per(0);
        assert!(top.is_nan() && total.is_nan());
    }

    #[test]
    fn counts_of_several_rounds_add_up_by_name() {
        let mut sum = CommandStats::new();
        let round = |pairs: &[(&str, u64)]| -> CommandStats {
            pairs.iter().map(|(n, c)| ((*n).to_owned(), *c)).collect()
        };
        add(&mut sum, &round(&[("evalsha", 2), ("time", 1)]));
        add(&mut sum, &round(&[("evalsha", 3), ("set", 4)]));
        assert_eq!(sum, round(&[("evalsha", 5), ("set", 4), ("time", 1)]));
    }

    #[test]
    fn cpu_time_is_user_plus_system_of_the_whole_process() {
        let info = "# CPU\r\nused_cpu_sys:1.250000\r\nused_cpu_user:0.500000\r\n\
                    used_cpu_sys_children:9.000000\r\nused_cpu_user_children:9.000000\r\n\
                    used_cpu_sys_main_thread:1.000000\r\nused_cpu_user_main_thread:0.400000\r\n";
        assert_eq!(parse_cpu_seconds(info), Some(1.75));
        assert_eq!(parse_cpu_seconds("# CPU\r\nused_cpu_sys:1.0\r\n"), None);
        // Only the exact field counts, not one that starts with its name.
        assert_eq!(
            parse_cpu_seconds("used_cpu_sys_main_thread:1.0\r\nused_cpu_user:2.0\r\n"),
            None
        );
    }
}
