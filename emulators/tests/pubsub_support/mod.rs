//! Shared set-up for the Pub/Sub emulator tests: an emulator with the
//! official Rust clients wired to it, and small helpers.
#![allow(dead_code, unused_imports)]

pub use gcloud_sdk::google::pubsub::v1 as pb;
pub use gcloud_sdk::google::pubsub::v1::publisher_client::PublisherClient;
pub use gcloud_sdk::google::pubsub::v1::subscriber_client::SubscriberClient;
pub use google_cloud_auth::credentials::anonymous::Builder as Anonymous;
pub use google_cloud_pubsub::client::{Publisher, Subscriber, SubscriptionAdmin, TopicAdmin};
pub use google_cloud_pubsub::model::{DeadLetterPolicy, Message};
pub use google_cloud_pubsub::subscriber::handler::Handler;
pub use google_cloud_pubsub::subscriber::MessageStream;
pub use hotcount_emulators::{Emulators, EmulatorsConfig, FaultKind, FaultSpec};
pub use prost::Message as _;
pub use std::collections::{BTreeSet, HashMap};
pub use std::time::{Duration, Instant};
pub use tonic::transport::Channel;
pub use tonic::Code;
pub const PROJECT: &str = "test-project";
/// Longest real time any single wait in these tests may take: generous, so
/// that two busy cores cannot make a correct emulator miss it. Tests never
/// assert how fast something happens (speed belongs in the benchmarks).
pub const PATIENCE: Duration = Duration::from_secs(30);

pub struct Env {
    pub emu: Emulators,
    pub topics: TopicAdmin,
    pub subs: SubscriptionAdmin,
    pub subscriber: Subscriber,
}

impl Env {
    pub async fn start() -> Self {
        Self::with_config(EmulatorsConfig::default()).await
    }

    pub async fn with_config(config: EmulatorsConfig) -> Self {
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

    pub async fn topic(&self, id: &str) -> String {
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
    pub async fn subscription(
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

    pub async fn publisher(&self, topic: &str) -> Publisher {
        Publisher::builder(topic)
            .with_endpoint(self.emu.pubsub_endpoint())
            .with_credentials(Anonymous::new().build())
            .set_delay_threshold(Duration::from_millis(1))
            .build()
            .await
            .unwrap()
    }

    pub async fn publish(&self, topic: &str, payloads: &[&str]) -> Vec<String> {
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

    pub fn stream(&self, sub: &str) -> MessageStream {
        self.subscriber
            .subscribe(sub)
            .set_max_lease_extension(Duration::from_secs(10))
            .build()
    }

    pub async fn raw_subscriber(&self) -> SubscriberClient<Channel> {
        SubscriberClient::connect(self.emu.pubsub_endpoint())
            .await
            .unwrap()
    }

    pub async fn raw_publisher(&self) -> PublisherClient<Channel> {
        PublisherClient::connect(self.emu.pubsub_endpoint())
            .await
            .unwrap()
    }
}

pub async fn next(stream: &mut MessageStream) -> (Message, Handler) {
    tokio::time::timeout(PATIENCE, stream.next())
        .await
        .expect("a message within the patience window")
        .expect("the stream is open")
        .expect("no stream error")
}

/// Waits (bounded) until `cond` holds: client acks are asynchronous.
pub async fn eventually(cond: impl Fn() -> bool) {
    eventually_that("condition", cond).await
}

/// Waits (bounded by [`PATIENCE`]) until `cond` holds; panics naming `what`.
pub async fn eventually_that(what: &str, cond: impl Fn() -> bool) {
    let give_up = Instant::now() + PATIENCE;
    while !cond() {
        assert!(
            Instant::now() < give_up,
            "{what} never became true within {PATIENCE:?}"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// Receives nothing for `wait`.
pub async fn quiet(stream: &mut MessageStream, wait: Duration) -> bool {
    tokio::time::timeout(wait, stream.next()).await.is_err()
}

pub fn data(m: &Message) -> String {
    String::from_utf8_lossy(&m.data).into_owned()
}

pub fn with_dead_letter(
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

/// A minimal HTTP/1.1 request (no client crate needed): returns (status, body).
pub async fn raw_http(method: &str, url: &str, body: &str) -> (u16, String) {
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
