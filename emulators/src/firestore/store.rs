//! The document store: every version of every document by name, so reads at
//! the latest time, at a `read_time` or in a read-only transaction's snapshot
//! all see a consistent state.
//!
//! Invariant: versions of a document are kept in strictly increasing time
//! order, and pruning always keeps the newest version at or before the
//! retention horizon, so any read at or after the horizon is exact; every
//! read at or after [`Store::history_from`] is exact for every document
//! (pruning and resets move it forward). While a listener follows changes,
//! every write after [`ChangeLog`]'s `complete_after` is in its log.

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
    /// the newest). Returns whether the document existed before, and, when
    /// versions were forgotten, the time of the oldest one kept (reads
    /// before it are no longer exact).
    fn push(
        &mut self,
        version: Version,
        retention: Micros,
        max_versions: usize,
    ) -> (bool, Option<Micros>) {
        let was_live = self.versions.back().is_some_and(|v| v.doc.is_some());
        let horizon = version.at.saturating_sub(retention);
        self.versions.push_back(version);
        let mut pruned = false;
        while self.versions.len() > 1
            && (self.versions.len() > max_versions || self.versions[1].at <= horizon)
        {
            self.versions.pop_front();
            pruned = true;
        }
        (was_live, pruned.then(|| self.versions[0].at))
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
    /// Reads at or after this time are exact for every document.
    history_from: Micros,
    /// Names written, kept while a listener follows changes.
    changes: Option<ChangeLog>,
}

/// Most writes the change log keeps; past it, a listener that fell this far
/// behind re-reads its targets whole.
const CHANGE_LOG_CAPACITY: usize = 65_536;

/// The names written after a time, in time order: what a listener reads to
/// know which documents to look at again.
#[derive(Debug)]
struct ChangeLog {
    /// Every write later than this is in `entries`.
    complete_after: Micros,
    entries: VecDeque<(Micros, Arc<str>)>,
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
            history_from: Micros::MIN,
            changes: None,
        }
    }

    /// Reads at or after this time see every document exactly as it was;
    /// before it, pruned or reset history may be missing.
    pub fn history_from(&self) -> Micros {
        self.history_from
    }

    /// Starts (`Some(after)`: every write later than `after` is logged) or
    /// stops (`None`) logging the names written, for listeners.
    pub fn log_changes(&mut self, after: Option<Micros>) {
        self.changes = after.map(|complete_after| ChangeLog {
            complete_after,
            entries: VecDeque::new(),
        });
    }

    /// The names written later than `after`, in time order (a name once per
    /// write), or `None` when the log does not reach back that far.
    pub fn changed_since(&self, after: Micros) -> Option<impl Iterator<Item = &str> + '_> {
        let log = self.changes.as_ref()?;
        if after < log.complete_after {
            return None;
        }
        let first = log.entries.partition_point(|(at, _)| *at <= after);
        Some(log.entries.range(first..).map(|(_, name)| &**name))
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
        let (was_live, kept_from) = match self.docs.get_mut(name) {
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
        if let Some(kept_from) = kept_from {
            self.history_from = self.history_from.max(kept_from);
        }
        if let Some(log) = &mut self.changes {
            if log.entries.len() == CHANGE_LOG_CAPACITY {
                if let Some((dropped, _)) = log.entries.pop_front() {
                    log.complete_after = log.complete_after.max(dropped);
                }
            }
            log.entries.push_back((at, Arc::from(name)));
        }
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

    /// Removes every document (and its history) whose name starts with
    /// `prefix`, at time `at`: reads before it are no longer exact, and a
    /// listener behind it re-reads its targets whole.
    pub fn clear_prefix(&mut self, prefix: &str, at: Micros) -> usize {
        self.history_from = self.history_from.max(at);
        if let Some(log) = &mut self.changes {
            log.complete_after = log.complete_after.max(at);
        }
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
                self.history_from = self.history_from.max(at);
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
    fn history_from_moves_past_pruned_versions_and_resets() {
        let mut s = Store::new(10, 2);
        s.put("a", doc("v1"), 1);
        s.put("a", doc("v2"), 2);
        assert_eq!(s.history_from(), Micros::MIN);
        s.put("a", doc("v3"), 3);
        // v1 fell to max_versions: a read at 1 would miss it.
        assert_eq!(s.history_from(), 2);
        s.put("b", None, 4);
        s.prune(20);
        assert_eq!(s.history_from(), 4, "a forgotten deletion");
        s.clear_prefix("", 30);
        assert_eq!(s.history_from(), 30);
    }

    #[test]
    fn change_log_lists_writes_after_a_time_until_it_falls_short() {
        let mut s = Store::new(1_000, 100);
        s.put("a", doc("v1"), 1);
        assert!(s.changed_since(0).is_none(), "not logging");
        s.log_changes(Some(1));
        assert!(s.changed_since(0).is_none(), "before the log began");
        s.put("b", doc("v1"), 2);
        s.put("a", doc("v2"), 3);
        fn since(s: &Store, t: Micros) -> Option<Vec<&str>> {
            s.changed_since(t).map(Iterator::collect)
        }
        assert_eq!(since(&s, 1), Some(vec!["b", "a"]));
        assert_eq!(since(&s, 2), Some(vec!["a"]));
        assert_eq!(since(&s, 3), Some(vec![]));
        s.clear_prefix("", 4);
        assert_eq!(since(&s, 3), None, "a reset names nothing");
        assert_eq!(since(&s, 4), Some(vec![]));
        s.log_changes(None);
        assert_eq!(since(&s, 4), None);
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
