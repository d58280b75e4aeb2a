#!/usr/bin/env bash
# The project's two entry points (see README "Quick start"):
#   ./run_local.sh           run the main job end to end on an embedded default population
#   ./run_local.sh test      run the whole test suite (what CI runs)
# Both create or refresh the virtual environment .venv first.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")"
bash tools/ensure_venv.sh
py=.venv/bin/python
case "${1:-demo}" in
  test)
    shift
    # The Flink runner tests need Beam's Flink job server; build/fetch it once into .cache/flink
    # (needs java + mvn; without them the Flink tests skip with the reason, or fail under LDP_REQUIRE_FLINK=1).
    if command -v java >/dev/null && command -v mvn >/dev/null; then
      bash tools/flink/get_job_server.sh >/dev/null || echo "[run_local] could not get the Flink job server" >&2
    fi
    exec "$py" -m pytest -q "$@" tests
    ;;
  demo)
    [ $# -gt 0 ] && shift
    exec "$py" -m pipelines.demo "$@"
    ;;
  *)
    echo "usage: ./run_local.sh [demo [ARGS...] | test [PYTEST ARGS...]]" >&2
    exit 2
    ;;
esac
