//! The dashboards, alert policies and operator docs reference only metrics
//! that exist: hotcount names against a live `/metrics` scrape after a small
//! load, Cloud Monitoring metric types against the real Pub/Sub metric list.

mod common;
#[path = "support/scrape.rs"]
mod scrape;

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::time::Duration;

use common::{Ev, Harness};
use hotcount_scrape::Exposition;

/// Pub/Sub metric types as Cloud Monitoring lists them
/// (cloud.google.com/monitoring/api/metrics_gcp_p_z#gcp-pubsub).
const PUBSUB_METRIC_TYPES: &[&str] = &[
    "pubsub.googleapis.com/subscription/ack_latencies",
    "pubsub.googleapis.com/subscription/ack_message_count",
    "pubsub.googleapis.com/subscription/backlog_bytes",
    "pubsub.googleapis.com/subscription/byte_cost",
    "pubsub.googleapis.com/subscription/config_updates_count",
    "pubsub.googleapis.com/subscription/dead_letter_message_count",
    "pubsub.googleapis.com/subscription/delivery_latency_health_score",
    "pubsub.googleapis.com/subscription/exactly_once_warning_count",
    "pubsub.googleapis.com/subscription/expired_ack_deadlines_count",
    "pubsub.googleapis.com/subscription/mod_ack_deadline_message_count",
    "pubsub.googleapis.com/subscription/mod_ack_deadline_request_count",
    "pubsub.googleapis.com/subscription/num_outstanding_messages",
    "pubsub.googleapis.com/subscription/num_retained_acked_messages",
    "pubsub.googleapis.com/subscription/num_unacked_messages_by_region",
    "pubsub.googleapis.com/subscription/num_undelivered_messages",
    "pubsub.googleapis.com/subscription/oldest_retained_acked_message_age",
    "pubsub.googleapis.com/subscription/oldest_unacked_message_age",
    "pubsub.googleapis.com/subscription/oldest_unacked_message_age_by_region",
    "pubsub.googleapis.com/subscription/pull_ack_request_count",
    "pubsub.googleapis.com/subscription/pull_request_count",
    "pubsub.googleapis.com/subscription/push_request_count",
    "pubsub.googleapis.com/subscription/push_request_latencies",
    "pubsub.googleapis.com/subscription/sent_message_count",
    "pubsub.googleapis.com/subscription/streaming_pull_ack_request_count",
    "pubsub.googleapis.com/subscription/streaming_pull_mod_ack_deadline_request_count",
    "pubsub.googleapis.com/subscription/streaming_pull_response_count",
    "pubsub.googleapis.com/topic/byte_cost",
    "pubsub.googleapis.com/topic/message_sizes",
    "pubsub.googleapis.com/topic/send_message_operation_count",
    "pubsub.googleapis.com/topic/send_request_count",
];

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn json(path: &Path) -> serde_json::Value {
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{} is not JSON: {e}", path.display()))
}

/// Every string anywhere in a JSON document.
fn strings(value: &serde_json::Value, out: &mut Vec<String>) {
    match value {
        serde_json::Value::String(s) => out.push(s.clone()),
        serde_json::Value::Array(items) => items.iter().for_each(|v| strings(v, out)),
        serde_json::Value::Object(map) => map.values().for_each(|v| strings(v, out)),
        _ => {}
    }
}

/// Identifiers starting with `prefix`, continuing with `[a-z0-9_/]`.
fn identifiers(text: &str, prefix: &str, extra: &str) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    let mut rest = text;
    while let Some(at) = rest.find(prefix) {
        let tail = &rest[at + prefix.len()..];
        let end = tail
            .char_indices()
            .find(|(_, c)| {
                !(c.is_ascii_lowercase() || c.is_ascii_digit() || *c == '_' || extra.contains(*c))
            })
            .map_or(tail.len(), |(i, _)| i);
        // A bare prefix (`hotcount_*` in prose) names no metric.
        if end > 0 {
            out.insert(format!("{prefix}{}", &tail[..end]));
        }
        rest = &tail[end..];
    }
    out
}

fn alert_files() -> Vec<PathBuf> {
    let dir = root().join("dashboards/alerts");
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .expect("dashboards/alerts exists")
        .map(|e| e.expect("entry").path())
        .filter(|p| p.extension().is_some_and(|x| x == "json"))
        .collect();
    files.sort();
    assert!(!files.is_empty(), "alert policies in dashboards/alerts");
    files
}

/// Whether the exposition has a series named `name`: a sample's name (a
/// histogram's `_bucket`, `_sum` and `_count`, never its bare name, which
/// has no samples). Prose (`docs`) may also name a family.
/// Names in the docs that start like a metric but are not one: the
/// PostgreSQL notification channel a rollup write signals (`NOTIFY
/// hotcount_counts, '<post>'`).
const NOT_METRICS: &[&str] = &["hotcount_counts"];

fn is_exported(name: &str, exposition: &Exposition, prose: bool) -> bool {
    (prose && NOT_METRICS.contains(&name))
        || exposition.samples().iter().any(|s| s.name == name)
        || (prose && exposition.families().iter().any(|(f, _)| f == name))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_metric_the_dashboards_alerts_and_docs_reference_is_exported() {
    let h = Harness::start().await;
    let consumer = h.spawn(h.run_args("dash", &[]));
    let addr = scrape::metrics_addr(&consumer.stats).await;
    let mut events: Vec<Ev> = (0..20)
        .map(|i| {
            Ev::like(
                &format!("e{i}"),
                &format!("p{}", i % 3),
                &format!("u{i}"),
                1,
            )
        })
        .collect();
    events.push(events[0].clone());
    h.publish(&events).await;
    h.publish_raw(&[b"not json".to_vec()]).await;
    assert!(
        consumer
            .wait_for_acks(events.len() as u64 + 1, Duration::from_secs(30))
            .await
    );
    let (status, exposition) = scrape::get(addr, "/metrics").await;
    assert_eq!(status, 200);
    consumer.stop().await;
    let parsed = Exposition::parse(&exposition);

    let mut sources: Vec<(String, String)> = Vec::new();
    for path in std::iter::once(root().join("dashboards/grafana.json")).chain(alert_files()) {
        let mut all = Vec::new();
        strings(&json(&path), &mut all);
        sources.push((path.display().to_string(), all.join("\n")));
    }
    let docs = root().join("docs/OPERATIONS.md");
    let text = std::fs::read_to_string(&docs).expect("docs/OPERATIONS.md");
    sources.push((docs.display().to_string(), text));

    let mut on_dashboard = BTreeSet::new();
    for (source, text) in &sources {
        let names = identifiers(text, "hotcount_", "");
        assert!(
            !names.is_empty() || source.contains("alerts"),
            "{source} references hotcount metrics"
        );
        for name in names {
            let prose = source.ends_with(".md");
            assert!(
                is_exported(&name, &parsed, prose),
                "{source} references {name}, which /metrics does not export:\n{exposition}"
            );
            if source.ends_with("grafana.json") {
                on_dashboard.insert(name);
            }
        }
    }
    for (family, _) in parsed.families() {
        assert!(
            on_dashboard
                .iter()
                .any(|n| n == family || n.starts_with(&format!("{family}_"))),
            "{family} is exported but has no Grafana panel"
        );
    }
}

#[test]
fn cloud_monitoring_dashboard_and_alerts_use_real_pubsub_metric_types() {
    let mut referenced = BTreeSet::new();
    for path in
        std::iter::once(root().join("dashboards/cloud-monitoring.json")).chain(alert_files())
    {
        let mut all = Vec::new();
        strings(&json(&path), &mut all);
        for metric in identifiers(&all.join("\n"), "pubsub.googleapis.com/", "/") {
            assert!(
                PUBSUB_METRIC_TYPES.contains(&metric.as_str()),
                "{} uses {metric}, which is not a Pub/Sub metric type",
                path.display()
            );
            referenced.insert(metric);
        }
    }
    for needed in [
        "subscription/oldest_unacked_message_age",
        "subscription/num_undelivered_messages",
        "subscription/dead_letter_message_count",
        "subscription/expired_ack_deadlines_count",
        "subscription/ack_message_count",
        "subscription/streaming_pull_response_count",
        "subscription/push_request_count",
    ] {
        let full = format!("pubsub.googleapis.com/{needed}");
        assert!(
            referenced.contains(&full),
            "the Pub/Sub dashboard shows {full}"
        );
    }
}

#[test]
fn alert_policies_cover_backlog_age_dead_letters_and_commit_failures() {
    let mut all = Vec::new();
    for path in alert_files() {
        let policy = json(&path);
        assert!(policy["displayName"].is_string(), "{}", path.display());
        assert!(policy["conditions"]
            .as_array()
            .is_some_and(|c| !c.is_empty()));
        assert!(
            policy["documentation"]["content"].is_string(),
            "runbook text in {}",
            path.display()
        );
        strings(&policy, &mut all);
    }
    let text = all.join("\n");
    assert!(text.contains("subscription/oldest_unacked_message_age"));
    assert!(text.contains("subscription/dead_letter_message_count"));
    assert!(text.contains("hotcount_commits_total{outcome=\"failed\"}"));
}
