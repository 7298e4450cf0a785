//! Who may push: each push request authenticated before it can reach the
//! pipeline.
//!
//! With `google` a request passes only with `Authorization: Bearer <JWT>`
//! signed RS256 by a key of the JWKS ([`super::jwks`]), issued by Google
//! (`https://accounts.google.com` or `accounts.google.com`), for
//! `--push-audience`, not expired (30 s of clock skew either way), whose
//! `email` is `--push-service-account` with `email_verified` true. The
//! audience alone proves little: anyone can get a Google-signed ID token
//! for any audience, so the service account is required too. `cloud-run`
//! trusts Cloud Run's IAM front end, which checks the same before the
//! request reaches the container; `none` (loopback only) checks nothing.
//!
//! Invariant: a refused request never reaches the pipeline; a token is
//! accepted only after all of the checks above passed for it, and a
//! verified token is then remembered until its expiry, so the signature is
//! checked once per token, not once per request (Pub/Sub reuses a token
//! for many requests).
//!
//! Why not `google-cloud-auth`'s `idtoken::verifier` (it is in the tree):
//! it takes its key cache's lock with `try_write` on every verification,
//! so two requests verified at once make one fail, and it holds that lock
//! across the key fetch; it answers an unknown key id and an unreachable
//! key server with the same error (we must answer 401 for one and 503 for
//! the other) and fetches the key set again for every unknown key id; it
//! also accepts IAP's issuer; and it indexes the claims with `[]`, which
//! panics on a token without `email_verified`.

use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

use axum::http::{header, HeaderMap};
use jsonwebtoken::errors::ErrorKind;
use jsonwebtoken::{Algorithm, Validation};
use parking_lot::Mutex;
use rustc_hash::FxHashMap;
use serde::Deserialize;

use super::jwks::{Jwks, JwksConfig, KeyError};
use super::{AuthConfig, GoogleAuth};
use crate::telemetry::{AuthFailure, Stats};

/// The issuers of Google's ID tokens, in both spellings Google uses.
pub const GOOGLE_ISSUERS: [&str; 2] = ["https://accounts.google.com", "accounts.google.com"];

/// Clock skew allowed on `exp` and `iat`, in seconds.
pub const CLOCK_SKEW_SECS: u64 = 30;

/// Verified tokens remembered at most (Pub/Sub uses a few at a time).
const VERIFIED_TOKENS_MAX: usize = 4096;

/// Why a request was refused.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Refusal {
    /// 401: no valid token (the detail says what is wrong).
    Unauthenticated(AuthFailure, String),
    /// 403: a valid token of a principal that may not push.
    Forbidden(AuthFailure, String),
    /// 503: the signing keys could not be fetched.
    KeysUnavailable(String),
}

/// Checks push requests as configured.
pub enum Authenticator {
    /// Verifies the token.
    Google(Box<Verifier>),
    /// Lets every request through (`cloud-run`, `none`).
    Trusting,
}

impl Authenticator {
    /// The authenticator `config` asks for.
    pub fn new(config: &AuthConfig, stats: Arc<Stats>) -> Self {
        match config {
            AuthConfig::Google(google) => Self::Google(Box::new(Verifier::new(
                google,
                JwksConfig::new(google.jwks_url.clone()),
                stats,
            ))),
            AuthConfig::CloudRun | AuthConfig::None => Self::Trusting,
        }
    }

    /// Whether the request with `headers` may push; `memo` is its
    /// connection's (see [`TokenMemo`]).
    pub async fn check(&self, headers: &HeaderMap, memo: &TokenMemo) -> Result<(), Refusal> {
        match self {
            Self::Trusting => Ok(()),
            // Not boxed: a remembered token's check (every request's but
            // the first per token) allocates nothing; `verify` boxes the
            // full check, the rare path, itself.
            Self::Google(verifier) => {
                let token = bearer(headers)?;
                let now = unix_now();
                if memo.proves(token, now) {
                    return Ok(());
                }
                let exp = verifier.verify_at(token, now).await?;
                memo.remember(token, exp);
                Ok(())
            }
        }
    }

    /// Fetches the signing keys ahead of the first request (a failure is
    /// logged and counted; requests then fetch again).
    pub async fn prefetch(&self) {
        if let Self::Google(verifier) = self {
            let _ = verifier.jwks.refresh().await;
        }
    }
}

/// The token a connection's last request proved, with its `exp`: Pub/Sub
/// sends one token with many requests, so the next request on the
/// connection that carries the same one is checked by comparing it, with
/// no lock or hash that other connections share (the verifier's map of
/// tokens is one lock for every connection, and hashes ~800 bytes).
///
/// Invariant: it holds only a token [`Verifier::verify_at`] accepted, and
/// proves it only until its `exp` (and the clock skew allowed), as the
/// verifier's own map does.
#[derive(Default)]
pub struct TokenMemo(Mutex<Option<(Box<str>, u64)>>);

impl TokenMemo {
    /// Whether `token` is the one remembered and not expired at `now`.
    fn proves(&self, token: &str, now: u64) -> bool {
        matches!(&*self.0.lock(), Some((known, exp)) if **known == *token && now <= exp + CLOCK_SKEW_SECS)
    }

    /// Remembers `token`, verified, valid until `exp`.
    fn remember(&self, token: &str, exp: u64) {
        *self.0.lock() = Some((token.into(), exp));
    }
}

/// The token of `Authorization: Bearer <token>`.
fn bearer(headers: &HeaderMap) -> Result<&str, Refusal> {
    let Some(value) = headers.get(header::AUTHORIZATION) else {
        return Err(unauthenticated(
            AuthFailure::Missing,
            "no Authorization header",
        ));
    };
    let value = value
        .to_str()
        .map_err(|_| unauthenticated(AuthFailure::Malformed, "Authorization is not text"))?;
    match value.split_once(' ') {
        Some((scheme, token))
            if scheme.eq_ignore_ascii_case("bearer") && !token.trim().is_empty() =>
        {
            Ok(token.trim())
        }
        _ => Err(unauthenticated(
            AuthFailure::Malformed,
            "Authorization is not `Bearer <token>`",
        )),
    }
}

fn unauthenticated(failure: AuthFailure, detail: impl Into<String>) -> Refusal {
    Refusal::Unauthenticated(failure, detail.into())
}

/// The claims checked besides those `jsonwebtoken` validates.
#[derive(Deserialize)]
struct Claims {
    email: Option<String>,
    email_verified: Option<serde_json::Value>,
    iat: Option<u64>,
    exp: u64,
}

/// Verifies Google-signed push tokens.
pub struct Verifier {
    service_account: String,
    jwks: Jwks,
    validation: Validation,
    /// Tokens that passed every check, with their `exp`. FxHash: a token
    /// is ~800 bytes hashed on every request, and only tokens Google signed
    /// are ever inserted, so a sender cannot choose keys to collide.
    verified: Mutex<FxHashMap<Box<str>, u64>>,
}

impl Verifier {
    /// A verifier of tokens as `google` says, with keys from `jwks`.
    pub fn new(google: &GoogleAuth, jwks: JwksConfig, stats: Arc<Stats>) -> Self {
        let mut validation = Validation::new(Algorithm::RS256);
        validation.leeway = CLOCK_SKEW_SECS;
        validation.set_issuer(&GOOGLE_ISSUERS);
        validation.set_audience(&[google.audience.as_str()]);
        validation.set_required_spec_claims(&["exp", "iss", "aud"]);
        Self {
            service_account: google.service_account.clone(),
            jwks: Jwks::new(jwks, stats),
            validation,
            verified: Mutex::new(FxHashMap::default()),
        }
    }

    /// Whether `token` is a valid push token. Cost: a map lookup for a
    /// token already verified; otherwise one RS256 verification (and at
    /// most one key fetch, see [`Jwks::key`]).
    pub async fn verify(&self, token: &str) -> Result<(), Refusal> {
        self.verify_at(token, unix_now()).await.map(|_| ())
    }

    /// [`Verifier::verify`] at `now` (seconds since the epoch): the
    /// token's `exp` when it is valid.
    pub async fn verify_at(&self, token: &str, now: u64) -> Result<u64, Refusal> {
        if let Some(&exp) = self.verified.lock().get(token) {
            if now <= exp + CLOCK_SKEW_SECS {
                return Ok(exp);
            }
        }
        // Boxed: the full check (and its key fetch) is the rare path, and
        // inline it would make every request's future ~0.8 KiB larger.
        let exp = Box::pin(self.verify_fully(token, now)).await?;
        let mut verified = self.verified.lock();
        if verified.len() >= VERIFIED_TOKENS_MAX {
            verified.retain(|_, exp| now <= *exp + CLOCK_SKEW_SECS);
            if verified.len() >= VERIFIED_TOKENS_MAX {
                verified.clear();
            }
        }
        verified.insert(token.into(), exp);
        Ok(exp)
    }

    /// Every check, from the signature on; returns the token's `exp`.
    async fn verify_fully(&self, token: &str, now: u64) -> Result<u64, Refusal> {
        let malformed = |detail: String| unauthenticated(AuthFailure::Malformed, detail);
        let header =
            jsonwebtoken::decode_header(token).map_err(|e| malformed(format!("not a JWT: {e}")))?;
        if header.alg != Algorithm::RS256 {
            return Err(malformed(format!("signed {:?}, not RS256", header.alg)));
        }
        let kid = header
            .kid
            .ok_or_else(|| malformed("no key id (kid) in the header".into()))?;
        let key = match self.jwks.key(&kid).await {
            Ok(key) => key,
            Err(KeyError::Unknown) => {
                return Err(unauthenticated(
                    AuthFailure::UnknownKey,
                    format!("signed with key {kid:?}, which the key set does not hold"),
                ))
            }
            Err(KeyError::Unavailable(error)) => return Err(Refusal::KeysUnavailable(error)),
        };
        let claims = jsonwebtoken::decode::<Claims>(token, &key, &self.validation)
            .map_err(|e| {
                let failure = failure_of(e.kind());
                unauthenticated(failure, e.to_string())
            })?
            .claims;
        if claims.iat.is_some_and(|iat| iat > now + CLOCK_SKEW_SECS) {
            return Err(unauthenticated(
                AuthFailure::Expired,
                "issued in the future",
            ));
        }
        let verified = matches!(&claims.email_verified, Some(serde_json::Value::Bool(true)))
            || matches!(&claims.email_verified, Some(serde_json::Value::String(s)) if s == "true");
        match claims.email {
            Some(email) if email == self.service_account && verified => Ok(claims.exp),
            Some(email) if email == self.service_account => Err(Refusal::Forbidden(
                AuthFailure::Email,
                format!("{email}'s email is not verified"),
            )),
            Some(email) => Err(Refusal::Forbidden(
                AuthFailure::Email,
                format!("signed for {email}, not {}", self.service_account),
            )),
            None => Err(Refusal::Forbidden(
                AuthFailure::Email,
                "no email claim".into(),
            )),
        }
    }
}

/// What a `jsonwebtoken` validation error says about the token.
fn failure_of(kind: &ErrorKind) -> AuthFailure {
    match kind {
        ErrorKind::InvalidSignature
        | ErrorKind::InvalidAlgorithm
        | ErrorKind::InvalidRsaKey(_)
        | ErrorKind::InvalidKeyFormat => AuthFailure::Signature,
        ErrorKind::ExpiredSignature | ErrorKind::ImmatureSignature => AuthFailure::Expired,
        ErrorKind::InvalidIssuer => AuthFailure::Issuer,
        ErrorKind::InvalidAudience => AuthFailure::Audience,
        ErrorKind::MissingRequiredClaim(claim) if claim == "aud" => AuthFailure::Audience,
        ErrorKind::MissingRequiredClaim(claim) if claim == "iss" => AuthFailure::Issuer,
        _ => AuthFailure::Malformed,
    }
}

fn unix_now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

#[cfg(test)]
mod tests;
