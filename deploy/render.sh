#!/usr/bin/env bash
# Prints manifests with this deployment's values, as one YAML stream with
# `---` between the files, for `kubectl apply -f -` or a file for gcloud:
#   PROJECT_ID=my-project REGION=europe-west1 TAG=v1 deploy/render.sh FILE... | kubectl apply -f -
# Drops comment lines, replaces PROJECT_ID and REGION everywhere and
# hotcount's image tag `:latest` with TAG; refuses values that are not a project id, a region or an image tag,
# and output that still holds a placeholder. deploy/validate-manifests.py
# runs the commands docs/OPERATIONS.md gives with it.
set -euo pipefail

PROJECT_ID="${PROJECT_ID:?set PROJECT_ID (the Google Cloud project id)}"
REGION="${REGION:?set REGION (e.g. europe-west1)}"
TAG="${TAG:?set TAG (the image tag you pushed, e.g. v1)}"
if [[ $# -eq 0 ]]; then
  echo "usage: PROJECT_ID=... REGION=... TAG=... deploy/render.sh FILE..." >&2
  exit 2
fi
[[ "${PROJECT_ID}" =~ ^[a-z][a-z0-9-]{4,28}[a-z0-9]$ ]] || {
  echo "render: PROJECT_ID '${PROJECT_ID}' is not a project id" >&2
  exit 2
}
[[ "${REGION}" =~ ^[a-z]+-[a-z]+[0-9]+$ ]] || {
  echo "render: REGION '${REGION}' is not a region" >&2
  exit 2
}
[[ "${TAG}" =~ ^[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}$ && "${TAG}" != latest ]] || {
  echo "render: TAG '${TAG}' is not a pinned image tag" >&2
  exit 2
}

out="$(
  first=1
  for file in "$@"; do
    [[ -n "${first}" ]] || echo "---"
    first=
    sed -e '/^[[:space:]]*#/d' -e "s/PROJECT_ID/${PROJECT_ID}/g" -e "s/REGION/${REGION}/g" \
      -e "s|\(image: .*/hotcount/hotcount\):latest|\1:${TAG}|" "${file}"
  done
)"
if grep -n -E 'PROJECT_ID|REGION|/hotcount/hotcount:latest' <<<"${out}" >&2; then
  echo "render: placeholders left (above)" >&2
  exit 1
fi
printf '%s\n' "${out}"
