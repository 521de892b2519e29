//! The one-line status shown on a terminal while `run` or `acquire` waits:
//! the lock, its holder (token prefix), the holder's remaining TTL, how
//! many wait, and how long this one has waited; redrawn in place on stderr.
//!
//! Shown only when stderr is a terminal and `-q` is not given (the caller
//! decides), and only once the wait has lasted a second, so a lock that
//! frees quickly leaves no trace. The line is erased when the wait ends.

use std::future::Future;
use std::io::Write;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use leasehold::Client;
use tokio::time::Instant;

use crate::args::Mode;
use crate::output::{printable, short};

/// How long a wait lasts before the line appears.
const FIRST: Duration = Duration::from_secs(1);
/// How often the line is redrawn (each redraw reads the lock's status).
const EVERY: Duration = Duration::from_millis(500);

/// What is waited for: enough to read its status.
pub(crate) struct Watch {
    /// The client that waits.
    client: Client,
    /// The lock name.
    name: String,
    /// Its kind, as `run` holds it.
    mode: Mode,
    /// With several names (`run a b c`), all of them in the order they are
    /// taken: the line then names them all (whether a name is held by this
    /// run or by another cannot be told from its status).
    several: Vec<String>,
}

impl Watch {
    /// The plain lock `name`.
    pub(crate) fn lock(client: &Client, name: &str) -> Watch {
        Watch::of(client, name, Mode::Lock)
    }

    /// `name` held as `mode` says.
    pub(crate) fn of(client: &Client, name: &str, mode: Mode) -> Watch {
        Watch {
            client: client.clone(),
            name: name.to_owned(),
            mode,
            several: Vec::new(),
        }
    }

    /// The plain locks `names` taken together, in this order.
    pub(crate) fn several(client: &Client, names: &[&str]) -> Watch {
        Watch {
            several: names.iter().map(|n| (*n).to_owned()).collect(),
            ..Watch::lock(client, names.first().copied().unwrap_or_default())
        }
    }

    /// The client that waits.
    pub(crate) fn client(&self) -> &Client {
        &self.client
    }

    /// The names it waits for.
    pub(crate) fn names(&self) -> Vec<String> {
        if self.several.is_empty() {
            vec![self.name.clone()]
        } else {
            self.several.clone()
        }
    }

    /// The status line after `waited`, or `None` if the status cannot be
    /// read now (the next redraw tries again).
    async fn line(&self, waited: Duration) -> Option<String> {
        let name = printable(&self.name);
        let waited = humantime::format_duration(Duration::from_secs(waited.as_secs()));
        if !self.several.is_empty() {
            let names: Vec<String> = self
                .several
                .iter()
                .map(|n| format!("{:?}", printable(n)))
                .collect();
            return Some(format!(
                "waiting for locks {} (all or none, taken in this order), waited {waited}",
                names.join(", ")
            ));
        }
        let line = match self.mode {
            Mode::Lock => {
                let s = self.client.lock(&self.name).status().await.ok()?;
                let holder = match (&s.holder, s.remaining) {
                    (Some(h), Some(left)) => format!("held by {h}… ({} left)", short(left)),
                    (Some(h), None) => format!("held by {h}…"),
                    _ => "being handed over".to_owned(),
                };
                format!(
                    "waiting for lock {name:?}: {holder}, {} waiting, waited {waited}",
                    s.waiting_clients
                )
            }
            Mode::Read | Mode::Write => {
                let s = self.client.rw_lock(&self.name).status().await.ok()?;
                let holder = match &s.writer {
                    Some(w) => format!("written by {}… ({} left)", w.holder, short(w.remaining)),
                    None => format!("{} reader(s)", s.reader_count),
                };
                format!(
                    "waiting for read-write lock {name:?}: {holder}, {} writer(s) waiting, \
                     waited {waited}",
                    s.waiting_writers
                )
            }
            Mode::Permits(n) => {
                let s = self.client.semaphore(&self.name, n).status().await.ok()?;
                let next = s
                    .holders
                    .first()
                    .map(|h| format!(", next free in {} ({}…)", short(h.remaining), h.holder))
                    .unwrap_or_default();
                format!(
                    "waiting for semaphore {name:?}: {} of {n} permit(s) held{next}, waited {waited}",
                    s.held
                )
            }
        };
        Some(line)
    }
}

/// `line` cut to fit a terminal `width` columns wide (one column left free,
/// so the cursor never wraps), with `…` where it was cut. Counts characters,
/// which is columns for the text this line holds.
fn fit(line: &str, width: usize) -> String {
    let room = width.saturating_sub(1).max(10);
    if line.chars().count() <= room {
        return line.to_owned();
    }
    let mut cut: String = line.chars().take(room - 1).collect();
    cut.push('…');
    cut
}

/// Awaits `wait`, showing `watch`'s line on stderr from a second in, and
/// erases the line when `wait` ends.
pub(crate) async fn while_waiting<T>(watch: Watch, wait: impl Future<Output = T>) -> T {
    // (ended, drawn): the drawing task, which may be between a status read
    // and a redraw when the wait ends, checks `ended` under the lock.
    let state = Arc::new(Mutex::new((false, false)));
    let started = Instant::now();
    let drawer = {
        let state = Arc::clone(&state);
        tokio::spawn(async move {
            let mut next = started + FIRST;
            loop {
                tokio::time::sleep_until(next).await;
                next += EVERY;
                let Some(line) = watch.line(started.elapsed()).await else {
                    continue;
                };
                let mut state = state.lock().unwrap_or_else(|e| e.into_inner());
                if state.0 {
                    return;
                }
                state.1 = true;
                let mut err = std::io::stderr().lock();
                let width = rustix::termios::tcgetwinsize(std::io::stderr())
                    .map_or(80, |size| usize::from(size.ws_col));
                let line = fit(&format!("leasehold: {line}"), width);
                // \r and "erase to end of line": redraw in place, on one
                // row (a line that wrapped could not be redrawn).
                let _ = write!(err, "\r\x1b[K{line}");
                let _ = err.flush();
            }
        })
    };
    let out = wait.await;
    {
        let mut state = state.lock().unwrap_or_else(|e| e.into_inner());
        state.0 = true;
        if state.1 {
            let mut err = std::io::stderr().lock();
            let _ = write!(err, "\r\x1b[K");
            let _ = err.flush();
        }
    }
    drawer.abort();
    out
}

#[cfg(test)]
mod tests {
    use super::fit;

    #[test]
    fn the_line_is_cut_to_the_terminals_width() {
        let line = "leasehold: waiting for lock \"nightly-backup\": held by 3f9a1c2e… (24.1s left)";
        assert_eq!(fit(line, 200), line);
        let cut = fit(line, 40);
        assert_eq!(cut.chars().count(), 39);
        assert!(cut.ends_with('…'), "{cut}");
        assert!(line.starts_with(cut.trim_end_matches('…')));
        // Never below 10 columns of text, however narrow.
        assert_eq!(fit(line, 3).chars().count(), 10);
    }
}
