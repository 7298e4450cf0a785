//! `hotcount setup`: the topic, dead-letter topic with its inspect
//! subscription, and the consumer subscription, created idempotently; with
//! `--store postgres://...`, the PostgreSQL schema migrations applied.
//!
//! Invariant: an existing resource is left as it is and reported as such;
//! running setup twice changes nothing. Migrations are applied only here
//! (never by `run`), each once, by [`PgDb::migrate`].

use google_cloud_gax::error::rpc::Code;
use google_cloud_pubsub::model::push_config::{NoWrapper, OidcToken};
use google_cloud_pubsub::model::{DeadLetterPolicy, PushConfig, RetryPolicy, Subscription, Topic};

use crate::config::{check_pubsub_id, Endpoints, StoreLocation};
use crate::connect;
use crate::store::postgres::{schema, MigrateError, PgConfigError, PgDb, PgDbConfig};

/// The store `setup` prepares besides Pub/Sub.
#[derive(clap::Args, Clone, Debug)]
pub struct SetupStore {
    /// The store: `firestore` (nothing to create: collections appear with
    /// their first document) or a PostgreSQL connection URL, whose schema
    /// migrations are applied.
    #[arg(long = "store", env = "HOTCOUNT_STORE", default_value = "firestore")]
    pub store: StoreLocation,
}

/// What to create.
#[derive(clap::Args, Clone, Debug)]
pub struct SetupArgs {
    /// Google Cloud project id.
    #[arg(long, env = "HOTCOUNT_PROJECT", default_value = "hotcount-local")]
    pub project: String,
    /// Topic the like events are published to.
    #[arg(long, env = "HOTCOUNT_TOPIC", default_value = "likes")]
    pub topic: String,
    /// The consumer subscription.
    #[arg(long, env = "HOTCOUNT_SUBSCRIPTION", default_value = "likes-hotcount")]
    pub subscription: String,
    /// Dead-letter topic.
    #[arg(long, default_value = "likes-dead-letter")]
    pub dead_letter_topic: String,
    /// Subscription on the dead-letter topic, for inspection.
    #[arg(long, default_value = "likes-dead-letter-inspect")]
    pub dead_letter_subscription: String,
    /// Ack deadline of the subscription, in seconds (10..=600).
    #[arg(long, default_value_t = 60)]
    pub ack_deadline_secs: i32,
    /// Retry policy minimum backoff, in seconds (0..=600).
    #[arg(long, default_value_t = 10)]
    pub min_retry_backoff_secs: i64,
    /// Retry policy maximum backoff, in seconds (0..=600).
    #[arg(long, default_value_t = 600)]
    pub max_retry_backoff_secs: i64,
    /// Deliveries before a message is dead-lettered (5..=100).
    #[arg(long, default_value_t = 10)]
    pub max_delivery_attempts: i32,
    /// Enable exactly-once delivery on the subscription (pull only).
    #[arg(long, default_value_t = false)]
    pub exactly_once: bool,
    /// How the subscription delivers: pull (the default) or push.
    #[command(flatten)]
    pub push: SetupPush,
}

/// A push subscription: where Pub/Sub POSTs, and as whom.
#[derive(clap::Args, Clone, Debug, Default, PartialEq, Eq)]
pub struct SetupPush {
    /// Make the consumer subscription a push subscription to this URL
    /// (`https://.../pubsub/push`, served by `hotcount run --delivery push`).
    #[arg(
        long,
        requires = "push_service_account",
        conflicts_with = "exactly_once"
    )]
    pub push_endpoint: Option<String>,
    /// The service account Pub/Sub signs each push request's OIDC token as
    /// (`run --push-service-account`).
    #[arg(long, requires = "push_endpoint")]
    pub push_service_account: Option<String>,
    /// The token's audience (`run --push-audience`); unset, Pub/Sub uses
    /// the endpoint URL.
    #[arg(long, requires = "push_endpoint")]
    pub push_audience: Option<String>,
    /// Deliver the payload as the body (metadata in `x-goog-pubsub-*`
    /// headers) instead of Pub/Sub's JSON wrapper.
    #[arg(long, requires = "push_endpoint")]
    pub push_no_wrapper: bool,
}

impl SetupPush {
    /// The subscription's push config, or `None` for pull. Refuses an
    /// endpoint that is not an http(s) URL, a push subscription without a
    /// service account to sign its tokens, and exactly-once with push
    /// (Pub/Sub offers it only to pull subscriptions).
    pub fn config(&self, exactly_once: bool) -> Result<Option<PushConfig>, SetupError> {
        let Some(endpoint) = &self.push_endpoint else {
            return Ok(None);
        };
        if !(endpoint.starts_with("https://") || endpoint.starts_with("http://")) {
            return Err(SetupError::Invalid(format!(
                "--push-endpoint {endpoint:?} is not an http(s) URL"
            )));
        }
        if exactly_once {
            return Err(SetupError::Invalid(
                "--exactly-once is for pull subscriptions only; a push subscription cannot have it"
                    .into(),
            ));
        }
        let Some(account) = self.push_service_account.as_ref().filter(|a| !a.is_empty()) else {
            return Err(SetupError::Invalid(
                "--push-endpoint needs --push-service-account (hotcount verifies the token it signs)".into(),
            ));
        };
        let mut token = OidcToken::new().set_service_account_email(account.clone());
        if let Some(audience) = &self.push_audience {
            token = token.set_audience(audience.clone());
        }
        let mut config = PushConfig::new()
            .set_push_endpoint(endpoint.clone())
            .set_oidc_token(token);
        if self.push_no_wrapper {
            config = config.set_no_wrapper(NoWrapper::new().set_write_metadata(true));
        }
        Ok(Some(config))
    }
}

/// Whether a resource was made now or already there.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Created {
    /// Created by this run.
    Created,
    /// Already existed (left unchanged).
    Existed,
}

/// A setup failure.
#[derive(Debug, thiserror::Error)]
pub enum SetupError {
    /// A setting is invalid.
    #[error("invalid setting: {0}")]
    Invalid(String),
    /// Pub/Sub refused or failed.
    #[error("creating {resource}: {message}")]
    PubSub {
        /// The resource name.
        resource: String,
        /// The error.
        message: String,
        /// Whether retrying may help.
        retryable: bool,
    },
    /// No client.
    #[error(transparent)]
    Connect(#[from] connect::ConnectError),
    /// The PostgreSQL URL or pool settings cannot be used.
    #[error(transparent)]
    Postgres(#[from] PgConfigError),
    /// Applying the PostgreSQL schema migrations failed (none is half-applied).
    #[error("migrating the PostgreSQL schema: {0}")]
    Migrate(#[from] MigrateError),
}

impl SetupError {
    /// Whether running setup again may succeed.
    pub fn is_retryable(&self) -> bool {
        match self {
            SetupError::PubSub { retryable, .. } => *retryable,
            SetupError::Migrate(e) => e.is_retryable(),
            _ => false,
        }
    }
}

fn outcome<T>(
    resource: &str,
    result: google_cloud_pubsub::Result<T>,
) -> Result<Created, SetupError> {
    match result {
        Ok(_) => Ok(Created::Created),
        Err(e) => match e.status().map(|s| s.code) {
            Some(Code::AlreadyExists) => Ok(Created::Existed),
            code => Err(SetupError::PubSub {
                resource: resource.to_string(),
                message: e.to_string(),
                retryable: matches!(
                    code,
                    Some(Code::Unavailable | Code::DeadlineExceeded | Code::Aborted)
                ),
            }),
        },
    }
}

fn duration(secs: i64) -> google_cloud_wkt::Duration {
    google_cloud_wkt::Duration::clamp(secs, 0)
}

/// Creates what is missing; returns each resource with what happened to it.
pub async fn setup(
    endpoints: &Endpoints,
    args: &SetupArgs,
) -> Result<Vec<(String, Created)>, SetupError> {
    for id in [
        &args.topic,
        &args.subscription,
        &args.dead_letter_topic,
        &args.dead_letter_subscription,
    ] {
        check_pubsub_id(id).map_err(SetupError::Invalid)?;
    }
    if !(10..=600).contains(&args.ack_deadline_secs) {
        return Err(SetupError::Invalid(
            "--ack-deadline-secs must be within 10..=600".into(),
        ));
    }
    if !(5..=100).contains(&args.max_delivery_attempts) {
        return Err(SetupError::Invalid(
            "--max-delivery-attempts must be within 5..=100".into(),
        ));
    }
    let push = args.push.config(args.exactly_once)?;
    let backoffs = [args.min_retry_backoff_secs, args.max_retry_backoff_secs];
    if backoffs.iter().any(|b| !(0..=600).contains(b)) || backoffs[0] > backoffs[1] {
        return Err(SetupError::Invalid(
            "retry backoffs must be within 0..=600 s, min <= max".into(),
        ));
    }
    let p = &args.project;
    let topic = format!("projects/{p}/topics/{}", args.topic);
    let dlq_topic = format!("projects/{p}/topics/{}", args.dead_letter_topic);
    let dlq_sub = format!(
        "projects/{p}/subscriptions/{}",
        args.dead_letter_subscription
    );
    let sub = format!("projects/{p}/subscriptions/{}", args.subscription);

    let topics = connect::topic_admin(endpoints).await?;
    let subs = connect::subscription_admin(endpoints).await?;
    let mut report = Vec::new();
    for name in [&topic, &dlq_topic] {
        let r = topics
            .create_topic()
            .with_request(Topic::new().set_name(name.clone()))
            .send()
            .await;
        report.push((name.clone(), outcome(name, r)?));
    }
    let inspect = Subscription::new()
        .set_name(dlq_sub.clone())
        .set_topic(dlq_topic.clone())
        .set_ack_deadline_seconds(60);
    let r = subs
        .create_subscription()
        .with_request(inspect)
        .send()
        .await;
    report.push((dlq_sub.clone(), outcome(&dlq_sub, r)?));

    let main = Subscription::new()
        .set_name(sub.clone())
        .set_topic(topic.clone())
        .set_ack_deadline_seconds(args.ack_deadline_secs)
        .set_retry_policy(
            RetryPolicy::new()
                .set_minimum_backoff(duration(args.min_retry_backoff_secs))
                .set_maximum_backoff(duration(args.max_retry_backoff_secs)),
        )
        .set_dead_letter_policy(
            DeadLetterPolicy::new()
                .set_dead_letter_topic(dlq_topic.clone())
                .set_max_delivery_attempts(args.max_delivery_attempts),
        )
        .set_enable_exactly_once_delivery(args.exactly_once)
        .set_or_clear_push_config(push);
    let r = subs.create_subscription().with_request(main).send().await;
    report.push((sub.clone(), outcome(&sub, r)?));
    Ok(report)
}

/// Brings the store's schema to this build's: for PostgreSQL, applies the
/// missing migrations ([`PgDb::migrate`]) and returns each migration with
/// whether this run applied it; Firestore needs nothing.
pub async fn migrate_store(store: &StoreLocation) -> Result<Vec<(String, Created)>, SetupError> {
    let StoreLocation::Postgres { url } = store else {
        return Ok(Vec::new());
    };
    let db = PgDb::new(&PgDbConfig::new(url.clone()))?;
    let report = db.migrate().await?;
    let mut done = Vec::new();
    for migration in schema::MIGRATIONS {
        let created = if report.applied.contains(&migration.version) {
            Created::Created
        } else {
            Created::Existed
        };
        let name = format!(
            "postgres schema migration {} ({})",
            migration.version, migration.name
        );
        done.push((name, created));
    }
    Ok(done)
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    use super::*;

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        args: SetupArgs,
    }

    fn parse(flags: &[&str]) -> Result<SetupArgs, clap::Error> {
        Cli::try_parse_from(std::iter::once("setup").chain(flags.iter().copied())).map(|c| c.args)
    }

    #[test]
    fn a_push_endpoint_makes_a_push_subscription_with_its_oidc_token() {
        let args = parse(&[
            "--push-endpoint",
            "https://hotcount.example/pubsub/push",
            "--push-service-account",
            "pusher@p.iam.gserviceaccount.com",
            "--push-audience",
            "hotcount",
        ])
        .expect("flags parse");
        let config = args
            .push
            .config(args.exactly_once)
            .expect("valid")
            .expect("a push config");
        assert_eq!(config.push_endpoint, "https://hotcount.example/pubsub/push");
        let token = config.oidc_token().expect("an OIDC token");
        assert_eq!(
            token.service_account_email,
            "pusher@p.iam.gserviceaccount.com"
        );
        assert_eq!(token.audience, "hotcount");
        assert!(config.no_wrapper().is_none(), "wrapped by default");

        let unwrapped = parse(&[
            "--push-endpoint",
            "https://hotcount.example/pubsub/push",
            "--push-service-account",
            "pusher@p.iam.gserviceaccount.com",
            "--push-no-wrapper",
        ])
        .expect("flags parse");
        let config = unwrapped.push.config(false).expect("valid").expect("push");
        assert!(config.no_wrapper().is_some_and(|w| w.write_metadata));
        assert_eq!(
            config.oidc_token().map(|t| t.audience.as_str()),
            Some(""),
            "no audience: Pub/Sub uses the endpoint URL"
        );
    }

    #[test]
    fn pull_stays_the_default_and_push_refuses_what_it_cannot_have() {
        let pull = parse(&[]).expect("flags parse");
        assert_eq!(pull.push.config(false).expect("valid"), None);
        // clap: a service account is required, exactly-once conflicts.
        assert!(parse(&["--push-endpoint", "https://h.example/pubsub/push"]).is_err());
        assert!(parse(&["--push-service-account", "s@p.iam.gserviceaccount.com"]).is_err());
        assert!(parse(&[
            "--push-endpoint",
            "https://h.example/pubsub/push",
            "--push-service-account",
            "s@p.iam.gserviceaccount.com",
            "--exactly-once",
        ])
        .is_err());
        // The same rules for settings built in code.
        let push = SetupPush {
            push_endpoint: Some("https://h.example/pubsub/push".into()),
            push_service_account: Some("s@p.iam.gserviceaccount.com".into()),
            ..SetupPush::default()
        };
        assert!(matches!(push.config(true), Err(SetupError::Invalid(_))));
        let unsigned = SetupPush {
            push_service_account: None,
            ..push.clone()
        };
        assert!(matches!(
            unsigned.config(false),
            Err(SetupError::Invalid(_))
        ));
        let not_a_url = SetupPush {
            push_endpoint: Some("h.example/pubsub/push".into()),
            ..push
        };
        assert!(matches!(
            not_a_url.config(false),
            Err(SetupError::Invalid(_))
        ));
    }
}
