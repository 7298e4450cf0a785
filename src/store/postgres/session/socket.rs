//! A socket to one host: TCP with no Nagle delay, keepalive probes and
//! `TCP_USER_TIMEOUT`, or a Unix socket.
//!
//! Invariants: every TCP socket the store opens probes an idle peer and
//! gives up on unacknowledged data within seconds ([`SessionSettings`]),
//! so a server that vanished without a reset (a failover, a partition) is
//! noticed instead of waited on for hours; each address of a host is
//! tried in turn, and the failure names the host.

use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};

use socket2::{SockRef, TcpKeepalive};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpStream, UnixStream};

use super::error::SessionError;
use super::hosts::{Addr, Target};
use super::settings::SessionSettings;

/// A socket to `target` (each of its addresses in turn), with the
/// keepalive and user timeout of `settings`.
pub(super) async fn connect(
    target: &Target,
    settings: &SessionSettings,
) -> Result<Stream, SessionError> {
    let failed = |error| SessionError::Socket {
        host: target.shown(),
        error,
    };
    match &target.addr {
        Addr::Unix(dir) => {
            let path = dir.join(format!(".s.PGSQL.{}", target.port));
            let stream = UnixStream::connect(path).await.map_err(failed)?;
            Ok(Stream::Unix(stream))
        }
        Addr::Tcp(host) => {
            let addrs = tokio::net::lookup_host((host.as_str(), target.port))
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

#[cfg(test)]
mod tests {
    use super::*;

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
        let Stream::Tcp(stream) = connect(&target, &settings).await.expect("connects") else {
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
