//! The erased users' tombstones as a replica holds them: the keyed hashes
//! (`event::user_hash`) of every erased user id, re-read from the store
//! every `--tombstone-refresh-ms`, against which the flusher drops events.
//!
//! Invariant: with no tombstone the check is one atomic load per batch (no
//! hash computed); a tombstone written to the store is in every running
//! replica's set within one refresh interval (plus one store read), which
//! is why `users erase` waits two intervals before removing memberships.

use std::collections::HashSet;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, RwLock};

use crate::event::user_hash;

/// The set of erased users' keyed hashes, and the key.
pub struct Tombstones {
    key: Vec<u8>,
    any: AtomicBool,
    hashes: RwLock<Arc<HashSet<String>>>,
}

impl std::fmt::Debug for Tombstones {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Tombstones")
            .field("any", &self.any.load(Ordering::Relaxed))
            .finish_non_exhaustive()
    }
}

impl Tombstones {
    /// An empty set hashing with `key`.
    pub fn new(key: &[u8]) -> Self {
        Self {
            key: key.to_vec(),
            any: AtomicBool::new(false),
            hashes: RwLock::new(Arc::new(HashSet::new())),
        }
    }

    /// Replaces the set with `hashes` (a fresh read of the store).
    pub fn replace(&self, hashes: impl IntoIterator<Item = String>) {
        let set: HashSet<String> = hashes.into_iter().collect();
        let any = !set.is_empty();
        if let Ok(mut held) = self.hashes.write() {
            *held = Arc::new(set);
        }
        self.any.store(any, Ordering::Release);
    }

    /// Whether no user is erased (the check then costs nothing).
    pub fn is_empty(&self) -> bool {
        !self.any.load(Ordering::Acquire)
    }

    /// The current set, to check a batch's events against.
    pub fn snapshot(&self) -> Option<Arc<HashSet<String>>> {
        if self.is_empty() {
            return None;
        }
        self.hashes.read().ok().map(|held| held.clone())
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
        assert!(t.snapshot().is_none(), "empty: nothing to check");
        t.replace([user_hash(b"k", "alice")]);
        let set = t.snapshot().expect("one tombstone");
        assert!(t.holds(&set, "alice"));
        assert!(!t.holds(&set, "bob"));
        let other_key = Tombstones::new(b"other");
        assert!(
            !other_key.holds(&set, "alice"),
            "the hash depends on the key"
        );
    }
}
