//! What the chaos counts while it runs: kills (and those right after a
//! commit), consumer exits that were not kills with their logs' tails,
//! spikes and PostgreSQL connection cuts, shared by the chaos tasks and
//! read by the summary.
//!
//! Invariant: counters only grow while the chaos runs; each unexpected
//! exit is counted once, with its report.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;

/// Counters shared by the chaos tasks.
#[derive(Default)]
pub(super) struct Tally {
    /// `kill -9` of the victim.
    pub(super) kills: AtomicU64,
    /// Of those, kills right after one of the victim's commits.
    pub(super) kills_after_commit: AtomicU64,
    /// Consumer exits that were not kills.
    pub(super) unexpected_exits: AtomicU64,
    /// Latency spikes with a clock jump.
    pub(super) spikes: AtomicU64,
    /// PostgreSQL: connections cut before their COMMIT reached the server.
    pub(super) cuts_before_commit: AtomicU64,
    /// PostgreSQL: connections cut after the server committed.
    pub(super) cuts_after_commit: AtomicU64,
    /// How each unexpected exit ended, with the tail of its log.
    pub(super) exit_reports: Mutex<Vec<String>>,
}

impl Tally {
    /// `kill -9` of the victim.
    pub(super) fn kills(&self) -> u64 {
        self.kills.load(Ordering::Relaxed)
    }

    /// Of those, kills right after one of the victim's commits.
    pub(super) fn kills_after_commit(&self) -> u64 {
        self.kills_after_commit.load(Ordering::Relaxed)
    }

    /// Consumer exits that were not kills.
    pub(super) fn unexpected_exits(&self) -> u64 {
        self.unexpected_exits.load(Ordering::Relaxed)
    }

    /// Latency spikes with a clock jump.
    pub(super) fn spikes(&self) -> u64 {
        self.spikes.load(Ordering::Relaxed)
    }

    /// PostgreSQL: connections cut (before COMMIT, after COMMIT).
    pub(super) fn cuts(&self) -> (u64, u64) {
        (
            self.cuts_before_commit.load(Ordering::Relaxed),
            self.cuts_after_commit.load(Ordering::Relaxed),
        )
    }

    /// Counts a consumer exit that was not a kill, with its `report`.
    pub(super) fn exited_unexpectedly(&self, report: String) {
        self.unexpected_exits.fetch_add(1, Ordering::Relaxed);
        if let Ok(mut reports) = self.exit_reports.lock() {
            reports.push(report);
        }
    }

    /// The reports of the unexpected exits, taken out.
    pub(super) fn take_exit_reports(&self) -> Vec<String> {
        self.exit_reports
            .lock()
            .map(|mut r| std::mem::take(&mut *r))
            .unwrap_or_default()
    }
}
