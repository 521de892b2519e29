//! Cluster requests whose caller stopped waiting, and the releases that
//! must come after them.
//!
//! redis-rs's cluster driver may keep two connections to one node: it
//! replaces a connection whose PING check fails or times out (when it
//! refreshes its slots or connections) while requests written to the old one
//! are still in flight. A request on the old connection can then run after a
//! later request on the new one. On one server (one connection, FIFO) a
//! release always runs after the attempt sent before it; on a cluster it
//! did not: an acquisition dropped while its attempt was in flight gave its
//! hold back at once, the give-back ran on the new connection, and the late
//! attempt ran after it and queued its waiter, which a release then handed
//! the lock to, held after `Client::close` returned (simulator seed 10025).
//!
//! So a cluster request whose caller stops waiting goes on to its end in a
//! task of its own (its caller polls it until then, so nothing changes while
//! it waits), counted under its key until the driver is done with it (a
//! reply, or an error after its retries). A release of a hold on that key first waits for
//! those ([`Abandoned::settled`]), bounded: a request the network holds past
//! the driver's own timeouts is not waited for (docs/SAFETY.md says so).

use std::collections::BTreeMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;

/// The requests whose caller stopped waiting, per key, that the driver is
/// not done with yet. (A `BTreeMap`: a std `HashMap` would draw hasher keys
/// at each client's start, which moves those of the driver's own maps on
/// and so changes a simulated schedule.)
#[derive(Default)]
pub(crate) struct Abandoned {
    keys: Mutex<BTreeMap<String, usize>>,
    /// Woken whenever one is done.
    done: tokio::sync::Notify,
}

impl Abandoned {
    fn keys(&self) -> std::sync::MutexGuard<'_, BTreeMap<String, usize>> {
        self.keys.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn add(&self, key: &str) {
        *self.keys().entry(key.to_owned()).or_insert(0) += 1;
    }

    fn remove(&self, key: &str) {
        let mut keys = self.keys();
        if let Some(n) = keys.get_mut(key) {
            *n -= 1;
            if *n == 0 {
                keys.remove(key);
            }
        }
        drop(keys);
        self.done.notify_waiters();
    }

    /// Runs `request` (a request to the driver on `key`): its caller polls
    /// it, as any future; dropped before it ended, it goes on in a task of
    /// its own, counted under `key` until it ends.
    pub(crate) fn run<T: Send + 'static>(
        self: &Arc<Self>,
        key: &str,
        request: impl Future<Output = T> + Send + 'static,
    ) -> Running<T> {
        Running {
            request: Some(Box::pin(request)),
            abandoned: Arc::clone(self),
            key: key.to_owned(),
        }
    }

    /// Waits until no request on `key` whose caller stopped waiting is left,
    /// or `bound` passed; false if some still are.
    pub(crate) async fn settled(&self, key: &str, bound: Duration) -> bool {
        let until_none = async {
            loop {
                let done = self.done.notified();
                tokio::pin!(done);
                done.as_mut().enable();
                if !self.keys().contains_key(key) {
                    return;
                }
                done.await;
            }
        };
        tokio::time::timeout(bound, until_none).await.is_ok()
    }
}

/// A request [`Abandoned::run`] runs; its outcome when awaited.
pub(crate) struct Running<T: 'static> {
    /// `None` once it ended.
    request: Option<Pin<Box<dyn Future<Output = T> + Send>>>,
    abandoned: Arc<Abandoned>,
    key: String,
}

impl<T: 'static> Future for Running<T> {
    type Output = T;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<T> {
        let Some(request) = self.request.as_mut() else {
            panic!("a request polled after it ended");
        };
        let outcome = std::task::ready!(request.as_mut().poll(cx));
        self.request = None;
        Poll::Ready(outcome)
    }
}

impl<T: 'static> Drop for Running<T> {
    fn drop(&mut self) {
        let Some(request) = self.request.take() else {
            return;
        };
        // Without a runtime (it is shutting down) nothing could run it.
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        // Counted now, before the caller can send a release after it.
        self.abandoned.add(&self.key);
        let (abandoned, key) = (Arc::clone(&self.abandoned), std::mem::take(&mut self.key));
        drop(runtime.spawn(async move {
            let _ = request.await;
            abandoned.remove(&key);
        }));
    }
}

#[cfg(test)]
mod tests {
    //! Orderings on tokio's paused clock; a request is a future held on a
    //! gate, as a reply the network holds.

    use tokio::task::JoinHandle;

    use super::*;

    const BOUND: Duration = Duration::from_secs(8);

    type Log = Arc<Mutex<Vec<&'static str>>>;

    fn log(log: &Log, what: &'static str) {
        log.lock().unwrap().push(what);
    }

    fn entries(log: &Log) -> Vec<&'static str> {
        log.lock().unwrap().clone()
    }

    /// A request that runs ("attempt ran") when `gate` opens.
    fn held(
        gate: tokio::sync::oneshot::Receiver<()>,
        log: &Log,
    ) -> impl Future<Output = redis::RedisResult<()>> + Send + 'static {
        let log = Arc::clone(log);
        async move {
            let _ = gate.await;
            self::log(&log, "attempt ran");
            Ok(())
        }
    }

    /// A release of `key` once [`Abandoned::settled`], in a task.
    fn release(abandoned: &Arc<Abandoned>, key: &'static str, log: &Log) -> JoinHandle<bool> {
        let (abandoned, log) = (Arc::clone(abandoned), Arc::clone(log));
        tokio::spawn(async move {
            let settled = abandoned.settled(key, BOUND).await;
            self::log(&log, "release sent");
            settled
        })
    }

    /// Seed 10025: the caller stopped waiting while its attempt was in
    /// flight; the release must come after the attempt, not before.
    #[tokio::test(start_paused = true)]
    async fn a_release_waits_for_a_request_whose_caller_stopped_waiting() {
        let abandoned = Arc::new(Abandoned::default());
        let journal = Log::default();
        let (open, gate) = tokio::sync::oneshot::channel();
        let mut caller = abandoned.run("k", held(gate, &journal));
        assert!(
            tokio::time::timeout(Duration::from_millis(5), &mut caller)
                .await
                .is_err()
        );
        drop(caller);
        let release = release(&abandoned, "k", &journal);
        tokio::time::sleep(Duration::from_millis(500)).await;
        assert_eq!(entries(&journal), Vec::<&str>::new());
        open.send(()).unwrap();
        assert!(release.await.unwrap());
        assert_eq!(entries(&journal), ["attempt ran", "release sent"]);
    }

    #[tokio::test(start_paused = true)]
    async fn a_request_whose_caller_waits_holds_up_no_release() {
        let abandoned = Arc::new(Abandoned::default());
        let journal = Log::default();
        let (open, gate) = tokio::sync::oneshot::channel();
        let caller = tokio::spawn(abandoned.run("k", held(gate, &journal)));
        tokio::time::sleep(Duration::from_millis(5)).await;
        assert!(release(&abandoned, "k", &journal).await.unwrap());
        open.send(()).unwrap();
        caller.await.unwrap().unwrap();
        assert_eq!(entries(&journal), ["release sent", "attempt ran"]);
    }

    #[tokio::test(start_paused = true)]
    async fn a_request_on_another_key_holds_up_no_release() {
        let abandoned = Arc::new(Abandoned::default());
        let journal = Log::default();
        let (_open, gate) = tokio::sync::oneshot::channel();
        let mut caller = abandoned.run("other", held(gate, &journal));
        assert!(
            tokio::time::timeout(Duration::from_millis(5), &mut caller)
                .await
                .is_err()
        );
        drop(caller);
        assert!(release(&abandoned, "k", &journal).await.unwrap());
        assert_eq!(entries(&journal), ["release sent"]);
    }

    /// A request the driver never ends is waited for `BOUND`, no longer.
    #[tokio::test(start_paused = true)]
    async fn the_wait_for_a_request_that_never_ends_is_bounded() {
        let abandoned = Arc::new(Abandoned::default());
        let journal = Log::default();
        let (_open, gate) = tokio::sync::oneshot::channel();
        let mut caller = abandoned.run("k", held(gate, &journal));
        assert!(
            tokio::time::timeout(Duration::from_millis(5), &mut caller)
                .await
                .is_err()
        );
        drop(caller);
        let started = tokio::time::Instant::now();
        assert!(!release(&abandoned, "k", &journal).await.unwrap());
        assert_eq!(started.elapsed(), BOUND);
        assert_eq!(entries(&journal), ["release sent"]);
    }

    /// A request that ended before its caller dropped it counts for nothing.
    #[tokio::test(start_paused = true)]
    async fn a_request_done_before_its_caller_left_is_not_counted() {
        let abandoned = Arc::new(Abandoned::default());
        let journal = Log::default();
        let (open, gate) = tokio::sync::oneshot::channel();
        let mut caller = abandoned.run("k", held(gate, &journal));
        open.send(()).unwrap();
        (&mut caller).await.unwrap();
        drop(caller);
        assert!(release(&abandoned, "k", &journal).await.unwrap());
        assert_eq!(entries(&journal), ["attempt ran", "release sent"]);
    }
}
