"""Latest-state store benchmark: the time to write one pane (store.Store.write_pane) on SQLite and
PostgreSQL, for frequency rows of d = 1024 and d = 65536 values (not a unit test).

    nice -n 10 .venv/bin/python -m bench.store --postgres auto --json bench/results/store.json

Per (backend, d, cap): ``--panes`` successive panes of one window (pane_index 0, 1, ...; each replaces the
current rows of the previous one and appends to the history), one EstimateRow with every error-bar field
set, written with ``max_items`` = the cap (4096, the default ``--store_max_items``, and d: every value).
Reported: median and max milliseconds per pane, stored rows per second, and the time of ``mark_final``
and of a dashboard read (``current(top_k=10)``) after the last pane. ``--postgres auto`` starts a
throw-away PostgreSQL 15 server (initdb in a temporary directory, 127.0.0.1, fsync off, stopped by PID;
as root through ``runuser -u nobody``); ``--postgres URL`` uses a server you give; none: SQLite only.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator

import numpy as np

from ldp.kinds.frequency.aggregate import EstimateRow
from store import DEFAULT_MAX_ITEMS, open_store

PG_BIN = os.environ.get("LDP_PG_BIN", "/usr/lib/postgresql/15/bin")


@contextlib.contextmanager
def throwaway_postgres() -> Iterator[str]:
    """A PostgreSQL server in a temporary directory on a free 127.0.0.1 port; yields its URL."""
    tmp = tempfile.mkdtemp(prefix="ldp-bench-pg-")
    as_user: list[str] = []
    if os.geteuid() == 0:
        import pwd

        nobody = pwd.getpwnam("nobody")
        os.chown(tmp, nobody.pw_uid, nobody.pw_gid)
        as_user = ["runuser", "-u", "nobody", "--"]
    data = os.path.join(tmp, "data")
    subprocess.run([*as_user, f"{PG_BIN}/initdb", "-D", data, "-U", "ldp", "--auth=trust", "--no-sync"],
                   check=True, capture_output=True)  # fmt: skip
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    log = open(os.path.join(tmp, "log"), "wb")  # noqa: SIM115 - closed below
    proc = subprocess.Popen(
        [*as_user, f"{PG_BIN}/postgres", "-D", data, "-h", "127.0.0.1", "-p", str(port), "-k", tmp,
         "-c", "fsync=off", "-c", "synchronous_commit=off"],
        stdout=log, stderr=subprocess.STDOUT,
    )  # fmt: skip
    url = f"postgresql://ldp@127.0.0.1:{port}/postgres"
    try:
        import psycopg

        deadline = time.monotonic() + 60
        while True:
            try:
                with psycopg.connect(url, connect_timeout=2):
                    break
            except psycopg.OperationalError:
                if time.monotonic() > deadline or proc.poll() is not None:
                    raise RuntimeError(f"postgres did not start; see {log.name}") from None
                time.sleep(0.2)
        yield url
    finally:
        pid_file = os.path.join(data, "postmaster.pid")
        if os.path.exists(pid_file):
            with open(pid_file) as fh:
                with contextlib.suppress(ProcessLookupError, ValueError):
                    os.kill(int(fh.readline()), signal.SIGINT)
        proc.wait(timeout=30)
        log.close()
        shutil.rmtree(tmp, ignore_errors=True)


def _row(rng: np.random.Generator, d: int, pane: int) -> EstimateRow:
    f = rng.dirichlet(np.ones(d))
    std = np.full(d, 0.01)
    return EstimateRow(
        task_id="bench", schema_version=2, group=0, window_start=0, window_end=60_000, pane_timing="EARLY",
        pane_index=pane, is_last_pane=False, n_reports=1_000_000, mechanism="olh", epsilon=1.0, domain_size=d,
        postprocess="norm-sub", frequencies=f.tolist(), std=std.tolist(), unbiased=(f + 0.001).tolist(),
        unbiased_std=std.tolist(), ci_low=(f - 0.02).tolist(), ci_high=(f + 0.02).tolist(),
        ci_method="clipped", ci_includes_zero=(f < 0.02).tolist(), labels=None,
    )  # fmt: skip


def bench_one(url: str, d: int, cap: int, panes: int, seed: int) -> dict[str, object]:
    store = open_store(url, shared=False)
    rng = np.random.default_rng(np.random.SeedSequence(seed, spawn_key=(d, cap)))
    rows = [_row(rng, d, i) for i in range(panes)]
    task = f"bench-{d}-{cap}"
    times = []
    n = 0
    for i, row in enumerate(rows):
        t0 = time.perf_counter()
        n = store.write_pane(task, 0, 60_000, i, "EARLY", [row], max_items=cap)
        times.append(time.perf_counter() - t0)
    t0 = time.perf_counter()
    store.mark_final(task, 0, 60_000)
    final_ms = (time.perf_counter() - t0) * 1000
    t0 = time.perf_counter()
    top = store.current(task, 0, 60_000, top_k=10)
    read_ms = (time.perf_counter() - t0) * 1000
    assert len(top) == 10
    store.close()
    med = statistics.median(times)
    return {
        "backend": store.dialect, "d": d, "max_items": cap, "stored_rows": n, "panes": panes,
        "median_ms": round(med * 1000, 1), "max_ms": round(max(times) * 1000, 1),
        "rows_per_s": round(n / med), "mark_final_ms": round(final_ms, 1), "read_top10_ms": round(read_ms, 1),
    }  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--domains", default="1024,65536", help="comma-separated d values")
    ap.add_argument("--panes", type=int, default=5, help="panes written per case")
    ap.add_argument(
        "--postgres", help="'auto' (a throw-away server) or a postgresql:// URL; none: SQLite only"
    )
    ap.add_argument("--json", help="write the records here")
    ap.add_argument("--seed", type=int, default=2026_12_01)
    ns = ap.parse_args(argv)
    domains = [int(x) for x in ns.domains.split(",")]
    tmp = tempfile.mkdtemp(prefix="ldp-bench-store-")
    records: list[dict[str, object]] = []
    with contextlib.ExitStack() as stack:
        urls = [f"sqlite:///{tmp}/store.db"]
        if ns.postgres == "auto":
            urls.append(stack.enter_context(throwaway_postgres()))
        elif ns.postgres:
            urls.append(ns.postgres)
        for url in urls:
            for d in domains:
                for cap in sorted({min(DEFAULT_MAX_ITEMS, d), d}):
                    rec = bench_one(url, d, cap, ns.panes, ns.seed)
                    records.append(rec)
                    print(json.dumps(rec), flush=True)
    shutil.rmtree(tmp, ignore_errors=True)
    if ns.json:
        with open(ns.json, "w") as fh:
            json.dump(records, fh, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
