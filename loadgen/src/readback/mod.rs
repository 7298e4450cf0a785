//! Reads back what hotcount wrote: every counter shard and every membership,
//! from the store the target names: under one collection prefix through
//! hotcount's [`FirestoreDb`] (`firestore` inside), or from a PostgreSQL
//! database (`postgres` inside), as the same rows, so "exact" means the same for
//! both.
//!
//! Invariant: only documents of the given layout are returned (a collection
//! group query on `shards` is filtered to `{prefix}counters/*/shards/*`);
//! a [`Snapshot`] reads both at one read time when the server allows it, and
//! says so (PostgreSQL always does); nothing is ever written.

mod firestore;
mod postgres;

use std::collections::{BTreeMap, HashMap};

use hotcount::config::{Endpoints, StoreLocation, Target};
use hotcount::model::poison::PoisonRecord;
use hotcount::store::firestore::{FirestoreDb, StoredMembership};
use hotcount::store::postgres::PgDb;
use hotcount::store::Code;
use hotcount::store::StoreError;

/// The store read back: Firestore or PostgreSQL.
#[derive(Clone)]
pub enum Reader {
    /// hotcount's documents under the target's collection prefix.
    Firestore(FirestoreDb),
    /// hotcount's tables in one database.
    Postgres(PgDb),
}

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

impl From<StoredMembership> for MembershipRow {
    fn from(m: StoredMembership) -> Self {
        Self {
            post_id: m.key.post_id,
            user_id: m.key.user_id,
            liked: m.membership.liked,
            occurred_at_micros: m.membership.version.occurred_at_micros,
            updated_at_micros: m.updated_at_micros,
        }
    }
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

    /// The query of `collection` failed with `error`.
    fn query(collection: String) -> impl Fn(StoreError) -> Self {
        move |error| ReadError::Query {
            collection: collection.clone(),
            code: error.code,
            message: error.message,
        }
    }
}

/// Opens hotcount's database for `target`: Firestore at `endpoints`, or
/// the PostgreSQL database `target.store` names.
pub async fn connect(endpoints: &Endpoints, target: &Target) -> Result<Reader, ReadError> {
    match &target.store {
        StoreLocation::Firestore => hotcount::connect::firestore_db(endpoints, target)
            .await
            .map(Reader::Firestore)
            .map_err(|e| ReadError::Connect(e.to_string())),
        StoreLocation::Postgres { url } => postgres::open(url).map(Reader::Postgres),
    }
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
    /// Quarantine records by their reason's kind
    /// ([`PoisonRecord::reason_kind`]).
    pub quarantined_by_reason: BTreeMap<&'static str, usize>,
    /// Whether both reads used the same read time (false if the server
    /// refused a read at the first read's time and a current read was used).
    pub consistent: bool,
    /// Each rollup's `likes` (`counts/{post}`, `post_counts`), read with
    /// the shards.
    pub rollups: BTreeMap<String, i64>,
}

/// Reads memberships, counter shards and quarantine records at one read
/// time (when the store allows it).
pub async fn read_snapshot(reader: &Reader) -> Result<Snapshot, ReadError> {
    match reader {
        Reader::Firestore(db) => firestore::read_snapshot(db).await,
        Reader::Postgres(db) => postgres::read_snapshot(db).await,
    }
}

/// How many of `records` have each reason kind.
pub fn by_reason<'a>(
    records: impl Iterator<Item = &'a PoisonRecord>,
) -> BTreeMap<&'static str, usize> {
    let mut kinds = BTreeMap::new();
    for record in records {
        *kinds.entry(record.reason_kind()).or_insert(0) += 1;
    }
    kinds
}

/// Sum of the counter shards per post, and how many shard documents were read.
pub async fn read_counts(reader: &Reader) -> Result<(BTreeMap<String, i64>, usize), ReadError> {
    match reader {
        Reader::Firestore(db) => firestore::read_counts(db).await,
        Reader::Postgres(db) => postgres::read_counts(db).await,
    }
}

/// Every membership document of the database's layout.
pub async fn read_memberships(reader: &Reader) -> Result<Vec<MembershipRow>, ReadError> {
    match reader {
        Reader::Firestore(db) => firestore::read_memberships(db).await,
        Reader::Postgres(db) => postgres::read_memberships(db).await,
    }
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
