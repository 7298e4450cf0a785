//! The gRPC `google.pubsub.v1.Publisher` and `Subscriber` services.
//!
//! Invariant: handlers only convert requests and results; every effect goes
//! through [`Shared`]/[`State`](super::state::State), so gRPC and REST behave alike.

use std::sync::Arc;

use prost::Message as _;
use tonic::{Code, Request, Response, Status, Streaming};

use super::names::{self, Kind};
use super::subscription::AckOutcome;
use super::{stream, Shared};
use crate::proto::publisher::publisher_server::{Publisher, PublisherServer};
use crate::proto::pubsub_v1 as pb;
use crate::proto::subscriber::subscriber_server::{Subscriber, SubscriberServer};

/// The gRPC routes of both services, as an axum router.
pub(super) fn routes(shared: Arc<Shared>) -> axum::Router {
    let service = Service { shared };
    tonic::service::Routes::new(
        PublisherServer::new(service.clone()).max_decoding_message_size(16 * 1024 * 1024),
    )
    .add_service(SubscriberServer::new(service).max_decoding_message_size(16 * 1024 * 1024))
    .into_axum_router()
}

/// Both services over one shared state.
#[derive(Clone)]
struct Service {
    shared: Arc<Shared>,
}

/// The error an exactly-once subscription answers unary acks/modacks with
/// when some ack ids are invalid: INVALID_ARGUMENT with a `google.rpc.ErrorInfo`
/// naming each failed ack id.
pub(super) fn exactly_once_failure(invalid: &[String]) -> Status {
    let message = "Some acknowledgement ids in the request were invalid. This could be because the acknowledgement ids have expired or the acknowledgement ids were malformed.";
    let info = gcloud_sdk::google::rpc::ErrorInfo {
        reason: "EXACTLY_ONCE_ACKID_FAILURE".into(),
        domain: "pubsub.googleapis.com".into(),
        metadata: invalid
            .iter()
            .map(|id| (id.clone(), "PERMANENT_FAILURE_INVALID_ACK_ID".to_string()))
            .collect(),
    };
    let status = gcloud_sdk::google::rpc::Status {
        code: Code::InvalidArgument as i32,
        message: message.into(),
        details: vec![prost_types::Any {
            type_url: "type.googleapis.com/google.rpc.ErrorInfo".into(),
            value: info.encode_to_vec(),
        }],
    };
    Status::with_details(
        Code::InvalidArgument,
        message,
        status.encode_to_vec().into(),
    )
}

/// The unary answer to an ack or modack outcome.
pub(super) fn unary_ack_result(outcome: &AckOutcome) -> Result<(), Status> {
    if outcome.exactly_once && !outcome.invalid.is_empty() {
        return Err(exactly_once_failure(&outcome.invalid));
    }
    if outcome.malformed {
        return Err(Status::invalid_argument("Invalid ack ID."));
    }
    Ok(())
}

fn mask_paths(mask: Option<prost_types::FieldMask>) -> Vec<String> {
    mask.map(|m| m.paths).unwrap_or_default()
}

#[tonic::async_trait]
impl Publisher for Service {
    async fn create_topic(&self, req: Request<pb::Topic>) -> Result<Response<pb::Topic>, Status> {
        let topic = req.into_inner();
        self.shared
            .with(|s, _, _| s.create_topic(topic))
            .map(Response::new)
    }

    async fn update_topic(
        &self,
        req: Request<pb::UpdateTopicRequest>,
    ) -> Result<Response<pb::Topic>, Status> {
        let req = req.into_inner();
        let topic = req
            .topic
            .ok_or_else(|| Status::invalid_argument("topic is required"))?;
        let mask = mask_paths(req.update_mask);
        self.shared
            .with(|s, _, _| s.update_topic(topic, &mask))
            .map(Response::new)
    }

    async fn publish(
        &self,
        req: Request<pb::PublishRequest>,
    ) -> Result<Response<pb::PublishResponse>, Status> {
        let req = req.into_inner();
        let message_ids = self
            .shared
            .with(|s, now, wall| s.publish(&req.topic, req.messages, now, wall))?;
        Ok(Response::new(pb::PublishResponse { message_ids }))
    }

    async fn get_topic(
        &self,
        req: Request<pb::GetTopicRequest>,
    ) -> Result<Response<pb::Topic>, Status> {
        let name = req.into_inner().topic;
        self.shared
            .with(|s, _, _| s.get_topic(&name))
            .map(Response::new)
    }

    async fn list_topics(
        &self,
        req: Request<pb::ListTopicsRequest>,
    ) -> Result<Response<pb::ListTopicsResponse>, Status> {
        let req = req.into_inner();
        let (topics, next_page_token) = self
            .shared
            .with(|s, _, _| s.list_topics(&req.project, req.page_size, &req.page_token))?;
        Ok(Response::new(pb::ListTopicsResponse {
            topics,
            next_page_token,
        }))
    }

    async fn list_topic_subscriptions(
        &self,
        req: Request<pb::ListTopicSubscriptionsRequest>,
    ) -> Result<Response<pb::ListTopicSubscriptionsResponse>, Status> {
        let req = req.into_inner();
        let (subscriptions, next_page_token) = self
            .shared
            .with(|s, _, _| s.topic_subscriptions(&req.topic, req.page_size, &req.page_token))?;
        Ok(Response::new(pb::ListTopicSubscriptionsResponse {
            subscriptions,
            next_page_token,
        }))
    }

    async fn delete_topic(
        &self,
        req: Request<pb::DeleteTopicRequest>,
    ) -> Result<Response<()>, Status> {
        let name = req.into_inner().topic;
        self.shared
            .with(|s, _, _| s.delete_topic(&name))
            .map(Response::new)
    }
}

#[tonic::async_trait]
impl Subscriber for Service {
    type StreamingPullStream = stream::ResponseStream;

    async fn create_subscription(
        &self,
        req: Request<pb::Subscription>,
    ) -> Result<Response<pb::Subscription>, Status> {
        let sub = req.into_inner();
        self.shared
            .with(|s, _, _| s.create_subscription(sub))
            .map(Response::new)
    }

    async fn get_subscription(
        &self,
        req: Request<pb::GetSubscriptionRequest>,
    ) -> Result<Response<pb::Subscription>, Status> {
        let name = req.into_inner().subscription;
        self.shared
            .with(|s, _, _| s.get_subscription(&name))
            .map(Response::new)
    }

    async fn update_subscription(
        &self,
        req: Request<pb::UpdateSubscriptionRequest>,
    ) -> Result<Response<pb::Subscription>, Status> {
        let req = req.into_inner();
        let sub = req
            .subscription
            .ok_or_else(|| Status::invalid_argument("subscription is required"))?;
        let mask = mask_paths(req.update_mask);
        self.shared
            .with(|s, _, _| s.update_subscription(sub, &mask))
            .map(Response::new)
    }

    async fn list_subscriptions(
        &self,
        req: Request<pb::ListSubscriptionsRequest>,
    ) -> Result<Response<pb::ListSubscriptionsResponse>, Status> {
        let req = req.into_inner();
        let (subscriptions, next_page_token) = self
            .shared
            .with(|s, _, _| s.list_subscriptions(&req.project, req.page_size, &req.page_token))?;
        Ok(Response::new(pb::ListSubscriptionsResponse {
            subscriptions,
            next_page_token,
        }))
    }

    async fn delete_subscription(
        &self,
        req: Request<pb::DeleteSubscriptionRequest>,
    ) -> Result<Response<()>, Status> {
        let name = req.into_inner().subscription;
        self.shared
            .with(|s, _, _| s.delete_subscription(&name))
            .map(Response::new)
    }

    async fn modify_ack_deadline(
        &self,
        req: Request<pb::ModifyAckDeadlineRequest>,
    ) -> Result<Response<()>, Status> {
        let req = req.into_inner();
        if req.ack_ids.is_empty() {
            return Err(Status::invalid_argument("ack_ids must not be empty"));
        }
        let outcome = self.shared.modack(
            &req.subscription,
            &req.ack_ids,
            (req.ack_deadline_seconds, true),
        )?;
        unary_ack_result(&outcome).map(Response::new)
    }

    async fn acknowledge(
        &self,
        req: Request<pb::AcknowledgeRequest>,
    ) -> Result<Response<()>, Status> {
        let req = req.into_inner();
        if req.ack_ids.is_empty() {
            return Err(Status::invalid_argument("ack_ids must not be empty"));
        }
        let outcome = self.shared.ack(&req.subscription, &req.ack_ids)?;
        unary_ack_result(&outcome).map(Response::new)
    }

    async fn pull(
        &self,
        req: Request<pb::PullRequest>,
    ) -> Result<Response<pb::PullResponse>, Status> {
        let req = req.into_inner();
        // Deprecated in the API but still sent by older clients; honoured.
        #[allow(deprecated)]
        let return_immediately = req.return_immediately;
        let received_messages = self
            .shared
            .pull(&req.subscription, req.max_messages, return_immediately)
            .await?;
        Ok(Response::new(pb::PullResponse { received_messages }))
    }

    async fn streaming_pull(
        &self,
        req: Request<Streaming<pb::StreamingPullRequest>>,
    ) -> Result<Response<Self::StreamingPullStream>, Status> {
        let stream = stream::open(self.shared.clone(), req.into_inner()).await?;
        Ok(Response::new(stream))
    }

    async fn modify_push_config(
        &self,
        req: Request<pb::ModifyPushConfigRequest>,
    ) -> Result<Response<()>, Status> {
        let req = req.into_inner();
        self.shared
            .with(|s, _, _| s.modify_push_config(&req.subscription, req.push_config))
            .map(Response::new)
    }

    async fn seek(
        &self,
        req: Request<pb::SeekRequest>,
    ) -> Result<Response<pb::SeekResponse>, Status> {
        let req = req.into_inner();
        names::parse(&req.subscription, Kind::Subscription)?;
        let time = match req.target {
            Some(pb::seek_request::Target::Time(t)) => std::time::SystemTime::try_from(t)
                .map_err(|_| Status::invalid_argument("invalid seek time"))?,
            Some(pb::seek_request::Target::Snapshot(snapshot)) => {
                self.shared
                    .with(|s, now, _| s.seek_snapshot(&req.subscription, &snapshot, now))?;
                return Ok(Response::new(pb::SeekResponse {}));
            }
            None => return Err(Status::invalid_argument("seek needs a time or a snapshot")),
        };
        self.shared
            .with(|s, now, _| s.seek(&req.subscription, time, now))?;
        Ok(Response::new(pb::SeekResponse {}))
    }
}
