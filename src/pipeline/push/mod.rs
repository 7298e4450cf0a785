//! Pub/Sub push -> (event or poison, ack handle) into the aggregator: the
//! push source, `POST /pubsub/push`, where each request is held open until
//! its message is settled and the answer is the ack.
//!
//! A request is authenticated ([`auth`]), given one of
//! `--push-max-in-flight` slots (429 without one), read ([`body`]: the
//! wrapped JSON or the unwrapped form) and added to the same aggregator
//! and flusher as a pulled message, with a [`PushHandle`]: the flusher's
//! ack answers **204**, its nack **503**. A request not settled within its
//! hold cap (below the subscription's ack deadline, when Pub/Sub would
//! give up on it anyway) is answered 503; its handle stays in its batch.
//! On its own listener the cap is `http::serve_route`'s sweep ([`Push`]
//! is the route's [`TimeLimit`]): no timer per request; behind the
//! router, a timer per request ([`Push::handle`]).
//!
//! Invariants:
//! - 204 leaves only through [`PushHandle`]'s ack, which only the flusher
//!   calls, for a message whose effects or quarantine record committed;
//!   every other way a request ends (nack, a dropped handle, the hold cap,
//!   closed, refused, over capacity) is a non-2xx, which Pub/Sub redelivers.
//! - Nothing is dropped silently: a body that is too large or not a push
//!   request is quarantined like any poison (then 204), never a 4xx.
//! - A refused request never reaches the pipeline; refusals, 429s and
//!   hold-cap answers are counted by outcome and logged rate-limited.
//! - Connections that never send a request cannot crowd out the others
//!   before authentication: on its own listener (`http::serve_route`) a
//!   connection's headers are due within a timeout and connections are
//!   capped ([`PushConfig::max_connections`]).
//! - Memory is bounded: a slot is held from admission until the handle is
//!   acked or nacked (not merely answered), so at most
//!   `--push-max-in-flight` messages and bodies of at most
//!   [`body::MAX_BODY_BYTES`] are held.
//! - Once [`Push::close`] returns, nothing more enters the aggregator: the
//!   flusher's drain then settles (and so answers) every admitted request.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use axum::body::{Bytes, HttpBody};
use axum::extract::{Request, State};
use axum::http::StatusCode;
use axum::routing::post;
use axum::Router;
use parking_lot::RwLock;
use tokio::sync::oneshot;
use tokio::time::Instant;

use crate::http::TimeLimit;
use crate::model::item::Item;
use crate::pipeline::acker::{AckHandle, Confirmation};
use crate::pipeline::aggregator::{Aggregator, Pending};
use crate::telemetry::{PushOutcome, Stats};

pub mod auth;
pub mod body;
pub mod jwks;

pub use crate::config::{AuthConfig, GoogleAuth, PushConfig, MIN_ACK_DEADLINE};
pub use auth::{Authenticator, Refusal, TokenMemo};

/// The path Pub/Sub pushes to.
pub const PATH: &str = "/pubsub/push";

/// A pushed message's handle: its ack or nack is the request's answer,
/// and it holds one of the endpoint's slots until then.
#[derive(Debug)]
pub struct PushHandle {
    answer: oneshot::Sender<bool>,
    _slot: Slot,
}

/// The endpoint's `--push-max-in-flight` slots: a count, taken with one
/// compare-and-swap and given back with one subtraction (a semaphore's
/// release also takes its waiters' lock, and nothing waits for a slot
/// here: a request over the cap is answered 429 at once).
///
/// Invariant: `taken` never exceeds `max`.
#[derive(Debug)]
struct Slots {
    taken: std::sync::atomic::AtomicUsize,
    max: usize,
}

/// One taken slot of [`Slots`], given back when dropped.
#[derive(Debug)]
struct Slot(Arc<Slots>);

impl Slots {
    /// A slot, or `None` when all `max` are taken.
    fn try_take(self: &Arc<Self>) -> Option<Slot> {
        use std::sync::atomic::Ordering;
        self.taken
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |taken| {
                (taken < self.max).then_some(taken + 1)
            })
            .ok()
            .map(|_| Slot(self.clone()))
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        self.0
            .taken
            .fetch_sub(1, std::sync::atomic::Ordering::Release);
    }
}

impl AckHandle for PushHandle {
    fn ack(self) -> Option<Confirmation> {
        // The request may have been answered already (the hold cap) or its
        // client gone: then the redelivery is a duplicate.
        let _ = self.answer.send(true);
        None
    }

    fn nack(self) {
        let _ = self.answer.send(false);
    }
}

/// Where admitted messages go while the endpoint is open.
struct Intake {
    aggregator: Arc<Aggregator<PushHandle>>,
    hold_max: Duration,
}

struct Inner {
    auth: Authenticator,
    slots: Arc<Slots>,
    subscription: String,
    stats: Arc<Stats>,
    /// `None` before [`Push::open`] and after [`Push::close`].
    intake: RwLock<Option<Intake>>,
}

/// The push endpoint: its route answers 503 until [`Push::open`] connects
/// it to a pipeline, and again from [`Push::close`]. A cheap handle.
#[derive(Clone)]
pub struct Push {
    inner: Arc<Inner>,
}

impl Push {
    /// An endpoint with `config`'s authentication and slots, not yet open.
    pub fn new(config: &PushConfig, stats: Arc<Stats>) -> Self {
        Self {
            inner: Arc::new(Inner {
                auth: Authenticator::new(&config.auth, stats.clone()),
                slots: Arc::new(Slots {
                    taken: Default::default(),
                    max: config.max_in_flight,
                }),
                subscription: config.subscription.clone(),
                stats,
                intake: RwLock::new(None),
            }),
        }
    }

    /// The route `POST /pubsub/push`.
    pub fn router(&self) -> Router {
        Router::new()
            .route(PATH, post(receive))
            .with_state(self.clone())
    }

    /// Starts admitting messages into `aggregator`, each request held at
    /// most `hold_max`; fetches the signing keys first (a failure is
    /// logged: requests fetch again).
    pub async fn open(&self, aggregator: Arc<Aggregator<PushHandle>>, hold_max: Duration) {
        self.inner.auth.prefetch().await;
        *self.inner.intake.write() = Some(Intake {
            aggregator,
            hold_max,
        });
    }

    /// Stops admitting: every request from now on is answered 503, and once
    /// this returns no request is between its check and its add.
    pub fn close(&self) {
        *self.inner.intake.write() = None;
    }

    /// The ack deadline of `subscription` (a full name) in GetSubscription's
    /// answer `read`, if it was read.
    pub fn ack_deadline_of(
        read: &Result<google_cloud_pubsub::model::Subscription, google_cloud_pubsub::Error>,
        subscription: &str,
    ) -> Option<Duration> {
        match read {
            Ok(sub) => u64::try_from(sub.ack_deadline_seconds)
                .ok()
                .filter(|s| *s > 0)
                .map(Duration::from_secs),
            Err(error) => {
                tracing::warn!(subscription, %error, "could not read the subscription's ack deadline; holding push requests below Pub/Sub's minimum (10 s)");
                None
            }
        }
    }
}

/// `POST /pubsub/push` through the router (the endpoint shares the
/// metrics endpoint's address): held to the cap by a timer.
async fn receive(State(push): State<Push>, request: Request) -> StatusCode {
    push.handle(request).await
}

impl Push {
    /// One `POST /pubsub/push` request (routed by the router): its
    /// answer's status, 503 at the hold cap (a timer).
    pub async fn handle<B>(&self, request: axum::http::Request<B>) -> StatusCode
    where
        B: HttpBody<Data = Bytes> + Unpin + Send + 'static,
        B::Error: std::fmt::Display + Send,
    {
        let Some(hold_max) = self.limit() else {
            return self.inner.answer(PushOutcome::Closed);
        };
        let arrived = Instant::now();
        let served = Push::serve(self.connection(), request);
        let held = tokio::time::timeout_at(arrived + hold_max, served);
        match held.await {
            Ok(status) => status,
            Err(_) => self.timed_out(arrived.elapsed()),
        }
    }

    /// One `POST /pubsub/push` request, with no hold cap of its own (on
    /// `http::serve_route`, whose sweep answers it at the cap: [`Push`]'s
    /// [`TimeLimit`]): its answer's status.
    ///
    /// The future owns `connection` (its own count, so no count every
    /// connection writes is cloned) and only the request's headers
    /// and body: its head is let go here, since it shares the
    /// connection's read buffer (one kept through the hold made hyper
    /// allocate a new buffer for each next request), and the headers once
    /// the body is parsed. Written as one block over small awaits (a
    /// token's full check and an oversized body's digest boxed), it is
    /// small enough (about 450 bytes) to go unboxed into the connection.
    pub fn serve<P, B>(
        connection: P,
        request: axum::http::Request<B>,
    ) -> impl Future<Output = StatusCode> + Send + 'static
    where
        P: AsRef<PushConnection> + Send + 'static,
        B: HttpBody<Data = Bytes> + Unpin + Send + 'static,
        B::Error: std::fmt::Display + Send,
    {
        let arrived = Instant::now();
        let (axum::http::request::Parts { headers, .. }, body) = request.into_parts();
        async move {
            let connection = connection.as_ref();
            let inner = &*connection.push.inner;
            if inner.intake.read().is_none() {
                return inner.answer(PushOutcome::Closed);
            }
            if let Err(refusal) = inner.auth.check(&headers, &connection.token).await {
                return inner.refuse(refusal);
            }
            let Some(slot) = inner.slots.try_take() else {
                return inner.over_capacity();
            };
            let read = match body::read(body).await {
                Ok(read) => read,
                Err(error) => return inner.unread(&error),
            };
            let Some(settled) = inner.admit_read(&headers, read, slot) else {
                return inner.answer(PushOutcome::Closed);
            };
            drop(headers);
            let outcome = match settled.await {
                Ok(true) => PushOutcome::Acked,
                // Nacked, or the handle dropped unsettled (a commit task failed).
                Ok(false) | Err(_) => PushOutcome::Nacked,
            };
            inner.stats.push_hold.record(arrived.elapsed());
            inner.answer(outcome)
        }
    }

    /// A handle for one connection's requests ([`Push::serve`]).
    pub fn connection(&self) -> PushConnection {
        PushConnection {
            push: self.clone(),
            token: TokenMemo::default(),
        }
    }
}

/// One connection's handle on the endpoint: what its requests clone is
/// its own, and it remembers the token its last request proved
/// ([`TokenMemo`]).
pub struct PushConnection {
    push: Push,
    token: TokenMemo,
}

impl AsRef<PushConnection> for PushConnection {
    fn as_ref(&self) -> &PushConnection {
        self
    }
}

/// The hold cap as `http::serve_route`'s time limit: a request unsettled
/// after it is answered 503, counted and logged here, its handle left in
/// its batch.
impl TimeLimit for Push {
    fn limit(&self) -> Option<Duration> {
        self.inner.intake.read().as_ref().map(|i| i.hold_max)
    }

    fn timed_out(&self, held: Duration) -> StatusCode {
        let inner = &self.inner;
        if inner
            .stats
            .warnings
            .admit("push requests held to the cap", "timed_out")
        {
            tracing::warn!(?held, "push request not settled within its hold cap: answered 503 (its batch may still commit; the redelivery is then a duplicate)");
        }
        inner.stats.push_hold.record(held);
        inner.answer(PushOutcome::TimedOut)
    }
}

impl Inner {
    /// Answers a request over `--push-max-in-flight` 429 (counted, logged
    /// rate-limited).
    fn over_capacity(&self) -> StatusCode {
        if self
            .stats
            .warnings
            .admit("push requests over --push-max-in-flight", "429")
        {
            tracing::warn!(
                max = self.slots.max,
                "push request answered 429: --push-max-in-flight requests are held (Pub/Sub retries it)"
            );
        }
        self.answer(PushOutcome::OverCapacity)
    }

    /// Answers a request whose body did not arrive whole 503 (counted,
    /// logged rate-limited).
    fn unread(&self, error: &dyn std::fmt::Display) -> StatusCode {
        if self
            .stats
            .warnings
            .admit("push request bodies not read", "unread")
        {
            tracing::warn!(%error, "push request body did not arrive whole: answered 503 (Pub/Sub retries it)");
        }
        self.answer(PushOutcome::Unread)
    }

    /// Parses the body `read` (with the request's `headers`) and adds its
    /// message to the aggregator with `slot`: the receiver its handle's
    /// ack or nack settles, or `None` when closed.
    fn admit_read(
        &self,
        headers: &axum::http::HeaderMap,
        read: body::Read,
        slot: Slot,
    ) -> Option<oneshot::Receiver<bool>> {
        let delivery = body::parse(headers, read, &self.subscription);
        if let Some(from) = &delivery.other_subscription {
            if self
                .stats
                .warnings
                .admit("push from another subscription", "subscription")
            {
                tracing::warn!(from = %from, expected = %self.subscription, "a push request names another subscription than --subscription; counted all the same (markers and quarantine are namespaced by --consumer)");
            }
        }
        let (answer, settled) = oneshot::channel();
        let pending = Pending {
            handle: PushHandle {
                answer,
                _slot: slot,
            },
            bytes: delivery.bytes,
            published: delivery.published,
            item: delivery.item,
        };
        self.admit(pending).then_some(settled)
    }

    /// Adds `pending` to the aggregator unless closed; counts it as received.
    fn admit(&self, pending: Pending<PushHandle>) -> bool {
        let intake = self.intake.read();
        let Some(intake) = intake.as_ref() else {
            return false;
        };
        self.stats.received.add(1);
        self.stats.in_flight.inc(1);
        self.stats.bytes_in_flight.inc(pending.bytes as u64);
        if let Item::Poison(record) = &pending.item {
            tracing::debug!(
                kind = record.kind,
                "push request carries poison; it is quarantined with its batch"
            );
        }
        intake.aggregator.add(pending);
        true
    }

    /// Counts a refusal, logs it (rate-limited) and answers it.
    fn refuse(&self, refusal: Refusal) -> StatusCode {
        let (outcome, failure, detail) = match refusal {
            Refusal::Unauthenticated(failure, detail) => {
                (PushOutcome::Unauthenticated, Some(failure), detail)
            }
            Refusal::Forbidden(failure, detail) => (PushOutcome::Forbidden, Some(failure), detail),
            Refusal::KeysUnavailable(detail) => (PushOutcome::KeysUnavailable, None, detail),
        };
        match failure {
            Some(failure) => {
                self.stats.push_auth_failures.add(failure, 1);
                let reason = crate::telemetry::labels::Label::value(failure);
                if self.stats.warnings.admit("push requests refused", reason) {
                    tracing::warn!(reason, %detail, "push request refused by authentication");
                }
            }
            None => {
                if self
                    .stats
                    .warnings
                    .admit("push requests without signing keys", "jwks")
                {
                    tracing::warn!(%detail, "push request answered 503: the token signing keys could not be fetched");
                }
            }
        }
        self.answer(outcome)
    }

    /// Counts `outcome` and answers with its status.
    fn answer(&self, outcome: PushOutcome) -> StatusCode {
        self.stats.push_requests.add(outcome, 1);
        status_of(outcome)
    }
}

/// The HTTP status of each outcome: only `Acked` is a 2xx.
pub fn status_of(outcome: PushOutcome) -> StatusCode {
    match outcome {
        PushOutcome::Acked => StatusCode::NO_CONTENT,
        PushOutcome::OverCapacity => StatusCode::TOO_MANY_REQUESTS,
        PushOutcome::Unauthenticated => StatusCode::UNAUTHORIZED,
        PushOutcome::Forbidden => StatusCode::FORBIDDEN,
        PushOutcome::Nacked
        | PushOutcome::TimedOut
        | PushOutcome::Closed
        | PushOutcome::KeysUnavailable
        | PushOutcome::Unread => StatusCode::SERVICE_UNAVAILABLE,
    }
}

#[cfg(test)]
mod tests;
