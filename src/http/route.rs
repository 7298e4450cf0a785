//! One route served over HTTP/1.1 by hyper's server alone ([`serve_route`]):
//! the push endpoint on its own listener, where a request per message
//! makes the cost of each count.
//!
//! Invariants: at most [`ConnectionLimits::max_connections`] connections
//! are open at once (one beyond the cap is closed when every other is in a
//! request); a connection that has not sent a whole request head within
//! [`ConnectionLimits::header_read_timeout`] (and a quarter of it, at most
//! 1 s: the accept loop's sweep) of its opening or last answer, so also
//! one that idles between requests, is closed, so slow or idle clients
//! cannot starve requests; at stop the request in progress is finished,
//! then its connection closed.

use std::collections::HashMap;
use std::convert::Infallible;
use std::future::Future;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::body::Bytes;
use axum::http::{header, Method, Request, Response, StatusCode};
use http_body_util::Empty;
use hyper::body::Incoming;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{oneshot, watch};
use tokio::task::{AbortHandle, JoinSet};

use crate::telemetry::{ConnectionClose, Stats};

use super::HttpError;

/// How many connections [`serve_route`] keeps and how long it waits for
/// a request's headers: what bounds the connections that never send a
/// request (slow or idle) before any request reaches authentication.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ConnectionLimits {
    /// Connections open at once, at most.
    pub max_connections: usize,
    /// The longest a connection may take to send a request's whole
    /// headers, counted from its opening or from its last answer: so also
    /// the longest it may stay idle between requests.
    pub header_read_timeout: Duration,
}

/// Binds `addr` and serves `POST {path}` with a handler `connect` makes
/// for each connection (the answer is its status, with no body; one per
/// connection, so what a request clones of it is the connection's alone,
/// not a count every connection writes) over HTTP/1.1 with keep-alive,
/// on hyper's server alone: no router, no protocol sniffing, `TCP_NODELAY` (each answer
/// goes out at once); any other path is answered 404 and another method
/// on `path` 405, as the router would. Runs in a task of `tasks` until
/// `stop` turns true: then it stops accepting, lets each connection
/// finish the request in progress and waits for them. Returns once
/// bound, with the bound address; dropping `tasks` ends it at once.
///
/// Within `limits` (counted in `stats`): a connection that does not send
/// a request's headers within the header read timeout is closed, and at
/// most `max_connections` are open: a new one beyond closes the one idle
/// (or sending headers) the longest, or is closed itself when every other
/// is in a request. A connection in a request is never closed for another.
pub async fn serve_route<C, H, F>(
    what: &'static str,
    addr: SocketAddr,
    (path, connect): (&'static str, C),
    (limits, stats): (ConnectionLimits, Arc<Stats>),
    mut stop: watch::Receiver<bool>,
    tasks: &mut JoinSet<()>,
) -> Result<SocketAddr, HttpError>
where
    C: Fn() -> H + Send + 'static,
    H: Fn(Request<Incoming>) -> F + Send + Sync + 'static,
    F: Future<Output = StatusCode> + Send + 'static,
{
    let error = |source| HttpError { what, addr, source };
    let listener = TcpListener::bind(addr).await.map_err(error)?;
    let bound = listener.local_addr().map_err(error)?;
    tracing::info!(addr = %bound, what, max_connections = limits.max_connections, header_read_timeout = ?limits.header_read_timeout, "endpoint listening");
    // No timer in hyper: the header read timeout is the accept loop's
    // sweep below (hyper's drops and re-arms a timer for every request).
    let http1 = hyper::server::conn::http1::Builder::new();
    tasks.spawn(async move {
        let mut open = Open::new(limits.max_connections, stats.clone());
        let mut connections = JoinSet::new();
        let mut sweep = tokio::time::interval(sweep_period(limits.header_read_timeout));
        sweep.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                accepted = listener.accept() => match accepted {
                    Ok((stream, _)) => {
                        if !open.make_room() {
                            drop(stream);
                            continue;
                        }
                        let route = (path, connect());
                        let (stop_tx, stop) = oneshot::channel();
                        let stop = Stop { signal: stop, stopping: open.stopping.clone(), registered: false };
                        let idle_since = Arc::new(AtomicU64::new(open.now_ms()));
                        let activity = Activity { idle_since: idle_since.clone(), epoch: open.epoch };
                        let connection = serve_connection(stream, route, (http1.clone(), activity), stop);
                        let abort = connections.spawn(connection);
                        open.add(abort, stop_tx, idle_since);
                    }
                    // Out of file descriptors, say: the connections being
                    // served go on; accepting is tried again shortly.
                    Err(error) => {
                        tracing::warn!(%error, what, "accepting a connection failed");
                        tokio::time::sleep(Duration::from_millis(50)).await;
                    }
                },
                Some(ended) = connections.join_next_with_id(), if !connections.is_empty() => {
                    open.remove(ended.map_or_else(|e| e.id(), |(id, ())| id));
                }
                _ = sweep.tick() => open.close_late(limits.header_read_timeout),
                () = stopped(&mut stop) => break,
            }
        }
        drop(listener);
        open.stop_all();
        while connections.join_next().await.is_some() {}
        stats.push_connections.set(0);
    });
    Ok(bound)
}

/// The connections [`serve_route`] holds, as its accept loop sees them.
///
/// Invariant: at most `max` are held; one in a request (its `idle_since`
/// 0) is never closed to make room.
struct Open {
    max: usize,
    held: HashMap<tokio::task::Id, Held>,
    /// Set once, at stop, before the connections' stop signals are sent.
    stopping: Arc<AtomicBool>,
    epoch: Instant,
    stats: Arc<Stats>,
}

/// One connection of [`Open`].
struct Held {
    /// Ends it at once (eviction).
    abort: AbortHandle,
    /// Asks it to finish its request in progress and close (stop).
    stop: oneshot::Sender<()>,
    /// See [`Activity::idle_since`].
    idle_since: Arc<AtomicU64>,
}

impl Open {
    fn new(max: usize, stats: Arc<Stats>) -> Self {
        Self {
            max,
            held: HashMap::new(),
            stopping: Arc::default(),
            epoch: Instant::now(),
            stats,
        }
    }

    /// Milliseconds since `epoch`, plus one (0 means "in a request").
    fn now_ms(&self) -> u64 {
        millis_since(self.epoch)
    }

    /// Whether a new connection may be held: below the cap, or once the
    /// connection idle longest is closed; false (counted, logged
    /// rate-limited) when every one held is in a request. Cost: a scan of
    /// the held connections, only at the cap.
    fn make_room(&mut self) -> bool {
        if self.held.len() < self.max {
            return true;
        }
        let idlest = self
            .held
            .iter()
            .map(|(id, held)| (*id, held.idle_since.load(Ordering::Relaxed)))
            .filter(|(_, since)| *since != 0)
            .min_by_key(|(_, since)| *since);
        match idlest {
            Some((id, _)) => {
                self.close(id, ConnectionClose::Evicted);
                true
            }
            None => {
                self.stats
                    .push_connections_closed
                    .add(ConnectionClose::Refused, 1);
                if self
                    .stats
                    .warnings
                    .admit("push connections refused", "refused")
                {
                    tracing::warn!(max = self.max, "push connection closed at once: --push-max-connections are open, each in a request");
                }
                false
            }
        }
    }

    fn add(&mut self, abort: AbortHandle, stop: oneshot::Sender<()>, idle_since: Arc<AtomicU64>) {
        let held = Held {
            abort: abort.clone(),
            stop,
            idle_since,
        };
        self.held.insert(abort.id(), held);
        self.stats.push_connections.set(self.held.len() as u64);
    }

    /// Closes every connection that has been idle, or sending a request's
    /// headers, for longer than `timeout` since it opened or last answered
    /// (counted as header timeouts). Cost: a scan of the held connections.
    fn close_late(&mut self, timeout: Duration) {
        let now = self.now_ms();
        let timeout_ms = u64::try_from(timeout.as_millis()).unwrap_or(u64::MAX);
        let late: Vec<tokio::task::Id> = self
            .held
            .iter()
            .filter(|(_, held)| {
                let since = held.idle_since.load(Ordering::Relaxed);
                since != 0 && now.saturating_sub(since) > timeout_ms
            })
            .map(|(id, _)| *id)
            .collect();
        for id in late {
            self.close(id, ConnectionClose::HeaderTimeout);
        }
        self.stats.push_connections.set(self.held.len() as u64);
    }

    /// Ends the held connection of task `id` at once, counted as closed
    /// for `reason`.
    fn close(&mut self, id: tokio::task::Id, reason: ConnectionClose) {
        if let Some(held) = self.held.remove(&id) {
            held.abort.abort();
            self.stats.push_connections_closed.add(reason, 1);
        }
    }

    /// Forgets the connection of task `id` (ended, or evicted before).
    fn remove(&mut self, id: tokio::task::Id) {
        self.held.remove(&id);
        self.stats.push_connections.set(self.held.len() as u64);
    }

    /// Asks every connection to finish its request in progress and close.
    fn stop_all(&mut self) {
        self.stopping.store(true, Ordering::Release);
        for (_, held) in self.held.drain() {
            let _ = held.stop.send(());
        }
    }
}

/// How often the accept loop looks for connections past the header read
/// timeout: a quarter of it (10 ms to 1 s), so one is closed within
/// `timeout` and a quarter of it (at most 1 s) more.
fn sweep_period(timeout: Duration) -> Duration {
    (timeout / 4).clamp(Duration::from_millis(10), Duration::from_secs(1))
}

/// Milliseconds since `epoch`, plus one.
fn millis_since(epoch: Instant) -> u64 {
    u64::try_from(epoch.elapsed().as_millis())
        .unwrap_or(u64::MAX - 1)
        .saturating_add(1)
}

/// What a connection of [`serve_route`] tells its accept loop: the
/// eviction and the header read timeout read it.
#[derive(Clone)]
struct Activity {
    /// 0 while a request is in progress; otherwise when the connection
    /// last became idle (opened, or answered), see [`millis_since`].
    idle_since: Arc<AtomicU64>,
    epoch: Instant,
}

/// One connection of [`serve_route`]: its requests one after the other
/// until the client closes it (or the accept loop closes it: its headers
/// late, or evicted), or, once `stop` fires, until the one in progress is
/// answered.
async fn serve_connection<H, F>(
    stream: TcpStream,
    (path, handle): (&'static str, H),
    (http1, activity): (hyper::server::conn::http1::Builder, Activity),
    stop: Stop,
) where
    H: Fn(Request<Incoming>) -> F + Send + Sync + 'static,
    F: Future<Output = StatusCode> + Send + 'static,
{
    let _ = stream.set_nodelay(true);
    let service = hyper::service::service_fn(move |request: Request<Incoming>| {
        activity.idle_since.store(0, Ordering::Relaxed);
        let answer = if request.uri().path() != path {
            Err(StatusCode::NOT_FOUND)
        } else if request.method() != Method::POST {
            Err(StatusCode::METHOD_NOT_ALLOWED)
        } else {
            Ok(handle(request))
        };
        // Only what the answer stamps (not the stats: a count every
        // connection writes, cloned per request).
        let (idle_since, epoch) = (activity.idle_since.clone(), activity.epoch);
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
            idle_since.store(millis_since(epoch), Ordering::Relaxed);
            Ok::<_, Infallible>(response)
        }
    });
    let connection = http1.serve_connection(hyper_util::rt::TokioIo::new(stream), service);
    tokio::pin!(connection);
    let stopped = tokio::select! {
        _ = connection.as_mut() => false,
        _ = stop => true,
    };
    if stopped {
        connection.as_mut().graceful_shutdown();
        let _ = connection.await;
    }
}

/// A connection's stop signal, as its task waits for it beside the
/// connection: the channel is polled on the task's first poll (which
/// leaves the task's waker with it: a send wakes the task) and then only
/// once `stopping` is set, not on each of the connection's wake-ups
/// (polling a thousand cold per-connection channels cost ~1 % of a push
/// run's CPU). `stopping` is set before any signal is sent, so the poll
/// that a send wakes sees it. A sender dropped without sending (the
/// accept loop's task dropped) ends the connection's task with it.
struct Stop {
    signal: oneshot::Receiver<()>,
    stopping: Arc<AtomicBool>,
    registered: bool,
}

impl Future for Stop {
    type Output = ();

    fn poll(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<()> {
        if self.registered && !self.stopping.load(Ordering::Acquire) {
            return std::task::Poll::Pending;
        }
        self.registered = true;
        std::pin::Pin::new(&mut self.signal).poll(cx).map(|_| ())
    }
}

/// Once `stop` turns true (or its sender is gone).
async fn stopped(stop: &mut watch::Receiver<bool>) {
    let _ = stop.wait_for(|s| *s).await;
}

#[cfg(test)]
mod tests {
    use super::*;

    const LIMITS: ConnectionLimits = ConnectionLimits {
        max_connections: 100,
        header_read_timeout: Duration::from_secs(10),
    };

    /// `handle` served at `/pubsub/push` on a loopback port under
    /// `limits`; the bound address.
    async fn serve_push<H, F>(
        handle: H,
        limits: (ConnectionLimits, Arc<Stats>),
        stop: watch::Receiver<bool>,
        tasks: &mut JoinSet<()>,
    ) -> SocketAddr
    where
        H: Fn(Request<Incoming>) -> F + Clone + Send + Sync + 'static,
        F: Future<Output = StatusCode> + Send + 'static,
    {
        let addr = "127.0.0.1:0".parse().expect("address");
        let connect = move || handle.clone();
        serve_route("push", addr, ("/pubsub/push", connect), limits, stop, tasks)
            .await
            .expect("bound")
    }

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
        let addr = serve_push(
            handle,
            (LIMITS, Arc::new(Stats::default())),
            stop,
            &mut tasks,
        )
        .await;
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

    /// Trickles an endless header line, a byte every 50 ms, until the
    /// server closes the connection: whether it did within `within`.
    async fn trickle_until_closed(mut stream: TcpStream, within: Duration) -> bool {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let trickle = async {
            let (mut read, mut write) = stream.split();
            if write
                .write_all(b"POST /pubsub/push HTTP/1.1\r\nx-slow: ")
                .await
                .is_err()
            {
                return;
            }
            let mut buf = [0u8; 64];
            loop {
                tokio::select! {
                    // EOF, an answer (a 408) or a reset: closed.
                    _ = read.read(&mut buf) => return,
                    () = tokio::time::sleep(Duration::from_millis(50)) => {
                        if write.write_all(b"a").await.is_err() {
                            return;
                        }
                    }
                }
            }
        };
        tokio::time::timeout(within, trickle).await.is_ok()
    }

    /// Sends nothing until the server closes the connection: whether it
    /// did within `within`.
    async fn idle_until_closed(mut stream: TcpStream, within: Duration) -> bool {
        use tokio::io::AsyncReadExt;
        let mut buf = [0u8; 64];
        tokio::time::timeout(within, stream.read(&mut buf))
            .await
            .is_ok()
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn slow_header_and_idle_connections_are_closed_and_cannot_starve_a_request() {
        let (_stop_tx, stop) = watch::channel(false);
        let handle = |_: Request<Incoming>| async { StatusCode::NO_CONTENT };
        let mut tasks = JoinSet::new();
        let stats = Arc::new(Stats::default());
        let limits = ConnectionLimits {
            max_connections: 8,
            header_read_timeout: Duration::from_millis(500),
        };
        let addr = serve_push(handle, (limits, stats.clone()), stop, &mut tasks).await;
        // Many more than the endpoint holds: half trickle their headers a
        // byte at a time, half send nothing.
        let mut hogs = JoinSet::new();
        for i in 0..24 {
            let stream = TcpStream::connect(addr).await.expect("connected");
            let within = Duration::from_secs(5);
            if i % 2 == 0 {
                hogs.spawn(trickle_until_closed(stream, within));
            } else {
                hogs.spawn(idle_until_closed(stream, within));
            }
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
        let client = reqwest::Client::new();
        let started = std::time::Instant::now();
        let post = client
            .post(format!("http://{addr}/pubsub/push"))
            .body("{}")
            .timeout(Duration::from_secs(3))
            .send()
            .await;
        assert_eq!(post.map(|r| r.status().as_u16()).ok(), Some(204));
        assert!(
            started.elapsed() < Duration::from_secs(2),
            "served promptly"
        );
        let mut closed = 0;
        while let Some(hog) = hogs.join_next().await {
            closed += usize::from(hog.expect("task"));
        }
        assert_eq!(
            closed, 24,
            "the server closed every slow or idle connection"
        );
        let closed = |reason| stats.push_connections_closed.get(reason);
        assert_eq!(closed(ConnectionClose::Refused), 0);
        assert!(closed(ConnectionClose::Evicted) >= 16, "beyond the 8 held");
        assert!(
            closed(ConnectionClose::HeaderTimeout) >= 1,
            "the last ones held"
        );
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_connection_beyond_the_cap_is_closed_when_every_other_is_in_a_request() {
        let (_stop_tx, stop) = watch::channel(false);
        let (release_tx, release) = watch::channel(false);
        let entered = Arc::new(AtomicU64::new(0));
        let handle = {
            let entered = entered.clone();
            move |_: Request<Incoming>| {
                let mut release = release.clone();
                entered.fetch_add(1, Ordering::Relaxed);
                async move {
                    let _ = release.wait_for(|r| *r).await;
                    StatusCode::NO_CONTENT
                }
            }
        };
        let mut tasks = JoinSet::new();
        let stats = Arc::new(Stats::default());
        let limits = ConnectionLimits {
            max_connections: 2,
            header_read_timeout: Duration::from_secs(10),
        };
        let addr = serve_push(handle, (limits, stats.clone()), stop, &mut tasks).await;
        let post = || {
            reqwest::Client::new()
                .post(format!("http://{addr}/pubsub/push"))
                .body("{}")
                .timeout(Duration::from_secs(10))
                .send()
        };
        let held = [tokio::spawn(post()), tokio::spawn(post())];
        // Both connections are in a request once both reached the handler.
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        while entered.load(Ordering::Relaxed) < 2 && std::time::Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        assert_eq!(stats.push_connections.get(), 2);
        let third = TcpStream::connect(addr).await.expect("connected");
        assert!(
            idle_until_closed(third, Duration::from_secs(3)).await,
            "closed at once"
        );
        let closed = |reason| stats.push_connections_closed.get(reason);
        assert_eq!(closed(ConnectionClose::Refused), 1);
        assert_eq!(closed(ConnectionClose::Evicted), 0, "none in a request");
        release_tx.send_replace(true);
        for request in held {
            let status = request.await.expect("task").map(|r| r.status().as_u16());
            assert_eq!(status.ok(), Some(204), "the held requests are answered");
        }
    }
}
