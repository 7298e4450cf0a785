//! The Pub/Sub emulator: `google.pubsub.v1` Publisher and Subscriber over
//! gRPC, the REST/JSON surface the admin clients use, and records for tests.
//!
//! Invariant: both transports only convert; every behaviour lives in one
//! state machine (`state` over `subscription`) behind one lock, measured
//! on the emulator's clock.
//!
//! # Layout
//! - `names`: resource names and their validation.
//! - `resources`: subscription/topic settings, defaults and update masks.
//! - `subscription`: one subscription's messages, leases, timers, flow control.
//! - `ordering`: which message of each ordering key may go out next.
//! - `state`: topics, subscriptions, publish, dead-lettering.
//! - `grpc`: the Publisher and Subscriber services.
//! - `stream`: one StreamingPull session.
//! - `push`: push delivery (the push task, its window, the request shapes).
//! - `oidc`: the emulator's RSA key, push tokens and their JWKS.
//! - `rest`, `json`: the REST/JSON surface.
//! - `admin`: `/emulator/v1/pubsub/...` records for tests.
//! - `stats`: the record types ([`SubscriptionStats`], [`AckRecord`], [`UnackedMessage`]).

mod admin;
mod grpc;
mod json;
mod names;
mod oidc;
mod ordering;
mod push;
mod resources;
mod rest;
mod state;
mod stats;
mod stream;
mod subscription;

use std::collections::BTreeMap;
use std::sync::atomic::AtomicU64;
use std::sync::{Arc, OnceLock, Weak};
use std::time::{Duration, SystemTime};

use parking_lot::Mutex;
use tokio::sync::watch;
use tonic::Status;

use crate::proto::pubsub_v1 as pb;
use crate::server::Context;
use state::State;
use subscription::{AckId, AckOutcome, Lease};

pub use stats::{AckRecord, SubscriptionStats, UnackedMessage};

/// Pub/Sub behaviour settings.
#[derive(Clone, Debug)]
pub struct PubSubConfig {
    /// Close every StreamingPull stream with UNAVAILABLE once it has been open
    /// this long (emulated time), as the real service does periodically.
    /// `None` = never.
    pub stream_max_lifetime: Option<Duration>,
    /// Longest real time a Pull with no message ready waits before answering
    /// with no messages.
    pub pull_max_wait: Duration,
    /// Most messages in one StreamingPull response.
    pub max_messages_per_response: usize,
    /// Most ack records kept per subscription (oldest dropped first, counted
    /// in `SubscriptionStats::ack_log_dropped`).
    pub ack_log_capacity: usize,
    /// Push requests a push subscription may have outstanding at first
    /// (Google: "a small single-digit window"). Default 3.
    pub push_initial_window: u64,
    /// Most push requests a push subscription may have outstanding.
    /// Default 1000.
    pub push_max_window: u64,
}

impl Default for PubSubConfig {
    fn default() -> Self {
        Self {
            stream_max_lifetime: None,
            pull_max_wait: Duration::from_millis(500),
            max_messages_per_response: 1000,
            ack_log_capacity: 1_000_000,
            push_initial_window: 3,
            push_max_window: 1000,
        }
    }
}

/// What every handler shares: the state, the context and the settings.
#[derive(Debug)]
pub(crate) struct Shared {
    state: Mutex<State>,
    ctx: Arc<Context>,
    config: PubSubConfig,
    shutdown: watch::Sender<bool>,
    next_stream: AtomicU64,
    /// This, for the push tasks a state change starts.
    me: Weak<Shared>,
    /// The HTTP client push requests go out on, made on first use.
    http: OnceLock<Result<reqwest::Client, String>>,
    /// The key push tokens are signed with, made on first use.
    signer: OnceLock<Result<oidc::Signer, String>>,
}

impl Shared {
    /// Emulated (elapsed, wall) time now.
    fn now(&self) -> (Duration, SystemTime) {
        (self.ctx.clock.elapsed(), self.ctx.clock.now_wall())
    }

    /// Runs `f` on the state at the current emulated time; starts the push
    /// tasks a change asked for.
    fn with<R>(&self, f: impl FnOnce(&mut State, Duration, SystemTime) -> R) -> R {
        let (now, wall) = self.now();
        let mut state = self.state.lock();
        let result = f(&mut state, now, wall);
        if !state.pushers_to_start.is_empty() {
            let start = std::mem::take(&mut state.pushers_to_start);
            drop(state);
            self.start_pushers(start);
        }
        result
    }

    fn start_pushers(&self, subscriptions: Vec<(String, u64)>) {
        let (Some(me), Ok(_)) = (self.me.upgrade(), tokio::runtime::Handle::try_current()) else {
            tracing::warn!("push subscriptions created outside a Tokio runtime are not pushed");
            return;
        };
        for (name, uid) in subscriptions {
            push::start(me.clone(), name, uid);
        }
    }

    /// The HTTP client of push requests (made on first use).
    fn http(&self) -> Result<&reqwest::Client, String> {
        self.http
            .get_or_init(|| {
                reqwest::Client::builder()
                    .user_agent(push::USER_AGENT)
                    .build()
                    .map_err(|e| e.to_string())
            })
            .as_ref()
            .map_err(Clone::clone)
    }

    /// The push token signer (its key is made on first use).
    fn signer(&self) -> Result<&oidc::Signer, String> {
        self.signer
            .get_or_init(oidc::Signer::generate)
            .as_ref()
            .map_err(Clone::clone)
    }

    /// Acknowledges `ids`; malformed ids are reported as invalid.
    fn ack(&self, sub: &str, ids: &[String]) -> Result<AckOutcome, Status> {
        names::parse(sub, names::Kind::Subscription)?;
        let (parsed, malformed) = parse_ack_ids(ids);
        let faults = self.ctx.faults.clone();
        self.with(|state, now, wall| {
            let mut outcome = state.ack(sub, &parsed, now, wall, &faults)?;
            outcome.malformed = !malformed.is_empty();
            outcome.invalid.extend(malformed);
            Ok(outcome)
        })
    }

    /// Modifies ack deadlines of `ids` (0 = nack); malformed ids are
    /// reported as invalid. A new ModifyAckDeadline call when `new_call`,
    /// else a part of the last one (a stream request's other deadline).
    fn modack(
        &self,
        sub: &str,
        ids: &[String],
        (seconds, new_call): (i32, bool),
    ) -> Result<AckOutcome, Status> {
        names::parse(sub, names::Kind::Subscription)?;
        let seconds = check_modack_seconds(seconds)?;
        let (parsed, malformed) = parse_ack_ids(ids);
        self.with(|state, now, wall| {
            let mut outcome = state.modack(sub, &parsed, (seconds, new_call), now, wall)?;
            outcome.malformed = !malformed.is_empty();
            outcome.invalid.extend(malformed);
            Ok(outcome)
        })
    }

    /// Pull: leases up to `max` messages, waiting a bounded time for the first.
    async fn pull(
        &self,
        sub: &str,
        max: i32,
        return_immediately: bool,
    ) -> Result<Vec<pb::ReceivedMessage>, Status> {
        names::parse(sub, names::Kind::Subscription)?;
        let max = usize::try_from(max)
            .ok()
            .filter(|m| *m > 0)
            .ok_or_else(|| Status::invalid_argument("max_messages must be greater than 0"))?;
        let give_up = tokio::time::Instant::now() + self.config.pull_max_wait;
        loop {
            let notify = self.with(|state, _, _| state.sub(sub, None).map(|s| s.notify.clone()))?;
            let notified = notify.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            let messages = self.with(|state, now, wall| {
                let deadline = state.sub(sub, None)?.policy.ack_deadline;
                let lease = Lease {
                    stream: None,
                    deadline,
                    max,
                };
                state.take(sub, None, lease, now, wall)
            })?;
            if !messages.is_empty() || return_immediately || tokio::time::Instant::now() >= give_up
            {
                return Ok(messages);
            }
            let nap = tokio::time::Instant::now() + stream::POLL_INTERVAL;
            tokio::select! {
                _ = notified => {}
                _ = tokio::time::sleep_until(nap.min(give_up)) => {}
            }
        }
    }
}

/// Checks a modack extension: 0..=600 s.
fn check_modack_seconds(seconds: i32) -> Result<u32, Status> {
    match u32::try_from(seconds) {
        Ok(s) if s <= resources::MAX_ACK_DEADLINE_SECS.unsigned_abs() => Ok(s),
        _ => Err(Status::invalid_argument(format!(
            "Invalid ack deadline {seconds}: must be between 0 and 600 seconds"
        ))),
    }
}

/// Splits ack ids into parsed and malformed.
fn parse_ack_ids(ids: &[String]) -> (Vec<AckId>, Vec<String>) {
    let mut parsed = Vec::with_capacity(ids.len());
    let mut malformed = Vec::new();
    for id in ids {
        match AckId::parse(id) {
            Some(a) => parsed.push(a),
            None => malformed.push(id.clone()),
        }
    }
    (parsed, malformed)
}

/// The Pub/Sub emulator's state; a cheap cloneable handle.
#[derive(Clone, Debug)]
pub struct PubSub {
    shared: Arc<Shared>,
}

impl PubSub {
    /// A new, empty emulator.
    pub fn new(ctx: Arc<Context>, config: PubSubConfig) -> Self {
        let (shutdown, _) = watch::channel(false);
        Self {
            shared: Arc::new_cyclic(|me| Shared {
                state: Mutex::new(State::new(config.ack_log_capacity)),
                ctx,
                config,
                shutdown,
                next_stream: AtomicU64::new(1),
                me: me.clone(),
                http: OnceLock::new(),
                signer: OnceLock::new(),
            }),
        }
    }

    /// gRPC (Publisher, Subscriber), REST (`/v1/...`) and admin
    /// (`/emulator/v1/...`) routes of this emulator, on one router.
    pub fn router(&self) -> axum::Router {
        let grpc = grpc::routes(self.shared.clone());
        crate::server::grpc_layer(grpc, self.shared.ctx.clone())
            .merge(rest::routes(self.shared.clone()))
            .merge(admin::routes(self.shared.clone()))
            .merge(crate::server::admin_routes(self.shared.ctx.clone()))
    }

    /// The JSON Web Key Set push tokens verify against (also served at
    /// `GET /emulator/v1/push/jwks`).
    pub fn push_jwks(&self) -> Result<serde_json::Value, String> {
        self.shared.signer().map(oidc::Signer::jwks)
    }

    /// Closes open StreamingPull streams (with UNAVAILABLE) and stops push
    /// delivery so the server can stop.
    pub fn shutdown(&self) {
        let _ = self.shared.shutdown.send(true);
    }

    /// Counters of `subscription` (full name), or None if it does not exist.
    pub fn stats(&self, subscription: &str) -> Option<SubscriptionStats> {
        self.shared
            .with(|state, now, wall| state.stats(subscription, now, wall))
    }

    /// Acknowledgements that took effect on `subscription` (full name), or
    /// None if it does not exist: [`PubSub::stats`]'s `acks` without its
    /// scan of every unacked message, for polling while under load.
    pub fn acks(&self, subscription: &str) -> Option<u64> {
        self.shared.with(|state, _, _| state.acks(subscription))
    }

    /// Counters of every subscription, by full name.
    pub fn all_stats(&self) -> BTreeMap<String, SubscriptionStats> {
        self.shared.with(|state, now, wall| {
            let mut out = BTreeMap::new();
            for name in state.subscription_names() {
                if let Some(s) = state.stats(&name, now, wall) {
                    out.insert(name, s);
                }
            }
            out
        })
    }

    /// Every acknowledgement that took effect on `subscription`, oldest first.
    pub fn ack_log(&self, subscription: &str) -> Option<Vec<AckRecord>> {
        self.shared.with(|state, _, _| state.ack_log(subscription))
    }

    /// The messages of `subscription` not acknowledged yet (ready, leased or
    /// in backoff), in publish order.
    pub fn unacked(&self, subscription: &str) -> Option<Vec<UnackedMessage>> {
        self.shared
            .with(|state, now, wall| state.unacked(subscription, now, wall))
    }
}
