#!/usr/bin/env bash
# Fetch or build the Beam Flink job-server jar that the Python SDK's FlinkRunner starts
# (`--flink_job_server_jar=JAR`), and cache it under the repository's git-ignored .cache/flink/.
#
#   bash tools/flink/get_job_server.sh          # prints the jar's path on its last line of stdout
#
# Steps (each skipped once an earlier one has produced the jar):
#   1. a cached jar from an earlier run;
#   2. Beam's prebuilt job-server jar from Maven Central (org.apache.beam:beam-runners-flink-M-job-server:V);
#      on the mirror reachable here this is not served for any recent V, so it normally fails quickly;
#   3. a shaded jar built with Maven from tools/flink/pom.xml out of the runner modules Maven Central does
#      serve (beam-runners-flink-M, beam-runners-java-job-service, Flink M), main class
#      org.apache.beam.runners.flink.FlinkJobServerDriver.
# Whatever step produced it, .cache/flink/job-server.jar then links to it (tests/test_flink_runner.py looks
# there). See docs/flink.md for the version pairs that were tried and what failed.
#
# Environment (all optional):
#   LDP_FLINK_BEAM_VERSION        Beam Java version of the runner        (default 2.62.0)
#   LDP_FLINK_JOBSERVICE_VERSION  version of beam-runners-java-job-service (default: LDP_FLINK_BEAM_VERSION;
#                                 Maven Central lacks it for 2.70.0: use 2.65.0 with LDP_FLINK_BEAM_VERSION=2.70.0)
#   LDP_FLINK_VERSION             Flink minor version of the runner      (default 1.19)
#   LDP_FLINK_CACHE               cache folder                           (default REPO/.cache/flink)
#   LDP_FLINK_FORCE=1             rebuild even when a cached jar exists
#   LDP_FLINK_MVN_ARGS            extra Maven arguments, e.g. "-o" or "-Dmaven.repo.local=/some/dir"
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "$here/../.." && pwd)"
beam="${LDP_FLINK_BEAM_VERSION:-2.62.0}"
jobservice="${LDP_FLINK_JOBSERVICE_VERSION:-$beam}"
flink="${LDP_FLINK_VERSION:-1.19}"
cache="${LDP_FLINK_CACHE:-$root/.cache/flink}"
read -r -a mvn_args <<< "${LDP_FLINK_MVN_ARGS:-}"

name="beam-runners-flink-${flink}-job-server-${beam}"
[ "$jobservice" != "$beam" ] && name="${name}-jobservice-${jobservice}"
jar="$cache/$name.jar"
link="$cache/job-server.jar"
log="$cache/$name.log"

say() { echo "[get_job_server] $*" >&2; }

for tool in java mvn python3; do
  if ! command -v "$tool" >/dev/null 2>&1; then
    say "ERROR: '$tool' not found on PATH (Debian: apt-get install -y maven openjdk-17-jdk-headless)"
    exit 1
  fi
done

# A usable jar is a readable zip whose manifest names the job-server driver and that holds that class.
check_jar() {
  python3 - "$1" <<'EOF'
import sys, zipfile
try:
    with zipfile.ZipFile(sys.argv[1]) as z:
        manifest = z.read("META-INF/MANIFEST.MF").decode("utf-8", "replace")
        names = set(z.namelist())
except (OSError, KeyError, zipfile.BadZipFile) as exc:
    sys.exit(f"not a usable jar: {exc}")
main = "org.apache.beam.runners.flink.FlinkJobServerDriver"
if f"Main-Class: {main}" not in manifest or main.replace(".", "/") + ".class" not in names:
    sys.exit(f"jar does not run {main}")
EOF
}

finish() {
  ln -sfn "$(basename "$jar")" "$link"
  say "job server jar: $jar ($(du -h "$jar" | cut -f1)); link: $link"
  echo "$jar"
  exit 0
}

mkdir -p "$cache"
if [ "${LDP_FLINK_FORCE:-0}" != 1 ] && [ -f "$jar" ] && check_jar "$jar" 2>/dev/null; then
  say "cached"
  finish
fi
rm -f "$jar"
: > "$log"

# 2. Beam's prebuilt jar (only when the job service is not a substitute version).
if [ "$jobservice" = "$beam" ]; then
  prebuilt="org.apache.beam:beam-runners-flink-${flink}-job-server:${beam}"
  say "trying prebuilt $prebuilt (log: $log)"
  if mvn -B -q "${mvn_args[@]}" -f "$here/pom.xml" dependency:copy -Dartifact="$prebuilt" -DoutputDirectory="$cache" \
      >>"$log" 2>&1 \
      && [ -f "$cache/beam-runners-flink-${flink}-job-server-${beam}.jar" ]; then
    mv -f "$cache/beam-runners-flink-${flink}-job-server-${beam}.jar" "$jar"
    if check_jar "$jar"; then finish; fi
  fi
  say "prebuilt jar not available: $(grep -m1 -oE 'Could not (find|resolve)[^[]*' "$log" || echo 'see log')"
fi

# 3. Build a shaded jar from the runner modules.
build="$cache/build"
say "building $name with Maven (Beam $beam, job service $jobservice, Flink $flink; log: $log)"
start=$(date +%s)
if ! mvn -B "${mvn_args[@]}" -f "$here/pom.xml" -Dbeam.version="$beam" -Dbeam.jobservice.version="$jobservice" \
    -Dflink.minor="$flink" -Dldp.build.dir="$build" -Djar.name="$name" package >>"$log" 2>&1; then
  say "ERROR: Maven build failed:"
  grep -E '^\[ERROR\]' "$log" | head -5 >&2 || tail -20 "$log" >&2
  exit 1
fi
mv -f "$build/$name.jar" "$jar"
rm -rf "$build"
check_jar "$jar"
say "built in $(( $(date +%s) - start )) s"
finish
