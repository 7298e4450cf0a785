//! The publish limits of Google's "Quotas and limits" page
//! (<https://cloud.google.com/pubsub/quotas#resource_limits>), each crossed
//! from the client side: exactly at the limit is accepted, one byte (or one
//! attribute, or one message) over it is refused with INVALID_ARGUMENT.
//! The official `Publisher` is used where it sends the request as built; a
//! raw gRPC publisher where the test must size the whole request.
mod pubsub_support;

use pubsub_support::*;

/// Publishes one message with the official client; the gRPC code.
async fn publish_code(
    publisher: &Publisher,
    message: Message,
) -> google_cloud_gax::error::rpc::Code {
    match publisher.publish(message).await {
        Ok(_) => google_cloud_gax::error::rpc::Code::Ok,
        Err(google_cloud_pubsub::error::PublishError::Rpc(e)) => {
            e.status().expect("an RPC status").code
        }
        Err(other) => panic!("unexpected publish error {other:?}"),
    }
}

fn raw_message(data: usize) -> pb::PubsubMessage {
    pb::PubsubMessage {
        data: vec![b'x'; data],
        ..Default::default()
    }
}

fn request(topic: &str, messages: Vec<pb::PubsubMessage>) -> pb::PublishRequest {
    pb::PublishRequest {
        topic: topic.to_string(),
        messages,
    }
}

/// The `request_size` limit: 10 MB = 10,000,000 bytes of encoded request.
const MAX_REQUEST: usize = 10_000_000;

/// The largest message is the one whose request is exactly 10 MB: accepted
/// from the official Publisher; one byte more of data is refused.
#[tokio::test]
async fn message_filling_a_ten_mb_request_is_accepted_and_one_byte_more_refused() {
    let env = Env::start().await;
    let topic = env.topic("big-message").await;
    let mut data = MAX_REQUEST - request(&topic, vec![raw_message(0)]).encoded_len();
    while request(&topic, vec![raw_message(data)]).encoded_len() > MAX_REQUEST {
        data -= 1;
    }
    assert_eq!(
        request(&topic, vec![raw_message(data)]).encoded_len(),
        MAX_REQUEST
    );
    assert_eq!(
        request(&topic, vec![raw_message(data + 1)]).encoded_len(),
        MAX_REQUEST + 1
    );
    let publisher = env.publisher(&topic).await;
    let code = publish_code(&publisher, Message::new().set_data(vec![b'x'; data])).await;
    assert_eq!(code, google_cloud_gax::error::rpc::Code::Ok);
    let code = publish_code(&publisher, Message::new().set_data(vec![b'x'; data + 1])).await;
    assert_eq!(code, google_cloud_gax::error::rpc::Code::InvalidArgument);
}

/// Several messages adding up to a 10 MB request are accepted; one byte
/// more is refused, and nothing of the refused request is published.
#[tokio::test]
async fn publish_request_of_ten_mb_is_accepted_and_one_byte_more_refused() {
    let env = Env::start().await;
    let (topic, sub) = env.subscription("big-request", |r| r).await;
    let mut raw = env.raw_publisher().await;
    let messages = |last: usize| {
        let mut m: Vec<_> = (0..9).map(|_| raw_message(1_000_000)).collect();
        m.push(raw_message(last));
        m
    };
    let mut last = MAX_REQUEST - request(&topic, messages(0)).encoded_len();
    while request(&topic, messages(last)).encoded_len() > MAX_REQUEST {
        last -= 1;
    }
    assert_eq!(request(&topic, messages(last)).encoded_len(), MAX_REQUEST);
    let ids = raw
        .publish(request(&topic, messages(last)))
        .await
        .expect("a 10 MB request is accepted")
        .into_inner()
        .message_ids;
    assert_eq!(ids.len(), 10);
    let over = request(&topic, messages(last + 1));
    assert_eq!(over.encoded_len(), MAX_REQUEST + 1);
    let err = raw.publish(over).await.unwrap_err();
    assert_eq!(err.code(), Code::InvalidArgument, "{err:?}");
    assert_eq!(env.emu.pubsub().stats(&sub).unwrap().published, 10);
}

/// At most 1,000 messages per Publish request.
#[tokio::test]
async fn publish_request_of_1000_messages_is_accepted_and_1001_refused() {
    let env = Env::start().await;
    let topic = env.topic("many-messages").await;
    let mut raw = env.raw_publisher().await;
    let ids = raw
        .publish(request(&topic, (0..1000).map(|_| raw_message(1)).collect()))
        .await
        .expect("1,000 messages are accepted")
        .into_inner()
        .message_ids;
    assert_eq!(ids.len(), 1000);
    let err = raw
        .publish(request(&topic, (0..1001).map(|_| raw_message(1)).collect()))
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::InvalidArgument, "{err:?}");
}

/// At most 100 attributes per message.
#[tokio::test]
async fn message_with_100_attributes_is_accepted_and_101_refused() {
    let env = Env::start().await;
    let topic = env.topic("attributes").await;
    let publisher = env.publisher(&topic).await;
    let with = |n: usize| {
        Message::new()
            .set_data("x")
            .set_attributes((0..n).map(|i| (format!("k{i}"), "v".to_string())))
    };
    assert_eq!(
        publish_code(&publisher, with(100)).await,
        google_cloud_gax::error::rpc::Code::Ok
    );
    assert_eq!(
        publish_code(&publisher, with(101)).await,
        google_cloud_gax::error::rpc::Code::InvalidArgument
    );
}

/// Attribute keys at most 256 bytes, values at most 1,024 bytes.
#[tokio::test]
async fn attribute_keys_of_256_and_values_of_1024_bytes_are_accepted_one_more_refused() {
    let env = Env::start().await;
    let topic = env.topic("attribute-sizes").await;
    let publisher = env.publisher(&topic).await;
    let with = |key: usize, value: usize| {
        Message::new()
            .set_data("x")
            .set_attributes([("k".repeat(key), "v".repeat(value))])
    };
    assert_eq!(
        publish_code(&publisher, with(256, 1024)).await,
        google_cloud_gax::error::rpc::Code::Ok
    );
    assert_eq!(
        publish_code(&publisher, with(257, 1)).await,
        google_cloud_gax::error::rpc::Code::InvalidArgument
    );
    assert_eq!(
        publish_code(&publisher, with(1, 1025)).await,
        google_cloud_gax::error::rpc::Code::InvalidArgument
    );
}

/// Attribute keys must not start with `goog`; containing it elsewhere is fine.
#[tokio::test]
async fn attribute_keys_starting_with_goog_are_refused() {
    let env = Env::start().await;
    let topic = env.topic("reserved-attributes").await;
    let publisher = env.publisher(&topic).await;
    let with = |key: &str| {
        Message::new()
            .set_data("x")
            .set_attributes([(key.to_string(), "v".to_string())])
    };
    for fine in ["goo", "gooX", "x-goog"] {
        assert_eq!(
            publish_code(&publisher, with(fine)).await,
            google_cloud_gax::error::rpc::Code::Ok,
            "{fine}"
        );
    }
    for reserved in ["goog", "googfoo"] {
        assert_eq!(
            publish_code(&publisher, with(reserved)).await,
            google_cloud_gax::error::rpc::Code::InvalidArgument,
            "{reserved}"
        );
    }
}

/// Ordering keys at most 1,024 bytes.
#[tokio::test]
async fn ordering_key_of_1024_bytes_is_accepted_and_1025_refused() {
    let env = Env::start().await;
    let topic = env.topic("ordering-keys").await;
    let mut raw = env.raw_publisher().await;
    let keyed = |len: usize| pb::PubsubMessage {
        data: b"x".to_vec(),
        ordering_key: "o".repeat(len),
        ..Default::default()
    };
    raw.publish(request(&topic, vec![keyed(1024)]))
        .await
        .expect("a 1,024-byte ordering key is accepted");
    let err = raw
        .publish(request(&topic, vec![keyed(1025)]))
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::InvalidArgument, "{err:?}");
}
