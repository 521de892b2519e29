//! What the commands print: human text or JSON on stdout (`run`'s result
//! on stderr, stdout being its command's).

use std::io::Write;
use std::time::Duration;

use leasehold::{
    BrokenLease, HoldStatus, LockStatus, ReentrantStatus, RwLockStatus, SemaphoreStatus,
};
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

/// Writes `value` as one line of JSON on stderr: a result that must not
/// mix with a command's own stdout (`run --json`).
pub(crate) fn emit_json_stderr(value: &Value) {
    let mut err = std::io::stderr().lock();
    let _ = writeln!(err, "{value}");
    let _ = err.flush();
}

/// `name` with its control characters escaped (`\n`, `\u{1b}`), so a lock
/// name cannot move the cursor, clear the screen or forge a table row.
pub(crate) fn printable(name: &str) -> String {
    if !name.chars().any(char::is_control) {
        return name.to_owned();
    }
    name.chars()
        .map(|c| {
            if c.is_control() {
                c.escape_default().to_string()
            } else {
                c.to_string()
            }
        })
        .collect()
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
        "kind": status.holder.as_ref().map(|_| "lock"),
        "held": status.holder.is_some(),
        "holder": status.holder,
        "about": status.holder_about,
        "remaining_ms": status.remaining.map(millis),
        "fence": status.fence,
        "waiting_clients": status.waiting_clients,
    })
}

/// A lock's status as `key value` lines.
pub(crate) fn status_human(status: &LockStatus) -> String {
    let holder = match (&status.holder, &status.holder_about) {
        (Some(h), Some(about)) => format!("{h}… (token prefix): {}", printable(about)),
        (Some(h), None) => format!("{h}… (token prefix)"),
        (None, _) => "none (the lock is free)".to_owned(),
    };
    let remaining = remaining_human(status.remaining);
    format!(
        "lock       {}\nholder     {holder}\nremaining  {remaining}\nlast fence {}\nwaiting    {} client(s)",
        printable(&status.name),
        fence_human(status.fence),
        status.waiting_clients
    )
}

/// A read-write lock's status as a JSON object.
pub(crate) fn rw_status_json(status: &RwLockStatus) -> Value {
    json!({
        "name": status.name,
        "kind": "rwlock",
        "writer": status.writer.as_ref().map(hold_json),
        "readers": status.readers.iter().map(hold_json).collect::<Vec<_>>(),
        "reader_count": status.reader_count,
        "waiting_writers": status.waiting_writers,
        "fence": status.fence,
    })
}

/// A read-write lock's status as `key value` lines.
pub(crate) fn rw_status_human(status: &RwLockStatus) -> String {
    let writer = status.writer.as_ref().map_or_else(
        || "none".to_owned(),
        |w| format!("{} (owner prefix)", hold_human(w)),
    );
    format!(
        "rwlock     {}\nwriter     {writer}\nreaders    {} read hold(s){}\nwaiting    {} writer(s)\nlast fence {}",
        printable(&status.name),
        status.reader_count,
        holds_human(&status.readers, status.reader_count),
        status.waiting_writers,
        fence_human(status.fence)
    )
}

/// A semaphore's status as a JSON object.
pub(crate) fn semaphore_status_json(status: &SemaphoreStatus) -> Value {
    json!({
        "name": status.name,
        "kind": "semaphore",
        "permits": status.permits,
        "held": status.held,
        "holders": status.holders.iter().map(hold_json).collect::<Vec<_>>(),
        "fence": status.fence,
    })
}

/// A semaphore's status as `key value` lines.
pub(crate) fn semaphore_status_human(status: &SemaphoreStatus) -> String {
    let of = status
        .permits
        .map_or_else(String::new, |n| format!(" of {n}"));
    format!(
        "semaphore  {}\nheld       {}{of} permit(s){}\nlast fence {}",
        printable(&status.name),
        status.held,
        holds_human(&status.holders, status.held),
        fence_human(status.fence)
    )
}

/// A reentrant lock's status as a JSON object.
pub(crate) fn reentrant_status_json(status: &ReentrantStatus) -> Value {
    json!({
        "name": status.name,
        "kind": "reentrant",
        "held": status.owner.is_some(),
        "owner": status.owner,
        "holds": status.holds,
        "remaining_ms": status.remaining.map(millis),
        "fence": status.fence,
    })
}

/// A reentrant lock's status as `key value` lines.
pub(crate) fn reentrant_status_human(status: &ReentrantStatus) -> String {
    let owner = match &status.owner {
        Some(o) => format!("{o}… (owner id prefix), {} hold(s)", status.holds),
        None => "none (the lock is free)".to_owned(),
    };
    format!(
        "reentrant  {}\nowner      {owner}\nremaining  {}\nlast fence {}",
        printable(&status.name),
        remaining_human(status.remaining),
        fence_human(status.fence)
    )
}

/// What `release --force` broke (`None`: nothing held the name) as a JSON
/// object.
pub(crate) fn broken_json(name: &str, broken: Option<&BrokenLease>) -> Value {
    let Some(broken) = broken else {
        return json!({ "name": name, "broken": false, "kind": null, "holds": [] });
    };
    json!({
        "name": broken.name,
        "broken": true,
        "kind": broken.kind.as_str(),
        "holds": broken.holds.iter().map(|h| json!({
            "holder": h.holder,
            "remaining_ms": h.remaining.map(millis),
            "holds": h.holds,
        })).collect::<Vec<_>>(),
        "fence": broken.fence,
    })
}

/// What `release --force` broke, one line per hold removed and the fence kept.
pub(crate) fn broken_human(name: &str, broken: Option<&BrokenLease>) -> String {
    let Some(broken) = broken else {
        return format!(
            "nothing broken: {} is not held (or changed hands just now)",
            printable(name)
        );
    };
    let mut out = format!(
        "broke {} {}: removed {} hold(s)",
        broken.kind,
        printable(&broken.name),
        broken.holds.len()
    );
    for hold in broken.holds.iter().take(HUMAN_MOST_HOLDS) {
        let times = if hold.holds > 1 {
            format!(" (x{})", hold.holds)
        } else {
            String::new()
        };
        out.push_str(&format!(
            "\n  {}…{times} {} left",
            hold.holder,
            remaining_human(hold.remaining)
        ));
    }
    if broken.holds.len() > HUMAN_MOST_HOLDS {
        out.push_str(&format!(
            "\n  … and {} more",
            broken.holds.len() - HUMAN_MOST_HOLDS
        ));
    }
    out.push_str(&match broken.fence {
        Some(fence) => format!("\nlast fence {fence} kept: the next holder's is above it"),
        None => "\nlast fence - (not kept)".to_owned(),
    });
    out
}

/// One hold of a read-write lock or semaphore as a JSON object.
fn hold_json(hold: &HoldStatus) -> Value {
    json!({ "holder": hold.holder, "about": hold.about, "remaining_ms": millis(hold.remaining) })
}

/// The most holds listed in human output; `--json` lists up to the library's cap.
const HUMAN_MOST_HOLDS: usize = 10;

/// One hold: its holder's prefix and time left.
fn hold_human(hold: &HoldStatus) -> String {
    match &hold.about {
        Some(about) => format!(
            "{}… {} left: {}",
            hold.holder,
            short(hold.remaining),
            printable(about)
        ),
        None => format!("{}… {} left", hold.holder, short(hold.remaining)),
    }
}

/// The first holds of `total`, one indented line each, and how many more.
fn holds_human(holds: &[HoldStatus], total: usize) -> String {
    let mut out = String::new();
    for hold in holds.iter().take(HUMAN_MOST_HOLDS) {
        out.push_str("\n           ");
        out.push_str(&hold_human(hold));
    }
    let shown = holds.len().min(HUMAN_MOST_HOLDS);
    if total > shown {
        out.push_str(&format!("\n           … and {} more", total - shown));
    }
    out
}

/// A remaining lease, or `-` for none.
fn remaining_human(remaining: Option<Duration>) -> String {
    remaining.map_or_else(|| "-".to_owned(), short)
}

/// The last fence, or a note that none is kept. Not "none issued": a
/// release that frees a name drops its fence key with the lease (unless
/// fences are kept longer), so a fence may well have been issued; the
/// next one is above it all the same (the server clock's microseconds).
fn fence_human(fence: Option<u64>) -> String {
    fence.map_or_else(
        || "- (not kept: a name's last fence goes with its lease; the next is above it)".to_owned(),
        |f| f.to_string(),
    )
}

/// One held name in `list`: its kind and what the table shows of it.
#[derive(Debug)]
pub(crate) struct Row {
    /// The lock name.
    pub(crate) name: String,
    /// `lock`, `reentrant`, `rwlock`, `semaphore` or `election`.
    pub(crate) kind: &'static str,
    /// Who holds it: a token or owner prefix, `N readers`, `k/N permits`.
    pub(crate) holder: String,
    /// The time left of the hold that ends last (the lease, the writer's).
    pub(crate) remaining: Option<Duration>,
    /// The last fence.
    pub(crate) fence: Option<u64>,
    /// Waiting clients (lock) or writers (rwlock); `-` where not counted.
    pub(crate) waiting: String,
    /// What the holder says of itself (the lock's holder, the writer, the
    /// permit or read hold that ends last), if it did.
    pub(crate) about: Option<String>,
}

/// Held locks of every kind as an aligned table, one per line under a
/// header; names with control characters escaped.
pub(crate) fn list_human(rows: &[Row]) -> String {
    let names: Vec<String> = rows.iter().map(|r| printable(&r.name)).collect();
    let width = names
        .iter()
        .map(|n| n.chars().count())
        .max()
        .unwrap_or(0)
        .max("NAME".len());
    let holder_width = rows
        .iter()
        .map(|r| r.holder.chars().count())
        .max()
        .unwrap_or(0)
        .max("HOLDER".len());
    let who = rows.iter().any(|r| r.about.is_some());
    let mut out = format!(
        "{:<width$}  {:<9}  {:<holder_width$}  {:>10}  {:>20}  WAITING",
        "NAME", "KIND", "HOLDER", "REMAINING", "FENCE"
    );
    if who {
        out.push_str("  WHO");
    }
    for (r, name) in rows.iter().zip(&names) {
        out.push('\n');
        let mut line = format!(
            "{:<width$}  {:<9}  {:<holder_width$}  {:>10}  {:>20}  {:<7}",
            name,
            r.kind,
            r.holder,
            r.remaining.map_or_else(|| "-".to_owned(), short),
            r.fence.map_or_else(|| "-".to_owned(), |f| f.to_string()),
            r.waiting
        );
        if who {
            line.push_str("  ");
            line.push_str(&r.about.as_deref().map_or_else(|| "-".to_owned(), printable));
        }
        out.push_str(line.trim_end());
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn control_characters_in_names_are_escaped() {
        assert_eq!(printable("jobs:7"), "jobs:7");
        assert_eq!(printable("a\nb"), "a\\nb");
        assert_eq!(printable("\u{1b}[2Jx"), "\\u{1b}[2Jx");
        assert_eq!(printable("tab\there"), "tab\\there");
    }

    #[test]
    fn short_durations_pick_a_readable_unit() {
        assert_eq!(short(Duration::from_micros(850)), "850us");
        assert_eq!(short(Duration::from_micros(12_345)), "12.3ms");
        assert_eq!(short(Duration::from_millis(4_250)), "4.25s");
        assert_eq!(short(Duration::from_secs(125)), "2m 5s");
    }
}
