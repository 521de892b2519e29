//! `leasehold._leasehold`: the extension module under the Python package
//! `leasehold` (python/leasehold/). It only converts: Python arguments to
//! the library's calls, [`leasehold::Error`] to one exception per variant,
//! and the library's futures to a blocking wait (GIL released, Ctrl-C
//! honoured) or to a callback the asyncio layer turns into an awaitable.
//! Every lock, guard and wait is the Rust library's own: one guard type
//! ([`leasehold::Guard`], its kind forgotten) behind every Python guard.
//!
//! Built only with the `python` feature (maturin turns it on), so the
//! workspace's own builds compile this crate empty.

#![cfg(feature = "python")]

mod client;
mod errors;
mod guard;
mod run;

use pyo3::prelude::*;

/// The module `leasehold._leasehold`.
#[pymodule]
fn _leasehold(m: &Bound<'_, PyModule>) -> PyResult<()> {
    errors::register(m)?;
    m.add_class::<client::Core>()?;
    m.add_class::<guard::Guard>()?;
    m.add_class::<run::Abort>()?;
    Ok(())
}
