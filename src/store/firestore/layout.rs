//! Every collection, document and field name hotcount uses in one
//! Firestore database: changing the layout is a change to this file (and,
//! for a field's value, to `codec`).
//!
//! Invariant: names are built from the ids as given (the event schema only
//! admits ids that are safe as document ids); membership ids are stable
//! across builds (their hash is FNV-1a, see `batch::MembershipKey`).

use crate::event::{fnv1a64, push_decimal};
use crate::model::batch::MembershipKey;

/// Collection ids (top-level ones take the layout's prefix).
pub mod collections {
    /// Membership documents, one per (post, user).
    pub const LIKES: &str = "likes";
    /// One document per post, parent of its counter shards.
    pub const COUNTERS: &str = "counters";
    /// A post's counter shards (`counters/{post}/shards/{k}`): not prefixed.
    pub const SHARDS: &str = "shards";
    /// Batch markers.
    pub const BATCHES: &str = "batches";
    /// Quarantine records.
    pub const QUARANTINE: &str = "quarantine";
    /// Reconcile guards, one per repaired post.
    pub const RECONCILE: &str = "reconcile";
    /// Rollups, one per post: the count clients read and listen to.
    pub const COUNTS: &str = "counts";
    /// Milestone records, one per (post, milestone) reached.
    pub const MILESTONES: &str = "milestones";
    /// Fleet-wide settings the service stores (`settings/milestones`,
    /// `settings/format`).
    pub const SETTINGS: &str = "settings";
    /// Erased users' tombstones, one per keyed hash of a user id.
    pub const ERASED_USERS: &str = "erasedUsers";
}

/// Field names, per kind of document.
pub mod fields {
    /// A membership document `likes/{id}`.
    pub mod membership {
        /// The post (string).
        pub const POST_ID: &str = "postId";
        /// The user (string).
        pub const USER_ID: &str = "userId";
        /// Whether the user likes the post now (boolean).
        pub const LIKED: &str = "liked";
        /// The applied event's `seq` (integer).
        pub const SEQ: &str = "seq";
        /// The applied event's `occurredAt` (timestamp).
        pub const OCCURRED_AT: &str = "occurredAt";
        /// The applied event's id (string).
        pub const EVENT_ID: &str = "eventId";
        /// The batch that wrote it (string).
        pub const BATCH_ID: &str = "batchId";
        /// The commit's server time (timestamp).
        pub const UPDATED_AT: &str = "updatedAt";
    }

    /// A counter shard `counters/{post}/shards/{k}`.
    pub mod counter_shard {
        /// The post (string).
        pub const POST_ID: &str = "postId";
        /// The shard's part of the count (integer, incremented).
        pub const LIKES: &str = "likes";
        /// The server time of the last commit that incremented it
        /// (timestamp): what the rollup sweep finds recent changes by.
        pub const UPDATED_AT: &str = "updatedAt";
    }

    /// A rollup `counts/{post}`, the one document clients read.
    pub mod rollup {
        /// The post (string).
        pub const POST_ID: &str = "postId";
        /// The sum of the post's counter shards at `asOf` (integer).
        pub const LIKES: &str = "likes";
        /// The read time the shards were summed at (timestamp).
        pub const AS_OF: &str = "asOf";
        /// Counter shard documents `0..shards` the sum covers (integer;
        /// it only grows, so a refresh that read fewer is not written).
        pub const SHARDS: &str = "shards";
        /// The server time of the write (timestamp).
        pub const UPDATED_AT: &str = "updatedAt";
        /// The highest milestone recorded with the rollup, ever (integer;
        /// absent until one is).
        pub const MILESTONE: &str = "milestone";
    }

    /// A milestone record `milestones/{post}:{n}`.
    pub mod milestone {
        /// The post (string).
        pub const POST_ID: &str = "postId";
        /// The milestone reached (integer).
        pub const MILESTONE: &str = "milestone";
        /// The post's total in the rollup that reached it (integer).
        pub const LIKES: &str = "likes";
        /// That rollup's `asOf` (timestamp).
        pub const REACHED_AT: &str = "reachedAt";
        /// `pending`, `leased`, `done` or `dead` (string).
        pub const STATUS: &str = "status";
        /// Delivery attempts claimed (integer).
        pub const ATTEMPTS: &str = "attempts";
        /// When a claim may take it next (timestamp: the next attempt, or
        /// the lease's end; removed once done or dead). The dispatcher's
        /// query filters and orders on this field alone, so the automatic
        /// single-field index serves it.
        pub const DUE_AT: &str = "dueAt";
        /// The end of the current lease (timestamp).
        pub const LEASE_UNTIL: &str = "leaseUntil";
        /// Why the last attempt failed, or why it was given up (string).
        pub const LAST_ERROR: &str = "lastError";
        /// When the webhook accepted it (timestamp).
        pub const DELIVERED_AT: &str = "deliveredAt";
        /// The server time of the last write (timestamp).
        pub const UPDATED_AT: &str = "updatedAt";
    }

    /// The milestone setting `settings/milestones`.
    pub mod milestone_setting {
        /// Whether milestones are recorded (boolean).
        pub const ENABLED: &str = "enabled";
        /// The milestones recorded, ascending (array of integers).
        pub const MILESTONES: &str = "milestones";
        /// The server time of the last write (timestamp).
        pub const UPDATED_AT: &str = "updatedAt";
    }

    /// The data-format version `settings/format` (absent: format 1; see
    /// `store::format`).
    pub mod data_format {
        /// The stored format (integer; only ever raised).
        pub const VERSION: &str = "version";
        /// The server time of the last raise (timestamp).
        pub const UPDATED_AT: &str = "updatedAt";
    }

    /// A batch marker `batches/{consumer}:{batchId}`.
    pub mod marker {
        /// The consumer (string).
        pub const CONSUMER: &str = "consumer";
        /// The batch (string).
        pub const BATCH_ID: &str = "batchId";
        /// Messages the batch covered (integer).
        pub const MESSAGES: &str = "messages";
        /// Events applied (integer).
        pub const APPLIED: &str = "applied";
        /// Duplicate events (integer).
        pub const DUPLICATES: &str = "duplicates";
        /// Stale events (integer).
        pub const STALE: &str = "stale";
        /// Poison messages quarantined (integer).
        pub const POISON: &str = "poison";
        /// Posts incremented (integer).
        pub const POSTS: &str = "posts";
        /// The commit's server time (timestamp).
        pub const COMMITTED_AT: &str = "committedAt";
        /// When the marker may be deleted (timestamp; the TTL field).
        pub const EXPIRE_AT: &str = "expireAt";
        /// The rollup due record (present only until cleared): the posts
        /// the batch incremented (array of strings; never queried, so not
        /// indexed).
        pub const ROLLUP_POSTS: &str = "rollupPosts";
        /// The counter shard each of [`ROLLUP_POSTS`] was incremented on
        /// (array of integers, pairwise; not indexed).
        pub const ROLLUP_SHARDS: &str = "rollupShards";
        /// The store time the record's wait began: the commit, or the
        /// latest takeover (timestamp). Refreshers query on this field
        /// alone (`<=`, ordered), so its automatic index serves them.
        pub const ROLLUP_DUE: &str = "rollupDue";
    }

    /// The tombstones' generation `settings/erasedUsers`: bumped in the same
    /// commit as each tombstone written, read in every checked batch's
    /// transaction.
    pub mod tombstone_setting {
        /// The generation (integer; absent document = 0).
        pub const GENERATION: &str = "generation";
        /// The server time of the last bump (timestamp).
        pub const UPDATED_AT: &str = "updatedAt";
    }

    /// An erased user's tombstone `erasedUsers/{hash}` (the keyed hash of
    /// the user id, never the id).
    pub mod erased_user {
        /// When the tombstone was written (timestamp, commit time).
        pub const ERASED_AT: &str = "erasedAt";
    }

    /// A quarantine record `quarantine/{consumer}:{doc_id}`.
    pub mod quarantine {
        /// The consumer (string).
        pub const CONSUMER: &str = "consumer";
        /// The message id, bounded (string).
        pub const MESSAGE_ID: &str = "messageId";
        /// Why it was quarantined (string).
        pub const REASON: &str = "reason";
        /// The payload's first bytes (bytes).
        pub const DATA: &str = "data";
        /// The payload's whole length (integer).
        pub const DATA_BYTES: &str = "dataBytes";
        /// The payload's SHA-256 (string).
        pub const DATA_SHA256: &str = "dataSha256";
        /// The attributes kept, an array of `{key, value}` maps.
        pub const ATTRIBUTES: &str = "attributes";
        /// An attribute's key, inside [`ATTRIBUTES`].
        pub const ATTRIBUTE_KEY: &str = "key";
        /// An attribute's value, inside [`ATTRIBUTES`].
        pub const ATTRIBUTE_VALUE: &str = "value";
        /// The message's attribute count (integer).
        pub const ATTRIBUTE_COUNT: &str = "attributeCount";
        /// Whether attributes were dropped or cut (boolean).
        pub const ATTRIBUTES_TRUNCATED: &str = "attributesTruncated";
        /// The commit's server time (timestamp).
        pub const QUARANTINED_AT: &str = "quarantinedAt";
    }

    /// A reconcile guard `reconcile/{post}`.
    pub mod guard {
        /// The post (string).
        pub const POST_ID: &str = "postId";
        /// The repair that wrote it last (string).
        pub const REPAIR_ID: &str = "repairId";
        /// The correction applied (integer).
        pub const DIFFERENCE: &str = "difference";
        /// Liked memberships compared (integer).
        pub const LIKED: &str = "liked";
        /// Counter shard sum compared (integer).
        pub const SHARDS_SUM: &str = "shardsSum";
        /// The correction's server time (timestamp).
        pub const REPAIRED_AT: &str = "repairedAt";
    }
}

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
    /// `{database}/documents/{prefix}counts/`: built once, since every
    /// rollup refresh names each post's rollup twice (read and write).
    rollups_prefix: String,
}

impl Layout {
    /// The layout of `project`/`database` with `prefix`.
    pub fn new(project: &str, database: &str, prefix: &str) -> Self {
        let database = format!("projects/{project}/databases/{database}");
        let likes_prefix = format!("{database}/documents/{prefix}{}/", collections::LIKES);
        let counters_prefix = format!("{database}/documents/{prefix}{}/", collections::COUNTERS);
        let rollups_prefix = format!("{database}/documents/{prefix}{}/", collections::COUNTS);
        Self {
            database,
            collection_prefix: prefix.to_string(),
            likes_prefix,
            counters_prefix,
            rollups_prefix,
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
        let mut name = String::with_capacity(self.likes_prefix.len() + membership_doc_id_len(key));
        name.push_str(&self.likes_prefix);
        push_membership_doc_id(key, &mut name);
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
        let shards = collections::SHARDS;
        let mut name = String::with_capacity(
            self.counters_prefix.len() + post_id.len() + shards.len() + 2 + 10,
        );
        name.push_str(&self.counters_prefix);
        name.push_str(post_id);
        name.push('/');
        name.push_str(shards);
        name.push('/');
        push_decimal(&mut name, k as usize);
        name
    }

    /// The post of a counter shard named `{prefix}counters/{post}/shards/{k}`;
    /// `None` for any other document (another prefix's shards, or a
    /// `shards` collection elsewhere), so a collection group query on
    /// `shards` can be filtered to this layout.
    pub fn counter_shard_post<'a>(&self, name: &'a str) -> Option<&'a str> {
        let rest = name.strip_prefix(self.counters_prefix.as_str())?;
        let (post, rest) = rest.split_once('/')?;
        let shard = rest.strip_prefix(collections::SHARDS)?.strip_prefix('/')?;
        (!post.is_empty() && !shard.is_empty() && !shard.contains('/')).then_some(post)
    }

    /// The shard number of a counter shard of this layout (see
    /// [`Self::counter_shard_post`]); `None` for any other document.
    pub fn counter_shard_number(&self, name: &str) -> Option<u32> {
        self.counter_shard_post(name)?;
        name.rsplit('/').next()?.parse().ok()
    }

    /// The rollup of `post_id`: `{prefix}counts/{post}`.
    pub fn rollup(&self, post_id: &str) -> String {
        let [prefix, post] = self.rollup_parts(post_id);
        let mut name = String::with_capacity(prefix.len() + post.len());
        name.push_str(prefix);
        name.push_str(post);
        name
    }

    /// [`Self::rollup`]'s name in two parts (`{database}/documents/{prefix}counts/`
    /// and the post), for writing it without building it.
    pub fn rollup_parts<'a>(&'a self, post_id: &'a str) -> [&'a str; 2] {
        [&self.rollups_prefix, post_id]
    }

    /// The milestone record `{post}:{n}`.
    pub fn milestone(&self, post_id: &str, milestone: i64) -> String {
        format!(
            "{}/{}/{post_id}:{milestone}",
            self.root(),
            self.collection(collections::MILESTONES)
        )
    }

    /// The fleet's milestone setting (`settings/milestones`).
    pub fn milestone_setting(&self) -> String {
        format!(
            "{}/{}/milestones",
            self.root(),
            self.collection(collections::SETTINGS)
        )
    }

    /// The data-format version (`settings/format`).
    pub fn data_format(&self) -> String {
        format!(
            "{}/{}/format",
            self.root(),
            self.collection(collections::SETTINGS)
        )
    }

    /// The tombstones' generation (`settings/erasedUsers`, named after
    /// the collection it versions).
    pub fn tombstone_generation(&self) -> String {
        format!(
            "{}/{}/{}",
            self.root(),
            self.collection(collections::SETTINGS),
            collections::ERASED_USERS
        )
    }

    /// The batch marker `{consumer}:{batch_id}`.
    pub fn marker(&self, consumer: &str, batch_id: &str) -> String {
        format!(
            "{}/{}/{consumer}:{batch_id}",
            self.root(),
            self.collection(collections::BATCHES)
        )
    }

    /// The quarantine record `{consumer}:{doc_id}` (`crate::store::quarantine::record_id`).
    pub fn quarantine(&self, consumer: &str, doc_id: &str) -> String {
        self.quarantine_record(&format!("{consumer}:{doc_id}"))
    }

    /// The quarantine record whose document id is `id` (`{consumer}:{doc_id}`,
    /// as the operator tools list it).
    pub fn quarantine_record(&self, id: &str) -> String {
        format!(
            "{}/{}/{id}",
            self.root(),
            self.collection(collections::QUARANTINE)
        )
    }

    /// The tombstone of the erased user whose keyed hash is `user_hash`.
    pub fn erased_user(&self, user_hash: &str) -> String {
        format!(
            "{}/{}/{user_hash}",
            self.root(),
            self.collection(collections::ERASED_USERS)
        )
    }

    /// The reconcile guard of `post_id`, written by every correction of the post.
    pub fn reconcile_guard(&self, post_id: &str) -> String {
        format!(
            "{}/{}/{post_id}",
            self.root(),
            self.collection(collections::RECONCILE)
        )
    }
}

/// The membership document id: a stable 8-hex-digit hash prefix (so one
/// post's likes spread over the key space instead of forming a hotspot),
/// then the post id's length, the post id and the user id. The length
/// prefix makes the id unambiguous whatever the ids contain.
pub fn membership_doc_id(key: &MembershipKey) -> String {
    let mut id = String::with_capacity(membership_doc_id_len(key));
    push_membership_doc_id(key, &mut id);
    id
}

/// At least the length of [`membership_doc_id`] in bytes (what to reserve).
pub fn membership_doc_id_len(key: &MembershipKey) -> usize {
    // 8 hex digits, 3 dots, at most 20 decimal digits of the length.
    8 + 3 + 20 + key.post_id.len() + key.user_id.len()
}

/// Appends [`membership_doc_id`] to `out` without an intermediate
/// string (document names are built once per membership per batch).
pub fn push_membership_doc_id(key: &MembershipKey, out: &mut String) {
    // Hand-written digits: `write!` here made batch building ~40 %
    // slower in `cargo bench --bench pipeline -- batch_build`.
    const HEX: &[u8; 16] = b"0123456789abcdef";
    let hash = (fnv1a64(key.post_id.as_bytes(), key.user_id.as_bytes()) >> 32) as u32;
    for shift in (0..8).rev() {
        out.push(char::from(HEX[((hash >> (shift * 4)) & 0xf) as usize]));
    }
    out.push('.');
    push_decimal(out, key.post_id.len());
    out.push('.');
    out.push_str(&key.post_id);
    out.push('.');
    out.push_str(&key.user_id);
}

#[cfg(test)]
mod tests {
    use super::*;

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
        assert_eq!(
            layout.rollup("p1"),
            "projects/proj/databases/(default)/documents/hc_counts/p1"
        );
        assert_eq!(
            layout.reconcile_guard("p1"),
            "projects/proj/databases/(default)/documents/hc_reconcile/p1"
        );
    }

    #[test]
    fn counter_shard_names_outside_the_layout_have_no_post() {
        let layout = Layout::new("x", "(default)", "hc_");
        let shard = layout.counter_shard("post-1", 3);
        assert_eq!(layout.counter_shard_post(&shard), Some("post-1"));
        assert_eq!(layout.counter_shard_number(&shard), Some(3));
        assert_eq!(layout.counter_shard_number(&layout.rollup("post-1")), None);
        let other = "projects/x/databases/(default)/documents/counters/post-1/shards/3";
        assert_eq!(layout.counter_shard_post(other), None);
        assert_eq!(layout.counter_shard_post(&format!("{shard}/x/y")), None);
        let parent = layout.counter_parent("post-1");
        assert_eq!(
            layout.counter_shard_post(&format!("{parent}/other/3")),
            None
        );
    }

    #[test]
    fn doc_ids_are_unambiguous_and_spread() {
        let a = MembershipKey {
            post_id: "a.b".into(),
            user_id: "c".into(),
        };
        let b = MembershipKey {
            post_id: "a".into(),
            user_id: "b.c".into(),
        };
        assert_ne!(membership_doc_id(&a), membership_doc_id(&b));
        let k1 = membership_doc_id(&MembershipKey {
            post_id: "p".into(),
            user_id: "u1".into(),
        });
        let k2 = membership_doc_id(&MembershipKey {
            post_id: "p".into(),
            user_id: "u2".into(),
        });
        assert_ne!(k1[..8], k2[..8]);
    }

    #[test]
    fn doc_ids_keep_their_stored_format() {
        // Stored membership documents are found by this id: it must never
        // change. The hand-written builder must equal the original format.
        let ids = ["", "p", "post-000042", "a.b", &"x".repeat(1500), "é/ü"];
        for post in ids {
            for user in ids {
                let key = MembershipKey {
                    post_id: post.into(),
                    user_id: user.into(),
                };
                let hash = fnv1a64(post.as_bytes(), user.as_bytes());
                let expected = format!("{:08x}.{}.{post}.{user}", hash >> 32, post.len());
                assert_eq!(membership_doc_id(&key), expected);
                assert!(membership_doc_id(&key).len() <= membership_doc_id_len(&key));
            }
        }
        let key = MembershipKey {
            post_id: "post-1".into(),
            user_id: "user-2".into(),
        };
        assert_eq!(membership_doc_id(&key), "9368d4ee.6.post-1.user-2");
    }
}
