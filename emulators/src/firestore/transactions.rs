//! Transactions: ids, age (priority), mode, expiry, and the locks each holds.
//!
//! Invariant: a transaction's `locks` set and the [`LockTable`] always agree;
//! ending or wounding a transaction releases every lock it holds in the same
//! step, so no lock outlives its holder. Priorities are unique among active
//! transactions: smaller is older, and a retry inherits its first attempt's.

use std::time::Duration;

use rand::Rng;
use rustc_hash::{FxHashMap, FxHashSet};
use tonic::Status;

use super::locks::{LockTable, TxnId};
use super::store::Micros;

/// The message of every "expired or unknown transaction" error.
pub const EXPIRED_MESSAGE: &str = "The referenced transaction has expired or is no longer valid.";
/// The message of every contention ABORTED.
pub const CONTENTION_MESSAGE: &str = "Too much contention on these documents. Please try again.";

/// What a transaction may do.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    /// Reads lock, commit writes.
    ReadWrite,
    /// Reads a snapshot at `read_time`; cannot write.
    ReadOnly {
        /// The snapshot time.
        read_time: Micros,
    },
}

/// One open transaction.
#[derive(Debug)]
pub struct Txn {
    /// `projects/{p}/databases/{d}`.
    pub database: String,
    /// Age: smaller is older and wins conflicts.
    pub priority: (u64, u64),
    /// Read-write or read-only.
    pub mode: Mode,
    begun: Duration,
    last_used: Duration,
    wounded: bool,
    locks: FxHashSet<String>,
}

/// Why a transaction ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum End {
    /// Committed.
    Committed,
    /// Rolled back by the client, or failed.
    RolledBack,
    /// Aborted (contention, lock timeout).
    Aborted,
    /// Expired.
    Expired,
}

/// Every open transaction and the lock table.
#[derive(Debug)]
pub struct Transactions {
    active: FxHashMap<TxnId, Txn>,
    /// Priorities of ended transactions, for `retry_transaction`, with the end time.
    retired: FxHashMap<TxnId, ((u64, u64), Duration)>,
    locks: LockTable,
    next_seq: u64,
    idle: Duration,
    total: Duration,
}

impl Transactions {
    /// No transactions; they expire after `idle` without use or `total` after begin.
    pub fn new(idle: Duration, total: Duration) -> Self {
        Self {
            active: FxHashMap::default(),
            retired: FxHashMap::default(),
            locks: LockTable::default(),
            next_seq: 1,
            idle,
            total,
        }
    }

    /// Starts a transaction; a read-write retry inherits the age of the
    /// transaction it retries and ends that one if it is still open.
    pub fn begin(
        &mut self,
        database: &str,
        mode: Mode,
        retry: Option<&[u8]>,
        now: Duration,
    ) -> TxnId {
        let seq = self.next_seq;
        self.next_seq += 1;
        let mut priority = (seq, seq);
        if let Some(old) = retry {
            let inherited = self
                .active
                .get(old)
                .map(|t| t.priority)
                .or_else(|| self.retired.get(old).map(|(p, _)| *p));
            if let Some(p) = inherited {
                priority = (p.0, seq);
            }
            self.end(old, now);
        }
        let mut id = seq.to_be_bytes().to_vec();
        id.extend_from_slice(&rand::rng().random::<u64>().to_be_bytes());
        self.active.insert(
            id.clone(),
            Txn {
                database: database.to_string(),
                priority,
                mode,
                begun: now,
                last_used: now,
                wounded: false,
                locks: FxHashSet::default(),
            },
        );
        id
    }

    /// Whether `txn` has expired at `now`.
    fn expired(&self, txn: &Txn, now: Duration) -> bool {
        now.saturating_sub(txn.last_used) > self.idle || now.saturating_sub(txn.begun) > self.total
    }

    /// Looks up an open transaction for an operation, marking it used.
    /// Unknown or expired -> INVALID_ARGUMENT; wounded -> ABORTED (and it ends).
    pub fn touch(
        &mut self,
        id: &[u8],
        database: &str,
        now: Duration,
    ) -> Result<&mut Txn, TxnError> {
        let Some(txn) = self.active.get(id) else {
            return Err(TxnError::Invalid);
        };
        if txn.database != database {
            return Err(TxnError::Invalid);
        }
        if txn.wounded {
            self.end(id, now);
            return Err(TxnError::Aborted);
        }
        if self.expired(txn, now) {
            self.end(id, now);
            return Err(TxnError::Expired);
        }
        let txn = self.active.get_mut(id).ok_or(TxnError::Invalid)?;
        txn.last_used = now;
        Ok(txn)
    }

    /// The open transaction `id`, without marking it used.
    pub fn get(&self, id: &[u8]) -> Option<&Txn> {
        self.active.get(id)
    }

    /// A fresh age, younger than every transaction begun so far, for a plain
    /// write that must queue (it takes a sequence number as a begin does).
    pub fn fresh_priority(&mut self) -> (u64, u64) {
        let seq = self.next_seq;
        self.next_seq += 1;
        (seq, seq)
    }

    /// Whether open transaction `id` holds a lock on `name`.
    pub fn holds(&self, id: &[u8], name: &str) -> bool {
        self.active.get(id).is_some_and(|t| t.locks.contains(name))
    }

    /// Whether `id` was a transaction that has ended (and is still remembered).
    pub fn is_retired(&self, id: &[u8]) -> bool {
        self.retired.contains_key(id)
    }

    /// Takes a shared lock on `name` for `id` (which must be open).
    pub fn lock(&mut self, id: &[u8], name: &str) {
        if let Some(txn) = self.active.get_mut(id) {
            if txn.locks.insert(name.to_string()) {
                self.locks.acquire(name, id);
            }
        }
    }

    /// Ends `id`, releasing its locks; returns false if it was not open.
    pub fn end(&mut self, id: &[u8], now: Duration) -> bool {
        let Some(txn) = self.active.remove(id) else {
            return false;
        };
        for name in &txn.locks {
            self.locks.release(name, id);
        }
        self.retired.insert(id.to_vec(), (txn.priority, now));
        true
    }

    /// Wounds `id`: releases its locks now; its next operation gets ABORTED.
    /// Returns false if it was not open or already wounded.
    pub fn wound(&mut self, id: &[u8]) -> bool {
        let Some(txn) = self.active.get_mut(id) else {
            return false;
        };
        if txn.wounded {
            return false;
        }
        txn.wounded = true;
        for name in std::mem::take(&mut txn.locks) {
            self.locks.release(&name, id);
        }
        true
    }

    /// The transactions holding a lock on `name`.
    pub fn holders(&self, name: &str) -> &[TxnId] {
        self.locks.holders(name)
    }

    /// Ends `id` if it has expired at `now`; returns whether it did.
    pub fn expire_if_due(&mut self, id: &[u8], now: Duration) -> bool {
        match self.active.get(id) {
            Some(txn) if self.expired(txn, now) => self.end(id, now),
            _ => false,
        }
    }

    /// Ends every expired transaction and forgets ids retired longer than the
    /// idle timeout (a retry names its attempt within seconds); returns how many expired.
    pub fn expire(&mut self, now: Duration) -> usize {
        let due: Vec<TxnId> = self
            .active
            .iter()
            .filter(|(_, t)| self.expired(t, now))
            .map(|(id, _)| id.clone())
            .collect();
        for id in &due {
            self.end(id, now);
        }
        let keep = self.idle;
        self.retired
            .retain(|_, (_, ended)| now.saturating_sub(*ended) <= keep);
        due.len()
    }

    /// Ends every transaction of `database` (a reset).
    pub fn end_database(&mut self, database: &str, now: Duration) {
        let ids: Vec<TxnId> = self
            .active
            .iter()
            .filter(|(_, t)| t.database == database)
            .map(|(id, _)| id.clone())
            .collect();
        for id in ids {
            self.end(&id, now);
        }
    }

    /// Ends every open transaction (a full reset).
    pub fn end_all(&mut self, now: Duration) {
        let ids: Vec<TxnId> = self.active.keys().cloned().collect();
        for id in ids {
            self.end(&id, now);
        }
    }

    /// Open transactions (wounded ones included until their next use).
    pub fn active(&self) -> usize {
        self.active.len()
    }

    /// Number of locked document names.
    pub fn locked_documents(&self) -> usize {
        self.locks.len()
    }
}

/// Why a transaction cannot be used.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TxnError {
    /// Unknown id (never begun, ended, or of another database).
    Invalid,
    /// It expired.
    Expired,
    /// An older transaction wounded it.
    Aborted,
}

impl From<TxnError> for Status {
    fn from(e: TxnError) -> Self {
        match e {
            TxnError::Invalid | TxnError::Expired => Status::invalid_argument(EXPIRED_MESSAGE),
            TxnError::Aborted => Status::aborted(CONTENTION_MESSAGE),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const S: Duration = Duration::from_secs(1);

    #[test]
    fn retry_inherits_age_and_ends_the_old_attempt() {
        let mut t = Transactions::new(60 * S, 270 * S);
        let a = t.begin("db", Mode::ReadWrite, None, S);
        let b = t.begin("db", Mode::ReadWrite, None, S);
        t.lock(&a, "x");
        let a2 = t.begin("db", Mode::ReadWrite, Some(&a), S);
        assert!(t.get(&a).is_none());
        assert!(t.holders("x").is_empty());
        assert!(t.get(&a2).unwrap().priority < t.get(&b).unwrap().priority);
    }

    #[test]
    fn wounded_transaction_gets_aborted_then_is_unknown() {
        let mut t = Transactions::new(60 * S, 270 * S);
        let a = t.begin("db", Mode::ReadWrite, None, S);
        t.lock(&a, "x");
        assert!(t.wound(&a));
        assert!(t.holders("x").is_empty());
        assert_eq!(t.touch(&a, "db", S).unwrap_err(), TxnError::Aborted);
        assert_eq!(t.touch(&a, "db", S).unwrap_err(), TxnError::Invalid);
    }

    #[test]
    fn idle_transactions_expire() {
        let mut t = Transactions::new(60 * S, 270 * S);
        let a = t.begin("db", Mode::ReadWrite, None, S);
        t.lock(&a, "x");
        assert!(t.touch(&a, "db", 50 * S).is_ok());
        assert_eq!(t.expire(200 * S), 1);
        assert!(t.holders("x").is_empty());
        assert_eq!(t.touch(&a, "db", 200 * S).unwrap_err(), TxnError::Invalid);
    }
}
