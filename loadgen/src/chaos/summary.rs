//! What the chaos run measured, the claims its PASS stands for, and the
//! table the command prints.
//!
//! Invariant: PASS means every claim of [`ChaosSummary::failures`] holds;
//! the figures are read from the emulators and the verifier, never from
//! the consumers under test.

use std::collections::BTreeMap;
use std::time::Duration;

use hotcount::config::Delivery;
use hotcount_emulators::pubsub::SubscriptionStats;
use hotcount_emulators::FaultKind;

use super::config::ChaosConfig;
use super::erasures::ErasureReport;
use super::tally::Tally;
use crate::milestones::MilestoneReport;
use crate::publish::PublishReport;
use crate::stage::Stage;
use crate::verify::VerifyReport;

/// What the run measured.
#[derive(Debug)]
pub struct ChaosSummary {
    /// Publish outcome (the first pass; the replay is counted separately).
    pub publish: PublishReport,
    /// Messages made deliverable again by the Seek (0 without replay).
    pub replayed: u64,
    /// `kill -9` of a consumer process.
    pub kills: u64,
    /// Consumers SIGKILLed when the chaos calmed and never restarted.
    pub scaled_down: usize,
    /// Of those, kills fired right after a Firestore commit (before its ack).
    pub kills_after_commit: u64,
    /// Consumer processes that exited without being killed (restarted too).
    pub unexpected_exits: u64,
    /// Latency spikes with a clock jump past the leases.
    pub spikes: u64,
    /// Faults fired, by kind (Pub/Sub and Firestore together).
    pub faults: BTreeMap<String, u64>,
    /// The subscription's counters at the end.
    pub subscription: SubscriptionStats,
    /// Firestore commits served (0 on PostgreSQL).
    pub commits: u64,
    /// Whether the consumers counted in PostgreSQL (else Firestore).
    pub postgres: bool,
    /// How the consumers got their messages.
    pub delivery: Delivery,
    /// The verification.
    pub verify: VerifyReport,
    /// Whether the subscription drained (nothing unacked) before the timeout.
    pub drained: bool,
    /// Wall time of the run.
    pub elapsed: Duration,
    /// Each unexpected consumer exit, with the tail of its log.
    pub exit_reports: Vec<String>,
    /// Kills the run had to reach.
    pub min_kills: u64,
    /// Whether a Seek replay was asked for.
    pub replay_expected: bool,
    /// With milestones on: what the webhook sink received, and the records.
    pub milestones: Option<MilestoneReport>,
    /// With erasures on: what the `users erase` processes did, and the
    /// erased users' posts at rest.
    pub erasures: Option<ErasureReport>,
}

/// Every fault kind a run on PostgreSQL injects besides the Pub/Sub ones
/// ([`PULL_FAULT_KINDS`] or [`PUSH_FAULT_KINDS`]); each must fire.
pub const POSTGRES_FAULT_KINDS: [&str; 3] = [
    "connection cut before COMMIT",
    "connection cut after COMMIT",
    "commit latency spike",
];

/// Every fault kind a run on Firestore injects besides the Pub/Sub ones;
/// each must fire.
pub const FAULT_KINDS: [&str; 3] = [
    "commit ABORTED",
    "commit applied, answered UNAVAILABLE",
    "commit latency spike",
];

/// The Pub/Sub faults of a run with pulling consumers; each must fire.
pub const PULL_FAULT_KINDS: [&str; 3] = ["ack lost", "spurious redelivery", "stream dropped"];

/// The Pub/Sub faults of a run with push consumers; each must fire.
pub const PUSH_FAULT_KINDS: [&str; 3] = [
    "ack lost",
    "spurious redelivery",
    "push answered 204, nacked anyway",
];

impl ChaosSummary {
    /// Every claim of the run that does not hold (empty = PASS): exact
    /// counts and invariant; drained; nothing failed to publish; every
    /// poison or hostile message has a quarantine record or was
    /// dead-lettered, and no valid event was quarantined; every membership
    /// read; every rollup at rest equal to the truth; redeliveries
    /// happened; no consumer exited unless killed; the kills reached their
    /// minimum and at least one landed right after a commit; the replay
    /// replayed; every fault kind fired; with milestones, every one the
    /// final counts cross delivered once and none above what a post could
    /// ever count; with erasures, see [`erasure_failures`].
    pub fn failures(&self) -> Vec<String> {
        let v = &self.verify;
        let mut out = Vec::new();
        let mut check = |ok: bool, what: String| {
            if !ok {
                out.push(what);
            }
        };
        check(
            v.mismatches.is_empty(),
            format!("{} posts mismatch", v.mismatches.len()),
        );
        check(
            v.invariant_violations.is_empty(),
            format!("{} invariant breaks", v.invariant_violations.len()),
        );
        check(self.drained, "the subscription did not drain".into());
        check(
            self.publish.failed == 0,
            format!("{} publishes failed", self.publish.failed),
        );
        let recorded = v.quarantined as u64 - v.quarantined_events as u64;
        let dead = self.subscription.dead_lettered;
        check(
            recorded + dead == v.poison_expected,
            format!(
                "poison sent {} != quarantined {recorded} + dead-lettered {dead}",
                v.poison_expected
            ),
        );
        check(
            v.quarantined_events == 0,
            format!("{} valid events quarantined", v.quarantined_events),
        );
        check(
            v.memberships_read as u64 == v.memberships_expected,
            format!(
                "memberships {} of {}",
                v.memberships_read, v.memberships_expected
            ),
        );
        check(
            !v.rollups_checked || v.rollup_mismatches.is_empty(),
            format!(
                "{} rollups differ from the truth at rest (e.g. {:?})",
                v.rollup_mismatches.len(),
                v.rollup_mismatches.first()
            ),
        );
        check(self.subscription.redeliveries > 0, "no redelivery".into());
        check(
            self.unexpected_exits == 0,
            format!(
                "{} consumer exits that were not kills",
                self.unexpected_exits
            ),
        );
        check(
            self.kills >= self.min_kills,
            format!("{} kills of {}", self.kills, self.min_kills),
        );
        check(
            self.kills_after_commit > 0,
            "no kill landed right after a commit".into(),
        );
        check(
            !self.replay_expected || self.replayed > 0,
            "the Seek replayed nothing".into(),
        );
        if let Some(m) = &self.milestones {
            check(
                m.missing.is_empty(),
                format!(
                    "{} milestones the truth crosses never delivered (e.g. {:?})",
                    m.missing.len(),
                    m.missing.first()
                ),
            );
            check(
                m.bad_signatures == 0,
                format!("{} milestone calls with a bad signature", m.bad_signatures),
            );
            check(
                m.differing_bodies == 0,
                format!(
                    "{} repeated milestone calls differ from the first",
                    m.differing_bodies
                ),
            );
            check(
                m.records == m.delivered && m.records_not_done == 0,
                format!(
                    "milestone records {} ({} not done, e.g. {}) != keys delivered {}",
                    m.records,
                    m.records_not_done,
                    m.first_not_done.as_deref().unwrap_or("-"),
                    m.delivered
                ),
            );
            check(m.faults > 0, "no milestone call met a sink fault".into());
            check(
                m.beyond_reach.is_empty(),
                format!(
                    "{} milestones sent above any count their post ever had (e.g. {:?})",
                    m.beyond_reach.len(),
                    m.beyond_reach.first()
                ),
            );
        }
        let store_kinds = if self.postgres {
            POSTGRES_FAULT_KINDS
        } else {
            FAULT_KINDS
        };
        let pubsub_kinds = match self.delivery {
            Delivery::Pull => PULL_FAULT_KINDS,
            Delivery::Push => PUSH_FAULT_KINDS,
        };
        for kind in pubsub_kinds.into_iter().chain(store_kinds) {
            check(
                self.faults.get(kind).copied().unwrap_or(0) > 0,
                format!("fault {kind} never fired"),
            );
        }
        if let Some(e) = &self.erasures {
            out.extend(erasure_failures(e, v));
        }
        out
    }

    /// Whether every claim holds ([`ChaosSummary::failures`] is empty).
    pub fn is_success(&self) -> bool {
        self.failures().is_empty()
    }
}

/// The claims of the erasures that do not hold: every erasure ended with
/// exit 0 (the killed one after its rerun); at least one was killed midway
/// and run again; the erased users held likes to remove; every post one of
/// them liked is exact at rest (count and rollup) against the truth
/// without them, i.e. their likes count 0; no membership of theirs remains.
pub fn erasure_failures(e: &ErasureReport, v: &VerifyReport) -> Vec<String> {
    let mut out = Vec::new();
    let mut check = |ok: bool, what: String| {
        if !ok {
            out.push(what);
        }
    };
    check(
        e.failures.is_empty() && e.ended == e.users.len(),
        format!(
            "{} of {} erasures ended successfully: {}",
            e.ended,
            e.users.len(),
            e.failures.first().map_or("-", String::as_str)
        ),
    );
    check(
        e.killed_midway > 0 && e.reruns >= e.killed_midway,
        format!(
            "erasures killed midway {}, run again {}: none was both",
            e.killed_midway, e.reruns
        ),
    );
    check(
        e.likes_to_remove > 0,
        "the erased users held no like: nothing to erase".into(),
    );
    check(
        e.posts_exact == e.posts,
        format!(
            "{} of {} posts an erased user liked are not exact without them",
            e.posts - e.posts_exact,
            e.posts
        ),
    );
    check(
        v.erased_memberships == 0,
        format!(
            "{} memberships of erased users remain",
            v.erased_memberships
        ),
    );
    out
}

/// What the run itself produced, besides the emulators' and the chaos
/// tasks' counters.
pub(super) struct Outcome {
    pub(super) publish: PublishReport,
    pub(super) replayed: u64,
    pub(super) verify: VerifyReport,
    pub(super) drained: bool,
    pub(super) elapsed: Duration,
}

impl ChaosSummary {
    /// The summary of a finished run: `outcome`, the chaos counters, and
    /// what the emulators saw (faults fired, subscription, commits).
    pub(super) fn collect(
        outcome: Outcome,
        stage: &Stage,
        tally: &Tally,
        config: &ChaosConfig,
    ) -> Self {
        let emulators = stage.emulators();
        let mut faults = BTreeMap::new();
        for (kind, n) in emulators.pubsub_faults().fired() {
            *faults
                .entry(pubsub_fault_label(kind).to_string())
                .or_default() += n;
        }
        for (kind, n) in emulators.firestore_faults().fired() {
            *faults.entry(fault_label(kind).to_string()).or_default() += n;
        }
        let postgres = stage.postgres().is_some();
        if postgres {
            let (before, after) = tally.cuts();
            faults.insert("connection cut before COMMIT".into(), before);
            faults.insert("connection cut after COMMIT".into(), after);
            faults.insert("commit latency spike".into(), tally.spikes());
        }
        Self {
            publish: outcome.publish,
            replayed: outcome.replayed,
            kills: tally.kills(),
            scaled_down: config.scale_down,
            kills_after_commit: tally.kills_after_commit(),
            unexpected_exits: tally.unexpected_exits(),
            spikes: tally.spikes(),
            faults,
            subscription: stage.subscription_stats(),
            commits: emulators.firestore_counters().get("Commit"),
            postgres,
            delivery: config.delivery,
            verify: outcome.verify,
            drained: outcome.drained,
            elapsed: outcome.elapsed,
            exit_reports: tally.take_exit_reports(),
            min_kills: config.min_kills,
            replay_expected: config.replay,
            milestones: None,
            erasures: None,
        }
    }
}

/// The name of a Pub/Sub fault kind as injected here (only the push
/// answers meet an error after apply).
fn pubsub_fault_label(kind: FaultKind) -> &'static str {
    match kind {
        FaultKind::ErrorAfterApply => "push answered 204, nacked anyway",
        other => fault_label(other),
    }
}

/// The name of a fault kind as injected here.
fn fault_label(kind: FaultKind) -> &'static str {
    match kind {
        FaultKind::Error => "commit ABORTED",
        FaultKind::ErrorAfterApply => "commit applied, answered UNAVAILABLE",
        FaultKind::Latency => "commit latency spike",
        FaultKind::DropStream => "stream dropped",
        FaultKind::AckLost => "ack lost",
        FaultKind::SpuriousRedelivery => "spurious redelivery",
    }
}

/// The figures the chaos command prints.
pub fn render(s: &ChaosSummary) -> String {
    let v = &s.verify;
    let sub = &s.subscription;
    let mut out = String::new();
    let mut row = |name: &str, value: String| out.push_str(&format!("  {name:<40} {value}\n"));
    row("events published", s.publish.published.to_string());
    row("events replayed by Seek", s.replayed.to_string());
    row("deliveries (incl. redeliveries)", sub.delivered.to_string());
    row("redeliveries observed", sub.redeliveries.to_string());
    row("lease expiries", sub.expiries.to_string());
    row("kills (kill -9)", s.kills.to_string());
    row(
        "scaled down (killed, never restarted)",
        s.scaled_down.to_string(),
    );
    row(
        "  of which right after a commit",
        s.kills_after_commit.to_string(),
    );
    row("unexpected consumer exits", s.unexpected_exits.to_string());
    row("latency spikes + clock jumps", s.spikes.to_string());
    for (kind, n) in &s.faults {
        row(&format!("fault fired: {kind}"), n.to_string());
    }
    if !s.postgres {
        row("Firestore commits", s.commits.to_string());
    }
    row("dead-lettered", sub.dead_lettered.to_string());
    row(
        "posts verified exact",
        format!("{} of {}", v.posts_exact, v.posts_checked),
    );
    row("mismatches", v.mismatches.len().to_string());
    row(
        "shard/membership invariant breaks",
        v.invariant_violations.len().to_string(),
    );
    row(
        "memberships (read / expected)",
        format!("{} / {}", v.memberships_read, v.memberships_expected),
    );
    row(
        "quarantined / poison injected",
        format!("{} / {}", v.quarantined, v.poison_expected),
    );
    row("valid events quarantined", v.quarantined_events.to_string());
    if let Some(cell) = v.rollups_exact_cell() {
        row("rollups exact at rest", cell);
    }
    if let Some(e) = &s.erasures {
        row(
            "users erased (ended / chosen)",
            format!(
                "{} / {} (from {:.1} s, {:.1} s in all)",
                e.ended,
                e.users.len(),
                e.started_at_secs,
                e.elapsed.as_secs_f64()
            ),
        );
        row(
            "erasures run / killed midway / rerun",
            format!("{} / {} / {}", e.runs, e.killed_midway, e.reruns),
        );
        row(
            "erased likes: posts exact without them",
            format!(
                "{} of {} ({} likes)",
                e.posts_exact, e.posts, e.likes_to_remove
            ),
        );
        row(
            "memberships of erased users",
            v.erased_memberships.to_string(),
        );
    }
    if let Some(m) = &s.milestones {
        row(
            "milestones delivered / truth crosses",
            format!(
                "{} / {} (+{} above the final count, {} above any)",
                m.delivered,
                m.expected,
                m.above_final,
                m.beyond_reach.len()
            ),
        );
        row(
            "milestone calls / faulted / repeats",
            format!("{} / {} / {}", m.requests, m.faults, m.repeats),
        );
        row(
            "milestone records (not done)",
            format!("{} ({})", m.records, m.records_not_done),
        );
    }
    row("drained", s.drained.to_string());
    row("elapsed", format!("{:.1} s", s.elapsed.as_secs_f64()));
    let failures = s.failures();
    row(
        "verdict",
        if failures.is_empty() { "PASS" } else { "FAIL" }.to_string(),
    );
    for failure in failures {
        out.push_str(&format!("  FAIL: {failure}\n"));
    }
    for report in &s.exit_reports {
        out.push_str(&format!("{report}\n"));
    }
    out
}
