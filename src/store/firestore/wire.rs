//! Lean, wire-compatible copies of the Firestore messages on the store's
//! hot path (a batch's BatchGetDocuments and Commit, the rollup refresher's
//! BatchWrite, whose request is a Commit's with no transaction): a document's fields
//! as a `Vec` of entries instead of a `HashMap<String, Value>`, and
//! responses that keep only what the store reads (the BatchGetDocuments
//! responses are read in place, by [`super::frame`]).
//!
//! Invariants: every message here encodes exactly as its
//! `google.firestore.v1` counterpart (a protobuf map is on the wire a
//! repeated `{key = 1, value = 2}` entry message, and the tags are the
//! same; tests decode one with the other); a response type may leave out
//! fields (they are skipped when decoding), never change one. Values,
//! preconditions, masks and transforms are gcloud-sdk's own types.

use gcloud_sdk::google::firestore::v1 as fs;
use gcloud_sdk::prost::bytes::BufMut;
use gcloud_sdk::prost::{encoding, Message};
use gcloud_sdk::prost_types::Timestamp;
use gcloud_sdk::tonic::client::Grpc;
use gcloud_sdk::tonic::codec::{Codec, EncodeBuf, Encoder};
use gcloud_sdk::tonic::codegen::http::uri::PathAndQuery;
use gcloud_sdk::tonic::{GrpcMethod, IntoRequest, Response, Status, Streaming};

use fs::document_transform::FieldTransform;

use super::frame::{BatchGetFrame, FrameDecoder};

/// One field of a document: an entry of `Document.fields`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct Field {
    /// The field's name.
    #[prost(string, tag = "1")]
    pub key: String,
    /// Its value.
    #[prost(message, optional, tag = "2")]
    pub value: Option<fs::Value>,
}

/// `google.firestore.v1.Document` without `create_time` (skipped when read).
#[derive(Clone, PartialEq, prost::Message)]
pub struct Document {
    /// Full document name.
    #[prost(string, tag = "1")]
    pub name: String,
    /// Its fields, in any order, each name once.
    #[prost(message, repeated, tag = "2")]
    pub fields: Vec<Field>,
    /// When it was last written (set by the server, never sent).
    #[prost(message, optional, tag = "4")]
    pub update_time: Option<Timestamp>,
}

/// `google.firestore.v1.Write` whose operation is an update or a delete
/// (set exactly one: they are the two members of its `operation` oneof
/// used here, so the wire carries the one that is set).
#[derive(Clone, PartialEq, prost::Message)]
pub struct Write {
    /// The document written (`operation.update`).
    #[prost(message, optional, tag = "1")]
    pub update: Option<Document>,
    /// The name of the document deleted (`operation.delete`).
    #[prost(string, optional, tag = "2")]
    pub delete: Option<String>,
    /// The fields the update sets (all of the document's when absent).
    #[prost(message, optional, tag = "3")]
    pub update_mask: Option<fs::DocumentMask>,
    /// Transforms applied after the update.
    #[prost(message, repeated, tag = "7")]
    pub update_transforms: Vec<FieldTransform>,
    /// The condition the document must meet.
    #[prost(message, optional, tag = "4")]
    pub current_document: Option<fs::Precondition>,
}

/// `google.firestore.v1.CommitResponse`, of which the store reads only the
/// commit time (a write result per write is skipped, undecoded).
#[derive(Clone, PartialEq, prost::Message)]
pub struct CommitResponse {
    /// When the commit applied: a read at this time or later sees it.
    #[prost(message, optional, tag = "2")]
    pub commit_time: Option<Timestamp>,
}

/// The gRPC service path of a Firestore method.
const COMMIT: &str = "/google.firestore.v1.Firestore/Commit";
const BATCH_GET: &str = "/google.firestore.v1.Firestore/BatchGetDocuments";
const BATCH_WRITE: &str = "/google.firestore.v1.Firestore/BatchWrite";

/// A gRPC client over the authenticated channel of a Firestore client.
pub type Channel = Grpc<gcloud_sdk::GoogleAuthMiddleware>;

/// A `google.firestore.v1.CommitRequest` encoded as it is built: the
/// database first (field 1), then each write framed as field 2, the
/// transaction last (field 3), the order prost encodes them in. Finished
/// with no transaction it is also a `BatchWriteRequest` (the same two
/// fields, no labels).
#[derive(Clone, Debug)]
pub struct EncodedCommit {
    buf: Vec<u8>,
    writes: usize,
}

impl EncodedCommit {
    /// A request on `database` with no write yet, room for `capacity` bytes.
    pub fn new(database: &str, capacity: usize) -> Self {
        let mut buf = Vec::with_capacity(capacity);
        put_str(&mut buf, 1, database);
        Self { buf, writes: 0 }
    }

    /// Appends `write`.
    pub fn push(&mut self, write: &Write) {
        put_header(&mut self.buf, 2, write.encoded_len());
        write.encode_raw(&mut self.buf);
        self.writes += 1;
    }

    /// Appends a write already encoded by `encode` into the `len` bytes it
    /// says (the caller computed `len` as the encoded length of a `Write`).
    pub fn push_encoded(&mut self, len: usize, encode: impl FnOnce(&mut Vec<u8>)) {
        put_header(&mut self.buf, 2, len);
        let start = self.buf.len();
        encode(&mut self.buf);
        debug_assert_eq!(self.buf.len() - start, len, "a write's length as computed");
        self.writes += 1;
    }

    /// Writes appended so far.
    pub fn writes(&self) -> usize {
        self.writes
    }

    /// The request's bytes, committing `transaction` (none when empty).
    pub fn finish(mut self, transaction: &[u8]) -> Vec<u8> {
        if !transaction.is_empty() {
            put_header(&mut self.buf, 3, transaction.len());
            self.buf.extend_from_slice(transaction);
        }
        self.buf
    }
}

/// A `google.firestore.v1.BatchGetDocumentsRequest` encoded from borrowed
/// names: the database (field 1), each document (field 2), then the rest
/// of `options` (its mask and consistency selector, fields 3 and up; its
/// own database and documents must be empty), the order prost encodes
/// them in, so the bytes are the ones of the whole request built and
/// encoded (tests compare). The names are not copied into a request.
pub fn encode_batch_get<'a>(
    database: &str,
    documents: impl IntoIterator<Item = &'a str>,
    options: &fs::BatchGetDocumentsRequest,
    capacity: usize,
) -> Vec<u8> {
    debug_assert!(options.database.is_empty() && options.documents.is_empty());
    let mut buf = Vec::with_capacity(capacity + options.encoded_len());
    put_str(&mut buf, 1, database);
    for name in documents {
        put_str(&mut buf, 2, name);
    }
    options.encode_raw(&mut buf);
    buf
}

/// The bytes of a length-delimited field `tag` holding `len` bytes.
pub fn len_field(tag: u32, len: usize) -> usize {
    encoding::key_len(tag) + encoding::encoded_len_varint(len as u64) + len
}

/// Appends the key and length of a length-delimited field `tag`.
pub fn put_header(buf: &mut Vec<u8>, tag: u32, len: usize) {
    put_key(buf, tag, encoding::WireType::LengthDelimited);
    put_raw_varint(buf, len as u64);
}

/// Appends the string field `tag`.
pub fn put_str(buf: &mut Vec<u8>, tag: u32, s: &str) {
    put_header(buf, tag, s.len());
    buf.extend_from_slice(s.as_bytes());
}

/// Appends the varint field `tag` (bool, int32, int64, enum: as prost
/// encodes them, negatives sign-extended to 64 bits).
pub fn put_varint(buf: &mut Vec<u8>, tag: u32, n: u64) {
    put_key(buf, tag, encoding::WireType::Varint);
    put_raw_varint(buf, n);
}

/// Appends the key of field `tag` of `wire_type`, the bytes prost's
/// `encode_key` writes (`tag` is at most 2^29 - 1, as protobuf allows).
#[inline(always)]
fn put_key(buf: &mut Vec<u8>, tag: u32, wire_type: encoding::WireType) {
    put_raw_varint(buf, u64::from(tag << 3 | wire_type as u32));
}

/// Appends `n` as a base-128 varint, the bytes prost's `encode_varint`
/// writes, straight into the vector: prost's goes through `BufMut`, a
/// capacity check and a chunk lookup per byte, and keys and lengths are
/// most of a commit's bytes after the names (`cargo bench --bench
/// instructions`, `batch_build_1000`).
#[inline(always)]
fn put_raw_varint(buf: &mut Vec<u8>, mut n: u64) {
    while n >= 0x80 {
        buf.push((n as u8) | 0x80);
        n >>= 7;
    }
    buf.push(n as u8);
}

/// The bytes of the varint field `tag` holding `n`.
pub fn varint_field(tag: u32, n: u64) -> usize {
    encoding::key_len(tag) + encoding::encoded_len_varint(n)
}

/// The bytes of a `Timestamp` message's fields (defaults left out).
pub fn timestamp_len(t: &Timestamp) -> usize {
    let mut len = 0;
    if t.seconds != 0 {
        len += varint_field(1, t.seconds as u64);
    }
    if t.nanos != 0 {
        len += varint_field(2, i64::from(t.nanos) as u64);
    }
    len
}

/// Appends a `Timestamp` message's fields.
pub fn put_timestamp(buf: &mut Vec<u8>, t: &Timestamp) {
    if t.seconds != 0 {
        put_varint(buf, 1, t.seconds as u64);
    }
    if t.nanos != 0 {
        put_varint(buf, 2, i64::from(t.nanos) as u64);
    }
}

/// Calls Commit with a request encoded by [`EncodedCommit`] (as the
/// generated client calls it: same path, same method extension), its
/// deadline `timeout` sent as `grpc-timeout`.
pub async fn commit(
    channel: &mut Channel,
    request: Vec<u8>,
    timeout: std::time::Duration,
) -> Result<Response<CommitResponse>, Status> {
    unary(channel, request, timeout, "Commit", COMMIT).await
}

/// Calls BatchWrite with a request encoded by [`EncodedCommit`] and
/// finished with no transaction (a `BatchWriteRequest`'s database and
/// writes are a `CommitRequest`'s fields 1 and 2), as [`commit`] calls
/// Commit; reads each write's status.
pub async fn batch_write(
    channel: &mut Channel,
    request: Vec<u8>,
    timeout: std::time::Duration,
) -> Result<Response<fs::BatchWriteResponse>, Status> {
    unary(channel, request, timeout, "BatchWrite", BATCH_WRITE).await
}

/// Calls the unary Firestore `method` at `path` with bytes already
/// encoded, as the generated client calls it (same path, same method
/// extension), its deadline `timeout` sent as `grpc-timeout`.
async fn unary<R: Message + Default + Send + 'static>(
    channel: &mut Channel,
    request: Vec<u8>,
    timeout: std::time::Duration,
    method: &'static str,
    path: &'static str,
) -> Result<Response<R>, Status> {
    channel.ready().await.map_err(not_ready)?;
    let mut request = request.into_request();
    request.set_timeout(timeout);
    request
        .extensions_mut()
        .insert(GrpcMethod::new("google.firestore.v1.Firestore", method));
    channel
        .unary(request, PathAndQuery::from_static(path), Encoded::default())
        .await
}

/// Sends bytes already encoded; reads `R` (a prost message).
struct Encoded<R>(std::marker::PhantomData<R>);

impl<R> Default for Encoded<R> {
    fn default() -> Self {
        Self(std::marker::PhantomData)
    }
}

/// Copies the request's bytes into the frame.
struct Copy;

impl<R: Message + Default + Send + 'static> Codec for Encoded<R> {
    type Encode = Vec<u8>;
    type Decode = R;
    type Encoder = Copy;
    type Decoder = <tonic_prost::ProstCodec<R, R> as Codec>::Decoder;

    fn encoder(&mut self) -> Copy {
        Copy
    }

    fn decoder(&mut self) -> Self::Decoder {
        tonic_prost::ProstCodec::<R, R>::default().decoder()
    }
}

impl Encoder for Copy {
    type Item = Vec<u8>;
    type Error = Status;

    fn encode(&mut self, item: Vec<u8>, dst: &mut EncodeBuf<'_>) -> Result<(), Status> {
        dst.put_slice(&item);
        Ok(())
    }
}

/// Sends bytes already encoded; reads each response as a
/// [`BatchGetFrame`] (its bytes, checked, read in place).
#[derive(Default)]
struct EncodedFrames;

impl Codec for EncodedFrames {
    type Encode = Vec<u8>;
    type Decode = BatchGetFrame;
    type Encoder = Copy;
    type Decoder = FrameDecoder;

    fn encoder(&mut self) -> Copy {
        Copy
    }

    fn decoder(&mut self) -> FrameDecoder {
        FrameDecoder
    }
}

/// Calls BatchGetDocuments with a request encoded by [`encode_batch_get`],
/// reading the responses in place ([`BatchGetFrame`]: no message built,
/// no name or value copied).
pub async fn batch_get(
    channel: &mut Channel,
    request: Vec<u8>,
    timeout: std::time::Duration,
) -> Result<Response<Streaming<BatchGetFrame>>, Status> {
    channel.ready().await.map_err(not_ready)?;
    let mut request = request.into_request();
    request.set_timeout(timeout);
    request.extensions_mut().insert(GrpcMethod::new(
        "google.firestore.v1.Firestore",
        "BatchGetDocuments",
    ));
    channel
        .server_streaming(request, PathAndQuery::from_static(BATCH_GET), EncodedFrames)
        .await
}

fn not_ready(error: impl Into<gcloud_sdk::tonic::codegen::StdError>) -> Status {
    Status::unknown(format!("Service was not ready: {}", error.into()))
}

/// `write` as gcloud-sdk decodes it off the wire (for tests and tools that
/// read a write back).
pub fn to_sdk(write: &Write) -> fs::Write {
    // Our own encoding of a wire-compatible message always decodes.
    fs::Write::decode(write.encode_to_vec().as_slice()).unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;
    use fs::precondition::ConditionType;
    use fs::value::ValueType;

    fn value(v: ValueType) -> fs::Value {
        fs::Value {
            value_type: Some(v),
        }
    }

    fn time(seconds: i64) -> Timestamp {
        Timestamp { seconds, nanos: 7 }
    }

    fn transform() -> FieldTransform {
        FieldTransform {
            field_path: "updatedAt".into(),
            transform_type: Some(
                fs::document_transform::field_transform::TransformType::SetToServerValue(1),
            ),
        }
    }

    /// A lean write and the SDK's, with `fields` (in this order) and a
    /// precondition on `update_time`.
    fn both(fields: &[(&str, ValueType)]) -> (Write, fs::Write) {
        let precondition = Some(fs::Precondition {
            condition_type: Some(ConditionType::UpdateTime(time(5))),
        });
        let lean = Write {
            update: Some(Document {
                name: "projects/p/databases/d/documents/likes/1".into(),
                fields: fields
                    .iter()
                    .map(|(k, v)| Field {
                        key: (*k).into(),
                        value: Some(value(v.clone())),
                    })
                    .collect(),
                update_time: None,
            }),
            delete: None,
            update_mask: Some(fs::DocumentMask {
                field_paths: vec!["postId".into()],
            }),
            update_transforms: vec![transform()],
            current_document: precondition,
        };
        let sdk = fs::Write {
            operation: Some(fs::write::Operation::Update(fs::Document {
                name: "projects/p/databases/d/documents/likes/1".into(),
                fields: fields
                    .iter()
                    .map(|(k, v)| ((*k).to_string(), value(v.clone())))
                    .collect(),
                ..Default::default()
            })),
            update_mask: Some(fs::DocumentMask {
                field_paths: vec!["postId".into()],
            }),
            update_transforms: vec![transform()],
            current_document: precondition,
        };
        (lean, sdk)
    }

    #[test]
    fn keys_and_varints_are_the_bytes_prost_writes() {
        let mut values = vec![
            0,
            1,
            127,
            128,
            255,
            16_383,
            16_384,
            u64::from(u32::MAX),
            u64::MAX,
        ];
        values.extend((0..64).map(|bit| 1u64 << bit));
        values.extend((1..64).map(|bit| (1u64 << bit) - 1));
        values.push(-1i64 as u64);
        values.push(i64::from(i32::MIN) as u64);
        let tags = [1, 2, 15, 16, 2_047, 2_048, 262_143, 262_144, (1 << 29) - 1];
        for &tag in &tags {
            for &n in &values {
                let (mut ours, mut theirs) = (Vec::new(), Vec::new());
                put_varint(&mut ours, tag, n);
                encoding::encode_key(tag, encoding::WireType::Varint, &mut theirs);
                encoding::encode_varint(n, &mut theirs);
                assert_eq!(ours, theirs, "varint field {tag} = {n}");
                assert_eq!(ours.len(), varint_field(tag, n));
                let len = usize::try_from(n.min(1 << 40)).unwrap();
                let (mut ours, mut theirs) = (vec![9], vec![9]);
                put_header(&mut ours, tag, len);
                encoding::encode_key(tag, encoding::WireType::LengthDelimited, &mut theirs);
                encoding::encode_varint(len as u64, &mut theirs);
                assert_eq!(ours, theirs, "header of field {tag}, {len} bytes");
                assert_eq!(ours.len() - 1 + len, len_field(tag, len));
            }
        }
    }

    #[test]
    fn a_lean_write_encodes_byte_identical_to_the_sdk_write() {
        // One field: the SDK's map has a single order, so the bytes can match.
        let (lean, sdk) = both(&[("postId", ValueType::StringValue("p".into()))]);
        assert_eq!(lean.encode_to_vec(), sdk.encode_to_vec());
        let lean = Write {
            delete: Some("projects/p/databases/d/documents/q/1".into()),
            current_document: Some(fs::Precondition {
                condition_type: Some(ConditionType::Exists(true)),
            }),
            ..Default::default()
        };
        let sdk = fs::Write {
            operation: Some(fs::write::Operation::Delete(
                "projects/p/databases/d/documents/q/1".into(),
            )),
            current_document: lean.current_document,
            ..Default::default()
        };
        assert_eq!(lean.encode_to_vec(), sdk.encode_to_vec());
    }

    #[test]
    fn a_lean_commit_request_decodes_as_the_sdk_request() {
        let fields = [
            ("postId", ValueType::StringValue("p".into())),
            ("liked", ValueType::BooleanValue(true)),
            ("seq", ValueType::IntegerValue(-3)),
            ("occurredAt", ValueType::TimestampValue(time(-1))),
        ];
        let (lean, sdk) = both(&fields);
        let mut request = EncodedCommit::new("projects/p/databases/d", 0);
        request.push(&lean);
        request.push(&lean);
        assert_eq!(request.writes(), 2);
        let bytes = request.finish(&[1, 2, 3]);
        let decoded = fs::CommitRequest::decode(bytes.as_slice()).expect("the SDK decodes it");
        let expected = fs::CommitRequest {
            database: "projects/p/databases/d".into(),
            writes: vec![sdk.clone(), sdk],
            transaction: vec![1, 2, 3],
            ..Default::default()
        };
        assert_eq!(decoded, expected);
        // One field per write: the SDK's maps have one order, so the bytes match.
        let (lean, sdk) = both(&fields[..1]);
        let mut request = EncodedCommit::new("d", 0);
        request.push(&lean);
        let expected = fs::CommitRequest {
            database: "d".into(),
            writes: vec![sdk],
            ..Default::default()
        };
        assert_eq!(request.finish(&[]), expected.encode_to_vec());
    }

    #[test]
    fn a_batch_get_request_from_borrowed_names_is_the_sdk_request_byte_for_byte() {
        use fs::batch_get_documents_request::ConsistencySelector as S;
        let selectors = [
            None,
            Some(S::Transaction(vec![7, 0, 7])),
            Some(S::NewTransaction(fs::TransactionOptions::default())),
            Some(S::ReadTime(time(5))),
        ];
        let masks = [
            None,
            Some(fs::DocumentMask {
                field_paths: vec!["liked".into(), "eventId".into()],
            }),
        ];
        let names = ["projects/p/databases/d/documents/likes/a", "b", ""];
        for selector in &selectors {
            for mask in &masks {
                for count in 0..=names.len() {
                    let options = fs::BatchGetDocumentsRequest {
                        mask: mask.clone(),
                        consistency_selector: selector.clone(),
                        ..Default::default()
                    };
                    let bytes = encode_batch_get(
                        "projects/p/databases/d",
                        names[..count].iter().copied(),
                        &options,
                        0,
                    );
                    let whole = fs::BatchGetDocumentsRequest {
                        database: "projects/p/databases/d".into(),
                        documents: names[..count].iter().map(|n| n.to_string()).collect(),
                        ..options
                    };
                    assert_eq!(
                        bytes,
                        whole.encode_to_vec(),
                        "{selector:?} {mask:?} {count}"
                    );
                }
            }
        }
    }

    #[test]
    fn a_commit_response_with_write_results_decodes_to_its_commit_time_only() {
        let response = fs::CommitResponse {
            write_results: vec![fs::WriteResult {
                update_time: Some(time(3)),
                transform_results: vec![value(ValueType::TimestampValue(time(3)))],
            }],
            commit_time: Some(time(3)),
        };
        let lean = CommitResponse::decode(response.encode_to_vec().as_slice());
        assert_eq!(
            lean,
            Ok(CommitResponse {
                commit_time: Some(time(3))
            })
        );
    }
}
