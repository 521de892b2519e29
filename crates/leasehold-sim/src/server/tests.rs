//! Fast checks of the simulated server: expiry, NOSCRIPT, pcall errors,
//! conversions, pub/sub, and the lock scripts as shipped.
//! (`tests/differential.rs` holds it equal to real servers.)

use redis::{PushKind, Value};

use super::reply::{fmt_g17, glob};
use super::{DumpValue, Flavor, Server};

const PRELUDE: &str = include_str!("../../../leasehold/src/scripts/prelude.lua");
const LOCK_ACQUIRE: &str = include_str!("../../../leasehold/src/scripts/lock_acquire.lua");
const LOCK_RELEASE: &str = include_str!("../../../leasehold/src/scripts/lock_release.lua");

/// 2024-01-01T00:00:00Z in µs.
const T0: u64 = 1_704_067_200_000_000;

fn cmd(s: &mut Server, now_us: u64, args: &[&str]) -> Value {
    let args: Vec<Vec<u8>> = args.iter().map(|a| a.as_bytes().to_vec()).collect();
    s.exec(1, now_us, &args)
}

fn bulk(s: &str) -> Value {
    Value::BulkString(s.as_bytes().to_vec())
}

fn code(v: &Value) -> &str {
    match v {
        Value::ServerError(e) => e.code(),
        other => panic!("not an error: {other:?}"),
    }
}

fn eval(s: &mut Server, now_us: u64, script: &str, keys: &[&str], argv: &[&str]) -> Value {
    let n = keys.len().to_string();
    let mut args = vec!["EVAL", script, n.as_str()];
    args.extend(keys);
    args.extend(argv);
    cmd(s, now_us, &args)
}

#[test]
fn a_key_lives_until_its_expiry_ms_and_not_after() {
    let mut s = Server::new(Flavor::Redis7);
    assert_eq!(
        cmd(&mut s, T0, &["SET", "k", "v", "PX", "100"]),
        Value::Okay
    );
    assert_eq!(cmd(&mut s, T0 + 99_999, &["PTTL", "k"]), Value::Int(1));
    // now == when: still there (Redis expires at now > when), with PTTL 0.
    assert_eq!(cmd(&mut s, T0 + 100_000, &["PTTL", "k"]), Value::Int(0));
    assert_eq!(cmd(&mut s, T0 + 100_999, &["GET", "k"]), bulk("v"));
    assert_eq!(cmd(&mut s, T0 + 101_000, &["GET", "k"]), Value::Nil);
    assert_eq!(cmd(&mut s, T0 + 101_000, &["PTTL", "k"]), Value::Int(-2));
    assert!(s.dump(T0 + 101_000).is_empty());
}

#[test]
fn set_options_and_pexpire_flags() {
    let mut s = Server::new(Flavor::Redis7);
    assert_eq!(
        cmd(&mut s, T0, &["SET", "k", "a", "NX", "PX", "50", "GET"]),
        Value::Nil
    );
    assert_eq!(
        cmd(&mut s, T0, &["SET", "k", "b", "NX", "PX", "50", "GET"]),
        bulk("a")
    );
    assert_eq!(
        cmd(&mut s, T0, &["SET", "k", "c", "KEEPTTL", "GET"]),
        bulk("a")
    );
    assert_eq!(cmd(&mut s, T0, &["PTTL", "k"]), Value::Int(50));
    assert_eq!(
        cmd(&mut s, T0, &["PEXPIRE", "k", "40", "GT"]),
        Value::Int(0)
    );
    assert_eq!(
        cmd(&mut s, T0, &["PEXPIRE", "k", "60", "GT"]),
        Value::Int(1)
    );
    assert_eq!(cmd(&mut s, T0, &["SET", "k", "d"]), Value::Okay);
    assert_eq!(cmd(&mut s, T0, &["PTTL", "k"]), Value::Int(-1));
    // No expiry is the latest of all for GT.
    assert_eq!(
        cmd(&mut s, T0, &["PEXPIRE", "k", "60", "GT"]),
        Value::Int(0)
    );
    assert_eq!(
        cmd(&mut s, T0, &["SET", "k", "e", "PXAT", "1704067200500"]),
        Value::Okay
    );
    assert_eq!(cmd(&mut s, T0, &["PTTL", "k"]), Value::Int(500));
    assert_eq!(code(&cmd(&mut s, T0, &["SET", "k", "v", "PX", "0"])), "ERR");
    assert_eq!(
        code(&cmd(&mut s, T0, &["SET", "k", "v", "NX", "XX"])),
        "ERR"
    );
    assert_eq!(cmd(&mut s, T0, &["PEXPIRE", "k", "0"]), Value::Int(1));
    assert_eq!(cmd(&mut s, T0, &["EXISTS", "k"]), Value::Int(0));

    let mut old = Server::new(Flavor::Redis62);
    assert_eq!(
        code(&cmd(&mut old, T0, &["SET", "k", "a", "NX", "GET"])),
        "ERR"
    );
    assert_eq!(
        code(&cmd(&mut old, T0, &["PEXPIRE", "k", "10", "GT"])),
        "ERR"
    );
}

#[test]
fn wrong_types_answer_wrongtype() {
    let mut s = Server::new(Flavor::Redis7);
    cmd(&mut s, T0, &["HSET", "h", "f", "v"]);
    assert_eq!(code(&cmd(&mut s, T0, &["GET", "h"])), "WRONGTYPE");
    assert_eq!(
        code(&cmd(&mut s, T0, &["ZADD", "h", "1", "m"])),
        "WRONGTYPE"
    );
    assert_eq!(
        code(&cmd(&mut s, T0, &["SET", "h", "v", "GET"])),
        "WRONGTYPE"
    );
    assert_eq!(
        cmd(&mut s, T0, &["MGET", "h", "nope"]),
        Value::Array(vec![Value::Nil, Value::Nil])
    );
    assert_eq!(
        cmd(&mut s, T0, &["TYPE", "h"]),
        Value::SimpleString("hash".into())
    );
    // SET without GET overwrites any type.
    assert_eq!(cmd(&mut s, T0, &["SET", "h", "v"]), Value::Okay);
}

#[test]
fn sorted_sets_order_and_ranges() {
    let mut s = Server::new(Flavor::Redis7);
    assert_eq!(
        cmd(&mut s, T0, &["ZADD", "z", "2", "b", "1", "c", "2", "a"]),
        Value::Int(3)
    );
    let range = cmd(&mut s, T0, &["ZRANGE", "z", "0", "-1"]);
    assert_eq!(range, Value::Array(vec![bulk("c"), bulk("a"), bulk("b")]));
    let top = cmd(&mut s, T0, &["ZRANGE", "z", "0", "0", "REV", "WITHSCORES"]);
    assert_eq!(
        top,
        Value::Array(vec![Value::Array(vec![bulk("b"), Value::Double(2.0)])])
    );
    let above = cmd(&mut s, T0, &["ZRANGE", "z", "(1", "+inf", "BYSCORE"]);
    assert_eq!(above, Value::Array(vec![bulk("a"), bulk("b")]));
    assert_eq!(
        cmd(&mut s, T0, &["ZADD", "z", "NX", "5", "a"]),
        Value::Int(0)
    );
    assert_eq!(
        cmd(&mut s, T0, &["ZADD", "z", "XX", "5", "zz"]),
        Value::Int(0)
    );
    assert_eq!(cmd(&mut s, T0, &["ZSCORE", "z", "a"]), Value::Double(2.0));
    assert_eq!(
        cmd(&mut s, T0, &["ZREMRANGEBYSCORE", "z", "-inf", "1"]),
        Value::Int(1)
    );
    assert_eq!(cmd(&mut s, T0, &["ZREM", "z", "a", "b"]), Value::Int(2));
    assert_eq!(
        cmd(&mut s, T0, &["EXISTS", "z"]),
        Value::Int(0),
        "an empty zset is deleted"
    );
}

#[test]
fn evalsha_of_an_unknown_script_answers_noscript_until_loaded() {
    let mut s = Server::new(Flavor::Redis7);
    let body = "return 7";
    let sha = redis::Script::new(body).get_hash().to_owned();
    assert_eq!(code(&cmd(&mut s, T0, &["EVALSHA", &sha, "0"])), "NOSCRIPT");
    assert_eq!(cmd(&mut s, T0, &["SCRIPT", "LOAD", body]), bulk(&sha));
    assert_eq!(cmd(&mut s, T0, &["EVALSHA", &sha, "0"]), Value::Int(7));
    assert_eq!(
        cmd(&mut s, T0, &["SCRIPT", "EXISTS", &sha, "0000"]),
        Value::Array(vec![Value::Int(1), Value::Int(0)])
    );
    s.flush_scripts();
    assert_eq!(code(&cmd(&mut s, T0, &["EVALSHA", &sha, "0"])), "NOSCRIPT");
    // EVAL caches the script too.
    assert_eq!(cmd(&mut s, T0, &["EVAL", body, "0"]), Value::Int(7));
    assert_eq!(
        cmd(&mut s, T0, &["EVALSHA", &sha.to_uppercase(), "0"]),
        Value::Int(7)
    );
}

#[test]
fn lua_conversions_both_ways() {
    let mut s = Server::new(Flavor::Redis7);
    let v = eval(
        &mut s,
        T0,
        "return {1, 'two', 3.9, -3.9, true, false, nil, 8}",
        &[],
        &[],
    );
    assert_eq!(
        v,
        Value::Array(vec![
            Value::Int(1),
            bulk("two"),
            Value::Int(3),
            Value::Int(-3),
            Value::Int(1),
            Value::Nil
        ])
    );
    assert_eq!(
        eval(&mut s, T0, "return redis.status_reply('FINE')", &[], &[]),
        Value::SimpleString("FINE".into())
    );
    assert_eq!(
        eval(&mut s, T0, "return redis.call('SET', 'k', 'v')", &[], &[]),
        Value::Okay
    );
    assert_eq!(
        code(&eval(
            &mut s,
            T0,
            "return redis.error_reply('MINE x')",
            &[],
            &[]
        )),
        "MINE"
    );
    // Numbers become %.17g text; replies come back as Lua sees them.
    let script = "redis.call('SET', 'n', 1704067200000001) redis.call('SET', 'f', 0.1) \
                  redis.call('ZADD', 'z', 2.5, 'm') \
                  local r = redis.call('ZRANGE', 'z', 0, -1, 'WITHSCORES') \
                  return {redis.call('GET', 'n'), redis.call('GET', 'f'), r[2], \
                          type(redis.call('GET', 'none')), redis.call('PTTL', 'n'), \
                          redis.call('TIME')[1]}";
    assert_eq!(
        eval(&mut s, T0 + 5, script, &[], &[]),
        Value::Array(vec![
            bulk("1704067200000001"),
            bulk("0.10000000000000001"),
            bulk("2.5"),
            bulk("boolean"),
            Value::Int(-1),
            bulk("1704067200"),
        ])
    );
    let keys = eval(
        &mut s,
        T0,
        "return {KEYS[1], ARGV[2], #ARGV}",
        &["a"],
        &["x", "y"],
    );
    assert_eq!(
        keys,
        Value::Array(vec![bulk("a"), bulk("y"), Value::Int(2)])
    );
}

#[test]
fn call_raises_a_command_error_and_pcall_returns_it() {
    let mut s = Server::new(Flavor::Redis7);
    cmd(&mut s, T0, &["SET", "s", "v"]);
    let raised = eval(
        &mut s,
        T0,
        "redis.call('SET', 'w', '1') return redis.call('HGET', 's', 'f')",
        &[],
        &[],
    );
    assert_eq!(code(&raised), "WRONGTYPE");
    assert_eq!(
        cmd(&mut s, T0, &["GET", "w"]),
        bulk("1"),
        "writes before the error stay"
    );
    let caught = eval(
        &mut s,
        T0,
        "local r = redis.pcall('HGET', 's', 'f') return {type(r), r.err}",
        &[],
        &[],
    );
    assert_eq!(
        caught,
        Value::Array(vec![
            bulk("table"),
            bulk("WRONGTYPE Operation against a key holding the wrong kind of value")
        ])
    );
    // Returning pcall's table answers its error.
    assert_eq!(
        code(&eval(
            &mut s,
            T0,
            "return redis.pcall('HGET', 's', 'f')",
            &[],
            &[]
        )),
        "WRONGTYPE"
    );
    assert_eq!(code(&eval(&mut s, T0, "return nope", &[], &[])), "ERR");
    assert_eq!(code(&eval(&mut s, T0, "x = 1", &[], &[])), "ERR");
    assert_eq!(code(&eval(&mut s, T0, "return (", &[], &[])), "ERR");

    // 6.2 makes any failure of a script an ERR.
    let mut old = Server::new(Flavor::Redis62);
    cmd(&mut old, T0, &["SET", "s", "v"]);
    assert_eq!(
        code(&eval(
            &mut old,
            T0,
            "return redis.call('HGET', 's', 'f')",
            &[],
            &[]
        )),
        "ERR"
    );
    assert_eq!(
        eval(
            &mut old,
            T0,
            "return tostring(redis.REDIS_VERSION)",
            &[],
            &[]
        ),
        bulk("nil")
    );
}

#[test]
fn publish_delivers_to_each_subscriber_and_counts_them() {
    let mut s = Server::new(Flavor::Redis7);
    let sub = s.exec(7, T0, &[b"SUBSCRIBE".to_vec(), b"ch".to_vec()]);
    assert_eq!(
        sub,
        Value::Push {
            kind: PushKind::Subscribe,
            data: vec![bulk("ch"), Value::Int(1)]
        }
    );
    s.exec(8, T0, &[b"SSUBSCRIBE".to_vec(), b"ch".to_vec()]);
    assert_eq!(cmd(&mut s, T0, &["PUBLISH", "ch", "hi"]), Value::Int(1));
    assert_eq!(
        eval(
            &mut s,
            T0,
            "return redis.call('SPUBLISH', 'ch', 'yo')",
            &[],
            &[]
        ),
        Value::Int(1)
    );
    let got = s.take_deliveries();
    assert_eq!(got.len(), 2);
    assert_eq!(
        (got[0].conn, &got[0].push.kind, &got[0].push.data),
        (7, &PushKind::Message, &vec![bulk("ch"), bulk("hi")])
    );
    assert_eq!((got[1].conn, &got[1].push.kind), (8, &PushKind::SMessage));
    assert!(s.take_deliveries().is_empty());
    s.disconnect(7);
    assert_eq!(cmd(&mut s, T0, &["PUBLISH", "ch", "hi"]), Value::Int(0));
    let unsub = s.exec(8, T0, &[b"SUNSUBSCRIBE".to_vec()]);
    assert_eq!(
        unsub,
        Value::Push {
            kind: PushKind::SUnsubscribe,
            data: vec![bulk("ch"), Value::Int(0)]
        }
    );
}

#[test]
fn the_shipped_lock_scripts_acquire_queue_and_hand_off() {
    let mut s = Server::new(Flavor::Redis7);
    let acquire = format!("{PRELUDE}{LOCK_ACQUIRE}");
    let release = format!("{PRELUDE}{LOCK_RELEASE}");
    let keys = ["p:{n}:lock", "p:{n}:fence", "p:{n}:queue", "p:{n}:alive"];
    let got = eval(
        &mut s,
        T0,
        &acquire,
        &keys,
        &["tokA", "1000", "1000", "3000", "1", "0", "1"],
    );
    assert_eq!(
        got,
        Value::Array(vec![Value::Int(1), Value::Int(T0 as i64)])
    );
    // B waits: it queues, and the release hands the lease to it.
    let got = eval(
        &mut s,
        T0 + 10,
        &acquire,
        &keys,
        &["tokB", "1000", "1000", "3000", "1", "0", "2"],
    );
    assert_eq!(
        got,
        Value::Array(vec![
            Value::Int(0),
            Value::Int(1000),
            Value::Int(1_704_067_203_000)
        ])
    );
    s.exec(
        2,
        T0,
        &[b"SUBSCRIBE".to_vec(), b"p:{n}:released:2".to_vec()],
    );
    let rkeys = [
        "p:{n}:lock",
        "p:{n}:released",
        "p:{n}:queue",
        "p:{n}:alive",
        "p:{n}:fence",
    ];
    let got = eval(
        &mut s,
        T0 + 20,
        &release,
        &rkeys,
        &["tokA", "500", "0", "1", "3000", "", "0", "1"],
    );
    assert_eq!(got, Value::Int(1));
    assert_eq!(cmd(&mut s, T0 + 20, &["GET", "p:{n}:lock"]), bulk("tokB"));
    let msgs = s.take_deliveries();
    assert_eq!(msgs.len(), 1);
    assert_eq!(msgs[0].conn, 2);
    // The fence is the next one after A's (one µs apart at most, by the clock).
    let dump = s.dump(T0 + 20);
    let fence = dump
        .iter()
        .find(|k| k.key == "p:{n}:fence")
        .expect("the fence key");
    assert_eq!(
        fence.value,
        DumpValue::String((T0 + 20).to_string().into_bytes())
    );
}

#[test]
fn glob_and_number_formats_are_redis_s() {
    assert!(glob(b"p:{*}:lock", b"p:{a}:lock"));
    assert!(glob(b"h?[a-c]\\*", b"hxb*"));
    assert!(!glob(b"h?[^a-c]", b"hxb"));
    assert!(!glob(b"*", b""));
    assert!(glob(b"a*", b"a"));
    assert_eq!(fmt_g17(0.1), "0.10000000000000001");
    assert_eq!(fmt_g17(1e17), "1e+17");
    assert_eq!(fmt_g17(123_456_789_012_345_678.0), "1.2345678901234568e+17");
    assert_eq!(fmt_g17(1.0 / 3.0), "0.33333333333333331");
    assert_eq!(fmt_g17(-2.5e-7), "-2.4999999999999999e-07");
    assert_eq!(fmt_g17(1_704_067_200_000_001.0), "1704067200000001");
}
