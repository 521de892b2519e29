//! The deterministic CI set: every scenario against real processes and
//! real `redis-server`s (one, or five Redlock nodes), one at a time (they
//! measure time, and the machine has few cores).

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::{Mutex, OnceLock};
use std::time::Duration;

use leasehold_chaos::check::{Outage, Property, outages};
use leasehold_chaos::{
    FaultKind, OpKind, Outcome, QUEUE_HEARTBEAT, QUEUE_WINDOW, Register, Report, RunOptions, find,
    run,
};

static SERIAL: Mutex<()> = Mutex::new(());

const MS: u64 = 1000;

/// The `leasehold` binary of this workspace, built now if it is missing or
/// stale (a no-op otherwise). Cargo gives a crate's tests its own binaries
/// (`CARGO_BIN_EXE_*`) but not another crate's, and a binary-only crate
/// cannot be a dependency (artifact dependencies are unstable), so this
/// asks the cargo running the tests to build it next to ours.
///
/// `LEASEHOLD_EXE` names one already built instead: scripts/test builds every
/// binary once and runs the tests beside each other, where a `cargo build`
/// with other features would replace the `leasehold` the CLI's tests are running.
fn leasehold_exe() -> PathBuf {
    static BUILT: OnceLock<PathBuf> = OnceLock::new();
    BUILT
        .get_or_init(|| {
            if let Some(exe) = std::env::var_os("LEASEHOLD_EXE") {
                return exe.into();
            }
            let ours = Path::new(env!("CARGO_BIN_EXE_leasehold-chaos"));
            let profile_dir = ours.parent().expect("binaries live in a profile directory");
            let target_dir = profile_dir
                .parent()
                .expect("profile directories live in a target");
            let mut cargo = Command::new(env!("CARGO"));
            cargo
                .args([
                    "build",
                    "--locked",
                    "-p",
                    "leasehold-cli",
                    "--bin",
                    "leasehold",
                ])
                .arg("--target-dir")
                .arg(target_dir)
                .current_dir(env!("CARGO_MANIFEST_DIR"));
            // What cargo set for this test binary is not the caller's
            // environment: build scripts that track a variable among them
            // (ring's tracks CARGO_MANIFEST_DIR) would see it changed, and
            // this build and the next `cargo test` would each rebuild ring,
            // rustls, redis and leasehold for the other (~30 s each).
            for (name, _) in std::env::vars_os() {
                if name.to_str().is_some_and(set_by_cargo_for_tests) {
                    cargo.env_remove(&name);
                }
            }
            if profile_dir.ends_with("release") {
                cargo.arg("--release");
            }
            let status = cargo.status().expect("run cargo to build `leasehold`");
            assert!(status.success(), "cargo could not build `leasehold`");
            profile_dir.join("leasehold")
        })
        .clone()
}

/// Whether `name` is a variable cargo sets when it runs a test binary
/// (not one of cargo's own settings, such as `CARGO_HOME`, which stay).
fn set_by_cargo_for_tests(name: &str) -> bool {
    matches!(
        name,
        "CARGO_MANIFEST_DIR"
            | "CARGO_MANIFEST_PATH"
            | "CARGO_MANIFEST_LINKS"
            | "CARGO_PRIMARY_PACKAGE"
            | "CARGO_CRATE_NAME"
            | "CARGO_TARGET_TMPDIR"
    ) || name.starts_with("CARGO_PKG_")
        || name.starts_with("CARGO_BIN_EXE_")
}

fn run_ci(name: &str) -> Report {
    let scenario = find(name).expect("scenario exists");
    // Before the lock: building takes a while the first time.
    let leasehold_exe =
        (scenario.fault == leasehold_chaos::Fault::KillRunWrapper).then(leasehold_exe);
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let report = run(
        scenario,
        &RunOptions {
            duration: scenario.ci_duration,
            workers: 4,
            seed: 42,
            worker_exe: env!("CARGO_BIN_EXE_leasehold-chaos").into(),
            leasehold_exe,
        },
    );
    eprint!("{}", report.summary());
    assert!(report.passed(), "{}", report.summary());
    report
}

/// The faults of `kind`, with their target (worker, fence).
fn targets(report: &Report, kind: FaultKind) -> Vec<(u64, u32, u64)> {
    let found: Vec<_> = report
        .history
        .faults
        .iter()
        .filter(|f| f.kind == kind)
        .map(|f| {
            let (w, fence) = f.target.expect("holder fault has a target");
            (f.t, w, fence)
        })
        .collect();
    assert!(!found.is_empty(), "no {kind:?} fault was injected");
    found
}

/// When `worker` reported losing the lease of `fence`.
fn lost_at(report: &Report, worker: u32, fence: u64) -> Option<u64> {
    let mut lost = report.history.lost.iter();
    lost.find(|l| l.worker == worker && l.fence == fence)
        .map(|l| l.t)
}

/// What `worker`'s release of `fence` returned.
fn released(report: &Report, worker: u32, fence: u64) -> Outcome {
    let mut releases = report.history.releases.iter();
    releases
        .find(|r| r.worker == worker && r.fence == fence)
        .expect("the holder released")
        .outcome
}

fn micros(d: Duration) -> u64 {
    u64::try_from(d.as_micros()).expect("fits")
}

#[test]
fn no_faults_is_safe_over_a_thousand_acquisitions() {
    let report = run_ci("no-faults");
    assert!(report.acquisitions >= 1000, "{}", report.summary());
    assert!(report.violations.is_empty());
    assert!(!report.history.probes.is_empty(), "no non-owner probe ran");
    let writes = report
        .history
        .ops
        .iter()
        .filter(|op| op.register == Register::Unfenced);
    assert!(writes.count() >= 2 * report.acquisitions - 8);
}

#[test]
fn client_paused_past_ttl_loses_an_unfenced_update_and_fencing_rejects_it() {
    let report = run_ci("client-pause-past-ttl");
    let lost_update = report
        .violations
        .iter()
        .any(|v| v.property == Property::LostUpdate && v.register == Some(Register::Unfenced));
    assert!(lost_update, "{}", report.summary());
    for (_, worker, fence) in targets(&report, FaultKind::PauseLong) {
        let rejected = report.history.ops.iter().any(|op| {
            op.worker == worker
                && op.fence == fence
                && op.register == Register::Fenced
                && !op.accepted
        });
        assert!(
            rejected,
            "the fenced register accepted paused fence {fence}"
        );
        assert!(
            lost_at(&report, worker, fence).is_some(),
            "the paused worker's lost() did not fire for fence {fence}"
        );
    }
}

#[test]
fn client_paused_shorter_than_ttl_keeps_its_lease() {
    let report = run_ci("client-pause-short");
    for (_, worker, fence) in targets(&report, FaultKind::PauseShort) {
        assert_eq!(
            lost_at(&report, worker, fence),
            None,
            "fence {fence} was lost"
        );
    }
}

#[test]
fn killed_client_frees_the_lock_within_ttl_plus_one_second() {
    let report = run_ci("client-kill");
    let ttl = find("client-kill").expect("exists").ttl;
    for (t, worker, _) in targets(&report, FaultKind::Kill) {
        let next = report
            .history
            .acquisitions
            .iter()
            .filter(|a| a.worker != worker && a.t > t)
            .map(|a| a.t)
            .min()
            .expect("someone acquired after the kill");
        let bound = micros(ttl + Duration::from_secs(1));
        assert!(next - t <= bound, "free again after {} ms", (next - t) / MS);
    }
}

#[test]
fn redis_restart_without_persistence_keeps_fences_increasing() {
    let report = run_ci("redis-restart-empty");
    assert!(report.stale_rejected >= 1);
    let acquisitions = &report.history.acquisitions;
    for (t, _, _) in targets(&report, FaultKind::RestartEmpty) {
        let before = acquisitions
            .iter()
            .filter(|a| a.t <= t)
            .map(|a| a.fence)
            .max();
        let after = acquisitions
            .iter()
            .filter(|a| a.started > t)
            .map(|a| a.fence)
            .min();
        let (Some(before), Some(after)) = (before, after) else {
            panic!("acquisitions on both sides of the restart expected");
        };
        assert!(
            after > before,
            "fence {after} after the restart is not above {before}"
        );
    }
}

#[test]
fn redis_restart_with_fsync_always_keeps_the_lease() {
    let report = run_ci("redis-restart-aof");
    for (_, worker, fence) in targets(&report, FaultKind::RestartAof) {
        assert_eq!(released(&report, worker, fence), Outcome::Ok);
    }
}

#[test]
fn blackholed_client_learns_it_lost_the_lease_within_its_validity() {
    let report = run_ci("client-blackhole");
    let ttl = find("client-blackhole").expect("exists").ttl;
    for (t, worker, fence) in targets(&report, FaultKind::Blackhole) {
        let lost = lost_at(&report, worker, fence).expect("lost() fired");
        // valid_until <= blackhole start + ttl; 150 ms of scheduling slack.
        let bound = micros(ttl + Duration::from_millis(150));
        assert!(lost - t <= bound, "lost() after {} ms", (lost - t) / MS);
    }
}

#[test]
fn script_flush_mid_run_is_safe() {
    let report = run_ci("script-flush");
    assert!(report.faults >= 5, "{}", report.summary());
    assert!(report.acquisitions >= 200, "{}", report.summary());
}

/// Redis frozen for 1.4 TTLs right as an `acquire()` sends its first
/// attempt: that attempt's grant arrives too late and is given back before
/// the retry (on the server: a release, then an attempt with the same
/// token). Before 4df6ea7 the give-back was queued behind the retry, which
/// found the lease "already ours", and then deleted it: two holders.
#[test]
fn redis_frozen_past_ttl_during_acquires_gives_late_grants_back_and_recovers() {
    let report = run_ci("redis-pause-past-ttl");
    let ttl = find("redis-pause-past-ttl").expect("exists").ttl;
    let history = &report.history;
    let resumes: Vec<u64> = history
        .faults
        .iter()
        .filter(|f| f.kind == FaultKind::RedisResumed)
        .map(|f| f.t)
        .collect();
    assert!(resumes.len() >= 3, "{}", report.summary());
    let late = report.late_grants.as_ref().expect("the server was watched");
    assert_eq!(late.len(), resumes.len() + 1, "{late:?}");
    assert!(
        late[1..].iter().filter(|g| g.before_retry > 0).count() >= 2,
        "fewer than two freezes produced a late grant: {late:?}"
    );
    assert!(late.iter().all(|g| g.after_retry == 0), "{late:?}");
    for t in resumes {
        let next = history
            .acquisitions
            .iter()
            .filter(|a| a.t > t)
            .map(|a| a.t)
            .min()
            .expect("someone acquired after the resume");
        let bound = micros(ttl + Duration::from_secs(1));
        assert!(next - t <= bound, "granted {} ms after", (next - t) / MS);
    }
    assert!(report.violations.is_empty(), "{}", report.summary());
}

/// `leasehold run` processes contend; the wrapper (not its command) of a
/// holder is killed with SIGKILL while its command, started by `sh` in the
/// background, holds and has read. The command and everything it started
/// must be gone before the lease can expire: its write, sent once another
/// holder has written, must never arrive.
#[test]
fn killed_run_wrapper_takes_its_command_down_before_the_lease_expires() {
    let report = run_ci("run-wrapper-kill");
    for (t, worker, fence) in targets(&report, FaultKind::WrapperKilled) {
        let wrote = report.history.ops.iter().any(|op| {
            op.worker == worker && op.fence == fence && op.kind == OpKind::Write && op.t > t
        });
        assert!(
            !wrote,
            "the command of fence {fence} wrote after its wrapper was killed"
        );
    }
    assert!(report.acquisitions >= 50, "{}", report.summary());
}

/// One holder is kept until every other worker is queued; the first of
/// them to be handed the lock is stopped as its `acquire()` returns, past
/// its lease (the TTL, and the queue window a lease handed to a waiter may
/// stay reserved for), until another worker has written. Once continued
/// it must be told `lost()` at once and never touch the resource.
#[test]
fn waiter_stopped_past_its_lease_after_a_handoff_is_told_lost_and_others_go_on() {
    let report = run_ci("handoff-pause-past-lease");
    let ttl = find("handoff-pause-past-lease").expect("exists").ttl;
    let history = &report.history;
    let paused: Vec<_> = history
        .faults
        .iter()
        .filter_map(|f| match (f.kind, f.target) {
            (FaultKind::HandOffPaused { for_ms }, Some(target)) => Some((f.t, for_ms, target)),
            _ => None,
        })
        .collect();
    assert!(!paused.is_empty(), "{}", report.summary());
    for (t, for_ms, (worker, fence)) in paused {
        assert!(
            for_ms * MS >= micros(ttl.max(QUEUE_WINDOW)),
            "stopped only {for_ms} ms"
        );
        // Its acquire() waited: called while the holder before it held.
        let acquired = history
            .acquisitions
            .iter()
            .find(|a| a.worker == worker && a.fence == fence)
            .expect("the stopped acquisition was recorded");
        let previous = history
            .acquisitions
            .iter()
            .filter(|a| a.fence < fence)
            .max_by_key(|a| a.fence)
            .expect("a holder before it");
        assert_ne!(previous.worker, worker);
        let let_go = history
            .releases
            .iter()
            .find(|r| r.worker == previous.worker && r.fence == previous.fence)
            .expect("the holder before it released")
            .t;
        assert!(
            acquired.started < let_go,
            "fence {fence}'s acquire() was called after the holder before it released"
        );
        // Another worker got the lock while it was stopped.
        let next = history
            .acquisitions
            .iter()
            .filter(|a| a.worker != worker && a.t > t)
            .map(|a| a.t)
            .min()
            .expect("someone acquired after the stop");
        let resumed = t + for_ms * MS;
        assert!(next < resumed, "granted only after the stop ended");
        let bound = micros(ttl.max(QUEUE_WINDOW) + QUEUE_HEARTBEAT + Duration::from_secs(1));
        assert!(next - t <= bound, "granted {} ms after", (next - t) / MS);
        // Told lost() as soon as it ran again; never touched the resource.
        let lost = lost_at(&report, worker, fence).expect("lost() fired");
        assert!(
            lost >= resumed && lost - resumed <= micros(ttl / 2),
            "lost() {} ms after it was continued",
            lost.saturating_sub(resumed) / MS
        );
        assert!(
            !history
                .ops
                .iter()
                .any(|op| op.worker == worker && op.fence == fence),
            "fence {fence} touched the resource"
        );
        assert_ne!(released(&report, worker, fence), Outcome::Ok);
    }
}

/// One holder is kept until every other worker is queued; they are all
/// killed with SIGKILL, and the holder lets go, handing the lock to a dead
/// waiter. That lease is reserved at most until the dead waiter's queue
/// deadline, a queue window after its last attempt; a live waiter then
/// tries within a heartbeat.
#[test]
fn waiters_killed_while_queued_leave_the_lock_to_a_live_worker_within_the_queue_window() {
    let report = run_ci("queued-waiters-kill");
    let history = &report.history;
    let kills: Vec<_> = history
        .faults
        .iter()
        .filter_map(|f| match f.kind {
            FaultKind::WaitersKilled { killed, queued } => Some((f.t, killed, queued)),
            _ => None,
        })
        .collect();
    assert!(!kills.is_empty(), "{}", report.summary());
    for (t, killed, queued) in kills {
        // Every worker but the holder, each counted queued.
        assert_eq!(killed, 3, "{}", report.summary());
        assert_eq!(queued, killed, "{}", report.summary());
        let next = history
            .acquisitions
            .iter()
            .filter(|a| a.t > t)
            .map(|a| a.t)
            .min()
            .expect("someone acquired after the kill");
        let bound = micros(QUEUE_WINDOW + QUEUE_HEARTBEAT + Duration::from_secs(1));
        assert!(next - t <= bound, "granted {} ms after", (next - t) / MS);
    }
    assert!(report.acquisitions >= 100, "{}", report.summary());
}

#[test]
fn redlock_without_faults_is_safe_with_increasing_fences() {
    let report = run_ci("redlock-no-faults");
    assert!(report.acquisitions >= 100, "{}", report.summary());
    assert!(!report.history.probes.is_empty(), "no non-owner probe ran");
    // One machine, one clock: a fence regression would be a real bug.
    assert!(report.violations.is_empty(), "{}", report.summary());
}

/// The outages of a Redlock scenario, each checked for what a stopped
/// minority must not change.
fn minority_outages(name: &str, stretches: usize) -> Report {
    let report = run_ci(name);
    let found = outages(&report.history.faults);
    assert_eq!(found.len(), stretches, "{}", report.summary());
    for o in &found {
        assert!(!o.majority);
        let granted = report
            .history
            .acquisitions
            .iter()
            .filter(|a| a.started >= o.from && o.contains(a.t))
            .count();
        assert!(
            granted >= 5,
            "{granted} acquisitions while {} of 5 nodes were stopped",
            o.stopped
        );
        holder_outcome(&report, o);
    }
    report
}

/// The holder the nodes stopped under keeps its lease while it is on a
/// quorum of running nodes, and otherwise learns it lost it in time (the
/// checkers hold the bounds; this checks that each case ran its course).
fn holder_outcome(report: &Report, o: &Outage) {
    let (worker, fence) = o.target.expect("nodes stop under a holder");
    let outcome = released(report, worker, fence);
    if o.holder_on >= 3 {
        assert_eq!(outcome, Outcome::Ok);
        assert_eq!(lost_at(report, worker, fence), None);
    } else {
        assert!(lost_at(report, worker, fence).is_some());
    }
}

#[test]
fn redlock_with_one_of_five_nodes_killed_or_frozen_is_safe_and_live() {
    minority_outages("redlock-1-of-5-stopped", 2);
}

#[test]
fn redlock_with_two_of_five_nodes_stopped_is_safe_and_live() {
    minority_outages("redlock-2-of-5-stopped", 2);
}

#[test]
fn redlock_with_three_of_five_nodes_killed_grants_nothing_and_recovers() {
    let report = run_ci("redlock-3-of-5-stopped");
    let found = outages(&report.history.faults);
    assert_eq!(found.len(), 1, "{}", report.summary());
    let o = &found[0];
    assert!(o.majority);
    let back = o.until.expect("the nodes came back");
    let history = &report.history;
    assert!(
        history
            .acquisitions
            .iter()
            .all(|a| !(a.started >= o.from && a.t <= back)),
        "an acquisition was granted while 3 of 5 nodes were down"
    );
    let quorum_errors = history
        .acquire_errors
        .iter()
        .filter(|e| e.quorum && o.contains(e.t))
        .count();
    assert!(quorum_errors >= 1, "{}", report.summary());
    // Both live nodes were read with no attempt in flight, and were free.
    assert_eq!(history.node_checks.len(), 2, "{:?}", history.node_checks);
    assert!(
        history
            .node_checks
            .iter()
            .all(|c| c.holder.is_none() && c.error.is_none())
    );
    holder_outcome(&report, o);
    let after = history
        .acquisitions
        .iter()
        .filter(|a| a.started > back)
        .count();
    assert!(
        after >= 20,
        "only {after} acquisitions after the nodes came back"
    );
}

/// Nodes restarted empty one at a time, 0.7 TTL apart, the first three
/// under one holder: each renewal the quorum grants puts the lease back on
/// the restarted node (over a contender's failed attempt if need be), so
/// the holder keeps it and nobody else gets the lock meanwhile; after the
/// holder lets go, the others get it between restarts. With the re-take
/// disabled it fails with any number of workers.
#[test]
fn redlock_rolling_restart_keeps_the_lease_on_a_quorum() {
    let report = run_ci("redlock-rolling-restart");
    let restarts: Vec<_> = report
        .history
        .faults
        .iter()
        .filter_map(|f| match f.kind {
            FaultKind::NodeRestarted {
                node, holder_on, ..
            } => Some((f.t, node, holder_on, f.target)),
            _ => None,
        })
        .collect();
    let mut nodes: Vec<u32> = restarts.iter().map(|r| r.1).collect();
    nodes.sort_unstable();
    nodes.dedup();
    assert_eq!(nodes, [0, 1, 2, 3, 4], "{}", report.summary());
    let held: Vec<_> = restarts.iter().filter(|r| r.3.is_some()).collect();
    assert!(held.len() >= 3, "{}", report.summary());
    for &&(_, node, holder_on, target) in &held {
        assert!(holder_on >= 3, "node {node}: lease on {holder_on} others");
        let (worker, fence) = target.expect("held");
        assert_eq!(lost_at(&report, worker, fence), None);
        assert_eq!(released(&report, worker, fence), Outcome::Ok);
    }
    let free_from = restarts
        .iter()
        .find(|r| r.3.is_none())
        .expect("restarts after the holder let go")
        .0;
    let after = report
        .history
        .acquisitions
        .iter()
        .filter(|a| a.t > free_from)
        .count();
    assert!(
        after >= 20,
        "only {after} acquisitions after the holder let go"
    );
}

#[test]
fn a_frozen_cluster_master_costs_no_lease_on_a_healthy_one() {
    let report = run_ci("cluster-master-frozen");
    let freezes: Vec<(u64, u64)> = report
        .history
        .faults
        .iter()
        .filter_map(|f| match f.kind {
            FaultKind::MasterFrozen { for_ms } => Some((f.t, for_ms)),
            _ => None,
        })
        .collect();
    assert!(freezes.len() >= 2, "{}", report.summary());
    let healthy_lost = report.history.held_lost.iter().filter(|l| l.healthy);
    assert_eq!(healthy_lost.count(), 0, "{}", report.summary());
    assert!(
        report.history.held_lost.iter().any(|l| !l.healthy),
        "no lease on the frozen master was lost: {}",
        report.summary()
    );
    // The contended lock is on a healthy master: taken all through each
    // freeze, not only after it.
    for (t, for_ms) in freezes {
        let during = report
            .history
            .acquisitions
            .iter()
            .filter(|a| a.t > t && a.t < t + for_ms * MS)
            .count();
        assert!(
            during >= 20,
            "{during} acquisitions during a {for_ms} ms freeze: {}",
            report.summary()
        );
    }
}
