//! A quarantine record: what is kept of a message that cannot be counted
//! (poison, or an event the store refused), built so the store accepts it.
//!
//! Invariant: whatever the message held, a [`PoisonRecord`] fits every
//! Firestore limit once stored: its attribute keys and values are kept as
//! *values* (never as field names, so no reserved `__.*__` name or field
//! path problem can reach the store), each truncated on a character
//! boundary; at most [`PoisonRecord::MAX_ATTRIBUTES`] of them; the payload
//! truncated to [`PoisonRecord::MAX_STORED_BYTES`] with its full length and
//! SHA-256 kept; the reason and message id bounded. The largest record is
//! about [`PoisonRecord::MAX_RECORD_BYTES`], far under the 1 MiB document
//! limit, and the stores key it by a safe id
//! (`crate::store::quarantine::record_id`).

use std::collections::BTreeMap;

use sha2::{Digest, Sha256};

/// A message to quarantine instead of counting, bounded in every part.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PoisonRecord {
    /// Pub/Sub message id, whole (the store keeps at most
    /// [`PoisonRecord::MAX_ID_BYTES`] of it in the record's fields;
    /// the stores hash a long one for the record's key).
    pub message_id: String,
    /// Why it is quarantined (at most [`PoisonRecord::MAX_REASON_BYTES`]).
    pub reason: String,
    /// The payload, truncated to [`PoisonRecord::MAX_STORED_BYTES`].
    pub data: Vec<u8>,
    /// The payload's full length.
    pub data_len: usize,
    /// SHA-256 of the full payload, lower-case hex.
    pub data_sha256: String,
    /// The first [`PoisonRecord::MAX_ATTRIBUTES`] attributes in key order,
    /// keys and values truncated.
    pub attributes: Vec<(String, String)>,
    /// How many attributes the message had.
    pub attribute_count: usize,
    /// Whether any attribute was dropped or truncated.
    pub attributes_truncated: bool,
    /// A short label of the reason ([`crate::event::Poison::kind`],
    /// [`PoisonRecord::STORE_REFUSED`]); keys the rate limit of the
    /// warnings about it. Not stored: a record read back has
    /// [`PoisonRecord::STORED`].
    pub kind: &'static str,
}

impl PoisonRecord {
    /// How much of a payload is kept.
    pub const MAX_STORED_BYTES: usize = 16 * 1024;
    /// Attributes kept (Pub/Sub allows 100 per message).
    pub const MAX_ATTRIBUTES: usize = 100;
    /// Bytes kept of an attribute key (Pub/Sub allows 256).
    pub const MAX_ATTRIBUTE_KEY_BYTES: usize = 256;
    /// Bytes kept of an attribute value (Pub/Sub allows 1,024).
    pub const MAX_ATTRIBUTE_VALUE_BYTES: usize = 1024;
    /// Bytes kept of the reason.
    pub const MAX_REASON_BYTES: usize = 1024;
    /// Bytes of the message id kept in the record's fields and used as
    /// its document id as is.
    pub const MAX_ID_BYTES: usize = 256;
    /// An upper bound of a stored record's size, fields and names included.
    pub const MAX_RECORD_BYTES: usize = Self::MAX_STORED_BYTES
        + Self::MAX_ATTRIBUTES
            * (Self::MAX_ATTRIBUTE_KEY_BYTES + Self::MAX_ATTRIBUTE_VALUE_BYTES + 32)
        + Self::MAX_REASON_BYTES
        + 2 * Self::MAX_ID_BYTES
        + 1024;

    /// The kind of a record built without one ([`PoisonRecord::of_kind`]).
    pub const UNSPECIFIED: &'static str = "unspecified";
    /// The kind of a valid event the store refused.
    pub const STORE_REFUSED: &'static str = "store_refused";
    /// The kind of a record read back from the store.
    pub const STORED: &'static str = "stored";

    /// A record for `data` with `reason`, bounding every part.
    pub fn new(
        message_id: String,
        reason: String,
        data: &[u8],
        attributes: BTreeMap<String, String>,
    ) -> Self {
        let digest = Sha256::digest(data).into();
        Self::of_prefix(message_id, reason, data, data.len(), digest, attributes)
    }

    /// A record for a payload of `data_len` bytes whose SHA-256 is
    /// `data_sha256`, of which only `prefix` was kept (a payload too large
    /// to hold whole, digested as it streamed by).
    pub fn of_prefix(
        message_id: String,
        reason: String,
        prefix: &[u8],
        data_len: usize,
        data_sha256: [u8; 32],
        attributes: BTreeMap<String, String>,
    ) -> Self {
        let keep = prefix.len().min(Self::MAX_STORED_BYTES);
        let attribute_count = attributes.len();
        let mut truncated = attribute_count > Self::MAX_ATTRIBUTES;
        let attributes = attributes
            .into_iter()
            .take(Self::MAX_ATTRIBUTES)
            .map(|(key, value)| {
                let key = truncate(key, Self::MAX_ATTRIBUTE_KEY_BYTES, &mut truncated);
                let value = truncate(value, Self::MAX_ATTRIBUTE_VALUE_BYTES, &mut truncated);
                (key, value)
            })
            .collect();
        let mut ignored = false;
        Self {
            message_id,
            reason: truncate(reason, Self::MAX_REASON_BYTES, &mut ignored),
            data: prefix[..keep].to_vec(),
            data_len,
            data_sha256: hex(&data_sha256),
            attributes,
            attribute_count,
            attributes_truncated: truncated,
            kind: Self::UNSPECIFIED,
        }
    }

    /// The reason's kind, also for a record read back from the store
    /// (whose [`PoisonRecord::kind`] is [`PoisonRecord::STORED`]): a valid
    /// event the store refused, else the poison its stored payload parses
    /// to (a payload stored truncated: [`PoisonRecord::UNSPECIFIED`]).
    pub fn reason_kind(&self) -> &'static str {
        if self.kind != Self::STORED {
            return self.kind;
        }
        if self.message_id.starts_with("event-") {
            return Self::STORE_REFUSED;
        }
        if self.data_len > crate::event::MAX_PAYLOAD_BYTES {
            return "too_large";
        }
        if self.data.len() < self.data_len {
            return Self::UNSPECIFIED;
        }
        match crate::event::parse(&self.data) {
            Err(poison) => poison.kind(),
            Ok(_) => Self::UNSPECIFIED,
        }
    }

    /// The record with its reason's `kind`.
    pub fn of_kind(mut self, kind: &'static str) -> Self {
        self.kind = kind;
        self
    }

    /// The message id as the record's fields keep it (bounded).
    pub fn stored_message_id(&self) -> &str {
        prefix(&self.message_id, Self::MAX_ID_BYTES)
    }
}

/// `s` cut to at most `max` bytes on a character boundary; sets `cut` when
/// anything was removed.
fn truncate(mut s: String, max: usize, cut: &mut bool) -> String {
    let keep = prefix(&s, max).len();
    if keep < s.len() {
        s.truncate(keep);
        *cut = true;
    }
    s
}

/// The longest prefix of `s` of at most `max` bytes that ends on a
/// character boundary.
fn prefix(s: &str, max: usize) -> &str {
    let mut end = s.len().min(max);
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    &s[..end]
}

/// Lower-case hex of `bytes`.
pub fn hex(bytes: &[u8]) -> String {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let mut out = String::with_capacity(bytes.len() * 2);
    for b in bytes {
        out.push(char::from(DIGITS[usize::from(b >> 4)]));
        out.push(char::from(DIGITS[usize::from(b & 0xf)]));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hostile_attributes_are_bounded_and_kept_as_values() {
        let mut attributes = BTreeMap::new();
        attributes.insert("__name__".to_string(), "x".to_string());
        attributes.insert("a.b`c".to_string(), "é".repeat(2000));
        for i in 0..150 {
            attributes.insert(format!("k{i:03}{}", "k".repeat(400)), "v".into());
        }
        let record = PoisonRecord::new(
            "m".repeat(1000),
            "r".repeat(5000),
            &vec![7u8; 5 << 20],
            attributes,
        );
        assert_eq!(record.attribute_count, 152);
        assert_eq!(record.attributes.len(), PoisonRecord::MAX_ATTRIBUTES);
        assert!(record.attributes_truncated);
        assert!(record
            .attributes
            .iter()
            .all(|(k, v)| k.len() <= PoisonRecord::MAX_ATTRIBUTE_KEY_BYTES
                && v.len() <= PoisonRecord::MAX_ATTRIBUTE_VALUE_BYTES));
        assert_eq!(record.data.len(), PoisonRecord::MAX_STORED_BYTES);
        assert_eq!(record.data_len, 5 << 20);
        assert_eq!(record.data_sha256.len(), 64);
        assert_eq!(record.reason.len(), PoisonRecord::MAX_REASON_BYTES);
        assert_eq!(record.stored_message_id().len(), PoisonRecord::MAX_ID_BYTES);
    }

    #[test]
    fn digest_is_of_the_whole_payload() {
        let record = PoisonRecord::new("m".into(), "r".into(), b"abc", BTreeMap::new());
        assert_eq!(
            record.data_sha256,
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        );
    }
}
