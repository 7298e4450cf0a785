//! The posts this process changed whose rollups wait for a refresh: marked
//! by the flusher once per committed batch (one entry per post, however
//! many events), taken by the refresher when due, cleared only by a
//! refresh that shows every change marked.
//!
//! Invariants: a mark is cleared only by [`Marks::settle`] with the
//! generation it was taken at, so a post marked again while its refresh
//! ran stays marked; a due record (the durable copy of a batch's marks in
//! the store) becomes ready to clear only once every post it lists has
//! settled done with a generation at or after the record's, i.e. a rollup
//! read after its commit is stored for each; the counter shard span table only grows (an
//! over-estimate reads a few more documents, an under-estimate is caught
//! by the rollup's own `shards`), its memory is fixed.

use std::time::Duration;

use parking_lot::Mutex;
use rustc_hash::FxHashMap;
use tokio::time::Instant;

use crate::event::fnv1a64;
use crate::store::rollup::{DueRecord, Micros};
use crate::store::ChangedCounter;

/// Slots of the shard span table (by post hash).
const SPAN_SLOTS: usize = 4096;

/// A post waiting for its rollup's refresh.
#[derive(Clone, Debug)]
struct Mark {
    /// A rollup as of this time or later shows every change marked;
    /// `None` until known (then the first read that began after the
    /// latest mark gives it).
    covered_at: Option<Micros>,
    /// Counter shard documents to read at least.
    shards: u32,
    /// When the post was first marked since its last refresh: the first
    /// change no rollup shows yet (its wait is the rollup lag).
    since: Instant,
    /// When the post was first marked after a refresh last took it
    /// (every settle follows a take): `since` once that refresh's rollup
    /// shows what it took.
    since_next: Option<Instant>,
    /// Not to be refreshed before.
    due: Instant,
    /// Bumped by every mark.
    generation: u64,
    /// Failed refreshes in a row (for the backoff).
    failures: u32,
    /// Whether a change is marked (else only `grow`).
    changed: bool,
    /// Counter shards the rollup must register (0: none asked).
    grow: u32,
    /// The due records waiting on this post: (the mark's generation when
    /// the record was attached, the record's id in [`State::records`]).
    records: Vec<(u64, u64)>,
}

impl Mark {
    /// Marked again (a change, or shards to register) at `now`.
    fn remark(&mut self, generation: u64, now: Instant) {
        self.generation = generation;
        self.since_next.get_or_insert(now);
    }
}

/// A due record this process holds: cleared in the store once no post it
/// lists waits.
#[derive(Debug)]
struct HeldRecord {
    record: DueRecord,
    /// Posts still waiting.
    waiting: u32,
}

/// A mark taken for a refresh.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Due {
    /// The post.
    pub post_id: String,
    /// See [`Mark::covered_at`].
    pub covered_at: Option<Micros>,
    /// Counter shard documents to read (the mark's, or more as the span
    /// table knows).
    pub shards: u32,
    /// The mark's generation when taken.
    pub generation: u64,
    /// Whether a change is marked; without one, the mark only asks the
    /// rollup to register `grow` counter shards.
    pub changed: bool,
    /// Counter shards the rollup must register (0: none asked).
    pub grow: u32,
}

/// How a refresh of one post ended, for [`Marks::settle`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Settled {
    /// The rollup shows every change marked (written now, or found so).
    Done,
    /// Read again at the next cycle (lost a race, or read too few shards:
    /// `shards` is how many the rollup says exist).
    Again {
        /// Counter shard documents to read next time, at least.
        shards: u32,
    },
    /// Read again over `shards` counter shards, this post only (it has no
    /// rollup to say how many it has; its neighbours' spans stay).
    Unregistered {
        /// Counter shard documents to read next time.
        shards: u32,
    },
    /// Not before `after` from now (a rollup younger than the interval).
    Later {
        /// How long to wait.
        after: Duration,
    },
    /// The store failed: again after a backoff.
    Failed,
}

/// What the marks hold.
#[derive(Default)]
struct State {
    marks: FxHashMap<String, Mark>,
    next_generation: u64,
    /// Per slot, the most counter shards seen on a post of that slot.
    spans: Vec<u32>,
    /// The due records held, by id.
    records: FxHashMap<u64, HeldRecord>,
    next_record: u64,
    /// Records no post waits on any more: to clear in the store.
    ready: Vec<DueRecord>,
}

/// The marked posts of one process; shared by the flusher and the refresher.
pub struct Marks {
    state: Mutex<State>,
    /// Counter shard documents a post may have when nothing better is
    /// known (`--counter-shards`).
    max_shards: u32,
    /// Longest backoff after failures.
    max_backoff: Duration,
}

impl Marks {
    /// Empty marks; a post whose shard is unknown is read with `max_shards`
    /// counter shards.
    pub fn new(max_shards: u32, max_backoff: Duration) -> Self {
        Self {
            state: Mutex::new(State {
                spans: vec![1; SPAN_SLOTS],
                ..State::default()
            }),
            max_shards: max_shards.max(1),
            max_backoff,
        }
    }

    /// Marks the posts of a committed batch (due at once); `committed_at`
    /// is the commit's store time when known; `record` is the batch's due
    /// record, held until every post of it is refreshed. A post whose
    /// counter shard is unknown is read over `unknown_shards` documents.
    pub fn mark(
        &self,
        changed: &[ChangedCounter],
        committed_at: Option<Micros>,
        record: Option<DueRecord>,
        now: Instant,
    ) {
        let mut state = self.state.lock();
        let id = record.map(|record| {
            state.next_record += 1;
            let id = state.next_record;
            state.records.insert(id, HeldRecord { record, waiting: 0 });
            id
        });
        for change in changed {
            let shards = change
                .shard
                .map_or(self.max_shards, |k| k.saturating_add(1));
            state.add(&change.post_id, committed_at, shards, now);
            if let Some(id) = id {
                state.attach(&change.post_id, id);
            }
        }
        if let Some(id) = id {
            state.release_if_done(id);
        }
    }

    /// The due records no post waits on any more (taken: the caller clears
    /// them in the store, or gives them back with [`Self::unclear`]).
    pub fn take_ready(&self) -> Vec<DueRecord> {
        std::mem::take(&mut self.state.lock().ready)
    }

    /// Gives back records whose clearing failed: cleared again later.
    pub fn unclear(&self, records: Vec<DueRecord>) {
        self.state.lock().ready.extend(records);
    }

    /// Due records held (waiting on posts, or ready to clear).
    pub fn records_held(&self) -> usize {
        let state = self.state.lock();
        state.records.len() + state.ready.len()
    }

    /// Marks `post` as changed at `changed_at` (store time, when known)
    /// with at least `shards` counter shards, due at once (the sweep's
    /// finds).
    pub fn mark_post(&self, post: &str, changed_at: Option<Micros>, shards: u32, now: Instant) {
        self.state.lock().add(post, changed_at, shards.max(1), now);
    }

    /// Asks that `post`'s rollup register `shards` counter shards (due at
    /// once unless already marked).
    pub fn want_shards(&self, post: &str, shards: u32, now: Instant) {
        let mut state = self.state.lock();
        state.next_generation += 1;
        let generation = state.next_generation;
        match state.marks.get_mut(post) {
            Some(mark) => {
                mark.grow = mark.grow.max(shards);
                mark.remark(generation, now);
            }
            None => {
                let mark = Mark {
                    covered_at: None,
                    shards: 1,
                    since: now,
                    since_next: None,
                    due: now,
                    generation,
                    failures: 0,
                    changed: false,
                    grow: shards,
                    records: Vec::new(),
                };
                state.marks.insert(post.to_string(), mark);
            }
        }
    }

    /// Posts marked now.
    pub fn len(&self) -> usize {
        self.state.lock().marks.len()
    }

    /// Whether no post is marked.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The marks due at `now` (all of them with `all`), at most `limit`,
    /// the longest waiting first.
    pub fn take_due(&self, now: Instant, all: bool, limit: usize) -> Vec<Due> {
        let mut state = self.state.lock();
        let mut due: Vec<(&String, &Mark)> = state
            .marks
            .iter()
            .filter(|(_, m)| all || m.due <= now)
            .collect();
        due.sort_unstable_by_key(|(_, m)| m.since);
        due.truncate(limit);
        let due: Vec<Due> = due
            .into_iter()
            .map(|(post, mark)| Due {
                post_id: post.clone(),
                covered_at: mark.covered_at,
                shards: mark.shards.max(state.span(post)),
                generation: mark.generation,
                changed: mark.changed,
                grow: mark.grow,
            })
            .collect();
        for d in &due {
            if let Some(mark) = state.marks.get_mut(&d.post_id) {
                mark.since_next = None;
            }
        }
        due
    }

    /// The earliest time a mark is due, if any is marked.
    pub fn next_due(&self) -> Option<Instant> {
        self.state.lock().marks.values().map(|m| m.due).min()
    }

    /// Ends one refresh of `due`: `read_time` is the store time of the read
    /// it was decided on (a read that began after every change `due`
    /// covers). When the refresh's rollup shows what it took (done),
    /// returns how long the first change it shows waited for it: for a
    /// post marked again meanwhile too, whose next wait then counts from
    /// its first change after the take.
    pub fn settle(
        &self,
        due: &Due,
        read_time: Option<Micros>,
        settled: Settled,
        now: Instant,
    ) -> Option<Duration> {
        let mut state = self.state.lock();
        let lost_shards = match settled {
            Settled::Again { shards } => shards,
            _ => 0,
        };
        state.widen(&due.post_id, lost_shards.max(due.shards));
        let max_backoff = self.max_backoff;
        let mark = state.marks.get_mut(&due.post_id)?;
        let current = mark.generation == due.generation;
        let since_next = mark.since_next.take();
        if current && mark.covered_at.is_none() {
            mark.covered_at = read_time;
        }
        mark.shards = mark.shards.max(lost_shards);
        if let Settled::Unregistered { shards } = settled {
            mark.shards = mark.shards.max(shards);
        }
        match settled {
            Settled::Done if current => {
                let waited = now.saturating_duration_since(mark.since);
                if let Some(mark) = state.marks.remove(&due.post_id) {
                    for (_, id) in mark.records {
                        state.unwait(id);
                    }
                }
                return Some(waited);
            }
            Settled::Done => {
                mark.failures = 0;
                // The rollup shows every change the refresh took: their
                // wait ends; the first change after them waits on.
                let waited = now.saturating_duration_since(mark.since);
                mark.since = since_next.unwrap_or(now);
                // The records attached by the generation refreshed are done.
                let (done, waiting): (Vec<_>, Vec<_>) = std::mem::take(&mut mark.records)
                    .into_iter()
                    .partition(|&(generation, _)| generation <= due.generation);
                mark.records = waiting;
                for (_, id) in done {
                    state.unwait(id);
                }
                return Some(waited);
            }
            Settled::Later { after } => {
                mark.failures = 0;
                mark.due = now + after;
            }
            Settled::Failed => {
                mark.failures = mark.failures.saturating_add(1);
                let backoff = Duration::from_millis(50)
                    .saturating_mul(1 << mark.failures.min(16))
                    .min(max_backoff);
                mark.due = now + backoff;
            }
            Settled::Again { .. } | Settled::Unregistered { .. } => {}
        }
        None
    }
}

impl State {
    /// Attaches record `id` to `post`'s mark (just added).
    fn attach(&mut self, post: &str, id: u64) {
        let Some(mark) = self.marks.get_mut(post) else {
            return;
        };
        mark.records.push((mark.generation, id));
        if let Some(held) = self.records.get_mut(&id) {
            held.waiting += 1;
        }
    }

    /// One post of record `id` no longer waits.
    fn unwait(&mut self, id: u64) {
        if let Some(held) = self.records.get_mut(&id) {
            held.waiting = held.waiting.saturating_sub(1);
        }
        self.release_if_done(id);
    }

    /// Moves record `id` to the ready list once no post waits on it.
    fn release_if_done(&mut self, id: u64) {
        if self.records.get(&id).is_some_and(|h| h.waiting == 0) {
            if let Some(held) = self.records.remove(&id) {
                self.ready.push(held.record);
            }
        }
    }

    fn add(&mut self, post: &str, changed_at: Option<Micros>, shards: u32, now: Instant) {
        self.next_generation += 1;
        let generation = self.next_generation;
        self.widen(post, shards);
        match self.marks.get_mut(post) {
            // Its due time stays: a refresh deferred because another
            // replica's rollup is younger than the interval, or backing off
            // a failing store, is not hurried by more changes.
            Some(mark) => {
                mark.covered_at = if mark.changed {
                    mark.covered_at.zip(changed_at).map(|(a, b)| a.max(b))
                } else {
                    changed_at
                };
                mark.shards = mark.shards.max(shards);
                mark.remark(generation, now);
                mark.changed = true;
            }
            None => {
                let mark = Mark {
                    covered_at: changed_at,
                    shards,
                    since: now,
                    since_next: None,
                    due: now,
                    generation,
                    failures: 0,
                    changed: true,
                    grow: 0,
                    records: Vec::new(),
                };
                self.marks.insert(post.to_string(), mark);
            }
        }
    }

    fn slot(post: &str) -> usize {
        (fnv1a64(post.as_bytes(), b"rollup-spans") % SPAN_SLOTS as u64) as usize
    }

    fn span(&self, post: &str) -> u32 {
        self.spans[Self::slot(post)]
    }

    fn widen(&mut self, post: &str, shards: u32) {
        let span = &mut self.spans[Self::slot(post)];
        *span = (*span).max(shards);
    }
}
