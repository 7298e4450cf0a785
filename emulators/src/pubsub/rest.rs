//! The REST/JSON surface (`/v1/projects/...`) that the admin clients
//! (`TopicAdmin`, `SubscriptionAdmin`, `gcloud`) speak over HTTP/1.1.
//!
//! Invariant: each route converts JSON to the same calls the gRPC handlers
//! make and maps a gRPC status to Google's JSON error shape and HTTP status;
//! no behaviour lives here.

use std::sync::Arc;

use axum::body::Bytes;
use axum::extract::{Path, RawQuery, State};
use axum::http::{Method, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::any;
use axum::{Json, Router};
use serde_json::{json, Map, Value};
use tonic::{Code, Status};

use super::grpc::unary_ack_result;
use super::names::{self, Kind};
use super::{json as j, Shared};
use crate::faults::{code_name, http_status};

/// The `/v1/...` routes.
pub(super) fn routes(shared: Arc<Shared>) -> Router {
    Router::new()
        .route("/v1/{*path}", any(handle))
        .with_state(shared)
}

/// Google's JSON error body for `status`.
fn error(status: &Status) -> Response {
    let http = http_status(status.code());
    let mut error = json!({
        "code": http,
        "message": status.message(),
        "status": code_name(status.code()),
    });
    if let Some(details) = error_details(status) {
        error["details"] = details;
    }
    let code = StatusCode::from_u16(http).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    (code, Json(json!({ "error": error }))).into_response()
}

/// `google.rpc.ErrorInfo` details of a status, as JSON.
fn error_details(status: &Status) -> Option<Value> {
    use prost::Message as _;
    if status.details().is_empty() {
        return None;
    }
    let rpc = gcloud_sdk::google::rpc::Status::decode(status.details()).ok()?;
    let mut out = Vec::new();
    for any in rpc.details {
        if any.type_url.ends_with("google.rpc.ErrorInfo") {
            let info = gcloud_sdk::google::rpc::ErrorInfo::decode(any.value.as_slice()).ok()?;
            out.push(json!({
                "@type": "type.googleapis.com/google.rpc.ErrorInfo",
                "reason": info.reason,
                "domain": info.domain,
                "metadata": info.metadata,
            }));
        }
    }
    Some(Value::Array(out))
}

fn ok(value: Value) -> Response {
    Json(value).into_response()
}

/// What a request path names.
enum Target<'a> {
    Topics(&'a str),
    Topic(String, Option<&'a str>),
    TopicSubscriptions(String),
    Subscriptions(&'a str),
    Subscription(String, Option<&'a str>),
    Snapshots(&'a str),
    Snapshot(String),
}

fn parse_path(path: &str) -> Option<Target<'_>> {
    let (resource, verb) = match path.rsplit_once(':') {
        Some((r, v)) if !v.contains('/') => (r, Some(v)),
        _ => (path, None),
    };
    let parts: Vec<&str> = resource.split('/').collect();
    match parts.as_slice() {
        ["projects", p, "topics"] if verb.is_none() => Some(Target::Topics(p)),
        ["projects", p, "topics", t] => {
            Some(Target::Topic(format!("projects/{p}/topics/{t}"), verb))
        }
        ["projects", p, "topics", t, "subscriptions"] if verb.is_none() => Some(
            Target::TopicSubscriptions(format!("projects/{p}/topics/{t}")),
        ),
        ["projects", p, "subscriptions"] if verb.is_none() => Some(Target::Subscriptions(p)),
        ["projects", p, "subscriptions", s] => Some(Target::Subscription(
            format!("projects/{p}/subscriptions/{s}"),
            verb,
        )),
        ["projects", p, "snapshots"] if verb.is_none() => Some(Target::Snapshots(p)),
        ["projects", p, "snapshots", s] if verb.is_none() => {
            Some(Target::Snapshot(format!("projects/{p}/snapshots/{s}")))
        }
        _ => None,
    }
}

fn query_param<'a>(query: &'a str, key: &str) -> Option<&'a str> {
    query
        .split('&')
        .filter_map(|kv| kv.split_once('='))
        .find(|(k, _)| *k == key)
        .map(|(_, v)| v)
}

async fn handle(
    State(shared): State<Arc<Shared>>,
    method: Method,
    Path(path): Path<String>,
    RawQuery(query): RawQuery,
    body: Bytes,
) -> Response {
    let query = query.unwrap_or_default();
    let int_enums = query.contains("enum-encoding=int") || query.contains("enum-encoding%3Dint");
    let path = path.replace("%3A", ":").replace("%3a", ":");
    match route(&shared, &method, &path, &query, &body, int_enums).await {
        Ok(v) => ok(v),
        Err(status) => error(&status),
    }
}

async fn route(
    shared: &Shared,
    method: &Method,
    path: &str,
    query: &str,
    body: &[u8],
    int_enums: bool,
) -> Result<Value, Status> {
    let target = parse_path(path)
        .ok_or_else(|| Status::not_found(format!("no such REST resource: /v1/{path}")))?;
    let page_size: i32 = query_param(query, "pageSize")
        .and_then(|v| v.parse().ok())
        .unwrap_or(0);
    let token = query_param(query, "pageToken")
        .unwrap_or("")
        .replace("%2F", "/");
    match (target, method.as_str()) {
        (Target::Topics(p), "GET") => {
            let (topics, next) = shared
                .with(|s, _, _| s.list_topics(&format!("projects/{p}"), page_size, &token))?;
            let topics: Vec<Value> = topics.iter().map(|t| j::topic(t, int_enums)).collect();
            Ok(list("topics", topics, next))
        }
        (Target::Topic(name, None), "PUT") => {
            let topic = j::parse_topic(&j::object(body)?, &name)?;
            let t = shared.with(|s, _, _| s.create_topic(topic))?;
            Ok(j::topic(&t, int_enums))
        }
        (Target::Topic(name, None), "GET") => {
            let t = shared.with(|s, _, _| s.get_topic(&name))?;
            Ok(j::topic(&t, int_enums))
        }
        (Target::Topic(name, None), "DELETE") => {
            shared.with(|s, _, _| s.delete_topic(&name))?;
            Ok(json!({}))
        }
        (Target::Topic(name, None), "PATCH") => {
            let obj = j::object(body)?;
            let empty = Map::new();
            let topic_obj = obj
                .get("topic")
                .and_then(Value::as_object)
                .unwrap_or(&empty);
            let topic = j::parse_topic(topic_obj, &name)?;
            let mask = j::update_mask(&obj)?;
            let t = shared.with(|s, _, _| s.update_topic(topic, &mask))?;
            Ok(j::topic(&t, int_enums))
        }
        (Target::Topic(name, Some("publish")), "POST") => {
            let obj = j::object(body)?;
            let messages = match obj.get("messages") {
                Some(Value::Array(items)) => items
                    .iter()
                    .map(j::parse_message)
                    .collect::<Result<Vec<_>, _>>()?,
                _ => Vec::new(),
            };
            let ids = shared.with(|s, now, wall| s.publish(&name, messages, now, wall))?;
            Ok(json!({ "messageIds": ids }))
        }
        (Target::TopicSubscriptions(topic), "GET") => {
            let (subs, next) =
                shared.with(|s, _, _| s.topic_subscriptions(&topic, page_size, &token))?;
            Ok(list(
                "subscriptions",
                subs.into_iter().map(Value::String).collect(),
                next,
            ))
        }
        (Target::Subscriptions(p), "GET") => {
            let (subs, next) = shared.with(|s, _, _| {
                s.list_subscriptions(&format!("projects/{p}"), page_size, &token)
            })?;
            let subs: Vec<Value> = subs.iter().map(|x| j::subscription(x, int_enums)).collect();
            Ok(list("subscriptions", subs, next))
        }
        (Target::Snapshots(p), "GET") => {
            let (snaps, next) = shared
                .with(|s, _, _| s.list_snapshots(&format!("projects/{p}"), page_size, &token))?;
            Ok(list(
                "snapshots",
                snaps.iter().map(j::snapshot).collect(),
                next,
            ))
        }
        (Target::Snapshot(name), "PUT") => {
            let req = j::parse_create_snapshot(&j::object(body)?, &name)?;
            let snap = shared.with(|s, _, wall| s.create_snapshot(req, wall))?;
            Ok(j::snapshot(&snap))
        }
        (Target::Snapshot(name), "GET") => {
            Ok(j::snapshot(&shared.with(|s, _, _| s.get_snapshot(&name))?))
        }
        (Target::Snapshot(name), "DELETE") => {
            shared.with(|s, _, _| s.delete_snapshot(&name))?;
            Ok(json!({}))
        }
        (Target::Subscription(name, verb), m) => {
            subscription(shared, &name, verb, m, body, int_enums).await
        }
        _ => Err(Status::new(
            Code::Unimplemented,
            format!("{method} /v1/{path} is not supported by this emulator"),
        )),
    }
}

fn list(key: &str, items: Vec<Value>, next: String) -> Value {
    let mut out = Map::new();
    if !items.is_empty() {
        out.insert(key.into(), Value::Array(items));
    }
    if !next.is_empty() {
        out.insert("nextPageToken".into(), json!(next));
    }
    Value::Object(out)
}

async fn subscription(
    shared: &Shared,
    name: &str,
    verb: Option<&str>,
    method: &str,
    body: &[u8],
    int_enums: bool,
) -> Result<Value, Status> {
    match (verb, method) {
        (None, "PUT") => {
            let sub = j::parse_subscription(&j::object(body)?, name)?;
            let s = shared.with(|s, _, _| s.create_subscription(sub))?;
            Ok(j::subscription(&s, int_enums))
        }
        (None, "GET") => {
            let s = shared.with(|s, _, _| s.get_subscription(name))?;
            Ok(j::subscription(&s, int_enums))
        }
        (None, "DELETE") => {
            shared.with(|s, _, _| s.delete_subscription(name))?;
            Ok(json!({}))
        }
        (None, "PATCH") => {
            let obj = j::object(body)?;
            let empty = Map::new();
            let sub_obj = obj
                .get("subscription")
                .and_then(Value::as_object)
                .unwrap_or(&empty);
            let sub = j::parse_subscription(sub_obj, name)?;
            let mask = j::update_mask(&obj)?;
            let s = shared.with(|s, _, _| s.update_subscription(sub, &mask))?;
            Ok(j::subscription(&s, int_enums))
        }
        (Some("pull"), "POST") => {
            let obj = j::object(body)?;
            let max = i32::try_from(j::get_i64(&obj, "maxMessages")?).unwrap_or(i32::MAX);
            let now = j::get_bool(&obj, "returnImmediately")?;
            let messages = shared.pull(name, max, now).await?;
            let received: Vec<Value> = messages.iter().map(j::received).collect();
            let mut out = Map::new();
            if !received.is_empty() {
                out.insert("receivedMessages".into(), Value::Array(received));
            }
            Ok(Value::Object(out))
        }
        (Some("acknowledge"), "POST") => {
            let ids = j::get_strings(&j::object(body)?, "ackIds")?;
            if ids.is_empty() {
                return Err(Status::invalid_argument("ack_ids must not be empty"));
            }
            unary_ack_result(&shared.ack(name, &ids)?)?;
            Ok(json!({}))
        }
        (Some("modifyAckDeadline"), "POST") => {
            let obj = j::object(body)?;
            let ids = j::get_strings(&obj, "ackIds")?;
            if ids.is_empty() {
                return Err(Status::invalid_argument("ack_ids must not be empty"));
            }
            let secs = i32::try_from(j::get_i64(&obj, "ackDeadlineSeconds")?).unwrap_or(-1);
            unary_ack_result(&shared.modack(name, &ids, (secs, true))?)?;
            Ok(json!({}))
        }
        (Some("modifyPushConfig"), "POST") => {
            let obj = j::object(body)?;
            let config = j::get_push_config(&obj, "pushConfig")?;
            shared.with(|s, _, _| s.modify_push_config(name, config))?;
            Ok(json!({}))
        }
        (Some("seek"), "POST") => {
            names::parse(name, Kind::Subscription)?;
            let obj = j::object(body)?;
            if let Some(snapshot) = obj.get("snapshot").and_then(Value::as_str) {
                shared.with(|s, now, _| s.seek_snapshot(name, snapshot, now))?;
                return Ok(json!({}));
            }
            let time = obj
                .get("time")
                .ok_or_else(|| Status::invalid_argument("seek needs a time or a snapshot"))?;
            let time = j::parse_time(time, "time")?;
            shared.with(|s, now, _| s.seek(name, time, now))?;
            Ok(json!({}))
        }
        _ => Err(Status::unimplemented(format!(
            "{method} on {name}:{} is not supported by this emulator",
            verb.unwrap_or("")
        ))),
    }
}
