//! One lease over independent Redis masters: held while a majority agrees,
//! so the lock survives a minority of them failing.
//!
//! ```sh
//! for p in 7001 7002 7003; do redis-server --port $p --save '' & done
//! cargo run -p leasehold --example redlock -- \
//!     redis://127.0.0.1:7001 redis://127.0.0.1:7002 redis://127.0.0.1:7003
//! ```

use std::time::Duration;

use leasehold::Client;

#[tokio::main]
async fn main() -> Result<(), leasehold::Error> {
    let urls: Vec<String> = std::env::args().skip(1).collect();
    if urls.len() < 3 {
        eprintln!("usage: redlock URL URL URL [URL...]  (three or more independent masters)");
        std::process::exit(64);
    }
    let client = Client::builder()
        .redlock(urls)
        .node_timeout(Duration::from_millis(100)) // a dead node costs at most this
        .build()
        .await?;
    let guard = client.lock("payments:settle").acquire().await?;
    // Redlock fences are best-effort: the quorum's largest, raised to the
    // nodes' clocks (see Client::redlock).
    println!("holding on a quorum with fence {}", guard.fence());
    guard.release().await?;
    client.close().await
}
