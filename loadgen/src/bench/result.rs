//! What one bench run measured and how its counts were checked: a
//! [`RunResult`] per run, its [`Verdict`], the figures derived from it,
//! and whether the runs call for exit code 1.
//!
//! Invariant: a figure here is only what the run measured, divided; a
//! count is [`Verdict::Exact`] only for a run that published and drained
//! everything, and [`any_failed`] is the one reading of the verdicts for
//! the exit code.

use std::time::Duration;

use super::ops::StoreOps;
use super::{Case, Runner};
use crate::report::Percentiles;

/// How a run's counts were checked.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// Everything published and drained; every post's count exact, the
    /// shard invariant kept.
    Exact,
    /// Everything drained but some counts or the invariant are wrong.
    Wrong {
        /// Posts whose count differs from the truth.
        mismatches: usize,
        /// Posts whose shards do not sum to their liked memberships.
        invariant_breaks: usize,
    },
    /// Stopped by `max_secs` before draining: counts cannot be compared with
    /// the truth of the whole workload; the shard invariant was checked.
    Partial {
        /// Posts whose shards do not sum to their liked memberships.
        invariant_breaks: usize,
    },
    /// The null consumer counts nothing: only its acks are measured.
    NotCounted,
}

/// What one strategy measured on one case.
#[derive(Clone, Debug)]
pub struct RunResult {
    /// Workload shape.
    pub case: Case,
    /// What consumed it.
    pub runner: Runner,
    /// The round (0-based) this run belongs to.
    pub round: u32,
    /// Messages published.
    pub published: u64,
    /// Messages acked by the subscription (emulator) at the end of the measured window.
    pub acked: u64,
    /// From the first publish to drained (or to `max_secs`).
    pub elapsed: Duration,
    /// Whether the run published and drained everything.
    pub completed: bool,
    /// Whether the store was PostgreSQL (else the Firestore emulator).
    pub postgres: bool,
    /// Firestore RPCs served by the emulator in the measured window; with
    /// PostgreSQL, round trips (client sends that followed an answer of
    /// the server, over all connections, pipelined requests counted once).
    pub store_rpcs: u64,
    /// Firestore commits served by the emulator in the measured window;
    /// with PostgreSQL, transactions that wrote something, committed in it.
    pub commits: u64,
    /// The most written document (with PostgreSQL: counter row) in the
    /// measured window; empty when it could not be measured.
    pub hottest_document: String,
    /// Writes to the most written document (or counter row): inserts and
    /// updates committed in the window.
    pub hottest_writes: u64,
    /// PostgreSQL: writes to the counter rows of the most written post,
    /// all its shards together (`None` on Firestore or without decoding).
    pub hottest_post_writes: Option<u64>,
    /// Publish -> commit latency over the final membership writes.
    pub latency: Percentiles,
    /// Peak resident set during the run, bytes: of the consumer process
    /// alone with [`BenchConfig::consumer_bin`], else of the whole process
    /// (consumer, emulators and publisher share it).
    pub peak_rss_bytes: u64,
    /// Whether `peak_rss_bytes` is the consumer's alone.
    pub rss_is_consumer_only: bool,
    /// CPU time (user + system) of the consumer process in the window;
    /// `None` when the consumer shares this process.
    pub consumer_cpu: Option<Duration>,
    /// The consumers' CPU time from the moment a fifth of the messages
    /// were acked to the window's end, with the acks in that span: the
    /// steady state, start-up (connecting, the first leases, the store's
    /// first reads) left out. `None` in-process or when the fifth was not
    /// reached.
    pub consumer_cpu_steady: Option<(Duration, u64)>,
    /// The consumer's own commit duration (BatchGetDocuments + Commit, with
    /// retries) p50 and p99 at the end of the window, from its `Stats` or
    /// its `/metrics`: where the publish->commit time goes. `None` when it
    /// could not be read.
    pub commit_duration: Option<(Duration, Duration)>,
    /// Push: the consumer's hold (a request's arrival to its answer) mean
    /// and p99 at the end of the window, from its `/metrics`: the commit
    /// duration plus the wait for a batch. `None` for pull.
    pub push_hold: Option<(Duration, Duration)>,
    /// The consumer's rollup lag (a post's first change not in its rollup
    /// to the rollup showing it) p50 and p99 at the end of the window,
    /// from its `Stats` or its `/metrics`: how fresh a reader's counts
    /// are. `None` without rollups or when it could not be read.
    pub rollup_lag: Option<(Duration, Duration)>,
    /// Firestore: the rollup refreshers' RPCs in the window (BatchWrite,
    /// RunQuery, and the BatchGetDocuments beyond one per batch committed
    /// or rolled back); `None` on PostgreSQL (compare the round trips of a
    /// run without rollups).
    pub rollup_rpcs: Option<u64>,
    /// Firestore: writes to the rollup of the workload's most liked post
    /// in the window; `None` on PostgreSQL.
    pub top_rollup_writes: Option<u64>,
    /// The consumers' lease calls on the subscription in the window, as
    /// the emulator counted them (none with push: the answer is the ack).
    pub lease_calls: LeaseCalls,
    /// Consumers (replicas) that ran.
    pub replicas: usize,
    /// The store's and Pub/Sub's operation counts, from the run's start
    /// to its consumers' stop (see [`ops`]).
    pub ops: StoreOps,
    /// The count check.
    pub verdict: Verdict,
}

/// A consumer's calls to settle its leases, as the Pub/Sub emulator
/// counted them: a unary RPC or a StreamingPull request is one call,
/// however many ack ids it names.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct LeaseCalls {
    /// Acknowledge calls.
    pub acknowledge_calls: u64,
    /// Ack ids the Acknowledge calls named.
    pub acknowledge_ids: u64,
    /// ModifyAckDeadline calls (extensions and nacks).
    pub modify_ack_deadline_calls: u64,
    /// Ack ids the ModifyAckDeadline calls named.
    pub modify_ack_deadline_ids: u64,
}

impl LeaseCalls {
    /// The calls counted in `stats`.
    pub fn of(stats: &hotcount_emulators::pubsub::SubscriptionStats) -> Self {
        Self {
            acknowledge_calls: stats.acknowledge_calls,
            acknowledge_ids: stats.acknowledge_ids,
            modify_ack_deadline_calls: stats.modify_ack_deadline_calls,
            modify_ack_deadline_ids: stats.modify_ack_deadline_ids,
        }
    }

    /// The calls made since `before` was counted.
    pub fn since(self, before: Self) -> Self {
        Self {
            acknowledge_calls: self
                .acknowledge_calls
                .saturating_sub(before.acknowledge_calls),
            acknowledge_ids: self.acknowledge_ids.saturating_sub(before.acknowledge_ids),
            modify_ack_deadline_calls: self
                .modify_ack_deadline_calls
                .saturating_sub(before.modify_ack_deadline_calls),
            modify_ack_deadline_ids: self
                .modify_ack_deadline_ids
                .saturating_sub(before.modify_ack_deadline_ids),
        }
    }
}

impl RunResult {
    /// Acked messages per second over the measured window.
    pub fn events_per_sec(&self) -> f64 {
        self.acked as f64 / self.elapsed.as_secs_f64().max(1e-9)
    }

    /// Store RPCs per 1,000 acked messages.
    pub fn rpcs_per_1k(&self) -> f64 {
        self.store_rpcs as f64 * 1000.0 / self.acked.max(1) as f64
    }

    /// Consumer CPU (user + system) per 1,000 acked messages, in
    /// milliseconds; `None` in-process.
    pub fn cpu_ms_per_1k(&self) -> Option<f64> {
        self.consumer_cpu
            .map(|cpu| cpu.as_secs_f64() * 1e6 / self.acked.max(1) as f64)
    }

    /// Consumer CPU per 1,000 messages acked after the first fifth, in
    /// milliseconds (see [`Self::consumer_cpu_steady`]).
    pub fn cpu_ms_per_1k_steady(&self) -> Option<f64> {
        self.consumer_cpu_steady
            .map(|(cpu, acked)| cpu.as_secs_f64() * 1e6 / acked.max(1) as f64)
    }

    /// PostgreSQL: writes per second to the counter rows of the most
    /// written post (all its shards).
    pub fn hottest_post_writes_per_sec(&self) -> Option<f64> {
        self.hottest_post_writes
            .map(|w| w as f64 / self.elapsed.as_secs_f64().max(1e-9))
    }

    /// Rollup RPCs per 1,000 acked messages (Firestore).
    pub fn rollup_rpcs_per_1k(&self) -> Option<f64> {
        self.rollup_rpcs
            .map(|n| n as f64 * 1000.0 / self.acked.max(1) as f64)
    }

    /// The consumer's rollup lag p99 in milliseconds, when it has one.
    pub fn rollup_lag_p99_ms(&self) -> Option<f64> {
        self.rollup_lag.map(|(_, p99)| p99.as_secs_f64() * 1000.0)
    }

    /// Writes per second to the most liked post's rollup (Firestore).
    pub fn top_rollup_writes_per_sec(&self) -> Option<f64> {
        self.top_rollup_writes
            .map(|w| w as f64 / self.elapsed.as_secs_f64().max(1e-9))
    }

    /// `n` per 1,000 acked messages.
    pub fn per_1k(&self, n: u64) -> f64 {
        n as f64 * 1000.0 / self.acked.max(1) as f64
    }

    /// Writes per second to the most written document.
    pub fn hottest_writes_per_sec(&self) -> f64 {
        self.hottest_writes as f64 / self.elapsed.as_secs_f64().max(1e-9)
    }
}

/// Whether the runs call for exit code 1: a completed run's counts are
/// wrong, or a partial run broke the invariant.
pub fn any_failed(results: &[RunResult]) -> bool {
    results.iter().any(|r| match r.verdict {
        Verdict::Exact | Verdict::NotCounted => false,
        Verdict::Wrong { .. } => true,
        Verdict::Partial { invariant_breaks } => invariant_breaks > 0,
    })
}

/// A run with every figure zero or empty (2,000 messages acked in 1 s,
/// exact), for tests to set the figures they are about.
#[cfg(test)]
pub fn sample_run(case: Case, runner: Runner, round: u32) -> RunResult {
    RunResult {
        case,
        runner,
        round,
        published: 2_000,
        acked: 2_000,
        elapsed: Duration::from_secs(1),
        completed: true,
        postgres: false,
        store_rpcs: 0,
        commits: 0,
        hottest_document: String::new(),
        hottest_writes: 0,
        hottest_post_writes: None,
        latency: Percentiles::default(),
        peak_rss_bytes: 0,
        rss_is_consumer_only: true,
        consumer_cpu: None,
        consumer_cpu_steady: None,
        commit_duration: None,
        push_hold: None,
        rollup_lag: None,
        rollup_rpcs: None,
        top_rollup_writes: None,
        lease_calls: LeaseCalls::default(),
        replicas: 1,
        ops: StoreOps::default(),
        verdict: Verdict::Exact,
    }
}

/// [`sample_run`] whose Firestore operations are `collections` (name,
/// usage), for tests of the tables read from them.
#[cfg(test)]
pub fn sample_run_on_firestore(
    runner: Runner,
    round: u32,
    collections: impl IntoIterator<
        Item = (&'static str, hotcount_emulators::firestore::CollectionUsage),
    >,
) -> RunResult {
    let mut firestore = super::ops::FirestoreOps::default();
    for (name, usage) in collections {
        firestore.by_collection.insert(name.into(), usage);
    }
    RunResult {
        ops: StoreOps {
            firestore: Some(firestore),
            ..StoreOps::default()
        },
        ..sample_run(Case::Viral, runner, round)
    }
}
