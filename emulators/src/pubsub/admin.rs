//! `/emulator/v1/pubsub/...`: the records tests read (stats, ack log, unacked
//! messages), and `/emulator/v1/push/jwks`, the keys push tokens verify
//! against. Not part of Google's API.
//!
//! Invariant: read-only; nothing here changes delivery.

use std::sync::Arc;

use axum::extract::{Query, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::{Json, Router};
use serde::Deserialize;
use serde_json::json;

use super::{PubSub, Shared};

/// The pubsub-specific admin routes.
pub(super) fn routes(shared: Arc<Shared>) -> Router {
    Router::new()
        .route("/emulator/v1/pubsub/stats", get(stats))
        .route("/emulator/v1/pubsub/acks", get(acks))
        .route("/emulator/v1/pubsub/unacked", get(unacked))
        .route("/emulator/v1/push/jwks", get(jwks))
        .with_state(PubSub { shared })
}

#[derive(Deserialize)]
struct Which {
    subscription: String,
}

fn missing(name: &str) -> Response {
    (
        StatusCode::NOT_FOUND,
        Json(json!({ "error": { "code": 404, "message": format!("no subscription {name}"), "status": "NOT_FOUND" } })),
    )
        .into_response()
}

/// The public keys push tokens are signed with, as Google serves its own at
/// `https://www.googleapis.com/oauth2/v3/certs`.
async fn jwks(State(pubsub): State<PubSub>) -> Response {
    match pubsub.push_jwks() {
        Ok(keys) => (
            [(axum::http::header::CACHE_CONTROL, "public, max-age=3600")],
            Json(keys),
        )
            .into_response(),
        Err(error) => (
            StatusCode::INTERNAL_SERVER_ERROR,
            Json(json!({ "error": { "code": 500, "message": error, "status": "INTERNAL" } })),
        )
            .into_response(),
    }
}

async fn stats(State(pubsub): State<PubSub>) -> Response {
    Json(json!({ "subscriptions": pubsub.all_stats() })).into_response()
}

async fn acks(State(pubsub): State<PubSub>, Query(q): Query<Which>) -> Response {
    match pubsub.ack_log(&q.subscription) {
        Some(log) => Json(json!({ "subscription": q.subscription, "acks": log })).into_response(),
        None => missing(&q.subscription),
    }
}

async fn unacked(State(pubsub): State<PubSub>, Query(q): Query<Which>) -> Response {
    match pubsub.unacked(&q.subscription) {
        Some(list) => {
            Json(json!({ "subscription": q.subscription, "messages": list })).into_response()
        }
        None => missing(&q.subscription),
    }
}
