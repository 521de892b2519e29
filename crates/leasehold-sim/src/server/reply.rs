//! A command's reply before it is encoded, for a client (RESP3, as redis-rs
//! decodes it) or for a script (RESP2, converted to Lua as Redis does), and
//! the number formats Redis uses on the way.

use redis::{PushKind, Value, VerbatimFormat};

/// One reply, in the form both encodings start from.
#[derive(Debug, Clone, PartialEq)]
pub(super) enum Reply {
    /// A status (`+OK`, `+PONG`, `+string`).
    Status(String),
    /// An error: its whole text, code word first (`WRONGTYPE Operation ...`).
    Error(String),
    /// An integer.
    Int(i64),
    /// A bulk string.
    Bulk(Vec<u8>),
    /// The null reply (RESP2: null bulk; RESP3: `_`).
    Nil,
    /// An array.
    Array(Vec<Reply>),
    /// A double (RESP2: a bulk string as Redis formats it; RESP3: `,`).
    Double(f64),
    /// A map (RESP2: a flat array of key, value, ...).
    Map(Vec<(Reply, Reply)>),
    /// A verbatim text (INFO; RESP2: a bulk string).
    Verbatim(String),
    /// A push frame (a subscription's confirmation).
    Push(PushKind, Vec<Reply>),
}

/// Redis's reply to a command on a key of another type.
pub(super) const WRONGTYPE: &str =
    "WRONGTYPE Operation against a key holding the wrong kind of value";
/// Redis's reply to an argument that is no integer (or out of range).
pub(super) const NOT_INTEGER: &str = "ERR value is not an integer or out of range";
/// Redis's reply to a malformed option list.
pub(super) const SYNTAX: &str = "ERR syntax error";

impl Reply {
    /// The status `+OK`.
    pub(super) fn ok() -> Reply {
        Reply::Status("OK".to_owned())
    }

    /// An error reply with this text (code word first).
    pub(super) fn err(text: impl Into<String>) -> Reply {
        Reply::Error(text.into())
    }

    /// The reply as a RESP3 client (redis-rs) decodes it.
    pub(super) fn into_value(self) -> Value {
        match self {
            Reply::Status(s) if s == "OK" => Value::Okay,
            Reply::Status(s) => Value::SimpleString(s),
            Reply::Error(text) => error_value(&text),
            Reply::Int(i) => Value::Int(i),
            Reply::Bulk(b) => Value::BulkString(b),
            Reply::Nil => Value::Nil,
            Reply::Array(items) => Value::Array(items.into_iter().map(Reply::into_value).collect()),
            Reply::Double(d) => Value::Double(d),
            Reply::Map(pairs) => Value::Map(
                pairs
                    .into_iter()
                    .map(|(k, v)| (k.into_value(), v.into_value()))
                    .collect(),
            ),
            Reply::Verbatim(text) => Value::VerbatimString {
                format: VerbatimFormat::Text,
                text,
            },
            Reply::Push(kind, data) => Value::Push {
                kind,
                data: data.into_iter().map(Reply::into_value).collect(),
            },
        }
    }
}

/// `Value::ServerError` for an error text, built by redis-rs's own parser so
/// that its kind and code are exactly what a real reply gives.
pub fn error_value(text: &str) -> Value {
    // A reply line cannot hold CR or LF; Redis replaces them by spaces.
    let line: String = text
        .chars()
        .map(|c| if c == '\r' || c == '\n' { ' ' } else { c })
        .collect();
    redis::parse_redis_value(format!("-{line}\r\n").as_bytes()).expect("an error line parses")
}

/// A double as C's `printf("%.17g")` prints it: how Redis 6.2 and 7.0 give
/// scores to RESP2 clients (scripts) and turn Lua numbers into arguments.
/// (Valkey 8 prints the shortest form instead, e.g. `0.1` for
/// `0.10000000000000001`; integers below 1e17, all the scripts use, print
/// alike everywhere.)
pub(super) fn fmt_g17(x: f64) -> String {
    if x.is_nan() {
        return if x.is_sign_negative() { "-nan" } else { "nan" }.to_owned();
    }
    if x.is_infinite() {
        return if x > 0.0 { "inf" } else { "-inf" }.to_owned();
    }
    if x == 0.0 {
        return if x.is_sign_negative() { "-0" } else { "0" }.to_owned();
    }
    if x.fract() == 0.0 && x.abs() < 1e17 {
        // At most 17 digits: %.17g prints every one, no exponent.
        return format!("{}", x as i64);
    }
    // Rust rounds the 17 significant digits exactly as glibc does.
    let sci = format!("{x:.16e}");
    let (mantissa, exp) = sci.split_once('e').expect("{:e} has an exponent");
    let exp: i32 = exp.parse().expect("{:e}'s exponent is an integer");
    let digits: String = mantissa.chars().filter(char::is_ascii_digit).collect();
    let mut out = String::with_capacity(24);
    if x < 0.0 {
        out.push('-');
    }
    if !(-4..17).contains(&exp) {
        let (first, rest) = digits.split_at(1);
        let rest = rest.trim_end_matches('0');
        out.push_str(first);
        if !rest.is_empty() {
            out.push('.');
            out.push_str(rest);
        }
        out.push('e');
        out.push(if exp < 0 { '-' } else { '+' });
        out.push_str(&format!("{:02}", exp.abs()));
    } else if exp >= 0 {
        let (int, frac) = digits.split_at(exp as usize + 1);
        out.push_str(int);
        let frac = frac.trim_end_matches('0');
        if !frac.is_empty() {
            out.push('.');
            out.push_str(frac);
        }
    } else {
        out.push_str("0.");
        for _ in 0..(-exp - 1) {
            out.push('0');
        }
        out.push_str(digits.trim_end_matches('0'));
    }
    out
}

/// An integer argument as Redis reads it (`string2ll`): optional '-', no
/// '+', no spaces, no leading zeros.
pub(super) fn parse_i64(b: &[u8]) -> Option<i64> {
    if b == b"0" {
        return Some(0);
    }
    let (neg, digits) = match b.split_first() {
        Some((b'-', rest)) => (true, rest),
        _ => (false, b),
    };
    if digits.is_empty() || digits.len() > 19 || !(b'1'..=b'9').contains(&digits[0]) {
        return None;
    }
    let mut v: u64 = 0;
    for &d in digits {
        if !d.is_ascii_digit() {
            return None;
        }
        v = v.checked_mul(10)?.checked_add(u64::from(d - b'0'))?;
    }
    if neg {
        if v > 1 << 63 {
            return None;
        }
        Some((v as i64).wrapping_neg())
    } else {
        i64::try_from(v).ok()
    }
}

/// A float argument as Redis reads it (`strtod` over the whole string, no
/// leading space, not NaN): scores and score ranges.
pub(super) fn parse_f64(b: &[u8]) -> Option<f64> {
    let s = std::str::from_utf8(b).ok()?;
    if s.is_empty() || s.starts_with(|c: char| c.is_ascii_whitespace()) {
        return None;
    }
    let v: f64 = s.parse().ok()?;
    (!v.is_nan()).then_some(v)
}

/// Redis's glob (`stringmatchlen`, case-sensitive): `*`, `?`, `[...]` with
/// `^` and ranges, `\` escapes.
pub(super) fn glob(pattern: &[u8], s: &[u8]) -> bool {
    // The C code reads one byte past the pattern's end (its NUL): so do we.
    let at = |i: usize| pattern.get(i).copied().unwrap_or(0);
    let (mut p, mut i) = (0usize, 0usize);
    while p < pattern.len() && i < s.len() {
        match pattern[p] {
            b'*' => {
                while at(p + 1) == b'*' {
                    p += 1;
                }
                if p + 1 == pattern.len() {
                    return true;
                }
                while i < s.len() {
                    if glob(&pattern[p + 1..], &s[i..]) {
                        return true;
                    }
                    i += 1;
                }
                return false;
            }
            b'?' => i += 1,
            b'[' => {
                p += 1;
                let not = at(p) == b'^';
                if not {
                    p += 1;
                }
                let mut matched = false;
                loop {
                    let left = pattern.len().saturating_sub(p);
                    if at(p) == b'\\' && left >= 2 {
                        p += 1;
                        if at(p) == s[i] {
                            matched = true;
                        }
                    } else if at(p) == b']' {
                        break;
                    } else if left == 0 {
                        p -= 1;
                        break;
                    } else if left >= 3 && at(p + 1) == b'-' {
                        let (mut start, mut end) = (at(p), at(p + 2));
                        if start > end {
                            std::mem::swap(&mut start, &mut end);
                        }
                        if (start..=end).contains(&s[i]) {
                            matched = true;
                        }
                        p += 2;
                    } else if at(p) == s[i] {
                        matched = true;
                    }
                    p += 1;
                }
                if not {
                    matched = !matched;
                }
                if !matched {
                    return false;
                }
                i += 1;
            }
            c => {
                let c = if c == b'\\' && pattern.len() - p >= 2 {
                    p += 1;
                    pattern[p]
                } else {
                    c
                };
                if c != s[i] {
                    return false;
                }
                i += 1;
            }
        }
        p += 1;
        if i == s.len() {
            while at(p) == b'*' {
                p += 1;
            }
            break;
        }
    }
    p >= pattern.len() && i == s.len()
}
