//! The admin surface: REST (as `TopicAdmin`/`SubscriptionAdmin` and `gcloud`
//! use it), resource names and the documented error codes.
mod pubsub_support;

use pubsub_support::*;

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
async fn shutdown_closes_open_streams_promptly() {
    let env = Env::start().await;
    let (topic, sub) = env.subscription("closing", |r| r).await;
    env.publish(&topic, &["x"]).await;
    let mut stream = env.stream(&sub);
    next(&mut stream).await.1.ack();
    // A raw stream too, to see how it ends.
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
    let pubsub = env.emu.pubsub().clone();
    eventually_that("both streams open", || {
        pubsub.stats(&sub).unwrap().open_streams == 2
    })
    .await;
    env.emu.shutdown().await;
    // Promptly: the emulator ends each stream itself with UNAVAILABLE, so
    // the servers stop gracefully; had it left them open, shutdown would
    // cut the connections after its grace period instead (no such status).
    let end = tokio::time::timeout(PATIENCE, responses.message())
        .await
        .expect("the stream ends")
        .expect_err("with an error status");
    assert_eq!(end.code(), Code::Unavailable, "{end:?}");
    assert!(
        end.message().contains("the emulator is shutting down"),
        "{end:?}"
    );
    eventually_that("no stream left open", || {
        pubsub.stats(&sub).unwrap().open_streams == 0
    })
    .await;
}

#[tokio::test]
async fn rest_exactly_once_ack_failure_carries_error_info() {
    let env = Env::start().await;
    let (_, sub) = env
        .subscription("rest-eod", |r| r.set_enable_exactly_once_delivery(true))
        .await;
    let url = format!("{}/v1/{sub}:acknowledge", env.emu.pubsub_endpoint());
    let (code, body) = raw_http("POST", &url, r#"{"ackIds":["1-5-5"]}"#).await;
    assert_eq!(code, 400, "{body}");
    let v: serde_json::Value = serde_json::from_str(&body).unwrap();
    let detail = &v["error"]["details"][0];
    assert_eq!(v["error"]["status"], "INVALID_ARGUMENT");
    assert_eq!(detail["@type"], "type.googleapis.com/google.rpc.ErrorInfo");
    assert_eq!(detail["reason"], "EXACTLY_ONCE_ACKID_FAILURE");
    assert_eq!(
        detail["metadata"]["1-5-5"],
        "PERMANENT_FAILURE_INVALID_ACK_ID"
    );
}

/// `data` is decoded as Google's REST front end decodes `bytes`
/// (emulators/docs/pubsub.md, "Base64 in REST JSON"): either alphabet, padded
/// or not, but never mixed, with `=` only as canonical padding, no whitespace
/// and zero trailing bits; anything else refuses the whole request.
#[tokio::test]
async fn rest_publish_decodes_data_as_strictly_as_google() {
    let env = Env::start().await;
    let (topic, sub) = env.subscription("rest-b64", |r| r).await;
    let base = env.emu.pubsub_endpoint();
    let publish = |data: &str| {
        let url = format!("{base}/v1/{topic}:publish");
        let body = serde_json::json!({ "messages": [{ "data": "aGk=" }, { "data": data }] });
        async move { raw_http("POST", &url, &body.to_string()).await }
    };
    for refused in [
        "Zg==Zg==",
        "Zm=9v",
        "a+b_",
        "+-8=",
        "SGVsbG8=\n",
        "SGVs bG8=",
        "Zg=",
        "Zm8==",
        "Zh==",
        "Z",
        "====",
        "Zg..",
    ] {
        let (code, body) = publish(refused).await;
        assert_eq!(code, 400, "{refused:?} was accepted: {body}");
        let v: serde_json::Value = serde_json::from_str(&body).unwrap();
        assert_eq!(v["error"]["status"], "INVALID_ARGUMENT", "{body}");
    }
    assert_eq!(env.emu.pubsub().stats(&sub).unwrap().published, 0);
    for accepted in ["-_-_", "+/+/", "+w", "-w==", "-w", "Zm8"] {
        let (code, body) = publish(accepted).await;
        assert_eq!(code, 200, "{accepted:?} was refused: {body}");
    }
    let url = format!("{base}/v1/{sub}:pull");
    let (code, body) = raw_http("POST", &url, r#"{"maxMessages":100}"#).await;
    assert_eq!(code, 200, "{body}");
    let v: serde_json::Value = serde_json::from_str(&body).unwrap();
    let mut data: Vec<&str> = v["receivedMessages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["message"]["data"].as_str().unwrap())
        .filter(|d| *d != "aGk=")
        .collect();
    data.sort_unstable();
    // Encoded back as standard base64 with padding, whatever came in.
    assert_eq!(data, ["+/+/", "+/+/", "+w==", "+w==", "+w==", "Zm8="]);
}

#[tokio::test]
async fn stats_count_acknowledge_and_modify_ack_deadline_calls_and_ids() {
    let env = Env::start().await;
    let (topic, sub) = env.subscription("ack-calls", |r| r).await;
    env.publish(&topic, &["a", "b", "c"]).await;
    let mut raw = env.raw_subscriber().await;
    let (tx, rx) = tokio::sync::mpsc::channel(8);
    tx.send(pb::StreamingPullRequest {
        subscription: sub.clone(),
        stream_ack_deadline_seconds: 60,
        ..Default::default()
    })
    .await
    .unwrap();
    let mut responses = raw
        .streaming_pull(tokio_stream::wrappers::ReceiverStream::new(rx))
        .await
        .unwrap()
        .into_inner();
    let mut ids = Vec::new();
    while ids.len() < 3 {
        let got = tokio::time::timeout(PATIENCE, responses.message())
            .await
            .unwrap()
            .unwrap()
            .unwrap();
        ids.extend(got.received_messages.into_iter().map(|m| m.ack_id));
    }
    // One stream request extending two leases and nacking the third: one
    // call of three ids, whatever the deadlines.
    tx.send(pb::StreamingPullRequest {
        modify_deadline_ack_ids: ids.clone(),
        modify_deadline_seconds: vec![30, 30, 0],
        ..Default::default()
    })
    .await
    .unwrap();
    // One stream request acking two.
    tx.send(pb::StreamingPullRequest {
        ack_ids: ids[..2].to_vec(),
        ..Default::default()
    })
    .await
    .unwrap();
    let pubsub = env.emu.pubsub();
    eventually_that("the stream's ack", || {
        pubsub.stats(&sub).is_some_and(|s| s.acks == 2)
    })
    .await;
    // And one unary ModifyAckDeadline of one id, over REST.
    let base = env.emu.pubsub_endpoint();
    let (code, body) = raw_http(
        "POST",
        &format!("{base}/v1/{sub}:modifyAckDeadline"),
        &format!(r#"{{"ackIds":["{}"],"ackDeadlineSeconds":20}}"#, ids[0]),
    )
    .await;
    assert_eq!(code, 200, "{body}");
    let (code, body) = raw_http("GET", &format!("{base}/emulator/v1/pubsub/stats"), "").await;
    assert_eq!(code, 200, "{body}");
    let stats: serde_json::Value = serde_json::from_str(&body).unwrap();
    let counted = &stats["subscriptions"][&sub];
    assert_eq!(counted["acknowledge_calls"], 1, "{counted}");
    assert_eq!(counted["acknowledge_ids"], 2, "{counted}");
    assert_eq!(counted["modify_ack_deadline_calls"], 2, "{counted}");
    assert_eq!(counted["modify_ack_deadline_ids"], 4, "{counted}");
}
