//! The write floor's Commit, encoded by hand: the protobuf bytes of a
//! `google.firestore.v1.CommitRequest` written straight into one buffer,
//! with no message built first (no document, map of fields or value
//! allocated), so the floor pays for the bytes and nothing else.
//!
//! Invariants: the bytes decode as the `CommitRequest` gcloud-sdk's
//! generated types would encode for the same writes (tags and wire types
//! as in `google/firestore/v1/{firestore,write,document}.proto`; the
//! tests decode them with those types); a length prefix is always the
//! exact length of what follows it (each part's length is computed by the
//! same function that sizes its prefix).

/// `CommitRequest.database`.
const COMMIT_DATABASE: u32 = 1;
/// `CommitRequest.writes`.
const COMMIT_WRITES: u32 = 2;
/// `Write.update` (a Document).
const WRITE_UPDATE: u32 = 1;
/// `Write.transform` (a DocumentTransform).
const WRITE_TRANSFORM: u32 = 6;
/// `Document.name`.
const DOCUMENT_NAME: u32 = 1;
/// `Document.fields`: a map, on the wire entries of `{key = 1, value = 2}`.
const DOCUMENT_FIELDS: u32 = 2;
/// A map entry's key.
const ENTRY_KEY: u32 = 1;
/// A map entry's value.
const ENTRY_VALUE: u32 = 2;
/// `Value.boolean_value`.
const VALUE_BOOLEAN: u32 = 1;
/// `Value.integer_value`.
const VALUE_INTEGER: u32 = 2;
/// `Value.string_value`.
const VALUE_STRING: u32 = 17;
/// `DocumentTransform.document`.
const TRANSFORM_DOCUMENT: u32 = 1;
/// `DocumentTransform.field_transforms`.
const TRANSFORM_FIELDS: u32 = 2;
/// `FieldTransform.field_path`.
const FIELD_PATH: u32 = 1;
/// `FieldTransform.increment` (a Value).
const FIELD_INCREMENT: u32 = 3;
/// `Write.current_document` (a Precondition).
const WRITE_PRECONDITION: u32 = 4;
/// `Precondition.exists`.
const PRECONDITION_EXISTS: u32 = 1;
/// `Precondition.update_time` (a Timestamp).
const PRECONDITION_UPDATE_TIME: u32 = 2;
/// `Timestamp.seconds`.
const TIMESTAMP_SECONDS: u32 = 1;
/// `Timestamp.nanos`.
const TIMESTAMP_NANOS: u32 = 2;
/// `CommitResponse.commit_time` (a Timestamp).
const RESPONSE_COMMIT_TIME: u32 = 2;
/// `BatchGetDocumentsRequest.database`.
const GET_DATABASE: u32 = 1;
/// `BatchGetDocumentsRequest.documents` (names).
const GET_DOCUMENTS: u32 = 2;
/// `BatchGetDocumentsRequest.mask` (a DocumentMask).
const GET_MASK: u32 = 3;
/// `DocumentMask.field_paths`.
const MASK_FIELD_PATHS: u32 = 1;
/// `BatchGetDocumentsResponse.found` (a Document).
const ANSWER_FOUND: u32 = 1;
/// `BatchGetDocumentsResponse.missing` (a name).
const ANSWER_MISSING: u32 = 2;
/// `Document.update_time`.
const DOCUMENT_UPDATE_TIME: u32 = 4;
/// Wire types.
const WIRE_VARINT: u64 = 0;
const WIRE_FIXED64: u64 = 1;
const WIRE_DELIMITED: u64 = 2;
const WIRE_FIXED32: u64 = 5;

/// A `google.protobuf.Timestamp`: a document's update time, a Commit's
/// time.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Stamp {
    /// Seconds since the Unix epoch.
    pub seconds: i64,
    /// Nanoseconds within the second.
    pub nanos: i32,
}

/// A write's precondition (`Write.current_document`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Precondition {
    /// None: the write applies whatever the document is.
    Blind,
    /// `exists = false`: the document must not exist.
    Absent,
    /// `update_time`: the document must be as last written at that time.
    UpdatedAt(Stamp),
}

/// A field's value, as the floor writes them.
#[derive(Clone, Copy)]
pub enum Value<'a> {
    /// `boolean_value`.
    Bool(bool),
    /// `integer_value`.
    Int(i64),
    /// `string_value`.
    Str(&'a str),
}

/// A Commit being written: `database`, then the writes as they are put.
pub struct Commit {
    buf: Vec<u8>,
    writes: usize,
}

impl Commit {
    /// A Commit to `database` (`projects/{p}/databases/(default)`), room
    /// for about `bytes` of writes.
    pub fn new(database: &str, bytes: usize) -> Self {
        let mut buf = Vec::with_capacity(bytes + database.len() + 8);
        put_str(&mut buf, COMMIT_DATABASE, &[database]);
        Self { buf, writes: 0 }
    }

    /// Writes put so far.
    pub fn writes(&self) -> usize {
        self.writes
    }

    /// Puts an update of the document named by the concatenation of
    /// `name` to exactly `fields`, applied only if `precondition` holds.
    pub fn update(
        &mut self,
        name: &[&str],
        fields: &[(&str, Value<'_>)],
        precondition: Precondition,
    ) {
        let document = str_len(DOCUMENT_NAME, name)
            + fields
                .iter()
                .map(|field| delimited_len(DOCUMENT_FIELDS, entry_len(field)))
                .sum::<usize>();
        let condition = precondition_len(precondition);
        let condition_field = match condition {
            0 => 0,
            len => delimited_len(WRITE_PRECONDITION, len),
        };
        self.open_write(WRITE_UPDATE, document, condition_field);
        put_str(&mut self.buf, DOCUMENT_NAME, name);
        for field in fields {
            put_header(&mut self.buf, DOCUMENT_FIELDS, entry_len(field));
            put_str(&mut self.buf, ENTRY_KEY, &[field.0]);
            put_header(&mut self.buf, ENTRY_VALUE, value_len(field.1));
            put_value(&mut self.buf, field.1);
        }
        if condition > 0 {
            put_header(&mut self.buf, WRITE_PRECONDITION, condition);
            match precondition {
                Precondition::Blind => {}
                Precondition::Absent => put_varint_field(&mut self.buf, PRECONDITION_EXISTS, 0),
                Precondition::UpdatedAt(at) => {
                    put_header(&mut self.buf, PRECONDITION_UPDATE_TIME, stamp_len(at));
                    put_stamp(&mut self.buf, at);
                }
            }
        }
    }

    /// Puts an increment by `delta` of the field `field` of the document
    /// named by the concatenation of `name`.
    pub fn increment(&mut self, name: &[&str], field: &str, delta: i64) {
        let value = value_len(Value::Int(delta));
        let transform = str_len(FIELD_PATH, &[field]) + delimited_len(FIELD_INCREMENT, value);
        let document =
            str_len(TRANSFORM_DOCUMENT, name) + delimited_len(TRANSFORM_FIELDS, transform);
        self.open_write(WRITE_TRANSFORM, document, 0);
        put_str(&mut self.buf, TRANSFORM_DOCUMENT, name);
        put_header(&mut self.buf, TRANSFORM_FIELDS, transform);
        put_str(&mut self.buf, FIELD_PATH, &[field]);
        put_header(&mut self.buf, FIELD_INCREMENT, value);
        put_value(&mut self.buf, Value::Int(delta));
    }

    /// Starts the next `CommitRequest.writes` entry: a `Write` whose
    /// operation `operation` (tag) is `len` bytes, which the caller puts
    /// next, then `rest` bytes of its other fields.
    fn open_write(&mut self, operation: u32, len: usize, rest: usize) {
        put_header(
            &mut self.buf,
            COMMIT_WRITES,
            delimited_len(operation, len) + rest,
        );
        put_header(&mut self.buf, operation, len);
        self.writes += 1;
    }

    /// The request's bytes.
    pub fn finish(self) -> Vec<u8> {
        self.buf
    }
}

/// The commit time of a `CommitResponse`'s bytes (every write of the
/// Commit is stamped with it); `None` when the bytes are not one, or hold
/// no time.
pub fn commit_time(mut bytes: &[u8]) -> Option<Stamp> {
    let mut time = None;
    while !bytes.is_empty() {
        let key = take_varint(&mut bytes)?;
        let field = take_field(&mut bytes, key & 7)?;
        if key >> 3 == u64::from(RESPONSE_COMMIT_TIME) && key & 7 == WIRE_DELIMITED {
            time = Some(stamp(field)?);
        }
    }
    time
}

/// A `Timestamp`'s fields from its bytes.
fn stamp(mut bytes: &[u8]) -> Option<Stamp> {
    let mut at = Stamp::default();
    while !bytes.is_empty() {
        let key = take_varint(&mut bytes)?;
        let field = key >> 3;
        match key & 7 {
            // An int64 / int32 is on the wire its two's complement.
            WIRE_VARINT if field == u64::from(TIMESTAMP_SECONDS) => {
                at.seconds = take_varint(&mut bytes)? as i64;
            }
            WIRE_VARINT if field == u64::from(TIMESTAMP_NANOS) => {
                at.nanos = take_varint(&mut bytes)? as i64 as i32;
            }
            wire => {
                take_field(&mut bytes, wire)?;
            }
        }
    }
    Some(at)
}

/// Takes one field's value of wire type `wire` off `bytes`: a delimited
/// field's contents, or what the value took.
fn take_field<'b>(bytes: &mut &'b [u8], wire: u64) -> Option<&'b [u8]> {
    let len = match wire {
        WIRE_VARINT => {
            let before = *bytes;
            take_varint(bytes)?;
            return Some(&before[..before.len() - bytes.len()]);
        }
        WIRE_FIXED64 => 8,
        WIRE_DELIMITED => usize::try_from(take_varint(bytes)?).ok()?,
        WIRE_FIXED32 => 4,
        _ => return None,
    };
    let (field, rest) = bytes.split_at_checked(len)?;
    *bytes = rest;
    Some(field)
}

fn take_varint(bytes: &mut &[u8]) -> Option<u64> {
    let mut n = 0_u64;
    for (i, &byte) in bytes.iter().enumerate().take(10) {
        n |= u64::from(byte & 0x7f) << (7 * i);
        if byte < 0x80 {
            *bytes = &bytes[i + 1..];
            return Some(n);
        }
    }
    None
}

/// A precondition's length as a message (0: none is put).
fn precondition_len(precondition: Precondition) -> usize {
    match precondition {
        Precondition::Blind => 0,
        Precondition::Absent => varint_field_len(PRECONDITION_EXISTS, 0),
        Precondition::UpdatedAt(at) => delimited_len(PRECONDITION_UPDATE_TIME, stamp_len(at)),
    }
}

/// A timestamp's length as a message (zero fields left out, as proto3 does).
fn stamp_len(at: Stamp) -> usize {
    let seconds = match at.seconds {
        0 => 0,
        s => varint_field_len(TIMESTAMP_SECONDS, s as u64),
    };
    let nanos = match at.nanos {
        0 => 0,
        n => varint_field_len(TIMESTAMP_NANOS, i64::from(n) as u64),
    };
    seconds + nanos
}

fn put_stamp(buf: &mut Vec<u8>, at: Stamp) {
    if at.seconds != 0 {
        put_varint_field(buf, TIMESTAMP_SECONDS, at.seconds as u64);
    }
    if at.nanos != 0 {
        put_varint_field(buf, TIMESTAMP_NANOS, i64::from(at.nanos) as u64);
    }
}

/// A BatchGetDocuments being written: `database`, then the documents'
/// names as they are put, then the mask.
pub struct BatchGet {
    buf: Vec<u8>,
}

impl BatchGet {
    /// A read from `database`, room for about `documents` names.
    pub fn new(database: &str, documents: usize) -> Self {
        let mut buf = Vec::with_capacity(database.len() + 8 + documents * 120);
        put_str(&mut buf, GET_DATABASE, &[database]);
        Self { buf }
    }

    /// Asks for the document named by the concatenation of `name`.
    pub fn document(&mut self, name: &[&str]) {
        put_str(&mut self.buf, GET_DOCUMENTS, name);
    }

    /// The request's bytes, asking only for `fields` of each document.
    pub fn finish(mut self, fields: &[&str]) -> Vec<u8> {
        let mask = fields.iter().map(|f| str_len(MASK_FIELD_PATHS, &[f])).sum();
        put_header(&mut self.buf, GET_MASK, mask);
        for field in fields {
            put_str(&mut self.buf, MASK_FIELD_PATHS, &[field]);
        }
        self.buf
    }
}

/// One BatchGetDocuments answer message, as the floor reads it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Got {
    /// A document found: its name, its `likes` (0 when it has none) and
    /// its update time.
    Found {
        name: String,
        likes: i64,
        updated: Stamp,
    },
    /// A document that does not exist.
    Missing(String),
    /// Neither (a transaction id or a read time alone).
    Other,
}

impl Got {
    /// The document's name, when the message is about one.
    pub fn name(&self) -> Option<&str> {
        match self {
            Got::Found { name, .. } | Got::Missing(name) => Some(name),
            Got::Other => None,
        }
    }
}

/// A `BatchGetDocumentsResponse`'s bytes read in place; `None` when they
/// are not one.
pub fn batch_get_answer(mut bytes: &[u8]) -> Option<Got> {
    let mut got = Got::Other;
    while !bytes.is_empty() {
        let key = take_varint(&mut bytes)?;
        let field = take_field(&mut bytes, key & 7)?;
        let delimited = key & 7 == WIRE_DELIMITED;
        match key >> 3 {
            n if n == u64::from(ANSWER_FOUND) && delimited => got = found(field)?,
            n if n == u64::from(ANSWER_MISSING) && delimited => {
                got = Got::Missing(std::str::from_utf8(field).ok()?.to_string());
            }
            _ => {}
        }
    }
    Some(got)
}

/// A found `Document`'s name, `likes` and update time.
fn found(mut bytes: &[u8]) -> Option<Got> {
    let (mut name, mut likes, mut updated) = (String::new(), 0, Stamp::default());
    while !bytes.is_empty() {
        let key = take_varint(&mut bytes)?;
        let field = take_field(&mut bytes, key & 7)?;
        if key & 7 != WIRE_DELIMITED {
            continue;
        }
        match key >> 3 {
            n if n == u64::from(DOCUMENT_NAME) => name = std::str::from_utf8(field).ok()?.into(),
            n if n == u64::from(DOCUMENT_FIELDS) => {
                if let Some(n) = likes_entry(field)? {
                    likes = n;
                }
            }
            n if n == u64::from(DOCUMENT_UPDATE_TIME) => updated = stamp(field)?,
            _ => {}
        }
    }
    Some(Got::Found {
        name,
        likes,
        updated,
    })
}

/// A map entry of `Document.fields`: its integer value when its key is
/// `likes` (`Some(None)` for any other entry).
fn likes_entry(mut bytes: &[u8]) -> Option<Option<i64>> {
    let (mut is_likes, mut value) = (false, None);
    while !bytes.is_empty() {
        let key = take_varint(&mut bytes)?;
        let field = take_field(&mut bytes, key & 7)?;
        match key >> 3 {
            n if n == u64::from(ENTRY_KEY) => is_likes = field == b"likes",
            n if n == u64::from(ENTRY_VALUE) => {
                let mut inner = field;
                while !inner.is_empty() {
                    let key = take_varint(&mut inner)?;
                    let mut part = take_field(&mut inner, key & 7)?;
                    if key == u64::from(VALUE_INTEGER << 3) {
                        // An int64 is on the wire its two's complement.
                        value = Some(take_varint(&mut part)? as i64);
                    }
                }
            }
            _ => {}
        }
    }
    Some(value.filter(|_| is_likes))
}

/// A map entry's length: its key and its value.
fn entry_len((key, value): &(&str, Value<'_>)) -> usize {
    str_len(ENTRY_KEY, &[key]) + delimited_len(ENTRY_VALUE, value_len(*value))
}

fn value_len(value: Value<'_>) -> usize {
    match value {
        Value::Bool(b) => varint_field_len(VALUE_BOOLEAN, u64::from(b)),
        // An int64 is on the wire its two's complement as a u64.
        Value::Int(n) => varint_field_len(VALUE_INTEGER, n as u64),
        Value::Str(s) => str_len(VALUE_STRING, &[s]),
    }
}

fn put_value(buf: &mut Vec<u8>, value: Value<'_>) {
    match value {
        Value::Bool(b) => put_varint_field(buf, VALUE_BOOLEAN, u64::from(b)),
        Value::Int(n) => put_varint_field(buf, VALUE_INTEGER, n as u64),
        Value::Str(s) => put_str(buf, VALUE_STRING, &[s]),
    }
}

/// A length-delimited field's whole length: key, length prefix, `len`.
fn delimited_len(tag: u32, len: usize) -> usize {
    varint_len(u64::from(tag << 3)) + varint_len(len as u64) + len
}

/// A string field's whole length, the string being `parts` concatenated.
fn str_len(tag: u32, parts: &[&str]) -> usize {
    delimited_len(tag, parts.iter().map(|p| p.len()).sum())
}

fn varint_field_len(tag: u32, n: u64) -> usize {
    varint_len(u64::from(tag << 3)) + varint_len(n)
}

fn varint_len(n: u64) -> usize {
    // 7 bits per byte; zero takes one byte.
    (64 - (n | 1).leading_zeros() as usize).div_ceil(7)
}

/// A length-delimited field's key and length prefix.
fn put_header(buf: &mut Vec<u8>, tag: u32, len: usize) {
    put_varint(buf, u64::from(tag << 3 | 2));
    put_varint(buf, len as u64);
}

fn put_str(buf: &mut Vec<u8>, tag: u32, parts: &[&str]) {
    put_header(buf, tag, parts.iter().map(|p| p.len()).sum());
    for part in parts {
        buf.extend_from_slice(part.as_bytes());
    }
}

fn put_varint_field(buf: &mut Vec<u8>, tag: u32, n: u64) {
    put_varint(buf, u64::from(tag << 3));
    put_varint(buf, n);
}

fn put_varint(buf: &mut Vec<u8>, mut n: u64) {
    while n >= 0x80 {
        buf.push((n as u8 & 0x7f) | 0x80);
        n >>= 7;
    }
    buf.push(n as u8);
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use gcloud_sdk::google::firestore::v1 as fs;
    use gcloud_sdk::prost::Message;

    use super::*;

    fn value(v: fs::value::ValueType) -> Option<fs::Value> {
        Some(fs::Value {
            value_type: Some(v),
        })
    }

    #[test]
    fn the_bytes_decode_as_the_generated_commit_of_the_same_writes() {
        use fs::value::ValueType;
        let long = "u".repeat(300);
        let mut commit = Commit::new("projects/p/databases/(default)", 0);
        commit.update(
            &["projects/p/databases/(default)/documents/", "a/", &long],
            &[
                ("liked", Value::Bool(true)),
                ("seq", Value::Int(300)),
                ("eventId", Value::Str("e-1")),
                ("off", Value::Bool(false)),
                ("zero", Value::Int(0)),
            ],
            Precondition::Blind,
        );
        commit.increment(&["counters/", "p1"], "likes", -2);
        commit.increment(&["counters/p2"], "likes", i64::MAX);
        assert_eq!(commit.writes(), 3);
        let decoded = fs::CommitRequest::decode(&commit.finish()[..]).expect("decodes");
        let fields = HashMap::from([
            ("liked".to_string(), value(ValueType::BooleanValue(true))),
            ("seq".to_string(), value(ValueType::IntegerValue(300))),
            (
                "eventId".to_string(),
                value(ValueType::StringValue("e-1".into())),
            ),
            ("off".to_string(), value(ValueType::BooleanValue(false))),
            ("zero".to_string(), value(ValueType::IntegerValue(0))),
        ]);
        let increment = |document: &str, delta: i64| fs::Write {
            operation: Some(fs::write::Operation::Transform(fs::DocumentTransform {
                document: document.into(),
                field_transforms: vec![fs::document_transform::FieldTransform {
                    field_path: "likes".into(),
                    transform_type: Some(
                        fs::document_transform::field_transform::TransformType::Increment(
                            fs::Value {
                                value_type: Some(ValueType::IntegerValue(delta)),
                            },
                        ),
                    ),
                }],
            })),
            ..Default::default()
        };
        let expected = fs::CommitRequest {
            database: "projects/p/databases/(default)".into(),
            writes: vec![
                fs::Write {
                    operation: Some(fs::write::Operation::Update(fs::Document {
                        name: format!("projects/p/databases/(default)/documents/a/{long}"),
                        fields: fields
                            .into_iter()
                            .map(|(k, v)| (k, v.expect("set")))
                            .collect(),
                        ..Default::default()
                    })),
                    ..Default::default()
                },
                increment("counters/p1", -2),
                increment("counters/p2", i64::MAX),
            ],
            ..Default::default()
        };
        assert_eq!(decoded, expected);
    }

    #[test]
    fn a_precondition_decodes_as_the_generated_one() {
        use fs::precondition::ConditionType;
        let at = |seconds, nanos| Stamp { seconds, nanos };
        let cases = [
            (Precondition::Absent, Some(ConditionType::Exists(false))),
            (
                Precondition::UpdatedAt(at(1_765_000_000, 123_456_789)),
                Some(ConditionType::UpdateTime(
                    gcloud_sdk::prost_types::Timestamp {
                        seconds: 1_765_000_000,
                        nanos: 123_456_789,
                    },
                )),
            ),
            (
                Precondition::UpdatedAt(at(0, 0)),
                Some(ConditionType::UpdateTime(Default::default())),
            ),
            (Precondition::Blind, None),
        ];
        for (precondition, expected) in cases {
            let mut commit = Commit::new("projects/p/databases/(default)", 0);
            commit.update(&["d/", "x"], &[("n", Value::Int(1))], precondition);
            let decoded = fs::CommitRequest::decode(&commit.finish()[..]).expect("decodes");
            let [write] = &decoded.writes[..] else {
                panic!("one write: {decoded:?}");
            };
            assert_eq!(
                write.current_document.map(|p| p.condition_type),
                expected.map(Some),
                "{precondition:?}"
            );
            let Some(fs::write::Operation::Update(doc)) = &write.operation else {
                panic!("an update: {write:?}");
            };
            assert_eq!(doc.name, "d/x", "{precondition:?}");
        }
    }

    #[test]
    fn the_commit_time_is_read_past_every_write_result() {
        use gcloud_sdk::prost_types::Timestamp;
        let time = |seconds, nanos| Some(Timestamp { seconds, nanos });
        let response = fs::CommitResponse {
            write_results: (0..700)
                .map(|i| fs::WriteResult {
                    update_time: time(1_765_000_000 + i, 5),
                    transform_results: vec![fs::Value {
                        value_type: Some(fs::value::ValueType::IntegerValue(i)),
                    }],
                })
                .collect(),
            commit_time: time(1_765_000_001, 999_999_999),
        };
        assert_eq!(
            commit_time(&response.encode_to_vec()),
            Some(Stamp {
                seconds: 1_765_000_001,
                nanos: 999_999_999
            })
        );
        let no_time = fs::CommitResponse {
            commit_time: None,
            ..response.clone()
        };
        assert_eq!(commit_time(&no_time.encode_to_vec()), None);
        let bytes = response.encode_to_vec();
        assert_eq!(commit_time(&bytes[..bytes.len() - 1]), None, "cut short");
        assert_eq!(commit_time(&[0xff; 11]), None, "a varint too long");
    }

    #[test]
    fn a_varint_takes_seven_bits_per_byte() {
        for (n, len) in [
            (0, 1),
            (127, 1),
            (128, 2),
            (16_383, 2),
            (16_384, 3),
            (u64::MAX, 10),
        ] {
            let mut buf = Vec::new();
            put_varint(&mut buf, n);
            assert_eq!((buf.len(), varint_len(n)), (len, len), "{n}");
        }
    }

    #[test]
    fn a_batch_get_decodes_as_the_generated_request() {
        let mut request = BatchGet::new("projects/p/databases/(default)", 2);
        request.document(&["d/", "counters/p1"]);
        request.document(&["d/rollups/p1"]);
        let decoded =
            fs::BatchGetDocumentsRequest::decode(&request.finish(&["likes"])[..]).expect("decodes");
        assert_eq!(
            decoded,
            fs::BatchGetDocumentsRequest {
                database: "projects/p/databases/(default)".into(),
                documents: vec!["d/counters/p1".into(), "d/rollups/p1".into()],
                mask: Some(fs::DocumentMask {
                    field_paths: vec!["likes".into()],
                }),
                ..Default::default()
            }
        );
    }

    #[test]
    fn a_batch_get_answer_is_read_in_place_found_missing_or_neither() {
        use fs::batch_get_documents_response::Result as Answer;
        use gcloud_sdk::prost_types::Timestamp;
        let at = Timestamp {
            seconds: 1_765_000_000,
            nanos: 42,
        };
        let found = |fields: Vec<(&str, fs::value::ValueType)>| fs::BatchGetDocumentsResponse {
            result: Some(Answer::Found(fs::Document {
                name: "d/counters/p1".into(),
                fields: fields
                    .into_iter()
                    .map(|(k, v)| {
                        (
                            k.to_string(),
                            fs::Value {
                                value_type: Some(v),
                            },
                        )
                    })
                    .collect(),
                create_time: Some(Timestamp {
                    seconds: 1,
                    nanos: 0,
                }),
                update_time: Some(at),
            })),
            read_time: Some(at),
            ..Default::default()
        };
        let updated = Stamp {
            seconds: 1_765_000_000,
            nanos: 42,
        };
        use fs::value::ValueType::{IntegerValue, StringValue};
        for (fields, likes) in [
            (vec![("likes", IntegerValue(-7))], -7),
            (
                vec![("other", IntegerValue(5)), ("likes", IntegerValue(3))],
                3,
            ),
            (vec![("likes", StringValue("x".into()))], 0),
            (vec![("liked", IntegerValue(9))], 0),
            (vec![], 0),
        ] {
            assert_eq!(
                batch_get_answer(&found(fields.clone()).encode_to_vec()),
                Some(Got::Found {
                    name: "d/counters/p1".into(),
                    likes,
                    updated
                }),
                "{fields:?}"
            );
        }
        let missing = fs::BatchGetDocumentsResponse {
            result: Some(Answer::Missing("d/rollups/p1".into())),
            read_time: Some(at),
            ..Default::default()
        };
        assert_eq!(
            batch_get_answer(&missing.encode_to_vec()),
            Some(Got::Missing("d/rollups/p1".into()))
        );
        let neither = fs::BatchGetDocumentsResponse {
            transaction: b"t".to_vec(),
            read_time: Some(at),
            ..Default::default()
        };
        assert_eq!(batch_get_answer(&neither.encode_to_vec()), Some(Got::Other));
        let bytes = found(vec![("likes", IntegerValue(3))]).encode_to_vec();
        assert_eq!(
            batch_get_answer(&bytes[..bytes.len() - 1]),
            None,
            "cut short"
        );
    }
}
