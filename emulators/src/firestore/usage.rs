//! What Google would bill for the emulator's traffic, by collection group:
//! document reads, writes and deletes as Firestore (Standard edition)
//! counts them, an estimate of the single-field index entries the written
//! documents hold, and the stored documents' sizes by the storage size
//! formula (<https://firebase.google.com/docs/firestore/storage-size>).
//!
//! Invariant: every figure is counted where the engine counts its totals
//! (under its state lock, once per document a read returned or a commit
//! applied), so the groups always sum to the engine's totals.
//!
//! The index entries are an **estimate**: automatic single-field indexes
//! only, on every field (ascending and descending per scalar leaf of a
//! field or of a map inside it, one array-contains entry per array
//! element), with no exemptions and no composite indexes; what a
//! deployment stores is this less what its exemptions turn off (see
//! `deploy/setup.sh`) plus its composite indexes.

use std::collections::BTreeMap;

use rustc_hash::FxHashMap;
use serde::Serialize;

use super::values::{document_size, Fields};
use crate::proto::firestore_v1::{value::ValueType, Document, Value};

/// Billing-shaped counts of one collection group.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct CollectionUsage {
    /// Documents read (each document a get, a batch get, a query or a
    /// list returned; a batch get's missing documents included).
    pub reads: u64,
    /// Documents written (created, updated or transformed), deletes excluded.
    pub writes: u64,
    /// Documents deleted (a delete write, whether the document existed).
    pub deletes: u64,
    /// Estimated single-field index entries of the written documents' new
    /// states (see the module doc).
    pub index_entries: u64,
}

/// What one collection group stores now.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct CollectionStorage {
    /// Documents stored.
    pub documents: u64,
    /// Their storage size: document name + field names + values + 32 bytes each.
    pub document_bytes: u64,
    /// Their estimated single-field index entries (see the module doc).
    pub index_entries: u64,
}

/// The collection group (the last collection id) of a full document name:
/// `.../documents/counters/p1/shards/3` is `shards`.
pub fn collection_group(name: &str) -> &str {
    let path = name.split_once("/documents/").map_or(name, |(_, p)| p);
    path.rsplit('/').nth(1).unwrap_or("")
}

/// Estimated single-field index entries of a document's fields (see the
/// module doc).
pub fn index_entries(fields: &Fields) -> u64 {
    fields.values().map(value_entries).sum()
}

fn value_entries(v: &Value) -> u64 {
    match &v.value_type {
        Some(ValueType::MapValue(m)) => m.fields.values().map(value_entries).sum(),
        Some(ValueType::ArrayValue(a)) => a.values.len() as u64,
        _ => 2,
    }
}

/// The per-group counters the engine keeps.
#[derive(Debug, Default)]
pub struct Usage {
    by_group: FxHashMap<String, CollectionUsage>,
}

impl Usage {
    fn group(&mut self, name: &str) -> &mut CollectionUsage {
        let group = collection_group(name);
        if !self.by_group.contains_key(group) {
            self.by_group
                .insert(group.to_string(), CollectionUsage::default());
        }
        self.by_group
            .get_mut(group)
            .expect("the group was inserted just above")
    }

    /// Counts a read of document `name`.
    pub fn read(&mut self, name: &str) {
        self.group(name).reads += 1;
    }

    /// Counts a write of document `name` that left it as `doc` (`None`:
    /// deleted); returns the index entries counted for it.
    pub fn write(&mut self, name: &str, doc: Option<&Document>) -> u64 {
        let usage = self.group(name);
        match doc {
            None => {
                usage.deletes += 1;
                0
            }
            Some(doc) => {
                let entries = index_entries(&doc.fields);
                usage.writes += 1;
                usage.index_entries += entries;
                entries
            }
        }
    }

    /// The counters by group, in name order.
    pub fn snapshot(&self) -> BTreeMap<String, CollectionUsage> {
        self.by_group.iter().map(|(k, v)| (k.clone(), *v)).collect()
    }

    /// Zeroes every counter.
    pub fn clear(&mut self) {
        self.by_group.clear();
    }
}

/// Adds document `name` holding `fields` to `storage`.
pub fn add_stored(storage: &mut BTreeMap<String, CollectionStorage>, name: &str, fields: &Fields) {
    let group = storage
        .entry(collection_group(name).to_string())
        .or_default();
    group.documents += 1;
    // A stored document passed `check_document`: its size is defined.
    group.document_bytes += document_size(name, fields).unwrap_or(0) as u64;
    group.index_entries += index_entries(fields);
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::firestore::values::{int, value};

    #[test]
    fn a_document_belongs_to_the_collection_that_holds_it() {
        let root = "projects/p/databases/(default)/documents";
        assert_eq!(collection_group(&format!("{root}/likes/p1_u1")), "likes");
        assert_eq!(
            collection_group(&format!("{root}/counters/p1/shards/3")),
            "shards"
        );
    }

    #[test]
    fn each_scalar_leaf_has_an_ascending_and_a_descending_entry_and_each_array_element_one() {
        let mut inner = Fields::new();
        inner.insert("a".into(), int(1));
        inner.insert("b".into(), value(ValueType::StringValue("x".into())));
        let mut fields = Fields::new();
        fields.insert("n".into(), int(7));
        fields.insert(
            "m".into(),
            value(ValueType::MapValue(crate::proto::firestore_v1::MapValue {
                fields: inner,
            })),
        );
        fields.insert(
            "xs".into(),
            value(ValueType::ArrayValue(
                crate::proto::firestore_v1::ArrayValue {
                    values: vec![int(1), int(2), int(3)],
                },
            )),
        );
        assert_eq!(index_entries(&fields), 2 + 4 + 3);
    }

    #[test]
    fn a_stored_document_counts_by_the_storage_size_formula() {
        // Google's example: users/jeff/tasks/my_task_id with four fields, 147 bytes.
        let name = "projects/p/databases/d/documents/users/jeff/tasks/my_task_id";
        let mut fields = Fields::new();
        fields.insert(
            "type".into(),
            value(ValueType::StringValue("Personal".into())),
        );
        fields.insert("done".into(), value(ValueType::BooleanValue(false)));
        fields.insert("priority".into(), int(1));
        fields.insert(
            "description".into(),
            value(ValueType::StringValue("Learn Cloud Firestore".into())),
        );
        let mut storage = BTreeMap::new();
        add_stored(&mut storage, name, &fields);
        let tasks = storage["tasks"];
        assert_eq!(
            (tasks.documents, tasks.document_bytes, tasks.index_entries),
            (1, 147, 8)
        );
    }
}
