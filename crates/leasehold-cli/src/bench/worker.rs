//! Waiter processes for the contended scenario: the parent re-executes this
//! binary as `leasehold bench-worker`, one process per waiter, each with its
//! own client. A worker connects, prints `ready`, waits for `go` on stdin,
//! acquires and releases for a bounded time and count, and prints its
//! records as one JSON line. Timestamps are CLOCK_MONOTONIC nanoseconds,
//! comparable across processes on one host.

use std::process::Stdio;
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader, Lines};
use tokio::process::{Child, ChildStdin, ChildStdout, Command};

use crate::args::{BenchWorkerArgs, Global, Library};
use crate::exit::{self, Failure};
use crate::measure::{hold, monotonic_ns};
use crate::output::{emit, emit_json};
use crate::session::connect_to;

/// How long a worker waits for `go` after saying `ready`.
const GO_WAIT: Duration = Duration::from_secs(60);
/// Time past its run a worker may spend on its last acquisition.
pub(crate) const GRACE: Duration = Duration::from_secs(10);
/// How long all workers together may take to say `ready`.
const READY_WAIT: Duration = Duration::from_secs(60);

/// One acquisition: when asked, acquired and released (monotonic ns).
pub(crate) type Record = [u64; 3];

/// What one worker reports.
#[derive(Debug, Clone, Default)]
pub(crate) struct WorkerResult {
    /// Its acquisitions in order.
    pub(crate) records: Vec<Record>,
    /// Acquisitions that gave up (wait ran out).
    pub(crate) timeouts: u64,
}

/// The lock a worker contends for, through one library.
enum Contender {
    /// leasehold's lock handle.
    Leasehold(leasehold::Lock),
    /// rslock's manager, the resource and the TTL.
    Rslock(rslock::LockManager, String, Duration),
}

/// A held lock, through one library.
enum Holding {
    /// leasehold's guard.
    Leasehold(leasehold::LockGuard),
    /// rslock's lock.
    Rslock(rslock::Lock),
}

impl Contender {
    /// Connects (before `ready`, so connecting is not measured).
    async fn connect(
        global: &Global,
        args: &BenchWorkerArgs,
        wait: Duration,
    ) -> Result<Contender, Failure> {
        let url = global.single_url()?;
        let ttl = Duration::from_millis(args.ttl_ms);
        Ok(match args.library {
            Library::Leasehold => {
                let client = connect_to(&url, &global.prefix).await?;
                Contender::Leasehold(client.lock(&args.name).ttl(ttl).wait(wait))
            }
            Library::Rslock => {
                let manager = rslock::LockManager::new(vec![url]);
                // rslock connects on first use; a read opens the connection.
                manager
                    .query_redis_for_key_value(args.name.as_bytes())
                    .await
                    .map_err(|e| rslock_failure(&e))?;
                Contender::Rslock(manager, args.name.clone(), ttl)
            }
        })
    }

    /// Acquires, waiting until `deadline` at most (`None` then).
    async fn acquire(&self, deadline: Instant) -> Result<Option<Holding>, Failure> {
        match self {
            Contender::Leasehold(lock) => match lock.acquire().await {
                Ok(guard) => Ok(Some(Holding::Leasehold(guard))),
                Err(leasehold::Error::Timeout { .. }) => Ok(None),
                Err(e) => Err(e.into()),
            },
            // rslock's lock() gives up after its retries (3, 0-200 ms apart);
            // a waiter simply calls it again, as its users do.
            Contender::Rslock(manager, resource, ttl) => loop {
                match manager.lock(resource.as_bytes(), *ttl).await {
                    Ok(lock) => return Ok(Some(Holding::Rslock(lock))),
                    Err(rslock::LockError::Unavailable) if Instant::now() < deadline => {}
                    Err(rslock::LockError::Unavailable) => return Ok(None),
                    Err(e) => return Err(rslock_failure(&e)),
                }
            },
        }
    }

    /// Releases what `acquire` returned.
    async fn release(&self, holding: Holding) -> Result<(), Failure> {
        match (self, holding) {
            (_, Holding::Leasehold(guard)) => Ok(guard.release().await?),
            (Contender::Rslock(manager, ..), Holding::Rslock(lock)) => {
                manager.unlock(&lock).await;
                Ok(())
            }
            (Contender::Leasehold(_), Holding::Rslock(_)) => Err(Failure::with_code(
                exit::SOFTWARE,
                "bench worker: mixed libraries",
            )),
        }
    }
}

/// An rslock error as a failure.
fn rslock_failure(e: &rslock::LockError) -> Failure {
    Failure::with_code(exit::UNAVAILABLE, format!("rslock: {e}"))
}

/// `leasehold bench-worker`: one waiter process.
pub(crate) async fn worker(global: &Global, args: BenchWorkerArgs) -> Result<u8, Failure> {
    let run = Duration::from_millis(args.run_ms);
    let contender = Contender::connect(global, &args, run + GRACE).await?;
    emit("ready");
    // A blocking read on a thread of its own: one line, once.
    let go = tokio::task::spawn_blocking(|| {
        let mut line = String::new();
        std::io::stdin().read_line(&mut line).map(|_| line)
    });
    match tokio::time::timeout(GO_WAIT, go).await {
        Ok(Ok(Ok(line))) if line.trim() == "go" => {}
        _ => {
            return Err(Failure::with_code(
                exit::SOFTWARE,
                "bench worker: no go signal from the parent",
            ));
        }
    }
    let started = Instant::now();
    let (end, deadline) = (started + run, started + run + GRACE);
    let held_for = Duration::from_micros(args.hold_us);
    let mut result = WorkerResult::default();
    while Instant::now() < end && (result.records.len() as u64) < args.max_count {
        let asked = monotonic_ns();
        let Some(holding) = contender.acquire(deadline).await? else {
            result.timeouts += 1;
            break;
        };
        let acquired = monotonic_ns();
        hold(held_for).await;
        let released = monotonic_ns();
        contender.release(holding).await?;
        result.records.push([asked, acquired, released]);
    }
    emit_json(&json!({ "records": result.records, "timeouts": result.timeouts }));
    Ok(0)
}

/// Parses a worker's JSON line.
fn parse_result(line: &str) -> Option<WorkerResult> {
    let value: Value = serde_json::from_str(line).ok()?;
    let records = value["records"]
        .as_array()?
        .iter()
        .map(|r| {
            let r = r.as_array()?;
            let at = |i: usize| r.get(i).and_then(Value::as_u64);
            Some([at(0)?, at(1)?, at(2)?])
        })
        .collect::<Option<Vec<Record>>>()?;
    Some(WorkerResult {
        records,
        timeouts: value["timeouts"].as_u64()?,
    })
}

/// What every worker of one run is told.
#[derive(Debug, Clone)]
pub(crate) struct Assignment {
    /// The library.
    pub(crate) library: Library,
    /// The Redis URL.
    pub(crate) url: String,
    /// Key prefix.
    pub(crate) prefix: String,
    /// The lock name.
    pub(crate) name: String,
    /// Hold time.
    pub(crate) hold: Duration,
    /// Lease TTL.
    pub(crate) ttl: Duration,
    /// Run time.
    pub(crate) run: Duration,
    /// Most acquisitions per worker.
    pub(crate) max_count: u64,
}

/// One running worker process; SIGKILLed by its PID when dropped unfinished.
struct Running {
    /// The process.
    child: Child,
    /// Its stdin, for `go`.
    stdin: ChildStdin,
    /// Its stdout, line by line.
    stdout: Lines<BufReader<ChildStdout>>,
}

/// The worker processes of one run.
pub(crate) struct Workers {
    /// Each worker.
    running: Vec<Running>,
}

impl Workers {
    /// Starts `n` workers and waits until each has connected.
    pub(crate) async fn start(n: usize, job: &Assignment) -> Result<Workers, Failure> {
        let exe = std::env::current_exe().map_err(|e| {
            Failure::with_code(exit::SOFTWARE, format!("cannot find this program: {e}"))
        })?;
        let library = match job.library {
            Library::Leasehold => "leasehold",
            Library::Rslock => "rslock",
        };
        let mut running = Vec::with_capacity(n);
        for _ in 0..n {
            let mut child = Command::new(&exe)
                .args(["--url", &job.url, "--prefix", &job.prefix, "bench-worker"])
                .args(["--library", library, "--name", &job.name])
                .arg(format!("--hold-us={}", job.hold.as_micros()))
                .arg(format!("--ttl-ms={}", job.ttl.as_millis()))
                .arg(format!("--run-ms={}", job.run.as_millis()))
                .arg(format!("--max-count={}", job.max_count))
                .env_remove("LEASEHOLD_URL")
                .stdin(Stdio::piped())
                .stdout(Stdio::piped())
                .stderr(Stdio::inherit())
                .kill_on_drop(true)
                .spawn()
                .map_err(|e| {
                    Failure::with_code(exit::SOFTWARE, format!("cannot start a bench worker: {e}"))
                })?;
            let (Some(stdin), Some(stdout)) = (child.stdin.take(), child.stdout.take()) else {
                return Err(Failure::with_code(
                    exit::SOFTWARE,
                    "bench worker without pipes",
                ));
            };
            running.push(Running {
                child,
                stdin,
                stdout: BufReader::new(stdout).lines(),
            });
        }
        let deadline = Instant::now() + READY_WAIT;
        for worker in &mut running {
            let line = next_line(worker, deadline).await?;
            if line.trim() != "ready" {
                return Err(worker_failure(format!("said {line:?} instead of ready")));
            }
        }
        Ok(Workers { running })
    }

    /// Tells every worker to start.
    pub(crate) async fn go(&mut self) -> Result<(), Failure> {
        for worker in &mut self.running {
            worker
                .stdin
                .write_all(b"go\n")
                .await
                .map_err(|e| worker_failure(format!("cannot be told to start: {e}")))?;
        }
        for worker in &mut self.running {
            let _ = worker.stdin.flush().await;
        }
        Ok(())
    }

    /// Every worker's result, by `deadline`; then waits for each to exit.
    pub(crate) async fn results(mut self, deadline: Instant) -> Result<Vec<WorkerResult>, Failure> {
        let mut out = Vec::with_capacity(self.running.len());
        for worker in &mut self.running {
            let line = next_line(worker, deadline).await?;
            out.push(
                parse_result(&line)
                    .ok_or_else(|| worker_failure("printed a result that is not JSON".into()))?,
            );
        }
        for worker in &mut self.running {
            let left = deadline.saturating_duration_since(Instant::now()) + Duration::from_secs(5);
            match tokio::time::timeout(left, worker.child.wait()).await {
                Ok(Ok(status)) if status.success() => {}
                Ok(Ok(status)) => return Err(worker_failure(format!("exited with {status}"))),
                Ok(Err(e)) => return Err(worker_failure(format!("cannot be waited for: {e}"))),
                // Dropping `self` kills it.
                Err(_) => return Err(worker_failure("did not exit".into())),
            }
        }
        Ok(out)
    }
}

/// The worker's next stdout line, by `deadline`.
async fn next_line(worker: &mut Running, deadline: Instant) -> Result<String, Failure> {
    let left = deadline.saturating_duration_since(Instant::now());
    match tokio::time::timeout(left, worker.stdout.next_line()).await {
        Ok(Ok(Some(line))) => Ok(line),
        Ok(Ok(None)) => Err(worker_failure("exited early (see its error above)".into())),
        Ok(Err(e)) => Err(worker_failure(format!("cannot be read: {e}"))),
        Err(_) => Err(worker_failure("did not answer in time".into())),
    }
}

/// A failure of a worker process.
fn worker_failure(what: String) -> Failure {
    Failure::with_code(exit::SOFTWARE, format!("a bench worker {what}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn worker_results_round_trip_through_json() {
        let line = json!({ "records": [[1, 2, 3], [4, 5, 6]], "timeouts": 1 }).to_string();
        let result = parse_result(&line).expect("parses");
        assert_eq!(result.records, vec![[1, 2, 3], [4, 5, 6]]);
        assert_eq!(result.timeouts, 1);
        assert!(parse_result("{\"records\": [[1, 2]], \"timeouts\": 0}").is_none());
        assert!(parse_result("ready").is_none());
    }

    #[test]
    fn the_monotonic_clock_moves_forward() {
        let a = monotonic_ns();
        let b = monotonic_ns();
        assert!(a > 0 && b >= a);
    }
}
