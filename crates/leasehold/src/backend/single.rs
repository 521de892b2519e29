//! One server: a [`ConnectionManager`], a multiplexed RESP3 connection that
//! reconnects on its own, carries every command, and delivers pub/sub
//! messages as push frames, so the whole client needs one socket; its
//! subscriptions are sent again after a reconnect by [`Managed`], one
//! correctly counted SUBSCRIBE per 512 channels (the driver's own
//! resubscription crossed replies between commands).

use std::sync::Arc;

use super::connection::{Commands, DeploymentConnection, Pending};
use super::managed::{ConnectionManager, Managed, Pushes};
use crate::error::Result;

pub(crate) struct Single {
    /// Commands go out on this clone of the manager `managed` holds, which
    /// also carries the subscriptions `managed` keeps.
    manager: ConnectionManager,
    managed: Arc<Managed>,
}

impl Single {
    /// Takes over `manager` (built with `pushes.config(..)`) at `addr`.
    pub(crate) fn new(addr: String, manager: ConnectionManager, pushes: &Pushes) -> Single {
        Single {
            managed: Managed::start(addr, manager.clone(), pushes),
            manager,
        }
    }
}

impl DeploymentConnection for Single {
    fn commands(&self) -> Commands {
        Commands::new(self.manager.clone())
    }

    fn subscribe<'a>(&'a self, channel: &'a str) -> Pending<'a, Result<()>> {
        Box::pin(self.managed.subscribe(channel))
    }

    fn subscribe_or_later<'a>(&'a self, channel: &'a str) -> Pending<'a, Result<()>> {
        Box::pin(self.managed.subscribe_or_later(channel))
    }

    fn forget(&self, channel: &str) {
        self.managed.forget(channel);
    }

    fn unsubscribe<'a>(&'a self, channel: &'a str) -> Pending<'a, Result<()>> {
        Box::pin(self.managed.unsubscribe(channel))
    }
}
