//! Pub/Sub StreamingPull -> (event or poison, ack handle) into the aggregator.
//!
//! Invariants: every received message goes into the aggregator with its
//! handle (never acked here); the client library extends leases while a
//! handle is held; a failed stream is re-opened with backoff.
//!
//! Memory: flow control is the server's per stream (`max_outstanding_*`),
//! but a stream that fails is resumed with a fresh budget (by the client
//! library, or here) while the messages it delivered are still held. So
//! the service also caps what it holds itself ([`Held`]: messages and bytes
//! received and not yet acked or nacked, whatever stream they came from): a
//! stream is not read while the cap is reached. Held messages never exceed
//! `held_max_messages` (by more than one message per stream, read before
//! the cap was reached), whatever the reconnects; besides them, the client
//! library buffers at most one server response per stream.

use std::sync::Arc;
use std::time::Duration;

use google_cloud_pubsub::client::Subscriber;
use google_cloud_pubsub::model::Message;
use google_cloud_pubsub::subscriber::handler::Handler;
use google_cloud_pubsub::subscriber::ShutdownBehavior;
use parking_lot::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use tokio::sync::{watch, Notify};
use tokio::task::JoinSet;

use crate::model::item::Item;
use crate::pipeline::acker::{AckHandle, Confirmation};
use crate::pipeline::aggregator::{Aggregator, Pending};
use crate::telemetry::Stats;

pub use crate::config::SourceConfig;

/// What the service holds of the messages it received: counted when a
/// message is received, released when its handle is acked or nacked
/// (dropped). The cap the source waits on.
#[derive(Debug)]
pub struct Held {
    messages: AtomicU64,
    bytes: AtomicU64,
    max_messages: u64,
    max_bytes: u64,
    released: Notify,
}

impl Held {
    /// Nothing held yet; full at `max_messages` or `max_bytes` (0 = no cap).
    pub fn new(max_messages: u64, max_bytes: u64) -> Self {
        let cap = |m: u64| if m == 0 { u64::MAX } else { m };
        Self {
            messages: AtomicU64::new(0),
            bytes: AtomicU64::new(0),
            max_messages: cap(max_messages),
            max_bytes: cap(max_bytes),
            released: Notify::new(),
        }
    }

    /// Counts one message of `bytes` held until the guard is dropped.
    pub fn hold(self: &Arc<Self>, bytes: u64) -> HeldGuard {
        self.messages.fetch_add(1, Ordering::Relaxed);
        self.bytes.fetch_add(bytes, Ordering::Relaxed);
        HeldGuard {
            held: self.clone(),
            bytes,
        }
    }

    /// Messages held now.
    pub fn messages(&self) -> u64 {
        self.messages.load(Ordering::Relaxed)
    }

    /// Whether the cap is reached.
    pub fn is_full(&self) -> bool {
        self.messages.load(Ordering::Relaxed) >= self.max_messages
            || self.bytes.load(Ordering::Relaxed) >= self.max_bytes
    }

    /// Waits until the cap is not reached.
    pub async fn room(&self) {
        loop {
            let released = self.released.notified();
            tokio::pin!(released);
            released.as_mut().enable();
            if !self.is_full() {
                return;
            }
            released.await;
        }
    }
}

/// One held message; releases it when dropped.
#[derive(Debug)]
pub struct HeldGuard {
    held: Arc<Held>,
    bytes: u64,
}

impl Drop for HeldGuard {
    fn drop(&mut self) {
        let held = &self.held;
        let messages = held.messages.fetch_sub(1, Ordering::Relaxed);
        let bytes = held.bytes.fetch_sub(self.bytes, Ordering::Relaxed);
        if messages >= held.max_messages || bytes >= held.max_bytes {
            held.released.notify_waiters();
        }
    }
}

/// A Pub/Sub message handle from the official client, holding its place
/// in [`Held`] until it is acked or nacked.
#[derive(Debug)]
pub struct PubSubHandle {
    handler: Handler,
    _held: HeldGuard,
}

impl AckHandle for PubSubHandle {
    fn ack(self) -> Option<Confirmation> {
        match self.handler {
            Handler::ExactlyOnce(h) => Some(Box::pin(async move {
                h.confirmed_ack().await.map_err(|e| e.to_string())
            })),
            other => {
                other.ack();
                None
            }
        }
    }

    fn nack(self) {
        self.handler.nack();
    }
}

/// The Pub/Sub source.
pub struct Source {
    subscriber: Subscriber,
    config: SourceConfig,
    aggregator: Arc<Aggregator<PubSubHandle>>,
    stats: Arc<Stats>,
    closing: Arc<Mutex<JoinSet<()>>>,
    held: Arc<Held>,
}

/// Streams being closed: their lease loops keep running until every handle
/// they delivered is acked or nacked.
pub struct Closing(Arc<Mutex<JoinSet<()>>>);

impl Closing {
    /// Waits until every closed stream has flushed its acks.
    pub async fn wait(self) {
        let mut set = std::mem::take(&mut *self.0.lock());
        while set.join_next().await.is_some() {}
    }
}

const RECONNECT_BACKOFF_MIN: Duration = Duration::from_millis(100);
const RECONNECT_BACKOFF_MAX: Duration = Duration::from_secs(10);

impl Source {
    /// A source feeding `aggregator`.
    pub fn new(
        subscriber: Subscriber,
        config: SourceConfig,
        aggregator: Arc<Aggregator<PubSubHandle>>,
        stats: Arc<Stats>,
    ) -> Self {
        Self {
            subscriber,
            aggregator,
            stats,
            closing: Arc::new(Mutex::new(JoinSet::new())),
            held: Arc::new(Held::new(config.held_max_messages, config.held_max_bytes)),
            config,
        }
    }

    /// What the service holds now (for tests and metrics).
    pub fn held(&self) -> Arc<Held> {
        self.held.clone()
    }

    /// Pulls until `stop` turns true; returns the streams still closing.
    pub async fn run(self, stop: watch::Receiver<bool>) -> Closing {
        let this = Arc::new(self);
        let mut streams = JoinSet::new();
        for index in 0..this.config.streams.max(1) {
            let this = this.clone();
            let stop = stop.clone();
            streams.spawn(async move { this.run_stream(index, stop).await });
        }
        while streams.join_next().await.is_some() {}
        Closing(this.closing.clone())
    }

    async fn run_stream(&self, index: usize, mut stop: watch::Receiver<bool>) {
        let mut backoff = RECONNECT_BACKOFF_MIN;
        // One wait for the stop for the stream's whole life, polled beside
        // each read (made anew per message, it would register with the
        // watch and leave it again for every message); once it is ready
        // this returns, so it is never polled again.
        let stopped = stop.wait_for(|s| *s);
        let mut stopped = std::pin::pin!(stopped);
        loop {
            let mut stream = self
                .subscriber
                .subscribe(self.config.subscription.clone())
                .set_max_outstanding_messages(self.config.max_outstanding_messages)
                .set_max_outstanding_bytes(self.config.max_outstanding_bytes)
                .set_max_lease_extension(self.config.lease_extension)
                .set_shutdown_behavior(ShutdownBehavior::WaitForProcessing)
                .build();
            let token = stream.shutdown_token();
            let failure = loop {
                // At the cap, wait for room instead of reading the stream.
                let full = self.held.is_full();
                tokio::select! {
                    biased;
                    _ = &mut stopped => {
                        self.closing.lock().spawn(async move { token.shutdown().await });
                        return;
                    }
                    _ = self.held.room(), if full => {}
                    next = stream.next(), if !full => match next {
                        Some(Ok((message, handler))) => {
                            backoff = RECONNECT_BACKOFF_MIN;
                            self.accept(message, handler);
                        }
                        Some(Err(error)) => break error.to_string(),
                        None => break "stream ended".to_string(),
                    },
                }
            };
            self.stats.reconnects.add(1);
            tracing::warn!(stream = index, error = %failure, "StreamingPull failed; reconnecting");
            self.closing
                .lock()
                .spawn(async move { token.shutdown().await });
            tokio::select! {
                _ = &mut stopped => return,
                _ = tokio::time::sleep(backoff) => {}
            }
            backoff = (backoff * 2).min(RECONNECT_BACKOFF_MAX);
        }
    }

    fn accept(&self, message: Message, handler: Handler) {
        self.stats.received.add(1);
        self.stats.in_flight.inc(1);
        self.stats.bytes_in_flight.inc(message.data.len() as u64);
        let item = to_item(&message);
        let published = message.publish_time.and_then(|t| {
            let d = Duration::new(
                u64::try_from(t.seconds()).ok()?,
                u32::try_from(t.nanos()).ok()?,
            );
            Some(std::time::UNIX_EPOCH + d)
        });
        let held = self.held.hold(message.data.len() as u64);
        self.aggregator.add(Pending {
            handle: PubSubHandle {
                handler,
                _held: held,
            },
            item,
            bytes: message.data.len(),
            published,
        });
    }
}

/// What the subscription says about where undeliverable messages go.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum DeadLetterPolicy {
    /// Messages nacked `max_delivery_attempts` times go to `topic`.
    Configured {
        /// The dead-letter topic.
        topic: String,
        /// Deliveries before a message is dead-lettered.
        max_delivery_attempts: i32,
    },
    /// None: a message hotcount must nack (a quarantine record the store
    /// refuses) comes back forever.
    Missing,
    /// The subscription could not be read (e.g. no `pubsub.subscriptions.get`).
    Unknown(String),
}

impl DeadLetterPolicy {
    /// The policy of a subscription as read (GetSubscription's answer).
    pub fn of(
        read: &Result<google_cloud_pubsub::model::Subscription, google_cloud_pubsub::Error>,
    ) -> Self {
        match read {
            Ok(sub) => match &sub.dead_letter_policy {
                Some(policy) if !policy.dead_letter_topic.is_empty() => Self::Configured {
                    topic: policy.dead_letter_topic.clone(),
                    max_delivery_attempts: policy.max_delivery_attempts,
                },
                _ => Self::Missing,
            },
            Err(error) => Self::Unknown(error.to_string()),
        }
    }

    /// Logs what the policy means for poison that cannot be quarantined:
    /// WARN when it is missing or unknown.
    pub fn log(&self, subscription: &str) {
        match self {
            Self::Configured {
                topic,
                max_delivery_attempts,
            } => tracing::info!(
                subscription,
                dead_letter_topic = %topic,
                max_delivery_attempts,
                "dead-letter policy in place"
            ),
            Self::Missing => tracing::warn!(
                subscription,
                "the subscription has no dead-letter policy: a message whose quarantine record the store refuses is nacked and will be redelivered forever (run `hotcount setup` or add one)"
            ),
            Self::Unknown(error) => tracing::warn!(
                subscription,
                %error,
                "could not read the subscription's dead-letter policy; without one, a message whose quarantine record the store refuses is redelivered forever"
            ),
        }
    }
}

/// Parses a message into an event, or a poison record with its reason.
pub fn to_item(message: &Message) -> Item {
    Item::parse(&message.message_id, &message.data, || {
        message
            .attributes
            .iter()
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect()
    })
}
