//! hotcount's documents read and written through the [`FirestoreDb`]
//! handle: memberships (the store's read path, also replay's), counter
//! shards and their sums, quarantine records and reconcile guards.
//!
//! Invariant: each query here is the only one of its kind in the repo, and
//! each names its documents through [`Layout`] and parses them with
//! [`codec`]; a shard's `likes` is summed here only.

use std::collections::BTreeMap;

use gcloud_sdk::google::firestore::v1 as fs;
use gcloud_sdk::prost_types::Timestamp;
use rustc_hash::FxHashMap;

use fs::structured_query::{
    composite_filter, field_filter, filter::FilterType, CollectionSelector, CompositeFilter,
    Direction, FieldFilter, FieldReference, Filter, Order, Projection,
};

use super::codec::{self, Correction, RepairGuard, StoredMembership, StoredRecord};
use super::db::{FirestoreDb, Read};
use super::layout::collections;
use super::layout::fields::{erased_user, marker, membership, quarantine, tombstone_setting};
use super::wire;
use crate::model::batch::{Effects, Membership, MembershipKey};
use crate::store::StoreError;

/// What [`FirestoreDb::read_memberships`] found.
#[derive(Debug, Default)]
pub struct Memberships {
    /// The transaction the read opened (empty unless it was asked to).
    pub transaction: Vec<u8>,
    /// The effects the batch marker recorded, when it exists.
    pub marker: Option<Effects>,
    /// Per key, in the order read: its membership document's full name
    /// (built once: the batch's writes name the documents with it).
    pub names: Vec<String>,
    /// Per key, in the order read: its stored state, when its document
    /// exists.
    pub found: Vec<Option<Membership>>,
    /// Per key, in the order read: its document's update time, when it
    /// exists (the precondition of its next write).
    pub update_times: Vec<Option<Timestamp>>,
    /// The tombstones' generation, when it was asked for (0 when its
    /// document does not exist).
    pub tombstone_generation: Option<i64>,
}

/// The fields a batch reads: a membership's state and a marker's effects
/// (in one request; a document has the ones of its kind). The ids, the
/// batch id and `updatedAt` are not sent back. (The codec's tests read
/// what it writes back through this mask.)
pub(super) const READ_FIELDS: [&str; 8] = [
    membership::LIKED,
    membership::SEQ,
    membership::OCCURRED_AT,
    membership::EVENT_ID,
    marker::APPLIED,
    marker::DUPLICATES,
    marker::STALE,
    marker::POISON,
];

/// [`READ_FIELDS`] and the tombstones' generation: a checked batch's read.
pub(super) const READ_FIELDS_CHECKED: [&str; READ_FIELDS.len() + 1] = {
    let mut fields = [tombstone_setting::GENERATION; READ_FIELDS.len() + 1];
    let mut i = 0;
    while i < READ_FIELDS.len() {
        fields[i] = READ_FIELDS[i];
        i += 1;
    }
    fields
};

/// Every counter shard of the layout, summed per post.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct CounterSums {
    /// Sum of the counter shards per post.
    pub per_post: BTreeMap<String, i64>,
    /// Counter shard documents read.
    pub shards: usize,
}

impl FirestoreDb {
    /// Reads the memberships of `keys` and, when given, the batch marker
    /// `marker` and the tombstones' generation document `generation`, in
    /// one BatchGetDocuments: the store's read path (with
    /// [`Read::ReadWrite`], opening the batch's transaction, which then
    /// holds the generation too) and replay's (with [`Read::Latest`],
    /// locking nothing).
    pub async fn read_memberships<'k>(
        &self,
        keys: impl Iterator<Item = &'k MembershipKey>,
        marker: Option<&str>,
        generation: Option<&str>,
        read: Read<'_>,
    ) -> Result<Memberships, StoreError> {
        let layout = self.layout();
        let names: Vec<String> = keys.map(|key| layout.membership(key)).collect();
        let count = names.len();
        let mut found = vec![None; count];
        let mut update_times = vec![None; count];
        let mut marker_effects = None;
        if marker.is_none() && names.is_empty() {
            return Ok(Memberships::default());
        }
        // Document name -> position, to place what comes back (in any
        // order). FxHash: at most one batch of names, and SipHash showed in
        // profiles.
        let mut position: FxHashMap<&str, usize> =
            FxHashMap::with_capacity_and_hasher(count, Default::default());
        position.extend(names.iter().enumerate().map(|(i, n)| (n.as_str(), i)));
        let documents = (names.iter().map(String::as_str))
            .chain(marker)
            .chain(generation);
        let fields: &[&str] = match generation {
            Some(_) => &READ_FIELDS_CHECKED,
            None => &READ_FIELDS,
        };
        let mut tombstone_generation = generation.map(|_| 0);
        let transaction = self
            .batch_get_lean(documents, fields, read, |doc| {
                if Some(doc.name) == marker {
                    marker_effects = Some(codec::effects_from_fields(&doc));
                } else if Some(doc.name) == generation {
                    tombstone_generation = Some(codec::generation_from_fields(&doc));
                } else if let Some(&i) = position.get(doc.name) {
                    update_times[i] = doc.update_time;
                    found[i] = codec::membership_from_fields(&doc);
                }
            })
            .await?;
        drop(position);
        Ok(Memberships {
            transaction,
            marker: marker_effects,
            names,
            found,
            update_times,
            tombstone_generation,
        })
    }

    /// Every membership document (of `post` only, when given), and the
    /// read time the server reported.
    pub async fn memberships(
        &self,
        post: Option<&str>,
        read: Read<'_>,
    ) -> Result<(Vec<StoredMembership>, Option<Timestamp>), StoreError> {
        let query = fs::StructuredQuery {
            from: vec![self.top_level(collections::LIKES)],
            r#where: post.map(|p| equals(membership::POST_ID, codec::string(p))),
            ..Default::default()
        };
        let queried = self.run_query(&self.layout().root(), query, read).await?;
        let rows = queried
            .documents
            .iter()
            .filter_map(codec::stored_membership)
            .collect();
        Ok((rows, queried.read_time))
    }

    /// Every membership document of `user_id` (liked or not): a query on
    /// `userId`, which `deploy/setup.sh` keeps indexed for it (`users
    /// export` and `users erase`).
    pub async fn user_memberships(
        &self,
        user_id: &str,
        read: Read<'_>,
    ) -> Result<Vec<StoredMembership>, StoreError> {
        let query = fs::StructuredQuery {
            from: vec![self.top_level(collections::LIKES)],
            r#where: Some(equals(membership::USER_ID, codec::string(user_id))),
            ..Default::default()
        };
        let queried = self.run_query(&self.layout().root(), query, read).await?;
        let mut rows: Vec<StoredMembership> = queried
            .documents
            .iter()
            .filter_map(codec::stored_membership)
            .collect();
        rows.sort_by(|a, b| a.key.post_id.cmp(&b.key.post_id));
        Ok(rows)
    }

    /// Liked memberships per post (a query that sends only their post ids).
    pub async fn liked_per_post(
        &self,
        read: Read<'_>,
    ) -> Result<BTreeMap<String, i64>, StoreError> {
        let query = fs::StructuredQuery {
            select: Some(Projection {
                fields: vec![field(membership::POST_ID)],
            }),
            from: vec![self.top_level(collections::LIKES)],
            r#where: Some(equals(membership::LIKED, codec::boolean(true))),
            ..Default::default()
        };
        let mut liked: BTreeMap<String, i64> = BTreeMap::new();
        let queried = self.run_query(&self.layout().root(), query, read).await?;
        for doc in &queried.documents {
            if let Some(post) = codec::membership_post(doc) {
                *liked.entry(post).or_default() += 1;
            }
        }
        Ok(liked)
    }

    /// How many memberships of `post_id` are liked (counted by the server).
    pub async fn liked_count(&self, post_id: &str, read: Read<'_>) -> Result<i64, StoreError> {
        let query = fs::StructuredQuery {
            from: vec![self.top_level(collections::LIKES)],
            r#where: Some(Filter {
                filter_type: Some(FilterType::CompositeFilter(CompositeFilter {
                    op: composite_filter::Operator::And as i32,
                    filters: vec![
                        equals(membership::POST_ID, codec::string(post_id)),
                        equals(membership::LIKED, codec::boolean(true)),
                    ],
                })),
            }),
            ..Default::default()
        };
        self.run_count(&self.layout().root(), query, read).await
    }

    /// Every counter shard of `post_id` (by document name) with its `likes`.
    pub async fn counter_shards(
        &self,
        post_id: &str,
        read: Read<'_>,
    ) -> Result<BTreeMap<String, i64>, StoreError> {
        let query = fs::StructuredQuery {
            from: vec![collection(collections::SHARDS, false)],
            ..Default::default()
        };
        let parent = self.layout().counter_parent(post_id);
        let queried = self.run_query(&parent, query, read).await?;
        let mut shards = BTreeMap::new();
        for doc in queried.documents {
            let likes = codec::counter_shard_likes(&doc);
            shards.insert(doc.name, likes);
        }
        Ok(shards)
    }

    /// The like count of `post_id`: the sum of its counter shards, latest state.
    pub async fn count(&self, post_id: &str) -> Result<i64, StoreError> {
        let shards = self.counter_shards(post_id, Read::Latest).await?;
        Ok(shards.values().sum())
    }

    /// Every counter shard of the layout, summed per post (a collection
    /// group query on `shards`, filtered to this layout's counters).
    pub async fn counter_sums(&self, read: Read<'_>) -> Result<CounterSums, StoreError> {
        let query = fs::StructuredQuery {
            from: vec![collection(collections::SHARDS, true)],
            ..Default::default()
        };
        let queried = self.run_query(&self.layout().root(), query, read).await?;
        let mut sums = CounterSums::default();
        for doc in &queried.documents {
            let Some(post) = self.layout().counter_shard_post(&doc.name) else {
                continue;
            };
            *sums.per_post.entry(post.to_string()).or_default() += codec::counter_shard_likes(doc);
            sums.shards += 1;
        }
        Ok(sums)
    }

    /// Quarantine records by document id, of `consumer` only when given, at
    /// most `limit` when given; latest state.
    pub async fn quarantine_records(
        &self,
        consumer: Option<&str>,
        limit: Option<usize>,
    ) -> Result<Vec<StoredRecord>, StoreError> {
        let query = fs::StructuredQuery {
            from: vec![self.top_level(collections::QUARANTINE)],
            r#where: consumer.map(|c| equals(quarantine::CONSUMER, codec::string(c))),
            limit: limit.map(|n| i32::try_from(n).unwrap_or(i32::MAX)),
            ..Default::default()
        };
        let queried = self
            .run_query(&self.layout().root(), query, Read::Latest)
            .await?;
        Ok(queried
            .documents
            .iter()
            .map(codec::quarantine_from_document)
            .collect())
    }

    /// The quarantine record whose document id is `id` (`{consumer}:{doc_id}`,
    /// as [`StoredRecord::id`] gives it), if any; `None` for an id that
    /// cannot name one.
    pub async fn quarantine_record(&self, id: &str) -> Result<Option<StoredRecord>, StoreError> {
        if id.is_empty() || id.contains('/') {
            return Ok(None);
        }
        let name = self.layout().quarantine_record(id);
        Ok(self
            .get(&name)
            .await?
            .as_ref()
            .map(codec::quarantine_from_document))
    }

    /// Deletes the quarantine record `id` (`{consumer}:{record id}`; it must still exist).
    pub async fn delete_quarantine_record(&self, id: &str) -> Result<(), StoreError> {
        let write = wire::Write {
            delete: Some(self.layout().quarantine_record(id)),
            current_document: Some(fs::Precondition {
                condition_type: Some(fs::precondition::ConditionType::Exists(true)),
            }),
            ..Default::default()
        };
        self.commit(vec![write], None).await
    }

    /// Every erased user's keyed hash (the ids of `erasedUsers`).
    pub async fn tombstones(&self) -> Result<Vec<String>, StoreError> {
        let query = fs::StructuredQuery {
            select: Some(Projection {
                fields: vec![field(erased_user::ERASED_AT)],
            }),
            from: vec![self.top_level(collections::ERASED_USERS)],
            ..Default::default()
        };
        let queried = self
            .run_query_bounded(&self.layout().root(), query, Read::Latest)
            .await?;
        let hashes = queried.documents.iter();
        Ok(hashes
            .filter_map(|d| d.name.rsplit('/').next().map(str::to_string))
            .collect())
    }

    /// The tombstones' generation (0 before the first tombstone), then
    /// every tombstone: read in that order, so the hashes are at least as
    /// new as the generation.
    pub async fn tombstone_state(&self) -> Result<crate::store::TombstoneState, StoreError> {
        let name = self.layout().tombstone_generation();
        let mut generation = 0;
        let read = self.batch_get_lean(
            std::iter::once(name.as_str()),
            &[tombstone_setting::GENERATION],
            Read::Latest,
            |doc| generation = codec::generation_from_fields(&doc),
        );
        read.await?;
        Ok(crate::store::TombstoneState {
            generation,
            hashes: self.tombstones().await?,
        })
    }

    /// Writes the tombstone `user_hash` (idempotent; `erasedAt` is the
    /// latest write's time) and bumps the tombstones' generation, in one
    /// commit: every batch transaction that read the generation before
    /// then is applied before it (Firestore's locks) or applies nothing.
    pub async fn write_tombstone(&self, user_hash: &str) -> Result<(), StoreError> {
        let tombstone = wire::Write {
            update: Some(wire::Document {
                name: self.layout().erased_user(user_hash),
                ..Default::default()
            }),
            update_transforms: vec![codec::server_time(erased_user::ERASED_AT)],
            ..Default::default()
        };
        let generation = codec::generation_bump(self.layout());
        self.commit(vec![tombstone, generation], None).await
    }

    /// Deletes the tombstone `user_hash`; whether it existed.
    pub async fn delete_tombstone(&self, user_hash: &str) -> Result<bool, StoreError> {
        let name = self.layout().erased_user(user_hash);
        if self.get(&name).await?.is_none() {
            return Ok(false);
        }
        let write = wire::Write {
            delete: Some(name),
            ..Default::default()
        };
        self.commit(vec![write], None).await?;
        Ok(true)
    }

    /// Deletes the memberships of `keys` that are in an erasure's state
    /// (`is_erased`), each conditioned on the update time it was read at,
    /// in one commit; how many. A membership a later event changed is
    /// left (the commit fails, and a second run finds it again).
    pub async fn delete_erased_memberships(
        &self,
        keys: &[MembershipKey],
        is_erased: impl Fn(&Membership) -> bool,
    ) -> Result<u64, StoreError> {
        let read = self
            .read_memberships(keys.iter(), None, None, Read::Latest)
            .await?;
        let mut writes = Vec::new();
        let found = read.found.iter().zip(read.update_times);
        for (name, (state, update_time)) in read.names.into_iter().zip(found) {
            let (Some(state), Some(update_time)) = (state, update_time) else {
                continue;
            };
            if !is_erased(state) {
                continue;
            }
            writes.push(wire::Write {
                delete: Some(name),
                current_document: Some(fs::Precondition {
                    condition_type: Some(fs::precondition::ConditionType::UpdateTime(update_time)),
                }),
                ..Default::default()
            });
        }
        let deleted = writes.len() as u64;
        if deleted > 0 {
            self.commit(writes, None).await?;
        }
        Ok(deleted)
    }

    /// The reconcile guard of `post_id` (default when it does not exist).
    pub async fn repair_guard(
        &self,
        post_id: &str,
        read: Read<'_>,
    ) -> Result<RepairGuard, StoreError> {
        let op = "BatchGetDocuments";
        let mut guard = Ok(RepairGuard::default());
        let name = self.layout().reconcile_guard(post_id);
        self.batch_get(vec![name], read, |doc| {
            guard = codec::guard_from_document(&doc)
                .ok_or_else(|| StoreError::internal(op, "a document without an update time"));
        })
        .await?;
        guard
    }

    /// Commits `correction` with its guard, outside any transaction, on the
    /// precondition that the guard is still `seen`.
    pub async fn commit_correction(
        &self,
        correction: &Correction<'_>,
        seen: &RepairGuard,
    ) -> Result<(), StoreError> {
        let writes = codec::correction_writes(self.layout(), correction, seen);
        self.commit(writes, None).await
    }

    /// A top-level collection of the layout (prefixed).
    fn top_level(&self, id: &str) -> CollectionSelector {
        collection(&self.layout().collection(id), false)
    }
}

/// The field `path` in a query (every query of the store builds its
/// fields, filters and orders with these).
pub(super) fn field(path: &str) -> FieldReference {
    FieldReference {
        field_path: path.to_string(),
    }
}

/// The filter "field `path` `op` `value`".
pub(super) fn compare(path: &str, op: field_filter::Operator, value: fs::Value) -> Filter {
    Filter {
        filter_type: Some(FilterType::FieldFilter(FieldFilter {
            field: Some(field(path)),
            op: op as i32,
            value: Some(value),
        })),
    }
}

/// Results ordered by field `path`, ascending.
pub(super) fn ascending(path: &str) -> Order {
    Order {
        field: Some(field(path)),
        direction: Direction::Ascending as i32,
    }
}

fn collection(id: &str, all_descendants: bool) -> CollectionSelector {
    CollectionSelector {
        collection_id: id.to_string(),
        all_descendants,
    }
}

fn equals(path: &str, value: fs::Value) -> Filter {
    compare(path, field_filter::Operator::Equal, value)
}
