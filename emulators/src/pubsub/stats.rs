//! What the emulator records for tests: per-subscription counters, the ack
//! log and the messages not yet acknowledged.
//!
//! Invariant: these are copies taken under the state lock at one instant;
//! they never alias live state, so reading them cannot disturb delivery.

use std::collections::BTreeMap;

use serde::Serialize;

/// Counters of one subscription since it was created.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct SubscriptionStats {
    /// Messages that reached this subscription (publishes to its topic, Seek replays excluded).
    pub published: u64,
    /// Their size: data + attribute keys and values + ordering key, the
    /// part of Pub/Sub's billed message size that the publisher chooses
    /// (the service adds a timestamp and the message id to each, and bills
    /// at least 1,000 bytes per request).
    pub published_bytes: u64,
    /// Deliveries handed to a Pull, a StreamingPull or a push request (first deliveries and redeliveries).
    pub delivered: u64,
    /// Their size, counted as `published_bytes` is.
    pub delivered_bytes: u64,
    /// Deliveries of a message that had been delivered before.
    pub redeliveries: u64,
    /// Messages acknowledged (acks that took effect).
    pub acks: u64,
    /// Nacks (ModifyAckDeadline 0) that took effect.
    pub nacks: u64,
    /// Acknowledge calls: unary Acknowledge RPCs and StreamingPull
    /// requests carrying ack ids (each one call, however many ids).
    pub acknowledge_calls: u64,
    /// Well-formed ack ids those calls named (valid or not).
    pub acknowledge_ids: u64,
    /// ModifyAckDeadline calls: unary RPCs and StreamingPull requests
    /// carrying deadline changes (each one call, whatever its deadlines).
    pub modify_ack_deadline_calls: u64,
    /// Well-formed ack ids those calls named (valid or not; nacks included).
    pub modify_ack_deadline_ids: u64,
    /// Leases that ran out before an ack.
    pub expiries: u64,
    /// Messages forwarded to the dead-letter topic (and acked here).
    pub dead_lettered: u64,
    /// Messages dropped because they outlived the retention duration.
    pub retention_dropped: u64,
    /// Acks answered OK but dropped by an `ack_lost` fault.
    pub acks_lost: u64,
    /// Acked messages delivered again by a `spurious_redelivery` fault.
    pub spurious_redeliveries: u64,
    /// Oldest ack-log records dropped to respect `PubSubConfig::ack_log_capacity`.
    pub ack_log_dropped: u64,
    /// Messages not yet acknowledged (ready, leased or in backoff).
    pub unacked: u64,
    /// Of those, the ones leased to a consumer right now.
    pub outstanding: u64,
    /// StreamingPull streams open on this subscription right now.
    pub open_streams: u64,
    /// The most messages ever outstanding on one stream at once (flow-control check).
    pub max_stream_outstanding_messages: u64,
    /// Push requests answered (or failed) so far.
    pub push_requests: u64,
    /// Push requests by answer: the HTTP status (`"204"`, `"503"`...),
    /// `"timeout"` (no answer within the ack deadline), `"connection_error"`
    /// or `"fault"` (an injected `error` rule on `Push`).
    pub push_answers: BTreeMap<String, u64>,
    /// The push window now: how many push requests may be outstanding at once.
    pub push_window: u64,
}

/// One acknowledgement that took effect.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct AckRecord {
    /// The acknowledged message.
    pub message_id: String,
    /// When, in emulated seconds since the emulator started.
    pub ack_time_secs: f64,
    /// Which delivery of the message was acknowledged (1 = first).
    pub delivery_attempt: u32,
}

/// A message of a subscription that is not acknowledged yet.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct UnackedMessage {
    /// The message id.
    pub message_id: String,
    /// `ready` (waiting for a consumer), `blocked` (behind an earlier message
    /// of its ordering key), `leased` (outstanding) or `backoff`.
    pub state: &'static str,
    /// Deliveries so far.
    pub deliveries: u32,
    /// For leased messages: emulated seconds until the lease runs out.
    pub deadline_in_secs: Option<f64>,
}
