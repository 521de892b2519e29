//! Fencing an SQL `UPDATE` (`examples/fenced_postgres.rs`) on a private
//! PostgreSQL and a real Redis: a holder cut off past its TTL writes late
//! with its old fence, and the row refuses it.

mod common;

#[allow(dead_code, unreachable_pub)]
#[path = "../examples/fenced_postgres.rs"]
mod example;

use leasehold_testkit::{PostgresServer, ProxyMode, RedisServer};

async fn database(pg: &PostgresServer) -> tokio_postgres::Client {
    let (db, connection) = tokio_postgres::connect(&pg.connection_string(), tokio_postgres::NoTls)
        .await
        .expect("connect to the test PostgreSQL");
    tokio::spawn(connection);
    example::create_ledger(&db, 1).await.expect("schema");
    db
}

async fn total(db: &tokio_postgres::Client) -> (i64, i64) {
    let row = db
        .query_one("SELECT total, last_fence FROM ledger WHERE id = 1", &[])
        .await
        .unwrap();
    (row.get(0), row.get(1))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_update_with_the_holders_fence_applies_and_a_lower_one_does_not() {
    let pg = PostgresServer::start();
    let server = RedisServer::start();
    let db = database(&pg).await;
    let client = common::client(&server).await;
    let guard = client.lock("ledger").acquire().await.unwrap();
    let fence = guard.fence();
    assert!(example::fenced_update(&db, 1, 10, fence).await.unwrap());
    // The same holder may write again with its fence.
    assert!(example::fenced_update(&db, 1, 11, fence).await.unwrap());
    assert!(!example::fenced_update(&db, 1, 12, fence - 1).await.unwrap());
    assert_eq!(total(&db).await, (11, i64::try_from(fence).unwrap()));
    guard.release().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_holder_paused_past_its_ttl_has_its_late_update_rejected() {
    let pg = PostgresServer::start();
    let server = RedisServer::start();
    let db = database(&pg).await;
    let holders = common::PausedHolder::start(&server).await;

    let guard_a = holders.a_acquires("ledger").await;
    let (read_by_a, _) = total(&db).await;

    // B gets the lock only once A's lease has ended on the server, and
    // writes with its (higher) fence.
    let guard_b = holders.take_over("ledger").await;
    assert!(guard_b.fence() > guard_a.fence());
    let (read_by_b, _) = total(&db).await;
    assert!(
        example::fenced_update(&db, 1, read_by_b + 1, guard_b.fence())
            .await
            .unwrap()
    );

    // A wakes and sends the update it had prepared: 0 rows, refused.
    let applied = example::fenced_update(&db, 1, read_by_a + 1, guard_a.fence())
        .await
        .unwrap();
    assert!(!applied, "the stale holder's update must not apply");
    assert_eq!(
        total(&db).await,
        (read_by_b + 1, i64::try_from(guard_b.fence()).unwrap())
    );
    guard_b.release().await.unwrap();
    holders.proxy.set_mode(ProxyMode::Pass);
    drop(guard_a);
}

/// Found by review: with the fence checked only when writing, a stale
/// holder's write could land between a newer holder's read and its write,
/// and both increments of the same read were accepted (a lost update).
/// Claiming the row with the fence before reading it closes that: once
/// the newer holder has claimed it, the stale write is refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stale_write_between_a_newer_holders_read_and_write_is_refused() {
    let pg = PostgresServer::start();
    let server = RedisServer::start();
    let db = database(&pg).await;
    let holders = common::PausedHolder::start(&server).await;

    let guard_a = holders.a_acquires("ledger").await;
    let read_by_a = example::claim(&db, 1, guard_a.fence())
        .await
        .unwrap()
        .expect("A claims the row");
    // A is cut off past its TTL; B takes the lock and reads.
    let guard_b = holders.take_over("ledger").await;
    let read_by_b = example::claim(&db, 1, guard_b.fence())
        .await
        .unwrap()
        .expect("B claims the row");
    // A's late write lands between B's read and B's write.
    let late = example::fenced_update(&db, 1, read_by_a + 1, guard_a.fence())
        .await
        .unwrap();
    assert!(
        !late,
        "A's late write was applied between B's read and write"
    );
    assert!(
        example::fenced_update(&db, 1, read_by_b + 1, guard_b.fence())
            .await
            .unwrap()
    );
    assert_eq!(total(&db).await.0, read_by_b + 1);
    guard_b.release().await.unwrap();
    drop(guard_a);
}
