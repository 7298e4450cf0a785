//! Proto3 JSON mapping of the Pub/Sub resources the REST surface carries:
//! camelCase names, durations as `"600s"`, timestamps as RFC 3339, bytes as
//! base64 (written standard and padded, read as strictly as Google's front
//! end: see [`base64_decode`]), int64 as strings, enums as numbers or names.
//!
//! Invariant: parsing is lenient only where proto3 JSON is (unknown fields
//! are ignored, enums and int64 accepted in both forms); a wrong type for a
//! known field, or base64 Google would refuse, is INVALID_ARGUMENT, never a
//! panic.

use std::collections::HashMap;
use std::time::{Duration, SystemTime};

use base64::engine::general_purpose::{STANDARD, STANDARD_NO_PAD, URL_SAFE, URL_SAFE_NO_PAD};
use base64::Engine as _;
use serde_json::{json, Map, Value};
use tonic::Status;

use super::resources::{to_proto, to_std};
use crate::proto::pubsub_v1 as pb;

fn bad(field: &str) -> Status {
    Status::invalid_argument(format!(
        "Invalid JSON payload: bad value for field {field:?}"
    ))
}

/// `"600s"` / `"1.5s"` for a duration.
pub fn duration(d: &prost_types::Duration) -> Value {
    let std = to_std(d).unwrap_or_default();
    if std.subsec_nanos() == 0 {
        json!(format!("{}s", std.as_secs()))
    } else {
        json!(format!("{}s", std.as_secs_f64()))
    }
}

fn parse_duration(v: &Value, field: &str) -> Result<prost_types::Duration, Status> {
    let s = v.as_str().ok_or_else(|| bad(field))?;
    let secs: f64 = s
        .strip_suffix('s')
        .and_then(|n| n.parse().ok())
        .ok_or_else(|| bad(field))?;
    let d = Duration::try_from_secs_f64(secs).map_err(|_| bad(field))?;
    Ok(to_proto(d))
}

/// RFC 3339 for a timestamp.
pub fn timestamp(t: &prost_types::Timestamp) -> Value {
    let dt =
        chrono::DateTime::from_timestamp(t.seconds, t.nanos.unsigned_abs()).unwrap_or_default();
    json!(dt.to_rfc3339_opts(chrono::SecondsFormat::AutoSi, true))
}

/// Parses an RFC 3339 timestamp.
pub fn parse_time(v: &Value, field: &str) -> Result<SystemTime, Status> {
    let s = v.as_str().ok_or_else(|| bad(field))?;
    let dt = chrono::DateTime::parse_from_rfc3339(s).map_err(|_| bad(field))?;
    Ok(SystemTime::from(dt))
}

fn get_str(obj: &Map<String, Value>, key: &str) -> Result<String, Status> {
    match obj.get(key) {
        None | Some(Value::Null) => Ok(String::new()),
        Some(Value::String(s)) => Ok(s.clone()),
        Some(_) => Err(bad(key)),
    }
}

/// A boolean field (absent = false).
pub fn get_bool(obj: &Map<String, Value>, key: &str) -> Result<bool, Status> {
    match obj.get(key) {
        None | Some(Value::Null) => Ok(false),
        Some(Value::Bool(b)) => Ok(*b),
        Some(_) => Err(bad(key)),
    }
}

/// An integer given as a JSON number or a string (proto3 JSON allows both).
pub fn get_i64(obj: &Map<String, Value>, key: &str) -> Result<i64, Status> {
    match obj.get(key) {
        None | Some(Value::Null) => Ok(0),
        Some(Value::Number(n)) => n.as_i64().ok_or_else(|| bad(key)),
        Some(Value::String(s)) => s.parse().map_err(|_| bad(key)),
        Some(_) => Err(bad(key)),
    }
}

fn get_i32(obj: &Map<String, Value>, key: &str) -> Result<i32, Status> {
    i32::try_from(get_i64(obj, key)?).map_err(|_| bad(key))
}

fn get_obj<'a>(
    obj: &'a Map<String, Value>,
    key: &str,
) -> Result<Option<&'a Map<String, Value>>, Status> {
    match obj.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::Object(o)) => Ok(Some(o)),
        Some(_) => Err(bad(key)),
    }
}

fn get_duration(
    obj: &Map<String, Value>,
    key: &str,
) -> Result<Option<prost_types::Duration>, Status> {
    match obj.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(v) => parse_duration(v, key).map(Some),
    }
}

fn get_map(obj: &Map<String, Value>, key: &str) -> Result<HashMap<String, String>, Status> {
    let mut out = HashMap::new();
    if let Some(o) = get_obj(obj, key)? {
        for (k, v) in o {
            out.insert(k.clone(), v.as_str().ok_or_else(|| bad(key))?.to_string());
        }
    }
    Ok(out)
}

/// Strings of a JSON array field (absent = empty).
pub fn get_strings(obj: &Map<String, Value>, key: &str) -> Result<Vec<String>, Status> {
    match obj.get(key) {
        None | Some(Value::Null) => Ok(Vec::new()),
        Some(Value::Array(items)) => items
            .iter()
            .map(|v| v.as_str().map(str::to_string).ok_or_else(|| bad(key)))
            .collect(),
        Some(_) => Err(bad(key)),
    }
}

/// The body as a JSON object (an empty body is `{}`).
pub fn object(body: &[u8]) -> Result<Map<String, Value>, Status> {
    if body.iter().all(u8::is_ascii_whitespace) {
        return Ok(Map::new());
    }
    match serde_json::from_slice(body) {
        Ok(Value::Object(o)) => Ok(o),
        Ok(_) => Err(Status::invalid_argument(
            "Invalid JSON payload: expected an object",
        )),
        Err(e) => Err(Status::invalid_argument(format!(
            "Invalid JSON payload: {e}"
        ))),
    }
}

fn state_value(state: i32, int_enums: bool) -> Value {
    if int_enums {
        json!(state)
    } else {
        json!(match state {
            1 => "ACTIVE",
            2 => "RESOURCE_ERROR",
            _ => "STATE_UNSPECIFIED",
        })
    }
}

fn insert_labels(out: &mut Map<String, Value>, labels: &HashMap<String, String>) {
    if !labels.is_empty() {
        out.insert("labels".into(), json!(labels));
    }
}

/// A topic as JSON.
pub fn topic(t: &pb::Topic, int_enums: bool) -> Value {
    let mut out = Map::new();
    out.insert("name".into(), json!(t.name));
    insert_labels(&mut out, &t.labels);
    if let Some(d) = &t.message_retention_duration {
        out.insert("messageRetentionDuration".into(), duration(d));
    }
    if !t.kms_key_name.is_empty() {
        out.insert("kmsKeyName".into(), json!(t.kms_key_name));
    }
    out.insert("state".into(), state_value(t.state, int_enums));
    Value::Object(out)
}

/// A topic from JSON (its name comes from the path).
pub fn parse_topic(obj: &Map<String, Value>, name: &str) -> Result<pb::Topic, Status> {
    Ok(pb::Topic {
        name: name.to_string(),
        labels: get_map(obj, "labels")?,
        message_retention_duration: get_duration(obj, "messageRetentionDuration")?,
        kms_key_name: get_str(obj, "kmsKeyName")?,
        ..Default::default()
    })
}

/// A snapshot as JSON.
pub fn snapshot(s: &pb::Snapshot) -> Value {
    let mut out = Map::new();
    out.insert("name".into(), json!(s.name));
    out.insert("topic".into(), json!(s.topic));
    if let Some(t) = &s.expire_time {
        out.insert("expireTime".into(), timestamp(t));
    }
    insert_labels(&mut out, &s.labels);
    Value::Object(out)
}

/// A CreateSnapshot request from JSON (the name comes from the path).
pub fn parse_create_snapshot(
    obj: &Map<String, Value>,
    name: &str,
) -> Result<pb::CreateSnapshotRequest, Status> {
    Ok(pb::CreateSnapshotRequest {
        name: name.to_string(),
        subscription: get_str(obj, "subscription")?,
        labels: get_map(obj, "labels")?,
        ..Default::default()
    })
}

/// A subscription as JSON.
pub fn subscription(s: &pb::Subscription, int_enums: bool) -> Value {
    let mut out = Map::new();
    out.insert("name".into(), json!(s.name));
    out.insert("topic".into(), json!(s.topic));
    out.insert("pushConfig".into(), push_config(s.push_config.as_ref()));
    out.insert("ackDeadlineSeconds".into(), json!(s.ack_deadline_seconds));
    if s.retain_acked_messages {
        out.insert("retainAckedMessages".into(), json!(true));
    }
    if let Some(d) = &s.message_retention_duration {
        out.insert("messageRetentionDuration".into(), duration(d));
    }
    insert_labels(&mut out, &s.labels);
    if s.enable_message_ordering {
        out.insert("enableMessageOrdering".into(), json!(true));
    }
    if let Some(p) = &s.expiration_policy {
        let ttl = p.ttl.as_ref().map(duration);
        out.insert("expirationPolicy".into(), json!({ "ttl": ttl }));
    }
    if let Some(p) = &s.dead_letter_policy {
        out.insert(
            "deadLetterPolicy".into(),
            json!({ "deadLetterTopic": p.dead_letter_topic, "maxDeliveryAttempts": p.max_delivery_attempts }),
        );
    }
    if let Some(p) = &s.retry_policy {
        let mut policy = Map::new();
        if let Some(d) = &p.minimum_backoff {
            policy.insert("minimumBackoff".into(), duration(d));
        }
        if let Some(d) = &p.maximum_backoff {
            policy.insert("maximumBackoff".into(), duration(d));
        }
        out.insert("retryPolicy".into(), Value::Object(policy));
    }
    if s.detached {
        out.insert("detached".into(), json!(true));
    }
    if s.enable_exactly_once_delivery {
        out.insert("enableExactlyOnceDelivery".into(), json!(true));
    }
    out.insert("state".into(), state_value(s.state, int_enums));
    Value::Object(out)
}

/// A push config as JSON (`{}` for a pull subscription).
pub fn push_config(p: Option<&pb::PushConfig>) -> Value {
    let mut out = Map::new();
    let Some(p) = p.filter(|p| !p.push_endpoint.is_empty()) else {
        return Value::Object(out);
    };
    out.insert("pushEndpoint".into(), json!(p.push_endpoint));
    if !p.attributes.is_empty() {
        out.insert("attributes".into(), json!(p.attributes));
    }
    if let Some(pb::push_config::AuthenticationMethod::OidcToken(t)) = &p.authentication_method {
        let mut token = Map::new();
        token.insert("serviceAccountEmail".into(), json!(t.service_account_email));
        if !t.audience.is_empty() {
            token.insert("audience".into(), json!(t.audience));
        }
        out.insert("oidcToken".into(), Value::Object(token));
    }
    match &p.wrapper {
        Some(pb::push_config::Wrapper::PubsubWrapper(_)) => {
            out.insert("pubsubWrapper".into(), json!({}));
        }
        Some(pb::push_config::Wrapper::NoWrapper(w)) => {
            let mut wrapper = Map::new();
            if w.write_metadata {
                wrapper.insert("writeMetadata".into(), json!(true));
            }
            out.insert("noWrapper".into(), Value::Object(wrapper));
        }
        None => {}
    }
    Value::Object(out)
}

/// A push config from JSON (`pushEndpoint`, `attributes`, `oidcToken`,
/// `pubsubWrapper` or `noWrapper`).
pub fn parse_push_config(p: &Map<String, Value>) -> Result<pb::PushConfig, Status> {
    let authentication_method = get_obj(p, "oidcToken")?
        .map(|t| {
            Ok::<_, Status>(pb::push_config::AuthenticationMethod::OidcToken(
                pb::push_config::OidcToken {
                    service_account_email: get_str(t, "serviceAccountEmail")?,
                    audience: get_str(t, "audience")?,
                },
            ))
        })
        .transpose()?;
    let wrapper = match (get_obj(p, "pubsubWrapper")?, get_obj(p, "noWrapper")?) {
        (Some(_), Some(_)) => {
            return Err(Status::invalid_argument(
                "Invalid push config: pubsubWrapper and noWrapper are exclusive.",
            ))
        }
        (Some(_), None) => Some(pb::push_config::Wrapper::PubsubWrapper(
            pb::push_config::PubsubWrapper {},
        )),
        (None, Some(w)) => Some(pb::push_config::Wrapper::NoWrapper(
            pb::push_config::NoWrapper {
                write_metadata: get_bool(w, "writeMetadata")?,
            },
        )),
        (None, None) => None,
    };
    Ok(pb::PushConfig {
        push_endpoint: get_str(p, "pushEndpoint")?,
        attributes: get_map(p, "attributes")?,
        authentication_method,
        wrapper,
    })
}

/// The push config in field `key` of a request, if present.
pub fn get_push_config(
    obj: &Map<String, Value>,
    key: &str,
) -> Result<Option<pb::PushConfig>, Status> {
    get_obj(obj, key)?.map(parse_push_config).transpose()
}

/// A subscription from JSON (its name comes from the path).
pub fn parse_subscription(
    obj: &Map<String, Value>,
    name: &str,
) -> Result<pb::Subscription, Status> {
    let push_config = get_push_config(obj, "pushConfig")?;
    let expiration_policy = match get_obj(obj, "expirationPolicy")? {
        Some(p) => Some(pb::ExpirationPolicy {
            ttl: get_duration(p, "ttl")?,
        }),
        None => None,
    };
    let dead_letter_policy = match get_obj(obj, "deadLetterPolicy")? {
        Some(p) => Some(pb::DeadLetterPolicy {
            dead_letter_topic: get_str(p, "deadLetterTopic")?,
            max_delivery_attempts: get_i32(p, "maxDeliveryAttempts")?,
        }),
        None => None,
    };
    let retry_policy = match get_obj(obj, "retryPolicy")? {
        Some(p) => Some(pb::RetryPolicy {
            minimum_backoff: get_duration(p, "minimumBackoff")?,
            maximum_backoff: get_duration(p, "maximumBackoff")?,
        }),
        None => None,
    };
    let unsupported = ["bigqueryConfig", "cloudStorageConfig", "bigtableConfig"];
    if let Some(key) = unsupported
        .iter()
        .find(|k| get_obj(obj, k).ok().flatten().is_some())
    {
        return Err(Status::unimplemented(format!(
            "{key} is not supported by this emulator"
        )));
    }
    Ok(pb::Subscription {
        name: name.to_string(),
        topic: get_str(obj, "topic")?,
        push_config,
        ack_deadline_seconds: get_i32(obj, "ackDeadlineSeconds")?,
        retain_acked_messages: get_bool(obj, "retainAckedMessages")?,
        message_retention_duration: get_duration(obj, "messageRetentionDuration")?,
        labels: get_map(obj, "labels")?,
        enable_message_ordering: get_bool(obj, "enableMessageOrdering")?,
        expiration_policy,
        filter: get_str(obj, "filter")?,
        dead_letter_policy,
        retry_policy,
        detached: get_bool(obj, "detached")?,
        enable_exactly_once_delivery: get_bool(obj, "enableExactlyOnceDelivery")?,
        ..Default::default()
    })
}

/// `updateMask` (`"ackDeadlineSeconds,retryPolicy"`) as snake_case paths.
pub fn update_mask(obj: &Map<String, Value>) -> Result<Vec<String>, Status> {
    let mask = get_str(obj, "updateMask")?;
    Ok(mask
        .split(',')
        .map(str::trim)
        .filter(|p| !p.is_empty())
        .map(snake_case)
        .collect())
}

fn snake_case(path: &str) -> String {
    let mut out = String::with_capacity(path.len() + 4);
    for c in path.chars() {
        if c.is_ascii_uppercase() {
            out.push('_');
            out.push(c.to_ascii_lowercase());
        } else {
            out.push(c);
        }
    }
    out
}

/// A message to publish, from JSON.
pub fn parse_message(v: &Value) -> Result<pb::PubsubMessage, Status> {
    let obj = v.as_object().ok_or_else(|| bad("messages"))?;
    let data = match obj.get("data") {
        None | Some(Value::Null) => Vec::new(),
        Some(Value::String(s)) => base64_decode(s).ok_or_else(|| bad("data"))?,
        Some(_) => return Err(bad("data")),
    };
    Ok(pb::PubsubMessage {
        data,
        attributes: get_map(obj, "attributes")?,
        ordering_key: get_str(obj, "orderingKey")?,
        ..Default::default()
    })
}

/// A received message as JSON.
pub fn received(m: &pb::ReceivedMessage) -> Value {
    let mut out = Map::new();
    out.insert("ackId".into(), json!(m.ack_id));
    if let Some(msg) = &m.message {
        let mut message = Map::new();
        if !msg.data.is_empty() {
            message.insert("data".into(), json!(base64_encode(&msg.data)));
        }
        if !msg.attributes.is_empty() {
            message.insert("attributes".into(), json!(msg.attributes));
        }
        message.insert("messageId".into(), json!(msg.message_id));
        if let Some(t) = &msg.publish_time {
            message.insert("publishTime".into(), timestamp(t));
        }
        if !msg.ordering_key.is_empty() {
            message.insert("orderingKey".into(), json!(msg.ordering_key));
        }
        out.insert("message".into(), Value::Object(message));
    }
    if m.delivery_attempt > 0 {
        out.insert("deliveryAttempt".into(), json!(m.delivery_attempt));
    }
    Value::Object(out)
}

/// Standard base64 with padding, as Google's JSON mapping writes `bytes`.
pub fn base64_encode(data: &[u8]) -> String {
    STANDARD.encode(data)
}

/// A `bytes` field as Google's REST front end reads it; None when refused.
///
/// The rule (evidence in emulators/docs/pubsub.md, "Base64 in REST JSON"):
/// the standard or the URL-safe alphabet, one of them throughout; padding
/// either absent or canonical (`=` only at the end, as many as needed to
/// reach a multiple of 4); no whitespace; the unused low bits of the last
/// character zero.
pub fn base64_decode(s: &str) -> Option<Vec<u8>> {
    // A length that is a multiple of 4 needs no padding, or has exactly the
    // canonical amount; any other length must carry none.
    let (standard, url_safe) = if s.len().is_multiple_of(4) {
        (&STANDARD, &URL_SAFE)
    } else {
        (&STANDARD_NO_PAD, &URL_SAFE_NO_PAD)
    };
    standard.decode(s).or_else(|_| url_safe.decode(s)).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn base64_round_trips() {
        for data in [
            &b""[..],
            b"f",
            b"fo",
            b"foo",
            b"foob",
            b"fooba",
            b"foobar",
            &[0, 255, 128],
        ] {
            let enc = base64_encode(data);
            assert_eq!(base64_decode(&enc).unwrap(), data);
        }
        assert_eq!(base64_encode(b"foobar"), "Zm9vYmFy");
        assert_eq!(base64_encode(b"fo"), "Zm8=");
    }

    /// Google's REST front end decodes `bytes` strictly (emulators/docs/pubsub.md,
    /// "Base64 in REST JSON"): one alphabet per string, padding absent or
    /// canonical, no whitespace, zero trailing bits.
    #[test]
    fn base64_accepts_either_alphabet_with_or_without_padding() {
        for (input, want) in [
            ("", &b""[..]),
            ("Zg==", b"f"),
            ("Zg", b"f"),
            ("Zm8=", b"fo"),
            ("Zm8", b"fo"),
            ("Zm9v", b"foo"),
            ("+/+/", &[0xfb, 0xff, 0xbf]),
            ("-_-_", &[0xfb, 0xff, 0xbf]),
            ("+w==", &[0xfb]),
            ("+w", &[0xfb]),
            ("-w==", &[0xfb]),
            ("-w", &[0xfb]),
        ] {
            assert_eq!(base64_decode(input).as_deref(), Some(want), "{input:?}");
        }
    }

    #[test]
    fn base64_refuses_what_google_refuses() {
        for input in [
            "Zg==Zg==",   // `=` before the end
            "Zm=9v",      // `=` inside a quantum
            "a+b_",       // standard `+` mixed with URL-safe `_`
            "+-8=",       // `+` and `-` in one string
            "SGVsbG8=\n", // trailing newline (base64.encodestring)
            "SGVs bG8=",  // inner space
            " Zg==",      // leading space
            "Zg=",        // partial padding
            "Zm8==",      // excess padding
            "Zh==",       // non-zero trailing bits
            "Zh",         // non-zero trailing bits, unpadded
            "Z",          // one character: 6 bits, no byte
            "Zm9vY",      // length 1 modulo 4
            "====",       // padding only
            "Zg..",       // `.` as padding
            "Zg!=",       // not base64 at all
        ] {
            assert_eq!(base64_decode(input), None, "{input:?}");
        }
    }

    #[test]
    fn durations_use_seconds_strings() {
        let d = to_proto(Duration::from_secs(600));
        assert_eq!(duration(&d), json!("600s"));
        assert_eq!(
            parse_duration(&json!("1.5s"), "x").unwrap().nanos,
            500_000_000
        );
        assert!(parse_duration(&json!("10"), "x").is_err());
        assert!(parse_duration(&json!("1e300s"), "x").is_err());
        assert!(parse_duration(&json!("-1s"), "x").is_err());
    }

    #[test]
    fn update_mask_becomes_snake_case() {
        let obj = object(br#"{"updateMask":"ackDeadlineSeconds,retryPolicy"}"#).unwrap();
        assert_eq!(
            update_mask(&obj).unwrap(),
            ["ack_deadline_seconds", "retry_policy"]
        );
    }
}
