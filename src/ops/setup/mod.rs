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
//! once, by [`connect::migrate_schema`]; the data format is raised only
//! here, never lowered ([`mod@format`]).

mod args;
pub mod format;
pub mod iam;
pub mod resources;

pub use args::{SetupArgs, SetupIam, SetupPush, SetupStore};

use google_cloud_gax::error::rpc::Code;
use std::future::Future;

use google_cloud_pubsub::client::{SubscriptionAdmin, TopicAdmin};
use google_cloud_pubsub::model::{
    DeadLetterPolicy, RetryPolicy, Subscription, Topic, UpdateSubscriptionRequest,
    UpdateTopicRequest,
};
use google_cloud_wkt::FieldMask;

use crate::config::{Endpoints, StoreLocation};
use crate::connect;
use crate::store::milestone::{MilestoneSetting, MilestoneStore};
use crate::store::selected::SelectedDb;

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
    /// The store could not be opened, or its schema not brought to this
    /// build's.
    #[error(transparent)]
    Store(#[from] connect::OpenError),
}

impl SetupError {
    /// Whether running setup again may succeed.
    pub fn is_retryable(&self) -> bool {
        match self {
            SetupError::PubSub { retryable, .. } => *retryable,
            SetupError::Store(error) => error.is_retryable(),
            _ => false,
        }
    }
}

pub(super) fn code(e: &google_cloud_pubsub::Error) -> Option<Code> {
    e.status().map(|s| s.code)
}

pub(super) fn pubsub_error(resource: &str, e: google_cloud_pubsub::Error) -> SetupError {
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

/// Creates what is missing and brings what exists in line; returns each
/// resource with what happened to it. Stops at the first refusal.
pub async fn setup(
    endpoints: &Endpoints,
    args: &SetupArgs,
) -> Result<Vec<(String, Change)>, SetupError> {
    args::validate(endpoints, args)?;
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
    report.extend(iam::grant_roles(endpoints, &args.iam, &sub, &dlq_topic).await?);
    Ok(report)
}

/// Pub/Sub's answer to one admin call.
type Answer<T> = Result<T, google_cloud_pubsub::Error>;

/// Ensure-or-update, for a topic or a subscription named `name`: `create`
/// it; if it exists already, `get` it, let `compare` refuse it or list
/// how it differs from what is wanted, and `update` those fields only.
async fn ensure<T>(
    name: &str,
    create: impl Future<Output = Answer<T>>,
    get: impl Future<Output = Answer<T>>,
    compare: impl FnOnce(&T) -> Result<Vec<resources::Difference>, SetupError>,
    update: impl AsyncFnOnce(FieldMask) -> Answer<T>,
) -> Result<Change, SetupError> {
    match create.await {
        Ok(_) => return Ok(Change::Created),
        Err(e) if code(&e) == Some(Code::AlreadyExists) => {}
        Err(e) => return Err(pubsub_error(name, e)),
    }
    let current = get.await.map_err(|e| pubsub_error(name, e))?;
    let differences = compare(&current)?;
    if !differences.is_empty() {
        update(mask(&differences))
            .await
            .map_err(|e| pubsub_error(name, e))?;
    }
    Ok(changes(differences))
}

async fn ensure_topic(topics: &TopicAdmin, wanted: Topic) -> Result<Change, SetupError> {
    let name = wanted.name.clone();
    ensure(
        &name,
        topics.create_topic().with_request(wanted.clone()).send(),
        topics.get_topic().set_topic(&name).send(),
        |current| Ok(resources::topic_differences(current, &wanted)),
        async |mask| {
            let request = UpdateTopicRequest::new()
                .set_topic(wanted.clone())
                .set_update_mask(mask);
            topics.update_topic().with_request(request).send().await
        },
    )
    .await
}

async fn ensure_subscription(
    subs: &SubscriptionAdmin,
    wanted: Subscription,
) -> Result<Change, SetupError> {
    let name = wanted.name.clone();
    ensure(
        &name,
        subs.create_subscription()
            .with_request(wanted.clone())
            .send(),
        subs.get_subscription().set_subscription(&name).send(),
        |current| match resources::subscription_refusal(current, &wanted) {
            Some(reason) => Err(SetupError::Refused {
                resource: name.clone(),
                reason,
            }),
            None => Ok(resources::subscription_differences(current, &wanted)),
        },
        async |mask| {
            let request = UpdateSubscriptionRequest::new()
                .set_subscription(wanted.clone())
                .set_update_mask(mask);
            subs.update_subscription()
                .with_request(request)
                .send()
                .await
        },
    )
    .await
}

/// Brings the store's schema to this build's ([`connect::migrate_schema`])
/// and returns each PostgreSQL migration with whether this run applied it;
/// Firestore needs nothing.
pub async fn migrate_store(store: &StoreLocation) -> Result<Vec<(String, Change)>, SetupError> {
    let steps = connect::migrate_schema(store).await?;
    Ok(steps
        .into_iter()
        .map(|step| {
            let change = if step.applied {
                Change::Created
            } else {
                Change::Existed
            };
            let name = format!("postgres schema migration {} ({})", step.version, step.name);
            (name, change)
        })
        .collect())
}
