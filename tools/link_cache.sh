#!/usr/bin/env bash
# Point the repository's .cache at a build cache outside the clone, so a fresh checkout (CI's, a second clone)
# reuses the Flink job-server jar, the Flink cluster jars and the Prism binary built by an earlier one.
#
#   bash tools/link_cache.sh        # called by run_local.sh; prints nothing on success
#
# .cache becomes a symbolic link to $LDP_CACHE_DIR (default ${XDG_CACHE_HOME:-$HOME/.cache}/ldp-beam). An
# existing .cache directory (or link) is left as it is; LDP_CACHE_DIR=none keeps the cache inside the clone.
# What is cached there is keyed by version (tools/flink/get_job_server.sh, tools/flink/cluster.sh,
# tools/prism/get_prism.sh), so checkouts of different versions can share it.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
link="$root/.cache"
[ -e "$link" ] || [ -L "$link" ] && exit 0
target="${LDP_CACHE_DIR:-${XDG_CACHE_HOME:-${HOME:-}/.cache}/ldp-beam}"
if [ "$target" = none ] || [ -z "${HOME:-}${XDG_CACHE_HOME:-}${LDP_CACHE_DIR:-}" ]; then
  mkdir -p "$link"
  exit 0
fi
if mkdir -p "$target" 2>/dev/null && [ -w "$target" ]; then
  ln -s "$target" "$link"
else
  echo "[link_cache] cannot write $target; caching inside the clone" >&2
  mkdir -p "$link"
fi
