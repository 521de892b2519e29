//! Leader election: two candidates, one leads, the other takes over the
//! moment it resigns, and an observer prints each change as it happens.
//!
//! ```sh
//! cargo run -p leasehold --example election   # LEASEHOLD_URL, or 127.0.0.1:6379
//! ```

use std::time::Duration;

use futures_util::StreamExt;
use leasehold::Client;

#[tokio::main]
async fn main() -> Result<(), leasehold::Error> {
    let url = std::env::var("LEASEHOLD_URL").unwrap_or_else(|_| "redis://127.0.0.1:6379".into());
    let client = Client::connect(&url).await?;
    let election = client
        .election("example:scheduler")
        .ttl(Duration::from_secs(10));

    // Who leads now, then each change: driven by published messages.
    let mut leaders = election.observe();
    let observer = tokio::spawn(async move {
        for _ in 0..4 {
            match leaders.next().await {
                Some(Ok(Some(leader))) => {
                    println!("observer: {} leads (term {})", leader.value, leader.term)
                }
                Some(Ok(None)) => println!("observer: nobody leads"),
                Some(Err(e)) => println!("observer: {e}"),
                None => return,
            }
        }
    });

    let first = election.campaign("host-a").await?;
    println!("host-a leads in term {}", first.term());

    // The standby waits in the queue until host-a steps down.
    let standby = election.clone();
    let second = tokio::spawn(async move { standby.campaign("host-b").await });
    tokio::time::sleep(Duration::from_millis(200)).await;
    first.resign().await?;
    let second = second.await.expect("the standby's task")?;
    println!("host-b leads in term {}", second.term());

    // A leader stops acting as one as soon as its lease is lost.
    tokio::select! {
        () = second.lost() => println!("host-b was deposed"),
        () = tokio::time::sleep(Duration::from_millis(300)) => second.resign().await?,
    }
    let _ = tokio::time::timeout(Duration::from_secs(2), observer).await;
    client.close().await
}
