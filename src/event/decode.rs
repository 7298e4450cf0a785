//! The general decoder: serde_json over a typed, borrowing view of the
//! payload, then the schema's checks in the order it lists them.
//!
//! Invariant: every input gets a [`LikeEvent`] or exactly one [`Poison`]
//! reason, never a panic; a reason quotes at most
//! [`MAX_REASON_DETAIL_BYTES`] of the payload, escaped, on one line
//! (`detail`). Every quarantine reason comes from here (the fast path
//! only ever declines).

use std::fmt;

use serde::Deserialize;
use serde_json::Value;

use super::time::parse_timestamp;
use super::{
    check_id, LikeEvent, LikeKind, Poison, MAX_EVENT_ID_BYTES, MAX_ID_BYTES, MAX_PAYLOAD_BYTES,
    MAX_REASON_DETAIL_BYTES, PRODUCER_EXPECTED, SCHEMA_VERSION,
};

/// The general decoder (serde_json, every poison reason); [`parse`](super::parse) returns
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

/// A string (an object key, a field), borrowed from the input when it
/// has no escapes, copied with its escapes undone when it has.
pub(crate) struct Key<'a>(pub(crate) Text<'a>);

impl<'de> Deserialize<'de> for Key<'de> {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct Visitor;
        impl<'de> serde::de::Visitor<'de> for Visitor {
            type Value = Key<'de>;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a string")
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
