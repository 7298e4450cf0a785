#!/usr/bin/env bash
# Builds the `hotcount` binary of an older commit, for the rolling-upgrade
# test (tests/upgrade.rs): its source from this clone's history
# (`git archive`), built with its own Cargo.lock, the binary copied to
# target/old-builds/COMMIT/hotcount.
#
#   scripts/old-build.sh COMMIT [--shared-target]
#
# --shared-target builds in the workspace's own target directory, so the
# dependencies both builds share are compiled once (CI does this before the
# tests are built: `cargo` puts the current build's binaries back in place
# afterwards). Never use it while tests run: the older binary is written
# to target/debug/hotcount first. Without it the older build gets a target
# directory of its own (target/old-builds/target), safe at any time.
set -euo pipefail
cd "$(dirname "$0")/.."

commit="${1:?usage: scripts/old-build.sh COMMIT [--shared-target]}"
root="$PWD"
out="$root/target/old-builds/$commit"
if [[ -x "$out/hotcount" ]]; then
  echo "old-build: $out/hotcount is there"
  exit 0
fi
if ! git cat-file -e "$commit^{commit}" 2>/dev/null; then
  echo "old-build: commit $commit is not in this clone's history (a shallow clone?): fetch it, or set HOTCOUNT_OLD_BIN to a binary built from it" >&2
  exit 1
fi
target_dir="$root/target/old-builds/target"
if [[ "${2:-}" == "--shared-target" ]]; then
  target_dir="$root/target"
fi
src="$out/src"
rm -rf "$src"
mkdir -p "$src"
git archive "$commit" | tar -x -C "$src"
echo "old-build: building hotcount at $commit (target dir $target_dir)"
(cd "$src" && CARGO_TARGET_DIR="$target_dir" cargo build --locked -p hotcount --bin hotcount)
cp "$target_dir/debug/hotcount" "$out/hotcount.partial"
mv "$out/hotcount.partial" "$out/hotcount"
rm -rf "$src"
echo "old-build: $out/hotcount"
