//! The Google Cloud limits a spike runs into, and what hotcount's own
//! design puts on each: the database write rate, a hot post's counter
//! documents, and each StreamingPull stream.
//!
//! Invariant: the figures here are Google's documented values or
//! hotcount's own settings, each named once; the functions are pure
//! arithmetic on them, so a table that cites them cites this file.

/// Firestore: the sustained write rate one document should take (a soft
/// limit; past it, writes to that document contend and slow down).
pub const FIRESTORE_DOC_WRITES_PER_SEC: f64 = 1.0;

/// Firestore: writes per second per database that Google's guidance plans
/// for; the hard cap was lifted, but a database taking more is expected
/// to have ramped into it (see [`firestore_ramp_secs`]).
pub const FIRESTORE_DB_WRITES_PER_SEC: f64 = 10_000.0;

/// Firestore's ramp-up rule ("500/50/5"): start a new key range at 500
/// operations per second and grow by 50 % every 5 minutes.
pub const FIRESTORE_RAMP_START_OPS_PER_SEC: f64 = 500.0;
/// Growth per step of the ramp-up rule.
pub const FIRESTORE_RAMP_GROWTH: f64 = 1.5;
/// Length of one step of the ramp-up rule, in seconds.
pub const FIRESTORE_RAMP_STEP_SECS: f64 = 300.0;

/// Pub/Sub: the throughput of one StreamingPull stream, in bytes per second (10 MB/s).
pub const PUBSUB_STREAM_BYTES_PER_SEC: f64 = 10_000_000.0;

/// hotcount: the largest `--counter-shards` it accepts (`src/config.rs`).
pub const HOTCOUNT_MAX_COUNTER_SHARDS: u32 = 1000;

/// How long the 500/50/5 rule takes to reach `ops_per_sec`, in seconds
/// (0 at or below the starting rate).
pub fn firestore_ramp_secs(ops_per_sec: f64) -> f64 {
    if ops_per_sec <= FIRESTORE_RAMP_START_OPS_PER_SEC {
        return 0.0;
    }
    let steps = (ops_per_sec / FIRESTORE_RAMP_START_OPS_PER_SEC).ln() / FIRESTORE_RAMP_GROWTH.ln();
    steps.ceil() * FIRESTORE_RAMP_STEP_SECS
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
        assert_eq!(firestore_ramp_secs(400.0), 0.0);
        assert_eq!(firestore_ramp_secs(750.0), 300.0);
        // 200,000 / 500 = 400 = 1.5^14.8: 15 steps.
        assert_eq!(firestore_ramp_secs(200_000.0), 15.0 * 300.0);
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
