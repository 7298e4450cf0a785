//! The reads of the [`FirestoreDb`] handle: one document, a batch of them
//! (BatchGetDocuments, decoded or read in place), a query and a count, each
//! seeing the state its [`Read`] names.
//!
//! Invariants: each request's consistency selector is built from its
//! [`Read`] in one place (`selector!`); a read that opens a transaction
//! returns it, and one that fails after opening it ends it (`stream.rs`);
//! a query over a whole collection ends within [`SCAN_TIMEOUT`], every
//! other read within the call deadline.

use std::time::Duration;

use gcloud_sdk::google::firestore::v1 as fs;
use gcloud_sdk::prost_types::Timestamp;
use gcloud_sdk::tonic::Code as GrpcCode;

use fs::structured_aggregation_query::aggregation::{Count, Operator};
use fs::value::ValueType;

use super::super::errors::status_error;
use super::super::frame::{BatchGetFrame, FoundDocument};
use super::super::wire;
use super::deadline::answer_within;
use super::transactions::read_write;
use super::{FirestoreDb, Queried, Read, SCAN_TIMEOUT};
use crate::store::StoreError;

/// The BatchGetDocuments RPC's name, as the reads report it in errors.
const BATCH_GET: &str = "BatchGetDocuments";

/// The consistency selector of a `$request` for `$read`.
macro_rules! selector {
    ($read:expr, $request:ident) => {{
        use fs::$request::ConsistencySelector as S;
        match $read {
            Read::Latest => None,
            Read::In(t) => Some(S::Transaction(t.to_vec())),
            Read::At(t) => Some(S::ReadTime(t)),
            Read::ReadWrite { retry, .. } => Some(S::NewTransaction(read_write(retry))),
        }
    }};
}

/// A BatchGetDocuments request without its database and documents: under
/// `read`, returning only the fields named in `fields` (all when empty).
fn batch_get_options(read: Read<'_>, fields: &[&str]) -> fs::BatchGetDocumentsRequest {
    fs::BatchGetDocumentsRequest {
        mask: (!fields.is_empty()).then(|| fs::DocumentMask {
            field_paths: fields.iter().map(|f| (*f).to_string()).collect(),
        }),
        consistency_selector: selector!(read, batch_get_documents_request),
        ..Default::default()
    }
}

impl FirestoreDb {
    /// Reads one document by full name (`None` when missing), latest state.
    pub async fn get(&self, name: &str) -> Result<Option<fs::Document>, StoreError> {
        let request = fs::GetDocumentRequest {
            name: name.to_string(),
            ..Default::default()
        };
        let limit = self.call_timeout;
        let mut client = self.client();
        let call = client.get_document(Self::within(request, limit));
        match answer_within(limit, "nothing was written", call).await {
            Ok(doc) => Ok(Some(doc)),
            Err(status) if status.code() == GrpcCode::NotFound => Ok(None),
            Err(status) => Err(status_error("GetDocument", &status)),
        }
    }

    /// Reads `documents` (BatchGetDocuments), handing each one found to
    /// `found`, in any order. Returns the transaction the read opened
    /// (empty unless `read` is [`Read::ReadWrite`], which fails without one).
    pub async fn batch_get(
        &self,
        documents: Vec<String>,
        read: Read<'_>,
        mut found: impl FnMut(fs::Document),
    ) -> Result<Vec<u8>, StoreError> {
        let request = fs::BatchGetDocumentsRequest {
            database: self.layout.database.clone(),
            documents,
            ..batch_get_options(read, &[])
        };
        let limit = self.call_timeout;
        let mut client = self.client();
        let call = client.batch_get_documents(Self::within(request, limit));
        self.stream(BATCH_GET, read, limit, call, |response| {
            if let Some(fs::batch_get_documents_response::Result::Found(doc)) = response.result {
                found(doc);
            }
            true
        })
        .await
    }

    /// Reads `documents` at the latest state (BatchGetDocuments, no
    /// transaction), each with only the fields named in `fields` (all when
    /// empty), handing each one found to `found` read in place, in any
    /// order. Returns the read time every document handed over is valid
    /// at: the latest of the responses' read times (a later response's
    /// read time guarantees the documents before it unchanged up to it).
    pub async fn batch_get_latest<'a>(
        &self,
        documents: impl Iterator<Item = &'a str>,
        fields: &[&str],
        mut found: impl FnMut(FoundDocument<'_>),
    ) -> Result<Timestamp, StoreError> {
        let mut read_time: Option<Timestamp> = None;
        self.batch_get_frames(documents, fields, Read::Latest, |response| {
            if let Some(t) = response.read_time() {
                let later = read_time.is_none_or(|r| (t.seconds, t.nanos) > (r.seconds, r.nanos));
                if later {
                    read_time = Some(t);
                }
            }
            if let Some(doc) = response.found() {
                found(doc);
            }
        })
        .await?;
        read_time.ok_or_else(|| {
            StoreError::internal(BATCH_GET, "no read time in the BatchGetDocuments responses")
        })
    }

    /// [`Self::batch_get`] of `documents`, each returned with only the
    /// fields named in `fields` (all of them when empty), read in place as
    /// [`FoundDocument`]s (the store's read path: no message built, no name
    /// or value copied, and the request encoded from the borrowed names).
    pub async fn batch_get_lean<'a>(
        &self,
        documents: impl Iterator<Item = &'a str>,
        fields: &[&str],
        read: Read<'_>,
        mut found: impl FnMut(FoundDocument<'_>),
    ) -> Result<Vec<u8>, StoreError> {
        self.batch_get_frames(documents, fields, read, |response| {
            if let Some(doc) = response.found() {
                found(doc);
            }
        })
        .await
    }

    /// BatchGetDocuments of `documents` under `read`, each with only the
    /// fields named in `fields` (all when empty), the request encoded from
    /// the borrowed names and each response handed to `each` as its
    /// checked bytes ([`BatchGetFrame`]). Returns the transaction the read
    /// opened, as [`Self::batch_get`].
    async fn batch_get_frames<'a>(
        &self,
        documents: impl Iterator<Item = &'a str>,
        fields: &[&str],
        read: Read<'_>,
        mut each: impl FnMut(&BatchGetFrame),
    ) -> Result<Vec<u8>, StoreError> {
        let options = batch_get_options(read, fields);
        // A name is about 100 bytes.
        let capacity = 64 + self.layout.database.len() + 128 * documents.size_hint().0;
        let request = wire::encode_batch_get(&self.layout.database, documents, &options, capacity);
        let limit = self.call_timeout;
        let mut channel = self.channel();
        let call = wire::batch_get(&mut channel, request, limit);
        self.stream(BATCH_GET, read, limit, call, |response| {
            each(&response);
            true
        })
        .await
    }

    /// Runs `query` under `parent` and returns every document it yields
    /// (within [`SCAN_TIMEOUT`]: a query over a whole collection).
    pub async fn run_query(
        &self,
        parent: &str,
        query: fs::StructuredQuery,
        read: Read<'_>,
    ) -> Result<Queried, StoreError> {
        self.run_query_within(parent, query, read, SCAN_TIMEOUT)
            .await
    }

    /// [`Self::run_query`] bounded by the store call deadline (a query of
    /// the running service, not a scan of the tools).
    pub async fn run_query_bounded(
        &self,
        parent: &str,
        query: fs::StructuredQuery,
        read: Read<'_>,
    ) -> Result<Queried, StoreError> {
        self.run_query_within(parent, query, read, self.call_timeout)
            .await
    }

    /// [`Self::run_query`] ending within `limit` (a bounded query, e.g.
    /// the milestone dispatcher's `limit`ed one: the call timeout).
    pub async fn run_query_within(
        &self,
        parent: &str,
        query: fs::StructuredQuery,
        read: Read<'_>,
        limit: Duration,
    ) -> Result<Queried, StoreError> {
        let request = fs::RunQueryRequest {
            parent: parent.to_string(),
            query_type: Some(fs::run_query_request::QueryType::StructuredQuery(query)),
            consistency_selector: selector!(read, run_query_request),
            ..Default::default()
        };
        let mut queried = Queried::default();
        let mut client = self.client();
        let call = client.run_query(Self::within(request, limit));
        self.stream("RunQuery", read, limit, call, |response| {
            if queried.read_time.is_none() {
                queried.read_time = response.read_time;
            }
            queried.documents.extend(response.document);
            true
        })
        .await?;
        Ok(queried)
    }

    /// How many documents `query` under `parent` matches (a COUNT
    /// aggregation: the documents are not sent).
    pub async fn run_count(
        &self,
        parent: &str,
        query: fs::StructuredQuery,
        read: Read<'_>,
    ) -> Result<i64, StoreError> {
        let op = "RunAggregationQuery";
        let aggregation = fs::StructuredAggregationQuery {
            aggregations: vec![fs::structured_aggregation_query::Aggregation {
                alias: "n".into(),
                operator: Some(Operator::Count(Count { up_to: None })),
            }],
            query_type: Some(fs::structured_aggregation_query::QueryType::StructuredQuery(query)),
        };
        let request = fs::RunAggregationQueryRequest {
            parent: parent.to_string(),
            query_type: Some(
                fs::run_aggregation_query_request::QueryType::StructuredAggregationQuery(
                    aggregation,
                ),
            ),
            consistency_selector: selector!(read, run_aggregation_query_request),
            ..Default::default()
        };
        let mut count = None;
        let mut client = self.client();
        let call = client.run_aggregation_query(Self::within(request, SCAN_TIMEOUT));
        let transaction = self
            .stream(op, read, SCAN_TIMEOUT, call, |response| {
                let value = response
                    .result
                    .and_then(|r| r.aggregate_fields.get("n").cloned())
                    .and_then(|v| v.value_type);
                if let Some(ValueType::IntegerValue(n)) = value {
                    count = Some(n);
                }
                count.is_none()
            })
            .await?;
        match count {
            Some(n) => Ok(n),
            None => {
                let error = StoreError::internal(op, "no count in the aggregation response");
                Err(self.abandon(transaction, error).await)
            }
        }
    }
}
