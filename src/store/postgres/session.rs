//! Opening and keeping the pool's sessions: the socket (TCP with
//! keepalive probes and `TCP_USER_TIMEOUT`, or a Unix socket), TLS as
//! [`tls`](super::tls) decides, an authentication that never hands a
//! password in cleartext to a server that may not be the one asked for,
//! the server checked from its start-up report (version, encoding), and a
//! check of a connection that sat idle before it is handed out again.
//!
//! Invariants: every TCP socket the store opens probes an idle peer and
//! gives up on unacknowledged data within seconds ([`SessionSettings`]),
//! so a server that vanished without a reset (a failover, a partition) is
//! noticed instead of waited on for hours; under `sslmode` `prefer` or
//! `require` a request for the password in cleartext ends the connection
//! before the password is sent ([`SessionError::Cleartext`]); a server
//! older than [`OLDEST_SUPPORTED_MAJOR`] or a database whose encoding is
//! not UTF-8 is refused ([`ServerRefusal`]); opening a session (every
//! host tried) is bounded by the connect timeout, and the idle check by
//! its own timeout.

use std::io;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::task::{ready, Context, Poll};
use std::time::Duration;
use tokio::sync::mpsc::UnboundedSender;

use deadpool::managed::{self, Metrics, RecycleError, RecycleResult};
use deadpool_postgres::ClientWrapper;
use futures::future::BoxFuture;
use socket2::{SockRef, TcpKeepalive};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpStream, UnixStream};
use tokio_postgres::config::{Host, LoadBalanceHosts, TargetSessionAttrs};
use tokio_postgres::tls::{ChannelBinding, MakeTlsConnect, TlsConnect, TlsStream};
use tokio_postgres::{CancelToken, Client, Config, NoTls};
use tokio_postgres_rustls::MakeRustlsConnect;

use super::tls::SslMode;

/// The oldest PostgreSQL major version served: the first with
/// `client_connection_check_interval` (a session's statement ends when its
/// client has gone), which the store sets on every session.
pub const OLDEST_SUPPORTED_MAJOR: u32 = 14;

/// How sockets and sessions behave (see the module invariants).
#[derive(Clone, Debug)]
pub struct SessionSettings {
    /// Longest wait to open a session, every host tried.
    pub connect_timeout: Duration,
    /// Idle time before the first keepalive probe.
    pub keepalive_idle: Duration,
    /// Time between keepalive probes.
    pub keepalive_interval: Duration,
    /// Unanswered probes before the connection is dropped.
    pub keepalive_retries: u32,
    /// Longest time sent data may stay unacknowledged before the
    /// connection is dropped (`TCP_USER_TIMEOUT`).
    pub tcp_user_timeout: Duration,
    /// The server's `client_connection_check_interval` (`None`: off).
    pub connection_check_interval: Option<Duration>,
    /// A connection idle this long is checked with a round trip before it
    /// is handed out again.
    pub idle_check_after: Duration,
    /// Longest wait for that check.
    pub idle_check_timeout: Duration,
}

impl Default for SessionSettings {
    fn default() -> Self {
        Self {
            connect_timeout: Duration::from_secs(10),
            keepalive_idle: Duration::from_secs(10),
            keepalive_interval: Duration::from_secs(5),
            keepalive_retries: 3,
            tcp_user_timeout: Duration::from_secs(25),
            connection_check_interval: Some(Duration::from_secs(1)),
            idle_check_after: Duration::from_secs(5),
            idle_check_timeout: Duration::from_secs(2),
        }
    }
}

/// What the server reported of itself when the session started.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ServerReport {
    /// `server_version`, e.g. `15.6 (Debian 15.6-0+deb12u1)`.
    pub version: String,
    /// `server_encoding`, e.g. `UTF8`.
    pub encoding: String,
    /// The database connected to.
    pub database: String,
}

impl ServerReport {
    /// The major version (`15` of `15.6`; `9` of `9.6.24`), if it parses.
    pub fn major(&self) -> Option<u32> {
        let digits: String = self
            .version
            .chars()
            .take_while(char::is_ascii_digit)
            .collect();
        digits.parse().ok()
    }

    /// Whether hotcount can use this server and database.
    pub fn check(&self) -> Result<(), ServerRefusal> {
        if self
            .major()
            .is_none_or(|major| major < OLDEST_SUPPORTED_MAJOR)
        {
            return Err(ServerRefusal::TooOld {
                version: self.version.clone(),
            });
        }
        if !self.encoding.eq_ignore_ascii_case("UTF8") {
            return Err(ServerRefusal::Encoding {
                database: self.database.clone(),
                encoding: self.encoding.clone(),
            });
        }
        Ok(())
    }
}

/// A server or database hotcount does not run on, with the fix.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ServerRefusal {
    /// Older than [`OLDEST_SUPPORTED_MAJOR`].
    #[error("the server is PostgreSQL {version}; hotcount needs PostgreSQL {OLDEST_SUPPORTED_MAJOR} or newer: upgrade the server, or point --store at one that is")]
    TooOld {
        /// The version it reported.
        version: String,
    },
    /// Not UTF-8: a valid id that the encoding cannot hold would fail its batch.
    #[error("database \"{database}\" has server_encoding {encoding}; hotcount needs UTF8 (post and user ids are UTF-8 text, which {encoding} cannot always hold): create a database with CREATE DATABASE ... ENCODING 'UTF8' TEMPLATE template0 (and a UTF-8 or C locale), run `hotcount setup --store <its URL>`, and point --store at it")]
    Encoding {
        /// The database.
        database: String,
        /// Its encoding.
        encoding: String,
    },
}

/// Why no session could be opened.
#[derive(Debug, thiserror::Error)]
pub enum SessionError {
    /// The driver failed (the server refused, TLS failed, a broken stream).
    #[error("{}", super::errors::with_causes(.0))]
    Driver(tokio_postgres::Error),
    /// No socket to `host`.
    #[error("connecting to {host}: {error}")]
    Socket {
        /// The host and port tried.
        host: String,
        /// Why.
        error: io::Error,
    },
    /// Opening took longer than the connect timeout.
    #[error("no session within {0:?} (the server does not answer)")]
    Timeout(Duration),
    /// The server asked for the password in cleartext where that is refused.
    #[error("the server asked for the password in cleartext, which sslmode={mode} does not protect (the server is not authenticated, so a machine in the middle could be the one asking); refused before sending it: use sslmode=verify-full with sslrootcert=..., or scram-sha-256 authentication on the server (sslmode=disable only on a network you trust)")]
    Cleartext {
        /// The `sslmode` in force.
        mode: &'static str,
    },
    /// The server or database is not one hotcount runs on.
    #[error(transparent)]
    Refused(ServerRefusal),
    /// The connection string names no host.
    #[error("the connection string names no host")]
    NoHost,
}

/// Drives `connection`, sending each notification's payload to `tx`, until
/// the connection ends (or nobody receives).
async fn forward_notifications<S, T>(
    mut connection: tokio_postgres::Connection<S, T>,
    tx: UnboundedSender<String>,
) where
    S: AsyncRead + AsyncWrite + Unpin,
    T: AsyncRead + AsyncWrite + Unpin,
{
    use futures::StreamExt;
    let mut messages = futures::stream::poll_fn(move |cx| connection.poll_message(cx));
    while let Some(message) = messages.next().await {
        match message {
            Ok(tokio_postgres::AsyncMessage::Notification(n)) => {
                if tx.send(n.payload().to_string()).is_err() {
                    return;
                }
            }
            Ok(_) => {}
            Err(error) => {
                tracing::warn!(error = %super::errors::with_causes(&error), "the LISTEN connection ended");
                return;
            }
        }
    }
}

/// A session just opened.
pub struct Opened {
    /// Its client.
    pub client: Client,
    /// The task driving its connection.
    pub connection: tokio::task::JoinHandle<()>,
    /// What the server reported at start (already checked).
    pub report: ServerReport,
}

/// The pool's sessions: opens them ([`Sessions::open`]) and checks them on
/// the way out of the pool; a `deadpool` manager.
pub struct Sessions {
    config: Config,
    mode: SslMode,
    tls: Option<MakeRustlsConnect>,
    settings: SessionSettings,
    /// What the server reported when the last session started.
    last_report: parking_lot::Mutex<Option<ServerReport>>,
}

impl Sessions {
    /// Sessions on `config` (the driver's settings, `sslmode` as the
    /// driver knows it) protected as `mode` says, with `tls` unless `disable`.
    pub fn new(
        config: Config,
        mode: SslMode,
        tls: Option<MakeRustlsConnect>,
        settings: SessionSettings,
    ) -> Self {
        Self {
            config,
            mode,
            tls,
            settings,
            last_report: parking_lot::Mutex::new(None),
        }
    }

    /// What the server reported when the last session started (checked).
    pub fn last_report(&self) -> Option<ServerReport> {
        self.last_report.lock().clone()
    }

    /// Opens one session: each host in turn, the whole bounded by the
    /// connect timeout. The server's report is checked before the session
    /// is handed out.
    pub async fn open(&self) -> Result<Opened, SessionError> {
        self.open_forwarding(None).await
    }

    /// [`Self::open`], with the payload of each notification the session
    /// receives (after a `LISTEN`) sent to `notify`, when given; the
    /// connection's task ends when nobody receives any more.
    pub async fn open_forwarding(
        &self,
        notify: Option<UnboundedSender<String>>,
    ) -> Result<Opened, SessionError> {
        let timeout = self.settings.connect_timeout;
        match tokio::time::timeout(timeout, self.open_any(notify)).await {
            Ok(opened) => opened,
            Err(_) => Err(SessionError::Timeout(timeout)),
        }
    }

    async fn open_any(
        &self,
        notify: Option<UnboundedSender<String>>,
    ) -> Result<Opened, SessionError> {
        let mut targets = targets(&self.config);
        if self.config.get_load_balance_hosts() == LoadBalanceHosts::Random {
            use rand::seq::SliceRandom;
            targets.shuffle(&mut rand::rng());
        }
        let mut last = SessionError::NoHost;
        for target in &targets {
            match self.open_on(target, notify.clone()).await {
                Ok(Some(opened)) => return Ok(opened),
                // A read-only server where `target_session_attrs=read-write`.
                Ok(None) => {}
                Err(e @ (SessionError::Cleartext { .. } | SessionError::Refused(_))) => {
                    return Err(e)
                }
                Err(e) => last = e,
            }
        }
        Err(last)
    }

    async fn open_on(
        &self,
        target: &Target,
        notify: Option<UnboundedSender<String>>,
    ) -> Result<Option<Opened>, SessionError> {
        let stream = target.connect(&self.settings).await?;
        let guarding = !self.mode.protects_cleartext();
        let refused = Arc::new(AtomicBool::new(false));
        // Before TLS: the server's answer to the TLS request, then (if it
        // declined) the authentication in plain text.
        let first = if guarding {
            Scan::SslAnswer
        } else {
            Scan::Done
        };
        let stream = Guard::new(stream, first, refused.clone());
        let opened = match &self.tls {
            None => {
                let connected = self.config.connect_raw(stream, NoTls).await;
                self.started(connected, notify)
            }
            Some(make) => {
                let inner = <MakeRustlsConnect as MakeTlsConnect<Guard<Stream>>>::make_tls_connect(
                    &mut make.clone(),
                    target.tls_name(),
                )
                .map_err(|never| match never {})?;
                let scan = if guarding { Scan::Start } else { Scan::Done };
                let tls = GuardedTls {
                    inner,
                    scan,
                    refused: refused.clone(),
                };
                let connected = self.config.connect_raw(stream, tls).await;
                self.started(connected, notify)
            }
        };
        let Opened {
            client,
            connection,
            report,
        } = match opened {
            Ok(opened) => opened,
            Err(_) if refused.load(Ordering::SeqCst) => {
                return Err(SessionError::Cleartext {
                    mode: self.mode.name(),
                })
            }
            Err(e) => return Err(e),
        };
        report.check().map_err(SessionError::Refused)?;
        *self.last_report.lock() = Some(report.clone());
        if self.config.get_target_session_attrs() == TargetSessionAttrs::ReadWrite {
            let rows = client
                .simple_query("SHOW transaction_read_only")
                .await
                .map_err(SessionError::Driver)?;
            let read_only = rows.iter().any(|m| match m {
                tokio_postgres::SimpleQueryMessage::Row(row) => row.get(0) == Some("on"),
                _ => false,
            });
            if read_only {
                return Ok(None);
            }
        }
        if let Some(interval) = self.settings.connection_check_interval {
            let ms = interval.as_millis().max(1);
            client
                .batch_execute(&format!("SET client_connection_check_interval = {ms}"))
                .await
                .map_err(SessionError::Driver)?;
        }
        Ok(Some(Opened {
            client,
            connection,
            report,
        }))
    }

    /// The client of a session the driver started, its connection driven
    /// by a task of its own, and the server's report.
    fn started<S, T>(
        &self,
        connected: Result<(Client, tokio_postgres::Connection<S, T>), tokio_postgres::Error>,
        notify: Option<UnboundedSender<String>>,
    ) -> Result<Opened, SessionError>
    where
        S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
        T: AsyncRead + AsyncWrite + Unpin + Send + 'static,
    {
        let (client, connection) = connected.map_err(SessionError::Driver)?;
        let report = ServerReport {
            version: connection
                .parameter("server_version")
                .unwrap_or_default()
                .to_string(),
            encoding: connection
                .parameter("server_encoding")
                .unwrap_or_default()
                .to_string(),
            database: self.config.get_dbname().unwrap_or_default().to_string(),
        };
        let connection = match notify {
            None => tokio::spawn(async move {
                if let Err(error) = connection.await {
                    tracing::debug!(error = %super::errors::with_causes(&error), "PostgreSQL connection ended");
                }
            }),
            Some(tx) => tokio::spawn(forward_notifications(connection, tx)),
        };
        Ok(Opened {
            client,
            connection,
            report,
        })
    }

    /// Sends `token`'s cancel request (best effort: to each host in turn
    /// until one takes it; a server that does not know the key ignores it).
    pub async fn cancel(&self, token: &CancelToken) -> Result<(), SessionError> {
        let mut last = SessionError::NoHost;
        for target in &targets(&self.config) {
            let stream = match target.connect(&self.settings).await {
                Ok(stream) => stream,
                Err(e) => {
                    last = e;
                    continue;
                }
            };
            let sent = match &self.tls {
                None => token.cancel_query_raw(stream, NoTls).await,
                Some(make) => {
                    let tls = <MakeRustlsConnect as MakeTlsConnect<Stream>>::make_tls_connect(
                        &mut make.clone(),
                        target.tls_name(),
                    )
                    .map_err(|never| match never {})?;
                    token.cancel_query_raw(stream, tls).await
                }
            };
            match sent {
                Ok(()) => return Ok(()),
                Err(e) => last = SessionError::Driver(e),
            }
        }
        Err(last)
    }
}

impl managed::Manager for Sessions {
    type Type = ClientWrapper;
    type Error = SessionError;

    async fn create(&self) -> Result<ClientWrapper, SessionError> {
        let opened = self.open().await?;
        // Dropping the wrapper aborts the connection's task: the socket
        // closes at once, and the server rolls back what was open.
        Ok(ClientWrapper::new(opened.client, opened.connection))
    }

    async fn recycle(
        &self,
        client: &mut ClientWrapper,
        metrics: &Metrics,
    ) -> RecycleResult<SessionError> {
        if client.is_closed() {
            return Err(RecycleError::message("the connection is closed"));
        }
        if metrics.last_used() < self.settings.idle_check_after {
            return Ok(());
        }
        // Idle for a while: the server may have gone without a reset, which
        // only a round trip shows.
        let timeout = self.settings.idle_check_timeout;
        match tokio::time::timeout(timeout, client.simple_query("")).await {
            Ok(Ok(_)) => Ok(()),
            Ok(Err(error)) => Err(RecycleError::Backend(SessionError::Driver(error))),
            Err(_) => Err(RecycleError::message(format!(
                "an idle connection did not answer within {timeout:?}"
            ))),
        }
    }
}

/// One host to try: where to connect, and the name TLS checks.
#[derive(Clone, Debug)]
struct Target {
    addr: Addr,
    hostname: Option<String>,
    port: u16,
}

#[derive(Clone, Debug)]
enum Addr {
    Tcp(String),
    Unix(std::path::PathBuf),
}

/// The hosts of `config` in order (`hostaddr` over `host` to connect, the
/// host name for TLS), each with its port, as the driver pairs them.
fn targets(config: &Config) -> Vec<Target> {
    let hosts = config.get_hosts();
    let addrs = config.get_hostaddrs();
    let ports = config.get_ports();
    let count = hosts.len().max(addrs.len());
    (0..count)
        .filter_map(|i| {
            let port = ports.get(i).or(ports.first()).copied().unwrap_or(5432);
            let hostname = match hosts.get(i) {
                Some(Host::Tcp(name)) => Some(name.clone()),
                _ => None,
            };
            let addr = match (addrs.get(i), hosts.get(i)) {
                (Some(ip), _) => Addr::Tcp(ip.to_string()),
                (None, Some(Host::Tcp(name))) => Addr::Tcp(name.clone()),
                (None, Some(Host::Unix(dir))) => Addr::Unix(dir.clone()),
                (None, None) => return None,
            };
            Some(Target {
                addr,
                hostname,
                port,
            })
        })
        .collect()
}

impl Target {
    fn tls_name(&self) -> &str {
        self.hostname.as_deref().unwrap_or("")
    }

    fn shown(&self) -> String {
        match &self.addr {
            Addr::Tcp(host) => format!("{host}:{}", self.port),
            Addr::Unix(dir) => dir
                .join(format!(".s.PGSQL.{}", self.port))
                .display()
                .to_string(),
        }
    }

    /// A socket to this host (each of its addresses in turn), with the
    /// keepalive and user timeout of `settings`.
    async fn connect(&self, settings: &SessionSettings) -> Result<Stream, SessionError> {
        let failed = |error| SessionError::Socket {
            host: self.shown(),
            error,
        };
        match &self.addr {
            Addr::Unix(dir) => {
                let path = dir.join(format!(".s.PGSQL.{}", self.port));
                let stream = UnixStream::connect(path).await.map_err(failed)?;
                Ok(Stream::Unix(stream))
            }
            Addr::Tcp(host) => {
                let addrs = tokio::net::lookup_host((host.as_str(), self.port))
                    .await
                    .map_err(failed)?;
                let mut last = io::Error::new(io::ErrorKind::NotFound, "no address");
                for addr in addrs {
                    match TcpStream::connect(addr).await {
                        Ok(stream) => {
                            configure(&stream, settings).map_err(failed)?;
                            return Ok(Stream::Tcp(stream));
                        }
                        Err(e) => last = e,
                    }
                }
                Err(failed(last))
            }
        }
    }
}

/// No Nagle delay, keepalive probes and a user timeout on `stream`.
pub fn configure(stream: &TcpStream, settings: &SessionSettings) -> io::Result<()> {
    stream.set_nodelay(true)?;
    let socket = SockRef::from(stream);
    let keepalive = TcpKeepalive::new()
        .with_time(settings.keepalive_idle)
        .with_interval(settings.keepalive_interval)
        .with_retries(settings.keepalive_retries);
    socket.set_tcp_keepalive(&keepalive)?;
    socket.set_tcp_user_timeout(Some(settings.tcp_user_timeout))?;
    Ok(())
}

/// A TCP or Unix socket.
pub enum Stream {
    /// TCP.
    Tcp(TcpStream),
    /// A Unix socket.
    Unix(UnixStream),
}

impl AsyncRead for Stream {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Stream::Tcp(s) => Pin::new(s).poll_read(cx, buf),
            Stream::Unix(s) => Pin::new(s).poll_read(cx, buf),
        }
    }
}

impl AsyncWrite for Stream {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        match self.get_mut() {
            Stream::Tcp(s) => Pin::new(s).poll_write(cx, buf),
            Stream::Unix(s) => Pin::new(s).poll_write(cx, buf),
        }
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Stream::Tcp(s) => Pin::new(s).poll_flush(cx),
            Stream::Unix(s) => Pin::new(s).poll_flush(cx),
        }
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Stream::Tcp(s) => Pin::new(s).poll_shutdown(cx),
            Stream::Unix(s) => Pin::new(s).poll_shutdown(cx),
        }
    }
}

/// Where the authentication scan of a [`Guard`] is in the server's bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Scan {
    /// Waiting for the one-byte answer to the TLS request: `N` (declined:
    /// the authentication follows in plain text) or `S` (TLS follows: the
    /// guard inside it scans).
    SslAnswer,
    /// At the start of a message.
    Start,
    /// Reading a message's head: its type, length and (for an
    /// authentication request) the request's kind.
    Head { head: [u8; 9], have: usize },
    /// Skipping the rest of a message.
    Skip(usize),
    /// Authentication is over (or not scanned): bytes pass untouched.
    Done,
}

/// The authentication request for a cleartext password.
const AUTH_CLEARTEXT: u32 = 3;
/// Authentication succeeded.
const AUTH_OK: u32 = 0;

impl Scan {
    /// Follows `bytes` from the server; `Err` when they ask for the
    /// password in cleartext.
    fn feed(&mut self, bytes: &[u8]) -> Result<(), ()> {
        let mut rest = bytes;
        while !rest.is_empty() {
            match *self {
                Scan::Done => return Ok(()),
                Scan::SslAnswer => {
                    *self = if rest[0] == b'N' {
                        Scan::Start
                    } else {
                        Scan::Done
                    };
                    rest = &rest[1..];
                }
                Scan::Start => {
                    *self = Scan::Head {
                        head: [0; 9],
                        have: 0,
                    }
                }
                Scan::Skip(left) => {
                    let n = left.min(rest.len());
                    rest = &rest[n..];
                    *self = if n == left {
                        Scan::Start
                    } else {
                        Scan::Skip(left - n)
                    };
                }
                Scan::Head { mut head, mut have } => {
                    // The type and length first; then the request kind of
                    // an authentication message (never past its end).
                    let wanted = if have < 5 {
                        5
                    } else if head[0] == b'R' && message_len(&head) >= 8 {
                        9
                    } else {
                        have
                    };
                    let n = (wanted - have).min(rest.len());
                    head[have..have + n].copy_from_slice(&rest[..n]);
                    have += n;
                    rest = &rest[n..];
                    if have < wanted {
                        *self = Scan::Head { head, have };
                        continue;
                    }
                    if have == 5 && head[0] == b'R' && message_len(&head) >= 8 {
                        *self = Scan::Head { head, have };
                        continue;
                    }
                    *self = match (head[0], have) {
                        (b'R', 9) => match u32::from_be_bytes([head[5], head[6], head[7], head[8]])
                        {
                            AUTH_CLEARTEXT => return Err(()),
                            AUTH_OK => Scan::Done,
                            _ => Scan::Skip(message_len(&head).saturating_sub(8)),
                        },
                        // An error ends the authentication too.
                        (b'E', _) => Scan::Done,
                        _ => Scan::Skip(message_len(&head).saturating_sub(4)),
                    };
                }
            }
        }
        Ok(())
    }
}

/// The length field of a message head (it counts itself, not the type).
fn message_len(head: &[u8; 9]) -> usize {
    u32::from_be_bytes([head[1], head[2], head[3], head[4]]) as usize
}

/// A stream whose incoming bytes are scanned until the authentication is
/// over; a request for the password in cleartext fails the read (and
/// sets `refused`), so the driver never answers it.
pub struct Guard<S> {
    inner: S,
    scan: Scan,
    refused: Arc<AtomicBool>,
}

impl<S> Guard<S> {
    fn new(inner: S, scan: Scan, refused: Arc<AtomicBool>) -> Self {
        Self {
            inner,
            scan,
            refused,
        }
    }
}

impl<S: AsyncRead + Unpin> AsyncRead for Guard<S> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        let before = buf.filled().len();
        ready!(Pin::new(&mut this.inner).poll_read(cx, buf))?;
        if this.scan != Scan::Done && this.scan.feed(&buf.filled()[before..]).is_err() {
            this.refused.store(true, Ordering::SeqCst);
            return Poll::Ready(Err(io::Error::new(
                io::ErrorKind::PermissionDenied,
                "the server asked for the password in cleartext; refused",
            )));
        }
        Poll::Ready(Ok(()))
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for Guard<S> {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().inner).poll_write(cx, buf)
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_shutdown(cx)
    }
}

impl<S: TlsStream + Unpin> TlsStream for Guard<S> {
    fn channel_binding(&self) -> ChannelBinding {
        self.inner.channel_binding()
    }
}

/// A TLS connector whose stream is a [`Guard`] (the authentication
/// happens inside TLS).
struct GuardedTls<T> {
    inner: T,
    scan: Scan,
    refused: Arc<AtomicBool>,
}

impl<S, T> TlsConnect<S> for GuardedTls<T>
where
    T: TlsConnect<S>,
    T::Future: Send + 'static,
    T::Stream: TlsStream + Unpin,
{
    type Stream = Guard<T::Stream>;
    type Error = T::Error;
    type Future = BoxFuture<'static, Result<Guard<T::Stream>, T::Error>>;

    fn connect(self, stream: S) -> Self::Future {
        let handshake = self.inner.connect(stream);
        let (scan, refused) = (self.scan, self.refused);
        Box::pin(async move { Ok(Guard::new(handshake.await?, scan, refused)) })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn message(kind: u8, body: &[u8]) -> Vec<u8> {
        let mut m = vec![kind];
        m.extend_from_slice(&(body.len() as u32 + 4).to_be_bytes());
        m.extend_from_slice(body);
        m
    }

    fn auth(code: u32, rest: &[u8]) -> Vec<u8> {
        let mut body = code.to_be_bytes().to_vec();
        body.extend_from_slice(rest);
        message(b'R', &body)
    }

    /// Feeds `bytes` in pieces of `size`; whether the scan refused them.
    fn refused(first: Scan, bytes: &[u8], size: usize) -> bool {
        let mut scan = first;
        bytes.chunks(size).any(|piece| scan.feed(piece).is_err())
    }

    #[test]
    fn a_cleartext_request_is_caught_in_any_split_of_the_bytes() {
        let mut plain = vec![b'N'];
        plain.extend(auth(AUTH_CLEARTEXT, &[]));
        let mut sasl = vec![b'N'];
        sasl.extend(auth(10, b"SCRAM-SHA-256\0\0"));
        sasl.extend(auth(11, b"r=abc,s=def,i=4096"));
        sasl.extend(auth(12, b"v=xyz"));
        sasl.extend(auth(AUTH_OK, &[]));
        sasl.extend(message(b'S', b"server_version\x0015\0"));
        // After authentication, a cleartext-looking message is data.
        sasl.extend(auth(AUTH_CLEARTEXT, &[]));
        let mut md5 = vec![b'N'];
        md5.extend(auth(5, &[1, 2, 3, 4]));
        md5.extend(auth(AUTH_OK, &[]));
        for size in 1..=plain.len().max(sasl.len()) {
            assert!(refused(Scan::SslAnswer, &plain, size), "{size}");
            assert!(refused(Scan::Start, &plain[1..], size), "{size}");
            assert!(!refused(Scan::SslAnswer, &sasl, size), "{size}");
            assert!(!refused(Scan::SslAnswer, &md5, size), "{size}");
        }
        // TLS accepted: the bytes that follow are TLS records, not scanned.
        let mut tls = vec![b'S'];
        tls.extend(auth(AUTH_CLEARTEXT, &[]));
        assert!(!refused(Scan::SslAnswer, &tls, 64));
        // An error ends the scan (authentication failed).
        let mut failed = message(b'E', b"SFATAL\0");
        failed.extend(auth(AUTH_CLEARTEXT, &[]));
        assert!(!refused(Scan::Start, &failed, 3));
    }

    #[test]
    fn only_servers_from_the_oldest_supported_major_with_utf8_are_served() {
        let report = |version: &str, encoding: &str| ServerReport {
            version: version.into(),
            encoding: encoding.into(),
            database: "hc".into(),
        };
        assert!(report("15.6 (Debian 15.6-0+deb12u1)", "UTF8")
            .check()
            .is_ok());
        assert!(report("14.0", "UTF8").check().is_ok());
        assert!(report("18beta1", "UTF8").check().is_ok());
        assert!(matches!(
            report("13.16", "UTF8").check(),
            Err(ServerRefusal::TooOld { .. })
        ));
        assert!(matches!(
            report("9.6.24", "UTF8").check(),
            Err(ServerRefusal::TooOld { .. })
        ));
        assert!(report("", "UTF8").check().is_err());
        for encoding in ["LATIN1", "SQL_ASCII", "WIN1252"] {
            let refusal = report("16.2", encoding).check();
            assert!(
                matches!(refusal, Err(ServerRefusal::Encoding { .. })),
                "{encoding}"
            );
            let advice = refusal.err().map(|e| e.to_string()).unwrap_or_default();
            assert!(advice.contains("ENCODING 'UTF8'"), "{advice}");
        }
    }

    #[tokio::test]
    async fn a_socket_probes_an_idle_peer_and_gives_up_on_unacknowledged_data() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let addr = listener.local_addr().expect("addr");
        let target = Target {
            addr: Addr::Tcp(addr.ip().to_string()),
            hostname: None,
            port: addr.port(),
        };
        let settings = SessionSettings::default();
        let Stream::Tcp(stream) = target.connect(&settings).await.expect("connects") else {
            panic!("a TCP host gives a TCP socket");
        };
        let socket = SockRef::from(&stream);
        assert!(socket.keepalive().expect("read SO_KEEPALIVE"));
        assert_eq!(
            socket.tcp_keepalive_time().expect("TCP_KEEPIDLE"),
            settings.keepalive_idle
        );
        assert_eq!(
            socket.tcp_keepalive_interval().expect("TCP_KEEPINTVL"),
            settings.keepalive_interval
        );
        assert_eq!(
            socket.tcp_keepalive_retries().expect("TCP_KEEPCNT"),
            settings.keepalive_retries
        );
        assert_eq!(
            socket.tcp_user_timeout().expect("TCP_USER_TIMEOUT"),
            Some(settings.tcp_user_timeout)
        );
        assert!(stream.nodelay().expect("TCP_NODELAY"));
    }
}
