//! The roles `setup` grants on Pub/Sub resources, and how a binding is
//! added to a resource's IAM policy.
//!
//! Invariants: a grant only ever adds a member to a role (nothing else in
//! the policy changes, so bindings made by others survive); the policy is
//! written back with the etag it was read with, so a concurrent change is
//! re-read rather than overwritten ([`grant_roles`]). Project-level roles (Firestore access,
//! the operators' roles) are not Pub/Sub resources: `deploy/setup.sh`
//! grants them (docs/OPERATIONS.md, "Roles").

use google_cloud_gax::error::rpc::Code;
use google_cloud_iam_v1::model::{Binding, Policy};
use google_cloud_pubsub::client::SchemaService;

use super::{code, pubsub_error, Change, SetupError, SetupIam};
use crate::config::Endpoints;
use crate::connect;

/// What the consumer needs on its subscription: pull, ack and extend
/// leases (`pubsub.subscriptions.consume`).
pub const SUBSCRIBER: &str = "roles/pubsub.subscriber";
/// What the consumer needs to read its subscription's configuration
/// (`pubsub.subscriptions.get`), which `run` does at start to see the
/// dead-letter policy: without it `hotcount_dead_letter_policy` is 0 and
/// its alert fires.
pub const VIEWER: &str = "roles/pubsub.viewer";
/// What the Pub/Sub service agent needs on the dead-letter topic to
/// forward dead letters to it.
pub const PUBLISHER: &str = "roles/pubsub.publisher";

/// One role for one member on one resource.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Grant {
    /// The full resource name (topic or subscription).
    pub resource: String,
    /// `roles/...`.
    pub role: &'static str,
    /// `serviceAccount:...`.
    pub member: String,
}

/// The Pub/Sub service agent of a project, by its number.
pub fn pubsub_service_agent(project_number: u64) -> String {
    format!("serviceAccount:service-{project_number}@gcp-sa-pubsub.iam.gserviceaccount.com")
}

/// The grants on Pub/Sub resources that counting and dead-lettering need:
/// the service agent publishes to the dead-letter topic and subscribes to
/// the subscription (dead-letter forwarding acks the original there); the
/// consumer subscribes and reads the subscription.
pub fn grants(
    subscription: &str,
    dead_letter_topic: &str,
    service_agent: Option<&str>,
    consumer: Option<&str>,
) -> Vec<Grant> {
    let mut out = Vec::new();
    let mut grant = |resource: &str, role, member: String| {
        out.push(Grant {
            resource: resource.to_string(),
            role,
            member,
        })
    };
    if let Some(agent) = service_agent {
        grant(dead_letter_topic, PUBLISHER, agent.to_string());
        grant(subscription, SUBSCRIBER, agent.to_string());
    }
    if let Some(account) = consumer {
        let member = format!("serviceAccount:{account}");
        grant(subscription, SUBSCRIBER, member.clone());
        grant(subscription, VIEWER, member);
    }
    out
}

/// Adds `member` to `role` in `policy`; false when it was there already
/// (the policy is then unchanged). A binding with a condition is never
/// extended: an unconditional one is added beside it.
pub fn add_member(policy: &mut Policy, role: &str, member: &str) -> bool {
    let unconditional = policy
        .bindings
        .iter_mut()
        .find(|b| b.role == role && b.condition.is_none());
    match unconditional {
        Some(binding) if binding.members.iter().any(|m| m == member) => false,
        Some(binding) => {
            binding.members.push(member.to_string());
            true
        }
        None => {
            policy
                .bindings
                .push(Binding::new().set_role(role).set_members([member]));
            true
        }
    }
}

/// Grants the roles `iam` asks for on the subscription and the
/// dead-letter topic (skipped, with the reason, with `--skip-iam` or
/// against the emulator); each resource with what happened to it.
pub(super) async fn grant_roles(
    endpoints: &Endpoints,
    iam: &SetupIam,
    subscription: &str,
    dead_letter_topic: &str,
) -> Result<Vec<(String, Change)>, SetupError> {
    let agent = iam.project_number.map(pubsub_service_agent);
    let grants = grants(
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
        let mine: Vec<&Grant> = grants.iter().filter(|g| g.resource == resource).collect();
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
    grants: &[&Grant],
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
            .filter(|g| add_member(&mut policy, g.role, &g.member))
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn adding_a_member_keeps_every_other_binding_and_is_idempotent() {
        let mut policy = Policy::new().set_bindings([
            Binding::new()
                .set_role(SUBSCRIBER)
                .set_members(["user:someone@example.com"]),
            Binding::new()
                .set_role("roles/pubsub.admin")
                .set_members(["group:ops@example.com"]),
        ]);
        assert!(add_member(
            &mut policy,
            SUBSCRIBER,
            "serviceAccount:hc@p.iam.gserviceaccount.com"
        ));
        assert!(add_member(
            &mut policy,
            VIEWER,
            "serviceAccount:hc@p.iam.gserviceaccount.com"
        ));
        let before = policy.clone();
        assert!(!add_member(
            &mut policy,
            SUBSCRIBER,
            "serviceAccount:hc@p.iam.gserviceaccount.com"
        ));
        assert_eq!(policy, before, "a second grant changes nothing");
        assert_eq!(policy.bindings.len(), 3);
        assert_eq!(
            policy.bindings[0].members,
            [
                "user:someone@example.com",
                "serviceAccount:hc@p.iam.gserviceaccount.com"
            ]
        );
        assert_eq!(policy.bindings[1].members, ["group:ops@example.com"]);
    }

    #[test]
    fn the_consumer_may_read_its_subscription_and_the_agent_may_forward_dead_letters() {
        let agent = pubsub_service_agent(123);
        let all = grants(
            "projects/p/subscriptions/s",
            "projects/p/topics/dlq",
            Some(&agent),
            Some("hc@p.iam.gserviceaccount.com"),
        );
        let has = |resource: &str, role: &str, member: &str| {
            all.iter()
                .any(|g| g.resource == resource && g.role == role && g.member == member)
        };
        let consumer = "serviceAccount:hc@p.iam.gserviceaccount.com";
        assert!(has("projects/p/subscriptions/s", VIEWER, consumer));
        assert!(has("projects/p/subscriptions/s", SUBSCRIBER, consumer));
        assert!(has(
            "projects/p/topics/dlq",
            PUBLISHER,
            "serviceAccount:service-123@gcp-sa-pubsub.iam.gserviceaccount.com"
        ));
        assert!(has("projects/p/subscriptions/s", SUBSCRIBER, &agent));
        assert_eq!(all.len(), 4);
    }
}
