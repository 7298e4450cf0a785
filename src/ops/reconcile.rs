//! `hotcount reconcile`: compares each post's counter shards with the number
//! of its liked memberships in one snapshot, and repairs a difference with a
//! correction that commits only if no other correction of the post did since.
//!
//! Invariant: a repair attempt reads the post's liked memberships (count),
//! its counter shards and its guard document `reconcile/{post}` in one
//! read-only transaction, so both sides of the comparison are the state at
//! one read time `t`, whatever commits meanwhile. It then commits, in one
//! non-transactional Commit, the increment `d = liked - shards` on shard 0
//! and the guard, on the precondition that the guard is unchanged since `t`
//! (`update_time` as read, or `exists = false`). So the commit applies only
//! if no correction of the post committed after `t`: two repairs of a post
//! that read before either committed cannot both apply; the loser gets
//! FAILED_PRECONDITION / ALREADY_EXISTS and retries from fresh reads.
//!
//! Why consumers need no lock and no precondition: every consumer commit
//! writes a post's memberships and the matching increments together
//! (`store::firestore`), so it leaves `liked - shards` of every post
//! unchanged, even when it creates a new membership (a phantom no query
//! could have locked) or a new counter shard. Hence `liked - shards` at the
//! correction's commit is `d` plus whatever non-hotcount writes (the drift
//! being repaired) landed after `t`, and the correction leaves exactly that
//! later drift, never a consumer's like subtracted or counted twice. The
//! repair takes no lock, so it never makes a consumer wait or abort, and a
//! busy post's traffic cannot starve it. An attempt whose Commit answer was
//! lost finds its own `repairId` in the guard and is not applied twice.
//! Reports without repair read in one read-only transaction too.

use std::collections::{BTreeMap, HashMap};

use futures::future::BoxFuture;

use gcloud_sdk::google::firestore::v1 as fs;
use gcloud_sdk::prost_types::Timestamp;
use gcloud_sdk::tonic::{Code, Status};

use fs::document_transform::field_transform::{ServerValue, TransformType};
use fs::document_transform::FieldTransform;
use fs::structured_aggregation_query::aggregation::{Count, Operator as AggregationOperator};
use fs::structured_query::{
    field_filter, filter::FilterType, CollectionSelector, CompositeFilter, FieldFilter,
    FieldReference, Filter, Projection,
};
use fs::value::ValueType;

use crate::store::firestore::{status_error, FirestoreStore};
use crate::store::StoreError;

/// Attempts of one post's repair (snapshot, then conditional commit) before giving up.
pub const REPAIR_MAX_ATTEMPTS: u32 = 5;

/// One post's comparison.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PostReport {
    /// The post.
    pub post_id: String,
    /// Sum of its counter shards.
    pub shards_sum: i64,
    /// Membership documents of the post with `liked == true`.
    pub liked: i64,
    /// Whether a correcting increment was committed.
    pub repaired: bool,
}

impl PostReport {
    /// `liked - shards_sum`: the increment that makes the count right.
    pub fn difference(&self) -> i64 {
        self.liked - self.shards_sum
    }
}

/// A point of a repair attempt where its [`RepairHook`] is awaited.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RepairStep {
    /// The attempt's first read returned; its other reads have not begun.
    FirstRead,
    /// Everything is read and compared; the correction (if any) is not yet committed.
    Compared,
}

/// Awaited at each [`RepairStep`] of each repair attempt (numbered from 1):
/// lets a test hold a repair at a precise point while other writers run.
pub trait RepairHook: Send + Sync {
    /// Returns when the attempt may go on.
    fn reached(&self, step: RepairStep, attempt: u32) -> BoxFuture<'_, ()>;
}

/// The hook of [`reconcile_post`]: never holds anything.
pub struct NoHook;

impl RepairHook for NoHook {
    fn reached(&self, _step: RepairStep, _attempt: u32) -> BoxFuture<'_, ()> {
        Box::pin(std::future::ready(()))
    }
}

/// Compares (and with `repair`, fixes) one post.
pub async fn reconcile_post(
    store: &FirestoreStore,
    post_id: &str,
    repair: bool,
) -> Result<PostReport, StoreError> {
    reconcile_post_with(store, post_id, repair, &NoHook).await
}

/// [`reconcile_post`], awaiting `hook` at each [`RepairStep`] of a repair.
pub async fn reconcile_post_with(
    store: &FirestoreStore,
    post_id: &str,
    repair: bool,
    hook: &dyn RepairHook,
) -> Result<PostReport, StoreError> {
    if !repair {
        let txn = snapshot(store).await?;
        let result = read_post(store, post_id, &txn, None).await;
        store.rollback(txn).await;
        let (liked, shards) = result?;
        return Ok(PostReport {
            post_id: post_id.to_string(),
            shards_sum: shards.values().sum(),
            liked,
            repaired: false,
        });
    }
    // Names this call's corrections in the guard document, so an attempt
    // can tell that an earlier one whose answer was lost did commit.
    let repair_id = format!("{:016x}", rand::random::<u64>());
    let mut unanswered: Option<PostReport> = None;
    let mut attempt = 1;
    loop {
        let result = repair_once(store, post_id, &repair_id, hook, attempt).await;
        let error = match result {
            Ok(Outcome::Done(report)) => return Ok(report),
            Ok(Outcome::AlreadyApplied) => {
                // Only reachable after a failed Commit, which left its report.
                return unanswered.ok_or_else(|| internal("Commit", "a repair without a report"));
            }
            Err((error, sent)) => {
                if sent.is_some() {
                    unanswered = sent;
                }
                error
            }
        };
        if !error.is_retryable() || attempt >= REPAIR_MAX_ATTEMPTS {
            return Err(error);
        }
        tracing::debug!(%error, post = post_id, attempt, "repair not applied; retrying from fresh reads");
        tokio::time::sleep(std::time::Duration::from_millis(50 << attempt)).await;
        attempt += 1;
    }
}

/// How one repair attempt ended.
enum Outcome {
    /// Compared, and corrected if needed.
    Done(PostReport),
    /// The guard names this repair: an earlier attempt's correction committed.
    AlreadyApplied,
}

/// A failed attempt: the error, and the report of the correction it sent
/// if the Commit was sent (its outcome may be unknown).
type AttemptError = (StoreError, Option<PostReport>);

/// One attempt: reads the post's liked memberships (count), its counter
/// shards and its guard in one read-only snapshot, then commits the
/// correction with the guard, on the precondition that the guard is as read.
async fn repair_once(
    store: &FirestoreStore,
    post_id: &str,
    repair_id: &str,
    hook: &dyn RepairHook,
    attempt: u32,
) -> Result<Outcome, AttemptError> {
    let txn = snapshot(store).await.map_err(|e| (e, None))?;
    let read = async {
        let (liked, shards) = read_post(store, post_id, &txn, Some((hook, attempt))).await?;
        let guard = read_guard(store, post_id, &txn).await?;
        Ok::<_, StoreError>((liked, shards, guard))
    }
    .await;
    store.rollback(txn).await;
    let (liked, shards, guard) = read.map_err(|e| (e, None))?;
    if guard.repair_id.as_deref() == Some(repair_id) {
        return Ok(Outcome::AlreadyApplied);
    }
    let mut report = PostReport {
        post_id: post_id.to_string(),
        shards_sum: shards.values().sum(),
        liked,
        repaired: false,
    };
    let difference = report.difference();
    hook.reached(RepairStep::Compared, attempt).await;
    if difference == 0 {
        return Ok(Outcome::Done(report));
    }
    let layout = store.layout();
    let request = fs::CommitRequest {
        database: layout.database.clone(),
        writes: vec![
            correction(&layout.counter_shard(post_id, 0), post_id, difference),
            guard_write(store, post_id, repair_id, &report, &guard),
        ],
        // No transaction: the snapshot was read-only and nothing is locked;
        // the guard's precondition makes the commit conditional instead.
        ..Default::default()
    };
    report.repaired = true;
    if let Err(status) = store.client().commit(request).await {
        return Err((status_error("Commit", &status), Some(report)));
    }
    tracing::info!(post = post_id, difference, "counter repaired");
    Ok(Outcome::Done(report))
}

/// A post's guard document as a repair's snapshot saw it.
#[derive(Debug, Default)]
struct Guard {
    /// Its update time; `None` when it did not exist.
    update_time: Option<Timestamp>,
    /// The repair that wrote it last.
    repair_id: Option<String>,
}

/// `{root}/{prefix}reconcile/{post}`: written by every correction of the post.
fn guard_name(store: &FirestoreStore, post_id: &str) -> String {
    let layout = store.layout();
    format!(
        "{}/{}/{post_id}",
        layout.root(),
        layout.collection("reconcile")
    )
}

/// Reads the post's guard document in `txn`.
async fn read_guard(
    store: &FirestoreStore,
    post_id: &str,
    txn: &[u8],
) -> Result<Guard, StoreError> {
    let op = "BatchGetDocuments";
    let request = fs::BatchGetDocumentsRequest {
        database: store.layout().database.clone(),
        documents: vec![guard_name(store, post_id)],
        consistency_selector: Some(
            fs::batch_get_documents_request::ConsistencySelector::Transaction(txn.to_vec()),
        ),
        ..Default::default()
    };
    let mut stream = store
        .client()
        .batch_get_documents(request)
        .await
        .map_err(|s| status_error(op, &s))?
        .into_inner();
    let mut guard = Guard::default();
    while let Some(response) = stream.message().await.map_err(|s| status_error(op, &s))? {
        if let Some(fs::batch_get_documents_response::Result::Found(doc)) = response.result {
            guard.repair_id = match doc
                .fields
                .get("repairId")
                .and_then(|v| v.value_type.as_ref())
            {
                Some(ValueType::StringValue(id)) => Some(id.clone()),
                _ => None,
            };
            guard.update_time = Some(
                doc.update_time
                    .ok_or_else(|| internal(op, "a document without an update time"))?,
            );
        }
    }
    Ok(guard)
}

/// The guard write of a correction: records it, on the precondition that
/// the guard is still what the snapshot saw (so no other correction of the
/// post committed since).
fn guard_write(
    store: &FirestoreStore,
    post_id: &str,
    repair_id: &str,
    report: &PostReport,
    seen: &Guard,
) -> fs::Write {
    let precondition = match seen.update_time {
        Some(time) => fs::precondition::ConditionType::UpdateTime(time),
        None => fs::precondition::ConditionType::Exists(false),
    };
    let string = |s: &str| fs::Value {
        value_type: Some(ValueType::StringValue(s.to_string())),
    };
    let int = |n: i64| fs::Value {
        value_type: Some(ValueType::IntegerValue(n)),
    };
    fs::Write {
        operation: Some(fs::write::Operation::Update(fs::Document {
            name: guard_name(store, post_id),
            fields: HashMap::from([
                ("postId".to_string(), string(post_id)),
                ("repairId".to_string(), string(repair_id)),
                ("difference".to_string(), int(report.difference())),
                ("liked".to_string(), int(report.liked)),
                ("shardsSum".to_string(), int(report.shards_sum)),
            ]),
            ..Default::default()
        })),
        update_mask: None,
        update_transforms: vec![FieldTransform {
            field_path: "repairedAt".into(),
            transform_type: Some(TransformType::SetToServerValue(
                ServerValue::RequestTime as i32,
            )),
        }],
        current_document: Some(fs::Precondition {
            condition_type: Some(precondition),
        }),
    }
}

fn internal(op: &'static str, message: &str) -> StoreError {
    status_error(op, &Status::new(Code::Internal, message))
}

/// Compares every post that has counter shards or liked memberships, in one
/// read-only snapshot; with `repair`, each differing post is then repaired
/// in its own snapshot and conditional commit (which re-read it). Sorted by post id.
pub async fn reconcile_all(
    store: &FirestoreStore,
    repair: bool,
) -> Result<Vec<PostReport>, StoreError> {
    let txn = snapshot(store).await?;
    let scanned = scan_all(store, &txn).await;
    store.rollback(txn).await;
    let (liked, sums) = scanned?;
    let mut posts: BTreeMap<String, (i64, i64)> = BTreeMap::new();
    for (post, n) in liked {
        posts.entry(post).or_default().0 = n;
    }
    for (post, sum) in sums {
        posts.entry(post).or_default().1 = sum;
    }
    let mut reports = Vec::with_capacity(posts.len());
    for (post_id, (liked, shards_sum)) in posts {
        let report = PostReport {
            post_id,
            shards_sum,
            liked,
            repaired: false,
        };
        if repair && report.difference() != 0 {
            reports.push(reconcile_post(store, &report.post_id, true).await?);
        } else {
            reports.push(report);
        }
    }
    Ok(reports)
}

/// Liked memberships per post, and counter sums per post.
type Scan = (HashMap<String, i64>, HashMap<String, i64>);

async fn scan_all(store: &FirestoreStore, txn: &[u8]) -> Result<Scan, StoreError> {
    let layout = store.layout();
    let likes = fs::StructuredQuery {
        select: Some(Projection {
            fields: vec![field("postId")],
        }),
        from: vec![collection(&layout.collection("likes"), false)],
        r#where: Some(equals("liked", ValueType::BooleanValue(true))),
        ..Default::default()
    };
    let mut liked: HashMap<String, i64> = HashMap::new();
    for doc in store.run_query(&layout.root(), likes, Some(txn)).await? {
        if let Some(ValueType::StringValue(post)) =
            doc.fields.get("postId").and_then(|v| v.value_type.as_ref())
        {
            *liked.entry(post.clone()).or_default() += 1;
        }
    }
    let shards = fs::StructuredQuery {
        from: vec![collection("shards", true)],
        ..Default::default()
    };
    let counters = layout.counters_prefix();
    let mut sums: HashMap<String, i64> = HashMap::new();
    for doc in store.run_query(&layout.root(), shards, Some(txn)).await? {
        // `{root}/{prefix}counters/{post}/shards/{k}`: other prefixes' shards are skipped.
        let Some(rest) = doc.name.strip_prefix(counters) else {
            continue;
        };
        let Some((post, _)) = rest.rsplit_once("/shards/") else {
            continue;
        };
        *sums.entry(post.to_string()).or_default() += likes_of(&doc);
    }
    Ok((liked, sums))
}

/// Liked memberships (count) and counter shards of one post, in `txn`.
async fn read_post(
    store: &FirestoreStore,
    post_id: &str,
    txn: &[u8],
    hook: Option<(&dyn RepairHook, u32)>,
) -> Result<(i64, BTreeMap<String, i64>), StoreError> {
    let layout = store.layout();
    let liked_query = fs::StructuredQuery {
        from: vec![collection(&layout.collection("likes"), false)],
        r#where: Some(Filter {
            filter_type: Some(FilterType::CompositeFilter(CompositeFilter {
                op: fs::structured_query::composite_filter::Operator::And as i32,
                filters: vec![
                    equals("postId", ValueType::StringValue(post_id.to_string())),
                    equals("liked", ValueType::BooleanValue(true)),
                ],
            })),
        }),
        ..Default::default()
    };
    let liked = count(store, &layout.root(), liked_query, txn).await?;
    if let Some((hook, attempt)) = hook {
        hook.reached(RepairStep::FirstRead, attempt).await;
    }
    let shards_query = fs::StructuredQuery {
        from: vec![collection("shards", false)],
        ..Default::default()
    };
    let mut shards = BTreeMap::new();
    for doc in store
        .run_query(&layout.counter_parent(post_id), shards_query, Some(txn))
        .await?
    {
        let likes = likes_of(&doc);
        shards.insert(doc.name, likes);
    }
    Ok((liked, shards))
}

/// Begins a read-only transaction: every read in it sees one snapshot (its
/// read time), and it locks nothing.
async fn snapshot(store: &FirestoreStore) -> Result<Vec<u8>, StoreError> {
    let mode = fs::transaction_options::Mode::ReadOnly(Default::default());
    let request = fs::BeginTransactionRequest {
        database: store.layout().database.clone(),
        options: Some(fs::TransactionOptions { mode: Some(mode) }),
        ..Default::default()
    };
    let response = store
        .client()
        .begin_transaction(request)
        .await
        .map_err(|s| status_error("BeginTransaction", &s))?;
    Ok(response.into_inner().transaction)
}

async fn count(
    store: &FirestoreStore,
    parent: &str,
    query: fs::StructuredQuery,
    txn: &[u8],
) -> Result<i64, StoreError> {
    let op = "RunAggregationQuery";
    let aggregation = fs::StructuredAggregationQuery {
        aggregations: vec![fs::structured_aggregation_query::Aggregation {
            alias: "n".into(),
            operator: Some(AggregationOperator::Count(Count { up_to: None })),
        }],
        query_type: Some(fs::structured_aggregation_query::QueryType::StructuredQuery(query)),
    };
    let request = fs::RunAggregationQueryRequest {
        parent: parent.to_string(),
        query_type: Some(
            fs::run_aggregation_query_request::QueryType::StructuredAggregationQuery(aggregation),
        ),
        consistency_selector: Some(
            fs::run_aggregation_query_request::ConsistencySelector::Transaction(txn.to_vec()),
        ),
        ..Default::default()
    };
    let mut stream = store
        .client()
        .run_aggregation_query(request)
        .await
        .map_err(|s| status_error(op, &s))?
        .into_inner();
    while let Some(response) = stream.message().await.map_err(|s| status_error(op, &s))? {
        let value = response
            .result
            .and_then(|r| r.aggregate_fields.get("n").cloned())
            .and_then(|v| v.value_type);
        if let Some(ValueType::IntegerValue(n)) = value {
            return Ok(n);
        }
    }
    Err(internal(op, "no count in the aggregation response"))
}

/// The increment of `difference` on one counter shard.
fn correction(shard: &str, post_id: &str, difference: i64) -> fs::Write {
    fs::Write {
        operation: Some(fs::write::Operation::Update(fs::Document {
            name: shard.to_string(),
            fields: HashMap::from([(
                "postId".to_string(),
                fs::Value {
                    value_type: Some(ValueType::StringValue(post_id.to_string())),
                },
            )]),
            ..Default::default()
        })),
        update_mask: Some(fs::DocumentMask {
            field_paths: vec!["postId".into()],
        }),
        update_transforms: vec![FieldTransform {
            field_path: "likes".into(),
            transform_type: Some(TransformType::Increment(fs::Value {
                value_type: Some(ValueType::IntegerValue(difference)),
            })),
        }],
        current_document: None,
    }
}

fn likes_of(doc: &fs::Document) -> i64 {
    match doc.fields.get("likes").and_then(|v| v.value_type.as_ref()) {
        Some(ValueType::IntegerValue(n)) => *n,
        Some(ValueType::DoubleValue(d)) => *d as i64,
        _ => 0,
    }
}

fn field(path: &str) -> FieldReference {
    FieldReference {
        field_path: path.to_string(),
    }
}

fn collection(id: &str, all_descendants: bool) -> CollectionSelector {
    CollectionSelector {
        collection_id: id.to_string(),
        all_descendants,
    }
}

fn equals(path: &str, value: ValueType) -> Filter {
    Filter {
        filter_type: Some(FilterType::FieldFilter(FieldFilter {
            field: Some(field(path)),
            op: field_filter::Operator::Equal as i32,
            value: Some(fs::Value {
                value_type: Some(value),
            }),
        })),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn difference_is_the_correcting_increment() {
        let report = PostReport {
            post_id: "p".into(),
            shards_sum: 7,
            liked: 5,
            repaired: false,
        };
        assert_eq!(report.difference(), -2);
    }

    #[test]
    fn correction_increments_likes_and_keeps_other_fields() {
        let write = correction("x/shards/0", "p", -2);
        assert_eq!(
            write.update_mask.map(|m| m.field_paths),
            Some(vec!["postId".to_string()])
        );
        let transform = &write.update_transforms[0];
        assert_eq!(transform.field_path, "likes");
        assert!(matches!(
            &transform.transform_type,
            Some(TransformType::Increment(fs::Value {
                value_type: Some(ValueType::IntegerValue(-2))
            }))
        ));
    }
}
