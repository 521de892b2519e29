//! Many readers at once, or one writer alone; a waiting writer holds new
//! readers back, so it is not starved, and writers go in the order they
//! came.
//!
//! ```sh
//! cargo run -p leasehold --example rwlock     # LEASEHOLD_URL, or 127.0.0.1:6379
//! ```

use std::time::Duration;

use leasehold::Client;

#[tokio::main]
async fn main() -> Result<(), leasehold::Error> {
    let url = std::env::var("LEASEHOLD_URL").unwrap_or_else(|_| "redis://127.0.0.1:6379".into());
    let client = Client::connect(&url).await?;
    let catalog = client.rw_lock("catalog").ttl(Duration::from_secs(10));

    // Readers share the lock; each read is its own holder with its own lease.
    let first = catalog.read().await?;
    let second = catalog.read().await?;
    let status = catalog.status().await?;
    println!("{} readers hold the catalog", status.reader_count);

    // A writer (a clone of the handle is a holder of its own) waits for
    // both readers; while it waits, no new reader gets in.
    let writer = {
        let catalog = catalog.clone();
        tokio::spawn(async move { catalog.write().await })
    };
    first.release().await?;
    second.release().await?;
    let write = writer.await.expect("the writer task")?;
    println!("writing with fence {}", write.fence());

    // Done writing but still reading: keep the lock without a gap.
    let read = write.downgrade().await?;
    read.release().await?;
    // Before `main` returns: gives back anything still held (here, nothing).
    client.close().await
}
