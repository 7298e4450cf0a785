//! The front end a push subscription posts to when several consumers
//! share it: one loopback address whose requests are spread round robin
//! over the consumers registered (as Cloud Run's front end spreads a
//! service's requests over its instances), and which can lose the
//! consumers' answers: the consumer committed and answered 204, the pusher
//! gets a 502 (a nack), as when a replica dies between its commit and its
//! answer.
//!
//! Invariant: a request reaches at most one registered consumer (one that
//! refuses the connection never saw it, and the next one in turn gets it),
//! and its answer comes back unchanged unless answers are being lost;
//! without a consumer that takes it the answer is 503 or 502 (a nack),
//! never a 2xx.
//!
//! Self-contained (no `crate::` paths): hotcount's own tests include this
//! file as a module too.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;

use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use parking_lot::Mutex;

/// A round-robin HTTP front in front of push consumers.
#[derive(Clone)]
pub struct PushFront {
    /// Where it listens.
    pub addr: SocketAddr,
    state: Arc<FrontState>,
}

#[derive(Default)]
struct FrontState {
    backends: Mutex<Vec<SocketAddr>>,
    next: AtomicUsize,
    lose_answers: AtomicBool,
    lose_next: AtomicU64,
    answers_lost: AtomicU64,
    forwarded: Mutex<Vec<SocketAddr>>,
    client: reqwest::Client,
}

impl PushFront {
    /// Listens on a free loopback port; without a backend it answers 503.
    pub async fn start() -> Self {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind front");
        let addr = listener.local_addr().expect("front address");
        let state = Arc::new(FrontState::default());
        let app = axum::Router::new()
            .fallback(forward)
            .with_state(state.clone());
        tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        Self { addr, state }
    }

    /// The push endpoint URL through the front.
    pub fn url(&self) -> String {
        format!("http://{}/pubsub/push", self.addr)
    }

    /// Routes requests to `backend` too.
    pub fn add(&self, backend: SocketAddr) {
        self.state.backends.lock().push(backend);
    }

    /// Routes no new request to `backend`.
    pub fn remove(&self, backend: SocketAddr) {
        self.state.backends.lock().retain(|b| *b != backend);
    }

    /// Backends registered now.
    pub fn backends(&self) -> usize {
        self.state.backends.lock().len()
    }

    /// While true, each consumer's answer is replaced by a 502 on its way
    /// back: the consumer committed, the pusher sees a failure (a nack).
    pub fn lose_answers(&self, lose: bool) {
        self.state.lose_answers.store(lose, Ordering::Relaxed);
    }

    /// Replaces the next `n` successful answers by 502s (then lets them through).
    pub fn lose_next(&self, n: u64) {
        self.state.lose_next.store(n, Ordering::Relaxed);
    }

    /// Successful answers replaced so far.
    pub fn answers_lost(&self) -> u64 {
        self.state.answers_lost.load(Ordering::Relaxed)
    }

    /// Requests forwarded to `backend` so far.
    pub fn forwarded_to(&self, backend: SocketAddr) -> usize {
        self.state
            .forwarded
            .lock()
            .iter()
            .filter(|b| **b == backend)
            .count()
    }
}

impl FrontState {
    /// The next backend in turn, if any.
    fn next_backend(&self) -> Option<SocketAddr> {
        let backends = self.backends.lock();
        if backends.is_empty() {
            return None;
        }
        Some(backends[self.next.fetch_add(1, Ordering::Relaxed) % backends.len()])
    }
}

async fn forward(State(state): State<Arc<FrontState>>, request: Request) -> Response {
    let (parts, body) = request.into_parts();
    let Ok(body) = axum::body::to_bytes(body, usize::MAX).await else {
        return StatusCode::BAD_REQUEST.into_response();
    };
    let path = parts.uri.path_and_query().map_or("/", |p| p.as_str());
    // A backend that refuses the connection (a replica that is down) never
    // saw the request: the next one gets it, as a load balancer does.
    let tries = state.backends.lock().len().max(1);
    let mut answer = None;
    for _ in 0..tries {
        let Some(backend) = state.next_backend() else {
            return StatusCode::SERVICE_UNAVAILABLE.into_response();
        };
        let mut outgoing = state
            .client
            .request(parts.method.clone(), format!("http://{backend}{path}"))
            .body(body.clone());
        for (name, value) in &parts.headers {
            if name != axum::http::header::HOST {
                outgoing = outgoing.header(name, value);
            }
        }
        match outgoing.send().await {
            Ok(reply) => {
                state.forwarded.lock().push(backend);
                answer = Some(reply);
                break;
            }
            Err(error) if error.is_connect() => continue,
            Err(_) => return StatusCode::BAD_GATEWAY.into_response(),
        }
    }
    let Some(answer) = answer else {
        return StatusCode::BAD_GATEWAY.into_response();
    };
    let lose = answer.status().is_success()
        && (state.lose_answers.load(Ordering::Relaxed)
            || state
                .lose_next
                .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |n| n.checked_sub(1))
                .is_ok());
    if lose {
        state.answers_lost.fetch_add(1, Ordering::Relaxed);
        return StatusCode::BAD_GATEWAY.into_response();
    }
    let status = answer.status();
    let body = answer.bytes().await.unwrap_or_default();
    (status, Body::from(body)).into_response()
}
