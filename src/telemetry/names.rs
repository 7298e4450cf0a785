//! What dashboards and alerts see: every metric's exported name and HELP
//! text, and the bucket boundaries of the histograms.
//!
//! Invariant: each name and each HELP text is written here once; the
//! registry ([`super::Stats`]) and the scrape-time collector take them from
//! here, and `tests/dashboards.rs` checks the dashboards against what is
//! exported. Changing a name or a boundary changes what dashboards query.

/// A metric's exported name and its HELP text.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Metric {
    /// The name as exported (a counter's with its `_total`).
    pub name: &'static str,
    /// The HELP text: one sentence, ending with a period.
    pub help: &'static str,
}

impl Metric {
    /// The name without the `_total` a counter's samples carry (the name
    /// `prometheus-client` registers; it adds the suffix when encoding).
    pub fn family(&self) -> &'static str {
        self.name.strip_suffix("_total").unwrap_or(self.name)
    }

    /// The HELP text without its final period (which the registry adds).
    pub(super) fn registry_help(&self) -> &'static str {
        self.help.strip_suffix('.').unwrap_or(self.help)
    }
}

/// Declares each metric once: a constant whose doc is its HELP text, and
/// [`ALL`].
macro_rules! metrics {
    ($($id:ident = $name:literal, $help:literal;)+) => {
        $(
            #[doc = concat!("`", $name, "`: ", $help)]
            pub const $id: Metric = Metric { name: $name, help: $help };
        )+
        /// Every metric hotcount exports.
        pub const ALL: &[Metric] = &[$($id),+];
    };
}

metrics! {
    EVENTS_RECEIVED = "hotcount_events_received_total",
        "Messages received from Pub/Sub.";
    EVENTS_APPLIED = "hotcount_events_applied_total",
        "Events that changed a membership.";
    EVENTS_DUPLICATE = "hotcount_events_duplicate_total",
        "Events already applied (same event id as the stored state).";
    EVENTS_STALE = "hotcount_events_stale_total",
        "Events older than the stored state.";
    EVENTS_POISON = "hotcount_events_poison_total",
        "Messages quarantined as poison.";
    EVENTS_ISOLATED = "hotcount_events_isolated_total",
        "Valid events the store refused, isolated and quarantined.";
    EVENTS_ERASED_USER = "hotcount_events_erased_user_total",
        "Events of erased users (a tombstone holds their keyed hash), dropped and acked.";
    QUARANTINE_REFUSED = "hotcount_quarantine_refused_total",
        "Quarantine records the store refused; each message was nacked for the dead-letter policy.";
    BATCHES_COMMITTED = "hotcount_batches_committed_total",
        "Batches committed (including ones found already committed).";
    BATCHES_FAILED = "hotcount_batches_failed_total",
        "Batches given up on (nacked).";
    COMMIT_RETRIES = "hotcount_commit_retries_total",
        "Commit attempts that failed and were retried.";
    COMMITS = "hotcount_commits_total",
        "Commit attempts by outcome (committed, already_committed, retry, failed).";
    CONTENTION_SPLITS = "hotcount_contention_splits_total",
        "Batches split after repeated contention (ABORTED), so the part off the contended documents commits.";
    ACKS = "hotcount_acks_total",
        "Acks sent.";
    NACKS = "hotcount_nacks_total",
        "Nacks sent.";
    ACK_FAILURES = "hotcount_ack_failures_total",
        "Acks whose confirmation failed (exactly-once subscriptions).";
    STORE_RPCS = "hotcount_store_rpcs_total",
        "Store round trips.";
    KNOWN_COMMITS = "hotcount_known_commits_total",
        "Batches committed without a transaction from known memberships (Firestore: one round trip; two when memberships seen but forgotten were read first).";
    KNOWN_REFUSALS = "hotcount_known_refusals_total",
        "Commits from known memberships refused on a precondition (a membership changed elsewhere, or one assumed absent exists); the batch was then read in its transaction.";
    COUNTER_INCREMENTS = "hotcount_counter_increments_total",
        "Counter shard increments written.";
    MARKERS_DELETED = "hotcount_batch_markers_deleted_total",
        "Expired batch markers deleted by the periodic cleanup (PostgreSQL store).";
    LOG_LINES_SUPPRESSED = "hotcount_log_lines_suppressed_total",
        "Warnings not printed one by one because their kind passed its rate limit (each is in a summary line).";
    STREAM_RECONNECTS = "hotcount_stream_reconnects_total",
        "StreamingPull streams re-opened after an error.";
    MESSAGES_IN_FLIGHT = "hotcount_messages_in_flight",
        "Messages held (received, not yet acked or nacked).";
    MESSAGES_IN_FLIGHT_MAX = "hotcount_messages_in_flight_max",
        "Highest number of messages held at once since start.";
    BYTES_IN_FLIGHT = "hotcount_bytes_in_flight",
        "Payload bytes held.";
    BUFFERED_EVENTS = "hotcount_buffered_events",
        "Messages buffered in each aggregator shard.";
    READY = "hotcount_ready",
        "1 once the store and subscriber are built and the source runs, while commits are not stalled.";
    DEAD_LETTER_POLICY = "hotcount_dead_letter_policy",
        "1 when the subscription has a dead-letter policy (read at start).";
    COMMIT_DURATION = "hotcount_commit_duration_seconds",
        "Duration of a batch commit, retries included, in seconds.";
    PUBLISH_TO_COMMIT = "hotcount_publish_to_commit_seconds",
        "Time from publish to the commit of the message's batch, in seconds.";
    BATCH_SIZE = "hotcount_batch_size_messages",
        "Messages per batch.";
    ROLLUP_REFRESHES = "hotcount_rollup_refreshes_total",
        "Rollups written (a post's count refreshed from its counter shards).";
    ROLLUP_SKIPPED = "hotcount_rollup_skipped_total",
        "Rollup writes not applied because another refresher wrote the rollup since it was read (read again).";
    ROLLUP_DEFERRED = "hotcount_rollup_deferred_total",
        "Rollup refreshes put off because the stored rollup was younger than the interval (another replica refreshed it).";
    ROLLUP_FAILURES = "hotcount_rollup_failures_total",
        "Rollup refreshes (per post) and sweeps that failed in the store; the posts stay marked and are tried again.";
    ROLLUP_RPCS = "hotcount_rollup_rpcs_total",
        "Store round trips of the rollup refresher (reads, writes, sweeps).";
    ROLLUP_SWEPT = "hotcount_rollup_swept_total",
        "Recently changed posts the start-up sweep marked for a rollup check.";
    ROLLUP_TAKEN_OVER = "hotcount_rollup_records_taken_over_total",
        "Rollup due records this process took over from a replica that did not clear them in time (killed, or stuck).";
    ROLLUP_CLEARED = "hotcount_rollup_records_cleared_total",
        "Rollup due records cleared: every post they list has a rollup showing their batch.";
    ROLLUP_PENDING = "hotcount_rollup_pending_posts",
        "Posts this process changed whose rollup waits for a refresh.";
    ROLLUP_LAG = "hotcount_rollup_lag_seconds",
        "Time from a post's first change not in its rollup to the rollup showing it, in seconds.";
    DATA_FORMAT = "hotcount_data_format",
        "The store's data format as this replica read it at start (1: no format record, as builds before 0.2.0 leave the store; `hotcount setup --data-format N` raises it).";
    COMMITS_STALLED = "hotcount_commits_stalled",
        "1 while batches are being committed and none has committed for --stuck-commit-threshold-secs (the replica reports not ready).";
    STAGE_STALLED = "hotcount_stage_stalled",
        "1 while a stage beside the pipeline (stage=rollups: the refresher; stage=milestones: the dispatcher) has had no store call answered for --stuck-commit-threshold-secs while it had work (the replica reports not ready).";
    STORE_CALL_TIMEOUTS = "hotcount_store_call_timeouts_total",
        "Commit attempts abandoned because the store did not answer within --store-call-timeout-ms.";
    MILESTONES_RECORDED = "hotcount_milestones_recorded_total",
        "Milestones a written rollup reached first (each record created with the rollup, if absent).";
    MILESTONES_DELIVERED = "hotcount_milestones_delivered_total",
        "Milestone webhooks the receiver accepted (2xx).";
    MILESTONE_ATTEMPTS_FAILED = "hotcount_milestone_attempts_failed_total",
        "Milestone webhook attempts that failed and are retried (5xx, 408, 429, timeouts, connection errors).";
    MILESTONES_DEAD = "hotcount_milestones_dead_total",
        "Milestones given up: the webhook refused them (a 4xx other than 408 and 429).";
    MILESTONE_LEASES_LOST = "hotcount_milestone_leases_lost_total",
        "Milestone attempts whose lease another dispatcher took over before they settled.";
    PUSH_REQUESTS = "hotcount_push_requests_total",
        "Push requests answered, by outcome (acked 204; nacked, timed_out, closed, unread, keys_unavailable 503; over_capacity 429; unauthenticated 401; forbidden 403).";
    PUSH_AUTH_FAILURES = "hotcount_push_auth_failures_total",
        "Push requests refused by authentication, by reason (missing, malformed, unknown_key, signature, expired, issuer, audience, email).";
    PUSH_JWKS_FETCHES = "hotcount_push_jwks_fetches_total",
        "Fetches of the push token signing keys (--push-jwks-url), by outcome (ok, failed).";
    PUSH_HOLD = "hotcount_push_hold_seconds",
        "Time from a push request's arrival to its answer, for the requests that entered the pipeline, in seconds.";
    PUSH_CONNECTIONS = "hotcount_push_connections",
        "Connections open on the push endpoint's own listener (at most --push-max-connections).";
    PUSH_CONNECTIONS_CLOSED = "hotcount_push_connections_closed_total",
        "Push endpoint connections the endpoint closed before their client did, by reason (header_timeout: no whole request headers within --push-header-read-timeout-ms, idle ones included; evicted: idle or still sending headers, closed for a new one at --push-max-connections; refused: a new one at --push-max-connections while every other was in a request).";
}

/// Upper bounds of [`COMMIT_DURATION`]'s buckets, in seconds.
///
/// A quantile is interpolated inside one bucket, so a bucket's width bounds
/// its error; the steps are finest (at most 1.5x) where commits usually
/// land: emulator commits take 1-10 ms, Firestore commits in the region
/// 20-300 ms. The tail comes from retries (backoff from 20 ms doubling to
/// 2 s) and is bounded by the shutdown deadline (8 s): above 10 s is `+Inf`.
pub const COMMIT_DURATION_BUCKETS: [f64; 18] = [
    0.001, 0.002, 0.005, 0.01, 0.02, 0.03, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.5, 0.75, 1.0, 2.0,
    5.0, 10.0,
];

/// Upper bounds of [`PUBLISH_TO_COMMIT`]'s buckets, in seconds.
///
/// In steady state an event waits for its flush (`--flush-interval-ms`,
/// 100 ms by default) and one commit: 0.1-0.5 s, where the steps are
/// finest. Draining a backlog shows the backlog's age, seconds to an hour,
/// in coarse steps; beyond an hour is `+Inf` (Pub/Sub's
/// `oldest_unacked_message_age` alert covers that range).
pub const PUBLISH_TO_COMMIT_BUCKETS: [f64; 21] = [
    0.005, 0.01, 0.025, 0.05, 0.1, 0.15, 0.2, 0.3, 0.5, 0.75, 1.0, 2.0, 5.0, 10.0, 30.0, 60.0,
    120.0, 300.0, 600.0, 1800.0, 3600.0,
];

/// Upper bounds of [`PUSH_HOLD`]'s buckets, in seconds.
///
/// A request waits for its batch: the flush wait (5-100 ms) and one
/// commit (1-10 ms on the emulators, 20-300 ms on Firestore), so the
/// steps are finest from 5 ms to 1 s, where Pub/Sub's push window decides
/// to grow (more than 99 % acked with an average under 1 s). The tail is
/// retries and the hold cap (below the subscription's ack deadline,
/// 10..=600 s).
pub const PUSH_HOLD_BUCKETS: [f64; 18] = [
    0.005, 0.01, 0.02, 0.03, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.5, 0.75, 1.0, 2.0, 5.0, 10.0,
    60.0, 600.0,
];

/// Upper bounds of [`BATCH_SIZE`]'s buckets, in messages.
///
/// Roughly 1-2-5 steps from a lone message up to `--max-batch-events`'
/// default (1000, a bucket bound, so full batches are counted exactly
/// there) and its largest allowed value (10 000).
pub const BATCH_SIZE_BUCKETS: [f64; 15] = [
    1.0, 2.0, 5.0, 10.0, 20.0, 50.0, 100.0, 200.0, 300.0, 500.0, 750.0, 1000.0, 2000.0, 5000.0,
    10000.0,
];

/// Upper bounds of [`ROLLUP_LAG`]'s buckets, in seconds.
///
/// A refresh waits for the next cycle (one `--rollup-interval-ms`, 1 s by
/// default) and, for a post another replica refreshed, until that rollup
/// is one interval old: 0.1-2.5 s in steady state, where the steps are
/// finest; a failing store stretches it to the backoff (up to a minute).
pub const ROLLUP_LAG_BUCKETS: [f64; 15] = [
    0.05, 0.1, 0.25, 0.5, 0.75, 1.0, 1.25, 1.5, 2.0, 2.5, 3.0, 5.0, 10.0, 30.0, 60.0,
];
