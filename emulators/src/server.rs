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
use hyper_util::rt::{TokioExecutor, TokioIo};
use hyper_util::server::conn::auto;
use hyper_util::service::TowerToHyperService;
use serde::Deserialize;
use serde_json::json;
use tokio::net::TcpListener;
use tokio::sync::{mpsc, watch};

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

/// Most concurrent streams (RPCs) one HTTP/2 connection may have open:
/// in effect no limit, as Google's emulators (gRPC Java's default).
///
/// Google's Node and Python Firestore clients open one `Listen` stream per
/// `onSnapshot`/`on_snapshot`; the Node client puts them all on one
/// connection to an emulator, shared with its other calls. hyper's
/// default of 200 let 200 listeners take every stream, so the client's next
/// `Commit` waited, unsent, for one of them to end (issue 38).
pub const MAX_CONCURRENT_STREAMS: u32 = u32::MAX;

/// Serves `router` on `listener` (HTTP/1.1 and HTTP/2 cleartext) until `shutdown` resolves,
/// then stops accepting, lets every connection finish its calls in progress
/// and returns once they have.
///
/// Every accepted connection gets `TCP_NODELAY`, as Google's front ends
/// answer: without it a small gRPC frame waits for the peer's delayed ACK
/// (up to 40 ms on Linux), which added ~100 ms to each two-RPC commit. An
/// HTTP/2 connection takes [`MAX_CONCURRENT_STREAMS`] streams.
pub async fn serve(
    listener: TcpListener,
    router: Router,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    let (stop, _) = watch::channel(false);
    let (open, all_closed) = mpsc::channel::<()>(1);
    let mut shutdown = std::pin::pin!(shutdown);
    loop {
        let stream = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok((stream, _)) => stream,
                Err(error) => {
                    // EMFILE and friends: wait a little instead of spinning.
                    tracing::debug!(%error, "accept failed");
                    tokio::time::sleep(std::time::Duration::from_millis(10)).await;
                    continue;
                }
            },
            () = &mut shutdown => break,
        };
        if let Err(error) = stream.set_nodelay(true) {
            tracing::debug!(%error, "TCP_NODELAY not set on an accepted connection");
        }
        tokio::spawn(connection(
            stream,
            router.clone(),
            stop.subscribe(),
            open.clone(),
        ));
    }
    drop(listener);
    stop.send_replace(true);
    drop(open);
    wait_closed(all_closed).await;
    Ok(())
}

/// Serves one connection; on `stop`, finishes the calls in progress and
/// closes. `_open` is dropped when the connection is done.
async fn connection(
    stream: tokio::net::TcpStream,
    router: Router,
    mut stop: watch::Receiver<bool>,
    _open: mpsc::Sender<()>,
) {
    let mut builder = auto::Builder::new(TokioExecutor::new());
    builder
        .http2()
        .max_concurrent_streams(MAX_CONCURRENT_STREAMS);
    let service = TowerToHyperService::new(router);
    let conn = builder.serve_connection(TokioIo::new(stream), service);
    let mut conn = std::pin::pin!(conn);
    let mut stopping = false;
    loop {
        tokio::select! {
            result = conn.as_mut() => {
                if let Err(error) = result {
                    tracing::trace!(%error, "connection ended with an error");
                }
                return;
            }
            _ = stop.wait_for(|stopped| *stopped), if !stopping => {
                stopping = true;
                conn.as_mut().graceful_shutdown();
            }
        }
    }
}

/// Returns once every sender of `all_closed` is gone.
async fn wait_closed(mut all_closed: mpsc::Receiver<()>) {
    while all_closed.recv().await.is_some() {}
}
