//! Sharded in-memory buffers of received messages, keyed by membership
//! (post, user).
//!
//! Invariants: every message added is taken exactly once, together with its
//! ack handle (the handle never leaves except inside a [`Taken`]); all events
//! of one (post, user) land in the same shard, so batches built from
//! different shards touch disjoint membership documents; a merged take
//! ([`Aggregator::take_merged`]) never takes from a shard the caller marks
//! busy, and [`Aggregator::take_merged_around`] takes from such a shard
//! only the messages whose membership hash the caller does not hold in
//! flight, in order, leaving the rest in order. One post's events spread
//! over every shard, so a viral post can be in several batches in flight
//! at once (their counter increments go to distinct counter shards:
//! [`crate::store::counter_shards`]). Pure and synchronous: no I/O, no
//! awaiting (a [`Notify`] only wakes the flusher).

use std::collections::VecDeque;
use std::hash::Hasher;

use parking_lot::Mutex;
use tokio::sync::Notify;
use tokio::time::Instant;

use crate::event::LikeEvent;
use crate::model::batch::{MessageIndex, Tagged};
use crate::model::item::Item;
use crate::model::poison::PoisonRecord;

/// One received message waiting for its batch.
#[derive(Debug)]
pub struct Pending<H> {
    /// The ack handle of the message.
    pub handle: H,
    /// The parsed content.
    pub item: Item,
    /// Payload size, for accounting.
    pub bytes: usize,
    /// When Pub/Sub accepted the message, if known (for publish-to-commit latency).
    pub published: Option<std::time::SystemTime>,
}

/// What one [`Aggregator::take`] hands to the flusher.
#[derive(Debug)]
pub struct Taken<H> {
    /// Valid events, each tagged with the index of its handle in `handles`.
    pub events: Vec<Tagged<LikeEvent>>,
    /// Poison records, each tagged with the index of its handle in `handles`.
    pub poison: Vec<Tagged<PoisonRecord>>,
    /// Ack handles of every message taken, events and poison alike.
    pub handles: Vec<H>,
    /// Payload bytes taken.
    pub bytes: usize,
    /// Publish times of the messages taken, where known.
    pub published: Vec<std::time::SystemTime>,
    /// The membership hash ([`route_hash`]) of each message taken: what
    /// the flusher marks in flight.
    pub routes: Vec<u64>,
}

impl<H> Taken<H> {
    /// Adds one message and its [`route_hash`]: its handle gets the next
    /// index, and its event or poison record is tagged with that index.
    pub fn push(&mut self, route: u64, pending: Pending<H>) {
        self.routes.push(route);
        self.bytes += pending.bytes;
        self.published.extend(pending.published);
        // At most max_batch_events handles: far below 2^32.
        let message = self.handles.len() as MessageIndex;
        self.handles.push(pending.handle);
        match pending.item {
            Item::Event(item) => self.events.push(Tagged { item, message }),
            Item::Poison(p) => self.poison.push(Tagged { item: *p, message }),
        }
    }
}

impl<H> Default for Taken<H> {
    fn default() -> Self {
        Self {
            events: Vec::new(),
            poison: Vec::new(),
            handles: Vec::new(),
            bytes: 0,
            published: Vec::new(),
            routes: Vec::new(),
        }
    }
}

impl<H> Taken<H> {
    /// Number of messages taken.
    pub fn len(&self) -> usize {
        self.handles.len()
    }

    /// Whether nothing was taken.
    pub fn is_empty(&self) -> bool {
        self.handles.is_empty()
    }
}

struct Buffer<H> {
    /// Oldest first, each with its [`route_hash`]; a take drains the front
    /// without moving what stays.
    items: VecDeque<(u64, Pending<H>)>,
    bytes: usize,
    oldest: Option<Instant>,
}

impl<H> Buffer<H> {
    /// Accounts for `items` just taken out: their bytes leave the total,
    /// and what stays ages from `now` (nothing stays: no age).
    fn gave<'a>(&mut self, items: impl IntoIterator<Item = &'a (u64, Pending<H>)>, now: Instant)
    where
        H: 'a,
    {
        self.bytes -= items.into_iter().map(|(_, p)| p.bytes).sum::<usize>();
        self.oldest = if self.items.is_empty() {
            None
        } else {
            Some(now)
        };
    }
}

struct Shard<H> {
    buffer: Mutex<Buffer<H>>,
}

/// What the shards not in flight hold, for the flush decision.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct FreeView {
    /// Messages buffered in shards not marked busy.
    pub messages: usize,
    /// Arrival of the oldest of them.
    pub oldest: Option<Instant>,
    /// Whether they make at least one full batch (`max_batch_events`).
    pub full: bool,
    /// Messages in a full batch (`max_batch_events`).
    pub batch_events: usize,
    /// Shards not marked busy that hold a message (the most batches a
    /// flush can take at once from free shards: a take empties one whole).
    pub shards: usize,
    /// Messages in shards marked busy: taken only by
    /// [`Aggregator::take_merged_around`]'s second pass, where their
    /// membership is in no batch in flight.
    pub held: usize,
    /// Arrival of the oldest of them.
    pub held_oldest: Option<Instant>,
    /// Shards marked busy that hold a message.
    pub held_shards: usize,
}

impl FreeView {
    /// The view with the messages of busy shards counted as free: what the
    /// flush rule weighs when a take may also reach them
    /// ([`Aggregator::take_merged_around`]; some may stay, held back by a
    /// membership in flight).
    pub fn around_busy(self) -> Self {
        let messages = self.messages + self.held;
        Self {
            messages,
            oldest: earliest(self.oldest, self.held_oldest),
            full: messages >= self.batch_events,
            batch_events: self.batch_events,
            shards: self.shards + self.held_shards,
            held: 0,
            held_oldest: None,
            held_shards: 0,
        }
    }
}

/// The earlier of two arrival times, either possibly unknown.
fn earliest(a: Option<Instant>, b: Option<Instant>) -> Option<Instant> {
    match (a, b) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    }
}

/// How messages are spread over shards.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Routing {
    /// By membership (post, user): one membership, one shard (the batched
    /// design); one post spreads over all shards.
    ByMembership,
    /// Round robin by message, whatever the post: the per-event baseline,
    /// where concurrent transactions on one hot post contend as in a naive
    /// consumer. Breaks the "no contention inside one process" invariant on
    /// purpose; used only to be measured against.
    PerMessage,
}

/// The sharded buffers.
pub struct Aggregator<H> {
    shards: Box<[Shard<H>]>,
    wake: Notify,
    buffered: std::sync::atomic::AtomicUsize,
    /// Wake the flusher once this many messages are buffered (`usize::MAX`:
    /// not waiting for a count); see [`Aggregator::wake_when_buffered`].
    wake_at: std::sync::atomic::AtomicUsize,
    max_batch_events: usize,
    routing: Routing,
    next: std::sync::atomic::AtomicUsize,
}

impl<H> Aggregator<H> {
    /// `shards` buffers (at least 1); a batch takes at most `max_batch_events` messages.
    pub fn new(shards: usize, max_batch_events: usize) -> Self {
        let shards = (0..shards.max(1))
            .map(|_| Shard {
                buffer: Mutex::new(Buffer {
                    items: VecDeque::new(),
                    bytes: 0,
                    oldest: None,
                }),
            })
            .collect();
        Self {
            shards,
            wake: Notify::new(),
            buffered: std::sync::atomic::AtomicUsize::new(0),
            wake_at: std::sync::atomic::AtomicUsize::new(usize::MAX),
            max_batch_events: max_batch_events.max(1),
            routing: Routing::ByMembership,
            next: std::sync::atomic::AtomicUsize::new(0),
        }
    }

    /// `shards` buffers of one message each, routed round robin: the
    /// per-event baseline (one transaction per event, `shards` in flight).
    pub fn per_message(shards: usize) -> Self {
        Self {
            routing: Routing::PerMessage,
            ..Self::new(shards, 1)
        }
    }

    /// Whether a take may reach into busy shards for the memberships in no
    /// batch in flight (routing by membership: not the per-event baseline).
    pub fn takes_around_busy(&self) -> bool {
        self.routing == Routing::ByMembership
    }

    /// Number of shards.
    pub fn shard_count(&self) -> usize {
        self.shards.len()
    }

    /// The shard of `item`: by (post, user) for events, by message id for
    /// poison (round robin for [`Routing::PerMessage`]).
    pub fn shard_of(&self, item: &Item) -> usize {
        if self.routing == Routing::PerMessage {
            let n = self.next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            return n % self.shards.len();
        }
        self.shard_for(route_hash(item))
    }

    /// The shard of a message routed by membership, from its [`route_hash`].
    fn shard_for(&self, route: u64) -> usize {
        (route % self.shards.len() as u64) as usize
    }

    /// Buffers one message; wakes the flusher when the shard's buffer was
    /// empty (a flush deadline starts), when the shard reaches a full batch,
    /// or when all shards together reach another full batch. Returns the shard.
    pub fn add(&self, pending: Pending<H>) -> usize {
        self.add_with(pending, Instant::now)
    }

    /// [`Aggregator::add`] with an explicit arrival time.
    pub fn add_at(&self, pending: Pending<H>, now: Instant) -> usize {
        self.add_with(pending, || now)
    }

    /// Adds `pending`; `now` is read only when the shard was empty (the
    /// arrival time of its oldest message), not once per message.
    fn add_with(&self, pending: Pending<H>, now: impl FnOnce() -> Instant) -> usize {
        let route = route_hash(&pending.item);
        let index = match self.routing {
            Routing::PerMessage => self.shard_of(&pending.item),
            Routing::ByMembership => self.shard_for(route),
        };
        let shard = &self.shards[index];
        let wake = {
            let mut buffer = shard.buffer.lock();
            let was_empty = buffer.items.is_empty();
            buffer.bytes += pending.bytes;
            buffer.items.push_back((route, pending));
            if was_empty {
                buffer.oldest = Some(now());
            }
            was_empty || buffer.items.len() == self.max_batch_events
        };
        let total = self
            .buffered
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed)
            + 1;
        // The count the flusher waits for: woken once (whoever crosses it
        // first takes it back).
        let counted = total >= self.wake_at.load(std::sync::atomic::Ordering::Relaxed)
            && self
                .wake_at
                .swap(usize::MAX, std::sync::atomic::Ordering::Relaxed)
                != usize::MAX;
        if wake || counted || total.is_multiple_of(self.max_batch_events) {
            self.wake.notify_one();
        }
        index
    }

    /// Takes up to one batch of messages from `shard`, oldest first.
    pub fn take(&self, shard: usize) -> Taken<H> {
        let mut taken = Taken::default();
        self.take_into(shard, self.max_batch_events, Instant::now(), &mut taken);
        taken
    }

    /// What the shards not marked in `busy` hold (`busy[i]` = shard `i` has
    /// a batch in flight; missing entries count as free).
    pub fn free_view(&self, busy: &[bool]) -> FreeView {
        let mut view = FreeView::default();
        for (i, shard) in self.shards.iter().enumerate() {
            let buffer = shard.buffer.lock();
            if busy.get(i).copied().unwrap_or(false) {
                view.held += buffer.items.len();
                view.held_shards += usize::from(!buffer.items.is_empty());
                view.held_oldest = earliest(view.held_oldest, buffer.oldest);
                continue;
            }
            view.messages += buffer.items.len();
            view.shards += usize::from(!buffer.items.is_empty());
            view.oldest = earliest(view.oldest, buffer.oldest);
        }
        view.full = view.messages >= self.max_batch_events;
        view.batch_events = self.max_batch_events;
        view
    }

    /// Takes one batch (at most `max_batch_events` messages) from the shards
    /// not marked in `busy`, the shard with the oldest message first.
    /// Returns it with the shards it took from, which the caller must treat
    /// as busy until the batch is committed: a membership is then never in
    /// two batches at once.
    pub fn take_merged(&self, busy: &[bool], now: Instant) -> (Taken<H>, Vec<usize>) {
        self.take_merged_up_to(busy, now, self.max_batch_events)
    }

    /// As [`Self::take_merged`], but stops taking further shards once the
    /// batch holds `target` messages (it may hold more: a shard is taken
    /// whole, up to `max_batch_events`); a flush taking several batches at
    /// once gives each its share.
    pub fn take_merged_up_to(
        &self,
        busy: &[bool],
        now: Instant,
        target: usize,
    ) -> (Taken<H>, Vec<usize>) {
        self.take_merged_around(
            busy,
            None::<fn() -> rustc_hash::FxHashSet<u64>>,
            now,
            target,
        )
    }

    /// As [`Self::take_merged_up_to`], then, short of `target`, from the
    /// shards marked busy too: there only the messages whose membership
    /// hash is not in the set `in_flight` gives (no batch in flight holds
    /// their membership), in order, the rest staying where they were. The
    /// set is asked for only then (not under a backlog, where free shards
    /// fill every batch). So a membership is still never in two batches in
    /// flight, but a shard is not held back whole by the one batch that
    /// took from it. Off for [`Routing::PerMessage`] (the baseline: by
    /// shard only).
    pub fn take_merged_around(
        &self,
        busy: &[bool],
        in_flight: Option<impl FnOnce() -> rustc_hash::FxHashSet<u64>>,
        now: Instant,
        target: usize,
    ) -> (Taken<H>, Vec<usize>) {
        let mut candidates: Vec<(Instant, usize)> = self
            .shards
            .iter()
            .enumerate()
            .filter(|(i, _)| !busy.get(*i).copied().unwrap_or(false))
            .filter_map(|(i, shard)| shard.buffer.lock().oldest.map(|t| (t, i)))
            .collect();
        candidates.sort_unstable();
        let mut taken = Taken::default();
        let mut used = Vec::new();
        for (_, shard) in candidates {
            let room = self.max_batch_events - taken.len();
            if room == 0 || taken.len() >= target.max(1) {
                break;
            }
            if self.take_into(shard, room, now, &mut taken) > 0 {
                used.push(shard);
            }
        }
        let short = taken.len() < target.max(1) && taken.len() < self.max_batch_events;
        let in_flight = in_flight.filter(|_| short && self.takes_around_busy());
        if let Some(in_flight) = in_flight {
            let in_flight = in_flight();
            for (i, shard) in self.shards.iter().enumerate() {
                let room = self.max_batch_events - taken.len();
                if room == 0 || taken.len() >= target.max(1) {
                    break;
                }
                if !busy.get(i).copied().unwrap_or(false) {
                    continue;
                }
                if self.take_free_of(shard, room, &in_flight, now, &mut taken) > 0 {
                    used.push(i);
                }
            }
        }
        (taken, used)
    }

    /// Moves up to `limit` messages of `shard` whose membership hash is
    /// not in `in_flight` into `taken`, oldest first, keeping the order of
    /// the rest; what stays has its age origin at `now` (as
    /// [`Self::take_into`]). Returns how many.
    fn take_free_of(
        &self,
        shard: &Shard<H>,
        limit: usize,
        in_flight: &rustc_hash::FxHashSet<u64>,
        now: Instant,
        taken: &mut Taken<H>,
    ) -> usize {
        let moved = {
            let mut buffer = shard.buffer.lock();
            if buffer
                .items
                .iter()
                .all(|(route, _)| in_flight.contains(route))
            {
                return 0;
            }
            let mut moved = Vec::new();
            let mut kept = VecDeque::with_capacity(buffer.items.len());
            for (route, pending) in buffer.items.drain(..) {
                if moved.len() < limit && !in_flight.contains(&route) {
                    moved.push((route, pending));
                } else {
                    kept.push_back((route, pending));
                }
            }
            buffer.items = kept;
            buffer.gave(&moved, now);
            moved
        };
        self.hand_over(moved, taken)
    }

    /// Moves up to `limit` messages of `shard` into `taken`, oldest first;
    /// `now` becomes the age origin of what stays behind. Returns how many.
    fn take_into(&self, shard: usize, limit: usize, now: Instant, taken: &mut Taken<H>) -> usize {
        let Some(shard) = self.shards.get(shard) else {
            return 0;
        };
        let items = {
            let mut buffer = shard.buffer.lock();
            let n = buffer.items.len().min(limit);
            let taken: VecDeque<(u64, Pending<H>)> = if n == buffer.items.len() {
                // The next batch is likely as large: room for it up front
                // instead of growing (and copying) the buffer step by step.
                std::mem::replace(&mut buffer.items, VecDeque::with_capacity(n))
            } else {
                buffer.items.drain(..n).collect()
            };
            buffer.gave(&taken, now);
            taken
        };
        self.hand_over(items, taken)
    }

    /// Adds `items`, just taken out of a shard, to `taken` and to the
    /// count of messages no longer buffered. Returns how many.
    fn hand_over(
        &self,
        items: impl IntoIterator<Item = (u64, Pending<H>), IntoIter: ExactSizeIterator>,
        taken: &mut Taken<H>,
    ) -> usize {
        let items = items.into_iter();
        let n = items.len();
        self.buffered
            .fetch_sub(n, std::sync::atomic::Ordering::Relaxed);
        taken.handles.reserve(n);
        taken.events.reserve(n);
        taken.routes.reserve(n);
        for (route, pending) in items {
            taken.push(route, pending);
        }
        n
    }

    /// Messages buffered in `shard`.
    pub fn len(&self, shard: usize) -> usize {
        self.shards
            .get(shard)
            .map_or(0, |s| s.buffer.lock().items.len())
    }

    /// Messages buffered in all shards, as counted on the way in and out
    /// (one atomic read, not a lock per shard).
    pub fn buffered(&self) -> usize {
        self.buffered.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// Wakes the flusher once [`Aggregator::buffered`] reaches `count`
    /// (`None`: forget any count asked for before). A shard turning
    /// non-empty wakes it anyway; this is for a flush rule that waits for
    /// a number of messages arriving into shards that already hold some.
    pub fn wake_when_buffered(&self, count: Option<usize>) {
        self.wake_at.store(
            count.unwrap_or(usize::MAX),
            std::sync::atomic::Ordering::Relaxed,
        );
    }

    /// Messages buffered in all shards.
    pub fn total_len(&self) -> usize {
        (0..self.shards.len()).map(|i| self.len(i)).sum()
    }

    /// Payload bytes buffered in all shards.
    pub fn total_bytes(&self) -> usize {
        self.shards.iter().map(|s| s.buffer.lock().bytes).sum()
    }

    /// Waits until [`Aggregator::add`] (or [`Aggregator::wake`]) signals
    /// that a flush may be due.
    pub async fn woken(&self) {
        self.wake.notified().await;
    }

    /// Wakes the flusher (used at shutdown).
    pub fn wake(&self) {
        self.wake.notify_one();
    }
}

/// The hash a message is routed by, before the modulo: FxHash of the post,
/// a separator, the user (the message id for poison). FxHash goes a word at
/// a time; routing is in-process only, so the hash need not be stable
/// across builds. It runs once per message.
pub fn route_hash(item: &Item) -> u64 {
    let mut hasher = rustc_hash::FxHasher::default();
    match item {
        Item::Event(e) => {
            // The separator keeps ("ab", "c") and ("a", "bc") apart.
            hasher.write(e.post_id().as_bytes());
            hasher.write_u8(0xff);
            hasher.write(e.user_id().as_bytes());
        }
        Item::Poison(p) => {
            hasher.write(p.message_id.as_bytes());
            hasher.write_u8(0xff);
        }
    }
    hasher.finish()
}

#[cfg(test)]
mod tests;
