//! The like event schema (v1): parsing and validation of Pub/Sub payloads.
//!
//! Invariant: a [`LikeEvent`] only exists with ids that are safe as Firestore
//! document ids and a valid timestamp; everything else becomes a [`Poison`]
//! with a precise reason, and is never written anywhere but quarantine.
//!
//! This module holds the types ([`LikeEvent`], [`Version`], [`Poison`]) and
//! the entry points; the work is in its parts:
//! - `ids`: what makes an id safe ([`check_id`]), and the stable hash and
//!   digits document ids are built from;
//! - `fast`: the hand-written fast path for the common payload shape;
//! - `decode`: the general serde decoder, source of every poison reason;
//! - `time`: `occurredAt`'s range and parsers;
//! - `encode`: an event as its v1 JSON payload ([`to_json`]).

use std::cmp::Ordering;
use std::fmt;

mod decode;
mod encode;
mod fast;
mod ids;
mod time;

pub use decode::parse_general;
pub(crate) use decode::Key as BorrowedText;
pub use encode::to_json;
pub(crate) use ids::push_decimal;
pub use ids::{check_id, fnv1a64, user_hash, IdProblem};

use time::{MAX_MICROS, MIN_MICROS};

/// Largest payload parsed at all; larger ones are poison without being read.
pub const MAX_PAYLOAD_BYTES: usize = 64 * 1024;
/// Longest accepted post or user id, in bytes (Firestore allows 1500 per id;
/// membership ids combine both, so each is capped well below).
pub const MAX_ID_BYTES: usize = 512;
/// Longest accepted event id or producer name, in bytes.
pub const MAX_EVENT_ID_BYTES: usize = 256;
/// Longest piece of the payload quoted in a poison reason, in bytes (the
/// reason is stored and logged; the payload itself is kept, truncated, in
/// the quarantine record).
pub const MAX_REASON_DETAIL_BYTES: usize = 128;
/// What `producer` must be, in its poison reason.
const PRODUCER_EXPECTED: &str = "a string of at most 256 bytes";
/// The only schema version understood.
pub const SCHEMA_VERSION: u64 = 1;

/// What a like event does.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum LikeKind {
    /// `like.added`
    Added,
    /// `like.removed`
    Removed,
}

impl LikeKind {
    /// The wire name (`like.added` / `like.removed`).
    pub fn as_str(self) -> &'static str {
        match self {
            LikeKind::Added => "like.added",
            LikeKind::Removed => "like.removed",
        }
    }
}

/// Where an event stands in its (post, user) history: `seq` (0 when absent),
/// then `occurredAt`, then `eventId`. Total, so "newer" is always decidable;
/// the same event delivered twice has the same version and is never newer
/// than itself.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Version {
    /// Producer sequence per (post, user); 0 when the event carried none.
    pub seq: i64,
    /// `occurredAt`, microseconds since the Unix epoch.
    pub occurred_at_micros: i64,
    /// The producer's stable event id.
    pub event_id: String,
}

impl Ord for Version {
    fn cmp(&self, other: &Self) -> Ordering {
        (self.seq, self.occurred_at_micros, &self.event_id).cmp(&(
            other.seq,
            other.occurred_at_micros,
            &other.event_id,
        ))
    }
}

impl PartialOrd for Version {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

/// A valid like event.
///
/// Its four strings (post, user, event id, producer) share one allocation:
/// events are made once per message on the hot path, and moved through the
/// aggregator's buffers, so both the allocations and the size count.
#[derive(Clone, PartialEq, Eq)]
pub struct LikeEvent {
    /// Added or removed.
    pub kind: LikeKind,
    /// Producer sequence per (post, user); 0 when the event carried none.
    pub seq: i64,
    /// `occurredAt`, microseconds since the Unix epoch.
    pub occurred_at_micros: i64,
    ids: Ids,
}

/// The post id, user id, event id and producer of one event, back to back
/// in one string. Lengths fit `u16` because every field is capped far below
/// 64 KiB ([`MAX_ID_BYTES`], [`MAX_EVENT_ID_BYTES`]).
#[derive(Clone, PartialEq, Eq)]
struct Ids {
    text: Box<str>,
    /// Where the post id, the user id and the event id end in `text`; the
    /// producer is the rest.
    ends: [u16; 3],
    has_producer: bool,
}

impl LikeEvent {
    /// A valid event, or the poison reason a payload with these fields
    /// would get: ids must be safe ([`check_id`]), the event id and the
    /// producer at most [`MAX_EVENT_ID_BYTES`], `seq` non-negative and the
    /// time inside Firestore's range.
    pub fn new(
        kind: LikeKind,
        post_id: &str,
        user_id: &str,
        version: &Version,
        producer: Option<&str>,
    ) -> Result<Self, Poison> {
        let unsafe_id = |field| move |reason| Poison::UnsafeId { field, reason };
        check_id(&version.event_id, MAX_EVENT_ID_BYTES).map_err(unsafe_id("eventId"))?;
        check_id(post_id, MAX_ID_BYTES).map_err(unsafe_id("postId"))?;
        check_id(user_id, MAX_ID_BYTES).map_err(unsafe_id("userId"))?;
        if !(MIN_MICROS..=MAX_MICROS).contains(&version.occurred_at_micros) {
            return Err(Poison::BadTimestamp("out of range".into()));
        }
        if version.seq < 0 {
            return Err(Poison::BadSeq);
        }
        if producer.is_some_and(|p| p.len() > MAX_EVENT_ID_BYTES) {
            return Err(Poison::WrongType {
                field: "producer",
                expected: PRODUCER_EXPECTED,
            });
        }
        Self::checked(
            kind,
            [post_id, user_id, &version.event_id].map(str::as_bytes),
            version.seq,
            version.occurred_at_micros,
            producer.map(str::as_bytes),
        )
        .ok_or(Poison::NotUtf8)
    }

    /// An event from fields a decoder has already checked (see [`Self::new`]),
    /// given as bytes: the fast path never converts its slices to `str`, so
    /// the ids are validated as UTF-8 here, once, together. `None` when they
    /// are not UTF-8 (which the decoders have ruled out before).
    fn checked(
        kind: LikeKind,
        ids: [&[u8]; 3],
        seq: i64,
        occurred_at_micros: i64,
        producer: Option<&[u8]>,
    ) -> Option<Self> {
        let producer_bytes = producer.unwrap_or_default();
        let mut text =
            Vec::with_capacity(ids.iter().map(|id| id.len()).sum::<usize>() + producer_bytes.len());
        let mut ends = [0u16; 3];
        for (end, field) in ends.iter_mut().zip(ids) {
            text.extend_from_slice(field);
            // Checked fields are at most MAX_ID_BYTES each: no truncation.
            *end = text.len() as u16;
        }
        text.extend_from_slice(producer_bytes);
        let text = String::from_utf8(text).ok()?;
        Some(Self {
            kind,
            seq,
            occurred_at_micros,
            ids: Ids {
                text: text.into_boxed_str(),
                ends,
                has_producer: producer.is_some(),
            },
        })
    }

    fn field(&self, i: usize) -> &str {
        let start = match i {
            0 => 0,
            _ => usize::from(self.ids.ends[i - 1]),
        };
        let end = self
            .ids
            .ends
            .get(i)
            .map_or(self.ids.text.len(), |e| usize::from(*e));
        self.ids.text.get(start..end).unwrap_or_default()
    }

    /// The post liked (safe as a document id).
    pub fn post_id(&self) -> &str {
        self.field(0)
    }

    /// The user who liked (safe as a document id).
    pub fn user_id(&self) -> &str {
        self.field(1)
    }

    /// The producer's event id.
    pub fn event_id(&self) -> &str {
        self.field(2)
    }

    /// Producer name, if given.
    pub fn producer(&self) -> Option<&str> {
        self.ids.has_producer.then(|| self.field(3))
    }

    /// Where this event stands in its (post, user) history, as an owned
    /// value (what a membership stores).
    pub fn version(&self) -> Version {
        Version {
            seq: self.seq,
            occurred_at_micros: self.occurred_at_micros,
            event_id: self.event_id().to_owned(),
        }
    }

    /// [`Version`]'s order between this event and `stored`, without
    /// allocating.
    pub fn cmp_version(&self, stored: &Version) -> Ordering {
        (self.seq, self.occurred_at_micros, self.event_id()).cmp(&(
            stored.seq,
            stored.occurred_at_micros,
            stored.event_id.as_str(),
        ))
    }

    /// [`Version`]'s order between two events, without allocating.
    pub fn cmp_versions(&self, other: &LikeEvent) -> Ordering {
        (self.seq, self.occurred_at_micros, self.event_id()).cmp(&(
            other.seq,
            other.occurred_at_micros,
            other.event_id(),
        ))
    }
}

impl fmt::Debug for LikeEvent {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LikeEvent")
            .field("kind", &self.kind)
            .field("post_id", &self.post_id())
            .field("user_id", &self.user_id())
            .field("seq", &self.seq)
            .field("occurred_at_micros", &self.occurred_at_micros)
            .field("event_id", &self.event_id())
            .field("producer", &self.producer())
            .finish()
    }
}

/// Why a payload is poison. The `Display` text is the quarantine reason.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum Poison {
    /// The payload exceeds [`MAX_PAYLOAD_BYTES`].
    #[error("payload is {0} bytes, over the {MAX_PAYLOAD_BYTES}-byte limit")]
    TooLarge(usize),
    /// Not valid UTF-8.
    #[error("payload is not valid UTF-8")]
    NotUtf8,
    /// Not a JSON object (or not JSON at all).
    #[error("payload is not a JSON object: {0}")]
    NotJson(String),
    /// A key appears twice in the object.
    #[error("field `{0}` appears more than once")]
    DuplicateField(String),
    /// A required field is absent or null.
    #[error("missing field `{0}`")]
    MissingField(&'static str),
    /// A field has the wrong JSON type.
    #[error("field `{field}` must be {expected}")]
    WrongType {
        /// The field.
        field: &'static str,
        /// What was expected.
        expected: &'static str,
    },
    /// `type` is not a known event type.
    #[error("unknown event type \"{0}\"")]
    UnknownType(String),
    /// `version` is not supported.
    #[error("unsupported schema version {0}")]
    UnsupportedVersion(String),
    /// `occurredAt` is not an RFC 3339 timestamp in range.
    #[error("field `occurredAt` is not a valid RFC 3339 timestamp: {0}")]
    BadTimestamp(String),
    /// `seq` is negative or out of range.
    #[error("field `seq` must be an integer in 0..=9223372036854775807")]
    BadSeq,
    /// An id is not safe as a Firestore document id.
    #[error("field `{field}` is not a safe id: {reason}")]
    UnsafeId {
        /// The field.
        field: &'static str,
        /// Why.
        reason: IdProblem,
    },
}

impl Poison {
    /// A short, stable label of the reason (one per variant, and per id
    /// problem for unsafe ids): what rate-limited warnings are keyed by.
    /// Never carries the payload's content.
    pub fn kind(&self) -> &'static str {
        match self {
            Poison::TooLarge(_) => "too_large",
            Poison::NotUtf8 => "not_utf8",
            Poison::NotJson(_) => "not_json",
            Poison::DuplicateField(_) => "duplicate_field",
            Poison::MissingField(_) => "missing_field",
            Poison::WrongType { .. } => "wrong_type",
            Poison::UnknownType(_) => "unknown_type",
            Poison::UnsupportedVersion(_) => "unsupported_version",
            Poison::BadTimestamp(_) => "bad_timestamp",
            Poison::BadSeq => "bad_seq",
            Poison::UnsafeId { .. } => "unsafe_id",
        }
    }
}

/// Parses one Pub/Sub payload as a v1 like event.
///
/// Common payloads take a hand-written fast path; anything it is not sure
/// of goes through [`parse_general`], so the result is the same either way.
pub fn parse(data: &[u8]) -> Result<LikeEvent, Poison> {
    match fast::parse(data) {
        Some(event) => Ok(event),
        None => parse_general(data),
    }
}

/// The fast path alone: the event when the payload has the common shape,
/// `None` when it leaves the payload to [`parse_general`]. Public so that
/// tests can see how much of their input it takes.
pub fn parse_fast(data: &[u8]) -> Option<LikeEvent> {
    fast::parse(data)
}

#[cfg(test)]
mod tests;
