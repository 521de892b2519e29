//! Library-level benchmarks: one operation at a time against a private
//! `redis-server` on loopback, with criterion's statistics and baselines
//! (`cargo bench -p leasehold -- --save-baseline before`, then
//! `--baseline before` after a change). `leasehold bench` measures the
//! targets of DESIGN.md section 8 (ratios, contention, 100,000 leases);
//! this harness tracks each operation's own latency from commit to commit.

// criterion_group! defines an undocumented public function.
#![allow(missing_docs)]

use std::hint::black_box;
use std::time::Duration;

use criterion::{Criterion, criterion_group, criterion_main};
use leasehold::Client;
use leasehold_testkit::RedisServer;

fn operations(c: &mut Criterion) {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("a Tokio runtime");
    let server = RedisServer::start();
    let client = runtime
        .block_on(Client::connect(&server.url()))
        .expect("connect to the private server");

    let mut group = c.benchmark_group("one server");
    group.measurement_time(Duration::from_secs(3));

    let lock = client.lock("bench:lock");
    group.bench_function("lock: acquire + release (free)", |b| {
        b.to_async(&runtime).iter(|| async {
            let guard = lock.acquire().await.expect("acquire");
            black_box(guard.fence());
            guard.release().await.expect("release");
        });
    });

    let held = runtime.block_on(lock.acquire()).expect("hold the lock");
    group.bench_function("lock: try_acquire refused (held)", |b| {
        b.to_async(&runtime).iter(|| async {
            let refused = client.lock("bench:lock").try_acquire().await;
            assert!(refused.expect("try_acquire").is_none());
        });
    });
    group.bench_function("lock: extend", |b| {
        b.to_async(&runtime)
            .iter(|| async { held.extend(Duration::from_secs(30)).await.expect("extend") });
    });
    runtime.block_on(held.release()).expect("release");

    let reentrant = client.reentrant_lock("bench:reentrant");
    group.bench_function("reentrant: acquire + release", |b| {
        b.to_async(&runtime).iter(|| async {
            let guard = reentrant.acquire().await.expect("acquire");
            guard.release().await.expect("release");
        });
    });

    let rw = client.rw_lock("bench:rw");
    group.bench_function("rwlock: read + release", |b| {
        b.to_async(&runtime).iter(|| async {
            let guard = rw.read().await.expect("read");
            guard.release().await.expect("release");
        });
    });

    let semaphore = client.semaphore("bench:semaphore", 4);
    group.bench_function("semaphore: acquire + release", |b| {
        b.to_async(&runtime).iter(|| async {
            let permit = semaphore.acquire().await.expect("acquire");
            permit.release().await.expect("release");
        });
    });
    group.finish();
}

criterion_group!(benches, operations);
criterion_main!(benches);
