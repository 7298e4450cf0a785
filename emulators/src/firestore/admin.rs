//! HTTP admin routes of the Firestore emulator: statistics (totals and the
//! hottest documents) and Google-emulator-compatible database reset.
//!
//! Invariant: these routes only read statistics or clear state through the
//! engine; they never bypass its lock.

use std::sync::Arc;

use axum::extract::{Path, Query, State};
use axum::response::{IntoResponse, Response};
use axum::routing::{delete, get};
use axum::{Json, Router};
use serde::Deserialize;
use serde_json::json;

use super::engine::Engine;

/// Default number of hottest documents listed by the stats route.
const DEFAULT_TOP: usize = 10;

/// The routes: `GET|DELETE /emulator/v1/firestore/stats`,
/// `DELETE /emulator/v1/firestore/documents` (everything) and
/// `DELETE /emulator/v1/projects/{p}/databases/{d}/documents`.
pub fn routes(engine: Arc<Engine>) -> Router {
    Router::new()
        .route(
            "/emulator/v1/firestore/stats",
            get(stats).delete(reset_stats),
        )
        .route("/emulator/v1/firestore/documents", delete(reset_all))
        .route(
            "/emulator/v1/projects/{project}/databases/{database}/documents",
            delete(reset_database),
        )
        .with_state(engine)
}

#[derive(Deserialize)]
struct Top {
    top: Option<usize>,
}

async fn stats(State(engine): State<Arc<Engine>>, Query(q): Query<Top>) -> Response {
    let top = q.top.unwrap_or(DEFAULT_TOP);
    Json(json!({
        "totals": engine.stats(),
        "hottest_documents": engine.hottest(top),
    }))
    .into_response()
}

async fn reset_stats(State(engine): State<Arc<Engine>>) -> Response {
    engine.reset_stats();
    Json(json!({})).into_response()
}

async fn reset_all(State(engine): State<Arc<Engine>>) -> Response {
    let removed = engine.reset_all();
    Json(json!({ "documents_removed": removed })).into_response()
}

async fn reset_database(
    State(engine): State<Arc<Engine>>,
    Path((project, database)): Path<(String, String)>,
) -> Response {
    engine.reset_database(&format!("projects/{project}/databases/{database}"));
    Json(json!({})).into_response()
}
