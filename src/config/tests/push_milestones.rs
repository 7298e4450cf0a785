//! Push, rollup and milestone settings: read only when they apply, and
//! refused with their flag when they cannot work.

use super::*;

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
    assert!(parse(&[]).unwrap().milestones.notify.is_none());
    assert!(
        parse(&["--milestones", "junk"]).is_err(),
        "checked without a webhook too"
    );
    assert_eq!(
        parse(&["--milestones", "5,50"]).unwrap().milestones.given,
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
    .notify
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
    .notify
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
    let secret = config
        .milestones
        .notify
        .and_then(|m| m.secret)
        .expect("a secret");
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
