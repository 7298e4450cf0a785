//! The flags: defaults valid, every flag round-trips through
//! [`RunArgs::to_flags`], and a bad value names its flag.

use super::*;
use clap::Parser;

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
    changed.subscription = "s2".into();
    changed.consumer = "c2".into();
    changed.shards = 3;
    changed.counter_shards = 5;
    changed.counter_shard_target_writes_per_sec = 7;
    changed.flush_interval_ms = 11;
    changed.flush_min_wait_ms = 2;
    changed.max_commits_in_flight = 13;
    changed.max_batch_events = 17;
    changed.max_outstanding_messages = 19;
    changed.max_outstanding_bytes = 23_000;
    changed.streams = 29;
    changed.lease_extension_secs = 31;
    changed.commit_max_attempts = 37;
    changed.commit_backoff_initial_ms = 41;
    changed.commit_backoff_max_ms = 43;
    changed.marker_ttl_days = 47;
    changed.marker_cleanup_interval_secs = 61;
    changed.marker_cleanup_batch_rows = 67;
    changed.shutdown_deadline_secs = 53;
    changed.log_json = true;
    changed.strategy = Strategy::PerEvent;
    changed.per_event_concurrency = 59;
    changed.metrics_addr = "127.0.0.1:0".into();
    changed.metrics_allow_remote = true;
    changed.rollup_interval_ms = 71;
    changed.rollup_sweep_lookback_secs = 73;
    changed.delivery = Delivery::Push;
    changed.push_addr = "127.0.0.1:8089".into();
    changed.push_auth = PushAuthMode::CloudRun;
    changed.push_audience = "https://hotcount.example/pubsub/push".into();
    changed.push_service_account = "push@p.iam.gserviceaccount.com".into();
    changed.push_jwks_url = "http://127.0.0.1:1/certs".into();
    changed.push_max_in_flight = 71;
    // A setting added later and not changed here would prove nothing.
    let (before, after) = (
        serde_json::to_value(&defaults).expect("json"),
        serde_json::to_value(&changed).expect("json"),
    );
    for (key, value) in before.as_object().expect("an object") {
        assert_ne!(
            &after[key], value,
            "{key} is left at its default: change it above"
        );
    }
    let argv = std::iter::once("hotcount".to_string()).chain(changed.to_flags());
    assert_eq!(Cli::parse_from(argv).run, changed);
}

#[test]
fn defaults_are_valid() {
    let c = parse(&[]).unwrap();
    assert_eq!(
        c.subscription,
        "projects/hotcount-local/subscriptions/likes-hotcount"
    );
    assert_eq!(c.flush_interval, Duration::from_millis(100));
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
fn metrics_endpoint_is_loopback_unless_remote_is_allowed() {
    assert_eq!(
        parse(&[]).unwrap().metrics_addr,
        Some("127.0.0.1:9464".parse().unwrap())
    );
    assert_eq!(
        parse(&["--metrics-addr", "off"]).unwrap().metrics_addr,
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
    let source = c.source();
    assert_eq!((source.streams, source.held_max_messages), (3, 21));
    // `FlushConfig::default()` (what tests build on) is the flags' defaults.
    assert_eq!(
        format!("{:?}", c.flush()),
        format!("{:?}", FlushConfig::default())
    );
    assert_eq!(c.store().consumer, "hotcount");
    let per_event = parse(&["--strategy", "per-event", "--per-event-concurrency", "9"]).unwrap();
    let flush = per_event.flush();
    assert_eq!(flush.flush_interval, Duration::ZERO);
    assert_eq!(flush.max_commits_in_flight, 9);
}

#[test]
fn store_location_parses_firestore_and_postgres_urls_and_refuses_the_rest() {
    assert_eq!("firestore".parse(), Ok(StoreLocation::Firestore));
    assert_eq!(
        "postgresql://hc@localhost/hc".parse(),
        Ok(StoreLocation::Postgres {
            url: "postgresql://hc@localhost/hc".into()
        })
    );
    assert!("mysql://localhost/hc".parse::<StoreLocation>().is_err());
    assert!("postgres://host:notaport/db"
        .parse::<StoreLocation>()
        .is_err());
}

#[test]
fn store_location_hides_the_password_in_logs_but_not_in_flags() {
    let url = "postgres://hc:s3cret@db.internal:5432/hc?sslmode=require";
    let store: StoreLocation = url.parse().expect("a postgres url");
    assert_eq!(
        store.to_string(),
        "postgres://hc:***@db.internal:5432/hc?sslmode=require"
    );
    assert!(!format!("{store:?}").contains("s3cret"));
    assert_eq!(
        serde_json::to_value(&store).expect("json"),
        serde_json::Value::String(url.into())
    );
}

#[test]
fn push_settings_are_read_only_with_push_delivery() {
    assert!(parse(&[]).unwrap().push.is_none(), "pull is the default");
    // Pull ignores the push flags, even incomplete ones.
    assert!(parse(&["--push-addr", "not an address"])
        .unwrap()
        .push
        .is_none());
    let push = parse(&[
        "--delivery",
        "push",
        "--push-audience",
        "https://h.example/pubsub/push",
        "--push-service-account",
        "push@p.iam.gserviceaccount.com",
    ])
    .unwrap()
    .push
    .expect("push settings");
    assert_eq!(push.addr, "127.0.0.1:8080".parse().unwrap());
    assert_eq!(push.max_in_flight, 1000);
    match push.auth {
        AuthConfig::Google(google) => {
            assert_eq!(google.jwks_url, DEFAULT_PUSH_JWKS_URL);
            assert_eq!(google.service_account, "push@p.iam.gserviceaccount.com");
        }
        other => panic!("google is the default, not {other:?}"),
    }
}

#[test]
fn google_push_auth_needs_an_audience_and_a_service_account() {
    let base = ["--delivery", "push", "--push-addr", "0.0.0.0:8080"];
    let with = |extra: &[&str]| {
        let mut args = base.to_vec();
        args.extend_from_slice(extra);
        parse(&args)
    };
    assert_eq!(with(&[]).unwrap_err().flag, "push-audience");
    assert_eq!(
        with(&["--push-audience", "a"]).unwrap_err().flag,
        "push-service-account"
    );
    assert_eq!(
        with(&[
            "--push-audience",
            "a",
            "--push-service-account",
            "s@p.iam.gserviceaccount.com",
            "--push-jwks-url",
            "file:///etc/keys"
        ])
        .unwrap_err()
        .flag,
        "push-jwks-url"
    );
    assert_eq!(
        with(&["--push-auth", "cloud-run", "--push-max-in-flight", "0"])
            .unwrap_err()
            .flag,
        "push-max-in-flight"
    );
    assert!(with(&["--push-auth", "cloud-run"]).is_ok());
}

#[test]
fn unauthenticated_push_is_refused_unless_the_address_is_loopback() {
    let none = |addr: &str| {
        parse(&[
            "--delivery",
            "push",
            "--push-auth",
            "none",
            "--push-addr",
            addr,
        ])
    };
    assert_eq!(none("0.0.0.0:8080").unwrap_err().flag, "push-auth");
    assert_eq!(none("10.1.2.3:8080").unwrap_err().flag, "push-auth");
    assert!(matches!(
        none("127.0.0.1:0").unwrap().push.map(|p| p.auth),
        Some(AuthConfig::None)
    ));
    assert!(none("[::1]:8080").is_ok());
    assert_eq!(none("localhost:8080").unwrap_err().flag, "push-addr");
}

#[test]
fn rollups_refresh_once_a_second_by_default_and_zero_turns_them_off() {
    let rollup = parse(&[]).unwrap().rollup().expect("on by default");
    assert_eq!(rollup.interval, Duration::from_secs(1));
    assert_eq!(rollup.sweep_lookback, Some(Duration::from_secs(900)));
    assert_eq!(rollup.max_shards, 16);
    assert!(parse(&["--rollup-interval-ms", "0"])
        .unwrap()
        .rollup()
        .is_none());
    let no_sweep = parse(&["--rollup-sweep-lookback-secs", "0"]).unwrap();
    assert_eq!(no_sweep.rollup().map(|r| r.sweep_lookback), Some(None));
    assert_eq!(
        parse(&["--rollup-interval-ms", "5"]).unwrap_err().flag,
        "rollup-interval-ms"
    );
}
