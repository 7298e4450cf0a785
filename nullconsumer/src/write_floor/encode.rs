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
    /// `name` to exactly `fields`.
    pub fn update(&mut self, name: &[&str], fields: &[(&str, Value<'_>)]) {
        let document = str_len(DOCUMENT_NAME, name)
            + fields
                .iter()
                .map(|field| delimited_len(DOCUMENT_FIELDS, entry_len(field)))
                .sum::<usize>();
        self.open_write(WRITE_UPDATE, document);
        put_str(&mut self.buf, DOCUMENT_NAME, name);
        for field in fields {
            put_header(&mut self.buf, DOCUMENT_FIELDS, entry_len(field));
            put_str(&mut self.buf, ENTRY_KEY, &[field.0]);
            put_header(&mut self.buf, ENTRY_VALUE, value_len(field.1));
            put_value(&mut self.buf, field.1);
        }
    }

    /// Puts an increment by `delta` of the field `field` of the document
    /// named by the concatenation of `name`.
    pub fn increment(&mut self, name: &[&str], field: &str, delta: i64) {
        let value = value_len(Value::Int(delta));
        let transform = str_len(FIELD_PATH, &[field]) + delimited_len(FIELD_INCREMENT, value);
        let document =
            str_len(TRANSFORM_DOCUMENT, name) + delimited_len(TRANSFORM_FIELDS, transform);
        self.open_write(WRITE_TRANSFORM, document);
        put_str(&mut self.buf, TRANSFORM_DOCUMENT, name);
        put_header(&mut self.buf, TRANSFORM_FIELDS, transform);
        put_str(&mut self.buf, FIELD_PATH, &[field]);
        put_header(&mut self.buf, FIELD_INCREMENT, value);
        put_value(&mut self.buf, Value::Int(delta));
    }

    /// Starts the next `CommitRequest.writes` entry: a `Write` whose one
    /// field is its operation `operation` (tag), of `len` bytes, which the
    /// caller puts next.
    fn open_write(&mut self, operation: u32, len: usize) {
        put_header(&mut self.buf, COMMIT_WRITES, delimited_len(operation, len));
        put_header(&mut self.buf, operation, len);
        self.writes += 1;
    }

    /// The request's bytes.
    pub fn finish(self) -> Vec<u8> {
        self.buf
    }
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
}
