"""A Beam Python SDK worker pool (the EXTERNAL environment) that listens on 127.0.0.1 only.

    python tools/flink/worker_pool.py --port PORT [--state_cache_mb 100]

Beam's own ``python -m apache_beam.runners.worker.worker_pool_main`` binds ``[::]`` (every interface);
this starts the same servicer (``BeamFnExternalWorkerPoolServicer``, one SDK harness *process* per
``StartWorker`` request from a Flink task manager) on a loopback address. Pipelines reach it with
``--environment_type=EXTERNAL --environment_config=127.0.0.1:PORT``. The harness processes are started
as ``python -c ...`` from PATH, so PATH must lead to the project's interpreter (tools/flink/cluster.sh
puts the venv's ``bin`` first) and PYTHONPATH must hold the repository (the project's modules are
imported by the pickled pipeline code). SIGTERM stops the pool and its harness processes.
"""

from __future__ import annotations

import argparse
import logging
import signal
import sys
import threading

import grpc
from apache_beam.portability.api import beam_fn_api_pb2_grpc
from apache_beam.runners.worker.worker_pool_main import BeamFnExternalWorkerPoolServicer
from apache_beam.utils import thread_pool_executor


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1)")
    ap.add_argument("--port", type=int, required=True, help="port to listen on")
    ap.add_argument(
        "--state_cache_mb", type=int, default=100,
        help="state cache of each SDK harness, MiB (default 100, Beam's --max_cache_memory_usage_mb default; "
        "0 makes every state access a round trip to the task manager)",
    )  # fmt: skip
    ns = ap.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    server = grpc.server(
        thread_pool_executor.shared_unbounded_instance(),
        options=[("grpc.http2.max_pings_without_data", 0), ("grpc.http2.max_ping_strikes", 0)],
    )
    port = server.add_insecure_port(f"{ns.host}:{ns.port}")
    if port == 0:
        sys.exit(f"worker pool: cannot listen on {ns.host}:{ns.port}")
    pool = BeamFnExternalWorkerPoolServicer(use_process=True, state_cache_size=ns.state_cache_mb << 20)
    beam_fn_api_pb2_grpc.add_BeamFnExternalWorkerPoolServicer_to_server(pool, server)
    server.start()
    logging.info("worker pool listening on %s:%d", ns.host, port)
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    stop.wait()
    logging.info("stopping the worker pool and %d harness process(es)", len(pool._worker_processes))
    server.stop(2)
    for proc in list(pool._worker_processes.values()):
        if proc.poll() is None:
            proc.terminate()
    for proc in list(pool._worker_processes.values()):
        try:
            proc.wait(timeout=10)
        except Exception:  # noqa: BLE001 - a harness that ignores SIGTERM is killed
            proc.kill()


if __name__ == "__main__":
    main()
