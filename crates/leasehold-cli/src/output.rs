//! What the commands print: human text or JSON on stdout.

use std::io::Write;
use std::time::Duration;

use leasehold::LockStatus;
use serde_json::{Value, json};

/// Writes `text` and a newline to stdout. A closed stdout (`| head`) is not
/// an error worth a panic: the reader has gone.
pub(crate) fn emit(text: &str) {
    let mut out = std::io::stdout().lock();
    let _ = writeln!(out, "{text}");
    let _ = out.flush();
}

/// Writes `value` as one line of JSON on stdout.
pub(crate) fn emit_json(value: &Value) {
    emit(&value.to_string());
}

/// Milliseconds, for JSON fields named `*_ms`.
pub(crate) fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

/// A short human duration: `850us`, `12.3ms`, `4.25s`, `2m 5s`.
pub(crate) fn short(d: Duration) -> String {
    if d < Duration::from_millis(1) {
        format!("{}us", d.as_micros())
    } else if d < Duration::from_secs(1) {
        format!("{:.1}ms", d.as_secs_f64() * 1e3)
    } else if d < Duration::from_secs(60) {
        format!("{:.2}s", d.as_secs_f64())
    } else {
        humantime::format_duration(Duration::from_secs(d.as_secs())).to_string()
    }
}

/// A lock's status as a JSON object.
pub(crate) fn status_json(status: &LockStatus) -> Value {
    json!({
        "name": status.name,
        "held": status.holder.is_some(),
        "holder": status.holder,
        "remaining_ms": status.remaining.map(millis),
        "fence": status.fence,
        "waiting_clients": status.waiting_clients,
    })
}

/// A lock's status as `key value` lines.
pub(crate) fn status_human(status: &LockStatus) -> String {
    let holder = match &status.holder {
        Some(h) => format!("{h}… (token prefix)"),
        None => "none (the lock is free)".to_owned(),
    };
    let remaining = status.remaining.map_or_else(|| "-".to_owned(), short);
    let fence = status
        .fence
        .map_or_else(|| "- (none issued yet)".to_owned(), |f| f.to_string());
    format!(
        "lock       {}\nholder     {holder}\nremaining  {remaining}\nlast fence {fence}\nwaiting    {} client(s)",
        status.name, status.waiting_clients
    )
}

/// Held locks as an aligned table, one per line under a header.
pub(crate) fn list_human(locks: &[LockStatus]) -> String {
    let width = locks
        .iter()
        .map(|s| s.name.chars().count())
        .max()
        .unwrap_or(0)
        .max("NAME".len());
    let mut out = format!(
        "{:<width$}  {:<9}  {:>10}  {:>20}  WAITING",
        "NAME", "HOLDER", "REMAINING", "FENCE"
    );
    for s in locks {
        out.push('\n');
        out.push_str(&format!(
            "{:<width$}  {:<9}  {:>10}  {:>20}  {}",
            s.name,
            s.holder.as_deref().unwrap_or("-"),
            s.remaining.map_or_else(|| "-".to_owned(), short),
            s.fence.map_or_else(|| "-".to_owned(), |f| f.to_string()),
            s.waiting_clients
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn short_durations_pick_a_readable_unit() {
        assert_eq!(short(Duration::from_micros(850)), "850us");
        assert_eq!(short(Duration::from_micros(12_345)), "12.3ms");
        assert_eq!(short(Duration::from_millis(4_250)), "4.25s");
        assert_eq!(short(Duration::from_secs(125)), "2m 5s");
    }
}
