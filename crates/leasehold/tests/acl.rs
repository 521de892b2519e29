//! The least-privilege ACL user of the README, and a user missing a permission.

mod common;

use leasehold::{Client, Error};
use leasehold_testkit::RedisServer;

/// The least-privilege rules a lock user needs (the README's ACL line):
/// scripts by EVALSHA (EVAL/SCRIPT LOAD when the server lost them), the
/// commands the scripts call, exact-channel pub/sub for release events,
/// WAIT for `min_replicas`; keys and channels under the prefix only.
const LOCK_USER_RULES: &str = "+evalsha +eval +script|load +subscribe +unsubscribe +ping \
    +hello +wait +get +mget +set +del +exists +pexpire +pttl +time +publish +hget +hset +hdel \
    +hexists +hkeys +hlen +zadd +zrem +zrange +zrangebyscore +zremrangebyscore \
    +zscore +zcard +zcount +zpopmin +type ~leasehold:* &leasehold:*";

fn server_with_user(name: &str, rules: &str) -> RedisServer {
    let server = RedisServer::start();
    // resetchannels: Redis 6.2 starts a reset user with every channel (7.0 with none), and
    // refuses a channel pattern after that.
    let mut args = vec!["SETUSER", name, "reset", "resetchannels", "on", ">pw"];
    args.extend(rules.split_whitespace());
    let _: () = redis::cmd("ACL")
        .arg(&args)
        .query(&mut server.connection())
        .expect("ACL SETUSER");
    server
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn least_privilege_user_runs_the_locks() {
    let server = server_with_user("locker", LOCK_USER_RULES);
    let client = Client::connect(&server.url_with_auth(Some("locker"), "pw"))
        .await
        .expect("connect as the lock user");
    common::lock_suite(&client, "acl").await;
    // A fresh server that lost its scripts: NOSCRIPT is answered by loading.
    let _: () = redis::cmd("SCRIPT")
        .arg("FLUSH")
        .query(&mut server.connection())
        .unwrap();
    let guard = client.lock("after-flush").acquire().await.expect("acquire");
    guard.release().await.expect("release");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_user_without_evalsha_gets_an_error_naming_it() {
    let rules = LOCK_USER_RULES.replace("+evalsha ", "");
    let server = server_with_user("weak", &rules);
    let client = Client::connect(&server.url_with_auth(Some("weak"), "pw"))
        .await
        .expect("connecting needs no EVALSHA");
    let err = client
        .lock("x")
        .acquire()
        .await
        .expect_err("no EVALSHA, no lock");
    assert!(matches!(err, Error::Auth { .. }), "got {err:?}");
    let message = err.to_string();
    assert!(message.contains("evalsha"), "{message}");
    assert!(message.contains("ACL"), "{message}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn least_privilege_user_runs_an_election() {
    use futures_util::StreamExt;
    let server = server_with_user("elector", LOCK_USER_RULES);
    let client = Client::connect(&server.url_with_auth(Some("elector"), "pw"))
        .await
        .expect("connect as the lock user");
    let election = client.election("acl-election");
    let mut changes = election.observe();
    assert_eq!(
        changes.next().await.expect("an item").expect("observe"),
        None
    );
    let leadership = election.campaign("a").await.expect("campaign");
    let leader = election.leader().await.expect("leader").expect("a leader");
    assert_eq!(
        (leader.value.as_str(), leader.term),
        ("a", leadership.term())
    );
    leadership
        .extend(std::time::Duration::from_secs(60))
        .await
        .expect("extend");
    leadership.resign().await.expect("resign");
    assert_eq!(election.leader().await.expect("leader"), None);
}

/// Credentials given apart from the URL (from a secret store, say) log the
/// client in, replace any in the URL, and never show in the builder's Debug.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn credentials_apart_from_the_url_log_in() {
    let server = server_with_user("locker", LOCK_USER_RULES);
    let builder = Client::builder()
        .url(server.url())
        .username("locker")
        .password("pw");
    assert!(!format!("{builder:?}").contains("pw\""), "{builder:?}");
    let client = builder.build().await.expect("log in as the lock user");
    common::lock_suite(&client, "acl-credentials").await;

    let err = Client::builder()
        .url(server.url_with_auth(Some("locker"), "pw"))
        .password("wrong")
        .build()
        .await
        .expect_err("the builder's password replaces the URL's");
    assert!(matches!(err, Error::Auth { .. }), "got {err:?}");
    assert!(!err.to_string().contains("wrong"), "{err}");
}

/// A `redis::ConnectionInfo` (here the one of an existing `redis::Client`)
/// instead of a URL.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_connection_info_names_the_server() {
    let server = server_with_user("locker", LOCK_USER_RULES);
    let theirs = leasehold::redis::Client::open(server.url_with_auth(Some("locker"), "pw"))
        .expect("a redis client of the application's");
    let client = Client::builder()
        .connection_info(theirs.get_connection_info().clone())
        .build()
        .await
        .expect("connect with the application's connection info");
    common::lock_suite(&client, "acl-info").await;

    let err = Client::builder()
        .connection_info("not a url")
        .build()
        .await
        .expect_err("a connection info that does not parse");
    assert!(matches!(err, Error::InvalidArgument(_)), "got {err:?}");
    assert!(err.to_string().contains("connection_info"), "{err}");
}
