//! Runs one scenario: Redis, the resource, the workers, the faults, the
//! checkers.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::PathBuf;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use leasehold_testkit::{Proxy, ProxyMode, RedisServer};
use nix::sys::signal::Signal;

use crate::check::{Bounds, Violation, check_all};
use crate::clock::now_us;
use crate::history::{self, FaultKind, History, WorkerId};
use crate::procs::Procs;
use crate::proto::Reply;
use crate::resource::{Resource, ResourceView};
use crate::scenario::{Class, Fault, Scenario, Topology, verdict};
use crate::worker::WorkerConfig;

/// How to run a scenario.
#[derive(Debug, Clone)]
pub struct RunOptions {
    /// Run length (workers stop starting acquisitions after it).
    pub duration: Duration,
    /// Number of worker processes.
    pub workers: u32,
    /// Seed of the workers' sleeps and probes.
    pub seed: u64,
    /// The `leasehold-chaos` binary, started with `worker` for each worker.
    pub worker_exe: PathBuf,
}

/// What one run showed.
#[derive(Debug, Clone)]
pub struct Report {
    /// The scenario's name.
    pub scenario: &'static str,
    /// Its expected class.
    pub class: Class,
    /// Successful acquisitions.
    pub acquisitions: usize,
    /// Times the fault fired.
    pub faults: usize,
    /// Every violation the checkers found.
    pub violations: Vec<Violation>,
    /// Operations the fenced register rejected.
    pub stale_rejected: usize,
    /// Why the run fails its class (empty: it passes).
    pub failures: Vec<String>,
    /// The whole record, for scenario-specific assertions.
    pub history: History,
}

impl Report {
    /// True when the run showed what its class allows and expects.
    pub fn passed(&self) -> bool {
        self.failures.is_empty()
    }

    /// Violations on the unfenced register (what fencing is for).
    pub fn unfenced_violations(&self) -> usize {
        self.violations.iter().filter(|v| v.is_unfenced()).count()
    }

    /// A few lines for humans.
    pub fn summary(&self) -> String {
        let mut s = format!(
            "{} [{}]: {} acquisitions, {} fault(s), {} violation(s) ({} on the unfenced \
             register), {} stale operation(s) rejected, {} lost notice(s): {}\n",
            self.scenario,
            self.class,
            self.acquisitions,
            self.faults,
            self.violations.len(),
            self.unfenced_violations(),
            self.stale_rejected,
            self.history.lost.len(),
            if self.passed() { "PASS" } else { "FAIL" }
        );
        for v in self.violations.iter().take(5) {
            let _ = writeln!(s, "  violation: {v}");
        }
        for f in &self.failures {
            let _ = writeln!(s, "  FAIL: {f}");
        }
        s
    }
}

/// Client command timeout: well below the TTL, so a blackholed renewal
/// fails in time for a retry.
fn command_timeout(ttl: Duration) -> Duration {
    ttl / 4
}

/// Lets the system settle before the first fault.
const WARM_UP: Duration = Duration::from_secs(1);
/// Bound on how long a long pause or an empty restart waits for another
/// holder's write, in TTLs.
const WAIT_FOR_OTHER_TTLS: u32 = 5;

struct Injector {
    fault: Fault,
    ttl: Duration,
    end: Instant,
    view: ResourceView,
    procs: Arc<Procs>,
    server: Mutex<RedisServer>,
    proxy: Option<Proxy>,
    state: Mutex<InjectorState>,
}

struct InjectorState {
    next_arm: Instant,
    injected: usize,
    /// Blackholed holder waiting for the network to heal.
    restore: Option<(WorkerId, u64, Instant)>,
    /// Workers the injector killed (to be replaced).
    killed: Vec<WorkerId>,
    notes: Vec<String>,
}

impl Injector {
    fn state(&self) -> MutexGuard<'_, InjectorState> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn server(&self) -> MutexGuard<'_, RedisServer> {
        self.server.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn record(&self, kind: FaultKind, target: Option<(WorkerId, u64)>) -> u64 {
        let t = now_us();
        self.view.record_fault(history::Fault { t, kind, target });
        t
    }

    /// Called from the holder's connection thread while it waits for the answer.
    fn on_holding(&self, worker: WorkerId, fence: u64) -> Reply {
        {
            let mut st = self.state();
            let now = Instant::now();
            // Leave three TTLs at the end for the aftermath to show.
            if now < st.next_arm || now + self.ttl * 3 > self.end || st.restore.is_some() {
                return Reply::Go;
            }
            st.injected += 1;
            st.next_arm = Instant::now() + self.ttl * 30;
        }
        let target = Some((worker, fence));
        let wait_other = self.ttl * WAIT_FOR_OTHER_TTLS;
        let reply = match self.fault {
            Fault::PauseLong => {
                let stopped = Instant::now();
                self.procs.signal(worker, Signal::SIGSTOP);
                self.record(FaultKind::PauseLong, target);
                let other_wrote = self.view.wait_for_write_above(fence, wait_other);
                let floor = self.ttl + Duration::from_millis(100);
                if stopped.elapsed() < floor {
                    std::thread::sleep(floor - stopped.elapsed());
                }
                self.procs.signal(worker, Signal::SIGCONT);
                if !other_wrote {
                    self.note(format!(
                        "no other holder wrote while fence {fence} was paused"
                    ));
                }
                Reply::Go
            }
            Fault::PauseShort => {
                self.procs.signal(worker, Signal::SIGSTOP);
                self.record(FaultKind::PauseShort, target);
                std::thread::sleep(self.ttl / 4);
                self.procs.signal(worker, Signal::SIGCONT);
                Reply::Go
            }
            Fault::KillHolder => {
                self.record(FaultKind::Kill, target);
                self.procs.signal(worker, Signal::SIGKILL);
                self.state().killed.push(worker);
                Reply::Go
            }
            Fault::RestartEmpty => {
                self.record(FaultKind::RestartEmpty, target);
                self.server().restart_without_persistence();
                if !self.view.wait_for_write_above(fence, wait_other) {
                    self.note(format!(
                        "no other holder wrote after the restart (fence {fence})"
                    ));
                }
                Reply::Go
            }
            Fault::RestartAof => {
                self.record(FaultKind::RestartAof, target);
                self.server().restart();
                // Hold across at least one renewal against the restarted server.
                std::thread::sleep(self.ttl / 2);
                Reply::Go
            }
            Fault::Blackhole => {
                if let Some(proxy) = &self.proxy {
                    proxy.set_mode(ProxyMode::Blackhole);
                }
                self.record(FaultKind::Blackhole, target);
                self.state().restore = Some((worker, fence, Instant::now() + self.ttl * 3));
                Reply::Hold(u64::try_from((self.ttl * 3).as_millis()).unwrap_or(u64::MAX))
            }
            Fault::None | Fault::ScriptFlush => Reply::Go,
        };
        self.state().next_arm = Instant::now() + self.ttl * 2;
        reply
    }

    fn note(&self, note: String) {
        self.state().notes.push(note);
    }

    /// Periodic work from the runner's loop: heal a blackhole once the
    /// holder reported the loss (or gave up), flush scripts.
    fn tick(&self, next_flush: &mut Instant) {
        let restore = self.state().restore;
        if let (Some((worker, fence, deadline)), Some(proxy)) = (restore, &self.proxy) {
            if self.view.has_lost(worker, fence) || Instant::now() >= deadline {
                // Reset first: connections that lived through the blackhole
                // may hold half a reply; new ones then pass.
                proxy.set_mode(ProxyMode::Reset);
                std::thread::sleep(Duration::from_millis(20));
                proxy.set_mode(ProxyMode::Pass);
                self.state().restore = None;
            }
        }
        if self.fault == Fault::ScriptFlush && Instant::now() >= *next_flush {
            let mut con = self.server().connection();
            let flushed: redis::RedisResult<()> = redis::cmd("SCRIPT").arg("FLUSH").query(&mut con);
            if flushed.is_ok() {
                self.record(FaultKind::ScriptFlush, None);
                self.state().injected += 1;
            }
            *next_flush = Instant::now() + Duration::from_millis(250);
        }
    }
}

/// Runs `scenario` and checks the history it recorded.
///
/// # Panics
///
/// If `redis-server` or the worker binary cannot be started (the testkit's
/// message says how to install Redis), or a worker cannot reach the
/// resource.
pub fn run(scenario: &Scenario, options: &RunOptions) -> Report {
    let Topology::Single = scenario.topology;
    let ttl = scenario.ttl;
    let server = match scenario.fault {
        Fault::RestartAof => RedisServer::builder().appendonly(true).start(),
        _ => RedisServer::start(),
    };
    let resource = Resource::start();
    let proxy = (scenario.fault == Fault::Blackhole).then(|| Proxy::start(server.port()));
    let proxy_url = proxy.as_ref().map(Proxy::url);
    let direct_url = server.url();
    let procs = Arc::new(Procs::new(options.worker_exe.clone()));
    let started = Instant::now();
    let end = started + options.duration;
    let until = now_us() + u64::try_from(options.duration.as_micros()).unwrap_or(u64::MAX);
    let injector = Arc::new(Injector {
        fault: scenario.fault,
        ttl,
        end,
        view: resource.view(),
        procs: Arc::clone(&procs),
        server: Mutex::new(server),
        proxy,
        state: Mutex::new(InjectorState {
            next_arm: started + WARM_UP.max(ttl),
            injected: 0,
            restore: None,
            killed: Vec::new(),
            notes: Vec::new(),
        }),
    });
    {
        // Weak: the injector owns the view, so a strong reference would be a
        // cycle that keeps Redis and the workers alive after a panic.
        let injector = Arc::downgrade(&injector);
        resource.view().set_hook(Arc::new(move |w, f| {
            injector.upgrade().map_or(Reply::Go, |i| i.on_holding(w, f))
        }));
    }
    let holder_faults = !matches!(scenario.fault, Fault::None | Fault::ScriptFlush);
    let config = |id: WorkerId, slot: u32| WorkerConfig {
        id,
        url: match (&proxy_url, slot) {
            (Some(url), 0) => url.clone(),
            _ => direct_url.clone(),
        },
        resource_port: resource.port(),
        lock: "chaos".into(),
        ttl,
        command_timeout: command_timeout(ttl),
        until,
        seed: options.seed,
        max_sleep: Duration::from_millis(2),
        announce: holder_faults && slot == 0,
    };
    let mut slots: BTreeMap<WorkerId, u32> = BTreeMap::new();
    let mut next_id: WorkerId = 1;
    for slot in 0..options.workers.max(1) {
        procs.spawn(&config(next_id, slot));
        slots.insert(next_id, slot);
        next_id += 1;
    }
    let mut failures = Vec::new();
    let mut next_flush = started + WARM_UP;
    while Instant::now() < end {
        std::thread::sleep(Duration::from_millis(20));
        injector.tick(&mut next_flush);
        for (id, success) in procs.reap() {
            let slot = slots.remove(&id).unwrap_or(0);
            let killed = injector.state().killed.contains(&id);
            if !killed && !success {
                failures.push(format!("worker {id} failed (its error is on stderr)"));
            } else if Instant::now() + ttl < end {
                procs.spawn(&config(next_id, slot));
                slots.insert(next_id, slot);
                next_id += 1;
            }
        }
    }
    // Workers finish their iteration (an acquire may wait several TTLs).
    let (stragglers, failed) = procs.finish(ttl * 6 + Duration::from_secs(3));
    injector.tick(&mut next_flush);
    for id in failed
        .into_iter()
        .filter(|id| !injector.state().killed.contains(id))
    {
        failures.push(format!("worker {id} failed (its error is on stderr)"));
    }
    if stragglers > 0 {
        failures.push(format!(
            "{stragglers} worker(s) did not stop in time and were killed"
        ));
    }
    let history = resource.view().history();
    drop(resource);
    let bounds = Bounds {
        ttl,
        liveness_slack: Duration::from_secs(1),
        notice_slack: Duration::from_millis(150),
    };
    let violations = check_all(&history, bounds);
    let stale_rejected = history.stale_rejected();
    let injected = injector.state().injected;
    let mut all_failures = verdict(scenario, &violations, stale_rejected, injected);
    all_failures.extend(failures);
    all_failures.extend(
        injector
            .state()
            .notes
            .iter()
            .map(|n| format!("fault did not play out: {n}")),
    );
    Report {
        scenario: scenario.name,
        class: scenario.class,
        acquisitions: history.acquisitions.len(),
        faults: injected,
        violations,
        stale_rejected,
        failures: all_failures,
        history,
    }
}

/// The results table (Markdown) for a set of reports.
pub fn table(reports: &[Report]) -> String {
    let mut s = String::from(
        "| scenario | class | acquisitions | faults injected | violations caught (unfenced / other) | stale ops rejected | result |\n\
         |---|---|---:|---:|---:|---:|---|\n",
    );
    for r in reports {
        let unfenced = r.unfenced_violations();
        let _ = writeln!(
            s,
            "| {} | {} | {} | {} | {} / {} | {} | {} |",
            r.scenario,
            r.class,
            r.acquisitions,
            r.faults,
            unfenced,
            r.violations.len() - unfenced,
            r.stale_rejected,
            if r.passed() { "pass" } else { "FAIL" }
        );
    }
    s
}
