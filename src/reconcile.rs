//! `hotcount reconcile`: compares each post's counter shards with the number
//! of its liked memberships, reports the differences and, asked to, repairs
//! them.
//!
//! Invariant: a repair is one read-write transaction that read both the
//! post's liked memberships (count) and its counter shards before writing a
//! single correcting increment, so it can never over- or under-correct
//! against a consumer committing at the same time (Firestore locks what the
//! transaction read; an aborted attempt is retried from the reads).
//! Reports without repair read in a read-only transaction: one snapshot.

use std::collections::{BTreeMap, HashMap};

use futures::future::BoxFuture;

use gcloud_sdk::google::firestore::v1 as fs;
use gcloud_sdk::tonic::{Code, Status};

use fs::document_transform::field_transform::TransformType;
use fs::document_transform::FieldTransform;
use fs::structured_aggregation_query::aggregation::{Count, Operator as AggregationOperator};
use fs::structured_query::{
    field_filter, filter::FilterType, CollectionSelector, CompositeFilter, FieldFilter,
    FieldReference, Filter, Projection,
};
use fs::value::ValueType;

use crate::store::firestore::{status_error, FirestoreStore};
use crate::store::StoreError;

/// Attempts of one post's repair transaction before giving up.
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
        let txn = begin(store, false).await?;
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
    let mut attempt = 1;
    loop {
        match repair_once(store, post_id, hook, attempt).await {
            Err(error) if error.is_retryable() && attempt < REPAIR_MAX_ATTEMPTS => {
                tracing::debug!(%error, post = post_id, attempt, "repair aborted; retrying");
                tokio::time::sleep(std::time::Duration::from_millis(50 << attempt)).await;
                attempt += 1;
            }
            other => return other,
        }
    }
}

async fn repair_once(
    store: &FirestoreStore,
    post_id: &str,
    hook: &dyn RepairHook,
    attempt: u32,
) -> Result<PostReport, StoreError> {
    let txn = begin(store, true).await?;
    let (liked, shards) = match read_post(store, post_id, &txn, Some((hook, attempt))).await {
        Ok(read) => read,
        Err(error) => {
            store.rollback(txn).await;
            return Err(error);
        }
    };
    let mut report = PostReport {
        post_id: post_id.to_string(),
        shards_sum: shards.values().sum(),
        liked,
        repaired: false,
    };
    let difference = report.difference();
    hook.reached(RepairStep::Compared, attempt).await;
    if difference == 0 {
        store.rollback(txn).await;
        return Ok(report);
    }
    let layout = store.layout();
    let request = fs::CommitRequest {
        database: layout.database.clone(),
        writes: vec![correction(
            &layout.counter_shard(post_id, 0),
            post_id,
            difference,
        )],
        transaction: txn,
        ..Default::default()
    };
    store
        .client()
        .commit(request)
        .await
        .map_err(|s| status_error("Commit", &s))?;
    report.repaired = true;
    tracing::info!(post = post_id, difference, "counter repaired");
    Ok(report)
}

/// Compares every post that has counter shards or liked memberships, in one
/// read-only snapshot; with `repair`, each differing post is then repaired
/// in its own transaction (which re-reads it). Sorted by post id.
pub async fn reconcile_all(
    store: &FirestoreStore,
    repair: bool,
) -> Result<Vec<PostReport>, StoreError> {
    let txn = begin(store, false).await?;
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

async fn begin(store: &FirestoreStore, read_write: bool) -> Result<Vec<u8>, StoreError> {
    let mode = if read_write {
        fs::transaction_options::Mode::ReadWrite(Default::default())
    } else {
        fs::transaction_options::Mode::ReadOnly(Default::default())
    };
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
    Err(status_error(
        op,
        &Status::new(Code::Internal, "no count in the aggregation response"),
    ))
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
