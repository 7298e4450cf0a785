//! Whether commits make progress: how many batches are being committed,
//! when a commit last succeeded, and the last store error; from these,
//! whether the replica is stalled (then `/readyz` answers 503 and
//! `hotcount_commits_stalled` is 1).
//!
//! Invariant: stalled only while a batch is being committed and no commit
//! has succeeded for the whole threshold (counted from the later of the
//! last success and the moment commits started after an idle spell), so
//! an idle replica, or one whose store answers, is never stalled; the
//! first success ends a stall.

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
    /// A batch's commit starts.
    pub fn begin(&self) {
        if self.in_flight.fetch_add(1, Ordering::SeqCst) == 0 {
            let mut since = self.waiting_since.lock();
            if since.is_none() {
                *since = Some(Instant::now());
            }
        }
    }

    /// A batch's commit ended (committed or given up).
    pub fn end(&self) {
        let before = self
            .in_flight
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| {
                Some(n.saturating_sub(1))
            })
            .unwrap_or(0);
        if before <= 1 {
            // Idle: nothing is waiting on the store.
            *self.waiting_since.lock() = None;
        }
    }

    /// A commit succeeded: the store answers.
    pub fn committed(&self) {
        let mut since = self.waiting_since.lock();
        *since = (self.in_flight.load(Ordering::SeqCst) > 0).then(Instant::now);
    }

    /// A commit attempt failed with `error`.
    pub fn failed(&self, error: &dyn std::fmt::Display) {
        *self.last_error.lock() = Some(error.to_string());
    }

    /// The stall, if batches are being committed and none has succeeded
    /// for `threshold`.
    pub fn check(&self, threshold: Duration) -> Option<Stall> {
        let in_flight = self.in_flight.load(Ordering::SeqCst);
        let since = (*self.waiting_since.lock())?;
        let waited = since.elapsed();
        (in_flight > 0 && waited >= threshold).then(|| Stall {
            for_how_long: waited,
            in_flight,
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
    async fn stalled_only_while_commits_wait_past_the_threshold_and_the_first_success_ends_it() {
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
        tokio::time::advance(THRESHOLD).await;
        assert!(progress.check(THRESHOLD).is_some(), "no success since");

        // Idle again: not stalled, and the next commit starts a new clock.
        progress.end();
        progress.end();
        assert_eq!(progress.check(THRESHOLD), None);
        tokio::time::advance(THRESHOLD).await;
        progress.begin();
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
