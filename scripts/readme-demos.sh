#!/usr/bin/env bash
# Runs the README's demo commands exactly as the README writes them (read
# from README.md, not copied here), each with a small workload appended so
# CI stays cheap: the main job (the first line of the first code block),
# the demo on a throwaway PostgreSQL (the line with `demo --temp-postgres`)
# and the push demo (the line with `demo --delivery push`).
# A README command that no longer works as written fails this script.
set -euo pipefail
cd "$(dirname "$0")/.."

small=(--events 20000 --posts 500 --users 5000 --no-progress)

first=$(awk '/^```/{f=!f; next} f && NF {print; exit}' README.md)
postgres=$(awk '/^```/{f=!f; next} f && /demo --temp-postgres/ {print; exit}' README.md)
push=$(awk '/^```/{f=!f; next} f && /demo --delivery push/ {print; exit}' README.md)

status=0
for line in "$first" "$postgres" "$push"; do
  command=${line%%#*}                      # the comment after it, if any
  command=${command%"${command##*[![:space:]]}"}
  if [[ "$command" != "cargo run "*" demo"* ]]; then
    echo "readme-demos: not a demo command in README.md: '$line'" >&2
    exit 2
  fi
  echo "== README: $command ${small[*]}"
  # shellcheck disable=SC2086 # the README's words, split as a shell would
  if ! $command "${small[@]}"; then
    echo "readme-demos: FAILED as written in README.md: $command" >&2
    status=1
  fi
done
exit "$status"
