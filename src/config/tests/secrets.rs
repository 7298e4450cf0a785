//! Secrets and the store URL: read from their files, refused together
//! with their value, never shown (`Debug`, `Display`, logs, parse errors)
//! but kept whole in the flags that reproduce them.

use super::*;

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
        config.target.store,
        StoreLocation::Postgres {
            url: "postgres://hc:s3cret@127.0.0.1:5432/hc".into()
        }
    );
    let milestones = config.milestones.notify.as_ref().expect("a webhook");
    let shown = |s: &Option<Secret>| s.as_ref().map(|s| s.expose().to_string());
    assert_eq!(shown(&milestones.secret).as_deref(), Some("whsec-new"));
    assert_eq!(
        shown(&milestones.previous_secret).as_deref(),
        Some("whsec-old")
    );
    assert_eq!(shown(&config.erasure.user_hash_key).as_deref(), Some("k3y"));
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
