//! Faults between a cluster client and one of its nodes, through a proxy
//! in front of each node.
//!
//! Scripts the cluster driver runs twice: redis-rs's cluster connection
//! re-sends a request whose connection dropped before its reply came back
//! (it cannot tell whether the server ran it), so on a cluster every script
//! call may run twice. Found by review: two calls were not safe to repeat.
//! The ordering is forced, not timed: the proxy in front of the key's
//! master delays every chunk by 300 ms, the test waits until the script's
//! effect shows on the server (its reply is then still held by the proxy),
//! resets the connection, and lets the driver's re-sent request through.
//!
//! The nodes announce their proxies (`cluster-announce-port`, set at run
//! time). Redis 6.2 then announces the proxy to the other nodes but still
//! gives its own port for itself, so the clients here learn the cluster
//! from a node other than the key's master: that node names the master by
//! its proxy, on every version.

mod common;

use std::time::{Duration, Instant};

use leasehold::{Client, Error};
use leasehold_testkit::{Proxy, ProxyMode, RedisCluster, RedisServer};

/// A 3-master cluster whose nodes announce a proxy each
/// (cluster-announce-port), so every connection a client opens to another
/// node than the one it asked goes through that node's proxy.
fn proxied_cluster() -> (RedisCluster, Vec<Proxy>) {
    let cluster = RedisCluster::start(3, 0);
    let proxies: Vec<Proxy> = cluster
        .nodes()
        .iter()
        .map(|n| Proxy::start(n.port()))
        .collect();
    for (node, proxy) in cluster.nodes().iter().zip(&proxies) {
        let _: () = redis::cmd("CONFIG")
            .arg("SET")
            .arg("cluster-announce-port")
            .arg(proxy.port())
            .query(&mut node.connection())
            .expect("CONFIG SET cluster-announce-port");
    }
    let wanted: Vec<u16> = proxies.iter().map(Proxy::port).collect();
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        // Every node names every other master by its proxy.
        let announced = cluster.nodes().iter().all(|node| {
            let slots: Vec<Vec<redis::Value>> = redis::cmd("CLUSTER")
                .arg("SLOTS")
                .query(&mut node.connection())
                .unwrap_or_default();
            slots.len() == 3
                && slots.iter().all(|range| match range.get(2) {
                    Some(redis::Value::Array(master)) => matches!(master.get(1),
                        Some(redis::Value::Int(p))
                            if wanted.contains(&(*p as u16)) || *p as u16 == node.port()),
                    _ => false,
                })
        });
        if announced {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the nodes never announced their proxies"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    (cluster, proxies)
}

/// The index of the master serving `key`.
fn master_of(cluster: &RedisCluster, proxies: &[Proxy], key: &str) -> usize {
    // Its proxy's port, or its own where it answered for itself (6.2).
    let port = cluster.master_of(key);
    proxies
        .iter()
        .position(|p| p.port() == port)
        .or_else(|| cluster.nodes().iter().position(|n| n.port() == port))
        .expect("a node serves the key")
}

/// Script calls the server has run (EVALSHA and EVAL, as INFO counts them).
fn script_calls(server: &RedisServer) -> u64 {
    let info: String = redis::cmd("INFO")
        .arg("commandstats")
        .query(&mut server.connection())
        .expect("INFO commandstats");
    info.lines()
        .filter(|l| l.starts_with("cmdstat_evalsha:") || l.starts_with("cmdstat_eval:"))
        .filter_map(|l| {
            l.split("calls=")
                .nth(1)?
                .split(',')
                .next()?
                .parse::<u64>()
                .ok()
        })
        .sum()
}

/// Runs `call` so that its script runs on the server, loses its reply to a
/// reset connection, and is re-sent by the driver: `ran` tells when the
/// first run's effect shows on the server. Returns the call's outcome and
/// how many script calls the server ran meanwhile.
async fn with_the_reply_lost<T: Send + 'static>(
    server: &RedisServer,
    proxy: &Proxy,
    ran: impl Fn() -> bool,
    call: impl std::future::Future<Output = T> + Send + 'static,
) -> (T, u64) {
    let before = script_calls(server);
    proxy.set_mode(ProxyMode::Delay(Duration::from_millis(300)));
    let task = tokio::spawn(call);
    let started = Instant::now();
    while !ran() {
        assert!(
            started.elapsed() < Duration::from_secs(5),
            "the script never ran"
        );
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    // Its reply is held by the proxy for 300 ms: drop the connection first.
    proxy.set_mode(ProxyMode::Reset);
    tokio::time::sleep(Duration::from_millis(30)).await;
    proxy.set_mode(ProxyMode::Pass);
    let outcome = tokio::time::timeout(Duration::from_secs(10), task)
        .await
        .expect("the call returns")
        .expect("join");
    (outcome, script_calls(server) - before)
}

/// A proxied cluster, and the master of lock `name`'s key.
struct Proxied {
    cluster: RedisCluster,
    proxies: Vec<Proxy>,
    /// The index of the key's master.
    master: usize,
    /// The lock key.
    key: String,
}

impl Proxied {
    fn start(name: &str) -> Proxied {
        let (cluster, proxies) = proxied_cluster();
        let key = format!("leasehold:{{{name}}}:lock");
        let master = master_of(&cluster, &proxies, &key);
        Proxied {
            cluster,
            proxies,
            master,
            key,
        }
    }

    fn server(&self) -> &RedisServer {
        &self.cluster.nodes()[self.master]
    }

    fn proxy(&self) -> &Proxy {
        &self.proxies[self.master]
    }

    async fn client(&self) -> Client {
        cluster_client(&self.proxies, self.master).await
    }
}

/// A client that learns the cluster from another node than master `i`
/// (see the module's doc).
async fn cluster_client(proxies: &[Proxy], i: usize) -> Client {
    Client::builder()
        .cluster([proxies[(i + 1) % proxies.len()].url()])
        .command_timeout(Duration::from_secs(4))
        .build()
        .await
        .expect("connect to the cluster")
}

/// A downgrade run twice: the first run turned the write hold into the
/// read hold, the second found no write hold. Before, it answered "lost"
/// and the read hold stayed on the server with no guard to renew or
/// release it, shutting writers out for a TTL.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_downgrade_the_driver_runs_twice_still_returns_the_read_guard() {
    let name = "downgrade";
    let p = Proxied::start(name);
    let (server, proxy, key) = (p.server(), p.proxy(), &p.key);
    let client = p.client().await;
    let members = || -> Vec<String> {
        redis::cmd("ZRANGE")
            .arg(key)
            .arg(0)
            .arg(-1)
            .query(&mut server.connection())
            .expect("ZRANGE")
    };
    // The node caches the script first (else the first EVALSHA only meets
    // NOSCRIPT).
    let warm = client.rw_lock(name).write().await.expect("write");
    warm.downgrade()
        .await
        .expect("downgrade")
        .release()
        .await
        .expect("release");
    let write = client
        .rw_lock(name)
        .ttl(Duration::from_secs(60))
        .write()
        .await
        .expect("write");
    let (outcome, runs) = with_the_reply_lost(
        server,
        proxy,
        || members().iter().any(|m| m.starts_with("r:")),
        async move { write.downgrade().await },
    )
    .await;
    assert!(
        runs >= 2,
        "the driver did not run it again ({runs} script calls)"
    );
    let read = match outcome {
        Ok(read) => read,
        Err(e) => panic!(
            "the downgrade took place, yet returned {e:?}; the server holds {:?}",
            members()
        ),
    };
    assert_eq!(members().len(), 1, "one read hold: {:?}", members());
    read.release().await.expect("release the read hold");
    assert!(members().is_empty(), "released: {:?}", members());
}

/// `release_by_token` gives back one hold of an owner. Before, it left the
/// choice to the script ("any one hold"), so a run twice gave back two:
/// here both holds of job-7, freeing the lock for job-8 while two guards
/// of job-7 still said they held it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_release_by_token_the_driver_runs_twice_gives_back_one_hold_only() {
    let name = "by-token";
    let p = Proxied::start(name);
    let (server, proxy, key) = (p.server(), p.proxy(), &p.key);
    let (client, other) = (p.client().await, p.client().await);
    let holds = || -> usize {
        let fields: Vec<String> = redis::cmd("HKEYS")
            .arg(key)
            .query(&mut server.connection())
            .expect("HKEYS");
        fields.iter().filter(|f| f.starts_with("h:")).count()
    };
    let mine = client
        .reentrant_lock(name)
        .owner("job-7")
        .ttl(Duration::from_secs(60));
    // The node caches the scripts first.
    mine.acquire()
        .await
        .expect("hold")
        .release()
        .await
        .expect("release");
    let first = mine.acquire().await.expect("first hold");
    let second = mine.acquire().await.expect("second hold");
    assert_eq!(holds(), 2);
    let by_token = mine.clone();
    let (outcome, runs) = with_the_reply_lost(server, proxy, || holds() < 2, async move {
        by_token.release_by_token("job-7").await
    })
    .await;
    assert!(
        runs >= 2,
        "the driver did not run it again ({runs} script calls)"
    );
    // The re-sent call finds the hold it gave back gone; it may say so.
    assert!(
        matches!(outcome, Ok(()) | Err(Error::Lost { .. })),
        "{outcome:?}"
    );
    assert_eq!(holds(), 1, "one call gave back {} holds", 2 - holds());
    let theirs = other
        .reentrant_lock(name)
        .owner("job-8")
        .try_acquire()
        .await
        .expect("try_acquire");
    assert!(theirs.is_none(), "job-8 took the lock while job-7 holds it");
    drop((first, second));
}

/// A lock release the driver runs twice: the first run frees the lock, the
/// second finds it gone. Nothing is held twice and nothing is left; the
/// caller is told `Lost`, as the README says (the reply of the first run
/// never came back, and a gone lease cannot tell who removed it).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_release_the_driver_runs_twice_frees_the_lock_and_reports_lost() {
    let name = "released-twice";
    let p = Proxied::start(name);
    let (server, proxy, key) = (p.server(), p.proxy(), &p.key);
    let (client, other) = (p.client().await, p.client().await);
    let exists = || -> bool {
        redis::cmd("EXISTS")
            .arg(key)
            .query::<i64>(&mut server.connection())
            .expect("EXISTS")
            == 1
    };
    let lock = client.lock(name).ttl(Duration::from_secs(60));
    // The node caches the scripts first.
    lock.acquire()
        .await
        .expect("acquire")
        .release()
        .await
        .expect("release");
    let guard = lock.acquire().await.expect("acquire");
    let (outcome, runs) =
        with_the_reply_lost(
            server,
            proxy,
            || !exists(),
            async move { guard.release().await },
        )
        .await;
    assert!(
        runs >= 2,
        "the driver did not run it again ({runs} script calls)"
    );
    assert!(matches!(outcome, Err(Error::Lost { .. })), "{outcome:?}");
    let again = other
        .lock(name)
        .try_acquire()
        .await
        .expect("try_acquire")
        .expect("the lock is free");
    again.release().await.expect("release");
}
