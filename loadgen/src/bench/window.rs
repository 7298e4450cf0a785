//! The measured window of a bench run: the counters taken before it
//! ([`Baseline`]), then every figure read the moment the last message is
//! acked (or the cap is reached), before the consumers drain ([`Window`]).
//!
//! Invariant: every figure comes from outside the service under test (the
//! emulators' counters, the subscription's acks, `/proc`, the stage's
//! proxy and the server's logical decoding), as a difference from the
//! baseline; the decoding is read after the consumers stopped, so it is
//! not part of what is measured.

use std::time::{Duration, Instant};

use super::ops::StoreOps;
use super::result::{LeaseCalls, RunResult, Verdict};
use super::{Case, Runner};
use crate::consumer::{Consumer, OwnTimings};
use crate::procfs;
use crate::report::Percentiles;
use crate::run_error::RunError;
use crate::stage::Stage;

/// The emulators' counters before the window, and this process's peak RSS
/// reset to now; with PostgreSQL, the proxy's round trips reset and a
/// decoding slot opened.
pub(super) struct Baseline {
    store_rpcs: u64,
    commits: u64,
    rollup_rpcs: u64,
    lease_calls: LeaseCalls,
    probe: Option<crate::postgres::Probe>,
}

/// The Firestore RPCs of rollup refreshers so far (and of anything else
/// that reads without committing: nothing else in a bench run): BatchWrite,
/// RunQuery (the sweep), and every BatchGetDocuments beyond one per batch
/// committed or rolled back. Saturates at 0.
fn rollup_rpcs(stage: &Stage) -> u64 {
    let counters = stage.emulators().firestore_counters();
    let batches = counters.get("Commit") + counters.get("Rollback");
    counters.get("BatchWrite")
        + counters.get("RunQuery")
        + counters.get("BatchGetDocuments").saturating_sub(batches)
}

impl Baseline {
    pub(super) async fn take(stage: &Stage) -> Result<Self, RunError> {
        let emulators = stage.emulators();
        emulators.firestore().reset_stats();
        let store_rpcs = emulators.firestore_counters().total();
        let commits = emulators.firestore_counters().get("Commit");
        let rollup_rpcs = rollup_rpcs(stage);
        let probe = match stage.postgres() {
            Some(pg) => {
                pg.proxy.reset_round_trips();
                Some(crate::postgres::Probe::begin(&pg.url).await?)
            }
            None => None,
        };
        procfs::reset_peak_rss();
        Ok(Self {
            store_rpcs,
            commits,
            rollup_rpcs,
            lease_calls: LeaseCalls::of(&stage.subscription_stats()),
            probe,
        })
    }
}

/// What the measured window saw: from the first publish, or with a backlog
/// from the consumer's start, to the last ack (or the cap).
pub(super) struct Window {
    /// Whether every message was acked before the cap.
    pub(super) completed: bool,
    postgres: bool,
    elapsed: Duration,
    acked: u64,
    store_rpcs: u64,
    commits: u64,
    hottest_document: String,
    hottest_writes: u64,
    hottest_post_writes: Option<u64>,
    peak_rss_bytes: u64,
    rss_is_consumer_only: bool,
    consumer_cpu: Option<Duration>,
    consumer_cpu_steady: Option<(Duration, u64)>,
    commit_duration: Option<(Duration, Duration)>,
    push_hold: Option<(Duration, Duration)>,
    rollup_lag: Option<(Duration, Duration)>,
    rollup_rpcs: Option<u64>,
    top_rollup_writes: Option<u64>,
    lease_calls: LeaseCalls,
    replicas: usize,
}

impl Window {
    /// Waits for `total` acks (at most `max_secs` from `started`, when the
    /// consumers started) and reads every figure at that moment, before
    /// the consumers drain (`top_rollup`: the name of the most liked
    /// post's rollup).
    pub(super) async fn measure(
        (stage, consumers): (&Stage, &[Consumer]),
        baseline: &mut Baseline,
        (started, max_secs, total): (Instant, u64, u64),
        top_rollup: &str,
    ) -> Self {
        let deadline = started + Duration::from_secs(max_secs);
        // The steady state starts once a fifth is acked.
        let fifth = if stage.wait_for_acks(total / 5, deadline).await {
            cpu_of(consumers).map(|cpu| (cpu, stage.acked()))
        } else {
            None
        };
        let completed = stage.wait_for_acks(total, deadline).await;
        let elapsed = started.elapsed();
        let acked = stage.acked();
        let lease_calls = LeaseCalls::of(&stage.subscription_stats()).since(baseline.lease_calls);
        if let Some(probe) = &mut baseline.probe {
            probe.mark_end().await;
        }
        let emulators = stage.emulators();
        let mut store_rpcs = emulators.firestore_counters().total() - baseline.store_rpcs;
        let commits = emulators.firestore_counters().get("Commit") - baseline.commits;
        let hottest = emulators.firestore().hottest_documents(1);
        let (hottest_document, hottest_writes) = hottest
            .first()
            .map_or((String::new(), 0), |d| (d.name.clone(), d.writes));
        let postgres = stage.postgres().is_some();
        let rollup_rpcs = rollup_rpcs(stage).saturating_sub(baseline.rollup_rpcs);
        let top_rollup_writes = emulators.firestore().document_writes(top_rollup);
        if let Some(pg) = stage.postgres() {
            store_rpcs = pg.proxy.round_trips();
        }
        // The replicas' largest peak RSS, their CPU together.
        let mut peak_rss_bytes = 0;
        let mut rss_is_consumer_only = true;
        for consumer in consumers {
            let (rss, only) = consumer.peak_rss_bytes();
            peak_rss_bytes = peak_rss_bytes.max(rss);
            rss_is_consumer_only &= only;
        }
        let consumer_cpu = cpu_of(consumers);
        let consumer_cpu_steady = consumer_cpu.zip(fifth).map(|(cpu, (early, acked_early))| {
            (cpu.saturating_sub(early), acked.saturating_sub(acked_early))
        });
        let OwnTimings {
            commit_duration,
            push_hold,
            rollup_lag,
        } = match consumers.first() {
            Some(consumer) => consumer.own_timings().await,
            None => OwnTimings::default(),
        };
        Self {
            postgres: stage.postgres().is_some(),
            elapsed,
            completed,
            acked,
            store_rpcs,
            commits,
            hottest_document,
            hottest_writes,
            hottest_post_writes: None,
            peak_rss_bytes,
            rss_is_consumer_only,
            consumer_cpu,
            consumer_cpu_steady,
            commit_duration,
            push_hold,
            rollup_lag,
            rollup_rpcs: (!postgres).then_some(rollup_rpcs),
            top_rollup_writes: (!postgres).then_some(top_rollup_writes),
            lease_calls,
            replicas: consumers.len(),
        }
    }

    /// With PostgreSQL: the transactions and the hottest counter row's
    /// writes committed in the window, decoded now (after the consumer
    /// stopped: decoding is not measured); none are made up without a slot.
    pub(super) async fn add_server_figures(&mut self, baseline: Baseline) -> Result<(), RunError> {
        let Some(probe) = baseline.probe else {
            return Ok(());
        };
        let window = probe.finish().await?;
        (self.commits, self.hottest_document, self.hottest_writes) = match &window {
            Some(w) => (w.transactions, w.hottest_row.clone(), w.hottest_writes),
            None => (0, String::new(), 0),
        };
        self.hottest_post_writes = window.map(|w| w.hottest_post_writes);
        Ok(())
    }

    pub(super) fn into_result(
        self,
        (case, runner, round): (Case, Runner, u32),
        published: u64,
        completed: bool,
        latency: Percentiles,
        verdict: Verdict,
    ) -> RunResult {
        RunResult {
            case,
            runner,
            round,
            published,
            acked: self.acked,
            elapsed: self.elapsed,
            completed,
            postgres: self.postgres,
            store_rpcs: self.store_rpcs,
            commits: self.commits,
            hottest_document: self.hottest_document,
            hottest_writes: self.hottest_writes,
            hottest_post_writes: self.hottest_post_writes,
            latency,
            peak_rss_bytes: self.peak_rss_bytes,
            rss_is_consumer_only: self.rss_is_consumer_only,
            consumer_cpu: self.consumer_cpu,
            consumer_cpu_steady: self.consumer_cpu_steady,
            commit_duration: self.commit_duration,
            push_hold: self.push_hold,
            rollup_lag: self.rollup_lag,
            rollup_rpcs: self.rollup_rpcs,
            top_rollup_writes: self.top_rollup_writes,
            lease_calls: self.lease_calls,
            replicas: self.replicas,
            ops: StoreOps::default(),
            verdict,
        }
    }
}

/// The consumers' CPU time together (user + system); `None` when one
/// shares this process.
fn cpu_of(consumers: &[Consumer]) -> Option<Duration> {
    consumers
        .iter()
        .try_fold(Duration::ZERO, |sum, c| Some(sum + c.cpu_time()?))
}
