#!/usr/bin/env bash
# Creates what hotcount needs on Google Cloud, with gcloud only:
#   - the likes topic (with message retention, so `hotcount replay` can Seek
#     a new subscription into the past) and the dead-letter topic;
#   - the dead-letter inspect subscription (`hotcount dlq inspect|replay`);
#   - the consumer subscription: ack deadline, retry policy, dead-letter
#     policy, optional exactly-once delivery;
#   - IAM for the Pub/Sub service agent (forwarding dead letters needs
#     publisher on the dead-letter topic and subscriber on the subscription);
#   - the service account hotcount runs as, with its roles;
#   - Firestore: the TTL policy on batches.expireAt, single-field index
#     exemptions for the fields hotcount never queries, and the
#     collection-group index of the rollup sweep (shards.updatedAt);
#   - with GKE_CLUSTER set (deploy/gke/): Workload Identity for hotcount's
#     Kubernetes service account, and what the autoscaler reads the Pub/Sub
#     metrics through: AUTOSCALER=hpa installs the Custom Metrics Stackdriver
#     Adapter and lets it read Cloud Monitoring; AUTOSCALER=keda lets KEDA's
#     operator read it (install KEDA with Helm first); AUTOSCALER=none skips.
# Re-running is safe: a topic or subscription that exists is described, not
# re-created (the consumer subscription's settings are updated in place);
# IAM bindings, TTL and index settings are idempotent updates.
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
# GKE (optional; the cluster needs Workload Identity: --workload-pool=PROJECT_ID.svc.id.goog).
GKE_CLUSTER="${GKE_CLUSTER:-}"
GKE_LOCATION="${GKE_LOCATION:-${REGION}}"
K8S_NAMESPACE="${K8S_NAMESPACE:-hotcount}"
K8S_SERVICE_ACCOUNT="${K8S_SERVICE_ACCOUNT:-hotcount}"
AUTOSCALER="${AUTOSCALER:-hpa}"
ADAPTER_MANIFEST="${ADAPTER_MANIFEST:-https://raw.githubusercontent.com/GoogleCloudPlatform/k8s-stackdriver/master/custom-metrics-stackdriver-adapter/deploy/production/adapter_new_resource_model.yaml}"
case "${AUTOSCALER}" in
  hpa | keda | none) ;;
  *)
    echo "AUTOSCALER must be hpa, keda or none, not ${AUTOSCALER}" >&2
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
    echo "exists  topic ${topic}"
  else
    gcloud_p pubsub topics create "${topic}" --message-retention-duration="${TOPIC_RETENTION}"
  fi
done

echo "== dead-letter inspect subscription"
if exists gcloud_p pubsub subscriptions describe "${DEAD_LETTER_SUBSCRIPTION}"; then
  echo "exists  subscription ${DEAD_LETTER_SUBSCRIPTION}"
else
  gcloud_p pubsub subscriptions create "${DEAD_LETTER_SUBSCRIPTION}" \
    --topic="${DEAD_LETTER_TOPIC}" \
    --ack-deadline=60 \
    --message-retention-duration=7d
fi

echo "== consumer subscription"
sub_flags=(
  --ack-deadline="${ACK_DEADLINE_SECS}"
  --min-retry-delay="${MIN_RETRY_DELAY}"
  --max-retry-delay="${MAX_RETRY_DELAY}"
  --dead-letter-topic="${DEAD_LETTER_TOPIC}"
  --max-delivery-attempts="${MAX_DELIVERY_ATTEMPTS}"
)
if [[ "${EXACTLY_ONCE}" == "true" ]]; then
  sub_flags+=(--enable-exactly-once-delivery)
fi
if exists gcloud_p pubsub subscriptions describe "${SUBSCRIPTION}"; then
  # Settings that can change on an existing subscription are brought in line.
  gcloud_p pubsub subscriptions update "${SUBSCRIPTION}" "${sub_flags[@]}"
else
  gcloud_p pubsub subscriptions create "${SUBSCRIPTION}" --topic="${TOPIC}" "${sub_flags[@]}"
fi

echo "== IAM for the Pub/Sub service agent (dead-letter forwarding)"
gcloud_p pubsub topics add-iam-policy-binding "${DEAD_LETTER_TOPIC}" \
  --member="${PUBSUB_AGENT}" --role=roles/pubsub.publisher >/dev/null
gcloud_p pubsub subscriptions add-iam-policy-binding "${SUBSCRIPTION}" \
  --member="${PUBSUB_AGENT}" --role=roles/pubsub.subscriber >/dev/null

echo "== service account hotcount runs as"
if ! exists gcloud_p iam service-accounts describe "${SERVICE_ACCOUNT}"; then
  gcloud_p iam service-accounts create "${SERVICE_ACCOUNT_NAME}" --display-name="hotcount consumer"
fi
gcloud_p pubsub subscriptions add-iam-policy-binding "${SUBSCRIPTION}" \
  --member="serviceAccount:${SERVICE_ACCOUNT}" --role=roles/pubsub.subscriber >/dev/null
# Operators' tools (replay creates and Seeks subscriptions; dlq republishes)
# run with their own credentials, not this account.
gcloud_p projects add-iam-policy-binding "${PROJECT_ID}" \
  --member="serviceAccount:${SERVICE_ACCOUNT}" --role=roles/datastore.user \
  --condition=None >/dev/null

echo "== Firestore: TTL on batch markers"
gcloud_p firestore fields ttls update expireAt \
  --collection-group="${COLLECTION_PREFIX}batches" \
  --database="${DATABASE}" \
  --enable-ttl --async

echo "== Firestore: single-field index exemptions (fields never queried)"
# Queried, so kept indexed: likes.postId and likes.liked (reconcile), and the
# collection-group scan of shards (reconcile without --post).
exempt() {
  local group="$1" field="$2"
  gcloud_p firestore indexes fields update "${field}" \
    --collection-group="${COLLECTION_PREFIX}${group}" \
    --database="${DATABASE}" \
    --disable-indexes --async
}
for field in userId seq occurredAt eventId batchId updatedAt; do
  exempt likes "${field}"
done
exempt shards likes
for field in consumer batchId messages applied duplicates stale poison posts committedAt expireAt; do
  exempt batches "${field}"
done
for field in data dataBytes attributes reason quarantinedAt; do
  exempt quarantine "${field}"
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
