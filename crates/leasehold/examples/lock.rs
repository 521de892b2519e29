//! A critical section held by one process at a time, with a fencing token
//! and the watchdog renewing the lease while the work runs.
//!
//! ```sh
//! redis-server --port 6379 &            # or point LEASEHOLD_URL at a server
//! cargo run -p leasehold --example lock
//! ```

use std::time::Duration;

use leasehold::Client;

#[tokio::main]
async fn main() -> Result<(), leasehold::Error> {
    let url = std::env::var("LEASEHOLD_URL").unwrap_or_else(|_| "redis://127.0.0.1:6379".into());
    let client = Client::connect(&url).await?;

    let guard = client
        .lock("reports:nightly")
        .ttl(Duration::from_secs(10)) // a crashed holder blocks others 10 s at most
        .wait(Duration::from_secs(30)) // how long to wait for the current holder
        .acquire()
        .await?;
    println!("holding with fence {}", guard.fence());

    // The work, abandoned if the lease is lost (Redis unreachable past the
    // lease's validity, or the key taken by someone else).
    tokio::select! {
        () = work(guard.fence()) => println!("done"),
        () = guard.lost() => eprintln!("lost the lock; stopping"),
    }
    // Gives back whatever is still held before `main` returns: a guard
    // merely dropped at the end would be released by a background task
    // that the runtime's shutdown stops, leaving the lock held for its TTL.
    client.close().await
}

/// Stands for work on a shared resource. Passing `fence` along lets the
/// resource refuse a write from a holder that lost the lock while paused.
async fn work(fence: u64) {
    println!("writing with fence {fence}");
    tokio::time::sleep(Duration::from_secs(2)).await;
}
