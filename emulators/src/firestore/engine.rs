//! The database engine: the one lock-protected state (documents, transactions,
//! locks, statistics) every RPC goes through, and the locking rule.
//!
//! Invariant: every read and every commit runs inside one critical section
//! of `state`, so a commit's writes become visible all at once, and a commit
//! applies only when no other transaction holds a lock on any document it
//! writes. The only awaits are between attempts: a commit waiting for an
//! older transaction's locks, and a transactional read queued behind such a
//! waiting commit.
//!
//! # The locking rule (wound-wait)
//! Reads in a read-write transaction take shared locks (missing documents
//! and every document a query returns included). A commit needs every
//! document it writes free of other holders. For each other holder:
//! - expired: it ends, releasing its locks;
//! - younger than the committing transaction: it is *wounded* (its locks are
//!   released at once, its next operation or commit gets ABORTED);
//! - older (or the commit is a plain, non-transactional write): the commit
//!   waits until the holder ends, or until the lock wait timeout, then it is
//!   ABORTED (and a transaction ends). With
//!   `FirestoreConfig::younger_waits_for_older = false` a transaction does
//!   not wait: it is ABORTED at once (plain writes still wait).
//!
//! A plain write that waited holds off `released_write_backoff` once its
//! documents are free (Firestore's contended write retries with backoff),
//! so it is never answered before the transaction that held them.
//!
//! Writers are not starved: while a commit waits, a read of a document it
//! writes by a younger read-write transaction queues behind it (a plain
//! write queues with the age of the moment it started waiting), then sees
//! what it wrote.
//!
//! Waits only go from younger to older (plain writes hold nothing while they
//! wait, and every holder a queued plain write waits for locked before it
//! queued, so is older), so there is no deadlock; a retry keeps its first attempt's age, so
//! every transaction eventually becomes the oldest and commits.

use std::cell::Cell;
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use parking_lot::Mutex;
use rustc_hash::FxHashMap;
use serde::Serialize;
use tokio::sync::watch;
use tonic::Status;

use super::locks::TxnId;
use super::store::{Micros, ReadAt, Store};
use super::transactions::{Mode, Transactions, TxnError, CONTENTION_MESSAGE, EXPIRED_MESSAGE};
use super::usage::{add_stored, CollectionStorage, CollectionUsage, Usage};
use super::writes;
use super::FirestoreConfig;
use crate::proto::firestore_v1::{
    transaction_options, CommitResponse, Document, TransactionOptions, Write,
};
use crate::server::Context;

/// How often a waiting commit re-checks (emulated clock moves, expiries).
const WAIT_SLICE: Duration = Duration::from_millis(20);

/// Which state a read sees.
#[derive(Clone, Debug)]
pub enum Consistency {
    /// The latest committed state, no locks.
    Latest,
    /// The state at a time, no locks.
    ReadTime(Micros),
    /// Inside an open transaction.
    Transaction(TxnId),
    /// Inside a transaction begun by this read.
    NewTransaction(TransactionOptions),
}

/// The result of a read and the context it ran in.
#[derive(Debug)]
pub struct Snapshot<T> {
    /// What was read.
    pub value: T,
    /// The time the read reflects.
    pub read_time: Micros,
    /// The transaction the read began, if it began one.
    pub new_transaction: Option<TxnId>,
}

/// Totals since start (or the last reset of statistics).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct FirestoreStats {
    /// Successful atomic write sets: Commit RPCs and each single write of
    /// CreateDocument, UpdateDocument, DeleteDocument and BatchWrite.
    pub commits: u64,
    /// Document writes applied (a commit writing 3 documents counts 3),
    /// deletes included.
    pub documents_written: u64,
    /// Of those, deletes (a delete write, whether the document existed).
    pub documents_deleted: u64,
    /// Estimated single-field index entries of the documents written
    /// (their new states; see [`super::usage`]: an estimate, every field
    /// indexed, no exemptions).
    pub index_entries_written: u64,
    /// Documents read: each document a get, a batch get (found or
    /// missing), a query or a list returned, as Google bills reads
    /// (Listen's snapshots excluded).
    pub documents_read: u64,
    /// Transactions begun.
    pub transactions_begun: u64,
    /// Read-write transactions begun naming the transaction they retry
    /// (`retry_transaction`), which gives them that one's age.
    pub retried_transactions: u64,
    /// Transactions ended with ABORTED (wounded, or lock wait timeout).
    pub aborted_transactions: u64,
    /// Transactions that expired (idle or total lifetime).
    pub expired_transactions: u64,
    /// Transactions rolled back by the client or ended by a failed commit.
    pub rolled_back_transactions: u64,
    /// Commits that had to wait for a lock at least once.
    pub lock_waits: u64,
    /// Commits (and reads queued behind a waiting commit) aborted because
    /// the lock wait timed out.
    pub lock_timeouts: u64,
    /// Reads in read-write transactions that queued behind a waiting commit.
    pub read_waits: u64,
    /// Open transactions now.
    pub active_transactions: usize,
    /// Documents locked now.
    pub locked_documents: usize,
    /// Documents stored now (all databases).
    pub documents: usize,
    /// Reads, writes (deletes excluded), deletes and estimated index
    /// entries by collection group (the last collection id of a document's
    /// name), as Google bills them.
    pub by_collection: BTreeMap<String, CollectionUsage>,
}

/// A successful commit: the response, and each write's resulting document
/// (`None` when it deleted it).
#[derive(Debug)]
pub struct Committed {
    /// What the client gets.
    pub response: CommitResponse,
    /// The state each write left its document in.
    pub documents: Vec<Option<Arc<Document>>>,
}

/// One commit in progress, as `attempt` needs it.
struct Pending<'a> {
    database: &'a str,
    writes: &'a [Write],
    names: &'a [String],
    unique: &'a [String],
    txn: Option<&'a [u8]>,
    deadline: Duration,
    /// A plain write found its documents free after waiting: it holds off
    /// `released_write_backoff` before applying.
    backing_off: Cell<bool>,
    /// It has held off since its documents were last found locked.
    backed_off: Cell<bool>,
}

/// How many commits wrote one document.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct DocumentWrites {
    /// Full document name.
    pub name: String,
    /// Commits that wrote it.
    pub writes: u64,
}

struct State {
    store: Store,
    txns: Transactions,
    stats: FirestoreStats,
    doc_writes: FxHashMap<String, u64>,
    doc_reads: FxHashMap<String, u64>,
    usage: Usage,
    last_time: Micros,
    /// The latest time handed out for a read at the latest state.
    last_read: Micros,
    /// Commits waiting for a lock, by document they write.
    queued: FxHashMap<String, Vec<QueuedWriter>>,
    next_queued: u64,
    /// Open [`Follower`]s: while there is one, the store logs the names written.
    followers: usize,
}

/// A commit in the writers' queue of a document: (its queue key, its age).
type QueuedWriter = (u64, (u64, u64));

/// A transaction begun by a read that is still waiting: if the read is
/// dropped (the call cancelled) before it answers, the transaction ends.
struct BegunByRead<'a> {
    engine: &'a Engine,
    id: Option<TxnId>,
}

impl Drop for BegunByRead<'_> {
    fn drop(&mut self) {
        if let Some(id) = self.id.take() {
            self.engine.end_after_failure(&id);
        }
    }
}

/// A commit's place in the queue of writers waiting for a lock; leaving it
/// (the commit ended, or the call was cancelled) wakes the reads behind it.
struct Queued<'a> {
    engine: &'a Engine,
    names: &'a [String],
    key: Option<u64>,
}

impl Drop for Queued<'_> {
    fn drop(&mut self) {
        if let Some(key) = self.key.take() {
            self.engine.state.lock().unqueue(key, self.names);
            self.engine.notify();
        }
    }
}

/// A listener's hold on the engine (see [`Engine::follow`]): while any is
/// alive the store logs the names each commit writes.
pub struct Follower {
    engine: Arc<Engine>,
    commits: watch::Receiver<u64>,
}

impl Follower {
    /// Marks every commit so far as seen: [`Follower::changed`] then waits
    /// for a later one. Call it before reading what changed.
    pub fn mark_seen(&mut self) {
        self.commits.borrow_and_update();
    }

    /// Waits until a commit (or a reset) after the last [`Follower::mark_seen`].
    pub async fn changed(&mut self) {
        if self.commits.changed().await.is_err() {
            std::future::pending::<()>().await;
        }
    }
}

impl Drop for Follower {
    fn drop(&mut self) {
        let mut st = self.engine.state.lock();
        st.followers -= 1;
        if st.followers == 0 {
            st.store.log_changes(None);
        }
    }
}

/// The engine; shared by the gRPC service and the admin routes.
pub struct Engine {
    state: Mutex<State>,
    wake: watch::Sender<u64>,
    /// Bumped after every successful commit and every reset, for listeners.
    commits: watch::Sender<u64>,
    ctx: Arc<Context>,
    config: FirestoreConfig,
}

fn wall_micros(t: SystemTime) -> Micros {
    t.duration_since(UNIX_EPOCH)
        .map(|d| d.as_micros() as Micros)
        .unwrap_or(0)
}

impl State {
    /// The time of a read at the latest state. Every later commit gets a
    /// strictly later time, so a second read at this time sees exactly what
    /// the first one saw (Firestore's consistent snapshot).
    fn read_time(&mut self, wall: Micros) -> Micros {
        let t = wall.max(self.last_time);
        self.last_read = self.last_read.max(t);
        t
    }

    fn next_commit_time(&mut self, wall: Micros) -> Micros {
        let t = wall.max(self.last_time + 1).max(self.last_read + 1);
        self.last_time = t;
        t
    }

    fn begin(
        &mut self,
        database: &str,
        options: Option<&TransactionOptions>,
        now: Duration,
        wall: Micros,
    ) -> Result<TxnId, Status> {
        let (mode, retry) = match options.and_then(|o| o.mode.as_ref()) {
            None => (Mode::ReadWrite, None),
            Some(transaction_options::Mode::ReadWrite(rw)) => (
                Mode::ReadWrite,
                (!rw.retry_transaction.is_empty()).then_some(rw.retry_transaction.as_slice()),
            ),
            Some(transaction_options::Mode::ReadOnly(ro)) => {
                let read_time = match &ro.consistency_selector {
                    Some(transaction_options::read_only::ConsistencySelector::ReadTime(t)) => {
                        writes::micros(t)
                    }
                    None => self.read_time(wall),
                };
                (Mode::ReadOnly { read_time }, None)
            }
        };
        self.stats.transactions_begun += 1;
        self.stats.retried_transactions += u64::from(retry.is_some());
        Ok(self.txns.begin(database, mode, retry, now))
    }

    /// Puts a commit writing `names` in the writers' queue with age
    /// `priority`; returns its key.
    fn queue(&mut self, names: &[String], priority: (u64, u64)) -> u64 {
        let key = self.next_queued;
        self.next_queued += 1;
        for name in names {
            self.queued
                .entry(name.clone())
                .or_default()
                .push((key, priority));
        }
        key
    }

    /// Takes commit `key` out of the writers' queue.
    fn unqueue(&mut self, key: u64, names: &[String]) {
        for name in names {
            if let Some(waiting) = self.queued.get_mut(name) {
                waiting.retain(|(k, _)| *k != key);
                if waiting.is_empty() {
                    self.queued.remove(name);
                }
            }
        }
    }

    /// One try of a read (see [`Engine::read`]): the value and its read
    /// time, or `None` to wait and try again.
    ///
    /// Production does not starve writers: once a commit waits for a write
    /// lock, later lock requests on that document queue behind it. So a read
    /// in read-write transaction `R` waits while a document it would return
    /// is written by a queued commit older than `R` (a queued plain write is
    /// as old as the moment it queued), unless `R` already holds that
    /// document (the commit waits for `R` then). Every wait goes from younger
    /// to older, so this adds no deadlock. Past the lock wait timeout `R`
    /// is ABORTED. Reads outside read-write transactions take no locks and
    /// never wait.
    fn read_step<T, F>(
        &mut self,
        database: &str,
        consistency: &mut Consistency,
        begun: &mut Option<TxnId>,
        f: &F,
        (now, wall, deadline): (Duration, Micros, Duration),
        waited: &mut bool,
    ) -> Option<Result<(T, Micros), Status>>
    where
        F: Fn(&Store, ReadAt) -> Result<(T, Vec<String>), Status>,
    {
        let id = match consistency {
            Consistency::Latest => {
                let read_time = self.read_time(wall);
                let read = f(&self.store, ReadAt::Latest);
                return Some(read.map(|(v, names)| (v, self.count_reads(&names, read_time))));
            }
            Consistency::ReadTime(t) => {
                let t = *t;
                let read = f(&self.store, ReadAt::Time(t));
                return Some(read.map(|(v, names)| (v, self.count_reads(&names, t))));
            }
            Consistency::Transaction(id) => id.clone(),
            Consistency::NewTransaction(options) => {
                let options = options.clone();
                let id = match self.begin(database, Some(&options), now, wall) {
                    Ok(id) => id,
                    Err(e) => return Some(Err(e)),
                };
                *begun = Some(id.clone());
                *consistency = Consistency::Transaction(id.clone());
                id
            }
        };
        let (mode, priority) = match self.txns.touch(&id, database, now) {
            Ok(t) => (t.mode, t.priority),
            Err(e) => {
                if e == TxnError::Expired {
                    self.stats.expired_transactions += 1;
                }
                return Some(Err(e.into()));
            }
        };
        if let Mode::ReadOnly { read_time } = mode {
            let read = f(&self.store, ReadAt::Time(read_time));
            return Some(read.map(|(v, names)| (v, self.count_reads(&names, read_time))));
        }
        let (value, names) = match f(&self.store, ReadAt::Latest) {
            Ok(read) => read,
            Err(e) => {
                if begun.is_some() {
                    self.txns.end(&id, now);
                }
                return Some(Err(e));
            }
        };
        let behind_writer = names.iter().any(|name| {
            !self.txns.holds(&id, name)
                && self
                    .queued
                    .get(name)
                    .is_some_and(|w| w.iter().any(|(_, age)| *age < priority))
        });
        if behind_writer {
            if now >= deadline {
                self.txns.end(&id, now);
                self.stats.aborted_transactions += 1;
                self.stats.lock_timeouts += 1;
                return Some(Err(Status::aborted(CONTENTION_MESSAGE)));
            }
            if !*waited {
                *waited = true;
                self.stats.read_waits += 1;
            }
            return None;
        }
        for name in &names {
            self.txns.lock(&id, name);
        }
        let read_time = self.read_time(wall);
        Some(Ok((value, self.count_reads(&names, read_time))))
    }

    /// Counts a read of `names`; returns `read_time`.
    fn count_reads(&mut self, names: &[String], read_time: Micros) -> Micros {
        self.stats.documents_read += names.len() as u64;
        for name in names {
            self.usage.read(name);
            match self.doc_reads.get_mut(name) {
                Some(reads) => *reads += 1,
                None => {
                    self.doc_reads.insert(name.clone(), 1);
                }
            }
        }
        read_time
    }

    /// Checks whether `names` may be written by `me` (None = a plain write);
    /// wounds younger holders and ends expired ones. Returns (clear, released_any).
    fn clear_to_write(
        &mut self,
        names: &[String],
        me: Option<(&[u8], (u64, u64))>,
        now: Duration,
    ) -> (bool, bool) {
        let mut clear = true;
        let mut released = false;
        for name in names {
            let holders: Vec<TxnId> = self
                .txns
                .holders(name)
                .iter()
                .filter(|h| me.is_none_or(|(id, _)| h.as_slice() != id))
                .cloned()
                .collect();
            for h in holders {
                if self.txns.expire_if_due(&h, now) {
                    self.stats.expired_transactions += 1;
                    released = true;
                    continue;
                }
                let theirs = self.txns.get(&h).map(|t| t.priority);
                match (me, theirs) {
                    (Some((_, mine)), Some(theirs)) if mine < theirs => {
                        if self.txns.wound(&h) {
                            self.stats.aborted_transactions += 1;
                            released = true;
                        }
                    }
                    _ => clear = false,
                }
            }
        }
        (clear, released)
    }

    /// Applies `writes` atomically at a new commit time; all or nothing.
    fn apply(
        &mut self,
        batch: &[Write],
        names: &[String],
        wall: Micros,
        max_documents: Option<usize>,
    ) -> Result<Committed, Status> {
        let commit_time = self.next_commit_time(wall);
        let mut overlay: FxHashMap<&str, Option<Arc<Document>>> = FxHashMap::default();
        let mut results = Vec::with_capacity(batch.len());
        let mut states = Vec::with_capacity(batch.len());
        let mut created = 0usize;
        for (w, name) in batch.iter().zip(names) {
            let stored;
            let current = match overlay.get(name.as_str()) {
                Some(d) => d.as_deref(),
                None => {
                    stored = self.store.get(name, ReadAt::Latest);
                    stored.as_deref()
                }
            };
            let existed = current.is_some();
            let (new, result) = writes::apply(w, name, current, commit_time)?;
            let new = new.map(Arc::new);
            if !existed && new.is_some() {
                created += 1;
            }
            states.push(new.clone());
            overlay.insert(name, new);
            results.push(result);
        }
        if let Some(max) = max_documents {
            if created > 0 && self.store.len() + created > max {
                return Err(Status::resource_exhausted(format!(
                    "The emulator holds at most {max} documents."
                )));
            }
        }
        for (name, doc) in overlay {
            let entries = self.usage.write(name, doc.as_deref());
            self.stats.documents_deleted += u64::from(doc.is_none());
            self.stats.index_entries_written += entries;
            self.store.put(name, doc, commit_time);
            self.stats.documents_written += 1;
            // Under the state lock: allocate a key only for a new name.
            match self.doc_writes.get_mut(name) {
                Some(writes) => *writes += 1,
                None => {
                    self.doc_writes.insert(name.to_string(), 1);
                }
            }
        }
        self.stats.commits += 1;
        Ok(Committed {
            response: CommitResponse {
                write_results: results,
                commit_time: Some(writes::timestamp(commit_time)),
            },
            documents: states,
        })
    }
}

impl Engine {
    /// An empty engine.
    pub fn new(ctx: Arc<Context>, config: FirestoreConfig) -> Self {
        let (wake, _) = watch::channel(0);
        Self {
            state: Mutex::new(State {
                store: Store::new(
                    Micros::try_from(config.version_retention.as_micros()).unwrap_or(Micros::MAX),
                    config.max_versions_per_document,
                ),
                txns: Transactions::new(
                    config.transaction_idle_timeout,
                    config.transaction_max_lifetime,
                ),
                stats: FirestoreStats::default(),
                doc_writes: FxHashMap::default(),
                doc_reads: FxHashMap::default(),
                usage: Usage::default(),
                last_time: 0,
                last_read: 0,
                queued: FxHashMap::default(),
                next_queued: 0,
                followers: 0,
            }),
            wake,
            commits: watch::channel(0).0,
            ctx,
            config,
        }
    }

    fn now(&self) -> (Duration, Micros) {
        (
            self.ctx.clock.elapsed(),
            wall_micros(self.ctx.clock.now_wall()),
        )
    }

    fn notify(&self) {
        self.wake.send_modify(|v| *v = v.wrapping_add(1));
    }

    fn notify_commit(&self) {
        self.commits.send_modify(|v| *v = v.wrapping_add(1));
    }

    /// Starts following commits for a listener: until the [`Follower`] is
    /// dropped the store logs the names written (see
    /// [`Store::changed_since`]), and [`Follower::changed`] wakes after each
    /// commit.
    pub fn follow(self: &Arc<Self>) -> Follower {
        let mut st = self.state.lock();
        st.followers += 1;
        if st.followers == 1 {
            let after = st.last_time;
            st.store.log_changes(Some(after));
        }
        Follower {
            engine: self.clone(),
            commits: self.commits.subscribe(),
        }
    }

    /// Begins a transaction.
    pub fn begin(
        &self,
        database: &str,
        options: Option<&TransactionOptions>,
    ) -> Result<TxnId, Status> {
        let (now, wall) = self.now();
        let mut st = self.state.lock();
        st.begin(database, options, now, wall)
    }

    /// Rolls back `id`, releasing its locks. An id that already ended is fine.
    pub fn rollback(&self, database: &str, id: &[u8]) -> Result<(), Status> {
        let (now, _) = self.now();
        let mut st = self.state.lock();
        match st.txns.get(id) {
            Some(t) if t.database == database => {
                st.txns.end(id, now);
                st.stats.rolled_back_transactions += 1;
                drop(st);
                self.notify();
                Ok(())
            }
            Some(_) => Err(Status::invalid_argument(EXPIRED_MESSAGE)),
            None if st.txns.is_retired(id) => Ok(()),
            None => Err(Status::invalid_argument(EXPIRED_MESSAGE)),
        }
    }

    /// Ends `id` after a failed commit the handler never saw (an injected
    /// error): its locks are released as a failed commit's would be.
    pub fn end_after_failure(&self, id: &[u8]) {
        let (now, _) = self.now();
        let mut st = self.state.lock();
        if st.txns.end(id, now) {
            st.stats.rolled_back_transactions += 1;
            drop(st);
            self.notify();
        }
    }

    /// Runs `f` over the store in the consistency asked for; in a read-write
    /// transaction, locks the names `f` returns. If `f` fails, a transaction
    /// this read began ends, and nothing is locked.
    ///
    /// A read in a read-write transaction queues behind any commit already
    /// waiting to write a document it returns, when that commit is older
    /// (see [`State::read_step`]), and then sees what the commit wrote.
    pub async fn read<T, F>(
        &self,
        database: &str,
        consistency: Consistency,
        f: F,
    ) -> Result<Snapshot<T>, Status>
    where
        F: Fn(&Store, ReadAt) -> Result<(T, Vec<String>), Status>,
    {
        let deadline = self
            .ctx
            .clock
            .elapsed()
            .saturating_add(self.config.lock_wait_timeout);
        let mut rx = self.wake.subscribe();
        let mut consistency = consistency;
        let mut begun = BegunByRead {
            engine: self,
            id: None,
        };
        let mut waited = false;
        loop {
            let (now, wall) = self.now();
            let step = {
                let mut st = self.state.lock();
                rx.borrow_and_update();
                st.read_step(
                    database,
                    &mut consistency,
                    &mut begun.id,
                    &f,
                    (now, wall, deadline),
                    &mut waited,
                )
            };
            if let Some(result) = step {
                // Handed to the caller (or already ended on failure).
                let new_transaction = begun.id.take();
                return match result {
                    Ok((value, read_time)) => Ok(Snapshot {
                        value,
                        read_time,
                        new_transaction,
                    }),
                    Err(e) => {
                        self.notify();
                        Err(e)
                    }
                };
            }
            let left = self.ctx.clock.real_duration(deadline.saturating_sub(now));
            let slice = left.clamp(Duration::from_millis(1), WAIT_SLICE);
            let _ = tokio::time::timeout(slice, rx.changed()).await;
        }
    }

    /// Commits `writes` atomically, in a transaction or not, waiting for
    /// locks as the locking rule says. Returns the response and each write's
    /// resulting document (`None` when deleted).
    pub async fn commit(
        &self,
        database: &str,
        mut batch: Vec<Write>,
        txn: Option<TxnId>,
    ) -> Result<Committed, Status> {
        let mut names = Vec::with_capacity(batch.len());
        for w in batch.iter_mut() {
            match writes::validate(w, database) {
                Ok(n) => names.push(n),
                Err(e) => {
                    if let Some(id) = &txn {
                        self.end_failed(database, id);
                    }
                    return Err(e);
                }
            }
        }
        let mut unique = names.clone();
        unique.sort_unstable();
        unique.dedup();
        let pending = Pending {
            database,
            writes: &batch,
            names: &names,
            unique: &unique,
            txn: txn.as_deref(),
            deadline: self
                .ctx
                .clock
                .elapsed()
                .saturating_add(self.config.lock_wait_timeout),
            backing_off: Cell::new(false),
            backed_off: Cell::new(false),
        };
        let mut rx = self.wake.subscribe();
        let mut waited = false;
        let mut queued = Queued {
            engine: self,
            names: &unique,
            key: None,
        };
        loop {
            let (now, wall) = self.now();
            let (outcome, released) = {
                let mut st = self.state.lock();
                rx.borrow_and_update();
                let (outcome, mut released) =
                    self.attempt(&mut st, &pending, now, wall, &mut waited);
                match (&outcome, queued.key) {
                    (Some(_), Some(key)) => {
                        st.unqueue(key, &unique);
                        queued.key = None;
                        released = true;
                    }
                    (None, None) => {
                        let age = match pending.txn.and_then(|id| st.txns.get(id)) {
                            Some(t) => t.priority,
                            None => st.txns.fresh_priority(),
                        };
                        queued.key = Some(st.queue(&unique, age));
                    }
                    _ => {}
                }
                (outcome, released)
            };
            if released {
                self.notify();
            }
            if let Some(outcome) = outcome {
                if outcome.is_ok() {
                    self.notify_commit();
                }
                return outcome;
            }
            if pending.backing_off.replace(false) {
                // Still queued meanwhile: later reads keep waiting behind it.
                tokio::time::sleep(self.config.released_write_backoff).await;
                pending.backed_off.set(true);
                continue;
            }
            let left = self
                .ctx
                .clock
                .real_duration(pending.deadline.saturating_sub(now));
            let slice = left.clamp(Duration::from_millis(1), WAIT_SLICE);
            let _ = tokio::time::timeout(slice, rx.changed()).await;
        }
    }

    /// One try of a commit under the state lock: the outcome (`None` means
    /// "wait and try again") and whether any lock was released.
    fn attempt(
        &self,
        st: &mut State,
        p: &Pending<'_>,
        now: Duration,
        wall: Micros,
        waited: &mut bool,
    ) -> (Option<Result<Committed, Status>>, bool) {
        let me = match p.txn {
            None => None,
            Some(id) => {
                let t = match st.txns.touch(id, p.database, now) {
                    Ok(t) => t,
                    Err(e) => {
                        if e == TxnError::Expired {
                            st.stats.expired_transactions += 1;
                        }
                        return (Some(Err(e.into())), true);
                    }
                };
                if matches!(t.mode, Mode::ReadOnly { .. }) && !p.writes.is_empty() {
                    st.txns.end(id, now);
                    st.stats.rolled_back_transactions += 1;
                    return (
                        Some(Err(Status::invalid_argument(
                            "Cannot modify entities in a read-only transaction.",
                        ))),
                        false,
                    );
                }
                Some((id, t.priority))
            }
        };
        let (clear, released) = st.clear_to_write(p.unique, me, now);
        if !clear {
            p.backed_off.set(false);
        } else if p.txn.is_none() && *waited && !p.backed_off.get() {
            // Firestore's contended plain write retries with backoff: it is
            // not answered before the transaction that held it.
            p.backing_off.set(true);
            return (None, released);
        }
        if clear {
            let result = st.apply(p.writes, p.names, wall, self.config.max_documents);
            if let Some(id) = p.txn {
                st.txns.end(id, now);
                if result.is_err() {
                    st.stats.rolled_back_transactions += 1;
                }
            }
            return (Some(result), released || p.txn.is_some());
        }
        let die = p.txn.is_some() && !self.config.younger_waits_for_older;
        if die || now >= p.deadline {
            if !die {
                st.stats.lock_timeouts += 1;
            }
            if let Some(id) = p.txn {
                st.txns.end(id, now);
                st.stats.aborted_transactions += 1;
            }
            return (
                Some(Err(Status::aborted(CONTENTION_MESSAGE))),
                released || p.txn.is_some(),
            );
        }
        if !*waited {
            *waited = true;
            st.stats.lock_waits += 1;
        }
        (None, released)
    }

    fn end_failed(&self, database: &str, id: &[u8]) {
        let (now, _) = self.now();
        let mut st = self.state.lock();
        if st.txns.get(id).is_some_and(|t| t.database == database) && st.txns.end(id, now) {
            st.stats.rolled_back_transactions += 1;
            drop(st);
            self.notify();
        }
    }

    /// Ends expired transactions and prunes old versions (the sweeper's tick).
    pub fn sweep(&self) {
        let (now, wall) = self.now();
        let mut st = self.state.lock();
        let expired = st.txns.expire(now);
        st.stats.expired_transactions += expired as u64;
        st.store.prune(wall);
        drop(st);
        if expired > 0 {
            self.notify();
        }
    }

    /// Totals and current sizes.
    pub fn stats(&self) -> FirestoreStats {
        let st = self.state.lock();
        FirestoreStats {
            active_transactions: st.txns.active(),
            locked_documents: st.txns.locked_documents(),
            documents: st.store.len(),
            by_collection: st.usage.snapshot(),
            ..st.stats.clone()
        }
    }

    /// What each collection group stores now (latest state, all
    /// databases): documents, their storage size, their estimated index
    /// entries. Walks every document: call it once, at the end of a run.
    pub fn storage(&self) -> BTreeMap<String, CollectionStorage> {
        let st = self.state.lock();
        let mut storage = BTreeMap::new();
        for doc in st.store.scan("", ReadAt::Latest) {
            add_stored(&mut storage, &doc.name, &doc.fields);
        }
        storage
    }

    /// The `n` most written documents, most written first.
    pub fn hottest(&self, n: usize) -> Vec<DocumentWrites> {
        let st = self.state.lock();
        let mut all: Vec<DocumentWrites> = st
            .doc_writes
            .iter()
            .map(|(name, writes)| DocumentWrites {
                name: name.clone(),
                writes: *writes,
            })
            .collect();
        all.sort_by(|a, b| b.writes.cmp(&a.writes).then_with(|| a.name.cmp(&b.name)));
        all.truncate(n);
        all
    }

    /// How many commits wrote `name`.
    pub fn document_writes(&self, name: &str) -> u64 {
        self.state.lock().doc_writes.get(name).copied().unwrap_or(0)
    }

    /// How many reads returned (or looked up) `name`.
    pub fn document_reads(&self, name: &str) -> u64 {
        self.state.lock().doc_reads.get(name).copied().unwrap_or(0)
    }

    /// Zeroes the totals and per-document counters.
    pub fn reset_stats(&self) {
        let mut st = self.state.lock();
        st.stats = FirestoreStats::default();
        st.doc_writes.clear();
        st.doc_reads.clear();
        st.usage.clear();
    }

    /// Deletes every document of `database` (`projects/p/databases/d`) and
    /// ends its transactions; returns how many documents were removed.
    pub fn reset_database(&self, database: &str) -> usize {
        let (now, wall) = self.now();
        let mut st = self.state.lock();
        let at = st.read_time(wall);
        let removed = st.store.clear_prefix(&format!("{database}/documents/"), at);
        st.txns.end_database(database, now);
        drop(st);
        self.notify();
        self.notify_commit();
        removed
    }

    /// Deletes every document of every database and ends every transaction.
    pub fn reset_all(&self) -> usize {
        let (now, wall) = self.now();
        let mut st = self.state.lock();
        let at = st.read_time(wall);
        let removed = st.store.clear_prefix("", at);
        st.txns.end_all(now);
        drop(st);
        self.notify();
        self.notify_commit();
        removed
    }

    /// The current state of document `name`, if it exists.
    pub fn document(&self, name: &str) -> Option<Arc<Document>> {
        self.state.lock().store.get(name, ReadAt::Latest)
    }
}
