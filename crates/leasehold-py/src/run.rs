//! Where the library's futures run, and how Python waits for them.
//!
//! One Tokio runtime per process (two worker threads): the clients'
//! watchdogs, background releases and every call run there, so renewal goes
//! on while Python code computes or blocks. A call is either waited for
//! ([`block`]: the GIL released, in slices of [`SLICE`] with Python's
//! signal handlers run between them, so Ctrl-C stops a wait at once) or
//! handed to a callback ([`spawn`]) that the asyncio layer
//! (python/leasehold/aio) turns into an awaitable.

use std::future::Future;
use std::sync::{Arc, Mutex, mpsc};
use std::time::Duration;

use pyo3::IntoPyObjectExt;
use pyo3::prelude::*;
use tokio::runtime::Runtime;
use tokio::task::AbortHandle;

/// How long a blocking wait sleeps before it runs Python's signal handlers:
/// KeyboardInterrupt stops a wait within this (plus the handler's own time).
const SLICE: Duration = Duration::from_millis(20);

/// This process's runtime, made on first use. After `fork` the child gets
/// its own: the parent's worker threads do not exist there.
static RUNTIME: Mutex<Option<(u32, Arc<Runtime>)>> = Mutex::new(None);

/// The runtime of this process.
pub(crate) fn runtime() -> PyResult<Arc<Runtime>> {
    let pid = std::process::id();
    let mut slot = RUNTIME.lock().unwrap_or_else(|e| e.into_inner());
    match &*slot {
        Some((owner, rt)) if *owner == pid => Ok(Arc::clone(rt)),
        stale => {
            if let Some((_, old)) = stale {
                // The parent's runtime: its threads are gone in this child,
                // so dropping it could wait for them for ever. Leak it.
                std::mem::forget(Arc::clone(old));
            }
            let rt = tokio::runtime::Builder::new_multi_thread()
                .worker_threads(2)
                .thread_name("leasehold")
                .enable_all()
                .build()
                .map_err(|e| {
                    crate::errors::Error::new_err(format!("cannot start leasehold's runtime: {e}"))
                })?;
            let rt = Arc::new(rt);
            *slot = Some((pid, Arc::clone(&rt)));
            Ok(rt)
        }
    }
}

/// `fut` waited for (`done` None) or handed to `done`.
pub(crate) fn call<T, F>(
    py: Python<'_>,
    rt: &Runtime,
    fut: F,
    done: Option<Py<PyAny>>,
) -> PyResult<Py<PyAny>>
where
    T: for<'py> IntoPyObject<'py> + Send + 'static,
    F: Future<Output = PyResult<T>> + Send + 'static,
{
    match done {
        None => {
            let value = block(py, rt, fut)?;
            value.into_py_any(py)
        }
        Some(done) => Ok(Py::new(py, spawn(rt, fut, done))?.into_any()),
    }
}

/// Runs `fut` on the runtime and blocks the calling thread until it ends,
/// with the GIL released. Between slices it runs Python's signal handlers:
/// an exception from one (KeyboardInterrupt) cancels `fut` and is raised.
/// A cancelled acquire gives back whatever it had taken (the library's
/// futures are cancel-safe), and a result that arrives after the cancel is
/// dropped, which releases a guard in it in the background.
pub(crate) fn block<T, F>(py: Python<'_>, rt: &Runtime, fut: F) -> PyResult<T>
where
    T: Send + 'static,
    F: Future<Output = PyResult<T>> + Send + 'static,
{
    let (tx, rx) = mpsc::sync_channel(1);
    let task = rt.spawn(async move {
        let _ = tx.send(fut.await);
    });
    let mut rx = rx;
    loop {
        let (received, back) = py.detach(move || (rx.recv_timeout(SLICE), rx));
        rx = back;
        match received {
            Ok(outcome) => return outcome,
            Err(mpsc::RecvTimeoutError::Timeout) => {}
            Err(mpsc::RecvTimeoutError::Disconnected) => {
                return Err(crate::errors::Error::new_err(
                    "leasehold's runtime stopped the call (is the interpreter exiting?)",
                ));
            }
        }
        if let Err(interrupt) = py.check_signals() {
            task.abort();
            return Err(interrupt);
        }
    }
}

/// Runs `fut` on the runtime and calls `done(ok, value)` from a runtime
/// thread when it ends: `ok` is true with the result, false with the
/// exception. Returns an [`Abort`] that cancels it.
pub(crate) fn spawn<T, F>(rt: &Runtime, fut: F, done: Py<PyAny>) -> Abort
where
    T: for<'py> IntoPyObject<'py> + Send + 'static,
    F: Future<Output = PyResult<T>> + Send + 'static,
{
    let task = rt.spawn(async move {
        let outcome = fut.await;
        Python::attach(|py| {
            let called = match outcome {
                Ok(value) => match value.into_bound_py_any(py) {
                    Ok(value) => done.call1(py, (true, value)),
                    Err(e) => done.call1(py, (false, e.value(py).clone())),
                },
                Err(e) => done.call1(py, (false, e.value(py).clone())),
            };
            if let Err(e) = called {
                // The callback hands the outcome to the event loop; it fails
                // only when that loop is closed, and nobody waits any more.
                e.write_unraisable(py, None);
            }
        });
    });
    Abort(task.abort_handle())
}

/// Cancels a call handed to [`spawn`] (an asyncio task was cancelled).
#[pyclass(module = "leasehold._leasehold", frozen)]
pub(crate) struct Abort(AbortHandle);

#[pymethods]
impl Abort {
    /// Cancels the call; what it had taken is given back in the background.
    fn abort(&self) {
        self.0.abort();
    }
}

/// Seconds (a float from Python) as a Duration.
pub(crate) fn seconds(value: f64, what: &str) -> PyResult<Duration> {
    Duration::try_from_secs_f64(value).map_err(|_| {
        crate::errors::InvalidArgument::new_err(format!(
            "{what} must be a finite number of seconds, zero or more (got {value})"
        ))
    })
}
