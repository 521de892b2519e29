//! The state every handle and guard of one client shares: its servers,
//! release events, watchdog, settings and what `close` waits for. Handles
//! and guards hold it directly (`Arc<Inner>`); `Client` (client/mod.rs) only
//! makes handles from it, so no primitive imports the client.

use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use crate::acquire::{Core, Flights};
use crate::error::{Error, Result};
use crate::events::{Events, Subscription};
use crate::scripts::{LeaseId, Owned, OwnedLeaseId};
use crate::servers::Servers;
use crate::watchdog::Watchdog;

/// The shared state of one client ([`Client`](crate::Client) and every
/// handle and guard made from it).
pub(crate) struct Inner {
    pub(crate) servers: Servers,
    pub(crate) events: Events,
    pub(crate) watchdog: Watchdog,
    pub(crate) prefix: String,
    pub(crate) min_ttl: Duration,
    pub(crate) max_ttl: Duration,
    /// `min_replicas(n, timeout)`: replicas that must acknowledge each
    /// acquisition.
    pub(crate) min_replicas: Option<(usize, Duration)>,
    /// `fence_memory(d)`: how long each fence is kept at least (the lease's
    /// TTL if longer).
    pub(crate) fence_memory: Duration,
    /// Set by [`Client::close`](crate::Client::close): no more acquisitions.
    pub(crate) closed: std::sync::atomic::AtomicBool,
    /// Wakes the callers waiting to acquire when the client is closed.
    pub(crate) closing: tokio::sync::Notify,
    /// Acquisitions and releases in flight, which `close` waits for.
    pub(crate) flights: Arc<Flights>,
    /// `command_timeout`: bounds how long `close` waits for them.
    pub(crate) command_timeout: Duration,
    /// The subscription to the prefix's break notices, started at the
    /// first acquisition ([`Core::hear_breaks`]) and kept for the client's
    /// life, and whether it was started (cleared again by a failure).
    pub(crate) breaks: Arc<(tokio::sync::OnceCell<Subscription>, AtomicBool)>,
}

impl Inner {
    /// The longest `close` waits for the acquisitions and releases in
    /// flight. Each request is bounded by the command timeout, and an
    /// acquisition in flight has at most six left: its attempt and its
    /// give-back, each of which may have to load its script first (a
    /// NOSCRIPT reply, SCRIPT LOAD, the call again); with `min_replicas`,
    /// the replicas' WAIT too. Against a server that does not answer, the
    /// first request's timeout ends the attempt and the give-back goes to
    /// the background: two command timeouts.
    pub(crate) fn flights_bound(&self) -> Duration {
        self.command_timeout * 6 + self.min_replicas.map_or(Duration::ZERO, |(_, t)| t)
    }

    /// How long [`Client::close`](crate::Client::close) waits for its own
    /// releases once the flights landed: a reply, or a NOSCRIPT's script
    /// load and the call again, each within the command timeout.
    pub(crate) fn close_release_bound(&self) -> Duration {
        self.command_timeout * 3
    }

    /// Whether [`Client::close`](crate::Client::close) was called.
    pub(crate) fn is_closed(&self) -> bool {
        self.closed.load(std::sync::atomic::Ordering::Acquire)
    }

    /// Checks a lease TTL against the client's bounds.
    pub(crate) fn check_ttl(&self, ttl: Duration) -> Result<()> {
        if ttl < self.min_ttl || ttl > self.max_ttl {
            return Err(Error::InvalidArgument(format!(
                "lease TTL {ttl:?} is outside the allowed {:?}..={:?}: a TTL bounds how long a \
                 crashed holder blocks others, so pick one between them",
                self.min_ttl, self.max_ttl
            )));
        }
        Ok(())
    }
}

impl Core for Inner {
    fn events(&self) -> &Events {
        &self.events
    }

    fn is_closed(&self) -> bool {
        Inner::is_closed(self)
    }

    fn closing(&self) -> &tokio::sync::Notify {
        &self.closing
    }

    fn min_replicas(&self) -> Option<(usize, Duration)> {
        self.min_replicas
    }

    fn wait_replicas(
        &self,
        key: &str,
        replicas: usize,
        timeout: Duration,
    ) -> impl Future<Output = Result<usize>> + Send {
        self.servers.wait_replicas(key, replicas, timeout)
    }

    fn release(&self, id: LeaseId<'_>) -> impl Future<Output = Result<Owned>> + Send {
        self.servers.release(id)
    }

    fn give_back(&self, id: LeaseId<'_>) -> impl Future<Output = Result<Owned>> + Send {
        self.servers.give_back(id)
    }

    fn release_in_background(&self, id: OwnedLeaseId) {
        self.watchdog.release(id);
    }

    fn flights(&self) -> &Arc<Flights> {
        &self.flights
    }

    fn hear_breaks(&self) {
        let (subscribed, started) = &*self.breaks;
        // Closed: no lease is taken any more, so no notice is needed.
        if subscribed.initialized() || self.is_closed() || started.swap(true, Ordering::AcqRel) {
            return;
        }
        let breaks = Arc::clone(&self.breaks);
        let events = self.events.clone();
        let listener = self.watchdog.hear_broken();
        let channel = crate::key::broken_channel(&self.prefix);
        tokio::spawn(async move {
            let (subscribed, started) = &*breaks;
            let heard = subscribed
                .get_or_try_init(|| events.listen(&channel, listener))
                .await;
            if let Err(e) = heard {
                started.store(false, Ordering::Release);
                tracing::debug!(
                    %channel,
                    error = %e,
                    "cannot subscribe to the break notices yet; a lease broken meanwhile is \
                     noticed at its next renewal"
                );
            }
        });
    }
}
