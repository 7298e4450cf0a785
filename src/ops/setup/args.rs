//! `hotcount setup`'s flags: what to create or bring in line
//! ([`SetupArgs`], with the roles [`SetupIam`] and push delivery
//! [`SetupPush`]), the store it prepares ([`SetupStore`]), and their checks.
//!
//! Invariant: every check runs before anything is created or changed
//! ([`validate`]); `--store`/`--store-file` are the shared [`StoreFlags`].

use google_cloud_pubsub::model::push_config::{NoWrapper, OidcToken};
use google_cloud_pubsub::model::PushConfig;

use super::SetupError;
use crate::config::{check_pubsub_id, Endpoints, StoreFlags, StoreLocation};
use crate::store::milestone::MilestoneSetting;

/// `setup --store`'s help: what setup does with the store.
const STORE_HELP: &str = "The store: `firestore` (nothing to create: collections appear with their first document) or a PostgreSQL connection URL, whose schema migrations are applied";

/// `setup --store-file`'s help.
const STORE_FILE_HELP: &str = "A file holding the store (as `--store` takes it, e.g. a mounted secret); trailing line breaks are ignored. Not with `--store`";

/// The store `setup` prepares besides Pub/Sub.
#[derive(clap::Args, Clone, Debug)]
#[command(
    mut_arg("store", |a| a.help(STORE_HELP)),
    mut_arg("store_file", |a| a.help(STORE_FILE_HELP))
)]
pub struct SetupStore {
    /// `--store` or `--store-file`, worded for setup (the one declaration
    /// is [`StoreFlags`]).
    #[command(flatten)]
    pub location: StoreFlags,
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
    /// Prepare the store alone (its schema migrations, `--milestones`,
    /// `--data-format`): no Pub/Sub resource is created or changed and no
    /// role granted, e.g. where `deploy/setup.sh` made them.
    #[arg(
        long,
        default_value_t = false,
        conflicts_with_all = ["exactly_once", "consumer_service_account", "project_number", "skip_iam", "push_endpoint"]
    )]
    pub store_only: bool,
}

impl SetupStore {
    /// The store these flags name: the content of `--store-file` when
    /// given, else `--store`.
    pub fn location(&self) -> &StoreLocation {
        self.location.location()
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

pub(super) fn validate(endpoints: &Endpoints, args: &SetupArgs) -> Result<(), SetupError> {
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
