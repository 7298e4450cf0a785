//! Rough throughput of the Pub/Sub emulator with the official Rust clients:
//! publish N messages, stream them back, ack them. Asserts each is delivered
//! and acked once; prints msgs/s (a rate belongs in benchmarks, not a test).
//!
//! `PUBSUB_THROUGHPUT_MESSAGES` sets N (default 20 000, kept small so the
//! debug-build test suite stays fast); run with `--release --nocapture` and
//! N=50000 for a meaningful number.
use std::time::{Duration, Instant};

use google_cloud_auth::credentials::anonymous::Builder as Anonymous;
use google_cloud_pubsub::client::{Publisher, Subscriber, SubscriptionAdmin, TopicAdmin};
use google_cloud_pubsub::model::Message;
use hotcount_emulators::{Emulators, EmulatorsConfig};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_message_is_streamed_and_acked_once_and_the_rate_is_printed() {
    let n: usize = std::env::var("PUBSUB_THROUGHPUT_MESSAGES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(20_000);
    let emu = Emulators::start(EmulatorsConfig::default()).await.unwrap();
    let endpoint = emu.pubsub_endpoint();
    let topic = "projects/bench/topics/likes";
    let sub = "projects/bench/subscriptions/likes-sub";
    TopicAdmin::builder()
        .with_endpoint(&endpoint)
        .with_credentials(Anonymous::new().build())
        .build()
        .await
        .unwrap()
        .create_topic()
        .set_name(topic)
        .send()
        .await
        .unwrap();
    SubscriptionAdmin::builder()
        .with_endpoint(&endpoint)
        .with_credentials(Anonymous::new().build())
        .build()
        .await
        .unwrap()
        .create_subscription()
        .set_name(sub)
        .set_topic(topic)
        .send()
        .await
        .unwrap();

    let publisher = Publisher::builder(topic)
        .with_endpoint(&endpoint)
        .with_credentials(Anonymous::new().build())
        .build()
        .await
        .unwrap();
    let start = Instant::now();
    let futures: Vec<_> = (0..n)
        .map(|i| publisher.publish(Message::new().set_data(format!("{{\"post\":{i}}}"))))
        .collect();
    for f in futures {
        f.await.unwrap();
    }
    let publish_secs = start.elapsed().as_secs_f64();

    let subscriber = Subscriber::builder()
        .with_endpoint(&endpoint)
        .with_credentials(Anonymous::new().build())
        .build()
        .await
        .unwrap();
    let mut stream = subscriber.subscribe(sub).build();
    let start = Instant::now();
    let mut received = 0;
    while received < n {
        let next = tokio::time::timeout(Duration::from_secs(30), stream.next()).await;
        let (_, h) = next.unwrap().unwrap().unwrap();
        h.ack();
        received += 1;
    }
    let receive_secs = start.elapsed().as_secs_f64();
    let pubsub = emu.pubsub();
    let give_up = Instant::now() + Duration::from_secs(30);
    while pubsub.stats(sub).unwrap().acks < n as u64 {
        assert!(Instant::now() < give_up, "acks never all arrived");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let ack_secs = start.elapsed().as_secs_f64();
    println!(
        "pubsub throughput: {n} messages; publish {:.0} msgs/s; stream {:.0} msgs/s; stream+ack {:.0} msgs/s",
        n as f64 / publish_secs,
        n as f64 / receive_secs,
        n as f64 / ack_secs,
    );
    let stats = pubsub.stats(sub).unwrap();
    assert_eq!(stats.unacked, 0);
    assert_eq!(stats.delivered, n as u64, "no redeliveries at this rate");

    drop(stream);
    let (topic, sub) = (
        "projects/bench/topics/raw",
        "projects/bench/subscriptions/raw-sub",
    );
    let raw_rate = raw_stream_rate(&endpoint, topic, sub, n).await;
    println!("pubsub throughput (raw gRPC consumer, acks on the stream): {raw_rate:.0} msgs/s");
}

/// The emulator's own capacity: a thin tonic consumer that acks on the stream.
async fn raw_stream_rate(endpoint: &str, topic: &str, sub: &str, n: usize) -> f64 {
    use gcloud_sdk::google::pubsub::v1 as pb;
    let mut publisher = pb::publisher_client::PublisherClient::connect(endpoint.to_string())
        .await
        .unwrap();
    publisher
        .create_topic(pb::Topic {
            name: topic.to_string(),
            ..Default::default()
        })
        .await
        .unwrap();
    let mut subscriber = pb::subscriber_client::SubscriberClient::connect(endpoint.to_string())
        .await
        .unwrap();
    subscriber
        .create_subscription(pb::Subscription {
            name: sub.to_string(),
            topic: topic.to_string(),
            ..Default::default()
        })
        .await
        .unwrap();
    for chunk in (0..n).collect::<Vec<_>>().chunks(1000) {
        let messages = chunk
            .iter()
            .map(|i| pb::PubsubMessage {
                data: format!("{{\"post\":{i}}}").into_bytes(),
                ..Default::default()
            })
            .collect();
        publisher
            .publish(pb::PublishRequest {
                topic: topic.to_string(),
                messages,
            })
            .await
            .unwrap();
    }
    let (tx, rx) = tokio::sync::mpsc::channel(64);
    tx.send(pb::StreamingPullRequest {
        subscription: sub.to_string(),
        stream_ack_deadline_seconds: 60,
        max_outstanding_messages: 5000,
        ..Default::default()
    })
    .await
    .unwrap();
    let start = Instant::now();
    let mut responses = subscriber
        .streaming_pull(tokio_stream::wrappers::ReceiverStream::new(rx))
        .await
        .unwrap()
        .into_inner();
    let mut received = 0;
    while received < n {
        let response = responses.message().await.unwrap().unwrap();
        received += response.received_messages.len();
        let ack_ids = response
            .received_messages
            .into_iter()
            .map(|m| m.ack_id)
            .collect();
        tx.send(pb::StreamingPullRequest {
            ack_ids,
            ..Default::default()
        })
        .await
        .unwrap();
    }
    n as f64 / start.elapsed().as_secs_f64()
}
