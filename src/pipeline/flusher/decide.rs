//! The flush rule: given what the free shards hold and how many commits
//! are in flight, flush now or wait until when, and into how many batches
//! a flush splits what it takes (see [`super`] for the rule in words).
//!
//! Invariant: pure (no clock read, no I/O): the same view, slots and time
//! give the same decision, so the rule is tested alone.

use tokio::time::Instant;

use super::FlushConfig;
use crate::pipeline::aggregator::FreeView;

/// What the flush loop does next.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Decision {
    /// Take a batch now.
    Flush,
    /// Wait for a wake-up, a commit to finish, or this deadline.
    WaitUntil(Option<Instant>),
}

/// The flush rule (see the module docs), pure so it can be tested alone.
pub fn decide(
    config: &FlushConfig,
    free: FreeView,
    in_flight: usize,
    stopping: bool,
    now: Instant,
) -> Decision {
    let Some(oldest) = free.oldest else {
        return Decision::WaitUntil(None);
    };
    if free.messages == 0 || in_flight >= config.max_commits_in_flight.max(1) {
        return Decision::WaitUntil(None);
    }
    let overdue = oldest + config.flush_interval;
    let eager = oldest + config.flush_min_wait.min(config.flush_interval);
    let filled = share_of_batch(config, free.batch_events, in_flight)
        .is_some_and(|share| free.messages >= share);
    if stopping || free.full || filled || overdue <= now || (in_flight == 0 && eager <= now) {
        return Decision::Flush;
    }
    Decision::WaitUntil(Some(if in_flight == 0 { eager } else { overdue }))
}

/// Rule (b)'s threshold: with `in_flight` of the commit slots busy, the
/// free messages that make a batch worth a slot, `(k/n)²` of a full one
/// (`None` with no commit in flight or every slot busy: (b) does not
/// apply). Squared: side by side at 22,000 events/s, k/n gave p99 119-127
/// ms and (k/n)² 94-110 ms, with the same backlog throughput
/// (docs/benchmarks-history.md).
pub fn share_of_batch(
    config: &FlushConfig,
    batch_events: usize,
    in_flight: usize,
) -> Option<usize> {
    let slots = config.max_commits_in_flight.max(1);
    if in_flight == 0 || in_flight >= slots {
        return None;
    }
    Some(
        batch_events
            .saturating_mul(in_flight * in_flight)
            .div_ceil(slots * slots),
    )
}

/// How many batches a flush takes at once, and how many messages each aims
/// at: as many as there are free commit slots, so a buffer smaller than
/// that many full batches (a push window held until its commit, a pull
/// stream at low load) still keeps every free slot busy instead of queueing
/// behind one commit; but never more than the shards holding messages (a
/// take empties a free shard whole) nor batches smaller than
/// `split_min_events`. With enough buffered, every batch is full, as
/// without the split. Pure, like [`decide`].
pub fn split(config: &FlushConfig, free: FreeView, in_flight: usize) -> (usize, usize) {
    let slots = config
        .max_commits_in_flight
        .max(1)
        .saturating_sub(in_flight)
        .max(1);
    let by_size = (free.messages / config.split_min_events.max(1)).max(1);
    let batches = slots.min(free.shards.max(1)).min(by_size);
    let each = free
        .messages
        .div_ceil(batches)
        .clamp(1, free.batch_events.max(1));
    (batches, each)
}
