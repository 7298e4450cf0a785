//! A webhook receiver (loopback HTTP/1.1) that behaves as a payment API
//! does with `Idempotency-Key`: the milestone dispatcher's counterpart in
//! tests, the demo and the load generator's chaos run.
//!
//! It records every request, verifies each signature (`Hotcount-Signature:
//! t={unix seconds},v1={hex HMAC-SHA256 of "{t}.{body}"}`, within five
//! minutes; any one of several `v1=` may match), processes a key once (the first 2xx answer is kept and sent
//! again to a repeat, marked `Idempotent-Replayed: true`), and can be told
//! to fail at a rate: answer 500 without processing, process then hang
//! past the caller's timeout (the answer is lost, the effect is not), or
//! close the connection without processing or answering.
//!
//! Invariant: a key is processed (appears in [`Sink::processed`]) at most
//! once, whatever is repeated; [`Sink::requests`] holds every request that
//! reached it, in arrival order.

use std::net::{Ipv4Addr, SocketAddr};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use bytes::Bytes;
use hmac::{KeyInit, Mac};
use http_body_util::{BodyExt, Full};
use hyper::{Request, Response, StatusCode};
use parking_lot::Mutex;
use rustc_hash::FxHashMap;
use sha2::Sha256;
use tokio::net::TcpListener;

/// How far a signature's timestamp may be from the receiver's clock.
const SIGNATURE_TOLERANCE_SECS: u64 = 300;

/// Faults, each a share of requests in [0, 1] (drawn in this order).
#[derive(Clone, Debug, Default)]
pub struct SinkFaults {
    /// Answer 500 without processing.
    pub error_rate: f64,
    /// Process, then hang this long before answering (past the caller's
    /// timeout, the answer is lost).
    pub hang_rate: f64,
    /// How long a hang lasts.
    pub hang: Duration,
    /// Close the connection without processing or answering.
    pub close_rate: f64,
    /// Answer 500 to the first call of every n-th key the sink sees (the
    /// 1st, the n+1-th, ...), before the shares above; 0: never.
    pub fail_first_of_every: u32,
    /// At most this many faults drawn from the shares above for one key,
    /// then none (0: no limit), so a test's every key is delivered within
    /// a bounded number of calls instead of losing a run to the tail of
    /// the draws.
    pub max_faults_per_key: u32,
}

/// The sink's settings.
#[derive(Clone, Debug, Default)]
pub struct SinkConfig {
    /// The secret signatures are checked with; `None`: none checked.
    pub secret: Option<String>,
    /// Injected faults.
    pub faults: SinkFaults,
}

/// What happened to one request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fate {
    /// Processed now (its key's first success): 200.
    Processed,
    /// A repeat of a processed key: the first answer again.
    Replayed,
    /// Refused: no or a bad signature (401), or no key or body (400).
    Refused,
    /// An injected 500.
    Failed,
    /// Processed, then answered late (after the hang).
    ProcessedThenHung,
    /// A repeat during a hang: answered late too.
    ReplayedThenHung,
    /// The connection was closed.
    Closed,
}

/// One request as it arrived.
#[derive(Clone, Debug)]
pub struct Received {
    /// Its `Idempotency-Key` (empty when missing).
    pub key: String,
    /// Its path and query, as the caller wrote them (a test gives each
    /// caller its own, to tell whose call this was).
    pub target: String,
    /// Its body.
    pub body: Bytes,
    /// Whether its signature verified (`None`: no secret configured).
    pub signature_ok: Option<bool>,
    /// What the sink did.
    pub fate: Fate,
    /// When it arrived (the sink's clock).
    pub received_at: SystemTime,
}

#[derive(Default)]
struct State {
    requests: Vec<Received>,
    /// Key -> the body processed (the effect happened once).
    processed: FxHashMap<String, Bytes>,
    order: Vec<String>,
    /// Key -> (its rank among the keys seen, calls so far, faults drawn).
    calls: FxHashMap<String, (u32, u32, u32)>,
}

/// A running sink.
pub struct Sink {
    addr: SocketAddr,
    state: Arc<Mutex<State>>,
    faults: Arc<Mutex<SinkFaults>>,
    task: tokio::task::JoinHandle<()>,
}

struct Shared {
    secret: Option<Vec<u8>>,
    state: Arc<Mutex<State>>,
    faults: Arc<Mutex<SinkFaults>>,
}

impl Sink {
    /// Starts a sink on 127.0.0.1 (a free port).
    pub async fn start(config: SinkConfig) -> std::io::Result<Self> {
        let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).await?;
        let addr = listener.local_addr()?;
        let state = Arc::new(Mutex::new(State::default()));
        let faults = Arc::new(Mutex::new(config.faults));
        let shared = Arc::new(Shared {
            secret: config.secret.map(String::into_bytes),
            state: state.clone(),
            faults: faults.clone(),
        });
        let task = tokio::spawn(serve(listener, shared));
        Ok(Self {
            addr,
            state,
            faults,
            task,
        })
    }

    /// Where it listens.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Its URL (`http://127.0.0.1:{port}/milestones`).
    pub fn url(&self) -> String {
        format!("http://{}/milestones", self.addr)
    }

    /// Changes the faults from now on.
    pub fn set_faults(&self, faults: SinkFaults) {
        *self.faults.lock() = faults;
    }

    /// Every request, in arrival order.
    pub fn requests(&self) -> Vec<Received> {
        self.state.lock().requests.clone()
    }

    /// The keys processed (each once), in order, with the body processed.
    pub fn processed(&self) -> Vec<(String, Bytes)> {
        let state = self.state.lock();
        state
            .order
            .iter()
            .map(|k| {
                (
                    k.clone(),
                    state.processed.get(k).cloned().unwrap_or_default(),
                )
            })
            .collect()
    }

    /// Stops serving.
    pub fn shutdown(self) {
        self.task.abort();
    }
}

impl Drop for Sink {
    fn drop(&mut self) {
        self.task.abort();
    }
}

async fn serve(listener: TcpListener, shared: Arc<Shared>) {
    let mut connections = tokio::task::JoinSet::new();
    loop {
        let Ok((stream, _)) = listener.accept().await else {
            continue;
        };
        let shared = shared.clone();
        connections.spawn(async move {
            let io = hyper_util::rt::TokioIo::new(stream);
            let service = hyper::service::service_fn(move |request| {
                let shared = shared.clone();
                async move { handle(&shared, request).await }
            });
            // An error here is a closed connection (injected or the
            // caller's): nothing to do.
            let _ = hyper::server::conn::http1::Builder::new()
                .serve_connection(io, service)
                .await;
        });
        while connections.try_join_next().is_some() {}
    }
}

/// The answer to a request, or an error that closes the connection.
async fn handle(
    shared: &Shared,
    request: Request<hyper::body::Incoming>,
) -> Result<Response<Full<Bytes>>, std::io::Error> {
    let key = header(&request, "idempotency-key");
    let target = request
        .uri()
        .path_and_query()
        .map(|p| p.as_str().to_string())
        .unwrap_or_default();
    let signature = header(&request, "hotcount-signature");
    let body = match request.into_body().collect().await {
        Ok(collected) => collected.to_bytes(),
        Err(e) => return Err(std::io::Error::other(e)),
    };
    let signature_ok = shared
        .secret
        .as_ref()
        .map(|secret| verify(secret, &signature, &body, now_secs()));
    let faults = shared.faults.lock().clone();
    let mut draw = rand::random_range(0.0..1.0);
    let received_at = SystemTime::now();
    let record = |fate| {
        shared.state.lock().requests.push(Received {
            key: key.clone(),
            target: target.clone(),
            body: body.clone(),
            signature_ok,
            fate,
            received_at,
        });
    };
    let (rank, call) = {
        let mut state = shared.state.lock();
        let seen = u32::try_from(state.calls.len()).unwrap_or(u32::MAX);
        let entry = state.calls.entry(key.clone()).or_insert((seen, 0, 0));
        entry.1 += 1;
        let max = faults.max_faults_per_key;
        if max > 0 && entry.2 >= max {
            draw = 1.0;
        }
        if draw < faults.error_rate + faults.hang_rate + faults.close_rate {
            entry.2 += 1;
        }
        (entry.0, entry.1)
    };
    if key.is_empty() || body.is_empty() {
        record(Fate::Refused);
        return Ok(answer(
            StatusCode::BAD_REQUEST,
            "an Idempotency-Key and a body are required",
        ));
    }
    if signature_ok == Some(false) {
        record(Fate::Refused);
        return Ok(answer(StatusCode::UNAUTHORIZED, "bad signature"));
    }
    let every = faults.fail_first_of_every;
    if (every > 0 && call == 1 && rank % every == 0) || draw < faults.error_rate {
        record(Fate::Failed);
        return Ok(answer(
            StatusCode::INTERNAL_SERVER_ERROR,
            "injected failure",
        ));
    }
    let hang = draw < faults.error_rate + faults.hang_rate;
    if !hang && draw < faults.error_rate + faults.hang_rate + faults.close_rate {
        record(Fate::Closed);
        return Err(std::io::Error::other("injected close"));
    }
    let first = {
        let mut state = shared.state.lock();
        let first = !state.processed.contains_key(&key);
        if first {
            state.processed.insert(key.clone(), body.clone());
            state.order.push(key.clone());
        }
        first
    };
    let fate = match (first, hang) {
        (true, false) => Fate::Processed,
        (false, false) => Fate::Replayed,
        (true, true) => Fate::ProcessedThenHung,
        (false, true) => Fate::ReplayedThenHung,
    };
    record(fate);
    if hang {
        tokio::time::sleep(faults.hang).await;
    }
    let mut response = answer(StatusCode::OK, "{\"received\":true}");
    if !first {
        response.headers_mut().insert(
            "idempotent-replayed",
            http::HeaderValue::from_static("true"),
        );
    }
    Ok(response)
}

fn header<B>(request: &Request<B>, name: &str) -> String {
    request
        .headers()
        .get(name)
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default()
        .to_string()
}

fn answer(status: StatusCode, body: &'static str) -> Response<Full<Bytes>> {
    let mut response = Response::new(Full::new(Bytes::from_static(body.as_bytes())));
    *response.status_mut() = status;
    response
}

fn now_secs() -> u64 {
    SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

/// Whether `header` (`t=...,v1=...[,v1=...]`) signs `body` with `secret`,
/// within the tolerance of `now`: any one `v1=` matching is enough (while
/// the sender rotates its secret it signs with the new and the old one).
pub fn verify(secret: &[u8], header: &str, body: &[u8], now: u64) -> bool {
    let mut t = None;
    let mut v1 = Vec::new();
    for part in header.split(',') {
        match part.trim().split_once('=') {
            Some(("t", value)) => t = value.parse::<u64>().ok(),
            Some(("v1", value)) => v1.push(value),
            _ => {}
        }
    }
    let Some(t) = t else {
        return false;
    };
    if t.abs_diff(now) > SIGNATURE_TOLERANCE_SECS {
        return false;
    }
    let Ok(mut mac) = <hmac::Hmac<Sha256> as KeyInit>::new_from_slice(secret) else {
        return false;
    };
    mac.update(t.to_string().as_bytes());
    mac.update(b".");
    mac.update(body);
    // Each compared in constant time.
    v1.into_iter()
        .filter_map(decode_hex)
        .any(|given| mac.clone().verify_slice(&given).is_ok())
}

fn decode_hex(s: &str) -> Option<Vec<u8>> {
    if !s.len().is_multiple_of(2) {
        return None;
    }
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(s.get(i..i + 2)?, 16).ok())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_signature_verifies_only_with_its_secret_body_and_time() {
        // Python: hmac.new(b"Jefe", b'1700000000.{"postId":"p"}', sha256).
        let header =
            "t=1700000000,v1=13ce53c736e466c19085dc7debfd1f05b3066e9f036f14f87cbc5a2e925f60bf";
        let body = br#"{"postId":"p"}"#;
        assert!(verify(b"Jefe", header, body, 1_700_000_000));
        assert!(!verify(b"other", header, body, 1_700_000_000));
        assert!(!verify(
            b"Jefe",
            header,
            br#"{"postId":"q"}"#,
            1_700_000_000
        ));
        assert!(!verify(b"Jefe", header, body, 1_700_000_000 + 301));
        assert!(!verify(b"Jefe", "v1=00", body, 1_700_000_000));
    }

    #[test]
    fn a_header_with_several_v1_verifies_when_any_one_matches() {
        // The new secret's signature first, then Jefe's (the old one).
        let jefe = "13ce53c736e466c19085dc7debfd1f05b3066e9f036f14f87cbc5a2e925f60bf";
        let body = br#"{"postId":"p"}"#;
        let mut mac = <hmac::Hmac<Sha256> as KeyInit>::new_from_slice(b"new").expect("key");
        mac.update(br#"1700000000.{"postId":"p"}"#);
        let new: String = mac
            .finalize()
            .into_bytes()
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect();
        let header = format!("t=1700000000,v1={new},v1={jefe}");
        assert!(verify(b"new", &header, body, 1_700_000_000));
        assert!(verify(b"Jefe", &header, body, 1_700_000_000));
        assert!(!verify(b"other", &header, body, 1_700_000_000));
        let garbled = format!("t=1700000000,v1=zz,v1={jefe}");
        assert!(verify(b"Jefe", &garbled, body, 1_700_000_000));
    }

    /// A sink without a secret, injecting `faults`.
    async fn sink_with(faults: SinkFaults) -> Sink {
        let config = SinkConfig {
            secret: None,
            faults,
        };
        Sink::start(config).await.expect("sink")
    }

    /// One call for the key `c:p:100`, as the dispatcher makes it.
    async fn call(sink: &Sink) -> reqwest::Result<reqwest::Response> {
        reqwest::Client::new()
            .post(sink.url())
            .header("Idempotency-Key", "c:p:100")
            .body("{}")
            .send()
            .await
    }

    #[tokio::test]
    async fn a_key_is_processed_once_and_its_first_answer_replayed() {
        let sink = sink_with(SinkFaults::default()).await;
        for _ in 0..2 {
            let response = call(&sink).await.expect("answer");
            assert_eq!(response.status(), 200);
        }
        assert_eq!(sink.processed().len(), 1);
        let fates: Vec<Fate> = sink.requests().iter().map(|r| r.fate).collect();
        assert_eq!(fates, vec![Fate::Processed, Fate::Replayed]);
    }

    #[tokio::test]
    async fn a_close_fault_answers_nothing_and_processes_nothing() {
        let sink = sink_with(SinkFaults {
            close_rate: 1.0,
            ..SinkFaults::default()
        })
        .await;
        let sent = call(&sink).await;
        assert!(sent.is_err(), "{sent:?}");
        assert!(sink.processed().is_empty());
        assert_eq!(sink.requests()[0].fate, Fate::Closed);
    }

    #[tokio::test]
    async fn a_key_meets_at_most_its_fault_limit_then_is_processed() {
        let sink = sink_with(SinkFaults {
            error_rate: 1.0,
            max_faults_per_key: 3,
            ..SinkFaults::default()
        })
        .await;
        let mut statuses = Vec::new();
        for _ in 0..5 {
            let response = call(&sink).await.expect("answer");
            statuses.push(response.status().as_u16());
        }
        assert_eq!(statuses, [500, 500, 500, 200, 200]);
        assert_eq!(sink.processed().len(), 1);
    }
}
