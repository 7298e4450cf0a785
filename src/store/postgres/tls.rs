//! TLS to the server as libpq's `sslmode` and `sslrootcert` ask for it,
//! over rustls (the driver's `tokio-postgres-rustls` connector).
//!
//! | `sslmode` | encrypted | server authenticated | a cleartext password request |
//! |---|---|---|---|
//! | `disable` | never | no | answered (the operator chose a plain connection) |
//! | `prefer` (default) | when the server offers TLS | no | refused |
//! | `require` | always | no; as `verify-ca` when `sslrootcert` names a file (as libpq) | refused |
//! | `verify-ca` | always | its certificate chains to `sslrootcert` | answered |
//! | `verify-full` | always | chains to `sslrootcert` and names the host | answered |
//!
//! `verify-ca` and `verify-full` need a root certificate: the PEM file
//! `sslrootcert` names, or, with `verify-full` only, `sslrootcert=system`
//! for the system's roots (any public certificate chains to those, so the
//! host name must be checked too; `sslrootcert=system` alone means
//! `verify-full`, as in libpq). Without a root they are refused before any
//! connection is made. A cleartext password is refused where the server is
//! not authenticated ([`SslMode::protects_cleartext`]): a machine in the
//! middle can decline TLS or present any certificate and then ask for it
//! (`session/guard.rs` enforces it).
//!
//! Invariant: with `verify-ca` or `verify-full` no connection is made to a
//! server that does not prove the identity asked for; the driver only ever
//! sees the modes it knows (`disable`, `prefer`, `require`), after
//! [`split`] has taken out what this module decides.

use std::path::PathBuf;
use std::sync::Arc;

use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::client::WebPkiServerVerifier;
use rustls::crypto::{verify_tls12_signature, verify_tls13_signature, CryptoProvider};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::{CertificateError, DigitallySignedStruct, RootCertStore, SignatureScheme};
use tokio_postgres_rustls::MakeRustlsConnect;

/// How a connection is protected (libpq's `sslmode`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SslMode {
    /// Plain TCP.
    Disable,
    /// TLS when the server offers it, without authenticating it.
    Prefer,
    /// TLS, without authenticating the server.
    Require,
    /// TLS to a server whose certificate chains to the roots.
    VerifyCa,
    /// TLS to a server whose certificate chains to the roots and names the host.
    VerifyFull,
}

impl SslMode {
    /// The mode as `sslmode` spells it.
    pub fn name(self) -> &'static str {
        match self {
            SslMode::Disable => "disable",
            SslMode::Prefer => "prefer",
            SslMode::Require => "require",
            SslMode::VerifyCa => "verify-ca",
            SslMode::VerifyFull => "verify-full",
        }
    }

    /// Whether a password may be sent in cleartext when the server asks:
    /// only to an authenticated server (`verify-ca`, `verify-full`), or
    /// when the operator chose a plain connection (`disable`). Under
    /// `prefer` and `require` the server is not authenticated, so the one
    /// asking may be a machine in the middle.
    pub fn protects_cleartext(self) -> bool {
        !matches!(self, SslMode::Prefer | SslMode::Require)
    }
}

/// Where the trusted roots come from (`sslrootcert`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Roots {
    /// None given.
    None,
    /// A PEM file of trusted roots.
    File(PathBuf),
    /// `sslrootcert=system`: the system's roots (with `verify-full` only).
    System,
}

/// What [`split`] found: the mode and where the roots are.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TlsSettings {
    /// The mode asked for (`prefer` when none is).
    pub mode: SslMode,
    /// `sslrootcert`.
    pub roots: Roots,
}

/// TLS settings that cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    /// An `sslmode` libpq does not have.
    #[error("invalid sslmode {0:?}: expected disable, prefer, require, verify-ca or verify-full")]
    Mode(String),
    /// `verify-ca` or `verify-full` without a root certificate.
    #[error("sslmode={0} authenticates the server against a root certificate: add sslrootcert=/path/to/ca.pem (or, with sslmode=verify-full, sslrootcert=system for the system's roots)")]
    NoRoot(&'static str),
    /// `sslrootcert=system` with a mode that does not check the host name.
    #[error("sslrootcert=system needs sslmode=verify-full (any public certificate chains to the system's roots, so the host name must be checked too), not sslmode={0}")]
    SystemNeedsVerifyFull(&'static str),
    /// The root certificates could not be read.
    #[error("reading the root certificates {path}: {message}")]
    RootCert {
        /// The file (or `system`).
        path: String,
        /// What failed.
        message: String,
    },
    /// rustls refused the configuration.
    #[error("building the TLS configuration: {0}")]
    Config(String),
}

/// Splits `url` (a `postgres://` URL or `key=value` words) into the
/// connection string the driver parses, with `sslmode` as it knows it and
/// without `sslrootcert`, and the [`TlsSettings`] this module applies;
/// refuses a mode without the root it needs (see the module doc).
pub fn split(url: &str) -> Result<(String, TlsSettings), TlsError> {
    let mut mode = None;
    let mut roots = Roots::None;
    let is_url = url.starts_with("postgres://") || url.starts_with("postgresql://");
    let (head, params, separator) = match (is_url, url.split_once('?')) {
        (true, Some((head, query))) => (head, query, '&'),
        (true, None) => (url, "", '&'),
        (false, _) => ("", url, ' '),
    };
    let mut kept = Vec::new();
    for param in params.split(separator).filter(|p| !p.is_empty()) {
        let (key, value) = param.split_once('=').unwrap_or((param, ""));
        let value = percent_encoding::percent_decode_str(value).decode_utf8_lossy();
        match key.trim() {
            "sslmode" => mode = Some(parse_mode(&value)?),
            "sslrootcert" if value == "system" => roots = Roots::System,
            "sslrootcert" => roots = Roots::File(PathBuf::from(value.as_ref())),
            _ => kept.push(param),
        }
    }
    let mode = match (mode, &roots) {
        // libpq: a root file makes `require` verify the chain.
        (Some(SslMode::Require), Roots::File(_)) => SslMode::VerifyCa,
        // libpq: `sslrootcert=system` alone means `verify-full`.
        (None, Roots::System) => SslMode::VerifyFull,
        (Some(mode), Roots::System) if mode != SslMode::VerifyFull => {
            return Err(TlsError::SystemNeedsVerifyFull(mode.name()))
        }
        (Some(mode @ (SslMode::VerifyCa | SslMode::VerifyFull)), Roots::None) => {
            return Err(TlsError::NoRoot(mode.name()))
        }
        (mode, _) => mode.unwrap_or(SslMode::Prefer),
    };
    let driver_mode = match mode {
        SslMode::Disable => "disable",
        SslMode::Prefer => "prefer",
        SslMode::Require | SslMode::VerifyCa | SslMode::VerifyFull => "require",
    };
    let driver_mode = format!("sslmode={driver_mode}");
    kept.push(&driver_mode);
    let driver = if is_url {
        format!("{head}?{}", kept.join("&"))
    } else {
        kept.join(" ")
    };
    Ok((driver, TlsSettings { mode, roots }))
}

fn parse_mode(value: &str) -> Result<SslMode, TlsError> {
    Ok(match value {
        "disable" => SslMode::Disable,
        // `allow` (plain first, TLS if the server insists) is not offered
        // by the driver; `prefer` protects at least as much.
        "allow" | "prefer" => SslMode::Prefer,
        "require" => SslMode::Require,
        "verify-ca" => SslMode::VerifyCa,
        "verify-full" => SslMode::VerifyFull,
        other => return Err(TlsError::Mode(other.to_string())),
    })
}

/// The connector for `settings`: `None` when `sslmode=disable`.
pub fn connector(settings: &TlsSettings) -> Result<Option<MakeRustlsConnect>, TlsError> {
    let provider = Arc::new(rustls::crypto::aws_lc_rs::default_provider());
    let chain = match settings.mode {
        SslMode::Disable => return Ok(None),
        SslMode::Prefer | SslMode::Require => None,
        SslMode::VerifyCa | SslMode::VerifyFull => {
            let roots = Arc::new(roots(&settings.roots)?);
            let webpki = WebPkiServerVerifier::builder_with_provider(roots, provider.clone())
                .build()
                .map_err(|e| TlsError::Config(e.to_string()))?;
            Some(webpki)
        }
    };
    let verifier = Arc::new(ServerAuth {
        provider: provider.clone(),
        chain,
        name: settings.mode == SslMode::VerifyFull,
    });
    let config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| TlsError::Config(e.to_string()))?
        .dangerous()
        .with_custom_certificate_verifier(verifier)
        .with_no_client_auth();
    Ok(Some(MakeRustlsConnect::new(config)))
}

/// The trusted roots: the PEM file, or the system's.
fn roots(roots: &Roots) -> Result<RootCertStore, TlsError> {
    let mut store = RootCertStore::empty();
    let (certs, shown): (Vec<CertificateDer<'static>>, String) = match roots {
        Roots::File(path) => {
            let error = |message: String| TlsError::RootCert {
                path: path.display().to_string(),
                message,
            };
            let pem = std::fs::read(path).map_err(|e| error(e.to_string()))?;
            let certs = CertificateDer::pem_slice_iter(&pem)
                .collect::<Result<_, _>>()
                .map_err(|e| error(e.to_string()))?;
            (certs, path.display().to_string())
        }
        Roots::System => (
            rustls_native_certs::load_native_certs().certs,
            "system".into(),
        ),
        // `split` never lets a verifying mode through without roots.
        Roots::None => (Vec::new(), "none".into()),
    };
    let (added, _ignored) = store.add_parsable_certificates(certs);
    if added == 0 {
        return Err(TlsError::RootCert {
            path: shown,
            message: "no usable certificate".into(),
        });
    }
    Ok(store)
}

/// How the server's certificate is checked. Without `chain` (`prefer`,
/// `require`) any certificate is accepted, as libpq does without a root
/// certificate; with it the chain must lead to the roots, and with `name`
/// (`verify-full`) the certificate must also name the host (the webpki
/// verifier checks the chain first, so a name error means the chain held).
/// The handshake's signatures are checked in every mode, so the session
/// key belongs to the certificate presented.
#[derive(Debug)]
struct ServerAuth {
    provider: Arc<CryptoProvider>,
    chain: Option<Arc<WebPkiServerVerifier>>,
    name: bool,
}

impl ServerCertVerifier for ServerAuth {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        server_name: &ServerName<'_>,
        ocsp_response: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        let Some(chain) = &self.chain else {
            return Ok(ServerCertVerified::assertion());
        };
        let verified =
            chain.verify_server_cert(end_entity, intermediates, server_name, ocsp_response, now);
        match verified {
            Err(rustls::Error::InvalidCertificate(
                CertificateError::NotValidForName | CertificateError::NotValidForNameContext { .. },
            )) if !self.name => Ok(ServerCertVerified::assertion()),
            other => other,
        }
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        let algorithms = &self.provider.signature_verification_algorithms;
        verify_tls12_signature(message, cert, dss, algorithms)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        let algorithms = &self.provider.signature_verification_algorithms;
        verify_tls13_signature(message, cert, dss, algorithms)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.provider
            .signature_verification_algorithms
            .supported_schemes()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn verify_modes_reach_the_driver_as_require_and_sslrootcert_never() {
        let (driver, settings) =
            split("postgres://u:p@db.internal:5432/hc?sslmode=verify-full&sslrootcert=%2Fetc%2Fca.pem&application_name=x")
                .expect("valid");
        assert_eq!(
            driver,
            "postgres://u:p@db.internal:5432/hc?application_name=x&sslmode=require"
        );
        assert_eq!(settings.mode, SslMode::VerifyFull);
        assert_eq!(settings.roots, Roots::File(PathBuf::from("/etc/ca.pem")));
        assert!(driver.parse::<tokio_postgres::Config>().is_ok());
    }

    #[test]
    fn prefer_is_the_default_and_require_with_a_root_verifies_the_chain() {
        let (driver, settings) = split("postgres://h/db").expect("valid");
        assert_eq!(driver, "postgres://h/db?sslmode=prefer");
        assert_eq!(settings.mode, SslMode::Prefer);
        let (_, settings) =
            split("postgres://h/db?sslmode=require&sslrootcert=ca.pem").expect("valid");
        assert_eq!(settings.mode, SslMode::VerifyCa);
        let (driver, settings) = split("host=h dbname=db sslmode=disable").expect("valid");
        assert_eq!(driver, "host=h dbname=db sslmode=disable");
        assert_eq!(settings.mode, SslMode::Disable);
    }

    #[test]
    fn verifying_needs_a_root_and_system_roots_need_verify_full() {
        for mode in ["verify-ca", "verify-full"] {
            let refused = split(&format!("postgres://h/db?sslmode={mode}"));
            assert!(matches!(refused, Err(TlsError::NoRoot(_))), "{mode}");
            let advice = refused.err().map(|e| e.to_string()).unwrap_or_default();
            assert!(advice.contains("sslrootcert="), "{advice}");
        }
        for mode in ["verify-ca", "require", "prefer", "disable"] {
            let refused = split(&format!(
                "postgres://h/db?sslmode={mode}&sslrootcert=system"
            ));
            assert!(
                matches!(refused, Err(TlsError::SystemNeedsVerifyFull(_))),
                "{mode}"
            );
        }
        let (_, settings) = split("postgres://h/db?sslrootcert=system").expect("valid");
        assert_eq!(
            (settings.mode, settings.roots),
            (SslMode::VerifyFull, Roots::System)
        );
        let (_, settings) =
            split("postgres://h/db?sslmode=verify-full&sslrootcert=system").expect("valid");
        assert_eq!(settings.mode, SslMode::VerifyFull);
    }

    #[test]
    fn a_cleartext_password_goes_only_to_an_authenticated_server_or_over_disable() {
        let allowed: Vec<bool> = [
            SslMode::Disable,
            SslMode::Prefer,
            SslMode::Require,
            SslMode::VerifyCa,
            SslMode::VerifyFull,
        ]
        .map(SslMode::protects_cleartext)
        .to_vec();
        assert_eq!(allowed, [true, false, false, true, true]);
    }

    #[test]
    fn an_unknown_mode_or_an_unreadable_root_is_refused() {
        assert!(matches!(
            split("postgres://h/db?sslmode=sometimes"),
            Err(TlsError::Mode(_))
        ));
        let settings = TlsSettings {
            mode: SslMode::VerifyFull,
            roots: Roots::File(PathBuf::from("/nonexistent/ca.pem")),
        };
        assert!(matches!(
            connector(&settings),
            Err(TlsError::RootCert { .. })
        ));
    }
}
