//! The one Python guard class: a [`leasehold::Guard`] of any kind (its
//! kind forgotten) or a [`leasehold::MultiLockGuard`]. Every method is the
//! library's; this only lets it be called from any thread or task.

use std::sync::Arc;

use pyo3::exceptions::PyTypeError;
use pyo3::prelude::*;
use pyo3::types::PyDict;
use tokio::runtime::Runtime;
use tokio::sync::{RwLock, watch};

use crate::errors::{forked, to_py};
use crate::run::{call, seconds};

/// What a guard holds.
pub(crate) enum Held {
    /// One lease of any kind.
    One(leasehold::Guard),
    /// Several plain locks at once.
    Multi(leasehold::MultiLockGuard),
}

impl Held {
    fn is_lost(&self) -> bool {
        match self {
            Held::One(g) => g.is_lost(),
            Held::Multi(g) => g.is_lost(),
        }
    }

    fn lost_reason(&self) -> Option<leasehold::LostReason> {
        match self {
            Held::One(g) => g.lost_reason(),
            Held::Multi(g) => g.lost_reason(),
        }
    }

    fn valid_for(&self) -> std::time::Duration {
        match self {
            Held::One(g) => g.valid_for(),
            Held::Multi(g) => g.valid_for(),
        }
    }

    async fn lost(&self) {
        match self {
            Held::One(g) => g.lost().await,
            Held::Multi(g) => g.lost().await,
        }
    }

    async fn extend(&self, ttl: std::time::Duration) -> leasehold::Result<()> {
        match self {
            Held::One(g) => g.extend(ttl).await,
            Held::Multi(g) => g.extend(ttl).await,
        }
    }

    async fn release(self) -> leasehold::Result<()> {
        match self {
            Held::One(g) => g.release().await,
            Held::Multi(g) => g.release().await,
        }
    }
}

/// The held guard, shared by the calls in flight on it. `None` once
/// released; `released` wakes the waits on `lost` then.
struct Shared {
    held: RwLock<Option<Held>>,
    released: watch::Sender<bool>,
}

/// A held lock (lease, hold, permit, leadership or several locks at once).
/// Renewed by the client's watchdog while it lives; released in the
/// background when it is garbage-collected.
#[pyclass(module = "leasehold._leasehold", frozen)]
pub(crate) struct Guard {
    shared: Option<Arc<Shared>>,
    rt: Arc<Runtime>,
    pid: u32,
    name: String,
    kind: &'static str,
    fences: Vec<(String, u64)>,
    token: Option<String>,
}

impl Guard {
    /// Wraps `held`, of `kind`, on `rt`.
    pub(crate) fn new(held: Held, kind: &'static str, rt: Arc<Runtime>) -> Guard {
        let (name, fences, token) = match &held {
            Held::One(g) => (
                g.name().to_owned(),
                vec![(g.name().to_owned(), g.fence())],
                Some(g.token().to_owned()),
            ),
            Held::Multi(g) => (g.names().join(","), g.fences().to_vec(), None),
        };
        Guard {
            shared: Some(Arc::new(Shared {
                held: RwLock::new(Some(held)),
                released: watch::channel(false).0,
            })),
            rt,
            pid: std::process::id(),
            name,
            kind,
            fences,
            token,
        }
    }

    fn shared(&self) -> PyResult<&Arc<Shared>> {
        if std::process::id() != self.pid {
            return Err(forked("guard", self.pid));
        }
        // Taken only by Drop.
        self.shared
            .as_ref()
            .ok_or_else(|| crate::errors::Error::new_err("guard already dropped"))
    }

    /// Reads the held guard (`None` once released) without waiting on the
    /// runtime: a release holds the lock only to take the guard out.
    fn peek<T>(&self, read: impl FnOnce(Option<&Held>) -> T) -> PyResult<T> {
        let shared = self.shared()?;
        let held = match shared.held.try_read() {
            Ok(held) => held,
            Err(_) => shared.held.blocking_read(),
        };
        Ok(read(held.as_ref()))
    }
}

impl Drop for Guard {
    fn drop(&mut self) {
        if std::process::id() != self.pid
            && let Some(shared) = self.shared.take()
        {
            // A copy of the parent's guard in a forked child: the lease is
            // the parent's, so the child must not release it (and its
            // runtime is gone): forget it.
            std::mem::forget(shared);
        }
    }
}

#[pymethods]
impl Guard {
    /// The lock's name (for several locks at once, their names joined by commas).
    #[getter]
    fn name(&self) -> &str {
        &self.name
    }

    /// What is held: lock, fair_lock, reentrant_lock, read, write,
    /// semaphore, multi_lock or election.
    #[getter]
    fn kind(&self) -> &str {
        self.kind
    }

    /// The fencing token.
    #[getter]
    fn fence(&self) -> PyResult<u64> {
        match self.fences.as_slice() {
            [(_, fence)] if self.kind != "multi_lock" => Ok(*fence),
            _ => Err(PyTypeError::new_err(
                "a multi_lock guard has one fence per name: read guard.fences",
            )),
        }
    }

    /// Every name held with its fence.
    #[getter]
    fn fences<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let dict = PyDict::new(py);
        for (name, fence) in &self.fences {
            dict.set_item(name, fence)?;
        }
        Ok(dict)
    }

    /// This holder's owner token (a capability: do not log it whole).
    #[getter]
    fn token(&self) -> PyResult<&str> {
        self.token.as_deref().ok_or_else(|| {
            PyTypeError::new_err("a multi_lock guard has one token per name; it keeps them")
        })
    }

    /// The term of an election's leadership (its fence).
    #[getter]
    fn term(&self) -> PyResult<u64> {
        self.fence()
    }

    /// True once the lease may have expired or was taken by another owner
    /// (or this guard was released).
    fn is_lost(&self) -> PyResult<bool> {
        self.peek(|held| held.is_none_or(Held::is_lost))
    }

    /// Why the lease was lost ("unreachable", "expired", "broken"), or None.
    fn lost_reason(&self) -> PyResult<Option<String>> {
        self.peek(|held| {
            held.and_then(Held::lost_reason)
                .map(|r| format!("{r:?}").to_lowercase())
        })
    }

    /// Seconds the lease is certain to last from now; 0.0 once lost or released.
    #[getter]
    fn valid_for(&self) -> PyResult<f64> {
        self.peek(|held| held.map_or(0.0, |h| h.valid_for().as_secs_f64()))
    }

    /// True once released (by this guard's release(), from any thread).
    #[getter]
    fn released(&self) -> PyResult<bool> {
        self.peek(|held| held.is_none())
    }

    /// Sets the lease to end `ttl` seconds from now, if still held.
    #[pyo3(signature = (ttl, done=None))]
    fn extend(&self, py: Python<'_>, ttl: f64, done: Option<Py<PyAny>>) -> PyResult<Py<PyAny>> {
        let ttl = seconds(ttl, "ttl")?;
        let shared = Arc::clone(self.shared()?);
        let name = self.name.clone();
        let fut = async move {
            let held = shared.held.read().await;
            match held.as_ref() {
                Some(h) => h.extend(ttl).await.map_err(to_py),
                None => Err(to_py(leasehold::Error::Lost { name })),
            }
        };
        call(py, &self.rt, fut, done)
    }

    /// Gives the lock back, owner-checked; raises Lost if it was gone.
    #[pyo3(signature = (done=None))]
    fn release(&self, py: Python<'_>, done: Option<Py<PyAny>>) -> PyResult<Py<PyAny>> {
        let shared = Arc::clone(self.shared()?);
        let name = self.name.clone();
        let fut = async move {
            shared.released.send_replace(true);
            let taken = shared.held.write().await.take();
            match taken {
                Some(h) => h.release().await.map_err(to_py),
                None => Err(crate::errors::Error::new_err(format!(
                    "the guard of {name:?} was already released"
                ))),
            }
        };
        call(py, &self.rt, fut, done)
    }

    /// Waits until the lease is lost or this guard is released (True), or
    /// `timeout` seconds pass first (False).
    #[pyo3(signature = (timeout=None, done=None))]
    fn lost(
        &self,
        py: Python<'_>,
        timeout: Option<f64>,
        done: Option<Py<PyAny>>,
    ) -> PyResult<Py<PyAny>> {
        let timeout = timeout.map(|t| seconds(t, "timeout")).transpose()?;
        let shared = Arc::clone(self.shared()?);
        let fut = async move {
            let mut released = shared.released.subscribe();
            let wait = async {
                let held = shared.held.read().await;
                if let Some(h) = held.as_ref() {
                    tokio::select! {
                        () = h.lost() => {}
                        _ = released.wait_for(|r| *r) => {}
                    }
                }
            };
            Ok(match timeout {
                Some(t) => tokio::time::timeout(t, wait).await.is_ok(),
                None => {
                    wait.await;
                    true
                }
            })
        };
        call(py, &self.rt, fut, done)
    }

    /// `with lock.acquire() as guard:` gives it back at the end of the block.
    fn __enter__(slf: Py<Self>) -> Py<Self> {
        slf
    }

    /// Releases unless already released; a lease already lost is not an
    /// error here (the block's own exception, if any, is the one to see).
    #[pyo3(signature = (*_exc))]
    fn __exit__(&self, py: Python<'_>, _exc: &Bound<'_, pyo3::types::PyTuple>) -> PyResult<()> {
        if self.released()? {
            return Ok(());
        }
        match self.release(py, None) {
            Err(e) if e.is_instance_of::<crate::errors::Lost>(py) => Ok(()),
            other => other.map(drop),
        }
    }

    fn __repr__(&self) -> PyResult<String> {
        let lost = self.is_lost()?;
        Ok(format!(
            "<leasehold guard {} {:?} fences={:?} lost={}>",
            self.kind, self.name, self.fences, lost
        ))
    }
}
