//! `Core`: a [`leasehold::Client`] and the calls the Python `Client`
//! classes (sync and asyncio) make on it. Each call is waited for when
//! `done` is None, else handed to `done` (see [`crate::run`]).

use std::sync::Arc;
use std::time::Duration;

use pyo3::prelude::*;
use pyo3::types::{PyDict, PyDictMethods};
use tokio::runtime::Runtime;

use crate::errors::{InvalidArgument, forked, to_py};
use crate::guard::{Guard, Held};
use crate::run::{call, runtime, seconds};

/// A connected client: cheap to share between threads; its watchdog runs
/// on this process's runtime.
#[pyclass(module = "leasehold._leasehold", frozen, weakref)]
pub(crate) struct Core {
    client: leasehold::Client,
    rt: Arc<Runtime>,
    pid: u32,
}

/// What `acquire` takes, from the Python handle.
#[derive(Clone)]
struct Spec {
    kind: String,
    names: Vec<String>,
    ttl: Option<Duration>,
    wait: Option<Duration>,
    owner: Option<String>,
    permits: u32,
    value: String,
}

/// The builder with `options` (ClientBuilder's setters by name).
fn with_options(
    mut builder: leasehold::ClientBuilder,
    options: Option<&Bound<'_, PyDict>>,
) -> PyResult<leasehold::ClientBuilder> {
    let Some(options) = options else {
        return Ok(builder);
    };
    for (key, value) in options.iter() {
        let key: String = key.extract()?;
        if value.is_none() {
            continue;
        }
        let secs = |what: &str| -> PyResult<Duration> { seconds(value.extract()?, what) };
        builder = match key.as_str() {
            "prefix" => builder.prefix(value.extract::<String>()?),
            "username" => builder.username(value.extract::<String>()?),
            "password" => builder.password(value.extract::<String>()?),
            "command_timeout" => builder.command_timeout(secs("command_timeout")?),
            "node_timeout" => builder.node_timeout(secs("node_timeout")?),
            "failover_wait" => builder.failover_wait(secs("failover_wait")?),
            "fence_memory" => builder.fence_memory(secs("fence_memory")?),
            "tls_ca_cert" => builder.tls_ca_cert(&value.extract::<Vec<u8>>()?),
            "tls_client_cert" => {
                let (cert, key): (Vec<u8>, Vec<u8>) = value.extract()?;
                builder.tls_client_cert(&cert, &key)
            }
            other => {
                return Err(InvalidArgument::new_err(format!(
                    "leasehold.Client.connect: unknown option {other:?}; the options are prefix, \
                     username, password, command_timeout, node_timeout, failover_wait, \
                     fence_memory, tls_ca_cert, tls_client_cert"
                )));
            }
        };
    }
    Ok(builder)
}

impl Core {
    fn check(&self) -> PyResult<()> {
        if std::process::id() != self.pid {
            return Err(forked("client", self.pid));
        }
        Ok(())
    }
}

/// Sets `ttl` and `wait` on a handle that has both, when given.
macro_rules! timed {
    ($handle:expr, $spec:expr) => {{
        let mut handle = $handle;
        if let Some(ttl) = $spec.ttl {
            handle = handle.ttl(ttl);
        }
        if let Some(wait) = $spec.wait {
            handle = handle.wait(wait);
        }
        handle
    }};
}

/// Waits for (`once` false) or tries once for a guard of `handle`, with
/// the methods named.
macro_rules! take {
    ($once:expr, $handle:expr, $acquire:ident, $try_acquire:ident, $wrap:expr) => {{
        let handle = $handle;
        if $once {
            handle.$try_acquire().await.map(|g| g.map($wrap))
        } else {
            handle.$acquire().await.map(|g| Some($wrap(g)))
        }
    }};
}

/// The kind's guard from `client`, per `spec`.
async fn take(
    client: leasehold::Client,
    spec: Spec,
    once: bool,
) -> leasehold::Result<Option<Held>> {
    let one = |g: leasehold::Guard| Held::One(g);
    let name = spec.names.first().cloned().unwrap_or_default();
    let owned = |mut h: leasehold::ReentrantLock| {
        if let Some(owner) = &spec.owner {
            h = h.owner(owner.clone());
        }
        h
    };
    match spec.kind.as_str() {
        "lock" => take!(
            once,
            timed!(client.lock(name), spec),
            acquire,
            try_acquire,
            |g: leasehold::LockGuard| one(g.into_any())
        ),
        "fair_lock" => take!(
            once,
            timed!(client.fair_lock(name), spec),
            acquire,
            try_acquire,
            |g: leasehold::LockGuard| one(g.into_any())
        ),
        "reentrant_lock" => take!(
            once,
            owned(timed!(client.reentrant_lock(name), spec)),
            acquire,
            try_acquire,
            |g: leasehold::ReentrantGuard| one(g.into_any())
        ),
        "read" | "write" => {
            let mut rw = timed!(client.rw_lock(name), spec);
            if let Some(owner) = &spec.owner {
                rw = rw.owner(owner.clone());
            }
            if spec.kind == "read" {
                take!(once, rw, read, try_read, |g: leasehold::ReadGuard| one(
                    g.into_any()
                ))
            } else {
                take!(once, rw, write, try_write, |g: leasehold::WriteGuard| one(
                    g.into_any()
                ))
            }
        }
        "semaphore" => take!(
            once,
            timed!(client.semaphore(name, spec.permits), spec),
            acquire,
            try_acquire,
            |g: leasehold::Permit| one(g.into_any())
        ),
        "multi_lock" => take!(
            once,
            timed!(client.multi_lock(spec.names.clone()), spec),
            acquire,
            try_acquire,
            Held::Multi
        ),
        "election" => {
            let mut election = client.election(name.clone());
            if let Some(ttl) = spec.ttl {
                election = election.ttl(ttl);
            }
            let wrap = |g: leasehold::Leadership| one(g.into_any());
            if once {
                return election.try_campaign(spec.value).await.map(|g| g.map(wrap));
            }
            let campaign = election.campaign(spec.value);
            match spec.wait {
                None => campaign.await.map(|g| Some(wrap(g))),
                // Campaigning is cancel-safe: a wait that runs out leaves nothing.
                Some(wait) => match tokio::time::timeout(wait, campaign).await {
                    Ok(outcome) => outcome.map(|g| Some(wrap(g))),
                    Err(_) => Err(leasehold::Error::Timeout { name, waited: wait }),
                },
            }
        }
        other => Err(leasehold::Error::InvalidArgument(format!(
            "unknown lock kind {other:?}"
        ))),
    }
}

#[pymethods]
impl Core {
    /// Connects: `topology` is "url" (one server, `urls[0]`), "redlock",
    /// "cluster" or "sentinel" (with `master`).
    #[staticmethod]
    #[pyo3(signature = (topology, urls, master=None, options=None, done=None))]
    fn connect(
        py: Python<'_>,
        topology: &str,
        urls: Vec<String>,
        master: Option<String>,
        options: Option<&Bound<'_, PyDict>>,
        done: Option<Py<PyAny>>,
    ) -> PyResult<Py<PyAny>> {
        let builder = leasehold::Client::builder();
        let builder = match topology {
            "url" => match urls.as_slice() {
                [url] => builder.url(url.clone()),
                _ => {
                    return Err(InvalidArgument::new_err(
                        "leasehold.Client.connect takes one URL",
                    ));
                }
            },
            "redlock" => builder.redlock(urls),
            "cluster" => builder.cluster(urls),
            "sentinel" => {
                let master = master.ok_or_else(|| {
                    InvalidArgument::new_err("leasehold.Client.sentinel needs the master's name")
                })?;
                builder.sentinel(urls, &master)
            }
            other => {
                return Err(InvalidArgument::new_err(format!(
                    "unknown topology {other:?}"
                )));
            }
        };
        let builder = with_options(builder, options)?;
        let rt = runtime()?;
        let rt2 = Arc::clone(&rt);
        let fut = async move {
            let client = builder.build().await.map_err(to_py)?;
            Ok(Core {
                client,
                rt: rt2,
                pid: std::process::id(),
            })
        };
        call(py, &rt, fut, done)
    }

    /// Acquires (`once` false: waits up to the wait) or tries once (`once`
    /// true: None when held elsewhere) the lock `kind` on `names`.
    #[pyo3(signature = (kind, names, ttl=None, wait=None, once=false, owner=None, permits=1, value=String::new(), done=None))]
    #[allow(clippy::too_many_arguments)]
    fn acquire(
        &self,
        py: Python<'_>,
        kind: String,
        names: Vec<String>,
        ttl: Option<f64>,
        wait: Option<f64>,
        once: bool,
        owner: Option<String>,
        permits: u32,
        value: String,
        done: Option<Py<PyAny>>,
    ) -> PyResult<Py<PyAny>> {
        self.check()?;
        let spec = Spec {
            kind,
            names,
            ttl: ttl.map(|t| seconds(t, "ttl")).transpose()?,
            wait: wait.map(|w| seconds(w, "wait")).transpose()?,
            owner,
            permits,
            value,
        };
        let (client, rt) = (self.client.clone(), Arc::clone(&self.rt));
        let kind: &'static str = match spec.kind.as_str() {
            "lock" => "lock",
            "fair_lock" => "fair_lock",
            "reentrant_lock" => "reentrant_lock",
            "read" => "read",
            "write" => "write",
            "semaphore" => "semaphore",
            "multi_lock" => "multi_lock",
            "election" => "election",
            other => {
                return Err(InvalidArgument::new_err(format!(
                    "unknown lock kind {other:?}"
                )));
            }
        };
        let fut = async move {
            let held = take(client, spec, once).await.map_err(to_py)?;
            Ok(held.map(|h| Guard::new(h, kind, rt)))
        };
        call(py, &self.rt, fut, done)
    }

    /// Releases every lease this client holds and stops its watchdog.
    #[pyo3(signature = (done=None))]
    fn close(&self, py: Python<'_>, done: Option<Py<PyAny>>) -> PyResult<Py<PyAny>> {
        self.check()?;
        let client = self.client.clone();
        call(
            py,
            &self.rt,
            async move { client.close().await.map_err(to_py) },
            done,
        )
    }

    /// True once closed.
    fn is_closed(&self) -> bool {
        self.client.is_closed()
    }

    /// The key prefix.
    #[getter]
    fn prefix(&self) -> &str {
        self.client.prefix()
    }
}
