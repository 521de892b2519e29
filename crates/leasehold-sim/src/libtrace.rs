//! The library's own tracing events in a replayed schedule's history
//! (`--trace` with `LEASEHOLD_SIM_LOG=debug`, or any `EnvFilter`
//! directive): what the client decided and why (a background release that
//! failed, an attempt retried), beside the wire. Only for one replay: the
//! lines enter the history and its digest.

use std::io::Write;
use std::sync::{Mutex, Once};

use crate::world::World;

/// The world whose history takes the events (the one schedule replayed).
static SINK: Mutex<Option<World>> = Mutex::new(None);

/// Sends the library's events matching `filter` to `world`'s history,
/// until [`stop`].
pub fn start(world: &World, filter: &str) {
    static INSTALL: Once = Once::new();
    *SINK.lock().unwrap_or_else(|e| e.into_inner()) = Some(world.clone());
    let filter = filter.to_owned();
    INSTALL.call_once(move || {
        // Built on a thread of its own: the filter makes std `HashMap`s,
        // whose `RandomState` draws this thread's hasher keys from the
        // seeded `getrandom` (entropy.rs) and moves them on for every map
        // the drivers make later, so logging changed the schedule
        // (seed 10025 ran another one with `LEASEHOLD_SIM_LOG=debug`).
        std::thread::scope(|s| {
            s.spawn(|| {
                let subscriber = tracing_subscriber::fmt()
                    .with_env_filter(tracing_subscriber::EnvFilter::new(filter))
                    .with_writer(|| Line(Vec::new()))
                    .with_ansi(false)
                    .without_time()
                    .finish();
                let _ = tracing::subscriber::set_global_default(subscriber);
            });
        });
    });
}

/// No more events to any history.
pub fn stop() {
    *SINK.lock().unwrap_or_else(|e| e.into_inner()) = None;
}

/// One event's text, logged when the formatter is done with it.
struct Line(Vec<u8>);

impl Write for Line {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.extend_from_slice(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl Drop for Line {
    fn drop(&mut self) {
        let world = SINK.lock().unwrap_or_else(|e| e.into_inner()).clone();
        if let Some(world) = world {
            let text = String::from_utf8_lossy(&self.0);
            let text = text.trim_end();
            if !text.is_empty() {
                world.log(|| format!("LIB {text}"));
            }
        }
    }
}
