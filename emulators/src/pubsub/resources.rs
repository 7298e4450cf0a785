//! Validation and defaults of topic and subscription settings, and update masks.
//!
//! Invariant: a `Subscription` that leaves [`normalize_subscription`] has every
//! defaulted field filled in (ack deadline, retention, retry backoff bounds,
//! dead-letter attempts) and every field within the documented range, so the
//! delivery code never re-checks or defaults anything.

use std::time::Duration;

use tonic::Status;

use super::names::{self, Kind};
use crate::proto::pubsub_v1 as pb;

/// Default ack deadline when a subscription says 0.
pub const DEFAULT_ACK_DEADLINE_SECS: i32 = 10;
/// Longest ack deadline or modack extension.
pub const MAX_ACK_DEADLINE_SECS: i32 = 600;
/// Default message retention of a subscription.
pub const DEFAULT_RETENTION: Duration = Duration::from_secs(7 * 24 * 3600);
const MIN_RETENTION: Duration = Duration::from_secs(600);
const MAX_RETENTION: Duration = Duration::from_secs(31 * 24 * 3600);
const DEFAULT_MIN_BACKOFF: Duration = Duration::from_secs(10);
const DEFAULT_MAX_BACKOFF: Duration = Duration::from_secs(600);
const MAX_BACKOFF: Duration = Duration::from_secs(600);
/// Default `max_delivery_attempts` when a dead-letter policy says 0.
pub const DEFAULT_MAX_DELIVERY_ATTEMPTS: i32 = 5;

/// A protobuf duration as a std duration; negative or malformed -> None.
pub fn to_std(d: &prost_types::Duration) -> Option<Duration> {
    if d.seconds < 0 || d.nanos < 0 || d.nanos >= 1_000_000_000 {
        return None;
    }
    Some(Duration::new(
        u64::try_from(d.seconds).ok()?,
        d.nanos.unsigned_abs(),
    ))
}

/// A std duration as a protobuf duration.
pub fn to_proto(d: Duration) -> prost_types::Duration {
    prost_types::Duration {
        seconds: i64::try_from(d.as_secs()).unwrap_or(i64::MAX),
        nanos: i32::try_from(d.subsec_nanos()).unwrap_or(0),
    }
}

fn in_range(
    field: &str,
    d: &Option<prost_types::Duration>,
    min: Duration,
    max: Duration,
    default: Duration,
) -> Result<Duration, Status> {
    let Some(d) = d else { return Ok(default) };
    match to_std(d) {
        Some(v) if v >= min && v <= max => Ok(v),
        _ => Err(Status::invalid_argument(format!(
            "Invalid {field}: must be between {}s and {}s",
            min.as_secs(),
            max.as_secs()
        ))),
    }
}

/// Checks a topic to be created; fills in nothing the real service would not.
pub fn normalize_topic(topic: &mut pb::Topic) -> Result<(), Status> {
    names::parse(&topic.name, Kind::Topic)?;
    if topic.message_retention_duration.is_some() {
        in_range(
            "message_retention_duration",
            &topic.message_retention_duration,
            MIN_RETENTION,
            MAX_RETENTION,
            DEFAULT_RETENTION,
        )?;
    }
    topic.state = 1; // ACTIVE
    Ok(())
}

/// Checks a subscription and fills in its defaults (see the module invariant).
pub fn normalize_subscription(sub: &mut pb::Subscription) -> Result<(), Status> {
    names::parse(&sub.name, Kind::Subscription)?;
    if sub.topic != names::DELETED_TOPIC {
        names::parse(&sub.topic, Kind::Topic)?;
    }
    if sub.ack_deadline_seconds == 0 {
        sub.ack_deadline_seconds = DEFAULT_ACK_DEADLINE_SECS;
    }
    if !(DEFAULT_ACK_DEADLINE_SECS..=MAX_ACK_DEADLINE_SECS).contains(&sub.ack_deadline_seconds) {
        return Err(Status::invalid_argument(format!(
            "Invalid ack_deadline_seconds: {} (must be between 10 and 600)",
            sub.ack_deadline_seconds
        )));
    }
    let retention = in_range(
        "message_retention_duration",
        &sub.message_retention_duration,
        MIN_RETENTION,
        MAX_RETENTION,
        DEFAULT_RETENTION,
    )?;
    sub.message_retention_duration = Some(to_proto(retention));
    if let Some(policy) = sub.retry_policy.as_mut() {
        let min = in_range(
            "minimum_backoff",
            &policy.minimum_backoff,
            Duration::ZERO,
            MAX_BACKOFF,
            DEFAULT_MIN_BACKOFF,
        )?;
        let max = in_range(
            "maximum_backoff",
            &policy.maximum_backoff,
            Duration::ZERO,
            MAX_BACKOFF,
            DEFAULT_MAX_BACKOFF,
        )?;
        if min > max {
            return Err(Status::invalid_argument(
                "Invalid retry_policy: minimum_backoff must not exceed maximum_backoff",
            ));
        }
        policy.minimum_backoff = Some(to_proto(min));
        policy.maximum_backoff = Some(to_proto(max));
    }
    if let Some(policy) = sub.dead_letter_policy.as_mut() {
        if policy.dead_letter_topic.is_empty() {
            sub.dead_letter_policy = None;
        } else {
            names::parse(&policy.dead_letter_topic, Kind::Topic)?;
            if policy.max_delivery_attempts == 0 {
                policy.max_delivery_attempts = DEFAULT_MAX_DELIVERY_ATTEMPTS;
            }
            if !(5..=100).contains(&policy.max_delivery_attempts) {
                return Err(Status::invalid_argument(format!(
                    "Invalid max_delivery_attempts: {} (must be between 5 and 100)",
                    policy.max_delivery_attempts
                )));
            }
        }
    }
    normalize_push_config(&mut sub.push_config)?;
    if sub.bigquery_config.is_some()
        || sub.cloud_storage_config.is_some()
        || sub.bigtable_config.is_some()
    {
        return Err(Status::unimplemented(
            "export subscriptions are not supported by this emulator",
        ));
    }
    if !sub.filter.is_empty() {
        return Err(Status::unimplemented(
            "subscription filters are not supported by this emulator",
        ));
    }
    sub.state = 1; // ACTIVE
    Ok(())
}

/// The push format attribute and the values Google accepts for it
/// (`PushConfig.attributes` in `google/pubsub/v1/pubsub.proto`).
pub const PUSH_VERSION_ATTRIBUTE: &str = "x-goog-version";

/// Checks a push config: an empty endpoint means pull (the config is
/// cleared); otherwise an http(s) URL, `x-goog-version` `v1` (the default)
/// or `v1beta2`, and an OIDC token needs its service account.
pub fn normalize_push_config(config: &mut Option<pb::PushConfig>) -> Result<(), Status> {
    let Some(push) = config.as_mut() else {
        *config = Some(pb::PushConfig::default());
        return Ok(());
    };
    if push.push_endpoint.is_empty() {
        *push = pb::PushConfig::default();
        return Ok(());
    }
    let endpoint_ok = reqwest::Url::parse(&push.push_endpoint)
        .is_ok_and(|u| matches!(u.scheme(), "http" | "https") && u.host_str().is_some());
    if !endpoint_ok {
        return Err(Status::invalid_argument(format!(
            "Invalid push endpoint given (endpoint={}).",
            push.push_endpoint
        )));
    }
    for (key, value) in &push.attributes {
        if key != PUSH_VERSION_ATTRIBUTE {
            return Err(Status::invalid_argument(format!(
                "Invalid push config attribute {key:?}: the only supported attribute is x-goog-version."
            )));
        }
        match value.as_str() {
            "v1" | "v1beta2" => {}
            "v1beta1" => {
                return Err(Status::unimplemented(
                    "The v1beta1 push format is not supported by this emulator; use v1.",
                ))
            }
            other => {
                return Err(Status::invalid_argument(format!(
                    "Invalid x-goog-version {other:?}: must be v1, v1beta1 or v1beta2."
                )))
            }
        }
    }
    push.attributes
        .entry(PUSH_VERSION_ATTRIBUTE.into())
        .or_insert_with(|| "v1".into());
    if let Some(pb::push_config::AuthenticationMethod::OidcToken(token)) =
        &push.authentication_method
    {
        if token.service_account_email.is_empty() {
            return Err(Status::invalid_argument(
                "Invalid push config: an OIDC token needs a service account email.",
            ));
        }
    }
    Ok(())
}

/// The push config `next`, keeping `current`'s `x-goog-version` when `next`
/// does not set one (ModifyPushConfig's rule).
pub fn modified_push_config(
    current: &Option<pb::PushConfig>,
    mut next: pb::PushConfig,
) -> pb::PushConfig {
    if !next.push_endpoint.is_empty() && !next.attributes.contains_key(PUSH_VERSION_ATTRIBUTE) {
        if let Some(version) = current
            .as_ref()
            .and_then(|c| c.attributes.get(PUSH_VERSION_ATTRIBUTE))
        {
            next.attributes
                .insert(PUSH_VERSION_ATTRIBUTE.into(), version.clone());
        }
    }
    next
}

/// Applies `update` to `current` for the fields in `mask` (snake_case paths).
pub fn update_subscription(
    current: &pb::Subscription,
    update: pb::Subscription,
    mask: &[String],
) -> Result<pb::Subscription, Status> {
    if mask.is_empty() {
        return Err(Status::invalid_argument("update_mask must not be empty"));
    }
    let mut next = current.clone();
    for path in mask {
        match path.as_str() {
            "ack_deadline_seconds" => next.ack_deadline_seconds = update.ack_deadline_seconds,
            "retain_acked_messages" => next.retain_acked_messages = update.retain_acked_messages,
            "message_retention_duration" => {
                next.message_retention_duration = update.message_retention_duration
            }
            "labels" => next.labels = update.labels.clone(),
            "expiration_policy" => next.expiration_policy = update.expiration_policy,
            "dead_letter_policy" => next.dead_letter_policy = update.dead_letter_policy.clone(),
            "retry_policy" => next.retry_policy = update.retry_policy,
            "enable_exactly_once_delivery" => {
                next.enable_exactly_once_delivery = update.enable_exactly_once_delivery
            }
            "push_config" => {
                next.push_config = Some(modified_push_config(
                    &current.push_config,
                    update.push_config.clone().unwrap_or_default(),
                ))
            }
            "detached" => next.detached = update.detached,
            other => {
                return Err(Status::invalid_argument(format!(
                    "Invalid update_mask provided in the UpdateSubscriptionRequest: the field {other} cannot be updated"
                )))
            }
        }
    }
    normalize_subscription(&mut next)?;
    Ok(next)
}

/// Applies `update` to `current` for the fields in `mask` (snake_case paths).
pub fn update_topic(
    current: &pb::Topic,
    update: pb::Topic,
    mask: &[String],
) -> Result<pb::Topic, Status> {
    if mask.is_empty() {
        return Err(Status::invalid_argument("update_mask must not be empty"));
    }
    let mut next = current.clone();
    for path in mask {
        match path.as_str() {
            "labels" => next.labels = update.labels.clone(),
            "message_retention_duration" => {
                next.message_retention_duration = update.message_retention_duration
            }
            "kms_key_name" => next.kms_key_name = update.kms_key_name.clone(),
            other => {
                return Err(Status::invalid_argument(format!(
                    "Invalid update_mask provided in the UpdateTopicRequest: the field {other} cannot be updated"
                )))
            }
        }
    }
    normalize_topic(&mut next)?;
    Ok(next)
}

/// The settings delivery needs, read once from a normalized subscription.
#[derive(Clone, Debug)]
pub struct Policy {
    /// Ack deadline for Pull deliveries.
    pub ack_deadline: Duration,
    /// How long an unacked message is kept.
    pub retention: Duration,
    /// Keep acked messages for Seek.
    pub retain_acked: bool,
    /// (minimum, maximum) redelivery backoff, when a retry policy is set.
    pub backoff: Option<(Duration, Duration)>,
    /// (dead-letter topic, max delivery attempts), when a dead-letter policy is set.
    pub dead_letter: Option<(String, u32)>,
    /// Exactly-once delivery.
    pub exactly_once: bool,
    /// Message ordering (reported; see the docs for what is enforced).
    pub ordering: bool,
    /// Where and how messages are pushed; `None` for a pull subscription.
    pub push: Option<Push>,
}

/// A push subscription's delivery settings.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Push {
    /// The URL messages are POSTed to.
    pub endpoint: String,
    /// (service account email, audience) of the OIDC token each request
    /// carries; the audience defaults to the endpoint.
    pub oidc: Option<(String, String)>,
    /// `None`: the wrapped JSON body; `Some(write_metadata)`: the data as
    /// the body, metadata in headers when `write_metadata`.
    pub unwrapped: Option<bool>,
}

impl Push {
    /// The delivery settings of a normalized push config, if it pushes.
    pub fn of(config: Option<&pb::PushConfig>) -> Option<Self> {
        let config = config.filter(|c| !c.push_endpoint.is_empty())?;
        let oidc = match &config.authentication_method {
            Some(pb::push_config::AuthenticationMethod::OidcToken(t)) => {
                let audience = if t.audience.is_empty() {
                    config.push_endpoint.clone()
                } else {
                    t.audience.clone()
                };
                Some((t.service_account_email.clone(), audience))
            }
            None => None,
        };
        let unwrapped = match &config.wrapper {
            Some(pb::push_config::Wrapper::NoWrapper(w)) => Some(w.write_metadata),
            _ => None,
        };
        Some(Self {
            endpoint: config.push_endpoint.clone(),
            oidc,
            unwrapped,
        })
    }
}

impl Policy {
    /// Reads the policy of a normalized subscription.
    pub fn of(sub: &pb::Subscription) -> Self {
        let secs = |d: &Option<prost_types::Duration>, default: Duration| {
            d.as_ref().and_then(to_std).unwrap_or(default)
        };
        Self {
            ack_deadline: Duration::from_secs(sub.ack_deadline_seconds.unsigned_abs().into()),
            retention: secs(&sub.message_retention_duration, DEFAULT_RETENTION),
            retain_acked: sub.retain_acked_messages,
            backoff: sub.retry_policy.as_ref().map(|p| {
                (
                    secs(&p.minimum_backoff, DEFAULT_MIN_BACKOFF),
                    secs(&p.maximum_backoff, DEFAULT_MAX_BACKOFF),
                )
            }),
            dead_letter: sub.dead_letter_policy.as_ref().map(|p| {
                (
                    p.dead_letter_topic.clone(),
                    p.max_delivery_attempts.unsigned_abs(),
                )
            }),
            exactly_once: sub.enable_exactly_once_delivery,
            ordering: sub.enable_message_ordering,
            push: Push::of(sub.push_config.as_ref()),
        }
    }

    /// Backoff before redelivery after the `deliveries`-th delivery failed.
    pub fn backoff_after(&self, deliveries: u32) -> Duration {
        let Some((min, max)) = self.backoff else {
            return Duration::ZERO;
        };
        let exp = deliveries.saturating_sub(1).min(20);
        min.saturating_mul(1 << exp).min(max)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sub() -> pb::Subscription {
        pb::Subscription {
            name: "projects/p/subscriptions/sub".into(),
            topic: "projects/p/topics/top".into(),
            ..Default::default()
        }
    }

    #[test]
    fn zero_ack_deadline_means_ten_seconds() {
        let mut s = sub();
        normalize_subscription(&mut s).unwrap();
        assert_eq!(s.ack_deadline_seconds, 10);
    }

    #[test]
    fn out_of_range_settings_are_invalid() {
        for edit in [
            (|s: &mut pb::Subscription| s.ack_deadline_seconds = 601) as fn(&mut _),
            |s| s.ack_deadline_seconds = 5,
            |s| {
                s.dead_letter_policy = Some(pb::DeadLetterPolicy {
                    dead_letter_topic: "projects/p/topics/dlq".into(),
                    max_delivery_attempts: 4,
                })
            },
            |s| s.message_retention_duration = Some(to_proto(Duration::from_secs(60))),
        ] {
            let mut s = sub();
            edit(&mut s);
            let err = normalize_subscription(&mut s).unwrap_err();
            assert_eq!(err.code(), tonic::Code::InvalidArgument);
        }
    }

    #[test]
    fn push_configs_are_checked_and_defaulted() {
        let push = |endpoint: &str| pb::PushConfig {
            push_endpoint: endpoint.into(),
            ..Default::default()
        };
        let mut config = Some(push("http://127.0.0.1:9/push"));
        normalize_push_config(&mut config).unwrap();
        let config = config.unwrap();
        assert_eq!(config.attributes[PUSH_VERSION_ATTRIBUTE], "v1");
        let policy = Push::of(Some(&config)).unwrap();
        assert_eq!(policy.endpoint, "http://127.0.0.1:9/push");
        for bad in ["not a url", "ftp://host/x", "http://"] {
            let err = normalize_push_config(&mut Some(push(bad))).unwrap_err();
            assert_eq!(err.code(), tonic::Code::InvalidArgument, "{bad}");
        }
        let mut empty = Some(pb::PushConfig {
            attributes: [("x-goog-version".to_string(), "v1".to_string())].into(),
            ..Default::default()
        });
        normalize_push_config(&mut empty).unwrap();
        assert_eq!(empty, Some(pb::PushConfig::default()), "no endpoint = pull");
        assert!(Push::of(empty.as_ref()).is_none());
        let mut oidc = push("https://example.com/p");
        oidc.authentication_method = Some(pb::push_config::AuthenticationMethod::OidcToken(
            pb::push_config::OidcToken {
                service_account_email: "sa@p.iam.gserviceaccount.com".into(),
                audience: String::new(),
            },
        ));
        let policy = Push::of(Some(&oidc)).unwrap();
        assert_eq!(
            policy.oidc,
            Some((
                "sa@p.iam.gserviceaccount.com".to_string(),
                "https://example.com/p".to_string()
            )),
            "the audience defaults to the endpoint"
        );
    }

    #[test]
    fn modify_push_config_keeps_the_version_when_not_given() {
        let mut current = Some(pb::PushConfig {
            push_endpoint: "http://a/".into(),
            attributes: [("x-goog-version".to_string(), "v1beta2".to_string())].into(),
            ..Default::default()
        });
        normalize_push_config(&mut current).unwrap();
        let next = modified_push_config(
            &current,
            pb::PushConfig {
                push_endpoint: "http://b/".into(),
                ..Default::default()
            },
        );
        assert_eq!(next.attributes[PUSH_VERSION_ATTRIBUTE], "v1beta2");
    }

    #[test]
    fn backoff_grows_exponentially_up_to_the_maximum() {
        let policy = Policy {
            backoff: Some((Duration::from_secs(10), Duration::from_secs(60))),
            ..Policy::of(&sub())
        };
        assert_eq!(policy.backoff_after(1), Duration::from_secs(10));
        assert_eq!(policy.backoff_after(2), Duration::from_secs(20));
        assert_eq!(policy.backoff_after(3), Duration::from_secs(40));
        assert_eq!(policy.backoff_after(4), Duration::from_secs(60));
    }
}
