//! The keys push tokens are signed with: a JWKS read from `--push-jwks-url`,
//! kept as long as the answer's `Cache-Control: max-age` says, read again
//! when that ends or when a token names a key id the set does not hold.
//!
//! Invariants: a key is only ever taken from a set read from the URL; one
//! fetch at a time, and never more than one per [`JwksConfig::unknown_kid_refetch`]
//! for unknown key ids (a flood of forged key ids costs one fetch a
//! minute) or per [`JwksConfig::failed_retry`] after a failure (a key
//! server that is down costs one request at a time, not one per push
//! request); when a fetch fails, the last good set stays in use up to
//! [`JwksConfig::stale_grace`] past its expiry (Google publishes a key long
//! before it signs with it and keeps it long after), and a key it does not
//! hold is [`KeyError::Unavailable`] (503), not unknown.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use jsonwebtoken::jwk::JwkSet;
use jsonwebtoken::DecodingKey;
use parking_lot::RwLock;
use tokio::time::Instant;

use crate::telemetry::{FetchOutcome, Stats};

/// Why no key was found.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum KeyError {
    /// The set, fresh, does not hold this key id.
    Unknown,
    /// The set could not be fetched and what was cached does not serve.
    Unavailable(String),
}

/// How long to keep keys and how often to fetch them.
#[derive(Clone, Debug)]
pub struct JwksConfig {
    /// Where the key set is.
    pub url: String,
    /// How long a set is kept when the answer does not say.
    pub default_ttl: Duration,
    /// The shortest a set is kept, whatever the answer says.
    pub min_ttl: Duration,
    /// The longest a set is kept, whatever the answer says.
    pub max_ttl: Duration,
    /// After a fetch, an unknown key id waits this long before it may cause another.
    pub unknown_kid_refetch: Duration,
    /// After a failed fetch, the next waits this long.
    pub failed_retry: Duration,
    /// A set past its expiry still serves this long while fetches fail.
    pub stale_grace: Duration,
    /// One fetch's time limit.
    pub timeout: Duration,
}

impl JwksConfig {
    /// The defaults for `url`.
    pub fn new(url: String) -> Self {
        Self {
            url,
            default_ttl: Duration::from_secs(3600),
            min_ttl: Duration::from_secs(60),
            max_ttl: Duration::from_secs(24 * 3600),
            unknown_kid_refetch: Duration::from_secs(60),
            failed_retry: Duration::from_secs(2),
            stale_grace: Duration::from_secs(6 * 3600),
            timeout: Duration::from_secs(5),
        }
    }
}

/// A key set as read.
struct KeySet {
    keys: HashMap<String, DecodingKey>,
    expires: Instant,
}

/// When the last fetches happened.
#[derive(Default)]
struct Fetches {
    last: Option<Instant>,
    last_failure: Option<(Instant, String)>,
}

/// What to do for one key id, given what is cached.
enum Plan {
    Use(DecodingKey),
    Refuse(KeyError),
    Fetch,
}

/// The cached key set and its fetcher.
pub struct Jwks {
    config: JwksConfig,
    client: reqwest::Client,
    cached: RwLock<Option<Arc<KeySet>>>,
    fetching: tokio::sync::Mutex<Fetches>,
    stats: Arc<Stats>,
}

impl Jwks {
    /// Nothing cached yet; the first [`Jwks::key`] (or [`Jwks::refresh`]) fetches.
    pub fn new(config: JwksConfig, stats: Arc<Stats>) -> Self {
        let client = reqwest::Client::builder()
            .timeout(config.timeout)
            .build()
            .unwrap_or_default();
        Self {
            config,
            client,
            cached: RwLock::new(None),
            fetching: tokio::sync::Mutex::new(Fetches::default()),
            stats,
        }
    }

    /// The key `kid` names. Cost: a read lock and a map lookup while the
    /// set is fresh and holds it; otherwise at most one fetch, shared by
    /// every caller that needs it.
    pub async fn key(&self, kid: &str) -> Result<DecodingKey, KeyError> {
        if let Some(set) = self.cached.read().as_ref() {
            if Instant::now() < set.expires {
                if let Some(key) = set.keys.get(kid) {
                    return Ok(key.clone());
                }
            }
        }
        let mut fetches = self.fetching.lock().await;
        // Another caller may have fetched while this one waited.
        match self.plan(kid, &fetches, Instant::now()) {
            Plan::Use(key) => return Ok(key),
            Plan::Refuse(error) => return Err(error),
            Plan::Fetch => {}
        }
        let now = Instant::now();
        fetches.last = Some(now);
        match self.fetch().await {
            Ok(set) => {
                fetches.last_failure = None;
                let key = set.keys.get(kid).cloned();
                *self.cached.write() = Some(Arc::new(set));
                key.ok_or(KeyError::Unknown)
            }
            Err(error) => {
                fetches.last_failure = Some((now, error.clone()));
                self.stale(kid, now).ok_or(KeyError::Unavailable(error))
            }
        }
    }

    /// Fetches the set now (at start, so the first request does not wait).
    pub async fn refresh(&self) -> Result<(), String> {
        let mut fetches = self.fetching.lock().await;
        let now = Instant::now();
        fetches.last = Some(now);
        match self.fetch().await {
            Ok(set) => {
                fetches.last_failure = None;
                *self.cached.write() = Some(Arc::new(set));
                Ok(())
            }
            Err(error) => {
                fetches.last_failure = Some((now, error.clone()));
                Err(error)
            }
        }
    }

    /// What to do for `kid` at `now` (called holding the fetch lock).
    fn plan(&self, kid: &str, fetches: &Fetches, now: Instant) -> Plan {
        let cached = self.cached.read().clone();
        let since = |at: Option<Instant>, wait: Duration| at.is_some_and(|t| now < t + wait);
        match cached {
            Some(set) if now < set.expires => match set.keys.get(kid) {
                Some(key) => Plan::Use(key.clone()),
                None if since(fetches.last, self.config.unknown_kid_refetch) => {
                    Plan::Refuse(KeyError::Unknown)
                }
                None => Plan::Fetch,
            },
            // Absent or expired: fetch, unless one just failed.
            _ => match &fetches.last_failure {
                Some((at, error)) if since(Some(*at), self.config.failed_retry) => {
                    match self.stale(kid, now) {
                        Some(key) => Plan::Use(key),
                        None => Plan::Refuse(KeyError::Unavailable(error.clone())),
                    }
                }
                _ => Plan::Fetch,
            },
        }
    }

    /// `kid`'s key from the cached set, if it is within its stale grace.
    fn stale(&self, kid: &str, now: Instant) -> Option<DecodingKey> {
        let cached = self.cached.read().clone()?;
        (now < cached.expires + self.config.stale_grace)
            .then(|| cached.keys.get(kid).cloned())
            .flatten()
    }

    /// Reads the set from the URL, counting and logging a failure.
    async fn fetch(&self) -> Result<KeySet, String> {
        let result = self.try_fetch().await;
        let outcome = match &result {
            Ok(set) => {
                tracing::debug!(url = %self.config.url, keys = set.keys.len(), "push token signing keys fetched");
                FetchOutcome::Ok
            }
            Err(error) => {
                if self
                    .stats
                    .warnings
                    .admit("push signing key fetches failed", "jwks")
                {
                    tracing::warn!(url = %self.config.url, %error, "fetching the push token signing keys failed; requests whose key is not cached are answered 503 (Pub/Sub retries them)");
                }
                FetchOutcome::Failed
            }
        };
        self.stats.push_jwks_fetches.add(outcome, 1);
        result
    }

    async fn try_fetch(&self) -> Result<KeySet, String> {
        let response = self
            .client
            .get(&self.config.url)
            .send()
            .await
            .map_err(|e| format!("GET {}: {e}", self.config.url))?;
        let status = response.status();
        if !status.is_success() {
            return Err(format!("GET {}: HTTP {status}", self.config.url));
        }
        let ttl = response
            .headers()
            .get(reqwest::header::CACHE_CONTROL)
            .and_then(|v| v.to_str().ok())
            .and_then(max_age)
            .unwrap_or(self.config.default_ttl)
            .clamp(self.config.min_ttl, self.config.max_ttl);
        let set: JwkSet = response
            .json()
            .await
            .map_err(|e| format!("{} is not a JWKS: {e}", self.config.url))?;
        let keys: HashMap<String, DecodingKey> = set
            .keys
            .iter()
            .filter_map(|jwk| {
                let kid = jwk.common.key_id.clone()?;
                let key = DecodingKey::from_jwk(jwk).ok()?;
                (key.family() == jsonwebtoken::AlgorithmFamily::Rsa).then_some((kid, key))
            })
            .collect();
        if keys.is_empty() {
            return Err(format!(
                "{} holds no RSA key with a key id",
                self.config.url
            ));
        }
        Ok(KeySet {
            keys,
            expires: Instant::now() + ttl,
        })
    }
}

/// The `max-age` of a `Cache-Control` value.
fn max_age(cache_control: &str) -> Option<Duration> {
    cache_control.split(',').find_map(|directive| {
        let (name, value) = directive.trim().split_once('=')?;
        name.trim()
            .eq_ignore_ascii_case("max-age")
            .then(|| value.trim().trim_matches('"').parse().ok())
            .flatten()
            .map(Duration::from_secs)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn max_age_is_read_from_cache_control() {
        assert_eq!(
            max_age("public, max-age=19741, must-revalidate, no-transform"),
            Some(Duration::from_secs(19741))
        );
        assert_eq!(max_age("MAX-AGE=\"60\""), Some(Duration::from_secs(60)));
        assert_eq!(max_age("no-cache"), None);
        assert_eq!(max_age("max-age=soon"), None);
    }
}
