//! The decode workloads shared by `pipeline` (criterion, wall time) and
//! `instructions` (instruction counts under cachegrind): the same payloads
//! and the same loops, so both measure one thing two ways.

use std::collections::HashMap;
use std::sync::Mutex;

use gcloud_sdk::prost_types::Timestamp;
use hotcount::event::{self, LikeEvent, LikeKind, Version};
use hotcount::model::batch::Batch;
use hotcount::model::item::Item;
use hotcount::pipeline::aggregator::{Aggregator, Pending};
use hotcount::store::firestore::codec::encode_writes;
use hotcount::store::firestore::known::{KnownMemberships, Unchanged};
use hotcount::store::firestore::wire::EncodedCommit;
use hotcount::store::firestore::{FirestoreStoreConfig, Layout};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use tokio::time::Instant;

/// Payloads in the workload (each pass decodes all of them).
pub const PAYLOADS: usize = 10_000;

/// The naive baseline: one global lock over a map of post id -> events.
pub type NaiveMap = Mutex<HashMap<String, Vec<(u32, LikeEvent)>>>;

/// Realistic payloads: a skewed post popularity (post 0 takes about half).
pub fn payloads() -> Vec<Vec<u8>> {
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
pub fn parse_via_value_map(data: &[u8]) -> Option<LikeEvent> {
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

/// hotcount's decoder as the source calls it: an event, or poison.
pub fn to_item(data: &[u8]) -> Item {
    match event::parse(data) {
        Ok(e) => Item::Event(e),
        Err(p) => Item::Poison(Box::new(hotcount::model::poison::PoisonRecord::new(
            String::new(),
            p.to_string(),
            data,
            Default::default(),
        ))),
    }
}

/// Messages per batch in [`hotcount_sharded`], as the service's default.
pub const BATCH: usize = 1000;

/// decode + validate, every payload once.
pub fn parse_only(payloads: &[Vec<u8>]) {
    for p in payloads {
        std::hint::black_box(event::parse(p).is_ok());
    }
}

/// decode + validate + aggregate as the service runs it: every payload into
/// the sharded buffers, and a batch taken (merged over the shards, oldest
/// first) whenever a full one is buffered; the rest taken at the end.
pub fn hotcount_sharded(agg: &Aggregator<u32>, payloads: &[Vec<u8>]) {
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
}

/// The naive consumer's in-process stage: the value-map decoder, one global
/// lock over a map keyed by owned post ids (cleared at the end).
pub fn naive_mutex_hashmap(map: &NaiveMap, payloads: &[Vec<u8>]) {
    naive_with(map, payloads, parse_via_value_map);
}

/// hotcount's decoder into the naive map: isolates the aggregator's share.
pub fn parse_into_naive_mutex_hashmap(map: &NaiveMap, payloads: &[Vec<u8>]) {
    naive_with(map, payloads, |p| event::parse(p).ok());
}

fn naive_with(map: &NaiveMap, payloads: &[Vec<u8>], decode: impl Fn(&[u8]) -> Option<LikeEvent>) {
    for (i, p) in payloads.iter().enumerate() {
        if let Some(e) = decode(p) {
            let mut m = map.lock().expect("not poisoned");
            m.entry(e.post_id().to_owned())
                .or_default()
                .push((i as u32, e));
        }
    }
    map.lock().expect("not poisoned").clear();
}

/// The payloads' events, parsed.
pub fn events() -> Vec<LikeEvent> {
    payloads()
        .iter()
        .filter_map(|p| event::parse(p).ok())
        .collect()
}

/// A Firestore layout and store settings, for [`build_batch`].
pub struct StoreSettings {
    /// Where the documents live.
    pub layout: Layout,
    /// The store's settings.
    pub config: FirestoreStoreConfig,
}

/// A Firestore layout and settings for [`build_batch`].
pub fn store_config() -> StoreSettings {
    StoreSettings {
        layout: Layout::new("bench", "(default)", ""),
        config: FirestoreStoreConfig {
            consumer: "bench".into(),
            counter_shards: 8,
            counter_shard_target_writes_per_sec: 1,
            marker_ttl: std::time::Duration::from_secs(86_400),
            due_records: false,
            known_memberships: 0,
        },
    }
}

/// One commit's in-process work for `events`: group them into a batch,
/// apply the rules to nothing stored, build the Firestore writes. Returns
/// how many writes.
pub fn build_batch(settings: &StoreSettings, events: &[LikeEvent]) -> usize {
    let batch = Batch::new(events.to_vec(), Vec::new());
    let (layout, config) = (&settings.layout, &settings.config);
    // As the store does: each name built once, for the read and the write.
    let names: Vec<String> = batch.keys().map(|k| layout.membership(k)).collect();
    let found = vec![None; names.len()];
    let times = vec![None; names.len()];
    let plan = batch.plan(found.as_slice());
    let mut commit = EncodedCommit::new(&layout.database, 0);
    encode_writes(
        &mut commit,
        layout,
        config,
        &batch,
        &plan,
        &names,
        &times,
        "marker",
        |_| 3,
    );
    std::hint::black_box(commit.writes())
}

/// Rollup writes in one BatchWrite request, as the rollup refresher's
/// large call sends them (500 a call): one per event, its post's rollup
/// written over the one read before, each encoded in place.
pub fn rollup_writes(settings: &StoreSettings, events: &[LikeEvent]) -> usize {
    use hotcount::store::firestore::codec::rollup_writes_request;
    let previous = read_rollup();
    let writes: Vec<_> = events.iter().map(|e| rollup_of(e, &previous)).collect();
    let request = rollup_writes_request(&settings.layout, writes.iter());
    std::hint::black_box(request.finish(&[]).len())
}

/// [`rollup_writes`] built of gcloud-sdk's messages, field by field, then
/// encoded by prost: the baseline.
pub fn rollup_writes_sdk(settings: &StoreSettings, events: &[LikeEvent]) -> usize {
    use gcloud_sdk::google::firestore::v1 as fs;
    use gcloud_sdk::prost::Message;
    use hotcount::store::firestore::codec::rollup_write;
    let layout = &settings.layout;
    let previous = read_rollup();
    let writes: Vec<_> = events.iter().map(|e| rollup_of(e, &previous)).collect();
    let request = fs::BatchWriteRequest {
        database: layout.database.clone(),
        writes: writes.iter().map(|w| rollup_write(layout, w)).collect(),
        ..Default::default()
    };
    std::hint::black_box(request.encode_to_vec().len())
}

/// The rollup a refresh read before writing one.
fn read_rollup() -> hotcount::store::rollup::StoredRollup {
    hotcount::store::rollup::StoredRollup {
        likes: 41,
        as_of: 1_700_000_000_000_000,
        shards: Some(1),
        update_time: Some(gcloud_sdk::prost_types::Timestamp {
            seconds: 1_700_000_000,
            nanos: 123_456_789,
        }),
        milestone: None,
    }
}

/// The rollup write of `event`'s post over `previous`.
fn rollup_of<'a>(
    event: &'a LikeEvent,
    previous: &'a hotcount::store::rollup::StoredRollup,
) -> hotcount::store::rollup::RollupWrite<'a> {
    hotcount::store::rollup::RollupWrite {
        post_id: event.post_id(),
        likes: event.seq,
        as_of: event.occurred_at_micros,
        shards: 1,
        previous: Some(previous),
        milestones: &[],
    }
}

/// BatchGetDocuments responses as the store sends back a batch's stored
/// memberships (one found document each, the four fields the read asks
/// for, its times), encoded as gcloud-sdk encodes them: one per payload.
/// The fields go in one fixed order: gcloud-sdk's map would write them in
/// its hash order, random per process, and the read's count depends on
/// the order (by ~100 instructions per membership between runs).
pub fn stored_membership_responses() -> Vec<gcloud_sdk::prost::bytes::Bytes> {
    use fs::value::ValueType;
    use gcloud_sdk::google::firestore::v1 as fs;
    use gcloud_sdk::prost::Message;
    use gcloud_sdk::prost_types::Timestamp;
    use hotcount::store::firestore::wire::put_header;
    let layout = store_config().layout;
    let value = |v| fs::Value {
        value_type: Some(v),
    };
    let time = |seconds| Timestamp { seconds, nanos: 0 };
    events()
        .iter()
        .map(|e| {
            let name = layout.membership(&hotcount::model::batch::MembershipKey::of(e));
            let fields = [
                ("liked", value(ValueType::BooleanValue(true))),
                ("seq", value(ValueType::IntegerValue(e.seq))),
                (
                    "occurredAt",
                    value(ValueType::TimestampValue(time(1_700_000_000))),
                ),
                (
                    "eventId",
                    value(ValueType::StringValue(e.event_id().to_string())),
                ),
            ];
            let mut document = fs::Document {
                name,
                fields: HashMap::new(),
                create_time: Some(time(1_700_000_000)),
                update_time: Some(time(1_700_000_001)),
            }
            .encode_to_vec();
            // One map entry at a time: a document's fields are its map
            // entries in any order, here this one.
            for (key, value) in fields {
                let entry = fs::Document {
                    fields: HashMap::from([(key.to_string(), value)]),
                    ..fs::Document::default()
                };
                document.extend(entry.encode_to_vec());
            }
            // `found` (field 1), then the rest as gcloud-sdk encodes it.
            let mut response = Vec::new();
            put_header(&mut response, 1, document.len());
            response.extend(document);
            fs::BatchGetDocumentsResponse {
                result: None,
                transaction: Vec::new(),
                read_time: Some(time(1_700_000_002)),
            }
            .encode(&mut response)
            .expect("a vector grows");
            gcloud_sdk::prost::bytes::Bytes::from(response)
        })
        .collect()
}

/// The store's read of stored memberships, for `responses`: each response
/// checked as it arrives, its document found, the membership's fields
/// read (what `read_memberships` does per document). Returns how many
/// memberships were read.
pub fn read_stored_memberships(responses: &[gcloud_sdk::prost::bytes::Bytes]) -> usize {
    use hotcount::store::firestore::codec::membership_from_fields;
    use hotcount::store::firestore::frame::BatchGetFrame;
    let mut read = 0;
    for bytes in responses {
        let Ok(frame) = BatchGetFrame::new(bytes.clone()) else {
            continue;
        };
        if let Some(doc) = frame.found() {
            let membership = membership_from_fields(&doc);
            read += usize::from(std::hint::black_box(membership).is_some());
        }
    }
    read
}

/// The baseline of [`read_stored_memberships`]: each response decoded by
/// gcloud-sdk (a `Document` with its map of fields built), then the same
/// fields read from the map.
pub fn read_stored_memberships_sdk(responses: &[gcloud_sdk::prost::bytes::Bytes]) -> usize {
    use gcloud_sdk::google::firestore::v1 as fs;
    use gcloud_sdk::prost::Message;
    use hotcount::store::firestore::codec::membership_from_fields;
    let mut read = 0;
    for bytes in responses {
        let Ok(response) = fs::BatchGetDocumentsResponse::decode(bytes.clone()) else {
            continue;
        };
        if let Some(fs::batch_get_documents_response::Result::Found(doc)) = response.result {
            let membership = membership_from_fields(&doc.fields);
            read += usize::from(std::hint::black_box(membership).is_some());
        }
    }
    read
}

/// The running sums of `rank^-exponent` for ranks `1..=posts`: a post
/// drawn by the Zipf law is the first whose sum exceeds a uniform draw
/// below the last (`partition_point`).
pub fn zipf_cumulative(posts: usize, exponent: f64) -> Vec<f64> {
    (1..=posts)
        .scan(0.0, |total, rank| {
            *total += (rank as f64).powf(-exponent);
            Some(*total)
        })
        .collect()
}

/// Events of the bench's concentrated shape, in batches of [`BATCH`]:
/// posts Zipf 1.1 over 300, users uniform over 3,000, each event a like
/// with the next `seq` and a UUID-long event id.
pub fn concentrated_batches(events: usize) -> Vec<Batch> {
    let cumulative = zipf_cumulative(300, 1.1);
    let total = cumulative.last().copied().unwrap_or_default();
    like_batches(events, |rng| {
        let draw = rng.random_range(0.0..total);
        let post = cumulative.partition_point(|c| *c <= draw);
        (post as u64, 3_000)
    })
}

/// Events of a viral shape, in batches of [`BATCH`]: half of them on one
/// post, the rest uniform over 100,000 posts, users uniform over 100,000
/// (one post with half the events, as in the backlog bench's viral case):
/// of 300,000 events, 227,461 distinct (post, user) pairs, so three keys
/// in four are new and a table of 200,000 entries fills and forgets.
pub fn viral_batches(events: usize) -> Vec<Batch> {
    like_batches(events, |rng| match rng.random_bool(0.5) {
        true => (0, 100_000),
        false => (rng.random_range(0..100_000), 100_000),
    })
}

/// `events` likes in batches of [`BATCH`], each on the post and among the
/// users `pick` draws (from a seeded generator: the same events every
/// time), with the next `seq` and a UUID-long event id.
fn like_batches(events: usize, pick: impl Fn(&mut StdRng) -> (u64, u64)) -> Vec<Batch> {
    let mut rng = StdRng::seed_from_u64(42);
    let events: Vec<LikeEvent> = (0..events as i64)
        .map(|i| {
            let (post, users) = pick(&mut rng);
            let user = rng.random_range(0..users);
            let version = Version {
                seq: i,
                occurred_at_micros: 1_700_000_000_000_000 + i,
                event_id: format!("{:08x}-0000-4000-8000-{i:012x}", rng.random::<u32>()),
            };
            let (post, user) = (format!("post-{post:06}"), format!("user-{user:06}"));
            LikeEvent::new(LikeKind::Added, &post, &user, &version, None).expect("a valid event")
        })
        .collect();
    events
        .chunks(BATCH)
        .map(|chunk| Batch::new(chunk.to_vec(), Vec::new()))
        .collect()
}

/// What a replica's known memberships do per batch committed from them,
/// for every batch of `batches` in turn: recall the keys' states, plan the
/// batch against them, record the keys as seen, learn what the commit
/// (at a made-up time) left. Returns how many keys were read first.
pub fn known_memberships_pass(known: &KnownMemberships, batches: &[Batch]) -> usize {
    let mut forgotten = 0;
    for (i, batch) in batches.iter().enumerate() {
        let Some(recalled) = known.recall(batch.keys()) else {
            continue;
        };
        forgotten += recalled.forgotten.len();
        let plan = batch.plan(recalled.found.as_slice());
        known.see(&recalled.hashes);
        let time = Timestamp {
            seconds: i as i64,
            nanos: 0,
        };
        let unchanged = Unchanged::AlreadyKnown;
        known.learn(batch.keys(), &recalled.hashes, &plan, Some(time), unchanged);
    }
    std::hint::black_box(forgotten)
}

/// The baseline of [`known_memberships_pass`]: the write floor's per-event
/// work on its map of states (`hotcount-null-consumer --commit-writes`),
/// trusted, one entry per (post, user) keyed by the two ids, holding the
/// newest `seq` and whether it is a like; no update time, no record of
/// seen keys, no plan. Returns how many events changed a state.
pub fn floor_map_pass(map: &mut HashMap<String, (i64, bool)>, batches: &[Batch]) -> usize {
    let mut changed = 0;
    let mut key = String::new();
    for event in batches.iter().flat_map(|b| b.events.values().flatten()) {
        let like = &event.item;
        key.clear();
        key.push_str(like.post_id());
        key.push('\n');
        key.push_str(like.user_id());
        let liked = like.kind == LikeKind::Added;
        match map.get_mut(key.as_str()) {
            Some(known) if known.0 >= like.seq => continue,
            Some(known) => *known = (like.seq, liked),
            None => {
                map.insert(key.clone(), (like.seq, liked));
            }
        }
        changed += 1;
    }
    std::hint::black_box(changed)
}
