//! Every public future and guard can cross threads: `tokio::spawn` takes
//! only `Send` futures, so a future that is not `Send` is one a user cannot
//! spawn. Checked at compile time: this file does not build if one of them
//! is not `Send` (the futures are made, never polled, so no server is
//! needed). `Client::list` was not: "implementation of `Send` is not
//! general enough".

use std::time::Duration;

use leasehold::{
    Client, Election, FairLock, Leadership, Lock, LockGuard, MultiLock, MultiLockGuard, Permit,
    ReadGuard, ReentrantGuard, ReentrantLock, RwLock, Semaphore, WriteGuard,
};

fn send<T: Send>(_: T) {}
fn send_sync<T: Send + Sync>() {}

/// Handles, guards and the client are `Send + Sync`.
#[test]
fn handles_guards_and_the_client_are_send_and_sync() {
    send_sync::<Client>();
    send_sync::<Lock>();
    send_sync::<FairLock>();
    send_sync::<ReentrantLock>();
    send_sync::<RwLock>();
    send_sync::<Semaphore>();
    send_sync::<MultiLock>();
    send_sync::<Election>();
    send_sync::<LockGuard>();
    send_sync::<ReentrantGuard>();
    send_sync::<ReadGuard>();
    send_sync::<WriteGuard>();
    send_sync::<Permit>();
    send_sync::<MultiLockGuard>();
    send_sync::<Leadership>();
    send_sync::<leasehold::Error>();
}

/// Every future of the client and the handles is `Send` (never polled).
#[allow(dead_code, clippy::diverging_sub_expression)]
fn futures_of_the_client_and_handles_are_send(c: Client) {
    send(Client::connect("redis://127.0.0.1:1"));
    send(Client::builder().build());
    send(Client::redlock(["redis://127.0.0.1:1"]));
    send(c.list("*"));
    send(c.list_kinds("*"));
    send(c.kind("x"));
    send(c.break_lease("x"));
    send(c.close());

    let lock = c.lock("x");
    send(lock.acquire());
    send(lock.try_acquire());
    send(lock.status());
    send(lock.release_by_token("t"));
    send(lock.extend_by_token("t", Duration::from_secs(1)));
    send(lock.run(|_fence| async {}));

    let fair = c.fair_lock("x");
    send(fair.acquire());
    send(fair.try_acquire());
    send(fair.status());

    let reentrant = c.reentrant_lock("x");
    send(reentrant.acquire());
    send(reentrant.try_acquire());
    send(reentrant.status());
    send(reentrant.release_by_token("t"));

    let rw = c.rw_lock("x");
    send(rw.read());
    send(rw.write());
    send(rw.try_read());
    send(rw.try_write());
    send(rw.status());
    send(rw.run_read(|_fence| async {}));
    send(rw.run_write(|_fence| async {}));

    let semaphore = c.semaphore("x", 2);
    send(semaphore.acquire());
    send(semaphore.try_acquire());
    send(semaphore.status());
    send(semaphore.run(|_fence| async {}));

    let multi = c.multi_lock(["x", "y"]);
    send(multi.acquire());
    send(multi.try_acquire());
    send(multi.run(|_fences| async {}));

    let election = c.election("x");
    send(election.campaign("me"));
    send(election.try_campaign("me"));
    send(election.leader());
    send(election.lead("me", |_fence| async {}));
}

/// Every future of the guards is `Send` (never polled).
#[allow(dead_code)]
fn futures_of_the_guards_are_send(
    lock: LockGuard,
    read: ReadGuard,
    write: WriteGuard,
    permit: Permit,
    reentrant: ReentrantGuard,
    multi: MultiLockGuard,
    leader: Leadership,
) {
    send(lock.extend(Duration::from_secs(1)));
    send(lock.lost());
    send(lock.release());
    send(read.extend(Duration::from_secs(1)));
    send(read.release());
    send(write.lost());
    send(write.downgrade());
    send(permit.release());
    send(reentrant.release());
    send(multi.extend(Duration::from_secs(1)));
    send(multi.lost());
    send(multi.release());
    send(leader.resign());
}
