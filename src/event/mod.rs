//! The like event schema (v1): parsing and validation of Pub/Sub payloads.
//!
//! Invariant: a [`LikeEvent`] only exists with ids that are safe as Firestore
//! document ids and a valid timestamp; everything else becomes a [`Poison`]
//! with a precise reason, and is never written anywhere but quarantine.

use std::cmp::Ordering;
use std::fmt;

use chrono::{DateTime, Utc};
use serde::Deserialize;
use serde_json::Value;

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

/// Why an id cannot be used as (part of) a Firestore document id.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum IdProblem {
    /// Empty string.
    Empty,
    /// Longer than allowed.
    TooLong,
    /// Contains `/`.
    Slash,
    /// Is `.` or `..`.
    DotName,
    /// Matches `__.*__` (reserved by Firestore).
    Reserved,
    /// Contains a control character.
    ControlChar,
}

impl fmt::Display for IdProblem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            IdProblem::Empty => "empty",
            IdProblem::TooLong => "too long",
            IdProblem::Slash => "contains '/'",
            IdProblem::DotName => "is '.' or '..'",
            IdProblem::Reserved => "matches the reserved pattern __.*__",
            IdProblem::ControlChar => "contains a control character",
        })
    }
}

/// Checks that `id` is usable as a Firestore document id of at most `max_bytes`.
pub fn check_id(id: &str, max_bytes: usize) -> Result<(), IdProblem> {
    check_scanned_id(id.as_bytes(), max_bytes, || IdBytes::of(id))
}

/// What one pass over an id's bytes found, for the rules of [`check_id`]
/// (the fast path gathers it while scanning the string).
#[derive(Clone, Copy, Debug, Default)]
struct IdBytes {
    slash: bool,
    /// A C0 control or DEL.
    control: bool,
    non_ascii: bool,
}

impl IdBytes {
    fn of(id: &str) -> Self {
        let mut found = Self::default();
        for &b in id.as_bytes() {
            found.add(b);
        }
        found
    }

    #[inline(always)]
    fn add(&mut self, b: u8) {
        match b {
            b'/' => self.slash = true,
            0..=0x1f | 0x7f => self.control = true,
            0x80.. => self.non_ascii = true,
            _ => {}
        }
    }
}

/// [`check_id`]'s rules, in the order its problems are reported, with the
/// byte scan of `id` (`scan`) done only once the length is known to be
/// acceptable.
fn check_scanned_id(
    id: &[u8],
    max_bytes: usize,
    scan: impl FnOnce() -> IdBytes,
) -> Result<(), IdProblem> {
    if id.is_empty() {
        return Err(IdProblem::Empty);
    }
    if id.len() > max_bytes {
        return Err(IdProblem::TooLong);
    }
    let bytes = scan();
    if bytes.slash {
        return Err(IdProblem::Slash);
    }
    if id == b"." || id == b".." {
        return Err(IdProblem::DotName);
    }
    if id.len() >= 4 && id.starts_with(b"__") && id.ends_with(b"__") {
        return Err(IdProblem::Reserved);
    }
    // Outside ASCII, every char: this also catches the C1 controls
    // U+0080..=U+009F. `id` is UTF-8 here (a `str`'s bytes, or a string the
    // fast path has validated), so the lossy view borrows and replaces nothing.
    let non_ascii_control = || String::from_utf8_lossy(id).chars().any(char::is_control);
    if bytes.control || (bytes.non_ascii && non_ascii_control()) {
        return Err(IdProblem::ControlChar);
    }
    Ok(())
}

mod fast;

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

/// The general decoder (serde_json, every poison reason); [`parse`] returns
/// what this returns for any input, faster for the common shape. Public so
/// that fuzzers and benchmarks can hold the two side by side.
pub fn parse_general(data: &[u8]) -> Result<LikeEvent, Poison> {
    if data.len() > MAX_PAYLOAD_BYTES {
        return Err(Poison::TooLarge(data.len()));
    }
    let text = std::str::from_utf8(data).map_err(|_| Poison::NotUtf8)?;
    let raw: Raw<'_> = serde_json::from_str(text).map_err(|e| match duplicate_field(&e) {
        Some(field) => Poison::DuplicateField(detail(&field)),
        None => Poison::NotJson(truncate(&e.to_string(), MAX_REASON_DETAIL_BYTES)),
    })?;
    raw.validate()
}

const DUPLICATE_MARKER: &str = "duplicate field ";

fn duplicate_field(e: &serde_json::Error) -> Option<String> {
    let msg = e.to_string();
    let rest = msg.strip_prefix(DUPLICATE_MARKER)?;
    let end = rest.find(" at line").unwrap_or(rest.len());
    Some(rest[..end].trim_matches('`').to_string())
}

/// A key or string value, borrowed from the payload unless it had escapes.
type Text<'a> = std::borrow::Cow<'a, str>;

/// One string field as found: absent, `null`, a string, or anything else
/// (the wrong type; its value is consumed and dropped).
#[derive(Debug, Default)]
enum StrField<'a> {
    #[default]
    Absent,
    Null,
    Str(Text<'a>),
    Other,
}

/// The top-level object of a payload, typed and borrowing: the five string
/// fields as found, the rare fields as JSON values, unknown fields skipped.
/// Keys must be unique (serde_json would keep the last duplicate silently;
/// an event with two `postId`s is ambiguous, so poison). Validation happens
/// after the whole object is read, so a syntax error anywhere is `NotJson`
/// and a duplicate key is `DuplicateField`, whatever the fields hold.
#[derive(Debug, Default)]
struct Raw<'a> {
    kind: StrField<'a>,
    event_id: StrField<'a>,
    post_id: StrField<'a>,
    user_id: StrField<'a>,
    occurred_at: StrField<'a>,
    version: Option<Value>,
    seq: Option<Value>,
    producer: Option<Value>,
}

impl<'de> Deserialize<'de> for Raw<'de> {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_map(RawVisitor)
    }
}

struct RawVisitor;

impl<'de> serde::de::Visitor<'de> for RawVisitor {
    type Value = Raw<'de>;
    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a JSON object")
    }
    fn visit_map<A: serde::de::MapAccess<'de>>(self, mut access: A) -> Result<Raw<'de>, A::Error> {
        let mut raw = Raw::default();
        // Known fields seen, as bits; unknown keys seen (rare), for duplicates.
        let mut seen = 0u8;
        let mut unknown: Vec<Text<'de>> = Vec::new();
        while let Some(Key(key)) = access.next_key::<Key<'de>>()? {
            let bit = match key.as_ref() {
                "type" => Some((0, access.next_value::<StrValue<'de>>()?.0, &mut raw.kind)),
                "eventId" => Some((
                    1,
                    access.next_value::<StrValue<'de>>()?.0,
                    &mut raw.event_id,
                )),
                "postId" => Some((2, access.next_value::<StrValue<'de>>()?.0, &mut raw.post_id)),
                "userId" => Some((3, access.next_value::<StrValue<'de>>()?.0, &mut raw.user_id)),
                "occurredAt" => Some((
                    4,
                    access.next_value::<StrValue<'de>>()?.0,
                    &mut raw.occurred_at,
                )),
                _ => None,
            };
            let duplicate = match bit {
                Some((bit, value, slot)) => {
                    *slot = value;
                    mark(&mut seen, bit)
                }
                None => {
                    let (bit, slot) = match key.as_ref() {
                        "version" => (5, Some(&mut raw.version)),
                        "seq" => (6, Some(&mut raw.seq)),
                        "producer" => (7, Some(&mut raw.producer)),
                        _ => (8, None),
                    };
                    match slot {
                        Some(slot) => {
                            *slot = Some(access.next_value::<Value>()?);
                            mark(&mut seen, bit)
                        }
                        None => {
                            access.next_value::<Skip>()?;
                            let again = unknown.contains(&key);
                            if !again {
                                unknown.push(key.clone());
                            }
                            again
                        }
                    }
                }
            };
            if duplicate {
                return Err(serde::de::Error::custom(format!(
                    "{DUPLICATE_MARKER}`{key}`"
                )));
            }
        }
        Ok(raw)
    }
}

/// Any JSON value, read and dropped. Unlike `serde::de::IgnoredAny` (which
/// serde_json skips without a depth limit), it goes through
/// `deserialize_any`, so nesting deeper than serde_json's recursion limit
/// (128) is `NotJson`, as for the fields that are read.
struct Skip;

impl<'de> Deserialize<'de> for Skip {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct Visitor;
        impl<'de> serde::de::Visitor<'de> for Visitor {
            type Value = Skip;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("any JSON value")
            }
            fn visit_bool<E>(self, _: bool) -> Result<Skip, E> {
                Ok(Skip)
            }
            fn visit_i64<E>(self, _: i64) -> Result<Skip, E> {
                Ok(Skip)
            }
            fn visit_u64<E>(self, _: u64) -> Result<Skip, E> {
                Ok(Skip)
            }
            fn visit_f64<E>(self, _: f64) -> Result<Skip, E> {
                Ok(Skip)
            }
            fn visit_str<E>(self, _: &str) -> Result<Skip, E> {
                Ok(Skip)
            }
            fn visit_unit<E>(self) -> Result<Skip, E> {
                Ok(Skip)
            }
            fn visit_none<E>(self) -> Result<Skip, E> {
                Ok(Skip)
            }
            fn visit_seq<A: serde::de::SeqAccess<'de>>(self, mut seq: A) -> Result<Skip, A::Error> {
                while seq.next_element::<Skip>()?.is_some() {}
                Ok(Skip)
            }
            fn visit_map<A: serde::de::MapAccess<'de>>(self, mut map: A) -> Result<Skip, A::Error> {
                while map.next_entry::<Skip, Skip>()?.is_some() {}
                Ok(Skip)
            }
        }
        d.deserialize_any(Visitor)
    }
}

/// Sets `bit` in `seen`; true when it was set already (a duplicate key).
fn mark(seen: &mut u8, bit: u32) -> bool {
    let was = *seen & (1 << bit) != 0;
    *seen |= 1 << bit;
    was
}

/// An object key, borrowed when it has no escapes.
struct Key<'a>(Text<'a>);

impl<'de> Deserialize<'de> for Key<'de> {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct Visitor;
        impl<'de> serde::de::Visitor<'de> for Visitor {
            type Value = Key<'de>;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a key")
            }
            fn visit_borrowed_str<E>(self, v: &'de str) -> Result<Key<'de>, E> {
                Ok(Key(Text::Borrowed(v)))
            }
            fn visit_str<E>(self, v: &str) -> Result<Key<'de>, E> {
                Ok(Key(Text::Owned(v.to_string())))
            }
            fn visit_string<E>(self, v: String) -> Result<Key<'de>, E> {
                Ok(Key(Text::Owned(v)))
            }
        }
        d.deserialize_str(Visitor)
    }
}

/// A value expected to be a string: any JSON value is accepted and classified.
struct StrValue<'a>(StrField<'a>);

impl<'de> Deserialize<'de> for StrValue<'de> {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct Visitor;
        impl<'de> serde::de::Visitor<'de> for Visitor {
            type Value = StrValue<'de>;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("any JSON value")
            }
            fn visit_borrowed_str<E>(self, v: &'de str) -> Result<StrValue<'de>, E> {
                Ok(StrValue(StrField::Str(Text::Borrowed(v))))
            }
            fn visit_str<E>(self, v: &str) -> Result<StrValue<'de>, E> {
                Ok(StrValue(StrField::Str(Text::Owned(v.to_string()))))
            }
            fn visit_string<E>(self, v: String) -> Result<StrValue<'de>, E> {
                Ok(StrValue(StrField::Str(Text::Owned(v))))
            }
            fn visit_unit<E>(self) -> Result<StrValue<'de>, E> {
                Ok(StrValue(StrField::Null))
            }
            fn visit_none<E>(self) -> Result<StrValue<'de>, E> {
                Ok(StrValue(StrField::Null))
            }
            fn visit_bool<E>(self, _: bool) -> Result<StrValue<'de>, E> {
                Ok(StrValue(StrField::Other))
            }
            fn visit_i64<E>(self, _: i64) -> Result<StrValue<'de>, E> {
                Ok(StrValue(StrField::Other))
            }
            fn visit_u64<E>(self, _: u64) -> Result<StrValue<'de>, E> {
                Ok(StrValue(StrField::Other))
            }
            fn visit_f64<E>(self, _: f64) -> Result<StrValue<'de>, E> {
                Ok(StrValue(StrField::Other))
            }
            fn visit_seq<A: serde::de::SeqAccess<'de>>(
                self,
                mut seq: A,
            ) -> Result<StrValue<'de>, A::Error> {
                while seq.next_element::<Skip>()?.is_some() {}
                Ok(StrValue(StrField::Other))
            }
            fn visit_map<A: serde::de::MapAccess<'de>>(
                self,
                mut map: A,
            ) -> Result<StrValue<'de>, A::Error> {
                while map.next_entry::<Skip, Skip>()?.is_some() {}
                Ok(StrValue(StrField::Other))
            }
        }
        d.deserialize_any(Visitor)
    }
}

impl<'a> Raw<'a> {
    /// The checks, in the order the schema lists them.
    fn validate(self) -> Result<LikeEvent, Poison> {
        if let Some(v) = self.version.filter(|v| !v.is_null()) {
            match v.as_u64() {
                Some(SCHEMA_VERSION) => {}
                _ => return Err(Poison::UnsupportedVersion(detail(&v.to_string()))),
            }
        }
        let kind = match required_str(self.kind, "type")?.as_ref() {
            "like.added" => LikeKind::Added,
            "like.removed" => LikeKind::Removed,
            other => return Err(Poison::UnknownType(detail(other))),
        };
        let event_id = required_str(self.event_id, "eventId")?;
        check_id(&event_id, MAX_EVENT_ID_BYTES).map_err(|reason| Poison::UnsafeId {
            field: "eventId",
            reason,
        })?;
        let post_id = required_str(self.post_id, "postId")?;
        check_id(&post_id, MAX_ID_BYTES).map_err(|reason| Poison::UnsafeId {
            field: "postId",
            reason,
        })?;
        let user_id = required_str(self.user_id, "userId")?;
        check_id(&user_id, MAX_ID_BYTES).map_err(|reason| Poison::UnsafeId {
            field: "userId",
            reason,
        })?;
        let occurred = required_str(self.occurred_at, "occurredAt")?;
        let occurred_at_micros = parse_timestamp(&occurred)?;
        let seq = match self.seq.filter(|v| !v.is_null()) {
            None => 0,
            Some(v) => v.as_i64().filter(|s| *s >= 0).ok_or(Poison::BadSeq)?,
        };
        let producer = match self.producer.filter(|v| !v.is_null()) {
            None => None,
            Some(Value::String(p)) if p.len() <= MAX_EVENT_ID_BYTES => Some(p),
            Some(_) => {
                return Err(Poison::WrongType {
                    field: "producer",
                    expected: PRODUCER_EXPECTED,
                })
            }
        };
        LikeEvent::checked(
            kind,
            [&post_id, &user_id, &event_id].map(|id| id.as_bytes()),
            seq,
            occurred_at_micros,
            producer.as_deref().map(str::as_bytes),
        )
        .ok_or(Poison::NotUtf8)
    }
}

fn required_str<'a>(field: StrField<'a>, name: &'static str) -> Result<Text<'a>, Poison> {
    match field {
        StrField::Absent | StrField::Null => Err(Poison::MissingField(name)),
        StrField::Str(s) => Ok(s),
        StrField::Other => Err(Poison::WrongType {
            field: name,
            expected: "a string",
        }),
    }
}

/// Firestore timestamps span years 1..=9999.
const MIN_MICROS: i64 = -62_135_596_800_000_000;
const MAX_MICROS: i64 = 253_402_300_799_999_999;

fn parse_timestamp(s: &str) -> Result<i64, Poison> {
    let t = DateTime::parse_from_rfc3339(s).map_err(|e| Poison::BadTimestamp(e.to_string()))?;
    let micros = t.with_timezone(&Utc).timestamp_micros();
    if !(MIN_MICROS..=MAX_MICROS).contains(&micros) {
        return Err(Poison::BadTimestamp("out of range".into()));
    }
    Ok(micros)
}

/// Attacker-supplied text as it may appear in a poison reason: control and
/// other non-printable characters escaped (`\u{7f}`), then cut to
/// [`MAX_REASON_DETAIL_BYTES`], so the reason stays short and one line
/// however the input looks.
fn detail(s: &str) -> String {
    let mut out = String::with_capacity(s.len().min(MAX_REASON_DETAIL_BYTES));
    for c in s.chars() {
        let escaped = c.escape_debug().to_string();
        if out.len() + escaped.len() > MAX_REASON_DETAIL_BYTES {
            break;
        }
        out.push_str(&escaped);
    }
    out
}

fn truncate(s: &str, max: usize) -> String {
    let mut end = s.len().min(max);
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    s[..end].to_string()
}

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

#[cfg(test)]
mod tests {
    use super::*;

    fn payload(extra: &str) -> String {
        format!(
            r#"{{"eventId":"e1","type":"like.added","postId":"p1","userId":"u1","occurredAt":"2026-11-30T10:00:00Z"{extra}}}"#
        )
    }

    #[test]
    fn valid_event_parses_with_defaults() {
        let e = parse(payload("").as_bytes()).unwrap();
        assert_eq!(e.kind, LikeKind::Added);
        assert_eq!(e.post_id(), "p1");
        assert_eq!(e.seq, 0);
        assert_eq!(e.event_id(), "e1");
    }

    #[test]
    fn unknown_fields_are_ignored() {
        assert!(parse(payload(r#","color":"red","nested":{"a":[1,2]}"#).as_bytes()).is_ok());
    }

    #[test]
    fn round_trips_through_to_json() {
        let e = parse(payload(r#","seq":7,"producer":"web","version":1"#).as_bytes()).unwrap();
        assert_eq!(parse(to_json(&e).as_bytes()).unwrap(), e);
    }

    #[test]
    fn unsafe_ids_are_poison() {
        for (id, problem) in [
            ("a/b", IdProblem::Slash),
            (".", IdProblem::DotName),
            ("..", IdProblem::DotName),
            ("__x__", IdProblem::Reserved),
            ("", IdProblem::Empty),
            ("a\u{0}b", IdProblem::ControlChar),
            ("a\nb", IdProblem::ControlChar),
            ("a\u{7f}b", IdProblem::ControlChar),
            ("\u{e9}\u{85}", IdProblem::ControlChar),
        ] {
            let json = serde_json::json!({
                "eventId": "e", "type": "like.added", "postId": id, "userId": "u",
                "occurredAt": "2026-11-30T10:00:00Z"
            });
            let err = parse(json.to_string().as_bytes()).unwrap_err();
            assert_eq!(
                err,
                Poison::UnsafeId {
                    field: "postId",
                    reason: problem
                },
                "{id:?}"
            );
        }
        let long = "x".repeat(2048);
        let json = serde_json::json!({
            "eventId": "e", "type": "like.added", "postId": "p", "userId": long,
            "occurredAt": "2026-11-30T10:00:00Z"
        });
        assert_eq!(
            parse(json.to_string().as_bytes()).unwrap_err(),
            Poison::UnsafeId {
                field: "userId",
                reason: IdProblem::TooLong
            }
        );
    }

    #[test]
    fn malformed_payloads_are_poison_with_reasons() {
        assert_eq!(parse(b"\xff\xfe").unwrap_err(), Poison::NotUtf8);
        assert!(matches!(
            parse(b"not json").unwrap_err(),
            Poison::NotJson(_)
        ));
        assert!(matches!(parse(b"[1,2]").unwrap_err(), Poison::NotJson(_)));
        assert_eq!(
            parse(br#"{"type":"like.added"}"#).unwrap_err(),
            Poison::MissingField("eventId")
        );
        assert_eq!(
            parse(payload(r#","type":"like.added""#).as_bytes()).unwrap_err(),
            Poison::DuplicateField("type".into())
        );
        let unknown = payload("").replace("like.added", "like.exploded");
        assert!(matches!(
            parse(unknown.as_bytes()).unwrap_err(),
            Poison::UnknownType(_)
        ));
        assert!(matches!(
            parse(payload(r#","version":2"#).as_bytes()).unwrap_err(),
            Poison::UnsupportedVersion(_)
        ));
        assert_eq!(
            parse(payload(r#","seq":-1"#).as_bytes()).unwrap_err(),
            Poison::BadSeq
        );
        assert_eq!(
            parse(payload(r#","seq":1e300"#).as_bytes()).unwrap_err(),
            Poison::BadSeq
        );
        let bad_time = payload("").replace("2026-11-30T10:00:00Z", "yesterday");
        assert!(matches!(
            parse(bad_time.as_bytes()).unwrap_err(),
            Poison::BadTimestamp(_)
        ));
        let num_id = payload("").replace(r#""postId":"p1""#, r#""postId":12"#);
        assert_eq!(
            parse(num_id.as_bytes()).unwrap_err(),
            Poison::WrongType {
                field: "postId",
                expected: "a string"
            }
        );
    }

    #[test]
    fn duplicate_unknown_or_escaped_keys_are_poison() {
        assert_eq!(
            parse(payload(r#","x":1,"x":[2]"#).as_bytes()).unwrap_err(),
            Poison::DuplicateField("x".into())
        );
        assert_eq!(
            parse(payload(r#","post\u0049d":"p2""#).as_bytes()).unwrap_err(),
            Poison::DuplicateField("postId".into())
        );
        assert_eq!(
            parse(payload(r#","seq":1,"seq":2"#).as_bytes()).unwrap_err(),
            Poison::DuplicateField("seq".into())
        );
    }

    #[test]
    fn null_or_escaped_string_fields_are_handled() {
        let null_user = payload("").replace(r#""userId":"u1""#, r#""userId":null"#);
        assert_eq!(
            parse(null_user.as_bytes()).unwrap_err(),
            Poison::MissingField("userId")
        );
        let escaped = payload("").replace(r#""postId":"p1""#, r#""postId":"p\u00e9\"x""#);
        assert_eq!(parse(escaped.as_bytes()).unwrap().post_id(), "p\u{e9}\"x");
        let obj_type = payload("").replace(r#""type":"like.added""#, r#""type":{"a":[1]}"#);
        assert_eq!(
            parse(obj_type.as_bytes()).unwrap_err(),
            Poison::WrongType {
                field: "type",
                expected: "a string"
            }
        );
        let null_seq = payload(r#","seq":null,"producer":null,"version":null"#);
        assert_eq!(parse(null_seq.as_bytes()).unwrap().seq, 0);
    }

    #[test]
    fn huge_and_deep_payloads_are_poison_not_panics() {
        let huge = vec![b' '; MAX_PAYLOAD_BYTES + 1];
        assert_eq!(
            parse(&huge).unwrap_err(),
            Poison::TooLarge(MAX_PAYLOAD_BYTES + 1)
        );
        let deep = format!("{}{}", "[".repeat(10_000), "]".repeat(10_000));
        assert!(matches!(
            parse(deep.as_bytes()).unwrap_err(),
            Poison::NotJson(_)
        ));
        let deep_field = payload(&format!(
            r#","x":{}1{}"#,
            "[".repeat(5000),
            "]".repeat(5000)
        ));
        assert!(parse(deep_field.as_bytes()).is_err());
    }

    /// Found by the fuzz driver (tests/fuzz_parser.rs): reasons quoted
    /// attacker-sized values verbatim.
    #[test]
    fn poison_reasons_stay_short_whatever_the_payload() {
        let big = "x".repeat(60_000);
        let cases = [
            payload(&format!(r#","version":"{big}""#)),
            payload(&format!(r#","{big}":1,"{big}":2"#)),
            format!(r#""{big}""#),
            payload("").replace("like.added", &big),
        ];
        for case in cases {
            let reason = parse(case.as_bytes()).unwrap_err().to_string();
            assert!(
                reason.len() <= 256,
                "{} bytes: {:.80}",
                reason.len(),
                reason
            );
        }
    }

    /// Found by libFuzzer (fuzz/, 2026-11-30): a type of 128 DEL characters
    /// passed the 128-byte cut, then `{:?}` escaped each into `\u{7f}` and
    /// the reason grew to 800+ bytes. Escaping now happens before the cut.
    #[test]
    fn escaped_reasons_stay_short_and_on_one_line() {
        let crash = include_bytes!("../../fuzz/corpus/parse/regression-escaped-type-reason");
        let reason = parse(crash).unwrap_err().to_string();
        assert!(reason.len() <= 256, "{} bytes: {reason}", reason.len());
        for hostile in [r"\u007f", "\x7f", r"\n", r"\u0000", r"\u001b[31m"] {
            let kind = hostile.repeat(200);
            for case in [
                payload("").replace("like.added", &kind),
                payload(&format!(r#","{kind}":1,"{kind}":2"#)),
            ] {
                let reason = parse(case.as_bytes()).unwrap_err().to_string();
                assert!(reason.len() <= 256, "{} bytes: {reason}", reason.len());
                assert!(!reason.chars().any(char::is_control), "{reason:?}");
            }
        }
    }

    #[test]
    fn hostile_numbers_and_encodings_are_poison_not_panics() {
        for extra in [
            r#","seq":9223372036854775808"#,
            r#","seq":-9223372036854775809"#,
            r#","seq":1.5"#,
            r#","seq":"3""#,
            r#","version":1.0"#,
            r#","version":18446744073709551616"#,
        ] {
            assert!(parse(payload(extra).as_bytes()).is_err(), "{extra}");
        }
        let lone_surrogate = payload("").replace("u1", r"\ud800");
        assert!(parse(lone_surrogate.as_bytes()).is_err());
        let bom = format!("\u{feff}{}", payload(""));
        assert!(parse(bom.as_bytes()).is_err());
        let time = payload("").replace("2026-11-30T10:00:00Z", "+275760-09-13T00:00:00Z");
        assert!(matches!(
            parse(time.as_bytes()).unwrap_err(),
            Poison::BadTimestamp(_)
        ));
    }

    #[test]
    fn versions_order_by_seq_then_time_then_id() {
        let v = |seq, t, id: &str| Version {
            seq,
            occurred_at_micros: t,
            event_id: id.into(),
        };
        assert!(v(2, 0, "a") > v(1, 9, "z"));
        assert!(v(1, 5, "a") > v(1, 4, "z"));
        assert!(v(1, 5, "b") > v(1, 5, "a"));
        assert_eq!(v(1, 5, "a").cmp(&v(1, 5, "a")), Ordering::Equal);
    }
}
