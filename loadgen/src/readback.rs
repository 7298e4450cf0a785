//! Reads back what hotcount wrote: every counter shard and every membership
//! document under one collection prefix, with plain RunQuery calls.
//!
//! Invariant: only documents of the given layout are returned (a collection
//! group query on `shards` is filtered to `{prefix}counters/*/shards/*`);
//! a [`Snapshot`] reads both at one read time when the server allows it, and
//! says so; nothing is ever written.

use std::collections::{BTreeMap, HashMap};

use firestore::FirestoreDb;
use gcloud_sdk::google::firestore::v1 as fs;
use gcloud_sdk::prost_types::Timestamp;
use gcloud_sdk::tonic::{Code, Status};
use hotcount::config::Target;
use hotcount::store::firestore::{membership_from_fields, Layout};

use fs::value::ValueType;

/// One membership document as read back.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MembershipRow {
    /// `postId`.
    pub post_id: String,
    /// `userId`.
    pub user_id: String,
    /// `liked`.
    pub liked: bool,
    /// `occurredAt` of the newest applied event, microseconds since the epoch.
    pub occurred_at_micros: i64,
    /// `updatedAt` (the commit's server time), microseconds since the epoch;
    /// `None` if absent.
    pub updated_at_micros: Option<i64>,
}

/// Reading Firestore failed.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ReadError {
    /// The client could not be built.
    #[error("{0}")]
    Connect(String),
    /// A RunQuery call failed.
    #[error("RunQuery on {collection} failed ({code:?}): {message}")]
    Query {
        /// What was queried.
        collection: String,
        /// The gRPC code.
        code: Code,
        /// The server's message.
        message: String,
    },
}

impl ReadError {
    /// Unavailability, deadlines, aborts and exhaustion may pass; the rest will not.
    pub fn is_retryable(&self) -> bool {
        match self {
            ReadError::Connect(_) => false,
            ReadError::Query { code, .. } => matches!(
                code,
                Code::Unavailable
                    | Code::DeadlineExceeded
                    | Code::Aborted
                    | Code::ResourceExhausted
                    | Code::Internal
                    | Code::Unknown
            ),
        }
    }
}

/// The layout of `target`.
pub fn layout(target: &Target) -> Layout {
    Layout::new(&target.project, &target.database, &target.collection_prefix)
}

/// Opens a Firestore client for `target`.
pub async fn connect(
    endpoints: &hotcount::config::Endpoints,
    target: &Target,
) -> Result<FirestoreDb, ReadError> {
    hotcount::connect::firestore(endpoints, target)
        .await
        .map_err(|e| ReadError::Connect(e.to_string()))
}

/// Counter shards and memberships read at one point in time, so the shard
/// invariant can be checked while the service is still committing.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Snapshot {
    /// Sum of the counter shards per post.
    pub counts: BTreeMap<String, i64>,
    /// Counter shard documents read.
    pub shards_read: usize,
    /// Every membership document.
    pub memberships: Vec<MembershipRow>,
    /// Quarantine records (all consumers) under the prefix.
    pub quarantined: usize,
    /// Of those, records of valid events the store refused (message id
    /// `event-...`), which should not exist.
    pub quarantined_events: usize,
    /// Whether both reads used the same read time (false if the server
    /// refused a read at the first read's time and a current read was used).
    pub consistent: bool,
}

/// Reads memberships, then counter shards at the memberships' read time.
pub async fn read_snapshot(db: &FirestoreDb, layout: &Layout) -> Result<Snapshot, ReadError> {
    let (docs, read_time) =
        run_query(db, &layout.root(), &layout.collection("likes"), false, None).await?;
    let memberships = docs.iter().filter_map(membership_row).collect();
    let shards = match run_query(db, &layout.root(), "shards", true, read_time).await {
        Ok((docs, _)) => (docs, read_time.is_some()),
        Err(ReadError::Query { code, .. })
            if read_time.is_some()
                && matches!(
                    code,
                    Code::InvalidArgument | Code::FailedPrecondition | Code::Unimplemented
                ) =>
        {
            tracing::warn!(
                ?code,
                "reading at a fixed time was refused; reading the shards now"
            );
            (
                run_query(db, &layout.root(), "shards", true, None).await?.0,
                false,
            )
        }
        Err(e) => return Err(e),
    };
    let (counts, shards_read) = sum_shards(layout, &shards.0);
    let quarantine = layout.collection("quarantine");
    let records = run_query(db, &layout.root(), &quarantine, false, None)
        .await?
        .0;
    let quarantined = records.len();
    let quarantined_events = records
        .iter()
        .map(hotcount::store::firestore::quarantine_from_document)
        .filter(|r| r.record.message_id.starts_with("event-"))
        .count();
    Ok(Snapshot {
        counts,
        shards_read,
        memberships,
        quarantined,
        quarantined_events,
        consistent: shards.1,
    })
}

/// Sum of the counter shards per post, and how many shard documents were read.
pub async fn read_counts(
    db: &FirestoreDb,
    layout: &Layout,
) -> Result<(BTreeMap<String, i64>, usize), ReadError> {
    let (docs, _) = run_query(db, &layout.root(), "shards", true, None).await?;
    Ok(sum_shards(layout, &docs))
}

fn sum_shards(layout: &Layout, docs: &[fs::Document]) -> (BTreeMap<String, i64>, usize) {
    let prefix = layout.counters_prefix();
    let mut counts: BTreeMap<String, i64> = BTreeMap::new();
    let mut shards = 0;
    for doc in docs {
        let Some(post) = shard_post_id(&doc.name, prefix) else {
            continue;
        };
        let likes = match doc.fields.get("likes").and_then(|v| v.value_type.as_ref()) {
            Some(ValueType::IntegerValue(n)) => *n,
            Some(ValueType::DoubleValue(d)) => *d as i64,
            _ => 0,
        };
        *counts.entry(post.to_string()).or_default() += likes;
        shards += 1;
    }
    (counts, shards)
}

/// The post id of a shard document named `{prefix}{post}/shards/{k}`.
fn shard_post_id<'a>(name: &'a str, prefix: &str) -> Option<&'a str> {
    let rest = name.strip_prefix(prefix)?;
    let (post, shard) = rest.split_once("/shards/")?;
    (!post.is_empty() && !shard.is_empty() && !shard.contains('/')).then_some(post)
}

/// Every membership document of `layout`.
pub async fn read_memberships(
    db: &FirestoreDb,
    layout: &Layout,
) -> Result<Vec<MembershipRow>, ReadError> {
    let (docs, _) = run_query(db, &layout.root(), &layout.collection("likes"), false, None).await?;
    Ok(docs.iter().filter_map(membership_row).collect())
}

/// A membership row from a document; `None` if it is not a membership.
pub fn membership_row(doc: &fs::Document) -> Option<MembershipRow> {
    let m = membership_from_fields(&doc.fields)?;
    let string = |name: &str| match doc.fields.get(name).and_then(|v| v.value_type.as_ref()) {
        Some(ValueType::StringValue(s)) => Some(s.clone()),
        _ => None,
    };
    let updated_at_micros = match doc
        .fields
        .get("updatedAt")
        .and_then(|v| v.value_type.as_ref())
    {
        Some(ValueType::TimestampValue(t)) => {
            Some(t.seconds * 1_000_000 + i64::from(t.nanos) / 1_000)
        }
        _ => None,
    };
    Some(MembershipRow {
        post_id: string("postId")?,
        user_id: string("userId")?,
        liked: m.liked,
        occurred_at_micros: m.version.occurred_at_micros,
        updated_at_micros,
    })
}

/// Runs a query over one collection (id), returning its documents and the
/// read time the server reported.
async fn run_query(
    db: &FirestoreDb,
    parent: &str,
    collection_id: &str,
    all_descendants: bool,
    read_time: Option<Timestamp>,
) -> Result<(Vec<fs::Document>, Option<Timestamp>), ReadError> {
    let error = |s: Status| ReadError::Query {
        collection: collection_id.to_string(),
        code: s.code(),
        message: s.message().to_string(),
    };
    let query = fs::StructuredQuery {
        from: vec![fs::structured_query::CollectionSelector {
            collection_id: collection_id.to_string(),
            all_descendants,
        }],
        ..Default::default()
    };
    let request = fs::RunQueryRequest {
        parent: parent.to_string(),
        query_type: Some(fs::run_query_request::QueryType::StructuredQuery(query)),
        consistency_selector: read_time.map(fs::run_query_request::ConsistencySelector::ReadTime),
        ..Default::default()
    };
    let mut stream = db
        .client()
        .get()
        .run_query(request)
        .await
        .map_err(error)?
        .into_inner();
    let mut docs = Vec::new();
    let mut read_time = None;
    while let Some(response) = stream.message().await.map_err(error)? {
        if read_time.is_none() {
            read_time = response.read_time;
        }
        if let Some(doc) = response.document {
            docs.push(doc);
        }
    }
    Ok((docs, read_time))
}

/// Liked memberships per post.
pub fn liked_per_post(rows: &[MembershipRow]) -> HashMap<&str, i64> {
    let mut liked: HashMap<&str, i64> = HashMap::new();
    for row in rows {
        let n = liked.entry(row.post_id.as_str()).or_default();
        *n += i64::from(row.liked);
    }
    liked
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shard_names_outside_the_prefix_are_ignored() {
        let p = "projects/x/databases/(default)/documents/hc_counters/";
        assert_eq!(
            shard_post_id(&format!("{p}post-1/shards/3"), p),
            Some("post-1")
        );
        let other = "projects/x/databases/(default)/documents/counters/post-1/shards/3";
        assert_eq!(shard_post_id(other, p), None);
        assert_eq!(shard_post_id(&format!("{p}post-1/shards/3/x/y"), p), None);
    }

    #[test]
    fn membership_rows_need_post_user_and_liked() {
        let v = |t| fs::Value {
            value_type: Some(t),
        };
        let mut doc = fs::Document {
            fields: HashMap::from([
                ("postId".into(), v(ValueType::StringValue("p".into()))),
                ("userId".into(), v(ValueType::StringValue("u".into()))),
                ("liked".into(), v(ValueType::BooleanValue(true))),
                (
                    "updatedAt".into(),
                    v(ValueType::TimestampValue(
                        gcloud_sdk::prost_types::Timestamp {
                            seconds: 2,
                            nanos: 5_000,
                        },
                    )),
                ),
            ]),
            ..Default::default()
        };
        let row = membership_row(&doc).unwrap();
        assert_eq!(row.updated_at_micros, Some(2_000_005));
        assert!(row.liked);
        doc.fields.remove("postId");
        assert_eq!(membership_row(&doc), None);
    }
}
