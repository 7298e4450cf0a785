//! The Firestore [`CounterStore`]: one read-write transaction per batch,
//! in two round trips (BatchGetDocuments opening the transaction, Commit).
//!
//! Invariants: the memberships and the batch marker are read inside the
//! transaction before anything is written (so Firestore locks them); a batch
//! whose marker exists is rolled back and reported already committed; every
//! membership write carries a precondition on what was read, so even an
//! optimistic database cannot apply a plan computed from stale reads.

use std::collections::{BTreeMap, HashMap};
use std::hash::BuildHasher;
use std::time::Duration;

use firestore::FirestoreDb;
use gcloud_sdk::google::firestore::v1 as fs;
use gcloud_sdk::prost_types::Timestamp;
use gcloud_sdk::tonic::{Code, Status};
use rustc_hash::FxHashMap;

use fs::document_transform::field_transform::{ServerValue, TransformType};
use fs::document_transform::FieldTransform;
use fs::value::ValueType;

use super::counter_shards::{CounterLease, CounterShardPlanner};
use super::{Attempt, CommitOutcome, CommitReport, CounterStore, ErrorClass, StoreError};
use crate::batch::{push_decimal, Batch, Effects, Membership, MembershipKey, Plan, PoisonRecord};
use crate::event::Version;

/// Where hotcount's documents live in one database.
#[derive(Clone, Debug)]
pub struct Layout {
    /// `projects/{p}/databases/{d}`.
    pub database: String,
    /// Prefix of every collection name (e.g. `hc_`).
    pub collection_prefix: String,
    /// `{database}/documents/{prefix}likes/`: built once, since every
    /// batch names each of its memberships twice (read and write).
    likes_prefix: String,
    /// `{database}/documents/{prefix}counters/`: built once, since every
    /// batch names the counter shard of each post it increments.
    counters_prefix: String,
}

impl Layout {
    /// The layout of `project`/`database` with `prefix`.
    pub fn new(project: &str, database: &str, prefix: &str) -> Self {
        let database = format!("projects/{project}/databases/{database}");
        let likes_prefix = format!("{database}/documents/{prefix}likes/");
        let counters_prefix = format!("{database}/documents/{prefix}counters/");
        Self {
            database,
            collection_prefix: prefix.to_string(),
            likes_prefix,
            counters_prefix,
        }
    }

    /// `{database}/documents`.
    pub fn root(&self) -> String {
        format!("{}/documents", self.database)
    }

    /// A top-level collection's full name segment, with the prefix.
    pub fn collection(&self, name: &str) -> String {
        format!("{}{name}", self.collection_prefix)
    }

    /// The membership document of `key`.
    pub fn membership(&self, key: &MembershipKey) -> String {
        let mut name = String::with_capacity(self.likes_prefix.len() + key.doc_id_len());
        name.push_str(&self.likes_prefix);
        key.push_doc_id(&mut name);
        name
    }

    /// `{database}/documents/{prefix}counters/`: what every counter shard's
    /// name starts with, before `{post}/shards/{k}`.
    pub fn counters_prefix(&self) -> &str {
        &self.counters_prefix
    }

    /// The parent of a post's counter shards.
    pub fn counter_parent(&self, post_id: &str) -> String {
        let mut name = String::with_capacity(self.counters_prefix.len() + post_id.len());
        name.push_str(&self.counters_prefix);
        name.push_str(post_id);
        name
    }

    /// Counter shard `k` of `post_id` (`{parent}/shards/{k}`), in one
    /// allocation: a commit names one per post it increments.
    pub fn counter_shard(&self, post_id: &str, k: u32) -> String {
        const SHARDS: &str = "/shards/";
        let mut name =
            String::with_capacity(self.counters_prefix.len() + post_id.len() + SHARDS.len() + 10);
        name.push_str(&self.counters_prefix);
        name.push_str(post_id);
        name.push_str(SHARDS);
        push_decimal(&mut name, k as usize);
        name
    }

    /// The batch marker `{consumer}:{batch_id}`.
    pub fn marker(&self, consumer: &str, batch_id: &str) -> String {
        format!(
            "{}/{}/{consumer}:{batch_id}",
            self.root(),
            self.collection("batches")
        )
    }

    /// The quarantine record `{consumer}:{doc_id}` ([`PoisonRecord::doc_id`]).
    pub fn quarantine(&self, consumer: &str, doc_id: &str) -> String {
        format!(
            "{}/{}/{consumer}:{doc_id}",
            self.root(),
            self.collection("quarantine")
        )
    }
}

/// Longest wait for a best-effort rollback.
const ROLLBACK_TIMEOUT: Duration = Duration::from_secs(2);

/// Store settings.
#[derive(Clone, Debug)]
pub struct FirestoreStoreConfig {
    /// Document layout.
    pub layout: Layout,
    /// Consumer name: namespaces batch markers and quarantine records.
    pub consumer: String,
    /// Counter shards per post at most; each increment goes to one, chosen
    /// at random among as many as the post's write rate needs.
    pub counter_shards: u32,
    /// Increments per second one counter shard document should take (a
    /// post uses more shards as its rate grows); 0 = always all shards.
    pub counter_shard_target_writes_per_sec: u32,
    /// How long batch markers are kept (the `expireAt` TTL field).
    pub marker_ttl: Duration,
}

/// The Firestore store.
#[derive(Clone)]
pub struct FirestoreStore {
    db: FirestoreDb,
    config: FirestoreStoreConfig,
    shards: std::sync::Arc<CounterShardPlanner>,
}

impl FirestoreStore {
    /// A store over an open client.
    pub fn new(db: FirestoreDb, config: FirestoreStoreConfig) -> Self {
        let shards = std::sync::Arc::new(CounterShardPlanner::new(
            config.counter_shards,
            config.counter_shard_target_writes_per_sec,
        ));
        Self { db, config, shards }
    }

    /// The layout in use.
    pub fn layout(&self) -> &Layout {
        &self.config.layout
    }

    /// Reads one document by full name (`None` when missing).
    pub async fn get(&self, name: &str) -> Result<Option<fs::Document>, StoreError> {
        let request = fs::GetDocumentRequest {
            name: name.to_string(),
            ..Default::default()
        };
        match self.client().get_document(request).await {
            Ok(doc) => Ok(Some(doc.into_inner())),
            Err(status) if status.code() == Code::NotFound => Ok(None),
            Err(status) => Err(status_error("GetDocument", &status)),
        }
    }

    /// The raw gRPC client (for tools that read more than the store needs).
    pub fn client(
        &self,
    ) -> fs::firestore_client::FirestoreClient<gcloud_sdk::GoogleAuthMiddleware> {
        self.db.client().get()
    }

    /// Ends `transaction` without writing, releasing its locks (best effort:
    /// a failed rollback leaves the transaction to expire on its own).
    pub async fn rollback(&self, transaction: Vec<u8>) {
        let request = fs::RollbackRequest {
            database: self.config.layout.database.clone(),
            transaction,
            ..Default::default()
        };
        // Bounded: a rollback is best effort, and it runs on the way out.
        let rolled = tokio::time::timeout(ROLLBACK_TIMEOUT, self.client().rollback(request)).await;
        match rolled {
            Ok(Ok(_)) => {}
            Ok(Err(status)) => {
                tracing::debug!(code = ?status.code(), "rollback failed; the transaction expires on its own");
            }
            Err(_) => tracing::debug!("rollback timed out; the transaction expires on its own"),
        }
    }

    /// Runs `query` under `parent` (inside `transaction` when given) and
    /// returns every document it yields.
    pub async fn run_query(
        &self,
        parent: &str,
        query: fs::StructuredQuery,
        transaction: Option<&[u8]>,
    ) -> Result<Vec<fs::Document>, StoreError> {
        let op = "RunQuery";
        let request = fs::RunQueryRequest {
            parent: parent.to_string(),
            query_type: Some(fs::run_query_request::QueryType::StructuredQuery(query)),
            consistency_selector: transaction
                .map(|t| fs::run_query_request::ConsistencySelector::Transaction(t.to_vec())),
            ..Default::default()
        };
        let mut stream = self
            .client()
            .run_query(request)
            .await
            .map_err(|s| status_error(op, &s))?
            .into_inner();
        let mut documents = Vec::new();
        while let Some(response) = stream.message().await.map_err(|s| status_error(op, &s))? {
            documents.extend(response.document);
        }
        Ok(documents)
    }

    /// Reads the memberships and the marker, opening a read-write
    /// transaction (that retries `attempt.retry_transaction`, if any).
    async fn read(
        &self,
        batch: &Batch,
        marker: &str,
        attempt: &Attempt,
        opened: &parking_lot::Mutex<Option<Vec<u8>>>,
    ) -> Result<Snapshot, StoreError> {
        let layout = &self.config.layout;
        // Document name -> key, to place what comes back (in any order).
        // FxHash: at most one batch of names, and SipHash showed in profiles.
        let count = batch.events.len();
        let mut names: FxHashMap<String, &MembershipKey> =
            FxHashMap::with_capacity_and_hasher(count, Default::default());
        let mut documents: Vec<String> = Vec::with_capacity(count + 1);
        for key in batch.keys() {
            let name = layout.membership(key);
            documents.push(name.clone());
            names.insert(name, key);
        }
        documents.push(marker.to_string());
        let request = fs::BatchGetDocumentsRequest {
            database: layout.database.clone(),
            documents,
            mask: None,
            consistency_selector: Some(
                fs::batch_get_documents_request::ConsistencySelector::NewTransaction(
                    fs::TransactionOptions {
                        mode: Some(fs::transaction_options::Mode::ReadWrite(
                            fs::transaction_options::ReadWrite {
                                retry_transaction: attempt
                                    .retry_transaction
                                    .clone()
                                    .unwrap_or_default(),
                                ..Default::default()
                            },
                        )),
                    },
                ),
            ),
            ..Default::default()
        };
        let op = "BatchGetDocuments";
        let mut stream = self
            .client()
            .batch_get_documents(request)
            .await
            .map_err(|s| status_error(op, &s))?
            .into_inner();
        let mut snapshot = Snapshot {
            memberships: FxHashMap::with_capacity_and_hasher(count, Default::default()),
            update_times: FxHashMap::with_capacity_and_hasher(count, Default::default()),
            ..Snapshot::default()
        };
        loop {
            let response = match stream.message().await {
                Ok(Some(r)) => r,
                Ok(None) => break,
                Err(status) => {
                    let mut error = status_error(op, &status);
                    if !snapshot.transaction.is_empty() {
                        let transaction = std::mem::take(&mut snapshot.transaction);
                        self.rollback(transaction.clone()).await;
                        error.transaction = Some(transaction);
                    }
                    return Err(error);
                }
            };
            if !response.transaction.is_empty() {
                *opened.lock() = Some(response.transaction.clone());
                snapshot.transaction = response.transaction;
            }
            let Some(fs::batch_get_documents_response::Result::Found(doc)) = response.result else {
                continue;
            };
            if doc.name == marker {
                snapshot.marker = Some(effects_from_fields(&doc.fields));
            } else if let Some(&key) = names.get(&doc.name) {
                snapshot.update_times.insert(key.clone(), doc.update_time);
                if let Some(m) = membership_from_fields(&doc.fields) {
                    snapshot.memberships.insert(key.clone(), m);
                }
            }
        }
        if snapshot.transaction.is_empty() {
            return Err(StoreError {
                op,
                code: "INTERNAL".into(),
                message: "no transaction id in the BatchGetDocuments response".into(),
                class: ErrorClass::Transient,
                transaction: None,
            });
        }
        Ok(snapshot)
    }

    fn writes(
        &self,
        batch: &Batch,
        plan: &Plan,
        snapshot: &Snapshot,
        marker: &str,
        counters: &CounterLease<'_>,
    ) -> Vec<fs::Write> {
        build_writes(
            &self.config,
            batch,
            plan,
            &snapshot.update_times,
            marker,
            |i| counters.shard(i),
        )
    }
}

/// The writes of one batch's commit: changed memberships (each with a
/// precondition on what was read), one increment per post on the counter
/// shard `counter_shard_of(i)` picks for the `i`-th post of `plan.deltas`,
/// the marker (create-if-absent) and quarantine records.
pub fn build_writes(
    config: &FirestoreStoreConfig,
    batch: &Batch,
    plan: &Plan,
    update_times: &HashMap<MembershipKey, Option<Timestamp>, impl BuildHasher>,
    marker: &str,
    counter_shard_of: impl Fn(usize) -> u32,
) -> Vec<fs::Write> {
    let layout = &config.layout;
    let mut writes = Vec::with_capacity(plan.memberships.len() + plan.deltas.len() + 2);
    for (key, membership) in &plan.memberships {
        let precondition = match update_times.get(key) {
            Some(Some(time)) => fs::precondition::ConditionType::UpdateTime(*time),
            _ => fs::precondition::ConditionType::Exists(false),
        };
        writes.push(fs::Write {
            operation: Some(fs::write::Operation::Update(fs::Document {
                name: layout.membership(key),
                fields: membership_fields(key, membership, &batch.id),
                ..Default::default()
            })),
            update_mask: None,
            update_transforms: vec![server_time("updatedAt")],
            current_document: Some(fs::Precondition {
                condition_type: Some(precondition),
            }),
        });
    }
    for (i, (post, delta)) in plan.deltas.iter().enumerate() {
        let shard = counter_shard_of(i);
        writes.push(fs::Write {
            operation: Some(fs::write::Operation::Update(fs::Document {
                name: layout.counter_shard(post, shard),
                fields: HashMap::from([("postId".to_string(), string(post))]),
                ..Default::default()
            })),
            update_mask: Some(fs::DocumentMask {
                field_paths: vec!["postId".into()],
            }),
            update_transforms: vec![FieldTransform {
                field_path: "likes".into(),
                transform_type: Some(TransformType::Increment(int(*delta))),
            }],
            current_document: None,
        });
    }
    writes.push(marker_write(config, batch, plan, marker));
    for poison in &batch.poison {
        writes.push(quarantine_write(config, &poison.item));
    }
    writes
}

fn marker_write(
    config: &FirestoreStoreConfig,
    batch: &Batch,
    plan: &Plan,
    marker: &str,
) -> fs::Write {
    let expire = std::time::SystemTime::now() + config.marker_ttl;
    let e = plan.effects;
    let fields = HashMap::from([
        ("consumer".to_string(), string(&config.consumer)),
        ("batchId".to_string(), string(&batch.id)),
        ("messages".to_string(), int(batch.message_count as i64)),
        ("applied".to_string(), int(e.applied as i64)),
        ("duplicates".to_string(), int(e.duplicates as i64)),
        ("stale".to_string(), int(e.stale as i64)),
        ("poison".to_string(), int(e.poison as i64)),
        ("posts".to_string(), int(plan.deltas.len() as i64)),
        ("expireAt".to_string(), timestamp(expire.into())),
    ]);
    fs::Write {
        operation: Some(fs::write::Operation::Update(fs::Document {
            name: marker.to_string(),
            fields,
            ..Default::default()
        })),
        update_mask: None,
        update_transforms: vec![server_time("committedAt")],
        current_document: Some(fs::Precondition {
            condition_type: Some(fs::precondition::ConditionType::Exists(false)),
        }),
    }
}

/// The quarantine record of `poison`. Attribute keys are stored as values
/// (`attributes` is an array of `{key, value}` maps), so no key the message
/// carried becomes a field name; every part is bounded by [`PoisonRecord`].
pub fn quarantine_write(config: &FirestoreStoreConfig, poison: &PoisonRecord) -> fs::Write {
    let attributes = poison
        .attributes
        .iter()
        .map(|(k, v)| {
            value(ValueType::MapValue(fs::MapValue {
                fields: HashMap::from([
                    ("key".to_string(), string(k)),
                    ("value".to_string(), string(v)),
                ]),
            }))
        })
        .collect();
    let fields = HashMap::from([
        ("consumer".to_string(), string(&config.consumer)),
        ("messageId".to_string(), string(poison.stored_message_id())),
        ("reason".to_string(), string(&poison.reason)),
        (
            "data".to_string(),
            value(ValueType::BytesValue(poison.data.clone())),
        ),
        ("dataBytes".to_string(), int(poison.data_len as i64)),
        ("dataSha256".to_string(), string(&poison.data_sha256)),
        (
            "attributes".to_string(),
            value(ValueType::ArrayValue(fs::ArrayValue { values: attributes })),
        ),
        (
            "attributeCount".to_string(),
            int(poison.attribute_count as i64),
        ),
        (
            "attributesTruncated".to_string(),
            value(ValueType::BooleanValue(poison.attributes_truncated)),
        ),
    ]);
    fs::Write {
        operation: Some(fs::write::Operation::Update(fs::Document {
            name: config.layout.quarantine(&config.consumer, &poison.doc_id()),
            fields,
            ..Default::default()
        })),
        update_mask: None,
        update_transforms: vec![server_time("quarantinedAt")],
        current_document: None,
    }
}

/// A quarantine record as stored, read back by the operator tools.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StoredRecord {
    /// Full document name.
    pub name: String,
    /// The consumer that wrote it.
    pub consumer: String,
    /// The record's content.
    pub record: PoisonRecord,
    /// When it was written (RFC 3339), if known.
    pub quarantined_at: Option<String>,
}

impl StoredRecord {
    /// The document id (`{consumer}:{doc_id}`), the last segment of the name.
    pub fn id(&self) -> &str {
        self.name.rsplit('/').next().unwrap_or(&self.name)
    }
}

/// Reads a quarantine record back ([`quarantine_write`]'s fields).
pub fn quarantine_from_document(doc: &fs::Document) -> StoredRecord {
    let get = |name: &str| doc.fields.get(name).and_then(|v| v.value_type.as_ref());
    let text = |name: &str| match get(name) {
        Some(ValueType::StringValue(s)) => s.clone(),
        _ => String::new(),
    };
    let number = |name: &str| match get(name) {
        Some(ValueType::IntegerValue(n)) => usize::try_from(*n).unwrap_or(0),
        _ => 0,
    };
    let mut attributes = Vec::new();
    if let Some(ValueType::ArrayValue(array)) = get("attributes") {
        for entry in &array.values {
            if let Some(ValueType::MapValue(map)) = &entry.value_type {
                let part = |k: &str| match map.fields.get(k).and_then(|v| v.value_type.as_ref()) {
                    Some(ValueType::StringValue(s)) => s.clone(),
                    _ => String::new(),
                };
                attributes.push((part("key"), part("value")));
            }
        }
    }
    let data = match get("data") {
        Some(ValueType::BytesValue(b)) => b.clone(),
        _ => Vec::new(),
    };
    let quarantined_at = match get("quarantinedAt") {
        Some(ValueType::TimestampValue(t)) => {
            let nanos = u32::try_from(t.nanos).unwrap_or(0);
            chrono::DateTime::from_timestamp(t.seconds, nanos).map(|d| d.to_rfc3339())
        }
        _ => None,
    };
    StoredRecord {
        name: doc.name.clone(),
        consumer: text("consumer"),
        record: PoisonRecord {
            message_id: text("messageId"),
            reason: text("reason"),
            data,
            data_len: number("dataBytes"),
            data_sha256: text("dataSha256"),
            attributes,
            attribute_count: number("attributeCount"),
            attributes_truncated: matches!(
                get("attributesTruncated"),
                Some(ValueType::BooleanValue(true))
            ),
        },
        quarantined_at,
    }
}

#[derive(Default)]
struct Snapshot {
    transaction: Vec<u8>,
    /// The effects recorded by an earlier attempt that committed.
    marker: Option<Effects>,
    memberships: FxHashMap<MembershipKey, Membership>,
    update_times: FxHashMap<MembershipKey, Option<Timestamp>>,
}

impl CounterStore for FirestoreStore {
    async fn commit(&self, batch: &Batch, attempt: &Attempt) -> Result<CommitReport, StoreError> {
        let opened = parking_lot::Mutex::new(None);
        let work = self.attempt(batch, attempt, &opened);
        tokio::select! {
            result = work => result,
            () = attempt.deadline.reached() => {
                // Abandoned mid-RPC: end the transaction it opened, so its
                // locks do not stall other replicas until it expires.
                let transaction = opened.lock().take();
                if let Some(transaction) = &transaction {
                    self.rollback(transaction.clone()).await;
                }
                Err(StoreError {
                    op: "Commit",
                    code: format!("{:?}", Code::DeadlineExceeded),
                    message: "the attempt's deadline passed; its transaction was rolled back"
                        .into(),
                    class: ErrorClass::Transient,
                    transaction,
                })
            }
        }
    }

    async fn count(&self, post_id: &str) -> Result<i64, StoreError> {
        let shards = list_counter_shards(self, post_id).await?;
        Ok(shards.values().sum())
    }
}

impl FirestoreStore {
    /// One commit attempt of `batch`; records the transaction it opens in
    /// `opened` as soon as it is known.
    async fn attempt(
        &self,
        batch: &Batch,
        attempt: &Attempt,
        opened: &parking_lot::Mutex<Option<Vec<u8>>>,
    ) -> Result<CommitReport, StoreError> {
        let marker = self.config.layout.marker(&self.config.consumer, &batch.id);
        let snapshot = self.read(batch, &marker, attempt, opened).await?;
        if let Some(effects) = snapshot.marker {
            self.rollback(snapshot.transaction).await;
            return Ok(CommitReport {
                outcome: CommitOutcome::AlreadyCommitted,
                effects,
                increments: 0,
                rpcs: 2,
            });
        }
        let plan = batch.plan(&snapshot.memberships);
        // Held until the commit has ended: another batch in flight on one of
        // these posts increments a different counter shard.
        let counters = self.shards.lease(
            plan.deltas.keys().map(String::as_str),
            std::time::Instant::now(),
        );
        let writes = self.writes(batch, &plan, &snapshot, &marker, &counters);
        let transaction = snapshot.transaction.clone();
        let request = fs::CommitRequest {
            database: self.config.layout.database.clone(),
            writes,
            transaction: snapshot.transaction,
            ..Default::default()
        };
        if let Err(status) = self.client().commit(request).await {
            let mut error = status_error("Commit", &status);
            // ABORTED ended the transaction; after any other failure it may
            // still be open (the answer was lost on the wire) and hold its
            // locks until it expires: end it now (best effort; a commit that
            // did apply makes the rollback fail, harmlessly).
            if status.code() != Code::Aborted {
                self.rollback(transaction.clone()).await;
            }
            error.transaction = Some(transaction);
            return Err(error);
        }
        Ok(CommitReport {
            outcome: CommitOutcome::Committed,
            effects: plan.effects,
            increments: plan.deltas.len(),
            rpcs: 2,
        })
    }
}

/// Every counter shard of `post_id` with its `likes` value.
pub async fn list_counter_shards(
    store: &FirestoreStore,
    post_id: &str,
) -> Result<BTreeMap<String, i64>, StoreError> {
    let query = fs::StructuredQuery {
        from: vec![fs::structured_query::CollectionSelector {
            collection_id: "shards".into(),
            all_descendants: false,
        }],
        ..Default::default()
    };
    let parent = store.config.layout.counter_parent(post_id);
    let mut shards = BTreeMap::new();
    for doc in store.run_query(&parent, query, None).await? {
        let likes = match doc.fields.get("likes").and_then(|v| v.value_type.as_ref()) {
            Some(ValueType::IntegerValue(n)) => *n,
            // An increment that overflowed saturates; a double never comes from us.
            Some(ValueType::DoubleValue(d)) => *d as i64,
            _ => 0,
        };
        shards.insert(doc.name, likes);
    }
    Ok(shards)
}

/// A gRPC failure of `op` as a [`StoreError`], classed by [`classify`].
pub fn status_error(op: &'static str, status: &Status) -> StoreError {
    StoreError {
        op,
        code: format!("{:?}", status.code()),
        message: status.message().to_string(),
        class: classify(status.code(), status.message()),
        transaction: None,
    }
}

/// What a gRPC failure proves about a batch: the one table of it.
///
/// | code | class | why |
/// |---|---|---|
/// | `INVALID_ARGUMENT` | Content | the request's names or values are refused (reserved name, size, depth) |
/// | `INVALID_ARGUMENT` "transaction has expired / is no longer valid" | Transient | the transaction outlived its lease (a stall); Google's SDKs retry the whole transaction |
/// | `ABORTED` | Transient | contention: another transaction won the lock |
/// | `FAILED_PRECONDITION`, `ALREADY_EXISTS` | Transient | a precondition on what this transaction read failed: another writer got in between; re-read |
/// | `UNAVAILABLE`, `DEADLINE_EXCEEDED`, `CANCELLED`, `UNKNOWN`, `INTERNAL` | Transient | the call may or may not have applied; the batch marker resolves it |
/// | `RESOURCE_EXHAUSTED` | Transient | quota or rate: back off |
/// | `UNAUTHENTICATED`, `PERMISSION_DENIED` | Transient | credentials or IAM: an operator fixes them; the content is not at fault |
/// | `NOT_FOUND` | Transient | the database (or project) is missing: configuration, not content |
/// | `OUT_OF_RANGE`, `UNIMPLEMENTED`, `DATA_LOSS`, `OK` | Transient | proves nothing about the content |
///
/// Only a refusal of the content may lead to a quarantine; everything else
/// is retried with backoff, then the batch is nacked and Pub/Sub redelivers
/// it, so a wrong credential or a missing database never quarantines a
/// valid event.
pub fn classify(code: Code, message: &str) -> ErrorClass {
    match code {
        Code::InvalidArgument if !is_expired_transaction(message) => ErrorClass::Content,
        _ => ErrorClass::Transient,
    }
}

/// Whether `message` is Firestore's "transaction expired" INVALID_ARGUMENT.
fn is_expired_transaction(message: &str) -> bool {
    let message = message.to_ascii_lowercase();
    message.contains("transaction has expired")
        || message.contains("transaction is no longer valid")
}

fn value(v: ValueType) -> fs::Value {
    fs::Value {
        value_type: Some(v),
    }
}

fn string(s: &str) -> fs::Value {
    value(ValueType::StringValue(s.to_string()))
}

fn int(n: i64) -> fs::Value {
    value(ValueType::IntegerValue(n))
}

fn timestamp(t: Timestamp) -> fs::Value {
    value(ValueType::TimestampValue(t))
}

fn server_time(field: &str) -> FieldTransform {
    FieldTransform {
        field_path: field.to_string(),
        transform_type: Some(TransformType::SetToServerValue(
            ServerValue::RequestTime as i32,
        )),
    }
}

fn micros_to_timestamp(micros: i64) -> Timestamp {
    Timestamp {
        seconds: micros.div_euclid(1_000_000),
        nanos: (micros.rem_euclid(1_000_000) * 1000) as i32,
    }
}

fn timestamp_to_micros(t: &Timestamp) -> i64 {
    t.seconds * 1_000_000 + i64::from(t.nanos) / 1000
}

fn membership_fields(
    key: &MembershipKey,
    m: &Membership,
    batch_id: &str,
) -> HashMap<String, fs::Value> {
    HashMap::from([
        ("postId".to_string(), string(&key.post_id)),
        ("userId".to_string(), string(&key.user_id)),
        ("liked".to_string(), value(ValueType::BooleanValue(m.liked))),
        ("seq".to_string(), int(m.version.seq)),
        (
            "occurredAt".to_string(),
            timestamp(micros_to_timestamp(m.version.occurred_at_micros)),
        ),
        ("eventId".to_string(), string(&m.version.event_id)),
        ("batchId".to_string(), string(batch_id)),
    ])
}

/// The effects a batch marker recorded.
fn effects_from_fields(fields: &HashMap<String, fs::Value>) -> Effects {
    let get = |name: &str| match fields.get(name).and_then(|v| v.value_type.as_ref()) {
        Some(ValueType::IntegerValue(n)) => u64::try_from(*n).unwrap_or(0),
        _ => 0,
    };
    Effects {
        applied: get("applied"),
        duplicates: get("duplicates"),
        stale: get("stale"),
        poison: get("poison"),
    }
}

/// Reads a membership document's state; `None` if it is not one of ours.
pub fn membership_from_fields(fields: &HashMap<String, fs::Value>) -> Option<Membership> {
    let get = |name: &str| fields.get(name).and_then(|v| v.value_type.as_ref());
    let liked = match get("liked")? {
        ValueType::BooleanValue(b) => *b,
        _ => return None,
    };
    let seq = match get("seq") {
        Some(ValueType::IntegerValue(n)) => *n,
        _ => 0,
    };
    let occurred_at_micros = match get("occurredAt") {
        Some(ValueType::TimestampValue(t)) => timestamp_to_micros(t),
        _ => 0,
    };
    let event_id = match get("eventId") {
        Some(ValueType::StringValue(s)) => s.clone(),
        _ => String::new(),
    };
    Some(Membership {
        liked,
        version: Version {
            seq,
            occurred_at_micros,
            event_id,
        },
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn membership_fields_round_trip() {
        let key = MembershipKey {
            post_id: "p".into(),
            user_id: "u".into(),
        };
        let m = Membership {
            liked: true,
            version: Version {
                seq: 3,
                occurred_at_micros: -1_500_001,
                event_id: "e".into(),
            },
        };
        let fields = membership_fields(&key, &m, "b");
        assert_eq!(membership_from_fields(&fields), Some(m));
    }

    #[test]
    fn quarantine_records_round_trip_with_hostile_attributes_as_values() {
        let config = FirestoreStoreConfig {
            layout: Layout::new("proj", "(default)", ""),
            consumer: "c1".into(),
            counter_shards: 1,
            counter_shard_target_writes_per_sec: 0,
            marker_ttl: Duration::ZERO,
        };
        let attributes = BTreeMap::from([
            ("__name__".to_string(), "a".to_string()),
            ("x.y".to_string(), "b".to_string()),
        ]);
        let record = PoisonRecord::new("42".into(), "bad".into(), b"{nope", attributes);
        let write = quarantine_write(&config, &record);
        let Some(fs::write::Operation::Update(doc)) = write.operation else {
            panic!("an update");
        };
        assert!(doc.name.ends_with("/quarantine/c1:42"), "{}", doc.name);
        // No key of the message became a field name.
        let names: Vec<&String> = doc.fields.keys().collect();
        assert!(
            names
                .iter()
                .all(|n| !n.starts_with("__") && !n.contains('.')),
            "{names:?}"
        );
        let back = quarantine_from_document(&doc);
        assert_eq!(back.record, record);
        assert_eq!(back.consumer, "c1");
        assert_eq!(back.id(), "c1:42");
    }

    #[test]
    fn layout_namespaces_markers_by_consumer() {
        let layout = Layout::new("proj", "(default)", "hc_");
        assert_eq!(
            layout.marker("c1", "abc"),
            "projects/proj/databases/(default)/documents/hc_batches/c1:abc"
        );
        assert_eq!(
            layout.counter_shard("p1", 3),
            "projects/proj/databases/(default)/documents/hc_counters/p1/shards/3"
        );
        assert_eq!(
            layout.counter_shard("p1", 4_000_000_000),
            "projects/proj/databases/(default)/documents/hc_counters/p1/shards/4000000000"
        );
        assert_eq!(
            layout.counter_parent("p1"),
            "projects/proj/databases/(default)/documents/hc_counters/p1"
        );
        let key = MembershipKey {
            post_id: "post-1".into(),
            user_id: "user-2".into(),
        };
        assert_eq!(
            layout.membership(&key),
            "projects/proj/databases/(default)/documents/hc_likes/9368d4ee.6.post-1.user-2"
        );
    }

    #[test]
    fn contention_and_unavailability_are_retryable() {
        assert!(status_error("Commit", &Status::aborted("x")).is_retryable());
        assert!(status_error("Commit", &Status::unavailable("x")).is_retryable());
        assert!(!status_error("Commit", &Status::invalid_argument("x")).is_retryable());
    }

    #[test]
    fn only_a_refused_content_is_isolated_every_other_code_is_retried() {
        use Code::*;
        let every_code = [
            Ok,
            Cancelled,
            Unknown,
            InvalidArgument,
            DeadlineExceeded,
            NotFound,
            AlreadyExists,
            PermissionDenied,
            ResourceExhausted,
            FailedPrecondition,
            Aborted,
            OutOfRange,
            Unimplemented,
            Internal,
            Unavailable,
            DataLoss,
            Unauthenticated,
        ];
        for code in every_code {
            let error = status_error("Commit", &Status::new(code, "x"));
            let expected = if code == InvalidArgument {
                ErrorClass::Content
            } else {
                ErrorClass::Transient
            };
            assert_eq!(error.class, expected, "{code:?}");
            assert_eq!(error.is_retryable(), expected == ErrorClass::Transient);
        }
    }

    #[test]
    fn expired_transaction_is_retried_not_quarantined() {
        let expired = Status::invalid_argument(
            "The referenced transaction has expired or is no longer valid.",
        );
        assert!(status_error("Commit", &expired).is_retryable());
        assert!(
            !status_error("Commit", &Status::invalid_argument("bad document id")).is_retryable()
        );
    }
}
