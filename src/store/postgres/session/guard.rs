//! The cleartext-password guard: a stream that scans the server's bytes
//! until authentication is over and fails the read that carries a request
//! for the password in cleartext, below TLS and inside it.
//!
//! Invariants: the scan follows message boundaries however the bytes are
//! split across reads; a cleartext request ends the connection before the
//! driver can answer it (and sets the shared `refused` flag, so the caller
//! tells it from another failure); after authentication succeeds or fails,
//! and after the server accepts TLS below the TLS layer, bytes pass
//! untouched.

use std::io;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::task::{ready, Context, Poll};

use futures::future::BoxFuture;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio_postgres::tls::{ChannelBinding, TlsConnect, TlsStream};

/// Where the authentication scan of a [`Guard`] is in the server's bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Scan {
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
    pub(super) fn new(inner: S, scan: Scan, refused: Arc<AtomicBool>) -> Self {
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
pub(super) struct GuardedTls<T> {
    pub(super) inner: T,
    pub(super) scan: Scan,
    pub(super) refused: Arc<AtomicBool>,
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
}
