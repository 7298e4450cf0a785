//! The push endpoint over HTTP on loopback, with the real aggregator and
//! flusher over the in-memory store: the answer follows the commit (204),
//! a failed batch, the hold cap and a closed endpoint answer 503, a full
//! endpoint 429, poison and malformed bodies are quarantined and acked,
//! and a refused request never reaches the pipeline.

use std::net::SocketAddr;

use axum::http::StatusCode;
use base64::Engine as _;

use super::*;
use crate::pipeline::flusher::{FlushConfig, Flusher};
use crate::store::memory::{InjectedFailure, MemoryStore};
use crate::store::{CounterStore, ErrorClass};

struct Rig {
    push: Push,
    addr: SocketAddr,
    store: MemoryStore,
    stats: Arc<Stats>,
    aggregator: Arc<Aggregator<PushHandle>>,
    flusher_stop: tokio::sync::watch::Sender<bool>,
    flusher: tokio::task::JoinHandle<()>,
    client: reqwest::Client,
    /// The endpoint's own listener (`http::serve_route`), when it has one.
    _own_listener: Option<(tokio::sync::watch::Sender<bool>, tokio::task::JoinSet<()>)>,
}

/// Where a rig's endpoint is served.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Listener {
    /// The router (as when it shares the metrics endpoint's address): the
    /// hold cap a timer per request.
    Router,
    /// Its own (`http::serve_route`): the hold cap the accept loop's sweep.
    Own,
}

fn config(max_in_flight: usize, auth: AuthConfig) -> PushConfig {
    PushConfig {
        addr: "127.0.0.1:0".parse().expect("address"),
        auth,
        max_in_flight,
        max_connections: 2 * max_in_flight,
        header_read_timeout: Duration::from_secs(10),
        hold_max: Duration::from_secs(8),
        subscription: "projects/p/subscriptions/likes-hotcount".into(),
    }
}

impl Rig {
    /// An open endpoint without authentication, each request held at most `hold_max`.
    async fn start(max_in_flight: usize, hold_max: Duration) -> Self {
        Self::start_on(Listener::Router, max_in_flight, hold_max).await
    }

    /// [`Rig::start`] served on `listener`.
    async fn start_on(listener: Listener, max_in_flight: usize, hold_max: Duration) -> Self {
        let config = config(max_in_flight, AuthConfig::None);
        let rig = Self::closed_on(listener, config).await;
        rig.push.open(rig.aggregator.clone(), hold_max).await;
        rig
    }

    /// The endpoint serving, not yet open.
    async fn closed(config: PushConfig) -> Self {
        Self::closed_on(Listener::Router, config).await
    }

    /// [`Rig::closed`] served on `listener`.
    async fn closed_on(on: Listener, config: PushConfig) -> Self {
        let stats = Arc::new(Stats::default());
        let store = MemoryStore::default();
        let aggregator = Arc::new(Aggregator::new(4, 100));
        let flush = FlushConfig {
            flush_interval: Duration::from_millis(10),
            flush_min_wait: Duration::from_millis(1),
            backoff_initial: Duration::from_millis(1),
            backoff_max: Duration::from_millis(2),
            commit_max_attempts: 3,
            shutdown_deadline: Duration::from_secs(5),
            ..FlushConfig::default()
        };
        let flusher = Flusher::new(
            aggregator.clone(),
            Arc::new(store.clone()),
            Arc::new(crate::pipeline::acker::Acker::new(stats.clone())),
            stats.clone(),
            flush,
        );
        let (flusher_stop, stop) = tokio::sync::watch::channel(false);
        let flusher = tokio::spawn(flusher.run(stop));
        let push = Push::new(&config, stats.clone());
        let (addr, own_listener) = match on {
            Listener::Router => {
                let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
                    .await
                    .expect("bind");
                let addr = listener.local_addr().expect("address");
                let app = push.router();
                tokio::spawn(async move {
                    let _ = axum::serve(listener, app).await;
                });
                (addr, None)
            }
            Listener::Own => {
                let connect = {
                    let push = push.clone();
                    move || {
                        let connection = Arc::new(push.connection());
                        move |request| Push::serve(connection.clone(), request)
                    }
                };
                let limits = crate::http::ConnectionLimits {
                    max_connections: config.max_connections,
                    header_read_timeout: config.header_read_timeout,
                };
                let (stop_tx, stop) = tokio::sync::watch::channel(false);
                let mut tasks = tokio::task::JoinSet::new();
                let route = (PATH, connect, Arc::new(push.clone()));
                let addr = crate::http::serve_route(
                    "push",
                    "127.0.0.1:0".parse().expect("address"),
                    route,
                    (limits, stats.clone()),
                    stop,
                    &mut tasks,
                )
                .await
                .expect("bound");
                (addr, Some((stop_tx, tasks)))
            }
        };
        Self {
            push,
            addr,
            store,
            stats,
            aggregator,
            flusher_stop,
            flusher,
            client: reqwest::Client::new(),
            _own_listener: own_listener,
        }
    }

    /// POSTs `body` (with `headers`) to the endpoint; the status.
    async fn post_with(&self, body: Vec<u8>, headers: &[(&str, &str)]) -> StatusCode {
        let mut request = self
            .client
            .post(format!("http://{}{PATH}", self.addr))
            .body(body);
        for (name, value) in headers {
            request = request.header(*name, *value);
        }
        let response = request.send().await.expect("the endpoint answers");
        StatusCode::from_u16(response.status().as_u16()).expect("a status")
    }

    /// [`Rig::post`] in a task of its own.
    fn post_in_task(&self, id: &str, payload: &[u8]) -> tokio::task::JoinHandle<StatusCode> {
        let request = self
            .client
            .post(format!("http://{}{PATH}", self.addr))
            .body(wrapped(id, payload));
        tokio::spawn(async move {
            let response = request.send().await.expect("the endpoint answers");
            StatusCode::from_u16(response.status().as_u16()).expect("a status")
        })
    }

    /// POSTs a wrapped push request of `payload` as message `id`.
    async fn post(&self, id: &str, payload: &[u8]) -> StatusCode {
        self.post_with(wrapped(id, payload), &[]).await
    }

    async fn count(&self, post: &str) -> i64 {
        self.store.count(post).await.expect("count")
    }

    /// Stops admitting, then drains the flusher.
    async fn close_and_drain(self) -> Arc<Stats> {
        self.push.close();
        let _ = self.flusher_stop.send(true);
        self.aggregator.wake();
        self.flusher.await.expect("flusher ends");
        self.stats
    }
}

fn wrapped(id: &str, payload: &[u8]) -> Vec<u8> {
    serde_json::json!({
        "message": {
            "data": base64::engine::general_purpose::STANDARD.encode(payload),
            "messageId": id,
            "publishTime": "2026-11-30T12:00:00Z",
        },
        "subscription": "projects/p/subscriptions/likes-hotcount",
    })
    .to_string()
    .into_bytes()
}

fn like(post: &str, user: &str) -> Vec<u8> {
    serde_json::json!({
        "version": 1,
        "eventId": format!("{post}-{user}"),
        "type": "like.added",
        "postId": post,
        "userId": user,
        "occurredAt": "2026-11-30T12:00:00Z",
        "seq": 1,
    })
    .to_string()
    .into_bytes()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_is_answered_204_only_once_its_batch_committed() {
    let rig = Rig::start(10, Duration::from_secs(8)).await;
    // A slow commit: an answer before it would find nothing counted.
    rig.store.set_delay(Duration::from_millis(300));
    let (u1, u2) = (like("p", "u1"), like("p", "u2"));
    let (a, b) = tokio::join!(rig.post("m1", &u1), rig.post("m2", &u2));
    assert_eq!((a, b), (StatusCode::NO_CONTENT, StatusCode::NO_CONTENT));
    assert_eq!(rig.count("p").await, 2, "counted before the answer");
    // A redelivery is a duplicate, answered 204 too.
    assert_eq!(
        rig.post("m1", &like("p", "u1")).await,
        StatusCode::NO_CONTENT
    );
    assert_eq!(rig.count("p").await, 2);
    let stats = rig.close_and_drain().await;
    assert_eq!(stats.push_requests.get(PushOutcome::Acked), 3);
    assert_eq!((stats.received.get(), stats.acks.get()), (3, 3));
    assert_eq!(stats.duplicates.get(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_batch_given_up_on_is_answered_503_and_counted_on_redelivery() {
    let rig = Rig::start(10, Duration::from_secs(8)).await;
    for _ in 0..3 {
        rig.store
            .inject(InjectedFailure::Before(ErrorClass::Transient));
    }
    assert_eq!(
        rig.post("m1", &like("p", "u1")).await,
        StatusCode::SERVICE_UNAVAILABLE
    );
    assert_eq!(rig.count("p").await, 0);
    // Pub/Sub redelivers the nacked message.
    assert_eq!(
        rig.post("m1", &like("p", "u1")).await,
        StatusCode::NO_CONTENT
    );
    assert_eq!(rig.count("p").await, 1);
    let stats = rig.close_and_drain().await;
    assert_eq!(stats.push_requests.get(PushOutcome::Nacked), 1);
    assert_eq!(stats.nacks.get(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_held_past_its_cap_is_answered_503_and_its_batch_still_commits() {
    held_past_its_cap(Listener::Router).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_its_own_listener_a_request_held_past_its_cap_is_answered_503_and_its_batch_still_commits(
) {
    held_past_its_cap(Listener::Own).await;
}

async fn held_past_its_cap(on: Listener) {
    let rig = Rig::start_on(on, 10, Duration::from_millis(200)).await;
    rig.store.set_delay(Duration::from_millis(800));
    let started = Instant::now();
    assert_eq!(
        rig.post("m1", &like("p", "u1")).await,
        StatusCode::SERVICE_UNAVAILABLE
    );
    let took = started.elapsed();
    // The sweep answers at most two of its periods (25 ms each for a
    // 200 ms cap) before the cap, the timer at it.
    assert!(took >= Duration::from_millis(140), "not before: {took:?}");
    assert!(took < Duration::from_millis(700), "answered at the cap");
    let stats = rig.close_and_drain().await;
    assert_eq!(stats.push_requests.get(PushOutcome::TimedOut), 1);
    assert_eq!(
        stats.applied.get(),
        1,
        "the batch committed after the answer"
    );
    assert_eq!(stats.acks.get(), 1, "its ack found no one to answer");
}

#[test]
fn slots_are_never_taken_beyond_the_cap_even_when_raced_and_come_back_when_dropped() {
    let slots = Arc::new(Slots {
        taken: Default::default(),
        max: 64,
    });
    let taken: Vec<Vec<Slot>> = std::thread::scope(|scope| {
        let racers: Vec<_> = (0..4)
            .map(|_| scope.spawn(|| (0..100).filter_map(|_| slots.try_take()).collect()))
            .collect();
        racers
            .into_iter()
            .map(|racer| racer.join().expect("racer"))
            .collect()
    });
    assert_eq!(taken.iter().map(Vec::len).sum::<usize>(), 64);
    assert!(slots.try_take().is_none(), "all taken");
    drop(taken);
    assert_eq!(
        slots.taken.load(std::sync::atomic::Ordering::Acquire),
        0,
        "every slot given back"
    );
    assert!(slots.try_take().is_some());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn requests_beyond_max_in_flight_are_answered_429_until_slots_free() {
    let rig = Rig::start(2, Duration::from_secs(8)).await;
    rig.store.set_delay(Duration::from_millis(500));
    let held: Vec<_> = (1..=2)
        .map(|i| rig.post_in_task(&format!("m{i}"), &like("p", &format!("u{i}"))))
        .collect();
    // Wait until both are held (in the pipeline), then one more.
    while rig.stats.in_flight.get() < 2 {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    assert_eq!(
        rig.post("m3", &like("p", "u3")).await,
        StatusCode::TOO_MANY_REQUESTS
    );
    for task in held {
        assert_eq!(task.await.expect("request"), StatusCode::NO_CONTENT);
    }
    // Settled: their slots are free again.
    assert_eq!(
        rig.post("m3", &like("p", "u3")).await,
        StatusCode::NO_CONTENT
    );
    assert_eq!(rig.count("p").await, 3);
    assert_eq!(rig.stats.push_requests.get(PushOutcome::OverCapacity), 1);
    assert!(rig.stats.in_flight.max() <= 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn poison_and_bodies_that_are_not_push_requests_are_quarantined_and_acked() {
    let rig = Rig::start(10, Duration::from_secs(8)).await;
    let oversized = vec![b'{'; body::MAX_BODY_BYTES + 1];
    let answers = [
        rig.post("m1", b"{not json").await,
        rig.post_with(br#"{"message": 5}"#.to_vec(), &[]).await,
        rig.post_with(oversized, &[]).await,
        rig.post_with(b"\xff\xfe".to_vec(), &[("x-goog-pubsub-message-id", "m4")])
            .await,
        rig.post("m5", &like("p", "u1")).await,
    ];
    assert_eq!(answers, [StatusCode::NO_CONTENT; 5]);
    let records = rig.store.quarantine();
    let kinds: Vec<&str> = records.iter().map(|r| r.kind).collect();
    assert_eq!(records.len(), 4, "{kinds:?}");
    let reason = |id: &str| {
        records
            .iter()
            .find(|r| r.message_id == id)
            .map(|r| r.reason.clone())
            .unwrap_or_default()
    };
    assert!(
        reason("m1").contains("not a JSON object"),
        "{}",
        reason("m1")
    );
    assert!(reason("m4").contains("UTF-8"), "{}", reason("m4"));
    assert!(records
        .iter()
        .any(|r| r.reason.contains("over the") && r.data_len == body::MAX_BODY_BYTES + 1));
    assert!(records
        .iter()
        .any(|r| r.reason.contains("not Pub/Sub's push request")));
    assert_eq!(rig.count("p").await, 1);
    let stats = rig.close_and_drain().await;
    assert_eq!(stats.poison.get(), 4);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_closed_endpoint_answers_503_and_admits_nothing() {
    let rig = Rig::closed(config(10, AuthConfig::None)).await;
    assert_eq!(
        rig.post("m1", &like("p", "u1")).await,
        StatusCode::SERVICE_UNAVAILABLE,
        "not open yet"
    );
    rig.push
        .open(rig.aggregator.clone(), Duration::from_secs(8))
        .await;
    rig.push.close();
    assert_eq!(
        rig.post("m2", &like("p", "u2")).await,
        StatusCode::SERVICE_UNAVAILABLE,
        "closed"
    );
    let stats = rig.close_and_drain().await;
    assert_eq!(stats.received.get(), 0);
    assert_eq!(stats.push_requests.get(PushOutcome::Closed), 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn requests_held_when_the_endpoint_closes_are_answered_by_the_drain() {
    let rig = Rig::start(10, Duration::from_secs(8)).await;
    rig.store.set_delay(Duration::from_millis(300));
    let held = rig.post_in_task("m1", &like("p", "u1"));
    while rig.stats.in_flight.get() < 1 {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let stats = rig.close_and_drain().await;
    assert_eq!(held.await.expect("request"), StatusCode::NO_CONTENT);
    assert_eq!(stats.applied.get(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_refused_by_authentication_never_reaches_the_pipeline() {
    let google = AuthConfig::Google(GoogleAuth {
        audience: "https://h.example/pubsub/push".into(),
        service_account: "push@p.iam.gserviceaccount.com".into(),
        // Nothing listens there; a missing token is refused before any fetch.
        jwks_url: "http://127.0.0.1:9/certs".into(),
    });
    let rig = Rig::closed(config(10, google)).await;
    rig.push
        .open(rig.aggregator.clone(), Duration::from_secs(8))
        .await;
    assert_eq!(
        rig.post("m1", &like("p", "u1")).await,
        StatusCode::UNAUTHORIZED
    );
    // A token whose keys cannot be fetched: 503, Pub/Sub retries.
    assert_eq!(
        rig.post_with(
            wrapped("m2", &like("p", "u2")),
            &[(
                "authorization",
                "Bearer eyJhbGciOiJSUzI1NiIsImtpZCI6ImsxIn0.e30.c2ln"
            )]
        )
        .await,
        StatusCode::SERVICE_UNAVAILABLE
    );
    let stats = rig.close_and_drain().await;
    assert_eq!(stats.received.get(), 0);
    assert_eq!(stats.push_requests.get(PushOutcome::Unauthenticated), 1);
    assert_eq!(stats.push_requests.get(PushOutcome::KeysUnavailable), 1);
    assert_eq!(
        stats
            .push_auth_failures
            .get(crate::telemetry::AuthFailure::Missing),
        1
    );
}

#[test]
fn the_hold_cap_stays_below_the_ack_deadline() {
    assert_eq!(PushConfig::hold_max_for(None), Duration::from_secs(8));
    assert_eq!(
        PushConfig::hold_max_for(Some(Duration::from_secs(60))),
        Duration::from_secs(54)
    );
    for secs in 10..=600 {
        let deadline = Duration::from_secs(secs);
        let cap = PushConfig::hold_max_for(Some(deadline));
        assert!(cap + Duration::from_secs(2) <= deadline, "{secs} s");
    }
}

#[test]
fn only_an_ack_answers_2xx() {
    use crate::telemetry::labels::Label;
    for &outcome in PushOutcome::VALUES {
        assert_eq!(
            status_of(outcome).is_success(),
            outcome == PushOutcome::Acked,
            "{outcome:?}"
        );
    }
}

/// A setting of a YAML or shell file of `deploy/`: the number after `key`
/// on the first line holding it.
fn deploy_setting(file: &str, key: &str) -> u64 {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join(file);
    let text = std::fs::read_to_string(&path).expect("the deploy file");
    let line = text
        .lines()
        .find(|l| !l.trim_start().starts_with('#') && l.contains(key))
        .unwrap_or_else(|| panic!("{key} in {file}"));
    let after = &line[line.find(key).expect("found") + key.len()..];
    let digits: String = after
        .chars()
        .skip_while(|c| !c.is_ascii_digit())
        .take_while(char::is_ascii_digit)
        .collect();
    digits
        .parse()
        .unwrap_or_else(|_| panic!("a number after {key} in {file}"))
}

#[test]
fn cloud_runs_request_timeout_outlasts_the_hold_cap_of_the_deadline_setup_configures() {
    let ack_deadline = deploy_setting("deploy/setup.sh", "ACK_DEADLINE_SECS:-");
    let timeout = deploy_setting("deploy/cloudrun-push.yaml", "timeoutSeconds:");
    let hold_max = PushConfig::hold_max_for(Some(Duration::from_secs(ack_deadline)));
    // hotcount answers a held request at its hold cap; Cloud Run must not
    // cut it first (its 504 would hide the 503 and its metric), and the
    // answer needs a moment to get out.
    let answer_margin = Duration::from_secs(2);
    assert!(
        hold_max + answer_margin <= Duration::from_secs(timeout),
        "timeoutSeconds {timeout} cuts requests held up to {hold_max:?} (ack deadline {ack_deadline} s)"
    );
}
