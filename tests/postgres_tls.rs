//! TLS to a real PostgreSQL server (a throwaway cluster with `ssl=on` and a
//! certificate from a test CA made with the `openssl` command): each
//! `sslmode` encrypts and authenticates the server as libpq's does.

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
        let dir = std::env::temp_dir().join(format!("hotcount-tls-{}", std::process::id()));
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

    // The store works over it: migrations, then a count.
    let db = PgDb::new(&PgDbConfig::new(full)).expect("valid settings");
    db.migrate().await.expect("migrate over verify-full");
    assert_eq!(db.count("p").await.expect("count"), 0);
}
