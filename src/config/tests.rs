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
    changed.store_call_timeout_ms = 2_500;
    changed.stuck_commit_threshold_secs = 71;
    changed.milestones = Some("5,50".into());
    changed.milestone_webhook = Some("http://127.0.0.1:9/hook".into());
    changed.milestone_webhook_secret = Some("s3cret".into());
    changed.milestone_webhook_previous_secret = Some("0ld-s3cret".into());
    changed.milestone_webhook_timeout_ms = 79;
    changed.milestone_lease_secs = 83;
    changed.user_hash_key = Some("k3y".into());
    changed.tombstone_refresh_ms = 700;
    changed.milestone_retry_initial_ms = 89;
    changed.milestone_retry_max_ms = 97_000;
    changed.delivery = Delivery::Push;
    changed.push_addr = "127.0.0.1:8089".into();
    changed.push_auth = PushAuthMode::CloudRun;
    changed.push_audience = "https://hotcount.example/pubsub/push".into();
    changed.push_service_account = "push@p.iam.gserviceaccount.com".into();
    changed.push_jwks_url = "http://127.0.0.1:1/certs".into();
    changed.push_max_in_flight = 71;
    changed.push_max_connections = 97;
    changed.push_header_read_timeout_ms = 1_234;
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
fn secrets_are_read_from_their_files_without_the_trailing_line_break() {
    let store = secret_file("postgres://hc:s3cret@127.0.0.1:5432/hc\n");
    let webhook = secret_file("whsec-new\r\n");
    let previous = secret_file("whsec-old");
    let key = secret_file("k3y\n\n");
    let run = Cli::parse_from([
        "hotcount",
        "--store-file",
        path(&store),
        "--milestone-webhook",
        "http://127.0.0.1:9/h",
        "--milestone-webhook-secret-file",
        path(&webhook),
        "--milestone-webhook-previous-secret-file",
        path(&previous),
        "--user-hash-key-file",
        path(&key),
    ])
    .run;
    let config = run.validate().expect("valid");
    assert_eq!(
        config.store_location,
        StoreLocation::Postgres {
            url: "postgres://hc:s3cret@127.0.0.1:5432/hc".into()
        }
    );
    let milestones = config.milestones.as_ref().expect("a webhook");
    let shown = |s: &Option<Secret>| s.as_ref().map(|s| s.expose().to_string());
    assert_eq!(shown(&milestones.secret).as_deref(), Some("whsec-new"));
    assert_eq!(
        shown(&milestones.previous_secret).as_deref(),
        Some("whsec-old")
    );
    assert_eq!(shown(&config.user_hash_key).as_deref(), Some("k3y"));
    let debug = format!("{run:?} {config:?}");
    for secret in ["s3cret", "whsec", "k3y"] {
        assert!(!debug.contains(secret), "{secret} in {debug}");
    }
    // A child started with these flags reads the same files: their paths
    // go on its command line, never the secrets they hold.
    let flags = run.to_flags().join(" ");
    assert!(flags.contains(&format!(
        "--milestone-webhook-secret-file={}",
        path(&webhook)
    )));
    assert!(!flags.contains("whsec"), "{flags}");
}

#[test]
fn a_value_and_its_file_together_are_refused() {
    let file = secret_file("postgres://hc:s3cret@127.0.0.1:5432/hc");
    for (value, with_file) in [
        ("--store", "--store-file"),
        (
            "--milestone-webhook-secret",
            "--milestone-webhook-secret-file",
        ),
        (
            "--milestone-webhook-previous-secret",
            "--milestone-webhook-previous-secret-file",
        ),
        ("--user-hash-key", "--user-hash-key-file"),
    ] {
        let refused = Cli::try_parse_from([
            "hotcount",
            value,
            "postgres://hc:pw@127.0.0.1/hc",
            with_file,
            path(&file),
        ])
        .err()
        .unwrap_or_else(|| panic!("{value} with {with_file} was accepted"));
        assert_eq!(refused.kind(), clap::error::ErrorKind::ArgumentConflict);
        let text = refused.to_string();
        assert!(text.contains(value) && text.contains(with_file), "{text}");
        assert!(!text.contains("s3cret") && !text.contains("pw@"), "{text}");
    }
}

#[test]
fn a_missing_empty_or_bad_secret_file_is_refused_naming_the_path_not_the_content() {
    let missing = std::env::temp_dir().join("hotcount-no-such-secret-file");
    let empty = secret_file("\n");
    let bad_url = secret_file("postgres://hc:s3cret@127.0.0.1:1/hc?sslmode=verify_full\n");
    let cases: [(&str, &std::path::Path, &str); 4] = [
        ("--store-file", &missing, "cannot read"),
        ("--milestone-webhook-secret-file", &empty, "is empty"),
        ("--user-hash-key-file", &empty, "is empty"),
        ("--store-file", &bad_url, "verify_full"),
    ];
    for (flag, file, why) in cases {
        let refused = Cli::try_parse_from(["hotcount", flag, path(file)])
            .err()
            .unwrap_or_else(|| panic!("{flag} {} was accepted", file.display()));
        let text = refused.to_string();
        assert!(text.contains(flag), "{text}");
        assert!(text.contains(path(file)), "names the path: {text}");
        assert!(text.contains(why), "says why: {text}");
        assert!(!text.contains("s3cret"), "quotes the content: {text}");
    }
}

#[test]
fn a_previous_webhook_secret_needs_the_new_one() {
    let refused = parse(&[
        "--milestone-webhook",
        "http://127.0.0.1:9/h",
        "--milestone-webhook-previous-secret",
        "old",
    ])
    .unwrap_err();
    assert_eq!(refused.flag, "milestone-webhook-previous-secret");
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
fn backoff_and_store_timeouts_are_bounded_and_consistent() {
    let c = parse(&[]).unwrap();
    assert_eq!(c.store_call_timeout, Duration::from_secs(10));
    assert_eq!(c.stuck_commit_threshold, Duration::from_secs(30));
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
    assert_eq!(c.stuck_commit_threshold, Duration::from_secs(1));
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

/// Every form of password the driver reads, with the strings that must
/// never be printed (as written and decoded).
pub(crate) const PASSWORD_FORMS: &[(&str, &[&str])] = &[
    ("postgres://hc:s3cret@127.0.0.1:1/hc", &["s3cret"]),
    ("postgres://hc:Ab/9x@127.0.0.1:1/hc", &["Ab/9x", "Ab"]),
    (
        "postgresql://hc:p%40ss:w0rd@127.0.0.1:1/hc",
        &["p%40ss", "p@ss", "w0rd"],
    ),
    ("postgres://:s3cret@127.0.0.1:1/hc", &["s3cret"]),
    (
        "postgres://hc:s3%2Fcr%40t@127.0.0.1:1/hc",
        &["s3%2Fcr%40t", "s3/cr@t"],
    ),
    (
        "postgres://hc@127.0.0.1:1/hc?sslmode=disable&password=s3cret",
        &["s3cret"],
    ),
    (
        "postgres://hc@127.0.0.1:1/hc?pass%77ord=s3cret",
        &["s3cret"],
    ),
    (
        "postgres://hc:one1@127.0.0.1:1/hc?password=two2",
        &["one1", "two2"],
    ),
];

fn assert_hidden(text: &str, secrets: &[&str], what: &str) {
    for secret in secrets {
        assert!(!text.contains(secret), "{what} shows {secret:?}: {text}");
    }
}

/// What a tracing subscriber printed while `f` ran.
fn logged(f: impl FnOnce()) -> String {
    let buffer = std::sync::Arc::new(parking_lot::Mutex::new(Vec::<u8>::new()));
    let sink = buffer.clone();
    let subscriber = tracing_subscriber::fmt()
        .with_ansi(false)
        .with_max_level(tracing::Level::TRACE)
        .with_writer(move || Sink(sink.clone()))
        .finish();
    tracing::subscriber::with_default(subscriber, f);
    let bytes = buffer.lock().clone();
    String::from_utf8_lossy(&bytes).into_owned()
}

struct Sink(std::sync::Arc<parking_lot::Mutex<Vec<u8>>>);

impl std::io::Write for Sink {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

#[test]
fn every_password_form_is_hidden_in_display_debug_and_logs_but_kept_in_flags() {
    for (url, secrets) in PASSWORD_FORMS {
        let run = Cli::try_parse_from(["hotcount", "--store", url])
            .unwrap_or_else(|e| panic!("{url}: {e}"))
            .run;
        let config = run.validate().expect("valid");
        let store = &run.target.store;
        assert!(store.to_string().contains("***"), "{store}");
        assert_hidden(&store.to_string(), secrets, "Display");
        assert_hidden(&format!("{store:?}"), secrets, "Debug");
        assert_hidden(&format!("{run:?}"), secrets, "RunArgs' Debug");
        assert_hidden(&format!("{config:?}"), secrets, "Config's Debug");
        let pg = crate::store::postgres::PgDbConfig::new(*url);
        assert_hidden(&format!("{pg:?}"), secrets, "PgDbConfig's Debug");
        let log = logged(|| {
            tracing::info!(store = %store, ?config, target = ?run.target, "starting");
        });
        assert!(log.contains("starting"), "{log}");
        assert_hidden(&log, secrets, "a log line");
        // `to_flags` must reproduce the URL whole (it goes to a child's argv, never a log).
        assert!(run.to_flags().contains(&format!("--store={url}")));
    }
}

/// Forms the driver refuses whole (an unencoded `@` in the password makes
/// the rest of it a host name).
const REFUSED_FORMS: &[(&str, &[&str])] = &[
    ("postgres://hc:p@ss@127.0.0.1:1/hc", &["p@ss", "ss@"]),
    (
        "postgres://hc:pw@127.0.0.1:1/hc?password=a&b=c",
        &["pw", "a&b", "b=c"],
    ),
];

#[test]
fn a_refused_store_url_is_never_quoted_by_the_parse_error() {
    for (url, secrets) in REFUSED_FORMS {
        let error = match Cli::try_parse_from(["hotcount", "--store", url]) {
            Ok(_) => panic!("{url} was accepted"),
            Err(e) => e.to_string(),
        };
        assert_hidden(&error, secrets, "clap's error");
    }
    for (url, secrets) in PASSWORD_FORMS {
        let join = if url.contains('?') { '&' } else { '?' };
        for bad in ["sslmode=verify_full", "sslmde=require", "port=x"] {
            let given = format!("{url}{join}{bad}");
            let error = match Cli::try_parse_from(["hotcount", "--store", &given]) {
                Ok(_) => panic!("{given} was accepted"),
                Err(e) => e.to_string(),
            };
            assert_hidden(&error, secrets, "clap's error");
            assert!(error.contains("--store"), "{error}");
            assert!(
                !error.contains("127.0.0.1:1"),
                "no part of the URL: {error}"
            );
        }
    }
    // The problem is named when no password can be mistaken for it.
    let error = Cli::try_parse_from(["hotcount", "--store", "postgres://h/db?sslmode=verify_full"])
        .err()
        .expect("refused")
        .to_string();
    assert!(error.contains("verify_full"), "{error}");
    let error = Cli::try_parse_from(["hotcount", "--store", "postgres://h/db?sslmde=x"])
        .err()
        .expect("refused")
        .to_string();
    assert!(error.contains("sslmde"), "{error}");
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
    let google = [
        "--push-audience",
        "a",
        "--push-service-account",
        "s@p.iam.gserviceaccount.com",
    ];
    let flag_of = |extra: &[&str]| {
        let mut args = google.to_vec();
        args.extend_from_slice(extra);
        with(&args).map(|_| ()).map_err(|e| e.flag)
    };
    assert_eq!(
        flag_of(&["--push-max-in-flight", "0"]),
        Err("push-max-in-flight")
    );
    assert_eq!(
        flag_of(&[
            "--push-max-in-flight",
            "100",
            "--push-max-connections",
            "99"
        ]),
        Err("push-max-connections"),
        "a request held needs a connection"
    );
    assert_eq!(
        flag_of(&["--push-header-read-timeout-ms", "99"]),
        Err("push-header-read-timeout-ms")
    );
    assert_eq!(flag_of(&[]), Ok(()));
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

#[test]
fn milestones_are_off_without_a_webhook_and_checked_with_one() {
    assert!(parse(&[]).unwrap().milestones.is_none());
    assert!(
        parse(&["--milestones", "junk"]).is_err(),
        "checked without a webhook too"
    );
    assert_eq!(
        parse(&["--milestones", "5,50"]).unwrap().milestones_given,
        Some(vec![5, 50])
    );
    let on = parse(&[
        "--milestone-webhook",
        "http://127.0.0.1:9/h",
        "--milestones",
        "10, 20",
    ])
    .unwrap()
    .milestones
    .expect("on");
    assert_eq!(on.thresholds, vec![10, 20]);
    assert_eq!(
        on.dispatch().backoff_max,
        Duration::from_secs(300),
        "5 minutes by default"
    );
    let capped = parse(&[
        "--milestone-webhook",
        "http://127.0.0.1:9/h",
        "--milestone-retry-max-ms",
        "2000",
    ])
    .unwrap()
    .milestones
    .expect("on");
    assert_eq!(capped.dispatch().backoff_max, Duration::from_secs(2));
    let hook = ["--milestone-webhook", "http://127.0.0.1:9/h"];
    for (bad, flag) in [
        (vec!["--milestones", "20,10"], "milestones"),
        (vec!["--milestones", "0,10"], "milestones"),
        (vec!["--milestones", "x"], "milestones"),
        (vec!["--rollup-interval-ms", "0"], "milestone-webhook"),
        (vec!["--milestone-lease-secs", "5"], "milestone-lease-secs"),
        (
            vec![
                "--milestone-retry-initial-ms",
                "500",
                "--milestone-retry-max-ms",
                "400",
            ],
            "milestone-retry-max-ms",
        ),
    ] {
        let mut args = hook.to_vec();
        args.extend(bad);
        assert_eq!(parse(&args).unwrap_err().flag, flag, "{args:?}");
    }
    assert_eq!(
        parse(&["--milestone-webhook", "ftp://x/"])
            .unwrap_err()
            .flag,
        "milestone-webhook"
    );
}

#[test]
fn the_webhook_secret_never_shows_in_debug_output() {
    let config = parse(&[
        "--milestone-webhook",
        "http://127.0.0.1:9/h",
        "--milestone-webhook-secret",
        "hunter2-s3cret",
    ])
    .unwrap();
    assert!(!format!("{config:?}").contains("hunter2"));
    let secret = config.milestones.and_then(|m| m.secret).expect("a secret");
    assert_eq!(secret.expose(), "hunter2-s3cret");
}

#[test]
fn cloud_run_push_auth_is_refused_off_cloud_run_unless_the_address_is_loopback() {
    let cloud_run = |addr: &str, on_cloud_run: bool| {
        let args = [
            "hotcount",
            "--delivery",
            "push",
            "--push-auth",
            "cloud-run",
            "--push-addr",
            addr,
        ];
        Cli::parse_from(args).run.validate_where(on_cloud_run)
    };
    let refused =
        cloud_run("0.0.0.0:8080", false).expect_err("trusting every request off Cloud Run");
    assert_eq!(refused.flag, "push-auth");
    assert!(refused.reason.contains("K_SERVICE"), "{}", refused.reason);
    assert!(
        cloud_run("127.0.0.1:8080", false).is_ok(),
        "loopback is allowed"
    );
    let on_cloud_run = cloud_run("0.0.0.0:8080", true).expect("Cloud Run's front end checks");
    assert_eq!(
        on_cloud_run.push.map(|p| p.auth),
        Some(AuthConfig::CloudRun)
    );
}
