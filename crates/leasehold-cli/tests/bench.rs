//! `leasehold bench --quick --json` end to end: a private redis-server (and
//! five more for Redlock), worker processes, every scenario. Checks the shape and sanity of the
//! output only; performance lives in the benchmark's own output.

use std::io::Read;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;
use serde_json::Value;

/// Longest the quick bench may take here (a loaded machine, a debug build).
const LIMIT: Duration = Duration::from_secs(180);

/// Runs `leasehold` with `args` (its private redis-server) within [`LIMIT`]:
/// (stdout, stderr) of a successful run.
fn bench(args: &[&str]) -> (String, String) {
    let mut child = Command::new(env!("CARGO_BIN_EXE_leasehold"))
        .args(args)
        .env_remove("LEASEHOLD_URL")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("leasehold starts");
    let started = Instant::now();
    let status = loop {
        if let Some(status) = child.try_wait().expect("wait") {
            break status;
        }
        if started.elapsed() > LIMIT {
            let pid = Pid::from_raw(i32::try_from(child.id()).expect("pid"));
            let _ = kill(pid, Signal::SIGKILL);
            let _ = child.wait();
            panic!("leasehold bench --quick ran past {LIMIT:?}");
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    let (mut stdout, mut stderr) = (String::new(), String::new());
    child
        .stdout
        .take()
        .expect("stdout")
        .read_to_string(&mut stdout)
        .expect("read");
    child
        .stderr
        .take()
        .expect("stderr")
        .read_to_string(&mut stderr)
        .expect("read");
    assert!(
        status.success(),
        "{status}: stdout {stdout} stderr {stderr}"
    );
    (stdout, stderr)
}

/// On a machine measured as noisy (forced here: no loopback round trip is
/// at most a nanosecond) the bench prints every figure and target but judges none, and
/// says so instead of a verdict.
#[test]
fn a_noisy_machine_gets_figures_but_no_verdict() {
    let (stdout, stderr) = bench(&["bench", "uncontended", "--quick", "--quiet-rtt", "1ns"]);
    let calibration = stdout
        .lines()
        .find(|l| l.starts_with("calibration: "))
        .unwrap_or_else(|| panic!("no calibration line: {stdout} {stderr}"));
    assert!(
        calibration.contains("noisy: floors not judged") && calibration.contains("--quiet-rtt"),
        "{calibration}"
    );
    let last = stdout.lines().rev().find(|l| !l.is_empty()).unwrap_or("");
    assert!(
        last.starts_with("noisy: floors not judged (round trip"),
        "{stdout}"
    );
    assert!(stdout.contains("not judged"), "{stdout}");
    for verdict in [" PASS", " SHORT", "figures PASS"] {
        assert!(!stdout.contains(verdict), "{verdict:?} in {stdout}");
    }

    let (json, _) = bench(&[
        "bench",
        "uncontended",
        "--quick",
        "--json",
        "--quiet-rtt",
        "1ns",
    ]);
    let report: Value = serde_json::from_str(&json).expect("one JSON object");
    assert_eq!(report["calibration"]["judged"], false, "{json}");
    assert_eq!(report["summary"]["judged"], false);
    assert!(
        report["summary"]["verdict"]
            .as_str()
            .is_some_and(|v| v.starts_with("noisy: floors not judged")),
        "{}",
        report["summary"]
    );
    let rows = report["scenarios"]["uncontended"]["rows"]
        .as_array()
        .expect("rows");
    assert!(rows.iter().any(|r| r["target"].is_object()));
    for row in rows.iter().filter(|r| r["target"].is_object()) {
        assert_eq!(row["verdict"], "not judged", "{row}");
    }
}

#[test]
fn quick_bench_reports_every_scenario_with_targets_and_sane_values() {
    let (stdout, _) = bench(&["bench", "--quick", "--json"]);
    let report: Value = serde_json::from_str(&stdout)
        .unwrap_or_else(|e| panic!("stdout is not one JSON object ({e}): {stdout}"));

    assert!(report["machine"]["nproc"].as_u64().is_some_and(|n| n > 0));
    assert!(
        report["machine"]["rtt_us"]
            .as_f64()
            .is_some_and(|v| v > 0.0)
    );
    assert!(report["machine"]["redis_version"].is_string());
    // The machine measured before anything is judged.
    let calibration = &report["calibration"];
    assert!(calibration["rtt_us"].as_f64().is_some_and(|v| v > 0.0));
    assert!(calibration["judged"].is_boolean(), "{calibration}");
    assert_eq!(report["summary"]["judged"], calibration["judged"]);
    for key in [
        "uncontended",
        "contended",
        "many_keys",
        "held_leases",
        "redlock",
        "run_stampede",
    ] {
        let section = &report["scenarios"][key];
        let rows = section["rows"]
            .as_array()
            .unwrap_or_else(|| panic!("{key}: no rows"));
        assert!(!rows.is_empty(), "{key}");
        assert!(
            rows.iter().any(|r| r["target"].is_object()),
            "{key}: no figure with a target"
        );
        // Every scenario keeps a floor of DESIGN.md section 8, with the
        // guarantee it pays for.
        assert!(
            rows.iter()
                .any(|r| r["target"].is_object() && r["floor_reason"].is_string()),
            "{key}: no floor with its reason"
        );
        for row in rows {
            if let Some(v) = row["value"].as_f64() {
                assert!(v.is_finite() && v >= 0.0, "{key}: {row}");
            }
            if row["target"].is_object() {
                let verdict = row["verdict"].as_str().unwrap_or("");
                let judged = report["calibration"]["judged"] == true;
                let verdicts: &[&str] = if judged {
                    &["PASS", "SHORT", "n/a"]
                } else {
                    &["not judged"]
                };
                assert!(verdicts.contains(&verdict), "{key}: {row}");
            }
        }
    }

    let uncontended = &report["scenarios"]["uncontended"]["data"];
    for library in ["leasehold", "raw", "rslock"] {
        assert!(
            uncontended[library]["ops"].as_u64().is_some_and(|n| n > 0),
            "{library}"
        );
        assert!(
            uncontended[library]["p50_us"]
                .as_f64()
                .is_some_and(|v| v > 0.0),
            "{library}"
        );
    }

    let runs = report["scenarios"]["contended"]["data"]["runs"]
        .as_array()
        .expect("contended runs");
    for waiters in [4, 16, 64] {
        for library in ["leasehold", "rslock"] {
            let run = runs
                .iter()
                .find(|r| r["waiters"] == waiters && r["library"] == library)
                .unwrap_or_else(|| panic!("no {library} run with {waiters} waiters"));
            let per_waiter = run["acquisitions_per_waiter"]
                .as_array()
                .expect("per waiter");
            assert_eq!(per_waiter.len(), waiters, "{run}");
            assert!(run["acquisitions"].as_u64().is_some_and(|n| n > 0), "{run}");
            // One holder at a time, on every run of either library.
            assert_eq!(run["overlapping_holders"], 0, "{run}");
            let fairness = run["fairness"].as_f64().expect("fairness");
            assert!((0.0..=1.0).contains(&fairness), "{run}");
            let calls = &run["commands_per_acquisition"];
            let (top, total) = (
                calls["client_calls"].as_f64(),
                calls["including_lua_internal"].as_f64(),
            );
            assert!(top.is_some_and(|t| t > 0.0) && total >= top, "{run}");
        }
    }

    // The long holds (issue 34): both libraries at 16 and 64 waiters, one
    // holder at a time, with Redis CPU per acquisition and wait p99 judged
    // against rslock's.
    let long = report["scenarios"]["contended"]["data"]["long_hold_runs"]
        .as_array()
        .expect("long-hold runs");
    for waiters in [16, 64] {
        for library in ["leasehold", "rslock"] {
            let run = long
                .iter()
                .find(|r| r["waiters"] == waiters && r["library"] == library)
                .unwrap_or_else(|| panic!("no long-hold {library} run with {waiters} waiters"));
            assert!(run["acquisitions"].as_u64().is_some_and(|n| n > 0), "{run}");
            assert_eq!(run["overlapping_holders"], 0, "{run}");
        }
    }
    let rows = report["scenarios"]["contended"]["rows"]
        .as_array()
        .expect("rows");
    for figure in ["Redis CPU/acquisition", "wait p99"] {
        assert!(
            rows.iter().any(|r| r["target"].is_object()
                && r["figure"].as_str().is_some_and(
                    |f| f.starts_with("hold 20ms, 64 waiters: ") && f.contains(figure)
                )),
            "no long-hold {figure} row with a target"
        );
    }

    let keys = &report["scenarios"]["many_keys"]["data"];
    assert!(keys["leasehold_acquired"].as_u64().is_some_and(|n| n > 0));
    assert!(keys["raw_acquired"].as_u64().is_some_and(|n| n > 0));

    let redlock = &report["scenarios"]["redlock"]["data"];
    assert_eq!(redlock["nodes"], 5);
    assert_eq!(report["settings"]["redlock_nodes"], 5);
    for client in ["redlock", "one_node"] {
        for op in ["acquire", "acquire_release"] {
            let stats = &redlock[client][op];
            assert!(
                stats["ops"].as_u64().is_some_and(|n| n > 0),
                "{client} {op}"
            );
            let (p50, p99) = (stats["p50_us"].as_f64(), stats["p99_us"].as_f64());
            assert!(p50.is_some_and(|v| v > 0.0), "{client} {op}: {stats}");
            assert!(p99 >= p50, "{client} {op}: {stats}");
        }
    }
    for ratio in ["ratio_acquire_p50", "ratio_acquire_release_p50"] {
        assert!(redlock[ratio].as_f64().is_some_and(|v| v > 0.0), "{ratio}");
    }

    let stampede = &report["scenarios"]["run_stampede"]["data"];
    let rounds = stampede["rounds"].as_array().expect("run-stampede rounds");
    assert!(!rounds.is_empty());
    for round in rounds {
        assert_eq!(
            round["leasehold_counter"], stampede["plan"]["jobs"],
            "{round}"
        );
        assert_eq!(round["flock_counter"], stampede["plan"]["jobs"], "{round}");
    }
    assert_eq!(stampede["keys_left"].as_array().map(Vec::len), Some(0));
    // The critical path's tail beside its median.
    let between = stampede["breakdown_median_us"]["between"].as_f64();
    let between_p99 = stampede["between_p99_us"].as_f64();
    assert!(
        between.zip(between_p99).is_some_and(|(m, p99)| p99 >= m),
        "between: median {between:?}, p99 {between_p99:?}"
    );

    let held = &report["scenarios"]["held_leases"]["data"];
    assert_eq!(held["leases"], report["settings"]["leases"]);
    assert!(held["renewal_commands"].as_u64().is_some_and(|n| n > 0));
    assert!(held["leases_renewed"].as_u64().is_some_and(|n| n > 0));
}
