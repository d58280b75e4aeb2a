#!/usr/bin/env bash
# A Flink session cluster on 127.0.0.1 for the project's Beam jobs: a JobManager and two TaskManagers as
# separate JVMs, the Beam Flink job server submitting to it, a Python SDK worker pool (the EXTERNAL
# environment), and the expansion service of the watch's checkpointed ticks (tools/flink/ticks, Java;
# --watch_ticks=flink, docs/flink.md "Failover"). Every process is stopped by its PID; Flink's own
# sockets, the pool and the expansion services listen on 127.0.0.1 (the job server's job and artifact
# services and the task managers' per-job gRPC services cannot be bound: docs/flink.md).
#
#   bash tools/flink/cluster.sh fetch      # only fetch/build the parts (the jars), start nothing
#   bash tools/flink/cluster.sh start      # prints the pipeline flags on its last line of stdout
#   bash tools/flink/cluster.sh status     # processes, ports, task managers and slots (exit 1: not running)
#   bash tools/flink/cluster.sh args       # the pipeline flags: --runner=PortableRunner --job_endpoint=...
#   bash tools/flink/cluster.sh stop
#   bash tools/flink/cluster.sh kill-tm N  # SIGKILL task manager N (1 or 2): a worker lost (failover tests)
#   bash tools/flink/cluster.sh start-tm N # start task manager N again
#
# Run a job on it:
#   .venv/bin/python -m pipelines.frequency ... $(bash tools/flink/cluster.sh args) --parallelism=4
#
# Parts (fetched once, cached under .cache/flink/, git-ignored):
#   * the job-server jar from tools/flink/get_job_server.sh (Beam 2.62.0, runner for Flink 1.19);
#   * .cache/flink/ldp-flink-ticks.jar: tools/flink/ticks/*.java compiled with javac against that jar;
#   * .cache/flink/prometheus-1.19.1/: Flink's Prometheus reporter (flink-metrics-prometheus, the newest 1.19
#     release Maven Central serves here) and tools/flink/prometheus/*.java compiled against it: the same
#     reporter with its endpoint on 127.0.0.1 (Flink's binds every interface); each JobManager and TaskManager
#     serves /metrics on its own port, listed in cluster.env as LDP_FLINK_PROMETHEUS (docs/metrics.md);
#   * the cluster's class path: Flink 1.19.0 (flink-runtime, flink-streaming-java, flink-java, flink-clients,
#     flink-statebackend-rocksdb, log4j) from Maven Central via tools/flink/cluster-pom.xml, since Flink's
#     binary distribution (flink-dist) is not served there. The Flink version must match the job server's
#     runner (LDP_FLINK_VERSION_FULL, default 1.19.0).
#
# The run directory (LDP_FLINK_RUN_DIR, default REPO/.cache/flink/cluster) holds conf/ (config.yaml: ports,
# memory, checkpointing, state backend, restart strategy), the pid files, logs/, checkpoints/, the
# state of RocksDB and the staged artifacts, and cluster.env (the endpoints).
#
# Configuration (environment, all optional):
#   LDP_FLINK_RUN_DIR              run directory (see above)
#   LDP_FLINK_TASK_SLOTS           slots per task manager (default 4: one task manager can run a job of
#                                  parallelism 4 alone, so a job survives the loss of the other)
#   LDP_FLINK_CHECKPOINT_MS        checkpoint interval of streaming jobs, ms (default 2000; 0: none)
#   LDP_FLINK_STATE_BACKEND        rocksdb (default) or hashmap; checkpoints go to RUN_DIR/checkpoints
#   LDP_FLINK_RESTART_ATTEMPTS     fixed-delay restart attempts (default 10), LDP_FLINK_RESTART_DELAY
#                                  (default "2 s")
#   LDP_FLINK_TM_MEMORY            task manager process size (default 2560m); LDP_FLINK_JM_MEMORY (1024m)
#   LDP_FLINK_VERSION_FULL         Flink version of the cluster (default 1.19.0)
#   LDP_FLINK_JOB_SERVER_JAR       job-server jar (default: from get_job_server.sh)
#   LDP_PYTHON                     Python of the SDK workers (default REPO/.venv/bin/python)
#   LDP_FLINK_MVN_ARGS             extra Maven arguments (e.g. "-o")
# Checkpointing, state backend and restart strategy are cluster settings: the job server reads the same
# conf/ (--flink-conf-dir), so every streaming job submitted through it is checkpointed. Beam's runner
# itself only knows a job is checkpointed from the pipeline option --checkpointing_interval (declared in
# transforms/flink_options.py; docs/flink.md, 'Failover').
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "$here/../.." && pwd)"
run="${LDP_FLINK_RUN_DIR:-$root/.cache/flink/cluster}"
flink_version="${LDP_FLINK_VERSION_FULL:-1.19.0}"
lib="$root/.cache/flink/cluster-$flink_version/lib"
prom_version="${LDP_FLINK_PROMETHEUS_VERSION:-1.19.1}"
prom_dir="$root/.cache/flink/prometheus-$prom_version"
slots="${LDP_FLINK_TASK_SLOTS:-4}"
checkpoint_ms="${LDP_FLINK_CHECKPOINT_MS:-2000}"
state_backend="${LDP_FLINK_STATE_BACKEND:-rocksdb}"
restart_attempts="${LDP_FLINK_RESTART_ATTEMPTS:-10}"
restart_delay="${LDP_FLINK_RESTART_DELAY:-2 s}"
tm_memory="${LDP_FLINK_TM_MEMORY:-2560m}"
jm_memory="${LDP_FLINK_JM_MEMORY:-1024m}"
python="${LDP_PYTHON:-$root/.venv/bin/python}"
read -r -a mvn_args <<< "${LDP_FLINK_MVN_ARGS:-}"
n_tm=2

say() { echo "[flink-cluster] $*" >&2; }
die() { say "ERROR: $*"; exit 1; }

# running PID: the process exists and is not a zombie (a killed process whose parent is gone waits for
# PID 1 to reap it, which in some sandboxes never happens; kill -0 alone would call it running)
running() {
  kill -0 "$1" 2>/dev/null || return 1
  [ "$(sed -e 's/^.*) //' "/proc/$1/stat" 2>/dev/null | cut -d' ' -f1)" != Z ]
}
pid_alive() { [ -f "$1" ] && running "$(cat "$1")"; }

# ------------------------------------------------------------------------------------------------ parts
need_tools() {
  for tool in java mvn; do
    command -v "$tool" >/dev/null 2>&1 \
      || die "'$tool' not found on PATH (Debian: apt-get install -y maven openjdk-17-jdk-headless)"
  done
  [ -x "$python" ] || die "no Python at $python (set LDP_PYTHON, or create the venv: tools/ensure_venv.sh)"
  "$python" -c "import apache_beam" 2>/dev/null || die "$python cannot import apache_beam"
}

cluster_lib() {
  if [ -f "$lib/.complete" ]; then return; fi
  say "fetching Flink $flink_version jars from Maven Central into $lib (tools/flink/cluster-pom.xml)"
  rm -rf "$lib"
  mkdir -p "$lib"
  local log="$lib/../maven.log"
  if ! mvn -B "${mvn_args[@]}" -f "$here/cluster-pom.xml" -Dflink.version="$flink_version" \
      dependency:copy-dependencies -DincludeScope=runtime -DoutputDirectory="$lib" >"$log" 2>&1; then
    grep -E '^\[ERROR\]' "$log" | head -5 >&2 || tail -20 "$log" >&2
    die "could not fetch the Flink $flink_version jars (log: $log)"
  fi
  ls "$lib"/flink-runtime-"$flink_version".jar >/dev/null 2>&1 || die "no flink-runtime-$flink_version.jar in $lib"
  touch "$lib/.complete"
}

metrics_jars() {  # Flink's Prometheus reporter jar + the loopback reporter (tools/flink/prometheus) built against it
  local src="$here/prometheus" out="$prom_dir/ldp-flink-prometheus.jar" upstream
  upstream="$prom_dir/flink-metrics-prometheus-$prom_version.jar"
  if [ -f "$out" ] && [ -f "$upstream" ] && [ -z "$(find "$src" -newer "$out" -type f 2>/dev/null)" ]; then
    return
  fi
  mkdir -p "$prom_dir"
  if [ ! -f "$upstream" ]; then
    say "fetching org.apache.flink:flink-metrics-prometheus:$prom_version from Maven Central into $prom_dir"
    mvn -B -q "${mvn_args[@]}" dependency:copy -Dartifact="org.apache.flink:flink-metrics-prometheus:$prom_version" \
      -DoutputDirectory="$prom_dir" >"$prom_dir/maven.log" 2>&1 \
      || die "could not fetch flink-metrics-prometheus $prom_version (log: $prom_dir/maven.log)"
  fi
  command -v javac >/dev/null 2>&1 && command -v jar >/dev/null 2>&1 \
    || die "'javac'/'jar' not found (Debian: apt-get install -y openjdk-17-jdk-headless)"
  local build
  build="$(mktemp -d)"
  javac -nowarn --release 11 -cp "$lib/*:$upstream" -d "$build" \
    "$src"/org/apache/flink/metrics/prometheus/*.java >&2 || { rm -rf "$build"; die "could not compile $src"; }
  cp -r "$src/META-INF" "$build/"
  jar cf "$out.tmp" -C "$build" . && mv "$out.tmp" "$out"
  rm -rf "$build"
}

ticks_jar() {  # the watch's checkpointed ticks (tools/flink/ticks, Java): built with javac against the job-server jar
  local js="$1" out="$root/.cache/flink/ldp-flink-ticks.jar" src="$here/ticks"
  if [ -f "$out" ] && [ -z "$(find "$src" -newer "$out" -type f 2>/dev/null)" ] && [ "$out" -nt "$js" ]; then
    echo "$out"; return
  fi
  command -v javac >/dev/null 2>&1 && command -v jar >/dev/null 2>&1 \
    || die "'javac'/'jar' not found (Debian: apt-get install -y openjdk-17-jdk-headless)"
  local build
  build="$(mktemp -d)"
  javac -nowarn --release 11 -cp "$js" -d "$build" "$src"/org/ldpbeam/flink/*.java >&2 \
    || { rm -rf "$build"; die "could not compile $src"; }
  cp -r "$src/META-INF" "$build/"
  jar cf "$out.tmp" -C "$build" . && mv "$out.tmp" "$out"
  rm -rf "$build"
  say "built $out"
  echo "$out"
}

job_server_jar() {
  if [ -n "${LDP_FLINK_JOB_SERVER_JAR:-}" ]; then
    [ -f "$LDP_FLINK_JOB_SERVER_JAR" ] || die "LDP_FLINK_JOB_SERVER_JAR=$LDP_FLINK_JOB_SERVER_JAR is not a file"
    echo "$LDP_FLINK_JOB_SERVER_JAR"
  else
    bash "$here/get_job_server.sh" | tail -1
  fi
}

free_ports() {  # N free TCP ports on 127.0.0.1
  "$python" - "$1" <<'EOF'
import socket, sys
socks = []
for _ in range(int(sys.argv[1])):
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    socks.append(s)
print(" ".join(str(s.getsockname()[1]) for s in socks))
EOF
}

wait_for() {  # wait_for SECONDS DESCRIPTION PIDFILE COMMAND...
  local limit="$1" what="$2" pidfile="$3"
  shift 3
  local t0
  t0=$(date +%s)
  until "$@" >/dev/null 2>&1; do
    pid_alive "$pidfile" || die "$what exited while starting (see $run/logs/)"
    [ $(( $(date +%s) - t0 )) -lt "$limit" ] || die "$what not up after ${limit} s (see $run/logs/)"
    sleep 0.5
  done
}

rest_get() { "$python" -c "import sys,urllib.request; sys.stdout.write(urllib.request.urlopen('http://127.0.0.1:$rest_port$1', timeout=5).read().decode())"; }

registered_tms() { rest_get /taskmanagers | "$python" -c "import json,sys; print(len(json.load(sys.stdin)['taskmanagers']))"; }

port_open() { "$python" -c "import socket; socket.create_connection(('127.0.0.1', $1), timeout=1).close()"; }

# ------------------------------------------------------------------------------------------------ config
write_config() {
  local jm_rpc_port="$1" blob_port="$2"
  mkdir -p "$run/conf" "$run/logs" "$run/checkpoints" "$run/savepoints" "$run/tmp" "$run/artifacts"
  local ckpt=""
  if [ "$checkpoint_ms" != 0 ]; then
    ckpt="execution.checkpointing.interval: ${checkpoint_ms} ms
execution.checkpointing.mode: EXACTLY_ONCE
execution.checkpointing.externalized-checkpoint-retention: RETAIN_ON_CANCELLATION"
  fi
  cat > "$run/conf/config.yaml" <<EOF
# Written by tools/flink/cluster.sh; the JobManager, the TaskManagers and the job server read it.
jobmanager.rpc.address: 127.0.0.1
jobmanager.rpc.port: $jm_rpc_port
jobmanager.bind-host: 127.0.0.1
jobmanager.memory.process.size: $jm_memory
rest.address: 127.0.0.1
rest.bind-address: 127.0.0.1
rest.port: $rest_port
blob.server.port: $blob_port
taskmanager.host: 127.0.0.1
taskmanager.bind-host: 127.0.0.1
taskmanager.rpc.port: 0
taskmanager.data.port: 0
metrics.internal.query-service.port: 0
# Prometheus scrape endpoints on 127.0.0.1 (tools/flink/prometheus; the port of each process is a -D option)
metrics.reporter.prom.factory.class: org.apache.flink.metrics.prometheus.LoopbackPrometheusReporterFactory
metrics.reporter.prom.host: 127.0.0.1
taskmanager.numberOfTaskSlots: $slots
taskmanager.memory.process.size: $tm_memory
taskmanager.memory.jvm-metaspace.size: 320m
# Beam's batch translation has many shuffles per job: 64 MiB of network buffers are not enough at
# parallelism 4 ("Insufficient number of network buffers: required 512, but only 388 available")
taskmanager.memory.network.min: 512m
taskmanager.memory.network.max: 512m
cluster.evenly-spread-out-slots: true
parallelism.default: 4
io.tmp.dirs: $run/tmp
web.tmpdir: $run/tmp/web
web.submit.enable: false
# faster detection of a lost task manager than the 50 s default (10 s timed out live task managers at load average 25)
heartbeat.interval: 2000
heartbeat.timeout: 30000
# streaming jobs: checkpoints on local disk, restored after a failure
state.backend.type: $state_backend
state.checkpoints.dir: file://$run/checkpoints
state.savepoints.dir: file://$run/savepoints
state.backend.incremental: false
$ckpt
restart-strategy.type: fixed-delay
restart-strategy.fixed-delay.attempts: $restart_attempts
restart-strategy.fixed-delay.delay: $restart_delay
classloader.check-leaked-classloader: false
EOF
  cat > "$run/conf/log4j.properties" <<'EOF'
rootLogger.level = INFO
rootLogger.appenderRef.file.ref = MainAppender
appender.main.name = MainAppender
appender.main.type = File
appender.main.append = true
appender.main.fileName = ${sys:log.file}
appender.main.layout.type = PatternLayout
appender.main.layout.pattern = %d{yyyy-MM-dd HH:mm:ss,SSS} %-5p %-60c %x - %m%n
logger.pekko.name = org.apache.pekko
logger.pekko.level = INFO
logger.netty.name = org.jboss.netty.channel.DefaultChannelPipeline
logger.netty.level = OFF
EOF
}

jvm_params() {  # jvm_params JM|TM -> two lines: JVM flags, dynamic -D properties
  java -cp "$lib/*" org.apache.flink.runtime.util.bash.BashJavaUtils "GET_${1}_RESOURCE_PARAMS" \
    --configDir "$run/conf" 2>/dev/null | sed -n 's/^BASH_JAVA_UTILS_EXEC_RESULT://p' | tail -2
}

load_env() {
  [ -f "$run/cluster.env" ] || return 1
  # shellcheck disable=SC1091
  . "$run/cluster.env"
  rest_port="$LDP_FLINK_REST_PORT"
}

# ------------------------------------------------------------------------------------------------ start
start_jobmanager() {
  local params jvm dyn
  params="$(jvm_params JM)"
  jvm="$(sed -n 1p <<< "$params")"
  dyn="$(sed -n 2p <<< "$params")"
  # shellcheck disable=SC2086
  nohup java $jvm -Dlog.file="$run/logs/jobmanager.log" -Dlog4j.configurationFile="file:$run/conf/log4j.properties" \
    -cp "$lib/*:$prom_dir/*" org.apache.flink.runtime.entrypoint.StandaloneSessionClusterEntrypoint \
    --configDir "$run/conf" -D metrics.reporter.prom.port="$LDP_FLINK_PROMETHEUS_JM_PORT" $dyn >"$run/logs/jobmanager.out" 2>&1 < /dev/null &
  echo $! > "$run/jobmanager.pid"
}

start_taskmanager() {
  local i="$1" params jvm dyn
  params="$(jvm_params TM)"
  jvm="$(sed -n 1p <<< "$params")"
  dyn="$(sed -n 2p <<< "$params")"
  mkdir -p "$run/tmp/tm-$i"
  # shellcheck disable=SC2086
  nohup env PATH="$(dirname "$python"):$PATH" java $jvm -Dlog.file="$run/logs/taskmanager-$i.log" \
    -Dlog4j.configurationFile="file:$run/conf/log4j.properties" \
    -cp "$lib/*:$prom_dir/*" org.apache.flink.runtime.taskexecutor.TaskManagerRunner --configDir "$run/conf" \
    -D taskmanager.resource-id="tm-$i" -D io.tmp.dirs="$run/tmp/tm-$i" \
    -D metrics.reporter.prom.port="$(eval echo "\$LDP_FLINK_PROMETHEUS_TM${i}_PORT")" $dyn \
    >"$run/logs/taskmanager-$i.out" 2>&1 < /dev/null &
  echo $! > "$run/taskmanager-$i.pid"
}

cmd_start() {
  if load_env 2>/dev/null && pid_alive "$run/jobmanager.pid"; then
    say "already running (run dir $run); stop it first"
    cmd_args
    return 0
  fi
  need_tools
  local jar
  jar="$(job_server_jar)" || die "no job-server jar (bash tools/flink/get_job_server.sh)"
  cluster_lib
  metrics_jars
  local ticks
  ticks="$(ticks_jar "$jar")"
  rm -rf "$run"
  mkdir -p "$run"
  local ports
  local prom_jm prom_tm1 prom_tm2
  read -r rest_port jm_rpc_port blob_port job_port artifact_port expansion_port pool_port ticks_port \
    prom_jm prom_tm1 prom_tm2 <<< "$(free_ports 11)"
  write_config "$jm_rpc_port" "$blob_port"
  cat > "$run/cluster.env" <<EOF
LDP_FLINK_RUN_DIR=$run
LDP_FLINK_REST_PORT=$rest_port
LDP_FLINK_MASTER=127.0.0.1:$rest_port
LDP_FLINK_JOB_ENDPOINT=127.0.0.1:$job_port
LDP_FLINK_EXPANSION_ENDPOINT=127.0.0.1:$expansion_port
LDP_FLINK_WORKER_POOL=127.0.0.1:$pool_port
LDP_FLINK_TICKS_EXPANSION=127.0.0.1:$ticks_port
LDP_FLINK_TASK_SLOTS=$slots
LDP_FLINK_CHECKPOINT_MS=$checkpoint_ms
LDP_FLINK_PROMETHEUS_JM_PORT=$prom_jm
LDP_FLINK_PROMETHEUS_TM1_PORT=$prom_tm1
LDP_FLINK_PROMETHEUS_TM2_PORT=$prom_tm2
LDP_FLINK_PROMETHEUS=127.0.0.1:$prom_jm,127.0.0.1:$prom_tm1,127.0.0.1:$prom_tm2
EOF
  load_env
  local t0
  t0=$(date +%s)
  say "starting the JobManager (REST 127.0.0.1:$rest_port, run dir $run)"
  start_jobmanager
  wait_for 240 "the JobManager" "$run/jobmanager.pid" rest_get /overview
  for i in $(seq 1 $n_tm); do
    say "starting TaskManager $i ($slots slots)"
    start_taskmanager "$i"
  done
  local tms=0 t1
  t1=$(date +%s)
  while [ "$tms" -lt "$n_tm" ]; do
    for i in $(seq 1 $n_tm); do
      pid_alive "$run/taskmanager-$i.pid" || die "TaskManager $i exited while starting (see $run/logs/taskmanager-$i.*)"
    done
    [ $(( $(date +%s) - t1 )) -lt 240 ] || die "only $tms of $n_tm TaskManagers registered after 240 s (see $run/logs/)"
    sleep 0.5
    tms="$(registered_tms 2>/dev/null || echo 0)"
  done
  say "starting the SDK worker pool on 127.0.0.1:$pool_port"
  nohup env -C "$root" PATH="$(dirname "$python"):$PATH" PYTHONPATH="$root${PYTHONPATH:+:$PYTHONPATH}" \
    "$python" "$here/worker_pool.py" --port "$pool_port" >"$run/logs/worker-pool.log" 2>&1 < /dev/null &
  echo $! > "$run/worker-pool.pid"
  say "starting the Beam job server (job endpoint 127.0.0.1:$job_port -> Flink 127.0.0.1:$rest_port)"
  # the ticks jar on its class path: the runner deserializes the ticks' source, and ships its class path
  # (both jars) with every job to the cluster
  nohup java -Dorg.slf4j.simpleLogger.logFile="$run/logs/job-server.log" -cp "$jar:$ticks" \
    org.apache.beam.runners.flink.FlinkJobServerDriver --flink-master="127.0.0.1:$rest_port" --flink-conf-dir="$run/conf" \
    --job-host=127.0.0.1 --job-port="$job_port" --artifact-port="$artifact_port" \
    --expansion-port="$expansion_port" --artifacts-dir="$run/artifacts" \
    >"$run/logs/job-server.out" 2>&1 < /dev/null &
  echo $! > "$run/job-server.pid"
  say "starting the ticks' expansion service on 127.0.0.1:$ticks_port (primitive reads: use_deprecated_read)"
  nohup java -cp "$jar:$ticks" org.ldpbeam.flink.LoopbackExpansionService "$ticks_port" 127.0.0.1 -- \
    --experiments=use_deprecated_read >"$run/logs/ticks-expansion.log" 2>&1 < /dev/null &
  echo $! > "$run/ticks-expansion.pid"
  wait_for 120 "the SDK worker pool" "$run/worker-pool.pid" port_open "$pool_port"
  wait_for 120 "the ticks' expansion service" "$run/ticks-expansion.pid" port_open "$ticks_port"
  wait_for 240 "the job server" "$run/job-server.pid" port_open "$job_port"
  say "up in $(( $(date +%s) - t0 )) s: JobManager, $n_tm TaskManagers x $slots slots, job server, worker pool, ticks"
  cmd_args
}

cmd_args() {
  load_env || die "not started (no $run/cluster.env)"
  local ckpt=""
  # Beam's runner must be told the job is checkpointed (it cannot read the cluster's config.yaml)
  [ "${LDP_FLINK_CHECKPOINT_MS:-0}" != 0 ] && ckpt=" --checkpointing_interval=$LDP_FLINK_CHECKPOINT_MS"
  echo "--runner=PortableRunner --job_endpoint=$LDP_FLINK_JOB_ENDPOINT --environment_type=EXTERNAL --environment_config=$LDP_FLINK_WORKER_POOL --flink_master=$LDP_FLINK_MASTER --watch_ticks=flink --ticks_expansion_service=$LDP_FLINK_TICKS_EXPANSION$ckpt"
}

# ------------------------------------------------------------------------------------------------ stop
stop_pid() {  # stop_pid NAME PIDFILE: SIGTERM, then SIGKILL after 15 s
  local name="$1" f="$2" pid
  [ -f "$f" ] || return 0
  pid="$(cat "$f")"
  if running "$pid"; then
    kill "$pid" 2>/dev/null || true
    for _ in $(seq 1 30); do running "$pid" || break; sleep 0.5; done
    if running "$pid"; then
      say "$name (pid $pid) ignored SIGTERM; SIGKILL"
      kill -9 "$pid" 2>/dev/null || true
    fi
    say "stopped $name (pid $pid)"
  fi
  rm -f "$f"
}

cmd_stop() {
  stop_pid "job server" "$run/job-server.pid"
  stop_pid "worker pool" "$run/worker-pool.pid"
  stop_pid "ticks expansion service" "$run/ticks-expansion.pid"
  for f in "$run"/taskmanager-*.pid; do
    [ -e "$f" ] || continue
    stop_pid "TaskManager $(basename "$f" .pid | sed 's/taskmanager-//')" "$f"
  done
  stop_pid "JobManager" "$run/jobmanager.pid"
}

cmd_kill_tm() {
  local i="${1:?kill-tm needs a task manager number}" f="$run/taskmanager-${1:-}.pid"
  pid_alive "$f" || die "TaskManager $i is not running"
  kill -9 "$(cat "$f")"
  say "SIGKILL sent to TaskManager $i (pid $(cat "$f"))"
  rm -f "$f"
}

cmd_start_tm() {
  local i="${1:?start-tm needs a task manager number}"
  load_env || die "not started"
  pid_alive "$run/taskmanager-$i.pid" && die "TaskManager $i is running"
  start_taskmanager "$i"
  say "started TaskManager $i (pid $(cat "$run/taskmanager-$i.pid"))"
}

# ------------------------------------------------------------------------------------------------ status
cmd_status() {
  load_env || { say "not started (no $run/cluster.env)"; exit 1; }
  local down=0 f name
  for f in "$run/jobmanager.pid" "$run"/taskmanager-*.pid "$run/job-server.pid" "$run/worker-pool.pid" \
      "$run/ticks-expansion.pid"; do
    [ -e "$f" ] || continue
    name="$(basename "$f" .pid)"
    if pid_alive "$f"; then echo "$name: running (pid $(cat "$f"))"; else echo "$name: NOT running"; down=1; fi
  done
  if rest_get /overview >/dev/null 2>&1; then
    rest_get /overview | "$python" -c "import json,sys; o=json.load(sys.stdin); print('flink', o['flink-version'], '- task managers', o['taskmanagers'], '- slots', o['slots-total'], 'total,', o['slots-available'], 'free - jobs running', o['jobs-running'])"
  else
    echo "JobManager REST endpoint 127.0.0.1:$rest_port not answering"; down=1
  fi
  echo "listening sockets of these processes:"
  local pids
  pids="$(cat "$run"/*.pid 2>/dev/null | tr '\n' ' ')"
  for p in $pids; do
    for c in $p $(pgrep -P "$p" 2>/dev/null || true); do echo "$c"; done
  done | sort -u | while read -r p; do
    ss -Hltnp 2>/dev/null | grep -E "pid=$p," | awk -v p="$p" '{print "  pid " p ": " $4}' || true
  done
  cmd_args
  exit "$down"
}

cmd_fetch() {
  need_tools
  local jar
  jar="$(job_server_jar)" || die "no job-server jar (bash tools/flink/get_job_server.sh)"
  cluster_lib
  metrics_jars
  local ticks
  ticks="$(ticks_jar "$jar")"
  say "parts ready: job server $jar; ticks $ticks; Flink $flink_version class path $lib ($(ls "$lib" | wc -l) jars)"
}

case "${1:-}" in
  fetch) cmd_fetch ;;
  start) cmd_start ;;
  stop) cmd_stop ;;
  status) cmd_status ;;
  args) cmd_args ;;
  kill-tm) cmd_kill_tm "${2:-}" ;;
  start-tm) cmd_start_tm "${2:-}" ;;
  *) echo "usage: $0 fetch|start|stop|status|args|kill-tm N|start-tm N" >&2; exit 2 ;;
esac
