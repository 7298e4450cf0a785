//! The aggregator's buffers against a `DashMap` buffer, on one workload: the
//! measurement that decided not to use `dashmap` in the service
//! (ARCHITECTURE.md, "Why no DashMap / crossbeam-channel").
//!
//! Invariant: both buffers get the same messages in the same order, take
//! batches of at most [`BATCH`] at the same points and hand out the same
//! [`Taken`] shape, so the figures differ only by the buffer. The DashMap
//! buffer is keyed by the aggregator's own route, the FxHash of (post, user),
//! not by an owned key (which would cost it an allocation per message), and
//! keeps neither the oldest-first order across memberships nor the busy-shard
//! exclusion the flusher relies on: it is the generous version.

use std::sync::atomic::{AtomicUsize, Ordering};

use dashmap::DashMap;
use hotcount::event::{LikeEvent, LikeKind, Version};
use hotcount::model::item::Item;
use hotcount::pipeline::aggregator::{route_hash, Aggregator, Pending, Taken};
use rand::{Rng, SeedableRng};
use rustc_hash::FxBuildHasher;
use tokio::sync::Notify;
use tokio::time::Instant;

/// Messages per pass (as many as `support`'s payloads, so that `instructions`
/// counts per event alike).
pub const EVENTS: usize = 10_000;
/// Messages per batch, as the service's default `max_batch_events`.
pub const BATCH: usize = 1000;
/// Buffers: the service's default `--shards`, and the DashMap's shard count.
pub const SHARDS: usize = 16;

/// Posts under the Zipf law.
const POSTS: usize = 10_000;
/// Zipf exponent of post popularity (the load generator's default).
const ZIPF_EXPONENT: f64 = 1.1;

/// The workload, deterministic (fixed seed): 30 % of the messages like one
/// viral post (users out of 1,000,000), the rest a post drawn by Zipf 1.1
/// over 10,000 posts (users out of 100,000); 5 % are redeliveries of an
/// earlier message, 5 % of the others are unlikes.
pub fn items() -> Vec<Item> {
    let cumulative = super::support::zipf_cumulative(POSTS, ZIPF_EXPONENT);
    let total = cumulative.last().copied().unwrap_or_default();
    let mut rng = rand::rngs::StdRng::seed_from_u64(42);
    let mut items: Vec<Item> = Vec::with_capacity(EVENTS);
    for i in 0..EVENTS {
        if !items.is_empty() && rng.random_bool(0.05) {
            let earlier = rng.random_range(0..items.len());
            items.push(items[earlier].clone());
            continue;
        }
        let (post, user) = if rng.random_bool(0.3) {
            ("viral".to_owned(), rng.random_range(0..1_000_000))
        } else {
            let u = rng.random_range(0.0..total);
            let rank = cumulative.partition_point(|c| *c <= u);
            (format!("post-{rank}"), rng.random_range(0..100_000))
        };
        let kind = if rng.random_bool(0.05) {
            LikeKind::Removed
        } else {
            LikeKind::Added
        };
        let version = Version {
            seq: (i % 5 + 1) as i64,
            occurred_at_micros: 1_796_000_000_000_000 + i as i64,
            event_id: format!("01J9Z8Q7ABCDEF{i:010}"),
        };
        let user = format!("user-{user}");
        let event = LikeEvent::new(kind, &post, &user, &version, Some("web-frontend"))
            .expect("the workload builds valid events");
        items.push(Item::Event(event));
    }
    items
}

/// `items` as messages (handle = position), split into `parts` contiguous
/// runs, one per producer thread.
pub fn pending(items: &[Item], parts: usize) -> Vec<Vec<Pending<u32>>> {
    let per = items.len().div_ceil(parts);
    items
        .chunks(per)
        .enumerate()
        .map(|(c, chunk)| {
            chunk
                .iter()
                .enumerate()
                .map(|(i, item)| Pending {
                    handle: (c * per + i) as u32,
                    item: item.clone(),
                    bytes: 200,
                    published: None,
                })
                .collect()
        })
        .collect()
}

/// What both buffers offer the workload.
pub trait Buffer: Sync {
    /// Buffers one message.
    fn add(&self, pending: Pending<u32>);
    /// Takes up to one batch; empty when nothing is buffered.
    fn take(&self) -> Taken<u32>;
}

impl Buffer for Aggregator<u32> {
    fn add(&self, pending: Pending<u32>) {
        Aggregator::add(self, pending);
    }

    /// As the flusher takes: merged over the shards, oldest first.
    fn take(&self) -> Taken<u32> {
        self.take_merged(&[], Instant::now()).0
    }
}

/// Messages buffered per membership route in a `DashMap`.
pub struct DashBuffer {
    map: DashMap<u64, Vec<Pending<u32>>, FxBuildHasher>,
    buffered: AtomicUsize,
    wake: Notify,
}

impl DashBuffer {
    /// An empty buffer over [`SHARDS`] DashMap shards.
    pub fn new() -> Self {
        Self {
            map: DashMap::with_hasher_and_shard_amount(FxBuildHasher, SHARDS),
            buffered: AtomicUsize::new(0),
            wake: Notify::new(),
        }
    }
}

impl Buffer for DashBuffer {
    /// Appends to the message's membership; wakes the flusher at every full
    /// batch buffered (fewer wake-ups than the aggregator: generous again).
    fn add(&self, pending: Pending<u32>) {
        let route = route_hash(&pending.item);
        self.map.entry(route).or_default().push(pending);
        let total = self.buffered.fetch_add(1, Ordering::Relaxed) + 1;
        if total.is_multiple_of(BATCH) {
            self.wake.notify_one();
        }
    }

    /// Empties memberships, in the map's order, until the batch is full.
    fn take(&self) -> Taken<u32> {
        let mut taken = Taken::default();
        self.map.retain(|&route, messages| {
            let room = BATCH - taken.len();
            let n = messages.len().min(room);
            for pending in messages.drain(..n) {
                taken.push(route, pending);
            }
            !messages.is_empty()
        });
        self.buffered.fetch_sub(taken.len(), Ordering::Relaxed);
        taken
    }
}

/// One producer's loop: every message into `buffer`, a batch taken after
/// each [`BATCH`] of its own messages (the flusher's work, done inline so
/// that two producers are two threads on two cores). Returns how many
/// messages its takes held.
fn produce(buffer: &impl Buffer, messages: Vec<Pending<u32>>) -> usize {
    let mut taken = 0;
    for (i, pending) in messages.into_iter().enumerate() {
        buffer.add(pending);
        if (i + 1) % BATCH == 0 {
            taken += std::hint::black_box(buffer.take()).len();
        }
    }
    taken
}

/// Every part on its own thread (one part: on the caller's), then whatever
/// is left taken; leaves `buffer` empty. Returns how many messages were
/// taken in all (each message once: as many as were given).
pub fn run(buffer: &impl Buffer, mut parts: Vec<Vec<Pending<u32>>>) -> usize {
    let mut taken = if parts.len() == 1 {
        produce(buffer, parts.remove(0))
    } else {
        std::thread::scope(|s| {
            let producers: Vec<_> = parts
                .into_iter()
                .map(|part| s.spawn(move || produce(buffer, part)))
                .collect();
            producers
                .into_iter()
                .map(|p| p.join().expect("a producer does not panic"))
                .sum()
        })
    };
    loop {
        let n = std::hint::black_box(buffer.take()).len();
        if n == 0 {
            return taken;
        }
        taken += n;
    }
}
