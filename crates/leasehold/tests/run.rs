//! `run`: a critical section that stops when the lease does, on every
//! primitive whose guard can be lost, async and blocking, on real servers.
//!
//! Losses are forced, never waited for by luck: the lease's keys are deleted
//! or taken from outside through a raw connection, or the server is frozen
//! (SIGSTOP) past the TTL.

mod common;

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use leasehold::{Client, Error};
use leasehold_testkit::RedisServer;
use tokio::sync::oneshot;

const TTL: Duration = Duration::from_millis(900);

/// Sets its flag when dropped: proof that the work was dropped, not leaked.
struct DropFlag(Arc<AtomicBool>);

impl Drop for DropFlag {
    fn drop(&mut self) {
        self.0.store(true, Ordering::SeqCst);
    }
}

/// Every primitive whose guard can be lost, as one `run` call each.
#[derive(Debug, Clone, Copy)]
enum Section {
    Lock,
    Fair,
    Reentrant,
    Read,
    Write,
    Semaphore,
}

const ALL: [Section; 6] = [
    Section::Lock,
    Section::Fair,
    Section::Reentrant,
    Section::Read,
    Section::Write,
    Section::Semaphore,
];

type Work<T> = Box<dyn FnOnce(u64) -> Pin<Box<dyn Future<Output = T> + Send>> + Send>;

impl Section {
    /// Runs `work` through this primitive's `run` on `name`.
    async fn run<T: Send + 'static>(
        self,
        client: &Client,
        name: &str,
        work: Work<T>,
    ) -> Result<T, Error> {
        match self {
            Section::Lock => client.lock(name).ttl(TTL).run(work).await,
            Section::Fair => client.fair_lock(name).ttl(TTL).run(work).await,
            Section::Reentrant => client.reentrant_lock(name).ttl(TTL).run(work).await,
            Section::Read => client.rw_lock(name).ttl(TTL).run_read(work).await,
            Section::Write => client.rw_lock(name).ttl(TTL).run_write(work).await,
            Section::Semaphore => client.semaphore(name, 1).ttl(TTL).run(work).await,
        }
    }

    /// Whether another owner can take `name` now without waiting.
    async fn is_free(self, client: &Client, name: &str) -> bool {
        match self {
            Section::Lock | Section::Fair => {
                client.lock(name).try_acquire().await.unwrap().is_some()
            }
            Section::Reentrant => client
                .reentrant_lock(name)
                .try_acquire()
                .await
                .unwrap()
                .is_some(),
            Section::Read | Section::Write => {
                client.rw_lock(name).try_write().await.unwrap().is_some()
            }
            Section::Semaphore => client
                .semaphore(name, 1)
                .try_acquire()
                .await
                .unwrap()
                .is_some(),
        }
    }
}

/// Deletes every key of lock `name` (default prefix) through a raw connection.
fn delete_lock_keys(server: &RedisServer, name: &str) -> usize {
    let mut con = server.connection();
    let keys: Vec<String> = redis::cmd("KEYS")
        .arg(format!("leasehold:{{{name}}}*"))
        .query(&mut con)
        .unwrap();
    let _: () = redis::cmd("DEL").arg(&keys).query(&mut con).unwrap();
    keys.len()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn run_returns_the_output_and_releases_after_on_every_primitive() {
    let server = RedisServer::start();
    let client = common::client(&server).await;
    for section in ALL {
        let name = format!("out:{section:?}");
        let probe = client.clone();
        let inner_name = name.clone();
        let out = section
            .run(
                &client,
                &name,
                Box::new(move |fence| {
                    Box::pin(async move {
                        // Held while the work runs: nobody else gets it.
                        assert!(!section.is_free(&probe, &inner_name).await, "{section:?}");
                        fence
                    })
                }),
            )
            .await
            .unwrap_or_else(|e| panic!("{section:?}: {e}"));
        assert!(out > 0, "{section:?}: the work got the fence");
        assert!(
            section.is_free(&client, &name).await,
            "{section:?}: released after"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lease_deleted_from_outside_drops_the_work_and_returns_lost() {
    let server = RedisServer::start();
    let client = common::client(&server).await;
    for section in ALL {
        let name = format!("deleted:{section:?}");
        let dropped = Arc::new(AtomicBool::new(false));
        let flag = DropFlag(Arc::clone(&dropped));
        let (started, is_started) = oneshot::channel();
        let run = {
            let client = client.clone();
            let name = name.clone();
            tokio::spawn(async move {
                section
                    .run(
                        &client,
                        &name,
                        Box::new(move |_fence| {
                            Box::pin(async move {
                                let _flag = flag;
                                started.send(()).unwrap();
                                std::future::pending::<()>().await;
                            })
                        }),
                    )
                    .await
            })
        };
        is_started.await.expect("the work started");
        assert!(
            delete_lock_keys(&server, &name) > 0,
            "{section:?}: keys to delete"
        );
        let deleted_at = Instant::now();
        let outcome = tokio::time::timeout(Duration::from_secs(10), run)
            .await
            .unwrap_or_else(|_| panic!("{section:?}: run did not return"))
            .expect("join");
        let took = deleted_at.elapsed();
        assert!(
            matches!(outcome, Err(Error::Lost { ref name }) if name.starts_with("deleted:")),
            "{section:?}: {outcome:?}"
        );
        assert!(
            dropped.load(Ordering::SeqCst),
            "{section:?}: the work was dropped"
        );
        // The next renewal (TTL / 3) finds the lease gone; one TTL plus a
        // second of slack for a busy machine.
        assert!(
            took < TTL + Duration::from_secs(1),
            "{section:?}: took {took:?}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lock_taken_by_another_owner_drops_the_work_and_frees_nothing_of_theirs() {
    let server = RedisServer::start();
    let client = common::client(&server).await;
    let dropped = Arc::new(AtomicBool::new(false));
    let flag = DropFlag(Arc::clone(&dropped));
    let (started, is_started) = oneshot::channel();
    let run = {
        let lock = client.lock("taken").ttl(TTL);
        tokio::spawn(async move {
            lock.run(|_fence| async move {
                let _flag = flag;
                started.send(()).unwrap();
                std::future::pending::<()>().await;
            })
            .await
        })
    };
    is_started.await.expect("the work started");
    let mut con = server.connection();
    let _: () = redis::cmd("SET")
        .arg("leasehold:{taken}:lock")
        .arg("intruder")
        .arg("PX")
        .arg(60_000)
        .query(&mut con)
        .unwrap();
    let taken_at = Instant::now();
    let outcome = tokio::time::timeout(Duration::from_secs(10), run)
        .await
        .expect("run returned")
        .expect("join");
    let took = taken_at.elapsed();
    assert!(matches!(outcome, Err(Error::Lost { .. })), "{outcome:?}");
    assert!(dropped.load(Ordering::SeqCst), "the work was dropped");
    assert!(took < TTL + Duration::from_secs(1), "took {took:?}");
    // The release that followed is owner-checked: the intruder keeps it.
    tokio::time::sleep(Duration::from_millis(200)).await;
    let holder: Option<String> = redis::cmd("GET")
        .arg("leasehold:{taken}:lock")
        .query(&mut con)
        .unwrap();
    assert_eq!(holder.as_deref(), Some("intruder"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_paused_past_the_ttl_drops_the_work_and_returns_lost() {
    let server = RedisServer::start();
    let client = common::client(&server).await;
    let dropped = Arc::new(AtomicBool::new(false));
    let flag = DropFlag(Arc::clone(&dropped));
    let (started, is_started) = oneshot::channel();
    let run = {
        let lock = client.lock("paused").ttl(TTL);
        tokio::spawn(async move {
            lock.run(|_fence| async move {
                let _flag = flag;
                started.send(()).unwrap();
                std::future::pending::<()>().await;
            })
            .await
        })
    };
    is_started.await.expect("the work started");
    server.pause();
    let paused_at = Instant::now();
    let outcome = tokio::time::timeout(Duration::from_secs(10), run).await;
    let took = paused_at.elapsed();
    server.resume();
    let outcome = outcome.expect("run returned").expect("join");
    assert!(matches!(outcome, Err(Error::Lost { .. })), "{outcome:?}");
    assert!(dropped.load(Ordering::SeqCst), "the work was dropped");
    // No renewal gets through: the validity (TTL - drift from the last
    // renewal sent) runs out within one TTL of the pause.
    assert!(took < TTL + Duration::from_secs(1), "took {took:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lease_found_gone_by_the_release_returns_lost_not_the_output() {
    let server = RedisServer::start();
    let client = common::client(&server).await;
    // A long TTL: no renewal comes before the work ends, so only the
    // release can see that the keys were deleted during the work.
    let lock = client.lock("gone-at-end").ttl(Duration::from_secs(30));
    let outcome = lock
        .run(|_fence| async {
            assert!(delete_lock_keys(&server, "gone-at-end") > 0);
            "output"
        })
        .await;
    assert!(matches!(outcome, Err(Error::Lost { .. })), "{outcome:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_error_inside_the_work_is_returned_and_the_lock_released() {
    let server = RedisServer::start();
    let client = common::client(&server).await;
    for section in ALL {
        let name = format!("error:{section:?}");
        let out = section
            .run(
                &client,
                &name,
                Box::new(|_fence| Box::pin(async { Err::<(), _>("the work failed") })),
            )
            .await
            .expect("the section itself ran");
        assert_eq!(out, Err("the work failed"));
        assert!(
            section.is_free(&client, &name).await,
            "{section:?}: released after"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_panic_inside_the_work_still_releases() {
    let server = RedisServer::start();
    let client = common::client(&server).await;
    for section in ALL {
        let name = format!("panic:{section:?}");
        let run = {
            let client = client.clone();
            let name = name.clone();
            tokio::spawn(async move {
                section
                    .run(
                        &client,
                        &name,
                        Box::new(|_fence| Box::pin(async { panic!("the work panicked") })),
                    )
                    .await
            })
        };
        let joined = run.await;
        assert!(
            joined.is_err_and(|e| e.is_panic()),
            "{section:?}: the panic came through"
        );
        // The guard was dropped as the panic unwound: its release goes out
        // in the background at once, far sooner than the TTL.
        let deadline = Instant::now() + Duration::from_secs(5);
        while !section.is_free(&client, &name).await {
            assert!(Instant::now() < deadline, "{section:?}: never released");
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn run_gives_up_after_the_handles_wait() {
    let server = RedisServer::start();
    let client = common::client(&server).await;
    let _held = client.lock("busy").acquire().await.unwrap();
    let ran = Arc::new(AtomicBool::new(false));
    let ran_inside = Arc::clone(&ran);
    let outcome = client
        .lock("busy")
        .wait(Duration::from_millis(200))
        .run(|_fence| async move { ran_inside.store(true, Ordering::SeqCst) })
        .await;
    assert!(matches!(outcome, Err(Error::Timeout { .. })), "{outcome:?}");
    assert!(!ran.load(Ordering::SeqCst), "the work never started");
}

mod blocking {
    use super::*;

    fn client(server: &RedisServer) -> leasehold::blocking::Client {
        leasehold::blocking::Client::connect(&server.url()).expect("connect")
    }

    #[test]
    fn blocking_run_returns_the_output_and_releases_after() {
        let server = RedisServer::start();
        let client = client(&server);
        let lock = client.lock("b:out").ttl(TTL);
        let fence = lock.run(|fence| async move { fence }).expect("run");
        assert!(fence > 0);
        assert!(lock.try_acquire().unwrap().is_some(), "released after");
        let read = client.rw_lock("b:rw").ttl(TTL);
        assert_eq!(read.run_read(|_| async { 1 }).unwrap(), 1);
        assert_eq!(read.run_write(|_| async { 2 }).unwrap(), 2);
        let sem = client.semaphore("b:sem", 1).ttl(TTL);
        assert_eq!(sem.run(|_| async { 3 }).unwrap(), 3);
        let re = client.reentrant_lock("b:re").ttl(TTL);
        assert_eq!(re.run(|_| async { 4 }).unwrap(), 4);
        let fair = client.fair_lock("b:fair").ttl(TTL);
        assert_eq!(fair.run(|_| async { 5 }).unwrap(), 5);
        assert!(read.try_write().unwrap().is_some(), "rw released");
        assert!(sem.try_acquire().unwrap().is_some(), "permit released");
    }

    #[test]
    fn blocking_run_drops_the_work_when_the_lease_is_deleted() {
        let server = RedisServer::start();
        let client = client(&server);
        let dropped = Arc::new(AtomicBool::new(false));
        let flag = DropFlag(Arc::clone(&dropped));
        let (started, is_started) = std::sync::mpsc::channel();
        let deleter = std::thread::scope(|scope| {
            let server = &server;
            let deleter = scope.spawn(move || {
                is_started
                    .recv_timeout(Duration::from_secs(10))
                    .expect("the work started");
                assert!(delete_lock_keys(server, "b:deleted") > 0);
                Instant::now()
            });
            let outcome = client.lock("b:deleted").ttl(TTL).run(|_fence| async move {
                let _flag = flag;
                started.send(()).unwrap();
                std::future::pending::<()>().await;
            });
            let returned = Instant::now();
            assert!(matches!(outcome, Err(Error::Lost { .. })), "{outcome:?}");
            (deleter.join().unwrap(), returned)
        });
        let (deleted_at, returned) = deleter;
        assert!(dropped.load(Ordering::SeqCst), "the work was dropped");
        let took = returned.duration_since(deleted_at);
        assert!(took < TTL + Duration::from_secs(1), "took {took:?}");
    }
}
