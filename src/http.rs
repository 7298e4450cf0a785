//! The operations endpoint: `/metrics` (Prometheus text), `/healthz`
//! (liveness) and `/readyz` (readiness), served from a [`Stats`]; and the
//! two ways the service serves HTTP: [`serve`] (this router, the push
//! endpoint's, or both on one listener) and [`serve_route`] (one route
//! over HTTP/1.1 with hyper's server alone: the push endpoint on its own
//! listener, where a request per message makes the cost of each count).
//!
//! Invariant: read-only; serving a scrape never blocks the pipeline longer
//! than copying the counters (histograms are locked one at a time), and the
//! endpoint binds a loopback address unless the operator allowed otherwise
//! ([`crate::config::metrics_addr`]).

use std::convert::Infallible;
use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use axum::body::Bytes;
use axum::extract::State;
use axum::http::{header, Method, Request, Response, StatusCode};
use axum::response::IntoResponse;
use axum::routing::get;
use axum::Router;
use http_body_util::Empty;
use hyper::body::Incoming;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{oneshot, watch};
use tokio::task::JoinSet;

use crate::telemetry::{self, Stats};

/// An endpoint could not start.
#[derive(Debug, thiserror::Error)]
#[error("binding the {what} endpoint on {addr}: {source}")]
pub struct HttpError {
    /// Which endpoint (`metrics`, `push`).
    pub what: &'static str,
    /// The address asked for.
    pub addr: SocketAddr,
    /// The bind failure.
    #[source]
    pub source: std::io::Error,
}

/// The routes, over `stats`.
pub fn router(stats: Arc<Stats>) -> Router {
    Router::new()
        .route("/metrics", get(metrics))
        .route("/healthz", get(healthz))
        .route("/readyz", get(readyz))
        .with_state(stats)
}

async fn metrics(State(stats): State<Arc<Stats>>) -> impl IntoResponse {
    (
        [(header::CONTENT_TYPE, telemetry::CONTENT_TYPE)],
        stats.render_prometheus(),
    )
}

async fn healthz() -> &'static str {
    "ok\n"
}

async fn readyz(State(stats): State<Arc<Stats>>) -> (StatusCode, &'static str) {
    if stats.is_ready() {
        (StatusCode::OK, "ready\n")
    } else if stats.commit_progress.is_stalled() {
        (
            StatusCode::SERVICE_UNAVAILABLE,
            "not ready: commits stalled (the store does not answer; see the log)\n",
        )
    } else if stats.rollup_progress.is_stalled() {
        (
            StatusCode::SERVICE_UNAVAILABLE,
            "not ready: rollup refreshes stalled (the store does not answer the refresher; see the log)\n",
        )
    } else if stats.milestone_progress.is_stalled() {
        (
            StatusCode::SERVICE_UNAVAILABLE,
            "not ready: milestone dispatch stalled (the store does not answer the dispatcher; see the log)\n",
        )
    } else {
        (StatusCode::SERVICE_UNAVAILABLE, "not ready\n")
    }
}

/// Binds `addr` and serves `app` (the `what` endpoint) in a task of
/// `tasks` until `stop` turns true: then it stops accepting and finishes
/// the requests in progress. Returns once bound, with the bound address.
/// Dropping `tasks` ends the endpoint at once (a crash, in tests).
pub async fn serve(
    what: &'static str,
    addr: SocketAddr,
    app: Router,
    mut stop: watch::Receiver<bool>,
    tasks: &mut tokio::task::JoinSet<()>,
) -> Result<SocketAddr, HttpError> {
    let error = |source| HttpError { what, addr, source };
    let listener = TcpListener::bind(addr).await.map_err(error)?;
    let bound = listener.local_addr().map_err(error)?;
    tracing::info!(addr = %bound, what, "endpoint listening");
    tasks.spawn(async move {
        let shutdown = async move {
            let _ = stop.wait_for(|s| *s).await;
        };
        if let Err(error) = axum::serve(listener, app)
            .with_graceful_shutdown(shutdown)
            .await
        {
            tracing::warn!(%error, what, "endpoint failed");
        }
    });
    Ok(bound)
}

/// Binds `addr` and serves `POST {path}` with `handle` (the answer is its
/// status, with no body) over HTTP/1.1 with keep-alive, on hyper's server
/// alone: no router, no protocol sniffing, `TCP_NODELAY` (each answer
/// goes out at once); any other path is answered 404 and another method
/// on `path` 405, as the router would. Runs in a task of `tasks` until
/// `stop` turns true: then it stops accepting, lets each connection
/// finish the request in progress and waits for them. Returns once
/// bound, with the bound address; dropping `tasks` ends it at once.
pub async fn serve_route<H, F>(
    what: &'static str,
    addr: SocketAddr,
    (path, handle): (&'static str, H),
    mut stop: watch::Receiver<bool>,
    tasks: &mut JoinSet<()>,
) -> Result<SocketAddr, HttpError>
where
    H: Fn(Request<Incoming>) -> F + Clone + Send + Sync + 'static,
    F: Future<Output = StatusCode> + Send + 'static,
{
    let error = |source| HttpError { what, addr, source };
    let listener = TcpListener::bind(addr).await.map_err(error)?;
    let bound = listener.local_addr().map_err(error)?;
    tracing::info!(addr = %bound, what, "endpoint listening");
    tasks.spawn(async move {
        let mut connections = JoinSet::new();
        // One stop signal per connection: a oneshot costs a connection
        // nothing to poll while it serves (a watch would, on every wake).
        let mut stops: Vec<oneshot::Sender<()>> = Vec::new();
        loop {
            tokio::select! {
                accepted = listener.accept() => match accepted {
                    Ok((stream, _)) => {
                        let route = (path, handle.clone());
                        let (stop_tx, stop) = oneshot::channel();
                        stops.retain(|s| !s.is_closed());
                        stops.push(stop_tx);
                        connections.spawn(serve_connection(stream, route, stop));
                    }
                    // Out of file descriptors, say: the connections being
                    // served go on; accepting is tried again shortly.
                    Err(error) => {
                        tracing::warn!(%error, what, "accepting a connection failed");
                        tokio::time::sleep(Duration::from_millis(50)).await;
                    }
                },
                Some(_) = connections.join_next(), if !connections.is_empty() => {}
                () = stopped(&mut stop) => break,
            }
        }
        drop(listener);
        for stop in stops {
            let _ = stop.send(());
        }
        while connections.join_next().await.is_some() {}
    });
    Ok(bound)
}

/// One connection of [`serve_route`]: its requests one after the other
/// until the client closes it, or, once `stop` fires (or its sender is
/// gone), until the one in progress is answered.
async fn serve_connection<H, F>(
    stream: TcpStream,
    (path, handle): (&'static str, H),
    stop: oneshot::Receiver<()>,
) where
    H: Fn(Request<Incoming>) -> F + Clone + Send + Sync + 'static,
    F: Future<Output = StatusCode> + Send + 'static,
{
    let _ = stream.set_nodelay(true);
    let service = hyper::service::service_fn(move |request: Request<Incoming>| {
        let answer = if request.uri().path() != path {
            Err(StatusCode::NOT_FOUND)
        } else if request.method() != Method::POST {
            Err(StatusCode::METHOD_NOT_ALLOWED)
        } else {
            Ok(handle(request))
        };
        async move {
            let status = match answer {
                Ok(handled) => handled.await,
                Err(status) => status,
            };
            let mut response = Response::new(Empty::<Bytes>::new());
            *response.status_mut() = status;
            if status == StatusCode::METHOD_NOT_ALLOWED {
                let allow = axum::http::HeaderValue::from_static("POST");
                response.headers_mut().insert(header::ALLOW, allow);
            }
            Ok::<_, Infallible>(response)
        }
    });
    let connection = hyper::server::conn::http1::Builder::new()
        .serve_connection(hyper_util::rt::TokioIo::new(stream), service);
    tokio::pin!(connection);
    tokio::select! {
        _ = connection.as_mut() => return,
        _ = stop => {}
    }
    connection.as_mut().graceful_shutdown();
    let _ = connection.await;
}

/// Once `stop` turns true (or its sender is gone).
async fn stopped(stop: &mut watch::Receiver<bool>) {
    let _ = stop.wait_for(|s| *s).await;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn serve_route_answers_its_route_only_and_finishes_the_request_in_progress_at_stop() {
        let (stop_tx, stop) = watch::channel(false);
        let (entered_tx, mut entered) = tokio::sync::mpsc::unbounded_channel::<()>();
        let (release_tx, release) = watch::channel(false);
        let handle = move |request: Request<Incoming>| {
            let (entered_tx, mut release) = (entered_tx.clone(), release.clone());
            async move {
                let slow = request.headers().contains_key("x-slow");
                if slow {
                    let _ = entered_tx.send(());
                    let _ = release.wait_for(|r| *r).await;
                }
                StatusCode::NO_CONTENT
            }
        };
        let mut tasks = JoinSet::new();
        let addr = serve_route(
            "push",
            "127.0.0.1:0".parse().expect("address"),
            ("/pubsub/push", handle),
            stop,
            &mut tasks,
        )
        .await
        .expect("bound");
        let client = reqwest::Client::new();
        let url = |path: &str| format!("http://{addr}{path}");
        let status = |r: reqwest::Response| r.status().as_u16();
        let post = client.post(url("/pubsub/push")).body("{}").send().await;
        assert_eq!(post.map(status).ok(), Some(204));
        let other = client.post(url("/other")).send().await;
        assert_eq!(other.map(status).ok(), Some(404));
        let get = client
            .get(url("/pubsub/push"))
            .send()
            .await
            .expect("answered");
        assert_eq!(get.status().as_u16(), 405);
        assert_eq!(
            get.headers().get("allow").map(|v| v.as_bytes()),
            Some(&b"POST"[..])
        );
        // A request in progress when the endpoint stops is still answered.
        let slow = tokio::spawn(
            client
                .post(url("/pubsub/push"))
                .header("x-slow", "1")
                .send(),
        );
        entered.recv().await.expect("the slow request arrived");
        stop_tx.send_replace(true);
        release_tx.send_replace(true);
        let answered = slow.await.expect("task").map(status).ok();
        assert_eq!(answered, Some(204));
        tokio::time::timeout(std::time::Duration::from_secs(10), tasks.join_next())
            .await
            .expect("the endpoint ends once its connections are done");
        assert!(
            tokio::net::TcpStream::connect(addr).await.is_err(),
            "nothing accepted after the stop"
        );
    }
}
