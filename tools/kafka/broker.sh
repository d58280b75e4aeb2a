#!/usr/bin/env bash
# One Apache Kafka broker in KRaft mode (broker and controller in one JVM) on 127.0.0.1, for the Kafka
# source's tests and local runs (docs/kafka.md). Stopped by its PID.
#
#   bash tools/kafka/broker.sh fetch    # resolve the jars only (Maven Central, tools/kafka/pom.xml)
#   bash tools/kafka/broker.sh start    # format a fresh log directory, start, wait; last line of stdout:
#                                       # the bootstrap address 127.0.0.1:PORT
#   bash tools/kafka/broker.sh restart  # start again on the same run directory, address and data
#   bash tools/kafka/broker.sh status   # running or not (exit 1: not running), the address
#   bash tools/kafka/broker.sh stop     # SIGTERM, SIGKILL after 20 s; by PID
#
# Parts: org.apache.kafka:kafka_2.13 and its runtime dependencies, copied by Maven into
# .cache/kafka/kafka-VERSION/lib (.cache links to ~/.cache/ldp-beam, tools/link_cache.sh), since Kafka's
# binary distribution is not served by the registries. Needs java (17+) and mvn.
#
# Environment (all optional):
#   LDP_KAFKA_VERSION   Kafka version (default 4.1.1)
#   LDP_KAFKA_RUN_DIR   run directory: server.properties, the log directory, broker.pid, broker.env, the
#                       log (default REPO/.cache/kafka/broker)
#   LDP_KAFKA_PORT      the client port (default: a free port)
#   LDP_KAFKA_HEAP      JVM heap (default 512m)
#   LDP_KAFKA_MVN_ARGS  extra Maven arguments (e.g. "-o")
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "$here/../.." && pwd)"
version="${LDP_KAFKA_VERSION:-4.1.1}"
lib="$root/.cache/kafka/kafka-$version/lib"
run="${LDP_KAFKA_RUN_DIR:-$root/.cache/kafka/broker}"
heap="${LDP_KAFKA_HEAP:-512m}"
read -r -a mvn_args <<< "${LDP_KAFKA_MVN_ARGS:-}"

say() { echo "[kafka-broker] $*" >&2; }
die() { say "ERROR: $*"; exit 1; }
# running PID: the process exists and is not a zombie (a killed process whose parent is gone waits for
# PID 1 to reap it, which in some sandboxes never happens; kill -0 alone would call it running)
running() {
  kill -0 "$1" 2>/dev/null || return 1
  [ "$(sed -e 's/^.*) //' "/proc/$1/stat" 2>/dev/null | cut -d' ' -f1)" != Z ]
}
pid_alive() { [ -f "$1" ] && running "$(cat "$1")"; }

need_tools() {
  for tool in java mvn python3; do
    command -v "$tool" >/dev/null 2>&1 \
      || die "'$tool' not found on PATH (Debian: apt-get install -y maven openjdk-17-jdk-headless)"
  done
}

cmd_fetch() {
  need_tools
  if [ -f "$lib/.complete" ]; then say "jars ready in $lib"; return; fi
  say "fetching org.apache.kafka:kafka_2.13:$version and its dependencies from Maven Central into $lib"
  rm -rf "$lib"
  mkdir -p "$lib"
  local log="$lib/../maven.log"
  if ! mvn -B "${mvn_args[@]}" -f "$here/pom.xml" -Dkafka.version="$version" \
      dependency:copy-dependencies -DincludeScope=runtime -DoutputDirectory="$lib" >"$log" 2>&1; then
    grep -E '^\[ERROR\]' "$log" | head -5 >&2 || tail -20 "$log" >&2
    die "could not fetch the Kafka $version jars (log: $log)"
  fi
  [ -f "$lib/kafka_2.13-$version.jar" ] || die "no kafka_2.13-$version.jar in $lib"
  touch "$lib/.complete"
  say "jars ready in $lib ($(ls "$lib" | wc -l) files)"
}

free_port() {
  python3 -c "import socket; s = socket.socket(); s.bind(('127.0.0.1', 0)); print(s.getsockname()[1])"
}

port_open() { python3 -c "import socket, sys; socket.create_connection(('127.0.0.1', int(sys.argv[1])), timeout=1).close()" "$1"; }

write_config() {  # write_config CLIENT_PORT CONTROLLER_PORT
  cat > "$run/server.properties" <<CONF
# Written by tools/kafka/broker.sh: one KRaft node on 127.0.0.1, broker and controller in one process.
process.roles=broker,controller
node.id=1
controller.quorum.voters=1@127.0.0.1:$2
listeners=PLAINTEXT://127.0.0.1:$1,CONTROLLER://127.0.0.1:$2
advertised.listeners=PLAINTEXT://127.0.0.1:$1
controller.listener.names=CONTROLLER
listener.security.protocol.map=PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT
inter.broker.listener.name=PLAINTEXT
log.dirs=$run/data
num.partitions=1
auto.create.topics.enable=true
offsets.topic.replication.factor=1
offsets.topic.num.partitions=1
transaction.state.log.replication.factor=1
transaction.state.log.min.isr=1
share.coordinator.state.topic.replication.factor=1
share.coordinator.state.topic.min.isr=1
group.initial.rebalance.delay.ms=0
CONF
  cat > "$run/log4j2.properties" <<'CONF'
rootLogger.level = INFO
rootLogger.appenderRef.file.ref = File
appender.file.name = File
appender.file.type = File
appender.file.fileName = ${sys:kafka.logs.dir}/server.log
appender.file.layout.type = PatternLayout
appender.file.layout.pattern = [%d] %p %m (%c)%n
CONF
}

cmd_start() {
  if pid_alive "$run/broker.pid"; then
    say "already running (pid $(cat "$run/broker.pid"), run dir $run); stop it first"
    # shellcheck disable=SC1091
    . "$run/broker.env"; echo "$LDP_KAFKA_BOOTSTRAP"; return 0
  fi
  cmd_fetch
  rm -rf "$run"
  mkdir -p "$run/data" "$run/logs"
  local port="${LDP_KAFKA_PORT:-$(free_port)}" controller t0 cluster_id
  controller="$(free_port)"
  [ "$port" != "$controller" ] || controller="$(free_port)"
  write_config "$port" "$controller"
  local jvm=(java "-Xms$heap" "-Xmx$heap" -Dkafka.logs.dir="$run/logs"
             -Dlog4j2.configurationFile="$run/log4j2.properties" -cp "$lib/*")
  cluster_id="$("${jvm[@]}" kafka.tools.StorageTool random-uuid 2>>"$run/logs/format.log")"
  "${jvm[@]}" kafka.tools.StorageTool format -t "$cluster_id" -c "$run/server.properties" \
    >>"$run/logs/format.log" 2>&1 || die "could not format $run/data (see $run/logs/format.log)"
  printf 'LDP_KAFKA_BOOTSTRAP=127.0.0.1:%s\nLDP_KAFKA_RUN_DIR=%s\n' "$port" "$run" > "$run/broker.env"
  launch "$port"
}

launch() {  # launch CLIENT_PORT: start the JVM on the run directory's configuration and wait until it serves
  local port="$1" t0
  local jvm=(java "-Xms$heap" "-Xmx$heap" -Dkafka.logs.dir="$run/logs"
             -Dlog4j2.configurationFile="$run/log4j2.properties" -cp "$lib/*")
  say "starting Kafka $version on 127.0.0.1:$port (run dir $run)"
  : > "$run/logs/server.log"
  nohup "${jvm[@]}" kafka.Kafka "$run/server.properties" >>"$run/logs/broker.out" 2>&1 < /dev/null &
  echo $! > "$run/broker.pid"
  t0=$(date +%s)
  until port_open "$port" 2>/dev/null && grep -q "Kafka Server started" "$run/logs/server.log" 2>/dev/null; do
    pid_alive "$run/broker.pid" || die "the broker exited while starting (see $run/logs/)"
    [ $(( $(date +%s) - t0 )) -lt 120 ] || die "the broker is not up after 120 s (see $run/logs/)"
    sleep 0.5
  done
  say "up in $(( $(date +%s) - t0 )) s (pid $(cat "$run/broker.pid"))"
  echo "127.0.0.1:$port"
}

cmd_restart() {  # the same run directory, address and data (after a stop or a kill)
  [ -f "$run/broker.env" ] && [ -f "$run/server.properties" ] || die "nothing to restart in $run (use start)"
  if pid_alive "$run/broker.pid"; then
    say "already running (pid $(cat "$run/broker.pid"))"
  else
    # shellcheck disable=SC1091
    . "$run/broker.env"
    launch "${LDP_KAFKA_BOOTSTRAP##*:}"
  fi
}

cmd_stop() {
  local f="$run/broker.pid" pid
  [ -f "$f" ] || { say "not running (no $f)"; return 0; }
  pid="$(cat "$f")"
  if running "$pid"; then
    kill "$pid" 2>/dev/null || true
    for _ in $(seq 1 40); do running "$pid" || break; sleep 0.5; done
    if running "$pid"; then
      say "the broker (pid $pid) ignored SIGTERM; SIGKILL"
      kill -9 "$pid" 2>/dev/null || true
    fi
    say "stopped the broker (pid $pid)"
  fi
  rm -f "$f"
}

cmd_status() {
  [ -f "$run/broker.env" ] || { say "not started (no $run/broker.env)"; exit 1; }
  # shellcheck disable=SC1091
  . "$run/broker.env"
  if pid_alive "$run/broker.pid"; then
    echo "broker: running (pid $(cat "$run/broker.pid")) at $LDP_KAFKA_BOOTSTRAP"
  else
    echo "broker: NOT running"; exit 1
  fi
}

case "${1:-}" in
  fetch) cmd_fetch ;;
  start) cmd_start ;;
  restart) cmd_restart ;;
  stop) cmd_stop ;;
  status) cmd_status ;;
  *) echo "usage: $0 fetch|start|restart|stop|status" >&2; exit 2 ;;
esac
