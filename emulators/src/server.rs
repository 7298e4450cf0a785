//! Serving one emulator: gRPC (HTTP/2 cleartext) and HTTP/1.1 JSON routes on
//! one loopback listener, with RPC counting and fault injection in front of
//! every gRPC method.
//!
//! Invariant: every gRPC call is counted once and passes the emulator's fault
//! rules before its handler runs; the admin and REST routes share the port.

use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;

use axum::extract::{Query, State};
use axum::http::StatusCode;
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use serde::Deserialize;
use serde_json::json;
use tokio::net::TcpListener;

use crate::clock::Clock;
use crate::counters::Counters;
use crate::faults::{FaultSpec, Faults};

/// What one emulator shares with its handlers: its clock, faults and counters.
#[derive(Clone, Debug, Default)]
pub struct Context {
    /// Emulated time.
    pub clock: Clock,
    /// Installed fault rules.
    pub faults: Faults,
    /// RPCs served, by method.
    pub counters: Counters,
}

impl Context {
    /// A context on `clock` with no faults and zeroed counters.
    pub fn new(clock: Clock) -> Self {
        Self {
            clock,
            faults: Faults::default(),
            counters: Counters::default(),
        }
    }
}

/// Wraps gRPC routes so each call is counted and passes the fault rules.
pub fn grpc_layer(routes: Router, ctx: Arc<Context>) -> Router {
    routes.layer(middleware::from_fn_with_state(ctx, count_and_inject))
}

async fn count_and_inject(
    State(ctx): State<Arc<Context>>,
    request: axum::extract::Request,
    next: Next,
) -> Response {
    let method = request
        .uri()
        .path()
        .rsplit('/')
        .next()
        .unwrap_or_default()
        .to_string();
    ctx.counters.bump(&method);
    if let Err(status) = ctx.faults.before(&method).await {
        return status.into_http();
    }
    let response = next.run(request).await;
    match ctx.faults.after(&method) {
        Some(status) => status.into_http(),
        None => response,
    }
}

/// The `/emulator/v1/...` admin routes every emulator serves: faults,
/// counters and the clock.
pub fn admin_routes(ctx: Arc<Context>) -> Router {
    Router::new()
        .route(
            "/emulator/v1/faults",
            get(list_faults).post(add_fault).delete(clear_faults),
        )
        .route(
            "/emulator/v1/counters",
            get(counters).delete(reset_counters),
        )
        .route("/emulator/v1/clock", get(clock))
        .route("/emulator/v1/clock/advance", post(advance_clock))
        .route("/emulator/v1/clock/scale", post(scale_clock))
        .with_state(ctx)
}

async fn list_faults(State(ctx): State<Arc<Context>>) -> Response {
    Json(json!({ "rules": ctx.faults.rules(), "fired": ctx.faults.fired() })).into_response()
}

async fn add_fault(State(ctx): State<Arc<Context>>, body: axum::body::Bytes) -> Response {
    let spec: FaultSpec = match serde_json::from_slice(&body) {
        Ok(spec) => spec,
        Err(e) => return bad_request(format!("invalid fault rule: {e}")),
    };
    match ctx.faults.add(spec) {
        Ok(()) => Json(json!({ "ok": true })).into_response(),
        Err(e) => bad_request(e),
    }
}

async fn clear_faults(State(ctx): State<Arc<Context>>) -> Response {
    ctx.faults.clear();
    Json(json!({ "ok": true })).into_response()
}

async fn counters(State(ctx): State<Arc<Context>>) -> Response {
    Json(json!({ "rpcs": ctx.counters.snapshot(), "faults_fired": ctx.faults.fired() }))
        .into_response()
}

async fn reset_counters(State(ctx): State<Arc<Context>>) -> Response {
    ctx.counters.reset();
    Json(json!({ "ok": true })).into_response()
}

async fn clock(State(ctx): State<Arc<Context>>) -> Response {
    Json(json!({
        "elapsed_seconds": ctx.clock.elapsed().as_secs_f64(),
        "scale": ctx.clock.scale(),
    }))
    .into_response()
}

#[derive(Deserialize)]
struct Advance {
    seconds: f64,
}

async fn advance_clock(State(ctx): State<Arc<Context>>, Query(q): Query<Advance>) -> Response {
    if !q.seconds.is_finite() || q.seconds < 0.0 {
        return bad_request("seconds must be a non-negative number".into());
    }
    ctx.clock
        .advance(std::time::Duration::from_secs_f64(q.seconds));
    clock(State(ctx)).await
}

#[derive(Deserialize)]
struct Scale {
    value: f64,
}

async fn scale_clock(State(ctx): State<Arc<Context>>, Query(q): Query<Scale>) -> Response {
    if !q.value.is_finite() || q.value <= 0.0 {
        return bad_request("value must be a positive number".into());
    }
    ctx.clock.set_scale(q.value);
    clock(State(ctx)).await
}

fn bad_request(message: String) -> Response {
    (
        StatusCode::BAD_REQUEST,
        Json(json!({ "error": { "code": 400, "message": message, "status": "INVALID_ARGUMENT" } })),
    )
        .into_response()
}

/// Binds `addr` (use port 0 for an ephemeral port).
pub async fn bind(addr: SocketAddr) -> std::io::Result<TcpListener> {
    TcpListener::bind(addr).await
}

/// Serves `router` on `listener` (HTTP/1.1 and HTTP/2 cleartext) until `shutdown` resolves.
///
/// Every accepted connection gets `TCP_NODELAY`, as Google's front ends
/// answer: without it a small gRPC frame waits for the peer's delayed ACK
/// (up to 40 ms on Linux), which added ~100 ms to each two-RPC commit.
pub async fn serve(
    listener: TcpListener,
    router: Router,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    use axum::serve::ListenerExt as _;
    let listener = listener.tap_io(|stream| {
        if let Err(error) = stream.set_nodelay(true) {
            tracing::debug!(%error, "TCP_NODELAY not set on an accepted connection");
        }
    });
    axum::serve(listener, router)
        .with_graceful_shutdown(shutdown)
        .await
}
