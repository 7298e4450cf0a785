//! Push delivery's flags (`--delivery`, `--push-*`) and the push
//! endpoint's settings they validate into ([`PushConfig`]).
//!
//! Invariant: a [`PushConfig`] exists only for `--delivery push`, and only
//! with an authentication its address allows (`cloud-run` on Cloud Run or a
//! loopback address, `none` on a loopback address only).

use std::time::Duration;

use super::{range, ConfigError, RunArgs};

/// Pub/Sub's smallest ack deadline, assumed when the subscription's cannot be read.
pub const MIN_ACK_DEADLINE: Duration = Duration::from_secs(10);

/// Push endpoint settings.
#[derive(Clone, Debug)]
pub struct PushConfig {
    /// Where the endpoint listens.
    pub addr: std::net::SocketAddr,
    /// How requests are authenticated.
    pub auth: AuthConfig,
    /// Requests admitted and not yet settled, at most (429 beyond).
    pub max_in_flight: usize,
    /// Connections open at once on the endpoint's own listener, at most
    /// (not applied when it shares the metrics endpoint's).
    pub max_connections: usize,
    /// The longest a connection of its own listener may take to send a
    /// request's headers, from its opening or its last answer.
    pub header_read_timeout: Duration,
    /// The longest a request is held before it is answered 503.
    pub hold_max: Duration,
    /// Full name of the subscription expected to push (a request naming
    /// another is counted all the same, with a warning).
    pub subscription: String,
}

impl PushConfig {
    /// The hold cap for a subscription whose ack deadline is `ack_deadline`
    /// (Pub/Sub's minimum, 10 s, when unknown): below it by a tenth, and by
    /// at least 2 s, for the answer's way back (8 s for 10 s, 54 s for 60 s).
    pub fn hold_max_for(ack_deadline: Option<Duration>) -> Duration {
        let deadline = ack_deadline
            .unwrap_or(MIN_ACK_DEADLINE)
            .max(MIN_ACK_DEADLINE);
        deadline - (deadline / 10).max(Duration::from_secs(2))
    }
}

/// How push requests are authenticated (validated from the flags).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum AuthConfig {
    /// Verify the Google-signed OIDC token.
    Google(GoogleAuth),
    /// Cloud Run's IAM front end verified it.
    CloudRun,
    /// Nothing (a loopback address only).
    None,
}

/// What a Google-signed push token must say.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GoogleAuth {
    /// The required `aud`.
    pub audience: String,
    /// The required `email` (verified).
    pub service_account: String,
    /// Where the signing keys are (a JWKS).
    pub jwks_url: String,
}

/// Where Google publishes the keys it signs OIDC ID tokens with (a JWKS);
/// `--push-jwks-url`'s default.
pub const DEFAULT_PUSH_JWKS_URL: &str = "https://www.googleapis.com/oauth2/v3/certs";

/// The environment variable Cloud Run sets in every container of a
/// service (to the service's name): `--push-auth cloud-run` is accepted on
/// a non-loopback address only where it is set.
pub const CLOUD_RUN_SERVICE_ENV: &str = "K_SERVICE";

/// How messages reach the service.
#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Delivery {
    /// StreamingPull: hotcount pulls, with flow control and lease extension.
    Pull,
    /// Push: Pub/Sub POSTs each message to `POST /pubsub/push` on
    /// `--push-addr`; the answer (after the message's batch committed) is
    /// the ack.
    Push,
}

/// How push requests are authenticated (`--push-auth`).
#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum PushAuthMode {
    /// Verify the Google-signed OIDC token Pub/Sub sends with each request:
    /// signature, issuer, audience, service account.
    Google,
    /// Trust Cloud Run's IAM front end, which checked the token before the
    /// request reached the container (deploy with
    /// `--no-allow-unauthenticated` and grant the push service account the
    /// invoker role). Every request is trusted, so it is allowed only on
    /// Cloud Run (`K_SERVICE` set) or on a loopback `--push-addr`.
    CloudRun,
    /// No authentication: allowed only on a loopback `--push-addr`.
    None,
}

/// Validates the push flags of `args` (only read with `--delivery push`);
/// `on_cloud_run`: whether this runs in a Cloud Run container.
pub(super) fn push_config(
    args: &RunArgs,
    subscription: &str,
    on_cloud_run: bool,
) -> Result<Option<PushConfig>, ConfigError> {
    if args.delivery == Delivery::Pull {
        return Ok(None);
    }
    let addr: std::net::SocketAddr = args.push_addr.parse().map_err(|_| ConfigError {
        flag: "push-addr",
        reason: format!(
            "{:?} is not host:port (an IP address and a port)",
            args.push_addr
        ),
    })?;
    let required = |flag: &'static str, value: &str| {
        if value.trim().is_empty() {
            return Err(ConfigError {
                flag,
                reason: "required with --push-auth google (without it, any Google-signed token would do)".into(),
            });
        }
        Ok(value.to_string())
    };
    let auth = match args.push_auth {
        PushAuthMode::Google => {
            let jwks_url = args.push_jwks_url.clone();
            if !(jwks_url.starts_with("https://") || jwks_url.starts_with("http://")) {
                return Err(ConfigError {
                    flag: "push-jwks-url",
                    reason: format!("{jwks_url:?} is not an http(s) URL"),
                });
            }
            AuthConfig::Google(GoogleAuth {
                audience: required("push-audience", &args.push_audience)?,
                service_account: required("push-service-account", &args.push_service_account)?,
                jwks_url,
            })
        }
        PushAuthMode::CloudRun if on_cloud_run || addr.ip().is_loopback() => AuthConfig::CloudRun,
        PushAuthMode::CloudRun => {
            return Err(ConfigError {
                flag: "push-auth",
                reason: format!(
                    "cloud-run trusts every request (Cloud Run's IAM front end checks them before they reach the container), so it is allowed only on Cloud Run ({CLOUD_RUN_SERVICE_ENV} set) or on a loopback --push-addr; {CLOUD_RUN_SERVICE_ENV} is not set and {addr} is not loopback: use google (verify the tokens)"
                ),
            })
        }
        PushAuthMode::None if addr.ip().is_loopback() => AuthConfig::None,
        PushAuthMode::None => {
            return Err(ConfigError {
                flag: "push-auth",
                reason: format!(
                    "none is allowed only on a loopback --push-addr, not {addr}: use google (verify the tokens) or cloud-run (behind Cloud Run's IAM)"
                ),
            })
        }
    };
    let max_in_flight = range("push-max-in-flight", args.push_max_in_flight, 1, 100_000)?;
    let max_connections = range(
        "push-max-connections",
        args.push_max_connections,
        1,
        1_000_000,
    )?;
    if max_connections < max_in_flight {
        return Err(ConfigError {
            flag: "push-max-connections",
            reason: format!(
                "{max_connections} is below --push-max-in-flight {max_in_flight}: each request held needs a connection of its own"
            ),
        });
    }
    let header_read_timeout_ms = range(
        "push-header-read-timeout-ms",
        args.push_header_read_timeout_ms,
        100,
        600_000,
    )?;
    Ok(Some(PushConfig {
        addr,
        auth,
        max_in_flight,
        max_connections,
        header_read_timeout: Duration::from_millis(header_read_timeout_ms),
        hold_max: PushConfig::hold_max_for(None),
        subscription: subscription.to_string(),
    }))
}
