//! Delivery semantics of the Pub/Sub emulator, proven with Google's own Rust
//! clients (`google-cloud-pubsub`) and, where the protocol itself is under
//! test, a raw gRPC client.
mod pubsub_support;

use pubsub_support::*;

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
    let err = stale
        .confirmed_ack()
        .await
        .expect_err("stale ack id rejected");
    assert!(
        format!("{err:?}").contains("PERMANENT_FAILURE_INVALID_ACK_ID"),
        "{err:?}"
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
    // Consumers run until the emulator has every message acked (not until
    // some quiet time passes, which a busy machine can fake mid-backlog).
    let (stop, stopped) = tokio::sync::watch::channel(false);
    let consume = |stream: MessageStream| {
        let mut stopped = stopped.clone();
        async move {
            let mut stream = stream;
            let mut got = Vec::new();
            loop {
                tokio::select! {
                    _ = stopped.wait_for(|s| *s) => break,
                    item = stream.next() => match item {
                        Some(Ok((m, h))) => {
                            got.push(m.message_id.clone());
                            h.ack();
                        }
                        other => panic!("the stream ended early: {other:?}"),
                    },
                }
            }
            got
        }
    };
    let all_acked = async {
        let pubsub = env.emu.pubsub();
        eventually_that("every message acked", || {
            let stats = pubsub.stats(&sub).unwrap();
            stats.acks == 2000 && stats.unacked == 0
        })
        .await;
        stop.send(true).unwrap();
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
    let (got_a, got_b, ()) = tokio::join!(consume(a), consume(b), all_acked);
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

#[tokio::test]
async fn seek_to_snapshot_restores_its_unacked_messages_and_later_ones() {
    let env = Env::start().await;
    let (topic, sub) = env.subscription("snap", |r| r).await;
    let before = env.publish(&topic, &["before-snapshot"]).await;
    let snapshot = format!("projects/{PROJECT}/snapshots/snap-1");
    let created = env
        .subs
        .create_snapshot()
        .set_name(&snapshot)
        .set_subscription(&sub)
        .send()
        .await
        .unwrap();
    assert_eq!(created.topic, topic);
    let after = env.publish(&topic, &["after-snapshot"]).await;
    let mut stream = env.stream(&sub);
    for _ in 0..2 {
        next(&mut stream).await.1.ack();
    }
    eventually(|| env.emu.pubsub().stats(&sub).unwrap().unacked == 0).await;
    env.subs
        .seek()
        .set_subscription(&sub)
        .set_snapshot(&snapshot)
        .send()
        .await
        .unwrap();
    let mut replayed = BTreeSet::new();
    for _ in 0..2 {
        let (m, h) = next(&mut stream).await;
        replayed.insert(m.message_id.clone());
        h.ack();
    }
    assert_eq!(replayed, before.into_iter().chain(after).collect());
    let other = env.topic("other-topic").await;
    let foreign = format!("projects/{PROJECT}/subscriptions/foreign");
    env.subs
        .create_subscription()
        .set_name(&foreign)
        .set_topic(&other)
        .send()
        .await
        .unwrap();
    let err = env
        .subs
        .seek()
        .set_subscription(&foreign)
        .set_snapshot(&snapshot)
        .send()
        .await
        .unwrap_err();
    assert_eq!(
        err.status().unwrap().code,
        google_cloud_gax::error::rpc::Code::InvalidArgument
    );
    env.subs
        .delete_snapshot()
        .set_snapshot(&snapshot)
        .send()
        .await
        .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_message_is_lost_under_expiry_churn() {
    // Leases of 10 emulated seconds last 1.25 s here, shorter than the
    // client's 3 s extension period: what one slow consumer holds expires and
    // is redelivered to the others while everyone keeps acking (stale ack ids
    // included). Every message must end up acked, none lost.
    let env = Env::with_config(EmulatorsConfig {
        time_scale: 8.0,
        ..Default::default()
    })
    .await;
    let (topic, sub) = env.subscription("churn", |r| r).await;
    let payloads: Vec<String> = (0..200).map(|i| format!("m{i}")).collect();
    let refs: Vec<&str> = payloads.iter().map(String::as_str).collect();
    let published: BTreeSet<String> = env.publish(&topic, &refs).await.into_iter().collect();
    let mut consumers = Vec::new();
    for i in 0..3u64 {
        let mut stream = env
            .subscriber
            .subscribe(&sub)
            .set_max_lease_extension(Duration::from_secs(10))
            .set_max_outstanding_messages(20)
            .build();
        consumers.push(tokio::spawn(async move {
            let mut n = 0u64;
            while let Ok(Some(Ok((_, h)))) = tokio::time::timeout(PATIENCE, stream.next()).await {
                n += 1;
                // Consumer 0 holds its first messages past their leases.
                let hold = if i == 0 && n <= 3 { 2000 } else { n % 20 };
                tokio::time::sleep(Duration::from_millis(hold)).await;
                h.ack();
            }
        }));
    }
    let pubsub = env.emu.pubsub().clone();
    let give_up = Instant::now() + Duration::from_secs(30);
    while pubsub.stats(&sub).unwrap().unacked > 0 {
        if Instant::now() > give_up {
            let unacked = pubsub.unacked(&sub).unwrap();
            panic!(
                "messages left unacked: {:?}\n{:?}",
                pubsub.stats(&sub),
                &unacked[..unacked.len().min(5)]
            );
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    for c in consumers {
        c.abort();
    }
    let acked: BTreeSet<String> = pubsub
        .ack_log(&sub)
        .unwrap()
        .into_iter()
        .map(|r| r.message_id)
        .collect();
    assert_eq!(acked, published);
    let stats = pubsub.stats(&sub).unwrap();
    assert!(stats.expiries > 0, "the churn really happened: {stats:?}");
}

#[tokio::test]
async fn stats_count_the_bytes_published_and_each_delivery_again() {
    let env = Env::start().await;
    let (topic, sub) = env.subscription("bytes", |r| r).await;
    env.publish(&topic, &["hello", "hi"]).await;
    let mut stream = env.stream(&sub);
    let (_, first) = next(&mut stream).await;
    let (_, second) = next(&mut stream).await;
    first.nack();
    let (_, again) = next(&mut stream).await;
    second.ack();
    again.ack();
    let stats = env.emu.pubsub().stats(&sub).unwrap();
    assert_eq!(
        stats.published_bytes, 7,
        "data, no attributes, no ordering key"
    );
    assert_eq!(stats.delivered, 3);
    assert!(
        stats.delivered_bytes == 7 + 5 || stats.delivered_bytes == 7 + 2,
        "a redelivery counts its bytes again: {}",
        stats.delivered_bytes
    );
}
