//! Topologies of several servers: a Redis Cluster, and a master with
//! replicas watched by Sentinels.

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use crate::ports::{PortGuard, reserve_free_port};
use crate::server::{RedisServer, server_version};

/// How long a topology may take to settle (cluster state ok, replicas in sync).
const SETTLE_TIMEOUT: Duration = Duration::from_secs(30);
/// Environment variable that overrides the path of the `redis-cli` binary
/// that creates and reshards clusters (`valkey-cli` for Valkey).
const CLI_ENV: &str = "LEASEHOLD_REDIS_CLI";

/// A Redis Cluster on loopback: `masters` masters with `replicas` replicas
/// each, slots spread by `redis-cli --cluster create`. Every node is a
/// [`RedisServer`] (killed on drop, log printed on failure).
///
/// ```no_run
/// let cluster = leasehold_testkit::RedisCluster::start(3, 1);
/// assert_eq!(cluster.nodes().len(), 6);
/// ```
#[derive(Debug)]
pub struct RedisCluster {
    nodes: Vec<RedisServer>,
    /// Replicas the cluster was created with (masters x replicas each).
    replicas: usize,
    _bus_ports: Vec<Option<PortGuard>>,
}

impl RedisCluster {
    /// Starts the nodes, creates the cluster and waits until every node
    /// reports `cluster_state:ok` and every replica is in sync.
    ///
    /// Panics before starting anything if `redis-cli` cannot be found
    /// (`$LEASEHOLD_REDIS_CLI`, else `PATH`).
    pub fn start(masters: usize, replicas: usize) -> RedisCluster {
        let cli = redis_cli();
        let total = masters * (1 + replicas);
        // Redis 7 takes the bus port as `cluster-port`; before, it is the
        // node's port + 10000, which the node's builder reserves with it.
        let classic_bus = server_version() < (7, 0);
        let bus_ports: Vec<Option<PortGuard>> = (0..total)
            .map(|_| (!classic_bus).then(reserve_free_port))
            .collect();
        let nodes: Vec<RedisServer> = std::thread::scope(|s| {
            let handles: Vec<_> = bus_ports
                .iter()
                .map(|bus| {
                    let bus = bus.as_ref().map(|b| b.port().to_string());
                    s.spawn(move || {
                        let mut node = RedisServer::builder()
                            .arg("cluster-enabled", "yes")
                            .arg("cluster-config-file", "nodes.conf")
                            .arg("cluster-node-timeout", "2000")
                            .memory_dir();
                        node = match &bus {
                            Some(bus) => node.arg("cluster-port", bus),
                            None => node.classic_cluster_bus(),
                        };
                        node.start()
                    })
                })
                .collect();
            handles
                .into_iter()
                .map(|h| h.join().unwrap_or_else(|e| std::panic::resume_unwind(e)))
                .collect()
        });
        let mut args: Vec<String> = vec!["--cluster".into(), "create".into()];
        args.extend(nodes.iter().map(|n| format!("127.0.0.1:{}", n.port())));
        args.extend([
            "--cluster-replicas".into(),
            replicas.to_string(),
            "--cluster-yes".into(),
        ]);
        let out = run_cli(&cli, &args);
        let cluster = RedisCluster {
            nodes,
            replicas: masters * replicas,
            _bus_ports: bus_ports,
        };
        assert!(
            out.status.success(),
            "leasehold-testkit: redis-cli --cluster create failed:\n{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        cluster.wait_until_ok();
        cluster
    }

    /// Every node, masters and replicas.
    pub fn nodes(&self) -> &[RedisServer] {
        &self.nodes
    }

    /// Every node, to inject faults (kill, pause, restart).
    pub fn nodes_mut(&mut self) -> &mut [RedisServer] {
        &mut self.nodes
    }

    /// `redis://127.0.0.1:PORT` of every node.
    pub fn urls(&self) -> Vec<String> {
        self.nodes.iter().map(RedisServer::url).collect()
    }

    /// The node on `port`.
    pub fn node(&self, port: u16) -> &RedisServer {
        self.nodes
            .iter()
            .find(|n| n.port() == port)
            .unwrap_or_else(|| panic!("leasehold-testkit: no cluster node on port {port}"))
    }

    /// Ports of the nodes that are masters now.
    pub fn master_ports(&self) -> Vec<u16> {
        self.nodes
            .iter()
            .filter(|n| role(n) == "master")
            .map(RedisServer::port)
            .collect()
    }

    /// Port of the master serving `key` now (CLUSTER KEYSLOT + CLUSTER SLOTS).
    pub fn master_of(&self, key: &str) -> u16 {
        let mut con = self.nodes[0].connection();
        let slot: i64 = redis::cmd("CLUSTER")
            .arg("KEYSLOT")
            .arg(key)
            .query(&mut con)
            .expect("CLUSTER KEYSLOT");
        let slots: Vec<Vec<redis::Value>> = redis::cmd("CLUSTER")
            .arg("SLOTS")
            .query(&mut con)
            .expect("CLUSTER SLOTS");
        for range in slots {
            if let [
                redis::Value::Int(start),
                redis::Value::Int(end),
                redis::Value::Array(master),
                ..,
            ] = range.as_slice()
                && (*start..=*end).contains(&slot)
                && let Some(redis::Value::Int(port)) = master.get(1)
            {
                return u16::try_from(*port).expect("port");
            }
        }
        panic!("leasehold-testkit: no master serves slot {slot}")
    }

    /// The cluster node id of the node on `port` (`CLUSTER MYID`).
    pub fn node_id(&self, port: u16) -> String {
        redis::cmd("CLUSTER")
            .arg("MYID")
            .query(&mut self.node(port).connection())
            .expect("CLUSTER MYID")
    }

    /// How many slots the master on `port` serves now (`CLUSTER SLOTS`).
    pub fn slot_count(&self, port: u16) -> usize {
        let slots: Vec<Vec<redis::Value>> = redis::cmd("CLUSTER")
            .arg("SLOTS")
            .query(&mut self.node(port).connection())
            .expect("CLUSTER SLOTS");
        slots
            .iter()
            .filter_map(|range| match range.as_slice() {
                [
                    redis::Value::Int(start),
                    redis::Value::Int(end),
                    redis::Value::Array(master),
                    ..,
                ] if master.get(1) == Some(&redis::Value::Int(i64::from(port))) => {
                    usize::try_from(end - start + 1).ok()
                }
                _ => None,
            })
            .sum()
    }

    /// Moves `slots` slots, with their keys, from the master on `from` to
    /// the master on `to` (`redis-cli --cluster reshard`, which migrates
    /// slot by slot while the cluster serves clients), then waits until the
    /// cluster is ok again. Blocks until done; from async code run it on
    /// a blocking thread. Panics (with redis-cli's output) if it fails.
    pub fn reshard(&self, from: u16, to: u16, slots: usize) {
        let (from_id, to_id) = (self.node_id(from), self.node_id(to));
        let out = run_cli(
            &redis_cli(),
            &[
                "--cluster",
                "reshard",
                &format!("127.0.0.1:{from}"),
                "--cluster-from",
                &from_id,
                "--cluster-to",
                &to_id,
                "--cluster-slots",
                &slots.to_string(),
                "--cluster-yes",
            ],
        );
        assert!(
            out.status.success(),
            "leasehold-testkit: redis-cli --cluster reshard {from} -> {to} failed:\n{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        self.wait_until_ok();
    }

    /// Moves the slot of `key`, with its keys, from the master serving it to
    /// the master on `to`, the way `redis-cli --cluster reshard` moves each
    /// slot: `SETSLOT IMPORTING` on `to`, `MIGRATING` on the owner, `MIGRATE`
    /// of its keys (bounded batches), then `SETSLOT NODE` on both and on
    /// every other master; waits until the cluster is ok again. Panics if
    /// `to` serves it already or a step fails.
    pub fn move_slot_of(&self, key: &str, to: u16) {
        let from = self.master_of(key);
        assert_ne!(from, to, "leasehold-testkit: {key} lives on {to} already");
        let slot: i64 = redis::cmd("CLUSTER")
            .arg("KEYSLOT")
            .arg(key)
            .query(&mut self.node(from).connection())
            .expect("CLUSTER KEYSLOT");
        let (from_id, to_id) = (self.node_id(from), self.node_id(to));
        let setslot = |port: u16, args: &[&str]| {
            let _: () = redis::cmd("CLUSTER")
                .arg("SETSLOT")
                .arg(slot)
                .arg(args)
                .query(&mut self.node(port).connection())
                .unwrap_or_else(|e| panic!("CLUSTER SETSLOT {slot} {args:?} on {port}: {e}"));
        };
        setslot(to, &["IMPORTING", &from_id]);
        setslot(from, &["MIGRATING", &to_id]);
        let mut source = self.node(from).connection();
        // Bounded: a slot of a test holds few keys; 1000 batches is plenty.
        for _ in 0..1000 {
            let keys: Vec<String> = redis::cmd("CLUSTER")
                .arg("GETKEYSINSLOT")
                .arg(slot)
                .arg(100)
                .query(&mut source)
                .expect("CLUSTER GETKEYSINSLOT");
            if keys.is_empty() {
                break;
            }
            let _: redis::Value = redis::cmd("MIGRATE")
                .arg("127.0.0.1")
                .arg(to)
                .arg("")
                .arg(0)
                .arg(5000)
                .arg("KEYS")
                .arg(&keys)
                .query(&mut source)
                .unwrap_or_else(|e| panic!("MIGRATE of slot {slot} to {to}: {e}"));
        }
        setslot(to, &["NODE", &to_id]);
        setslot(from, &["NODE", &to_id]);
        for port in self.master_ports() {
            if port != from && port != to {
                setslot(port, &["NODE", &to_id]);
            }
        }
        self.wait_until_ok();
    }

    /// How many cluster bus messages of `kind` every running node has sent
    /// so far, added up: `cluster_stats_messages_<kind>_sent` of `CLUSTER
    /// INFO` (`publish` for a PUBLISH forwarded to every node,
    /// `publishshard` for an SPUBLISH forwarded within its shard, `ping`..).
    pub fn bus_messages_sent(&self, kind: &str) -> u64 {
        let field = format!("cluster_stats_messages_{kind}_sent:");
        self.nodes
            .iter()
            .filter(|n| n.is_running())
            .map(|n| {
                let info: String = redis::cmd("CLUSTER")
                    .arg("INFO")
                    .query(&mut n.connection())
                    .expect("CLUSTER INFO");
                info.lines()
                    .find_map(|l| l.strip_prefix(&field))
                    .map_or(0, |v| v.trim().parse::<u64>().expect("a counter"))
            })
            .sum()
    }

    /// Waits until every running node reports `cluster_state:ok` and agrees
    /// on one master per slot range, and every replica's link is up.
    pub fn wait_until_ok(&self) {
        let deadline = Instant::now() + SETTLE_TIMEOUT;
        // A replica counts once its link to its master is up; right after
        // `--cluster create` a node meant as a replica may still be a master.
        let stopped = self.nodes.iter().filter(|n| !n.is_running()).count();
        let replicas_expected = self.replicas.saturating_sub(stopped);
        loop {
            let replicas_up = self
                .nodes
                .iter()
                .filter(|n| n.is_running())
                .filter(|n| {
                    let repl: String = redis::cmd("INFO")
                        .arg("replication")
                        .query(&mut n.connection())
                        .unwrap_or_default();
                    repl.contains("role:slave") && repl.contains("master_link_status:up")
                })
                .count();
            let ok = replicas_up >= replicas_expected
                && self.nodes.iter().filter(|n| n.is_running()).all(|n| {
                    let mut con = n.connection();
                    let info: String = redis::cmd("CLUSTER")
                        .arg("INFO")
                        .query(&mut con)
                        .unwrap_or_default();
                    let repl: String = redis::cmd("INFO")
                        .arg("replication")
                        .query(&mut con)
                        .unwrap_or_default();
                    info.contains("cluster_state:ok")
                        && (repl.contains("role:master") || repl.contains("master_link_status:up"))
                });
            if ok {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "leasehold-testkit: cluster not ok after {SETTLE_TIMEOUT:?}"
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }
}

/// The `redis-cli` binary: `$LEASEHOLD_REDIS_CLI`, else `redis-cli` on `PATH`.
/// Panics with the install command if neither is there.
fn redis_cli() -> PathBuf {
    if let Some(path) = std::env::var_os(CLI_ENV) {
        let path = PathBuf::from(path);
        assert!(
            path.is_file(),
            "leasehold-testkit: {CLI_ENV}={} does not exist or is not a file.\n\
             Unset it to use redis-cli from PATH, or install Redis with:\n    {}",
            path.display(),
            crate::INSTALL_HINT
        );
        return path;
    }
    let path_var = std::env::var_os("PATH").unwrap_or_else(|| OsString::from("/usr/bin:/bin"));
    std::env::split_paths(&path_var)
        .map(|dir| dir.join("redis-cli"))
        .find(|candidate| candidate.is_file())
        .unwrap_or_else(|| {
            panic!(
                "leasehold-testkit: redis-cli not found on PATH; clusters are created with it. \
                 Install it with:\n    {}\nor point {CLI_ENV} at a redis-cli (or valkey-cli) \
                 binary.",
                crate::INSTALL_HINT
            )
        })
}

/// Runs `cli` with `args` and returns what it printed.
fn run_cli(cli: &Path, args: &[impl AsRef<std::ffi::OsStr>]) -> std::process::Output {
    Command::new(cli).args(args).output().unwrap_or_else(|e| {
        panic!(
            "leasehold-testkit: cannot run {}: {e}\ninstall it with: {}",
            cli.display(),
            crate::INSTALL_HINT
        )
    })
}

/// `master` or `slave` (or `sentinel`), from ROLE.
fn role(server: &RedisServer) -> String {
    let role: Vec<redis::Value> = redis::cmd("ROLE")
        .query(&mut server.connection())
        .expect("ROLE");
    match role.first() {
        Some(redis::Value::BulkString(r)) => String::from_utf8_lossy(r).into_owned(),
        Some(redis::Value::SimpleString(r)) => r.clone(),
        other => panic!("leasehold-testkit: ROLE answered {other:?}"),
    }
}

/// A master with replicas, watched by Sentinels under one name.
///
/// ```no_run
/// let set = leasehold_testkit::SentinelSet::start("mymaster", 2, 3);
/// assert_eq!(set.sentinel_urls().len(), 3);
/// ```
#[derive(Debug)]
pub struct SentinelSet {
    name: String,
    /// The first server is the first master; then the replicas.
    servers: Vec<RedisServer>,
    sentinels: Vec<RedisServer>,
}

impl SentinelSet {
    /// Starts the master, `replicas` replicas and `sentinels` sentinels
    /// (quorum: a majority of them), and waits until the replicas are in
    /// sync and every sentinel knows every replica and sentinel.
    pub fn start(name: &str, replicas: usize, sentinels: usize) -> SentinelSet {
        let master = RedisServer::start();
        let master_port = master.port().to_string();
        let mut servers = vec![master];
        servers.extend(crate::server::start_many(replicas, || {
            RedisServer::builder()
                .arg("replicaof", &format!("127.0.0.1 {master_port}"))
                .arg("replica-announce-ip", "127.0.0.1")
        }));
        let quorum = u32::try_from(sentinels / 2 + 1).expect("quorum");
        let port = servers[0].port();
        let sentinels = crate::server::start_many(sentinels, || {
            RedisServer::builder().sentinel(name, port, quorum)
        });
        let set = SentinelSet {
            name: name.to_owned(),
            servers,
            sentinels,
        };
        set.wait_until_settled(replicas);
        set
    }

    /// The name the sentinels monitor the master under.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// `redis://127.0.0.1:PORT` of every sentinel.
    pub fn sentinel_urls(&self) -> Vec<String> {
        self.sentinels.iter().map(RedisServer::url).collect()
    }

    /// The data servers (first master first, then the replicas).
    pub fn servers(&self) -> &[RedisServer] {
        &self.servers
    }

    /// The sentinels.
    pub fn sentinels(&self) -> &[RedisServer] {
        &self.sentinels
    }

    /// Port of the master as the first sentinel names it.
    pub fn master_port(&self) -> u16 {
        let (_, port): (String, u16) = redis::cmd("SENTINEL")
            .arg("GET-MASTER-ADDR-BY-NAME")
            .arg(&self.name)
            .query(&mut self.sentinels[0].connection())
            .expect("SENTINEL GET-MASTER-ADDR-BY-NAME");
        port
    }

    /// A coordinated failover (`SENTINEL FAILOVER`); returns the new
    /// master's port once every sentinel names it and it says it is master.
    pub fn failover(&self) -> u16 {
        let old = self.master_port();
        let deadline = Instant::now() + SETTLE_TIMEOUT;
        loop {
            let r: redis::RedisResult<String> = redis::cmd("SENTINEL")
                .arg("FAILOVER")
                .arg(&self.name)
                .query(&mut self.sentinels[0].connection());
            match r {
                Ok(_) => break,
                // NOGOODSLAVE while replicas are still being discovered.
                Err(e) if Instant::now() < deadline => {
                    let _ = e;
                    std::thread::sleep(Duration::from_millis(200));
                }
                Err(e) => panic!("leasehold-testkit: SENTINEL FAILOVER: {e}"),
            }
        }
        loop {
            let named: Vec<u16> = self
                .sentinels
                .iter()
                .map(|s| {
                    redis::cmd("SENTINEL")
                        .arg("GET-MASTER-ADDR-BY-NAME")
                        .arg(&self.name)
                        .query::<(String, u16)>(&mut s.connection())
                        .map(|(_, p)| p)
                        .unwrap_or(old)
                })
                .collect();
            let new = named[0];
            if new != old
                && named.iter().all(|&p| p == new)
                && self
                    .servers
                    .iter()
                    .any(|s| s.port() == new && role(s) == "master")
            {
                return new;
            }
            assert!(
                Instant::now() < deadline,
                "leasehold-testkit: failover not done after {SETTLE_TIMEOUT:?} (named {named:?})"
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    fn wait_until_settled(&self, replicas: usize) {
        let deadline = Instant::now() + SETTLE_TIMEOUT;
        loop {
            let synced = self.servers[1..].iter().all(|r| {
                let info: String = redis::cmd("INFO")
                    .arg("replication")
                    .query(&mut r.connection())
                    .unwrap_or_default();
                info.contains("master_link_status:up")
            });
            let known = self.sentinels.iter().all(|s| {
                let master: Vec<String> = redis::cmd("SENTINEL")
                    .arg("MASTER")
                    .arg(&self.name)
                    .query(&mut s.connection())
                    .unwrap_or_default();
                let field = |name: &str| {
                    master
                        .iter()
                        .position(|f| f == name)
                        .and_then(|i| master.get(i + 1))
                        .and_then(|v| v.parse::<usize>().ok())
                        .unwrap_or(0)
                };
                field("num-slaves") >= replicas
                    && field("num-other-sentinels") + 1 >= self.sentinels.len()
            });
            if synced && known {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "leasehold-testkit: sentinel set not settled after {SETTLE_TIMEOUT:?}"
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }
}
