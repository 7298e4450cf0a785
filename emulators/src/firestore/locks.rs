//! The pessimistic lock table: which read-write transactions hold a shared
//! (read) lock on which document name.
//!
//! Invariant: a transaction id appears at most once among a name's holders,
//! and a name with no holder has no entry. Exclusive locks are never held
//! across an await: a commit takes them and applies its writes inside one
//! critical section, so "a commit needs exclusive" is "no other holder".

use rustc_hash::FxHashMap;

/// A transaction id as sent on the wire.
pub type TxnId = Vec<u8>;

/// Shared lock holders by document name.
#[derive(Debug, Default)]
pub struct LockTable {
    holders: FxHashMap<String, Vec<TxnId>>,
}

impl LockTable {
    /// Adds `txn` as a holder of `name`; returns false if it already held it.
    pub fn acquire(&mut self, name: &str, txn: &[u8]) -> bool {
        let holders = match self.holders.get_mut(name) {
            Some(h) => h,
            None => self.holders.entry(name.to_string()).or_default(),
        };
        if holders.iter().any(|h| h == txn) {
            return false;
        }
        holders.push(txn.to_vec());
        true
    }

    /// Removes `txn` from the holders of `name`.
    pub fn release(&mut self, name: &str, txn: &[u8]) {
        if let Some(holders) = self.holders.get_mut(name) {
            holders.retain(|h| h != txn);
            if holders.is_empty() {
                self.holders.remove(name);
            }
        }
    }

    /// The transactions holding `name`.
    pub fn holders(&self, name: &str) -> &[TxnId] {
        self.holders.get(name).map(Vec::as_slice).unwrap_or(&[])
    }

    /// Number of locked names.
    pub fn len(&self) -> usize {
        self.holders.len()
    }

    /// Whether no name is locked.
    pub fn is_empty(&self) -> bool {
        self.holders.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn holders_are_unique_and_released() {
        let mut t = LockTable::default();
        assert!(t.acquire("a", b"1"));
        assert!(!t.acquire("a", b"1"));
        assert!(t.acquire("a", b"2"));
        assert_eq!(t.holders("a").len(), 2);
        t.release("a", b"1");
        t.release("a", b"2");
        assert!(t.is_empty());
    }
}
