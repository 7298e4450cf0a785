//! Push delivery: one task per push subscription leases ready messages
//! within its push window and POSTs each to the endpoint; the HTTP answer
//! settles the lease (102, 200, 201, 202, 204 ack; anything else, a
//! connection error or no answer within the ack deadline nack).
//!
//! Invariants:
//! - at most `window` push requests of a subscription are outstanding; the
//!   window starts at `PubSubConfig::push_initial_window`, grows by one per
//!   ack while more than 99 % of the last 100 answers acked with an average
//!   latency under a second, and halves on each failure (never below 1);
//! - after `n` failures in a row the whole subscription pauses
//!   `min(100 ms * 2^(n-1), 60 s)` (push backoff), on the emulated clock;
//! - a message goes through the same state machine as a pulled one (lease,
//!   retry policy, dead-lettering, ordering keys with one message of a key
//!   outstanding at a time), so push and pull only differ in who takes it;
//! - an answer only settles the lease it was sent for; a push task stops as
//!   soon as its subscription is deleted or switched to pull.

use std::collections::VecDeque;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use serde_json::{json, Map, Value};
use tokio::sync::mpsc;

use super::json::{base64_encode, timestamp};
use super::resources::Push;
use super::subscription::{AckId, Lease};
use super::Shared;
use crate::proto::pubsub_v1 as pb;

/// HTTP statuses that acknowledge a push (Pub/Sub's push documentation).
pub const ACK_STATUSES: [u16; 5] = [102, 200, 201, 202, 204];

/// The User-Agent Google's push requests carry.
pub const USER_AGENT: &str =
    "APIs-Google; (+https://developers.google.com/webmasters/APIs-Google.html)";

/// How often (real time) an idle push task looks at the clock and its timers.
const POLL_INTERVAL: Duration = Duration::from_millis(50);

/// First and longest push backoff after failures.
const MIN_PUSH_BACKOFF: Duration = Duration::from_millis(100);
const MAX_PUSH_BACKOFF: Duration = Duration::from_secs(60);

/// Answers the window's health is judged on.
const RECENT_ANSWERS: usize = 100;

/// How one push request ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Answer {
    /// The endpoint answered with this HTTP status.
    Status(u16),
    /// No answer within the ack deadline.
    Timeout,
    /// No connection, or it broke.
    ConnectionError,
    /// An injected `error` rule on `Push`: not sent.
    Fault,
}

impl Answer {
    fn acks(self) -> bool {
        matches!(self, Answer::Status(s) if ACK_STATUSES.contains(&s))
    }

    fn label(self) -> String {
        match self {
            Answer::Status(s) => s.to_string(),
            Answer::Timeout => "timeout".into(),
            Answer::ConnectionError => "connection_error".into(),
            Answer::Fault => "fault".into(),
        }
    }
}

/// A settled push request, as the window sees it.
struct Done {
    acked: bool,
    latency: Duration,
}

/// The push window and push backoff of one subscription.
#[derive(Debug)]
pub(super) struct Window {
    size: u64,
    max: u64,
    recent: VecDeque<(bool, Duration)>,
    failures_in_row: u32,
    paused_until: Duration,
}

impl Window {
    pub(super) fn new(initial: u64, max: u64) -> Self {
        let max = max.max(1);
        Self {
            size: initial.clamp(1, max),
            max,
            recent: VecDeque::with_capacity(RECENT_ANSWERS),
            failures_in_row: 0,
            paused_until: Duration::ZERO,
        }
    }

    /// Requests allowed outstanding now.
    pub(super) fn size(&self) -> u64 {
        self.size
    }

    /// Whether delivery is paused at `now` (push backoff).
    fn paused(&self, now: Duration) -> bool {
        now < self.paused_until
    }

    fn healthy(&self) -> bool {
        let n = self.recent.len() as u32;
        let failed = self.recent.iter().filter(|(ok, _)| !ok).count() as u32;
        let latency: Duration = self.recent.iter().map(|(_, l)| *l).sum();
        n > 0 && failed * 100 < n && latency / n < Duration::from_secs(1)
    }

    /// Records an answer at emulated time `now`.
    pub(super) fn answered(&mut self, acked: bool, latency: Duration, now: Duration) {
        if self.recent.len() == RECENT_ANSWERS {
            self.recent.pop_front();
        }
        self.recent.push_back((acked, latency));
        if acked {
            self.failures_in_row = 0;
            if self.healthy() {
                self.size = (self.size + 1).min(self.max);
            }
            return;
        }
        self.size = (self.size / 2).max(1);
        self.failures_in_row = self.failures_in_row.saturating_add(1);
        let exp = (self.failures_in_row - 1).min(20);
        let pause = MIN_PUSH_BACKOFF
            .saturating_mul(1 << exp)
            .min(MAX_PUSH_BACKOFF);
        self.paused_until = self.paused_until.max(now + pause);
    }
}

/// Starts the push task of subscription `name` (incarnation `uid`).
pub(super) fn start(shared: Arc<Shared>, name: String, uid: u64) {
    tokio::spawn(run(shared, name, uid));
}

/// The push task: leases within the window, sends, adjusts the window.
async fn run(shared: Arc<Shared>, name: String, uid: u64) {
    let clock = shared.ctx.clock.clone();
    let mut window = Window::new(
        shared.config.push_initial_window,
        shared.config.push_max_window,
    );
    let (done_tx, mut done_rx) = mpsc::unbounded_channel::<Done>();
    let mut in_flight: u64 = 0;
    let mut shutdown = shared.shutdown.subscribe();
    tracing::debug!(subscription = %name, "push task started");
    loop {
        if *shutdown.borrow_and_update() {
            return;
        }
        while let Ok(done) = done_rx.try_recv() {
            in_flight = in_flight.saturating_sub(1);
            window.answered(done.acked, done.latency, clock.elapsed());
        }
        let Ok(notify) = shared.with(|s, _, _| s.sub(&name, Some(uid)).map(|x| x.notify.clone()))
        else {
            return;
        };
        let notified = notify.notified();
        tokio::pin!(notified);
        notified.as_mut().enable();
        let step = shared.with(|s, now, wall| {
            let (push, deadline) = s.push_settings(&name, uid)?;
            s.set_push_window(&name, uid, window.size());
            let room = window.size().saturating_sub(in_flight);
            let messages = if room > 0 && !window.paused(now) {
                let lease = Lease {
                    stream: None,
                    deadline,
                    max: usize::try_from(room).unwrap_or(usize::MAX),
                };
                s.take(&name, Some(uid), lease, now, wall).ok()?
            } else {
                Vec::new()
            };
            let next_due = s.sub(&name, Some(uid)).ok().and_then(|x| x.next_due());
            Some((push, deadline, messages, next_due, now))
        });
        let Some((push, deadline, messages, next_due, now)) = step else {
            tracing::debug!(subscription = %name, "push task stopped");
            return;
        };
        let push = Arc::new(push);
        for message in messages {
            in_flight += 1;
            tokio::spawn(deliver(
                shared.clone(),
                name.clone(),
                uid,
                push.clone(),
                deadline,
                message,
                done_tx.clone(),
            ));
        }
        let mut wait = POLL_INTERVAL;
        for due in [
            next_due,
            Some(window.paused_until).filter(|_| window.paused(now)),
        ]
        .into_iter()
        .flatten()
        {
            wait = wait.min(clock.real_duration(due.saturating_sub(now)));
        }
        tokio::select! {
            Some(done) = done_rx.recv() => {
                in_flight = in_flight.saturating_sub(1);
                window.answered(done.acked, done.latency, clock.elapsed());
            }
            () = &mut notified => {}
            () = tokio::time::sleep(wait.max(Duration::from_millis(1))) => {}
            _ = shutdown.changed() => {}
        }
    }
}

/// Sends one message and settles its lease by the answer.
async fn deliver(
    shared: Arc<Shared>,
    name: String,
    uid: u64,
    push: Arc<Push>,
    deadline: Duration,
    message: pb::ReceivedMessage,
    done: mpsc::UnboundedSender<Done>,
) {
    let clock = shared.ctx.clock.clone();
    let started = clock.elapsed();
    let mut shutdown = shared.shutdown.subscribe();
    let answer = tokio::select! {
        answer = send(&shared, &name, &push, deadline, &message) => answer,
        _ = shutdown.wait_for(|stopped| *stopped) => return,
    };
    let forced_nack = shared.ctx.faults.after("Push").is_some();
    let acked = answer.acks() && !forced_nack;
    let Some(id) = AckId::parse(&message.ack_id) else {
        return;
    };
    let faults = shared.ctx.faults.clone();
    shared.with(|s, now, wall| {
        s.settle_push(&name, uid, &id, acked, now, wall, &faults);
        s.count_push(&name, uid, &answer.label());
    });
    if !acked {
        tracing::debug!(subscription = %name, ack_id = %message.ack_id, answer = %answer.label(), forced_nack, "push nacked");
    }
    let _ = done.send(Done {
        acked,
        latency: clock.elapsed().saturating_sub(started),
    });
}

/// Builds and sends the push request; its answer.
async fn send(
    shared: &Shared,
    name: &str,
    push: &Push,
    deadline: Duration,
    received: &pb::ReceivedMessage,
) -> Answer {
    if shared.ctx.faults.before("Push").await.is_err() {
        return Answer::Fault;
    }
    shared.ctx.counters.bump("Push");
    let http = match shared.http() {
        Ok(http) => http,
        Err(error) => {
            tracing::warn!(subscription = %name, %error, "no HTTP client for push requests");
            return Answer::ConnectionError;
        }
    };
    let message = received.message.clone().unwrap_or_default();
    let mut request = http
        .post(&push.endpoint)
        .timeout(shared.ctx.clock.real_duration(deadline))
        .header(reqwest::header::USER_AGENT, USER_AGENT);
    request = match push.unwrapped {
        None => request
            .header(reqwest::header::CONTENT_TYPE, "application/json")
            .body(wrapped_body(name, received).to_string()),
        Some(write_metadata) => {
            if write_metadata {
                for (key, value) in metadata_headers(name, &message) {
                    request = request.header(key, value);
                }
            }
            request.body(message.data)
        }
    };
    if let Some((email, audience)) = &push.oidc {
        let token = shared
            .signer()
            .and_then(|signer| signer.token(email, audience, SystemTime::now()));
        match token {
            Ok(token) => request = request.bearer_auth(token),
            Err(error) => {
                tracing::warn!(subscription = %name, %error, "no OIDC token for a push request");
                return Answer::Fault;
            }
        }
    }
    match request.send().await {
        Ok(response) => Answer::Status(response.status().as_u16()),
        Err(e) if e.is_timeout() => Answer::Timeout,
        Err(_) => Answer::ConnectionError,
    }
}

/// The wrapped push body: the message (both spellings of `messageId` and
/// `publishTime`; `attributes` and `orderingKey` only when set), the
/// subscription, and `deliveryAttempt` when the subscription has a
/// dead-letter policy.
pub(super) fn wrapped_body(subscription: &str, received: &pb::ReceivedMessage) -> Value {
    let mut message = Map::new();
    if let Some(m) = &received.message {
        if !m.data.is_empty() {
            message.insert("data".into(), json!(base64_encode(&m.data)));
        }
        if !m.attributes.is_empty() {
            message.insert("attributes".into(), json!(m.attributes));
        }
        message.insert("messageId".into(), json!(m.message_id));
        message.insert("message_id".into(), json!(m.message_id));
        if let Some(t) = &m.publish_time {
            message.insert("publishTime".into(), timestamp(t));
            message.insert("publish_time".into(), timestamp(t));
        }
        if !m.ordering_key.is_empty() {
            message.insert("orderingKey".into(), json!(m.ordering_key));
        }
    }
    let mut body = Map::new();
    body.insert("message".into(), Value::Object(message));
    body.insert("subscription".into(), json!(subscription));
    if received.delivery_attempt > 0 {
        body.insert("deliveryAttempt".into(), json!(received.delivery_attempt));
    }
    Value::Object(body)
}

/// The headers of an unwrapped push with `writeMetadata`: each attribute as
/// a header of its name (those that are not valid header names or values
/// are left out), then `x-goog-pubsub-subscription-name`, `-message-id`,
/// `-publish-time` and, when set, `-ordering-key`.
pub(super) fn metadata_headers(
    subscription: &str,
    message: &pb::PubsubMessage,
) -> Vec<(reqwest::header::HeaderName, reqwest::header::HeaderValue)> {
    use reqwest::header::{HeaderName, HeaderValue};
    let mut out = Vec::new();
    let mut add = |key: &str, value: &str| {
        if let (Ok(k), Ok(v)) = (
            HeaderName::from_bytes(key.as_bytes()),
            HeaderValue::from_str(value),
        ) {
            out.push((k, v));
        }
    };
    for (key, value) in &message.attributes {
        add(key, value);
    }
    add("x-goog-pubsub-subscription-name", subscription);
    add("x-goog-pubsub-message-id", &message.message_id);
    if let Some(t) = &message.publish_time {
        if let Some(time) = timestamp(t).as_str() {
            add("x-goog-pubsub-publish-time", time);
        }
    }
    if !message.ordering_key.is_empty() {
        add("x-goog-pubsub-ordering-key", &message.ordering_key);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: Duration = Duration::from_millis(1);

    #[test]
    fn the_window_grows_on_healthy_acks_and_halves_on_failures() {
        let mut w = Window::new(3, 10);
        for _ in 0..5 {
            w.answered(true, 10 * MS, Duration::ZERO);
        }
        assert_eq!(w.size(), 8);
        w.answered(true, 10 * MS, Duration::ZERO);
        w.answered(true, 10 * MS, Duration::ZERO);
        w.answered(true, 10 * MS, Duration::ZERO);
        assert_eq!(w.size(), 10, "capped at the maximum");
        w.answered(false, 10 * MS, Duration::ZERO);
        assert_eq!(w.size(), 5);
        w.answered(true, 10 * MS, Duration::ZERO);
        assert_eq!(w.size(), 5, "not above 99 % acked: no growth");
        let mut slow = Window::new(3, 10);
        slow.answered(true, Duration::from_secs(2), Duration::ZERO);
        assert_eq!(
            slow.size(),
            3,
            "an average latency of a second or more: no growth"
        );
    }

    #[test]
    fn failures_in_a_row_pause_the_subscription_exponentially() {
        let mut w = Window::new(3, 10);
        let now = Duration::from_secs(100);
        w.answered(false, MS, now);
        assert!(w.paused(now + 99 * MS));
        assert!(!w.paused(now + 100 * MS));
        w.answered(false, MS, now);
        assert!(w.paused(now + 199 * MS));
        for _ in 0..20 {
            w.answered(false, MS, now);
        }
        assert!(!w.paused(now + Duration::from_secs(60)), "at most 60 s");
        assert_eq!(w.size(), 1);
        w.answered(true, MS, now);
        assert_eq!(w.failures_in_row, 0);
    }

    #[test]
    fn the_wrapped_body_has_both_spellings_and_leaves_out_unset_fields() {
        let received = pb::ReceivedMessage {
            ack_id: "1-1-1".into(),
            message: Some(pb::PubsubMessage {
                data: b"hello".to_vec(),
                message_id: "42".into(),
                publish_time: Some(prost_types::Timestamp {
                    seconds: 1_700_000_000,
                    nanos: 123_000_000,
                }),
                ..Default::default()
            }),
            delivery_attempt: 0,
        };
        let body = wrapped_body("projects/p/subscriptions/s", &received);
        assert_eq!(
            body,
            json!({
                "message": {
                    "data": "aGVsbG8=",
                    "messageId": "42",
                    "message_id": "42",
                    "publishTime": "2023-11-14T22:13:20.123Z",
                    "publish_time": "2023-11-14T22:13:20.123Z",
                },
                "subscription": "projects/p/subscriptions/s",
            })
        );
    }
}
