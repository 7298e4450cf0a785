//! What one push request carries: the message (id, payload, attributes,
//! publish time) read from Pub/Sub's wrapped JSON body, or from an
//! unwrapped body (the payload itself) and its `x-goog-pubsub-*` headers,
//! turned into an [`Item`] like a pulled message.
//!
//! Invariant: every body that arrived whole becomes an item, never a
//! refusal: a body over [`MAX_BODY_BYTES`] or not in Pub/Sub's shape
//! becomes a poison record whose reason says which (only its first
//! [`PoisonRecord::MAX_STORED_BYTES`], its length and its digest are
//! kept), quarantined and acked like any poison. Memory: a body is held
//! whole only up to [`MAX_BODY_BYTES`]; past it, the rest streams by.

use std::borrow::Cow;
use std::collections::BTreeMap;
use std::time::SystemTime;

use axum::body::{Bytes, HttpBody};
use axum::http::HeaderMap;
use base64::Engine as _;
use serde::de::{Deserializer, MapAccess, Visitor};
use serde::Deserialize;
use serde_json::value::RawValue;
use sha2::{Digest, Sha256};

use crate::event::BorrowedText;
use crate::model::item::Item;
use crate::model::poison::{hex, PoisonRecord};

/// The largest body held whole (1 MiB). Anything larger cannot carry a
/// valid event: a payload is at most [`crate::event::MAX_PAYLOAD_BYTES`]
/// (64 KiB, 88 KiB as base64) and Pub/Sub's attributes at most 100 of
/// 256 + 1,024 bytes, 750 KiB even if JSON escaped every byte of them six
/// times over; with room for the envelope's other fields, that stays under
/// the limit (checked at compile time below). So no valid event is ever
/// quarantined for its size.
pub const MAX_BODY_BYTES: usize = 1024 * 1024;

const _: () = assert!(
    crate::event::MAX_PAYLOAD_BYTES.div_ceil(3) * 4 + 100 * (256 + 1024) * 6 + 64 * 1024
        <= MAX_BODY_BYTES
);

/// The prefix of the unwrapped form's metadata headers.
const METADATA_PREFIX: &str = "x-goog-pubsub-";

/// Bytes kept of an oversized body's end, where the wrapped form's
/// `messageId` comes after the data.
const TAIL_BYTES: usize = 1024;

/// Poison kinds of what is wrong with the request itself (the payload's
/// own are [`crate::event::Poison::kind`]).
pub const KIND_TOO_LARGE: &str = "push_body_too_large";
/// A JSON object that is not Pub/Sub's push request.
pub const KIND_NOT_PUSH: &str = "push_body_not_pubsub";

/// A body as read: whole, or too large to hold.
#[derive(Debug)]
pub enum Read {
    /// At most [`MAX_BODY_BYTES`].
    Whole(Bytes),
    /// Over the limit: what was kept of it.
    Oversized {
        /// The first [`PoisonRecord::MAX_STORED_BYTES`].
        prefix: Vec<u8>,
        /// The last `TAIL_BYTES` (1 KiB).
        tail: Vec<u8>,
        /// Its full length.
        len: usize,
        /// SHA-256 of all of it.
        sha256: [u8; 32],
    },
}

/// Reads `body` to its end: whole up to [`MAX_BODY_BYTES`], beyond it keeping
/// only a prefix, a tail and a digest. An error means the body did not
/// arrive (the client went away or sent a broken stream).
pub async fn read<B>(mut body: B) -> Result<Read, B::Error>
where
    B: HttpBody<Data = Bytes> + Unpin,
{
    // Usually one chunk: kept as it came, no copy (and no list for it).
    let mut first: Option<Bytes> = None;
    let mut more: Vec<Bytes> = Vec::new();
    let mut held_len = 0;
    while let Some(chunk) = next_chunk(&mut body).await? {
        if held_len + chunk.len() <= MAX_BODY_BYTES {
            held_len += chunk.len();
            match first {
                None => first = Some(chunk),
                Some(_) => more.push(chunk),
            }
            continue;
        }
        // Over the limit: digest what was held and stream the rest by
        // (boxed: a hasher's state, held across the reads below, would
        // otherwise make every request's future larger).
        let mut oversized = Box::<Oversized>::default();
        for piece in first.take().into_iter().chain(more.drain(..)) {
            oversized.add(&piece);
        }
        oversized.add(&chunk);
        while let Some(chunk) = next_chunk(&mut body).await? {
            oversized.add(&chunk);
        }
        return Ok(oversized.into_read());
    }
    Ok(Read::Whole(match (first, more.is_empty()) {
        (None, _) => Bytes::new(),
        (Some(only), true) => only,
        (Some(first), false) => {
            let mut whole = Vec::with_capacity(held_len);
            whole.extend_from_slice(&first);
            for piece in &more {
                whole.extend_from_slice(piece);
            }
            whole.into()
        }
    }))
}

/// The body's next data chunk (trailers are skipped); `None` at its end.
async fn next_chunk<B>(body: &mut B) -> Result<Option<Bytes>, B::Error>
where
    B: HttpBody<Data = Bytes> + Unpin,
{
    loop {
        let frame = std::future::poll_fn(|cx| std::pin::Pin::new(&mut *body).poll_frame(cx)).await;
        match frame {
            None => return Ok(None),
            Some(frame) => {
                if let Ok(data) = frame?.into_data() {
                    return Ok(Some(data));
                }
            }
        }
    }
}

/// What is kept of an oversized body as it streams by.
#[derive(Default)]
struct Oversized {
    prefix: Vec<u8>,
    tail: Vec<u8>,
    len: usize,
    hasher: Sha256,
}

impl Oversized {
    fn add(&mut self, chunk: &[u8]) {
        self.hasher.update(chunk);
        self.len += chunk.len();
        let room = PoisonRecord::MAX_STORED_BYTES.saturating_sub(self.prefix.len());
        self.prefix
            .extend_from_slice(&chunk[..room.min(chunk.len())]);
        self.tail
            .extend_from_slice(&chunk[chunk.len().saturating_sub(TAIL_BYTES)..]);
        if self.tail.len() > TAIL_BYTES {
            self.tail.drain(..self.tail.len() - TAIL_BYTES);
        }
    }

    fn into_read(self) -> Read {
        Read::Oversized {
            prefix: self.prefix,
            tail: self.tail,
            len: self.len,
            sha256: self.hasher.finalize().into(),
        }
    }
}

/// One pushed message, ready for the aggregator.
#[derive(Debug)]
pub struct Delivery {
    /// The event, or the poison record to quarantine.
    pub item: Item,
    /// Payload bytes (the body's, for a body that is not a message).
    pub bytes: usize,
    /// When Pub/Sub accepted the message, if the request says.
    pub published: Option<SystemTime>,
    /// The subscription that pushed it, when the request names one other
    /// than the one expected (a copy only then: the usual case allocates
    /// nothing for it).
    pub other_subscription: Option<String>,
}

/// Pub/Sub's wrapped body (fields it may add later are ignored).
///
/// Its strings are borrowed from the body where no escape needs undoing:
/// no copy. (serde's `borrow` alone borrows a `Cow` only outside an
/// `Option`: inside one it always copies, hence [`text`].)
#[derive(Deserialize)]
struct Envelope<'a> {
    #[serde(borrow)]
    message: Option<WireMessage<'a>>,
    #[serde(borrow, default, deserialize_with = "text")]
    subscription: Option<Cow<'a, str>>,
}

/// The `message` of a wrapped body; Pub/Sub writes some fields in both
/// spellings.
#[derive(Deserialize)]
struct WireMessage<'a> {
    #[serde(borrow, default, deserialize_with = "text")]
    data: Option<Cow<'a, str>>,
    #[serde(borrow)]
    attributes: Option<Attributes<'a>>,
    #[serde(rename = "messageId", borrow, default, deserialize_with = "text")]
    message_id: Option<Cow<'a, str>>,
    #[serde(rename = "message_id", borrow, default, deserialize_with = "text")]
    message_id_snake: Option<Cow<'a, str>>,
    #[serde(rename = "publishTime", borrow, default, deserialize_with = "text")]
    publish_time: Option<Cow<'a, str>>,
    #[serde(rename = "publish_time", borrow, default, deserialize_with = "text")]
    publish_time_snake: Option<Cow<'a, str>>,
}

/// An optional string borrowed from the input when it has no escapes,
/// copied (with its escapes undone) when it has.
fn text<'de: 'a, 'a, D>(deserializer: D) -> Result<Option<Cow<'a, str>>, D::Error>
where
    D: Deserializer<'de>,
{
    Ok(Option::<BorrowedText<'de>>::deserialize(deserializer)?.map(|BorrowedText(text)| text))
}

/// A wrapped message's attributes as the body holds them: checked to be
/// an object of strings as they are read, but not copied out (no map, no
/// strings) until a poison record keeps them: a valid event never does.
struct Attributes<'a>(&'a RawValue);

impl<'de: 'a, 'a> Deserialize<'de> for Attributes<'a> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let raw = <&'a RawValue>::deserialize(deserializer)?;
        let mut strings = serde_json::Deserializer::from_str(raw.get());
        strings
            .deserialize_map(StringsOnly)
            .map_err(serde::de::Error::custom)?;
        Ok(Self(raw))
    }
}

impl Attributes<'_> {
    /// The attributes as a map (checked already: an object of strings).
    fn to_map(&self) -> BTreeMap<String, String> {
        serde_json::from_str(self.0.get()).unwrap_or_default()
    }
}

/// Accepts an object whose keys and values are all strings, keeping none.
struct StringsOnly;

impl<'de> Visitor<'de> for StringsOnly {
    type Value = ();

    fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        f.write_str("a map of strings")
    }

    fn visit_map<M: MapAccess<'de>>(self, mut map: M) -> Result<(), M::Error> {
        while map.next_entry::<BorrowedText, BorrowedText>()?.is_some() {}
        Ok(())
    }
}

/// The message of a request: its `headers` and its body as [`read`];
/// `expected` is the subscription it should come from.
pub fn parse(headers: &HeaderMap, body: Read, expected: &str) -> Delivery {
    let unwrapped = has_metadata(headers);
    match body {
        Read::Oversized {
            prefix,
            tail,
            len,
            sha256,
        } => {
            let message_id = match unwrapped {
                true => header(headers, "message-id"),
                false => message_id_in(&tail),
            };
            let reason = format!(
                "push body of {len} bytes is over the {MAX_BODY_BYTES}-byte limit (no valid event is that large)"
            );
            let record = PoisonRecord::of_prefix(
                message_id.unwrap_or_else(|| digest_id(&sha256)),
                reason,
                &prefix,
                len,
                sha256,
                if unwrapped {
                    attributes(headers)
                } else {
                    BTreeMap::new()
                },
            )
            .of_kind(KIND_TOO_LARGE);
            Delivery {
                item: Item::Poison(Box::new(record)),
                bytes: prefix.len(),
                published: None,
                other_subscription: None,
            }
        }
        Read::Whole(body) if unwrapped => unwrapped_delivery(headers, &body, expected),
        Read::Whole(body) => match serde_json::from_slice::<Envelope>(&body) {
            Ok(Envelope {
                message: Some(message),
                subscription,
            }) => {
                let other = subscription.filter(|s| s != expected);
                wrapped_delivery(message, other.map(Cow::into_owned), &body)
            }
            Err(error) if error.is_data() && starts_object(&body) => {
                let reason =
                    format!("push body is a JSON object but not Pub/Sub's push request: {error}");
                not_push(&body, reason)
            }
            // Not an envelope: the unwrapped form without metadata, whose
            // body is the payload.
            _ => unwrapped_delivery(headers, &body, expected),
        },
    }
}

/// A wrapped body's message (`other_subscription`: see [`Delivery`]).
fn wrapped_delivery(
    message: WireMessage,
    other_subscription: Option<String>,
    body: &[u8],
) -> Delivery {
    let Some(message_id) = message.message_id.or(message.message_id_snake) else {
        return not_push(body, "push request's message has no messageId".into());
    };
    let data = match &message.data {
        None => Vec::new(),
        Some(text) => match base64::engine::general_purpose::STANDARD.decode(text.as_bytes()) {
            Ok(data) => data,
            Err(error) => {
                let reason = format!("push request's message.data is not base64: {error}");
                return not_push(body, reason);
            }
        },
    };
    let attributes = message.attributes;
    let published = message
        .publish_time
        .or(message.publish_time_snake)
        .and_then(|t| rfc3339(&t));
    Delivery {
        item: Item::parse(&message_id, &data, || {
            attributes.map(|a| a.to_map()).unwrap_or_default()
        }),
        bytes: data.len(),
        published,
        other_subscription,
    }
}

/// An unwrapped body (the payload), with the metadata its headers carry.
fn unwrapped_delivery(headers: &HeaderMap, body: &Bytes, expected: &str) -> Delivery {
    let message_id =
        header(headers, "message-id").unwrap_or_else(|| digest_id(&Sha256::digest(body).into()));
    Delivery {
        item: Item::parse(&message_id, body, || attributes(headers)),
        bytes: body.len(),
        published: header(headers, "publish-time").and_then(|t| rfc3339(&t)),
        other_subscription: header(headers, "subscription-name").filter(|s| s != expected),
    }
}

/// A poison record for a whole body that is not a push request.
fn not_push(body: &[u8], reason: String) -> Delivery {
    let sha256: [u8; 32] = Sha256::digest(body).into();
    let record =
        PoisonRecord::new(digest_id(&sha256), reason, body, BTreeMap::new()).of_kind(KIND_NOT_PUSH);
    Delivery {
        item: Item::Poison(Box::new(record)),
        bytes: body.len(),
        published: None,
        other_subscription: None,
    }
}

/// The record id of a body without a message id: its digest, so the same
/// body delivered again lands on the same record.
fn digest_id(sha256: &[u8; 32]) -> String {
    format!("push-body-sha256-{}", hex(sha256))
}

/// Whether the request is the unwrapped form with metadata.
fn has_metadata(headers: &HeaderMap) -> bool {
    headers
        .keys()
        .any(|name| name.as_str().starts_with(METADATA_PREFIX))
}

/// The metadata header `x-goog-pubsub-{name}`, if present.
fn header(headers: &HeaderMap, name: &str) -> Option<String> {
    let value = headers.get(format!("{METADATA_PREFIX}{name}"))?;
    Some(String::from_utf8_lossy(value.as_bytes()).into_owned())
}

/// The unwrapped form's attributes: the headers that are neither its
/// metadata nor HTTP's or a proxy's own. `Authorization` is never kept.
fn attributes(headers: &HeaderMap) -> BTreeMap<String, String> {
    const NOT_ATTRIBUTES: &[&str] = &[
        "authorization",
        "host",
        "user-agent",
        "connection",
        "from",
        "forwarded",
        "via",
        "te",
        "transfer-encoding",
        "expect",
        "traceparent",
        "tracestate",
        "x-cloud-trace-context",
    ];
    headers
        .iter()
        .filter(|(name, _)| {
            let name = name.as_str();
            !(NOT_ATTRIBUTES.contains(&name)
                || name.starts_with(METADATA_PREFIX)
                || name.starts_with("content-")
                || name.starts_with("accept")
                || name.starts_with("x-forwarded-"))
        })
        .map(|(name, value)| {
            let value = String::from_utf8_lossy(value.as_bytes()).into_owned();
            (name.as_str().to_string(), value)
        })
        .collect()
}

/// Whether the first non-blank byte of `body` opens a JSON object.
fn starts_object(body: &[u8]) -> bool {
    body.iter().find(|b| !b.is_ascii_whitespace()) == Some(&b'{')
}

/// The value of the last `"messageId": "..."` in `tail`, if whole there.
fn message_id_in(tail: &[u8]) -> Option<String> {
    const KEY: &[u8] = b"\"messageId\"";
    let at = tail.windows(KEY.len()).rposition(|w| w == KEY)?;
    let rest = &tail[at + KEY.len()..];
    let rest = rest.trim_ascii_start().strip_prefix(b":")?;
    let rest = rest.trim_ascii_start().strip_prefix(b"\"")?;
    let end = rest.iter().position(|&b| b == b'"' || b == b'\\')?;
    (rest.get(end) == Some(&b'"') && end > 0)
        .then(|| String::from_utf8(rest[..end].to_vec()).ok())
        .flatten()
}

/// An RFC 3339 time as a `SystemTime` (`None` when it is not one).
fn rfc3339(text: &str) -> Option<SystemTime> {
    chrono::DateTime::parse_from_rfc3339(text)
        .ok()
        .map(SystemTime::from)
}

#[cfg(test)]
mod tests;
