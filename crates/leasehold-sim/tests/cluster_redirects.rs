//! The simulated cluster's redirections against a real Redis Cluster's.
//!
//! The simulator decides, for each command a simulated cluster node gets,
//! whether the node runs it or answers MOVED, ASK, TRYAGAIN or CROSSSLOT
//! (`leasehold_sim::cluster::ClusterMap::route`, a model of Redis's
//! `getNodeByQuery`). Here a real cluster (the test kit's)
//! (three masters) is put in every state a slot goes through in a migration, with the keys
//! of a lock's slot on either side, and every command shape the library
//! sends (a script of one key, of several keys of one slot, of keys of two
//! slots), to either node, with and without ASKING, is sent to the real
//! node and asked of the model: the answers must be the same (the error's
//! code, the slot it names and the node it redirects to).

use leasehold_sim::cluster::{ClusterMap, slot};
use leasehold_testkit::RedisCluster;
use redis::Value;

/// What a node answered: "OK" (it ran the command), or an error's code, the
/// slot and the node (by name) it names.
fn answer_of(reply: redis::RedisResult<Value>, name_of_port: &dyn Fn(u16) -> String) -> String {
    match reply {
        Ok(_) => "OK".to_owned(),
        Err(e) => {
            let code = e.code().unwrap_or("?").to_owned();
            match e.redirect_node() {
                Some((addr, slot)) => {
                    let port: u16 = addr.rsplit(':').next().unwrap().parse().unwrap();
                    format!("{code} {slot} {}", name_of_port(port))
                }
                None => code,
            }
        }
    }
}

fn model_answer(reply: Result<(), Value>) -> String {
    match reply {
        Ok(()) => "OK".to_owned(),
        Err(Value::ServerError(e)) => {
            let details = e.details().unwrap_or("");
            let mut words = details.split_whitespace();
            match (e.code(), words.next(), words.next()) {
                (code @ ("MOVED" | "ASK"), Some(slot), Some(addr)) => {
                    let host = addr.rsplit_once(':').unwrap().0;
                    let (_, node) = ClusterMap::parse_host(host).unwrap();
                    format!("{code} {slot} {node}")
                }
                (code, _, _) => code.to_owned(),
            }
        }
        Err(other) => panic!("the model answered {other:?}"),
    }
}

#[test]
fn the_model_redirects_as_a_real_cluster_does_through_a_migration() {
    let cluster = RedisCluster::start(3, 0);
    let masters = cluster.master_ports();
    assert_eq!(masters.len(), 3);
    let name_of_port = |port: u16| format!("n{port}");
    // The lock's keys, as the library names them: one hash tag, one slot.
    let (lock, queue, fence) = ("lh:{x}:lock", "lh:{x}:queue", "lh:{x}:fence");
    let other = "lh:{y}:lock";
    let s = slot(lock.as_bytes());
    assert_ne!(s, slot(other.as_bytes()));
    let from = cluster.master_of(lock);
    let to = *masters.iter().find(|&&p| p != from).unwrap();
    let (from_id, to_id) = (cluster.node_id(from), cluster.node_id(to));
    let names: Vec<String> = masters.iter().map(|&p| name_of_port(p)).collect();
    let mut model = ClusterMap::new(&names, &[]);
    model.assign(s, &name_of_port(from));
    let mut seen = std::collections::BTreeMap::<String, usize>::new();
    // Every command shape against both nodes, with and without ASKING.
    let mut compare = |stage: &str, model: &ClusterMap| {
        let shapes: [&[&str]; 4] = [
            &[lock],
            &[lock, queue],
            &[lock, queue, fence],
            &[lock, other],
        ];
        for port in [from, to] {
            let node = cluster.node(port);
            for keys in shapes {
                for asking in [false, true] {
                    let mut con = node.connection();
                    if asking {
                        let _: () = redis::cmd("ASKING").query(&mut con).unwrap();
                    }
                    let real = redis::cmd("EVAL")
                        .arg("return 1")
                        .arg(keys.len())
                        .arg(keys)
                        .query::<Value>(&mut con);
                    let present = |key: &[u8]| {
                        redis::cmd("EXISTS")
                            .arg(key)
                            .query::<i64>(&mut node.connection())
                            .map(|n| n == 1)
                            // A key the node does not serve is not there.
                            .unwrap_or(false)
                    };
                    let keys: Vec<&[u8]> = keys.iter().map(|k| k.as_bytes()).collect();
                    let expected = model.route(&name_of_port(port), 0, &keys, asking, |k| {
                        // Asked with ASKING on the importing node, as the
                        // real node counts its keys.
                        let mut con = node.connection();
                        let _: () = redis::cmd("ASKING").query(&mut con).unwrap();
                        let here: redis::RedisResult<i64> =
                            redis::cmd("EXISTS").arg(k).query(&mut con);
                        here.map(|n| n == 1).unwrap_or_else(|_| present(k))
                    });
                    let (real, expected) = (answer_of(real, &name_of_port), model_answer(expected));
                    assert_eq!(
                        real,
                        expected,
                        "{stage}: keys {keys:?} on {port} (asking {asking}): real {real}, model {expected}",
                        keys = keys
                            .iter()
                            .map(|k| String::from_utf8_lossy(k))
                            .collect::<Vec<_>>()
                    );
                    let code = real.split(' ').next().unwrap().to_owned();
                    *seen.entry(code).or_default() += 1;
                }
            }
        }
    };
    let set = |key: &str| {
        let _: () = redis::cmd("SET")
            .arg(key)
            .arg("v")
            .query(&mut cluster.node(from).connection())
            .unwrap();
    };
    let setslot = |port: u16, args: &[&str]| {
        let _: () = redis::cmd("CLUSTER")
            .arg("SETSLOT")
            .arg(s)
            .arg(args)
            .query(&mut cluster.node(port).connection())
            .unwrap();
    };
    let migrate = |key: &str| {
        let _: Value = redis::cmd("MIGRATE")
            .arg("127.0.0.1")
            .arg(to)
            .arg(key)
            .arg(0)
            .arg(5000)
            .query(&mut cluster.node(from).connection())
            .unwrap();
    };

    compare("stable, no keys", &model);
    set(lock);
    set(queue);
    compare("stable, keys on the owner", &model);
    setslot(to, &["IMPORTING", &from_id]);
    setslot(from, &["MIGRATING", &to_id]);
    model.migrating.insert(s, name_of_port(to));
    compare("migrating, every key still on the owner", &model);
    migrate(lock);
    compare("migrating, the lock key moved", &model);
    migrate(queue);
    compare("migrating, every key moved", &model);
    setslot(to, &["NODE", &to_id]);
    setslot(from, &["NODE", &to_id]);
    model.assign(s, &name_of_port(to));
    compare("moved", &model);
    // Every answer the model gives was met, and agreed on.
    for code in ["OK", "MOVED", "ASK", "TRYAGAIN", "CROSSSLOT"] {
        assert!(seen.contains_key(code), "no {code} among {seen:?}");
    }
    println!("answers compared, every one equal: {seen:?}");
}
