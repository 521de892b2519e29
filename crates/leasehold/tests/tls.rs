//! TLS-only servers: verification on, a custom CA, mutual TLS, a wrong CA.

mod common;

use leasehold::{Client, Error};
use leasehold_testkit::RedisServer;
use rcgen::{BasicConstraints, CertificateParams, CertifiedIssuer, DnType, IsCa, KeyPair};

/// A CA, and a server and a client certificate it signed (PEM).
struct Pki {
    ca: String,
    server: (String, String),
    client: (String, String),
}

fn pki() -> Pki {
    let mut ca_params = CertificateParams::new(Vec::<String>::new()).unwrap();
    ca_params
        .distinguished_name
        .push(DnType::CommonName, "leasehold test CA");
    ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    let ca = CertifiedIssuer::self_signed(ca_params, KeyPair::generate().unwrap()).unwrap();
    let signed = |names: Vec<String>| {
        let key = KeyPair::generate().unwrap();
        let mut params = CertificateParams::new(names.clone()).unwrap();
        // A subject of its own: OpenSSL takes subject == issuer for self-signed.
        params
            .distinguished_name
            .push(DnType::CommonName, names[0].clone());
        let cert = params.signed_by(&key, &ca).unwrap();
        (cert.pem(), key.serialize_pem())
    };
    Pki {
        server: signed(vec!["localhost".into()]),
        client: signed(vec!["leasehold-client".into()]),
        ca: ca.pem(),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tls_server_with_our_ca_runs_the_locks() {
    let pki = pki();
    let server = RedisServer::builder()
        .tls(&pki.server.0, &pki.server.1, &pki.ca, false)
        .start();
    let client = Client::builder()
        .url(server.url())
        .tls_ca_cert(pki.ca.as_bytes())
        .build()
        .await
        .expect("connect over TLS");
    common::lock_suite(&client, "tls").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mutual_tls_needs_the_client_certificate() {
    let pki = pki();
    let server = RedisServer::builder()
        .tls(&pki.server.0, &pki.server.1, &pki.ca, true)
        .start();
    let client = Client::builder()
        .url(server.url())
        .tls_ca_cert(pki.ca.as_bytes())
        .tls_client_cert(pki.client.0.as_bytes(), pki.client.1.as_bytes())
        .build()
        .await
        .expect("connect with a client certificate");
    let guard = client.lock("mtls").acquire().await.expect("acquire");
    guard.release().await.expect("release");

    let without = Client::builder()
        .url(server.url())
        .tls_ca_cert(pki.ca.as_bytes())
        .build()
        .await;
    let err = without.expect_err("a client without a certificate is refused");
    assert!(matches!(err, Error::Tls { .. }), "got {err:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wrong_ca_is_refused_with_a_tls_error() {
    let pki = pki();
    let other = pki_other_ca();
    let server = RedisServer::builder()
        .tls(&pki.server.0, &pki.server.1, &pki.ca, false)
        .start();
    let err = Client::builder()
        .url(server.url())
        .tls_ca_cert(other.as_bytes())
        .command_timeout(std::time::Duration::from_secs(2))
        .build()
        .await
        .expect_err("a server signed by another CA must be refused");
    assert!(matches!(err, Error::Tls { .. }), "got {err:?}");
    let message = err.to_string();
    assert!(
        message.contains("certificate") && message.contains("tls_ca_cert"),
        "{message}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn certificates_for_a_plain_url_are_refused() {
    let pki = pki();
    let err = Client::builder()
        .url("redis://127.0.0.1:1")
        .tls_ca_cert(pki.ca.as_bytes())
        .build()
        .await
        .expect_err("certificates with redis:// are a mistake");
    assert!(matches!(err, Error::InvalidArgument(_)), "got {err:?}");
}

fn pki_other_ca() -> String {
    let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
    params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    CertifiedIssuer::self_signed(params, KeyPair::generate().unwrap())
        .unwrap()
        .pem()
}
