//! Encoding: a [`LikeEvent`] as its v1 JSON payload (the load generator's
//! messages, tests, and the payload kept in a quarantine record of an event
//! the store refused).
//!
//! Invariant: [`parse`](super::parse) of the output returns the same event.

use chrono::{DateTime, Utc};

use super::{LikeEvent, SCHEMA_VERSION};

/// Renders an event as its v1 JSON payload (used by the load generator and tests).
pub fn to_json(event: &LikeEvent) -> String {
    let occurred = DateTime::<Utc>::from_timestamp_micros(event.occurred_at_micros)
        .unwrap_or_default()
        .to_rfc3339_opts(chrono::SecondsFormat::Micros, true);
    let mut v = serde_json::json!({
        "version": SCHEMA_VERSION,
        "eventId": event.event_id(),
        "type": event.kind.as_str(),
        "postId": event.post_id(),
        "userId": event.user_id(),
        "occurredAt": occurred,
    });
    if event.seq != 0 {
        v["seq"] = event.seq.into();
    }
    if let Some(p) = event.producer() {
        v["producer"] = p.into();
    }
    v.to_string()
}
