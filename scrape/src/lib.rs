//! Reads a hotcount operations endpoint, for the tests and the load
//! generator (never the service): [`Client`] GETs a path over plain HTTP,
//! [`Exposition`] answers "value of series X" and "quantile q of histogram X"
//! from the Prometheus text it returns.
//!
//! Invariant: read-only, one fresh connection per request (no pool: a
//! consumer restarted on the same port is never read through a dead
//! connection), and every request ends within the client's timeout.
#![forbid(unsafe_code)]
#![warn(missing_docs)]

pub mod exposition;

use std::net::SocketAddr;
use std::time::Duration;

pub use exposition::{histogram_quantile, Exposition, Sample};

/// A request to the endpoint failed.
#[derive(Debug, thiserror::Error)]
pub enum ScrapeError {
    /// The HTTP client could not be built.
    #[error("building the HTTP client: {0}")]
    Client(#[source] reqwest::Error),
    /// No answer (refused, reset, timed out, unreadable body).
    #[error("GET {url}: {source}")]
    Request {
        /// What was asked for.
        url: String,
        /// Why it failed.
        #[source]
        source: reqwest::Error,
    },
    /// An answer other than 200 where a body was needed.
    #[error("GET {url}: status {status}")]
    Status {
        /// What was asked for.
        url: String,
        /// The status code received.
        status: u16,
    },
}

/// An HTTP client for a loopback operations endpoint.
#[derive(Clone, Debug)]
pub struct Client {
    http: reqwest::Client,
}

impl Client {
    /// A client whose every request ends within `timeout`.
    pub fn new(timeout: Duration) -> Result<Self, ScrapeError> {
        let http = reqwest::Client::builder()
            .timeout(timeout)
            .pool_max_idle_per_host(0)
            .no_proxy()
            .build()
            .map_err(ScrapeError::Client)?;
        Ok(Self { http })
    }

    /// `GET path` on `addr`: (status code, body).
    pub async fn get(&self, addr: SocketAddr, path: &str) -> Result<(u16, String), ScrapeError> {
        let url = format!("http://{addr}{path}");
        let failed = |source| ScrapeError::Request {
            url: url.clone(),
            source,
        };
        let response = self.http.get(&url).send().await.map_err(failed)?;
        let status = response.status().as_u16();
        let body = response.text().await.map_err(failed)?;
        Ok((status, body))
    }

    /// The exposition `/metrics` on `addr` serves (an error unless 200).
    pub async fn metrics(&self, addr: SocketAddr) -> Result<Exposition, ScrapeError> {
        let (status, body) = self.get(addr, "/metrics").await?;
        if status != 200 {
            let url = format!("http://{addr}/metrics");
            return Err(ScrapeError::Status { url, status });
        }
        Ok(Exposition::parse(&body))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_closed_port_is_an_error_not_a_hang() {
        let addr = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .expect("a free port");
        let client = Client::new(Duration::from_secs(5)).expect("client");
        let error = client
            .get(addr, "/metrics")
            .await
            .expect_err("nothing listens");
        assert!(matches!(error, ScrapeError::Request { .. }), "{error}");
    }

    #[tokio::test]
    async fn reads_status_and_body_and_parses_metrics() {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let addr = listener.local_addr().expect("addr");
        let server = tokio::spawn(async move {
            for body in ["x_total 3\n", "not found\n"] {
                let (mut stream, _) = listener.accept().await.expect("accept");
                let mut request = vec![0u8; 1024];
                let _ = stream.read(&mut request).await.expect("read");
                let status = if body.starts_with('x') {
                    "200 OK"
                } else {
                    "404 Not Found"
                };
                let response = format!(
                    "HTTP/1.1 {status}\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
                    body.len()
                );
                stream.write_all(response.as_bytes()).await.expect("write");
            }
        });
        let client = Client::new(Duration::from_secs(5)).expect("client");
        let metrics = client.metrics(addr).await.expect("200");
        assert_eq!(metrics.value("x_total"), Some(3.0));
        let error = client.metrics(addr).await.expect_err("404");
        assert!(
            matches!(error, ScrapeError::Status { status: 404, .. }),
            "{error}"
        );
        server.await.expect("server");
    }
}
