//! The library's metrics in the Prometheus text format: a recorder is
//! installed, a few locks are taken (one waited for and handed over), and
//! what was recorded is printed. A service would serve the rendered text on
//! its `/metrics` endpoint instead (or install the exporter's HTTP listener).
//!
//! ```sh
//! cargo run -p leasehold --example metrics   # LEASEHOLD_URL, or 127.0.0.1:6379
//! ```

use std::time::Duration;

use leasehold::Client;
use metrics_exporter_prometheus::PrometheusBuilder;

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let prometheus = PrometheusBuilder::new().install_recorder()?;
    let url = std::env::var("LEASEHOLD_URL").unwrap_or_else(|_| "redis://127.0.0.1:6379".into());
    let (a, b) = (Client::connect(&url).await?, Client::connect(&url).await?);

    let held = a.lock("metrics-example").acquire().await?;
    // Busy for a try; a waiter is handed the lock when it is released.
    assert!(b.lock("metrics-example").try_acquire().await?.is_none());
    let waiter = tokio::spawn({
        let b = b.clone();
        async move {
            let lock = b.lock("metrics-example").wait(Duration::from_secs(10));
            lock.acquire().await
        }
    });
    tokio::time::sleep(Duration::from_millis(100)).await;
    held.release().await?;
    waiter.await??.release().await?;

    a.close().await?;
    b.close().await?;
    print!("{}", prometheus.render());
    Ok(())
}
