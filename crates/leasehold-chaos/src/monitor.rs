//! Watches the commands a Redis server runs (`MONITOR`), to count the
//! grants that came back too late and were given back.
//!
//! A client that receives a grant later than its TTL releases it and tries
//! again with the same owner token. Nothing else does that: every
//! `acquire()` draws a fresh token, and a waiter that gives up releases its
//! token after its last attempt. So a release of token T followed by an
//! acquire attempt with T is, on the server, the trace of one grant that
//! came too late and was given back before the retry.
//!
//! Before 4df6ea7 the give-back was queued in the background and the retry
//! sent at once. When the retry ran first it found the lease "already ours"
//! and returned a guard; the give-back then released that guard's lease,
//! and the guard's own release came after it: two releases of T with no
//! attempt between them, which nothing else produces either (the workers'
//! non-owner probes, which release old tokens again, are off while the
//! server is watched).
//!
//! Only calls that ran count: a script call refused with `NOSCRIPT` (the
//! client then loads the script and calls again) runs no command inside
//! the script, and every one of the lock's scripts runs at least one, whose
//! line follows the call's at once (scripts run atomically).

use std::collections::HashMap;
use std::io::{BufRead, BufReader, Write};
use std::net::{Shutdown, TcpStream};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;

/// One script call of the lock's, in the server's execution order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Call {
    /// `lock_acquire.lua` with this owner token.
    Acquire(String),
    /// `lock_release.lua` with this owner token.
    Release(String),
    /// `ECHO` of a marker the checker sent (e.g. before a freeze).
    Marker(String),
}

/// A `MONITOR` connection read by a thread of its own until dropped.
pub(crate) struct Monitor {
    stream: TcpStream,
    calls: Arc<Mutex<Vec<Call>>>,
    reader: Option<JoinHandle<()>>,
}

impl Monitor {
    /// Starts monitoring the server on loopback `port`.
    ///
    /// # Panics
    ///
    /// If the server cannot be reached or refuses `MONITOR`.
    pub(crate) fn start(port: u16) -> Monitor {
        let mut stream = TcpStream::connect(("127.0.0.1", port)).expect("connect for MONITOR");
        stream.write_all(b"MONITOR\r\n").expect("send MONITOR");
        let mut lines = BufReader::new(stream.try_clone().expect("clone the MONITOR stream"));
        let mut ok = String::new();
        lines.read_line(&mut ok).expect("MONITOR reply");
        assert_eq!(ok.trim_end(), "+OK", "MONITOR refused");
        let calls = Arc::new(Mutex::new(Vec::new()));
        let reader = {
            let calls = Arc::clone(&calls);
            std::thread::spawn(move || {
                // A script call, until the next line shows whether it ran.
                let mut pending = None;
                for line in lines.lines() {
                    let Ok(line) = line else { return };
                    let seen = parse(&line);
                    let ran = match (pending.take(), seen) {
                        (Some(call), Line::InScript) => Some(call),
                        (_, Line::Script(call)) => {
                            pending = Some(call);
                            None
                        }
                        (_, Line::Marker(m)) => Some(Call::Marker(m)),
                        _ => None,
                    };
                    if let Some(call) = ran {
                        calls.lock().unwrap_or_else(|e| e.into_inner()).push(call);
                    }
                }
            })
        };
        Monitor {
            stream,
            calls,
            reader: Some(reader),
        }
    }

    /// The calls seen so far.
    pub(crate) fn calls(&self) -> Vec<Call> {
        self.calls.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }
}

impl Drop for Monitor {
    fn drop(&mut self) {
        let _ = self.stream.shutdown(Shutdown::Both);
        if let Some(r) = self.reader.take() {
            let _ = r.join();
        }
    }
}

/// What one `MONITOR` line shows.
#[derive(Debug, PartialEq, Eq)]
enum Line {
    /// A call of the lock's acquire or release script (that may not run).
    Script(Call),
    /// A command run from inside a script (`[0 lua]`).
    InScript,
    /// `ECHO` of a marker.
    Marker(String),
    /// Anything else.
    Other,
}

/// One `MONITOR` line: `+<time> [<db> <client>] "CMD" "arg" ...`.
fn parse(line: &str) -> Line {
    parse_call(line).unwrap_or(Line::Other)
}

fn parse_call(line: &str) -> Option<Line> {
    let (_, rest) = line.split_once('[')?;
    let (client, args) = rest.split_once(']')?;
    if client.ends_with("lua") {
        return Some(Line::InScript);
    }
    let args = quoted(args);
    let command = args.first()?.to_ascii_uppercase();
    if command == "ECHO" {
        return args.get(1).map(|m| Line::Marker(m.clone()));
    }
    if command != "EVALSHA" && command != "EVAL" {
        return None;
    }
    let keys: usize = args.get(2)?.parse().ok()?;
    let (lock, second) = (args.get(3)?, args.get(4)?);
    let token = args.get(3 + keys)?.clone();
    // lock_acquire.lua has four keys, lock_release.lua five.
    if !(4..=5).contains(&keys) || !lock.ends_with(":lock") {
        return None;
    }
    if second.ends_with(":fence") {
        Some(Line::Script(Call::Acquire(token)))
    } else if second.ends_with(":released") {
        Some(Line::Script(Call::Release(token)))
    } else {
        None
    }
}

/// The double-quoted strings of a line, unescaped (`\"` and `\\`; other
/// escapes are kept as written, which is enough for keys and hex tokens).
fn quoted(s: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut chars = s.chars();
    while let Some(c) = chars.next() {
        if c != '"' {
            continue;
        }
        let mut arg = String::new();
        while let Some(c) = chars.next() {
            match c {
                '"' => break,
                '\\' => match chars.next() {
                    Some(e @ ('"' | '\\')) => arg.push(e),
                    Some(e) => {
                        arg.push('\\');
                        arg.push(e);
                    }
                    None => {}
                },
                c => arg.push(c),
            }
        }
        out.push(arg);
    }
    out
}

/// Grants given back for arriving too late, in one stretch of a run.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct GiveBacks {
    /// Given back before the retry (a release of T, then an attempt with T).
    pub before_retry: usize,
    /// Given back after the retry (two releases of T in a row): the retry
    /// found the lease "already ours" and the give-back took it from the
    /// guard the retry returned.
    pub after_retry: usize,
}

impl GiveBacks {
    /// Every late grant seen, whichever the order.
    pub fn total(self) -> usize {
        self.before_retry + self.after_retry
    }
}

/// Grants given back (see the module docs), counted per stretch between
/// markers: `[i]` follows the `i`-th marker, `[0]` is before the first (so
/// there is one entry more than there are markers).
pub(crate) fn give_backs(calls: &[Call]) -> Vec<GiveBacks> {
    let mut counts = vec![GiveBacks::default()];
    // The last call seen with each token: true for a release.
    let mut released: HashMap<&str, bool> = HashMap::new();
    for call in calls {
        let last = counts.last_mut().expect("never empty");
        match call {
            Call::Marker(_) => counts.push(GiveBacks::default()),
            Call::Release(token) => {
                if released.insert(token, true) == Some(true) {
                    last.after_retry += 1;
                }
            }
            Call::Acquire(token) => {
                if released.insert(token, false) == Some(true) {
                    last.before_retry += 1;
                }
            }
        }
    }
    counts
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn monitor_lines_are_parsed() {
        let acquire = r#"+1700000000.123456 [0 127.0.0.1:50000] "EVALSHA" "ab12" "4" "leasehold:{chaos}:lock" "leasehold:{chaos}:fence" "leasehold:{chaos}:queue" "leasehold:{chaos}:alive" "tok1" "1000" "3600000" "3000" "0" "0" "0" "7""#;
        assert_eq!(parse(acquire), Line::Script(Call::Acquire("tok1".into())));
        let release = r#"+1700000000.2 [0 127.0.0.1:50000] "evalsha" "cd34" "5" "leasehold:{chaos}:lock" "leasehold:{chaos}:released" "leasehold:{chaos}:queue" "leasehold:{chaos}:alive" "leasehold:{chaos}:fence" "tok1" "500" "0" "7" "3000" """#;
        assert_eq!(parse(release), Line::Script(Call::Release("tok1".into())));
        let inside = r#"+1700000000.3 [0 lua] "SET" "leasehold:{chaos}:lock" "tok1""#;
        assert_eq!(parse(inside), Line::InScript);
        let echo = r#"+1700000000.4 [0 127.0.0.1:50001] "ECHO" "freeze \"1\"""#;
        assert_eq!(parse(echo), Line::Marker("freeze \"1\"".into()));
        assert_eq!(parse(r#"+1.0 [0 127.0.0.1:1] "PING""#), Line::Other);
    }

    #[test]
    fn a_release_then_an_acquire_with_the_same_token_is_a_give_back() {
        let a = |t: &str| Call::Acquire(t.into());
        let r = |t: &str| Call::Release(t.into());
        let m = || Call::Marker("m".into());
        let calls = [
            // A normal hold: refused, granted, released.
            a("x"),
            a("x"),
            r("x"),
            m(),
            // A late grant given back, then the retry; twice for "y".
            a("y"),
            r("y"),
            a("y"),
            r("y"),
            a("y"),
            a("z"),
            r("z"),
            m(),
            // The old ordering: the retry, the give-back, then the guard's
            // own release.
            a("w"),
            a("w"),
            r("w"),
            r("w"),
        ];
        let g = |before_retry, after_retry| GiveBacks {
            before_retry,
            after_retry,
        };
        assert_eq!(give_backs(&calls), vec![g(0, 0), g(2, 0), g(0, 1)]);
    }
}
