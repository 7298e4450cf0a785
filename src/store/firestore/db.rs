//! The one handle to hotcount's Firestore database, opened once from the
//! endpoints and the target: every Firestore call in the repo (the store's
//! transactions, the operator tools, the load generator's read-back, the
//! tests) goes through a [`FirestoreDb`]. This file holds the handle and
//! its RPCs; `documents.rs` the reads and writes of hotcount's documents.
//!
//! Invariants: every name comes from [`Layout`] and every value from
//! [`codec`](super::codec); a read or a commit that fails after a
//! transaction was opened for it ends that transaction (best effort) and
//! names it in the error, so its locks do not outlive the attempt; every
//! failure is a [`StoreError`] classed by [`classify`](super::classify);
//! every RPC ends within its deadline ([`FirestoreDb::with_call_timeout`]:
//! sent to the server as `grpc-timeout` and enforced here too, so a server
//! or network that stops answering costs a transient DEADLINE_EXCEEDED,
//! never a stalled caller; a query over a whole collection has the scan
//! deadline).

use std::time::Duration;

use gcloud_sdk::google::firestore::v1 as fs;
use gcloud_sdk::prost_types::Timestamp;
use gcloud_sdk::tonic::{Code as GrpcCode, Status};

use fs::structured_aggregation_query::aggregation::{Count, Operator};
use fs::value::ValueType;

use super::errors::status_error;
use super::frame::{BatchGetFrame, FoundDocument};
use super::{wire, Layout};
use crate::store::{Code, OpenedTransaction, StoreError};

/// Longest wait for a best-effort rollback.
const ROLLBACK_TIMEOUT: Duration = Duration::from_secs(2);

/// The deadline of an RPC unless [`FirestoreDb::with_call_timeout`] says
/// otherwise (the service passes `--store-call-timeout-ms`).
pub const DEFAULT_CALL_TIMEOUT: Duration = Duration::from_secs(30);

/// The deadline of a query over a whole collection (reconcile's scans,
/// quarantine listings).
pub const SCAN_TIMEOUT: Duration = Duration::from_secs(600);

/// The one handle to a Firestore database and hotcount's layout in it.
/// Cheap to clone (the connection is shared).
#[derive(Clone)]
pub struct FirestoreDb {
    client: ::firestore::FirestoreDb,
    layout: Layout,
    call_timeout: Duration,
}

/// Which state a read sees.
#[derive(Clone, Copy, Debug)]
pub enum Read<'a> {
    /// The latest committed state, outside any transaction (locks nothing).
    Latest,
    /// Inside the transaction `t`.
    In(&'a [u8]),
    /// The state at a read time.
    At(Timestamp),
    /// Opens a read-write transaction, naming the one it retries (if any)
    /// so it keeps that one's age and wins lock conflicts against younger
    /// ones; its id is left in `opened` as soon as the server sends it.
    ReadWrite {
        /// The transaction this one retries.
        retry: Option<&'a [u8]>,
        /// Where the new transaction's id is left.
        opened: &'a Opened,
    },
}

/// Where a read that opens a transaction leaves its id as soon as it
/// arrives, so a caller that abandons the read mid-way can still end it.
#[derive(Debug, Default)]
pub struct Opened(parking_lot::Mutex<Option<Vec<u8>>>);

impl Opened {
    /// The transaction opened, if any (taken: a second call returns `None`).
    pub fn take(&self) -> Option<Vec<u8>> {
        self.0.lock().take()
    }
}

/// What a query returned.
#[derive(Clone, Debug, Default)]
pub struct Queried {
    /// Every document the query yielded.
    pub documents: Vec<fs::Document>,
    /// The read time the server reported first, if any.
    pub read_time: Option<Timestamp>,
}

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
    /// The handle over a connected client and the layout of its database
    /// (opened by `crate::connect::firestore_db`).
    pub fn new(client: firestore::FirestoreDb, layout: Layout) -> Self {
        Self {
            client,
            layout,
            call_timeout: DEFAULT_CALL_TIMEOUT,
        }
    }

    /// This handle with every RPC (but a scan's) ending within `timeout`.
    pub fn with_call_timeout(mut self, timeout: Duration) -> Self {
        self.call_timeout = timeout;
        self
    }

    /// The deadline of one RPC.
    pub fn call_timeout(&self) -> Duration {
        self.call_timeout
    }

    /// `request` carrying `limit` as its `grpc-timeout`.
    pub(super) fn within<R>(request: R, limit: Duration) -> gcloud_sdk::tonic::Request<R> {
        let mut request = gcloud_sdk::tonic::Request::new(request);
        request.set_timeout(limit);
        request
    }

    /// The layout in use.
    pub fn layout(&self) -> &Layout {
        &self.layout
    }

    pub(super) fn client(
        &self,
    ) -> fs::firestore_client::FirestoreClient<gcloud_sdk::GoogleAuthMiddleware> {
        self.client.client().get()
    }

    /// The same authenticated channel, for the lean messages of [`wire`].
    fn channel(&self) -> wire::Channel {
        self.client.client().get_with(wire::Channel::new)
    }

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
        self.stream("BatchGetDocuments", read, limit, call, |response| {
            if let Some(fs::batch_get_documents_response::Result::Found(doc)) = response.result {
                found(doc);
            }
            true
        })
        .await
    }

    /// Reads `documents` at the latest state (BatchGetDocuments, no
    /// transaction), handing each one found to `found`, in any order.
    /// Returns the read time every document handed over is valid at: the
    /// latest of the responses' read times (a later response's read time
    /// guarantees the documents before it unchanged up to it).
    pub async fn batch_get_latest(
        &self,
        documents: Vec<String>,
        mut found: impl FnMut(fs::Document),
    ) -> Result<Timestamp, StoreError> {
        let op = "BatchGetDocuments";
        let request = fs::BatchGetDocumentsRequest {
            database: self.layout.database.clone(),
            documents,
            ..Default::default()
        };
        let mut read_time: Option<Timestamp> = None;
        let mut client = self.client();
        let limit = self.call_timeout;
        let call = client.batch_get_documents(Self::within(request, limit));
        self.stream(
            op,
            Read::Latest,
            limit,
            call,
            |response: fs::BatchGetDocumentsResponse| {
                if let Some(t) = response.read_time {
                    let later =
                        read_time.is_none_or(|r| (t.seconds, t.nanos) > (r.seconds, r.nanos));
                    if later {
                        read_time = Some(t);
                    }
                }
                if let Some(fs::batch_get_documents_response::Result::Found(doc)) = response.result
                {
                    found(doc);
                }
                true
            },
        )
        .await?;
        read_time.ok_or_else(|| {
            StoreError::internal(op, "no read time in the BatchGetDocuments responses")
        })
    }

    /// Applies `writes` with BatchWrite: each on its own (not atomically),
    /// with its own precondition. Returns each write's status, in order
    /// (`Ok` when it applied); an error of the whole call leaves every
    /// write's outcome unknown.
    pub async fn batch_write(
        &self,
        writes: Vec<fs::Write>,
    ) -> Result<Vec<Result<(), StoreError>>, StoreError> {
        let op = "BatchWrite";
        let count = writes.len();
        let request = fs::BatchWriteRequest {
            database: self.layout.database.clone(),
            writes,
            ..Default::default()
        };
        let limit = self.call_timeout;
        let mut client = self.client();
        let call = client.batch_write(Self::within(request, limit));
        let unknown = "each write's outcome is unknown (a later refresh settles it)";
        let response = answer_within(limit, unknown, call)
            .await
            .map_err(|s| status_error(op, &s))?;
        if response.status.len() != count {
            return Err(StoreError::internal(
                op,
                "not one status per write in the BatchWrite response",
            ));
        }
        Ok(response
            .status
            .into_iter()
            .map(|status| match GrpcCode::from(status.code) {
                GrpcCode::Ok => Ok(()),
                code => Err(status_error(op, &Status::new(code, status.message))),
            })
            .collect())
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
        let options = batch_get_options(read, fields);
        // A name is about 100 bytes.
        let capacity = 64 + self.layout.database.len() + 128 * documents.size_hint().0;
        let request = wire::encode_batch_get(&self.layout.database, documents, &options, capacity);
        let limit = self.call_timeout;
        let mut channel = self.channel();
        let call = wire::batch_get(&mut channel, request, limit);
        self.stream("BatchGetDocuments", read, limit, call, |response| {
            if let Some(doc) = response.found() {
                found(doc);
            }
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

    /// Reads the responses of the streaming call `op`, handing each to
    /// `each` until it returns false or the stream ends, all within
    /// `limit`. Returns the transaction the read opened (see
    /// [`Self::batch_get`]); a failure after it was opened (its deadline
    /// passing included) ends it.
    async fn stream<T: Streamed>(
        &self,
        op: &'static str,
        read: Read<'_>,
        limit: Duration,
        call: impl std::future::Future<
            Output = Result<gcloud_sdk::tonic::Response<gcloud_sdk::tonic::Streaming<T>>, Status>,
        >,
        each: impl FnMut(T) -> bool,
    ) -> Result<Vec<u8>, StoreError> {
        let within = tokio::time::timeout(limit, self.stream_all(op, read, call, each)).await;
        match within {
            Ok(Err(error)) if error.code == Code::Cancelled && error.message == TIMEOUT_EXPIRED => {
                Err(StoreError {
                    code: Code::DeadlineExceeded,
                    message: no_answer(op, limit, "nothing was written").message,
                    ..error
                })
            }
            Ok(result) => result,
            Err(_) => {
                let opened = match read {
                    Read::ReadWrite { opened, .. } => opened.take().unwrap_or_default(),
                    _ => Vec::new(),
                };
                let error = no_answer(op, limit, "nothing was written");
                Err(self.abandon(opened, error).await)
            }
        }
    }

    /// [`Self::stream`] without its deadline.
    async fn stream_all<T: Streamed>(
        &self,
        op: &'static str,
        read: Read<'_>,
        call: impl std::future::Future<
            Output = Result<gcloud_sdk::tonic::Response<gcloud_sdk::tonic::Streaming<T>>, Status>,
        >,
        mut each: impl FnMut(T) -> bool,
    ) -> Result<Vec<u8>, StoreError> {
        let mut stream = call.await.map_err(|s| status_error(op, &s))?.into_inner();
        let mut transaction = Vec::new();
        loop {
            let mut response = match stream.message().await {
                Ok(Some(r)) => r,
                Ok(None) => break,
                Err(status) => {
                    let error = status_error(op, &status);
                    return Err(self.abandon(transaction, error).await);
                }
            };
            let opened = response.take_transaction();
            if !opened.is_empty() {
                if let Read::ReadWrite { opened: slot, .. } = read {
                    *slot.0.lock() = Some(opened.clone());
                }
                transaction = opened;
            }
            if !each(response) {
                break;
            }
        }
        if matches!(read, Read::ReadWrite { .. }) && transaction.is_empty() {
            return Err(StoreError::internal(
                op,
                &format!("no transaction id in the {op} response"),
            ));
        }
        Ok(transaction)
    }

    /// `error` ended a read: ends the `transaction` it opened too, if any,
    /// and names it in the error (the next attempt retries it).
    async fn abandon(&self, transaction: Vec<u8>, mut error: StoreError) -> StoreError {
        if !transaction.is_empty() {
            self.rollback(transaction.clone()).await;
            error.transaction = Some(OpenedTransaction::new(transaction));
        }
        error
    }

    /// Begins a read-only transaction: every read in it sees one snapshot
    /// (its read time), and it locks nothing. End it with [`Self::rollback`].
    pub async fn begin_read_only(&self) -> Result<Vec<u8>, StoreError> {
        let mode = fs::transaction_options::Mode::ReadOnly(Default::default());
        let request = fs::BeginTransactionRequest {
            database: self.layout.database.clone(),
            options: Some(fs::TransactionOptions { mode: Some(mode) }),
            ..Default::default()
        };
        let op = "BeginTransaction";
        let limit = self.call_timeout;
        let mut client = self.client();
        let call = client.begin_transaction(Self::within(request, limit));
        let expires = "a transaction it opened expires by itself";
        let response = answer_within(limit, expires, call)
            .await
            .map_err(|s| status_error(op, &s))?;
        Ok(response.transaction)
    }

    /// Commits `writes`, in `transaction` when given (else each write's
    /// preconditions are the only condition). A transaction whose Commit
    /// fails other than with ABORTED (which ended it) may still be open, its
    /// answer lost on the wire: it is rolled back (best effort; a commit
    /// that did apply makes the rollback fail, harmlessly) and named in the
    /// error.
    pub async fn commit(
        &self,
        writes: Vec<wire::Write>,
        transaction: Option<Vec<u8>>,
    ) -> Result<(), StoreError> {
        let mut request = wire::EncodedCommit::new(&self.layout.database, 0);
        for write in &writes {
            request.push(write);
        }
        self.commit_encoded(request, transaction).await.map(drop)
    }

    /// [`Self::commit`] of writes already encoded (the store's batches:
    /// see `codec::encode_writes`); returns the commit time, when the
    /// server sent one.
    pub async fn commit_encoded(
        &self,
        request: wire::EncodedCommit,
        transaction: Option<Vec<u8>>,
    ) -> Result<Option<Timestamp>, StoreError> {
        let bytes = request.finish(transaction.as_deref().unwrap_or_default());
        let limit = self.call_timeout;
        let mut channel = self.channel();
        let unknown = "the Commit may have applied, so its outcome is unknown (the batch marker tells the next attempt)";
        let call = wire::commit(&mut channel, bytes, limit);
        let status = match answer_within(limit, unknown, call).await {
            Ok(response) => return Ok(response.commit_time),
            Err(status) => status,
        };
        let mut error = status_error("Commit", &status);
        if let Some(transaction) = transaction {
            if status.code() != GrpcCode::Aborted {
                self.rollback(transaction.clone()).await;
            }
            error.transaction = Some(OpenedTransaction::new(transaction));
        }
        Err(error)
    }

    /// Ends `transaction` without writing, releasing its locks (best effort:
    /// a failed rollback leaves the transaction to expire on its own).
    pub async fn rollback(&self, transaction: Vec<u8>) {
        let request = fs::RollbackRequest {
            database: self.layout.database.clone(),
            transaction,
            ..Default::default()
        };
        // Bounded: a rollback is best effort, and it runs on the way out.
        let limit = ROLLBACK_TIMEOUT.min(self.call_timeout);
        let mut client = self.client();
        let call = client.rollback(Self::within(request, limit));
        let rolled = tokio::time::timeout(limit, call).await;
        match rolled {
            Ok(Ok(_)) => {}
            Ok(Err(status)) => {
                tracing::debug!(code = ?status.code(), "rollback failed; the transaction expires on its own");
            }
            Err(_) => tracing::debug!("rollback timed out; the transaction expires on its own"),
        }
    }
}

/// What the client library answers when a request's own deadline (its
/// `grpc-timeout`) passes first: CANCELLED with this message.
const TIMEOUT_EXPIRED: &str = "Timeout expired";

/// Whether `status` is the client library's own deadline passing (the
/// same deadline as ours, which may fire a moment later).
fn expired(status: &Status) -> bool {
    status.code() == GrpcCode::Cancelled && status.message() == TIMEOUT_EXPIRED
}

/// An RPC of `op` that got no answer within `limit`: a transient
/// DEADLINE_EXCEEDED saying what became of it (`what`).
fn no_answer(op: &'static str, limit: Duration, what: &str) -> StoreError {
    status_error(op, &unanswered(limit, what))
}

/// The DEADLINE_EXCEEDED status of a call that got no answer within
/// `limit`, saying what became of it (`what`).
fn unanswered(limit: Duration, what: &str) -> Status {
    Status::deadline_exceeded(format!(
        "no answer within the store call timeout ({limit:?}); {what}"
    ))
}

/// Awaits the unary `call` for at most `limit`: its answer, or its error
/// status, where our deadline or the client library's own expiry of it
/// is the DEADLINE_EXCEEDED of [`unanswered`] (`what` says what became of
/// the call).
pub(super) async fn answer_within<T>(
    limit: Duration,
    what: &str,
    call: impl std::future::Future<Output = Result<gcloud_sdk::tonic::Response<T>, Status>>,
) -> Result<T, Status> {
    match tokio::time::timeout(limit, call).await {
        Ok(Ok(response)) => Ok(response.into_inner()),
        Ok(Err(status)) if !expired(&status) => Err(status),
        _ => Err(unanswered(limit, what)),
    }
}

fn read_write(retry: Option<&[u8]>) -> fs::TransactionOptions {
    fs::TransactionOptions {
        mode: Some(fs::transaction_options::Mode::ReadWrite(
            fs::transaction_options::ReadWrite {
                retry_transaction: retry.map(<[u8]>::to_vec).unwrap_or_default(),
                ..Default::default()
            },
        )),
    }
}

/// A streamed response, which may carry the transaction its read opened.
trait Streamed {
    /// The transaction id it carries (empty when none).
    fn take_transaction(&mut self) -> Vec<u8>;
}

macro_rules! streamed {
    ($($response:ty),*) => {$(
        impl Streamed for $response {
            fn take_transaction(&mut self) -> Vec<u8> {
                std::mem::take(&mut self.transaction)
            }
        }
    )*};
}

streamed!(
    fs::BatchGetDocumentsResponse,
    fs::RunQueryResponse,
    fs::RunAggregationQueryResponse
);

impl Streamed for BatchGetFrame {
    fn take_transaction(&mut self) -> Vec<u8> {
        self.transaction().to_vec()
    }
}
