//! `leasehold-chaos`: a safety checker for leasehold under real faults.
//!
//! Worker *processes* loop acquire → read the resource → sleep → write
//! read + 1 → release against one lock, sending every operation with their
//! fencing and owner tokens to a resource server run by the checker, which
//! keeps two registers: an unfenced one (shows lost updates) and a fenced
//! one (rejects operations whose fence is lower than the highest seen, or
//! equal to it from another owner). Faults are real: SIGSTOP and SIGKILL of
//! a holder, SIGSTOP of a waiter right as a release handed it the lock,
//! SIGKILL of every queued waiter before the holder releases, kill -9 of
//! Redis with or without persistence, SIGSTOP of Redis as an `acquire()`
//! begins (its commands watched with `MONITOR`), a blackholed connection,
//! `SCRIPT FLUSH`, SIGKILL of a `leasehold run` wrapper whose command holds
//! the lock, and on Redlock (five independent `redis-server`s) kill -9 and
//! SIGSTOP of one, two or three nodes.
//!
//! The [`check`] module's pure checkers then look at the [`History`] for
//! overlapping holders, lost increments, fences issued twice or going back,
//! releases and extends by non-owners that succeeded, a dead holder's lock
//! not coming free within TTL plus slack (a dead or stopped waiter's within
//! the queue window and heartbeat plus slack), lost notices that came late or
//! never, and on Redlock acquisitions granted while a majority of nodes was
//! down, leases left on live nodes by failed attempts, and a lock that does
//! not work again once the nodes are back. Each [`Scenario`] declares its [`Class`]; [`verdict`] fails a
//! SAFE scenario with any violation, and a deterministic scenario that was
//! expected to show a violation but showed none.

pub mod check;
mod clock;
mod command;
mod history;
mod monitor;
mod procs;
mod proto;
mod resource;
mod rng;
mod runner;
mod scenario;
mod worker;

pub use clock::now_us;
pub use command::{CommandConfig, run as run_command};
pub use history::{
    AcquireError, Acquisition, Fault as FaultEvent, FaultKind, HeldLost, History, LostEvent,
    Micros, NodeCheck, Op, OpKind, Outcome, Probe, Register, Release, WorkerId,
};
pub use monitor::GiveBacks;
pub use runner::{Report, RunOptions, run, table};
pub use scenario::{
    Class, Fault, NodeStop, QUEUE_HEARTBEAT, QUEUE_WINDOW, SCENARIOS, Scenario, Topology, find,
    verdict,
};
pub use worker::{WorkerConfig, run as run_worker};
