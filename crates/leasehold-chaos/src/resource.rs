//! The fenced resource: a TCP server on loopback with two counters.
//!
//! Every operation is applied to both registers under one mutex, so the
//! sequence numbers give the exact order in which operations reached the
//! resource. Worker events arrive on the same connections and go into the
//! same [`History`].

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crate::clock::now_us;
use crate::history::{
    AcquireError, Acquisition, Fault, HeldLost, History, LostEvent, Micros, NodeCheck, Op, OpKind,
    Probe, Register, Release, WorkerId,
};
use crate::proto::{Reply, Request};

/// Decides what a worker that announced "holding" is told; the fault
/// injector runs the fault from here, in the connection's own thread, while
/// the worker waits for the answer.
pub(crate) type HoldingHook = dyn Fn(WorkerId, u64) -> Reply + Send + Sync;

/// Decides what a worker whose `acquire()` failed is told (after the
/// failure is recorded): [`Reply::Ok`], or [`Reply::Hold`] to keep it out
/// of `acquire()` for a while.
pub(crate) type FailedHook = dyn Fn(WorkerId) -> Reply + Send + Sync;

/// Decides what a worker about to call `acquire()` is told; the fault
/// injector runs the fault from here, before the worker's first attempt.
pub(crate) type AcquiringHook = dyn Fn(WorkerId) -> Reply + Send + Sync;

/// Decides what a worker whose `acquire()` returned a guard is told (after
/// the acquisition is recorded), with the acquisition: [`Reply::Ok`], or
/// [`Reply::Hold`]. The fault injector may stop the worker from here, while
/// it waits for the answer.
pub(crate) type AcquiredHook = dyn Fn(&Acquisition) -> Reply + Send + Sync;

/// A handle on the resource's state for the fault injector.
#[derive(Clone)]
pub(crate) struct ResourceView {
    shared: Arc<Shared>,
}

struct Shared {
    state: Mutex<State>,
    changed: Condvar,
    stop: AtomicBool,
    hook: Mutex<Option<Arc<HoldingHook>>>,
    failed_hook: Mutex<Option<Arc<FailedHook>>>,
    acquiring_hook: Mutex<Option<Arc<AcquiringHook>>>,
    acquired_hook: Mutex<Option<Arc<AcquiredHook>>>,
}

#[derive(Default)]
struct State {
    unfenced: i64,
    fenced: i64,
    /// Highest fence accepted by the fenced register, with its owner token.
    highest: Option<(u64, String)>,
    seq: u64,
    history: History,
    /// Workers inside `acquire()` (they reported it and have not reported
    /// its outcome yet), with when they were told to go on.
    acquiring: BTreeMap<WorkerId, Micros>,
}

impl State {
    fn fenced_accepts(&self, fence: u64, token: &str) -> bool {
        match &self.highest {
            None => true,
            Some((f, t)) => fence > *f || (fence == *f && token == t),
        }
    }

    fn push_op(&mut self, op: Op) {
        self.seq = self.seq.max(op.seq);
        self.history.ops.push(op);
    }

    fn apply(&mut self, worker: WorkerId, request: Request) -> Reply {
        let t = now_us();
        match request {
            Request::Hello { .. } => Reply::Ok,
            Request::Acquired {
                started,
                t,
                fence,
                token,
            } => {
                self.acquiring.remove(&worker);
                self.history.acquisitions.push(Acquisition {
                    worker,
                    started,
                    t,
                    fence,
                    token,
                });
                Reply::Ok
            }
            Request::AcquireFailed { t, quorum, error } => {
                self.acquiring.remove(&worker);
                self.history.acquire_errors.push(AcquireError {
                    worker,
                    t,
                    quorum,
                    error,
                });
                Reply::Ok
            }
            Request::Read { fence, token } => {
                let seq = self.seq + 1;
                let accepted = self.fenced_accepts(fence, &token);
                let (unfenced, fenced) = (self.unfenced, self.fenced);
                let op = |register, value| Op {
                    seq,
                    t,
                    worker,
                    fence,
                    token: token.clone(),
                    register,
                    kind: OpKind::Read,
                    value,
                    before: value,
                    accepted: register == Register::Unfenced || accepted,
                };
                self.push_op(op(Register::Unfenced, unfenced));
                self.push_op(op(Register::Fenced, fenced));
                if accepted {
                    self.highest = Some((fence, token));
                }
                Reply::Values {
                    unfenced,
                    fenced: accepted.then_some(fenced),
                }
            }
            Request::Write {
                fence,
                token,
                unfenced,
                fenced,
            } => {
                let seq = self.seq + 1;
                self.push_op(Op {
                    seq,
                    t,
                    worker,
                    fence,
                    token: token.clone(),
                    register: Register::Unfenced,
                    kind: OpKind::Write,
                    value: unfenced,
                    before: self.unfenced,
                    accepted: true,
                });
                self.unfenced = unfenced;
                if let Some(value) = fenced {
                    let accepted = self.fenced_accepts(fence, &token);
                    self.push_op(Op {
                        seq,
                        t,
                        worker,
                        fence,
                        token: token.clone(),
                        register: Register::Fenced,
                        kind: OpKind::Write,
                        value,
                        before: self.fenced,
                        accepted,
                    });
                    if accepted {
                        self.fenced = value;
                        self.highest = Some((fence, token));
                    }
                }
                Reply::Ok
            }
            Request::Lost { t, fence } => {
                self.history.lost.push(LostEvent { worker, t, fence });
                Reply::Ok
            }
            Request::HeldLost { t, healthy } => {
                self.history.held_lost.push(HeldLost { worker, t, healthy });
                Reply::Ok
            }
            Request::Released { t, fence, outcome } => {
                self.history.releases.push(Release {
                    worker,
                    t,
                    fence,
                    outcome,
                });
                Reply::Ok
            }
            Request::Probe {
                t,
                kind,
                fence,
                outcome,
            } => {
                self.history.probes.push(Probe {
                    worker,
                    t,
                    kind,
                    fence,
                    outcome,
                });
                Reply::Ok
            }
            Request::Holding { .. } | Request::Acquiring { .. } => Reply::Go,
        }
    }
}

/// The resource server. Stops accepting when dropped; connection threads
/// end when their worker closes the connection.
pub(crate) struct Resource {
    view: ResourceView,
    port: u16,
    acceptor: Option<JoinHandle<()>>,
}

impl Resource {
    /// Listens on a free loopback port.
    ///
    /// # Panics
    ///
    /// If no loopback port can be bound.
    pub(crate) fn start() -> Resource {
        let listener = TcpListener::bind(("127.0.0.1", 0)).expect("bind 127.0.0.1:0");
        listener
            .set_nonblocking(true)
            .expect("nonblocking listener");
        let port = listener.local_addr().expect("local_addr").port();
        let shared = Arc::new(Shared {
            state: Mutex::new(State::default()),
            changed: Condvar::new(),
            stop: AtomicBool::new(false),
            hook: Mutex::new(None),
            failed_hook: Mutex::new(None),
            acquiring_hook: Mutex::new(None),
            acquired_hook: Mutex::new(None),
        });
        let view = ResourceView { shared };
        let acceptor = {
            let view = view.clone();
            std::thread::spawn(move || accept_loop(&listener, &view))
        };
        Resource {
            view,
            port,
            acceptor: Some(acceptor),
        }
    }

    /// The port workers connect to.
    pub(crate) fn port(&self) -> u16 {
        self.port
    }

    /// A handle for the fault injector.
    pub(crate) fn view(&self) -> ResourceView {
        self.view.clone()
    }
}

impl Drop for Resource {
    fn drop(&mut self) {
        self.view.shared.stop.store(true, Ordering::SeqCst);
        if let Some(a) = self.acceptor.take() {
            let _ = a.join();
        }
    }
}

impl ResourceView {
    fn state(&self) -> MutexGuard<'_, State> {
        // Every update is complete before the lock is released.
        self.shared.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Sets what workers that announce "holding" are told.
    pub(crate) fn set_hook(&self, hook: Arc<HoldingHook>) {
        *lock(&self.shared.hook) = Some(hook);
    }

    /// Sets what workers whose `acquire()` failed are told.
    pub(crate) fn set_failed_hook(&self, hook: Arc<FailedHook>) {
        *lock(&self.shared.failed_hook) = Some(hook);
    }

    /// Sets what workers about to call `acquire()` are told.
    pub(crate) fn set_acquiring_hook(&self, hook: Arc<AcquiringHook>) {
        *lock(&self.shared.acquiring_hook) = Some(hook);
    }

    /// Sets what workers whose `acquire()` returned a guard are told.
    pub(crate) fn set_acquired_hook(&self, hook: Arc<AcquiredHook>) {
        *lock(&self.shared.acquired_hook) = Some(hook);
    }

    /// The workers inside `acquire()` now, each with when it was told to
    /// call it (only workers that report their `acquire()` calls).
    pub(crate) fn acquiring(&self) -> BTreeMap<WorkerId, Micros> {
        self.state().acquiring.clone()
    }

    /// Records a read of the lock on a live node.
    pub(crate) fn record_node_check(&self, check: NodeCheck) {
        self.state().history.node_checks.push(check);
    }

    /// Records an injected fault.
    pub(crate) fn record_fault(&self, fault: Fault) {
        self.state().history.faults.push(fault);
    }

    /// Waits until a write with a fence above `fence` reached the resource,
    /// or `timeout` passed; true if it did.
    pub(crate) fn wait_for_write_above(&self, fence: u64, timeout: Duration) -> bool {
        let deadline = Instant::now() + timeout;
        let mut state = self.state();
        loop {
            let seen = state
                .history
                .ops
                .iter()
                .rev()
                .any(|op| op.kind == OpKind::Write && op.fence > fence);
            if seen {
                return true;
            }
            let now = Instant::now();
            if now >= deadline {
                return false;
            }
            state = self
                .shared
                .changed
                .wait_timeout(state, deadline - now)
                .unwrap_or_else(|e| e.into_inner())
                .0;
        }
    }

    /// When `worker`'s acquisition of `fence` returned, as it reported.
    pub(crate) fn acquired_at(&self, worker: WorkerId, fence: u64) -> Option<Micros> {
        let state = self.state();
        let mut acquisitions = state.history.acquisitions.iter().rev();
        acquisitions
            .find(|a| a.worker == worker && a.fence == fence)
            .map(|a| a.t)
    }

    /// The owner token of `worker`'s acquisition of `fence`.
    pub(crate) fn token_of(&self, worker: WorkerId, fence: u64) -> Option<String> {
        let state = self.state();
        let mut acquisitions = state.history.acquisitions.iter().rev();
        acquisitions
            .find(|a| a.worker == worker && a.fence == fence)
            .map(|a| a.token.clone())
    }

    /// Whether `worker` reported losing the lease of `fence`.
    pub(crate) fn has_lost(&self, worker: WorkerId, fence: u64) -> bool {
        self.state()
            .history
            .lost
            .iter()
            .any(|l| l.worker == worker && l.fence == fence)
    }

    /// A copy of everything recorded so far.
    pub(crate) fn history(&self) -> History {
        self.state().history.clone()
    }

    /// Applies `request`, or passes it to its hook. A hook runs in the
    /// connection's thread and may wait for other workers' operations (the
    /// injector waits for a later holder's write), so it is called with no
    /// lock held: [`current`] clones it out of its slot first.
    fn handle(&self, worker: WorkerId, request: Request) -> Reply {
        if let Request::Holding { fence } = request {
            return current(&self.shared.hook).map_or(Reply::Go, |h| h(worker, fence));
        }
        if let Request::Acquiring { .. } = request {
            let reply = current(&self.shared.acquiring_hook).map_or(Reply::Go, |h| h(worker));
            // From now on: the worker calls acquire() once it has the reply.
            self.state().acquiring.insert(worker, now_us());
            return reply;
        }
        let failed = matches!(request, Request::AcquireFailed { .. });
        let acquired = match &request {
            Request::Acquired {
                started,
                t,
                fence,
                token,
            } => Some(Acquisition {
                worker,
                started: *started,
                t: *t,
                fence: *fence,
                token: token.clone(),
            }),
            _ => None,
        };
        let reply = self.state().apply(worker, request);
        self.shared.changed.notify_all();
        if failed && let Some(h) = current(&self.shared.failed_hook) {
            return h(worker);
        }
        if let (Some(acquisition), Some(h)) = (acquired, current(&self.shared.acquired_hook)) {
            return h(&acquisition);
        }
        reply
    }
}

/// Locks a hook slot (a hook is replaced whole, so a poisoned slot is fine).
fn lock<T: ?Sized>(slot: &Mutex<Option<Arc<T>>>) -> MutexGuard<'_, Option<Arc<T>>> {
    slot.lock().unwrap_or_else(|e| e.into_inner())
}

/// The hook in a slot, with the slot unlocked again before it is called.
///
/// `lock(slot).clone().map_or(.., |h| h(..))` would keep the guard, a
/// temporary, until the end of the statement, across the call: a holder
/// announcing while the injector's hook waits for another holder's write
/// would then wait on the slot, still holding the lock, and that write
/// would never come (`run-wrapper-kill`: the killed wrapper's replacement
/// took the lock and renewed it for the whole wait).
fn current<T: ?Sized>(slot: &Mutex<Option<Arc<T>>>) -> Option<Arc<T>> {
    // The guard is a temporary of this function: dropped when it returns.
    lock(slot).clone()
}

fn accept_loop(listener: &TcpListener, view: &ResourceView) {
    while !view.shared.stop.load(Ordering::SeqCst) {
        match listener.accept() {
            Ok((stream, _)) => {
                let view = view.clone();
                std::thread::spawn(move || serve(stream, &view));
            }
            Err(_) => std::thread::sleep(Duration::from_millis(5)),
        }
    }
}

/// Serves one worker's connection until it closes.
fn serve(stream: TcpStream, view: &ResourceView) {
    let _ = stream.set_nonblocking(false);
    let _ = stream.set_nodelay(true);
    let Ok(mut writer) = stream.try_clone() else {
        return;
    };
    let mut worker = None;
    for line in BufReader::new(stream).lines() {
        let Ok(line) = line else { return };
        let reply = match (Request::parse(&line), worker) {
            (Some(Request::Hello { worker: w }), _) => {
                worker = Some(w);
                Reply::Ok
            }
            (Some(request), Some(w)) => view.handle(w, request),
            (Some(_), None) => Reply::Error("HELLO first".into()),
            (None, _) => Reply::Error(format!("cannot parse {line:?}")),
        };
        if writeln!(writer, "{}", reply.encode()).is_err() {
            return;
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::mpsc;

    use super::*;

    /// One worker's connection, speaking the line protocol.
    struct Conn {
        reader: BufReader<TcpStream>,
        writer: TcpStream,
    }

    impl Conn {
        fn open(port: u16, worker: WorkerId) -> Conn {
            let writer = TcpStream::connect(("127.0.0.1", port)).expect("connect");
            let reader = BufReader::new(writer.try_clone().expect("clone"));
            let mut conn = Conn { reader, writer };
            assert_eq!(conn.call(&Request::Hello { worker }), Reply::Ok);
            conn
        }

        fn call(&mut self, request: &Request) -> Reply {
            writeln!(self.writer, "{}", request.encode()).expect("send");
            let mut line = String::new();
            self.reader.read_line(&mut line).expect("reply");
            Reply::parse(line.trim_end()).expect("a reply")
        }
    }

    /// The injector's hook waits in the connection's thread for a later
    /// holder's write; that holder's own announce must be answered
    /// meanwhile (it was not: the hook's slot stayed locked across the
    /// call, so the later holder waited on it while holding the lock).
    #[test]
    fn a_hook_waiting_for_another_holder_does_not_block_its_announce() {
        let resource = Resource::start();
        let view = resource.view();
        let (waiting_tx, waiting_rx) = mpsc::channel();
        {
            let view = view.clone();
            resource.view().set_hook(Arc::new(move |worker, fence| {
                if worker != 1 {
                    return Reply::Go;
                }
                let _ = waiting_tx.send(());
                if view.wait_for_write_above(fence, Duration::from_secs(10)) {
                    Reply::Go
                } else {
                    Reply::Error("no later write".into())
                }
            }));
        }
        let port = resource.port();
        let first =
            std::thread::spawn(move || Conn::open(port, 1).call(&Request::Holding { fence: 5 }));
        // Worker 1's hook is now waiting for a write above fence 5.
        waiting_rx.recv().expect("the hook runs");
        let mut second = Conn::open(port, 2);
        assert_eq!(second.call(&Request::Holding { fence: 6 }), Reply::Go);
        let write = Request::Write {
            fence: 6,
            token: "t6".into(),
            unfenced: 1,
            fenced: Some(1),
        };
        assert_eq!(second.call(&write), Reply::Ok);
        assert_eq!(first.join().expect("first connection"), Reply::Go);
    }
}
