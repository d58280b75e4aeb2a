#!/usr/bin/env bash
# Create or refresh the project's virtual environment at .venv (repo root).
# The environment is rebuilt when it is missing or when setup.py changed since it was built.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
venv="$root/.venv"
stamp="$venv/.ldp-setup-hash"
want="$(cat "$root/setup.py" | sha256sum | cut -d' ' -f1)"
if [ ! -x "$venv/bin/python" ] || [ ! -f "$stamp" ] || [ "$(cat "$stamp")" != "$want" ]; then
  echo "[ensure_venv] building $venv (missing or stale)" >&2
  python3 -m venv "$venv"
  "$venv/bin/python" -m pip install -q --upgrade pip >&2
  "$venv/bin/python" -m pip install -q -e "$root[test,pubsub]" >&2
  echo "$want" > "$stamp"
fi
