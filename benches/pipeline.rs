//! CPU cost of the in-process pipeline, each measured side by side with a
//! naive baseline in the same group (ratios are what to read; the machine is
//! shared and noisy):
//! - decode + validate + aggregate, vs a `Mutex<HashMap<String, Vec<_>>>` aggregator;
//! - batch building (group, apply rules, Firestore writes) for 1..=2000 events;
//! - contention: every thread adding likes of one hot post;
//! - the aggregator's buffers vs a `DashMap` buffer, one and two producer
//!   threads, on a Zipf + viral + duplicates workload (`buffers`);
//! - reading stored memberships back from BatchGetDocuments responses in
//!   place, vs gcloud-sdk decoding each into a `Document`;
//! - the rollup refresher's BatchWrite of 500 rollups encoded in place, vs
//!   each write built of gcloud-sdk's messages and encoded by prost;
//! - the known memberships' per-key work (recall, plan, see, learn) on
//!   the backlog bench's concentrated shape and on a viral one, vs the
//!   write floor's per-event work on its trusted map of states.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use criterion::{criterion_group, criterion_main, BatchSize, BenchmarkId, Criterion, Throughput};
use hotcount::event::{self, LikeEvent};
use hotcount::model::item::Item;
use hotcount::pipeline::aggregator::{Aggregator, Pending};
use hotcount::store::firestore::known::KnownMemberships;

/// The allocator of the `hotcount` binary, so that allocation costs what it
/// costs in the service (every group, baselines included, uses it).
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

mod buffers;
mod support;
use support::{parse_via_value_map, payloads, NaiveMap, PAYLOADS};

fn decode_validate_aggregate(c: &mut Criterion) {
    let payloads = payloads();
    let mut group = c.benchmark_group("decode_validate_aggregate");
    group.throughput(Throughput::Elements(PAYLOADS as u64));
    group.bench_function("parse_only", |b| b.iter(|| support::parse_only(&payloads)));
    group.bench_function("parse_general", |b| {
        b.iter(|| {
            for p in &payloads {
                std::hint::black_box(event::parse_general(p).is_ok());
            }
        })
    });
    group.bench_function("parse_only_value_map_baseline", |b| {
        b.iter(|| {
            for p in &payloads {
                std::hint::black_box(parse_via_value_map(p).is_some());
            }
        })
    });
    // As the service runs it: the flusher takes a batch (merged over the
    // shards, oldest first) whenever a full one is buffered.
    group.bench_function("hotcount_sharded", |b| {
        let agg: Aggregator<u32> = Aggregator::new(16, support::BATCH);
        b.iter(|| support::hotcount_sharded(&agg, &payloads))
    });
    group.bench_function("naive_mutex_hashmap", |b| {
        let map: NaiveMap = Mutex::new(HashMap::new());
        b.iter(|| support::naive_mutex_hashmap(&map, &payloads))
    });
    group.bench_function("parse_into_naive_mutex_hashmap", |b| {
        let map: NaiveMap = Mutex::new(HashMap::new());
        b.iter(|| support::parse_into_naive_mutex_hashmap(&map, &payloads))
    });
    group.finish();
}

fn batch_building(c: &mut Criterion) {
    let events = support::events();
    let config = support::store_config();
    let mut group = c.benchmark_group("batch_build");
    for size in [1usize, 10, 100, 500, 1000, 2000] {
        let slice = events[..size].to_vec();
        group.throughput(Throughput::Elements(size as u64));
        group.bench_with_input(BenchmarkId::from_parameter(size), &slice, |b, slice| {
            b.iter(|| support::build_batch(&config, slice))
        });
    }
    group.finish();
}

fn hot_post_contention(c: &mut Criterion) {
    const THREADS: usize = 2;
    const PER_THREAD: usize = 20_000;
    let events: Vec<LikeEvent> = (0..PER_THREAD)
        .map(|i| {
            event::parse(
                format!(
                    r#"{{"eventId":"e{i}","type":"like.added","postId":"viral","userId":"u{i}","occurredAt":"2026-11-30T12:00:00Z"}}"#
                )
                .as_bytes(),
            )
            .expect("valid")
        })
        .collect();
    let events = Arc::new(events);
    let mut group = c.benchmark_group("hot_post_contention");
    group.throughput(Throughput::Elements((THREADS * PER_THREAD) as u64));
    group.bench_function("hotcount_sharded", |b| {
        let agg: Arc<Aggregator<u32>> = Arc::new(Aggregator::new(16, usize::MAX));
        b.iter(|| {
            std::thread::scope(|s| {
                for _ in 0..THREADS {
                    let (agg, events) = (agg.clone(), events.clone());
                    s.spawn(move || {
                        for (i, e) in events.iter().enumerate() {
                            agg.add(Pending {
                                handle: i as u32,
                                item: Item::Event(e.clone()),
                                bytes: 1,
                                published: None,
                            });
                        }
                    });
                }
            });
            for s in 0..16 {
                while !agg.take(s).is_empty() {}
            }
        })
    });
    group.bench_function("naive_mutex_hashmap", |b| {
        let map: Arc<NaiveMap> = Arc::default();
        b.iter(|| {
            std::thread::scope(|s| {
                for _ in 0..THREADS {
                    let (map, events) = (map.clone(), events.clone());
                    s.spawn(move || {
                        for (i, e) in events.iter().enumerate() {
                            let mut m = map.lock().expect("not poisoned");
                            m.entry(e.post_id().to_owned())
                                .or_default()
                                .push((i as u32, e.clone()));
                        }
                    });
                }
            });
            map.lock().expect("not poisoned").clear();
        })
    });
    group.finish();
}

/// The aggregator against a `DashMap` buffer: the same messages, the same
/// batch points, 1 and 2 producer threads (the machine has 2 cores). Each
/// iteration gets fresh owned messages (cloned outside the timing).
fn aggregator_vs_dashmap(c: &mut Criterion) {
    let items = buffers::items();
    let mut group = c.benchmark_group("aggregator_vs_dashmap");
    group.throughput(Throughput::Elements(buffers::EVENTS as u64));
    let agg: Aggregator<u32> = Aggregator::new(buffers::SHARDS, buffers::BATCH);
    let dash = buffers::DashBuffer::new();
    for threads in [1usize, 2] {
        assert_eq!(
            buffers::run(&agg, buffers::pending(&items, threads)),
            items.len()
        );
        assert_eq!(
            buffers::run(&dash, buffers::pending(&items, threads)),
            items.len()
        );
        let parts = || buffers::pending(&items, threads);
        group.bench_function(BenchmarkId::new("aggregator", threads), |b| {
            b.iter_batched(parts, |p| buffers::run(&agg, p), BatchSize::LargeInput)
        });
        group.bench_function(BenchmarkId::new("dashmap", threads), |b| {
            b.iter_batched(parts, |p| buffers::run(&dash, p), BatchSize::LargeInput)
        });
    }
    group.finish();
}

fn stored_membership_reads(c: &mut Criterion) {
    let responses = support::stored_membership_responses();
    let mut group = c.benchmark_group("read_stored_memberships");
    group.throughput(Throughput::Elements(responses.len() as u64));
    group.bench_function("in_place", |b| {
        b.iter(|| support::read_stored_memberships(&responses))
    });
    group.bench_function("sdk_decode_baseline", |b| {
        b.iter(|| support::read_stored_memberships_sdk(&responses))
    });
    group.finish();
}

fn rollup_writes(c: &mut Criterion) {
    let events = support::events();
    let config = support::store_config();
    let call = &events[..500.min(events.len())];
    let mut group = c.benchmark_group("rollup_write_500");
    group.throughput(Throughput::Elements(call.len() as u64));
    group.bench_function("in_place", |b| {
        b.iter(|| support::rollup_writes(&config, call))
    });
    group.bench_function("sdk_message_baseline", |b| {
        b.iter(|| support::rollup_writes_sdk(&config, call))
    });
    group.finish();
}

/// The known memberships' per-key work, a fresh table per pass (as a
/// replica that just started): 300,000 events of the concentrated shape in
/// batches of 1,000, 297,041 keys over the batches, 140,792 distinct (post,
/// user) pairs: the first time each is new, then known (the default table
/// of 200,000 entries holds them all, as in the backlog bench's run).
///
/// Then the same on a viral shape ([`support::viral_batches`]): 299,614
/// keys over the batches, 227,461 distinct pairs, so the table fills and
/// forgets.
fn known_memberships(c: &mut Criterion) {
    for (shape, batches) in [
        ("", support::concentrated_batches(300_000)),
        ("_viral", support::viral_batches(300_000)),
    ] {
        let keys: usize = batches.iter().map(|b| b.keys().count()).sum();
        let mut group = c.benchmark_group(format!("known_memberships{shape}"));
        group.throughput(Throughput::Elements(keys as u64));
        group.sample_size(10);
        group.bench_function("recall_see_learn", |b| {
            b.iter_batched(
                || KnownMemberships::new(200_000),
                // The table returned: dropped outside the timing.
                |known| (support::known_memberships_pass(&known, &batches), known),
                BatchSize::PerIteration,
            )
        });
        group.bench_function("floor_map_baseline", |b| {
            b.iter_batched(
                HashMap::new,
                |mut map| (support::floor_map_pass(&mut map, &batches), map),
                BatchSize::PerIteration,
            )
        });
        group.finish();
    }
}

criterion_group! {
    name = benches;
    config = Criterion::default().sample_size(20).measurement_time(Duration::from_secs(3)).warm_up_time(Duration::from_secs(1));
    targets = decode_validate_aggregate, batch_building, hot_post_contention, aggregator_vs_dashmap, stored_membership_reads, rollup_writes, known_memberships
}
criterion_main!(benches);
