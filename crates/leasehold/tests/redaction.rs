//! No password comes back out of the library: a secret planted in every
//! form a URL can carry it (userinfo, `password`/`pass` query parameters in
//! any case, malformed URLs, every URL of a Redlock, Cluster or Sentinel
//! list) is absent from every `Debug` string of the builder and the client
//! and from every error's `Display` and `Debug`.

mod common;

use leasehold::{Client, ClientBuilder, redact_url};
use leasehold_testkit::RedisServer;

/// The planted password; no output may contain it.
const SECRET: &str = "s3cr3tPW";

/// A loopback port with nothing listening on it (bound, then closed).
fn closed_port() -> u16 {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    listener.local_addr().expect("addr").port()
}

/// Every form of a URL that carries [`SECRET`], on `port`: well-formed and
/// malformed.
fn planted(port: u16) -> Vec<String> {
    vec![
        format!("redis://:{SECRET}@127.0.0.1:{port}"),
        format!("redis://user:{SECRET}@127.0.0.1:{port}/0"),
        format!("redis://{SECRET}@127.0.0.1:{port}"),
        format!("redis://127.0.0.1:{port}/?password={SECRET}"),
        format!("redis://127.0.0.1:{port}/?PassWord={SECRET}&protocol=resp3"),
        format!("redis://127.0.0.1:{port}/?p%61ss={SECRET}"),
        format!("rediss://:{SECRET}@127.0.0.1:{port}"),
        format!("unix:///nonexistent/r.sock?pass={SECRET}"),
        format!("unix:///nonexistent/r.sock?PASS={SECRET}&db=0"),
        // Malformed: a database that is not a number, a port out of range,
        // a password with characters a URL cannot hold unescaped.
        format!("unix:///x.sock?pass={SECRET}&db=x"),
        format!("redis://127.0.0.1:99999/?password={SECRET}"),
        format!("redis://u:{SECRET}@127.0.0.1:99999"),
        format!("redis://u:pa/{SECRET}@127.0.0.1:{port}"),
        format!("redis://u:{SECRET}?x@127.0.0.1:{port}"),
        format!("127.0.0.1:{port}?password={SECRET}"),
        format!("redis://:{SECRET}@127.0.0.1:{port}/x/y"),
    ]
}

fn assert_hidden(what: &str, text: &str) {
    assert!(!text.contains(SECRET), "{what} shows the password: {text}");
}

#[test]
fn redact_url_hides_every_form_of_password_and_keeps_the_rest() {
    for url in planted(6379) {
        assert_hidden(&url, &redact_url(&url));
    }
    // What is not secret stays as written, so a message still names the server.
    for (url, shown) in [
        ("redis://127.0.0.1:6379", "redis://127.0.0.1:6379"),
        ("redis://u:pw@h:1/0", "redis://u:***@h:1/0"),
        ("redis://:pw@h:1", "redis://:***@h:1"),
        ("redis://pw@h:1", "redis://***@h:1"),
        (
            "unix:///run/r.sock?db=1&pass=pw",
            "unix:///run/r.sock?db=1&pass=***",
        ),
        (
            "redis://h:1/?PASSWORD=pw&protocol=resp3",
            "redis://h:1/?PASSWORD=***&protocol=resp3",
        ),
        ("rediss://h:1/#insecure", "rediss://h:1/#insecure"),
        // Malformed: every query and userinfo replaced whole.
        ("unix:///x.sock?pass=pw&db=x", "unix:///x.sock?***"),
        ("redis://h:99999/?password=pw", "redis://h:99999/?***"),
        ("redis://u:pw@h:99999", "redis://***@h:99999"),
    ] {
        assert_eq!(redact_url(url), shown, "{url}");
    }
}

#[test]
fn a_builder_debug_shows_no_password_of_any_topology() {
    let urls = planted(closed_port());
    let builders: Vec<(&str, ClientBuilder)> = vec![
        ("url", Client::builder().url(urls[0].clone())),
        ("password", Client::builder().password(SECRET)),
        ("redlock", Client::builder().redlock(urls.clone())),
        ("cluster", Client::builder().cluster(urls.clone())),
        (
            "sentinel",
            Client::builder().sentinel(urls.clone(), "mymaster"),
        ),
    ];
    for (what, builder) in builders {
        assert_hidden(what, &format!("{builder:?}"));
        assert_hidden(what, &format!("{builder:#?}"));
    }
    for url in &urls {
        assert_hidden(url, &format!("{:?}", Client::builder().url(url.clone())));
    }
}

/// Every topology built from every planted URL fails (nothing listens,
/// or the URL is malformed); the errors, shown either way, hide the password.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn errors_of_bad_and_unreachable_urls_show_no_password() {
    let urls = planted(closed_port());
    for url in &urls {
        let builders = [
            ("url", Client::builder().url(url.clone())),
            (
                "redlock",
                Client::builder().redlock([url.clone(), url.clone(), url.clone()]),
            ),
            ("cluster", Client::builder().cluster([url.clone()])),
            ("sentinel", Client::builder().sentinel([url.clone()], "m")),
        ];
        for (what, builder) in builders {
            let builder = builder.command_timeout(std::time::Duration::from_millis(500));
            let err = builder
                .build()
                .await
                .expect_err("nothing listens, or the URL is malformed");
            assert_hidden(&format!("{what} {url}"), &format!("{err}"));
            assert_hidden(&format!("{what} {url}"), &format!("{err:?}"));
        }
    }
}

/// A server that refuses the password, and clients that connected with
/// one (userinfo, and a Unix socket's `?pass=`): errors and `Debug` hide it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn refused_and_connected_clients_show_no_password() {
    let dir = std::env::temp_dir().join(format!("leasehold-redaction-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let socket = dir.join("r.sock");
    let server = RedisServer::builder()
        .password(SECRET)
        .arg("unixsocket", socket.to_str().expect("utf-8 path"))
        .arg("unixsocketperm", "700")
        .start();
    let port = server.port();

    let wrong = format!("redis://:{SECRET}x@127.0.0.1:{port}");
    let err = Client::connect(&wrong).await.expect_err("wrong password");
    assert!(matches!(err, leasehold::Error::Auth { .. }), "{err:?}");
    assert_hidden("refused", &format!("{err} {err:?}"));

    for url in [
        format!("redis://:{SECRET}@127.0.0.1:{port}"),
        format!("redis://default:{SECRET}@127.0.0.1:{port}"),
        format!("unix://{}?pass={SECRET}", socket.display()),
    ] {
        let client = Client::connect(&url).await.expect("connect");
        assert_hidden(&url, &format!("{client:?}"));
        let guard = client.lock("x").acquire().await.expect("acquire");
        assert_hidden(&url, &format!("{guard:?}"));
        guard.release().await.expect("release");
        client.close().await.expect("close");
    }
    drop(server);
    let _ = std::fs::remove_dir_all(&dir);
}
