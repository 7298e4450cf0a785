//! Scraping the service's own endpoint in tests: `hotcount_scrape`'s client
//! and exposition parser, with failures as test panics.
#![allow(dead_code)]

use std::net::SocketAddr;
use std::time::Duration;

use hotcount_scrape::{Client, Exposition};

/// GET `path` on `addr`: (status code, body).
pub async fn get(addr: SocketAddr, path: &str) -> (u16, String) {
    let client = Client::new(Duration::from_secs(10)).expect("an HTTP client");
    client
        .get(addr, path)
        .await
        .expect("a response within 10 s")
}

/// The metric families a Prometheus text exposition declares (`# TYPE` lines).
pub fn families(exposition: &str) -> Vec<String> {
    let parsed = Exposition::parse(exposition);
    parsed
        .families()
        .iter()
        .map(|(name, _)| name.clone())
        .collect()
}

/// The value of the sample `series` (name with all its labels, as exported).
pub fn value(exposition: &str, series: &str) -> Option<f64> {
    Exposition::parse(exposition).value(series)
}

/// Waits (bounded) until the service has bound its metrics endpoint.
pub async fn metrics_addr(stats: &hotcount::telemetry::Stats) -> SocketAddr {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    loop {
        if let Some(addr) = stats.metrics_addr.get() {
            return *addr;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "metrics endpoint bound"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}
