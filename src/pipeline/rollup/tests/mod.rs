//! The refresher against the in-memory store, on tokio's paused clock.
//! Here the rigs every test shares (a refresher, commits marked as the
//! flusher marks them, one round's read and write by hand); one file per
//! behaviour: `round.rs` (what a cycle writes, when it defers, what a lost
//! race, a lost answer and a failing store leave), `decide.rs` (the pure
//! decision table), `lag.rs` (the rollup lag a refresh records),
//! `milestones.rs` (milestones recorded by rollup
//! writes), `recovery.rs` (what a killed process leaves: the sweep, due
//! records cleared and taken over).

mod decide;
mod lag;
mod milestones;
mod recovery;
mod round;

use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use super::{Marks, PlannedWrite, Refresher, RollupConfig};
use crate::event::{LikeEvent, LikeKind, Version};
use crate::model::batch::Batch;
use crate::store::memory::MemoryStore;
use crate::store::rollup::{RollupKey, RollupStore, RollupWrite, WriteOutcome};
use crate::store::{Attempt, CounterStore, StoreError};
use crate::telemetry::Stats;

const INTERVAL: Duration = Duration::from_secs(1);

fn refresher(store: &Arc<MemoryStore>) -> Refresher<MemoryStore> {
    let config = RollupConfig {
        sweep_lookback: None,
        ..RollupConfig::new(INTERVAL, 16)
    };
    Refresher::new(store.clone(), config, Arc::new(Stats::default()))
}

/// A valid event of `user` on `post`.
fn event(kind: LikeKind, post: &str, user: &str, seq: i64, event_id: String) -> LikeEvent {
    let version = Version {
        seq,
        occurred_at_micros: 0,
        event_id,
    };
    LikeEvent::new(kind, post, user, &version, None).expect("a valid event")
}

/// Commits `events` as one batch and marks its posts in each of `marks`,
/// as the flusher does.
async fn commit_events(store: &MemoryStore, marks: &[&Marks], events: Vec<LikeEvent>) {
    let report = store
        .commit(&Batch::new(events, Vec::new()), &Attempt::first())
        .await
        .expect("commit");
    for marks in marks {
        marks.mark(
            &report.changed,
            report.committed_at,
            report.due_record.clone(),
            Instant::now(),
        );
    }
}

/// Commits `likes` first likes of `post` (users `{tag}-{n}`) and marks the
/// post in `marks`, as the flusher does.
async fn commit(store: &MemoryStore, marks: &[&Marks], post: &str, likes: usize, tag: &str) {
    let events = (0..likes)
        .map(|n| {
            let user = format!("{tag}-{n}");
            event(LikeKind::Added, post, &user, 1, user.clone())
        })
        .collect();
    commit_events(store, marks, events).await;
}

fn count(store: &MemoryStore, post: &str) -> i64 {
    store.counts().get(post).copied().unwrap_or(0)
}

/// The first half of one round, by hand: reads `post` (over one counter
/// shard) for the marks `r` has due, and returns the writes it calls for.
async fn plan(r: &Refresher<MemoryStore>, store: &MemoryStore, post: &str) -> Vec<PlannedWrite> {
    let due = r.marks().take_due(Instant::now(), false, 10);
    let keys = [RollupKey {
        post_id: post,
        shards: 1,
    }];
    let read = store.read_rollups(&keys).await;
    r.after_read(&due, read, true).expect("read")
}

/// The second half of one round, by hand: writes `planned`.
async fn write(
    store: &MemoryStore,
    planned: &[PlannedWrite],
) -> Result<Vec<WriteOutcome>, StoreError> {
    let writes: Vec<RollupWrite<'_>> = planned.iter().map(PlannedWrite::write).collect();
    store.write_rollups(&writes).await
}
