//! A batch's BatchGetDocuments responses read in place: each response is
//! kept as the bytes it came in (no message built, no string copied), and
//! the document it found is read from them: its name, its update time and
//! the scalar values of its fields, borrowed.
//!
//! Invariants: a response is checked whole when it arrives (every field
//! framed within its message, the name and string values UTF-8), so reading
//! it afterwards cannot fail; the check is the only walk over it: it notes
//! where the found document, its name, the transaction, the read time and
//! each field's key and value are (a document of more than
//! [`NOTED_ENTRIES`] fields is walked again when read); what is read is
//! what gcloud-sdk's decoding of the same bytes gives
//! (`google.firestore.v1.BatchGetDocumentsResponse`: tests compare the two
//! on the same bytes), fields read by name with protobuf's rule for a map
//! key sent twice (the last one wins); anything this does not read
//! (`missing`, `create_time`, values that are not scalars) is skipped.

use gcloud_sdk::prost::bytes::{Buf, Bytes};
use gcloud_sdk::prost::encoding::{decode_varint, WireType};
use gcloud_sdk::prost_types::Timestamp;
use gcloud_sdk::tonic::codec::{DecodeBuf, Decoder};
use gcloud_sdk::tonic::Status;

/// One BatchGetDocuments response, as its bytes (checked), with where its
/// parts are in them (found by the check, so nothing is walked twice).
#[derive(Clone, Debug)]
pub struct BatchGetFrame {
    bytes: Bytes,
    /// The document found (the last `found`), if any (boxed: a frame is
    /// moved through the transport's layers, and this is most of its size).
    found: Option<Box<Located>>,
    /// The transaction opened (the last one; empty when none).
    transaction: At,
    /// The read time (the last one), if any.
    read_time: Option<Timestamp>,
}

/// Where a found document is in its frame, and what the check read of it.
#[derive(Clone, Debug)]
struct Located {
    /// The whole `Document` message.
    document: At,
    /// Its name (checked UTF-8).
    name: At,
    update_time: Option<Timestamp>,
    /// Its fields as the check read them.
    noted: Noted,
}

/// Field entries a found document's check notes (key and scalar value,
/// by where they are in the frame), so that reading fields afterwards
/// walks nothing; a document with more entries is walked again instead.
const NOTED_ENTRIES: usize = 8;

/// Where a part of a frame is: its start and end.
type At = (usize, usize);

/// The part of `frame` at `at` (empty if it is not there).
#[inline]
fn part(frame: &[u8], (start, end): At) -> &[u8] {
    frame.get(start..end).unwrap_or_default()
}

/// A field's scalar value as noted, its string by where it is.
#[derive(Clone, Copy, Debug)]
enum NotedValue {
    Boolean(bool),
    Integer(i64),
    Double(f64),
    Timestamp(Timestamp),
    /// A string checked UTF-8.
    String(At),
    Other,
}

/// The entries of a found document, in order, as its check read them.
#[derive(Clone, Debug)]
struct Noted {
    /// Each entry's key (checked UTF-8) and value, the first
    /// [`NOTED_ENTRIES`] of them.
    entries: [(At, NotedValue); NOTED_ENTRIES],
    /// Entries the document has; more than [`NOTED_ENTRIES`]: none is to
    /// be read from here ([`Noted::overflowed`]).
    len: usize,
}

impl Default for Noted {
    fn default() -> Self {
        Self {
            entries: [((0, 0), NotedValue::Other); NOTED_ENTRIES],
            len: 0,
        }
    }
}

impl Noted {
    /// Notes one entry (key and value at `at` of the frame).
    fn push(&mut self, key: At, value: NotedValue) {
        if let Some(slot) = self.entries.get_mut(self.len) {
            *slot = (key, value);
        }
        self.len += 1;
    }

    /// More entries than were kept: the document is walked again instead.
    fn overflowed(&self) -> bool {
        self.len > NOTED_ENTRIES
    }
}

/// A scalar field value of a found document, borrowed from its frame.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Scalar<'a> {
    /// `boolean_value`.
    Boolean(bool),
    /// `integer_value`.
    Integer(i64),
    /// `double_value`.
    Double(f64),
    /// `timestamp_value`.
    Timestamp(Timestamp),
    /// `string_value`.
    String(&'a str),
    /// Any other kind of value (null, bytes, reference, geo point, array,
    /// map), or none.
    Other,
}

/// The document a response found, borrowed from its frame.
#[derive(Clone, Copy, Debug)]
pub struct FoundDocument<'a> {
    /// Its full name.
    pub name: &'a str,
    /// When it was last written.
    pub update_time: Option<Timestamp>,
    /// The whole `Document` message (its fields are read from it by name).
    document: &'a [u8],
    /// Its fields as its frame's check noted them, and the frame's bytes
    /// their places index (none: read from `document`).
    noted: Option<(&'a Noted, &'a [u8])>,
}

/// Field numbers of the messages read here.
mod tag {
    // BatchGetDocumentsResponse
    pub const FOUND: u32 = 1;
    pub const TRANSACTION: u32 = 3;
    pub const READ_TIME: u32 = 4;
    // Document
    pub const NAME: u32 = 1;
    pub const FIELDS: u32 = 2;
    pub const UPDATE_TIME: u32 = 4;
    // Document.FieldsEntry
    pub const KEY: u32 = 1;
    pub const VALUE: u32 = 2;
    // Value
    pub const BOOLEAN: u32 = 1;
    pub const INTEGER: u32 = 2;
    pub const DOUBLE: u32 = 3;
    pub const TIMESTAMP: u32 = 10;
    pub const STRING: u32 = 17;
    // Timestamp
    pub const SECONDS: u32 = 1;
    pub const NANOS: u32 = 2;
}

/// Why a frame was refused.
type Malformed = &'static str;

/// One field of a message: its number and its payload.
enum Item<'a> {
    Varint(u64),
    Fixed64(u64),
    Bytes(&'a [u8]),
    Fixed32,
}

/// The fields of a message, in order; `Err` at the first malformed one.
struct Fields<'a>(&'a [u8]);

impl<'a> Iterator for Fields<'a> {
    type Item = Result<(u32, Item<'a>), Malformed>;

    #[inline]
    fn next(&mut self) -> Option<Self::Item> {
        if self.0.is_empty() {
            return None;
        }
        let item = self.read();
        if item.is_err() {
            self.0 = &[];
        }
        Some(item)
    }
}

impl<'a> Fields<'a> {
    /// A varint: one byte read here (keys, lengths and most values of our
    /// documents are under 128), longer ones by prost. Always inlined: a
    /// call per key and length is what made the walk slow, and a plain
    /// hint was dropped when unrelated code moved the crate's codegen
    /// units (the count per membership rose from 4,666 to 5,317).
    #[inline(always)]
    fn varint(&mut self) -> Result<u64, Malformed> {
        match self.0 {
            [byte, rest @ ..] if *byte < 0x80 => {
                self.0 = rest;
                Ok(u64::from(*byte))
            }
            _ => decode_varint(&mut self.0).map_err(|_| "a malformed varint"),
        }
    }

    #[inline]
    fn read(&mut self) -> Result<(u32, Item<'a>), Malformed> {
        let key = self.varint()?;
        let number = u32::try_from(key >> 3).map_err(|_| "a field number out of range")?;
        if number == 0 {
            return Err("field number 0");
        }
        let wire = WireType::try_from(key & 7).map_err(|_| "an unknown wire type")?;
        let item = match wire {
            WireType::Varint => Item::Varint(self.varint()?),
            WireType::SixtyFourBit => Item::Fixed64(self.take(8).map(|b| {
                let mut word = [0u8; 8];
                word.copy_from_slice(b);
                u64::from_le_bytes(word)
            })?),
            WireType::ThirtyTwoBit => self.take(4).map(|_| Item::Fixed32)?,
            WireType::LengthDelimited => {
                let len = usize::try_from(self.varint()?).map_err(|_| "a length out of range")?;
                Item::Bytes(self.take(len)?)
            }
            WireType::StartGroup | WireType::EndGroup => return Err("a group"),
        };
        Ok((number, item))
    }

    fn take(&mut self, n: usize) -> Result<&'a [u8], Malformed> {
        if self.0.remaining() < n {
            return Err("a field longer than its message");
        }
        let (head, rest) = self.0.split_at(n);
        self.0 = rest;
        Ok(head)
    }
}

fn text(bytes: &[u8]) -> Result<&str, Malformed> {
    std::str::from_utf8(bytes).map_err(|_| "a string that is not UTF-8")
}

/// A `Timestamp` message (prost's merge: the last of each field wins).
fn timestamp(bytes: &[u8]) -> Result<Timestamp, Malformed> {
    let mut t = Timestamp::default();
    for field in Fields(bytes) {
        match field? {
            (tag::SECONDS, Item::Varint(n)) => t.seconds = n as i64,
            (tag::NANOS, Item::Varint(n)) => t.nanos = n as i32,
            _ => {}
        }
    }
    Ok(t)
}

/// A `Value` message: its scalar, if its (last) kind is one.
fn scalar(bytes: &[u8]) -> Result<Scalar<'_>, Malformed> {
    let mut value = Scalar::Other;
    for field in Fields(bytes) {
        value = match field? {
            (tag::BOOLEAN, Item::Varint(n)) => Scalar::Boolean(n != 0),
            (tag::INTEGER, Item::Varint(n)) => Scalar::Integer(n as i64),
            (tag::DOUBLE, Item::Fixed64(n)) => Scalar::Double(f64::from_bits(n)),
            (tag::TIMESTAMP, Item::Bytes(b)) => Scalar::Timestamp(timestamp(b)?),
            (tag::STRING, Item::Bytes(b)) => Scalar::String(text(b)?),
            _ => Scalar::Other,
        };
    }
    Ok(value)
}

/// A `Document.FieldsEntry`: its key and its value.
fn entry(bytes: &[u8]) -> Result<(&str, Scalar<'_>), Malformed> {
    let (mut key, mut value) = ("", Scalar::Other);
    for field in Fields(bytes) {
        match field? {
            (tag::KEY, Item::Bytes(b)) => key = text(b)?,
            (tag::VALUE, Item::Bytes(b)) => value = scalar(b)?,
            _ => {}
        }
    }
    Ok((key, value))
}

/// A `Document.FieldsEntry`'s key and value messages as bytes, not
/// decoded (the last of each; an absent value reads as an empty one).
fn entry_raw(bytes: &[u8]) -> (&[u8], &[u8]) {
    let (mut key, mut value): (&[u8], &[u8]) = (&[], &[]);
    for field in Fields(bytes).map_while(Result::ok) {
        match field {
            (tag::KEY, Item::Bytes(b)) => key = b,
            (tag::VALUE, Item::Bytes(b)) => value = b,
            _ => {}
        }
    }
    (key, value)
}

impl<'a> FoundDocument<'a> {
    /// Reads a `Document` message: its name and update time, and checks
    /// its fields, noting each (`at` gives where a part of it is in its
    /// frame).
    fn read(bytes: &'a [u8], at: impl Fn(&[u8]) -> At) -> Result<(Self, Noted), Malformed> {
        let mut doc = FoundDocument {
            name: "",
            update_time: None,
            document: bytes,
            noted: None,
        };
        let mut noted = Noted::default();
        for field in Fields(bytes) {
            match field? {
                (tag::NAME, Item::Bytes(b)) => doc.name = text(b)?,
                (tag::UPDATE_TIME, Item::Bytes(b)) => doc.update_time = Some(timestamp(b)?),
                (tag::FIELDS, Item::Bytes(b)) => {
                    let (key, value) = entry(b)?;
                    let value = match value {
                        Scalar::Boolean(b) => NotedValue::Boolean(b),
                        Scalar::Integer(n) => NotedValue::Integer(n),
                        Scalar::Double(d) => NotedValue::Double(d),
                        Scalar::Timestamp(t) => NotedValue::Timestamp(t),
                        Scalar::String(s) => NotedValue::String(at(s.as_bytes())),
                        Scalar::Other => NotedValue::Other,
                    };
                    noted.push(at(key.as_bytes()), value);
                }
                _ => {}
            }
        }
        Ok((doc, noted))
    }

    /// The value of the field `name` (the last entry of that name), if
    /// the document has it ([`Scalar::Other`] when it is not a scalar).
    pub fn value(&self, name: &str) -> Option<Scalar<'a>> {
        let [value] = self.values([name]);
        value
    }

    /// [`Self::value`] of each of `names`, in one pass over the fields:
    /// only the keys are compared on the way (as bytes), and only the
    /// values found are decoded.
    pub fn values<const N: usize>(&self, names: [&str; N]) -> [Option<Scalar<'a>>; N] {
        if let Some((noted, frame)) = self.noted.filter(|(noted, _)| !noted.overflowed()) {
            return Self::noted_values(noted, frame, names);
        }
        let mut found: [Option<&'a [u8]>; N] = [None; N];
        for field in Fields(self.document).map_while(Result::ok) {
            if let (tag::FIELDS, Item::Bytes(b)) = field {
                let (key, value) = entry_raw(b);
                if let Some(i) = names.iter().position(|name| name.as_bytes() == key) {
                    found[i] = Some(value);
                }
            }
        }
        found.map(|value| value.map(|v| scalar(v).unwrap_or(Scalar::Other)))
    }

    /// [`Self::values`] from what the check noted: the same answer, no walk.
    fn noted_values<const N: usize>(
        noted: &'a Noted,
        frame: &'a [u8],
        names: [&str; N],
    ) -> [Option<Scalar<'a>>; N] {
        let mut found: [Option<NotedValue>; N] = [None; N];
        for (key, value) in noted.entries.iter().take(noted.len) {
            let key = part(frame, *key);
            if let Some(i) = names.iter().position(|name| name.as_bytes() == key) {
                found[i] = Some(*value);
            }
        }
        found.map(|value| {
            value.map(|v| match v {
                NotedValue::Boolean(b) => Scalar::Boolean(b),
                NotedValue::Integer(n) => Scalar::Integer(n),
                NotedValue::Double(d) => Scalar::Double(d),
                NotedValue::Timestamp(t) => Scalar::Timestamp(t),
                // Checked UTF-8 when noted.
                NotedValue::String(at) => {
                    std::str::from_utf8(part(frame, at)).map_or(Scalar::Other, Scalar::String)
                }
                NotedValue::Other => Scalar::Other,
            })
        })
    }
}

impl BatchGetFrame {
    /// Checks `bytes` as a `BatchGetDocumentsResponse`, noting where its
    /// found document, transaction and read time are.
    pub fn new(bytes: Bytes) -> Result<Self, Malformed> {
        let base = bytes.as_ptr() as usize;
        // Where `part`, a slice of `bytes`, is; an empty part (a name or a
        // key of "", which is not in `bytes`) as empty.
        let at = |part: &[u8]| {
            if part.is_empty() {
                return (0, 0);
            }
            let start = (part.as_ptr() as usize).saturating_sub(base);
            (start, start + part.len())
        };
        let (mut found, mut transaction, mut read_time) = (None, (0, 0), None);
        for field in Fields(&bytes) {
            match field? {
                (tag::FOUND, Item::Bytes(b)) => {
                    let (doc, noted) = FoundDocument::read(b, at)?;
                    found = Some(Box::new(Located {
                        noted,
                        document: at(b),
                        name: at(doc.name.as_bytes()),
                        update_time: doc.update_time,
                    }));
                }
                (tag::TRANSACTION, Item::Bytes(b)) => transaction = at(b),
                (tag::READ_TIME, Item::Bytes(b)) => read_time = Some(timestamp(b)?),
                _ => {}
            }
        }
        Ok(Self {
            bytes,
            found,
            transaction,
            read_time,
        })
    }

    /// The document found (`result.found`), if this response has one.
    /// Its fields are not decoded here ([`Self::new`] checked them): a
    /// batch reads hundreds of these, each for a few fields.
    pub fn found(&self) -> Option<FoundDocument<'_>> {
        let located = self.found.as_ref()?;
        Some(FoundDocument {
            name: std::str::from_utf8(part(&self.bytes, located.name)).unwrap_or_default(),
            update_time: located.update_time,
            document: part(&self.bytes, located.document),
            noted: Some((&located.noted, &self.bytes)),
        })
    }

    /// The time this response's read was made at, if it says.
    pub fn read_time(&self) -> Option<Timestamp> {
        self.read_time
    }

    /// The transaction the read opened (empty when this response has none).
    pub fn transaction(&self) -> &[u8] {
        part(&self.bytes, self.transaction)
    }
}

/// Reads each response of a stream as a [`BatchGetFrame`]: its bytes split
/// off the receive buffer, not copied.
#[derive(Clone, Copy, Debug, Default)]
pub struct FrameDecoder;

impl Decoder for FrameDecoder {
    type Item = BatchGetFrame;
    type Error = Status;

    fn decode(&mut self, buf: &mut DecodeBuf<'_>) -> Result<Option<BatchGetFrame>, Status> {
        let bytes = buf.copy_to_bytes(buf.remaining());
        BatchGetFrame::new(bytes)
            .map(Some)
            .map_err(|why| Status::internal(format!("a BatchGetDocuments response with {why}")))
    }
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use gcloud_sdk::google::firestore::v1 as fs;
    use gcloud_sdk::prost::Message;

    use super::*;
    use crate::store::firestore::codec::{
        counter_shard_likes, effects_from_fields, membership_from_fields, rollup_from_fields,
        shard_likes_from_fields, stored_rollup,
    };
    use fs::batch_get_documents_response::Result as Found;
    use fs::value::ValueType;

    fn value(v: ValueType) -> fs::Value {
        fs::Value {
            value_type: Some(v),
        }
    }

    fn time(seconds: i64, nanos: i32) -> Timestamp {
        Timestamp { seconds, nanos }
    }

    fn frame(response: &fs::BatchGetDocumentsResponse) -> BatchGetFrame {
        BatchGetFrame::new(Bytes::from(response.encode_to_vec())).expect("well formed")
    }

    fn found(name: &str, fields: Vec<(&str, ValueType)>) -> fs::BatchGetDocumentsResponse {
        fs::BatchGetDocumentsResponse {
            transaction: vec![4, 2],
            read_time: Some(time(11, 0)),
            result: Some(Found::Found(fs::Document {
                name: name.into(),
                fields: fields
                    .into_iter()
                    .map(|(k, v)| (k.to_string(), value(v)))
                    .collect(),
                create_time: Some(time(1, 0)),
                update_time: Some(time(2, -5)),
            })),
        }
    }

    #[test]
    fn reading_several_fields_in_one_pass_gives_each_fields_last_value() {
        // One document sent as two messages back to back: protobuf merges
        // them, so its map has `liked` twice on the wire.
        let document = |fields: Vec<(&str, ValueType)>| fs::Document {
            fields: fields
                .into_iter()
                .map(|(k, v)| (k.to_string(), value(v)))
                .collect(),
            ..Default::default()
        };
        let mut bytes = document(vec![
            ("liked", ValueType::BooleanValue(true)),
            ("seq", ValueType::IntegerValue(7)),
        ])
        .encode_to_vec();
        bytes.extend(
            document(vec![
                ("liked", ValueType::BooleanValue(false)),
                ("eventId", ValueType::StringValue("e-2".into())),
            ])
            .encode_to_vec(),
        );
        let sdk = fs::Document::decode(bytes.as_slice()).expect("decodes");
        let mut response = Vec::new();
        gcloud_sdk::prost::encoding::bytes::encode(1, &bytes, &mut response);
        let frame = BatchGetFrame::new(Bytes::from(response)).expect("well formed");
        let doc = frame.found().expect("found");
        let names = ["seq", "absent", "liked", "eventId"];
        let read = doc.values(names);
        assert_eq!(read, names.map(|name| doc.value(name)));
        assert_eq!(
            read,
            [
                Some(Scalar::Integer(7)),
                None,
                Some(Scalar::Boolean(false)),
                Some(Scalar::String("e-2")),
            ]
        );
        assert_eq!(
            membership_from_fields(&doc),
            membership_from_fields(&sdk.fields)
        );
    }

    #[test]
    fn a_found_document_reads_as_the_sdk_decodes_it() {
        let kinds = [
            ValueType::BooleanValue(true),
            ValueType::BooleanValue(false),
            ValueType::IntegerValue(-3),
            ValueType::IntegerValue(i64::MAX),
            ValueType::DoubleValue(1.5),
            ValueType::TimestampValue(time(-1_500_001, 999_999_999)),
            ValueType::TimestampValue(time(0, 0)),
            ValueType::StringValue("é/x".into()),
            ValueType::StringValue(String::new()),
            ValueType::NullValue(0),
            ValueType::BytesValue(vec![1, 2]),
            ValueType::MapValue(fs::MapValue::default()),
        ];
        let names = [
            "liked",
            "seq",
            "occurredAt",
            "eventId",
            "applied",
            "other",
            "likes",
            "asOf",
            "shards",
            "milestone",
        ];
        for (i, kind) in kinds.iter().enumerate() {
            for shift in 0..names.len() {
                let fields: Vec<(&str, ValueType)> = names
                    .iter()
                    .enumerate()
                    .map(|(j, n)| (*n, kinds[(i + j * shift) % kinds.len()].clone()))
                    .chain([("liked", kind.clone())])
                    .collect();
                let response = found("projects/p/databases/d/documents/likes/1", fields);
                let sdk = match &response.result {
                    Some(Found::Found(doc)) => doc.clone(),
                    _ => unreachable!("built found"),
                };
                let frame = frame(&response);
                assert_eq!(frame.transaction(), [4, 2]);
                assert_eq!(frame.read_time(), response.read_time);
                let doc = frame.found().expect("found");
                assert_eq!(doc.name, sdk.name);
                assert_eq!(doc.update_time, sdk.update_time);
                assert_eq!(
                    membership_from_fields(&doc),
                    membership_from_fields(&sdk.fields),
                    "{kind:?} {shift}"
                );
                assert_eq!(effects_from_fields(&doc), effects_from_fields(&sdk.fields));
                assert_eq!(
                    rollup_from_fields(&doc, doc.update_time),
                    stored_rollup(&sdk),
                    "{kind:?} {shift}"
                );
                assert_eq!(
                    shard_likes_from_fields(&doc),
                    counter_shard_likes(&sdk),
                    "{kind:?} {shift}"
                );
                assert_eq!(doc.value("absent"), None);
            }
        }
    }

    #[test]
    fn a_document_with_more_fields_than_are_noted_reads_as_the_sdk_decodes_it() {
        for extra in [NOTED_ENTRIES - 4, NOTED_ENTRIES - 3, NOTED_ENTRIES + 5] {
            let mut fields: Vec<(String, ValueType)> = (0..extra)
                .map(|i| (format!("f{i}"), ValueType::IntegerValue(i as i64)))
                .collect();
            fields.push(("liked".into(), ValueType::BooleanValue(true)));
            fields.push(("seq".into(), ValueType::IntegerValue(9)));
            fields.push(("eventId".into(), ValueType::StringValue("e-9".into())));
            let response = found(
                "projects/p/databases/d/documents/likes/9",
                fields
                    .iter()
                    .map(|(k, v)| (k.as_str(), v.clone()))
                    .collect(),
            );
            let Some(Found::Found(sdk)) = &response.result else {
                unreachable!("built found");
            };
            let frame = frame(&response);
            let doc = frame.found().expect("found");
            assert_eq!(
                membership_from_fields(&doc),
                membership_from_fields(&sdk.fields),
                "{extra} extra fields"
            );
            let last = format!("f{}", extra - 1);
            assert_eq!(
                doc.value(&last),
                Some(Scalar::Integer(extra as i64 - 1)),
                "{extra} extra fields"
            );
        }
    }

    #[test]
    fn a_key_sent_twice_reads_as_its_last_entry_like_the_sdk() {
        // Two entries of one key, as a protobuf map on the wire may carry.
        let entry = |liked: bool| fs::Document {
            fields: HashMap::from([("liked".to_string(), value(ValueType::BooleanValue(liked)))]),
            ..Default::default()
        };
        let mut bytes = entry(true).encode_to_vec();
        bytes.extend(entry(false).encode_to_vec());
        let sdk = fs::Document::decode(bytes.as_slice()).expect("decodes");
        let mut response = Vec::new();
        gcloud_sdk::prost::encoding::bytes::encode(1, &bytes, &mut response);
        let frame = BatchGetFrame::new(Bytes::from(response)).expect("well formed");
        let doc = frame.found().expect("found");
        assert_eq!(doc.value("liked"), Some(Scalar::Boolean(false)));
        assert_eq!(
            membership_from_fields(&doc),
            membership_from_fields(&sdk.fields)
        );
    }

    #[test]
    fn a_missing_document_and_a_bare_transaction_find_nothing() {
        let missing = fs::BatchGetDocumentsResponse {
            result: Some(Found::Missing("projects/p/databases/d/documents/x".into())),
            read_time: Some(time(3, 0)),
            ..Default::default()
        };
        let frame = frame(&missing);
        assert!(frame.found().is_none());
        assert!(frame.transaction().is_empty());
        let opened = fs::BatchGetDocumentsResponse {
            transaction: vec![9; 40],
            ..Default::default()
        };
        assert_eq!(self::frame(&opened).transaction(), [9; 40]);
    }

    #[test]
    fn malformed_responses_are_refused_not_misread() {
        let good =
            found("n", vec![("eventId", ValueType::StringValue("e".into()))]).encode_to_vec();
        for cut in 1..good.len() {
            let cut = Bytes::copy_from_slice(&good[..cut]);
            if let Ok(frame) = BatchGetFrame::new(cut.clone()) {
                // A prefix that still frames (it ends between fields) reads
                // as what the SDK reads of it.
                let sdk = fs::BatchGetDocumentsResponse::decode(cut).expect("the SDK agrees");
                assert_eq!(frame.transaction(), sdk.transaction.as_slice());
                assert_eq!(frame.read_time(), sdk.read_time);
            }
        }
        let not_utf8 = [0x0a, 0x03, 0x0a, 0x01, 0xff];
        assert!(BatchGetFrame::new(Bytes::copy_from_slice(&not_utf8)).is_err());
        let group = [0x0b];
        assert!(BatchGetFrame::new(Bytes::copy_from_slice(&group)).is_err());
    }
}
