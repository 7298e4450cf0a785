//! Whether commits make progress: how many batches are being committed,
//! when a commit last succeeded, and the last store error; from these,
//! whether the replica is stalled (then `/readyz` answers 503 and
//! `hotcount_commits_stalled` is 1).
//!
//! Invariant: stalled only when no commit has succeeded for the whole
//! threshold since a batch began waiting on the store (or an attempt
//! failed) after the last success; the first success ends it. So a
//! replica whose store answers is never stalled, nor an idle one whose
//! last commit went through; one whose batches were given up (nacked) on a
//! store that does not answer stays stalled while idle, until a commit
//! succeeds again (redelivered messages bring one).

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;
use tokio::time::Instant;

/// The commits' progress, shared by the flusher (which records it) and
/// the service's watch (which judges it).
#[derive(Debug, Default)]
pub struct CommitProgress {
    in_flight: AtomicU64,
    /// Since when the commits in flight have made no progress.
    waiting_since: Mutex<Option<Instant>>,
    last_error: Mutex<Option<String>>,
    pub(super) stalled: Arc<AtomicBool>,
}

/// A stall, as [`CommitProgress::check`] found it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Stall {
    /// How long no commit has succeeded.
    pub for_how_long: Duration,
    /// Batches being committed.
    pub in_flight: u64,
    /// The last store error, if any.
    pub last_error: Option<String>,
}

impl CommitProgress {
    /// A batch's commit starts: it waits on the store from now.
    pub fn begin(&self) {
        self.in_flight.fetch_add(1, Ordering::SeqCst);
        self.waiting_since.lock().get_or_insert_with(Instant::now);
    }

    /// A batch's commit ended (committed or given up).
    pub fn end(&self) {
        let _ = self
            .in_flight
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| {
                Some(n.saturating_sub(1))
            });
    }

    /// A commit succeeded: the store answers; nothing waits any more.
    pub fn committed(&self) {
        *self.waiting_since.lock() = None;
    }

    /// A commit attempt failed with `error`.
    pub fn failed(&self, error: &dyn std::fmt::Display) {
        *self.last_error.lock() = Some(error.to_string());
        self.waiting_since.lock().get_or_insert_with(Instant::now);
    }

    /// The stall, if no commit has succeeded for `threshold` since a batch
    /// began waiting or an attempt failed.
    pub fn check(&self, threshold: Duration) -> Option<Stall> {
        let since = (*self.waiting_since.lock())?;
        let waited = since.elapsed();
        (waited >= threshold).then(|| Stall {
            for_how_long: waited,
            in_flight: self.in_flight.load(Ordering::SeqCst),
            last_error: self.last_error.lock().clone(),
        })
    }

    /// Records whether the replica is stalled; returns whether that changed.
    pub fn set_stalled(&self, stalled: bool) -> bool {
        self.stalled.swap(stalled, Ordering::SeqCst) != stalled
    }

    /// Whether the replica is stalled (as last set).
    pub fn is_stalled(&self) -> bool {
        self.stalled.load(Ordering::SeqCst)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const THRESHOLD: Duration = Duration::from_secs(30);

    #[tokio::test(start_paused = true)]
    async fn stalled_only_when_nothing_commits_for_the_threshold_and_the_first_success_ends_it() {
        let progress = CommitProgress::default();
        tokio::time::advance(THRESHOLD * 2).await;
        assert_eq!(progress.check(THRESHOLD), None, "idle is not stalled");

        progress.begin();
        tokio::time::advance(THRESHOLD - Duration::from_secs(1)).await;
        assert_eq!(progress.check(THRESHOLD), None);
        progress.failed(&"Commit failed (DeadlineExceeded)");
        tokio::time::advance(Duration::from_secs(1)).await;
        let stall = progress.check(THRESHOLD).expect("stalled");
        assert_eq!(stall.in_flight, 1);
        assert_eq!(
            stall.last_error.as_deref(),
            Some("Commit failed (DeadlineExceeded)")
        );

        // Another batch starting does not restart the clock; a success does.
        progress.begin();
        assert!(progress.check(THRESHOLD).is_some());
        progress.committed();
        assert_eq!(progress.check(THRESHOLD), None);
        progress.end();
        progress.end();

        // Committed last, then idle: never stalled.
        tokio::time::advance(THRESHOLD * 2).await;
        assert_eq!(progress.check(THRESHOLD), None);

        // Given up (nacked) on a store that does not answer, then idle:
        // still stalled, until a commit succeeds.
        progress.begin();
        progress.failed(&"Commit failed (Unavailable)");
        progress.end();
        tokio::time::advance(THRESHOLD).await;
        assert_eq!(progress.check(THRESHOLD).map(|s| s.in_flight), Some(0));
        progress.begin();
        progress.committed();
        progress.end();
        assert_eq!(progress.check(THRESHOLD), None);
    }

    #[test]
    fn a_change_of_the_stall_flag_is_reported_once() {
        let progress = CommitProgress::default();
        assert!(progress.set_stalled(true));
        assert!(!progress.set_stalled(true));
        assert!(progress.is_stalled());
        assert!(progress.set_stalled(false));
        assert!(!progress.is_stalled());
    }
}
