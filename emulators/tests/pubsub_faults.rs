//! Each injected Pub/Sub fault, observed from the client side.
mod pubsub_support;

use pubsub_support::*;

#[tokio::test]
async fn injected_error_reaches_the_publisher() {
    let env = Env::start().await;
    let topic = env.topic("err-topic").await;
    env.emu
        .pubsub_faults()
        .add(FaultSpec::error("Publish", Code::PermissionDenied).times(1))
        .unwrap();
    let publisher = env.publisher(&topic).await;
    let err = publisher
        .publish(Message::new().set_data("x"))
        .await
        .unwrap_err();
    assert!(format!("{err:?}").contains("PermissionDenied"), "{err:?}");
    assert!(publisher
        .publish(Message::new().set_data("y"))
        .await
        .is_ok());
}

#[tokio::test]
async fn injected_latency_slows_the_call() {
    let env = Env::start().await;
    let topic = env.topic("slow-topic").await;
    let publisher = env.publisher(&topic).await;
    publisher
        .publish(Message::new().set_data("warm"))
        .await
        .unwrap();
    env.emu
        .pubsub_faults()
        .add(FaultSpec::latency("Publish", Duration::from_millis(300)).times(1))
        .unwrap();
    let start = Instant::now();
    publisher
        .publish(Message::new().set_data("x"))
        .await
        .unwrap();
    assert!(start.elapsed() >= Duration::from_millis(300));
}

#[tokio::test]
async fn dropped_stream_reconnects_and_keeps_receiving() {
    let env = Env::start().await;
    let (topic, sub) = env.subscription("drop", |r| r).await;
    env.publish(&topic, &["before"]).await;
    let mut stream = env.stream(&sub);
    let (_, h) = next(&mut stream).await;
    h.ack();
    // The ack must land before the drop, or "before" comes back first.
    eventually_that("the ack of \"before\" reached the emulator", || {
        env.emu.pubsub().stats(&sub).unwrap().acks == 1
    })
    .await;
    env.emu
        .pubsub_faults()
        .add(FaultSpec::new(FaultKind::DropStream).times(1))
        .unwrap();
    eventually_that("the stream was dropped", || {
        env.emu
            .pubsub_faults()
            .fired()
            .get(&FaultKind::DropStream)
            .is_some_and(|n| *n == 1)
    })
    .await;
    env.publish(&topic, &["after"]).await;
    let (m, h) = next(&mut stream).await;
    assert_eq!(data(&m), "after");
    h.ack();
    assert_eq!(env.emu.pubsub_faults().fired()[&FaultKind::DropStream], 1);
    assert!(
        env.emu.pubsub_counters().get("StreamingPull") >= 2,
        "client reconnected"
    );
}

#[tokio::test]
async fn lost_ack_message_returns_after_deadline() {
    let env = Env::start().await;
    let (topic, sub) = env.subscription("lost-ack", |r| r).await;
    let ids = env.publish(&topic, &["again"]).await;
    env.emu
        .pubsub_faults()
        .add(FaultSpec::new(FaultKind::AckLost).times(1))
        .unwrap();
    let mut stream = env.stream(&sub);
    let (_, h) = next(&mut stream).await;
    h.ack();
    eventually(|| env.emu.pubsub().stats(&sub).unwrap().acks_lost == 1).await;
    env.emu.clock().advance(Duration::from_secs(11));
    let (m, h) = next(&mut stream).await;
    assert_eq!(m.message_id, ids[0]);
    h.ack();
}

#[tokio::test]
async fn spurious_redelivery_delivers_an_acked_message_again() {
    let env = Env::start().await;
    let (topic, sub) = env.subscription("spurious", |r| r).await;
    let ids = env.publish(&topic, &["twice"]).await;
    env.emu
        .pubsub_faults()
        .add(FaultSpec::new(FaultKind::SpuriousRedelivery).times(1))
        .unwrap();
    let mut stream = env.stream(&sub);
    let (_, h) = next(&mut stream).await;
    h.ack();
    let (m, h) = next(&mut stream).await;
    assert_eq!(m.message_id, ids[0]);
    h.ack();
    let pubsub = env.emu.pubsub();
    eventually(|| pubsub.stats(&sub).unwrap().acks == 2).await;
    assert_eq!(pubsub.stats(&sub).unwrap().spurious_redeliveries, 1);
}

#[tokio::test]
async fn error_after_apply_on_publish_makes_a_publisher_duplicate() {
    let env = Env::start().await;
    let (topic, sub) = env.subscription("dup-publish", |r| r).await;
    env.emu
        .pubsub_faults()
        .add(FaultSpec::error_after_apply("Publish", Code::Unavailable).times(1))
        .unwrap();
    let publisher = env.publisher(&topic).await;
    publisher
        .publish(Message::new().set_data("once"))
        .await
        .expect("the client retries UNAVAILABLE");
    let mut stream = env.stream(&sub);
    let mut ids = Vec::new();
    for _ in 0..2 {
        let (m, h) = next(&mut stream).await;
        assert_eq!(data(&m), "once");
        ids.push(m.message_id.clone());
        h.ack();
    }
    assert_ne!(ids[0], ids[1], "two messages with two ids");
}

#[tokio::test]
async fn stream_max_lifetime_closes_streams_with_unavailable() {
    let mut config = EmulatorsConfig::default();
    config.pubsub.stream_max_lifetime = Some(Duration::from_secs(60));
    let env = Env::with_config(config).await;
    let (_, sub) = env.subscription("lifetime", |r| r).await;
    let mut raw = env.raw_subscriber().await;
    let first = pb::StreamingPullRequest {
        subscription: sub,
        stream_ack_deadline_seconds: 10,
        ..Default::default()
    };
    use futures::StreamExt as _;
    let mut responses = raw
        .streaming_pull(futures::stream::iter(vec![first]).chain(futures::stream::pending()))
        .await
        .unwrap()
        .into_inner();
    env.emu.clock().advance(Duration::from_secs(61));
    let end = tokio::time::timeout(PATIENCE, responses.message())
        .await
        .unwrap();
    assert_eq!(end.unwrap_err().code(), Code::Unavailable);
}
