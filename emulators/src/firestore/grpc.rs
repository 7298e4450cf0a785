//! The `google.firestore.v1.Firestore` gRPC service: decodes requests,
//! calls the engine, and shapes responses as the real service does.
//!
//! Invariant: handlers hold no state of their own; every effect goes through
//! the [`Engine`], and every client error is a `Status`, never a panic.

use std::pin::Pin;
use std::sync::Arc;

use axum::extract::{Request, State};
use axum::middleware::Next;
use axum::response::Response;
use futures::Stream;
use prost::Message as _;
use rand::Rng;
use tonic::{Code, Status};

use super::engine::{Consistency, Engine, Snapshot};
use super::limits::check_request_size;
use super::listen::Listeners;
use super::names::{
    compare_names, parse_database, parse_field_path, relative, validate_id, DocName, Parent,
};
use super::query::{aggregate, Plan};
use super::values;
use super::writes::{micros, timestamp};
use crate::proto::firestore::firestore_server::Firestore as FirestoreRpc;
use crate::proto::firestore_v1::{
    batch_get_documents_request, batch_get_documents_response, get_document_request,
    list_collection_ids_request, list_documents_request, precondition::ConditionType,
    run_aggregation_query_request, run_query_request, structured_aggregation_query,
    write::Operation, AggregationResult, BatchGetDocumentsRequest, BatchGetDocumentsResponse,
    BatchWriteRequest, BatchWriteResponse, BeginTransactionRequest, BeginTransactionResponse,
    CommitRequest, CommitResponse, CreateDocumentRequest, DeleteDocumentRequest, Document,
    DocumentMask, GetDocumentRequest, ListCollectionIdsRequest, ListCollectionIdsResponse,
    ListDocumentsRequest, ListDocumentsResponse, ListenRequest, ListenResponse, Precondition,
    RollbackRequest, RunAggregationQueryRequest, RunAggregationQueryResponse, RunQueryRequest,
    RunQueryResponse, UpdateDocumentRequest, Write,
};
use crate::proto::Empty;

type RpcStream<T> = Pin<Box<dyn Stream<Item = Result<T, Status>> + Send + 'static>>;

/// The gRPC service over one engine.
#[derive(Clone)]
pub struct Service {
    engine: Arc<Engine>,
    listeners: Arc<Listeners>,
}

impl Service {
    /// A service over `engine`, its Listen streams served by `listeners`.
    pub fn new(engine: Arc<Engine>, listeners: Arc<Listeners>) -> Self {
        Self { engine, listeners }
    }
}

/// The request message, if it is within
/// [`MAX_REQUEST_BYTES`](super::limits::MAX_REQUEST_BYTES); a larger one is
/// refused as Google's front end refuses it.
fn accept<M: prost::Message>(request: tonic::Request<M>) -> Result<M, Status> {
    let message = request.into_inner();
    check_request_size(message.encoded_len())?;
    Ok(message)
}

/// A streaming read's answer with its error, if any, sent after response
/// headers instead of as a trailers-only response, as Google's front end
/// does: gax-nodejs (retry-request, `noResponseRetries: 2`) takes an error
/// that comes before any response headers for "no response" and resends
/// the request twice with backoff, so a trailers-only error would cost a
/// Node client about 7 s and two resends.
fn headers_first<T: Send + 'static>(
    answer: Result<tonic::Response<RpcStream<T>>, Status>,
) -> Result<tonic::Response<RpcStream<T>>, Status> {
    Ok(answer.unwrap_or_else(|status| {
        let failed: RpcStream<T> = Box::pin(futures::stream::once(async move { Err(status) }));
        tonic::Response::new(failed)
    }))
}

fn stream<T: Send + 'static>(items: Vec<T>) -> RpcStream<T> {
    Box::pin(futures::stream::iter(items.into_iter().map(Ok)))
}

/// A streamed answer whose first message carries a transaction begun by the
/// read: if the answer is dropped before that message leaves (an injected
/// error after the handler ran, a cancelled call), the transaction ends, so
/// a transaction the client never learned of holds no locks.
struct Answer<T> {
    items: std::vec::IntoIter<T>,
    unclaimed: Option<(Arc<Engine>, Vec<u8>)>,
}

impl<T: Unpin> Stream for Answer<T> {
    type Item = Result<T, Status>;

    fn poll_next(
        self: Pin<&mut Self>,
        _cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Self::Item>> {
        let this = self.get_mut();
        let next = this.items.next();
        if next.is_some() {
            this.unclaimed = None;
        }
        std::task::Poll::Ready(next.map(Ok))
    }
}

impl<T> Drop for Answer<T> {
    fn drop(&mut self) {
        if let Some((engine, id)) = self.unclaimed.take() {
            engine.end_after_failure(&id);
        }
    }
}

impl Service {
    /// Streams `items`; `new_transaction` is the transaction the first one carries.
    fn answer<T: Unpin + Send + 'static>(
        &self,
        items: Vec<T>,
        new_transaction: Option<Vec<u8>>,
    ) -> RpcStream<T> {
        match new_transaction {
            None => stream(items),
            Some(id) => Box::pin(Answer {
                items: items.into_iter(),
                unclaimed: Some((self.engine.clone(), id)),
            }),
        }
    }
}

fn mask_paths(mask: Option<&DocumentMask>) -> Result<Option<Vec<Vec<String>>>, Status> {
    match mask {
        None => Ok(None),
        Some(m) => m
            .field_paths
            .iter()
            .map(|p| parse_field_path(p))
            .collect::<Result<Vec<_>, _>>()
            .map(Some),
    }
}

fn masked(doc: &Document, mask: &Option<Vec<Vec<String>>>) -> Document {
    match mask {
        None => doc.clone(),
        Some(paths) => Document {
            name: doc.name.clone(),
            fields: values::project(&doc.fields, paths),
            create_time: doc.create_time,
            update_time: doc.update_time,
        },
    }
}

fn txn_id(id: Vec<u8>) -> Result<Consistency, Status> {
    if id.is_empty() {
        return Err(Status::invalid_argument(
            "The transaction id must not be empty.",
        ));
    }
    Ok(Consistency::Transaction(id))
}

/// A 20-character auto id, as the client libraries make them.
fn auto_id() -> String {
    const ALPHABET: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789";
    let mut rng = rand::rng();
    (0..20)
        .map(|_| ALPHABET[rng.random_range(0..ALPHABET.len())] as char)
        .collect()
}

#[tonic::async_trait]
impl FirestoreRpc for Service {
    async fn get_document(
        &self,
        request: tonic::Request<GetDocumentRequest>,
    ) -> Result<tonic::Response<Document>, Status> {
        let req = accept(request)?;
        let name = DocName::parse(&req.name)?;
        let mask = mask_paths(req.mask.as_ref())?;
        let consistency = match req.consistency_selector {
            None => Consistency::Latest,
            Some(get_document_request::ConsistencySelector::Transaction(id)) => txn_id(id)?,
            Some(get_document_request::ConsistencySelector::ReadTime(t)) => {
                Consistency::ReadTime(micros(&t))
            }
        };
        let full = name.name();
        let snap = self
            .engine
            .read(&name.database, consistency, |store, at| {
                Ok((store.get(&full, at), vec![full.clone()]))
            })
            .await?;
        match snap.value {
            Some(doc) => Ok(tonic::Response::new(masked(&doc, &mask))),
            None => Err(Status::not_found(format!("Document \"{full}\" not found."))),
        }
    }

    async fn list_documents(
        &self,
        request: tonic::Request<ListDocumentsRequest>,
    ) -> Result<tonic::Response<ListDocumentsResponse>, Status> {
        let req = accept(request)?;
        let parent = Parent::parse(&req.parent)?;
        if !req.collection_id.is_empty() {
            validate_id(&req.collection_id, "collection")?;
        }
        if req.page_size < 0 {
            return Err(Status::invalid_argument("page_size must not be negative."));
        }
        let mask = mask_paths(req.mask.as_ref())?;
        let consistency = match req.consistency_selector {
            None => Consistency::Latest,
            Some(list_documents_request::ConsistencySelector::Transaction(id)) => txn_id(id)?,
            Some(list_documents_request::ConsistencySelector::ReadTime(t)) => {
                Consistency::ReadTime(micros(&t))
            }
        };
        let page_size = if req.page_size == 0 {
            usize::MAX
        } else {
            req.page_size as usize
        };
        let prefix = parent.prefix();
        let collection = req.collection_id.clone();
        let scan_prefix = if collection.is_empty() {
            prefix.clone()
        } else {
            format!("{prefix}{collection}/")
        };
        let token = req.page_token.clone();
        let show_missing = req.show_missing;
        let snap = self
            .engine
            .read(&parent.database, consistency, |store, at| {
                // Each listed name once: documents, and with `show_missing`
                // the missing documents that have descendants (only a name,
                // no fields or times, as Google returns them).
                let mut listed: std::collections::BTreeMap<String, Arc<Document>> =
                    std::collections::BTreeMap::new();
                for d in store.scan(&scan_prefix, at) {
                    let Some(rel) = relative(&d.name, &prefix) else {
                        continue;
                    };
                    if rel.len() < 2 || !(collection.is_empty() || rel[0] == collection) {
                        continue;
                    }
                    if rel.len() == 2 {
                        listed.insert(d.name.clone(), d.clone());
                    } else if show_missing {
                        let name = format!("{prefix}{}/{}", rel[0], rel[1]);
                        if !listed.contains_key(&name) && store.get(&name, at).is_none() {
                            let missing = Document {
                                name: name.clone(),
                                ..Default::default()
                            };
                            listed.insert(name, Arc::new(missing));
                        }
                    }
                }
                let mut docs: Vec<Arc<Document>> = listed
                    .into_values()
                    .filter(|d| token.is_empty() || compare_names(&d.name, &token).is_gt())
                    .collect();
                docs.sort_by(|a, b| compare_names(&a.name, &b.name));
                let more = docs.len() > page_size;
                docs.truncate(page_size);
                let names = docs.iter().map(|d| d.name.clone()).collect();
                Ok(((docs, more), names))
            })
            .await?;
        let (docs, more) = snap.value;
        let next_page_token = match (more, docs.last()) {
            (true, Some(last)) => last.name.clone(),
            _ => String::new(),
        };
        Ok(tonic::Response::new(ListDocumentsResponse {
            documents: docs.iter().map(|d| masked(d, &mask)).collect(),
            next_page_token,
        }))
    }

    async fn update_document(
        &self,
        request: tonic::Request<UpdateDocumentRequest>,
    ) -> Result<tonic::Response<Document>, Status> {
        let req = accept(request)?;
        let doc = req
            .document
            .ok_or_else(|| Status::invalid_argument("A document is required."))?;
        let name = DocName::parse(&doc.name)?;
        let mask = mask_paths(req.mask.as_ref())?;
        let write = Write {
            update_mask: req.update_mask,
            update_transforms: Vec::new(),
            current_document: req.current_document,
            operation: Some(Operation::Update(doc)),
        };
        let committed = self
            .engine
            .commit(&name.database, vec![write], None)
            .await?;
        match committed.documents.into_iter().next().flatten() {
            Some(doc) => Ok(tonic::Response::new(masked(&doc, &mask))),
            None => Err(Status::internal("the update left no document")),
        }
    }

    async fn delete_document(
        &self,
        request: tonic::Request<DeleteDocumentRequest>,
    ) -> Result<tonic::Response<Empty>, Status> {
        let req = accept(request)?;
        let name = DocName::parse(&req.name)?;
        let write = Write {
            current_document: req.current_document,
            operation: Some(Operation::Delete(req.name)),
            ..Default::default()
        };
        self.engine
            .commit(&name.database, vec![write], None)
            .await?;
        Ok(tonic::Response::new(()))
    }

    type BatchGetDocumentsStream = RpcStream<BatchGetDocumentsResponse>;

    async fn batch_get_documents(
        &self,
        request: tonic::Request<BatchGetDocumentsRequest>,
    ) -> Result<tonic::Response<Self::BatchGetDocumentsStream>, Status> {
        headers_first(
            async move {
                let req = accept(request)?;
                let database = parse_database(&req.database)?;
                // Each document once, in request order (a set, not a scan of the
                // list: requests carry a thousand names or more).
                let mut names = Vec::with_capacity(req.documents.len());
                let mut seen = std::collections::HashSet::with_capacity(req.documents.len());
                for n in &req.documents {
                    let full = DocName::parse_in(n, &database)?.name();
                    if seen.insert(full.clone()) {
                        names.push(full);
                    }
                }
                let mask = mask_paths(req.mask.as_ref())?;
                let consistency = match req.consistency_selector {
                    None => Consistency::Latest,
                    Some(batch_get_documents_request::ConsistencySelector::Transaction(id)) => {
                        txn_id(id)?
                    }
                    Some(batch_get_documents_request::ConsistencySelector::NewTransaction(o)) => {
                        Consistency::NewTransaction(o)
                    }
                    Some(batch_get_documents_request::ConsistencySelector::ReadTime(t)) => {
                        Consistency::ReadTime(micros(&t))
                    }
                };
                let snap = self
                    .engine
                    .read(&database, consistency, |store, at| {
                        let found: Vec<(String, Option<Arc<Document>>)> = names
                            .iter()
                            .map(|n| (n.clone(), store.get(n, at)))
                            .collect();
                        Ok((found, names.clone()))
                    })
                    .await?;
                let read_time = Some(timestamp(snap.read_time));
                let mut out = Vec::with_capacity(snap.value.len() + 1);
                if let Some(id) = &snap.new_transaction {
                    out.push(BatchGetDocumentsResponse {
                        transaction: id.clone(),
                        ..Default::default()
                    });
                }
                for (name, doc) in snap.value {
                    let result = match doc {
                        Some(d) => batch_get_documents_response::Result::Found(masked(&d, &mask)),
                        None => batch_get_documents_response::Result::Missing(name),
                    };
                    out.push(BatchGetDocumentsResponse {
                        transaction: Vec::new(),
                        read_time,
                        result: Some(result),
                    });
                }
                Ok(tonic::Response::new(self.answer(out, snap.new_transaction)))
            }
            .await,
        )
    }

    async fn begin_transaction(
        &self,
        request: tonic::Request<BeginTransactionRequest>,
    ) -> Result<tonic::Response<BeginTransactionResponse>, Status> {
        let req = accept(request)?;
        let database = parse_database(&req.database)?;
        let transaction = self.engine.begin(&database, req.options.as_ref())?;
        Ok(tonic::Response::new(BeginTransactionResponse {
            transaction,
        }))
    }

    async fn commit(
        &self,
        request: tonic::Request<CommitRequest>,
    ) -> Result<tonic::Response<CommitResponse>, Status> {
        let req = accept(request)?;
        let database = parse_database(&req.database)?;
        let txn = (!req.transaction.is_empty()).then_some(req.transaction);
        let committed = self.engine.commit(&database, req.writes, txn).await?;
        Ok(tonic::Response::new(committed.response))
    }

    async fn rollback(
        &self,
        request: tonic::Request<RollbackRequest>,
    ) -> Result<tonic::Response<Empty>, Status> {
        let req = accept(request)?;
        let database = parse_database(&req.database)?;
        if req.transaction.is_empty() {
            return Err(Status::invalid_argument(
                "The transaction id must not be empty.",
            ));
        }
        self.engine.rollback(&database, &req.transaction)?;
        Ok(tonic::Response::new(()))
    }

    type RunQueryStream = RpcStream<RunQueryResponse>;

    async fn run_query(
        &self,
        request: tonic::Request<RunQueryRequest>,
    ) -> Result<tonic::Response<Self::RunQueryStream>, Status> {
        headers_first(
            async move {
                let req = accept(request)?;
                let parent = Parent::parse(&req.parent)?;
                let Some(run_query_request::QueryType::StructuredQuery(query)) = req.query_type
                else {
                    return Err(Status::invalid_argument("A structured query is required."));
                };
                let plan = Plan::new(&query)?;
                let consistency = match req.consistency_selector {
                    None => Consistency::Latest,
                    Some(run_query_request::ConsistencySelector::Transaction(id)) => txn_id(id)?,
                    Some(run_query_request::ConsistencySelector::NewTransaction(o)) => {
                        Consistency::NewTransaction(o)
                    }
                    Some(run_query_request::ConsistencySelector::ReadTime(t)) => {
                        Consistency::ReadTime(micros(&t))
                    }
                };
                let snap: Snapshot<Vec<Arc<Document>>> = self
                    .engine
                    .read(&parent.database, consistency, |store, at| {
                        let docs = plan.run_in(store, at, &parent);
                        let names = docs.iter().map(|d| d.name.clone()).collect();
                        Ok((docs, names))
                    })
                    .await?;
                let read_time = Some(timestamp(snap.read_time));
                let mut out = Vec::with_capacity(snap.value.len() + 1);
                if let Some(id) = &snap.new_transaction {
                    out.push(RunQueryResponse {
                        transaction: id.clone(),
                        ..Default::default()
                    });
                }
                for doc in &snap.value {
                    out.push(RunQueryResponse {
                        document: Some(plan.project(doc)),
                        read_time,
                        ..Default::default()
                    });
                }
                if snap.value.is_empty() {
                    out.push(RunQueryResponse {
                        read_time,
                        ..Default::default()
                    });
                }
                Ok(tonic::Response::new(self.answer(out, snap.new_transaction)))
            }
            .await,
        )
    }

    type RunAggregationQueryStream = RpcStream<RunAggregationQueryResponse>;

    async fn run_aggregation_query(
        &self,
        request: tonic::Request<RunAggregationQueryRequest>,
    ) -> Result<tonic::Response<Self::RunAggregationQueryStream>, Status> {
        headers_first(
            async move {
        let req = accept(request)?;
        let parent = Parent::parse(&req.parent)?;
        let Some(run_aggregation_query_request::QueryType::StructuredAggregationQuery(agg)) =
            req.query_type
        else {
            return Err(Status::invalid_argument(
                "A structured aggregation query is required.",
            ));
        };
        let Some(structured_aggregation_query::QueryType::StructuredQuery(query)) = &agg.query_type
        else {
            return Err(Status::invalid_argument(
                "An aggregation needs a structured query.",
            ));
        };
        let plan = Plan::new(query)?;
        let consistency = match req.consistency_selector {
            None => Consistency::Latest,
            Some(run_aggregation_query_request::ConsistencySelector::Transaction(id)) => {
                txn_id(id)?
            }
            Some(run_aggregation_query_request::ConsistencySelector::NewTransaction(o)) => {
                Consistency::NewTransaction(o)
            }
            Some(run_aggregation_query_request::ConsistencySelector::ReadTime(t)) => {
                Consistency::ReadTime(micros(&t))
            }
        };
        let snap = self
            .engine
            .read(&parent.database, consistency, |store, at| {
                let docs = plan.run_in(store, at, &parent);
                let fields = aggregate(&agg.aggregations, &docs)?;
                let names = docs.iter().map(|d| d.name.clone()).collect();
                Ok((fields, names))
            })
            .await?;
        let response = RunAggregationQueryResponse {
            result: Some(AggregationResult {
                aggregate_fields: snap.value,
            }),
            transaction: snap.new_transaction.clone().unwrap_or_default(),
            read_time: Some(timestamp(snap.read_time)),
            explain_metrics: None,
        };
        Ok(tonic::Response::new(
            self.answer(vec![response], snap.new_transaction),
        ))
        }
            .await,
        )
    }

    async fn batch_write(
        &self,
        request: tonic::Request<BatchWriteRequest>,
    ) -> Result<tonic::Response<BatchWriteResponse>, Status> {
        let req = accept(request)?;
        let database = parse_database(&req.database)?;
        // Writes apply one by one (not atomically), but a request that
        // writes one document twice is refused whole, before any applies.
        let mut names = std::collections::HashSet::new();
        for write in &req.writes {
            let name = match &write.operation {
                Some(Operation::Update(doc)) => doc.name.as_str(),
                Some(Operation::Delete(name)) => name.as_str(),
                Some(Operation::Transform(t)) => t.document.as_str(),
                None => continue,
            };
            if !names.insert(name) {
                return Err(Status::invalid_argument(format!(
                    "A BatchWrite request cannot write the document \"{name}\" more than once."
                )));
            }
        }
        let mut response = BatchWriteResponse::default();
        for write in req.writes {
            match self.engine.commit(&database, vec![write], None).await {
                Ok(mut committed) => {
                    response
                        .write_results
                        .push(committed.response.write_results.pop().unwrap_or_default());
                    response.status.push(Default::default());
                }
                Err(status) => {
                    response.write_results.push(Default::default());
                    response.status.push(gcloud_sdk::google::rpc::Status {
                        code: status.code() as i32,
                        message: status.message().to_string(),
                        details: Vec::new(),
                    });
                }
            }
        }
        Ok(tonic::Response::new(response))
    }

    async fn create_document(
        &self,
        request: tonic::Request<CreateDocumentRequest>,
    ) -> Result<tonic::Response<Document>, Status> {
        let req = accept(request)?;
        let parent = Parent::parse(&req.parent)?;
        validate_id(&req.collection_id, "collection")?;
        let id = if req.document_id.is_empty() {
            auto_id()
        } else {
            req.document_id
        };
        let mut doc = req.document.unwrap_or_default();
        doc.name = format!("{}/{}/{}", parent.name(), req.collection_id, id);
        doc.create_time = None;
        doc.update_time = None;
        let mask = mask_paths(req.mask.as_ref())?;
        let write = Write {
            current_document: Some(Precondition {
                condition_type: Some(ConditionType::Exists(false)),
            }),
            operation: Some(Operation::Update(doc)),
            ..Default::default()
        };
        let committed = self
            .engine
            .commit(&parent.database, vec![write], None)
            .await?;
        match committed.documents.into_iter().next().flatten() {
            Some(doc) => Ok(tonic::Response::new(masked(&doc, &mask))),
            None => Err(Status::internal("the create left no document")),
        }
    }

    type ListenStream = RpcStream<ListenResponse>;

    async fn listen(
        &self,
        request: tonic::Request<tonic::Streaming<ListenRequest>>,
    ) -> Result<tonic::Response<Self::ListenStream>, Status> {
        let (tx, rx) = tokio::sync::mpsc::channel(super::listen::OUTBOX);
        tokio::spawn(self.listeners.clone().serve(request.into_inner(), tx));
        Ok(tonic::Response::new(Box::pin(
            tokio_stream::wrappers::ReceiverStream::new(rx),
        )))
    }

    async fn list_collection_ids(
        &self,
        request: tonic::Request<ListCollectionIdsRequest>,
    ) -> Result<tonic::Response<ListCollectionIdsResponse>, Status> {
        let req = accept(request)?;
        let parent = Parent::parse(&req.parent)?;
        let consistency = match req.consistency_selector {
            None => Consistency::Latest,
            Some(list_collection_ids_request::ConsistencySelector::ReadTime(t)) => {
                Consistency::ReadTime(micros(&t))
            }
        };
        let prefix = parent.prefix();
        let snap = self
            .engine
            .read(&parent.database, consistency, |store, at| {
                let mut ids: Vec<String> = Vec::new();
                for d in store.scan(&prefix, at) {
                    if let Some(first) = relative(&d.name, &prefix).and_then(|r| r.first().copied())
                    {
                        if ids.last().map(String::as_str) != Some(first) {
                            ids.push(first.to_string());
                        }
                    }
                }
                ids.sort();
                ids.dedup();
                Ok((ids, Vec::new()))
            })
            .await?;
        let mut ids: Vec<String> = snap
            .value
            .into_iter()
            .filter(|id| req.page_token.is_empty() || *id > req.page_token)
            .collect();
        let mut next_page_token = String::new();
        if req.page_size > 0 && ids.len() > req.page_size as usize {
            ids.truncate(req.page_size as usize);
            next_page_token = ids.last().cloned().unwrap_or_default();
        }
        Ok(tonic::Response::new(ListCollectionIdsResponse {
            collection_ids: ids,
            next_page_token,
        }))
    }
}

/// Largest request body the failed-commit guard buffers: the largest
/// message the service decodes, plus the gRPC frame header.
const MAX_BUFFERED_BYTES: usize = super::MAX_MESSAGE_BYTES + 5;

/// Middleware around the fault layer: when a transactional Commit fails
/// without the handler ending its transaction (an injected error before the
/// handler), ends it, so a failed commit always releases its locks.
pub async fn end_failed_commits(
    State(engine): State<Arc<Engine>>,
    request: Request,
    next: Next,
) -> Response {
    if !request.uri().path().ends_with("/Commit") {
        return next.run(request).await;
    }
    let (parts, body) = request.into_parts();
    let bytes = match axum::body::to_bytes(body, MAX_BUFFERED_BYTES).await {
        Ok(b) => b,
        Err(_) => {
            return Status::new(Code::InvalidArgument, "request too large or unreadable")
                .into_http()
        }
    };
    let txn = commit_transaction(&bytes);
    let response = next
        .run(Request::from_parts(parts, axum::body::Body::from(bytes)))
        .await;
    if let Some(txn) = txn {
        let failed = response
            .headers()
            .get("grpc-status")
            .is_some_and(|v| v.as_bytes() != b"0");
        if failed {
            engine.end_after_failure(&txn);
        }
    }
    response
}

/// `CommitRequest` with only its `transaction` field (3): decoding it skips
/// the writes instead of building them, so the guard costs one pass over
/// the bytes, not a second decode of the whole request.
#[derive(Clone, PartialEq, prost::Message)]
struct CommitTransactionOnly {
    #[prost(bytes = "vec", tag = "3")]
    transaction: Vec<u8>,
}

/// The transaction id of an uncompressed gRPC-framed CommitRequest, if any.
fn commit_transaction(frame: &[u8]) -> Option<Vec<u8>> {
    if frame.len() < 5 || frame[0] != 0 {
        return None;
    }
    let len = u32::from_be_bytes([frame[1], frame[2], frame[3], frame[4]]) as usize;
    let message = frame.get(5..5 + len)?;
    let request = CommitTransactionOnly::decode(message).ok()?;
    (!request.transaction.is_empty()).then_some(request.transaction)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn framed(request: &CommitRequest) -> Vec<u8> {
        let body = request.encode_to_vec();
        let mut frame = vec![0];
        frame.extend_from_slice(&(body.len() as u32).to_be_bytes());
        frame.extend_from_slice(&body);
        frame
    }

    #[test]
    fn failed_commit_guard_reads_the_transaction_past_the_writes() {
        let write = gcloud_sdk::google::firestore::v1::Write {
            operation: Some(gcloud_sdk::google::firestore::v1::write::Operation::Delete(
                "projects/p/databases/(default)/documents/c/d".into(),
            )),
            ..Default::default()
        };
        let mut request = CommitRequest {
            database: "projects/p/databases/(default)".into(),
            writes: vec![write; 50],
            transaction: b"txn-7".to_vec(),
            ..Default::default()
        };
        assert_eq!(
            commit_transaction(&framed(&request)),
            Some(b"txn-7".to_vec())
        );
        request.transaction.clear();
        assert_eq!(commit_transaction(&framed(&request)), None);
        let mut compressed = framed(&request);
        compressed[0] = 1;
        assert_eq!(commit_transaction(&compressed), None);
        assert_eq!(commit_transaction(&[0, 0, 0, 0, 9, 1]), None);
    }
}
