//! Scraping the service's own endpoint in tests: `hotcount::http`'s client,
//! with failures as test panics.
#![allow(dead_code)]

use std::net::SocketAddr;
use std::time::Duration;

/// GET `path` on `addr`: (status code, body).
pub async fn get(addr: SocketAddr, path: &str) -> (u16, String) {
    hotcount::http::fetch(addr, path, Duration::from_secs(10))
        .await
        .expect("a response within 10 s")
}

/// The metric families a Prometheus text exposition declares (`# TYPE` lines).
pub fn families(exposition: &str) -> Vec<String> {
    exposition
        .lines()
        .filter_map(|l| l.strip_prefix("# TYPE "))
        .filter_map(|l| l.split_whitespace().next())
        .map(str::to_string)
        .collect()
}

/// The value of the sample `series` (name with labels, exactly as exported).
pub fn value(exposition: &str, series: &str) -> Option<f64> {
    hotcount::http::sample_value(exposition, series)
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
