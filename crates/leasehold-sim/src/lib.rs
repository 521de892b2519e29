//! A deterministic simulator of leasehold (issue 23 of the project).
//!
//! - [`server`]: a simulated Redis server (keyspace with per-key TTLs on the
//!   simulated clock, pub/sub, the commands the library sends) that runs the
//!   shipped `.lua` files unchanged in an embedded Lua 5.1; kept equal to real
//!   servers by `tests/differential.rs`.
//! - [`history`]: the events of a schedule, their digest, and the checker of
//!   the invariants over the holds the workload saw.
//! - the world and schedules (built only with `--cfg leasehold_sim`, see
//!   `scripts/sim`): simulated networks, clocks and faults under the shipped
//!   client, a workload of every primitive, and the verdict.

pub mod cluster;
// The one module with unsafe code: the C `getrandom` it defines (see there).
#[cfg(all(leasehold_sim, target_os = "linux"))]
#[allow(unsafe_code)]
pub mod entropy;
pub mod history;
#[cfg(leasehold_sim)]
pub mod libtrace;
pub mod resp;
pub mod rng;
#[cfg(leasehold_sim)]
pub mod schedule;
pub mod server;
#[cfg(leasehold_sim)]
pub mod socket;
#[cfg(leasehold_sim)]
pub mod world;
