//! The Pub/Sub emulator against Google's own Rust clients (`google-cloud-pubsub`:
//! gRPC Publisher/Subscriber, REST TopicAdmin/SubscriptionAdmin), plus a raw
//! gRPC client where the protocol itself is under test.
use std::collections::{BTreeSet, HashMap};
use std::time::{Duration, Instant};

use gcloud_sdk::google::pubsub::v1 as pb;
use gcloud_sdk::google::pubsub::v1::publisher_client::PublisherClient;
use gcloud_sdk::google::pubsub::v1::subscriber_client::SubscriberClient;
use google_cloud_auth::credentials::anonymous::Builder as Anonymous;
use google_cloud_pubsub::client::{Publisher, Subscriber, SubscriptionAdmin, TopicAdmin};
use google_cloud_pubsub::model::{DeadLetterPolicy, Message};
use google_cloud_pubsub::subscriber::handler::Handler;
use google_cloud_pubsub::subscriber::MessageStream;
use hotcount_emulators::{Emulators, EmulatorsConfig, FaultKind, FaultSpec};
use prost::Message as _;
use tonic::transport::Channel;
use tonic::Code;

const PROJECT: &str = "test-project";
/// Longest real time any single wait in these tests may take.
const PATIENCE: Duration = Duration::from_secs(10);

struct Env {
    emu: Emulators,
    topics: TopicAdmin,
    subs: SubscriptionAdmin,
    subscriber: Subscriber,
}

impl Env {
    async fn start() -> Self {
        Self::with_config(EmulatorsConfig::default()).await
    }

    async fn with_config(config: EmulatorsConfig) -> Self {
        let emu = Emulators::start(config).await.unwrap();
        let endpoint = emu.pubsub_endpoint();
        let topics = TopicAdmin::builder()
            .with_endpoint(&endpoint)
            .with_credentials(Anonymous::new().build())
            .build()
            .await
            .unwrap();
        let subs = SubscriptionAdmin::builder()
            .with_endpoint(&endpoint)
            .with_credentials(Anonymous::new().build())
            .build()
            .await
            .unwrap();
        let subscriber = Subscriber::builder()
            .with_endpoint(&endpoint)
            .with_credentials(Anonymous::new().build())
            .build()
            .await
            .unwrap();
        Self {
            emu,
            topics,
            subs,
            subscriber,
        }
    }

    async fn topic(&self, id: &str) -> String {
        let name = format!("projects/{PROJECT}/topics/{id}");
        self.topics
            .create_topic()
            .set_name(&name)
            .send()
            .await
            .unwrap();
        name
    }

    /// A topic and a subscription on it; `edit` adjusts the subscription.
    async fn subscription(
        &self,
        id: &str,
        edit: impl FnOnce(
            google_cloud_pubsub::builder::subscription_admin::CreateSubscription,
        )
            -> google_cloud_pubsub::builder::subscription_admin::CreateSubscription,
    ) -> (String, String) {
        let topic = self.topic(&format!("{id}-topic")).await;
        let name = format!("projects/{PROJECT}/subscriptions/{id}");
        let request = self
            .subs
            .create_subscription()
            .set_name(&name)
            .set_topic(&topic);
        edit(request).send().await.unwrap();
        (topic, name)
    }

    async fn publisher(&self, topic: &str) -> Publisher {
        Publisher::builder(topic)
            .with_endpoint(self.emu.pubsub_endpoint())
            .with_credentials(Anonymous::new().build())
            .set_delay_threshold(Duration::from_millis(1))
            .build()
            .await
            .unwrap()
    }

    async fn publish(&self, topic: &str, payloads: &[&str]) -> Vec<String> {
        let publisher = self.publisher(topic).await;
        let futures: Vec<_> = payloads
            .iter()
            .map(|p| publisher.publish(Message::new().set_data(p.to_string())))
            .collect();
        let mut ids = Vec::new();
        for f in futures {
            ids.push(f.await.unwrap());
        }
        ids
    }

    fn stream(&self, sub: &str) -> MessageStream {
        self.subscriber
            .subscribe(sub)
            .set_max_lease_extension(Duration::from_secs(10))
            .build()
    }

    async fn raw_subscriber(&self) -> SubscriberClient<Channel> {
        SubscriberClient::connect(self.emu.pubsub_endpoint())
            .await
            .unwrap()
    }

    async fn raw_publisher(&self) -> PublisherClient<Channel> {
        PublisherClient::connect(self.emu.pubsub_endpoint())
            .await
            .unwrap()
    }
}

async fn next(stream: &mut MessageStream) -> (Message, Handler) {
    tokio::time::timeout(PATIENCE, stream.next())
        .await
        .expect("a message within the patience window")
        .expect("the stream is open")
        .expect("no stream error")
}

/// Waits (bounded) until `cond` holds: client acks are asynchronous.
async fn eventually(cond: impl Fn() -> bool) {
    let give_up = Instant::now() + PATIENCE;
    while !cond() {
        assert!(Instant::now() < give_up, "condition never became true");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// Receives nothing for `wait`.
async fn quiet(stream: &mut MessageStream, wait: Duration) -> bool {
    tokio::time::timeout(wait, stream.next()).await.is_err()
}

fn data(m: &Message) -> String {
    String::from_utf8_lossy(&m.data).into_owned()
}

fn with_dead_letter(
    dlq: &str,
    attempts: i32,
) -> impl FnOnce(
    google_cloud_pubsub::builder::subscription_admin::CreateSubscription,
) -> google_cloud_pubsub::builder::subscription_admin::CreateSubscription {
    let policy = DeadLetterPolicy::new()
        .set_dead_letter_topic(dlq)
        .set_max_delivery_attempts(attempts);
    move |r| r.set_dead_letter_policy(policy)
}

#[tokio::test]
async fn redelivers_after_ack_deadline_expires() {
    let env = Env::start().await;
    let (topic, sub) = env.subscription("expiry", |r| r).await;
    let ids = env.publish(&topic, &["hello"]).await;
    let mut stream = env.stream(&sub);
    let (first, held) = next(&mut stream).await;
    assert_eq!(first.message_id, ids[0]);
    env.emu.clock().advance(Duration::from_secs(11));
    let (again, h) = next(&mut stream).await;
    assert_eq!(again.message_id, ids[0]);
    h.ack();
    drop(held);
    let stats = env.emu.pubsub().stats(&sub).unwrap();
    assert_eq!(stats.expiries, 1);
    assert_eq!(stats.redeliveries, 1);
}

#[tokio::test]
async fn nack_redelivers_with_delivery_attempt_two() {
    let env = Env::start().await;
    let dlq = env.topic("nack-dlq").await;
    let (topic, sub) = env.subscription("nack", with_dead_letter(&dlq, 5)).await;
    env.publish(&topic, &["retry me"]).await;
    let mut stream = env.stream(&sub);
    let (m, h) = next(&mut stream).await;
    assert_eq!(h.delivery_attempt(), Some(1));
    h.nack();
    let (again, h) = next(&mut stream).await;
    assert_eq!(again.message_id, m.message_id);
    assert_eq!(h.delivery_attempt(), Some(2));
    h.ack();
}

#[tokio::test]
async fn delivery_attempt_is_absent_without_dead_letter_policy() {
    let env = Env::start().await;
    let (topic, sub) = env.subscription("no-dlq", |r| r).await;
    env.publish(&topic, &["x"]).await;
    let mut stream = env.stream(&sub);
    let (_, h) = next(&mut stream).await;
    assert_eq!(h.delivery_attempt(), None);
    h.nack();
    let (_, h) = next(&mut stream).await;
    assert_eq!(h.delivery_attempt(), None);
    h.ack();
}

#[tokio::test]
async fn dead_letters_after_max_delivery_attempts_with_attributes() {
    let env = Env::start().await;
    let dlq = env.topic("poison-dlq").await;
    let dlq_sub = format!("projects/{PROJECT}/subscriptions/poison-dlq-sub");
    env.subs
        .create_subscription()
        .set_name(&dlq_sub)
        .set_topic(&dlq)
        .send()
        .await
        .unwrap();
    let (topic, sub) = env.subscription("poison", with_dead_letter(&dlq, 5)).await;
    let ids = env.publish(&topic, &["poison"]).await;
    let mut stream = env.stream(&sub);
    for attempt in 1..=5 {
        let (m, h) = next(&mut stream).await;
        assert_eq!(m.message_id, ids[0]);
        assert_eq!(h.delivery_attempt(), Some(attempt));
        h.nack();
    }
    let mut dead = env.stream(&dlq_sub);
    let (m, h) = next(&mut dead).await;
    h.ack();
    assert_eq!(data(&m), "poison");
    let attrs = &m.attributes;
    assert_eq!(attrs["CloudPubSubDeadLetterSourceDeliveryCount"], "5");
    assert_eq!(attrs["CloudPubSubDeadLetterSourceSubscription"], "poison");
    assert_eq!(
        attrs["CloudPubSubDeadLetterSourceSubscriptionProject"],
        PROJECT
    );
    assert!(attrs.contains_key("CloudPubSubDeadLetterSourceTopicPublishTime"));
    assert!(quiet(&mut stream, Duration::from_millis(300)).await);
    let stats = env.emu.pubsub().stats(&sub).unwrap();
    assert_eq!((stats.dead_lettered, stats.unacked), (1, 0));
}

#[tokio::test]
async fn retry_policy_delays_redelivery_by_backoff() {
    let env = Env::start().await;
    let topic = env.topic("backoff-topic").await;
    let sub = format!("projects/{PROJECT}/subscriptions/backoff");
    let mut raw = env.raw_subscriber().await;
    raw.create_subscription(pb::Subscription {
        name: sub.clone(),
        topic: topic.clone(),
        retry_policy: Some(pb::RetryPolicy {
            minimum_backoff: Some(prost_types::Duration {
                seconds: 30,
                nanos: 0,
            }),
            maximum_backoff: Some(prost_types::Duration {
                seconds: 60,
                nanos: 0,
            }),
        }),
        ..Default::default()
    })
    .await
    .unwrap();
    env.publish(&topic, &["later"]).await;
    let pull = |raw: &mut SubscriberClient<Channel>| {
        let mut raw = raw.clone();
        let sub = sub.clone();
        async move {
            raw.pull(pb::PullRequest {
                subscription: sub,
                max_messages: 10,
                ..Default::default()
            })
            .await
            .unwrap()
            .into_inner()
            .received_messages
        }
    };
    let got = pull(&mut raw).await;
    assert_eq!(got.len(), 1);
    raw.modify_ack_deadline(pb::ModifyAckDeadlineRequest {
        subscription: sub.clone(),
        ack_ids: vec![got[0].ack_id.clone()],
        ack_deadline_seconds: 0,
    })
    .await
    .unwrap();
    assert!(pull(&mut raw).await.is_empty(), "still backing off");
    env.emu.clock().advance(Duration::from_secs(31));
    assert_eq!(pull(&mut raw).await.len(), 1);
    assert_eq!(env.emu.pubsub().unacked(&sub).unwrap()[0].state, "leased");
}

#[tokio::test]
async fn exactly_once_confirmed_ack_succeeds_and_stale_ack_id_is_rejected() {
    let env = Env::start().await;
    let (topic, sub) = env
        .subscription("eod", |r| r.set_enable_exactly_once_delivery(true))
        .await;
    env.publish(&topic, &["one"]).await;
    let mut stream = env.stream(&sub);
    let (_, h) = next(&mut stream).await;
    let Handler::ExactlyOnce(h) = h else {
        panic!("the subscription has exactly-once delivery")
    };
    h.confirmed_ack()
        .await
        .expect("a fresh ack id is confirmed");

    env.publish(&topic, &["two"]).await;
    let (m1, stale) = next(&mut stream).await;
    env.emu.clock().advance(Duration::from_secs(11));
    let (m2, fresh) = next(&mut stream).await;
    assert_eq!(m1.message_id, m2.message_id);
    let (Handler::ExactlyOnce(stale), Handler::ExactlyOnce(fresh)) = (stale, fresh) else {
        panic!("exactly-once handlers")
    };
    assert!(
        stale.confirmed_ack().await.is_err(),
        "stale ack id rejected"
    );
    fresh.confirmed_ack().await.expect("newest ack id is valid");
    let log = env.emu.pubsub().ack_log(&sub).unwrap();
    assert_eq!(log.len(), 2);
    assert_eq!(log[1].message_id, m2.message_id);
}

#[tokio::test]
async fn exactly_once_unary_ack_of_unknown_id_carries_error_info() {
    let env = Env::start().await;
    let (_, sub) = env
        .subscription("eod-raw", |r| r.set_enable_exactly_once_delivery(true))
        .await;
    let mut raw = env.raw_subscriber().await;
    let err = raw
        .acknowledge(pb::AcknowledgeRequest {
            subscription: sub.clone(),
            ack_ids: vec!["1-42-7".into()],
        })
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::InvalidArgument);
    let status = gcloud_sdk::google::rpc::Status::decode(err.details()).unwrap();
    let info =
        gcloud_sdk::google::rpc::ErrorInfo::decode(status.details[0].value.as_slice()).unwrap();
    assert_eq!(info.reason, "EXACTLY_ONCE_ACKID_FAILURE");
    assert_eq!(info.metadata["1-42-7"], "PERMANENT_FAILURE_INVALID_ACK_ID");
}

#[tokio::test]
async fn at_least_once_ack_of_unknown_id_is_ok() {
    let env = Env::start().await;
    let (_, sub) = env.subscription("alo-raw", |r| r).await;
    let mut raw = env.raw_subscriber().await;
    raw.acknowledge(pb::AcknowledgeRequest {
        subscription: sub.clone(),
        ack_ids: vec!["1-42-7".into()],
    })
    .await
    .unwrap();
    let err = raw
        .acknowledge(pb::AcknowledgeRequest {
            subscription: sub,
            ack_ids: vec!["garbage".into()],
        })
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::InvalidArgument);
}

#[tokio::test]
async fn flow_control_never_exceeds_max_outstanding_messages() {
    let env = Env::start().await;
    let (topic, sub) = env.subscription("flow", |r| r).await;
    let payloads: Vec<String> = (0..40).map(|i| format!("m{i}")).collect();
    let refs: Vec<&str> = payloads.iter().map(String::as_str).collect();
    env.publish(&topic, &refs).await;
    let mut stream = env
        .subscriber
        .subscribe(&sub)
        .set_max_outstanding_messages(5)
        .build();
    let mut held = Vec::new();
    for _ in 0..5 {
        held.push(next(&mut stream).await);
    }
    assert!(quiet(&mut stream, Duration::from_millis(300)).await);
    let stats = env.emu.pubsub().stats(&sub).unwrap();
    assert_eq!((stats.delivered, stats.outstanding), (5, 5));
    for (_, h) in held.drain(..) {
        h.ack();
    }
    let mut seen = 5;
    while seen < 40 {
        let (_, h) = next(&mut stream).await;
        h.ack();
        seen += 1;
    }
    eventually(|| env.emu.pubsub().stats(&sub).unwrap().acks == 40).await;
    let stats = env.emu.pubsub().stats(&sub).unwrap();
    assert_eq!(stats.max_stream_outstanding_messages, 5);
    assert_eq!(stats.delivered, 40);
}

#[tokio::test]
async fn competing_subscribers_share_backlog_without_loss() {
    let env = Env::start().await;
    let (topic, sub) = env.subscription("shared", |r| r).await;
    let payloads: Vec<String> = (0..2000).map(|i| format!("m{i}")).collect();
    let refs: Vec<&str> = payloads.iter().map(String::as_str).collect();
    let published: BTreeSet<String> = env.publish(&topic, &refs).await.into_iter().collect();
    let consume = |stream: MessageStream| async move {
        let mut stream = stream;
        let mut got = Vec::new();
        while let Ok(Some(Ok((m, h)))) =
            tokio::time::timeout(Duration::from_millis(500), stream.next()).await
        {
            got.push(m.message_id.clone());
            h.ack();
        }
        got
    };
    let a = env
        .subscriber
        .subscribe(&sub)
        .set_max_outstanding_messages(50)
        .build();
    let b = env
        .subscriber
        .subscribe(&sub)
        .set_max_outstanding_messages(50)
        .build();
    let (got_a, got_b) = tokio::join!(consume(a), consume(b));
    assert!(
        !got_a.is_empty() && !got_b.is_empty(),
        "both consumers got work"
    );
    let mut all: Vec<String> = got_a.into_iter().chain(got_b).collect();
    let total = all.len();
    all.sort();
    all.dedup();
    assert_eq!(all.len(), total, "no message delivered twice");
    assert_eq!(
        all.into_iter().collect::<BTreeSet<_>>(),
        published,
        "no message lost"
    );
    assert_eq!(env.emu.pubsub().stats(&sub).unwrap().redeliveries, 0);
}

#[tokio::test]
async fn seek_to_time_replays_acked_messages() {
    let env = Env::start().await;
    let (topic, sub) = env
        .subscription("seek", |r| r.set_retain_acked_messages(true))
        .await;
    let before = google_cloud_wkt::Timestamp::try_from(
        std::time::SystemTime::now() - Duration::from_secs(1),
    )
    .unwrap();
    let ids = env.publish(&topic, &["a", "b", "c"]).await;
    let mut stream = env.stream(&sub);
    for _ in 0..3 {
        next(&mut stream).await.1.ack();
    }
    eventually(|| env.emu.pubsub().stats(&sub).unwrap().acks == 3).await;
    env.subs
        .seek()
        .set_subscription(&sub)
        .set_time(before)
        .send()
        .await
        .unwrap();
    let mut replayed = BTreeSet::new();
    for _ in 0..3 {
        let (m, h) = next(&mut stream).await;
        replayed.insert(m.message_id.clone());
        h.ack();
    }
    assert_eq!(replayed, ids.into_iter().collect());
}

#[tokio::test]
async fn creating_an_existing_topic_or_subscription_is_already_exists() {
    let env = Env::start().await;
    let (topic, sub) = env.subscription("dup", |r| r).await;
    let err = env
        .topics
        .create_topic()
        .set_name(&topic)
        .send()
        .await
        .unwrap_err();
    assert_eq!(err.http_status_code(), Some(409));
    assert_eq!(
        err.status().unwrap().code,
        google_cloud_gax::error::rpc::Code::AlreadyExists
    );
    let err = env
        .subs
        .create_subscription()
        .set_name(&sub)
        .set_topic(&topic)
        .send()
        .await
        .unwrap_err();
    assert_eq!(
        err.status().unwrap().code,
        google_cloud_gax::error::rpc::Code::AlreadyExists
    );
    let missing = format!("projects/{PROJECT}/subscriptions/orphan");
    let err = env
        .subs
        .create_subscription()
        .set_name(&missing)
        .set_topic(format!("projects/{PROJECT}/topics/nope"))
        .send()
        .await
        .unwrap_err();
    assert_eq!(
        err.status().unwrap().code,
        google_cloud_gax::error::rpc::Code::NotFound
    );
    let got = env
        .subs
        .get_subscription()
        .set_subscription(&sub)
        .send()
        .await
        .unwrap();
    assert_eq!(got.ack_deadline_seconds, 10);
}

#[tokio::test]
async fn invalid_names_and_settings_are_invalid_argument() {
    let env = Env::start().await;
    let err = env
        .topics
        .create_topic()
        .set_name(format!("projects/{PROJECT}/topics/goog-reserved"))
        .send()
        .await
        .unwrap_err();
    assert_eq!(
        err.status().unwrap().code,
        google_cloud_gax::error::rpc::Code::InvalidArgument
    );
    let topic = env.topic("valid-topic").await;
    let err = env
        .subs
        .create_subscription()
        .set_name(format!("projects/{PROJECT}/subscriptions/bad-deadline"))
        .set_topic(&topic)
        .set_ack_deadline_seconds(601)
        .send()
        .await
        .unwrap_err();
    assert_eq!(
        err.status().unwrap().code,
        google_cloud_gax::error::rpc::Code::InvalidArgument
    );
    let mut raw = env.raw_publisher().await;
    let err = raw
        .create_topic(pb::Topic {
            name: "projects/p/topics/1starts-with-digit".into(),
            ..Default::default()
        })
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::InvalidArgument);
}

#[tokio::test]
async fn streaming_pull_checks_its_first_request() {
    let env = Env::start().await;
    let (_, sub) = env.subscription("first-req", |r| r).await;
    let mut raw = env.raw_subscriber().await;
    let open = |deadline: i32| {
        let first = pb::StreamingPullRequest {
            subscription: sub.clone(),
            stream_ack_deadline_seconds: deadline,
            ..Default::default()
        };
        futures::stream::iter(vec![first]).chain(futures::stream::pending())
    };
    use futures::StreamExt as _;
    let err = raw.streaming_pull(open(5)).await.unwrap_err();
    assert_eq!(err.code(), Code::InvalidArgument);
    assert!(raw.streaming_pull(open(10)).await.is_ok());
}

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
    env.emu
        .pubsub_faults()
        .add(FaultSpec::new(FaultKind::DropStream).times(1))
        .unwrap();
    tokio::time::sleep(Duration::from_millis(200)).await;
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
async fn deleted_subscription_ends_the_stream_with_not_found() {
    let env = Env::start().await;
    let (_, sub) = env.subscription("gone", |r| r).await;
    let mut raw = env.raw_subscriber().await;
    let first = pb::StreamingPullRequest {
        subscription: sub.clone(),
        stream_ack_deadline_seconds: 10,
        ..Default::default()
    };
    use futures::StreamExt as _;
    let mut responses = raw
        .streaming_pull(futures::stream::iter(vec![first]).chain(futures::stream::pending()))
        .await
        .unwrap()
        .into_inner();
    env.subs
        .delete_subscription()
        .set_subscription(&sub)
        .send()
        .await
        .unwrap();
    let end = tokio::time::timeout(PATIENCE, responses.message())
        .await
        .unwrap();
    assert_eq!(end.unwrap_err().code(), Code::NotFound);
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

#[tokio::test]
async fn rest_publish_pull_and_ack_round_trip() {
    let env = Env::start().await;
    let (topic, sub) = env.subscription("rest", |r| r).await;
    let base = env.emu.pubsub_endpoint();
    let http = |method: &str, path: String, body: &str| {
        let method = method.to_string();
        let body = body.to_string();
        let url = format!("{base}/v1/{path}");
        async move { raw_http(&method, &url, &body).await }
    };
    let (code, body) = http(
        "POST",
        format!("{topic}:publish"),
        r#"{"messages":[{"data":"aGk=","attributes":{"k":"v"}}]}"#,
    )
    .await;
    assert_eq!(code, 200, "{body}");
    let (code, body) = http("POST", format!("{sub}:pull"), r#"{"maxMessages":5}"#).await;
    assert_eq!(code, 200, "{body}");
    let v: serde_json::Value = serde_json::from_str(&body).unwrap();
    let received = &v["receivedMessages"][0];
    assert_eq!(received["message"]["data"], "aGk=");
    assert_eq!(received["message"]["attributes"]["k"], "v");
    let ack_id = received["ackId"].as_str().unwrap();
    let (code, _) = http(
        "POST",
        format!("{sub}:acknowledge"),
        &format!(r#"{{"ackIds":["{ack_id}"]}}"#),
    )
    .await;
    assert_eq!(code, 200);
    let (code, body) = http("GET", format!("projects/{PROJECT}/subscriptions/nope"), "").await;
    assert_eq!(code, 404);
    assert!(body.contains("\"NOT_FOUND\""), "{body}");
    let (code, body) = http("GET", "projects/test-project/subscriptions".into(), "").await;
    assert_eq!(code, 200);
    assert!(body.contains(&sub));
    assert_eq!(env.emu.pubsub().stats(&sub).unwrap().acks, 1);
    let acks: HashMap<String, serde_json::Value> = serde_json::from_str(
        &raw_http(
            "GET",
            &format!("{base}/emulator/v1/pubsub/acks?subscription={sub}"),
            "",
        )
        .await
        .1,
    )
    .unwrap();
    assert_eq!(acks["acks"].as_array().unwrap().len(), 1);
}

/// A minimal HTTP/1.1 request (no client crate needed): returns (status, body).
async fn raw_http(method: &str, url: &str, body: &str) -> (u16, String) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let rest = url.strip_prefix("http://").unwrap();
    let (host, path) = rest.split_once('/').unwrap();
    let mut conn = tokio::net::TcpStream::connect(host).await.unwrap();
    let request = format!(
        "{method} /{path} HTTP/1.1\r\nHost: {host}\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    conn.write_all(request.as_bytes()).await.unwrap();
    let mut response = String::new();
    conn.read_to_string(&mut response).await.unwrap();
    let status = response[9..12].parse().unwrap();
    let body = response.split_once("\r\n\r\n").map(|x| x.1).unwrap_or("");
    (status, body.to_string())
}

#[tokio::test]
async fn ordered_key_is_redelivered_together_after_a_nack() {
    let env = Env::start().await;
    let topic = env.topic("ordered-topic").await;
    let sub = format!("projects/{PROJECT}/subscriptions/ordered");
    let mut raw = env.raw_subscriber().await;
    raw.create_subscription(pb::Subscription {
        name: sub.clone(),
        topic: topic.clone(),
        enable_message_ordering: true,
        ..Default::default()
    })
    .await
    .unwrap();
    let message = |data: &str, key: &str| pb::PubsubMessage {
        data: data.as_bytes().to_vec(),
        ordering_key: key.into(),
        ..Default::default()
    };
    let mut publisher = env.raw_publisher().await;
    for (data, key) in [("a1", "a"), ("b1", "b"), ("a2", "a"), ("a3", "a")] {
        publisher
            .publish(pb::PublishRequest {
                topic: topic.clone(),
                messages: vec![message(data, key)],
            })
            .await
            .unwrap();
    }
    let puller = raw.clone();
    let pull = |max: i32| {
        let mut raw = puller.clone();
        let sub = sub.clone();
        async move {
            let got = raw
                .pull(pb::PullRequest {
                    subscription: sub,
                    max_messages: max,
                    ..Default::default()
                })
                .await
                .unwrap()
                .into_inner()
                .received_messages;
            let data: Vec<String> = got
                .iter()
                .map(|m| String::from_utf8_lossy(&m.message.as_ref().unwrap().data).into_owned())
                .collect();
            (data, got)
        }
    };
    let (data, got) = pull(10).await;
    assert_eq!(data, ["a1", "b1", "a2", "a3"]);
    // Nack a2: a3 (leased after it) comes back with it, in order; a1 and b1 stay leased.
    raw.modify_ack_deadline(pb::ModifyAckDeadlineRequest {
        subscription: sub.clone(),
        ack_ids: vec![got[2].ack_id.clone()],
        ack_deadline_seconds: 0,
    })
    .await
    .unwrap();
    let (data, _) = pull(10).await;
    assert_eq!(data, ["a2", "a3"]);
    let states: Vec<&str> = env
        .emu
        .pubsub()
        .unacked(&sub)
        .unwrap()
        .iter()
        .map(|m| m.state)
        .collect();
    assert_eq!(states, ["leased"; 4]);
}

#[tokio::test]
async fn ordered_key_waits_behind_a_message_in_backoff() {
    let env = Env::start().await;
    let topic = env.topic("ordered-backoff-topic").await;
    let sub = format!("projects/{PROJECT}/subscriptions/ordered-backoff");
    let mut raw = env.raw_subscriber().await;
    raw.create_subscription(pb::Subscription {
        name: sub.clone(),
        topic: topic.clone(),
        enable_message_ordering: true,
        retry_policy: Some(pb::RetryPolicy {
            minimum_backoff: Some(prost_types::Duration {
                seconds: 20,
                nanos: 0,
            }),
            maximum_backoff: None,
        }),
        ..Default::default()
    })
    .await
    .unwrap();
    let mut publisher = env.raw_publisher().await;
    let publish = |data: &'static str| pb::PublishRequest {
        topic: topic.clone(),
        messages: vec![pb::PubsubMessage {
            data: data.as_bytes().to_vec(),
            ordering_key: "k".into(),
            ..Default::default()
        }],
    };
    publisher.publish(publish("first")).await.unwrap();
    let puller = raw.clone();
    let pull = || {
        let mut raw = puller.clone();
        let sub = sub.clone();
        async move {
            raw.pull(pb::PullRequest {
                subscription: sub,
                max_messages: 10,
                ..Default::default()
            })
            .await
            .unwrap()
            .into_inner()
            .received_messages
        }
    };
    let got = pull().await;
    raw.modify_ack_deadline(pb::ModifyAckDeadlineRequest {
        subscription: sub.clone(),
        ack_ids: vec![got[0].ack_id.clone()],
        ack_deadline_seconds: 0,
    })
    .await
    .unwrap();
    publisher.publish(publish("second")).await.unwrap();
    assert!(pull().await.is_empty(), "second waits behind first");
    env.emu.clock().advance(Duration::from_secs(21));
    let got = pull().await;
    let data: Vec<&[u8]> = got
        .iter()
        .map(|m| m.message.as_ref().unwrap().data.as_slice())
        .collect();
    assert_eq!(data, [&b"first"[..], &b"second"[..]]);
}

#[tokio::test]
async fn exactly_once_stream_acks_are_confirmed_with_invalid_ids_listed() {
    let env = Env::start().await;
    let (topic, sub) = env
        .subscription("eod-stream", |r| r.set_enable_exactly_once_delivery(true))
        .await;
    env.publish(&topic, &["x"]).await;
    let mut raw = env.raw_subscriber().await;
    let (tx, rx) = tokio::sync::mpsc::channel(8);
    tx.send(pb::StreamingPullRequest {
        subscription: sub.clone(),
        stream_ack_deadline_seconds: 10,
        ..Default::default()
    })
    .await
    .unwrap();
    let mut responses = raw
        .streaming_pull(tokio_stream::wrappers::ReceiverStream::new(rx))
        .await
        .unwrap()
        .into_inner();
    let first = responses.message().await.unwrap().unwrap();
    assert!(
        first
            .subscription_properties
            .unwrap()
            .exactly_once_delivery_enabled
    );
    let ack_id = first.received_messages[0].ack_id.clone();
    tx.send(pb::StreamingPullRequest {
        ack_ids: vec![ack_id.clone(), "1-999-1".into()],
        ..Default::default()
    })
    .await
    .unwrap();
    let confirmation = responses
        .message()
        .await
        .unwrap()
        .unwrap()
        .acknowledge_confirmation
        .unwrap();
    assert_eq!(confirmation.ack_ids, [ack_id]);
    assert_eq!(confirmation.invalid_ack_ids, ["1-999-1"]);
    // Setting the subscription again mid-stream aborts the stream.
    tx.send(pb::StreamingPullRequest {
        subscription: sub,
        ..Default::default()
    })
    .await
    .unwrap();
    let end = tokio::time::timeout(PATIENCE, responses.message())
        .await
        .unwrap();
    assert_eq!(end.unwrap_err().code(), Code::InvalidArgument);
}

#[tokio::test]
async fn flow_control_by_bytes_holds_back_the_next_message() {
    let env = Env::start().await;
    let (topic, sub) = env.subscription("flow-bytes", |r| r).await;
    env.publish(&topic, &["0123456789", "0123456789", "0123456789"])
        .await;
    let mut raw = env.raw_subscriber().await;
    let (tx, rx) = tokio::sync::mpsc::channel(8);
    tx.send(pb::StreamingPullRequest {
        subscription: sub.clone(),
        stream_ack_deadline_seconds: 60,
        max_outstanding_bytes: 25,
        ..Default::default()
    })
    .await
    .unwrap();
    let mut responses = raw
        .streaming_pull(tokio_stream::wrappers::ReceiverStream::new(rx))
        .await
        .unwrap()
        .into_inner();
    let first = responses.message().await.unwrap().unwrap();
    assert_eq!(first.received_messages.len(), 2, "20 of 25 bytes");
    let more = tokio::time::timeout(Duration::from_millis(300), responses.message()).await;
    assert!(more.is_err(), "third message would exceed the byte limit");
    tx.send(pb::StreamingPullRequest {
        ack_ids: vec![first.received_messages[0].ack_id.clone()],
        ..Default::default()
    })
    .await
    .unwrap();
    let next = responses.message().await.unwrap().unwrap();
    assert_eq!(next.received_messages.len(), 1);
}

#[tokio::test]
async fn rest_admin_updates_and_lists_subscriptions() {
    let env = Env::start().await;
    let (topic, sub) = env.subscription("updatable", |r| r).await;
    let updated = env
        .subs
        .update_subscription()
        .set_subscription(
            google_cloud_pubsub::model::Subscription::new()
                .set_name(&sub)
                .set_ack_deadline_seconds(30),
        )
        .set_update_mask(google_cloud_wkt::FieldMask::default().set_paths(["ack_deadline_seconds"]))
        .send()
        .await
        .unwrap();
    assert_eq!(updated.ack_deadline_seconds, 30);
    assert_eq!(updated.topic, topic);
    let listed = env
        .subs
        .list_subscriptions()
        .set_project(format!("projects/{PROJECT}"))
        .send()
        .await
        .unwrap();
    assert_eq!(listed.subscriptions.len(), 1);
    assert_eq!(listed.subscriptions[0].ack_deadline_seconds, 30);
    let err = env
        .subs
        .update_subscription()
        .set_subscription(google_cloud_pubsub::model::Subscription::new().set_name(&sub))
        .set_update_mask(google_cloud_wkt::FieldMask::default().set_paths(["topic"]))
        .send()
        .await
        .unwrap_err();
    assert_eq!(
        err.status().unwrap().code,
        google_cloud_gax::error::rpc::Code::InvalidArgument
    );
    env.topics
        .delete_topic()
        .set_topic(&topic)
        .send()
        .await
        .unwrap();
    let got = env
        .subs
        .get_subscription()
        .set_subscription(&sub)
        .send()
        .await
        .unwrap();
    assert_eq!(got.topic, "_deleted-topic_");
}

#[tokio::test]
async fn ack_id_of_one_subscription_does_not_ack_on_another() {
    let env = Env::start().await;
    let (topic, sub_a) = env.subscription("fan-a", |r| r).await;
    let sub_b = format!("projects/{PROJECT}/subscriptions/fan-b");
    env.subs
        .create_subscription()
        .set_name(&sub_b)
        .set_topic(&topic)
        .send()
        .await
        .unwrap();
    env.publish(&topic, &["both"]).await;
    let mut raw = env.raw_subscriber().await;
    let got = raw
        .pull(pb::PullRequest {
            subscription: sub_a.clone(),
            max_messages: 1,
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner()
        .received_messages;
    raw.acknowledge(pb::AcknowledgeRequest {
        subscription: sub_b.clone(),
        ack_ids: vec![got[0].ack_id.clone()],
    })
    .await
    .unwrap();
    let pubsub = env.emu.pubsub();
    assert_eq!(pubsub.stats(&sub_b).unwrap().unacked, 1);
    assert_eq!(pubsub.stats(&sub_a).unwrap().outstanding, 1);
}
