//! The pull source: its flags ([`SourceFlags`]: streams, flow control,
//! lease extension), validated into the source's settings ([`SourceConfig`]).
//!
//! Invariant: the caps on what is held equal the server-side flow control
//! totals, `streams` times each stream's.

use std::time::Duration;

use super::{range, ConfigError};

/// `hotcount run`'s StreamingPull flags.
#[derive(clap::Args, Clone, Debug, PartialEq, serde::Serialize)]
#[command(next_help_heading = "Pull source")]
pub struct SourceFlags {
    /// Flow control: messages outstanding per stream (server-side).
    #[arg(
        long,
        env = "HOTCOUNT_MAX_OUTSTANDING_MESSAGES",
        default_value_t = 10_000
    )]
    pub max_outstanding_messages: i64,
    /// Flow control: bytes outstanding per stream (server-side).
    #[arg(long, env = "HOTCOUNT_MAX_OUTSTANDING_BYTES", default_value_t = 64 * 1024 * 1024)]
    pub max_outstanding_bytes: i64,
    /// StreamingPull streams.
    #[arg(long, env = "HOTCOUNT_STREAMS", default_value_t = 2)]
    pub streams: usize,
    /// Lease extension the client asks for while messages wait, in seconds (10..=600).
    #[arg(long, env = "HOTCOUNT_LEASE_EXTENSION_SECS", default_value_t = 60)]
    pub lease_extension_secs: u64,
}

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

impl SourceFlags {
    /// Checks the pull flags (with push delivery too) into the settings of
    /// a source pulling `subscription` (a full name), with held caps equal
    /// to the server-side totals (held no more even when a reconnect opens
    /// a fresh budget).
    pub fn validate(&self, subscription: &str) -> Result<SourceConfig, ConfigError> {
        let max_outstanding_messages = range(
            "max-outstanding-messages",
            self.max_outstanding_messages,
            1,
            10_000_000,
        )?;
        let max_outstanding_bytes = range(
            "max-outstanding-bytes",
            self.max_outstanding_bytes,
            1024,
            1 << 40,
        )?;
        let streams = range("streams", self.streams, 1, 64)?;
        let lease_extension = Duration::from_secs(range(
            "lease-extension-secs",
            self.lease_extension_secs,
            10,
            600,
        )?);
        let (held_max_messages, held_max_bytes) =
            SourceConfig::held_caps(streams, max_outstanding_messages, max_outstanding_bytes);
        Ok(SourceConfig {
            subscription: subscription.to_string(),
            streams,
            max_outstanding_messages,
            max_outstanding_bytes,
            lease_extension,
            held_max_messages,
            held_max_bytes,
        })
    }
}
