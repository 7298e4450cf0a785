//! `hotcount setup`: the topic and the dead-letter topic (with message
//! retention), the dead-letter inspect subscription, the consumer
//! subscription, and the roles on them that counting and dead-lettering
//! need; with `--store postgres://...`, the PostgreSQL schema migrations.
//!
//! Invariants: setup changes what it says it changes. A missing resource is
//! created; an existing one whose managed settings differ is updated
//! ([`resources`] compares every setting setup sets) and reported
//! `updated` with each change, or refused with the reason when Pub/Sub
//! cannot change it; only one already as wanted is reported `exists`.
//! Running it twice changes nothing the second time. Roles are only ever
//! added ([`iam`]). Migrations are applied only here (never by `run`), each
//! once, by [`PgDb::migrate`]; the data format is raised only here, never
//! lowered ([`mod@format`]).

pub mod format;
pub mod iam;
pub mod resources;

use google_cloud_gax::error::rpc::Code;
use google_cloud_pubsub::client::{SchemaService, SubscriptionAdmin, TopicAdmin};
use google_cloud_pubsub::model::push_config::{NoWrapper, OidcToken};
use google_cloud_pubsub::model::{
    DeadLetterPolicy, PushConfig, RetryPolicy, Subscription, Topic, UpdateSubscriptionRequest,
    UpdateTopicRequest,
};
use google_cloud_wkt::FieldMask;

use crate::config::{
    check_pubsub_id, Endpoints, FileParser, FromFile, StoreLocation, StoreLocationParser,
};
use crate::connect;
use crate::store::milestone::{MilestoneSetting, MilestoneStore};
use crate::store::postgres::{migrations, MigrateError, PgConfigError, PgDb, PgDbConfig};
use crate::store::selected::SelectedDb;

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
    /// A file holding the store (as `--store` takes it, e.g. a mounted
    /// secret); trailing line breaks are ignored. Not with `--store`.
    #[arg(
        long = "store-file",
        env = "HOTCOUNT_STORE_FILE",
        value_name = "PATH",
        value_parser = FileParser::<StoreLocation>::new(),
        conflicts_with = "store"
    )]
    pub store_file: Option<FromFile<StoreLocation>>,
    /// Record milestones at these like counts (comma-separated, ascending),
    /// fleet-wide: every replica and operator tool that writes rollups
    /// records them, without a restart (each re-reads the setting every
    /// `--rollup-interval-ms`).
    #[arg(long, value_name = "LIST", conflicts_with = "no_milestones")]
    pub milestones: Option<String>,
    /// Record no milestone, fleet-wide (those crossed while off are never
    /// recorded or notified).
    #[arg(long, default_value_t = false)]
    pub no_milestones: bool,
    /// Firestore database id (where `--milestones` is stored).
    #[arg(long, env = "HOTCOUNT_DATABASE", default_value = "(default)")]
    pub database: String,
    /// Prefix of every Firestore collection hotcount writes (e.g. `hc_`).
    #[arg(long, env = "HOTCOUNT_COLLECTION_PREFIX", default_value = "")]
    pub collection_prefix: String,
    /// Raise the data format kept with the data to N, once every replica
    /// runs a build that knows it (never lowered: a lower N is refused;
    /// the same N changes nothing). Format 2 allows erasure tombstones;
    /// raising to it first refreshes every rollup, as `hotcount rollups
    /// refresh` does. Without it, the format is left as it is (a store
    /// without a record is at format 1).
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..))]
    pub data_format: Option<u32>,
    /// With `--data-format`: counter shards a post may have (`run
    /// --counter-shards` of every build that wrote them, the largest), for
    /// the rollups' refresh.
    #[arg(long, env = "HOTCOUNT_COUNTER_SHARDS", default_value_t = crate::config::DEFAULT_COUNTER_SHARDS)]
    pub counter_shards: u32,
}

impl SetupStore {
    /// The store these flags name: the content of `--store-file` when
    /// given, else `--store`.
    pub fn location(&self) -> &StoreLocation {
        self.store_file
            .as_ref()
            .map_or(&self.store, FromFile::value)
    }

    /// The milestone setting these flags store, if they name one.
    pub fn milestone_setting(
        &self,
    ) -> Result<Option<MilestoneSetting>, crate::config::ConfigError> {
        if self.no_milestones {
            return Ok(Some(MilestoneSetting::Off));
        }
        let Some(list) = &self.milestones else {
            return Ok(None);
        };
        Ok(Some(MilestoneSetting::On(crate::config::parse_milestones(
            list,
        )?)))
    }
}

/// Stores `setting` for the whole fleet in `db`, replacing any; what
/// changed.
pub async fn store_milestones(
    db: &SelectedDb,
    setting: &MilestoneSetting,
) -> Result<Change, crate::store::StoreError> {
    let before = db.milestone_setting().await?;
    if before.as_ref() == Some(setting) {
        return Ok(Change::Existed);
    }
    db.store_milestone_setting(setting, false).await?;
    Ok(match before {
        None => Change::Created,
        Some(old) => Change::Updated(vec![format!(
            "milestones: {} -> {}",
            old.describe(),
            setting.describe()
        )]),
    })
}

/// What to create or bring in line. Every setting is compared with the
/// existing resource: run setup with the same flags every time (a missing
/// flag means its default, e.g. exactly-once delivery off).
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
    /// Exactly-once delivery on the subscription; without it an existing
    /// subscription that has it is turned back to at-least-once (reported).
    #[arg(long, default_value_t = false)]
    pub exactly_once: bool,
    /// How long both topics keep messages, acked or not, in days (1..=31):
    /// how far back `hotcount replay` can Seek a new subscription.
    #[arg(long, env = "HOTCOUNT_TOPIC_RETENTION_DAYS", default_value_t = 7)]
    pub topic_retention_days: u32,
    /// Roles on the topic and subscriptions.
    #[command(flatten)]
    pub iam: SetupIam,
    /// How the subscription delivers: pull (the default) or push; an
    /// existing subscription is switched to what the flags say.
    #[command(flatten)]
    pub push: SetupPush,
}

/// Who gets which role on the Pub/Sub resources ([`iam::grants`]).
#[derive(clap::Args, Clone, Debug, Default)]
pub struct SetupIam {
    /// The service account `hotcount run` runs as (its email): granted
    /// roles/pubsub.subscriber and roles/pubsub.viewer on the subscription
    /// (the viewer role lets `run` read the dead-letter policy).
    #[arg(long, env = "HOTCOUNT_CONSUMER_SERVICE_ACCOUNT")]
    pub consumer_service_account: Option<String>,
    /// The project's number (`gcloud projects describe PROJECT
    /// --format='value(projectNumber)'`): it names the Pub/Sub service
    /// agent, which dead-letter forwarding needs as publisher on the
    /// dead-letter topic and subscriber on the subscription.
    #[arg(long, env = "HOTCOUNT_PROJECT_NUMBER")]
    pub project_number: Option<u64>,
    /// Grant no role (IAM managed elsewhere, e.g. by Terraform); each grant
    /// left out is reported `skipped`.
    #[arg(long, default_value_t = false)]
    pub skip_iam: bool,
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

/// What setup did to one resource.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Change {
    /// Created by this run.
    Created,
    /// Already there, as wanted.
    Existed,
    /// Already there; these settings were changed (`field: old -> new`).
    Updated(Vec<String>),
    /// These roles were granted (`role to member`).
    Granted(Vec<String>),
    /// Left alone, for this reason.
    Skipped(String),
}

impl Change {
    /// The word the report starts its line with.
    pub fn word(&self) -> &'static str {
        match self {
            Change::Created => "created",
            Change::Existed => "exists",
            Change::Updated(_) => "updated",
            Change::Granted(_) => "granted",
            Change::Skipped(_) => "skipped",
        }
    }

    /// What changed or why not, for the report (empty when nothing to say).
    pub fn detail(&self) -> String {
        match self {
            Change::Updated(items) | Change::Granted(items) => items.join("; "),
            Change::Skipped(why) => why.clone(),
            Change::Created | Change::Existed => String::new(),
        }
    }
}

/// A setup failure.
#[derive(Debug, thiserror::Error)]
pub enum SetupError {
    /// A setting is invalid.
    #[error("invalid setting: {0}")]
    Invalid(String),
    /// An existing resource cannot be made what setup wants.
    #[error("refusing to change {resource}: {reason}")]
    Refused {
        /// The resource name.
        resource: String,
        /// Why, and what to do.
        reason: String,
    },
    /// Pub/Sub refused or failed.
    #[error("setting up {resource}: {message}")]
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

fn code(e: &google_cloud_pubsub::Error) -> Option<Code> {
    e.status().map(|s| s.code)
}

fn pubsub_error(resource: &str, e: google_cloud_pubsub::Error) -> SetupError {
    let retryable = matches!(
        code(&e),
        Some(Code::Unavailable | Code::DeadlineExceeded | Code::Aborted)
    );
    SetupError::PubSub {
        resource: resource.to_string(),
        message: e.to_string(),
        retryable,
    }
}

fn duration(secs: i64) -> google_cloud_wkt::Duration {
    google_cloud_wkt::Duration::clamp(secs, 0)
}

fn mask(paths: &[resources::Difference]) -> FieldMask {
    FieldMask::default().set_paths(paths.iter().map(|d| d.path))
}

fn changes(paths: Vec<resources::Difference>) -> Change {
    if paths.is_empty() {
        Change::Existed
    } else {
        Change::Updated(paths.into_iter().map(|d| d.change).collect())
    }
}

fn validate(endpoints: &Endpoints, args: &SetupArgs) -> Result<(), SetupError> {
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
    if !(1..=31).contains(&args.topic_retention_days) {
        return Err(SetupError::Invalid(
            "--topic-retention-days must be within 1..=31 (Pub/Sub's longest topic retention)"
                .into(),
        ));
    }
    args.push.config(args.exactly_once)?;
    let iam = &args.iam;
    let against_google = endpoints.pubsub_emulator_host.is_none();
    if against_google
        && !iam.skip_iam
        && (iam.project_number.is_none() || iam.consumer_service_account.is_none())
    {
        return Err(SetupError::Invalid(
            "against Google, setup grants the roles dead-letter forwarding and `run` need: give \
             --project-number (gcloud projects describe PROJECT --format='value(projectNumber)') \
             and --consumer-service-account EMAIL, or --skip-iam if IAM is managed elsewhere"
                .into(),
        ));
    }
    Ok(())
}

/// Creates what is missing and brings what exists in line; returns each
/// resource with what happened to it. Stops at the first refusal.
pub async fn setup(
    endpoints: &Endpoints,
    args: &SetupArgs,
) -> Result<Vec<(String, Change)>, SetupError> {
    validate(endpoints, args)?;
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
    let retention = duration(86_400 * i64::from(args.topic_retention_days));
    let mut report = Vec::new();
    for name in [&topic, &dlq_topic] {
        let wanted = Topic::new()
            .set_name(name.clone())
            .set_message_retention_duration(retention);
        report.push((name.clone(), ensure_topic(&topics, wanted).await?));
    }
    let inspect = Subscription::new()
        .set_name(dlq_sub.clone())
        .set_topic(dlq_topic.clone())
        .set_ack_deadline_seconds(60);
    report.push((dlq_sub.clone(), ensure_subscription(&subs, inspect).await?));

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
        .set_or_clear_push_config(args.push.config(args.exactly_once)?);
    report.push((sub.clone(), ensure_subscription(&subs, main).await?));
    report.extend(grant_roles(endpoints, &args.iam, &sub, &dlq_topic).await?);
    Ok(report)
}

async fn ensure_topic(topics: &TopicAdmin, wanted: Topic) -> Result<Change, SetupError> {
    let name = wanted.name.clone();
    match topics
        .create_topic()
        .with_request(wanted.clone())
        .send()
        .await
    {
        Ok(_) => return Ok(Change::Created),
        Err(e) if code(&e) == Some(Code::AlreadyExists) => {}
        Err(e) => return Err(pubsub_error(&name, e)),
    }
    let current = topics
        .get_topic()
        .set_topic(&name)
        .send()
        .await
        .map_err(|e| pubsub_error(&name, e))?;
    let differences = resources::topic_differences(&current, &wanted);
    if !differences.is_empty() {
        topics
            .update_topic()
            .with_request(
                UpdateTopicRequest::new()
                    .set_topic(wanted)
                    .set_update_mask(mask(&differences)),
            )
            .send()
            .await
            .map_err(|e| pubsub_error(&name, e))?;
    }
    Ok(changes(differences))
}

async fn ensure_subscription(
    subs: &SubscriptionAdmin,
    wanted: Subscription,
) -> Result<Change, SetupError> {
    let name = wanted.name.clone();
    match subs
        .create_subscription()
        .with_request(wanted.clone())
        .send()
        .await
    {
        Ok(_) => return Ok(Change::Created),
        Err(e) if code(&e) == Some(Code::AlreadyExists) => {}
        Err(e) => return Err(pubsub_error(&name, e)),
    }
    let current = subs
        .get_subscription()
        .set_subscription(&name)
        .send()
        .await
        .map_err(|e| pubsub_error(&name, e))?;
    if let Some(reason) = resources::subscription_refusal(&current, &wanted) {
        return Err(SetupError::Refused {
            resource: name,
            reason,
        });
    }
    let differences = resources::subscription_differences(&current, &wanted);
    if !differences.is_empty() {
        subs.update_subscription()
            .with_request(
                UpdateSubscriptionRequest::new()
                    .set_subscription(wanted)
                    .set_update_mask(mask(&differences)),
            )
            .send()
            .await
            .map_err(|e| pubsub_error(&name, e))?;
    }
    Ok(changes(differences))
}

async fn grant_roles(
    endpoints: &Endpoints,
    iam: &SetupIam,
    subscription: &str,
    dead_letter_topic: &str,
) -> Result<Vec<(String, Change)>, SetupError> {
    let agent = iam.project_number.map(iam::pubsub_service_agent);
    let grants = iam::grants(
        subscription,
        dead_letter_topic,
        agent.as_deref(),
        iam.consumer_service_account.as_deref(),
    );
    let skip = if iam.skip_iam {
        Some("--skip-iam: grant the roles in docs/OPERATIONS.md#roles yourself".to_string())
    } else if endpoints.pubsub_emulator_host.is_some() {
        Some("the Pub/Sub emulator has no IAM".to_string())
    } else {
        None
    };
    let mut resources: Vec<&str> = Vec::new();
    for g in &grants {
        if !resources.contains(&g.resource.as_str()) {
            resources.push(&g.resource);
        }
    }
    if let Some(why) = skip {
        let what = if grants.is_empty() {
            vec![(
                "IAM".to_string(),
                Change::Skipped(format!("{why} (no roles asked for)")),
            )]
        } else {
            resources
                .iter()
                .map(|r| (r.to_string(), Change::Skipped(why.clone())))
                .collect()
        };
        return Ok(what);
    }
    let client = connect::iam_policy(endpoints).await?;
    let mut report = Vec::new();
    for resource in resources {
        let mine: Vec<&iam::Grant> = grants.iter().filter(|g| g.resource == resource).collect();
        report.push((
            resource.to_string(),
            grant_on(&client, resource, &mine).await?,
        ));
    }
    Ok(report)
}

/// Adds `grants` to `resource`'s policy, read-modify-write with its etag;
/// a concurrent change (ABORTED) is re-read, at most 5 times.
async fn grant_on(
    client: &SchemaService,
    resource: &str,
    grants: &[&iam::Grant],
) -> Result<Change, SetupError> {
    let mut attempt = 0;
    loop {
        attempt += 1;
        let mut policy = client
            .get_iam_policy()
            .set_resource(resource)
            .send()
            .await
            .map_err(|e| pubsub_error(resource, e))?;
        let added: Vec<String> = grants
            .iter()
            .filter(|g| iam::add_member(&mut policy, g.role, &g.member))
            .map(|g| format!("{} to {}", g.role, g.member))
            .collect();
        if added.is_empty() {
            return Ok(Change::Existed);
        }
        match client
            .set_iam_policy()
            .set_resource(resource)
            .set_policy(policy)
            .send()
            .await
        {
            Ok(_) => return Ok(Change::Granted(added)),
            Err(e) if code(&e) == Some(Code::Aborted) && attempt < 5 => continue,
            Err(e) => return Err(pubsub_error(resource, e)),
        }
    }
}

/// Brings the store's schema to this build's: for PostgreSQL, applies the
/// missing migrations ([`PgDb::migrate`]) and returns each migration with
/// whether this run applied it; Firestore needs nothing.
pub async fn migrate_store(store: &StoreLocation) -> Result<Vec<(String, Change)>, SetupError> {
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
    for migration in migrations::MIGRATIONS {
        let created = if report.applied.contains(&migration.version) {
            Change::Created
        } else {
            Change::Existed
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
