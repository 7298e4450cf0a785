//! The roles `deploy/setup.sh` and `hotcount setup` grant the consumer
//! cover every call `hotcount run` makes. The emulators model no IAM, so
//! the check is done with Google's published lists instead: the calls are
//! the RPCs the emulators served while `run` counted (poison included), each
//! RPC needs the permissions Google's access-control references give for
//! it, and each role holds the permissions Google's role reference lists.

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use common::{Ev, Harness};

/// Permissions each RPC needs (Pub/Sub access control reference; Firestore
/// IAM reference). An RPC not listed fails the test: add it from there.
const RPC_PERMISSIONS: &[(&str, &[&str])] = &[
    ("GetSubscription", &["pubsub.subscriptions.get"]),
    ("StreamingPull", &["pubsub.subscriptions.consume"]),
    ("Pull", &["pubsub.subscriptions.consume"]),
    ("Acknowledge", &["pubsub.subscriptions.consume"]),
    ("ModifyAckDeadline", &["pubsub.subscriptions.consume"]),
    ("Publish", &["pubsub.topics.publish"]),
    ("BatchGetDocuments", &["datastore.entities.get"]),
    ("GetDocument", &["datastore.entities.get"]),
    ("BeginTransaction", &["datastore.databases.get"]),
    ("Rollback", &["datastore.databases.get"]),
    (
        "Commit",
        &[
            "datastore.entities.create",
            "datastore.entities.update",
            "datastore.entities.delete",
        ],
    ),
    (
        "RunQuery",
        &["datastore.entities.get", "datastore.entities.list"],
    ),
    // The rollup refresher's writes: updates with an update-time or an
    // exists=false precondition.
    (
        "BatchWrite",
        &["datastore.entities.create", "datastore.entities.update"],
    ),
];

/// Permissions of each role, as Google's role reference lists them (the
/// ones that matter here; schema, snapshot-listing and tag permissions
/// left out).
const ROLE_PERMISSIONS: &[(&str, &[&str])] = &[
    (
        "roles/pubsub.subscriber",
        &[
            "pubsub.snapshots.seek",
            "pubsub.subscriptions.consume",
            "pubsub.topics.attachSubscription",
        ],
    ),
    (
        "roles/pubsub.viewer",
        &[
            "pubsub.snapshots.get",
            "pubsub.snapshots.list",
            "pubsub.subscriptions.get",
            "pubsub.subscriptions.list",
            "pubsub.topics.get",
            "pubsub.topics.list",
            "pubsub.topics.listSubscriptions",
        ],
    ),
    ("roles/pubsub.publisher", &["pubsub.topics.publish"]),
    // Used by Cloud Run (or deploy/setup.sh for GKE) to mount the secrets
    // as files; `run` itself never calls Secret Manager.
    (
        "roles/secretmanager.secretAccessor",
        &["secretmanager.versions.access"],
    ),
    (
        "roles/iam.serviceAccountTokenCreator",
        &[
            "iam.serviceAccounts.getAccessToken",
            "iam.serviceAccounts.getOpenIdToken",
            "iam.serviceAccounts.signBlob",
            "iam.serviceAccounts.signJwt",
        ],
    ),
    (
        "roles/datastore.user",
        &[
            "datastore.databases.get",
            "datastore.databases.getMetadata",
            "datastore.entities.allocateIds",
            "datastore.entities.create",
            "datastore.entities.delete",
            "datastore.entities.get",
            "datastore.entities.list",
            "datastore.entities.update",
            "datastore.indexes.list",
            "datastore.namespaces.get",
            "datastore.namespaces.list",
            "datastore.statistics.get",
            "datastore.statistics.list",
        ],
    ),
];

/// The logical commands of a shell script (continuation lines joined).
fn commands(script: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut current = String::new();
    for line in script.lines() {
        let line = line.trim();
        if line.starts_with('#') {
            continue;
        }
        match line.strip_suffix('\\') {
            Some(head) => {
                current.push_str(head);
                current.push(' ');
            }
            None => {
                current.push_str(line);
                out.push(std::mem::take(&mut current));
            }
        }
    }
    out
}

/// The roles `deploy/setup.sh` grants to `member` (as written in the
/// script, e.g. `serviceAccount:${SERVICE_ACCOUNT}`), loops over roles
/// expanded.
fn setup_sh_roles(member: &str) -> BTreeSet<String> {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("deploy/setup.sh");
    let script = std::fs::read_to_string(path).expect("deploy/setup.sh");
    let mut roles = BTreeSet::new();
    let mut loop_roles: Vec<String> = Vec::new();
    for command in commands(&script) {
        if let Some(list) = command.strip_prefix("for role in ") {
            loop_roles = list
                .split(';')
                .next()
                .unwrap_or("")
                .split_whitespace()
                .map(String::from)
                .collect();
        }
        if !command.contains("add-iam-policy-binding")
            || !command.contains(&format!("--member=\"{member}\""))
        {
            continue;
        }
        for word in command.split_whitespace() {
            match word.strip_prefix("--role=") {
                Some("\"${role}\"") => roles.extend(loop_roles.iter().cloned()),
                Some(role) => {
                    roles.insert(role.trim_matches('"').to_string());
                }
                None => {}
            }
        }
    }
    roles
}

fn permissions_of(roles: &BTreeSet<String>) -> BTreeSet<&'static str> {
    let table: BTreeMap<&str, &[&str]> = ROLE_PERMISSIONS.iter().copied().collect();
    roles
        .iter()
        .flat_map(|r| {
            table
                .get(r.as_str())
                .unwrap_or_else(|| panic!("{r}: add its permissions to ROLE_PERMISSIONS"))
                .iter()
                .copied()
        })
        .collect()
}

fn missing(rpcs: &BTreeSet<String>, granted: &BTreeSet<&str>) -> Vec<String> {
    let needs: BTreeMap<&str, &[&str]> = RPC_PERMISSIONS.iter().copied().collect();
    let mut out = Vec::new();
    for rpc in rpcs {
        let Some(permissions) = needs.get(rpc.as_str()) else {
            out.push(format!(
                "{rpc}: not in RPC_PERMISSIONS (add it with the permission Google's reference gives)"
            ));
            continue;
        };
        for p in permissions.iter().filter(|p| !granted.contains(**p)) {
            out.push(format!("{rpc} needs {p}"));
        }
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_consumers_roles_cover_every_call_run_makes() {
    let h = Harness::start().await;
    h.emulators.pubsub_counters().reset();
    h.emulators.firestore_counters().reset();
    let consumer = h.spawn(h.run_args("roles", &[]));
    let events: Vec<Ev> = (0..20)
        .map(|i| Ev::like(&format!("e{i}"), "p", &format!("u{i}"), 1))
        .collect();
    h.publish(&events).await;
    h.publish_raw(&[b"not json".to_vec()]).await;
    assert!(
        consumer
            .wait_for_acks(events.len() as u64 + 1, Duration::from_secs(30))
            .await
    );
    consumer.stop().await;
    let mut rpcs: BTreeSet<String> = h
        .emulators
        .pubsub_counters()
        .snapshot()
        .into_iter()
        .chain(h.emulators.firestore_counters().snapshot())
        .filter(|(_, n)| *n > 0)
        .map(|(rpc, _)| rpc)
        .collect();
    // The test published; `run` does not.
    rpcs.remove("Publish");
    // The emulator counts gRPC calls; the admin client reads the
    // subscription over Pub/Sub's REST API, which it does not count. `run`
    // makes that call once at start (service/mod.rs; its answer gives
    // DeadLetterPolicy::of and, for push, the ack deadline).
    let service = std::fs::read_to_string(
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("src/service/mod.rs"),
    )
    .expect("src/service/mod.rs");
    assert!(service.contains("DeadLetterPolicy::of("));
    rpcs.insert("GetSubscription".into());
    assert!(
        rpcs.contains("GetSubscription") && rpcs.contains("Commit"),
        "{rpcs:?}"
    );

    let script = setup_sh_roles("serviceAccount:${SERVICE_ACCOUNT}");
    let problems = missing(&rpcs, &permissions_of(&script));
    assert!(
        problems.is_empty(),
        "deploy/setup.sh grants the consumer {script:?}, which lacks:\n  {}",
        problems.join("\n  ")
    );

    // `hotcount setup` grants the Pub/Sub half; the Firestore role is the
    // project-level one setup.sh grants (datastore.user).
    let mut command: BTreeSet<String> = hotcount::ops::setup::iam::grants(
        "projects/p/subscriptions/s",
        "projects/p/topics/dlq",
        None,
        Some("hotcount@p.iam.gserviceaccount.com"),
    )
    .into_iter()
    .map(|g| g.role.to_string())
    .collect();
    command.insert("roles/datastore.user".into());
    let problems = missing(&rpcs, &permissions_of(&command));
    assert!(
        problems.is_empty(),
        "hotcount setup grants the consumer {command:?}, which lacks:\n  {}",
        problems.join("\n  ")
    );
}

#[test]
fn the_service_agent_may_forward_dead_letters() {
    let roles = setup_sh_roles("${PUBSUB_AGENT}");
    let granted = permissions_of(&roles);
    // Forwarding publishes to the dead-letter topic and acks the original.
    for needed in ["pubsub.topics.publish", "pubsub.subscriptions.consume"] {
        assert!(granted.contains(needed), "{needed} in {roles:?}");
    }
}
