//! What `setup` compares on a topic or subscription that already exists:
//! each setting it manages, as the field mask path Pub/Sub updates and a
//! line that says what changes.
//!
//! Invariant: every setting `setup` sets at creation is compared here, so
//! one that differs on an existing resource is updated (or, for a
//! subscription's topic, which Pub/Sub cannot change, refused), never
//! reported as existing and left as it was.

use google_cloud_pubsub::model::{Subscription, Topic};
use google_cloud_wkt::Duration;

/// One setting to bring in line: the update mask path and what changes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Difference {
    /// The field mask path (`ack_deadline_seconds`, ...).
    pub path: &'static str,
    /// `path: current -> wanted`, for the report.
    pub change: String,
}

fn secs(d: Option<&Duration>) -> String {
    match d {
        Some(d) if d.nanos() == 0 => format!("{}s", d.seconds()),
        Some(d) => format!("{}.{:09}s", d.seconds(), d.nanos()),
        None => "unset".into(),
    }
}

fn differ(out: &mut Vec<Difference>, path: &'static str, current: String, wanted: String) {
    if current != wanted {
        out.push(Difference {
            path,
            change: format!("{path}: {current} -> {wanted}"),
        });
    }
}

/// The settings of `wanted` (a topic as setup creates it) that `current` lacks.
pub fn topic_differences(current: &Topic, wanted: &Topic) -> Vec<Difference> {
    let mut out = Vec::new();
    differ(
        &mut out,
        "message_retention_duration",
        secs(current.message_retention_duration.as_ref()),
        secs(wanted.message_retention_duration.as_ref()),
    );
    out
}

/// Why an existing subscription cannot become `wanted` by an update.
pub fn subscription_refusal(current: &Subscription, wanted: &Subscription) -> Option<String> {
    (current.topic != wanted.topic).then(|| {
        format!(
            "it exists on topic {}, not {}; Pub/Sub cannot move a subscription to another topic: delete it or name another subscription",
            current.topic, wanted.topic
        )
    })
}

/// The settings of `wanted` (a subscription as setup creates it) that
/// `current` lacks: ack deadline, retry policy, dead-letter policy and
/// exactly-once delivery, push or pull (the push endpoint, its token's
/// service account and audience, wrapped or not).
pub fn subscription_differences(current: &Subscription, wanted: &Subscription) -> Vec<Difference> {
    let mut out = Vec::new();
    differ(
        &mut out,
        "ack_deadline_seconds",
        current.ack_deadline_seconds.to_string(),
        wanted.ack_deadline_seconds.to_string(),
    );
    let retry = |s: &Subscription| match &s.retry_policy {
        Some(p) => format!(
            "{}..{}",
            secs(p.minimum_backoff.as_ref()),
            secs(p.maximum_backoff.as_ref())
        ),
        None => "none (immediate redelivery)".into(),
    };
    if wanted.retry_policy.is_some() {
        differ(&mut out, "retry_policy", retry(current), retry(wanted));
    }
    let dead_letters = |s: &Subscription| match &s.dead_letter_policy {
        Some(p) if !p.dead_letter_topic.is_empty() => format!(
            "{} after {} attempts",
            p.dead_letter_topic, p.max_delivery_attempts
        ),
        _ => "none".into(),
    };
    if wanted.dead_letter_policy.is_some() {
        differ(
            &mut out,
            "dead_letter_policy",
            dead_letters(current),
            dead_letters(wanted),
        );
    }
    differ(
        &mut out,
        "enable_exactly_once_delivery",
        current.enable_exactly_once_delivery.to_string(),
        wanted.enable_exactly_once_delivery.to_string(),
    );
    differ(&mut out, "push_config", delivery(current), delivery(wanted));
    out
}

/// A subscription's delivery as the report names it: `pull`, or the push
/// endpoint with what its requests carry.
fn delivery(s: &Subscription) -> String {
    let Some(push) = s
        .push_config
        .as_ref()
        .filter(|p| !p.push_endpoint.is_empty())
    else {
        return "pull".into();
    };
    let token = match push.oidc_token() {
        Some(t) if t.audience.is_empty() => format!("token as {}", t.service_account_email),
        Some(t) => format!("token as {} for {}", t.service_account_email, t.audience),
        None => "no token".into(),
    };
    let body = match push.no_wrapper() {
        Some(w) if w.write_metadata => "unwrapped, metadata in headers",
        Some(_) => "unwrapped",
        None => "wrapped",
    };
    format!("push to {} ({token}, {body})", push.push_endpoint)
}

#[cfg(test)]
mod tests {
    use super::*;
    use google_cloud_pubsub::model::{DeadLetterPolicy, RetryPolicy};

    fn wanted() -> Subscription {
        Subscription::new()
            .set_topic("projects/p/topics/likes")
            .set_ack_deadline_seconds(60)
            .set_retry_policy(
                RetryPolicy::new()
                    .set_minimum_backoff(Duration::clamp(10, 0))
                    .set_maximum_backoff(Duration::clamp(600, 0)),
            )
            .set_dead_letter_policy(
                DeadLetterPolicy::new()
                    .set_dead_letter_topic("projects/p/topics/dlq")
                    .set_max_delivery_attempts(10),
            )
            .set_enable_exactly_once_delivery(true)
    }

    #[test]
    fn a_subscription_as_wanted_has_no_difference() {
        assert!(subscription_differences(&wanted(), &wanted()).is_empty());
    }

    #[test]
    fn every_managed_setting_that_differs_is_named_with_both_values() {
        let bare = Subscription::new()
            .set_topic("projects/p/topics/likes")
            .set_ack_deadline_seconds(10);
        let changes = subscription_differences(&bare, &wanted());
        let paths: Vec<&str> = changes.iter().map(|d| d.path).collect();
        assert_eq!(
            paths,
            [
                "ack_deadline_seconds",
                "retry_policy",
                "dead_letter_policy",
                "enable_exactly_once_delivery"
            ]
        );
        assert_eq!(changes[0].change, "ack_deadline_seconds: 10 -> 60");
        assert_eq!(
            changes[2].change,
            "dead_letter_policy: none -> projects/p/topics/dlq after 10 attempts"
        );
        assert_eq!(
            changes[3].change,
            "enable_exactly_once_delivery: false -> true"
        );
    }

    #[test]
    fn a_pull_subscription_is_switched_to_push_and_back_with_what_its_requests_carry() {
        use google_cloud_pubsub::model::push_config::{NoWrapper, OidcToken};
        use google_cloud_pubsub::model::PushConfig;
        let pull = Subscription::new().set_topic("projects/p/topics/likes");
        let push = pull.clone().set_push_config(
            PushConfig::new()
                .set_push_endpoint("https://h.example/pubsub/push")
                .set_oidc_token(
                    OidcToken::new()
                        .set_service_account_email("pusher@p.iam.gserviceaccount.com")
                        .set_audience("hotcount"),
                )
                .set_no_wrapper(NoWrapper::new().set_write_metadata(true)),
        );
        let to_push = subscription_differences(&pull, &push);
        assert_eq!(
            to_push.iter().map(|d| d.change.as_str()).collect::<Vec<_>>(),
            ["push_config: pull -> push to https://h.example/pubsub/push (token as pusher@p.iam.gserviceaccount.com for hotcount, unwrapped, metadata in headers)"]
        );
        let back = subscription_differences(&push, &pull);
        assert_eq!(back.len(), 1);
        assert_eq!(back[0].path, "push_config");
        assert!(back[0].change.ends_with("-> pull"), "{}", back[0].change);
        // An empty push config is pull, as Pub/Sub says.
        let empty = pull.clone().set_push_config(PushConfig::new());
        assert!(subscription_differences(&empty, &pull).is_empty());
    }

    #[test]
    fn another_topic_is_refused_with_the_reason() {
        let elsewhere = wanted().set_topic("projects/p/topics/other");
        let why = subscription_refusal(&elsewhere, &wanted()).expect("refused");
        assert!(why.contains("projects/p/topics/other"), "{why}");
        assert!(subscription_refusal(&wanted(), &wanted()).is_none());
    }

    #[test]
    fn a_topic_without_the_retention_is_updated() {
        let want = Topic::new().set_message_retention_duration(Duration::clamp(604_800, 0));
        let changes = topic_differences(&Topic::new(), &want);
        assert_eq!(
            changes,
            [Difference {
                path: "message_retention_duration",
                change: "message_retention_duration: unset -> 604800s".into()
            }]
        );
        assert!(topic_differences(&want, &want).is_empty());
    }
}
