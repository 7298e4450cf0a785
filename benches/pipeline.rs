//! CPU cost of the in-process pipeline, each measured side by side with a
//! naive baseline in the same group (ratios are what to read; the machine is
//! shared and noisy):
//! - decode + validate + aggregate, vs a `Mutex<HashMap<String, Vec<_>>>` aggregator;
//! - batch building (group, apply rules, Firestore writes) for 1..=2000 events;
//! - contention: every thread adding likes of one hot post.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::time::Instant;

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use hotcount::aggregator::{Aggregator, Item, Pending};
use hotcount::batch::{Batch, MembershipKey};
use hotcount::event::{self, LikeEvent, LikeKind, Version};
use hotcount::store::firestore::{build_writes, FirestoreStoreConfig, Layout};

/// The allocator of the `hotcount` binary, so that allocation costs what it
/// costs in the service (every group, baselines included, uses it).
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

const PAYLOADS: usize = 10_000;

/// The naive baseline: one global lock over a map of post id -> events.
type NaiveMap = Mutex<HashMap<String, Vec<(u32, LikeEvent)>>>;

/// Realistic payloads: a skewed post popularity (post 0 takes about half).
fn payloads() -> Vec<Vec<u8>> {
    (0..PAYLOADS)
        .map(|i| {
            let post = if i % 2 == 0 { 0 } else { (i * 7919) % 5000 };
            serde_json::json!({
                "version": 1,
                "eventId": format!("01J9Z8Q7ABCDEF{i:010}"),
                "type": if i % 20 == 0 { "like.removed" } else { "like.added" },
                "postId": format!("post-{post}"),
                "userId": format!("user-{}", (i * 104_729) % 1_000_000),
                "occurredAt": "2026-11-30T12:34:56.789012Z",
                "seq": i % 5 + 1,
                "producer": "web-frontend",
            })
            .to_string()
            .into_bytes()
        })
        .collect()
}

/// The naive decoder: the whole object into a `serde_json::Map` (owned keys
/// and values), the fields taken out of it, the timestamp parsed by chrono,
/// the ids checked; it was hotcount's first decoder.
fn parse_via_value_map(data: &[u8]) -> Option<LikeEvent> {
    let text = std::str::from_utf8(data).ok()?;
    let mut o: serde_json::Map<String, serde_json::Value> = serde_json::from_str(text).ok()?;
    let mut take = |k: &str| match o.remove(k) {
        Some(serde_json::Value::String(s)) => Some(s),
        _ => None,
    };
    let kind = match take("type")?.as_str() {
        "like.added" => LikeKind::Added,
        "like.removed" => LikeKind::Removed,
        _ => return None,
    };
    let (event_id, post_id, user_id) = (take("eventId")?, take("postId")?, take("userId")?);
    let at = chrono::DateTime::parse_from_rfc3339(&take("occurredAt")?).ok()?;
    let producer = take("producer");
    let seq = o.get("seq").and_then(|v| v.as_i64()).unwrap_or(0);
    let version = Version {
        seq,
        occurred_at_micros: at.timestamp_micros(),
        event_id,
    };
    // `new` checks the ids, the time's range and the producer.
    LikeEvent::new(kind, &post_id, &user_id, &version, producer.as_deref()).ok()
}

fn to_item(data: &[u8]) -> Item {
    match event::parse(data) {
        Ok(e) => Item::Event(e),
        Err(p) => Item::Poison(Box::new(hotcount::batch::PoisonRecord::new(
            String::new(),
            p.to_string(),
            data,
            Default::default(),
        ))),
    }
}

fn decode_validate_aggregate(c: &mut Criterion) {
    let payloads = payloads();
    let mut group = c.benchmark_group("decode_validate_aggregate");
    group.throughput(Throughput::Elements(PAYLOADS as u64));
    group.bench_function("parse_only", |b| {
        b.iter(|| {
            for p in &payloads {
                std::hint::black_box(event::parse(p).is_ok());
            }
        })
    });
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
        const BATCH: usize = 1000;
        let agg: Aggregator<u32> = Aggregator::new(16, BATCH);
        b.iter(|| {
            for (i, p) in payloads.iter().enumerate() {
                agg.add(Pending {
                    handle: i as u32,
                    item: to_item(p),
                    bytes: p.len(),
                    published: None,
                });
                if (i + 1) % BATCH == 0 {
                    std::hint::black_box(agg.take_merged(&[], Instant::now()));
                }
            }
            while !agg.take_merged(&[], Instant::now()).0.is_empty() {}
        })
    });
    // The naive consumer's in-process stage: value-map decoder, one global
    // lock over a map keyed by owned post ids.
    group.bench_function("naive_mutex_hashmap", |b| {
        let map: NaiveMap = Mutex::new(HashMap::new());
        b.iter(|| {
            for (i, p) in payloads.iter().enumerate() {
                if let Some(e) = parse_via_value_map(p) {
                    let mut m = map.lock().expect("not poisoned");
                    m.entry(e.post_id().to_owned())
                        .or_default()
                        .push((i as u32, e));
                }
            }
            map.lock().expect("not poisoned").clear();
        })
    });
    // hotcount's decoder into the naive map: isolates the aggregator's share.
    group.bench_function("parse_into_naive_mutex_hashmap", |b| {
        let map: NaiveMap = Mutex::new(HashMap::new());
        b.iter(|| {
            for (i, p) in payloads.iter().enumerate() {
                if let Ok(e) = event::parse(p) {
                    let mut m = map.lock().expect("not poisoned");
                    m.entry(e.post_id().to_owned())
                        .or_default()
                        .push((i as u32, e));
                }
            }
            map.lock().expect("not poisoned").clear();
        })
    });
    group.finish();
}

fn batch_building(c: &mut Criterion) {
    let events: Vec<LikeEvent> = payloads()
        .iter()
        .filter_map(|p| event::parse(p).ok())
        .collect();
    let config = FirestoreStoreConfig {
        layout: Layout::new("bench", "(default)", ""),
        consumer: "bench".into(),
        counter_shards: 8,
        counter_shard_target_writes_per_sec: 1,
        marker_ttl: Duration::from_secs(86_400),
    };
    let mut group = c.benchmark_group("batch_build");
    for size in [1usize, 10, 100, 500, 1000, 2000] {
        let slice = events[..size].to_vec();
        group.throughput(Throughput::Elements(size as u64));
        group.bench_with_input(BenchmarkId::from_parameter(size), &slice, |b, slice| {
            b.iter(|| {
                let batch = Batch::new(slice.clone(), Vec::new());
                let plan = batch.plan(&HashMap::new());
                let times: HashMap<MembershipKey, _> = HashMap::new();
                let writes = build_writes(&config, &batch, &plan, &times, "marker", |_| 3);
                std::hint::black_box(writes.len())
            })
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

criterion_group! {
    name = benches;
    config = Criterion::default().sample_size(20).measurement_time(Duration::from_secs(3)).warm_up_time(Duration::from_secs(1));
    targets = decode_validate_aggregate, batch_building, hot_post_contention
}
criterion_main!(benches);
