//! What the bench asks the Redis server itself: command counts (INFO
//! commandstats), the round-trip time, the version.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use redis::aio::MultiplexedConnection;

use crate::cli::Library;
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

/// Commands of one run: those sent by clients, and all (Lua-internal too).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(crate) struct Commands {
    /// Calls the clients made (EVALSHA, SET, SUBSCRIBE, ...).
    pub(crate) top_level: u64,
    /// Those plus the calls scripts made inside Redis (GET, SET, PUBLISH, ...).
    pub(crate) total: u64,
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
}
