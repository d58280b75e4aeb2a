#!/usr/bin/env bash
# The project's two entry points (see README "Quick start"):
#   ./run_local.sh           run the main job (Beam, DirectRunner) end to end on an embedded default population
#   ./run_local.sh test      run the whole test suite, fast tier then integration tier (what CI runs);
#                            ./run_local.sh test PYTEST_ARGS... runs pytest once with those arguments
# Also: ./run_local.sh streaming (Pub/Sub emulator demo), ./run_local.sh core (numpy-only demo).
# Both create or refresh the virtual environment .venv first.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")"
bash tools/ensure_venv.sh
# builds (Flink jars, Prism) are cached outside the clone, under ~/.cache/ldp-beam (tools/link_cache.sh)
bash tools/link_cache.sh
py=.venv/bin/python
case "${1:-demo}" in
  test)
    shift
    # The Flink runner tests need Beam's Flink job server; build/fetch it once into .cache/flink
    # (needs java + mvn; without them the Flink tests skip with the reason, or fail under LDP_REQUIRE_FLINK=1).
    if command -v java >/dev/null && command -v mvn >/dev/null; then
      bash tools/flink/get_job_server.sh >/dev/null || echo "[run_local] could not get the Flink job server" >&2
      # the multi-process session cluster's Flink jars (tools/flink/cluster.sh; tests/test_flink_cluster.py)
      bash tools/flink/cluster.sh fetch >/dev/null || echo "[run_local] could not fetch the Flink cluster jars" >&2
    fi
    # The live-path tests run on Beam's Prism runner; build it once into .cache/prism with Go (from the Go
    # module proxy; without go the Prism tests skip with the reason, or fail under LDP_REQUIRE_PRISM=1).
    if command -v go >/dev/null || [ -x /usr/local/go/bin/go ]; then
      bash tools/prism/get_prism.sh >/dev/null || echo "[run_local] could not build the Prism runner" >&2
    fi
    if [ $# -gt 0 ]; then
      # pytest arguments given (e.g. -m "not integration", -k range, tests/test_cli.py): one run with them
      exec "$py" -m pytest -q "$@"
    fi
    # Both tiers, the fast tests first: the tiers are markers every test file carries (docs/testing.md).
    status=0
    # The fast tier runs on two processes (pytest-xdist; a file's tests stay together), the integration
    # tier in one (it starts services and runners that want the machine).
    echo "[run_local] fast tier: pytest -m 'not integration' -n 2" >&2
    "$py" -m pytest -q -m "not integration" -n 2 --dist loadfile tests || status=$?
    echo "[run_local] integration tier: pytest -m integration" >&2
    "$py" -m pytest -q -m integration --durations=25 tests || status=$?
    exit "$status"
    ;;
  demo)
    [ $# -gt 0 ] && shift
    # Beam batch job on the DirectRunner: default task (auto mechanism, epsilon 1, d 1024), 1,000,000 users
    exec "$py" -m pipelines.demo_beam "$@"
    ;;
  streaming)
    shift
    # Streaming demo against the Pub/Sub emulator (started on 127.0.0.1, stopped by PID)
    exec "$py" -m pipelines.demo_beam --streaming --users 100000 "$@"
    ;;
  dashboard)
    shift
    # Live dashboard demo on 127.0.0.1: simulated clients (a watched directory on Prism, built by
    # tools/prism/get_prism.sh, else the Pub/Sub emulator), the streaming job writing the store, the
    # dashboard; prints its URL; Ctrl-C stops every process it started (docs/live.md)
    exec "$py" -m pipelines.dashboard_demo "$@"
    ;;
  browser)
    shift
    # Browser demo on 127.0.0.1: the collector serving a page that encodes reports in the browser with the
    # TypeScript client (built here: npm ci once, npm run build), the streaming job on Prism over the
    # collector's directory writing the store, the dashboard; prints the URLs; Ctrl-C stops every process
    # it started (docs/collector.md, "Browser demo")
    command -v npm >/dev/null || { echo "[run_local] the browser demo needs node and npm" >&2; exit 2; }
    [ -d clients/typescript/node_modules/typescript ] || (cd clients/typescript && npm ci --no-audit --no-fund)
    (cd clients/typescript && npm run build >/dev/null)
    bash tools/prism/get_prism.sh >/dev/null || echo "[run_local] could not build the Prism runner" >&2
    exec "$py" -m pipelines.browser_demo "$@"
    ;;
  core)
    shift
    # The same population through the numpy core only (no Beam)
    exec "$py" -m pipelines.demo "$@"
    ;;
  *)
    echo "usage: ./run_local.sh [demo [ARGS...] | streaming [ARGS...] | dashboard [ARGS...] | browser [ARGS...] | core [ARGS...] | test [PYTEST ARGS...]]" >&2
    exit 2
    ;;
esac
