//! The synchronous API, for threads outside an async runtime: the same
//! types and names, renewal on a thread of the client's own.
//!
//! ```sh
//! cargo run -p leasehold --example blocking   # LEASEHOLD_URL, or 127.0.0.1:6379
//! ```

use std::time::Duration;

use leasehold::blocking::Client;

fn main() -> Result<(), leasehold::Error> {
    let url = std::env::var("LEASEHOLD_URL").unwrap_or_else(|_| "redis://127.0.0.1:6379".into());
    let client = Client::connect(&url)?;

    // At most three exports at once, across every process on this Redis.
    let exports = client.semaphore("exports", 3).ttl(Duration::from_secs(30));
    let permit = exports.acquire()?;
    println!("export slot taken (fence {})", permit.fence());
    std::thread::sleep(Duration::from_millis(500));
    permit.release()?;

    // A lock taken without waiting: someone else may be running the job.
    match client.lock("cron:cleanup").try_acquire()? {
        Some(guard) => {
            println!("running cleanup");
            guard.release()?;
        }
        None => println!("cleanup already runs elsewhere"),
    }
    // Before the program ends: gives back anything still held.
    client.close()
}
