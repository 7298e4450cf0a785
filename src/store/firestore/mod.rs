//! The Firestore [`CounterStore`]: one read-write transaction per batch,
//! in two round trips (BatchGetDocuments opening the transaction, Commit).
//!
//! Invariants: the memberships and the batch marker are read inside the
//! transaction before anything is written (so Firestore locks them); a batch
//! whose marker exists is rolled back and reported already committed; every
//! membership write carries a precondition on what was read, so even an
//! optimistic database cannot apply a plan computed from stale reads.
//!
//! The schema lives beside it: [`layout`] names every collection and
//! document, [`codec`] turns documents into values and back and builds a
//! batch's writes, [`errors`] classes failures.

use std::collections::BTreeMap;
use std::time::Duration;

use firestore::FirestoreDb;
use gcloud_sdk::google::firestore::v1 as fs;
use gcloud_sdk::prost_types::Timestamp;
use gcloud_sdk::tonic::Code;
use rustc_hash::FxHashMap;

use fs::value::ValueType;

pub mod codec;
pub mod errors;
pub mod layout;

pub use codec::{
    build_writes, membership_from_fields, quarantine_from_document, quarantine_write, StoredRecord,
};
pub use errors::{classify, status_error};
pub use layout::Layout;

use codec::effects_from_fields;

use super::counter_shards::{CounterLease, CounterShardPlanner};
use super::{Attempt, CommitOutcome, CommitReport, CounterStore, ErrorClass, StoreError};
use crate::pipeline::batch::{Batch, Effects, Membership, MembershipKey, Plan};

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
                code: Code::Internal,
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
                    code: Code::DeadlineExceeded,
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
