//! Every collection, document and field-path name hotcount uses in one
//! Firestore database: changing the layout is a change to this file.
//!
//! Invariant: names are built from the ids as given (the event schema only
//! admits ids that are safe as document ids); membership ids are stable
//! across builds (their hash is FNV-1a, see `batch::MembershipKey`).

use crate::event::push_decimal;
use crate::pipeline::batch::MembershipKey;

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
        self.quarantine_record(&format!("{consumer}:{doc_id}"))
    }

    /// The quarantine record whose document id is `id` (`{consumer}:{doc_id}`,
    /// as the operator tools list it).
    pub fn quarantine_record(&self, id: &str) -> String {
        format!("{}/{}/{id}", self.root(), self.collection("quarantine"))
    }
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
    }
}
