#!/usr/bin/env bash
# Creates what hotcount needs on Google Cloud, with gcloud only:
#   - the likes topic (with message retention, so `hotcount replay` can Seek
#     a new subscription into the past) and the dead-letter topic;
#   - the dead-letter inspect subscription (`hotcount dlq inspect|replay`);
#   - the consumer subscription (DELIVERY=pull, the default): ack deadline,
#     retry policy, dead-letter policy, optional exactly-once delivery;
#   - IAM for the Pub/Sub service agent (forwarding dead letters needs
#     publisher on the dead-letter topic and subscriber on the subscription);
#   - the service account hotcount runs as, with its roles: subscriber AND
#     viewer on the subscription (`run` reads its dead-letter policy at
#     start; without pubsub.subscriptions.get it reports
#     hotcount_dead_letter_policy 0 and that alert fires), Firestore access;
#   - with OPERATORS set: the roles the operator commands need (replay,
#     dlq, quarantine, reconcile) for those principals;
#   - with DELIVERY=push (deploy/cloudrun-push.yaml): no pull subscription
#     (nothing would consume it, and the backlog alert would fire on it);
#     with PUSH_ENDPOINT set too (the Cloud Run service's URL, so a second
#     run once the service is deployed): the push subscription with its own
#     service account, allowed to invoke the Cloud Run service;
#   - with CLOUD_RUN_AUTOSCALER=crema (deploy/cloudrun-worker-pool.yaml):
#     the service account of the worker pool's autoscaler and its roles;
#   - Firestore: the TTL policy on batches.expireAt, single-field index
#     exemptions for the fields hotcount never queries, and the
#     collection-group index of the rollup sweep (shards.updatedAt);
#   - Secret Manager: the secrets the manifests mount as files (never a
#     plaintext value in a manifest or on a command line): STORE_SECRET_NAME
#     (hotcount-store) holds the store, `firestore` or a PostgreSQL URL with
#     its password (from the file STORE_FILE when set, e.g. /dev/stdin),
#     and WEBHOOK_SECRET_NAME (hotcount-milestone-webhook-secret) the
#     milestone webhook's signing secret (32 random bytes, hex, when made
#     here); each is created when missing (an existing one is left as it is:
#     add versions with `gcloud secrets versions add`), and hotcount's service
#     account may read them (roles/secretmanager.secretAccessor on each);
#     with GKE_CLUSTER, copied into the Kubernetes Secret `hotcount` of
#     K8S_NAMESPACE (run this again after adding a version);
#   - with GKE_CLUSTER set (deploy/gke/): Workload Identity for hotcount's
#     Kubernetes service account, and what the autoscaler reads the Pub/Sub
#     metrics through: AUTOSCALER=hpa (the default with GKE_CLUSTER) installs
#     the Custom Metrics Stackdriver Adapter and lets it read Cloud
#     Monitoring; AUTOSCALER=keda lets KEDA's operator read it (install KEDA
#     with Helm first); AUTOSCALER=none skips. AUTOSCALER without
#     GKE_CLUSTER is refused (it has nothing to act on).
# Re-running is safe and brings things in line: an existing topic gets the
# retention, an existing subscription the settings below (updated in
# place); IAM bindings, TTL and index settings are idempotent updates.
# `hotcount setup` does the same for pull on the Pub/Sub side; for push it
# differs (docs/OPERATIONS.md, "Setup: the script or the command").
# Usage: PROJECT_ID=my-project deploy/setup.sh   (see the variables below)
set -euo pipefail

# ---- settings (override from the environment) ------------------------------
PROJECT_ID="${PROJECT_ID:?set PROJECT_ID}"
REGION="${REGION:-europe-west1}"
TOPIC="${TOPIC:-likes}"
SUBSCRIPTION="${SUBSCRIPTION:-likes-hotcount}"
DEAD_LETTER_TOPIC="${DEAD_LETTER_TOPIC:-likes-dead-letter}"
DEAD_LETTER_SUBSCRIPTION="${DEAD_LETTER_SUBSCRIPTION:-likes-dead-letter-inspect}"
# Topic retention bounds how far back `hotcount replay` can go (max 31d).
TOPIC_RETENTION="${TOPIC_RETENTION:-7d}"
ACK_DEADLINE_SECS="${ACK_DEADLINE_SECS:-60}"
MIN_RETRY_DELAY="${MIN_RETRY_DELAY:-10s}"
MAX_RETRY_DELAY="${MAX_RETRY_DELAY:-600s}"
MAX_DELIVERY_ATTEMPTS="${MAX_DELIVERY_ATTEMPTS:-10}"
EXACTLY_ONCE="${EXACTLY_ONCE:-false}"
DATABASE="${DATABASE:-(default)}"
COLLECTION_PREFIX="${COLLECTION_PREFIX:-}"
SERVICE_ACCOUNT_NAME="${SERVICE_ACCOUNT_NAME:-hotcount}"
# Principals that run the operator commands, comma-separated
# (user:alice@example.com,group:oncall@example.com); empty = none.
OPERATORS="${OPERATORS:-}"
# Push delivery (deploy/cloudrun-push.yaml): the service's URL + /pubsub/push.
PUSH_ENDPOINT="${PUSH_ENDPOINT:-}"
# pull: the consumer subscription SUBSCRIPTION; push: none, only the push
# subscription (PUSH_SUBSCRIPTION, made once PUSH_ENDPOINT is given).
# Default: push when PUSH_ENDPOINT is set, else pull.
if [[ -n "${PUSH_ENDPOINT}" ]]; then
  DELIVERY="${DELIVERY:-push}"
else
  DELIVERY="${DELIVERY:-pull}"
fi
PUSH_SUBSCRIPTION="${PUSH_SUBSCRIPTION:-likes-hotcount-push}"
PUSH_SERVICE_ACCOUNT_NAME="${PUSH_SERVICE_ACCOUNT_NAME:-hotcount-push}"
PUSH_CLOUD_RUN_SERVICE="${PUSH_CLOUD_RUN_SERVICE:-hotcount-push}"
# Cloud Run worker pool autoscaler (deploy/cloudrun-worker-pool-scaling.yaml): crema or none.
CLOUD_RUN_AUTOSCALER="${CLOUD_RUN_AUTOSCALER:-none}"
CREMA_SERVICE_ACCOUNT_NAME="${CREMA_SERVICE_ACCOUNT_NAME:-hotcount-crema}"
# GKE (optional; the cluster needs Workload Identity: --workload-pool=PROJECT_ID.svc.id.goog).
GKE_CLUSTER="${GKE_CLUSTER:-}"
GKE_LOCATION="${GKE_LOCATION:-${REGION}}"
K8S_NAMESPACE="${K8S_NAMESPACE:-hotcount}"
K8S_SERVICE_ACCOUNT="${K8S_SERVICE_ACCOUNT:-hotcount}"
AUTOSCALER="${AUTOSCALER:-}"
# Secret Manager secrets (docs/OPERATIONS.md, "Secrets").
STORE_SECRET_NAME="${STORE_SECRET_NAME:-hotcount-store}"
WEBHOOK_SECRET_NAME="${WEBHOOK_SECRET_NAME:-hotcount-milestone-webhook-secret}"
# A file holding the store for the first version of STORE_SECRET_NAME
# (a PostgreSQL URL with its password); unset: `firestore`.
STORE_FILE="${STORE_FILE:-}"
ADAPTER_MANIFEST="${ADAPTER_MANIFEST:-https://raw.githubusercontent.com/GoogleCloudPlatform/k8s-stackdriver/master/custom-metrics-stackdriver-adapter/deploy/production/adapter_new_resource_model.yaml}"
if [[ -z "${GKE_CLUSTER}" && -n "${AUTOSCALER}" ]]; then
  echo "AUTOSCALER=${AUTOSCALER} is for GKE: set GKE_CLUSTER (and GKE_LOCATION) too" >&2
  exit 1
fi
AUTOSCALER="${AUTOSCALER:-hpa}"
case "${AUTOSCALER}" in
  hpa | keda | none) ;;
  *)
    echo "AUTOSCALER must be hpa, keda or none, not ${AUTOSCALER}" >&2
    exit 1
    ;;
esac
case "${DELIVERY}" in
  pull | push) ;;
  *)
    echo "DELIVERY must be pull or push, not ${DELIVERY}" >&2
    exit 1
    ;;
esac
case "${CLOUD_RUN_AUTOSCALER}" in
  crema | none) ;;
  *)
    echo "CLOUD_RUN_AUTOSCALER must be crema or none, not ${CLOUD_RUN_AUTOSCALER}" >&2
    exit 1
    ;;
esac

# ---- derived ---------------------------------------------------------------
PROJECT_NUMBER="$(gcloud projects describe "${PROJECT_ID}" --format='value(projectNumber)')"
PUBSUB_AGENT="serviceAccount:service-${PROJECT_NUMBER}@gcp-sa-pubsub.iam.gserviceaccount.com"
SERVICE_ACCOUNT="${SERVICE_ACCOUNT_NAME}@${PROJECT_ID}.iam.gserviceaccount.com"
gcloud_p() { gcloud --project="${PROJECT_ID}" --quiet "$@"; }
exists() { "$@" >/dev/null 2>&1; }

echo "== topics"
for topic in "${TOPIC}" "${DEAD_LETTER_TOPIC}"; do
  if exists gcloud_p pubsub topics describe "${topic}"; then
    gcloud_p pubsub topics update "${topic}" --message-retention-duration="${TOPIC_RETENTION}"
  else
    gcloud_p pubsub topics create "${topic}" --message-retention-duration="${TOPIC_RETENTION}"
  fi
done

echo "== dead-letter inspect subscription"
if exists gcloud_p pubsub subscriptions describe "${DEAD_LETTER_SUBSCRIPTION}"; then
  gcloud_p pubsub subscriptions update "${DEAD_LETTER_SUBSCRIPTION}" --ack-deadline=60
else
  gcloud_p pubsub subscriptions create "${DEAD_LETTER_SUBSCRIPTION}" \
    --topic="${DEAD_LETTER_TOPIC}" \
    --ack-deadline=60 \
    --message-retention-duration=7d
fi

sub_flags=(
  --ack-deadline="${ACK_DEADLINE_SECS}"
  --min-retry-delay="${MIN_RETRY_DELAY}"
  --max-retry-delay="${MAX_RETRY_DELAY}"
  --dead-letter-topic="${DEAD_LETTER_TOPIC}"
  --max-delivery-attempts="${MAX_DELIVERY_ATTEMPTS}"
)
# Exactly-once delivery: when to turn it on, docs/OPERATIONS.md, "Exactly-once delivery".
if [[ "${EXACTLY_ONCE}" == "true" ]]; then
  sub_flags+=(--enable-exactly-once-delivery)
else
  sub_flags+=(--no-enable-exactly-once-delivery)
fi
if [[ "${DELIVERY}" == "pull" ]]; then
  echo "== consumer subscription"
  if exists gcloud_p pubsub subscriptions describe "${SUBSCRIPTION}"; then
    # Settings that can change on an existing subscription are brought in line
    # (its topic cannot: describe shows it).
    gcloud_p pubsub subscriptions update "${SUBSCRIPTION}" "${sub_flags[@]}"
  else
    gcloud_p pubsub subscriptions create "${SUBSCRIPTION}" --topic="${TOPIC}" "${sub_flags[@]}"
  fi
else
  echo "== no pull subscription (DELIVERY=push)"
fi

echo "== IAM for the Pub/Sub service agent (dead-letter forwarding)"
gcloud_p pubsub topics add-iam-policy-binding "${DEAD_LETTER_TOPIC}" \
  --member="${PUBSUB_AGENT}" --role=roles/pubsub.publisher >/dev/null
if [[ "${DELIVERY}" == "pull" ]]; then
  gcloud_p pubsub subscriptions add-iam-policy-binding "${SUBSCRIPTION}" \
    --member="${PUBSUB_AGENT}" --role=roles/pubsub.subscriber >/dev/null
fi

echo "== service account hotcount runs as"
if ! exists gcloud_p iam service-accounts describe "${SERVICE_ACCOUNT}"; then
  gcloud_p iam service-accounts create "${SERVICE_ACCOUNT_NAME}" --display-name="hotcount consumer"
fi
# Pull, ack, extend leases (consume); read the subscription's configuration
# (get): `run` reads the dead-letter policy at start.
if [[ "${DELIVERY}" == "pull" ]]; then
  for role in roles/pubsub.subscriber roles/pubsub.viewer; do
    gcloud_p pubsub subscriptions add-iam-policy-binding "${SUBSCRIPTION}" \
      --member="serviceAccount:${SERVICE_ACCOUNT}" --role="${role}" >/dev/null
  done
fi
# Firestore reads and transactions (or, on PostgreSQL, nothing here: the
# database's own user).
gcloud_p projects add-iam-policy-binding "${PROJECT_ID}" \
  --member="serviceAccount:${SERVICE_ACCOUNT}" --role=roles/datastore.user \
  --condition=None >/dev/null

if [[ -n "${OPERATORS}" ]]; then
  echo "== operators (replay, dlq, quarantine, reconcile, count; dashboards)"
  # replay creates, Seeks, reads and deletes a subscription; dlq reads the
  # inspect subscription and publishes; quarantine redrive publishes; all
  # of them read and commit in Firestore; the dashboards read Monitoring.
  IFS=',' read -r -a operators <<<"${OPERATORS}"
  for member in "${operators[@]}"; do
    for role in roles/pubsub.editor roles/datastore.user roles/monitoring.viewer; do
      gcloud_p projects add-iam-policy-binding "${PROJECT_ID}" \
        --member="${member}" --role="${role}" --condition=None >/dev/null
    done
  done
fi

if [[ "${DELIVERY}" == "push" && -z "${PUSH_ENDPOINT}" ]]; then
  echo "== push subscription: not yet; run this again with PUSH_ENDPOINT once the Cloud Run service is deployed"
fi
if [[ -n "${PUSH_ENDPOINT}" ]]; then
  echo "== push delivery: ${PUSH_SUBSCRIPTION} -> ${PUSH_ENDPOINT}"
  PUSH_SERVICE_ACCOUNT="${PUSH_SERVICE_ACCOUNT_NAME}@${PROJECT_ID}.iam.gserviceaccount.com"
  if ! exists gcloud_p iam service-accounts describe "${PUSH_SERVICE_ACCOUNT}"; then
    gcloud_p iam service-accounts create "${PUSH_SERVICE_ACCOUNT_NAME}" \
      --display-name="hotcount push subscription"
  fi
  # Pub/Sub signs each push request's OIDC token as this account.
  gcloud_p iam service-accounts add-iam-policy-binding "${PUSH_SERVICE_ACCOUNT}" \
    --member="${PUBSUB_AGENT}" --role=roles/iam.serviceAccountTokenCreator >/dev/null
  push_flags=(
    --push-endpoint="${PUSH_ENDPOINT}"
    --push-auth-service-account="${PUSH_SERVICE_ACCOUNT}"
    --ack-deadline="${ACK_DEADLINE_SECS}"
    --min-retry-delay="${MIN_RETRY_DELAY}"
    --max-retry-delay="${MAX_RETRY_DELAY}"
    --dead-letter-topic="${DEAD_LETTER_TOPIC}"
    --max-delivery-attempts="${MAX_DELIVERY_ATTEMPTS}"
  )
  if exists gcloud_p pubsub subscriptions describe "${PUSH_SUBSCRIPTION}"; then
    gcloud_p pubsub subscriptions update "${PUSH_SUBSCRIPTION}" "${push_flags[@]}"
  else
    gcloud_p pubsub subscriptions create "${PUSH_SUBSCRIPTION}" --topic="${TOPIC}" "${push_flags[@]}"
  fi
  # Dead-letter forwarding from the push subscription, as for the pull one.
  gcloud_p pubsub subscriptions add-iam-policy-binding "${PUSH_SUBSCRIPTION}" \
    --member="${PUBSUB_AGENT}" --role=roles/pubsub.subscriber >/dev/null
  # `run --delivery push` reads the push subscription's dead-letter policy.
  gcloud_p pubsub subscriptions add-iam-policy-binding "${PUSH_SUBSCRIPTION}" \
    --member="serviceAccount:${SERVICE_ACCOUNT}" --role=roles/pubsub.viewer >/dev/null
  # Only the push subscription's identity may invoke the service.
  gcloud_p run services add-iam-policy-binding "${PUSH_CLOUD_RUN_SERVICE}" \
    --region="${REGION}" --member="serviceAccount:${PUSH_SERVICE_ACCOUNT}" \
    --role=roles/run.invoker >/dev/null
fi

if [[ "${CLOUD_RUN_AUTOSCALER}" == "crema" ]]; then
  echo "== Cloud Run worker pool autoscaler (CREMA) service account"
  CREMA_SERVICE_ACCOUNT="${CREMA_SERVICE_ACCOUNT_NAME}@${PROJECT_ID}.iam.gserviceaccount.com"
  if ! exists gcloud_p iam service-accounts describe "${CREMA_SERVICE_ACCOUNT}"; then
    gcloud_p iam service-accounts create "${CREMA_SERVICE_ACCOUNT_NAME}" \
      --display-name="hotcount worker pool autoscaler"
  fi
  # Read its configuration, read the Pub/Sub metrics, set the worker
  # pool's instance count (which acts as hotcount's service account).
  for role in roles/parametermanager.parameterViewer roles/monitoring.viewer roles/run.developer; do
    gcloud_p projects add-iam-policy-binding "${PROJECT_ID}" \
      --member="serviceAccount:${CREMA_SERVICE_ACCOUNT}" --role="${role}" --condition=None >/dev/null
  done
  gcloud_p iam service-accounts add-iam-policy-binding "${SERVICE_ACCOUNT}" \
    --member="serviceAccount:${CREMA_SERVICE_ACCOUNT}" --role=roles/iam.serviceAccountUser >/dev/null
fi

echo "== Secret Manager: ${STORE_SECRET_NAME} and ${WEBHOOK_SECRET_NAME}, readable by ${SERVICE_ACCOUNT}"
# Values go from a file or a pipe to gcloud (--data-file), never through a
# command line or this script's output.
if ! exists gcloud_p secrets describe "${STORE_SECRET_NAME}"; then
  if [[ -n "${STORE_FILE}" ]]; then
    gcloud_p secrets create "${STORE_SECRET_NAME}" --replication-policy=automatic --data-file="${STORE_FILE}"
  else
    printf 'firestore' | gcloud_p secrets create "${STORE_SECRET_NAME}" --replication-policy=automatic --data-file=-
  fi
fi
if ! exists gcloud_p secrets describe "${WEBHOOK_SECRET_NAME}"; then
  openssl rand -hex 32 | tr -d '\n' |
    gcloud_p secrets create "${WEBHOOK_SECRET_NAME}" --replication-policy=automatic --data-file=-
fi
for secret in "${STORE_SECRET_NAME}" "${WEBHOOK_SECRET_NAME}"; do
  gcloud_p secrets add-iam-policy-binding "${secret}" \
    --member="serviceAccount:${SERVICE_ACCOUNT}" --role=roles/secretmanager.secretAccessor >/dev/null
done

echo "== Firestore: TTL on batch markers"
gcloud_p firestore fields ttls update expireAt \
  --collection-group="${COLLECTION_PREFIX}batches" \
  --database="${DATABASE}" \
  --enable-ttl --async

echo "== Firestore: single-field index exemptions (fields never queried)"
# Queried, so kept indexed: likes.postId and likes.liked (reconcile),
# likes.userId (`hotcount users export|erase` find a user's memberships by
# it: without the index, an access or erasure request would scan every
# membership), the collection-group scan of shards (reconcile without --post), and
# milestones.dueAt and milestones.status (the milestone dispatchers, retry).
exempt() {
  local group="$1" field="$2"
  gcloud_p firestore indexes fields update "${field}" \
    --collection-group="${COLLECTION_PREFIX}${group}" \
    --database="${DATABASE}" \
    --disable-indexes --async
}
for field in seq occurredAt eventId batchId updatedAt; do
  exempt likes "${field}"
done
# Earlier versions of this script exempted likes.userId: clear that
# exemption, so the field is indexed again (the build takes a while on a
# large collection; `users` commands fail with FAILED_PRECONDITION until done).
gcloud_p firestore indexes fields update userId \
  --collection-group="${COLLECTION_PREFIX}likes" \
  --database="${DATABASE}" \
  --clear-exemption --async
# Counter shards are a subcollection, never prefixed (layout.rs `SHARDS`).
gcloud_p firestore indexes fields update likes \
  --collection-group=shards \
  --database="${DATABASE}" \
  --disable-indexes --async
for field in consumer batchId messages applied duplicates stale poison posts committedAt expireAt rollupPosts rollupShards; do
  exempt batches "${field}"
done
for field in data dataBytes attributes reason quarantinedAt; do
  exempt quarantine "${field}"
done
# Milestones: the dispatchers query dueAt (<= now, ordered) and
# `hotcount milestones retry` queries status, so those two stay indexed.
for field in postId milestone likes reachedAt attempts leaseUntil lastError deliveredAt updatedAt; do
  exempt milestones "${field}"
done

echo "== Firestore: the rollup sweep's index (counter shards by updatedAt, collection group)"
# A replica's start-up sweep finds recently changed posts with a
# collection-group query on shards.updatedAt (docs/OPERATIONS.md, "Rollups").
gcloud_p firestore indexes fields update updatedAt \
  --collection-group=shards \
  --database="${DATABASE}" \
  --index=order=ASCENDING,query-scope=COLLECTION \
  --index=order=ASCENDING,query-scope=COLLECTION_GROUP --async

if [[ -n "${GKE_CLUSTER}" ]]; then
  WORKLOAD_POOL="${PROJECT_ID}.svc.id.goog"
  # The IAM principal of a Kubernetes service account under Workload Identity.
  principal() {
    echo "principal://iam.googleapis.com/projects/${PROJECT_NUMBER}/locations/global/workloadIdentityPools/${WORKLOAD_POOL}/subject/ns/$1/sa/$2"
  }

  echo "== GKE: Workload Identity for hotcount (${K8S_NAMESPACE}/${K8S_SERVICE_ACCOUNT})"
  gcloud_p iam service-accounts add-iam-policy-binding "${SERVICE_ACCOUNT}" \
    --role=roles/iam.workloadIdentityUser \
    --member="serviceAccount:${WORKLOAD_POOL}[${K8S_NAMESPACE}/${K8S_SERVICE_ACCOUNT}]" >/dev/null
  gcloud_p container clusters get-credentials "${GKE_CLUSTER}" --location="${GKE_LOCATION}"

  echo "== GKE: the Secret ${K8S_NAMESPACE}/hotcount, from Secret Manager (deploy/gke/deployment.yaml mounts it)"
  kubectl create namespace "${K8S_NAMESPACE}" --dry-run=client -o yaml | kubectl apply -f -
  # Server-side apply: no last-applied annotation holding a copy of the values.
  kubectl -n "${K8S_NAMESPACE}" create secret generic hotcount \
    --from-file=store=<(gcloud_p secrets versions access latest --secret="${STORE_SECRET_NAME}") \
    --from-file=milestone-webhook-secret=<(gcloud_p secrets versions access latest --secret="${WEBHOOK_SECRET_NAME}") \
    --dry-run=client -o yaml | kubectl apply --server-side --field-manager=hotcount-setup -f - >/dev/null

  case "${AUTOSCALER}" in
    hpa)
      echo "== GKE: Custom Metrics Stackdriver Adapter (Pub/Sub metrics for deploy/gke/hpa.yaml)"
      # Installing the adapter's RBAC needs cluster-admin.
      kubectl create clusterrolebinding cluster-admin-binding --clusterrole=cluster-admin \
        --user="$(gcloud config get-value account 2>/dev/null)" --dry-run=client -o yaml |
        kubectl apply -f -
      kubectl apply -f "${ADAPTER_MANIFEST}"
      gcloud_p projects add-iam-policy-binding "${PROJECT_ID}" --role=roles/monitoring.viewer \
        --member="$(principal custom-metrics custom-metrics-stackdriver-adapter)" \
        --condition=None >/dev/null
      ;;
    keda)
      echo "== GKE: KEDA's operator reads Cloud Monitoring (deploy/gke/keda/)"
      gcloud_p projects add-iam-policy-binding "${PROJECT_ID}" --role=roles/monitoring.viewer \
        --member="$(principal keda keda-operator)" --condition=None >/dev/null
      ;;
    none) ;;
  esac
fi

echo "done: ${PROJECT_ID} (${REGION})"
