#!/usr/bin/env bash
# A Kafka soak on the Flink session cluster: a broker (broker.sh) and a cluster (tools/flink/cluster.sh) in
# a run directory of their own, the streaming frequency job reading a topic through the bridge with
# --store, `ldp-beam simulate --output_topic` producing at a steady rate for DURATION seconds; then the
# latency of every window (when its first pane reached the store, less the window's end) as percentiles,
# and the reports counted against the reports produced. Stops what it started, by PID, on exit.
#
#   bash tools/kafka/soak.sh [DURATION_S=180] [RATE=2000 reports/s] [WINDOW_S=10]
#
# Needs the parts of `bash tools/kafka/broker.sh fetch` and `bash tools/flink/cluster.sh fetch`.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "$here/../.." && pwd)"
duration="${1:-180}"
rate="${2:-2000}"
window="${3:-10}"
py="$root/.venv/bin/python"
run="$(mktemp -d /tmp/ldp-kafka-soak.XXXXXX)"
export LDP_KAFKA_RUN_DIR="$run/broker" LDP_FLINK_RUN_DIR="$run/flink" LDP_FLINK_CHECKPOINT_MS=1000
job=""

say() { echo "[kafka-soak] $*" >&2; }
cleanup() {
  [ -z "$job" ] || kill "$job" 2>/dev/null || true
  bash "$root/tools/flink/cluster.sh" stop >/dev/null 2>&1 || true
  bash "$here/broker.sh" stop >/dev/null 2>&1 || true
}
trap cleanup EXIT

for n in "$duration" "$rate" "$window"; do
  [[ "$n" =~ ^[1-9][0-9]*$ ]] || { say "DURATION_S, RATE and WINDOW_S must be positive integers"; exit 2; }
done
bootstrap="$(bash "$here/broker.sh" start | tail -1)"
read -r -a cluster_args <<< "$(bash "$root/tools/flink/cluster.sh" start | tail -1)"
printf '{"task_id": "kafka-soak", "mechanism": "olh", "epsilon": 1.0, "domain_size": 64}\n' > "$run/task.json"
topic="kafka://$bootstrap/soak"
store="sqlite:///$run/store.db"
cd "$root"
"$py" -m pipelines.frequency --task "$run/task.json" --streaming --input_topic "$topic?spool=$run/spool" \
  --output "$run/out" --store "$store" --window_size "$window" --allowed_lateness 30 --watch_interval 1 \
  --streaming_duration "$((duration + 90))" "${cluster_args[@]}" --parallelism=4 \
  --finish_bundle_before_checkpointing --shutdown_sources_after_idle_ms=5000 >"$run/job.log" 2>&1 &
job=$!
until grep -q "draining it after" "$run/job.log"; do
  kill -0 "$job" 2>/dev/null || { tail -20 "$run/job.log" >&2; exit 1; }
  sleep 1
done
say "job running; producing $rate reports/s for $duration s to $topic"
"$py" -m pipelines.cli simulate --task "$run/task.json" --users "$((rate * duration))" --rate "$rate" \
  --message_size 500 --output_topic "$topic" 2>"$run/simulate.log"
wait "$job"
job=""
"$py" - "$store" "$((rate * duration))" <<'PY'
import sys

import numpy as np

from store import open_store

with open_store(sys.argv[1], create=False, shared=False, must_exist=True) as s:
    windows = [w for w in s.windows("kafka-soak", limit=100_000) if w["window_end"]]
first = np.array([w["first_written_ms"] - w["window_end"] for w in windows]) / 1000
counted = sum(int(w["n_reports"]) for w in windows)
print(f"windows {len(windows)}, reports counted {counted:,} of {int(sys.argv[2]):,} produced, "
      f"final {sum(bool(w['is_final']) for w in windows)}")
pct = np.percentile(first, [50, 90, 99, 100])
print("first pane in the store after the window's end, s: p50 %.1f, p90 %.1f, p99 %.1f, max %.1f" % tuple(pct))
PY
say "run directory: $run"
