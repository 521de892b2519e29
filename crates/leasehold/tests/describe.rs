//! Who holds it (issue 33, item 7): a holder's description (`describe`)
//! kept beside its hold with the same TTL, shown by the statuses, and left
//! nowhere once the hold ends.

mod common;

use std::time::Duration;

use common::{client, wait_until};
use leasehold::Error;
use leasehold_testkit::RedisServer;
use redis::Commands;

/// Waits until a description is kept under `name` (it is written in the
/// background once the guard is handed out).
async fn described(server: &RedisServer, name: &str) {
    wait_until("the description is written", || {
        keys_of(server, name).iter().any(|k| k.contains(":who:"))
    })
    .await;
}

/// Every key of the name `name` under the default prefix.
fn keys_of(server: &RedisServer, name: &str) -> Vec<String> {
    let mut keys: Vec<String> = server
        .connection()
        .keys(format!("leasehold:{{{name}}}*"))
        .expect("KEYS");
    keys.sort();
    keys
}

#[tokio::test]
async fn a_lock_holders_description_is_shown_while_it_holds_and_gone_with_the_release() {
    let server = RedisServer::start();
    let (holder, other) = (client(&server).await, client(&server).await);
    let guard = holder
        .lock("job")
        .describe("host-a pid 42: ./backup.sh")
        .acquire()
        .await
        .unwrap();
    described(&server, "job").await;
    let status = other.lock("job").status().await.unwrap();
    assert_eq!(
        status.holder_about.as_deref(),
        Some("host-a pid 42: ./backup.sh")
    );
    // Kept with the lease's TTL.
    let who = format!("leasehold:{{job}}:who:{}", guard.token());
    let mut conn = server.connection();
    let (lease_ttl, who_ttl): (i64, i64) = (
        conn.pttl("leasehold:{job}:lock").unwrap(),
        conn.pttl(&who).unwrap(),
    );
    assert!(
        who_ttl > 0 && (who_ttl - lease_ttl).abs() < 1_000,
        "{lease_ttl} {who_ttl}"
    );
    guard.release().await.unwrap();
    assert_eq!(keys_of(&server, "job"), Vec::<String>::new(), "left behind");
    let status = other.lock("job").status().await.unwrap();
    assert_eq!(status.holder_about, None);

    // A guard dropped: released in the background, description and all;
    // then one dropped at once, before its description may be written.
    let guard = holder
        .lock("job")
        .describe("dropped")
        .acquire()
        .await
        .unwrap();
    described(&server, "job").await;
    drop(guard);
    wait_until("the dropped guard's keys are gone", || {
        keys_of(&server, "job").is_empty()
    })
    .await;
    // (The release marks the lease released before it sends anything; the
    // write of the description, answered after that, is followed by its
    // deletion.)
    let guard = holder
        .lock("job")
        .describe("dropped")
        .acquire()
        .await
        .unwrap();
    drop(guard);
    wait_until("the dropped guard's keys are gone", || {
        keys_of(&server, "job").is_empty()
    })
    .await;

    // Without a description nothing more is written.
    let _guard = holder.lock("plain").acquire().await.unwrap();
    assert_eq!(
        other.lock("plain").status().await.unwrap().holder_about,
        None
    );
    assert!(
        keys_of(&server, "plain")
            .iter()
            .all(|k| !k.contains(":who:"))
    );
}

#[tokio::test]
async fn a_description_is_renewed_with_its_lease_and_expires_with_it() {
    let server = RedisServer::start();
    let holder = client(&server).await;
    let ttl = Duration::from_millis(600);
    let guard = holder
        .lock("renewed")
        .ttl(ttl)
        .describe("renewed")
        .acquire()
        .await
        .unwrap();
    described(&server, "renewed").await;
    // Three TTLs: renewed every ttl / 3, the description with it.
    tokio::time::sleep(ttl * 3).await;
    assert!(!guard.is_lost());
    let status = holder.lock("renewed").status().await.unwrap();
    assert_eq!(status.holder_about.as_deref(), Some("renewed"));
    // An extend to a longer TTL takes the description with it.
    guard.extend(Duration::from_secs(60)).await.unwrap();
    let who: i64 = server
        .connection()
        .pttl(format!("leasehold:{{renewed}}:who:{}", guard.token()))
        .unwrap();
    assert!(who > 50_000, "{who}");
    // Not renewed: both end by their TTL, nothing left.
    let unrenewed = holder
        .lock("once")
        .ttl(ttl)
        .watchdog(false)
        .describe("once")
        .acquire()
        .await
        .unwrap()
        .detach();
    assert!(!unrenewed.is_empty());
    tokio::time::sleep(ttl * 2).await;
    assert_eq!(keys_of(&server, "once"), Vec::<String>::new());
    drop(guard);
}

#[tokio::test]
async fn rwlock_and_semaphore_holds_show_their_descriptions() {
    let server = RedisServer::start();
    let (a, b) = (client(&server).await, client(&server).await);
    let write = a.rw_lock("rw").describe("writer a").write().await.unwrap();
    described(&server, "rw").await;
    let status = b.rw_lock("rw").status().await.unwrap();
    assert_eq!(
        status.writer.as_ref().and_then(|w| w.about.as_deref()),
        Some("writer a")
    );
    // A downgrade carries it to the read hold.
    let read = write.downgrade().await.unwrap();
    let second = b.rw_lock("rw").read().await.unwrap();
    wait_until("the description moved to the read hold", || {
        let keys = keys_of(&server, "rw");
        keys.iter().any(|k| k.contains(":who:r:")) && !keys.iter().any(|k| k.contains(":who:w:"))
    })
    .await;
    let status = b.rw_lock("rw").status().await.unwrap();
    let mut about: Vec<Option<String>> = status.readers.iter().map(|r| r.about.clone()).collect();
    about.sort();
    assert_eq!(about, [None, Some("writer a".to_owned())]);
    read.release().await.unwrap();
    second.release().await.unwrap();
    assert_eq!(keys_of(&server, "rw"), Vec::<String>::new(), "left behind");

    let permit = a
        .semaphore("sem", 2)
        .describe("permit a")
        .acquire()
        .await
        .unwrap();
    described(&server, "sem").await;
    let status = b.semaphore("sem", 2).status().await.unwrap();
    assert_eq!(status.holders.len(), 1);
    assert_eq!(status.holders[0].about.as_deref(), Some("permit a"));
    permit.release().await.unwrap();
    assert_eq!(keys_of(&server, "sem"), Vec::<String>::new(), "left behind");
}

#[tokio::test]
async fn an_empty_or_long_description_is_refused_before_anything_is_sent() {
    let server = RedisServer::start();
    let holder = client(&server).await;
    for about in [String::new(), "x".repeat(513)] {
        let refused = holder.lock("bad").describe(about).acquire().await;
        match refused {
            Err(Error::InvalidArgument(message)) => {
                assert!(message.contains("describe"), "{message}");
            }
            other => panic!("not refused: {other:?}"),
        }
    }
    assert_eq!(keys_of(&server, "bad"), Vec::<String>::new());
}

/// The blocking handles have it too.
#[test]
fn a_blocking_handle_describes_its_holds() {
    let server = RedisServer::start();
    let client = leasehold::blocking::Client::connect(&server.url()).expect("connect");
    let written = |name: &str| {
        let deadline = std::time::Instant::now() + Duration::from_secs(5);
        while !keys_of(&server, name).iter().any(|k| k.contains(":who:")) {
            assert!(std::time::Instant::now() < deadline, "never written");
            std::thread::sleep(Duration::from_millis(5));
        }
    };
    let guard = client.lock("t").describe("thread 1").acquire().unwrap();
    written("t");
    let status = client.lock("t").status().unwrap();
    assert_eq!(status.holder_about.as_deref(), Some("thread 1"));
    guard.release().unwrap();
    let permit = client
        .semaphore("s", 1)
        .describe("thread 2")
        .acquire()
        .unwrap();
    written("s");
    let status = client.semaphore("s", 1).status().unwrap();
    assert_eq!(status.holders[0].about.as_deref(), Some("thread 2"));
    permit.release().unwrap();
}
