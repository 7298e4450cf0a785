//! The erased users' tombstones as a replica holds them: the keyed hashes
//! (`event::user_hash`) of every erased user id and the generation they
//! were read at, re-read from the store every `--tombstone-refresh-ms`
//! (and by the flusher when a commit finds the store's generation moved),
//! against which the flusher drops events.
//!
//! Invariants: a [`Checked`] pairs a set with a generation no newer than
//! the read that produced the set (the store's generation is read first),
//! so a batch labelled with it is never let through by a set older than
//! its label; the label, not the refresh interval, is what keeps an erased
//! user's event out of every commit (the store compares it in the commit's
//! own transaction). With no tombstone the check hashes nothing.

use std::collections::HashSet;
use std::sync::{Arc, RwLock};

use crate::event::user_hash;
use crate::model::batch::Batch;
use crate::store::TombstoneState;

/// The set of erased users' keyed hashes, its generation, and the key.
pub struct Tombstones {
    key: Vec<u8>,
    held: RwLock<Checked>,
}

/// One read of the tombstones: what a batch is checked against.
#[derive(Clone, Debug, Default)]
pub struct Checked {
    /// The store's tombstone generation when the set was read.
    pub generation: i64,
    /// The keyed hashes; `None` when there is none (nothing to hash).
    pub hashes: Option<Arc<HashSet<String>>>,
}

impl std::fmt::Debug for Tombstones {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Tombstones")
            .field("generation", &self.snapshot().generation)
            .finish_non_exhaustive()
    }
}

impl Tombstones {
    /// An empty set hashing with `key`, at generation 0 (a store that has
    /// moved past it aborts the first commit, which reads it then).
    pub fn new(key: &[u8]) -> Self {
        Self {
            key: key.to_vec(),
            held: RwLock::new(Checked::default()),
        }
    }

    /// Replaces the set with `state` (a fresh read of the store).
    pub fn replace(&self, state: TombstoneState) {
        let hashes = (!state.hashes.is_empty())
            .then(|| Arc::new(state.hashes.into_iter().collect::<HashSet<String>>()));
        let checked = Checked {
            generation: state.generation,
            hashes,
        };
        if let Ok(mut held) = self.held.write() {
            *held = checked;
        }
    }

    /// Checks `batch` again against `state` (a read made after its commit
    /// found the store's generation moved): holds `state` from now on,
    /// drops the events of the users it holds from `batch` and labels it
    /// with its generation. Returns how many events were dropped.
    pub fn recheck(&self, state: TombstoneState, batch: &mut Batch) -> usize {
        self.replace(state);
        let checked = self.snapshot();
        let dropped = checked.hashes.as_ref().map_or(0, |set| {
            batch.drop_events(|key| self.holds(set, &key.user_id))
        });
        batch.tombstone_generation = Some(checked.generation);
        dropped
    }

    /// Whether no user is erased (the check then hashes nothing).
    pub fn is_empty(&self) -> bool {
        self.snapshot().hashes.is_none()
    }

    /// The current set and its generation, to check a batch against (a
    /// read lock and an `Arc` clone per batch).
    pub fn snapshot(&self) -> Checked {
        self.held
            .read()
            .map(|held| held.clone())
            .unwrap_or_default()
    }

    /// Whether `user_id` is in `set` (a [`Self::snapshot`]).
    pub fn holds(&self, set: &HashSet<String>, user_id: &str) -> bool {
        set.contains(&user_hash(&self.key, user_id))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_erased_users_hash_is_held_and_others_are_not() {
        let t = Tombstones::new(b"k");
        assert!(t.snapshot().hashes.is_none(), "empty: nothing to check");
        t.replace(TombstoneState {
            generation: 3,
            hashes: vec![user_hash(b"k", "alice")],
        });
        let checked = t.snapshot();
        assert_eq!(checked.generation, 3);
        let set = checked.hashes.expect("one tombstone");
        assert!(t.holds(&set, "alice"));
        assert!(!t.holds(&set, "bob"));
        let other_key = Tombstones::new(b"other");
        assert!(
            !other_key.holds(&set, "alice"),
            "the hash depends on the key"
        );
    }
}
