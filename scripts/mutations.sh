#!/usr/bin/env bash
# Mutation check: breaks, one at a time, a line that keeps an invariant of
# ARCHITECTURE.md, runs the tests that should notice, and prints a table of
# which mutation each test caught. A mutation no test catches is a missing
# test. Runs in a scratch worktree of HEAD (the working tree is untouched),
# sharing the target directory so only hotcount's own crates rebuild.
#
#   scripts/mutations.sh            # every mutation
#   scripts/mutations.sh version    # only those whose name contains "version"
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
scratch=${MUTATION_TREE:-$root/target/mutation-tree}
export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-$root/target}
export CARGO_BUILD_JOBS=${CARGO_BUILD_JOBS:-2}
only=${1:-}

git -C "$root" worktree remove --force "$scratch" >/dev/null 2>&1 || rm -rf "$scratch"
git -C "$root" worktree add --detach "$scratch" HEAD >/dev/null
cleanup() { git -C "$root" worktree remove --force "$scratch" >/dev/null 2>&1 || true; }
trap cleanup EXIT
# Five fields per mutation: name, file, the exact text replaced (once), its
# replacement, the `cargo test` arguments that should catch it.
mutations=(
  "skip the version check" src/model/batch.rs
  "if order.is_le() {" "if false {"
  "-p hotcount --lib batch::"

  "ack what did not commit" src/pipeline/flusher/mod.rs
  "if settled.nack.is_empty() {" "if true {"
  "-p hotcount --test isolation_prop"

  "drop the marker read" src/store/firestore/documents.rs
  "marker_effects = Some(codec::effects_from_fields(&doc));" "let _ = codec::effects_from_fields(&doc);"
  "-p hotcount --test service_e2e aborted_and_applied"

  "ignore busy shards" src/pipeline/aggregator.rs
  ".filter(|(i, _)| !busy.get(*i).copied().unwrap_or(false))" ".filter(|_| true)"
  "-p hotcount --lib flusher::tests::in_flight::a_membership_is_never"

  "ignore memberships in flight" src/pipeline/aggregator.rs
  "if moved.len() < limit && !in_flight.contains(&route) {" "if moved.len() < limit {"
  "-p hotcount --lib flusher::tests::in_flight::"

  "skip a poison record" src/store/firestore/codec/commit.rs
  "commit.push(&quarantine_write(layout, &config.consumer, &poison.item));" "let _ = quarantine_write(layout, &config.consumer, &poison.item);"
  "-p hotcount --test hostile_content"

  "quarantine on any error" src/store/firestore/errors.rs
  "Code::InvalidArgument if !is_expired_transaction(message) => ErrorClass::Content," "_ if !is_expired_transaction(message) => ErrorClass::Content,"
  "-p hotcount --lib store::firestore"

  "no held cap" src/pipeline/source.rs
  "let full = self.held.is_full();" "let full = false;"
  "-p hotcount --test store_failures memory_stays_bounded_when"

  "no split on contention" src/pipeline/flusher/isolate.rs
  "if contended {" "if false {"
  "-p hotcount --test store_failures a_document_locked"

  "no retry_transaction" src/store/mod.rs
  "retry_transaction: error.transaction.clone()," "retry_transaction: None,"
  "-p hotcount --test store_failures a_retry_after_aborted"

  "read mask without eventId" src/store/firestore/documents.rs
  "    membership::EVENT_ID,
    marker::APPLIED," "    membership::BATCH_ID,
    marker::APPLIED,"
  "-p hotcount --lib store::firestore::codec"

  "no shutdown deadline" src/store/firestore/mod.rs
  "() = attempt.deadline.reached() => {" "() = std::future::pending::<()>() => {"
  "-p hotcount --test store_failures shutdown_ends"

  "milestone settle unfenced (PostgreSQL)" src/store/postgres/schema.rs
  "WHERE post_id = \$1 AND milestone = \$2 AND attempts = \$3 AND status = 'leased'" "WHERE post_id = \$1 AND milestone = \$2 AND \$3::int4 IS NOT NULL"
  "-p hotcount --test milestones killed"

  "milestone settle unfenced (Firestore)" src/store/firestore/milestones.rs
  "codec::milestone_update(self.layout(), &next, claim.update_time)" "codec::milestone_update(self.layout(), &next, None)"
  "-p hotcount --test milestones killed"

  "milestone claim unconditioned (Firestore)" src/store/firestore/milestones.rs
  "codec::milestone_update(self.layout(), &record, Some(seen))" "codec::milestone_update(self.layout(), &record, None)"
  "-p hotcount --test milestones dispatchers_claiming_at_once"

  "milestone climb-back recorded again" src/store/milestone.rs
  "let floor = old.max(highest.unwrap_or(0));" "let floor = old;"
  "-p hotcount --lib milestone"
)

printf '| mutation | where | tests run | caught |\n|---|---|---|---|\n'
missed=0
for ((i = 0; i < ${#mutations[@]}; i += 5)); do
  name=${mutations[i]} file=${mutations[i + 1]} from=${mutations[i + 2]}
  to=${mutations[i + 3]} args=${mutations[i + 4]}
  if [ -n "$only" ] && [[ "$name" != *"$only"* ]]; then continue; fi
  git -C "$scratch" checkout -q -- .
  if ! python3 - "$scratch/$file" "$from" "$to" <<'PY'
import sys
path, old, new = sys.argv[1:4]
text = open(path).read()
if text.count(old) != 1:
    sys.exit(f"{path}: {old!r} found {text.count(old)} times")
open(path, "w").write(text.replace(old, new))
PY
  then
    echo "| $name | $file | - | NOT APPLIED (the line moved: update this script) |"
    missed=$((missed + 1))
    continue
  fi
  log=$(mktemp)
  # shellcheck disable=SC2086 # the test arguments are words
  if (cd "$scratch" && cargo test $args >"$log" 2>&1); then
    echo "| $name | $file | \`$args\` | **no** |"
    missed=$((missed + 1))
  else
    failed=$(grep -E '^    [a-z_:]+$' "$log" | sed 's/^ *//' | paste -sd, - || true)
    echo "| $name | $file | \`$args\` | yes: ${failed:-build or run failed (see $log)} |"
  fi
done
git -C "$scratch" checkout -q -- .
if [ "$missed" -gt 0 ]; then
  echo "$missed mutation(s) not caught" >&2
  exit 1
fi
