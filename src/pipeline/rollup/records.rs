//! The due records (the durable copies of batches' marks, written in
//! each batch's commit): taken over when their replica left them
//! uncleared too long, cleared once every post they list is refreshed.
//!
//! Invariants: a record is taken over only when older than
//! `takeover_after` by the store's clock (as last seen in a read), and
//! its posts are marked as this refresher's own; a record is cleared only
//! when [`super::marks::Marks::take_ready`] hands it over, and one whose
//! clearing failed is handed back to be cleared at a later cycle.

use std::time::SystemTime;

use tokio::time::Instant;

use super::refresher::Refresher;
use crate::store::rollup::{micros_of, RollupStore};

impl<S: RollupStore> Refresher<S> {
    /// Takes over the due records no live refresher cleared in time and
    /// marks their posts; returns how many records it took.
    pub async fn take_over(&self) -> usize {
        let offset = self.store_offset.load(std::sync::atomic::Ordering::Relaxed);
        let store_now = micros_of(SystemTime::now()).saturating_add(offset);
        self.stats.rollup_rpcs.add(1);
        let taken = match self
            .store
            .take_over_due(
                self.config.takeover_after,
                store_now,
                self.config.takeover_limit,
            )
            .await
        {
            Ok(taken) => taken,
            Err(error) => {
                self.warn_failed(0, &error);
                return 0;
            }
        };
        if taken.is_empty() {
            return 0;
        }
        let now = Instant::now();
        for record in &taken {
            self.marks.mark(
                &record.posts,
                record.committed_at,
                Some(record.record.clone()),
                now,
            );
        }
        self.stats.rollup_taken_over.add(taken.len() as u64);
        tracing::info!(
            records = taken.len(),
            "rollup due records taken over from a replica that did not clear them in time"
        );
        taken.len()
    }

    /// Clears in the store the due records whose posts are all refreshed
    /// (one round trip); on failure they are cleared at a later cycle.
    pub async fn clear_ready(&self) {
        let ready = self.marks.take_ready();
        if ready.is_empty() {
            return;
        }
        self.stats.rollup_rpcs.add(1);
        match self.store.clear_due(&ready).await {
            Ok(()) => self.stats.rollup_cleared.add(ready.len() as u64),
            Err(error) => {
                self.warn_failed(0, &error);
                self.marks.unclear(ready);
            }
        }
    }
}
