//! TLS to a real PostgreSQL server (a throwaway cluster with `ssl=on` and a
//! certificate from a test CA made with the `openssl` command): each
//! `sslmode` encrypts and authenticates the server as libpq's does, a
//! verifying mode is refused without a root certificate, and a password is
//! never sent in cleartext to a server that is not authenticated.

#[path = "support/postgres.rs"]
mod pg;

use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::Command;

use hotcount::store::postgres::{PgDb, PgDbConfig};
use hotcount::store::StoreError;

/// A CA, another CA, and a server certificate for `IP:127.0.0.1` only,
/// signed by the first; the files readable by the server's user.
struct Certificates {
    dir: PathBuf,
}

impl Certificates {
    fn make() -> Self {
        // One directory per call: the tests of this file run in parallel.
        static MADE: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
        let n = MADE.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let dir = std::env::temp_dir().join(format!("hotcount-tls-{}-{n}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir(&dir).expect("create the certificate dir");
        let ca = |name: &str| {
            openssl(
                &dir,
                &[
                    "req",
                    "-x509",
                    "-newkey",
                    "ec",
                    "-pkeyopt",
                    "ec_paramgen_curve:prime256v1",
                    "-nodes",
                    "-days",
                    "2",
                    "-subj",
                    &format!("/CN={name}"),
                    "-addext",
                    "basicConstraints=critical,CA:TRUE",
                    "-addext",
                    "keyUsage=critical,keyCertSign,cRLSign",
                    "-keyout",
                    &format!("{name}.key"),
                    "-out",
                    &format!("{name}.pem"),
                ],
            );
        };
        ca("ca");
        ca("other-ca");
        openssl(
            &dir,
            &[
                "req",
                "-newkey",
                "ec",
                "-pkeyopt",
                "ec_paramgen_curve:prime256v1",
                "-nodes",
                "-subj",
                "/CN=127.0.0.1",
                "-keyout",
                "server.key",
                "-out",
                "server.csr",
            ],
        );
        std::fs::write(
            dir.join("server.ext"),
            "subjectAltName=IP:127.0.0.1\nbasicConstraints=CA:FALSE\n\
             keyUsage=critical,digitalSignature\nextendedKeyUsage=serverAuth\n",
        )
        .expect("write the extensions");
        openssl(
            &dir,
            &[
                "x509",
                "-req",
                "-in",
                "server.csr",
                "-CA",
                "ca.pem",
                "-CAkey",
                "ca.key",
                "-CAcreateserial",
                "-days",
                "2",
                "-extfile",
                "server.ext",
                "-out",
                "server.pem",
            ],
        );
        // The server refuses a key others can read; as root it runs as
        // `postgres`, which must own it.
        let key = dir.join("server.key");
        std::fs::set_permissions(&key, std::fs::Permissions::from_mode(0o600)).expect("chmod");
        if let Some((uid, gid)) = server_user() {
            for file in ["server.key", "server.pem"] {
                std::os::unix::fs::chown(dir.join(file), Some(uid), Some(gid)).expect("chown");
            }
        }
        Self { dir }
    }

    fn path(&self, file: &str) -> String {
        self.dir.join(file).display().to_string()
    }
}

impl Drop for Certificates {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn openssl(dir: &Path, args: &[&str]) {
    let out = Command::new("openssl")
        .args(args)
        .current_dir(dir)
        .output()
        .expect("the openssl command runs");
    assert!(
        out.status.success(),
        "openssl {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// As root, the (uid, gid) of the user the test server runs as
/// (`$HOTCOUNT_PG_USER`, else `postgres`), from the passwd database.
fn server_user() -> Option<(u32, u32)> {
    let root = std::fs::metadata("/proc/self").is_ok_and(|m| m.uid() == 0);
    if !root {
        return None;
    }
    let name = std::env::var("HOTCOUNT_PG_USER").unwrap_or_else(|_| "postgres".into());
    let out = Command::new("getent")
        .args(["passwd", &name])
        .output()
        .ok()?;
    let entry = String::from_utf8_lossy(&out.stdout).into_owned();
    let mut fields = entry.trim().split(':').skip(2);
    let uid = fields.next()?.parse().ok()?;
    let gid = fields.next()?.parse().ok()?;
    Some((uid, gid))
}

/// Whether a session opened with `url` is encrypted (an error if no session
/// could be opened).
async fn encrypted(url: &str) -> Result<bool, StoreError> {
    let db = PgDb::new(&PgDbConfig::new(url)).expect("valid settings");
    let conn = db.checkout("Test").await?;
    let row = conn
        .client()?
        .query_one(
            "SELECT ssl FROM pg_stat_ssl WHERE pid = pg_backend_pid()",
            &[],
        )
        .await
        .expect("read pg_stat_ssl");
    let ssl: bool = row.get(0);
    conn.release();
    Ok(ssl)
}

#[tokio::test]
async fn each_sslmode_encrypts_and_authenticates_the_server_as_libpq_does() {
    let certs = Certificates::make();
    let (cert, key) = (certs.path("server.pem"), certs.path("server.key"));
    let cluster = tokio::task::spawn_blocking(move || {
        pg::PgCluster::start_with(&[
            ("ssl", "on"),
            ("ssl_cert_file", &cert),
            ("ssl_key_file", &key),
        ])
    })
    .await
    .expect("start the test cluster");
    let port = cluster.port();
    let url =
        |host: &str, params: &str| format!("postgres://postgres@{host}:{port}/postgres?{params}");
    let ca = certs.path("ca.pem");
    let other = certs.path("other-ca.pem");

    assert!(!encrypted(&url("127.0.0.1", "sslmode=disable"))
        .await
        .unwrap());
    assert!(
        encrypted(&url("127.0.0.1", "")).await.unwrap(),
        "prefer encrypts when offered"
    );
    assert!(encrypted(&url("127.0.0.1", "sslmode=require"))
        .await
        .unwrap());
    let full = url(
        "127.0.0.1",
        &format!("sslmode=verify-full&sslrootcert={ca}"),
    );
    assert!(encrypted(&full).await.unwrap());

    // A server whose certificate another CA signed is refused.
    let wrong_ca = url(
        "127.0.0.1",
        &format!("sslmode=verify-full&sslrootcert={other}"),
    );
    assert!(encrypted(&wrong_ca).await.is_err());
    let wrong_ca = url("127.0.0.1", &format!("sslmode=require&sslrootcert={other}"));
    assert!(
        encrypted(&wrong_ca).await.is_err(),
        "require with a root verifies it"
    );

    // The certificate names 127.0.0.1, not localhost: verify-full refuses,
    // verify-ca (the chain only) accepts.
    let by_name = url(
        "localhost",
        &format!("sslmode=verify-full&sslrootcert={ca}"),
    );
    assert!(encrypted(&by_name).await.is_err());
    let chain_only = url("localhost", &format!("sslmode=verify-ca&sslrootcert={ca}"));
    assert!(encrypted(&chain_only).await.unwrap());

    // verify-ca checks the chain: another CA's root is refused too.
    let wrong_ca = url(
        "127.0.0.1",
        &format!("sslmode=verify-ca&sslrootcert={other}"),
    );
    assert!(encrypted(&wrong_ca).await.is_err());

    // Without a root certificate a verifying mode is refused before any
    // connection (libpq trusts no system root there); the system's roots
    // only with verify-full, and the test CA is not one of them.
    for mode in ["verify-ca", "verify-full"] {
        let refused = PgDb::new(&PgDbConfig::new(url(
            "127.0.0.1",
            &format!("sslmode={mode}"),
        )));
        let advice = refused.err().map(|e| e.to_string()).unwrap_or_default();
        assert!(advice.contains("sslrootcert="), "{mode}: {advice}");
    }
    let system_ca = url("127.0.0.1", "sslmode=verify-ca&sslrootcert=system");
    let refused = PgDb::new(&PgDbConfig::new(system_ca)).err();
    assert!(
        refused.is_some_and(|e| e.to_string().contains("verify-full")),
        "sslrootcert=system needs verify-full"
    );
    if rustls_native_certs::load_native_certs().certs.is_empty() {
        eprintln!("no system roots here: sslrootcert=system is not tried");
    } else {
        let system_full = url("127.0.0.1", "sslmode=verify-full&sslrootcert=system");
        assert!(
            encrypted(&system_full).await.is_err(),
            "a private CA is no system root"
        );
    }

    // The store works over it: migrations, then a count.
    let db = PgDb::new(&PgDbConfig::new(full)).expect("valid settings");
    db.migrate().await.expect("migrate over verify-full");
    assert_eq!(db.count("p").await.expect("count"), 0);
}

/// Opens a session with `url` and runs one statement; the error's message
/// when it fails.
async fn session(url: &str) -> Result<(), String> {
    let db = PgDb::new(&PgDbConfig::new(url)).map_err(|e| e.to_string())?;
    let conn = db.checkout("Test").await.map_err(|e| e.to_string())?;
    conn.client()
        .map_err(|e| e.to_string())?
        .simple_query("SELECT 1")
        .await
        .map_err(|e| e.to_string())?;
    conn.release();
    Ok(())
}

#[tokio::test]
async fn a_cleartext_password_goes_only_to_an_authenticated_server() {
    let certs = Certificates::make();
    // `clear` authenticates with a cleartext password, `scram` with SCRAM,
    // over TCP and over the Unix socket (where the server offers no TLS,
    // so `prefer` falls back to plain text).
    let hba = certs.dir.join("pg_hba.conf");
    std::fs::write(
        &hba,
        "local all postgres trust\nlocal all clear password\nlocal all scram scram-sha-256\n\
         host all postgres 127.0.0.1/32 trust\nhost all clear 127.0.0.1/32 password\n\
         host all scram 127.0.0.1/32 scram-sha-256\n",
    )
    .expect("write pg_hba.conf");
    let (cert, key, hba) = (
        certs.path("server.pem"),
        certs.path("server.key"),
        hba.display().to_string(),
    );
    let cluster = tokio::task::spawn_blocking(move || {
        pg::PgCluster::start_with(&[
            ("ssl", "on"),
            ("ssl_cert_file", &cert),
            ("ssl_key_file", &key),
            ("hba_file", &hba),
        ])
    })
    .await
    .expect("start the test cluster");
    let admin = pg::connect(&cluster.url("postgres")).await;
    admin
        .batch_execute(
            "CREATE ROLE clear LOGIN PASSWORD 'clear-pw'; CREATE ROLE scram LOGIN PASSWORD 'scram-pw'",
        )
        .await
        .expect("create the roles");
    let port = cluster.port();
    let ca = certs.path("ca.pem");
    let tcp = |user: &str, params: &str| {
        format!("postgres://{user}:{user}-pw@127.0.0.1:{port}/postgres?{params}")
    };
    let socket = |user: &str, mode: &str| {
        format!(
            "host={} port={port} user={user} password={user}-pw dbname=postgres sslmode={mode}",
            cluster.dir().display()
        )
    };

    // Not authenticated: a machine in the middle could be the one asking.
    for url in [
        tcp("clear", ""),
        tcp("clear", "sslmode=prefer"),
        tcp("clear", "sslmode=require"),
        socket("clear", "prefer"),
    ] {
        let refused = session(&url).await.expect_err("no cleartext password here");
        assert!(refused.contains("cleartext"), "{refused}");
        assert!(refused.contains("verify-full"), "names the fix: {refused}");
    }
    // An authenticated server, or a plain connection the operator chose.
    session(&tcp(
        "clear",
        &format!("sslmode=verify-full&sslrootcert={ca}"),
    ))
    .await
    .expect("verify-full authenticated the server");
    session(&tcp(
        "clear",
        &format!("sslmode=verify-ca&sslrootcert={ca}"),
    ))
    .await
    .expect("verify-ca authenticated the server");
    session(&tcp("clear", "sslmode=disable"))
        .await
        .expect("sslmode=disable is the operator's choice");
    // SCRAM never sends the password: every mode.
    for url in [
        tcp("scram", ""),
        tcp("scram", "sslmode=require"),
        socket("scram", "prefer"),
    ] {
        session(&url).await.expect("SCRAM");
    }
}
