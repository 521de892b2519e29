//! Where a client connects and how: URLs or a `redis::ConnectionInfo`, the
//! credentials and TLS material given beside them, checked and made ready
//! for the driver (RESP3), and URLs fit for error messages.

#[cfg(feature = "tls")]
use redis::{ClientTlsConfig, TlsCertificates};
use redis::{ConnectionInfo, IntoConnectionInfo, ProtocolVersion};

use super::ConnectOptions;
#[cfg(feature = "tls")]
use super::tls;
use crate::error::{Error, Result};

/// A username and password given apart from the URLs; each replaces the
/// URL's, on every server the client opens.
#[derive(Clone, Default)]
pub(crate) struct Credentials {
    pub(crate) username: Option<String>,
    pub(crate) password: Option<String>,
}

impl std::fmt::Debug for Credentials {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Credentials")
            .field("username", &self.username)
            .field("password", &self.password.as_ref().map(|_| "***"))
            .finish()
    }
}

/// Where a one-server client connects.
#[derive(Clone)]
pub(crate) enum Endpoint {
    /// `ClientBuilder::url`.
    Url(String),
    /// `ClientBuilder::connection_info`: the application's own.
    Info(Box<ConnectionInfo>),
    /// `ClientBuilder::connection_info` with something that does not
    /// parse: the driver's reason, said when the client is built.
    Invalid(String),
}

impl std::fmt::Debug for Endpoint {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Endpoint::Url(url) => f.debug_tuple("Url").field(&redact_url(url)).finish(),
            Endpoint::Info(info) => f
                .debug_tuple("Info")
                .field(&info.addr().to_string())
                .finish(),
            Endpoint::Invalid(why) => f.debug_tuple("Invalid").field(why).finish(),
        }
    }
}

/// A list of URLs (Redlock's, a cluster's, the sentinels) for `Debug`:
/// each through [`redact_url`].
pub(crate) struct RedactedUrls<'a>(pub(crate) &'a [String]);

impl std::fmt::Debug for RedactedUrls<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list()
            .entries(self.0.iter().map(|url| redact_url(url)))
            .finish()
    }
}

/// TLS material beyond the system's trust store.
#[derive(Clone, Default)]
pub(crate) struct TlsOptions {
    /// PEM of the CA to trust instead of the system roots.
    pub(crate) ca: Option<Vec<u8>>,
    /// PEM certificate chain and key for mutual TLS.
    pub(crate) client: Option<(Vec<u8>, Vec<u8>)>,
}

impl std::fmt::Debug for TlsOptions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TlsOptions")
            .field("ca", &self.ca.is_some())
            .field("client", &self.client.is_some())
            .finish()
    }
}

impl TlsOptions {
    pub(super) fn is_set(&self) -> bool {
        self.ca.is_some() || self.client.is_some()
    }

    #[cfg(feature = "tls")]
    pub(super) fn certificates(&self) -> TlsCertificates {
        TlsCertificates {
            client_tls: self.client.as_ref().map(|(cert, key)| ClientTlsConfig {
                client_cert: cert.clone(),
                client_key: key.clone(),
            }),
            root_cert: self.ca.clone(),
        }
    }
}

/// Parses `url`, refusing TLS material for a plain `redis://` URL (it would
/// be silently unused), and a TLS URL that this build cannot serve.
pub(super) fn parse_url(url: &str, options: &ConnectOptions) -> Result<ConnectionInfo> {
    let shown = format!("{:?}", redact_url(url));
    if is_tls_url(url) {
        tls_ready(&shown)?;
    }
    let info = url.into_connection_info().map_err(|e| {
        Error::InvalidArgument(format!(
            "invalid Redis URL {:?}: {e}; expected redis[s]://[user:password@]host:port[/db]",
            redact_url(url)
        ))
    })?;
    checked_info(info, options, &shown)
}

/// `info` made ready for leasehold: TLS material refused without a TLS
/// address (`shown` names the server in that error), the builder's
/// credentials in place of the URL's, RESP3.
pub(super) fn checked_info(
    info: ConnectionInfo,
    options: &ConnectOptions,
    shown: &str,
) -> Result<ConnectionInfo> {
    let tls = matches!(info.addr(), redis::ConnectionAddr::TcpTls { .. });
    if tls {
        tls_ready(shown)?;
    }
    if options.tls.is_set() && !tls {
        return Err(Error::InvalidArgument(format!(
            "TLS certificates were given but {shown} is not a rediss:// URL"
        )));
    }
    let mut settings = info
        .redis_settings()
        .clone()
        .set_protocol(ProtocolVersion::RESP3);
    if let Some(username) = &options.credentials.username {
        settings = settings.set_username(username);
    }
    if let Some(password) = &options.credentials.password {
        settings = settings.set_password(password);
    }
    Ok(info.set_redis_settings(settings))
}

/// Whether `url` asks for TLS (`rediss://`, or `valkeys://` as the driver
/// also reads it).
pub(super) fn is_tls_url(url: &str) -> bool {
    url.split_once("://").is_some_and(|(scheme, _)| {
        scheme.eq_ignore_ascii_case("rediss") || scheme.eq_ignore_ascii_case("valkeys")
    })
}

/// Whether this build can open the TLS server `shown` (its redacted URL or
/// address, for errors): rustls has a crypto provider (see [`tls`]).
#[cfg(feature = "tls")]
fn tls_ready(_shown: &str) -> Result<()> {
    tls::ensure_provider()
}

/// Whether this build can open the TLS server `shown`: not without the
/// `tls` feature. Said here, not by the driver, which may have TLS compiled
/// in for another crate of the application and would then connect without
/// the certificates given to the builder.
#[cfg(not(feature = "tls"))]
fn tls_ready(shown: &str) -> Result<()> {
    Err(Error::Unsupported(format!(
        "{shown} is a TLS server, but this build of leasehold has no TLS: enable its `tls` \
         feature, or use redis://"
    )))
}

/// A driver client for `url` with the TLS material of `options`.
pub(super) fn open_client(info: ConnectionInfo, options: &ConnectOptions) -> Result<redis::Client> {
    let addr = info.addr().to_string();
    #[cfg(feature = "tls")]
    if options.tls.is_set() && matches!(info.addr(), redis::ConnectionAddr::TcpTls { .. }) {
        return redis::Client::build_with_tls(info, options.tls.certificates())
            .map_err(|e| Error::from_redis(e, &addr, ""));
    }
    #[cfg(not(feature = "tls"))]
    let _ = options;
    redis::Client::open(info).map_err(|e| Error::from_redis(e, &addr, ""))
}

/// `url` fit for a message, a log line or a `Debug` string: every password
/// it may carry replaced by `***`, the rest as written, so the server can
/// still be told.
///
/// The password of the userinfo goes (`redis://user:***@host`; a userinfo
/// without `:` may be a password given alone, and goes whole), and so does
/// the value of every `password` or `pass` query parameter, in any case and
/// percent-encoding (`unix:///run/redis.sock?pass=***`). A URL the driver
/// cannot parse whole (a port out of range, a database that is not a
/// number) cannot be read part by part with confidence: its whole userinfo
/// and whole query are replaced. Every error, log line and `Debug` string
/// of leasehold that names a URL shows it through this function; lists of
/// URLs (Redlock, Cluster, Sentinel) show each one through it.
///
/// ```
/// use leasehold::redact_url;
/// assert_eq!(redact_url("redis://app:hunter2@127.0.0.5:6379/0"), "redis://app:***@127.0.0.5:6379/0");
/// assert_eq!(redact_url("unix:///run/redis.sock?db=1&pass=hunter2"), "unix:///run/redis.sock?db=1&pass=***");
/// assert_eq!(redact_url("redis://127.0.0.5:99999/?password=hunter2"), "redis://127.0.0.5:99999/?***");
/// ```
pub fn redact_url(url: &str) -> String {
    let whole = url.into_connection_info().is_ok();
    // The scheme, when there is one ("redis://"); the rest is read after it.
    let start = url
        .find("://")
        .filter(|&i| {
            i > 0
                && url[..i]
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || matches!(c, '+' | '-' | '.'))
        })
        .map_or(0, |i| i + 3);
    let (head, rest) = url.split_at(start);
    let mut shown = head.to_owned();
    if !whole {
        // Whatever stands before the last '@' may hold a password with any
        // character in it; whatever follows a '?' or '#' may be a query.
        let rest = match rest.rfind('@') {
            Some(at) => {
                shown.push_str("***");
                &rest[at..]
            }
            None => rest,
        };
        match rest.find(['?', '#']) {
            Some(cut) => {
                shown.push_str(&rest[..=cut]);
                shown.push_str("***");
            }
            None => shown.push_str(rest),
        }
        return shown;
    }
    // Parsed whole: the authority ends at the first '/', '?' or '#', and its
    // userinfo at its last '@', as the driver reads them.
    let authority_end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
    let rest = match rest[..authority_end].rfind('@') {
        Some(at) => {
            match rest[..at].split_once(':') {
                Some((user, _)) => {
                    shown.push_str(user);
                    shown.push_str(":***");
                }
                None => shown.push_str("***"),
            }
            &rest[at..]
        }
        None => rest,
    };
    let (before_fragment, fragment) = match rest.split_once('#') {
        Some((before, fragment)) => (before, Some(fragment)),
        None => (rest, None),
    };
    let (path, query) = match before_fragment.split_once('?') {
        Some((path, query)) => (path, Some(query)),
        None => (before_fragment, None),
    };
    shown.push_str(path);
    if let Some(query) = query {
        shown.push('?');
        let pairs: Vec<String> = query
            .split('&')
            .map(|pair| match pair.split_once('=') {
                Some((key, _)) if is_password_key(key) => format!("{key}=***"),
                _ => pair.to_owned(),
            })
            .collect();
        shown.push_str(&pairs.join("&"));
    }
    // A fragment means something only as `#insecure` (rediss://); any
    // other may be the tail of a password that held a '#'.
    match fragment {
        Some("insecure") => shown.push_str("#insecure"),
        Some(_) => shown.push_str("#***"),
        None => {}
    }
    shown
}

/// Whether a query parameter's name (as written: percent-encoded, `+` for
/// a space) is `password` or `pass`, in any case.
fn is_password_key(key: &str) -> bool {
    let bytes = key.as_bytes();
    let mut decoded = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let escaped = (bytes[i] == b'%')
            .then(|| key.get(i + 1..i + 3))
            .flatten()
            .and_then(|hex| u8::from_str_radix(hex, 16).ok());
        match (escaped, bytes[i]) {
            (Some(byte), _) => {
                decoded.push(byte);
                i += 3;
            }
            (None, b'+') => {
                decoded.push(b' ');
                i += 1;
            }
            (None, byte) => {
                decoded.push(byte);
                i += 1;
            }
        }
    }
    decoded.eq_ignore_ascii_case(b"password") || decoded.eq_ignore_ascii_case(b"pass")
}
