#!/usr/bin/env bash
# Build (once) Beam's Prism runner binary, the Go portable runner that the Python SDK's PrismRunner starts
# (`--runner=PrismRunner --prism_location=BIN`), and cache it under the repository's git-ignored .cache/prism/.
#
#   bash tools/prism/get_prism.sh          # prints the binary's path on its last line of stdout
#
# It runs `go install github.com/apache/beam/sdks/v2/go/cmd/prism@VERSION` with GOBIN pointing at the cache,
# through the Go module proxy (no GitHub release download). The first build takes 3-6 minutes on a 2-core
# machine (2.7 min measured, module downloads included); later runs find the cached binary and return at
# once. See docs/live.md.
#
# Environment (all optional):
#   LDP_PRISM_VERSION   Beam version of the Prism module   (default v2.77.0, the Python SDK's version)
#   LDP_PRISM_CACHE     cache folder                        (default REPO/.cache/prism)
#   LDP_PRISM_FORCE=1   rebuild even when a cached binary exists
#   GO                  the go binary                       (default: go on PATH, else /usr/local/go/bin/go)
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "$here/../.." && pwd)"
version="${LDP_PRISM_VERSION:-v2.77.0}"
cache="${LDP_PRISM_CACHE:-$root/.cache/prism}"
bin_dir="$cache/$version"
bin="$bin_dir/prism"
link="$cache/prism"
log="$cache/build-$version.log"

say() { echo "[get_prism] $*" >&2; }

go_bin="${GO:-}"
if [ -z "$go_bin" ]; then
  if command -v go >/dev/null 2>&1; then go_bin="$(command -v go)"
  elif [ -x /usr/local/go/bin/go ]; then go_bin=/usr/local/go/bin/go
  fi
fi

finish() {
  ln -sfn "$version/prism" "$link"
  say "prism binary: $bin ($(du -h "$bin" | cut -f1)); link: $link"
  echo "$bin"
  exit 0
}

# A usable binary runs and answers --help (it prints its flags and exits).
check_bin() { [ -x "$1" ] && "$1" --help >/dev/null 2>&1; }

mkdir -p "$bin_dir"
if [ "${LDP_PRISM_FORCE:-0}" != 1 ] && check_bin "$bin"; then
  say "cached"
  finish
fi
if [ -z "$go_bin" ] || ! "$go_bin" version >/dev/null 2>&1; then
  say "ERROR: no Go toolchain (put go on PATH, set GO=/path/to/go, or install Go >= 1.23 from go.dev/dl)"
  exit 1
fi
rm -f "$bin"
say "building prism $version with $("$go_bin" version) (log: $log; ~6 min on 2 cores)"
start=$(date +%s)
# Module and build caches stay in the user's default GOPATH/GOCACHE so a rebuild reuses them.
if ! GOBIN="$bin_dir" "$go_bin" install \
    "github.com/apache/beam/sdks/v2/go/cmd/prism@$version" >"$log" 2>&1; then
  say "ERROR: go install failed:"
  tail -20 "$log" >&2
  exit 1
fi
check_bin "$bin" || { say "ERROR: built $bin does not run"; exit 1; }
say "built in $(( $(date +%s) - start )) s"
finish
