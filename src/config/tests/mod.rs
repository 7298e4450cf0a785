//! The flags: defaults valid, every flag round-trips through
//! [`RunArgs::to_flags`], and a bad value names its flag.

use super::*;
use clap::Parser;
use std::time::Duration;

#[derive(Parser)]
struct Cli {
    #[command(flatten)]
    run: RunArgs,
}

fn parse(args: &[&str]) -> Result<Config, ConfigError> {
    let mut all = vec!["hotcount"];
    all.extend_from_slice(args);
    Cli::parse_from(all).run.validate()
}

#[test]
fn flags_reproduce_every_setting() {
    let defaults = Cli::parse_from(["hotcount"]).run;
    assert_eq!(
        Cli::parse_from(std::iter::once("hotcount".to_string()).chain(defaults.to_flags())).run,
        defaults
    );
    // Every setting away from its default, each a different value.
    let mut changed = defaults.clone();
    changed.target.store = StoreLocation::Postgres {
        url: "postgres://u:secret@127.0.0.1:5433/hc".into(),
    };
    changed.target.project = "p2".into();
    changed.target.database = "db2".into();
    changed.target.collection_prefix = "x_".into();
    changed.identity.subscription = "s2".into();
    changed.identity.consumer = "c2".into();
    changed.flush.shards = 3;
    changed.store_writes.counter_shards = 5;
    changed.store_writes.counter_shard_target_writes_per_sec = 7;
    changed.flush.flush_interval_ms = 11;
    changed.flush.flush_min_wait_ms = 2;
    changed.flush.max_commits_in_flight = 13;
    changed.flush.max_batch_events = 17;
    changed.source.max_outstanding_messages = 19;
    changed.source.max_outstanding_bytes = 23_000;
    changed.source.streams = 29;
    changed.source.lease_extension_secs = 31;
    changed.flush.commit_max_attempts = 37;
    changed.flush.commit_backoff_initial_ms = 41;
    changed.flush.commit_backoff_max_ms = 43;
    changed.store_writes.marker_ttl_days = 47;
    changed.store_writes.marker_cleanup_interval_secs = 61;
    changed.store_writes.marker_cleanup_batch_rows = 67;
    changed.flush.shutdown_deadline_secs = 53;
    changed.observability.log_json = true;
    changed.flush.strategy = Strategy::PerEvent;
    changed.flush.per_event_concurrency = 59;
    changed.observability.metrics_addr = "127.0.0.1:0".into();
    changed.observability.metrics_allow_remote = true;
    changed.rollups.rollup_interval_ms = 71;
    changed.rollups.rollup_sweep_lookback_secs = 73;
    changed.store_writes.store_call_timeout_ms = 2_500;
    changed.store_writes.known_memberships_entries = 4_321;
    changed.observability.stuck_commit_threshold_secs = 71;
    changed.milestones.milestones = Some("5,50".into());
    changed.milestones.milestone_webhook = Some("http://127.0.0.1:9/hook".into());
    changed.milestones.milestone_webhook_secret = Some("s3cret".into());
    changed.milestones.milestone_webhook_previous_secret = Some("0ld-s3cret".into());
    changed.milestones.milestone_webhook_timeout_ms = 79;
    changed.milestones.milestone_lease_secs = 83;
    changed.erasure.key.user_hash_key = Some("k3y".into());
    changed.erasure.tombstone_refresh_ms = 700;
    changed.milestones.milestone_retry_initial_ms = 89;
    changed.milestones.milestone_retry_max_ms = 97_000;
    changed.push.delivery = Delivery::Push;
    changed.push.push_addr = "127.0.0.1:8089".into();
    changed.push.push_auth = PushAuthMode::CloudRun;
    changed.push.push_audience = "https://hotcount.example/pubsub/push".into();
    changed.push.push_service_account = "push@p.iam.gserviceaccount.com".into();
    changed.push.push_jwks_url = "http://127.0.0.1:1/certs".into();
    changed.push.push_max_in_flight = 71;
    changed.push.push_max_connections = 97;
    changed.push.push_header_read_timeout_ms = 1_234;
    // The file forms, which conflict with the values above.
    let (webhook, previous, key) = (
        secret_file("webhook\n"),
        secret_file("previous\n"),
        secret_file("key\n"),
    );
    let from_files = Cli::parse_from([
        "hotcount",
        "--milestone-webhook-secret-file",
        path(&webhook),
        "--milestone-webhook-previous-secret-file",
        path(&previous),
        "--user-hash-key-file",
        path(&key),
    ])
    .run;
    // A setting added later and not changed here would prove nothing.
    let (before, after, files) = (
        serde_json::to_value(&defaults).expect("json"),
        serde_json::to_value(&changed).expect("json"),
        serde_json::to_value(&from_files).expect("json"),
    );
    for (key, value) in before.as_object().expect("an object") {
        assert!(
            &after[key] != value || &files[key] != value,
            "{key} is left at its default: change it above"
        );
    }
    for args in [changed, from_files] {
        let argv = std::iter::once("hotcount".to_string()).chain(args.to_flags());
        assert_eq!(Cli::parse_from(argv).run, args);
    }
}

/// Writes `text` to a file of its own (as a mounted secret is); its path.
fn secret_file(text: &str) -> std::path::PathBuf {
    static NEXT: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
    let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let file =
        std::env::temp_dir().join(format!("hotcount-config-secret-{}-{n}", std::process::id()));
    std::fs::write(&file, text).expect("secret file written");
    file
}

fn path(file: &std::path::Path) -> &str {
    file.to_str().expect("a UTF-8 path")
}

#[test]
fn defaults_are_valid() {
    let c = parse(&[]).unwrap();
    assert_eq!(
        c.subscription,
        "projects/hotcount-local/subscriptions/likes-hotcount"
    );
    assert_eq!(c.flush.flusher.flush_interval, Duration::from_millis(100));
}

#[test]
fn out_of_range_settings_name_their_flag() {
    assert_eq!(parse(&["--shards", "0"]).unwrap_err().flag, "shards");
    assert_eq!(
        parse(&["--lease-extension-secs", "5"]).unwrap_err().flag,
        "lease-extension-secs"
    );
    assert_eq!(parse(&["--consumer", "a/b"]).unwrap_err().flag, "consumer");
    assert_eq!(
        parse(&["--subscription", "goog-x"]).unwrap_err().flag,
        "subscription"
    );
}

#[test]
fn backoff_and_store_timeouts_are_bounded_and_consistent() {
    let c = parse(&[]).unwrap();
    assert_eq!(c.store.call_timeout, Duration::from_secs(10));
    assert_eq!(
        c.observability.stuck_commit_threshold,
        Duration::from_secs(30)
    );
    // A backoff of minutes would outlast the lease and the shutdown deadline.
    let refused = parse(&["--commit-backoff-max-ms", "600000"]).unwrap_err();
    assert_eq!(refused.flag, "commit-backoff-max-ms");
    assert!(parse(&["--commit-backoff-max-ms", "60000"]).is_ok());
    let refused = parse(&[
        "--commit-backoff-initial-ms",
        "500",
        "--commit-backoff-max-ms",
        "100",
    ])
    .unwrap_err();
    assert_eq!(
        refused.flag, "commit-backoff-max-ms",
        "below the initial backoff"
    );
    assert_eq!(
        parse(&["--store-call-timeout-ms", "50"]).unwrap_err().flag,
        "store-call-timeout-ms"
    );
    // A threshold shorter than one call would call a slow commit a stall.
    let refused = parse(&[
        "--store-call-timeout-ms",
        "20000",
        "--stuck-commit-threshold-secs",
        "10",
    ])
    .unwrap_err();
    assert_eq!(refused.flag, "stuck-commit-threshold-secs");
    assert!(refused.reason.contains("20"), "{}", refused.reason);
    let c = parse(&[
        "--store-call-timeout-ms",
        "500",
        "--stuck-commit-threshold-secs",
        "1",
    ])
    .unwrap();
    assert_eq!(
        c.observability.stuck_commit_threshold,
        Duration::from_secs(1)
    );
}

#[test]
fn a_bad_call_timeout_is_named_not_the_threshold_it_bounds() {
    // The threshold's floor is the validated timeout: a timeout out of
    // range is reported as such, not as a default threshold below it.
    assert_eq!(
        parse(&["--store-call-timeout-ms", "700000"])
            .unwrap_err()
            .flag,
        "store-call-timeout-ms"
    );
}

#[test]
fn metrics_endpoint_is_loopback_unless_remote_is_allowed() {
    assert_eq!(
        parse(&[]).unwrap().observability.metrics_addr,
        Some("127.0.0.1:9464".parse().unwrap())
    );
    assert_eq!(
        parse(&["--metrics-addr", "off"])
            .unwrap()
            .observability
            .metrics_addr,
        None
    );
    assert_eq!(
        parse(&["--metrics-addr", "0.0.0.0:8080"]).unwrap_err().flag,
        "metrics-addr"
    );
    assert!(parse(&["--metrics-addr", "0.0.0.0:8080", "--metrics-allow-remote"]).is_ok());
    assert!(parse(&["--metrics-addr", "[::1]:0"]).is_ok());
}

#[test]
fn full_subscription_names_are_kept() {
    let c = parse(&["--subscription", "projects/other/subscriptions/sub-1"]).unwrap();
    assert_eq!(c.subscription, "projects/other/subscriptions/sub-1");
}

#[test]
fn each_stage_gets_its_own_settings_and_per_event_flushes_each_message_at_once() {
    let c = parse(&["--streams", "3", "--max-outstanding-messages", "7"]).unwrap();
    let source = &c.source;
    assert_eq!((source.streams, source.held_max_messages), (3, 21));
    // `FlushConfig::default()` (what tests build on) is the flags' defaults.
    assert_eq!(
        format!("{:?}", c.flush.flusher),
        format!("{:?}", FlushConfig::default())
    );
    assert_eq!(c.store.settings.consumer, "hotcount");
    let per_event = parse(&["--strategy", "per-event", "--per-event-concurrency", "9"]).unwrap();
    let flush = &per_event.flush.flusher;
    assert_eq!(flush.flush_interval, Duration::ZERO);
    assert_eq!(flush.max_commits_in_flight, 9);
}

mod push_milestones;
mod secrets;
