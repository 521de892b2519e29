//! Repeated warnings collapsed: the same warning (one `warn!`/`error!`
//! call site of the library) is printed once, then held back for 30 s,
//! then for twice as long each time it keeps coming (at most 10 min); the
//! next one printed says how many were held back. A library that retries
//! while Redis is gone (a subscription at 50ms, 100ms, ... every 2s) would
//! otherwise print a line per retry for as long as `--wait forever` waits.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use tracing::{Event, Level, Subscriber, callsite};
use tracing_subscriber::fmt::format::Writer;
use tracing_subscriber::fmt::{FmtContext, FormatEvent, FormatFields};
use tracing_subscriber::registry::LookupSpan;

/// How long a warning is held back after it was first printed.
const FIRST_QUIET: Duration = Duration::from_secs(30);
/// The longest a warning that keeps coming is held back.
const MOST_QUIET: Duration = Duration::from_secs(600);

/// When one warning was last printed, and what came since.
#[derive(Debug, Clone, Copy)]
struct Seen {
    /// When it was last printed.
    shown_at: Instant,
    /// How long it is held back from then.
    quiet: Duration,
    /// How many came since and were held back.
    held_back: u64,
}

/// Which warnings were seen, by call site.
#[derive(Debug)]
pub(crate) struct Repeats<K> {
    seen: HashMap<K, Seen>,
}

impl<K> Default for Repeats<K> {
    fn default() -> Repeats<K> {
        Repeats {
            seen: HashMap::new(),
        }
    }
}

impl<K: std::hash::Hash + Eq> Repeats<K> {
    /// Whether the warning `key` coming at `now` is printed: `Some(n)` with
    /// the number held back since it was last printed, `None` to hold it
    /// back. A warning that did not come again while held back starts over.
    pub(crate) fn admit(&mut self, key: K, now: Instant) -> Option<(u64, Duration)> {
        let Some(seen) = self.seen.get_mut(&key) else {
            self.seen.insert(
                key,
                Seen {
                    shown_at: now,
                    quiet: FIRST_QUIET,
                    held_back: 0,
                },
            );
            return Some((0, Duration::ZERO));
        };
        let since = now.saturating_duration_since(seen.shown_at);
        if since < seen.quiet {
            seen.held_back += 1;
            return None;
        }
        let held_back = seen.held_back;
        seen.quiet = if held_back == 0 {
            FIRST_QUIET
        } else {
            (seen.quiet * 2).min(MOST_QUIET)
        };
        seen.shown_at = now;
        seen.held_back = 0;
        Some((held_back, since))
    }
}

/// An event formatter that holds back repeated warnings (and errors) of
/// the library and says how many it held back; other events pass as `F`
/// formats them.
pub(crate) struct Collapsing<F> {
    inner: F,
    repeats: Mutex<Repeats<callsite::Identifier>>,
}

impl<F> Collapsing<F> {
    /// Collapses the warnings `inner` formats.
    pub(crate) fn new(inner: F) -> Collapsing<F> {
        Collapsing {
            inner,
            repeats: Mutex::new(Repeats::default()),
        }
    }
}

impl<S, N, F> FormatEvent<S, N> for Collapsing<F>
where
    S: Subscriber + for<'a> LookupSpan<'a>,
    N: for<'a> FormatFields<'a> + 'static,
    F: FormatEvent<S, N>,
{
    fn format_event(
        &self,
        ctx: &FmtContext<'_, S, N>,
        mut writer: Writer<'_>,
        event: &Event<'_>,
    ) -> std::fmt::Result {
        let level = *event.metadata().level();
        if level > Level::WARN {
            return self.inner.format_event(ctx, writer, event);
        }
        let admitted = self
            .repeats
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .admit(event.metadata().callsite(), Instant::now());
        let Some((held_back, since)) = admitted else {
            return Ok(());
        };
        if held_back == 0 {
            return self.inner.format_event(ctx, writer, event);
        }
        let mut line = String::new();
        self.inner
            .format_event(ctx, Writer::new(&mut line), event)?;
        let line = line.trim_end_matches('\n');
        let repeated = format!(
            "repeated {held_back} time(s) in the last {}",
            crate::output::short(since)
        );
        if let Ok(serde_json::Value::Object(mut object)) = serde_json::from_str(line) {
            object.insert("repeated".to_owned(), held_back.into());
            object.insert(
                "repeated_in_ms".to_owned(),
                crate::output::millis(since).into(),
            );
            writeln!(writer, "{}", serde_json::Value::Object(object))
        } else {
            writeln!(writer, "{line} ({repeated})")
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_warning_that_keeps_coming_is_shown_with_a_count_less_and_less_often() {
        let mut repeats = Repeats::default();
        let t0 = Instant::now();
        let at = |ms: u64| t0 + Duration::from_millis(ms);
        assert_eq!(repeats.admit("w", at(0)), Some((0, Duration::ZERO)));
        // The library's retries at 50ms, 100ms, ... then every 2s.
        for ms in [50, 150, 350, 750, 1_550, 3_150, 5_150, 29_150] {
            assert_eq!(repeats.admit("w", at(ms)), None, "{ms}ms");
        }
        // Another warning is not held back by this one.
        assert_eq!(repeats.admit("other", at(100)), Some((0, Duration::ZERO)));
        assert_eq!(
            repeats.admit("w", at(31_150)),
            Some((8, Duration::from_millis(31_150)))
        );
        // Then held back twice as long.
        assert_eq!(repeats.admit("w", at(31_150 + 59_000)), None);
        assert_eq!(
            repeats.admit("w", at(31_150 + 60_000)),
            Some((1, Duration::from_secs(60)))
        );
    }

    #[test]
    fn a_warning_that_stopped_coming_starts_over() {
        let mut repeats = Repeats::default();
        let t0 = Instant::now();
        assert!(repeats.admit("w", t0).is_some());
        let later = t0 + Duration::from_secs(3_600);
        assert_eq!(
            repeats.admit("w", later),
            Some((0, Duration::from_secs(3_600)))
        );
        assert_eq!(repeats.admit("w", later + Duration::from_secs(29)), None);
    }
}
