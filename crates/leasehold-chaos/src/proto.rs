//! The line protocol between workers and the checker's resource server.
//!
//! One request per line, one reply line per request, space-separated
//! fields. Tokens are hex, so no field contains a space; an error message
//! is always the last field and runs to the end of the line.

use crate::history::{Micros, Outcome, WorkerId};

/// What a worker sends.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Request {
    /// First line on a connection: who is talking.
    Hello {
        /// The worker's id.
        worker: WorkerId,
    },
    /// "About to call `acquire()`." Reply: [`Reply::Go`], or
    /// [`Reply::Frozen`] when the checker froze Redis just now. Sent only by
    /// workers told to report it; the checker counts the worker as inside
    /// `acquire()` from its reply until [`Request::Acquired`] or
    /// [`Request::AcquireFailed`].
    Acquiring {
        /// When the worker sent it.
        t: Micros,
    },
    /// `acquire()` returned a guard. Reply: [`Reply::Ok`], or
    /// [`Reply::Hold`].
    Acquired {
        /// When `acquire()` was called.
        started: Micros,
        /// When it returned.
        t: Micros,
        /// The guard's fence.
        fence: u64,
        /// The guard's owner token.
        token: String,
    },
    /// `acquire()` returned an error. Reply: [`Reply::Ok`] or [`Reply::Hold`].
    AcquireFailed {
        /// When it returned.
        t: Micros,
        /// Whether it was `Error::QuorumNotReached`.
        quorum: bool,
        /// The error.
        error: String,
    },
    /// Read both registers. Reply: [`Reply::Values`].
    Read {
        /// The holder's fence.
        fence: u64,
        /// The holder's owner token.
        token: String,
    },
    /// "I hold the lock and have read; about to write." Reply: [`Reply::Go`]
    /// or [`Reply::Hold`]. Sent only by workers told to announce.
    Holding {
        /// The holder's fence.
        fence: u64,
    },
    /// Write both registers (`None`: the fenced read was rejected, so skip it).
    Write {
        /// The holder's fence.
        fence: u64,
        /// The holder's owner token.
        token: String,
        /// New value of the unfenced register.
        unfenced: i64,
        /// New value of the fenced register.
        fenced: Option<i64>,
    },
    /// The guard's lease was lost.
    Lost {
        /// When the worker noticed.
        t: Micros,
        /// The guard's fence.
        fence: u64,
    },
    /// A lease the worker holds on the side was lost.
    HeldLost {
        /// When its `lost()` resolved.
        t: Micros,
        /// Whether it was on a healthy master.
        healthy: bool,
    },
    /// `release()` returned.
    Released {
        /// When.
        t: Micros,
        /// The guard's fence.
        fence: u64,
        /// What it returned.
        outcome: Outcome,
    },
    /// A release or extend with an already released token returned.
    Probe {
        /// When.
        t: Micros,
        /// `release` or `extend`.
        kind: String,
        /// Fence of the released acquisition whose token was used.
        fence: u64,
        /// What it returned.
        outcome: Outcome,
    },
}

/// What the resource server answers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Reply {
    /// Recorded.
    Ok,
    /// Register values; `None` when the fenced register rejected the read.
    Values {
        /// The unfenced register.
        unfenced: i64,
        /// The fenced register, if the read was accepted.
        fenced: Option<i64>,
    },
    /// Carry on.
    Go,
    /// To [`Request::Acquiring`]: Redis was frozen just now; drop the
    /// ballast leases (their releases queue up in the client's watchdog),
    /// then call `acquire()`.
    Frozen,
    /// To [`Request::Holding`]: keep holding this many milliseconds before
    /// writing, giving up as soon as the lease is lost. To
    /// [`Request::Acquired`]: the same before touching the resource at all
    /// (given up: no operation). To [`Request::AcquireFailed`]: wait this
    /// long before the next attempt.
    Hold(u64),
    /// The request could not be parsed.
    Error(String),
}

fn opt(v: Option<i64>) -> String {
    v.map_or_else(|| "-".to_owned(), |v| v.to_string())
}

fn parse_opt(s: &str) -> Option<Option<i64>> {
    if s == "-" {
        Some(None)
    } else {
        s.parse().ok().map(Some)
    }
}

impl Request {
    /// The line for this request, without the newline.
    pub(crate) fn encode(&self) -> String {
        match self {
            Request::Hello { worker } => format!("HELLO {worker}"),
            Request::Acquiring { t } => format!("ACQING {t}"),
            Request::Acquired {
                started,
                t,
                fence,
                token,
            } => format!("ACQ {started} {t} {fence} {token}"),
            Request::AcquireFailed { t, quorum, error } => {
                let kind = if *quorum { "quorum" } else { "other" };
                format!("ACQERR {t} {kind} {error}")
            }
            Request::Read { fence, token } => format!("READ {fence} {token}"),
            Request::Holding { fence } => format!("HOLDING {fence}"),
            Request::Write {
                fence,
                token,
                unfenced,
                fenced,
            } => format!("WRITE {fence} {token} {unfenced} {}", opt(*fenced)),
            Request::Lost { t, fence } => format!("LOST {t} {fence}"),
            Request::HeldLost { t, healthy } => format!("HELDLOST {t} {}", u8::from(*healthy)),
            Request::Released { t, fence, outcome } => {
                format!("REL {t} {fence} {}", outcome.as_str())
            }
            Request::Probe {
                t,
                kind,
                fence,
                outcome,
            } => format!("PROBE {t} {kind} {fence} {}", outcome.as_str()),
        }
    }

    /// Parses [`Request::encode`]'s output.
    pub(crate) fn parse(line: &str) -> Option<Request> {
        let mut it = line.trim_end().splitn(2, ' ');
        let verb = it.next()?;
        let rest = it.next().unwrap_or("");
        if verb == "ACQERR" {
            let mut f = rest.splitn(3, ' ');
            let t = f.next()?.parse().ok()?;
            let quorum = match f.next()? {
                "quorum" => true,
                "other" => false,
                _ => return None,
            };
            return Some(Request::AcquireFailed {
                t,
                quorum,
                error: f.next().unwrap_or("").to_owned(),
            });
        }
        let f: Vec<&str> = rest.split(' ').collect();
        let num = |i: usize| f.get(i).and_then(|s| s.parse::<u64>().ok());
        let text = |i: usize| f.get(i).map(|s| (*s).to_owned());
        let outcome = |i: usize| f.get(i).and_then(|s| Outcome::parse(s));
        Some(match (verb, f.len()) {
            ("HELLO", 1) => Request::Hello {
                worker: u32::try_from(num(0)?).ok()?,
            },
            ("ACQING", 1) => Request::Acquiring { t: num(0)? },
            ("ACQ", 4) => Request::Acquired {
                started: num(0)?,
                t: num(1)?,
                fence: num(2)?,
                token: text(3)?,
            },
            ("READ", 2) => Request::Read {
                fence: num(0)?,
                token: text(1)?,
            },
            ("HOLDING", 1) => Request::Holding { fence: num(0)? },
            ("WRITE", 4) => Request::Write {
                fence: num(0)?,
                token: text(1)?,
                unfenced: f[2].parse().ok()?,
                fenced: parse_opt(f[3])?,
            },
            ("LOST", 2) => Request::Lost {
                t: num(0)?,
                fence: num(1)?,
            },
            ("HELDLOST", 2) => Request::HeldLost {
                t: num(0)?,
                healthy: match num(1)? {
                    0 => false,
                    1 => true,
                    _ => return None,
                },
            },
            ("REL", 3) => Request::Released {
                t: num(0)?,
                fence: num(1)?,
                outcome: outcome(2)?,
            },
            ("PROBE", 4) => Request::Probe {
                t: num(0)?,
                kind: text(1)?,
                fence: num(2)?,
                outcome: outcome(3)?,
            },
            _ => return None,
        })
    }
}

impl Reply {
    /// The line for this reply, without the newline.
    pub(crate) fn encode(&self) -> String {
        match self {
            Reply::Ok => "OK".to_owned(),
            Reply::Values { unfenced, fenced } => format!("V {unfenced} {}", opt(*fenced)),
            Reply::Go => "GO".to_owned(),
            Reply::Frozen => "FROZEN".to_owned(),
            Reply::Hold(ms) => format!("HOLD {ms}"),
            Reply::Error(e) => format!("ERR {e}"),
        }
    }

    /// Parses [`Reply::encode`]'s output.
    pub(crate) fn parse(line: &str) -> Option<Reply> {
        let f: Vec<&str> = line.trim_end().split(' ').collect();
        Some(match f.as_slice() {
            ["OK"] => Reply::Ok,
            ["GO"] => Reply::Go,
            ["FROZEN"] => Reply::Frozen,
            ["HOLD", ms] => Reply::Hold(ms.parse().ok()?),
            ["V", u, v] => Reply::Values {
                unfenced: u.parse().ok()?,
                fenced: parse_opt(v)?,
            },
            ["ERR", ..] => Reply::Error(f[1..].join(" ")),
            _ => return None,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn requests_round_trip() {
        let all = [
            Request::Hello { worker: 3 },
            Request::Acquiring { t: 8 },
            Request::Acquired {
                started: 1,
                t: 2,
                fence: 3,
                token: "ab12".into(),
            },
            Request::AcquireFailed {
                t: 9,
                quorum: false,
                error: "cannot reach Redis: refused".into(),
            },
            Request::AcquireFailed {
                t: 9,
                quorum: true,
                error: "quorum not reached: 2 node(s) agreed, 3 needed".into(),
            },
            Request::Read {
                fence: 4,
                token: "cd".into(),
            },
            Request::Holding { fence: 4 },
            Request::Write {
                fence: 4,
                token: "cd".into(),
                unfenced: -1,
                fenced: None,
            },
            Request::Write {
                fence: 4,
                token: "cd".into(),
                unfenced: 7,
                fenced: Some(7),
            },
            Request::Lost { t: 5, fence: 4 },
            Request::HeldLost {
                t: 5,
                healthy: true,
            },
            Request::HeldLost {
                t: 6,
                healthy: false,
            },
            Request::Released {
                t: 6,
                fence: 4,
                outcome: Outcome::NotOwner,
            },
            Request::Probe {
                t: 7,
                kind: "extend".into(),
                fence: 4,
                outcome: Outcome::Lost,
            },
        ];
        for r in all {
            assert_eq!(
                Request::parse(&r.encode()),
                Some(r.clone()),
                "{}",
                r.encode()
            );
        }
        assert_eq!(Request::parse("READ 1"), None);
        assert_eq!(Request::parse("ACQERR 9 maybe oops"), None);
        assert_eq!(Request::parse("NOPE"), None);
    }

    #[test]
    fn replies_round_trip() {
        for r in [
            Reply::Ok,
            Reply::Go,
            Reply::Frozen,
            Reply::Hold(300),
            Reply::Values {
                unfenced: 3,
                fenced: None,
            },
            Reply::Values {
                unfenced: 3,
                fenced: Some(2),
            },
            Reply::Error("bad line".into()),
        ] {
            assert_eq!(Reply::parse(&r.encode()), Some(r.clone()));
        }
    }
}
