//! Fencing an SQL `UPDATE`: the row keeps the fence of the last lock
//! holder that claimed it, and an update carrying a lower fence changes
//! nothing. So a holder that was paused past its TTL (GC, a frozen VM) and
//! writes after the next holder cannot overwrite that holder's work.
//!
//! A holder claims the row with its fence *before* it reads it ([`claim`]),
//! not only when it writes: checked only at the write, a stale holder's
//! write could still land between the next holder's read and write, and
//! both would add to the same total (a lost update).
//!
//! ```sh
//! LEASEHOLD_URL=redis://127.0.0.1:6379 \
//! LEASEHOLD_POSTGRES='host=127.0.0.1 port=5432 user=postgres dbname=postgres' \
//!     cargo run -p leasehold --example fenced_postgres
//! ```
//!
//! It creates the table `ledger` if missing, adds 1 to a total under the
//! lock `ledger`, then shows a write with an older fence refused.
//! `tests/fenced_postgres.rs` runs the same functions on a private
//! PostgreSQL, with the stale holder cut off past its TTL.

use std::error::Error;

/// The table: `last_fence` is the fence of the holder that wrote last.
/// Fences are below 2^63 (server time in microseconds), so `bigint` holds them.
pub async fn create_ledger(db: &tokio_postgres::Client, id: i32) -> Result<(), Box<dyn Error>> {
    db.batch_execute(
        "CREATE TABLE IF NOT EXISTS ledger (
             id integer PRIMARY KEY,
             total bigint NOT NULL,
             last_fence bigint NOT NULL DEFAULT 0
         )",
    )
    .await?;
    db.execute(
        "INSERT INTO ledger (id, total) VALUES ($1, 0) ON CONFLICT (id) DO NOTHING",
        &[&id],
    )
    .await?;
    Ok(())
}

/// Claims the row for the holder of `fence` and reads its total: records
/// `fence` if it is at least the last one (equal fences pass, so a holder
/// may claim again), and answers `None` (0 rows) when a newer holder has
/// claimed it (or there is no row `id`): this holder's lease is gone and
/// its work must stop. From then on every write of an older fence is
/// refused.
pub async fn claim(
    db: &tokio_postgres::Client,
    id: i32,
    fence: u64,
) -> Result<Option<i64>, Box<dyn Error>> {
    let fence = i64::try_from(fence)?;
    let row = db
        .query_opt(
            "UPDATE ledger SET last_fence = $2 WHERE id = $1 AND last_fence <= $2 RETURNING total",
            &[&id, &fence],
        )
        .await?;
    Ok(row.map(|row| row.get(0)))
}

/// Sets the row's total if `fence` is at least the last fence that wrote
/// it, and records `fence`; `false` (0 rows) when a newer holder has
/// written: this holder's lease is gone and its work must stop. Equal
/// fences pass, so one holder may write many times.
pub async fn fenced_update(
    db: &tokio_postgres::Client,
    id: i32,
    total: i64,
    fence: u64,
) -> Result<bool, Box<dyn Error>> {
    let fence = i64::try_from(fence)?;
    let rows = db
        .execute(
            "UPDATE ledger SET total = $1, last_fence = $2 WHERE id = $3 AND last_fence <= $2",
            &[&total, &fence, &id],
        )
        .await?;
    Ok(rows == 1)
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn Error>> {
    let url = std::env::var("LEASEHOLD_URL").unwrap_or_else(|_| "redis://127.0.0.1:6379".into());
    let params = std::env::var("LEASEHOLD_POSTGRES")
        .unwrap_or_else(|_| "host=127.0.0.1 port=5432 user=postgres dbname=postgres".into());
    let (db, connection) = tokio_postgres::connect(&params, tokio_postgres::NoTls).await?;
    tokio::spawn(async move {
        if let Err(e) = connection.await {
            eprintln!("postgres connection: {e}");
        }
    });
    create_ledger(&db, 1).await?;

    let client = leasehold::Client::connect(&url).await?;
    let lock = client.lock("ledger");
    let (total, fence) = lock
        .run(|fence| {
            let db = &db;
            async move {
                let lost = || "a newer holder claimed the ledger: this lease was lost".into();
                let Some(total) = claim(db, 1, fence).await? else {
                    return Err(lost());
                };
                if !fenced_update(db, 1, total + 1, fence).await? {
                    return Err(lost());
                }
                Ok::<_, Box<dyn Error>>((total + 1, fence))
            }
        })
        .await??;
    println!("total is now {total}, written under fence {fence}");

    // What a holder paused past its TTL would send later: an older fence.
    let stale = fenced_update(&db, 1, 0, fence - 1).await?;
    println!(
        "a write with the older fence {}: applied = {stale}",
        fence - 1
    );
    client.close().await?;
    Ok(())
}
