//! A client's connection dropped while it has many subscribed channels and
//! many lock commands in flight: after the reconnect no command may see
//! another command's reply (or a subscription confirmation), no two holders
//! of one name may overlap, and every grant must be what the server holds.
//!
//! The victim client has one waiter on each of `WAITERS` names held by
//! another client, so as many hand-off channels are subscribed on its
//! connection; `TASKS` tasks of it keep taking and giving back other names.
//! The test kills the victim's connection (`CLIENT KILL ID`) `KILLS` times,
//! each time once the previous reconnect has resubscribed every channel.

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use common::holds::{self, Load, violations};
use leasehold::Client;
use leasehold_testkit::{Proxy, ProxyMode, RedisServer, SentinelSet};

/// Names held by the other client, each with one waiter of the victim:
/// the victim's subscribed channels.
const WAITERS: usize = 1500;
/// Names the victim's load tasks take and give back.
const NAMES: usize = 64;
/// Load tasks of the victim.
const TASKS: usize = 32;
/// Connection kills per run.
const KILLS: usize = 6;
/// Waiters woken one by one at the end, each within `PROMPT` of its
/// holder's release.
const WOKEN: usize = 10;
const PROMPT: Duration = Duration::from_millis(500);
/// Bound on the whole run.
const LIMIT: Duration = Duration::from_secs(25);
/// Errors tolerated in a run: commands in flight when the connection
/// dropped fail (the driver's retries are few). A wrong reply, an overlap
/// or a grant the server does not hold is never tolerated.
const ERRORS_TOLERATED: usize = 2000;

fn held(i: usize) -> String {
    format!("held:{i}")
}

fn name(i: usize) -> String {
    format!("load:{i}")
}

fn lock_key(name: &str) -> String {
    format!("{}:{{{name}}}:lock", leasehold::DEFAULT_PREFIX)
}

/// Whether an error says a command got a reply of another shape than its
/// own, or a push (a subscription confirmation): the mark of a reply
/// delivered to the wrong command.
fn is_wrong_reply(error: &str) -> bool {
    holds::is_wrong_reply(error) || ["push(", "Push"].iter().any(|mark| error.contains(mark))
}

#[derive(Default)]
struct Outcome {
    load: Load,
    /// Grants whose key on the server held another token (or none) while
    /// the guard still counted itself valid.
    phantom: Vec<String>,
}

/// One load task: takes names in a task-specific order; even tasks wait
/// briefly, odd ones only try. Each grant is checked against the server.
async fn worker(
    client: Client,
    check: redis::aio::MultiplexedConnection,
    task: usize,
    stop: Arc<AtomicBool>,
) -> Outcome {
    let mut out = Outcome::default();
    let mut check = check;
    let mut attempt = 0usize;
    while !stop.load(Ordering::Relaxed) {
        attempt += 1;
        let i = (task * 7 + attempt * 13) % NAMES;
        let lock = client.lock(name(i)).ttl(Duration::from_secs(5));
        let Some(guard) = out.load.attempt(lock, task, &name(i)).await else {
            continue;
        };
        let start = Instant::now();
        let on_server: redis::RedisResult<Option<String>> = redis::cmd("GET")
            .arg(lock_key(&name(i)))
            .query_async(&mut check)
            .await;
        if !guard.is_lost() {
            match on_server {
                Ok(Some(token)) if token == guard.token() => {}
                other => out.phantom.push(format!(
                    "{} granted to task {task} (token {}), server holds {other:?}",
                    name(i),
                    guard.token()
                )),
            }
        }
        out.load.give_back(guard, (i, &name(i)), task, start).await;
    }
    out
}

/// Every pair of holds of one name that overlap, and every pair whose
/// fences do not follow their order.
/// The `id` of the connection subscribed to at least `channels` channels,
/// if there is exactly one.
fn subscribed_connection(server: &RedisServer, channels: usize) -> Option<u64> {
    let list: String = redis::cmd("CLIENT")
        .arg("LIST")
        .query(&mut server.connection())
        .expect("CLIENT LIST");
    let found: Vec<u64> = list
        .lines()
        .filter_map(|line| {
            let field = |name: &str| {
                line.split(' ')
                    .find_map(|f| f.strip_prefix(name)?.strip_prefix('='))
                    .and_then(|v| v.parse::<u64>().ok())
            };
            (field("sub")? >= channels as u64).then(|| field("id"))?
        })
        .collect();
    match found.as_slice() {
        [id] => Some(*id),
        _ => None,
    }
}

/// Waits (bounded) until one connection has every waiter's channel.
async fn await_subscribed(server: &RedisServer, deadline: Instant) -> u64 {
    loop {
        if let Some(id) = subscribed_connection(server, WAITERS) {
            return id;
        }
        assert!(
            Instant::now() < deadline,
            "no connection subscribed to {WAITERS} channels before the deadline"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// The run: `holder` holds the waited-for names on `server`, `victim` waits
/// on them and carries the load; its connection to `server` is killed.
async fn run(server: &RedisServer, holder: Client, victim: Client) {
    let began = Instant::now();
    let deadline = began + LIMIT;

    let mut held_guards = Vec::with_capacity(WAITERS);
    for i in 0..WAITERS {
        let guard = holder
            .lock(held(i))
            .ttl(Duration::from_secs(30))
            .try_acquire()
            .await
            .expect("hold")
            .expect("free");
        held_guards.push(Some(guard));
    }

    // One waiter per held name: each subscribes its hand-off channel on the
    // victim's connection. None may be granted while the holder holds.
    let granted = Arc::new(AtomicUsize::new(0));
    let waiters: Vec<_> = (0..WAITERS)
        .map(|i| {
            let lock = victim.lock(held(i)).wait(Duration::from_secs(60));
            let granted = Arc::clone(&granted);
            tokio::spawn(async move {
                match lock.acquire().await {
                    Ok(guard) => {
                        granted.fetch_add(1, Ordering::SeqCst);
                        Some(format!(
                            "{} granted to a waiter, token {}",
                            held(i),
                            guard.token()
                        ))
                    }
                    Err(e) => Some(format!("waiter on {}: {e}", held(i))),
                }
            })
        })
        .collect();
    let mut id = await_subscribed(server, deadline).await;

    let check = redis::Client::open(server.url())
        .expect("url")
        .get_multiplexed_async_connection()
        .await
        .expect("checker connection");
    let stop = Arc::new(AtomicBool::new(false));
    let workers: Vec<_> = (0..TASKS)
        .map(|task| {
            tokio::spawn(worker(
                victim.clone(),
                check.clone(),
                task,
                Arc::clone(&stop),
            ))
        })
        .collect();

    // Kills that found the connection gone already (it dropped on its own).
    let mut gone = 0;
    for _ in 0..KILLS {
        tokio::time::sleep(Duration::from_millis(300)).await;
        let killed: i64 = redis::cmd("CLIENT")
            .arg("KILL")
            .arg("ID")
            .arg(id)
            .query(&mut server.connection())
            .expect("CLIENT KILL");
        gone += usize::from(killed == 0);
        // The next kill only once the reconnect resubscribed everything.
        id = await_subscribed(server, deadline).await;
    }
    let kills = KILLS - gone;
    tokio::time::sleep(Duration::from_millis(300)).await;
    stop.store(true, Ordering::Relaxed);

    let mut out = Outcome::default();
    for w in workers {
        let o = w.await.expect("worker");
        out.load.add(o.load);
        out.phantom.extend(o.phantom);
    }
    let waiter_grants = granted.load(Ordering::SeqCst);
    let lost_holds = held_guards.iter().flatten().filter(|g| g.is_lost()).count();
    let mut waiter_errors = Vec::new();
    let mut waiting = Vec::new();
    for (i, w) in waiters.into_iter().enumerate() {
        if w.is_finished() {
            waiter_errors.extend(w.await.expect("waiter"));
        } else {
            waiting.push((i, w));
        }
    }
    let (overlaps, fences) = violations(&out.load.holds, name);
    let wrong: Vec<&String> = out
        .load
        .errors
        .iter()
        .chain(&waiter_errors)
        .filter(|e| is_wrong_reply(e))
        .collect();
    let summary = format!(
        "{kills} kills ({gone} connections gone before their kill) with {WAITERS} channels \
         subscribed, {} holds, {} errors ({} of the \
         wrong-reply class), {} grants the server did not hold, {} overlaps, {} fences out \
         of order, {waiter_grants} waiters granted a held name, {lost_holds} holder leases \
         lost, {} waiters ended; {:?}",
        out.load.acquired,
        out.load.errors.len(),
        wrong.len(),
        out.phantom.len(),
        overlaps.len(),
        fences.len(),
        waiter_errors.len(),
        began.elapsed()
    );
    eprintln!("{summary}");
    for e in out
        .load
        .errors
        .iter()
        .take(5)
        .chain(&waiter_errors)
        .take(10)
        .chain(out.phantom.iter().take(5))
    {
        eprintln!("  {e}");
    }
    holds::assert_no_wrong_replies(&wrong, &summary);
    assert!(
        out.phantom.is_empty(),
        "grants the server did not hold: {:#?}\n{summary}",
        out.phantom.iter().take(10).collect::<Vec<_>>()
    );
    holds::assert_holds_in_order(&overlaps, &fences, &summary);
    assert_eq!(lost_holds, 0, "the holder kept its leases\n{summary}");
    assert_eq!(
        waiter_grants, 0,
        "no waiter was granted a name the holder held\n{summary}"
    );
    assert!(
        waiter_errors.is_empty(),
        "waiters ended: {:#?}\n{summary}",
        waiter_errors.iter().take(10).collect::<Vec<_>>()
    );
    assert!(
        out.load.errors.len() <= ERRORS_TOLERATED,
        "too many errors: {summary}"
    );
    assert!(out.load.acquired > 0, "the load made progress\n{summary}");
    assert!(Instant::now() < deadline, "ran into its bound\n{summary}");

    // The channels are subscribed again and every waiter listens: a
    // release hands the lease to its waiter at once. Without the message
    // each would find it only at its next timed retry, up to a second
    // later, so ten prompt grants in a row are not luck (about 1 in 1000).
    let mut woken = 0;
    for (i, w) in waiting.iter_mut().take(WOKEN) {
        let released = Instant::now();
        held_guards[*i]
            .take()
            .expect("held")
            .release()
            .await
            .expect("the holder's release");
        let outcome = tokio::time::timeout(Duration::from_secs(5), w)
            .await
            .expect("the waiter was granted within 5 s")
            .expect("waiter task");
        let took = released.elapsed();
        let outcome = outcome.unwrap_or_default();
        assert!(
            outcome.contains("granted"),
            "waiter on {}: {outcome}",
            held(*i)
        );
        assert!(
            took < PROMPT,
            "the waiter on {} was granted {took:?} after the release: it missed the \
             hand-off message",
            held(*i)
        );
        woken += 1;
    }
    assert_eq!(woken, WOKEN, "{WOKEN} waiters were still waiting");
    for (_, w) in waiting {
        w.abort();
    }

    // The victim still works.
    let guard = victim
        .lock("after")
        .try_acquire()
        .await
        .expect("after the kills")
        .expect("free");
    guard.release().await.expect("release after the kills");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn reconnect_with_many_subscriptions_crosses_no_replies() {
    let server = RedisServer::start();
    let holder = Client::connect(&server.url()).await.expect("holder");
    let victim = Client::connect(&server.url()).await.expect("victim");
    run(&server, holder, victim).await;
}

/// The victim behind a link with latency: the proxy forwards each chunk
/// of at most 16 KiB after a millisecond, so the confirmations of a
/// resubscription arrive in several reads, as over a real network (a
/// fresh connection's congestion window is about 14 KiB).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn reconnect_over_a_slow_link_crosses_no_replies() {
    let server = RedisServer::start();
    let proxy = Proxy::start(server.port());
    proxy.set_mode(ProxyMode::Delay(Duration::from_millis(1)));
    let holder = Client::connect(&server.url()).await.expect("holder");
    let victim = Client::connect(&proxy.url()).await.expect("victim");
    run(&server, holder, victim).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn sentinel_reconnect_with_many_subscriptions_crosses_no_replies() {
    let set = SentinelSet::start("resub", 1, 3);
    let master = &set.servers()[0];
    assert_eq!(
        set.master_port(),
        master.port(),
        "the first server is master"
    );
    let holder = Client::sentinel(set.sentinel_urls(), set.name())
        .await
        .expect("holder");
    let victim = Client::sentinel(set.sentinel_urls(), set.name())
        .await
        .expect("victim");
    run(master, holder, victim).await;
}
