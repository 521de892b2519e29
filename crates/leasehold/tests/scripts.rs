//! The server-side contract of each script, apart from the Rust around it.
//! Each test runs the script exactly as shipped (its `.lua` file with the
//! shared prelude, as the client loads it) against a real server.

// A build without the feature this test needs fails here, loudly,
// rather than leaving the test out.
#[cfg(not(feature = "_raw"))]
compile_error!(
    "this test needs leasehold's `_raw` feature: `cargo test -p leasehold --all-features`"
);

use std::sync::LazyLock;

use leasehold_testkit::RedisServer;
use redis::{Commands, Connection, Value};

/// The script `name` as the client loads it.
fn shipped(name: &str) -> String {
    leasehold::raw::script_source(name).unwrap_or_else(|| panic!("no script {name}"))
}

static ACQUIRE: LazyLock<String> = LazyLock::new(|| shipped("lock_acquire"));
static RELEASE: LazyLock<String> = LazyLock::new(|| shipped("lock_release"));
static EXTEND: LazyLock<String> = LazyLock::new(|| shipped("lock_extend"));
static STATUS: LazyLock<String> = LazyLock::new(|| shipped("lock_status"));
static RETAKE: LazyLock<String> = LazyLock::new(|| shipped("lock_retake"));

const LOCK: &str = "t:{n}:lock";
const FENCE: &str = "t:{n}:fence";
const CHANNEL: &str = "t:{n}:released";
const QUEUE: &str = "t:{n}:queue";
const ALIVE: &str = "t:{n}:alive";
const WRITERS: &str = "t:{n}:writers";
/// The connection id the helpers pass: waiters queue as `<id>:<token>`,
/// and leases handed to them are announced on `HANDOFF` (the name
/// `LockKeys::handoff_channel` makes, checked in `src/key.rs`).
const CONN: &str = "conn1";
const HANDOFF: &str = "t:{n}:released:conn1";

/// The queue window the client sends (`QUEUE_WINDOW`), in ms.
const WINDOW: u64 = 3000;

/// lock_acquire.lua; `window_ms` 0 means "do not queue", else the caller
/// queues with that window.
fn lock_acquire(
    conn: &mut Connection,
    token: &str,
    ttl_ms: u64,
    window_ms: u64,
    already_queued: bool,
) -> redis::RedisResult<(i64, i64)> {
    lock_attempt(conn, token, ttl_ms, window_ms, already_queued, false).map(|r| (r[0], r[1]))
}

/// lock_acquire.lua with every argument, the fence memory as long as the
/// lease (as the client sends it); `fair` is ARGV[6]. Replies as the
/// script: `{1, fence}`, `{0, pttl}` or, queued, `{0, pttl, deadline}`.
fn lock_attempt(
    conn: &mut Connection,
    token: &str,
    ttl_ms: u64,
    window_ms: u64,
    already_queued: bool,
    fair: bool,
) -> redis::RedisResult<Vec<i64>> {
    let queues = match (window_ms, already_queued) {
        (0, _) => "0",
        (_, false) => "1",
        (_, true) => "2",
    };
    lock_attempt_marked(conn, token, ttl_ms, window_ms, queues, fair)
}

/// A lock attempt with the mark `queues` (ARGV[5] of lock_acquire.lua).
fn lock_attempt_marked(
    conn: &mut Connection,
    token: &str,
    ttl_ms: u64,
    window_ms: u64,
    queues: &str,
    fair: bool,
) -> redis::RedisResult<Vec<i64>> {
    redis::Script::new(&ACQUIRE)
        .key(LOCK)
        .key(FENCE)
        .key(QUEUE)
        .key(ALIVE)
        .arg(token)
        .arg(ttl_ms)
        .arg(ttl_ms)
        .arg(if window_ms == 0 { WINDOW } else { window_ms })
        .arg(queues)
        .arg(if fair { "1" } else { "0" })
        .arg(CONN)
        .invoke(conn)
}

fn acquire(conn: &mut Connection, token: &str, ttl_ms: u64) -> (i64, i64) {
    lock_acquire(conn, token, ttl_ms, 0, false).unwrap()
}

fn release(conn: &mut Connection, token: &str) -> i64 {
    lock_release(conn, token, false)
}

/// The TTL every waiter of these tests queues with (part of its member).
const WAITER_TTL: u64 = 10_000;

/// lock_release.lua; `publish_free` as a Redlock node runs it (ARGV[3]).
/// The caller may be a waiter that queued with [`WAITER_TTL`] (ARGV[6]).
fn lock_release(conn: &mut Connection, token: &str, publish_free: bool) -> i64 {
    release_call(token, publish_free, false)
        .invoke(conn)
        .unwrap()
}

/// The call of lock_release.lua by `token`, by plain PUBLISH; `drop_fence`
/// is ARGV[8].
fn release_call(
    token: &str,
    publish_free: bool,
    drop_fence: bool,
) -> redis::ScriptInvocation<'static> {
    static SCRIPT: LazyLock<redis::Script> = LazyLock::new(|| redis::Script::new(&RELEASE));
    let mut call = SCRIPT.prepare_invoke();
    call.key(LOCK)
        .key(CHANNEL)
        .key(QUEUE)
        .key(ALIVE)
        .key(FENCE)
        .arg(token)
        .arg(500)
        .arg(if publish_free { "1" } else { "0" })
        .arg(CONN)
        .arg(WINDOW)
        .arg(WAITER_TTL)
        .arg("0")
        .arg(if drop_fence { "1" } else { "0" });
    call
}

/// `conn` subscribed to `channel`, each read waiting up to `timeout`.
fn subscribe<'a>(
    conn: &'a mut Connection,
    channel: &str,
    timeout: std::time::Duration,
) -> redis::PubSub<'a> {
    let mut pubsub = conn.as_pubsub();
    pubsub.subscribe(channel).unwrap();
    pubsub.set_read_timeout(Some(timeout)).unwrap();
    pubsub
}

/// Makes the queued waiter `token` look as if it arrived `ms` earlier (and
/// has not tried since): past the window, it is dead.
fn backdate(conn: &mut Connection, token: &str, ms: u64) {
    let member = format!("{CONN}:{WAITER_TTL}:{token}");
    let arrival: f64 = conn.zscore(QUEUE, &member).unwrap();
    // Exact: an arrival is a whole number of µs, or half a µs more for a
    // waiter that tried again (lock_acquire.lua), and far below 2^52.
    let _: () = redis::cmd("ZADD")
        .arg(QUEUE)
        .arg("XX")
        .arg(arrival - (ms * 1000) as f64)
        .arg(&member)
        .query(conn)
        .unwrap();
}

/// lock_acquire.lua as one Redlock node runs it: no queue.
fn redlock_node_acquire(conn: &mut Connection, token: &str) -> (i64, i64) {
    redis::Script::new(&ACQUIRE)
        .key(LOCK)
        .key(FENCE)
        .key(QUEUE)
        .key(ALIVE)
        .arg(token)
        .arg(10_000)
        .arg(10_000)
        .arg(WINDOW)
        .arg("0")
        .arg("0")
        .arg(CONN)
        .invoke(conn)
        .unwrap()
}

#[test]
fn redlock_nodes_raise_fences_to_their_clock_and_publish_every_release() {
    let server = RedisServer::start();
    let mut conn = server.connection();
    // A counter far behind the clock, as a node that saw few acquisitions.
    let _: () = conn.set(FENCE, 5).unwrap();
    let (_, fence) = redlock_node_acquire(&mut conn, "a");
    let (secs, _): (i64, i64) = redis::cmd("TIME").query(&mut conn).unwrap();
    assert!(
        fence > (secs - 5) * 1_000_000,
        "fence {fence} not raised to the clock"
    );
    let mut sub_conn = server.connection();
    let mut pubsub = sub_conn.as_pubsub();
    pubsub.subscribe(CHANNEL).unwrap();
    assert_eq!(lock_release(&mut conn, "a", true), 1);
    pubsub
        .set_read_timeout(Some(std::time::Duration::from_secs(2)))
        .unwrap();
    let msg = pubsub.get_message().unwrap();
    assert_eq!(
        msg.get_payload::<String>().unwrap(),
        "",
        "an empty payload wakes one waiter per client"
    );
    let (_, next) = redlock_node_acquire(&mut conn, "b");
    assert!(next > fence);
}

/// The queued waiters' tokens, in order (members are
/// `<CONN>:<ttl>:<token>`, all of [`WAITER_TTL`] here).
fn queued(conn: &mut Connection) -> Vec<String> {
    let members: Vec<String> = conn.zrange(QUEUE, 0, -1).unwrap();
    members
        .into_iter()
        .map(|m| {
            m.strip_prefix(&format!("{CONN}:{WAITER_TTL}:"))
                .expect("queued under the connection id and its TTL")
                .to_owned()
        })
        .collect()
}

fn extend(conn: &mut Connection, leases: &[(&str, &str, u64)]) -> Vec<i64> {
    let script = redis::Script::new(&EXTEND);
    let mut call = script.prepare_invoke();
    for (key, token, ttl) in leases {
        call.key(*key).arg(*token).arg(*ttl);
    }
    call.invoke(conn).unwrap()
}

#[test]
fn acquire_takes_a_free_lock_and_reports_the_holder_ttl_otherwise() {
    let server = RedisServer::start();
    let mut conn = server.connection();
    let (ok, fence) = acquire(&mut conn, "a", 10_000);
    assert_eq!(ok, 1);
    assert!(
        fence > 1_600_000_000_000_000,
        "fence {fence} is not server time in µs"
    );
    let (ok, pttl) = acquire(&mut conn, "b", 10_000);
    assert_eq!(ok, 0);
    assert!(pttl > 9_000 && pttl <= 10_000, "pttl {pttl}");
    let holder: String = conn.get(LOCK).unwrap();
    assert_eq!(holder, "a");
    let fence_ttl: i64 = conn.pttl(FENCE).unwrap();
    assert!(fence_ttl > 0, "the fence key must expire");
}

#[test]
fn acquire_by_the_same_token_is_idempotent_with_a_higher_fence() {
    let server = RedisServer::start();
    let mut conn = server.connection();
    let (_, first) = acquire(&mut conn, "a", 1_000);
    let (ok, second) = acquire(&mut conn, "a", 50_000);
    assert_eq!(ok, 1);
    assert!(second > first);
    let pttl: i64 = conn.pttl(LOCK).unwrap();
    assert!(pttl > 40_000, "re-acquire resets the TTL: {pttl}");
}

#[test]
fn fences_increase_even_when_the_stored_one_is_ahead_of_the_clock() {
    let server = RedisServer::start();
    let mut conn = server.connection();
    let ahead: i64 = 9_000_000_000_000_000;
    let _: () = conn.set(FENCE, ahead).unwrap();
    let (_, fence) = acquire(&mut conn, "a", 1_000);
    assert_eq!(fence, ahead + 1);
    assert_eq!(release(&mut conn, "a"), 1);
    let (_, next) = acquire(&mut conn, "b", 1_000);
    assert_eq!(next, ahead + 2);
    let stored: i64 = conn.get(FENCE).unwrap();
    assert_eq!(stored, ahead + 2, "stored as an exact integer");
}

/// lock_release.lua as the default client sends it: freeing the lock
/// drops the name's last fence too (ARGV[8]).
fn release_dropping_the_fence(conn: &mut Connection, token: &str) -> i64 {
    release_call(token, false, true).invoke(conn).unwrap()
}

/// The release reads the lease and its fence with one MGET, which answers
/// nil for a key of another type: a lock key of another type is still
/// reported (WRONGTYPE) and left alone, and a fence key of another type is
/// left alone while the lease is released.
#[test]
fn a_release_reports_a_lock_key_of_another_type_and_leaves_a_foreign_fence_key_alone() {
    let server = RedisServer::start();
    let mut conn = server.connection();
    let _: () = conn.hset(LOCK, "field", "value").unwrap();
    for drop_fence in [true, false] {
        let refused: redis::RedisResult<i64> =
            release_call("a", false, drop_fence).invoke(&mut conn);
        let error = refused.expect_err("a hash under the lock key");
        assert!(
            error.to_string().contains("WRONGTYPE"),
            "drop_fence {drop_fence}: {error}"
        );
    }
    let value: String = conn.hget(LOCK, "field").unwrap();
    assert_eq!(value, "value", "the foreign lock key is untouched");
    let _: () = conn.del(LOCK).unwrap();
    let _: () = conn.set(LOCK, "a").unwrap();
    let _: () = conn.hset(FENCE, "field", "value").unwrap();
    assert_eq!(release_dropping_the_fence(&mut conn, "a"), 1);
    let exists: bool = conn.exists(LOCK).unwrap();
    assert!(!exists, "the lease is released");
    let value: String = conn.hget(FENCE, "field").unwrap();
    assert_eq!(value, "value", "the foreign fence key is untouched");
}

/// Issue 15, item 3: the last fence lives no longer than its lease, except
/// one ahead of the clock (the clock stepped back), which is kept until the
/// clock passes it, so fences still rise.
#[test]
fn a_release_that_frees_the_lock_drops_the_fence_unless_it_is_ahead_of_the_clock() {
    let server = RedisServer::start();
    let mut conn = server.connection();
    acquire(&mut conn, "a", 10_000);
    assert_eq!(release_dropping_the_fence(&mut conn, "a"), 1);
    let exists: bool = conn.exists(FENCE).unwrap();
    assert!(!exists, "the fence went with the lease");

    let ahead: i64 = 9_000_000_000_000_000;
    let _: () = conn.set(FENCE, ahead).unwrap();
    let (_, fence) = acquire(&mut conn, "b", 10_000);
    assert_eq!(fence, ahead + 1);
    assert_eq!(release_dropping_the_fence(&mut conn, "b"), 1);
    let kept: i64 = conn.get(FENCE).unwrap();
    assert_eq!(kept, ahead + 1, "a fence ahead of the clock is kept");
    let (_, next) = acquire(&mut conn, "c", 10_000);
    assert_eq!(next, ahead + 2);

    // A hand-off keeps the fence for the new holder.
    release_dropping_the_fence(&mut conn, "c");
    let _: () = conn.del(FENCE).unwrap();
    acquire(&mut conn, "d", 10_000);
    lock_acquire(&mut conn, "e", 10_000, WINDOW, false).unwrap();
    assert_eq!(release_dropping_the_fence(&mut conn, "d"), 1);
    let exists: bool = conn.exists(FENCE).unwrap();
    assert!(exists, "handed over: e's fence is kept");
}

#[test]
fn release_checks_the_owner() {
    let server = RedisServer::start();
    let mut conn = server.connection();
    acquire(&mut conn, "a", 10_000);
    assert_eq!(release(&mut conn, "b"), -1, "another owner's release");
    let holder: String = conn.get(LOCK).unwrap();
    assert_eq!(holder, "a", "a refused release changes nothing");
    assert_eq!(release(&mut conn, "a"), 1);
    assert_eq!(release(&mut conn, "a"), 0, "second release finds nothing");
    let exists: bool = conn.exists(LOCK).unwrap();
    assert!(!exists, "without waiters the lease is deleted");
}

#[test]
fn release_hands_the_lease_whole_to_the_first_live_waiter_and_wakes_only_it() {
    let server = RedisServer::start();
    let mut conn = server.connection();
    let mut sub_conn = server.connection();
    let mut pubsub = sub_conn.as_pubsub();
    // The waiter's connection's channel, another connection's, and the
    // lock's own: only the first may hear of the hand-off.
    let other = "t:{n}:released:conn2";
    for channel in [HANDOFF, other, CHANNEL] {
        pubsub.subscribe(channel).unwrap();
    }
    let (_, first) = acquire(&mut conn, "a", 10_000);
    // Refused waiters queue in arrival order, each once, and learn their
    // deadline: the server time + the window.
    let (secs, _): (u64, u64) = redis::cmd("TIME").query(&mut conn).unwrap();
    let b = lock_attempt(&mut conn, "b", 10_000, WINDOW, false, false).unwrap();
    assert_eq!(b[0], 0);
    assert_eq!(b.len(), 3, "a queued waiter is told its deadline: {b:?}");
    let deadline = u64::try_from(b[2]).unwrap();
    assert!(
        deadline >= secs * 1000 + WINDOW && deadline <= (secs + 2) * 1000 + WINDOW,
        "deadline {deadline} is not now + the window"
    );
    assert_eq!(
        lock_acquire(&mut conn, "c", 10_000, WINDOW, false)
            .unwrap()
            .0,
        0
    );
    assert_eq!(
        lock_acquire(&mut conn, "b", 10_000, WINDOW, true)
            .unwrap()
            .0,
        0
    );
    assert_eq!(queued(&mut conn), ["b", "c"]);
    for key in [QUEUE, ALIVE] {
        let ttl: i64 = conn.pttl(key).unwrap();
        assert!(ttl > 0 && ttl <= 3000, "{key} must expire: {ttl}");
    }

    assert_eq!(release(&mut conn, "a"), 1);
    // Issue 15, item 1: b holds the lease now, with its fence, out of the
    // queue; the message tells it all, so it needs no attempt of its own.
    let holder: String = conn.get(LOCK).unwrap();
    assert_eq!(holder, "b", "handed to the first waiter");
    assert_eq!(queued(&mut conn), ["c"], "b holds: it left the queue");
    pubsub
        .set_read_timeout(Some(std::time::Duration::from_secs(2)))
        .unwrap();
    let msg = pubsub.get_message().unwrap();
    assert_eq!(msg.get_channel_name(), HANDOFF);
    let payload: String = msg.get_payload().unwrap();
    let parts: Vec<&str> = payload.split(' ').collect();
    assert_eq!(
        parts.len(),
        4,
        "'<token> <fence> <deadline> <span>': {payload}"
    );
    assert_eq!(parts[0], "b");
    let fence: i64 = parts[1].parse().unwrap();
    assert!(fence > first, "a new fence: {fence} after {first}");
    let stored: i64 = conn.get(FENCE).unwrap();
    assert_eq!(stored, fence, "the handed fence is the last one issued");
    let fence_ttl: i64 = conn.pttl(FENCE).unwrap();
    assert!(fence_ttl > 0, "the fence key must expire: {fence_ttl}");
    // The deadline named is one b was told (its first attempt's, still
    // ahead), and the lease lasts at least until then on the server.
    assert_eq!(parts[2].parse::<u64>().unwrap(), deadline);
    let expires = expire_time_ms(&mut conn, LOCK);
    assert!(
        expires >= deadline,
        "the lease ends at {expires}, before the deadline {deadline} b dates it by"
    );
    // The span is counted from the arrival of that attempt: the deadline
    // minus the window. b's TTL is longer, so the lease lasts the window.
    assert_eq!(parts[3], WINDOW.to_string());
    // Nothing else was published: the next message is a marker sent now.
    let _: () = conn.publish(other, "marker").unwrap();
    let msg = pubsub.get_message().unwrap();
    assert_eq!(
        (msg.get_channel_name(), msg.get_payload::<String>().unwrap()),
        (other, "marker".to_owned()),
        "the hand-off woke another connection"
    );

    // The releasing owner cannot barge in.
    assert_eq!(
        lock_acquire(&mut conn, "a2", 10_000, WINDOW, false)
            .unwrap()
            .0,
        0
    );
    // A waiter that missed the message finds the lease its own on its next
    // attempt, with its own TTL and a newer fence.
    let (ok, again) = lock_acquire(&mut conn, "b", 10_000, WINDOW, true).unwrap();
    assert_eq!(ok, 1);
    assert!(again > fence);
    let pttl: i64 = conn.pttl(LOCK).unwrap();
    assert!(pttl > 9_000, "the new owner's own TTL: {pttl}");
    assert_eq!(queued(&mut conn), ["c", "a2"]);
}

#[test]
fn a_hand_off_dates_the_lease_from_the_waiters_latest_deadline() {
    let server = RedisServer::start();
    let mut conn = server.connection();
    let mut sub_conn = server.connection();
    let mut pubsub = subscribe(&mut sub_conn, HANDOFF, std::time::Duration::from_secs(2));
    acquire(&mut conn, "a", 10_000);
    lock_acquire(&mut conn, "b", 10_000, WINDOW, false).unwrap();
    // b has waited longer than the window since it arrived, and tried again
    // since: its heartbeat's deadline counts.
    backdate(&mut conn, "b", WINDOW + 1000);
    let beat = lock_attempt(&mut conn, "b", 10_000, WINDOW, true, false).unwrap();
    assert_eq!(release(&mut conn, "a"), 1);
    let payload: String = pubsub.get_message().unwrap().get_payload().unwrap();
    assert_eq!(
        payload.split(' ').nth(2).unwrap(),
        beat[2].to_string(),
        "the heartbeat's deadline: {payload}"
    );
    let holder: String = conn.get(LOCK).unwrap();
    assert_eq!(holder, "b");
    let left: i64 = conn.zcard(ALIVE).unwrap();
    assert_eq!(left, 0, "b's heartbeat entry went with it");
}

/// A waiter with a TTL shorter than its time to the deadline is handed a
/// lease of its TTL: if it dies at once, the lock is free as soon as its
/// own lease would have ended. The span says so.
#[test]
fn a_hand_off_lasts_at_most_the_waiters_ttl() {
    let server = RedisServer::start();
    let mut conn = server.connection();
    let mut sub_conn = server.connection();
    let mut pubsub = subscribe(&mut sub_conn, HANDOFF, std::time::Duration::from_secs(2));
    acquire(&mut conn, "a", 10_000);
    let b = lock_attempt(&mut conn, "b", 800, WINDOW, false, false).unwrap();
    let arrival = u64::try_from(b[2]).unwrap() - WINDOW;
    assert_eq!(release(&mut conn, "a"), 1);
    let (now_s, now_us): (u64, u64) = redis::cmd("TIME").query(&mut conn).unwrap();
    let pttl: i64 = conn.pttl(LOCK).unwrap();
    assert!(
        pttl > 0 && pttl <= 800,
        "the waiter's TTL bounds it: {pttl}"
    );
    let payload: String = pubsub.get_message().unwrap().get_payload().unwrap();
    let span: u64 = payload.split(' ').nth(3).unwrap().parse().unwrap();
    // The lease ends at the waiter's arrival + span, no later than now + TTL.
    let now = now_s * 1000 + now_us / 1000;
    assert!(
        arrival + span <= now + 800 && span >= 800,
        "span {span} from arrival {arrival}, now {now}"
    );
}

#[test]
fn waiters_past_their_deadline_are_skipped() {
    let server = RedisServer::start();
    let mut conn = server.connection();
    acquire(&mut conn, "a", 10_000);
    lock_acquire(&mut conn, "dead", 10_000, WINDOW, false).unwrap();
    lock_acquire(&mut conn, "live", 10_000, WINDOW, false).unwrap();
    backdate(&mut conn, "dead", WINDOW + 1);
    assert_eq!(release(&mut conn, "a"), 1);
    let holder: String = conn.get(LOCK).unwrap();
    assert_eq!(holder, "live");
    assert!(queued(&mut conn).is_empty(), "dead skipped, live holds");
}

#[test]
fn a_waiter_that_gives_up_leaves_the_queue_and_passes_on_a_hand_off() {
    let server = RedisServer::start();
    let mut conn = server.connection();
    acquire(&mut conn, "a", 10_000);
    lock_acquire(&mut conn, "b", 10_000, WINDOW, false).unwrap();
    lock_acquire(&mut conn, "c", 10_000, WINDOW, false).unwrap();
    // b gives up while a holds: it only leaves the queue.
    assert_eq!(release(&mut conn, "b"), -1);
    assert_eq!(queued(&mut conn), ["c"]);
    let holder: String = conn.get(LOCK).unwrap();
    assert_eq!(holder, "a");
    // c gives up right after the lease was handed to it: it passes it on.
    lock_acquire(&mut conn, "d", 10_000, WINDOW, false).unwrap();
    assert_eq!(release(&mut conn, "a"), 1);
    let holder: String = conn.get(LOCK).unwrap();
    assert_eq!(holder, "c");
    assert_eq!(release(&mut conn, "c"), 1);
    let holder: String = conn.get(LOCK).unwrap();
    assert_eq!(holder, "d");
}

/// Issue 24, item 3: a waiter that tried again (a heartbeat, so it has an
/// entry in `:alive`) and is handed the lease before its first deadline
/// leaves no entry behind; nor does one that leaves, or takes the lease
/// by its own attempt. Each key of the lock holds only live waiters.
#[test]
fn a_waiter_handed_the_lease_early_leaves_no_heartbeat_entry() {
    let server = RedisServer::start();
    let mut conn = server.connection();
    acquire(&mut conn, "a", 10_000);
    for waiter in ["b", "c", "d"] {
        lock_acquire(&mut conn, waiter, 10_000, WINDOW, false).unwrap();
        // The retry a waiter makes at once after subscribing.
        let beat = lock_attempt(&mut conn, waiter, 10_000, WINDOW, true, false).unwrap();
        assert_eq!(beat[0], 0);
    }
    let alive: Vec<String> = conn.zrange(ALIVE, 0, -1).unwrap();
    assert_eq!(alive.len(), 3, "each heartbeat wrote its deadline");
    // Handed over well within its first deadline.
    assert_eq!(release(&mut conn, "a"), 1);
    let holder: String = conn.get(LOCK).unwrap();
    assert_eq!(holder, "b");
    let alive: Vec<String> = conn.zrange(ALIVE, 0, -1).unwrap();
    assert_eq!(
        alive,
        [
            format!("{CONN}:{WAITER_TTL}:c"),
            format!("{CONN}:{WAITER_TTL}:d")
        ],
        "b's entry went with its place in the queue"
    );
    // c gives up; d takes the lease by its own attempt (it missed the
    // message of the next hand-off).
    assert_eq!(release(&mut conn, "c"), -1);
    assert_eq!(release(&mut conn, "b"), 1);
    assert_eq!(
        lock_acquire(&mut conn, "d", 10_000, WINDOW, true)
            .unwrap()
            .0,
        1
    );
    assert_eq!(release(&mut conn, "d"), 1);
    for key in [LOCK, QUEUE, ALIVE] {
        let exists: bool = conn.exists(key).unwrap();
        assert!(!exists, "{key} is left once nobody holds or waits");
    }
}

/// Issue 32 (seed 23674): a heartbeat (mark '2') takes out waiters whose
/// deadline passed, from the queue and the heartbeats, at most 4 of each
/// kind per call (bounded work), and never a live one: neither a waiter
/// within its first deadline nor one whose heartbeat keeps it live,
/// however old its arrival.
#[test]
fn a_heartbeat_takes_out_dead_waiters_four_at_a_time() {
    let server = RedisServer::start();
    let mut conn = server.connection();
    acquire(&mut conn, "a", 10_000);
    let (secs, micros): (i64, i64) = redis::cmd("TIME").query(&mut conn).unwrap();
    let now = secs * 1000 + micros / 1000;
    let member = |name: &str| format!("{CONN}:{WAITER_TTL}:{name}");
    let arrival = |ago_ms: i64| ((now - ago_ms) * 1000) as f64;
    // Six that tried again and died (deadline passed), six that never did
    // (arrived more than a window ago), and live ones: an old waiter whose
    // heartbeat is due later, and a newcomer.
    for i in 0..6 {
        let dead = member(&format!("beat{i}"));
        let _: () = conn.zadd(QUEUE, &dead, arrival(9_000 - i) + 0.5).unwrap();
        let _: () = conn.zadd(ALIVE, &dead, now - 100 - i).unwrap();
        let _: () = conn
            .zadd(QUEUE, member(&format!("first{i}")), arrival(3_100 + i))
            .unwrap();
    }
    let _: () = conn
        .zadd(QUEUE, member("old"), arrival(20_000) + 0.5)
        .unwrap();
    let _: () = conn.zadd(ALIVE, member("old"), now + 2_000).unwrap();
    let _: () = conn.zadd(QUEUE, member("new"), arrival(10)).unwrap();
    let queue_size = |conn: &mut Connection| -> usize { conn.zcard(QUEUE).unwrap() };
    assert_eq!(queue_size(&mut conn), 14);

    // b queues, then beats: each beat takes out at most 4 of the dead in
    // the heartbeats and 4 of the oldest dead in the queue, each with its
    // entry in the other key; three beats take out all twelve.
    lock_acquire(&mut conn, "b", 10_000, WINDOW, false).unwrap();
    let mut sizes = vec![queue_size(&mut conn)];
    for _ in 0..3 {
        lock_attempt(&mut conn, "b", 10_000, WINDOW, true, false).unwrap();
        sizes.push(queue_size(&mut conn));
    }
    for pair in sizes.windows(2) {
        assert!(
            pair[0] - pair[1] <= 8,
            "one beat took out more than 8: {sizes:?}"
        );
    }
    assert_eq!(queued(&mut conn), ["old", "new", "b"], "{sizes:?}");
    let mut beats: Vec<String> = conn.zrange(ALIVE, 0, -1).unwrap();
    beats.sort();
    assert_eq!(beats, [member("b"), member("old")]);
}

/// Issue 24, item 4: a first attempt (mark '1') the cluster driver sends
/// again after its connection dropped runs twice: refused (so queued),
/// then granted once the lease expired. The holder must not stay queued,
/// or it is later handed the lease it no longer waits for (and a fair lock
/// refuses everyone meanwhile).
#[test]
fn a_first_attempt_run_twice_refused_then_granted_leaves_the_queue() {
    let server = RedisServer::start();
    let mut conn = server.connection();
    for fair in [false, true] {
        acquire(&mut conn, "a", 10_000);
        // '3': the first attempt of a client whose driver may send it twice
        // (a cluster client).
        let refused = lock_attempt_marked(&mut conn, "b", 10_000, WINDOW, "3", fair).unwrap();
        assert_eq!(refused[0], 0);
        assert_eq!(queued(&mut conn), ["b"]);
        // a's lease expires; the same first attempt runs again.
        let _: () = conn.del(LOCK).unwrap();
        let granted = lock_attempt_marked(&mut conn, "b", 10_000, WINDOW, "3", fair).unwrap();
        assert_eq!(granted[0], 1, "fair: {fair}");
        assert!(
            queued(&mut conn).is_empty(),
            "the holder left the queue (fair: {fair})"
        );
        // So when b's lease ends without a release, a newcomer takes it.
        let _: () = conn.del(LOCK).unwrap();
        assert_eq!(
            lock_attempt(&mut conn, "c", 10_000, WINDOW, false, fair).unwrap()[0],
            1,
            "fair: {fair}"
        );
        assert_eq!(release(&mut conn, "c"), 1);
    }
}

#[test]
fn try_acquire_does_not_queue() {
    let server = RedisServer::start();
    let mut conn = server.connection();
    acquire(&mut conn, "a", 10_000);
    assert_eq!(acquire(&mut conn, "b", 10_000).0, 0);
    let exists: bool = conn.exists(QUEUE).unwrap();
    assert!(!exists);
}

#[test]
fn extend_renews_owned_leases_and_leaves_the_rest() {
    let server = RedisServer::start();
    let mut conn = server.connection();
    acquire(&mut conn, "a", 1_000);
    let _: () = conn.hset("t:{odd}:lock", "f", "v").unwrap();
    let _: () = conn.set("t:{other}:lock", "someone").unwrap();
    let results = extend(
        &mut conn,
        &[
            (LOCK, "a", 60_000),
            ("t:{gone}:lock", "a", 60_000),
            ("t:{other}:lock", "a", 60_000),
            ("t:{odd}:lock", "a", 60_000),
        ],
    );
    assert_eq!(results, vec![1, 0, -1, -1]);
    let pttl: i64 = conn.pttl(LOCK).unwrap();
    assert!(pttl > 50_000);
    let other_ttl: i64 = conn.pttl("t:{other}:lock").unwrap();
    assert_eq!(other_ttl, -1, "another owner's key is left alone");
    let kind: String = redis::cmd("TYPE")
        .arg("t:{odd}:lock")
        .query(&mut conn)
        .unwrap();
    assert_eq!(kind, "hash");
}

#[test]
fn status_reads_without_writing() {
    let server = RedisServer::start();
    let mut conn = server.connection();
    let status = |conn: &mut Connection| -> Vec<Value> {
        redis::Script::new(&STATUS)
            .key(LOCK)
            .key(FENCE)
            .key(QUEUE)
            .key(ALIVE)
            .arg(WINDOW)
            .invoke(conn)
            .unwrap()
    };
    let free = status(&mut conn);
    assert_eq!(free[0], Value::Nil);
    assert_eq!(free[1], Value::Int(-2));
    assert_eq!(free[3], Value::Int(0));
    let (_, fence) = acquire(&mut conn, "a", 10_000);
    lock_acquire(&mut conn, "b", 10_000, 3000, false).unwrap();
    lock_acquire(&mut conn, "dead", 10_000, 3000, false).unwrap();
    backdate(&mut conn, "dead", WINDOW + 1);
    let (holder, pttl, stored, waiters): (String, i64, i64, i64) = redis::Script::new(&STATUS)
        .key(LOCK)
        .key(FENCE)
        .key(QUEUE)
        .key(ALIVE)
        .arg(WINDOW)
        .invoke(&mut conn)
        .unwrap();
    assert_eq!(holder, "a");
    assert!(pttl > 0);
    assert_eq!(stored, fence);
    assert_eq!(waiters, 1);
}

/// Found by review: an attempt of a waiter that may be queued ('2') took
/// the lease, then failed on a queue key of another type as it left the
/// queue: the caller got WRONGTYPE while the lease was written, and it
/// stayed taken for its TTL. A caller cannot be queued in a key that is
/// not a queue, so the attempt holds the lease and says so.
#[test]
fn an_attempt_that_takes_the_lease_is_not_undone_by_a_queue_key_of_another_type() {
    let server = RedisServer::start();
    let mut conn = server.connection();
    let _: () = conn.rpush(QUEUE, "x").unwrap();
    let _: () = conn.rpush(ALIVE, "x").unwrap();
    let (acquired, fence) = lock_acquire(&mut conn, "a", 10_000, 3000, true).unwrap();
    assert_eq!((acquired, fence > 0), (1, true));
    let holder: String = conn.get(LOCK).unwrap();
    assert_eq!(holder, "a");
    let len: i64 = conn.llen(QUEUE).unwrap();
    assert_eq!(len, 1, "the foreign key is left alone");
}

#[test]
fn a_foreign_key_of_another_type_is_refused_untouched() {
    let server = RedisServer::start();
    let mut conn = server.connection();
    let _: () = conn.rpush(LOCK, "x").unwrap();
    let err = lock_acquire(&mut conn, "a", 1000, 3000, false).unwrap_err();
    assert_wrong_type(&err);
    let len: i64 = conn.llen(LOCK).unwrap();
    assert_eq!(len, 1);
    let fence: Option<String> = conn.get(FENCE).unwrap();
    assert_eq!(fence, None, "nothing written before the type error");
}

static RE_ACQUIRE: LazyLock<String> = LazyLock::new(|| shipped("reentrant_acquire"));
static RE_RELEASE: LazyLock<String> = LazyLock::new(|| shipped("reentrant_release"));
static RE_EXTEND: LazyLock<String> = LazyLock::new(|| shipped("reentrant_extend"));

fn re_acquire(conn: &mut Connection, owner: &str, hold: &str, ttl_ms: u64) -> (i64, i64) {
    redis::Script::new(&RE_ACQUIRE)
        .key(LOCK)
        .key(FENCE)
        .arg(owner)
        .arg(hold)
        .arg(ttl_ms)
        .arg(ttl_ms)
        .invoke(conn)
        .unwrap()
}

fn re_release(conn: &mut Connection, owner: &str, hold: &str) -> i64 {
    redis::Script::new(&RE_RELEASE)
        .key(LOCK)
        .key(CHANNEL)
        .arg(owner)
        .arg(hold)
        .invoke(conn)
        .unwrap()
}

fn hold_fields(conn: &mut Connection) -> Vec<String> {
    let mut fields: Vec<String> = conn.hkeys(LOCK).unwrap();
    fields.retain(|f| f.starts_with("h:"));
    fields.sort();
    fields
}

#[test]
fn reentrant_acquire_counts_holds_of_one_owner_and_keeps_its_fence() {
    let server = RedisServer::start();
    let mut conn = server.connection();
    let (ok, fence) = re_acquire(&mut conn, "o", "1", 10_000);
    assert_eq!(ok, 1);
    assert!(fence > 1_600_000_000_000_000);
    assert_eq!(re_acquire(&mut conn, "o", "2", 10_000), (1, fence));
    assert_eq!(
        re_acquire(&mut conn, "o", "2", 10_000),
        (1, fence),
        "a retried hold is not counted twice"
    );
    assert_eq!(hold_fields(&mut conn), ["h:1", "h:2"]);
    let (ok, pttl) = re_acquire(&mut conn, "p", "3", 10_000);
    assert_eq!(ok, 0);
    assert!(pttl > 9_000 && pttl <= 10_000, "pttl {pttl}");
    // A re-entry with a shorter TTL does not cut the others short.
    re_acquire(&mut conn, "o", "4", 1_000);
    let pttl: i64 = conn.pttl(LOCK).unwrap();
    assert!(pttl > 9_000, "shortened to {pttl}");
    let owner: String = conn.hget(LOCK, "owner").unwrap();
    assert_eq!(owner, "o");
    let fence_ttl: i64 = conn.pttl(FENCE).unwrap();
    assert!(fence_ttl > 0);
}

/// Any one hold of the owner, once per call: the call's record (KEYS[4])
/// makes a second run (a cluster driver's re-send) answer what the first
/// did without giving back a second hold; without a record it is refused.
#[test]
fn reentrant_release_of_any_hold_happens_once_per_call() {
    let server = RedisServer::start();
    let mut conn = server.connection();
    for hold in ["1", "2"] {
        re_acquire(&mut conn, "o", hold, 10_000);
    }
    let any = |conn: &mut Connection, call: &str| -> redis::RedisResult<i64> {
        redis::Script::new(&RE_RELEASE)
            .key(LOCK)
            .key(CHANNEL)
            .key(FENCE)
            .key(format!("t:{{n}}:call:{call}"))
            .arg("o")
            .arg("")
            .invoke(conn)
    };
    assert_eq!(any(&mut conn, "c1").unwrap(), 1);
    assert_eq!(any(&mut conn, "c1").unwrap(), 1, "the same call again");
    assert_eq!(hold_fields(&mut conn).len(), 1, "one hold given back");
    let record_ttl: i64 = conn.pttl("t:{n}:call:c1").unwrap();
    assert!(record_ttl > 0 && record_ttl <= 60_000, "{record_ttl}");
    assert_eq!(any(&mut conn, "c2").unwrap(), 1, "another call");
    assert!(hold_fields(&mut conn).is_empty());
    assert_eq!(any(&mut conn, "c3").unwrap(), 0, "nothing left");
    assert_eq!(
        any(&mut conn, "c3").unwrap(),
        0,
        "answered as the first run"
    );
    let err = redis::Script::new(&RE_RELEASE)
        .key(LOCK)
        .key(CHANNEL)
        .arg("o")
        .arg("")
        .invoke::<i64>(&mut conn)
        .unwrap_err();
    assert!(err.to_string().contains("record of the call"), "{err}");
}

#[test]
fn reentrant_release_checks_the_owner_and_frees_at_the_last_hold() {
    let server = RedisServer::start();
    let mut conn = server.connection();
    let mut sub_conn = server.connection();
    let mut pubsub = subscribe(
        &mut sub_conn,
        CHANNEL,
        std::time::Duration::from_millis(300),
    );
    assert_eq!(re_release(&mut conn, "o", "1"), 0, "nothing to release");
    for hold in ["1", "2", "3"] {
        re_acquire(&mut conn, "o", hold, 10_000);
    }
    assert_eq!(re_release(&mut conn, "p", "1"), -1, "another owner");
    assert_eq!(
        hold_fields(&mut conn).len(),
        3,
        "a refused release changes nothing"
    );
    assert_eq!(
        re_release(&mut conn, "o", "9"),
        0,
        "a hold that does not exist"
    );
    assert_eq!(re_release(&mut conn, "o", "2"), 1);
    assert_eq!(re_release(&mut conn, "o", "2"), 0, "released twice");
    assert_eq!(hold_fields(&mut conn), ["h:1", "h:3"]);
    assert!(pubsub.get_message().is_err(), "no event while holds remain");
    assert_eq!(re_release(&mut conn, "", "1"), 1, "by hold id alone");
    assert_eq!(re_release(&mut conn, "o", "3"), 1);
    let exists: bool = conn.exists(LOCK).unwrap();
    assert!(!exists, "deleted at the last hold");
    let msg = pubsub.get_message().unwrap();
    assert_eq!(msg.get_channel_name(), CHANNEL);
}

#[test]
fn reentrant_extend_renews_existing_holds_and_leaves_the_rest() {
    let server = RedisServer::start();
    let mut conn = server.connection();
    re_acquire(&mut conn, "o", "1", 1_000);
    let _: () = conn.set("t:{str}:lock", "plain").unwrap();
    let script = redis::Script::new(&RE_EXTEND);
    let mut call = script.prepare_invoke();
    for (key, hold) in [
        (LOCK, "1"),
        (LOCK, "2"),
        ("t:{gone}:lock", "1"),
        ("t:{str}:lock", "1"),
    ] {
        call.key(key).arg(hold).arg(60_000);
    }
    let results: Vec<i64> = call.invoke(&mut conn).unwrap();
    assert_eq!(results, vec![1, -1, 0, -1]);
    let pttl: i64 = conn.pttl(LOCK).unwrap();
    assert!(pttl > 50_000);
    let plain: String = conn.get("t:{str}:lock").unwrap();
    assert_eq!(plain, "plain");
}

/// Issue 24, item 5: each hold ends on its own. A hold whose process
/// crashed (never renewed) ends after its TTL although the same owner's
/// other hold keeps the key alive: a renewal finds it gone, status counts
/// the live hold only, and the live hold's release frees the lock at once
/// (it stayed held by the crashed hold until the key's TTL ran out). A
/// hold written by an earlier version (`1`, no expiry of its own) lives as
/// long as the key.
#[test]
fn reentrant_holds_end_on_their_own_and_the_last_live_release_frees_the_lock() {
    let server = RedisServer::start();
    let mut conn = server.connection();
    assert_eq!(re_acquire(&mut conn, "o", "crashed", 200).0, 1);
    assert_eq!(re_acquire(&mut conn, "o", "live", 60_000).0, 1);
    // Nobody renews the crashed hold: 200 ms of the server's clock end it.
    std::thread::sleep(std::time::Duration::from_millis(300));
    let status: (Option<String>, i64, i64, Option<i64>) = redis::Script::new(&RE_STATUS)
        .key(LOCK)
        .key(FENCE)
        .invoke(&mut conn)
        .unwrap();
    assert_eq!(
        (status.0.as_deref(), status.1),
        (Some("o"), 1),
        "{status:?}"
    );
    let renewed: Vec<i64> = redis::Script::new(&RE_EXTEND)
        .key(LOCK)
        .arg("crashed")
        .arg(60_000)
        .invoke(&mut conn)
        .unwrap();
    assert_eq!(renewed, vec![0], "an ended hold is not renewed");
    assert_eq!(re_release(&mut conn, "o", "live"), 1);
    let held: bool = conn.exists(LOCK).unwrap();
    assert!(
        !held,
        "the lock is free once its last live hold is given back"
    );
    assert_eq!(re_acquire(&mut conn, "other", "x", 60_000).0, 1);
    assert_eq!(re_release(&mut conn, "other", "x"), 1);

    // An earlier version's hold: no expiry of its own.
    assert_eq!(re_acquire(&mut conn, "o", "new", 60_000).0, 1);
    let _: () = conn.hset(LOCK, "h:old", 1).unwrap();
    assert_eq!(re_release(&mut conn, "o", "new"), 1);
    assert_eq!(hold_fields(&mut conn), ["h:old"]);
}

#[test]
fn reentrant_acquire_refuses_a_plain_lock_key_untouched() {
    let server = RedisServer::start();
    let mut conn = server.connection();
    acquire(&mut conn, "a", 10_000);
    let err = redis::Script::new(&RE_ACQUIRE)
        .key(LOCK)
        .key(FENCE)
        .arg("o")
        .arg("1")
        .arg(1000)
        .arg(1000)
        .invoke::<Value>(&mut conn)
        .unwrap_err();
    assert_wrong_type(&err);
    let holder: String = conn.get(LOCK).unwrap();
    assert_eq!(holder, "a");
    // And the plain lock's scripts refuse the reentrant hash.
    assert_eq!(release(&mut conn, "a"), 1);
    re_acquire(&mut conn, "o", "1", 10_000);
    let err = lock_acquire(&mut conn, "a", 1000, 3000, false).unwrap_err();
    assert_wrong_type(&err);
    assert_eq!(hold_fields(&mut conn), ["h:1"]);
}

static RW_ACQUIRE: LazyLock<String> = LazyLock::new(|| shipped("rw_acquire"));
static RW_RELEASE: LazyLock<String> = LazyLock::new(|| shipped("rw_release"));
static RW_EXTEND: LazyLock<String> = LazyLock::new(|| shipped("rw_extend"));
static RW_DOWNGRADE: LazyLock<String> = LazyLock::new(|| shipped("rw_downgrade"));

/// rw_acquire with a waiting writer (ARGV[6] = 1) unless `waits` is false.
fn rw(
    conn: &mut Connection,
    mode: &str,
    owner: &str,
    hold: &str,
    ttl_ms: u64,
    waits: bool,
) -> (i64, i64) {
    redis::Script::new(&RW_ACQUIRE)
        .key(LOCK)
        .key(FENCE)
        .key(WRITERS)
        .arg(mode)
        .arg(owner)
        .arg(hold)
        .arg(ttl_ms)
        .arg(ttl_ms)
        .arg(if waits { "1" } else { "0" })
        .invoke(conn)
        .unwrap()
}

fn rw_release(conn: &mut Connection, member: &str) -> i64 {
    rw_release_call(conn, member).unwrap()
}

/// rw_release, its error (a wrong-typed key) kept.
fn rw_release_call(conn: &mut Connection, member: &str) -> redis::RedisResult<i64> {
    redis::Script::new(&RW_RELEASE)
        .key(LOCK)
        .key(CHANNEL)
        .key(FENCE)
        .key(WRITERS)
        .arg(member)
        .invoke(conn)
}

fn members(conn: &mut Connection) -> Vec<String> {
    let mut all: Vec<String> = conn.zrange(LOCK, 0, -1).unwrap();
    all.sort();
    all
}

#[test]
fn rw_acquire_shares_reads_and_a_blocked_writer_holds_back_new_readers() {
    let server = RedisServer::start();
    let mut conn = server.connection();
    let (ok, f1) = rw(&mut conn, "r", "a", "1", 10_000, true);
    assert_eq!(ok, 1);
    let (ok, f2) = rw(&mut conn, "r", "b", "2", 20_000, true);
    assert_eq!(ok, 1);
    assert!(f2 > f1, "every hold gets a fresh fence");
    let pttl: i64 = conn.pttl(LOCK).unwrap();
    assert!(
        pttl > 19_000,
        "the key lasts as long as its longest entry: {pttl}"
    );

    let (ok, wait) = rw(&mut conn, "w", "w", "3", 5_000, false);
    assert_eq!(ok, 0);
    assert!(
        wait > 9_000 && wait <= 10_000,
        "until the first reader ends: {wait}"
    );
    assert_eq!(
        members(&mut conn),
        ["r:1:a", "r:2:b"],
        "try_write leaves no mark"
    );
    assert_eq!(rw(&mut conn, "w", "w", "3", 5_000, true).0, 0);
    assert_eq!(members(&mut conn), ["i:3:w", "r:1:a", "r:2:b"]);
    let intent: f64 = conn.zscore(LOCK, "i:3:w").unwrap();
    let reader: f64 = conn.zscore(LOCK, "r:1:a").unwrap();
    assert!(
        (reader - intent - 5_000.0).abs() < 100.0,
        "the intent lasts its ttl"
    );

    let (ok, wait) = rw(&mut conn, "r", "c", "4", 10_000, true);
    assert_eq!(ok, 0, "a new reader waits behind the writer");
    assert!(
        wait > 4_000 && wait <= 5_000,
        "until the intent ends: {wait}"
    );
    assert_eq!(
        rw(&mut conn, "r", "a", "5", 10_000, true).0,
        1,
        "a reader already in re-enters"
    );

    for member in ["r:1:a", "r:2:b", "r:5:a"] {
        assert_eq!(rw_release(&mut conn, member), 1);
    }
    let (ok, _) = rw(&mut conn, "w", "w", "3", 5_000, true);
    assert_eq!(ok, 1);
    assert_eq!(
        members(&mut conn),
        ["w:3:w"],
        "the intent is gone with the write"
    );
    assert_eq!(rw(&mut conn, "r", "c", "6", 1_000, true).0, 0);
    assert_eq!(rw(&mut conn, "w", "c", "7", 1_000, true).0, 0);
    assert_eq!(
        rw(&mut conn, "r", "w", "8", 1_000, true).0,
        1,
        "a writer may read"
    );
    assert_eq!(
        rw(&mut conn, "w", "w", "9", 1_000, true).0,
        1,
        "and write again"
    );
}

/// The waiting writers' places (`<hold>:<owner>`), first come first.
fn writer_places(conn: &mut Connection) -> Vec<String> {
    conn.zrange(WRITERS, 0, -1).unwrap()
}

/// Issue 33, item 3: a waiting writer takes its place at its first
/// blocked attempt, and no other owner's writer that came later, or only
/// tries, takes the lock before it; a reader that comes meanwhile waits.
#[test]
fn rw_acquire_serves_waiting_writers_in_arrival_order() {
    let server = RedisServer::start();
    let mut conn = server.connection();
    assert_eq!(rw(&mut conn, "r", "a", "1", 10_000, true).0, 1);
    assert_eq!(rw(&mut conn, "w", "w1", "2", 5_000, true).0, 0);
    assert_eq!(rw(&mut conn, "w", "w2", "3", 5_000, true).0, 0);
    assert_eq!(writer_places(&mut conn), ["2:w1", "3:w2"]);
    let first: f64 = conn.zscore(WRITERS, "2:w1").unwrap();
    // A retry keeps its place.
    assert_eq!(rw(&mut conn, "w", "w1", "2", 5_000, true).0, 0);
    let again: f64 = conn.zscore(WRITERS, "2:w1").unwrap();
    assert_eq!(first, again);
    let lock_ttl: i64 = conn.pttl(LOCK).unwrap();
    let places_ttl: i64 = conn.pttl(WRITERS).unwrap();
    assert!(
        places_ttl > 0 && places_ttl <= lock_ttl,
        "{places_ttl} {lock_ttl}"
    );

    assert_eq!(rw_release(&mut conn, "r:1:a"), 1);
    // Free of holds now, but w1 came first.
    let (ok, wait) = rw(&mut conn, "w", "w2", "3", 5_000, true);
    assert_eq!(ok, 0, "the second writer went first");
    assert!(
        wait > 4_000 && wait <= 5_000,
        "until w1's entry ends: {wait}"
    );
    assert_eq!(
        rw(&mut conn, "w", "late", "4", 5_000, false).0,
        0,
        "a try went first"
    );
    assert_eq!(
        rw(&mut conn, "r", "c", "5", 5_000, true).0,
        0,
        "a reader went first"
    );
    assert_eq!(
        writer_places(&mut conn),
        ["2:w1", "3:w2"],
        "a try takes no place"
    );
    assert_eq!(rw(&mut conn, "w", "w1", "2", 5_000, true).0, 1);
    assert_eq!(writer_places(&mut conn), ["3:w2"]);
    assert_eq!(members(&mut conn), ["i:3:w2", "w:2:w1"]);

    // An earlier version's waiting writer (an entry without a place) gets
    // one when first seen: after those already placed.
    let _: () = conn.zadd(LOCK, "i:6:old", 4_102_444_800_000u64).unwrap();
    assert_eq!(rw(&mut conn, "w", "w3", "7", 5_000, true).0, 0);
    assert_eq!(writer_places(&mut conn), ["3:w2", "6:old", "7:w3"]);
    let _: () = conn.zrem(LOCK, "i:6:old").unwrap();

    // A writer that gives up leaves its place, and so does one whose entry
    // is gone (pruned when its lease ended, or removed by hand).
    assert_eq!(rw_release(&mut conn, "i:3:w2"), 1);
    assert_eq!(writer_places(&mut conn), ["6:old", "7:w3"]);
    assert_eq!(rw_release(&mut conn, "w:2:w1"), 1);
    assert_eq!(rw(&mut conn, "w", "late", "8", 5_000, false).0, 0);
    assert_eq!(writer_places(&mut conn), ["7:w3"]);
    assert_eq!(rw(&mut conn, "w", "w3", "7", 5_000, true).0, 1);
    assert_eq!(rw(&mut conn, "w", "w5", "9", 50, true).0, 0);
    std::thread::sleep(std::time::Duration::from_millis(100));
    assert_eq!(rw_release(&mut conn, "w:7:w3"), 1);
    assert_eq!(rw(&mut conn, "w", "late", "8", 5_000, false).0, 1);
    let exists: bool = conn.exists(WRITERS).unwrap();
    assert!(!exists, "no place is left behind");
}

/// rw_acquire.lua as the version before writers queued shipped it (it
/// knows no writers key), with today's prelude: a client of that version.
static RW_ACQUIRE_BEFORE_ORDER: LazyLock<String> = LazyLock::new(|| {
    format!(
        "{}{}",
        include_str!("../src/scripts/prelude.lua"),
        include_str!("fixtures/rw_acquire_before_writer_order.lua")
    )
});

/// rw_acquire of the version before writers queued.
fn rw_before_order(conn: &mut Connection, mode: &str, owner: &str, hold: &str, waits: bool) -> i64 {
    let (code, _): (i64, i64) = redis::Script::new(&RW_ACQUIRE_BEFORE_ORDER)
        .key(LOCK)
        .key(FENCE)
        .arg(mode)
        .arg(owner)
        .arg(hold)
        .arg(10_000)
        .arg(10_000)
        .arg(if waits { "1" } else { "0" })
        .invoke(conn)
        .unwrap();
    code
}

/// Issue 33, item 3: clients of the version before writers queued and of
/// this one share an RwLock safely. The earlier version's writer does not
/// queue (it may take a free lock past this version's waiting writers, as
/// the CHANGELOG says), but no writer of either version ever holds beside
/// another holder, and its waiting writer gets a place when first seen.
#[test]
fn rw_clients_before_writer_order_never_write_beside_this_versions() {
    let server = RedisServer::start();
    let mut conn = server.connection();
    let writing =
        |conn: &mut Connection| members(conn).iter().filter(|m| m.starts_with("w:")).count();
    assert_eq!(rw(&mut conn, "r", "a", "1", 10_000, true).0, 1);
    assert_eq!(rw(&mut conn, "w", "new1", "2", 10_000, true).0, 0);
    assert_eq!(rw_before_order(&mut conn, "w", "old1", "3", true), 0);
    assert_eq!(rw(&mut conn, "w", "new2", "4", 10_000, true).0, 0);
    assert_eq!(writer_places(&mut conn), ["2:new1", "3:old1", "4:new2"]);
    assert_eq!(
        rw_before_order(&mut conn, "r", "old-reader", "5", true),
        0,
        "an earlier version's reader waits behind waiting writers"
    );
    assert_eq!(rw_release(&mut conn, "r:1:a"), 1);

    // The earlier version's writer takes the free lock past new1...
    assert_eq!(rw_before_order(&mut conn, "w", "old1", "3", true), 1);
    // ...and then nobody of either version enters beside it.
    assert_eq!(rw(&mut conn, "w", "new1", "2", 10_000, true).0, 0);
    assert_eq!(rw(&mut conn, "w", "new2", "4", 10_000, true).0, 0);
    assert_eq!(rw(&mut conn, "r", "b", "6", 10_000, true).0, 0);
    assert_eq!(rw_before_order(&mut conn, "w", "old2", "7", true), 0);
    assert_eq!(rw_before_order(&mut conn, "r", "old-reader", "5", true), 0);
    assert_eq!(writing(&mut conn), 1);

    assert_eq!(rw_release(&mut conn, "w:3:old1"), 1);
    // This version's writers in their order; the earlier version's waiting
    // writer came after new2 here, so it waits too.
    assert_eq!(rw(&mut conn, "w", "new2", "4", 10_000, true).0, 0);
    assert_eq!(rw(&mut conn, "w", "new1", "2", 10_000, true).0, 1);
    assert_eq!(rw_before_order(&mut conn, "w", "old2", "7", true), 0);
    assert_eq!(rw_before_order(&mut conn, "r", "old-reader", "5", false), 0);
    assert_eq!(writing(&mut conn), 1);
    assert_eq!(writer_places(&mut conn), ["4:new2", "7:old2"]);
}

#[test]
fn rw_acquire_refuses_upgrades_and_prunes_expired_entries() {
    let server = RedisServer::start();
    let mut conn = server.connection();
    rw(&mut conn, "r", "a", "1", 10_000, true);
    assert_eq!(rw(&mut conn, "w", "a", "2", 10_000, true), (-1, 0));
    assert_eq!(
        members(&mut conn),
        ["r:1:a"],
        "a refused upgrade leaves nothing"
    );

    let _: () = conn.del(LOCK).unwrap();
    rw(&mut conn, "r", "dead", "1", 50, true);
    rw(&mut conn, "w", "dying", "2", 50, true);
    assert_eq!(members(&mut conn), ["i:2:dying", "r:1:dead"]);
    std::thread::sleep(std::time::Duration::from_millis(120));
    let (ok, _) = rw(&mut conn, "w", "w", "3", 10_000, true);
    assert_eq!(ok, 1, "expired entries count for nothing");
    assert_eq!(members(&mut conn), ["w:3:w"]);
}

#[test]
fn rw_release_removes_one_entry_publishes_to_all_and_deletes_at_empty() {
    let server = RedisServer::start();
    let mut conn = server.connection();
    let mut sub_conn = server.connection();
    let mut pubsub = subscribe(&mut sub_conn, CHANNEL, std::time::Duration::from_secs(2));
    rw(&mut conn, "r", "a", "1", 30_000, true);
    rw(&mut conn, "r", "b", "2", 5_000, true);
    assert_eq!(rw_release(&mut conn, "r:9:a"), 0, "not an entry");
    assert_eq!(rw_release(&mut conn, "r:1:a"), 1);
    assert_eq!(rw_release(&mut conn, "r:1:a"), 0, "released twice");
    let pttl: i64 = conn.pttl(LOCK).unwrap();
    assert!(
        pttl <= 5_000,
        "the key now ends with the last entry: {pttl}"
    );
    let msg = pubsub.get_message().unwrap();
    assert_eq!(msg.get_payload::<String>().unwrap(), "all");
    assert_eq!(rw_release(&mut conn, "r:2:b"), 1);
    let exists: bool = conn.exists(LOCK).unwrap();
    assert!(!exists);
}

#[test]
fn rw_extend_renews_only_its_own_entry() {
    let server = RedisServer::start();
    let mut conn = server.connection();
    rw(&mut conn, "r", "a", "1", 1_000, true);
    rw(&mut conn, "r", "b", "2", 1_000, true);
    rw(&mut conn, "r", "gone", "3", 20, true);
    std::thread::sleep(std::time::Duration::from_millis(50));
    let _: () = conn.set("t:{str}:lock", "plain").unwrap();
    let before: f64 = conn.zscore(LOCK, "r:2:b").unwrap();
    let script = redis::Script::new(&RW_EXTEND);
    let mut call = script.prepare_invoke();
    for (key, member) in [
        (LOCK, "r:1:a"),
        (LOCK, "r:3:gone"),
        (LOCK, "r:9:x"),
        ("t:{str}:lock", "r:1:a"),
    ] {
        call.key(key).arg(member).arg(60_000);
    }
    let results: Vec<i64> = call.invoke(&mut conn).unwrap();
    assert_eq!(results, vec![1, 0, 0, -1]);
    let after: f64 = conn.zscore(LOCK, "r:2:b").unwrap();
    assert_eq!(after, before, "another reader's lease moved");
    let a: f64 = conn.zscore(LOCK, "r:1:a").unwrap();
    assert!(a > before + 50_000.0);
    let pttl: i64 = conn.pttl(LOCK).unwrap();
    assert!(pttl > 50_000);
}

#[test]
fn rw_downgrade_swaps_write_for_read_in_one_step() {
    let server = RedisServer::start();
    let mut conn = server.connection();
    let downgrade = |conn: &mut Connection, write: &str, read: &str| -> i64 {
        redis::Script::new(&RW_DOWNGRADE)
            .key(LOCK)
            .key(CHANNEL)
            .arg(write)
            .arg(read)
            .arg(10_000)
            .invoke(conn)
            .unwrap()
    };
    assert_eq!(downgrade(&mut conn, "w:1:a", "r:2:a"), 0);
    assert!(
        members(&mut conn).is_empty(),
        "nothing written without a write hold"
    );
    rw(&mut conn, "w", "a", "1", 10_000, true);
    rw(&mut conn, "w", "b", "3", 10_000, true);
    assert_eq!(members(&mut conn), ["i:3:b", "w:1:a"]);
    assert_eq!(downgrade(&mut conn, "w:1:a", "r:2:a"), 1);
    assert_eq!(members(&mut conn), ["i:3:b", "r:2:a"]);
    assert_eq!(
        rw(&mut conn, "w", "b", "3", 10_000, true).0,
        0,
        "the writer still waits"
    );
    assert_eq!(
        downgrade(&mut conn, "w:1:a", "r:4:a"),
        0,
        "downgraded twice"
    );
    assert_eq!(
        downgrade(&mut conn, "w:1:a", "r:2:a"),
        1,
        "the same call run again (a cluster driver's re-send) finds it done"
    );
    assert_eq!(members(&mut conn), ["i:3:b", "r:2:a"]);
}

#[test]
fn rw_scripts_refuse_keys_of_other_kinds_untouched() {
    let server = RedisServer::start();
    let mut conn = server.connection();
    acquire(&mut conn, "plain", 10_000);
    let err = redis::Script::new(&RW_ACQUIRE)
        .key(LOCK)
        .key(FENCE)
        .key(WRITERS)
        .arg("r")
        .arg("o")
        .arg("1")
        .arg(1000)
        .arg(1000)
        .arg("1")
        .invoke::<Value>(&mut conn)
        .unwrap_err();
    assert_wrong_type(&err);
    let holder: String = conn.get(LOCK).unwrap();
    assert_eq!(holder, "plain");
    release(&mut conn, "plain");
    re_acquire(&mut conn, "o", "1", 10_000);
    let err = rw_release_call(&mut conn, "r:1:o").unwrap_err();
    assert_wrong_type(&err);
    assert_eq!(hold_fields(&mut conn), ["h:1"]);
    let _: () = conn.del(LOCK).unwrap();
    // A wrong-typed fence key: nothing is written to the lock.
    let _: () = conn.del(FENCE).unwrap();
    let _: () = conn.hset(FENCE, "f", "v").unwrap();
    let err = redis::Script::new(&RW_ACQUIRE)
        .key(LOCK)
        .key(FENCE)
        .key(WRITERS)
        .arg("w")
        .arg("o")
        .arg("1")
        .arg(1000)
        .arg(1000)
        .arg("1")
        .invoke::<Value>(&mut conn)
        .unwrap_err();
    assert_wrong_type(&err);
    let exists: bool = conn.exists(LOCK).unwrap();
    assert!(!exists);
}

static SEM_ACQUIRE: LazyLock<String> = LazyLock::new(|| shipped("sem_acquire"));

/// sem_acquire.lua for hold `hold` of a semaphore of `permits`.
fn sem(conn: &mut Connection, permits: u32, hold: &str, ttl_ms: u64) -> (i64, i64) {
    redis::Script::new(&SEM_ACQUIRE)
        .key(LOCK)
        .key(FENCE)
        .arg(permits)
        .arg(hold)
        .arg(ttl_ms)
        .arg(ttl_ms)
        .invoke(conn)
        .unwrap()
}

#[test]
fn sem_acquire_grants_up_to_n_permits_with_rising_fences_and_refuses_when_full() {
    let server = RedisServer::start();
    let mut conn = server.connection();
    let (ok, f1) = sem(&mut conn, 2, "a", 10_000);
    assert_eq!(ok, 1);
    let (ok, f2) = sem(&mut conn, 2, "b", 20_000);
    assert_eq!(ok, 1);
    assert!(f2 > f1, "every permit gets a fresh fence");
    let (ok, wait) = sem(&mut conn, 2, "c", 10_000);
    assert_eq!(ok, 0, "a full semaphore refuses");
    assert!(
        wait > 9_000 && wait <= 10_000,
        "waits until the first permit ends: {wait}"
    );
    // A retry by a hold that has a permit (a lost reply) is granted again.
    let (ok, f3) = sem(&mut conn, 2, "a", 10_000);
    assert_eq!(ok, 1);
    assert!(f3 > f2);
    assert_eq!(members(&mut conn), ["2:a", "2:b"]);
    let pttl: i64 = conn.pttl(LOCK).unwrap();
    assert!(
        pttl > 19_000,
        "the key lasts as long as its longest permit: {pttl}"
    );
    // A permit given back (rw_release.lua with payload '') makes room.
    assert_eq!(
        redis::Script::new(&RW_RELEASE)
            .key(LOCK)
            .key(CHANNEL)
            .arg("2:b")
            .arg("")
            .invoke::<i64>(&mut conn)
            .unwrap(),
        1
    );
    assert_eq!(sem(&mut conn, 2, "c", 10_000).0, 1);
}

#[test]
fn sem_acquire_prunes_expired_permits_alone() {
    let server = RedisServer::start();
    let mut conn = server.connection();
    sem(&mut conn, 2, "dies", 100);
    sem(&mut conn, 2, "lives", 30_000);
    let before: f64 = conn.zscore(LOCK, "2:lives").unwrap();
    assert_eq!(sem(&mut conn, 2, "c", 10_000).0, 0);
    std::thread::sleep(std::time::Duration::from_millis(150));
    assert_eq!(
        sem(&mut conn, 2, "c", 10_000).0,
        1,
        "the dead permit came back"
    );
    assert_eq!(members(&mut conn), ["2:c", "2:lives"]);
    let after: f64 = conn.zscore(LOCK, "2:lives").unwrap();
    assert_eq!(before, after, "the other permit is untouched");
}

#[test]
fn sem_acquire_refuses_another_count_of_permits_untouched() {
    let server = RedisServer::start();
    let mut conn = server.connection();
    sem(&mut conn, 3, "a", 10_000);
    let fence: String = conn.get(FENCE).unwrap();
    assert_eq!(sem(&mut conn, 5, "b", 10_000), (-1, 3));
    assert_eq!(members(&mut conn), ["3:a"]);
    let after: String = conn.get(FENCE).unwrap();
    assert_eq!(fence, after, "nothing was written");
    // Once every permit is gone, the next caller's count holds.
    let _: () = conn.del(LOCK).unwrap();
    assert_eq!(sem(&mut conn, 5, "b", 10_000).0, 1);
    assert_eq!(sem(&mut conn, 3, "a", 10_000), (-1, 5));

    let _: () = conn.set("t:{n}:lock", "a string").unwrap();
    let err = redis::Script::new(&SEM_ACQUIRE)
        .key(LOCK)
        .key(FENCE)
        .arg(1)
        .arg("x")
        .arg(1000)
        .arg(1000)
        .invoke::<(i64, i64)>(&mut conn)
        .unwrap_err();
    assert_wrong_type(&err);
}

/// lock_acquire.lua for a fair lock.
fn fair_acquire(conn: &mut Connection, token: &str, window_ms: u64, already: bool) -> (i64, i64) {
    let reply = lock_attempt(conn, token, 10_000, window_ms, already, true).unwrap();
    (reply[0], reply[1])
}

#[test]
fn a_fair_acquire_leaves_a_free_lock_to_the_first_live_waiter() {
    let server = RedisServer::start();
    let mut conn = server.connection();
    acquire(&mut conn, "holder", 10_000);
    assert_eq!(fair_acquire(&mut conn, "w1", 3000, false).0, 0);
    assert_eq!(fair_acquire(&mut conn, "w2", 3000, false).0, 0);
    assert_eq!(queued(&mut conn), ["w1", "w2"]);
    // The holder vanishes without a hand-off: the lock is free.
    let _: () = conn.del(LOCK).unwrap();
    assert_eq!(
        fair_acquire(&mut conn, "newcomer", 0, false).0,
        0,
        "a newcomer may not take it, not even without waiting"
    );
    assert_eq!(
        fair_acquire(&mut conn, "w2", 3000, true).0,
        0,
        "w1 came first"
    );
    assert_eq!(queued(&mut conn), ["w1", "w2"], "a try does not queue");
    assert_eq!(fair_acquire(&mut conn, "w1", 3000, true).0, 1);
    assert_eq!(queued(&mut conn), ["w2"]);
    // Release hands it to the next in line, as for a plain lock.
    release(&mut conn, "w1");
    let holder: String = conn.get(LOCK).unwrap();
    assert_eq!(holder, "w2", "released into w2's hands");
    assert!(queued(&mut conn).is_empty());
}

#[test]
fn a_fair_acquire_prunes_waiters_past_their_deadline() {
    let server = RedisServer::start();
    let mut conn = server.connection();
    acquire(&mut conn, "holder", 10_000);
    assert_eq!(fair_acquire(&mut conn, "dead", 3000, false).0, 0);
    assert_eq!(fair_acquire(&mut conn, "live", 3000, false).0, 0);
    let _: () = conn.del(LOCK).unwrap();
    assert_eq!(
        fair_acquire(&mut conn, "live", 3000, true).0,
        0,
        "dead is still in time"
    );
    backdate(&mut conn, "dead", WINDOW + 1);
    assert_eq!(
        fair_acquire(&mut conn, "live", 3000, true).0,
        1,
        "dead was skipped"
    );
    assert!(queued(&mut conn).is_empty());
    // The same state without the fair flag: anyone may take a free lock.
    release(&mut conn, "live");
    assert_eq!(fair_acquire(&mut conn, "w", 3000, false).0, 1);
    release(&mut conn, "w");
    lock_acquire(&mut conn, "x", 10_000, 3000, false).unwrap();
    assert_eq!(fair_acquire(&mut conn, "w", 3000, false).0, 0);
    let _: () = conn.del(LOCK).unwrap();
    assert_eq!(
        lock_acquire(&mut conn, "y", 10_000, 3000, false).unwrap().0,
        1
    );
}

#[test]
fn retake_sets_a_missing_lease_back_but_never_replaces_another_token_or_type() {
    let server = RedisServer::start();
    let mut conn = server.connection();
    let _: () = conn.set("t:{attempt}:lock", "a-waiters-attempt").unwrap();
    let _: () = conn.set("t:{ours}:lock", "ours").unwrap();
    let _: () = conn.hset("t:{hash}:lock", "owner", "x").unwrap();
    let script = redis::Script::new(&RETAKE);
    let mut call = script.prepare_invoke();
    for key in [
        "t:{free}:lock",
        "t:{attempt}:lock",
        "t:{ours}:lock",
        "t:{hash}:lock",
    ] {
        call.key(key).arg("ours").arg(5_000);
    }
    let set: Vec<i64> = call.invoke(&mut conn).unwrap();
    assert_eq!(set, [1, 0, 0, 0]);
    let value: String = conn.get("t:{free}:lock").unwrap();
    assert_eq!(value, "ours");
    let pttl: i64 = conn.pttl("t:{free}:lock").unwrap();
    assert!(pttl > 4_000 && pttl <= 5_000, "pttl {pttl}");
    let value: String = conn.get("t:{attempt}:lock").unwrap();
    assert_eq!(value, "a-waiters-attempt", "another token is left alone");
    let owner: String = conn.hget("t:{hash}:lock", "owner").unwrap();
    assert_eq!(owner, "x", "a key of another type is left alone");
}

static RW_STATUS: LazyLock<String> = LazyLock::new(|| shipped("rw_status"));
static RE_STATUS: LazyLock<String> = LazyLock::new(|| shipped("reentrant_status"));

/// One group of rw_status.lua: the member prefix, the count, the entries listed.
type Group = (String, i64, Vec<(String, i64)>);

/// rw_status.lua listing at most `most` entries per group.
fn rw_status(conn: &mut Connection, most: usize) -> redis::RedisResult<(Option<i64>, Vec<Group>)> {
    redis::Script::new(&RW_STATUS)
        .key(LOCK)
        .key(FENCE)
        .arg(most)
        .invoke(conn)
}

/// The lock key as stored, with its remaining ms.
fn stored(conn: &mut Connection) -> (Option<Vec<u8>>, i64) {
    let dump: Option<Vec<u8>> = redis::cmd("DUMP").arg(LOCK).query(conn).unwrap();
    let pttl: i64 = conn.pttl(LOCK).unwrap();
    (dump, pttl)
}

#[test]
fn rw_status_groups_live_entries_caps_the_list_and_writes_nothing() {
    let server = RedisServer::start();
    let mut conn = server.connection();
    assert_eq!(rw_status(&mut conn, 10).unwrap(), (None, vec![]));
    for (owner, hold) in [("a", "1"), ("b", "2"), ("c", "3")] {
        rw(&mut conn, "r", owner, hold, 10_000, true);
    }
    let (_, fence) = rw(&mut conn, "r", "a", "4", 20_000, true);
    rw(&mut conn, "w", "w", "5", 10_000, true);
    // An entry whose lease ended, not pruned yet.
    let _: () = conn.zadd(LOCK, "r:6:gone", 1).unwrap();
    let before = stored(&mut conn);
    let (last, groups) = rw_status(&mut conn, 2).unwrap();
    assert_eq!(stored(&mut conn).0, before.0);
    assert!(stored(&mut conn).1 <= before.1);
    assert_eq!(last, Some(fence));
    assert_eq!(groups.len(), 2, "{groups:?}");
    // Groups come in order of their first entry's expiry; ties break by member.
    let group = |kind: &str| groups.iter().find(|g| g.0 == kind).expect(kind).clone();
    let (_, count, listed) = group("r");
    assert_eq!(count, 4);
    let rest: Vec<&str> = listed.iter().map(|(r, _)| r.as_str()).collect();
    assert_eq!(rest.len(), 2, "capped");
    assert!(
        rest.iter().all(|r| ["1:a", "2:b", "3:c"].contains(r)),
        "{rest:?}"
    );
    assert!(listed.iter().all(|(_, ms)| *ms > 0 && *ms <= 10_000));
    let (_, count, listed) = group("i");
    assert_eq!((count, listed[0].0.as_str()), (1, "5:w"));

    let _: () = conn.del(LOCK).unwrap();
    let _: () = conn.set(LOCK, "plain").unwrap();
    let err = rw_status(&mut conn, 2).unwrap_err();
    assert_wrong_type(&err);
    let value: String = conn.get(LOCK).unwrap();
    assert_eq!(value, "plain");
}

#[test]
fn rw_status_reads_a_semaphore_grouped_by_its_permits() {
    let server = RedisServer::start();
    let mut conn = server.connection();
    sem(&mut conn, 3, "h1", 10_000);
    let (_, fence) = sem(&mut conn, 3, "h2", 10_000);
    let (last, groups) = rw_status(&mut conn, 100).unwrap();
    assert_eq!(last, Some(fence));
    assert_eq!(groups.len(), 1);
    let (permits, count, listed) = &groups[0];
    assert_eq!((permits.as_str(), *count), ("3", 2));
    let mut holds: Vec<&str> = listed.iter().map(|(h, _)| h.as_str()).collect();
    holds.sort_unstable();
    assert_eq!(holds, ["h1", "h2"]);
}

/// reentrant_status.lua: owner, holds, pttl, fence.
fn re_status(conn: &mut Connection) -> redis::RedisResult<(Option<String>, i64, i64, Option<i64>)> {
    redis::Script::new(&RE_STATUS)
        .key(LOCK)
        .key(FENCE)
        .invoke(conn)
}

#[test]
fn reentrant_status_reads_owner_holds_and_fence_and_writes_nothing() {
    let server = RedisServer::start();
    let mut conn = server.connection();
    assert_eq!(re_status(&mut conn).unwrap(), (None, 0, -2, None));
    let (_, fence) = re_acquire(&mut conn, "o", "1", 10_000);
    re_acquire(&mut conn, "o", "2", 10_000);
    let before = stored(&mut conn);
    let (owner, holds, pttl, stored_fence) = re_status(&mut conn).unwrap();
    assert_eq!(stored(&mut conn).0, before.0);
    assert_eq!(
        (owner.as_deref(), holds, stored_fence),
        (Some("o"), 2, Some(fence))
    );
    assert!(pttl > 0 && pttl <= 10_000);
    re_release(&mut conn, "o", "1");
    re_release(&mut conn, "o", "2");
    assert_eq!(re_status(&mut conn).unwrap(), (None, 0, -2, Some(fence)));

    let _: () = conn.rpush(LOCK, "x").unwrap();
    let err = re_status(&mut conn).unwrap_err();
    assert_wrong_type(&err);
    let len: i64 = conn.llen(LOCK).unwrap();
    assert_eq!(len, 1);
}

// Fences of every kind (prelude.lua's next_fence).

/// The kinds of acquisition, each run by its script as shipped with the
/// fence memory the client sends (the lease's TTL).
const KINDS: [&str; 5] = ["lock", "reentrant", "read", "write", "permit"];

/// Takes `kind` on the keys of `name` as holder `who` for `ttl_ms`; the
/// fence it was issued.
fn take(conn: &mut Connection, kind: &str, name: &str, who: &str, ttl_ms: u64) -> i64 {
    let (lock, fence) = (format!("t:{{{name}}}:lock"), format!("t:{{{name}}}:fence"));
    let (script, args): (&str, Vec<String>) = match kind {
        "lock" => (
            "lock_acquire",
            vec![
                who.into(),
                ttl_ms.to_string(),
                ttl_ms.to_string(),
                "0".into(),
                "0".into(),
                "0".into(),
                CONN.into(),
            ],
        ),
        "reentrant" => (
            "reentrant_acquire",
            vec![
                who.into(),
                who.into(),
                ttl_ms.to_string(),
                ttl_ms.to_string(),
            ],
        ),
        "read" | "write" => (
            "rw_acquire",
            vec![
                kind[..1].into(),
                who.into(),
                who.into(),
                ttl_ms.to_string(),
                ttl_ms.to_string(),
                "0".into(),
            ],
        ),
        _ => (
            "sem_acquire",
            vec![
                "1".into(),
                who.into(),
                ttl_ms.to_string(),
                ttl_ms.to_string(),
            ],
        ),
    };
    let script = redis::Script::new(&shipped(script));
    let mut call = script.prepare_invoke();
    call.key(&lock).key(&fence);
    if kind == "lock" {
        call.key(format!("t:{{{name}}}:queue"))
            .key(format!("t:{{{name}}}:alive"));
    } else if kind == "read" || kind == "write" {
        call.key(format!("t:{{{name}}}:writers"));
    }
    for arg in &args {
        call.arg(arg);
    }
    let (ok, fence): (i64, i64) = call.invoke(conn).unwrap();
    assert_eq!(ok, 1, "{kind} of {name} by {who} refused");
    fence
}

/// Gives back what `take` took.
fn give_back(conn: &mut Connection, kind: &str, name: &str, who: &str) {
    let (lock, channel) = (
        format!("t:{{{name}}}:lock"),
        format!("t:{{{name}}}:released"),
    );
    let (script, args): (&str, Vec<String>) = match kind {
        "lock" => (
            "lock_release",
            vec![who.into(), "500".into(), "0".into(), CONN.into()],
        ),
        "reentrant" => ("reentrant_release", vec![who.into(), who.into()]),
        "read" | "write" => ("rw_release", vec![format!("{}:{who}:{who}", &kind[..1])]),
        _ => ("rw_release", vec![format!("1:{who}"), String::new()]),
    };
    let script = redis::Script::new(&shipped(script));
    let mut call = script.prepare_invoke();
    call.key(&lock).key(&channel);
    if kind == "lock" {
        call.key(format!("t:{{{name}}}:queue"))
            .key(format!("t:{{{name}}}:alive"));
    }
    for arg in &args {
        call.arg(arg);
    }
    let released: i64 = call.invoke(conn).unwrap();
    assert_eq!(released, 1, "{kind} of {name} by {who} not released");
}

#[test]
fn fences_of_every_kind_rise_across_release_expiry_a_lost_key_and_a_stale_one() {
    let server = RedisServer::start();
    let mut conn = server.connection();
    for kind in KINDS {
        let name = format!("f-{kind}");
        let fence_key = format!("t:{{{name}}}:fence");
        let mut fences = vec![take(&mut conn, kind, &name, "a", 10_000)];
        give_back(&mut conn, kind, &name, "a");
        fences.push(take(&mut conn, kind, &name, "b", 100));
        // Expiry: the lease and the fence key both lapse.
        std::thread::sleep(std::time::Duration::from_millis(250));
        let left: bool = conn.exists(&fence_key).unwrap();
        assert!(!left, "{kind}: the fence key outlived its memory");
        fences.push(take(&mut conn, kind, &name, "c", 10_000));
        give_back(&mut conn, kind, &name, "c");
        // A restart without persistence: the fence key is gone.
        let _: () = conn.del(&fence_key).unwrap();
        fences.push(take(&mut conn, kind, &name, "d", 10_000));
        give_back(&mut conn, kind, &name, "d");
        // A failover to a replica that missed the last acquisitions: the
        // fence key holds an older fence.
        let _: () = conn.set(&fence_key, fences[1]).unwrap();
        fences.push(take(&mut conn, kind, &name, "e", 10_000));
        assert!(
            fences.windows(2).all(|w| w[0] < w[1]),
            "{kind}: fences {fences:?} do not strictly rise"
        );
    }
}

#[test]
fn the_fence_key_lives_no_longer_than_its_memory_unless_the_clock_is_behind_it() {
    let server = RedisServer::start();
    let mut conn = server.connection();
    for kind in KINDS {
        let name = format!("m-{kind}");
        let fence_key = format!("t:{{{name}}}:fence");
        take(&mut conn, kind, &name, "a", 2_000);
        let pttl: i64 = conn.pttl(&fence_key).unwrap();
        assert!(pttl > 0 && pttl <= 2_000, "{kind}: fence key pttl {pttl}");
        give_back(&mut conn, kind, &name, "a");
        // A stored fence 60 s ahead of the clock (the clock stepped back):
        // kept until the clock passes it, so the next fences still rise.
        let (secs, micros): (i64, i64) = redis::cmd("TIME").query(&mut conn).unwrap();
        let ahead = (secs + 60) * 1_000_000 + micros;
        let _: () = conn.set(&fence_key, ahead).unwrap();
        assert_eq!(
            take(&mut conn, kind, &name, "b", 2_000),
            ahead + 1,
            "{kind}"
        );
        let pttl: i64 = conn.pttl(&fence_key).unwrap();
        assert!(
            pttl > 59_000 && pttl <= 60_001,
            "{kind}: fence key pttl {pttl}"
        );
    }
}

#[test]
fn no_key_remains_after_names_used_once() {
    let server = RedisServer::start();
    let mut conn = server.connection();
    let ttl_ms = 200;
    for i in 0..200 {
        let kind = KINDS[i % KINDS.len()];
        let name = format!("once-{i}");
        take(&mut conn, kind, &name, "a", ttl_ms);
        if kind == "lock" {
            // A waiter queues, is handed the lease at release, claims it.
            let (lock, fence) = (format!("t:{{{name}}}:lock"), format!("t:{{{name}}}:fence"));
            let (queue, alive) = (format!("t:{{{name}}}:queue"), format!("t:{{{name}}}:alive"));
            let attempt = |conn: &mut Connection, already: &str| -> (i64, i64) {
                redis::Script::new(&ACQUIRE)
                    .key(&lock)
                    .key(&fence)
                    .key(&queue)
                    .key(&alive)
                    .arg("b")
                    .arg(ttl_ms)
                    .arg(ttl_ms)
                    .arg(1_000)
                    .arg(already)
                    .arg("0")
                    .arg(CONN)
                    .invoke(conn)
                    .unwrap()
            };
            assert_eq!(attempt(&mut conn, "0").0, 0);
            give_back(&mut conn, kind, &name, "a");
            assert_eq!(attempt(&mut conn, "1").0, 1);
            give_back(&mut conn, kind, &name, "b");
        } else {
            give_back(&mut conn, kind, &name, "a");
        }
    }
    // The leases' TTL and the queue window (1 s here) have passed.
    std::thread::sleep(std::time::Duration::from_millis(1_300));
    let keys: Vec<String> = conn.keys("*").unwrap();
    assert!(
        keys.is_empty(),
        "{} keys left: {:?}",
        keys.len(),
        &keys[..keys.len().min(5)]
    );
    let size: i64 = redis::cmd("DBSIZE").query(&mut conn).unwrap();
    assert_eq!(size, 0);
}

/// Asserts that a script failed on a key of another type: WRONGTYPE, which
/// Redis 6.2 reports inside its `ERR Error running script ..` (the library
/// reads it there too: `Error::WrongType` either way).
fn assert_wrong_type(err: &redis::RedisError) {
    let inside_script = err.code() == Some("ERR")
        && err.detail().is_some_and(|d| {
            d.starts_with("Error running script") && d.contains(": WRONGTYPE Operation against")
        });
    assert!(
        err.code() == Some("WRONGTYPE") || inside_script,
        "not WRONGTYPE: {err}"
    );
}

/// When `key` expires, in ms of server time: PEXPIRETIME on Redis 7+; on
/// 6.2, PTTL then TIME in one script, which may read up to 1 ms late (a
/// millisecond that ends between the two), never early.
fn expire_time_ms(conn: &mut Connection, key: &str) -> u64 {
    if leasehold_testkit::server_version() >= (7, 0) {
        return redis::cmd("PEXPIRETIME").arg(key).query(conn).unwrap();
    }
    redis::Script::new(
        "local pttl = redis.call('PTTL', KEYS[1]) \
         local t = redis.call('TIME') \
         return t[1] * 1000 + math.floor(t[2] / 1000) + pttl",
    )
    .key(key)
    .invoke(conn)
    .unwrap()
}

/// Where the marker of [`Listeners::take`] goes; shares the tag of the keys.
const MARKER: &str = "t:{n}:marker";

/// Messages heard, as (channel, payload).
type Heard = Vec<(String, String)>;

/// One listener per kind of pub/sub, each on `CHANNEL`, `HANDOFF` and
/// `MARKER`: `plain` by SUBSCRIBE, `sharded` by SSUBSCRIBE (RESP2, read raw),
/// on a server that has sharded pub/sub (Redis 7+, Valkey).
struct Listeners {
    plain: Connection,
    sharded: Option<Connection>,
}

impl Listeners {
    fn new(server: &RedisServer) -> Listeners {
        let mut plain = server.connection();
        let mut sharded = has_sharded_pubsub().then(|| server.connection());
        for channel in [CHANNEL, HANDOFF, MARKER] {
            let _: Value = redis::cmd("SUBSCRIBE")
                .arg(channel)
                .query(&mut plain)
                .unwrap();
            if let Some(sharded) = &mut sharded {
                let _: Value = redis::cmd("SSUBSCRIBE")
                    .arg(channel)
                    .query(sharded)
                    .unwrap();
            }
        }
        for con in std::iter::once(&plain).chain(&sharded) {
            con.set_read_timeout(Some(std::time::Duration::from_secs(2)))
                .unwrap();
        }
        Listeners { plain, sharded }
    }

    /// What each listener heard since the last call, as (channel, payload):
    /// everything before a marker published now by PUBLISH and SPUBLISH.
    fn take(&mut self, conn: &mut Connection) -> (Heard, Heard) {
        let _: i64 = conn.publish(MARKER, "").unwrap();
        if self.sharded.is_some() {
            let _: i64 = redis::cmd("SPUBLISH")
                .arg(MARKER)
                .arg("")
                .query(conn)
                .unwrap();
        }
        let until_marker = |con: &mut Connection, kind: &str| {
            let mut heard = Vec::new();
            loop {
                let message: Vec<String> =
                    redis::from_redis_value(con.recv_response().unwrap()).unwrap();
                assert_eq!(message[0], kind, "{message:?}");
                if message[1] == MARKER {
                    return heard;
                }
                heard.push((message[1].clone(), message[2].clone()));
            }
        };
        (
            until_marker(&mut self.plain, "message"),
            self.sharded
                .as_mut()
                .map_or_else(Vec::new, |sharded| until_marker(sharded, "smessage")),
        )
    }
}

/// Whether the test kit's server has sharded pub/sub (SPUBLISH: Redis 7.0+
/// and Valkey). The client sends '1' only to servers that have it.
fn has_sharded_pubsub() -> bool {
    leasehold_testkit::server_version() >= (7, 0)
}

#[test]
fn release_scripts_publish_by_spublish_when_their_last_argument_is_1() {
    let server = RedisServer::start();
    let mut conn = server.connection();
    let mut listeners = Listeners::new(&server);
    let forms: &[&str] = if has_sharded_pubsub() {
        &["0", "1", ""]
    } else {
        &["0", ""]
    };
    for &sharded in forms {
        // A lock handed to a queued waiter, then freed with nobody queued
        // (as on a Redlock node, which announces every release).
        acquire(&mut conn, "a", 10_000);
        assert_eq!(
            lock_acquire(&mut conn, "b", 10_000, 3000, false).unwrap().0,
            0
        );
        let release = |conn: &mut Connection, token: &str| -> i64 {
            redis::Script::new(&RELEASE)
                .key(LOCK)
                .key(CHANNEL)
                .key(QUEUE)
                .key(ALIVE)
                .key(FENCE)
                .arg(token)
                .arg(500)
                .arg("1")
                .arg(CONN)
                .arg(WINDOW)
                .arg("")
                .arg(sharded)
                .invoke(conn)
                .unwrap()
        };
        assert_eq!(release(&mut conn, "a"), 1);
        assert_eq!(
            lock_acquire(&mut conn, "b", 10_000, 3000, true).unwrap().0,
            1
        );
        assert_eq!(release(&mut conn, "b"), 1);
        // A reentrant lock's last hold.
        re_acquire(&mut conn, "o", "1", 10_000);
        let freed: i64 = redis::Script::new(&RE_RELEASE)
            .key(LOCK)
            .key(CHANNEL)
            .arg("o")
            .arg("1")
            .arg(sharded)
            .invoke(&mut conn)
            .unwrap();
        assert_eq!(freed, 1);
        // An RwLock's write hold downgraded, then the read hold released
        // (as a semaphore's permit is, with an empty payload).
        rw(&mut conn, "w", "a", "1", 10_000, true);
        let downgraded: i64 = redis::Script::new(&RW_DOWNGRADE)
            .key(LOCK)
            .key(CHANNEL)
            .arg("w:1:a")
            .arg("r:2:a")
            .arg(10_000)
            .arg(sharded)
            .invoke(&mut conn)
            .unwrap();
        assert_eq!(downgraded, 1);
        let released: i64 = redis::Script::new(&RW_RELEASE)
            .key(LOCK)
            .key(CHANNEL)
            .arg("r:2:a")
            .arg("")
            .arg(sharded)
            .invoke(&mut conn)
            .unwrap();
        assert_eq!(released, 1);

        let published = vec![
            (HANDOFF.to_owned(), "b".to_owned()),
            (CHANNEL.to_owned(), String::new()),
            (CHANNEL.to_owned(), String::new()),
            (CHANNEL.to_owned(), "all".to_owned()),
            (CHANNEL.to_owned(), String::new()),
        ];
        // A hand-off says '<token> <fence> <deadline>': its token is enough here.
        let tokens = |heard: Heard| -> Heard {
            heard
                .into_iter()
                .map(|(channel, payload)| {
                    let token = payload.split(' ').next().unwrap_or("").to_owned();
                    (channel, token)
                })
                .collect()
        };
        let (plain, by_shard) = listeners.take(&mut conn);
        let (plain, by_shard) = (tokens(plain), tokens(by_shard));
        if sharded == "1" {
            assert_eq!(by_shard, published, "'1': SPUBLISH");
            assert_eq!(plain, [], "'1': no PUBLISH");
        } else {
            assert_eq!(plain, published, "{sharded:?}: PUBLISH");
            assert_eq!(by_shard, [], "{sharded:?}: no SPUBLISH");
        }
    }
}

// Elections: the leader record beside the lease (election_*.lua).

const LEADER: &str = "t:{n}:leader";
const ELECTED: &str = "t:{n}:elected";

fn announce(conn: &mut Connection, token: &str, term: u64, value: &str) -> i64 {
    redis::Script::new(&shipped("election_announce"))
        .key(LOCK)
        .key(LEADER)
        .key(ELECTED)
        .arg(token)
        .arg(term)
        .arg(value)
        .arg("0")
        .invoke(conn)
        .unwrap()
}

fn leader(conn: &mut Connection) -> Vec<Value> {
    redis::Script::new(&shipped("election_leader"))
        .key(LOCK)
        .key(LEADER)
        .invoke(conn)
        .unwrap()
}

fn vacate(conn: &mut Connection, token: &str) -> i64 {
    redis::Script::new(&shipped("election_vacate"))
        .key(LOCK)
        .key(LEADER)
        .key(ELECTED)
        .arg(token)
        .arg("0")
        .invoke(conn)
        .unwrap()
}

/// election_extend.lua over `(lock key, leader key, token, ttl)` leases.
fn election_extend(conn: &mut Connection, leases: &[(&str, &str, &str, u64)]) -> Vec<i64> {
    let script = redis::Script::new(&shipped("election_extend"));
    let mut call = script.prepare_invoke();
    for (lock, leader, token, ttl) in leases {
        call.key(*lock).key(*leader).arg(*token).arg(*ttl);
    }
    call.invoke(conn).unwrap()
}

fn bulk(text: &str) -> Value {
    Value::BulkString(text.as_bytes().to_vec())
}

#[test]
fn announce_records_the_holders_value_for_its_lease_only() {
    let server = RedisServer::start();
    let mut conn = server.connection();
    assert_eq!(announce(&mut conn, "a", 7, "host a"), 0, "nobody holds it");
    assert!(!conn.exists::<_, bool>(LEADER).unwrap());
    let (won, fence) = acquire(&mut conn, "a", 10_000);
    assert_eq!(won, 1);
    assert_eq!(
        announce(&mut conn, "b", 9, "host b"),
        0,
        "b does not hold it"
    );
    assert!(!conn.exists::<_, bool>(LEADER).unwrap());

    assert_eq!(announce(&mut conn, "a", fence as u64, "host a"), 1);
    let pttl: i64 = conn.pttl(LEADER).unwrap();
    assert!(
        pttl > 0 && pttl <= 10_000,
        "the record lives as the lease: {pttl}"
    );
    let reply = leader(&mut conn);
    assert_eq!(reply[..2], [bulk("host a"), bulk(&fence.to_string())]);
}

#[test]
fn leader_believes_a_record_only_while_its_token_holds_the_lease() {
    let server = RedisServer::start();
    let mut conn = server.connection();
    assert!(leader(&mut conn).is_empty(), "nobody leads");
    acquire(&mut conn, "a", 10_000);
    assert!(leader(&mut conn).is_empty(), "a has not recorded its value");
    assert_eq!(announce(&mut conn, "a", 5, "host a"), 1);
    // A hand-off: the lease is b's, the record still a's.
    let _: () = conn.set(LOCK, "b").unwrap();
    assert!(leader(&mut conn).is_empty(), "a's record says nothing of b");
    let _: () = conn.del(LOCK).unwrap();
    assert!(leader(&mut conn).is_empty());
}

#[test]
fn vacate_drops_only_the_leaders_own_record() {
    let server = RedisServer::start();
    let mut conn = server.connection();
    acquire(&mut conn, "a", 10_000);
    assert_eq!(announce(&mut conn, "a", 5, "host a"), 1);
    let before = (
        common_snapshot(&mut conn, LOCK),
        common_snapshot(&mut conn, LEADER),
    );
    assert_eq!(vacate(&mut conn, "b"), 0, "b does not lead");
    let after = (
        common_snapshot(&mut conn, LOCK),
        common_snapshot(&mut conn, LEADER),
    );
    assert_eq!(before.0.0, after.0.0);
    assert_eq!(before.1.0, after.1.0, "nothing changed");
    assert_eq!(vacate(&mut conn, "a"), 1);
    assert!(!conn.exists::<_, bool>(LEADER).unwrap());
    assert!(
        conn.exists::<_, bool>(LOCK).unwrap(),
        "the release frees it"
    );
}

#[test]
fn election_extend_renews_the_lease_and_its_own_record_only() {
    let server = RedisServer::start();
    let mut conn = server.connection();
    acquire(&mut conn, "a", 1_000);
    assert_eq!(announce(&mut conn, "a", 5, "host a"), 1);
    let codes = election_extend(
        &mut conn,
        &[
            (LOCK, LEADER, "a", 60_000),
            (LOCK, LEADER, "b", 60_000),
            ("t:{n}:other", "t:{n}:x", "c", 60_000),
        ],
    );
    assert_eq!(codes, [1, -1, 0]);
    assert!(conn.pttl::<_, i64>(LOCK).unwrap() > 1_000);
    assert!(conn.pttl::<_, i64>(LEADER).unwrap() > 1_000);

    // A record of an earlier leader is left to its own expiry.
    let _: () = redis::cmd("SET")
        .arg(LEADER)
        .arg("4 z old")
        .arg("PX")
        .arg(1_000)
        .query(&mut conn)
        .unwrap();
    assert_eq!(
        election_extend(&mut conn, &[(LOCK, LEADER, "a", 60_000)]),
        [1]
    );
    assert!(conn.pttl::<_, i64>(LEADER).unwrap() <= 1_000);
}

/// `key` as stored (`DUMP`) and its remaining ms.
fn common_snapshot(conn: &mut Connection, key: &str) -> (Option<Vec<u8>>, i64) {
    let dump: Option<Vec<u8>> = redis::cmd("DUMP").arg(key).query(conn).unwrap();
    (dump, conn.pttl(key).unwrap())
}

// Every script that writes, run twice: a cluster driver re-sends a call whose connection
// dropped before the reply (issue 32), so the same EVALSHA with the same KEYS and ARGV may
// run again after another client changed the lock. The second run must leave what that
// client did as it was: each test below runs one exact invocation, lets another client act,
// runs the same invocation again, and compares the keys as stored (DUMP) and their expiry.

/// `keys` as stored: each one's DUMP and its expiry in ms of server time (-1 none, -2 no key).
fn stored_state(conn: &mut Connection, keys: &[&str]) -> Vec<(Option<Vec<u8>>, i64)> {
    keys.iter()
        .map(|key| {
            let dump: Option<Vec<u8>> = redis::cmd("DUMP").arg(*key).query(conn).unwrap();
            let pttl: i64 = conn.pttl(*key).unwrap();
            let at = if pttl < 0 {
                pttl
            } else {
                i64::try_from(expire_time_ms(conn, key)).unwrap()
            };
            (dump, at)
        })
        .collect()
}

/// Runs `call`, then `between` (another client's change), then `call` again, exactly the same
/// invocation, and asserts that the second run changed none of `keys` (what `between` left):
/// contents exactly, expiry exactly (within the 1 ms either way by which Redis 6.2's reading,
/// TIME's floor plus PTTL, may be off). Returns both replies.
fn run_twice<T: redis::FromRedisValue + std::fmt::Debug>(
    conn: &mut Connection,
    script: &str,
    call: &redis::ScriptInvocation<'_>,
    between: impl FnOnce(&mut Connection),
    keys: &[&str],
) -> (T, T) {
    let first: T = call.invoke(conn).unwrap();
    between(conn);
    let before = stored_state(conn, keys);
    let second: T = call.invoke(conn).unwrap();
    let after = stored_state(conn, keys);
    for ((key, (dump_b, at_b)), (dump_a, at_a)) in keys.iter().zip(&before).zip(&after) {
        assert!(
            dump_b == dump_a,
            "{script} run again (it answered {second:?}, the first run {first:?}) changed {key} \
             as another client left it"
        );
        let late = if leasehold_testkit::server_version() >= (7, 0) {
            0
        } else {
            1
        };
        assert!(
            at_a == at_b || (*at_b >= 0 && *at_a >= 0 && (*at_a - *at_b).abs() <= late),
            "{script} run again changed the expiry of {key}: {at_b} -> {at_a}"
        );
    }
    (first, second)
}

#[test]
fn lock_acquire_run_again_after_another_took_the_lock_changes_nothing() {
    let server = RedisServer::start();
    let mut conn = server.connection();
    let script = redis::Script::new(&ACQUIRE);
    let mut call = script.prepare_invoke();
    call.key(LOCK)
        .key(FENCE)
        .key(QUEUE)
        .key(ALIVE)
        .arg("a")
        .arg(10_000)
        .arg(10_000)
        .arg(WINDOW)
        .arg("1")
        .arg("0")
        .arg(CONN);
    let (first, second): (Vec<i64>, Vec<i64>) = run_twice(
        &mut conn,
        "lock_acquire",
        &call,
        |conn| {
            assert_eq!(release(conn, "a"), 1);
            assert_eq!(acquire(conn, "b", 20_000).0, 1);
        },
        &[LOCK, FENCE],
    );
    assert_eq!((first[0], second[0]), (1, 0));
    let _: () = conn.del(QUEUE).unwrap();
}

#[test]
fn lock_release_run_again_after_another_took_the_lock_changes_nothing() {
    let server = RedisServer::start();
    let mut conn = server.connection();
    acquire(&mut conn, "a", 10_000);
    let call = release_call("a", false, false);
    let (first, second): (i64, i64) = run_twice(
        &mut conn,
        "lock_release",
        &call,
        |conn| assert_eq!(acquire(conn, "b", 20_000).0, 1),
        &[LOCK, FENCE, QUEUE],
    );
    assert_eq!((first, second), (1, -1));
}

#[test]
fn lock_extend_run_again_after_another_took_the_lock_changes_nothing() {
    let server = RedisServer::start();
    let mut conn = server.connection();
    acquire(&mut conn, "a", 10_000);
    let script = redis::Script::new(&EXTEND);
    let mut call = script.prepare_invoke();
    call.key(LOCK).arg("a").arg(60_000);
    let (first, second): (Vec<i64>, Vec<i64>) = run_twice(
        &mut conn,
        "lock_extend",
        &call,
        |conn| {
            assert_eq!(release(conn, "a"), 1);
            assert_eq!(acquire(conn, "b", 20_000).0, 1);
        },
        &[LOCK, FENCE],
    );
    assert_eq!((first, second), (vec![1], vec![-1]));
}

#[test]
fn lock_retake_run_again_after_another_took_the_lock_changes_nothing() {
    let server = RedisServer::start();
    let mut conn = server.connection();
    let script = redis::Script::new(&RETAKE);
    let mut call = script.prepare_invoke();
    call.key(LOCK).arg("a").arg(10_000);
    let (first, second): (Vec<i64>, Vec<i64>) = run_twice(
        &mut conn,
        "lock_retake",
        &call,
        |conn| {
            assert_eq!(release(conn, "a"), 1);
            assert_eq!(acquire(conn, "b", 20_000).0, 1);
        },
        &[LOCK, FENCE],
    );
    assert_eq!((first, second), (vec![1], vec![0]));
}

#[test]
fn reentrant_acquire_run_again_after_another_owner_took_the_lock_changes_nothing() {
    let server = RedisServer::start();
    let mut conn = server.connection();
    let script = redis::Script::new(&RE_ACQUIRE);
    let mut call = script.prepare_invoke();
    call.key(LOCK)
        .key(FENCE)
        .arg("oa")
        .arg("ha")
        .arg(10_000)
        .arg(10_000);
    let (first, second): ((i64, i64), (i64, i64)) = run_twice(
        &mut conn,
        "reentrant_acquire",
        &call,
        |conn| {
            assert_eq!(re_release(conn, "oa", "ha"), 1);
            assert_eq!(re_acquire(conn, "ob", "hb", 20_000).0, 1);
        },
        &[LOCK, FENCE],
    );
    assert_eq!((first.0, second.0), (1, 0));
}

#[test]
fn reentrant_release_run_again_after_another_owner_took_the_lock_changes_nothing() {
    let server = RedisServer::start();
    let mut conn = server.connection();
    re_acquire(&mut conn, "oa", "ha", 10_000);
    re_acquire(&mut conn, "oa", "ha2", 10_000);
    // Both forms: a named hold, and any one hold with the record of the call.
    for (hold, record) in [("ha", None), ("", Some("t:{n}:call:c1"))] {
        let script = redis::Script::new(&RE_RELEASE);
        let mut call = script.prepare_invoke();
        call.key(LOCK).key(CHANNEL).key(FENCE);
        if let Some(record) = record {
            call.key(record);
        }
        call.arg("oa").arg(hold).arg("0").arg("1");
        let freed = record.is_some();
        let (first, second): (i64, i64) = run_twice(
            &mut conn,
            "reentrant_release",
            &call,
            |conn| {
                if freed {
                    assert_eq!(re_acquire(conn, "ob", "hb", 20_000).0, 1);
                } else {
                    // The owner's other hold stays: another owner cannot enter, but the
                    // owner's own new hold can.
                    assert_eq!(re_acquire(conn, "oa", "ha3", 20_000).0, 1);
                }
            },
            &[LOCK, FENCE],
        );
        // Any one hold: the record of the call answers what the first run did.
        assert_eq!(
            (first, second),
            (1, if freed { 1 } else { 0 }),
            "hold {hold:?}"
        );
        if !freed {
            assert_eq!(re_release(&mut conn, "oa", "ha3"), 1);
        }
    }
}

#[test]
fn reentrant_extend_run_again_after_another_owner_took_the_lock_changes_nothing() {
    let server = RedisServer::start();
    let mut conn = server.connection();
    re_acquire(&mut conn, "oa", "ha", 10_000);
    let script = redis::Script::new(&RE_EXTEND);
    let mut call = script.prepare_invoke();
    call.key(LOCK).arg("ha").arg(60_000);
    let (first, second): (Vec<i64>, Vec<i64>) = run_twice(
        &mut conn,
        "reentrant_extend",
        &call,
        |conn| {
            assert_eq!(re_release(conn, "oa", "ha"), 1);
            assert_eq!(re_acquire(conn, "ob", "hb", 20_000).0, 1);
        },
        &[LOCK, FENCE],
    );
    assert_eq!((first, second), (vec![1], vec![-1]));
}

#[test]
fn rw_acquire_run_again_after_another_writer_took_the_lock_changes_nothing() {
    let server = RedisServer::start();
    let mut conn = server.connection();
    let script = redis::Script::new(&RW_ACQUIRE);
    let mut call = script.prepare_invoke();
    call.key(LOCK)
        .key(FENCE)
        .key(WRITERS)
        .arg("w")
        .arg("oa")
        .arg("ha")
        .arg(10_000)
        .arg(10_000)
        .arg("1");
    let (first, second): ((i64, i64), (i64, i64)) = run_twice(
        &mut conn,
        "rw_acquire",
        &call,
        |conn| {
            assert_eq!(rw_release(conn, "w:ha:oa"), 1);
            assert_eq!(rw(conn, "w", "ob", "hb", 20_000, false).0, 1);
        },
        &[FENCE],
    );
    assert_eq!((first.0, second.0), (1, 0));
    // Refused, it may leave its own waiting writer's entry; the writer's hold is as it was.
    let live: Vec<String> = members(&mut conn)
        .into_iter()
        .filter(|m| !m.starts_with("i:"))
        .collect();
    assert_eq!(live, ["w:hb:ob"]);
}

#[test]
fn rw_release_run_again_after_another_writer_took_the_lock_changes_nothing() {
    let server = RedisServer::start();
    let mut conn = server.connection();
    rw(&mut conn, "r", "oa", "ha", 10_000, false);
    let script = redis::Script::new(&RW_RELEASE);
    let mut call = script.prepare_invoke();
    call.key(LOCK).key(CHANNEL).key(FENCE).arg("r:ha:oa");
    let (first, second): (i64, i64) = run_twice(
        &mut conn,
        "rw_release",
        &call,
        |conn| assert_eq!(rw(conn, "w", "ob", "hb", 20_000, false).0, 1),
        &[LOCK, FENCE],
    );
    assert_eq!((first, second), (1, 0));
}

#[test]
fn rw_extend_run_again_after_another_writer_took_the_lock_changes_nothing() {
    let server = RedisServer::start();
    let mut conn = server.connection();
    rw(&mut conn, "w", "oa", "ha", 10_000, false);
    let script = redis::Script::new(&RW_EXTEND);
    let mut call = script.prepare_invoke();
    call.key(LOCK).arg("w:ha:oa").arg(60_000);
    let (first, second): (Vec<i64>, Vec<i64>) = run_twice(
        &mut conn,
        "rw_extend",
        &call,
        |conn| {
            assert_eq!(rw_release(conn, "w:ha:oa"), 1);
            assert_eq!(rw(conn, "w", "ob", "hb", 20_000, false).0, 1);
        },
        &[LOCK, FENCE],
    );
    assert_eq!((first, second), (vec![1], vec![0]));
}

#[test]
fn rw_downgrade_run_again_after_another_writer_took_the_lock_changes_nothing() {
    let server = RedisServer::start();
    let mut conn = server.connection();
    rw(&mut conn, "w", "oa", "ha", 10_000, false);
    let script = redis::Script::new(&RW_DOWNGRADE);
    let mut call = script.prepare_invoke();
    call.key(LOCK)
        .key(CHANNEL)
        .arg("w:ha:oa")
        .arg("r:ha2:oa")
        .arg(10_000)
        .arg("0");
    let (first, second): (i64, i64) = run_twice(
        &mut conn,
        "rw_downgrade",
        &call,
        |conn| {
            assert_eq!(rw_release(conn, "r:ha2:oa"), 1);
            assert_eq!(rw(conn, "w", "ob", "hb", 20_000, false).0, 1);
        },
        &[LOCK, FENCE],
    );
    assert_eq!((first, second), (1, 0));
}

#[test]
fn sem_acquire_run_again_after_another_took_the_permit_changes_nothing() {
    let server = RedisServer::start();
    let mut conn = server.connection();
    let script = redis::Script::new(&SEM_ACQUIRE);
    let mut call = script.prepare_invoke();
    call.key(LOCK)
        .key(FENCE)
        .arg(1)
        .arg("pa")
        .arg(10_000)
        .arg(10_000);
    let (first, second): ((i64, i64), (i64, i64)) = run_twice(
        &mut conn,
        "sem_acquire",
        &call,
        |conn| {
            assert_eq!(rw_release(conn, "1:pa"), 1);
            assert_eq!(sem(conn, 1, "pb", 20_000).0, 1);
        },
        &[LOCK, FENCE],
    );
    assert_eq!((first.0, second.0), (1, 0));
}

#[test]
fn election_announce_run_again_after_another_leader_changes_nothing() {
    let server = RedisServer::start();
    let mut conn = server.connection();
    let (_, term) = acquire(&mut conn, "a", 10_000);
    let script = redis::Script::new(&shipped("election_announce"));
    let mut call = script.prepare_invoke();
    call.key(LOCK)
        .key(LEADER)
        .key(ELECTED)
        .arg("a")
        .arg(term)
        .arg("host a")
        .arg("0");
    let (first, second): (i64, i64) = run_twice(
        &mut conn,
        "election_announce",
        &call,
        |conn| {
            assert_eq!(vacate(conn, "a"), 1);
            assert_eq!(release(conn, "a"), 1);
            let (_, term) = acquire(conn, "b", 20_000);
            assert_eq!(announce(conn, "b", term as u64, "host b"), 1);
        },
        &[LOCK, LEADER, FENCE],
    );
    assert_eq!((first, second), (1, 0));
}

#[test]
fn election_extend_run_again_after_another_leader_changes_nothing() {
    let server = RedisServer::start();
    let mut conn = server.connection();
    let (_, term) = acquire(&mut conn, "a", 10_000);
    assert_eq!(announce(&mut conn, "a", term as u64, "host a"), 1);
    let script = redis::Script::new(&shipped("election_extend"));
    let mut call = script.prepare_invoke();
    call.key(LOCK).key(LEADER).arg("a").arg(60_000);
    let (first, second): (Vec<i64>, Vec<i64>) = run_twice(
        &mut conn,
        "election_extend",
        &call,
        |conn| {
            assert_eq!(vacate(conn, "a"), 1);
            assert_eq!(release(conn, "a"), 1);
            let (_, term) = acquire(conn, "b", 20_000);
            assert_eq!(announce(conn, "b", term as u64, "host b"), 1);
        },
        &[LOCK, LEADER, FENCE],
    );
    assert_eq!((first, second), (vec![1], vec![-1]));
}

#[test]
fn election_vacate_run_again_after_another_leader_changes_nothing() {
    let server = RedisServer::start();
    let mut conn = server.connection();
    let (_, term) = acquire(&mut conn, "a", 10_000);
    assert_eq!(announce(&mut conn, "a", term as u64, "host a"), 1);
    let script = redis::Script::new(&shipped("election_vacate"));
    let mut call = script.prepare_invoke();
    call.key(LOCK).key(LEADER).key(ELECTED).arg("a").arg("0");
    let (first, second): (i64, i64) = run_twice(
        &mut conn,
        "election_vacate",
        &call,
        |conn| {
            assert_eq!(release(conn, "a"), 1);
            let (_, term) = acquire(conn, "b", 20_000);
            assert_eq!(announce(conn, "b", term as u64, "host b"), 1);
        },
        &[LOCK, LEADER, FENCE],
    );
    assert_eq!((first, second), (1, 0));
}

#[test]
fn fenced_set_run_again_after_a_newer_holder_wrote_changes_nothing() {
    let server = RedisServer::start();
    let mut conn = server.connection();
    let script = redis::Script::new(leasehold::fenced::SET_SCRIPT);
    let mut call = script.prepare_invoke();
    call.key("t:{n}:data")
        .key("t:{n}:data-fence")
        .arg("7")
        .arg("a's");
    let written = |conn: &mut Connection, fence: &str, value: &str| {
        let set: redis::RedisResult<String> = redis::Script::new(leasehold::fenced::SET_SCRIPT)
            .key("t:{n}:data")
            .key("t:{n}:data-fence")
            .arg(fence)
            .arg(value)
            .invoke(conn);
        assert_eq!(set.unwrap(), fence);
    };
    let first: String = call.invoke(&mut conn).unwrap();
    assert_eq!(first, "7");
    written(&mut conn, "9", "b's");
    let before = stored_state(&mut conn, &["t:{n}:data", "t:{n}:data-fence"]);
    let second: redis::RedisResult<String> = call.invoke(&mut conn);
    let err = second.expect_err("a stale write run again was refused");
    assert!(err.to_string().contains("STALE"), "{err}");
    assert_eq!(
        stored_state(&mut conn, &["t:{n}:data", "t:{n}:data-fence"]),
        before,
        "fenced_set run again changed the newer holder's write"
    );
}

static LEASE_BREAK: LazyLock<String> = LazyLock::new(|| shipped("lease_break"));

/// One hold lease_break.lua reads or removes: its member (a reentrant lock's owner), ms left,
/// count, the reentrant lock's fence ('' else), the ids its guards know it by.
type BreakHold = (String, i64, i64, String, Vec<String>);

/// lease_break.lua: with `holds` `None` the read, else the break of those named.
fn lease_break_invocation(kind: &str, holds: &[String]) -> redis::ScriptInvocation<'static> {
    static SCRIPT: LazyLock<redis::Script> = LazyLock::new(|| redis::Script::new(&LEASE_BREAK));
    let mut call = SCRIPT.prepare_invoke();
    call.key(LOCK).key(CHANNEL).key(FENCE).arg("0").arg(kind);
    for hold in holds {
        call.arg(hold);
    }
    call
}

/// The operator's break of whatever holds `LOCK` (a reentrant lock, an RwLock or a
/// semaphore), as `Client::break_lease` sends it: the read (run here), then the break of
/// exactly what it read (returned, to run).
fn lease_break_call(conn: &mut Connection) -> redis::ScriptInvocation<'static> {
    let (kind, holds, _): (String, Vec<BreakHold>, Option<i64>) =
        lease_break_invocation("", &[]).invoke(conn).unwrap();
    let names: Vec<String> = if kind == "reentrant" {
        holds
            .into_iter()
            .flat_map(|(owner, _, _, fence, _)| [owner, fence])
            .collect()
    } else {
        holds.into_iter().map(|(member, ..)| member).collect()
    };
    lease_break_invocation(&kind, &names)
}

/// Issue 32: a break re-sent by the cluster driver after a new holder took the lock broke
/// that holder too (its hold, its hash, its permit). For each kind: A holds, the break
/// removes A's hold, B takes the lock, and the same break call again must leave B holding.
#[test]
fn lease_break_run_again_after_a_new_holder_took_the_lock_changes_nothing() {
    let server = RedisServer::start();
    let mut conn = server.connection();
    type Take = fn(&mut Connection, &str);
    let kinds: [(&str, Take, Take); 4] = [
        (
            "reentrant",
            |c, who| assert_eq!(re_acquire(c, who, &format!("h{who}"), 20_000).0, 1),
            |c, who| assert_eq!(re_acquire(c, who, &format!("h{who}2"), 20_000).0, 1),
        ),
        (
            "write",
            |c, who| assert_eq!(rw(c, "w", who, &format!("h{who}"), 20_000, false).0, 1),
            |_, _| {},
        ),
        (
            "read",
            |c, who| assert_eq!(rw(c, "r", who, &format!("h{who}"), 20_000, false).0, 1),
            |c, who| assert_eq!(rw(c, "r", who, &format!("h{who}2"), 20_000, false).0, 1),
        ),
        (
            "permit",
            |c, who| assert_eq!(sem(c, 2, &format!("h{who}"), 20_000).0, 1),
            |c, who| assert_eq!(sem(c, 2, &format!("h{who}2"), 20_000).0, 1),
        ),
    ];
    for (kind, take, more) in kinds {
        let _: () = conn.del(&[LOCK, FENCE]).unwrap();
        take(&mut conn, "a");
        let call = lease_break_call(&mut conn);
        let first: Value = call.invoke(&mut conn).unwrap();
        take(&mut conn, "b");
        more(&mut conn, "b");
        let before = stored_state(&mut conn, &[LOCK, FENCE]);
        let second: Value = call.invoke(&mut conn).unwrap();
        assert_eq!(
            stored_state(&mut conn, &[LOCK, FENCE]),
            before,
            "{kind}: the break run again (it answered {second:?}; the first run {first:?}) \
             broke the holder that came after it"
        );
    }
}

#[test]
fn lease_break_reads_without_writing_and_breaks_only_the_holds_it_names() {
    let server = RedisServer::start();
    let mut conn = server.connection();
    // An RwLock: two reads and a waiting writer; a hold taken after the read is not broken.
    rw(&mut conn, "r", "oa", "ha", 20_000, false);
    rw(&mut conn, "r", "ob", "hb", 20_000, false);
    assert_eq!(rw(&mut conn, "w", "oc", "hc", 20_000, true).0, 0);
    let before = stored_state(&mut conn, &[LOCK, FENCE]);
    let (kind, holds, _): (String, Vec<BreakHold>, Option<i64>) =
        lease_break_invocation("", &[]).invoke(&mut conn).unwrap();
    assert_eq!(kind, "rwlock");
    let mut read: Vec<String> = holds.iter().map(|h| h.0.clone()).collect();
    read.sort();
    assert_eq!(
        read,
        ["r:ha:oa", "r:hb:ob"],
        "the waiting writer is not a hold"
    );
    assert!(holds.iter().all(|h| h.4 == [h.0.clone()] && h.2 == 1));
    assert_eq!(
        stored_state(&mut conn, &[LOCK, FENCE]),
        before,
        "a read wrote"
    );
    let (_, broken, _): (String, Vec<BreakHold>, Option<i64>) =
        lease_break_invocation("rwlock", &["r:ha:oa".into(), "i:hc:oc".into()])
            .invoke(&mut conn)
            .unwrap();
    assert_eq!(broken.len(), 1);
    assert_eq!(broken[0].0, "r:ha:oa");
    assert_eq!(members(&mut conn), ["i:hc:oc", "r:hb:ob"]);
    // Named as another kind: nothing.
    let (_, broken, _): (String, Vec<BreakHold>, Option<i64>) =
        lease_break_invocation("semaphore", &["r:hb:ob".into()])
            .invoke(&mut conn)
            .unwrap();
    assert!(broken.is_empty());
    assert_eq!(members(&mut conn), ["i:hc:oc", "r:hb:ob"]);

    // A reentrant lock is named by its owner and fence: the same owner's later tenure is not
    // the one read.
    let _: () = conn.del(&[LOCK, FENCE]).unwrap();
    let (_, fence) = re_acquire(&mut conn, "o", "h1", 20_000);
    re_acquire(&mut conn, "o", "h2", 20_000);
    let (_, holds, _): (String, Vec<BreakHold>, Option<i64>) =
        lease_break_invocation("", &[]).invoke(&mut conn).unwrap();
    assert_eq!(holds.len(), 1);
    let (owner, _, count, tenure, mut ids) = holds[0].clone();
    ids.sort();
    assert_eq!(
        (owner.as_str(), count, ids),
        ("o", 2, vec!["h1".into(), "h2".into()])
    );
    assert_eq!(tenure, fence.to_string());
    let stale = (fence - 1).to_string();
    let (_, broken, _): (String, Vec<BreakHold>, Option<i64>) =
        lease_break_invocation("reentrant", &["o".into(), stale])
            .invoke(&mut conn)
            .unwrap();
    assert!(broken.is_empty(), "another tenure was broken");
    assert_eq!(hold_fields(&mut conn).len(), 2);
    let (_, broken, _): (String, Vec<BreakHold>, Option<i64>) =
        lease_break_invocation("reentrant", &["o".into(), tenure])
            .invoke(&mut conn)
            .unwrap();
    assert_eq!(broken.len(), 1);
    assert!(!conn.exists::<_, bool>(LOCK).unwrap());
    assert!(conn.exists::<_, bool>(FENCE).unwrap(), "the fence is kept");
}
