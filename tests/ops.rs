//! Operations features against the in-process emulators: the metrics
//! endpoint, reconcile, replay and the dead-letter tools.

mod common;
#[path = "support/scrape.rs"]
mod scrape;

use std::time::Duration;

use common::{expected, Ev, Harness};
use hotcount::reconcile;

const WAIT: Duration = Duration::from_secs(30);

fn likes(post: &str, users: usize, prefix: &str) -> Vec<Ev> {
    (0..users)
        .map(|u| Ev::like(&format!("{prefix}-{u}"), post, &format!("user-{u}"), 1))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metrics_endpoint_exports_counts_and_readiness() {
    let h = Harness::start().await;
    let consumer = h.spawn(h.run_args("c1", &[]));
    let addr = scrape::metrics_addr(&consumer.stats).await;
    assert_eq!(scrape::get(addr, "/healthz").await.0, 200);
    let events = likes("p", 12, "m");
    h.publish(&events).await;
    assert!(consumer.wait_for_acks(12, WAIT).await);
    let (status, _) = scrape::get(addr, "/readyz").await;
    assert_eq!(status, 200, "ready while the source runs");
    let (status, body) = scrape::get(addr, "/metrics").await;
    assert_eq!(status, 200);
    assert_eq!(
        scrape::value(&body, "hotcount_events_received_total"),
        Some(12.0)
    );
    assert_eq!(
        scrape::value(&body, "hotcount_events_applied_total"),
        Some(12.0)
    );
    assert_eq!(scrape::value(&body, "hotcount_acks_total"), Some(12.0));
    assert!(scrape::value(&body, "hotcount_commits_total{outcome=\"committed\"}").unwrap() >= 1.0);
    assert!(scrape::value(&body, "hotcount_batch_size_messages_count").unwrap() >= 1.0);
    assert!(scrape::value(&body, "hotcount_buffered_events{shard=\"3\"}").is_some());
    assert_eq!(scrape::value(&body, "hotcount_ready"), Some(1.0));
    consumer.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reconcile_finds_and_repairs_a_corrupted_shard() {
    let h = Harness::start().await;
    let consumer = h.spawn(h.run_args("c1", &[]));
    let mut events = likes("hot", 9, "a");
    events.extend(likes("calm", 3, "b"));
    events.push(Ev::unlike("b-0-off", "calm", "user-0", 2));
    h.publish(&events).await;
    assert!(consumer.wait_for_acks(events.len() as u64, WAIT).await);
    consumer.stop().await;
    let want = expected(&events);
    assert_eq!(h.counts(want.keys()).await, want);

    let clean = reconcile::reconcile_all(&h.store, false).await.unwrap();
    assert_eq!(clean.len(), 2);
    assert!(clean.iter().all(|r| r.difference() == 0), "{clean:?}");

    // Corrupt: a lost increment on one shard, a phantom one on another post.
    corrupt(&h, "hot", 0, -4).await;
    corrupt(&h, "calm", 5, 3).await;
    assert_eq!(h.count("hot").await, 5);

    let report = reconcile::reconcile_post(&h.store, "hot", false)
        .await
        .unwrap();
    assert_eq!(
        (report.liked, report.shards_sum, report.repaired),
        (9, 5, false)
    );
    assert_eq!(h.count("hot").await, 5, "a report changes nothing");

    let all = reconcile::reconcile_all(&h.store, true).await.unwrap();
    let repaired: Vec<_> = all
        .iter()
        .filter(|r| r.repaired)
        .map(|r| (r.post_id.as_str(), r.difference()))
        .collect();
    assert_eq!(repaired, vec![("calm", -3), ("hot", 4)]);
    assert_eq!(
        h.counts(want.keys()).await,
        want,
        "counts equal liked memberships again"
    );
    let again = reconcile::reconcile_all(&h.store, true).await.unwrap();
    assert!(
        again.iter().all(|r| r.difference() == 0 && !r.repaired),
        "{again:?}"
    );
}

/// Adds `delta` to counter shard `k` of `post` behind hotcount's back.
async fn corrupt(h: &Harness, post: &str, k: u32, delta: i64) {
    use fs::document_transform::field_transform::TransformType;
    use gcloud_sdk::google::firestore::v1 as fs;
    let name = h.store.layout().counter_shard(post, k);
    let write = fs::Write {
        operation: Some(fs::write::Operation::Update(fs::Document {
            name,
            ..Default::default()
        })),
        update_mask: Some(fs::DocumentMask {
            field_paths: vec![],
        }),
        update_transforms: vec![fs::document_transform::FieldTransform {
            field_path: "likes".into(),
            transform_type: Some(TransformType::Increment(fs::Value {
                value_type: Some(fs::value::ValueType::IntegerValue(delta)),
            })),
        }],
        current_document: None,
    };
    h.store
        .client()
        .commit(fs::CommitRequest {
            database: h.store.layout().database.clone(),
            writes: vec![write],
            ..Default::default()
        })
        .await
        .expect("corrupting commit");
}
