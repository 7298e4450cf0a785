//! The document store: every version of every document by name, so reads at
//! the latest time, at a `read_time` or in a read-only transaction's snapshot
//! all see a consistent state.
//!
//! Invariant: versions of a document are kept in strictly increasing time
//! order, and pruning always keeps the newest version at or before the
//! retention horizon, so any read at or after the horizon is exact.

use std::collections::{BTreeSet, VecDeque};
use std::ops::Bound;
use std::sync::Arc;

use rustc_hash::FxHashMap;

use crate::proto::firestore_v1::Document;

/// Microseconds since the Unix epoch: Firestore's time resolution.
pub type Micros = i64;

/// When to read: the newest state, or the state at a time.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ReadAt {
    /// The latest committed state.
    Latest,
    /// The state as of this time (inclusive).
    Time(Micros),
}

#[derive(Debug)]
struct Version {
    at: Micros,
    doc: Option<Arc<Document>>,
}

#[derive(Debug, Default)]
struct Entry {
    versions: VecDeque<Version>,
}

impl Entry {
    /// Appends `version` and forgets versions no read can need any more (older
    /// than the retention horizon, or past `max_versions`, always keeping
    /// the newest). Returns whether the document existed before.
    fn push(&mut self, version: Version, retention: Micros, max_versions: usize) -> bool {
        let was_live = self.versions.back().is_some_and(|v| v.doc.is_some());
        let horizon = version.at.saturating_sub(retention);
        self.versions.push_back(version);
        while self.versions.len() > 1
            && (self.versions.len() > max_versions || self.versions[1].at <= horizon)
        {
            self.versions.pop_front();
        }
        was_live
    }

    fn at(&self, at: ReadAt) -> Option<&Arc<Document>> {
        match at {
            ReadAt::Latest => self.versions.back()?.doc.as_ref(),
            ReadAt::Time(t) => self.versions.iter().rev().find(|v| v.at <= t)?.doc.as_ref(),
        }
    }
}

/// All documents of all databases, keyed by full name: a hash map for point
/// reads and writes, and the names in order for scans (every name is in both).
#[derive(Debug)]
pub struct Store {
    docs: FxHashMap<Arc<str>, Entry>,
    names: BTreeSet<Arc<str>>,
    /// How long superseded versions stay readable.
    retention: Micros,
    /// Most versions kept per document.
    max_versions: usize,
    live: usize,
    /// Deletions in time order, so pruning visits only deleted names.
    tombstones: VecDeque<(Micros, String)>,
}

impl Store {
    /// An empty store keeping old versions for `retention` (at most `max_versions` each).
    pub fn new(retention: Micros, max_versions: usize) -> Self {
        Self {
            docs: FxHashMap::default(),
            names: BTreeSet::new(),
            retention,
            max_versions: max_versions.max(1),
            live: 0,
            tombstones: VecDeque::new(),
        }
    }

    /// The document `name` as of `at`.
    pub fn get(&self, name: &str, at: ReadAt) -> Option<Arc<Document>> {
        self.docs.get(name)?.at(at).cloned()
    }

    /// Writes a new version of `name` (`None` deletes it) at time `at`.
    pub fn put(&mut self, name: &str, doc: Option<Arc<Document>>, at: Micros) {
        let is_live = doc.is_some();
        let version = Version { at, doc };
        let (retention, max_versions) = (self.retention, self.max_versions);
        // One lookup for a known name (the hot path); a new name is added
        // to the ordered index as well.
        let was_live = match self.docs.get_mut(name) {
            Some(entry) => entry.push(version, retention, max_versions),
            None => {
                let key: Arc<str> = Arc::from(name);
                self.names.insert(key.clone());
                self.docs
                    .entry(key)
                    .or_default()
                    .push(version, retention, max_versions)
            }
        };
        match (was_live, is_live) {
            (false, true) => self.live += 1,
            (true, false) => self.live -= 1,
            _ => {}
        }
        if !is_live {
            self.tombstones.push_back((at, name.to_string()));
        }
    }

    /// Every document whose name starts with `prefix`, as of `at`, in key order.
    pub fn scan<'a>(
        &'a self,
        prefix: &'a str,
        at: ReadAt,
    ) -> impl Iterator<Item = &'a Arc<Document>> + 'a {
        self.names
            .range::<str, _>((Bound::Included(prefix), Bound::Unbounded))
            .take_while(move |k| k.starts_with(prefix))
            .filter_map(move |k| self.docs.get(k)?.at(at))
    }

    /// Removes every document (and its history) whose name starts with `prefix`.
    pub fn clear_prefix(&mut self, prefix: &str) -> usize {
        let names: Vec<Arc<str>> = self
            .names
            .range::<str, _>((Bound::Included(prefix), Bound::Unbounded))
            .take_while(|k| k.starts_with(prefix))
            .cloned()
            .collect();
        let mut removed = 0;
        for name in names {
            self.names.remove(&name);
            if let Some(e) = self.docs.remove(&name) {
                if e.versions.back().is_some_and(|v| v.doc.is_some()) {
                    removed += 1;
                }
            }
        }
        self.live -= removed;
        removed
    }

    /// Forgets deleted documents whose deletion is older than the horizon
    /// (and that were not written again since). Visits only deletions.
    pub fn prune(&mut self, now: Micros) {
        let horizon = now.saturating_sub(self.retention);
        while let Some((at, _)) = self.tombstones.front() {
            if *at > horizon {
                break;
            }
            let Some((at, name)) = self.tombstones.pop_front() else {
                break;
            };
            let gone = self
                .docs
                .get(name.as_str())
                .and_then(|e| e.versions.back())
                .is_some_and(|v| v.doc.is_none() && v.at <= at);
            if gone {
                self.docs.remove(name.as_str());
                self.names.remove(name.as_str());
            }
        }
    }

    /// Number of existing documents.
    pub fn len(&self) -> usize {
        self.live
    }

    /// Whether no document exists.
    pub fn is_empty(&self) -> bool {
        self.live == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn doc(n: &str) -> Option<Arc<Document>> {
        Some(Arc::new(Document {
            name: n.into(),
            ..Default::default()
        }))
    }

    #[test]
    fn reads_at_a_time_see_that_version() {
        let mut s = Store::new(1_000, 100);
        s.put("a", doc("v1"), 10);
        s.put("a", doc("v2"), 20);
        s.put("a", None, 30);
        assert_eq!(s.get("a", ReadAt::Time(15)).unwrap().name, "v1");
        assert_eq!(s.get("a", ReadAt::Time(25)).unwrap().name, "v2");
        assert!(s.get("a", ReadAt::Latest).is_none());
        assert!(s.get("a", ReadAt::Time(5)).is_none());
        assert_eq!(s.len(), 0);
    }

    #[test]
    fn prune_forgets_old_deletions_only() {
        let mut s = Store::new(10, 100);
        s.put("a", doc("v1"), 1);
        s.put("a", None, 2);
        s.put("b", None, 3);
        s.put("b", doc("v2"), 4);
        s.prune(100);
        assert!(!s.docs.contains_key("a"));
        assert_eq!(s.get("b", ReadAt::Latest).unwrap().name, "v2");
    }

    #[test]
    fn pruning_keeps_the_version_at_the_horizon() {
        let mut s = Store::new(10, 100);
        s.put("a", doc("v1"), 10);
        s.put("a", doc("v2"), 20);
        s.put("a", doc("v3"), 35);
        // horizon 25: v2 (at 20) must remain for reads at 25..35.
        assert_eq!(s.get("a", ReadAt::Time(26)).unwrap().name, "v2");
        assert_eq!(s.len(), 1);
    }
}
