//! The primitives, each a handle the client makes and a guard it hands
//! out, over what they all share: [`handle`] (a name, its keys, the
//! options of its guards) and [`guard`] (the held lease: renewal,
//! owner-checked extend and release), and [`run`], the critical section
//! that stops when the lease does. A primitive imports the core below it
//! (`inner`, `acquire`, `lease`, `scripts`), never the client.
//!
//! Inside: `guard` <- `handle` <- `lock`, `rwlock`, `semaphore`,
//! `reentrant` <- `fair`, `election`, `multi` (built on the plain lock).

pub(crate) mod election;
pub(crate) mod fair;
pub(crate) mod guard;
pub(crate) mod handle;
pub(crate) mod lock;
pub(crate) mod multi;
pub(crate) mod reentrant;
pub(crate) mod run;
pub(crate) mod rwlock;
pub(crate) mod semaphore;
