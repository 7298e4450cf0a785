//! One milestone webhook call: the body, the `Idempotency-Key`, the
//! HMAC-SHA256 signature, the POST, and what its answer means.
//!
//! Invariants: the body of a record is the same bytes at every attempt and
//! its key is `{consumer}:{post}:{n}`, so a receiver that keys on it sees a
//! repeated call as the same one; the signature covers the timestamp and
//! the exact bytes sent, with one `v1=` per secret (the current one first,
//! then the one being rotated out), so a receiver that knows either
//! verifies every call; a 2xx is the only answer that counts as accepted;
//! redirects are not followed (the receiver's URL is configuration).

use std::time::{Duration, SystemTime};

use hmac::{KeyInit, Mac};
use sha2::Sha256;

use crate::store::milestone::MilestoneRecord;

/// The header naming the call for the receiver's dedupe.
pub const IDEMPOTENCY_KEY: &str = "Idempotency-Key";

/// The signature header: `t={unix seconds},v1={hex HMAC-SHA256}` over
/// `{t}.{body}` with the shared secret; while a secret is rotated, a second
/// `v1=` with the previous one (as Stripe signs during a roll).
pub const SIGNATURE: &str = "Hotcount-Signature";

/// Bytes of an error answer's body kept in the record's `last_error`.
const ERROR_BODY_BYTES: usize = 256;

/// What an answer means for the record.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Answer {
    /// 2xx: delivered.
    Accepted,
    /// 5xx, 408, 429, a timeout or a connection failure: try again (after
    /// `after` when the receiver said so with `Retry-After`).
    Retry {
        /// Why.
        why: String,
        /// The receiver's `Retry-After`, if any.
        after: Option<Duration>,
    },
    /// Any other answer (a 4xx, a redirect): give up, with why.
    Refused {
        /// Why.
        why: String,
    },
}

/// What an HTTP status means (without its body).
pub fn classify(status: u16) -> Answer {
    match status {
        200..=299 => Answer::Accepted,
        408 | 429 | 500..=599 => Answer::Retry {
            why: format!("HTTP {status}"),
            after: None,
        },
        300..=399 => Answer::Refused {
            why: format!("HTTP {status}: redirects are not followed; set the final URL"),
        },
        _ => Answer::Refused {
            why: format!("HTTP {status}"),
        },
    }
}

/// The `Idempotency-Key` of `record`: `{consumer}:{post}:{n}`.
pub fn idempotency_key(consumer: &str, record: &MilestoneRecord) -> String {
    format!("{consumer}:{}:{}", record.post_id, record.milestone)
}

/// The JSON body: `{"postId", "milestone", "likes", "reachedAt"}`
/// (`reachedAt` RFC 3339, UTC, microseconds).
pub fn body(record: &MilestoneRecord) -> Vec<u8> {
    let reached_at = chrono::DateTime::from_timestamp_micros(record.reached_at)
        .unwrap_or_default()
        .to_rfc3339_opts(chrono::SecondsFormat::Micros, true);
    let json = serde_json::json!({
        "postId": record.post_id,
        "milestone": record.milestone,
        "likes": record.likes,
        "reachedAt": reached_at,
    });
    json.to_string().into_bytes()
}

/// The signature header's value for `body` sent at `timestamp` (Unix
/// seconds): `t={timestamp},v1={hex HMAC-SHA256(secret, "{t}.{body}")}`.
pub fn signature(secret: &[u8], timestamp: u64, body: &[u8]) -> String {
    signatures(&[secret], timestamp, body)
}

/// [`signature`] with one `v1=` per secret, in the order given (the
/// current secret first): `t={timestamp},v1={hex},v1={hex}`.
pub fn signatures(secrets: &[&[u8]], timestamp: u64, body: &[u8]) -> String {
    let mut header = format!("t={timestamp}");
    for secret in secrets {
        let mut mac = <hmac::Hmac<Sha256> as KeyInit>::new_from_slice(secret)
            .expect("HMAC takes a key of any length");
        mac.update(timestamp.to_string().as_bytes());
        mac.update(b".");
        mac.update(body);
        header.push_str(",v1=");
        for byte in mac.finalize().into_bytes() {
            header.push_str(&format!("{byte:02x}"));
        }
    }
    header
}

/// The webhook a dispatcher calls.
#[derive(Clone, Debug)]
pub struct Webhook {
    client: reqwest::Client,
    url: reqwest::Url,
    /// The signing secrets, the current one first; none: calls are unsigned.
    secrets: Vec<Vec<u8>>,
    consumer: String,
    timeout: Duration,
}

impl Webhook {
    /// A webhook at `url`, each call bounded by `timeout`, signed with
    /// `secret` when given, keyed under `consumer`.
    pub fn new(
        url: reqwest::Url,
        secret: Option<&str>,
        consumer: &str,
        timeout: Duration,
    ) -> Result<Self, reqwest::Error> {
        let client = reqwest::Client::builder()
            .timeout(timeout)
            .connect_timeout(timeout)
            .redirect(reqwest::redirect::Policy::none())
            .user_agent(concat!("hotcount/", env!("CARGO_PKG_VERSION")))
            .build()?;
        Ok(Self {
            client,
            url,
            secrets: secret.map(|s| s.as_bytes().to_vec()).into_iter().collect(),
            consumer: consumer.to_string(),
            timeout,
        })
    }

    /// Signs each call with `previous` too, after the current secret (while
    /// the secret is rotated); `None`, or a webhook without a secret, signs
    /// as before.
    pub fn with_previous_secret(mut self, previous: Option<&str>) -> Self {
        if let (Some(previous), false) = (previous, self.secrets.is_empty()) {
            self.secrets.push(previous.as_bytes().to_vec());
        }
        self
    }

    /// The longest one call waits for its answer.
    pub fn timeout(&self) -> Duration {
        self.timeout
    }

    /// POSTs `record` once and says what the answer means.
    pub async fn call(&self, record: &MilestoneRecord) -> Answer {
        let body = body(record);
        let mut request = self
            .client
            .post(self.url.clone())
            .header(reqwest::header::CONTENT_TYPE, "application/json")
            .header(IDEMPOTENCY_KEY, idempotency_key(&self.consumer, record));
        if !self.secrets.is_empty() {
            let now = SystemTime::now()
                .duration_since(SystemTime::UNIX_EPOCH)
                .map_or(0, |d| d.as_secs());
            let secrets: Vec<&[u8]> = self.secrets.iter().map(Vec::as_slice).collect();
            request = request.header(SIGNATURE, signatures(&secrets, now, &body));
        }
        let response = match request.body(body).send().await {
            Ok(response) => response,
            Err(error) => {
                let what = if error.is_timeout() {
                    "timed out"
                } else if error.is_connect() {
                    "could not connect"
                } else {
                    "failed"
                };
                // Without the URL: it may carry a token, and `why` is
                // logged and stored.
                return Answer::Retry {
                    why: format!("the call {what}: {}", error.without_url()),
                    after: None,
                };
            }
        };
        let status = response.status().as_u16();
        let answer = classify(status);
        if answer == Answer::Accepted {
            return answer;
        }
        let after = response
            .headers()
            .get(reqwest::header::RETRY_AFTER)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.trim().parse::<u64>().ok())
            .map(Duration::from_secs);
        let said = error_body(response).await;
        match answer {
            Answer::Retry { why, .. } => Answer::Retry {
                why: join(why, &said),
                after,
            },
            Answer::Refused { why } => Answer::Refused {
                why: join(why, &said),
            },
            Answer::Accepted => Answer::Accepted,
        }
    }
}

fn join(why: String, said: &str) -> String {
    if said.is_empty() {
        why
    } else {
        format!("{why}: {said}")
    }
}

/// The first bytes of an error answer's body, as text (bounded however
/// much the receiver sends).
async fn error_body(mut response: reqwest::Response) -> String {
    let mut bytes = Vec::new();
    while bytes.len() < ERROR_BODY_BYTES {
        match response.chunk().await {
            Ok(Some(chunk)) => bytes.extend_from_slice(&chunk),
            _ => break,
        }
    }
    bytes.truncate(ERROR_BODY_BYTES);
    String::from_utf8_lossy(&bytes).trim().to_string()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::milestone::MilestoneStatus;

    fn record() -> MilestoneRecord {
        MilestoneRecord {
            post_id: "post-7".into(),
            milestone: 1000,
            likes: 1004,
            reached_at: 1_700_000_000_123_456,
            status: MilestoneStatus::Leased,
            attempts: 1,
            due_at: None,
            last_error: None,
            delivered_at: None,
        }
    }

    #[test]
    fn the_body_and_key_name_the_milestone() {
        let body: serde_json::Value = serde_json::from_slice(&body(&record())).expect("json");
        assert_eq!(
            body,
            serde_json::json!({"postId": "post-7", "milestone": 1000, "likes": 1004,
                "reachedAt": "2023-11-14T22:13:20.123456Z"})
        );
        assert_eq!(idempotency_key("c1", &record()), "c1:post-7:1000");
    }

    #[test]
    fn the_signature_is_hmac_sha256_of_timestamp_dot_body() {
        // Computed independently: Python's hmac.new(b"Jefe",
        // b'1700000000.{"postId":"p"}', hashlib.sha256).hexdigest().
        let sig = signature(b"Jefe", 1_700_000_000, br#"{"postId":"p"}"#);
        assert_eq!(
            sig,
            "t=1700000000,v1=13ce53c736e466c19085dc7debfd1f05b3066e9f036f14f87cbc5a2e925f60bf"
        );
        assert_ne!(
            sig,
            signature(b"other", 1_700_000_000, br#"{"postId":"p"}"#)
        );
    }

    #[test]
    fn a_rotation_signs_with_the_new_secret_first_then_the_old() {
        let body = br#"{"postId":"p"}"#;
        let both = signatures(&[b"new", b"Jefe"], 1_700_000_000, body);
        let new = signature(b"new", 1_700_000_000, body);
        let old = signature(b"Jefe", 1_700_000_000, body);
        let old_v1 = old.strip_prefix("t=1700000000").expect("t first");
        assert_eq!(both, format!("{new}{old_v1}"));
        assert_eq!(
            old_v1,
            ",v1=13ce53c736e466c19085dc7debfd1f05b3066e9f036f14f87cbc5a2e925f60bf"
        );
    }

    #[test]
    fn only_408_429_and_5xx_are_retried() {
        assert_eq!(classify(204), Answer::Accepted);
        for status in [408, 429, 500, 502, 503] {
            assert!(matches!(classify(status), Answer::Retry { .. }), "{status}");
        }
        for status in [301, 400, 401, 403, 404, 409, 410, 422] {
            assert!(
                matches!(classify(status), Answer::Refused { .. }),
                "{status}"
            );
        }
    }
}
