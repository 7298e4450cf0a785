//! Push subscriptions, created and switched with Google's Rust admin client
//! (`google-cloud-pubsub`), published to with its publisher, delivered to a
//! loopback HTTP receiver (axum) that records each request and answers as a
//! test script says; OIDC tokens checked with Google's own ID-token verifier
//! (`google-cloud-auth`) against the emulator's JWKS.
mod pubsub_support;

use std::collections::VecDeque;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::routing::post;
use google_cloud_auth::credentials::idtoken::verifier;
use google_cloud_pubsub::model::push_config::{NoWrapper, OidcToken};
use google_cloud_pubsub::model::PushConfig;
use pubsub_support::*;
use serde_json::Value;
use tokio::sync::mpsc;

/// One request the receiver got.
#[derive(Debug)]
struct Pushed {
    headers: HeaderMap,
    body: Vec<u8>,
    /// Requests in progress at the receiver when this one arrived (itself included).
    concurrent: usize,
}

impl Pushed {
    fn json(&self) -> Value {
        serde_json::from_slice(&self.body).expect("a JSON body")
    }

    fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(name).and_then(|v| v.to_str().ok())
    }

    fn message_id(&self) -> String {
        self.json()["message"]["messageId"]
            .as_str()
            .unwrap()
            .to_string()
    }
}

/// What the receiver answers: scripted (status, hold) pairs first, then the default.
struct Script {
    queue: VecDeque<(u16, Duration)>,
    default: (u16, Duration),
}

#[derive(Clone)]
struct ReceiverState {
    seen: mpsc::UnboundedSender<Pushed>,
    script: Arc<parking_lot::Mutex<Script>>,
    in_progress: Arc<AtomicUsize>,
}

/// A loopback push endpoint.
struct Receiver {
    url: String,
    seen: mpsc::UnboundedReceiver<Pushed>,
    script: Arc<parking_lot::Mutex<Script>>,
    task: tokio::task::JoinHandle<()>,
}

impl Receiver {
    /// Answers `status` at once unless scripted otherwise.
    async fn start(status: u16) -> Self {
        let (tx, seen) = mpsc::unbounded_channel();
        let script = Arc::new(parking_lot::Mutex::new(Script {
            queue: VecDeque::new(),
            default: (status, Duration::ZERO),
        }));
        let state = ReceiverState {
            seen: tx,
            script: script.clone(),
            in_progress: Arc::new(AtomicUsize::new(0)),
        };
        let app = axum::Router::new()
            .route("/push", post(receive))
            .with_state(state);
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}/push", listener.local_addr().unwrap());
        let task = tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        Self {
            url,
            seen,
            script,
            task,
        }
    }

    /// The next answers, in order.
    fn then(&self, answers: &[(u16, Duration)]) {
        self.script.lock().queue.extend(answers.iter().copied());
    }

    /// From now on, answer `status` after `hold`.
    fn always(&self, status: u16, hold: Duration) {
        self.script.lock().default = (status, hold);
    }

    async fn next(&mut self) -> Pushed {
        tokio::time::timeout(PATIENCE, self.seen.recv())
            .await
            .expect("a push request within the patience window")
            .expect("the receiver runs")
    }

    /// Receives nothing for `wait` (a negative check: the wait is far
    /// shorter than the emulated delay that must pass first).
    async fn quiet(&mut self, wait: Duration) -> bool {
        tokio::time::timeout(wait, self.seen.recv()).await.is_err()
    }
}

impl Drop for Receiver {
    fn drop(&mut self) {
        self.task.abort();
    }
}

async fn receive(
    State(state): State<ReceiverState>,
    headers: HeaderMap,
    body: axum::body::Bytes,
) -> StatusCode {
    let concurrent = state.in_progress.fetch_add(1, Ordering::SeqCst) + 1;
    let _ = state.seen.send(Pushed {
        headers,
        body: body.to_vec(),
        concurrent,
    });
    let (status, hold) = {
        let mut script = state.script.lock();
        let default = script.default;
        script.queue.pop_front().unwrap_or(default)
    };
    if !hold.is_zero() {
        tokio::time::sleep(hold).await;
    }
    state.in_progress.fetch_sub(1, Ordering::SeqCst);
    StatusCode::from_u16(status).unwrap()
}

fn push_to(url: &str) -> PushConfig {
    PushConfig::new().set_push_endpoint(url)
}

/// A topic and a push subscription on it.
async fn push_subscription(
    env: &Env,
    id: &str,
    config: PushConfig,
    edit: impl FnOnce(
        google_cloud_pubsub::builder::subscription_admin::CreateSubscription,
    ) -> google_cloud_pubsub::builder::subscription_admin::CreateSubscription,
) -> (String, String) {
    env.subscription(id, |r| edit(r.set_push_config(config)))
        .await
}

async fn stats_until(
    env: &Env,
    sub: &str,
    what: &str,
    cond: impl Fn(&hotcount_emulators::pubsub::SubscriptionStats) -> bool,
) -> hotcount_emulators::pubsub::SubscriptionStats {
    let pubsub = env.emu.pubsub().clone();
    let name = sub.to_string();
    eventually_that(what, || pubsub.stats(&name).is_some_and(|s| cond(&s))).await;
    env.emu.pubsub().stats(sub).unwrap()
}

#[tokio::test]
async fn push_posts_the_wrapped_body_and_a_2xx_acks() {
    let env = Env::start().await;
    let mut receiver = Receiver::start(204).await;
    let (topic, sub) = push_subscription(&env, "wrapped", push_to(&receiver.url), |r| r).await;
    let publisher = env.publisher(&topic).await;
    let id = publisher
        .publish(
            Message::new()
                .set_data("hello")
                .set_attributes([("k", "v")]),
        )
        .await
        .unwrap();
    let got = receiver.next().await;
    assert_eq!(got.header("content-type"), Some("application/json"));
    assert!(got.header("user-agent").unwrap().starts_with("APIs-Google"));
    assert!(
        got.header("authorization").is_none(),
        "no oidcToken, no token"
    );
    let body = got.json();
    let message = &body["message"];
    assert_eq!(message["data"], "aGVsbG8=");
    assert_eq!(message["attributes"]["k"], "v");
    assert_eq!(message["messageId"], id.as_str());
    assert_eq!(message["message_id"], id.as_str());
    assert!(message["publishTime"].as_str().unwrap().ends_with('Z'));
    assert_eq!(message["publishTime"], message["publish_time"]);
    assert!(message.get("orderingKey").is_none(), "left out when empty");
    assert_eq!(body["subscription"], sub.as_str());
    assert!(
        body.get("deliveryAttempt").is_none(),
        "only with a dead-letter policy"
    );
    let stats = stats_until(&env, &sub, "the ack", |s| s.acks == 1).await;
    assert_eq!(stats.unacked, 0);
    assert_eq!(stats.push_answers.get("204"), Some(&1));
    assert!(
        receiver.quiet(Duration::from_millis(300)).await,
        "acked: not sent again"
    );
    assert_eq!(env.emu.pubsub_counters().get("Push"), 1);
}

#[tokio::test]
async fn every_ack_status_acks_and_every_other_answer_nacks() {
    let env = Env::start().await;
    for (i, status) in [200u16, 201, 202, 204].into_iter().enumerate() {
        let mut receiver = Receiver::start(status).await;
        let (topic, sub) =
            push_subscription(&env, &format!("ack-{i}"), push_to(&receiver.url), |r| r).await;
        env.publish(&topic, &["x"]).await;
        receiver.next().await;
        stats_until(&env, &sub, "acked", |s| s.acks == 1).await;
    }
    for (i, status) in [400u16, 404, 429, 500, 503].into_iter().enumerate() {
        let mut receiver = Receiver::start(204).await;
        receiver.then(&[(status, Duration::ZERO)]);
        let (topic, sub) =
            push_subscription(&env, &format!("nack-{i}"), push_to(&receiver.url), |r| r).await;
        env.publish(&topic, &["x"]).await;
        let first = receiver.next().await;
        let again = receiver.next().await;
        assert_eq!(first.message_id(), again.message_id(), "{status} nacks");
        let stats = stats_until(&env, &sub, "acked on the second try", |s| s.acks == 1).await;
        assert_eq!(stats.push_answers.get(&status.to_string()), Some(&1));
        assert_eq!(stats.redeliveries, 1);
    }
}

#[tokio::test]
async fn no_answer_within_the_ack_deadline_and_connection_errors_nack() {
    // 20x time: the 10 s ack deadline (the request timeout) is 0.5 s real.
    let env = Env::with_config(EmulatorsConfig {
        time_scale: 20.0,
        ..Default::default()
    })
    .await;
    let mut receiver = Receiver::start(204).await;
    receiver.then(&[(204, Duration::from_secs(3))]);
    let (topic, sub) = push_subscription(&env, "slow", push_to(&receiver.url), |r| r).await;
    env.publish(&topic, &["slow"]).await;
    let first = receiver.next().await;
    let again = receiver.next().await;
    assert_eq!(first.message_id(), again.message_id());
    stats_until(&env, &sub, "acked after a timeout", |s| {
        s.acks == 1 && s.push_answers.get("timeout") == Some(&1)
    })
    .await;

    // Nothing listens on a port a dropped listener held.
    let closed = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        format!("http://{}/push", l.local_addr().unwrap())
    };
    let (topic, sub) = push_subscription(&env, "refused", push_to(&closed), |r| r).await;
    env.publish(&topic, &["nobody home"]).await;
    let stats = stats_until(&env, &sub, "connection errors", |s| {
        s.push_answers.get("connection_error").copied().unwrap_or(0) >= 2
    })
    .await;
    assert_eq!(stats.acks, 0);
    assert_eq!(stats.unacked, 1);
    // Pointed at a live endpoint, it is delivered and acked.
    switch_push_config(&env, &sub, push_to(&receiver.url)).await;
    assert_eq!(
        receiver.next().await.json()["message"]["data"],
        base64_of("nobody home")
    );
    stats_until(&env, &sub, "acked", |s| s.acks == 1).await;
}

fn base64_of(s: &str) -> String {
    use base64::Engine as _;
    base64::engine::general_purpose::STANDARD.encode(s)
}

#[tokio::test]
async fn nacks_dead_letter_after_max_delivery_attempts_with_delivery_attempt() {
    let env = Env::with_config(EmulatorsConfig {
        time_scale: 20.0,
        ..Default::default()
    })
    .await;
    let mut receiver = Receiver::start(500).await;
    let dlq = env.topic("push-dlq").await;
    let dlq_sub = format!("projects/{PROJECT}/subscriptions/push-dlq-sub");
    env.subs
        .create_subscription()
        .set_name(&dlq_sub)
        .set_topic(&dlq)
        .send()
        .await
        .unwrap();
    let (topic, sub) = push_subscription(
        &env,
        "dead",
        push_to(&receiver.url),
        with_dead_letter(&dlq, 5),
    )
    .await;
    env.publish(&topic, &["poison"]).await;
    let mut attempts = Vec::new();
    for _ in 0..5 {
        attempts.push(receiver.next().await.json()["deliveryAttempt"].clone());
    }
    assert_eq!(
        attempts,
        [1, 2, 3, 4, 5].map(Value::from).to_vec(),
        "deliveryAttempt counts each push"
    );
    let stats = stats_until(&env, &sub, "dead-lettered", |s| s.dead_lettered == 1).await;
    assert_eq!(stats.unacked, 0);
    assert!(receiver.quiet(Duration::from_millis(300)).await);
    let mut stream = env.stream(&dlq_sub);
    let (m, h) = next(&mut stream).await;
    assert_eq!(data(&m), "poison");
    assert_eq!(
        m.attributes.get("CloudPubSubDeadLetterSourceDeliveryCount"),
        Some(&"5".to_string())
    );
    h.ack();
}

#[tokio::test]
async fn the_retry_policy_spaces_push_redeliveries() {
    let env = Env::start().await;
    let mut receiver = Receiver::start(204).await;
    receiver.then(&[(503, Duration::ZERO)]);
    let topic = env.topic("backoff-push-topic").await;
    let sub = format!("projects/{PROJECT}/subscriptions/backoff-push");
    let mut raw = env.raw_subscriber().await;
    raw.create_subscription(pb::Subscription {
        name: sub.clone(),
        topic: topic.clone(),
        push_config: Some(pb::PushConfig {
            push_endpoint: receiver.url.clone(),
            ..Default::default()
        }),
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
    let first = receiver.next().await;
    // 30 s of emulated backoff: nothing in the next 300 ms of real time.
    assert!(receiver.quiet(Duration::from_millis(300)).await);
    let unacked = env.emu.pubsub().unacked(&sub).unwrap();
    assert_eq!(unacked[0].state, "backoff");
    env.emu.clock().advance(Duration::from_secs(31));
    let again = receiver.next().await;
    assert_eq!(first.message_id(), again.message_id());
    stats_until(&env, &sub, "acked", |s| s.acks == 1).await;
}

#[tokio::test]
async fn the_push_window_starts_small_grows_on_acks_and_shrinks_on_failures() {
    let env = Env::start().await;
    let mut receiver = Receiver::start(204).await;
    // The first three requests are held 2 s; later ones 30 ms.
    receiver.then(&[(204, Duration::from_secs(2)); 3]);
    receiver.always(204, Duration::from_millis(30));
    let (topic, sub) = push_subscription(&env, "window", push_to(&receiver.url), |r| r).await;
    let payloads: Vec<String> = (0..60).map(|i| format!("m{i}")).collect();
    let refs: Vec<&str> = payloads.iter().map(String::as_str).collect();
    env.publish(&topic, &refs).await;
    let mut concurrency = Vec::new();
    for _ in 0..3 {
        concurrency.push(receiver.next().await.concurrent);
    }
    assert!(
        receiver.quiet(Duration::from_millis(500)).await,
        "the window starts at 3: no fourth request before an answer"
    );
    for _ in 3..60 {
        concurrency.push(receiver.next().await.concurrent);
    }
    let most = concurrency.iter().max().copied().unwrap_or(0);
    assert!(most > 3, "the window grew on acks: {concurrency:?}");
    let stats = stats_until(&env, &sub, "all acked", |s| s.acks == 60).await;
    assert!(stats.push_window > 3, "{stats:?}");

    // Failures halve it down to one request at a time.
    receiver.always(503, Duration::ZERO);
    env.publish(&topic, &["fails"]).await;
    let stats = stats_until(&env, &sub, "the window shrank to 1", |s| s.push_window == 1).await;
    assert!(stats.push_answers.get("503").copied().unwrap_or(0) >= 1);
    receiver.always(204, Duration::ZERO);
    stats_until(&env, &sub, "acked at last", |s| s.acks == 61).await;
}

#[tokio::test]
async fn oidc_tokens_verify_with_googles_verifier_against_the_emulator_jwks() {
    let env = Env::start().await;
    let mut receiver = Receiver::start(204).await;
    let account = "push-invoker@test-project.iam.gserviceaccount.com";
    let config = push_to(&receiver.url).set_oidc_token(
        OidcToken::new()
            .set_service_account_email(account)
            .set_audience("https://hotcount.example/push"),
    );
    let (topic, _) = push_subscription(&env, "oidc", config, |r| r).await;
    env.publish(&topic, &["signed"]).await;
    let got = receiver.next().await;
    let token = got
        .header("authorization")
        .and_then(|h| h.strip_prefix("Bearer "))
        .expect("a bearer token")
        .to_string();
    let claims = verifier::Builder::new(["https://hotcount.example/push"])
        .with_email(account)
        .with_jwks_url(env.emu.push_jwks_url())
        .build()
        .verify(&token)
        .await
        .expect("the token verifies");
    assert_eq!(claims["iss"], "https://accounts.google.com");
    assert_eq!(claims["email"], account);
    assert_eq!(claims["email_verified"], true);
    let wrong_audience = verifier::Builder::new(["https://other.example/"])
        .with_jwks_url(env.emu.push_jwks_url())
        .build()
        .verify(&token)
        .await;
    assert!(wrong_audience.is_err());
    let wrong_account = verifier::Builder::new(["https://hotcount.example/push"])
        .with_email("someone-else@test-project.iam.gserviceaccount.com")
        .with_jwks_url(env.emu.push_jwks_url())
        .build()
        .verify(&token)
        .await;
    assert!(wrong_account.is_err());

    // Without an audience the token is for the endpoint URL.
    let config =
        push_to(&receiver.url).set_oidc_token(OidcToken::new().set_service_account_email(account));
    let (topic, sub) = push_subscription(&env, "oidc-default", config, |r| r).await;
    env.publish(&topic, &["signed"]).await;
    let token = receiver
        .next()
        .await
        .header("authorization")
        .and_then(|h| h.strip_prefix("Bearer "))
        .unwrap()
        .to_string();
    verifier::Builder::new([receiver.url.as_str()])
        .with_jwks_url(env.emu.push_jwks_url())
        .build()
        .verify(&token)
        .await
        .expect("aud is the endpoint");
    let got = env
        .subs
        .get_subscription()
        .set_subscription(&sub)
        .send()
        .await
        .unwrap();
    let push = got.push_config.unwrap();
    assert_eq!(
        push.oidc_token().unwrap().service_account_email,
        account,
        "GetSubscription shows the push config"
    );
    assert_eq!(
        push.attributes.get("x-goog-version").map(String::as_str),
        Some("v1")
    );
}

#[tokio::test]
async fn the_jwks_route_serves_the_public_key() {
    let env = Env::start().await;
    let (status, body) = raw_http("GET", &env.emu.push_jwks_url(), "").await;
    assert_eq!(status, 200);
    let jwks: Value = serde_json::from_str(&body).unwrap();
    let key = &jwks["keys"][0];
    assert_eq!(key["kty"], "RSA");
    assert_eq!(key["alg"], "RS256");
    assert_eq!(key["use"], "sig");
    assert_eq!(key["kid"].as_str().unwrap().len(), 40);
    assert_eq!(key["e"], "AQAB");
}

#[tokio::test]
async fn unwrapped_push_sends_the_data_as_the_body_and_metadata_as_headers() {
    let env = Env::start().await;
    let mut receiver = Receiver::start(204).await;
    let config = push_to(&receiver.url).set_no_wrapper(NoWrapper::new().set_write_metadata(true));
    let (topic, sub) = push_subscription(&env, "unwrapped", config, |r| r).await;
    let publisher = env.publisher(&topic).await;
    let id = publisher
        .publish(
            Message::new()
                .set_data(r#"{"status": "Hello there"}"#)
                .set_attributes([("Content-Type", "application/json"), ("tenant", "t1")])
                .set_ordering_key("some-key"),
        )
        .await
        .unwrap();
    let got = receiver.next().await;
    assert_eq!(got.body, br#"{"status": "Hello there"}"#);
    assert_eq!(
        got.header("x-goog-pubsub-subscription-name"),
        Some(sub.as_str())
    );
    assert_eq!(got.header("x-goog-pubsub-message-id"), Some(id.as_str()));
    assert!(got
        .header("x-goog-pubsub-publish-time")
        .unwrap()
        .ends_with('Z'));
    assert_eq!(got.header("x-goog-pubsub-ordering-key"), Some("some-key"));
    assert_eq!(got.header("content-type"), Some("application/json"));
    assert_eq!(got.header("tenant"), Some("t1"));

    // Without writeMetadata only the data arrives.
    let config = push_to(&receiver.url).set_no_wrapper(NoWrapper::new());
    let (topic, _) = push_subscription(&env, "unwrapped-bare", config, |r| r).await;
    env.publish(&topic, &["raw bytes"]).await;
    let got = receiver.next().await;
    assert_eq!(got.body, b"raw bytes");
    assert!(got.header("x-goog-pubsub-message-id").is_none());
}

/// ModifyPushConfig through the admin client, then the config GetSubscription shows.
async fn switch_push_config(env: &Env, sub: &str, config: PushConfig) -> PushConfig {
    env.subs
        .modify_push_config()
        .set_subscription(sub)
        .set_push_config(config)
        .send()
        .await
        .unwrap();
    env.subs
        .get_subscription()
        .set_subscription(sub)
        .send()
        .await
        .unwrap()
        .push_config
        .unwrap_or_default()
}

#[tokio::test]
async fn modify_push_config_switches_between_push_and_pull() {
    let env = Env::start().await;
    let mut receiver = Receiver::start(204).await;
    let (topic, sub) = env.subscription("switch", |r| r).await;
    let shown = switch_push_config(&env, &sub, push_to(&receiver.url)).await;
    assert_eq!(shown.push_endpoint, receiver.url);
    env.publish(&topic, &["pushed"]).await;
    assert_eq!(
        receiver.next().await.json()["message"]["data"],
        base64_of("pushed")
    );
    stats_until(&env, &sub, "acked", |s| s.acks == 1).await;

    // An empty push config: back to pull.
    let shown = switch_push_config(&env, &sub, PushConfig::new()).await;
    assert!(shown.push_endpoint.is_empty());
    env.publish(&topic, &["pulled"]).await;
    let mut stream = env.stream(&sub);
    let (m, h) = next(&mut stream).await;
    assert_eq!(data(&m), "pulled");
    h.ack();
    assert!(
        receiver.quiet(Duration::from_millis(300)).await,
        "no push after the switch"
    );
}

#[tokio::test]
async fn messages_of_one_ordering_key_are_pushed_one_at_a_time_in_order() {
    let env = Env::start().await;
    let mut receiver = Receiver::start(204).await;
    receiver.always(204, Duration::from_millis(20));
    let (topic, sub) = push_subscription(&env, "ordered", push_to(&receiver.url), |r| {
        r.set_enable_message_ordering(true)
    })
    .await;
    let publisher = env.publisher(&topic).await;
    let mut pending = Vec::new();
    for i in 0..6 {
        pending.push(
            publisher.publish(
                Message::new()
                    .set_data(format!("k{i}"))
                    .set_ordering_key("key"),
            ),
        );
    }
    for p in pending {
        p.await.unwrap();
    }
    let mut seen = Vec::new();
    for _ in 0..6 {
        let got = receiver.next().await;
        assert_eq!(
            got.concurrent, 1,
            "one message of a key outstanding at a time"
        );
        seen.push(got.json()["message"]["data"].as_str().unwrap().to_string());
    }
    let expected: Vec<String> = (0..6).map(|i| base64_of(&format!("k{i}"))).collect();
    assert_eq!(seen, expected);
    stats_until(&env, &sub, "all acked", |s| s.acks == 6).await;
}

#[tokio::test]
async fn push_faults_fail_or_drop_deliveries_and_are_counted() {
    let env = Env::start().await;
    let mut receiver = Receiver::start(204).await;
    let (topic, sub) = push_subscription(&env, "faults", push_to(&receiver.url), |r| r).await;
    // Not sent once, then delivered.
    env.emu
        .pubsub_faults()
        .add(FaultSpec::error("Push", Code::Unavailable).times(1))
        .unwrap();
    env.publish(&topic, &["a"]).await;
    receiver.next().await;
    let stats = stats_until(&env, &sub, "acked", |s| s.acks == 1).await;
    assert_eq!(stats.push_answers.get("fault"), Some(&1));
    // The endpoint acks, but the answer is lost: it comes again.
    env.emu
        .pubsub_faults()
        .add(FaultSpec::error_after_apply("Push", Code::Unavailable).times(1))
        .unwrap();
    env.publish(&topic, &["b"]).await;
    let first = receiver.next().await;
    let again = receiver.next().await;
    assert_eq!(first.message_id(), again.message_id());
    let stats = stats_until(&env, &sub, "acked", |s| s.acks == 2).await;
    assert_eq!(stats.push_answers.get("204"), Some(&3));
    assert_eq!(env.emu.pubsub_counters().get("Push"), 3);
}

#[tokio::test]
async fn bad_push_configs_are_invalid_argument() {
    let env = Env::start().await;
    let topic = env.topic("bad-push-topic").await;
    let mut raw = env.raw_subscriber().await;
    let create = |endpoint: &str, version: Option<&str>, oidc: bool| pb::Subscription {
        name: format!("projects/{PROJECT}/subscriptions/bad-push"),
        topic: topic.clone(),
        push_config: Some(pb::PushConfig {
            push_endpoint: endpoint.into(),
            attributes: version
                .map(|v| [("x-goog-version".to_string(), v.to_string())].into())
                .unwrap_or_default(),
            authentication_method: oidc.then(|| {
                pb::push_config::AuthenticationMethod::OidcToken(pb::push_config::OidcToken {
                    service_account_email: String::new(),
                    audience: String::new(),
                })
            }),
            wrapper: None,
        }),
        ..Default::default()
    };
    for (endpoint, version, oidc) in [
        ("not a url", None, false),
        ("ftp://127.0.0.1/push", None, false),
        ("http://127.0.0.1/push", Some("v2"), false),
        ("http://127.0.0.1/push", None, true),
    ] {
        let err = raw
            .create_subscription(create(endpoint, version, oidc))
            .await
            .unwrap_err();
        assert_eq!(
            err.code(),
            Code::InvalidArgument,
            "{endpoint} {version:?} {oidc}"
        );
    }
}
