#!/usr/bin/env bash
# Create or refresh the project's virtual environment at .venv (repo root).
#
#   bash tools/ensure_venv.sh                        build .venv if missing or stale
#   bash tools/ensure_venv.sh --update-constraints   after a tested change of dependencies: rewrite
#                                                    constraints.txt from .venv's installed versions
#
# The environment is (re)built when it is missing or when setup.py or constraints.txt changed since it was
# built: `pip install -c constraints.txt -e .[test,pubsub]`, so every machine (CI included) installs the
# exact versions the suite was tested with. setup.py holds the supported ranges, constraints.txt the tested
# pins. Needs python3 (3.10+) with venv; CI additionally needs java + mvn (Flink job server) and the Pub/Sub
# emulator (see .ci/run).
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
venv="$root/.venv"
constraints="$root/constraints.txt"
stamp="$venv/.ldp-setup-hash"

if [ "${1:-}" = "--update-constraints" ]; then
  [ -x "$venv/bin/python" ] || { echo "[ensure_venv] no $venv to freeze" >&2; exit 1; }
  {
    echo "# Exact versions of the environment the test suite passed in (Python $("$venv/bin/python" -c 'import sys; print(".".join(map(str, sys.version_info[:3])))'))."
    echo "# Used as: pip install -c constraints.txt -e .[test,pubsub]   (tools/ensure_venv.sh, CI)."
    echo "# Regenerate after a tested dependency change: bash tools/ensure_venv.sh --update-constraints"
    "$venv/bin/python" -m pip freeze --exclude-editable --all | grep -v -E '^(pip|setuptools)==' | sort -f
  } > "$constraints.tmp"
  mv "$constraints.tmp" "$constraints"
  echo "[ensure_venv] wrote $constraints" >&2
  exit 0
fi

inputs=("$root/setup.py" "$root/ldp/__init__.py")
[ -f "$constraints" ] && inputs+=("$constraints")
want="$(cat "${inputs[@]}" | sha256sum | cut -d' ' -f1)"
if [ -L "$venv" ]; then
  # a link to another checkout's environment (tests/test_readme.py runs the README in a copy of the tree):
  # rebuilding through it would point that environment's editable install at this copy
  [ "$(cat "$stamp" 2>/dev/null)" = "$want" ] || echo "[ensure_venv] $venv is a link; not rebuilding it here" >&2
  exit 0
fi
if [ ! -x "$venv/bin/python" ] || [ ! -f "$stamp" ] || [ "$(cat "$stamp")" != "$want" ]; then
  echo "[ensure_venv] building $venv (missing or stale)" >&2
  python3 -m venv "$venv"
  "$venv/bin/python" -m pip install -q --upgrade pip >&2
  if [ -f "$constraints" ]; then
    "$venv/bin/python" -m pip install -q -c "$constraints" -e "$root[test,pubsub]" >&2
  else
    echo "[ensure_venv] no constraints.txt: installing the newest versions setup.py allows" >&2
    "$venv/bin/python" -m pip install -q -e "$root[test,pubsub]" >&2
  fi
  echo "$want" > "$stamp"
fi
