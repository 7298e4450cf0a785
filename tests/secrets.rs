//! A PostgreSQL password never leaves the binary: not in clap's error for
//! a refused `--store` (flag or environment), not in `--help`, not in an
//! error or a log line of `setup`, `run` or `count` when the server cannot
//! be reached (logging everything, `RUST_LOG=trace`), nor when it comes from
//! a file (`--store-file`, `HOTCOUNT_STORE_FILE`) or is given twice.

use std::process::{Command, Output};

/// URLs the driver accepts, each to a port nothing listens on, with the
/// strings of it that must never be printed.
const FORMS: &[(&str, &[&str])] = &[
    ("postgres://hc:s3cret@127.0.0.1:1/hc", &["s3cret"]),
    ("postgres://hc:Ab/9x@127.0.0.1:1/hc", &["Ab/9x"]),
    (
        "postgres://hc:p%40ss%2Fw0rd@127.0.0.1:1/hc",
        &["p%40ss", "p@ss", "w0rd"],
    ),
    ("postgres://:s3cret@127.0.0.1:1/hc", &["s3cret"]),
    (
        "postgres://hc@127.0.0.1:1/hc?sslmode=disable&password=s3cret",
        &["s3cret"],
    ),
    (
        "postgres://hc@127.0.0.1:1/hc?pass%77ord=s3cret",
        &["s3cret"],
    ),
];

/// The binary with nothing from the environment but `vars`.
fn hotcount(args: &[&str], vars: &[(&str, &str)]) -> Output {
    let mut command = Command::new(env!("CARGO_BIN_EXE_hotcount"));
    command
        .env_clear()
        .env("RUST_LOG", "trace")
        .env("HOTCOUNT_METRICS_ADDR", "off")
        .args(args);
    for (name, value) in vars {
        command.env(name, value);
    }
    command.output().expect("hotcount runs")
}

fn printed(out: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

fn assert_hidden(out: &Output, secrets: &[&str], what: &str) {
    let text = printed(out);
    for secret in secrets {
        assert!(!text.contains(secret), "{what} printed {secret:?}:\n{text}");
    }
}

#[test]
fn a_refused_store_url_is_not_echoed_by_the_flag_or_the_environment() {
    for (url, secrets) in FORMS {
        let join = if url.contains('?') { '&' } else { '?' };
        let bad = format!("{url}{join}sslmode=verify_full");
        for command in ["run", "count", "setup"] {
            let mut args = vec![command, "--store", &bad];
            if command == "count" {
                args.push("p1");
            }
            let out = hotcount(&args, &[]);
            assert!(!out.status.success());
            assert_hidden(&out, secrets, &format!("{command} --store"));
            assert!(printed(&out).contains("verify_full"), "{}", printed(&out));
            let mut args = vec![command];
            if command == "count" {
                args.push("p1");
            }
            let out = hotcount(&args, &[("HOTCOUNT_STORE", &bad)]);
            assert!(!out.status.success());
            assert_hidden(&out, secrets, &format!("{command} with HOTCOUNT_STORE"));
        }
    }
    let out = hotcount(
        &[
            "count",
            "--store",
            "postgres://hc:p@ss@127.0.0.1:1/hc",
            "p1",
        ],
        &[],
    );
    assert!(!out.status.success());
    assert_hidden(&out, &["p@ss", "ss@"], "an unencoded @");
}

#[test]
fn help_does_not_show_the_store_from_the_environment() {
    for command in ["run", "count", "setup", "reconcile"] {
        let out = hotcount(&[command, "--help"], &[("HOTCOUNT_STORE", FORMS[0].0)]);
        assert!(out.status.success(), "{}", printed(&out));
        assert_hidden(&out, FORMS[0].1, &format!("{command} --help"));
    }
}

#[test]
fn an_unreachable_server_is_reported_without_the_password_even_at_trace() {
    for (url, secrets) in FORMS {
        for args in [
            vec!["count", "--store", url, "p1"],
            vec!["setup", "--store", url],
            vec!["run", "--store", url],
            vec!["reconcile", "--store", url],
        ] {
            let out = hotcount(&args, &[]);
            assert!(!out.status.success(), "{args:?}");
            assert!(printed(&out).contains("127.0.0.1"), "{}", printed(&out));
            assert_hidden(&out, secrets, &format!("{args:?}"));
        }
    }
}

/// Writes `text` to a file of its own (as a mounted secret is); its path.
fn secret_file(text: &str) -> std::path::PathBuf {
    static NEXT: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
    let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let path =
        std::env::temp_dir().join(format!("hotcount-secrets-test-{}-{n}", std::process::id()));
    std::fs::write(&path, text).expect("secret file written");
    path
}

#[test]
fn a_store_file_is_used_by_every_command_and_its_password_never_printed() {
    for (url, secrets) in FORMS {
        let file = secret_file(&format!("{url}\n"));
        let path = file.to_str().expect("a UTF-8 path");
        for args in [
            vec!["count", "--store-file", path, "p1"],
            vec!["setup", "--store-file", path],
            vec!["run", "--store-file", path],
            vec!["reconcile", "--store-file", path],
            vec!["users", "export", "--store-file", path, "u1"],
        ] {
            let out = hotcount(&args, &[]);
            assert!(!out.status.success(), "{args:?}");
            // It reached for the server the file names.
            assert!(printed(&out).contains("127.0.0.1"), "{}", printed(&out));
            assert_hidden(&out, secrets, &format!("{args:?}"));
        }
        let out = hotcount(&["count", "p1"], &[("HOTCOUNT_STORE_FILE", path)]);
        assert!(printed(&out).contains("127.0.0.1"), "{}", printed(&out));
        assert_hidden(&out, secrets, "HOTCOUNT_STORE_FILE");
        let _ = std::fs::remove_file(file);
    }
}

#[test]
fn a_store_given_twice_is_refused_without_echoing_either() {
    let (url, secrets) = FORMS[0];
    let file = secret_file(url);
    let path = file.to_str().expect("a UTF-8 path");
    for (args, vars) in [
        (
            vec!["count", "--store", url, "--store-file", path, "p1"],
            vec![],
        ),
        (
            vec!["count", "p1"],
            vec![("HOTCOUNT_STORE", url), ("HOTCOUNT_STORE_FILE", path)],
        ),
        (
            vec!["run", "--store-file", path],
            vec![("HOTCOUNT_STORE", url)],
        ),
    ] {
        let out = hotcount(&args, &vars);
        assert!(!out.status.success(), "{args:?} {vars:?}");
        let text = printed(&out);
        assert!(
            text.contains("--store-file") && text.contains("cannot be used with"),
            "{text}"
        );
        assert_hidden(&out, secrets, &format!("{args:?} {vars:?}"));
    }
    let _ = std::fs::remove_file(file);
}

#[test]
fn a_secret_file_that_cannot_be_read_is_named() {
    let missing = std::env::temp_dir().join("hotcount-secrets-test-missing");
    let path = missing.to_str().expect("a UTF-8 path");
    for flag in [
        "--store-file",
        "--milestone-webhook-secret-file",
        "--user-hash-key-file",
    ] {
        let out = hotcount(&["run", flag, path], &[]);
        assert!(!out.status.success(), "{flag}");
        let text = printed(&out);
        assert!(
            text.contains(flag) && text.contains(path) && text.contains("cannot read"),
            "{text}"
        );
    }
}
