//! The rustls crypto provider of `rediss://` connections.
//!
//! The driver builds each TLS configuration with
//! `rustls::ClientConfig::builder()`, which takes the process-level
//! [`CryptoProvider`] and, when none is installed, installs the one rustls's
//! crate features name, panicking when they name none or two (ring and
//! aws-lc-rs both compiled in, as soon as the application also uses rustls
//! with its default features). The driver takes no provider of ours, so
//! before the first TLS connection [`ensure_provider`] makes sure the process
//! has one, without ever replacing one the application installed:
//!
//! - a process default is installed (the application's, for one: aws-lc-rs):
//!   it is used;
//! - none, and the `tls-ring` feature is on: ring is installed as the process
//!   default, what rustls itself does when ring is its only provider;
//! - none, and no `tls-ring`: [`Error::Unsupported`] saying what to do,
//!   instead of the driver's panic.
//!
//! [`Error::Unsupported`]: crate::Error::Unsupported

use rustls::crypto::CryptoProvider;

#[cfg(not(feature = "tls-ring"))]
use crate::error::Error;
use crate::error::Result;

/// Makes sure rustls has a process-level crypto provider for the driver's
/// TLS configurations (see the module docs).
pub(super) fn ensure_provider() -> Result<()> {
    if CryptoProvider::get_default().is_some() {
        return Ok(());
    }
    fallback()
}

/// No provider installed: ring, compiled in by `tls-ring`.
#[cfg(feature = "tls-ring")]
fn fallback() -> Result<()> {
    // Another thread may install one meanwhile; then that one stays.
    if rustls::crypto::ring::default_provider()
        .install_default()
        .is_ok()
    {
        tracing::debug!(
            "no process-level rustls CryptoProvider was installed: installed ring \
             (leasehold feature tls-ring)"
        );
    }
    Ok(())
}

/// No provider installed and none compiled in as a fallback.
#[cfg(not(feature = "tls-ring"))]
fn fallback() -> Result<()> {
    Err(Error::Unsupported(
        "rediss:// needs a rustls CryptoProvider and this process has none installed: install \
         one before connecting (for aws-lc-rs: \
         rustls::crypto::aws_lc_rs::default_provider().install_default()), or enable \
         leasehold's `tls-ring` feature to fall back to ring"
            .into(),
    ))
}
