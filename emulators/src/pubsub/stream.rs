//! One StreamingPull session: a reader task applying the client's acks and
//! modacks, and a writer loop leasing messages within the stream's flow control.
//!
//! Invariant: the writer never leases more than the stream's
//! `max_outstanding_*` allow (the budget lives in the subscription, so acks
//! from any stream or unary call free room); a session always unregisters its
//! stream when it ends, and ends with UNAVAILABLE on shutdown, on a
//! `drop_stream` fault or when `stream_max_lifetime` is reached.

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::{mpsc, oneshot};
use tokio_stream::wrappers::ReceiverStream;
use tonic::{Status, Streaming};

use super::names::{self, Kind};
use super::subscription::Lease;
use super::{check_modack_seconds, parse_ack_ids, resources, Shared};
use crate::faults::FaultKind;
use crate::proto::pubsub_v1 as pb;
use pb::streaming_pull_response::{
    AcknowledgeConfirmation, ModifyAckDeadlineConfirmation, SubscriptionProperties,
};

/// How often an idle session wakes to observe clock jumps and faults (real time).
pub(super) const POLL_INTERVAL: Duration = Duration::from_millis(50);

/// The response stream handed to tonic.
pub(super) type ResponseStream = ReceiverStream<Result<pb::StreamingPullResponse, Status>>;

type Outbox = mpsc::Sender<Result<pb::StreamingPullResponse, Status>>;

/// Validates the first request, registers the stream and starts the session.
pub(super) async fn open(
    shared: Arc<Shared>,
    mut inbound: Streaming<pb::StreamingPullRequest>,
) -> Result<ResponseStream, Status> {
    let first = inbound
        .message()
        .await?
        .ok_or_else(|| Status::invalid_argument("the stream ended before its first request"))?;
    names::parse(&first.subscription, Kind::Subscription)?;
    check_stream_deadline(first.stream_ack_deadline_seconds)?;
    let id = shared.next_stream.fetch_add(1, Ordering::Relaxed);
    let uid = shared.with(|s, _, _| {
        s.open_stream(
            &first.subscription,
            id,
            first.max_outstanding_messages,
            first.max_outstanding_bytes,
        )
    })?;
    tracing::debug!(
        subscription = %first.subscription,
        stream = id,
        client_id = %first.client_id,
        max_outstanding_messages = first.max_outstanding_messages,
        max_outstanding_bytes = first.max_outstanding_bytes,
        "StreamingPull opened"
    );
    let (tx, rx) = mpsc::channel(4);
    let session = Session {
        shared,
        sub: first.subscription.clone(),
        uid,
        id,
        deadline_secs: Arc::new(AtomicU32::new(
            first.stream_ack_deadline_seconds.unsigned_abs(),
        )),
    };
    tokio::spawn(session.run(first, inbound, tx));
    Ok(ReceiverStream::new(rx))
}

fn check_stream_deadline(seconds: i32) -> Result<(), Status> {
    if (10..=resources::MAX_ACK_DEADLINE_SECS).contains(&seconds) {
        Ok(())
    } else {
        Err(Status::invalid_argument(format!(
            "Invalid stream_ack_deadline_seconds {seconds}: must be between 10 and 600"
        )))
    }
}

fn unavailable(why: &str) -> Status {
    Status::unavailable(format!(
        "The service was unable to fulfill your request. Please try again. ({why})"
    ))
}

#[derive(Clone)]
struct Session {
    shared: Arc<Shared>,
    sub: String,
    uid: u64,
    id: u64,
    deadline_secs: Arc<AtomicU32>,
}

impl Session {
    async fn run(
        self,
        first: pb::StreamingPullRequest,
        inbound: Streaming<pb::StreamingPullRequest>,
        tx: Outbox,
    ) {
        let (stop_tx, mut stop_rx) = oneshot::channel();
        let reader = tokio::spawn(self.clone().read(first, inbound, tx.clone(), stop_tx));
        let end = self.write(&tx, &mut stop_rx).await;
        tracing::debug!(
            subscription = %self.sub,
            stream = self.id,
            code = ?end.as_ref().map(Status::code),
            "StreamingPull closed"
        );
        if let Some(status) = end {
            let _ = tx.send(Err(status)).await;
        }
        reader.abort();
        self.shared
            .with(|s, _, _| s.close_stream(&self.sub, self.uid, self.id));
    }

    /// Applies the client's requests until the client stops or errs; reports
    /// how the stream should end through `stop`.
    async fn read(
        self,
        first: pb::StreamingPullRequest,
        mut inbound: Streaming<pb::StreamingPullRequest>,
        tx: Outbox,
        stop: oneshot::Sender<Option<Status>>,
    ) {
        if let Err(e) = self.apply(&first, &tx).await {
            let _ = stop.send(Some(e));
            return;
        }
        loop {
            let req = match inbound.message().await {
                Ok(Some(req)) => req,
                Ok(None) | Err(_) => {
                    let _ = stop.send(None);
                    return;
                }
            };
            if !req.subscription.is_empty()
                || req.max_outstanding_messages != 0
                || req.max_outstanding_bytes != 0
            {
                let _ = stop.send(Some(Status::invalid_argument(
                    "subscription and max_outstanding_* may only be set in the first request",
                )));
                return;
            }
            if req.stream_ack_deadline_seconds != 0 {
                if let Err(e) = check_stream_deadline(req.stream_ack_deadline_seconds) {
                    let _ = stop.send(Some(e));
                    return;
                }
                self.deadline_secs.store(
                    req.stream_ack_deadline_seconds.unsigned_abs(),
                    Ordering::Relaxed,
                );
            }
            if let Err(e) = self.apply(&req, &tx).await {
                let _ = stop.send(Some(e));
                return;
            }
        }
    }

    /// Applies the acks and modacks of one request; under exactly-once
    /// delivery answers with confirmations.
    async fn apply(&self, req: &pb::StreamingPullRequest, tx: &Outbox) -> Result<(), Status> {
        if req.modify_deadline_ack_ids.len() != req.modify_deadline_seconds.len() {
            return Err(Status::invalid_argument(
                "modify_deadline_ack_ids and modify_deadline_seconds must have the same length",
            ));
        }
        for s in &req.modify_deadline_seconds {
            check_modack_seconds(*s)?;
        }
        let mut all: Vec<&String> = req.ack_ids.iter().collect();
        all.extend(req.modify_deadline_ack_ids.iter());
        let owned: Vec<String> = all.into_iter().cloned().collect();
        if !parse_ack_ids(&owned).1.is_empty() {
            return Err(Status::invalid_argument("Invalid ack ID."));
        }
        let mut response = pb::StreamingPullResponse::default();
        let mut exactly_once = false;
        if !req.ack_ids.is_empty() {
            let outcome = self.shared.ack(&self.sub, &req.ack_ids)?;
            exactly_once = outcome.exactly_once;
            response.acknowledge_confirmation = Some(AcknowledgeConfirmation {
                ack_ids: outcome.ok,
                invalid_ack_ids: outcome.invalid,
                ..Default::default()
            });
        }
        if !req.modify_deadline_ack_ids.is_empty() {
            let mut confirmation = ModifyAckDeadlineConfirmation::default();
            let mut by_seconds: Vec<(i32, Vec<String>)> = Vec::new();
            for (id, secs) in req
                .modify_deadline_ack_ids
                .iter()
                .zip(&req.modify_deadline_seconds)
            {
                match by_seconds.iter_mut().find(|(s, _)| s == secs) {
                    Some((_, ids)) => ids.push(id.clone()),
                    None => by_seconds.push((*secs, vec![id.clone()])),
                }
            }
            for (i, (secs, ids)) in by_seconds.into_iter().enumerate() {
                let outcome = self.shared.modack(&self.sub, &ids, (secs, i == 0))?;
                exactly_once = outcome.exactly_once;
                confirmation.ack_ids.extend(outcome.ok);
                confirmation.invalid_ack_ids.extend(outcome.invalid);
            }
            response.modify_ack_deadline_confirmation = Some(confirmation);
        }
        if exactly_once {
            let ordering = self.shared.with(|s, _, _| {
                s.sub(&self.sub, None)
                    .map(|sub| sub.policy.ordering)
                    .unwrap_or(false)
            });
            response.subscription_properties = Some(SubscriptionProperties {
                exactly_once_delivery_enabled: true,
                message_ordering_enabled: ordering,
            });
            tx.send(Ok(response))
                .await
                .map_err(|_| Status::cancelled("client gone"))?;
        }
        Ok(())
    }

    /// Leases and sends messages until the stream must end; returns the
    /// status to end it with (None = end quietly, the client is gone).
    async fn write(
        &self,
        tx: &Outbox,
        stop: &mut oneshot::Receiver<Option<Status>>,
    ) -> Option<Status> {
        let shared = &self.shared;
        let clock = &shared.ctx.clock;
        let opened_at = clock.elapsed();
        let mut shutdown = shared.shutdown.subscribe();
        loop {
            if *shutdown.borrow() {
                return Some(unavailable("the emulator is shutting down"));
            }
            if shared
                .ctx
                .faults
                .fire(FaultKind::DropStream, "StreamingPull")
                .is_some()
            {
                tracing::info!(subscription = %self.sub, stream = self.id, "fault: stream dropped");
                return Some(unavailable("stream dropped by an injected fault"));
            }
            if let Some(life) = shared.config.stream_max_lifetime {
                if clock.elapsed().saturating_sub(opened_at) >= life {
                    return Some(unavailable("stream reached its maximum lifetime"));
                }
            }
            let notify = match shared
                .with(|s, _, _| s.sub(&self.sub, Some(self.uid)).map(|x| x.notify.clone()))
            {
                Ok(n) => n,
                Err(e) => return Some(e),
            };
            let notified = notify.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            let taken = shared.with(|s, now, wall| {
                let lease = Lease {
                    stream: Some(self.id),
                    deadline: Duration::from_secs(
                        self.deadline_secs.load(Ordering::Relaxed).into(),
                    ),
                    max: shared.config.max_messages_per_response,
                };
                let messages = s.take(&self.sub, Some(self.uid), lease, now, wall)?;
                let sub = s.sub(&self.sub, Some(self.uid))?;
                let props = SubscriptionProperties {
                    exactly_once_delivery_enabled: sub.policy.exactly_once,
                    message_ordering_enabled: sub.policy.ordering,
                };
                Ok::<_, Status>((messages, props, sub.next_due(), now))
            });
            let (messages, props, next_due, now) = match taken {
                Ok(t) => t,
                Err(e) => return Some(e),
            };
            if !messages.is_empty() {
                let response = pb::StreamingPullResponse {
                    received_messages: messages,
                    subscription_properties: Some(props),
                    ..Default::default()
                };
                if tx.send(Ok(response)).await.is_err() {
                    return None;
                }
                continue;
            }
            let wait = next_due
                .map(|due| clock.real_duration(due.saturating_sub(now)))
                .unwrap_or(POLL_INTERVAL)
                .min(POLL_INTERVAL);
            tokio::select! {
                _ = &mut notified => {}
                _ = tokio::time::sleep(wait) => {}
                _ = shutdown.changed() => {}
                end = &mut *stop => return end.unwrap_or(None),
            }
        }
    }
}
