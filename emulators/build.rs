//! Generates the gRPC server traits for the emulated Google APIs from the
//! prost message types that `gcloud-sdk` exports: no `.proto` files, no protoc.
use tonic_build::manual::{Builder, Method, Service};

const CODEC: &str = "tonic_prost::ProstCodec";

/// One method: (rust name, route name, input, output, client streaming, server streaming).
type Spec = (
    &'static str,
    &'static str,
    &'static str,
    &'static str,
    bool,
    bool,
);

fn service(package: &str, name: &str, types: &str, methods: &[Spec]) -> Service {
    let mut builder = Service::builder().name(name).package(package);
    for (rust, route, input, output, client_streaming, server_streaming) in methods {
        let qualify = |t: &str| {
            if t == "()" {
                "crate::proto::Empty".to_string()
            } else {
                format!("{types}::{t}")
            }
        };
        let mut method = Method::builder()
            .name(*rust)
            .route_name(*route)
            .input_type(qualify(input))
            .output_type(qualify(output))
            .codec_path(CODEC);
        if *client_streaming {
            method = method.client_streaming();
        }
        if *server_streaming {
            method = method.server_streaming();
        }
        builder = builder.method(method.build());
    }
    builder.build()
}

fn main() {
    let ps = "gcloud_sdk::google::pubsub::v1";
    let publisher = service(
        "google.pubsub.v1",
        "Publisher",
        ps,
        &[
            (
                "create_topic",
                "CreateTopic",
                "Topic",
                "Topic",
                false,
                false,
            ),
            (
                "update_topic",
                "UpdateTopic",
                "UpdateTopicRequest",
                "Topic",
                false,
                false,
            ),
            (
                "publish",
                "Publish",
                "PublishRequest",
                "PublishResponse",
                false,
                false,
            ),
            (
                "get_topic",
                "GetTopic",
                "GetTopicRequest",
                "Topic",
                false,
                false,
            ),
            (
                "list_topics",
                "ListTopics",
                "ListTopicsRequest",
                "ListTopicsResponse",
                false,
                false,
            ),
            (
                "list_topic_subscriptions",
                "ListTopicSubscriptions",
                "ListTopicSubscriptionsRequest",
                "ListTopicSubscriptionsResponse",
                false,
                false,
            ),
            (
                "delete_topic",
                "DeleteTopic",
                "DeleteTopicRequest",
                "()",
                false,
                false,
            ),
        ],
    );
    let subscriber = service(
        "google.pubsub.v1",
        "Subscriber",
        ps,
        &[
            (
                "create_subscription",
                "CreateSubscription",
                "Subscription",
                "Subscription",
                false,
                false,
            ),
            (
                "get_subscription",
                "GetSubscription",
                "GetSubscriptionRequest",
                "Subscription",
                false,
                false,
            ),
            (
                "update_subscription",
                "UpdateSubscription",
                "UpdateSubscriptionRequest",
                "Subscription",
                false,
                false,
            ),
            (
                "list_subscriptions",
                "ListSubscriptions",
                "ListSubscriptionsRequest",
                "ListSubscriptionsResponse",
                false,
                false,
            ),
            (
                "delete_subscription",
                "DeleteSubscription",
                "DeleteSubscriptionRequest",
                "()",
                false,
                false,
            ),
            (
                "modify_ack_deadline",
                "ModifyAckDeadline",
                "ModifyAckDeadlineRequest",
                "()",
                false,
                false,
            ),
            (
                "acknowledge",
                "Acknowledge",
                "AcknowledgeRequest",
                "()",
                false,
                false,
            ),
            ("pull", "Pull", "PullRequest", "PullResponse", false, false),
            (
                "streaming_pull",
                "StreamingPull",
                "StreamingPullRequest",
                "StreamingPullResponse",
                true,
                true,
            ),
            ("seek", "Seek", "SeekRequest", "SeekResponse", false, false),
            (
                "modify_push_config",
                "ModifyPushConfig",
                "ModifyPushConfigRequest",
                "()",
                false,
                false,
            ),
        ],
    );
    let fs = "gcloud_sdk::google::firestore::v1";
    let firestore = service(
        "google.firestore.v1",
        "Firestore",
        fs,
        &[
            (
                "get_document",
                "GetDocument",
                "GetDocumentRequest",
                "Document",
                false,
                false,
            ),
            (
                "list_documents",
                "ListDocuments",
                "ListDocumentsRequest",
                "ListDocumentsResponse",
                false,
                false,
            ),
            (
                "update_document",
                "UpdateDocument",
                "UpdateDocumentRequest",
                "Document",
                false,
                false,
            ),
            (
                "delete_document",
                "DeleteDocument",
                "DeleteDocumentRequest",
                "()",
                false,
                false,
            ),
            (
                "batch_get_documents",
                "BatchGetDocuments",
                "BatchGetDocumentsRequest",
                "BatchGetDocumentsResponse",
                false,
                true,
            ),
            (
                "begin_transaction",
                "BeginTransaction",
                "BeginTransactionRequest",
                "BeginTransactionResponse",
                false,
                false,
            ),
            (
                "commit",
                "Commit",
                "CommitRequest",
                "CommitResponse",
                false,
                false,
            ),
            (
                "rollback",
                "Rollback",
                "RollbackRequest",
                "()",
                false,
                false,
            ),
            (
                "run_query",
                "RunQuery",
                "RunQueryRequest",
                "RunQueryResponse",
                false,
                true,
            ),
            (
                "run_aggregation_query",
                "RunAggregationQuery",
                "RunAggregationQueryRequest",
                "RunAggregationQueryResponse",
                false,
                true,
            ),
            (
                "batch_write",
                "BatchWrite",
                "BatchWriteRequest",
                "BatchWriteResponse",
                false,
                false,
            ),
            (
                "create_document",
                "CreateDocument",
                "CreateDocumentRequest",
                "Document",
                false,
                false,
            ),
            (
                "list_collection_ids",
                "ListCollectionIds",
                "ListCollectionIdsRequest",
                "ListCollectionIdsResponse",
                false,
                false,
            ),
            (
                "listen",
                "Listen",
                "ListenRequest",
                "ListenResponse",
                true,
                true,
            ),
        ],
    );
    Builder::new()
        .build_client(false)
        .build_transport(false)
        .compile(&[publisher, subscriber, firestore]);
}
