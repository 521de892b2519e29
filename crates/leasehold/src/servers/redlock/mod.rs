//! Redlock: one lease over N independent Redis masters, held while a quorum
//! of them agrees.
//!
//! Every request goes to all nodes at once, each bounded by a per-node
//! timeout far below the TTL; the answers are tallied by the pure maths in
//! [`quorum`]. An acquisition counts only if a quorum agreed within the
//! lease's validity (the generic wait loop checks `ttl - elapsed - drift`,
//! measured from before the first request). A failed attempt drops its
//! requests still pending and gives back whatever it may have taken,
//! including on the nodes that did not answer; an attempt that won lets its
//! pending requests finish (more copies). This module knows nothing of how
//! the nodes are connected: it calls the typed script functions on each
//! [`Backend`].

pub(crate) mod quorum;

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use crate::clock::Instant;

use futures_util::StreamExt;
use futures_util::stream::FuturesUnordered;

use crate::backend::Backend;
use crate::error::{Error, Result};
use crate::key::LockKeys;
use crate::kind::LockKind;
use crate::scripts::{self, Acquire, Extension, LeaseId, Owned, Queueing, Spread, Status};
use quorum::{Verdict, retake_in_time, verdict};

/// The nodes of a Redlock client.
pub(crate) struct Redlock {
    nodes: Vec<Backend>,
    node_timeout: Duration,
    /// Bound on releases, which are not racing a lease's validity.
    release_timeout: Duration,
}

impl Redlock {
    pub(crate) fn new(
        nodes: Vec<Backend>,
        node_timeout: Duration,
        release_timeout: Duration,
    ) -> Redlock {
        Redlock {
            nodes,
            node_timeout,
            release_timeout,
        }
    }

    pub(crate) fn nodes(&self) -> &[Backend] {
        &self.nodes
    }

    fn needed(&self) -> usize {
        quorum::quorum(self.nodes.len())
    }

    /// The per-node bound for requests about a lease of `ttl`: the
    /// configured one, but never more than half the lease.
    fn timeout_for(&self, ttl: Duration) -> Duration {
        self.node_timeout.min(ttl / 2).max(Duration::from_millis(1))
    }

    /// [`on_every_node`] on this client's nodes.
    async fn on_all<'a, T, F, Fut>(&'a self, timeout: Duration, op: F) -> Vec<Result<T>>
    where
        F: Fn(&'a Backend) -> Fut,
        Fut: Future<Output = Result<T>> + 'a,
    {
        on_every_node(&self.nodes, timeout, op, no_answer).await
    }

    /// [`until_decided`] on this client's nodes.
    async fn until_decided<T, F, Fut>(
        &self,
        timeout: Duration,
        op: F,
        decided: impl Fn(&[&Result<T>]) -> bool,
        settled: impl Fn(&[&Result<T>]) -> bool,
    ) -> (Vec<Result<T>>, Stragglers)
    where
        T: Send + 'static,
        F: Fn(Backend) -> Fut,
        Fut: Future<Output = Result<T>> + Send + 'static,
    {
        until_decided(
            &self.nodes,
            timeout,
            op,
            decided,
            settled,
            |node: &Backend, when| no_answer(node, when),
        )
        .await
    }

    /// Whether a quorum of nodes has answered (rather than failed): for
    /// [`until_decided`]'s `settled`, where a split vote is final.
    fn quorum_answered<T>(&self, so_far: &[&Result<T>]) -> bool {
        so_far.iter().filter(|r| r.is_ok()).count() >= self.needed()
    }

    /// `address: error` for each node that failed, for error messages and logs.
    fn node_errors<T>(&self, results: &[Result<T>]) -> Vec<String> {
        self.nodes
            .iter()
            .zip(results)
            .filter_map(|(node, r)| {
                r.as_ref()
                    .err()
                    .map(|e| format!("{}: {}", node.addr(), e.reason()))
            })
            .collect()
    }

    /// One Redlock attempt: the lease on a quorum, or nothing held at all.
    pub(crate) async fn lock_acquire(
        &self,
        keys: &LockKeys,
        token: &str,
        ttl: Duration,
        fence_memory: Duration,
    ) -> Result<Acquire> {
        let n = self.nodes.len();
        let sent = Instant::now();
        let (results, stragglers) = self
            .until_decided(
                self.timeout_for(ttl),
                |node| {
                    let (keys, token) = (keys.clone(), token.to_owned());
                    async move {
                        let q = Queueing::No;
                        scripts::lock_acquire(&node, &keys, &token, ttl, q, false, fence_memory)
                            .await
                    }
                },
                |so_far| {
                    let acquired = so_far
                        .iter()
                        .filter(|r| matches!(r, Ok(Acquire::Acquired { .. })))
                        .count();
                    let refused = so_far
                        .iter()
                        .filter(|r| matches!(r, Ok(Acquire::Held { .. })))
                        .count();
                    // A refusal waits for the other nodes' answers too (up to
                    // the soft deadline): what they took must be given back,
                    // or it stays there, renewed by each retry of this hold.
                    match verdict(n, acquired, refused) {
                        Verdict::Agreed => true,
                        Verdict::Refused => so_far.len() == n,
                        Verdict::Undecided => false,
                    }
                },
                |so_far| self.quorum_answered(so_far),
            )
            .await;
        let mut acquired = 0;
        let mut refused = 0;
        let mut fence = 0;
        let mut remaining: Option<Duration> = None;
        let mut node_errors = Vec::new();
        let mut fatal = None;
        let mut taken = vec![false; self.nodes.len()];
        let mut silent = vec![false; self.nodes.len()];
        // Nodes that granted the attempt (taken), or did not answer and may
        // have (silent): a failed attempt gives both back.
        for (((node, result), taken), silent) in self
            .nodes
            .iter()
            .zip(results)
            .zip(&mut taken)
            .zip(&mut silent)
        {
            match result {
                Ok(Acquire::Acquired { fence: f }) => {
                    acquired += 1;
                    fence = fence.max(f);
                    *taken = true;
                }
                Ok(Acquire::Held { remaining: r, .. }) => {
                    refused += 1;
                    remaining = match (remaining, r) {
                        (Some(a), Some(b)) => Some(a.min(b)),
                        (a, b) => a.or(b),
                    };
                }
                // A key of the wrong type, or refused credentials, is not
                // something a retry on other nodes mends.
                Err(e) if !e.is_transient() => fatal = fatal.or(Some(e)),
                // No answer: the request may still have taken the lease.
                Err(e) => {
                    node_errors.push(format!("{}: {}", node.addr(), e.reason()));
                    *silent = true;
                }
            }
        }
        if verdict(self.nodes.len(), acquired, refused) == Verdict::Agreed {
            // More copies of the lease, or "already ours" refreshes.
            stragglers.run_on();
        } else {
            // Before the give-back, which they must not overtake.
            drop(stragglers);
        }
        if let Some(e) = fatal {
            self.give_back(&taken, &silent, keys, token, ttl, Spread::Quorum)
                .await;
            return Err(e);
        }
        // A node without an answer may have taken the lease.
        let unsettled = !node_errors.is_empty();
        tracing::trace!(token, ?taken, acquired, refused, fence, elapsed = ?sent.elapsed(), ?node_errors, "Redlock attempt");
        match verdict(self.nodes.len(), acquired, refused) {
            // Nodes that refused hold contenders' attempts, which they give
            // back only once they heard from every node: the first renewal
            // (a third of the TTL in) sets the lease there once they did. A
            // re-take sent now would nearly always find them still there (it
            // sets only a missing key) and cost a round trip per acquisition.
            Verdict::Agreed => Ok(Acquire::Acquired { fence }),
            Verdict::Refused => {
                // Quietly: see Spread::QuorumQuiet.
                self.give_back(&taken, &silent, keys, token, ttl, Spread::QuorumQuiet)
                    .await;
                // The keys that refused may be other attempts, given back
                // just as quietly (contenders that split the nodes, or
                // try_acquire callers): look again within a short, random
                // while rather than at the end of their leases. A holder's
                // release still wakes waiters at once.
                let poll = quiet_poll(ttl);
                remaining = Some(remaining.map_or(poll, |r| r.min(poll)));
                Ok(Acquire::Held {
                    remaining,
                    unsettled,
                    queued_until: None,
                })
            }
            // A split vote among a quorum of answering nodes: others hold
            // some of them. Back off a random moment so two contenders do
            // not split again in step. (With fewer than a quorum answering,
            // the nodes are the problem, not the contention.)
            Verdict::Undecided if refused > 0 && acquired + refused >= self.needed() => {
                self.give_back(&taken, &silent, keys, token, ttl, Spread::Quorum)
                    .await;
                let spread = Duration::from_micros((crate::token::jitter_unit() * 2000.0) as u64);
                tokio::time::sleep(spread).await;
                Ok(Acquire::Held {
                    remaining,
                    unsettled,
                    queued_until: None,
                })
            }
            Verdict::Undecided => {
                self.give_back(&taken, &silent, keys, token, ttl, Spread::Quorum)
                    .await;
                Err(Error::QuorumNotReached {
                    acquired,
                    needed: self.needed(),
                    node_errors,
                })
            }
        }
    }

    /// Releases `token`'s lease after a failed attempt on the nodes that
    /// said they took it (`taken`) and on those that did not answer and may
    /// have (`silent`): left there, such a copy would last its TTL, renewed
    /// by each retry of the same token, and keep the node from the holder's
    /// re-take (which sets only a missing key). The attempt's own pending
    /// requests were dropped before this, so none of them is sent after the
    /// give-back. Each release is dropped at its timeout, so none is sent
    /// after the caller's next attempt either: the node timeout where the
    /// node answered, a few ms where it did not (enough to write the
    /// request; a frozen or dead node must not cost every refused attempt
    /// the node timeout).
    async fn give_back(
        &self,
        taken: &[bool],
        silent: &[bool],
        keys: &LockKeys,
        token: &str,
        ttl: Duration,
        spread: Spread,
    ) {
        let answered = self.timeout_for(ttl);
        let unanswered = answered.min(SILENT_GIVE_BACK);
        let releases = self
            .nodes
            .iter()
            .zip(taken.iter().zip(silent))
            .filter(|(_, (t, s))| **t || **s)
            .map(|(node, (t, _))| async move {
                let timeout = if *t { answered } else { unanswered };
                let release = scripts::lock_release(node, keys, token, spread);
                match tokio::time::timeout(timeout, release).await {
                    Ok(Ok(_)) => {}
                    Ok(Err(e)) => tracing::debug!(node = node.addr(), error = %e, "giving back a failed Redlock attempt"),
                    Err(_) => tracing::debug!(node = node.addr(), "giving back a failed Redlock attempt timed out"),
                }
            });
        futures_util::future::join_all(releases).await;
    }

    /// Releases one lease on every node (`id.queued` goes unused: waiters
    /// do not queue on Redlock).
    ///
    /// # Errors
    ///
    /// [`Error::QuorumNotReached`] (with each node's error) when too few
    /// nodes answered to tell whether the lease was still held.
    pub(crate) async fn release(&self, id: LeaseId<'_>) -> Result<Owned> {
        let (results, stragglers) = self
            .until_decided(
                self.release_timeout,
                |node| {
                    let id = id.owned();
                    async move { scripts::release(&node, id.id(), Spread::Quorum).await }
                },
                |so_far| {
                    self.tally(so_far.iter().map(|r| r.as_ref().ok().copied()))
                        .is_some()
                },
                |_| false,
            )
            .await;
        // The lease is gone from a quorum; the rest follow in the background.
        stragglers.run_on();
        self.released(id.hold, &results)
    }

    /// The outcome of a release by `hold` from each node's answer.
    fn released(&self, hold: &str, results: &[Result<Owned>]) -> Result<Owned> {
        let decided = self.tally(results.iter().map(|r| r.as_ref().ok().copied()));
        tracing::trace!(hold, ?results, ?decided, "Redlock release");
        self.decided_or_error(decided, results, |o| *o == Owned::Done)
    }

    /// [`Redlock::release`] that waits for every node (each up to the
    /// release timeout) and leaves nothing running: the give-back of a late
    /// grant, after which the caller tries again with the same hold
    /// ([`crate::acquire::Core::give_back`]).
    ///
    /// # Errors
    ///
    /// As [`Redlock::release`].
    pub(crate) async fn release_everywhere(&self, id: LeaseId<'_>) -> Result<Owned> {
        let results = self
            .on_all(self.release_timeout, |node| {
                scripts::release(node, id, Spread::Quorum)
            })
            .await;
        self.released(id.hold, &results)
    }

    /// Renews leases of one kind on every node. Each lease's outcome is
    /// decided by quorum; `None` where too few nodes answered to tell.
    ///
    /// Returns once every node answered, or, once the answers so far
    /// decide every lease, after as long again as they took
    /// ([`until_decided`]'s `settled`): the watchdog holds each lease's
    /// change lock for the whole call, so a silent node must not keep a
    /// release waiting for the node timeout. A renewal the fast answers do
    /// not decide (one node lost its copy, another is slow) waits for more,
    /// up to the node timeout.
    /// The requests of the nodes not waited for run on: they still renew
    /// those copies, and one landing after the lease's release finds
    /// nothing of its hold to extend. Only their re-takes wait for a later
    /// renewal they answer in time.
    pub(crate) async fn extend(
        &self,
        kind: LockKind,
        leases: &[Extension<'_>],
    ) -> Result<Vec<Option<Owned>>> {
        let sent = Instant::now();
        let n = self.nodes.len();
        let owned: Arc<Vec<(String, String, Duration)>> = Arc::new(
            leases
                .iter()
                .map(|l| (l.key.to_owned(), l.hold.to_owned(), l.ttl))
                .collect(),
        );
        let shortest = leases
            .iter()
            .map(|l| l.ttl)
            .min()
            .unwrap_or(self.node_timeout);
        let (results, stragglers) = self
            .until_decided(
                self.timeout_for(shortest),
                |node| {
                    let owned = Arc::clone(&owned);
                    async move {
                        let leases: Vec<Extension<'_>> = owned
                            .iter()
                            .map(|(key, hold, ttl)| Extension {
                                key,
                                hold,
                                ttl: *ttl,
                            })
                            .collect();
                        scripts::extend(&node, kind, &leases).await
                    }
                },
                |so_far| so_far.len() == n,
                // Every lease decided by the answers so far: a renewal
                // that is not (a node that lost its copy, another slow)
                // waits for more answers, up to the node timeout.
                |so_far| {
                    (0..leases.len()).all(|i| self.lease_tally(so_far.iter().copied(), i).is_some())
                },
            )
            .await;
        stragglers.run_on();
        if results.iter().all(Result::is_err) {
            return Err(Error::QuorumNotReached {
                acquired: 0,
                needed: self.needed(),
                node_errors: self.node_errors(&results),
            });
        }
        for (node, result) in self.nodes.iter().zip(&results) {
            match result {
                Err(e) if is_not_waited_for(e) => {
                    tracing::debug!(
                        node = node.addr(),
                        "Redlock renewal decided without this node"
                    );
                }
                Err(e) => {
                    let error = format!("{}: {}", node.addr(), e.reason());
                    tracing::warn!(%error, "Redlock renewal failed on a node");
                }
                Ok(_) => {}
            }
        }
        let verdicts: Vec<Option<Owned>> = (0..leases.len())
            .map(|i| self.lease_tally(&results, i))
            .collect();
        self.retake_missing(kind, leases, sent, &results, &verdicts)
            .await;
        Ok(verdicts)
    }

    /// Restores the redundancy of lock leases a quorum has just renewed: each
    /// node that answered that it no longer has one (it restarted without
    /// persistence, or its copy expired early) or that another token holds
    /// it there gets it back where the key is missing. Without this a
    /// holder loses a node's copy at every such restart, and the lease at
    /// the restart that leaves less than a quorum, after which the nodes it
    /// lost are a quorum for others.
    ///
    /// Another token is never replaced (lock_retake.lua): it may be an
    /// attempt granted there before this renewal that wins a quorum after
    /// this lease is released, and counts this node from its grant. Waiters
    /// a quorum refuses give their attempts back without waking each other
    /// (`Spread::QuorumQuiet`), so such a node is mostly free for the
    /// re-take. Decided by the holds that existed before the renewal only:
    /// a lease the quorum did not renew is never taken anew, since it may
    /// have lapsed while another owner held the lock. A failed re-take
    /// changes nothing; the next renewal tries again. Nothing is re-taken on
    /// stale information: when the renewal was sent (`sent`) more than half
    /// a TTL ago, or the lease's validity is gone ([`retake_in_time`]).
    async fn retake_missing(
        &self,
        kind: LockKind,
        leases: &[Extension<'_>],
        sent: Instant,
        results: &[Result<Vec<Owned>>],
        verdicts: &[Option<Owned>],
    ) {
        if !kind.describe().retakes_on_redlock {
            return;
        }
        let elapsed = sent.elapsed();
        let retakes = self.nodes.iter().zip(results).filter_map(|(node, result)| {
            let answers = result.as_ref().ok()?;
            let missing: Vec<Extension<'_>> = leases
                .iter()
                .zip(answers)
                .zip(verdicts)
                .filter(|((lease, answer), verdict)| {
                    **answer != Owned::Done
                        && **verdict == Some(Owned::Done)
                        && retake_in_time(lease.ttl, elapsed)
                })
                .map(|((lease, _), _)| *lease)
                .collect();
            (!missing.is_empty()).then_some(async move { self.retake_on(node, &missing).await })
        });
        futures_util::future::join_all(retakes).await;
    }

    /// Sets `leases`, which a quorum of the other nodes holds, on `node`
    /// (see [`Redlock::retake_missing`]), within the node timeout; a failure
    /// is only logged.
    async fn retake_on(&self, node: &Backend, leases: &[Extension<'_>]) {
        let shortest = leases.iter().map(|l| l.ttl).min().unwrap_or_default();
        let outcome = tokio::time::timeout(
            self.timeout_for(shortest),
            scripts::lock_retake(node, leases),
        )
        .await;
        match outcome {
            Ok(Ok(taken)) => tracing::debug!(
                node = node.addr(),
                hold = leases.first().map(|l| l.hold),
                taken = taken.iter().filter(|t| **t).count(),
                of = leases.len(),
                "Redlock node lacked leases a quorum holds; set them back"
            ),
            Ok(Err(e)) => tracing::debug!(node = node.addr(), error = %e, "re-take failed"),
            Err(_) => tracing::debug!(node = node.addr(), "re-take timed out"),
        }
    }

    /// Renews one lease on every node.
    ///
    /// # Errors
    ///
    /// [`Error::QuorumNotReached`] (with each node's error) when too few
    /// nodes answered to tell.
    pub(crate) async fn extend_one(&self, kind: LockKind, lease: Extension<'_>) -> Result<Owned> {
        let sent = Instant::now();
        let shortest = lease.ttl;
        let (results, stragglers) = self
            .until_decided(
                self.timeout_for(shortest),
                |node| {
                    let (key, hold, ttl) = (lease.key.to_owned(), lease.hold.to_owned(), lease.ttl);
                    async move {
                        let lease = Extension {
                            key: &key,
                            hold: &hold,
                            ttl,
                        };
                        scripts::extend(&node, kind, &[lease]).await
                    }
                },
                |so_far| self.lease_tally(so_far.iter().copied(), 0).is_some(),
                |_| false,
            )
            .await;
        // An extend of a held lease: more copies renewed is only better.
        stragglers.run_on();
        let decided = self.lease_tally(&results, 0);
        self.retake_missing(kind, &[lease], sent, &results, &[decided])
            .await;
        self.decided_or_error(decided, &results, |v| v.first() == Some(&Owned::Done))
    }

    fn decided_or_error<T>(
        &self,
        decided: Option<Owned>,
        results: &[Result<T>],
        agreed: impl Fn(&T) -> bool,
    ) -> Result<Owned> {
        decided.ok_or_else(|| Error::QuorumNotReached {
            acquired: results
                .iter()
                .filter(|r| r.as_ref().is_ok_and(&agreed))
                .count(),
            needed: self.needed(),
            node_errors: self.node_errors(results),
        })
    }

    /// The quorum's view of one owner-checked change, from each node's
    /// outcome (`None`: no answer); `None` if undecided.
    /// [`Redlock::tally`] of lease `i` of a batch, from each node's answer
    /// to the batch (an error counts as no answer).
    fn lease_tally<'r>(
        &self,
        answers: impl IntoIterator<Item = &'r Result<Vec<Owned>>>,
        i: usize,
    ) -> Option<Owned> {
        self.tally(
            answers
                .into_iter()
                .map(|r| r.as_ref().ok().and_then(|v| v.get(i).copied())),
        )
    }

    fn tally(&self, outcomes: impl Iterator<Item = Option<Owned>>) -> Option<Owned> {
        let (mut done, mut missing, mut other) = (0, 0, 0);
        for outcome in outcomes {
            match outcome {
                Some(Owned::Done) => done += 1,
                Some(Owned::Missing) => missing += 1,
                Some(Owned::OtherOwner) => other += 1,
                None => {}
            }
        }
        match verdict(self.nodes.len(), done, missing + other) {
            Verdict::Agreed => Some(Owned::Done),
            Verdict::Refused if other > 0 => Some(Owned::OtherOwner),
            Verdict::Refused => Some(Owned::Missing),
            Verdict::Undecided => None,
        }
    }

    /// The keys matching `pattern` of type `kind` on every node that
    /// answers, which must be a quorum (any lease a quorum holds is then on
    /// at least one of them).
    pub(crate) async fn scan(&self, pattern: &str, kind: &str) -> Result<Vec<String>> {
        let results = self
            .on_all(self.node_timeout, |node| node.scan(pattern, kind))
            .await;
        let answered = results.iter().filter(|r| r.is_ok()).count();
        if answered < self.needed() {
            return Err(Error::QuorumNotReached {
                acquired: answered,
                needed: self.needed(),
                node_errors: self.node_errors(&results),
            });
        }
        let mut keys: Vec<String> = results.into_iter().flatten().flatten().collect();
        keys.sort();
        keys.dedup();
        Ok(keys)
    }

    /// The lock's state as a quorum sees it: a holder only if a quorum of
    /// nodes has the same one.
    pub(crate) async fn lock_status(&self, keys: &LockKeys) -> Result<Status> {
        let results = self
            .on_all(self.node_timeout, |node| scripts::lock_status(node, keys))
            .await;
        let answers: Vec<&Status> = results.iter().filter_map(|r| r.as_ref().ok()).collect();
        if answers.len() < self.needed() {
            return Err(Error::QuorumNotReached {
                acquired: answers.len(),
                needed: self.needed(),
                node_errors: self.node_errors(&results),
            });
        }
        let holder = answers.iter().find_map(|s| {
            let h = s.holder.as_ref()?;
            let agree = answers
                .iter()
                .filter(|t| t.holder.as_ref() == Some(h))
                .count();
            (agree >= self.needed()).then(|| h.clone())
        });
        // How long a quorum still holds it: the quorum-th longest of the
        // agreeing nodes' TTLs (a node that missed the last extension must
        // not make the whole lease look shorter).
        let remaining = holder.as_ref().and_then(|h| {
            let mut left: Vec<Duration> = answers
                .iter()
                .filter(|s| s.holder.as_ref() == Some(h))
                .filter_map(|s| s.remaining)
                .collect();
            left.sort_unstable_by(|a, b| b.cmp(a));
            left.get(self.needed() - 1).copied()
        });
        Ok(Status {
            holder,
            remaining,
            fence: answers.iter().filter_map(|s| s.fence).max(),
            waiters: 0,
        })
    }
}

/// The error of a node that gave no answer.
/// Runs `op` on every node at once, each bounded by `timeout`, and waits
/// for all of them. A request still pending at its timeout is dropped:
/// one already written to its connection still reaches its node, but none
/// is sent after this returns (a script call that met NOSCRIPT is not
/// re-sent, an unwritten one is never written), so a request that follows
/// it on a node cannot be overtaken by it.
async fn on_every_node<'a, N, T, F, Fut>(
    nodes: &'a [N],
    timeout: Duration,
    op: F,
    no_answer: impl Fn(&N, &str) -> Error,
) -> Vec<Result<T>>
where
    F: Fn(&'a N) -> Fut,
    Fut: Future<Output = Result<T>> + 'a,
{
    let requests = nodes.iter().map(|node| {
        let request = tokio::time::timeout(timeout, op(node));
        let no_answer = &no_answer;
        async move {
            request
                .await
                .unwrap_or_else(|_| Err(no_answer(node, "within the Redlock node timeout")))
        }
    });
    futures_util::future::join_all(requests).await
}

/// Runs `op` on every node at once, each bounded by `timeout`, until
/// `decided` says the answers so far settle the question: a quorum is
/// decided by its fastest nodes, so a dead or slow minority costs the
/// caller nothing. Nodes not waited for count as not answered
/// (`no_answer`); their requests come back as [`Stragglers`].
///
/// Run on ([`Stragglers::run_on`]), a release or extend still reaches every
/// node that answers in time (a request the driver has not written yet
/// would otherwise be dropped unsent), but such a request may also be sent
/// after this returns, e.g. a script call re-sent after a NOSCRIPT reload,
/// behind the caller's next request to the node: drop them instead before
/// any request of the same hold that they must not overtake (a failed
/// attempt's give-back), and give back through [`on_every_node`] before a
/// retry with the same hold.
///
/// Once `settled` says the answers so far are enough (e.g. an acquisition's
/// split vote among a quorum: better retried than waited out; a renewal
/// whose every lease a quorum decided), the rest get only as long again as
/// those answers took, not the whole node timeout.
async fn until_decided<N, T, F, Fut>(
    nodes: &[N],
    timeout: Duration,
    op: F,
    decided: impl Fn(&[&Result<T>]) -> bool,
    settled: impl Fn(&[&Result<T>]) -> bool,
    no_answer: impl Fn(&N, &str) -> Error,
) -> (Vec<Result<T>>, Stragglers)
where
    N: Clone,
    T: Send + 'static,
    F: Fn(N) -> Fut,
    Fut: Future<Output = Result<T>> + Send + 'static,
{
    // Polled here rather than spawned: five spawns per operation cost more
    // than the requests themselves on a busy machine. Whatever is still in
    // flight once it is decided goes on in one task.
    let mut pending: FuturesUnordered<_> = nodes
        .iter()
        .enumerate()
        .map(|(i, node)| {
            let request = tokio::time::timeout(timeout, op(node.clone()));
            async move { (i, request.await) }
        })
        .collect();
    let mut results: Vec<Option<Result<T>>> = nodes.iter().map(|_| None).collect();
    let started = Instant::now();
    let mut soft_deadline: Option<Instant> = None;
    loop {
        let next = match soft_deadline {
            Some(at) => match crate::clock::timeout_at(at, pending.next()).await {
                Some(next) => next,
                None => break,
            },
            None => pending.next().await,
        };
        let Some((i, answered)) = next else { break };
        results[i] = Some(
            answered
                .unwrap_or_else(|_| Err(no_answer(&nodes[i], "within the Redlock node timeout"))),
        );
        let so_far: Vec<&Result<T>> = results.iter().flatten().collect();
        if decided(&so_far) {
            break;
        }
        if soft_deadline.is_none() && settled(&so_far) {
            let took = started.elapsed().max(Duration::from_millis(1));
            soft_deadline = Some(Instant::now() + took);
        }
    }
    let stragglers = Stragglers((!pending.is_empty()).then(|| {
        Box::pin(async move { while pending.next().await.is_some() {} }) as StragglerFuture
    }));
    let results = nodes
        .iter()
        .zip(results)
        .map(|(node, r)| r.unwrap_or_else(|| Err(no_answer(node, NOT_WAITED_FOR))))
        .collect();
    (results, stragglers)
}

/// Why [`until_decided`] has no answer from a node it stopped waiting for.
const NOT_WAITED_FOR: &str = "before the quorum was decided";

/// Whether `e` stands for a node [`until_decided`] stopped waiting for (its
/// request may still be answered), rather than one that failed.
fn is_not_waited_for(e: &Error) -> bool {
    matches!(e, Error::Unreachable { source, .. } if source.detail() == Some(NOT_WAITED_FOR))
}

type StragglerFuture = std::pin::Pin<Box<dyn Future<Output = ()> + Send>>;

/// The requests of an [`until_decided`] call still pending when it was
/// decided: [`Stragglers::run_on`] lets them finish in the background;
/// dropping them drops them (one already written still reaches its node,
/// none is sent later).
#[must_use = "run_on() or drop explicitly"]
struct Stragglers(Option<StragglerFuture>);

impl Stragglers {
    fn run_on(self) {
        if let Some(rest) = self.0 {
            tokio::spawn(rest);
        }
    }
}

/// How long a give-back waits on a node that did not answer the attempt.
const SILENT_GIVE_BACK: Duration = Duration::from_millis(20);

/// When an attempt that a quorum refused looks again at the latest (a
/// release wakes it sooner): a random moment between 5% and 10% of the TTL,
/// at most 100 ms, so that contenders who split the nodes do not retry in
/// step.
fn quiet_poll(ttl: Duration) -> Duration {
    let most = (ttl / 10).clamp(Duration::from_millis(2), Duration::from_millis(100));
    most.mul_f64(0.5 + crate::token::jitter_unit() * 0.5)
}

fn no_answer(node: &Backend, when: &str) -> Error {
    Error::Unreachable {
        addr: node.addr().to_owned(),
        source: redis::RedisError::from((redis::ErrorKind::Io, "no answer", when.to_owned())),
    }
}

#[cfg(test)]
mod tests {
    use std::sync::{Arc, Mutex};

    use tokio::sync::Notify;

    use super::*;

    /// A fake request to `node`: sent at once, answered over the network;
    /// node 2's meets NOSCRIPT, and is sent again once `reloaded` fires.
    async fn request(
        node: usize,
        sends: Arc<Mutex<Vec<String>>>,
        reloaded: Arc<Notify>,
    ) -> Result<()> {
        sends.lock().unwrap().push(format!("{node}: sent"));
        tokio::task::yield_now().await;
        if node == 2 {
            reloaded.notified().await;
            sends.lock().unwrap().push(format!("{node}: sent again"));
        }
        Ok(())
    }

    fn no_answer(node: &usize, when: &str) -> Error {
        Error::Unreachable {
            addr: format!("node {node}"),
            source: redis::RedisError::from((redis::ErrorKind::Io, "no answer", when.to_owned())),
        }
    }

    /// Found in review: a refused attempt's requests still pending at the
    /// decision ran on in the background, so one re-sent after a NOSCRIPT
    /// reload could set the key behind the attempt's own give-back to that
    /// node, leaving a copy that kept the holder's re-take out. Dropped,
    /// they send nothing more; run on (an attempt that won, a release, an
    /// extend), they finish.
    #[tokio::test(start_paused = true)]
    async fn stragglers_dropped_send_nothing_more_and_run_on_finish() {
        for run_on in [false, true] {
            let sends = Arc::new(Mutex::new(Vec::new()));
            let reloaded = Arc::new(Notify::new());
            let op = |node: usize| request(node, Arc::clone(&sends), Arc::clone(&reloaded));
            let (results, stragglers) = until_decided(
                &[0, 1, 2],
                Duration::from_secs(1),
                op,
                |so_far| so_far.iter().filter(|r| r.is_ok()).count() >= 2,
                |_| false,
                no_answer,
            )
            .await;
            assert!(results[2].is_err(), "node 2 did not answer in time");
            if run_on {
                stragglers.run_on();
            } else {
                drop(stragglers);
            }
            reloaded.notify_one();
            tokio::time::sleep(Duration::from_millis(10)).await;
            let again = sends.lock().unwrap().iter().any(|e| e == "2: sent again");
            assert_eq!(again, run_on, "run_on: {run_on}");
        }
    }

    /// Found by the chaos suite (redlock-rolling-restart, cold script
    /// caches): a late grant is given back and then tried again with the
    /// same hold. Given back through `until_decided`, a release still
    /// pending at the decision ran on in the background; one that met
    /// NOSCRIPT sent its script again after reloading it, behind the
    /// retry's acquire to that node, and deleted the lease the retry
    /// returned. A give-back goes through `on_every_node`, after which
    /// nothing is sent again.
    #[tokio::test(start_paused = true)]
    async fn a_give_back_sends_nothing_after_it_returns() {
        let sends = Arc::new(Mutex::new(Vec::new()));
        let reloaded = Arc::new(Notify::new());
        let op = |node: &usize| request(*node, Arc::clone(&sends), Arc::clone(&reloaded));
        let results = on_every_node(&[0, 1, 2], Duration::from_secs(1), op, no_answer).await;
        assert!(results[0].is_ok() && results[1].is_ok());
        assert!(results[2].is_err(), "node 2 did not answer in time");
        // The caller retries (its next request to node 2 would go out now);
        // then node 2's reload completes.
        reloaded.notify_one();
        tokio::time::sleep(Duration::from_millis(10)).await;
        assert_eq!(
            *sends.lock().unwrap(),
            ["0: sent", "1: sent", "2: sent"],
            "a give-back request was sent again after the give-back returned"
        );
    }
}
