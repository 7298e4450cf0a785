//! What stands between Pub/Sub and the push consumers in the tests: a
//! loopback TCP balancer ([`PushFront`], one address for a push
//! subscription, its connections spread round robin over the consumers
//! registered, like Cloud Run's front end over replicas) that can lose the
//! consumers' answers (the consumer committed, the pusher never hears it),
//! and [`Relay`], which pushes a pull subscription's messages to it as
//! Pub/Sub pushes: the wrapped JSON body, an OIDC token, a 2xx acks and
//! anything else (or a broken connection) nacks.
#![allow(dead_code)]

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use base64::Engine as _;
use hotcount::config::Endpoints;
use parking_lot::Mutex;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// A round-robin TCP balancer in front of push consumers.
#[derive(Clone)]
pub struct PushFront {
    pub addr: SocketAddr,
    state: Arc<FrontState>,
}

#[derive(Default)]
struct FrontState {
    backends: Mutex<Vec<SocketAddr>>,
    next: AtomicUsize,
    lose_answers: AtomicBool,
    answers_lost: AtomicU64,
    connections: Mutex<Vec<SocketAddr>>,
}

impl PushFront {
    /// Listens on a free loopback port; no backend yet (connections are
    /// closed at once until one is added).
    pub async fn start() -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind front");
        let addr = listener.local_addr().expect("front address");
        let state = Arc::new(FrontState::default());
        let serving = state.clone();
        tokio::spawn(async move {
            while let Ok((client, _)) = listener.accept().await {
                let _ = client.set_nodelay(true);
                let state = serving.clone();
                tokio::spawn(async move { state.relay(client).await });
            }
        });
        Self { addr, state }
    }

    /// The push endpoint URL through the front.
    pub fn url(&self) -> String {
        format!("http://{}/pubsub/push", self.addr)
    }

    /// Routes new connections to `backend` too.
    pub fn add(&self, backend: SocketAddr) {
        self.state.backends.lock().push(backend);
    }

    /// Routes no new connection to `backend`.
    pub fn remove(&self, backend: SocketAddr) {
        self.state.backends.lock().retain(|b| *b != backend);
    }

    /// While true, every answer a consumer sends is swallowed and the
    /// pusher's connection closed: the consumer committed and answered,
    /// the pusher sees a broken connection (a nack).
    pub fn lose_answers(&self, lose: bool) {
        self.state.lose_answers.store(lose, Ordering::Relaxed);
    }

    /// Connections whose answer was swallowed.
    pub fn answers_lost(&self) -> u64 {
        self.state.answers_lost.load(Ordering::Relaxed)
    }

    /// The backend of each connection so far, in order.
    pub fn connections(&self) -> Vec<SocketAddr> {
        self.state.connections.lock().clone()
    }
}

impl FrontState {
    fn pick(&self) -> Option<SocketAddr> {
        let backends = self.backends.lock();
        if backends.is_empty() {
            return None;
        }
        let n = self.next.fetch_add(1, Ordering::Relaxed);
        Some(backends[n % backends.len()])
    }

    async fn relay(&self, mut client: TcpStream) {
        let Some(backend) = self.pick() else {
            return;
        };
        self.connections.lock().push(backend);
        let Ok(mut server) = TcpStream::connect(backend).await else {
            return;
        };
        let _ = server.set_nodelay(true);
        let (mut client_read, mut client_write) = client.split();
        let (mut server_read, mut server_write) = server.split();
        let upstream = tokio::io::copy(&mut client_read, &mut server_write);
        let downstream = async {
            let mut buffer = vec![0u8; 16 * 1024];
            loop {
                let n = server_read.read(&mut buffer).await.unwrap_or(0);
                if n == 0 {
                    return;
                }
                if self.lose_answers.load(Ordering::Relaxed) {
                    self.answers_lost.fetch_add(1, Ordering::Relaxed);
                    return;
                }
                if client_write.write_all(&buffer[..n]).await.is_err() {
                    return;
                }
            }
        };
        // Whichever side ends first closes both.
        tokio::select! {
            _ = upstream => {}
            _ = downstream => {}
        }
    }
}

/// Pushes a pull subscription's messages to a URL as Pub/Sub would.
pub struct Relay {
    task: tokio::task::JoinHandle<()>,
    pub pushed: Arc<AtomicU64>,
    pub acked: Arc<AtomicU64>,
}

impl Relay {
    /// Starts pushing `subscription`'s messages (through the emulator at
    /// `endpoints`) to `url`, each with `Authorization: Bearer {token}`,
    /// at most `window` at once; gives up on a request after `timeout`
    /// (the ack deadline).
    pub async fn start(
        endpoints: &Endpoints,
        subscription: &str,
        url: String,
        token: String,
        window: i64,
        timeout: Duration,
    ) -> Self {
        let subscriber = hotcount::connect::subscriber(endpoints)
            .await
            .expect("subscriber");
        // A connection per request, so the front spreads them.
        let client = reqwest::Client::builder()
            .pool_max_idle_per_host(0)
            .timeout(timeout)
            .build()
            .expect("client");
        let (pushed, acked) = (Arc::new(AtomicU64::new(0)), Arc::new(AtomicU64::new(0)));
        let mut stream = subscriber
            .subscribe(subscription.to_string())
            .set_max_outstanding_messages(window)
            .build();
        let subscription = subscription.to_string();
        let counters = (pushed.clone(), acked.clone());
        let task = tokio::spawn(async move {
            while let Some(Ok((message, handler))) = stream.next().await {
                let body = serde_json::json!({
                    "message": {
                        "data": base64::engine::general_purpose::STANDARD.encode(&message.data),
                        "attributes": message.attributes,
                        "messageId": message.message_id,
                        "message_id": message.message_id,
                    },
                    "subscription": subscription,
                })
                .to_string();
                let request = client
                    .post(&url)
                    .header("authorization", format!("Bearer {token}"))
                    .header("content-type", "application/json")
                    .body(body);
                let (pushed, acked) = (counters.0.clone(), counters.1.clone());
                tokio::spawn(async move {
                    pushed.fetch_add(1, Ordering::Relaxed);
                    match request.send().await {
                        Ok(response) if response.status().is_success() => {
                            acked.fetch_add(1, Ordering::Relaxed);
                            handler.ack();
                        }
                        _ => handler.nack(),
                    }
                });
            }
        });
        Self {
            task,
            pushed,
            acked,
        }
    }
}

impl Drop for Relay {
    fn drop(&mut self) {
        self.task.abort();
    }
}
