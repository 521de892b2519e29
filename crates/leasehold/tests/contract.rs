//! The contract every guard keeps (`common/contract.rs`), each contract run
//! for each kind of lock on a server of its own: test
//! `<contract>::<kind>`, for the kinds Lock, ReentrantLock, RwLock read and
//! write, Semaphore and FairLock.

mod common;

use common::contract::{self, Deployment, Kind};
use leasehold_testkit::RedisServer;

/// A module per contract, a test per kind in it.
macro_rules! per_kind {
    ($($contract:ident),* $(,)?) => {
        $(
            mod $contract {
                use super::*;

                async fn check(kind: Kind) {
                    let server = RedisServer::start();
                    contract::$contract(&Deployment::Single(&server), kind).await;
                }

                #[tokio::test]
                async fn lock() {
                    check(Kind::Lock).await;
                }

                #[tokio::test]
                async fn reentrant() {
                    check(Kind::Reentrant).await;
                }

                #[tokio::test]
                async fn read() {
                    check(Kind::Read).await;
                }

                #[tokio::test]
                async fn write() {
                    check(Kind::Write).await;
                }

                #[tokio::test]
                async fn semaphore() {
                    check(Kind::Semaphore).await;
                }

                #[tokio::test]
                async fn fair() {
                    check(Kind::Fair).await;
                }
            }
        )*
    };
}

contract::contracts!(per_kind);
