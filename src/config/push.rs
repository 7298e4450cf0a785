//! Push delivery's flags (`--delivery`, `--push-*`: [`PushFlags`]) and the
//! push endpoint's settings they validate into ([`PushConfig`]).
//!
//! Invariant: a [`PushConfig`] exists only for `--delivery push`, and only
//! with an authentication its address allows (`cloud-run` on Cloud Run or a
//! loopback address, `none` on a loopback address only).

use std::time::Duration;

use super::{range, ConfigError};

/// Pub/Sub's smallest ack deadline, assumed when the subscription's cannot be read.
pub const MIN_ACK_DEADLINE: Duration = Duration::from_secs(10);

/// `hotcount run`'s delivery flags: pull, or push and the push endpoint's settings.
#[derive(clap::Args, Clone, Debug, PartialEq, serde::Serialize)]
#[command(next_help_heading = "Push endpoint")]
pub struct PushFlags {
    /// How messages arrive: `pull` (StreamingPull) or `push` (Pub/Sub
    /// POSTs each one to `POST /pubsub/push` on `--push-addr`, answered
    /// 204 once its batch committed).
    #[arg(long, env = "HOTCOUNT_DELIVERY", value_enum, default_value_t = Delivery::Pull)]
    pub delivery: Delivery,
    /// With `--delivery push`: where the push endpoint listens (`host:port`,
    /// port 0 picks one); the same address as `--metrics-addr` serves both
    /// on one listener (Cloud Run routes one port).
    #[arg(long, env = "HOTCOUNT_PUSH_ADDR", default_value = "127.0.0.1:8080")]
    pub push_addr: String,
    /// With `--delivery push`: `google` (verify each request's OIDC token),
    /// `cloud-run` (Cloud Run's IAM front end verified it; on Cloud Run,
    /// where `K_SERVICE` is set, or a loopback `--push-addr` only) or
    /// `none` (loopback `--push-addr` only).
    #[arg(long, env = "HOTCOUNT_PUSH_AUTH", value_enum, default_value_t = PushAuthMode::Google)]
    pub push_auth: PushAuthMode,
    /// With `--push-auth google`: the audience the token must carry (the
    /// subscription's `oidcToken.audience`, or its push endpoint URL when
    /// it sets none).
    #[arg(long, env = "HOTCOUNT_PUSH_AUDIENCE", default_value = "")]
    pub push_audience: String,
    /// With `--push-auth google`: the service account Pub/Sub signs the
    /// tokens as (the token's `email`, which must be verified).
    #[arg(long, env = "HOTCOUNT_PUSH_SERVICE_ACCOUNT", default_value = "")]
    pub push_service_account: String,
    /// With `--push-auth google`: the signing keys' JWKS URL (fetched,
    /// cached as long as it says, refreshed on an unknown key id).
    #[arg(long, env = "HOTCOUNT_PUSH_JWKS_URL", default_value = DEFAULT_PUSH_JWKS_URL)]
    pub push_jwks_url: String,
    /// With `--delivery push`: requests held at once (admitted, not yet
    /// settled); beyond it 429 (1..=100000). Bounds memory: each holds at
    /// most a 1 MiB body while it is read, then its parsed message.
    #[arg(long, env = "HOTCOUNT_PUSH_MAX_IN_FLIGHT", default_value_t = 1000)]
    pub push_max_in_flight: usize,
    /// With `--delivery push` on its own address: connections open at
    /// once, at most (at least `--push-max-in-flight`). A new one beyond it
    /// closes the connection idle longest (or still sending its request's
    /// headers), or, when every one is in a request, is closed itself.
    #[arg(long, env = "HOTCOUNT_PUSH_MAX_CONNECTIONS", default_value_t = 2000)]
    pub push_max_connections: usize,
    /// With `--delivery push` on its own address: a connection that has
    /// not sent a request's whole headers this long after it opened, or
    /// after its last answer (idle), is closed, in milliseconds (100..=600000).
    #[arg(
        long,
        env = "HOTCOUNT_PUSH_HEADER_READ_TIMEOUT_MS",
        default_value_t = 30_000
    )]
    pub push_header_read_timeout_ms: u64,
}

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

impl PushFlags {
    /// The push endpoint's settings for a subscription named
    /// `subscription` (in full): `None` with `--delivery pull`, which reads
    /// no other push flag; `on_cloud_run`: whether this runs in a Cloud
    /// Run container.
    pub fn validate(
        &self,
        subscription: &str,
        on_cloud_run: bool,
    ) -> Result<Option<PushConfig>, ConfigError> {
        if self.delivery == Delivery::Pull {
            return Ok(None);
        }
        let addr: std::net::SocketAddr = self.push_addr.parse().map_err(|_| ConfigError {
            flag: "push-addr",
            reason: format!(
                "{:?} is not host:port (an IP address and a port)",
                self.push_addr
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
        let auth = match self.push_auth {
            PushAuthMode::Google => {
                let jwks_url = self.push_jwks_url.clone();
                if !(jwks_url.starts_with("https://") || jwks_url.starts_with("http://")) {
                    return Err(ConfigError {
                        flag: "push-jwks-url",
                        reason: format!("{jwks_url:?} is not an http(s) URL"),
                    });
                }
                AuthConfig::Google(GoogleAuth {
                    audience: required("push-audience", &self.push_audience)?,
                    service_account: required("push-service-account", &self.push_service_account)?,
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
        let max_in_flight = range("push-max-in-flight", self.push_max_in_flight, 1, 100_000)?;
        let max_connections = range(
            "push-max-connections",
            self.push_max_connections,
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
            self.push_header_read_timeout_ms,
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
}
