//! The rustls crypto provider of `rediss://`: an application that installed
//! aws-lc-rs (rustls's default provider) as the process default gets it, and
//! leasehold never replaces it. Its own test binary, so its own process: the
//! process default is global and the other TLS tests install none.
//!
//! Runs in the default build (ring and aws-lc-rs both compiled in: the
//! `tls-ring` fallback and this file's aws-lc-rs) and in one without the
//! fallback, where a connection before any provider is installed must fail
//! with an error that says so, not panic:
//! `cargo test -p leasehold --no-default-features --features tls --test tls_provider`.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use leasehold::Client;
use leasehold_testkit::RedisServer;
use rcgen::{BasicConstraints, CertificateParams, CertifiedIssuer, DnType, IsCa, KeyPair};
use rustls::crypto::{CryptoProvider, GetRandomFailed, SecureRandom, aws_lc_rs};

/// Calls to [`Counting`].
static DRAWS: AtomicUsize = AtomicUsize::new(0);

/// aws-lc-rs's random source, counting its calls: each handshake draws its
/// client random from the provider of the connection's configuration.
#[derive(Debug)]
struct Counting;

impl SecureRandom for Counting {
    fn fill(&self, buf: &mut [u8]) -> Result<(), GetRandomFailed> {
        DRAWS.fetch_add(1, Ordering::SeqCst);
        aws_lc_rs::default_provider().secure_random.fill(buf)
    }
}

/// A CA (PEM) and a certificate and key it signed for `localhost`.
fn pki() -> (String, String, String) {
    let mut ca_params = CertificateParams::new(Vec::<String>::new()).unwrap();
    ca_params
        .distinguished_name
        .push(DnType::CommonName, "leasehold test CA");
    ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    let ca = CertifiedIssuer::self_signed(ca_params, KeyPair::generate().unwrap()).unwrap();
    let key = KeyPair::generate().unwrap();
    let mut params = CertificateParams::new(vec!["localhost".to_owned()]).unwrap();
    params
        .distinguished_name
        .push(DnType::CommonName, "localhost");
    let cert = params.signed_by(&key, &ca).unwrap();
    (ca.pem(), cert.pem(), key.serialize_pem())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_applications_aws_lc_provider_is_used_and_kept() {
    let (ca, cert, key) = pki();
    let server = RedisServer::builder().tls(&cert, &key, &ca, false).start();
    let connect = || {
        Client::builder()
            .url(server.url())
            .tls_ca_cert(ca.as_bytes())
            .build()
    };

    // Without the fallback and before the application installed a
    // provider: a clear error, and nothing installed behind its back.
    #[cfg(not(feature = "tls-ring"))]
    {
        let err = connect()
            .await
            .expect_err("no provider installed, none compiled in");
        let message = err.to_string();
        assert!(
            matches!(err, leasehold::Error::Unsupported(_))
                && message.contains("CryptoProvider")
                && message.contains("tls-ring"),
            "{message}"
        );
        assert!(CryptoProvider::get_default().is_none());
    }

    CryptoProvider {
        secure_random: &Counting,
        ..aws_lc_rs::default_provider()
    }
    .install_default()
    .expect("the first provider installed in this process");
    let installed = Arc::as_ptr(CryptoProvider::get_default().unwrap());

    let client = connect().await.expect("connect over TLS on aws-lc-rs");
    let guard = client.lock("provider").acquire().await.expect("acquire");
    guard.release().await.expect("release");
    client.close().await.expect("close");

    assert!(
        DRAWS.load(Ordering::SeqCst) > 0,
        "the handshakes drew no randomness from the installed provider"
    );
    assert_eq!(
        Arc::as_ptr(CryptoProvider::get_default().unwrap()),
        installed,
        "leasehold replaced the application's provider"
    );
}
