//! RESP on the simulated sockets: commands read as a server reads them, and
//! replies and pushes written as a RESP3 server writes them.

use redis::Value;

/// A command's arguments, and the bytes it took.
pub type Command = (Vec<Vec<u8>>, usize);

/// One command (`*N` of `$len` bulk strings) at the start of `buf`: its
/// arguments and the bytes it took, or None if it is not whole yet.
pub fn parse_command(buf: &[u8]) -> Result<Option<Command>, String> {
    fn line(buf: &[u8], at: usize) -> Option<(&[u8], usize)> {
        // A length line has no '\r' but its end's.
        let end = at + buf.get(at..)?.iter().position(|&b| b == b'\r')?;
        match buf.get(end + 1) {
            Some(b'\n') => Some((&buf[at..end], end + 2)),
            // Not a length: `number` says so.
            Some(_) => Some((&buf[at..=end], end + 1)),
            None => None,
        }
    }
    fn number(text: &[u8]) -> Result<usize, String> {
        std::str::from_utf8(text)
            .ok()
            .and_then(|t| t.parse().ok())
            .ok_or_else(|| format!("not a length: {:?}", String::from_utf8_lossy(text)))
    }
    if buf.is_empty() {
        return Ok(None);
    }
    if buf[0] != b'*' {
        return Err(format!(
            "a command starts with '*', not {:?}",
            buf[0] as char
        ));
    }
    let Some((head, mut at)) = line(buf, 1) else {
        return Ok(None);
    };
    let n = number(head)?;
    let mut args = Vec::with_capacity(n);
    for _ in 0..n {
        if at >= buf.len() {
            return Ok(None);
        }
        if buf[at] != b'$' {
            return Err("an argument is a bulk string".to_owned());
        }
        let Some((len, start)) = line(buf, at + 1) else {
            return Ok(None);
        };
        let len = number(len)?;
        if buf.len() < start + len + 2 {
            return Ok(None);
        }
        args.push(buf[start..start + len].to_vec());
        at = start + len + 2;
    }
    Ok(Some((args, at)))
}

/// `v` as RESP3 bytes.
pub fn encode(v: &Value, out: &mut Vec<u8>) {
    use std::io::Write;
    let aggregate = |out: &mut Vec<u8>, tag: u8, items: &[Value]| {
        out.push(tag);
        let _ = write!(out, "{}\r\n", items.len());
        for item in items {
            encode(item, out);
        }
    };
    match v {
        Value::Nil => out.extend_from_slice(b"_\r\n"),
        Value::Int(i) => {
            let _ = write!(out, ":{i}\r\n");
        }
        Value::BulkString(b) => {
            let _ = write!(out, "${}\r\n", b.len());
            out.extend_from_slice(b);
            out.extend_from_slice(b"\r\n");
        }
        Value::Array(items) => aggregate(out, b'*', items),
        Value::Set(items) => aggregate(out, b'~', items),
        Value::SimpleString(s) => {
            let _ = write!(out, "+{s}\r\n");
        }
        Value::Okay => out.extend_from_slice(b"+OK\r\n"),
        Value::Map(pairs)
        | Value::Attribute {
            attributes: pairs, ..
        } => {
            let _ = write!(out, "%{}\r\n", pairs.len());
            for (k, v) in pairs {
                encode(k, out);
                encode(v, out);
            }
        }
        Value::Double(d) => {
            let _ = write!(out, ",{d}\r\n");
        }
        Value::Boolean(b) => {
            let _ = write!(out, "#{}\r\n", if *b { 't' } else { 'f' });
        }
        Value::VerbatimString { text, .. } => {
            let _ = write!(out, "${}\r\n{text}\r\n", text.len());
        }
        Value::BigNumber(n) => {
            let _ = write!(out, "({}\r\n", String::from_utf8_lossy(n));
        }
        Value::Push { kind, data } => {
            let _ = write!(out, ">{}\r\n", data.len() + 1);
            let kind = kind.to_string();
            let _ = write!(out, "${}\r\n{kind}\r\n", kind.len());
            for item in data {
                encode(item, out);
            }
        }
        Value::ServerError(e) => {
            let _ = match e.details() {
                Some(details) => write!(out, "-{} {details}\r\n", e.code()),
                None => write!(out, "-{}\r\n", e.code()),
            };
        }
        _ => panic!("the simulated socket cannot send {v:?}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn commands_are_read_whole_or_not_at_all() {
        let bytes = b"*2\r\n$3\r\nGET\r\n$1\r\nk\r\n*1\r\n$4\r\nPI";
        let (args, used) = parse_command(bytes).unwrap().unwrap();
        assert_eq!(args, vec![b"GET".to_vec(), b"k".to_vec()]);
        assert_eq!(parse_command(&bytes[used..]).unwrap(), None);
    }

    #[test]
    fn replies_parse_back_to_what_was_sent() {
        let v = Value::Array(vec![
            Value::Int(-3),
            Value::BulkString(b"a\r\nb".to_vec()),
            Value::Nil,
            Value::Okay,
            Value::Map(vec![(Value::SimpleString("k".into()), Value::Double(1.5))]),
        ]);
        let mut out = Vec::new();
        encode(&v, &mut out);
        let parsed = redis::parse_redis_value(&out).unwrap();
        assert_eq!(parsed, v);
    }
}
