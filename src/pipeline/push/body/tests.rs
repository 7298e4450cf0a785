//! Push bodies: the wrapped form and the unwrapped one become the item a
//! pulled message would; anything else becomes a poison record that says
//! why, never a refusal.

use axum::body::Body;
use axum::http::HeaderValue;

use super::*;

/// The subscription the tests' requests come from.
const SUBSCRIPTION: &str = "projects/p/subscriptions/likes-hotcount";

/// [`super::parse`] of a request expected from [`SUBSCRIPTION`].
fn parse(headers: &HeaderMap, body: Read) -> Delivery {
    super::parse(headers, body, SUBSCRIPTION)
}

const EVENT: &str = r#"{"version":1,"eventId":"e1","type":"like.added","postId":"p1","userId":"u1","occurredAt":"2026-11-30T12:00:00Z","seq":1}"#;

fn b64(data: &[u8]) -> String {
    base64::engine::general_purpose::STANDARD.encode(data)
}

fn wrapped(message: serde_json::Value) -> Read {
    let body = serde_json::json!({
        "message": message,
        "subscription": "projects/p/subscriptions/likes-hotcount",
    });
    Read::Whole(Bytes::from(body.to_string()))
}

fn poison(delivery: &Delivery) -> &PoisonRecord {
    match &delivery.item {
        Item::Poison(record) => record,
        Item::Event(event) => panic!("expected poison, got {event:?}"),
    }
}

fn metadata(pairs: &[(&'static str, &'static str)]) -> HeaderMap {
    let mut headers = HeaderMap::new();
    for (name, value) in pairs {
        headers.insert(*name, HeaderValue::from_static(value));
    }
    headers
}

#[test]
fn a_wrapped_body_gives_the_event_its_publish_time_and_subscription() {
    let delivery = parse(
        &HeaderMap::new(),
        wrapped(serde_json::json!({
            "data": b64(EVENT.as_bytes()),
            "attributes": {"source": "web"},
            "messageId": "2070443601311540",
            "message_id": "2070443601311540",
            "publishTime": "2026-11-30T12:00:01.5Z",
            "publish_time": "2026-11-30T12:00:01.5Z",
            "orderingKey": "",
            "unknownLaterField": {"ignored": true},
        })),
    );
    match &delivery.item {
        Item::Event(event) => assert_eq!((event.post_id(), event.user_id()), ("p1", "u1")),
        other => panic!("expected the event, got {other:?}"),
    }
    assert_eq!(delivery.bytes, EVENT.len());
    let published = delivery.published.expect("publish time read");
    let millis = published
        .duration_since(SystemTime::UNIX_EPOCH)
        .expect("after 1970")
        .as_millis();
    assert_eq!(millis % 1000, 500);
    assert_eq!(delivery.other_subscription, None, "the one expected");
    let elsewhere = super::parse(
        &HeaderMap::new(),
        wrapped(serde_json::json!({"data": b64(EVENT.as_bytes()), "messageId": "1"})),
        "projects/p/subscriptions/other",
    );
    assert_eq!(elsewhere.other_subscription.as_deref(), Some(SUBSCRIPTION));
}

#[test]
fn a_wrapped_poison_payload_keeps_its_message_id_and_attributes() {
    let delivery = parse(
        &HeaderMap::new(),
        wrapped(serde_json::json!({
            "data": b64(b"{not json"),
            "attributes": {"source": "web"},
            "message_id": "42",
        })),
    );
    let record = poison(&delivery);
    assert_eq!(record.message_id, "42", "snake_case spelling read too");
    assert_eq!(record.kind, "not_json");
    assert_eq!(record.data, b"{not json");
    assert_eq!(record.attributes, vec![("source".into(), "web".into())]);
}

#[test]
fn a_wrapped_poison_payload_keeps_attributes_unescaped_and_a_repeated_key_last() {
    // Escapes in keys and values, and one key twice (JSON allows it; a
    // map keeps the last), written by hand: `json!` could not repeat it.
    let body = format!(
        r#"{{"message": {{"data": "{}", "messageId": "9", "attributes": {{"a\"b": "x\u00e9", "k": "1", "k": "2"}}}}}}"#,
        b64(b"not json")
    );
    let delivery = parse(&HeaderMap::new(), Read::Whole(Bytes::from(body)));
    let record = poison(&delivery);
    assert_eq!(record.message_id, "9");
    let expected = [("a\"b", "x\u{e9}"), ("k", "2")];
    let expected: Vec<(String, String)> = (expected.iter())
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    assert_eq!(record.attributes, expected);
}

#[test]
fn bodies_that_are_not_push_requests_are_poison_that_says_so() {
    let cases: Vec<(&str, Read, &str)> = vec![
        (
            "message of the wrong type",
            Read::Whole(Bytes::from_static(
                br#"{"message": 5, "subscription": "s"}"#,
            )),
            "not Pub/Sub's push request",
        ),
        (
            "data that is not base64",
            wrapped(serde_json::json!({"data": "%%%", "messageId": "7"})),
            "not base64",
        ),
        (
            "no message id",
            wrapped(serde_json::json!({"data": b64(EVENT.as_bytes())})),
            "no messageId",
        ),
        (
            "attributes that are not a map",
            wrapped(serde_json::json!({"data": "", "messageId": "7", "attributes": ["a"]})),
            "invalid type: sequence, expected a map",
        ),
        (
            "an attribute that is not a string",
            wrapped(serde_json::json!({"data": "", "messageId": "7", "attributes": {"a": 5}})),
            "invalid type: integer `5`, expected a string",
        ),
    ];
    for (what, body, reason) in cases {
        let delivery = parse(&HeaderMap::new(), body);
        let record = poison(&delivery);
        assert_eq!(record.kind, KIND_NOT_PUSH, "{what}");
        assert!(record.reason.contains(reason), "{what}: {}", record.reason);
        assert!(
            record.message_id.starts_with("push-body-sha256-"),
            "{what}: named by the body's digest: {}",
            record.message_id
        );
        assert!(!record.data.is_empty(), "{what}: the body is kept");
    }
}

#[test]
fn an_unwrapped_body_is_the_payload_with_metadata_from_headers() {
    let headers = metadata(&[
        ("x-goog-pubsub-message-id", "991"),
        ("x-goog-pubsub-publish-time", "2026-11-30T12:00:01Z"),
        (
            "x-goog-pubsub-subscription-name",
            "projects/p/subscriptions/likes-hotcount",
        ),
        ("source", "web"),
        ("authorization", "Bearer secret-token"),
        ("content-type", "application/json"),
        ("user-agent", "APIs-Google"),
    ]);
    let delivery = parse(&headers, Read::Whole(Bytes::from_static(EVENT.as_bytes())));
    assert!(matches!(delivery.item, Item::Event(_)));
    assert!(delivery.published.is_some());
    assert_eq!(delivery.other_subscription, None, "the one expected");
    let elsewhere = super::parse(
        &headers,
        Read::Whole(Bytes::from_static(EVENT.as_bytes())),
        "projects/p/subscriptions/other",
    );
    assert_eq!(elsewhere.other_subscription.as_deref(), Some(SUBSCRIPTION));
    // The same headers with a poison payload: the record's attributes are
    // the message's, never the token or HTTP's own headers.
    let delivery = parse(&headers, Read::Whole(Bytes::from_static(b"oops")));
    let record = poison(&delivery);
    assert_eq!(record.message_id, "991");
    assert_eq!(record.attributes, vec![("source".into(), "web".into())]);
}

#[test]
fn an_unwrapped_body_without_metadata_is_the_payload_named_by_its_digest() {
    let delivery = parse(
        &HeaderMap::new(),
        Read::Whole(Bytes::from_static(EVENT.as_bytes())),
    );
    assert!(matches!(delivery.item, Item::Event(_)));
    let first = parse(&HeaderMap::new(), Read::Whole(Bytes::from_static(b"[1,2]")));
    let again = parse(&HeaderMap::new(), Read::Whole(Bytes::from_static(b"[1,2]")));
    assert_eq!(poison(&first).kind, "not_json");
    assert_eq!(
        poison(&first).message_id,
        poison(&again).message_id,
        "a redelivered body lands on the same record"
    );
}

async fn read_chunks(chunks: Vec<Vec<u8>>) -> Read {
    let stream = futures::stream::iter(
        chunks
            .into_iter()
            .map(|c| Ok::<_, std::io::Error>(Bytes::from(c))),
    );
    read(Body::from_stream(stream)).await.expect("body read")
}

#[tokio::test]
async fn a_body_over_the_limit_is_poison_with_its_length_digest_and_message_id() {
    // A wrapped body whose data alone is over the limit, in 64 KiB chunks;
    // its messageId comes after the data, as Pub/Sub writes it.
    let data = b64(&vec![b'x'; MAX_BODY_BYTES]);
    let text =
        format!(r#"{{"message":{{"data":"{data}","messageId":"1234"}},"subscription":"s"}}"#);
    let chunks: Vec<Vec<u8>> = text
        .as_bytes()
        .chunks(64 * 1024)
        .map(<[u8]>::to_vec)
        .collect();
    let read = read_chunks(chunks).await;
    let Read::Oversized { len, sha256, .. } = &read else {
        panic!("expected an oversized body");
    };
    assert_eq!(*len, text.len());
    assert_eq!(sha256, &<[u8; 32]>::from(Sha256::digest(text.as_bytes())));
    let delivery = parse(&HeaderMap::new(), read);
    let record = poison(&delivery);
    assert_eq!(record.kind, KIND_TOO_LARGE);
    assert_eq!(record.message_id, "1234");
    assert_eq!(record.data_len, text.len());
    assert_eq!(record.data.len(), PoisonRecord::MAX_STORED_BYTES);
    assert!(record.reason.contains("over the"), "{}", record.reason);
    // Unwrapped: the message id from its header.
    let read = read_chunks(vec![vec![b'y'; MAX_BODY_BYTES + 1]]).await;
    let delivery = parse(&metadata(&[("x-goog-pubsub-message-id", "77")]), read);
    assert_eq!(poison(&delivery).message_id, "77");
}

#[tokio::test]
async fn a_body_at_the_limit_is_read_whole() {
    let read = read_chunks(vec![vec![b'a'; 1000], vec![b'b'; MAX_BODY_BYTES - 1000]]).await;
    match read {
        Read::Whole(body) => assert_eq!(body.len(), MAX_BODY_BYTES),
        other => panic!("expected the whole body, got {other:?}"),
    }
}

#[test]
fn the_message_id_is_found_after_the_data_or_not_at_all() {
    assert_eq!(
        message_id_in(br#"AAAA","messageId" : "98765","publishTime":"x"}"#),
        Some("98765".into())
    );
    assert_eq!(message_id_in(br#"AAAA","messageId":"987"#), None, "cut off");
    assert_eq!(message_id_in(br#"AAAA"}"#), None);
}

#[test]
fn a_wrapped_bodys_strings_are_borrowed_from_it_and_copied_only_to_undo_escapes() {
    let body = serde_json::json!({
        "message": {
            "data": b64(EVENT.as_bytes()),
            "messageId": "m1",
            "message_id": "m1",
            "publishTime": "2026-11-30T12:00:01Z",
            "publish_time": "2026-11-30T12:00:01Z",
        },
        "subscription": SUBSCRIPTION,
    })
    .to_string();
    let envelope: Envelope = serde_json::from_str(&body).expect("an envelope");
    let message = envelope.message.expect("a message");
    let borrowed = |text: &Option<Cow<str>>| matches!(text, Some(Cow::Borrowed(_)));
    assert!(borrowed(&message.data), "data");
    assert!(borrowed(&message.message_id), "messageId");
    assert!(borrowed(&message.message_id_snake), "message_id");
    assert!(borrowed(&message.publish_time), "publishTime");
    assert!(borrowed(&message.publish_time_snake), "publish_time");
    assert!(borrowed(&envelope.subscription), "subscription");
    // An escape is undone in a copy.
    let escaped = r#"{"message": {"messageId": "m\u0031"}}"#;
    let envelope: Envelope = serde_json::from_str(escaped).expect("an envelope");
    let id = envelope.message.expect("a message").message_id;
    assert!(matches!(&id, Some(Cow::Owned(id)) if id == "m1"), "{id:?}");
}
