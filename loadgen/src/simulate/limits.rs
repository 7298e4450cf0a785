//! The Google Cloud limits a spike runs into, and what hotcount's own
//! design puts on each: the write rate Firestore has scaled a key range to
//! (the 500/50/5 ramp, [`WriteRamp`]), a hot post's counter documents, and
//! each StreamingPull stream. Firestore has no fixed writes-per-second
//! limit per database (the old 10,000/s guidance is gone) nor a
//! writes-per-commit limit; what bounds a sudden spike is how fast it
//! splits a key range that gets hotter, and the rate one document takes,
//! which depends on contention.
//!
//! Invariant: the figures here are Google's documented values or
//! hotcount's own settings, each named once; the functions are pure
//! arithmetic on them, so a table that cites them cites this file.

/// Firestore: the write rate the planner sizes one counter document for.
/// Google documents no fixed per-document rate any more: it depends on
/// the workload (contention between the writers of one document); one
/// sustained write per second is the conservative figure that keeps
/// contention negligible.
pub const FIRESTORE_DOC_WRITES_PER_SEC: f64 = 1.0;

/// Firestore's ramp-up rule ("500/50/5"): start a new key range at 500
/// operations per second and grow by 50 % every 5 minutes; the same holds
/// for a range that suddenly gets hotter than it was.
pub const FIRESTORE_RAMP_START_OPS_PER_SEC: f64 = 500.0;
/// Growth per step of the ramp-up rule.
pub const FIRESTORE_RAMP_GROWTH: f64 = 1.5;
/// Length of one step of the ramp-up rule, in seconds.
pub const FIRESTORE_RAMP_STEP_SECS: f64 = 300.0;

/// Pub/Sub: the throughput of one StreamingPull stream, in bytes per second (10 MB/s).
pub const PUBSUB_STREAM_BYTES_PER_SEC: f64 = 10_000_000.0;

/// hotcount: the largest `--counter-shards` it accepts (`src/config.rs`).
pub const HOTCOUNT_MAX_COUNTER_SHARDS: u32 = 1000;

/// How long the 500/50/5 rule takes to grow from `from_ops_per_sec` (a
/// rate the range already takes; 500 for a new one) to `to_ops_per_sec`,
/// in seconds (0 when it is there already).
pub fn firestore_ramp_secs(from_ops_per_sec: f64, to_ops_per_sec: f64) -> f64 {
    let from = from_ops_per_sec.max(FIRESTORE_RAMP_START_OPS_PER_SEC);
    if to_ops_per_sec <= from {
        return 0.0;
    }
    let steps = (to_ops_per_sec / from).ln() / FIRESTORE_RAMP_GROWTH.ln();
    steps.ceil() * FIRESTORE_RAMP_STEP_SECS
}

/// The write rate a Firestore key range is ready for, second by second,
/// by the 500/50/5 rule: at first the rate it already took (at least
/// 500/s); then 50 % more after each 5-minute step in which the writes
/// outran it (Firestore splits a range as its load grows; a range whose
/// load does not grow is not split further). Writes above it are what a
/// spike asks of Firestore faster than it scales: served with more
/// latency and contention while it catches up.
#[derive(Clone, Debug, PartialEq)]
pub struct WriteRamp {
    ready_for: f64,
    step_started: u32,
    outran: bool,
}

impl WriteRamp {
    /// A range warmed to `ops_per_sec` (at least the rule's 500).
    pub fn warm_at(ops_per_sec: f64) -> Self {
        Self {
            ready_for: ops_per_sec.max(FIRESTORE_RAMP_START_OPS_PER_SEC),
            step_started: 0,
            outran: false,
        }
    }

    /// The rate the range is ready for in second `t_secs` (called in
    /// order), given the `writes` it gets in that second.
    pub fn take(&mut self, t_secs: u32, writes: f64) -> f64 {
        if f64::from(t_secs - self.step_started.min(t_secs)) >= FIRESTORE_RAMP_STEP_SECS {
            if self.outran {
                self.ready_for *= FIRESTORE_RAMP_GROWTH;
            }
            self.step_started = t_secs;
            self.outran = false;
        }
        self.outran |= writes > self.ready_for;
        self.ready_for
    }
}

/// Counter shards of a post in use by one replica: hotcount's planner
/// sizes them by the increments per second *this process* writes to the
/// post, `ceil(rate / target)` up to `max_shards`; a target of 0 uses all.
pub fn shards_in_use(increments_per_sec: f64, max_shards: u32, target_writes_per_sec: u32) -> u32 {
    if target_writes_per_sec == 0 {
        return max_shards.max(1);
    }
    let wanted = (increments_per_sec / f64::from(target_writes_per_sec)).ceil();
    (wanted.max(1.0) as u32).min(max_shards.max(1))
}

/// Writes per second to the hottest counter document when `replicas`
/// replicas each write `per_replica_increments_per_sec` to one post: each
/// picks among the same first `shards_in_use` shards, so one document
/// takes the total over that many.
pub fn hottest_counter_doc_writes_per_sec(
    replicas: u32,
    per_replica_increments_per_sec: f64,
    max_shards: u32,
    target_writes_per_sec: u32,
) -> f64 {
    if replicas == 0 || per_replica_increments_per_sec <= 0.0 {
        return 0.0;
    }
    let shards = shards_in_use(
        per_replica_increments_per_sec,
        max_shards,
        target_writes_per_sec,
    );
    f64::from(replicas) * per_replica_increments_per_sec / f64::from(shards)
}

/// Counter shards a post needs so that no document takes more than
/// [`FIRESTORE_DOC_WRITES_PER_SEC`] at `increments_per_sec` in total.
pub fn counter_shards_needed(increments_per_sec: f64) -> u32 {
    (increments_per_sec / FIRESTORE_DOC_WRITES_PER_SEC)
        .ceil()
        .clamp(1.0, f64::from(u32::MAX)) as u32
}

/// Bytes per second each of a replica's `streams` carries at `events_per_sec`.
pub fn stream_bytes_per_sec(events_per_sec: f64, message_bytes: f64, streams: u32) -> f64 {
    events_per_sec * message_bytes / f64::from(streams.max(1))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_ramp_rule_takes_five_minutes_per_half_again() {
        assert_eq!(firestore_ramp_secs(0.0, 400.0), 0.0);
        assert_eq!(firestore_ramp_secs(0.0, 750.0), 300.0);
        // 200,000 / 500 = 400 = 1.5^14.8: 15 steps.
        assert_eq!(firestore_ramp_secs(0.0, 200_000.0), 15.0 * 300.0);
        // From a warm 2,000/s: 100 = 1.5^11.4, 12 steps.
        assert_eq!(firestore_ramp_secs(2_000.0, 200_000.0), 12.0 * 300.0);
    }

    #[test]
    fn a_range_grows_half_again_after_each_step_its_writes_outran_it() {
        let mut ramp = WriteRamp::warm_at(100.0);
        assert_eq!(ramp.take(0, 400.0), 500.0, "at least the rule's start");
        // Outrun in the first step: 750 from the second on, and so on.
        assert_eq!(ramp.take(1, 5_000.0), 500.0);
        assert_eq!(ramp.take(300, 5_000.0), 750.0);
        assert_eq!(ramp.take(600, 5_000.0), 1_125.0);
        // A step within what it is ready for: no growth after it.
        assert_eq!(ramp.take(900, 1_000.0), 1_687.5);
        assert_eq!(ramp.take(1_200, 1_000.0), 1_687.5);
        assert_eq!(ramp.take(1_500, 1_000.0), 1_687.5);
    }

    #[test]
    fn a_hot_document_takes_the_replica_count_times_the_target_once_shards_suffice() {
        // One replica writing 40 increments/s spreads over 40 shards: 1 each.
        assert_eq!(hottest_counter_doc_writes_per_sec(1, 40.0, 1000, 1), 1.0);
        // Ten replicas each size by their own rate, and share the same 40.
        assert_eq!(hottest_counter_doc_writes_per_sec(10, 40.0, 1000, 1), 10.0);
        // Capped at 16 shards (the default): 10 x 40 / 16.
        assert_eq!(hottest_counter_doc_writes_per_sec(10, 40.0, 16, 1), 25.0);
        // Target 0: every shard always in use.
        assert_eq!(hottest_counter_doc_writes_per_sec(10, 40.0, 400, 0), 1.0);
        assert_eq!(counter_shards_needed(400.0), 400);
    }

    #[test]
    fn streams_share_a_replicas_bytes() {
        assert_eq!(stream_bytes_per_sec(40_000.0, 200.0, 2), 4_000_000.0);
    }
}
