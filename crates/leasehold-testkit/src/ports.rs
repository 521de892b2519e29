//! Free loopback ports, reserved process-wide while a server owns them.

use std::collections::BTreeSet;
use std::net::TcpListener;
use std::sync::Mutex;

/// Ports currently owned by a `RedisServer` of this process. A server keeps
/// its port across restarts, so no other server of this process may be given
/// it while the first one is briefly down.
static RESERVED: Mutex<BTreeSet<u16>> = Mutex::new(BTreeSet::new());

/// The port Redis listens on by default; never handed out.
const DEFAULT_REDIS_PORT: u16 = 6379;

/// A reserved port; released from the reservation set on drop.
#[derive(Debug)]
pub(crate) struct PortGuard(u16);

impl PortGuard {
    pub(crate) fn port(&self) -> u16 {
        self.0
    }
}

impl Drop for PortGuard {
    fn drop(&mut self) {
        reserved().remove(&self.0);
    }
}

fn reserved() -> std::sync::MutexGuard<'static, BTreeSet<u16>> {
    RESERVED.lock().unwrap_or_else(|e| e.into_inner())
}

/// The distance from a Redis 6 cluster node's port to its cluster bus port,
/// fixed before Redis 7 (which has `cluster-port`).
pub(crate) const CLASSIC_BUS_OFFSET: u16 = 10000;

/// A free port `p` and `p + CLASSIC_BUS_OFFSET`, both reserved: a Redis 6
/// cluster node listens on both.
pub(crate) fn reserve_port_with_classic_bus() -> (PortGuard, PortGuard) {
    for _ in 0..100 {
        let port = reserve_free_port();
        let Some(bus) = port.port().checked_add(CLASSIC_BUS_OFFSET) else {
            continue;
        };
        if TcpListener::bind(("127.0.0.1", bus)).is_ok()
            && bus != DEFAULT_REDIS_PORT
            && reserved().insert(bus)
        {
            return (port, PortGuard(bus));
        }
    }
    panic!(
        "leasehold-testkit: could not find a free loopback port p with p+{CLASSIC_BUS_OFFSET} \
         free too (a Redis 6 cluster bus) after 100 attempts"
    );
}

/// Asks the kernel for a free loopback port (bind to port 0, then release it)
/// and reserves it for this process.
pub(crate) fn reserve_free_port() -> PortGuard {
    for _ in 0..100 {
        let listener = TcpListener::bind(("127.0.0.1", 0))
            .unwrap_or_else(|e| panic!("leasehold-testkit: cannot bind 127.0.0.1:0: {e}"));
        let port = listener
            .local_addr()
            .expect("leasehold-testkit: local_addr of a bound listener")
            .port();
        drop(listener);
        if port != DEFAULT_REDIS_PORT && reserved().insert(port) {
            return PortGuard(port);
        }
    }
    panic!("leasehold-testkit: could not find a free loopback port after 100 attempts");
}
