//! `hotcount setup`: the topic, dead-letter topic with its inspect
//! subscription, and the consumer subscription, created idempotently; with
//! `--store postgres://...`, the PostgreSQL schema migrations applied.
//!
//! Invariant: an existing resource is left as it is and reported as such;
//! running setup twice changes nothing. Migrations are applied only here
//! (never by `run`), each once, by [`PgDb::migrate`].

use google_cloud_gax::error::rpc::Code;
use google_cloud_pubsub::model::{DeadLetterPolicy, RetryPolicy, Subscription, Topic};

use crate::config::{check_pubsub_id, Endpoints, StoreLocation, StoreLocationParser};
use crate::connect;
use crate::store::postgres::{schema, MigrateError, PgConfigError, PgDb, PgDbConfig};

/// The store `setup` prepares besides Pub/Sub.
#[derive(clap::Args, Clone, Debug)]
pub struct SetupStore {
    /// The store: `firestore` (nothing to create: collections appear with
    /// their first document) or a PostgreSQL connection URL, whose schema
    /// migrations are applied.
    #[arg(
        long = "store",
        env = "HOTCOUNT_STORE",
        default_value = "firestore",
        value_parser = StoreLocationParser,
        hide_env_values = true
    )]
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
    /// Enable exactly-once delivery on the subscription.
    #[arg(long, default_value_t = false)]
    pub exactly_once: bool,
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
    #[error("{store}: {error}")]
    Postgres {
        /// The store, its password hidden.
        store: String,
        /// What is wrong (not a `source`: the message holds it).
        error: PgConfigError,
    },
    /// Applying the PostgreSQL schema migrations failed (none is half-applied).
    #[error("migrating the PostgreSQL schema of {store}: {error}")]
    Migrate {
        /// The store, its password hidden.
        store: String,
        /// What failed (not a `source`: the message holds it).
        error: MigrateError,
    },
}

impl SetupError {
    /// Whether running setup again may succeed.
    pub fn is_retryable(&self) -> bool {
        match self {
            SetupError::PubSub { retryable, .. } => *retryable,
            SetupError::Migrate { error, .. } => error.is_retryable(),
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
        .set_enable_exactly_once_delivery(args.exactly_once);
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
    let shown = store.to_string();
    let db = PgDb::new(&PgDbConfig::new(url.clone())).map_err(|error| SetupError::Postgres {
        store: shown.clone(),
        error,
    })?;
    let report = db.migrate().await.map_err(|error| SetupError::Migrate {
        store: shown,
        error,
    })?;
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
