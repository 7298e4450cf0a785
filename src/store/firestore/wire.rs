//! Lean, wire-compatible copies of the Firestore messages on the store's
//! hot path (a batch's BatchGetDocuments and Commit): a document's fields
//! as a `Vec` of entries instead of a `HashMap<String, Value>`, and
//! responses that keep only what the store reads.
//!
//! Invariants: every message here encodes exactly as its
//! `google.firestore.v1` counterpart (a protobuf map is on the wire a
//! repeated `{key = 1, value = 2}` entry message, and the tags are the
//! same; tests decode one with the other); a response type may leave out
//! fields (they are skipped when decoding), never change one. Values,
//! preconditions, masks and transforms are gcloud-sdk's own types.

use gcloud_sdk::google::firestore::v1 as fs;
use gcloud_sdk::prost_types::Timestamp;
use gcloud_sdk::tonic::client::Grpc;
use gcloud_sdk::tonic::codegen::http::uri::PathAndQuery;
use gcloud_sdk::tonic::{GrpcMethod, IntoRequest, Response, Status, Streaming};

use fs::document_transform::FieldTransform;

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

/// `google.firestore.v1.CommitRequest`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct CommitRequest {
    /// `projects/{p}/databases/{d}`.
    #[prost(string, tag = "1")]
    pub database: String,
    /// The writes, applied atomically in order.
    #[prost(message, repeated, tag = "2")]
    pub writes: Vec<Write>,
    /// The transaction committed (none: the writes' preconditions only).
    #[prost(bytes = "vec", tag = "3")]
    pub transaction: Vec<u8>,
}

/// `google.firestore.v1.CommitResponse`, of which the store reads nothing
/// (a write result per write and the commit time are skipped).
#[derive(Clone, PartialEq, prost::Message)]
pub struct CommitResponse {}

/// `google.firestore.v1.BatchGetDocumentsResponse` without `missing` and
/// `read_time` (skipped when read).
#[derive(Clone, PartialEq, prost::Message)]
pub struct BatchGetResponse {
    /// A document that exists (`result.found`).
    #[prost(message, optional, tag = "1")]
    pub found: Option<Document>,
    /// The transaction the read opened, in the first response only.
    #[prost(bytes = "vec", tag = "3")]
    pub transaction: Vec<u8>,
}

/// The gRPC service path of a Firestore method.
const COMMIT: &str = "/google.firestore.v1.Firestore/Commit";
const BATCH_GET: &str = "/google.firestore.v1.Firestore/BatchGetDocuments";

/// A gRPC client over the authenticated channel of a Firestore client.
pub type Channel = Grpc<gcloud_sdk::GoogleAuthMiddleware>;

/// Calls Commit with the lean messages (as the generated client calls it:
/// same path, same method extension, prost encoding).
pub async fn commit(
    channel: &mut Channel,
    request: CommitRequest,
) -> Result<Response<CommitResponse>, Status> {
    channel.ready().await.map_err(not_ready)?;
    let mut request = request.into_request();
    request
        .extensions_mut()
        .insert(GrpcMethod::new("google.firestore.v1.Firestore", "Commit"));
    let codec = tonic_prost::ProstCodec::default();
    channel
        .unary(request, PathAndQuery::from_static(COMMIT), codec)
        .await
}

/// Calls BatchGetDocuments, reading the responses as [`BatchGetResponse`].
pub async fn batch_get(
    channel: &mut Channel,
    request: fs::BatchGetDocumentsRequest,
) -> Result<Response<Streaming<BatchGetResponse>>, Status> {
    channel.ready().await.map_err(not_ready)?;
    let mut request = request.into_request();
    request.extensions_mut().insert(GrpcMethod::new(
        "google.firestore.v1.Firestore",
        "BatchGetDocuments",
    ));
    let codec = tonic_prost::ProstCodec::default();
    channel
        .server_streaming(request, PathAndQuery::from_static(BATCH_GET), codec)
        .await
}

fn not_ready(error: impl Into<gcloud_sdk::tonic::codegen::StdError>) -> Status {
    Status::unknown(format!("Service was not ready: {}", error.into()))
}

/// `write` as gcloud-sdk decodes it off the wire (for tests and tools that
/// read a write back).
pub fn to_sdk(write: &Write) -> fs::Write {
    let bytes = prost::Message::encode_to_vec(write);
    // Our own encoding of a wire-compatible message always decodes.
    prost::Message::decode(bytes.as_slice()).unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use prost::Message;

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
            current_document: precondition.clone(),
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
            current_document: lean.current_document.clone(),
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
        let request = CommitRequest {
            database: "projects/p/databases/d".into(),
            writes: vec![lean.clone(), lean],
            transaction: vec![1, 2, 3],
        };
        let decoded = fs::CommitRequest::decode(request.encode_to_vec().as_slice())
            .expect("the SDK decodes it");
        let expected = fs::CommitRequest {
            database: "projects/p/databases/d".into(),
            writes: vec![sdk.clone(), sdk],
            transaction: vec![1, 2, 3],
            ..Default::default()
        };
        assert_eq!(decoded, expected);
        // And the way back.
        let again = CommitRequest::decode(expected.encode_to_vec().as_slice()).expect("decodes");
        assert_eq!(again.writes.len(), 2);
        assert_eq!(to_sdk(&again.writes[0]), expected.writes[0]);
    }

    #[test]
    fn a_batch_get_response_reads_the_sdk_response_and_skips_the_rest() {
        let fields: HashMap<String, fs::Value> = HashMap::from([
            ("liked".into(), value(ValueType::BooleanValue(false))),
            ("eventId".into(), value(ValueType::StringValue("e".into()))),
            ("seq".into(), value(ValueType::IntegerValue(9))),
        ]);
        let found = fs::BatchGetDocumentsResponse {
            transaction: vec![4, 2],
            read_time: Some(time(11)),
            result: Some(fs::batch_get_documents_response::Result::Found(
                fs::Document {
                    name: "n".into(),
                    fields: fields.clone(),
                    create_time: Some(time(1)),
                    update_time: Some(time(2)),
                },
            )),
        };
        let lean = BatchGetResponse::decode(found.encode_to_vec().as_slice()).expect("decodes");
        assert_eq!(lean.transaction, vec![4, 2]);
        let doc = lean.found.expect("found");
        assert_eq!((doc.name.as_str(), doc.update_time), ("n", Some(time(2))));
        let read: HashMap<String, fs::Value> = doc
            .fields
            .into_iter()
            .map(|f| (f.key, f.value.unwrap_or_default()))
            .collect();
        assert_eq!(read, fields);
        let missing = fs::BatchGetDocumentsResponse {
            result: Some(fs::batch_get_documents_response::Result::Missing(
                "gone".into(),
            )),
            ..Default::default()
        };
        let lean = BatchGetResponse::decode(missing.encode_to_vec().as_slice()).expect("decodes");
        assert_eq!(lean, BatchGetResponse::default());
    }

    #[test]
    fn a_commit_response_with_write_results_decodes_to_nothing_kept() {
        let response = fs::CommitResponse {
            write_results: vec![fs::WriteResult {
                update_time: Some(time(3)),
                transform_results: vec![value(ValueType::TimestampValue(time(3)))],
            }],
            commit_time: Some(time(3)),
        };
        let lean = CommitResponse::decode(response.encode_to_vec().as_slice());
        assert_eq!(lean, Ok(CommitResponse {}));
    }
}
