//! One route served over HTTP/1.1 by hyper's server alone ([`serve_route`]):
//! the push endpoint on its own listener, where a request per message
//! makes the cost of each count.
//!
//! Invariants: at most [`ConnectionLimits::max_connections`] connections
//! are open at once (one beyond the cap is closed when every other is in a
//! request); a connection that has not sent a whole request head within
//! [`ConnectionLimits::header_read_timeout`] of its opening or last answer
//! (so also one that idles between requests) is closed, never sooner and
//! at most two sweep periods later, so slow or idle clients cannot starve
//! requests; a request still unanswered at its route's [`TimeLimit`] is
//! answered by [`TimeLimit::timed_out`] (its handler's future dropped), at
//! most two sweep periods before the limit and never after it (the
//! accept loop's sweep, one pass over the connections' state words, does
//! both: no timer per request or connection); at stop the request in
//! progress is finished, then its connection closed.

use std::collections::HashMap;
use std::convert::Infallible;
use std::future::Future;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use axum::body::Bytes;
use axum::http::{header, Method, Request, Response, StatusCode};
use futures::task::AtomicWaker;
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

/// How long a request of [`serve_route`]'s route may take, and the answer
/// for one that takes longer: the push endpoint's hold cap.
pub trait TimeLimit: Send + Sync + 'static {
    /// The longest a request may be handled (`None`: no limit); read at
    /// each sweep, so it may change while serving.
    fn limit(&self) -> Option<Duration>;

    /// The answer for a request given up after `held` (its handler's
    /// future is dropped): the route's owner counts and logs it here.
    fn timed_out(&self, held: Duration) -> StatusCode;
}

/// No limit: requests take as long as their handler does.
#[derive(Clone, Copy, Debug, Default)]
pub struct NoTimeLimit;

impl TimeLimit for NoTimeLimit {
    fn limit(&self) -> Option<Duration> {
        None
    }

    fn timed_out(&self, _held: Duration) -> StatusCode {
        StatusCode::SERVICE_UNAVAILABLE
    }
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
/// A request unanswered at `time_limit`'s limit is answered by it.
pub async fn serve_route<C, H, F, L>(
    what: &'static str,
    addr: SocketAddr,
    (path, connect, time_limit): (&'static str, C, Arc<L>),
    (limits, stats): (ConnectionLimits, Arc<Stats>),
    mut stop: watch::Receiver<bool>,
    tasks: &mut JoinSet<()>,
) -> Result<SocketAddr, HttpError>
where
    C: Fn() -> H + Send + 'static,
    H: Fn(Request<Incoming>) -> F + Send + Sync + 'static,
    F: Future<Output = StatusCode> + Send + 'static,
    L: TimeLimit,
{
    let error = |source| HttpError { what, addr, source };
    let listener = TcpListener::bind(addr).await.map_err(error)?;
    let bound = listener.local_addr().map_err(error)?;
    tracing::info!(addr = %bound, what, max_connections = limits.max_connections, header_read_timeout = ?limits.header_read_timeout, "endpoint listening");
    // No timer in hyper, none per request: the header read timeout and
    // the time limit are the accept loop's sweep below (hyper's drops and
    // re-arms a timer for every request, and so would a timeout each).
    let http1 = hyper::server::conn::http1::Builder::new();
    tasks.spawn(async move {
        let mut open = Open::new(limits.max_connections, stats.clone());
        let mut connections = JoinSet::new();
        let mut period = sweep_period(limits.header_read_timeout, time_limit.limit());
        let mut next_sweep = tokio::time::Instant::now() + period;
        loop {
            tokio::select! {
                accepted = listener.accept() => match accepted {
                    Ok((stream, _)) => {
                        if !open.make_room() {
                            drop(stream);
                            continue;
                        }
                        let (stop_tx, stop) = oneshot::channel();
                        let stop = Stop { signal: stop, stopping: open.stopping.clone(), registered: false };
                        let connection = Arc::new(Connection::new(open.clock.clone(), time_limit.clone()));
                        let route = (path, connect(), connection.clone());
                        let abort = connections.spawn(serve_connection(stream, route, http1.clone(), stop));
                        open.add(abort, stop_tx, connection);
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
                () = tokio::time::sleep_until(next_sweep) => {
                    let limit = time_limit.limit();
                    open.sweep(limits.header_read_timeout, limit, period);
                    period = sweep_period(limits.header_read_timeout, limit);
                    next_sweep = tokio::time::Instant::now() + period;
                }
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

/// The accept loop's clock: milliseconds since its start (plus one, so a
/// stamp is never 0), read by the connections and moved on only by the
/// accept loop (at each sweep and accept), so a connection stamps its
/// requests with no clock read of its own. A stamp is at most one sweep
/// period (and the loop's lateness) behind the true time.
#[derive(Clone)]
struct Clock {
    now_ms: Arc<AtomicU64>,
    epoch: Instant,
}

impl Clock {
    fn new() -> Self {
        Self {
            now_ms: Arc::new(AtomicU64::new(1)),
            epoch: Instant::now(),
        }
    }

    /// Moves the clock to the true time; that time.
    fn tick(&self) -> u64 {
        let now = u64::try_from(self.epoch.elapsed().as_millis())
            .unwrap_or(STAMP - 1)
            .saturating_add(1)
            .min(STAMP);
        self.now_ms.store(now, Ordering::Relaxed);
        now
    }

    /// The time as of the last tick.
    fn read(&self) -> u64 {
        self.now_ms.load(Ordering::Relaxed)
    }
}

/// A connection's state word ([`Activity::state`]): set while a request is
/// in progress (from its head read until its answer).
const BUSY: u64 = 1 << 63;
/// Set by the sweep on a request past its time limit; only on the exact
/// word of that request (a compare-and-swap), so never on a later one.
const EXPIRED: u64 = 1 << 62;
/// The stamp's bits: the [`Clock`] time the connection opened, last
/// answered or (busy) began its request.
const STAMP: u64 = EXPIRED - 1;

/// What a connection of [`serve_route`] shares with its accept loop (the
/// eviction, the header read timeout and the time limit read its state),
/// and what each of its requests' answers needs: one per connection, so a
/// request clones only its connection's count, not one that every
/// connection writes.
struct Connection<L> {
    /// [`BUSY`], [`EXPIRED`] and a stamp.
    state: AtomicU64,
    /// The connection's task, woken when its request expires.
    waker: AtomicWaker,
    clock: Clock,
    time_limit: Arc<L>,
}

impl<L> Connection<L> {
    fn new(clock: Clock, time_limit: Arc<L>) -> Self {
        Self {
            state: AtomicU64::new(clock.tick()),
            waker: AtomicWaker::new(),
            clock,
            time_limit,
        }
    }
}

/// The connections [`serve_route`] holds, as its accept loop sees them.
///
/// Invariant: at most `max` are held; one in a request (busy) is never
/// closed to make room.
struct Open<L> {
    max: usize,
    held: HashMap<tokio::task::Id, Held<L>>,
    /// Set once, at stop, before the connections' stop signals are sent.
    stopping: Arc<AtomicBool>,
    clock: Clock,
    stats: Arc<Stats>,
}

/// One connection of [`Open`].
struct Held<L> {
    /// Ends it at once (eviction).
    abort: AbortHandle,
    /// Asks it to finish its request in progress and close (stop).
    stop: oneshot::Sender<()>,
    connection: Arc<Connection<L>>,
}

impl<L> Open<L> {
    fn new(max: usize, stats: Arc<Stats>) -> Self {
        Self {
            max,
            held: HashMap::new(),
            stopping: Arc::default(),
            clock: Clock::new(),
            stats,
        }
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
            .map(|(id, held)| (*id, held.connection.state.load(Ordering::Relaxed)))
            .filter(|(_, state)| state & BUSY == 0)
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

    fn add(
        &mut self,
        abort: AbortHandle,
        stop: oneshot::Sender<()>,
        connection: Arc<Connection<L>>,
    ) {
        let held = Held {
            abort: abort.clone(),
            stop,
            connection,
        };
        self.held.insert(abort.id(), held);
        self.stats.push_connections.set(self.held.len() as u64);
    }

    /// One sweep, `period` after the last: closes every connection idle,
    /// or sending a request's headers, for longer than `timeout` since it
    /// opened or last answered (counted as header timeouts), and expires
    /// (wakes, to be answered) every request that would pass `limit`
    /// before the next sweep. Stamps lag the true time by at most a
    /// period, hence the period's margin both ways. Cost: a scan of the
    /// held connections.
    fn sweep(&mut self, timeout: Duration, limit: Option<Duration>, period: Duration) {
        let now = self.clock.tick();
        let ms = |d: Duration| u64::try_from(d.as_millis()).unwrap_or(STAMP);
        let (timeout_ms, period_ms) = (ms(timeout), ms(period));
        let limit_ms = limit.map(ms);
        let mut late = Vec::new();
        for (id, held) in &self.held {
            let state = held.connection.state.load(Ordering::Acquire);
            let age = now.saturating_sub(state & STAMP);
            if state & BUSY == 0 {
                if age > timeout_ms.saturating_add(period_ms) {
                    late.push(*id);
                }
            } else if let Some(limit_ms) = limit_ms.filter(|_| state & EXPIRED == 0) {
                if age.saturating_add(period_ms) >= limit_ms
                    && held
                        .connection
                        .state
                        .compare_exchange(
                            state,
                            state | EXPIRED,
                            Ordering::AcqRel,
                            Ordering::Relaxed,
                        )
                        .is_ok()
                {
                    held.connection.waker.wake();
                }
            }
        }
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

/// How often the accept loop sweeps: an eighth of the shorter of the
/// header read timeout and the time limit, from 10 ms to 250 ms (a scan
/// of at most `max_connections` words each time).
fn sweep_period(timeout: Duration, limit: Option<Duration>) -> Duration {
    let shortest = limit.map_or(timeout, |limit| limit.min(timeout));
    (shortest / 8).clamp(Duration::from_millis(10), Duration::from_millis(250))
}

/// One connection of [`serve_route`]: its requests one after the other
/// until the client closes it (or the accept loop closes it: its headers
/// late, or evicted), or, once `stop` fires, until the one in progress is
/// answered.
async fn serve_connection<H, F, L>(
    stream: TcpStream,
    (path, handle, connection): (&'static str, H, Arc<Connection<L>>),
    http1: hyper::server::conn::http1::Builder,
    stop: Stop,
) where
    H: Fn(Request<Incoming>) -> F + Send + Sync + 'static,
    F: Future<Output = StatusCode> + Send + 'static,
    L: TimeLimit,
{
    let _ = stream.set_nodelay(true);
    let service = hyper::service::service_fn(move |request: Request<Incoming>| {
        let began = connection.clock.read();
        connection.state.store(BUSY | began, Ordering::Release);
        let (handled, status) = if request.uri().path() != path {
            (None, StatusCode::NOT_FOUND)
        } else if request.method() != Method::POST {
            (None, StatusCode::METHOD_NOT_ALLOWED)
        } else {
            (Some(handle(request)), StatusCode::OK)
        };
        Answering {
            handled,
            status,
            began,
            connection: connection.clone(),
        }
    });
    let served = http1.serve_connection(hyper_util::rt::TokioIo::new(stream), service);
    tokio::pin!(served);
    let stopped = tokio::select! {
        _ = served.as_mut() => false,
        _ = stop => true,
    };
    if stopped {
        served.as_mut().graceful_shutdown();
        let _ = served.await;
    }
}

pin_project_lite::pin_project! {
    /// A request's answer on a connection of [`serve_route`]: its
    /// handler's status (its future held inline: no allocation per
    /// request), the route's own (404, 405), or, once the sweep marks the
    /// request [`EXPIRED`], the time limit's; then the connection is
    /// stamped idle.
    struct Answering<F, L> {
        #[pin]
        handled: Option<F>,
        // The answer when there is no handler.
        status: StatusCode,
        // The `Clock` time the request began.
        began: u64,
        connection: Arc<Connection<L>>,
    }
}

impl<F: Future<Output = StatusCode>, L: TimeLimit> Future for Answering<F, L> {
    type Output = Result<Response<Empty<Bytes>>, Infallible>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let mut this = self.project();
        let connection = &**this.connection;
        let status = match this.handled.as_mut().as_pin_mut() {
            None => *this.status,
            Some(handled) => match handled.poll(cx) {
                Poll::Ready(status) => status,
                Poll::Pending => {
                    // Registered before the flag is read: a sweep that
                    // sets it after the read wakes this task.
                    connection.waker.register(cx.waker());
                    if connection.state.load(Ordering::Acquire) & EXPIRED == 0 {
                        return Poll::Pending;
                    }
                    // Given up: the handler's future goes now.
                    this.handled.set(None);
                    let held = connection.clock.read().saturating_sub(*this.began);
                    connection.time_limit.timed_out(Duration::from_millis(held))
                }
            },
        };
        let mut response = Response::new(Empty::<Bytes>::new());
        *response.status_mut() = status;
        if status == StatusCode::METHOD_NOT_ALLOWED {
            let allow = axum::http::HeaderValue::from_static("POST");
            response.headers_mut().insert(header::ALLOW, allow);
        }
        connection
            .state
            .store(connection.clock.read(), Ordering::Release);
        Poll::Ready(Ok(response))
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

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        if self.registered && !self.stopping.load(Ordering::Acquire) {
            return Poll::Pending;
        }
        self.registered = true;
        Pin::new(&mut self.signal).poll(cx).map(|_| ())
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
    /// `limits`, with no time limit; the bound address.
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
        serve_limited(handle, Arc::new(NoTimeLimit), limits, stop, tasks).await
    }

    /// `handle` served at `/pubsub/push` on a loopback port under
    /// `limits` and `time_limit`; the bound address.
    async fn serve_limited<H, F, L: TimeLimit>(
        handle: H,
        time_limit: Arc<L>,
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
        let route = ("/pubsub/push", connect, time_limit);
        serve_route("push", addr, route, limits, stop, tasks)
            .await
            .expect("bound")
    }

    /// A time limit that answers 504 and keeps what it was told.
    struct Recorded {
        limit: Duration,
        given_up: parking_lot::Mutex<Vec<Duration>>,
    }

    impl TimeLimit for Recorded {
        fn limit(&self) -> Option<Duration> {
            Some(self.limit)
        }

        fn timed_out(&self, held: Duration) -> StatusCode {
            self.given_up.lock().push(held);
            StatusCode::GATEWAY_TIMEOUT
        }
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_request_past_the_time_limit_is_answered_by_it_and_the_next_on_its_connection_is_not()
    {
        let (_stop_tx, stop) = watch::channel(false);
        // A request with `x-slow` never ends on its own; others at once.
        let handle = |request: Request<Incoming>| {
            let slow = request.headers().contains_key("x-slow");
            async move {
                if slow {
                    std::future::pending::<()>().await;
                }
                StatusCode::NO_CONTENT
            }
        };
        let limit = Arc::new(Recorded {
            limit: Duration::from_millis(400),
            given_up: Default::default(),
        });
        let mut tasks = JoinSet::new();
        let stats = Arc::new(Stats::default());
        let addr = serve_limited(handle, limit.clone(), (LIMITS, stats), stop, &mut tasks).await;
        // One client, one kept-alive connection: the slow request, then
        // quick ones on the same connection.
        let client = reqwest::Client::builder()
            .pool_max_idle_per_host(1)
            .build()
            .expect("client");
        let url = format!("http://{addr}/pubsub/push");
        let started = std::time::Instant::now();
        let slow = client
            .post(&url)
            .header("x-slow", "1")
            .timeout(Duration::from_secs(5))
            .send()
            .await;
        let took = started.elapsed();
        assert_eq!(slow.map(|r| r.status().as_u16()).ok(), Some(504));
        // Never after the limit (with room for a loaded machine's
        // scheduling), at most two sweep periods (2 x 50 ms) before it.
        assert!(took >= Duration::from_millis(300), "not before: {took:?}");
        assert!(took < Duration::from_millis(1500), "at the limit: {took:?}");
        let given_up = limit.given_up.lock().clone();
        assert_eq!(given_up.len(), 1, "answered by the time limit once");
        assert!(given_up[0] >= Duration::from_millis(250), "{given_up:?}");
        for _ in 0..20 {
            let quick = client.post(&url).send().await;
            assert_eq!(quick.map(|r| r.status().as_u16()).ok(), Some(204));
        }
        assert_eq!(limit.given_up.lock().len(), 1, "no later request given up");
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
