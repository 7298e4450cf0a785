//! What the Pub/Sub source takes from a [`Config`] ([`SourceConfig`]).
//!
//! Invariant: the caps on what is held equal the server-side flow control
//! totals, `streams` times each stream's.

use std::time::Duration;

use super::Config;

/// Source settings.
#[derive(Clone, Debug)]
pub struct SourceConfig {
    /// Full subscription name.
    pub subscription: String,
    /// StreamingPull streams.
    pub streams: usize,
    /// Flow control per stream: messages.
    pub max_outstanding_messages: i64,
    /// Flow control per stream: bytes.
    pub max_outstanding_bytes: i64,
    /// Lease extension per modack.
    pub lease_extension: Duration,
    /// Messages held at most (received, not yet acked or nacked), all
    /// streams together; at most `streams * max_outstanding_messages`.
    pub held_max_messages: u64,
    /// Payload bytes held at most, all streams together.
    pub held_max_bytes: u64,
}

impl SourceConfig {
    /// The held caps equal to the server-side totals: `streams` times
    /// each stream's flow control.
    pub fn held_caps(streams: usize, max_messages: i64, max_bytes: i64) -> (u64, u64) {
        let streams = streams.max(1) as u64;
        let total = |per: i64| u64::try_from(per).unwrap_or(0).saturating_mul(streams);
        (total(max_messages), total(max_bytes))
    }
}

impl Config {
    /// The source's settings, with held caps equal to the server-side
    /// totals (held no more even when a reconnect opens a fresh budget).
    pub fn source(&self) -> SourceConfig {
        let (held_max_messages, held_max_bytes) = SourceConfig::held_caps(
            self.streams,
            self.max_outstanding_messages,
            self.max_outstanding_bytes,
        );
        SourceConfig {
            subscription: self.subscription.clone(),
            streams: self.streams,
            max_outstanding_messages: self.max_outstanding_messages,
            max_outstanding_bytes: self.max_outstanding_bytes,
            lease_extension: self.lease_extension,
            held_max_messages,
            held_max_bytes,
        }
    }
}
