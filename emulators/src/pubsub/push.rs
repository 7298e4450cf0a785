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
//!
//! Cost: a request per message is the protocol, so each is made lean: the
//! endpoint is parsed and its headers built once per push config
//! ([`Target`]), the bearer header once per token, the wrapped body
//! written straight into its buffer, and `http://` endpoints reached with
//! hyper's HTTP/1.1 client on a pool of kept-alive connections of their
//! own (other schemes go through reqwest, with TLS).

use std::collections::{BTreeMap, VecDeque};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use base64::Engine as _;
use bytes::Bytes;
use http::header::{self, HeaderName, HeaderValue};
use http_body_util::{BodyExt as _, Full};
use hyper::client::conn::http1::SendRequest;
use parking_lot::Mutex;
#[cfg(test)]
use serde_json::{json, Map, Value};
use tokio::sync::mpsc;

#[cfg(test)]
use super::json::base64_encode;
use super::json::timestamp;
use super::oidc;
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
    let name: Arc<str> = name.into();
    let clock = shared.ctx.clock.clone();
    // Prepared again only when the push config changes.
    let mut target: Option<Arc<Target>> = None;
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
        let target = match &target {
            Some(t) if t.push == push => t.clone(),
            _ => target.insert(Arc::new(Target::new(push))).clone(),
        };
        for message in messages {
            in_flight += 1;
            tokio::spawn(deliver(
                shared.clone(),
                name.clone(),
                uid,
                target.clone(),
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
    name: Arc<str>,
    uid: u64,
    target: Arc<Target>,
    deadline: Duration,
    message: pb::ReceivedMessage,
    done: mpsc::UnboundedSender<Done>,
) {
    let clock = shared.ctx.clock.clone();
    let started = clock.elapsed();
    let mut shutdown = shared.shutdown.subscribe();
    let answer = tokio::select! {
        answer = send(&shared, &name, &target, deadline, &message) => answer,
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

/// Where and how one push config sends: the settings, prepared once.
struct Target {
    push: Push,
    /// `http://` endpoints: hyper's client on connections of our own;
    /// `None`: reqwest (https).
    plain: Option<Plain>,
    /// The `Authorization` header of the token in use, and when that
    /// token was issued (reused as the signer would reuse it).
    bearer: Mutex<Option<(HeaderValue, SystemTime)>>,
}

/// A plain HTTP endpoint and the idle connections to it.
struct Plain {
    /// `host:port` to connect to.
    connect_to: String,
    /// The request target (path and query).
    path: http::Uri,
    /// The `Host` header (the port only when not 80), as reqwest sends it.
    host: HeaderValue,
    /// Kept-alive connections between requests (at most one per request
    /// outstanding, so at most the push window).
    idle: Mutex<Vec<SendRequest<Full<Bytes>>>>,
}

impl Target {
    fn new(push: Push) -> Self {
        let plain = reqwest::Url::parse(&push.endpoint)
            .ok()
            .filter(|url| url.scheme() == "http")
            .and_then(|url| {
                let host = url.host_str()?;
                let port = url.port_or_known_default()?;
                let host_header = match url.port() {
                    Some(port) => format!("{host}:{port}"),
                    None => host.to_string(),
                };
                let path = match url.query() {
                    Some(query) => format!("{}?{query}", url.path()),
                    None => url.path().to_string(),
                };
                Some(Plain {
                    connect_to: format!("{host}:{port}"),
                    path: path.parse().ok()?,
                    host: HeaderValue::from_str(&host_header).ok()?,
                    idle: Mutex::new(Vec::new()),
                })
            });
        Self {
            push,
            plain,
            bearer: Mutex::new(None),
        }
    }

    /// The `Authorization` header of the push config's OIDC token (none
    /// without one); an error when no token can be signed.
    fn bearer(&self, shared: &Shared) -> Result<Option<HeaderValue>, String> {
        let Some((email, audience)) = &self.push.oidc else {
            return Ok(None);
        };
        let now = SystemTime::now();
        if let Some((header, issued)) = &*self.bearer.lock() {
            if oidc::reusable(*issued, now) {
                return Ok(Some(header.clone()));
            }
        }
        let (token, issued) = shared.signer()?.token_issued(email, audience, now)?;
        let header = HeaderValue::try_from(format!("Bearer {token}"))
            .map_err(|e| format!("a token that is not a header value: {e}"))?;
        *self.bearer.lock() = Some((header.clone(), issued));
        Ok(Some(header))
    }
}

/// Builds and sends the push request; its answer.
async fn send(
    shared: &Shared,
    name: &str,
    target: &Target,
    deadline: Duration,
    received: &pb::ReceivedMessage,
) -> Answer {
    if shared.ctx.faults.before("Push").await.is_err() {
        return Answer::Fault;
    }
    shared.ctx.counters.bump("Push");
    let push = &target.push;
    let message = received.message.as_ref();
    let mut headers = http::HeaderMap::with_capacity(6);
    headers.insert(header::USER_AGENT, HeaderValue::from_static(USER_AGENT));
    headers.insert(header::ACCEPT, HeaderValue::from_static("*/*"));
    let body: Bytes = match push.unwrapped {
        None => {
            headers.insert(
                header::CONTENT_TYPE,
                HeaderValue::from_static("application/json"),
            );
            write_wrapped_body(name, received).into()
        }
        Some(write_metadata) => {
            let empty = pb::PubsubMessage::default();
            let message = message.unwrap_or(&empty);
            if write_metadata {
                for (key, value) in metadata_headers(name, message) {
                    headers.append(key, value);
                }
            }
            Bytes::copy_from_slice(&message.data)
        }
    };
    match target.bearer(shared) {
        Ok(Some(bearer)) => {
            headers.insert(header::AUTHORIZATION, bearer);
        }
        Ok(None) => {}
        Err(error) => {
            tracing::warn!(subscription = %name, %error, "no OIDC token for a push request");
            return Answer::Fault;
        }
    }
    let timeout = shared.ctx.clock.real_duration(deadline);
    if let Some(plain) = &target.plain {
        return post_plain(plain, headers, body, timeout).await;
    }
    let http = match shared.http() {
        Ok(http) => http,
        Err(error) => {
            tracing::warn!(subscription = %name, %error, "no HTTP client for push requests");
            return Answer::ConnectionError;
        }
    };
    let request = http
        .post(&push.endpoint)
        .timeout(timeout)
        .headers(headers)
        .body(body);
    match request.send().await {
        Ok(response) => Answer::Status(response.status().as_u16()),
        Err(e) if e.is_timeout() => Answer::Timeout,
        Err(_) => Answer::ConnectionError,
    }
}

/// POSTs to a plain HTTP endpoint on an idle connection (or a new one; a
/// request an idle connection closed under before sending it is sent
/// once more on a new one, as reqwest's pool does), within `timeout`
/// until the answer's status; the connection is kept when its answer
/// ended within the rest of it.
async fn post_plain(
    plain: &Plain,
    headers: http::HeaderMap,
    body: Bytes,
    timeout: Duration,
) -> Answer {
    let give_up = tokio::time::Instant::now() + timeout;
    let mut request = http::Request::new(Full::new(body));
    *request.method_mut() = http::Method::POST;
    *request.uri_mut() = plain.path.clone();
    *request.headers_mut() = headers;
    request
        .headers_mut()
        .insert(header::HOST, plain.host.clone());
    let sent = tokio::time::timeout_at(give_up, async {
        let mut request = request;
        let mut fresh = false;
        loop {
            let mut sender = match plain.checkout().await {
                Some(sender) => sender,
                None => {
                    fresh = true;
                    plain.connect().await?
                }
            };
            match sender.try_send_request(request).await {
                Ok(response) => return Ok((sender, response)),
                Err(mut error) => match error.take_message() {
                    Some(unsent) if !fresh && error.error().is_canceled() => request = unsent,
                    _ => return Err(()),
                },
            }
        }
    })
    .await;
    let (mut sender, response) = match sent {
        Err(_) => return Answer::Timeout,
        Ok(Err(())) => return Answer::ConnectionError,
        Ok(Ok(sent)) => sent,
    };
    let status = response.status().as_u16();
    let ended = tokio::time::timeout_at(give_up, async {
        response.into_body().collect().await.is_ok() && sender.ready().await.is_ok()
    });
    if ended.await.unwrap_or(false) {
        plain.idle.lock().push(sender);
    }
    Answer::Status(status)
}

impl Plain {
    /// An idle connection ready for a request, if one is left open.
    async fn checkout(&self) -> Option<SendRequest<Full<Bytes>>> {
        loop {
            let mut sender = self.idle.lock().pop()?;
            if sender.ready().await.is_ok() {
                return Some(sender);
            }
        }
    }

    /// A new connection (its task spawned); `Err` when it cannot be made.
    async fn connect(&self) -> Result<SendRequest<Full<Bytes>>, ()> {
        let stream = tokio::net::TcpStream::connect(&self.connect_to)
            .await
            .map_err(|_| ())?;
        let _ = stream.set_nodelay(true);
        let (sender, connection) =
            hyper::client::conn::http1::handshake(hyper_util::rt::TokioIo::new(stream))
                .await
                .map_err(|_| ())?;
        tokio::spawn(async move {
            let _ = connection.await;
        });
        Ok(sender)
    }
}

/// The wrapped push body: the message (both spellings of `messageId` and
/// `publishTime`; `attributes` and `orderingKey` only when set), the
/// subscription, and `deliveryAttempt` when the subscription has a
/// dead-letter policy. The reference [`write_wrapped_body`] (what is sent)
/// is checked against.
#[cfg(test)]
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

/// [`wrapped_body`] as its JSON text, written straight into the buffer
/// (the same bytes: the same keys in the same order, as `serde_json`'s
/// sorted objects print them).
pub(super) fn write_wrapped_body(subscription: &str, received: &pb::ReceivedMessage) -> Vec<u8> {
    fn string(out: &mut Vec<u8>, s: &str) {
        // Writing to a Vec cannot fail.
        let _ = serde_json::to_writer(&mut *out, s);
    }
    let data_len = received.message.as_ref().map_or(0, |m| m.data.len());
    let mut out = Vec::with_capacity(256 + data_len.div_ceil(3) * 4 + subscription.len());
    out.push(b'{');
    if received.delivery_attempt > 0 {
        out.extend_from_slice(b"\"deliveryAttempt\":");
        out.extend_from_slice(received.delivery_attempt.to_string().as_bytes());
        out.push(b',');
    }
    out.extend_from_slice(b"\"message\":{");
    if let Some(m) = &received.message {
        if !m.attributes.is_empty() {
            out.extend_from_slice(b"\"attributes\":");
            let sorted: BTreeMap<&str, &str> = (m.attributes.iter())
                .map(|(k, v)| (k.as_str(), v.as_str()))
                .collect();
            let _ = serde_json::to_writer(&mut out, &sorted);
            out.push(b',');
        }
        if !m.data.is_empty() {
            out.extend_from_slice(b"\"data\":\"");
            let start = out.len();
            out.resize(start + m.data.len().div_ceil(3) * 4, 0);
            let written = base64::engine::general_purpose::STANDARD
                .encode_slice(&m.data, &mut out[start..])
                .unwrap_or(0);
            out.truncate(start + written);
            out.extend_from_slice(b"\",");
        }
        out.extend_from_slice(b"\"messageId\":");
        string(&mut out, &m.message_id);
        out.extend_from_slice(b",\"message_id\":");
        string(&mut out, &m.message_id);
        if !m.ordering_key.is_empty() {
            out.extend_from_slice(b",\"orderingKey\":");
            string(&mut out, &m.ordering_key);
        }
        if let Some(time) = m.publish_time.as_ref().map(timestamp) {
            let time = time.as_str().unwrap_or_default();
            out.extend_from_slice(b",\"publishTime\":");
            string(&mut out, time);
            out.extend_from_slice(b",\"publish_time\":");
            string(&mut out, time);
        }
    }
    out.extend_from_slice(b"},\"subscription\":");
    string(&mut out, subscription);
    out.push(b'}');
    out
}

/// The headers of an unwrapped push with `writeMetadata`: each attribute as
/// a header of its name (those that are not valid header names or values
/// are left out), then `x-goog-pubsub-subscription-name`, `-message-id`,
/// `-publish-time` and, when set, `-ordering-key`.
pub(super) fn metadata_headers(
    subscription: &str,
    message: &pb::PubsubMessage,
) -> Vec<(HeaderName, HeaderValue)> {
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
    fn the_written_body_is_the_wrapped_bodys_json_byte_for_byte() {
        let mut received = pb::ReceivedMessage {
            ack_id: "1-1-1".into(),
            message: Some(pb::PubsubMessage {
                data: b"{\"postId\":\"p\"} \xff\x00".to_vec(),
                attributes: [
                    ("zeta".to_string(), "last".to_string()),
                    ("alpha \"q\"".to_string(), "\u{e9}\n\\".to_string()),
                ]
                .into(),
                message_id: "7\"1".into(),
                publish_time: Some(prost_types::Timestamp {
                    seconds: 1_700_000_000,
                    nanos: 5,
                }),
                ordering_key: "post-\u{1F600}".into(),
            }),
            delivery_attempt: 3,
        };
        let subscription = "projects/p/subscriptions/s";
        for case in 0..4 {
            match case {
                1 => received.delivery_attempt = 0,
                2 => {
                    let m = received.message.as_mut().expect("message");
                    (m.data, m.attributes, m.ordering_key) = (Vec::new(), [].into(), String::new());
                    m.publish_time = None;
                }
                3 => received.message = None,
                _ => {}
            }
            let written = write_wrapped_body(subscription, &received);
            assert_eq!(
                String::from_utf8(written).expect("UTF-8"),
                wrapped_body(subscription, &received).to_string(),
                "case {case}"
            );
        }
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
