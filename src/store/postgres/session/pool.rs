//! The pool's sessions: the `deadpool` manager that opens a session (each
//! host in turn, over our own socket and guard, TLS as
//! [`tls`](crate::store::postgres::tls) decides), checks the server's
//! report, and checks a connection that sat idle before it is handed out
//! again; also the LISTEN session and cancel requests.
//!
//! Invariants: under `sslmode` `prefer` or `require` a request for the
//! password in cleartext ends the connection before the password is sent
//! ([`SessionError::Cleartext`]); a session is handed out only after the
//! server's report passed [`ServerReport::check`] (and, under
//! `target_session_attrs=read-write`, only on a server that is not read
//! only); opening a session (every host tried) is bounded by the connect
//! timeout, and the idle check by its own timeout; a cleartext request or
//! a refused server stops the search at once instead of trying the next
//! host.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use tokio::sync::mpsc::UnboundedSender;

use deadpool::managed::{self, Metrics, RecycleError, RecycleResult};
use deadpool_postgres::ClientWrapper;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio_postgres::config::TargetSessionAttrs;
use tokio_postgres::tls::MakeTlsConnect;
use tokio_postgres::{CancelToken, Client, Config, NoTls};
use tokio_postgres_rustls::MakeRustlsConnect;

use super::error::SessionError;
use super::guard::{Guard, GuardedTls, Scan};
use super::hosts::{self, Target};
use super::server::ServerReport;
use super::settings::SessionSettings;
use super::socket::{self, Stream};
use crate::store::postgres::causes::with_causes;
use crate::store::postgres::tls::SslMode;

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
                tracing::warn!(error = %with_causes(&error), "the LISTEN connection ended");
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
        let targets = hosts::to_try(&self.config);
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
        let stream = socket::connect(target, &self.settings).await?;
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
                    tracing::debug!(error = %with_causes(&error), "PostgreSQL connection ended");
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
        for target in &hosts::targets(&self.config) {
            let stream = match socket::connect(target, &self.settings).await {
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
