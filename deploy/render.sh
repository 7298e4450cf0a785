#!/usr/bin/env bash
# Prints deploy files with this deployment's values: manifests as one YAML
# stream with `---` between the files, for `kubectl apply -f -` or a file
# for gcloud; a dashboard or alert policy (dashboards/*.json) one at a time:
#   PROJECT_ID=my-project REGION=europe-west1 TAG=v1 deploy/render.sh FILE... | kubectl apply -f -
#   PROJECT_ID=my-project REGION=europe-west1 TAG=v1 deploy/render.sh dashboards/alerts/backlog-age.json > policy.json
# Drops comment lines and replaces PROJECT_ID and REGION everywhere and
# hotcount's image tag `:latest` with TAG. Every other name an operator may
# change is a variable with the same name and default as in deploy/setup.sh,
# so one set of exports drives both:
#   TOPIC (likes), SUBSCRIPTION (likes-hotcount), PUSH_SUBSCRIPTION
#   (likes-hotcount-push), DEAD_LETTER_TOPIC (likes-dead-letter),
#   DEAD_LETTER_SUBSCRIPTION (likes-dead-letter-inspect),
#   SERVICE_ACCOUNT_NAME (hotcount: hotcount@PROJECT_ID...),
#   CONSUMER (hotcount) and PUSH_CONSUMER (hotcount-push): HOTCOUNT_CONSUMER,
#   DATABASE ((default)) and COLLECTION_PREFIX (none): HOTCOUNT_DATABASE and
#   HOTCOUNT_COLLECTION_PREFIX, K8S_NAMESPACE and K8S_SERVICE_ACCOUNT
#   (hotcount), WORKER_POOL (hotcount), PUSH_CLOUD_RUN_SERVICE (hotcount-push),
#   STORE_SECRET_NAME (hotcount-store) and WEBHOOK_SECRET_NAME
#   (hotcount-milestone-webhook-secret): the Secret Manager secrets the
#   Cloud Run manifests mount (their values never pass through here).
# Refuses values that are not a project id, a region, an image tag or a
# valid name, and output that still holds a placeholder.
# deploy/validate-manifests.py runs the commands docs/OPERATIONS.md gives
# with it.
set -euo pipefail

PROJECT_ID="${PROJECT_ID:?set PROJECT_ID (the Google Cloud project id)}"
REGION="${REGION:?set REGION (e.g. europe-west1)}"
TAG="${TAG:?set TAG (the image tag you pushed, e.g. v1)}"
TOPIC="${TOPIC:-likes}"
SUBSCRIPTION="${SUBSCRIPTION:-likes-hotcount}"
PUSH_SUBSCRIPTION="${PUSH_SUBSCRIPTION:-likes-hotcount-push}"
DEAD_LETTER_TOPIC="${DEAD_LETTER_TOPIC:-likes-dead-letter}"
DEAD_LETTER_SUBSCRIPTION="${DEAD_LETTER_SUBSCRIPTION:-likes-dead-letter-inspect}"
SERVICE_ACCOUNT_NAME="${SERVICE_ACCOUNT_NAME:-hotcount}"
CONSUMER="${CONSUMER:-hotcount}"
PUSH_CONSUMER="${PUSH_CONSUMER:-hotcount-push}"
DATABASE="${DATABASE:-(default)}"
COLLECTION_PREFIX="${COLLECTION_PREFIX:-}"
K8S_NAMESPACE="${K8S_NAMESPACE:-hotcount}"
K8S_SERVICE_ACCOUNT="${K8S_SERVICE_ACCOUNT:-hotcount}"
WORKER_POOL="${WORKER_POOL:-hotcount}"
PUSH_CLOUD_RUN_SERVICE="${PUSH_CLOUD_RUN_SERVICE:-hotcount-push}"
STORE_SECRET_NAME="${STORE_SECRET_NAME:-hotcount-store}"
WEBHOOK_SECRET_NAME="${WEBHOOK_SECRET_NAME:-hotcount-milestone-webhook-secret}"
if [[ $# -eq 0 ]]; then
  echo "usage: PROJECT_ID=... REGION=... TAG=... deploy/render.sh FILE..." >&2
  exit 2
fi

refuse() {
  echo "render: $1 '$2' is not $3" >&2
  exit 2
}
[[ "${PROJECT_ID}" =~ ^[a-z][a-z0-9-]{4,28}[a-z0-9]$ ]] || refuse PROJECT_ID "${PROJECT_ID}" "a project id"
[[ "${REGION}" =~ ^[a-z]+-[a-z]+[0-9]+$ ]] || refuse REGION "${REGION}" "a region"
[[ "${TAG}" =~ ^[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}$ && "${TAG}" != latest ]] ||
  refuse TAG "${TAG}" "a pinned image tag"
# Pub/Sub ids (these characters also need no escaping in sed).
for name in TOPIC SUBSCRIPTION PUSH_SUBSCRIPTION DEAD_LETTER_TOPIC DEAD_LETTER_SUBSCRIPTION; do
  [[ "${!name}" =~ ^[A-Za-z][A-Za-z0-9._~%+-]{2,254}$ && "${!name}" != goog* ]] ||
    refuse "${name}" "${!name}" "a Pub/Sub id"
done
# Service account ids, Kubernetes and Cloud Run names.
for name in SERVICE_ACCOUNT_NAME K8S_NAMESPACE K8S_SERVICE_ACCOUNT WORKER_POOL PUSH_CLOUD_RUN_SERVICE; do
  [[ "${!name}" =~ ^[a-z]([a-z0-9-]{0,61}[a-z0-9])?$ ]] || refuse "${name}" "${!name}" "a lower-case name"
done
for name in CONSUMER PUSH_CONSUMER; do
  [[ "${!name}" =~ ^[A-Za-z0-9_][A-Za-z0-9_.-]{0,99}$ ]] || refuse "${name}" "${!name}" "a consumer name"
done
[[ "${DATABASE}" == "(default)" || "${DATABASE}" =~ ^[a-z][a-z0-9-]{2,61}[a-z0-9]$ ]] ||
  refuse DATABASE "${DATABASE}" "a Firestore database id"
for name in STORE_SECRET_NAME WEBHOOK_SECRET_NAME; do
  [[ "${!name}" =~ ^[A-Za-z0-9_-]{1,255}$ ]] || refuse "${name}" "${!name}" "a Secret Manager secret id"
done
[[ "${COLLECTION_PREFIX}" =~ ^[A-Za-z0-9_]*$ ]] || refuse COLLECTION_PREFIX "${COLLECTION_PREFIX}" "a collection prefix"

# A name as a whole token: not inside a longer name (likes-hotcount is not
# part of likes-hotcount-push).
token() {
  printf 's/(^|[^A-Za-z0-9_-])%s([^A-Za-z0-9_-]|$)/\\1%s\\2/g;' "$1" "$2"
}
# The value line after `- name: VAR` in a container's env.
env_value() {
  printf '/- name: %s$/{n;s/value: .*/value: "%s"/;};' "$1" "$2"
}

render() {
  local file="$1" script
  script='/^[[:space:]]*#/d;'
  script+="/- name: HOTCOUNT_CONSUMER\$/{n;s/value: hotcount-push\$/value: ${PUSH_CONSUMER}/;t;s/value: hotcount\$/value: ${CONSUMER}/;};"
  script+="$(env_value HOTCOUNT_DATABASE "${DATABASE}")"
  script+="$(env_value HOTCOUNT_COLLECTION_PREFIX "${COLLECTION_PREFIX}")"
  script+="$(token likes-dead-letter-inspect "${DEAD_LETTER_SUBSCRIPTION}")"
  script+="$(token likes-dead-letter "${DEAD_LETTER_TOPIC}")"
  script+="$(token likes-hotcount-push "${PUSH_SUBSCRIPTION}")"
  script+="$(token likes-hotcount "${SUBSCRIPTION}")"
  # The topic only where a topic is named (`likes` is also a field name).
  script+="s/(topic_id[ :=\\\\\"]{1,6})likes([^A-Za-z0-9_-]|\$)/\\1${TOPIC}\\2/g;"
  script+="s/\"published to likes\"/\"published to ${TOPIC}\"/;"
  script+="s/(^|[^A-Za-z0-9_-])hotcount@PROJECT_ID/\\1${SERVICE_ACCOUNT_NAME}@PROJECT_ID/g;"
  script+="s/^([[:space:]]*namespace: )hotcount\$/\\1${K8S_NAMESPACE}/;"
  script+="s/^([[:space:]]*serviceAccountName: )hotcount\$/\\1${K8S_SERVICE_ACCOUNT}/;"
  script+="s/^([[:space:]]*secretName: )hotcount-store\$/\\1${STORE_SECRET_NAME}/;"
  script+="s/^([[:space:]]*secretName: )hotcount-milestone-webhook-secret\$/\\1${WEBHOOK_SECRET_NAME}/;"
  script+="s/workerpools\\/hotcount([^A-Za-z0-9_-]|\$)/workerpools\\/${WORKER_POOL}\\1/g;"
  # The object's own name, by kind.
  case "$(sed -n 's/^kind: //p' "${file}" | head -n 1)" in
    Namespace) script+="s/^  name: hotcount\$/  name: ${K8S_NAMESPACE}/;" ;;
    ServiceAccount) script+="s/^  name: hotcount\$/  name: ${K8S_SERVICE_ACCOUNT}/;" ;;
    WorkerPool) script+="s/^  name: hotcount\$/  name: ${WORKER_POOL}/;" ;;
    Service) script+="s/^  name: hotcount-push\$/  name: ${PUSH_CLOUD_RUN_SERVICE}/;" ;;
  esac
  script+="s/PROJECT_ID/${PROJECT_ID}/g;s/REGION/${REGION}/g;"
  script+="s|(image: .*/hotcount/hotcount):latest|\\1:${TAG}|"
  sed -E -e "${script}" "${file}"
}

out="$(
  first=1
  for file in "$@"; do
    [[ -n "${first}" ]] || echo "---"
    first=
    render "${file}"
  done
)"
if grep -n -E 'PROJECT_ID|REGION|/hotcount/hotcount:latest' <<<"${out}" >&2; then
  echo "render: placeholders left (above)" >&2
  exit 1
fi
printf '%s\n' "${out}"
