//! Watches the commands a Redis server runs (`MONITOR`), to count the
//! grants that came back too late and were given back.
//!
//! A client that receives a grant later than its TTL releases it and tries
//! again with the same owner token. Nothing else does that: every
//! `acquire()` draws a fresh token, and a waiter that gives up releases its
//! token after its last attempt. So a release of token T followed by an
//! acquire attempt with T is, on the server, the trace of one grant that
//! came too late. (The old ordering, the retry sent before the give-back,
//! leaves no such trace; the scenario's overlap checks catch it instead.)

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
                for line in lines.lines() {
                    let Ok(line) = line else { return };
                    if let Some(call) = parse(&line) {
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

/// One `MONITOR` line: `+<time> [<db> <client>] "CMD" "arg" ...`. Commands
/// run from inside scripts (`[0 lua]`) are skipped.
fn parse(line: &str) -> Option<Call> {
    let (_, rest) = line.split_once('[')?;
    let (client, args) = rest.split_once(']')?;
    if client.ends_with("lua") {
        return None;
    }
    let args = quoted(args);
    let command = args.first()?.to_ascii_uppercase();
    if command == "ECHO" {
        return args.get(1).map(|m| Call::Marker(m.clone()));
    }
    if command != "EVALSHA" && command != "EVAL" {
        return None;
    }
    let keys: usize = args.get(2)?.parse().ok()?;
    let (lock, second) = (args.get(3)?, args.get(4)?);
    let token = args.get(3 + keys)?.clone();
    if keys != 4 || !lock.ends_with(":lock") {
        return None;
    }
    if second.ends_with(":fence") {
        Some(Call::Acquire(token))
    } else if second.ends_with(":released") {
        Some(Call::Release(token))
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

/// Grants given back and tried again with the same token (see the module
/// docs), counted per stretch between markers: `counts[i]` follows the
/// `i`-th marker, `counts[0]` is before the first (so `counts` has one
/// entry more than there are markers).
pub(crate) fn give_backs(calls: &[Call]) -> Vec<usize> {
    let mut counts = vec![0];
    let mut released: HashMap<&str, bool> = HashMap::new();
    for call in calls {
        match call {
            Call::Marker(_) => counts.push(0),
            Call::Release(token) => {
                released.insert(token, true);
            }
            Call::Acquire(token) => {
                if released.insert(token, false) == Some(true) {
                    *counts.last_mut().expect("never empty") += 1;
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
        assert_eq!(parse(acquire), Some(Call::Acquire("tok1".into())));
        let release = r#"+1700000000.2 [0 127.0.0.1:50000] "evalsha" "cd34" "4" "leasehold:{chaos}:lock" "leasehold:{chaos}:released" "leasehold:{chaos}:queue" "leasehold:{chaos}:alive" "tok1" "500" "0" "7""#;
        assert_eq!(parse(release), Some(Call::Release("tok1".into())));
        let inside = r#"+1700000000.3 [0 lua] "SET" "leasehold:{chaos}:lock" "tok1""#;
        assert_eq!(parse(inside), None);
        let echo = r#"+1700000000.4 [0 127.0.0.1:50001] "ECHO" "freeze \"1\"""#;
        assert_eq!(parse(echo), Some(Call::Marker("freeze \"1\"".into())));
        assert_eq!(parse(r#"+1.0 [0 127.0.0.1:1] "PING""#), None);
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
            // The old ordering: retry before the give-back. No trace.
            a("w"),
            a("w"),
            r("w"),
        ];
        assert_eq!(give_backs(&calls), vec![0, 2, 0]);
    }
}
