//! Hostile content end to end: messages whose quarantine records the store
//! would refuse if they were stored naively (reserved attribute keys, many
//! large attributes, multi-MB and deeply nested payloads, numbers out of
//! range), mixed with valid likes, against the in-process emulators. Every
//! valid like counts, every hostile message leaves one record, nothing is
//! acked without its effect or its record.

mod common;

use std::collections::BTreeMap;
use std::time::Duration;

use common::{expected, Ev, Harness};
use google_cloud_pubsub::model::Message;
use hotcount::store::firestore::{codec, StoredRecord};

const WAIT: Duration = Duration::from_secs(60);

/// Publishes `data` with `attributes`; returns the message id.
async fn publish(h: &Harness, data: Vec<u8>, attributes: BTreeMap<String, String>) -> String {
    h.publisher
        .publish(Message::new().set_data(data).set_attributes(attributes))
        .await
        .expect("publish")
}

/// The quarantine record of `message_id` written by consumer `c1`.
async fn record(h: &Harness, message_id: &str) -> Option<StoredRecord> {
    let name = h.db.layout().quarantine("c1", message_id);
    let doc = h.db.get(&name).await.expect("read quarantine");
    doc.as_ref().map(codec::quarantine_from_document)
}

/// Every (key, value) the record keeps of the message's attributes.
fn stored_attributes(stored: &StoredRecord) -> BTreeMap<String, String> {
    stored.record.attributes.iter().cloned().collect()
}

fn likes(posts: usize, per_post: usize) -> Vec<Ev> {
    let mut events = Vec::new();
    for p in 0..posts {
        for u in 0..per_post {
            events.push(Ev::like(
                &format!("e-{p}-{u}"),
                &format!("post-{p}"),
                &format!("user-{u}"),
                1,
            ));
        }
    }
    events
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reserved_attribute_keys_lose_no_valid_like_and_each_message_keeps_a_record() {
    let h = Harness::start().await;
    let consumer = h.spawn(h.run_args("c1", &["--shards", "1", "--flush-interval-ms", "500"]));
    let valid = likes(1, 20);
    let mut ids = h.publish(&valid).await;
    let mut hostile = Vec::new();
    for key in ["__x__", "__name__"] {
        let attributes = BTreeMap::from([(key.to_string(), "1".to_string())]);
        hostile.push(publish(&h, b"{not json".to_vec(), attributes).await);
    }
    ids.extend(hostile.iter().cloned());
    let want = expected(&valid);
    assert_eq!(h.wait_for_counts(&want, WAIT).await, want);
    assert!(
        consumer.wait_for_acks(22, WAIT).await,
        "every message acked"
    );
    let stats = consumer.stop().await;
    for (id, key) in hostile.iter().zip(["__x__", "__name__"]) {
        let doc = record(&h, id).await.expect("a record per hostile message");
        assert_eq!(
            stored_attributes(&doc),
            BTreeMap::from([(key.to_string(), "1".to_string())])
        );
    }
    assert_eq!(stats.isolated.get(), 0, "no valid event quarantined");
    assert_eq!(stats.nacks.get(), 0);
}

/// The hostile messages of the mix: (payload, attributes, what it is).
fn hostile_mix() -> Vec<(Vec<u8>, BTreeMap<String, String>, &'static str)> {
    let like = |post: &str| {
        format!(
            r#"{{"version":1,"eventId":"h-{post}","type":"like.added","postId":"{post}","userId":"u","occurredAt":"2026-11-30T12:00:00Z","seq":1}}"#
        )
    };
    let mut mix = Vec::new();
    // 100 attributes of 1 KiB (the most Pub/Sub takes), on a poison payload.
    let big: BTreeMap<String, String> = (0..100)
        .map(|i| (format!("attr-{i:03}"), "v".repeat(1024)))
        .collect();
    mix.push((b"{not json".to_vec(), big, "100 x 1 KiB attributes"));
    // Reserved, dotted and back-quoted keys on a *valid-looking* payload
    // whose post id is unsafe.
    let odd = BTreeMap::from([
        ("__key__".to_string(), "x".to_string()),
        ("a.b".to_string(), "y".to_string()),
        ("`c`".to_string(), "z".to_string()),
    ]);
    mix.push((like("a/b").into_bytes(), odd, "reserved and dotted keys"));
    // A multi-MB payload.
    let mut huge = b"{\"pad\":\"".to_vec();
    huge.extend(std::iter::repeat_n(b'x', 3 << 20));
    huge.extend(b"\"}");
    mix.push((huge, BTreeMap::new(), "3 MiB payload"));
    // Deep JSON.
    let deep = format!("{}{}", "[".repeat(5000), "]".repeat(5000));
    mix.push((deep.into_bytes(), BTreeMap::new(), "deep JSON"));
    // Numbers out of range.
    let overflow = r#"{"version":1,"eventId":"o","type":"like.added","postId":"p","userId":"u","occurredAt":"2026-11-30T12:00:00Z","seq":99999999999999999999999}"#;
    mix.push((
        overflow.as_bytes().to_vec(),
        BTreeMap::new(),
        "seq overflow",
    ));
    let version = r#"{"version":1e400,"eventId":"o","type":"like.added","postId":"p","userId":"u","occurredAt":"2026-11-30T12:00:00Z"}"#;
    mix.push((
        version.as_bytes().to_vec(),
        BTreeMap::new(),
        "version 1e400",
    ));
    mix
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hostile_mix_counts_every_valid_like_and_quarantines_every_hostile_message() {
    let h = Harness::start().await;
    let consumer = h.spawn(h.run_args("c1", &["--flush-interval-ms", "200"]));
    let valid = likes(30, 10);
    let mut hostile = Vec::new();
    // Interleaved, so hostile messages share batches with valid events.
    for chunk in valid.chunks(50) {
        h.publish(chunk).await;
        for (data, attributes, what) in hostile_mix() {
            hostile.push((publish(&h, data, attributes).await, what));
        }
    }
    let messages = (valid.len() + hostile.len()) as u64;
    let want = expected(&valid);
    assert_eq!(h.wait_for_counts(&want, WAIT).await, want);
    assert!(
        consumer.wait_for_acks(messages, WAIT).await,
        "every message acked"
    );
    let stats = consumer.stop().await;
    for (id, what) in &hostile {
        let doc = record(&h, id).await;
        assert!(doc.is_some(), "no quarantine record for {what} ({id})");
    }
    assert_eq!(stats.poison.get(), hostile.len() as u64);
    assert_eq!(stats.isolated.get(), 0, "no valid event quarantined");
    assert_eq!(stats.quarantine_refused.get(), 0);
    assert_eq!(stats.nacks.get(), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_event_the_store_refused_is_quarantined_then_redriven_and_counted_once() {
    use gcloud_sdk::tonic::Code;
    use hotcount::ops::quarantine::{self, Redrive};
    use hotcount_emulators::FaultSpec;

    let h = Harness::start().await;
    // The first commit is refused as content: the lone event is isolated
    // and its record committed on its own.
    h.emulators
        .firestore_faults()
        .add(FaultSpec::error("Commit", Code::InvalidArgument).times(1))
        .expect("fault");
    let consumer = h.spawn(h.run_args("c1", &["--shards", "1"]));
    let like = Ev::like("e-1", "post-r", "user-1", 1);
    h.publish(std::slice::from_ref(&like)).await;
    assert!(consumer.wait_for_acks(1, WAIT).await);
    assert_eq!(h.count("post-r").await, 0, "quarantined, not counted");
    assert_eq!(consumer.stats.isolated.get(), 1);

    let records = quarantine::list(&h.store, Some("c1"), 10)
        .await
        .expect("list");
    assert_eq!(records.len(), 1, "{records:?}");
    assert!(records[0].record.reason.contains("rejected by the store"));
    let id = records[0].id().to_string();
    let shown = quarantine::show(&h.store, &id).await.expect("show");
    assert_eq!(shown.as_ref(), Some(&records[0]));

    let done = quarantine::redrive(&h.store, &h.publisher, &[id.clone(), "c1:nope".into()])
        .await
        .expect("redrive");
    assert!(matches!(done[0].1, Redrive::Published { .. }), "{done:?}");
    assert_eq!(done[1].1, Redrive::Missing);
    let want = BTreeMap::from([("post-r".to_string(), 1)]);
    assert_eq!(h.wait_for_counts(&want, WAIT).await, want);
    assert!(consumer.wait_for_acks(2, WAIT).await);
    consumer.stop().await;
    assert!(quarantine::show(&h.store, &id)
        .await
        .expect("show")
        .is_none());
    // A second re-drive of the same record finds nothing: no double count.
    let again = quarantine::redrive(&h.store, &h.publisher, std::slice::from_ref(&id))
        .await
        .expect("redrive");
    assert_eq!(again[0].1, Redrive::Missing);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_truncated_record_is_never_redriven() {
    use hotcount::ops::quarantine::{self, Redrive};

    let h = Harness::start().await;
    let consumer = h.spawn(h.run_args("c1", &["--shards", "1"]));
    let mut big = b"{\"pad\":\"".to_vec();
    big.extend(std::iter::repeat_n(b'x', 100_000));
    big.extend(b"\"}");
    let id = publish(&h, big, BTreeMap::new()).await;
    assert!(consumer.wait_for_acks(1, WAIT).await);
    consumer.stop().await;
    let record = format!("c1:{id}");
    let done = quarantine::redrive(&h.store, &h.publisher, std::slice::from_ref(&record))
        .await
        .expect("redrive");
    assert!(matches!(done[0].1, Redrive::Refused(_)), "{done:?}");
    assert!(quarantine::show(&h.store, &record)
        .await
        .expect("show")
        .is_some());
}
