//! TLS to the server as libpq's `sslmode` and `sslrootcert` ask for it,
//! over rustls (the driver's `tokio-postgres-rustls` connector).
//!
//! | `sslmode` | encrypted | server authenticated |
//! |---|---|---|
//! | `disable` | never | no |
//! | `prefer` (default) | when the server offers TLS | no |
//! | `require` | always | no; as `verify-ca` when `sslrootcert` is given (as libpq) |
//! | `verify-ca` | always | its certificate chains to the roots |
//! | `verify-full` | always | chains to the roots and names the host |
//!
//! The roots are the PEM file `sslrootcert` names, else the system's
//! (`sslrootcert=system` says so explicitly).
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

/// What [`split`] found: the mode and where the roots are.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TlsSettings {
    /// The mode asked for (`prefer` when none is).
    pub mode: SslMode,
    /// `sslrootcert`: a PEM file of trusted roots; `None` = the system's.
    pub root_cert: Option<PathBuf>,
}

/// TLS settings that cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    /// An `sslmode` libpq does not have.
    #[error("invalid sslmode {0:?}: expected disable, prefer, require, verify-ca or verify-full")]
    Mode(String),
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
/// without `sslrootcert`, and the [`TlsSettings`] this module applies.
pub fn split(url: &str) -> Result<(String, TlsSettings), TlsError> {
    let mut settings = TlsSettings {
        mode: SslMode::Prefer,
        root_cert: None,
    };
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
            "sslmode" => settings.mode = mode(&value)?,
            "sslrootcert" if value != "system" => {
                settings.root_cert = Some(PathBuf::from(value.as_ref()))
            }
            "sslrootcert" => settings.root_cert = None,
            _ => kept.push(param),
        }
    }
    if settings.mode == SslMode::Require && settings.root_cert.is_some() {
        settings.mode = SslMode::VerifyCa;
    }
    let driver_mode = match settings.mode {
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
    Ok((driver, settings))
}

fn mode(value: &str) -> Result<SslMode, TlsError> {
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
            let roots = Arc::new(roots(settings.root_cert.as_ref())?);
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

/// The trusted roots: the PEM file `path`, else the system's.
fn roots(path: Option<&PathBuf>) -> Result<RootCertStore, TlsError> {
    let mut roots = RootCertStore::empty();
    let certs: Vec<CertificateDer<'static>> = match path {
        Some(path) => {
            let error = |message: String| TlsError::RootCert {
                path: path.display().to_string(),
                message,
            };
            let pem = std::fs::read(path).map_err(|e| error(e.to_string()))?;
            CertificateDer::pem_slice_iter(&pem)
                .collect::<Result<_, _>>()
                .map_err(|e| error(e.to_string()))?
        }
        None => rustls_native_certs::load_native_certs().certs,
    };
    let (added, _ignored) = roots.add_parsable_certificates(certs);
    if added == 0 {
        return Err(TlsError::RootCert {
            path: path.map_or("system".into(), |p| p.display().to_string()),
            message: "no usable certificate".into(),
        });
    }
    Ok(roots)
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
        assert_eq!(settings.root_cert, Some(PathBuf::from("/etc/ca.pem")));
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
    fn an_unknown_mode_or_an_unreadable_root_is_refused() {
        assert!(matches!(
            split("postgres://h/db?sslmode=sometimes"),
            Err(TlsError::Mode(_))
        ));
        let settings = TlsSettings {
            mode: SslMode::VerifyFull,
            root_cert: Some(PathBuf::from("/nonexistent/ca.pem")),
        };
        assert!(matches!(
            connector(&settings),
            Err(TlsError::RootCert { .. })
        ));
    }
}
