//! `leasehold::fenced`: the Redis-side fenced write, its script's contract
//! (as any client sends it) and a paused holder's late write, on real
//! servers.

mod common;

use std::time::Duration;

use leasehold::{Error, fenced};
use leasehold_testkit::{ProxyMode, RedisServer};

async fn resource(server: &RedisServer) -> leasehold::redis::aio::MultiplexedConnection {
    leasehold::redis::Client::open(server.url())
        .unwrap()
        .get_multiplexed_async_connection()
        .await
        .expect("connect to the resource")
}

fn get(server: &RedisServer, key: &str) -> Option<String> {
    redis::cmd("GET")
        .arg(key)
        .query(&mut server.connection())
        .unwrap()
}

#[tokio::test]
async fn a_lower_fence_is_rejected_and_an_equal_or_higher_one_written() {
    let server = RedisServer::start();
    let mut conn = resource(&server).await;
    fenced::set(&mut conn, "report", 10, "first", None)
        .await
        .expect("the first write");
    fenced::set(&mut conn, "report", 10, "again", None)
        .await
        .expect("the same holder writes again");
    fenced::set(&mut conn, "report", 12, "newer", None)
        .await
        .expect("a newer holder");
    let stale = fenced::set(&mut conn, "report", 11, "stale", None).await;
    match stale {
        Err(Error::StaleFence {
            ref key,
            fence: 11,
            highest: 12,
        }) if key == "report" => {}
        other => panic!("expected StaleFence 11 < 12, got {other:?}"),
    }
    let message = stale.unwrap_err().to_string();
    assert!(
        message.contains("11") && message.contains("12"),
        "{message}"
    );
    assert_eq!(get(&server, "report").as_deref(), Some("newer"));
    assert_eq!(
        get(&server, &fenced::fence_key("report")).as_deref(),
        Some("12")
    );
}

#[tokio::test]
async fn fences_beyond_a_lua_number_compare_exactly() {
    let server = RedisServer::start();
    let mut conn = resource(&server).await;
    // 2^53 + 1 and 2^53 + 2 are the same double: compared as numbers in
    // Lua they would be equal, and the lower one let through.
    fenced::set(&mut conn, "big", (1 << 53) + 2, "newer", None)
        .await
        .unwrap();
    let stale = fenced::set(&mut conn, "big", (1 << 53) + 1, "stale", None).await;
    assert!(matches!(stale, Err(Error::StaleFence { .. })), "{stale:?}");
    fenced::set(&mut conn, "big", u64::MAX, "last", None)
        .await
        .unwrap();
    assert_eq!(get(&server, "big").as_deref(), Some("last"));
}

#[tokio::test]
async fn an_expiry_applies_to_the_value_and_its_fence() {
    let server = RedisServer::start();
    let mut conn = resource(&server).await;
    fenced::set(&mut conn, "ttl", 5, "v", Some(Duration::from_secs(60)))
        .await
        .unwrap();
    let mut raw = server.connection();
    for key in ["ttl".to_owned(), fenced::fence_key("ttl")] {
        let pttl: i64 = redis::cmd("PTTL").arg(&key).query(&mut raw).unwrap();
        assert!((1..=60_000).contains(&pttl), "{key}: {pttl}");
    }
    let zero = fenced::set(&mut conn, "ttl", 6, "v", Some(Duration::ZERO)).await;
    assert!(matches!(zero, Err(Error::InvalidArgument(_))), "{zero:?}");
}

#[test]
fn the_script_works_from_any_client_and_refuses_bad_fences() {
    let server = RedisServer::start();
    let mut raw = server.connection();
    let eval = |fence: &str, value: &str| -> redis::RedisResult<String> {
        redis::cmd("EVAL")
            .arg(fenced::SET_SCRIPT)
            .arg(2)
            .arg("cli")
            .arg("{cli}:fence")
            .arg(fence)
            .arg(value)
            .query(&mut server.connection())
    };
    assert_eq!(eval("7", "a").unwrap(), "7");
    let stale = eval("6", "b").unwrap_err();
    assert_eq!(stale.code(), Some("STALE"), "{stale}");
    assert!(stale.to_string().contains("below 7"), "{stale}");
    for bad in ["", "-1", "x", "07", "18446744073709551616", "1.5"] {
        let err = eval(bad, "c").unwrap_err();
        assert!(err.to_string().contains("fence must be"), "{bad:?}: {err}");
    }
    let value: String = redis::cmd("GET").arg("cli").query(&mut raw).unwrap();
    assert_eq!(value, "a");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_paused_holders_late_write_is_rejected() {
    let server = RedisServer::start();
    let holders = common::PausedHolder::start(&server).await;
    let mut resource_a = resource(&server).await;
    let mut resource_b = resource(&server).await;

    let guard_a = holders.a_acquires("ledger").await;
    fenced::set(
        &mut resource_a,
        "ledger:total",
        guard_a.fence(),
        "100",
        None,
    )
    .await
    .expect("A writes while it holds the lock");

    // B gets the lock only once A's lease has ended on the server.
    let guard_b = holders.take_over("ledger").await;
    assert!(guard_b.fence() > guard_a.fence());
    fenced::set(
        &mut resource_b,
        "ledger:total",
        guard_b.fence(),
        "200",
        None,
    )
    .await
    .expect("B writes");

    // A wakes up and writes with its old fence: rejected.
    let late = fenced::set(
        &mut resource_a,
        "ledger:total",
        guard_a.fence(),
        "101",
        None,
    )
    .await;
    match late {
        Err(Error::StaleFence { fence, highest, .. }) => {
            assert_eq!((fence, highest), (guard_a.fence(), guard_b.fence()));
        }
        other => panic!("A's late write must be rejected, got {other:?}"),
    }
    assert_eq!(get(&server, "ledger:total").as_deref(), Some("200"));
    guard_b.release().await.unwrap();
    holders.proxy.set_mode(ProxyMode::Pass);
    drop(guard_a);
}

/// Found by review: with `set` alone, a stale holder's write could land
/// between the next holder's read and its write, and both increments of
/// the same value were accepted. `get` claims the key with the reader's
/// fence before reading, so that write is refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stale_write_between_a_newer_holders_fenced_read_and_write_is_refused() {
    let server = RedisServer::start();
    let holders = common::PausedHolder::start(&server).await;
    let mut resource_a = resource(&server).await;
    let mut resource_b = resource(&server).await;
    fenced::set(&mut resource_b, "ledger:total", 1, 100, None)
        .await
        .unwrap();

    let guard_a = holders.a_acquires("ledger").await;
    let read_by_a: u64 = fenced::get(&mut resource_a, "ledger:total", guard_a.fence(), None)
        .await
        .unwrap()
        .expect("a value");
    let guard_b = holders.take_over("ledger").await;
    let read_by_b: u64 = fenced::get(&mut resource_b, "ledger:total", guard_b.fence(), None)
        .await
        .unwrap()
        .expect("a value");
    // A's late write lands between B's read and B's write.
    let late = fenced::set(
        &mut resource_a,
        "ledger:total",
        guard_a.fence(),
        read_by_a + 1,
        None,
    )
    .await;
    assert!(
        matches!(late, Err(Error::StaleFence { highest, .. }) if highest == guard_b.fence()),
        "{late:?}"
    );
    fenced::set(
        &mut resource_b,
        "ledger:total",
        guard_b.fence(),
        read_by_b + 1,
        None,
    )
    .await
    .expect("B writes");
    assert_eq!(get(&server, "ledger:total").as_deref(), Some("101"));
    // A stale reader is refused too, and a key never written reads None.
    assert!(matches!(
        fenced::get::<_, u64>(&mut resource_a, "ledger:total", guard_a.fence(), None).await,
        Err(Error::StaleFence { .. })
    ));
    assert_eq!(
        fenced::get::<_, u64>(&mut resource_b, "ledger:none", guard_b.fence(), None)
            .await
            .unwrap(),
        None
    );
    guard_b.release().await.unwrap();
    drop(guard_a);
}

/// Found by review: a claim kept the expiry the last write gave the fence
/// key, so it could lapse before the claimant wrote, and a stale writer's
/// write got through again. A claim lasts at least as long as asked.
#[tokio::test]
async fn a_claim_lasts_as_long_as_asked_not_as_the_last_write_said() {
    let server = RedisServer::start();
    let mut conn = resource(&server).await;
    let short = Duration::from_millis(300);
    fenced::set(&mut conn, "ledger:total", 1, 100, Some(short))
        .await
        .unwrap();
    let read: u64 = fenced::get(&mut conn, "ledger:total", 2, Some(Duration::from_secs(30)))
        .await
        .unwrap()
        .expect("a value");
    assert_eq!(read, 100);
    // Past the expiry the last write gave: the claim still holds.
    tokio::time::sleep(short + Duration::from_millis(200)).await;
    let stale = fenced::set(&mut conn, "ledger:total", 1, 1000, Some(short)).await;
    assert!(
        matches!(stale, Err(Error::StaleFence { highest: 2, .. })),
        "{stale:?}"
    );
    // A claim never shortens the fence key's life, and without an expiry
    // it has none.
    let _: Option<u64> = fenced::get(&mut conn, "ledger:total", 2, Some(short))
        .await
        .unwrap();
    let left: i64 = redis::cmd("PTTL")
        .arg(fenced::fence_key("ledger:total"))
        .query(&mut server.connection())
        .unwrap();
    assert!(left > 20_000, "shortened to {left} ms");
    let _: Option<u64> = fenced::get(&mut conn, "ledger:total", 2, None)
        .await
        .unwrap();
    let left: i64 = redis::cmd("PTTL")
        .arg(fenced::fence_key("ledger:total"))
        .query(&mut server.connection())
        .unwrap();
    assert_eq!(left, -1, "no expiry");
}
