"""A Beam Python SDK worker pool (the EXTERNAL environment) that listens on 127.0.0.1 only.

    python tools/flink/worker_pool.py --port PORT [--state_cache_mb 100]

Beam's own ``python -m apache_beam.runners.worker.worker_pool_main`` binds ``[::]`` (every interface);
this starts the same servicer (``BeamFnExternalWorkerPoolServicer``, one SDK harness *process* per
``StartWorker`` request from a Flink task manager) on a loopback address, with its processes kept per
task-manager connection (:class:`PerConnectionWorkerPool`: the task managers' worker ids collide).
Pipelines reach it with ``--environment_type=EXTERNAL --environment_config=127.0.0.1:PORT``. The harness
processes are started as ``python -c ...`` from PATH, so PATH must lead to the project's interpreter
(tools/flink/cluster.sh puts the venv's ``bin`` first) and PYTHONPATH must hold the repository (the
project's modules are imported by the pickled pipeline code).
SIGTERM stops the pool and its harness processes.
"""

from __future__ import annotations

import argparse
import logging
import signal
import subprocess
import sys
import threading

import grpc
from apache_beam.portability.api import beam_fn_api_pb2, beam_fn_api_pb2_grpc
from apache_beam.runners.worker.worker_pool_main import (
    BeamFnExternalWorkerPoolServicer,
    kill_process_gracefully,
)
from apache_beam.utils import thread_pool_executor


class PerConnectionWorkerPool(BeamFnExternalWorkerPoolServicer):
    """Beam's servicer with harness processes keyed by (task-manager connection, worker id).

    Beam's own keeps one process per worker id. Worker ids are counters of each task manager's bundle
    factory (``4-1``, ``5-1``, ...), so two task managers sharing this pool ask for the same ids; Beam's
    servicer then forgets the first process (it runs on, never stopped) and a ``StopWorker`` from one task
    manager kills the *other's* harness mid-stage (its task fails, or waits 3 minutes for a harness that
    never connects: "No client connected within timeout"; seen at load average 5). Here a ``StopWorker``
    stops the process started over the same connection (the gRPC peer); if that connection is gone, the
    only process of that id, if there is exactly one; otherwise none (a warning: an idle process is better
    than a killed one)."""

    def __init__(self, **kwargs) -> None:
        super().__init__(**kwargs)
        self._lock = threading.Lock()
        self._by_connection: dict[tuple[str, str], subprocess.Popen] = {}

    def StartWorker(self, request, context):  # noqa: N802 - the gRPC method name
        with self._lock:  # Beam's servicer stores the process under the bare id: take it out at once
            response = super().StartWorker(request, context)
            proc = self._worker_processes.pop(request.worker_id, None)
            if proc is not None:
                self._by_connection[(context.peer(), request.worker_id)] = proc
        return response

    def StopWorker(self, request, context):  # noqa: N802 - the gRPC method name
        with self._lock:
            proc = self._by_connection.pop((context.peer(), request.worker_id), None)
            if proc is None:
                same_id = [k for k in self._by_connection if k[1] == request.worker_id]
                if len(same_id) == 1:
                    proc = self._by_connection.pop(same_id[0])
                elif same_id:
                    logging.warning(
                        "StopWorker %s from %s: %d processes of that id over other connections; none stopped",
                        request.worker_id, context.peer(), len(same_id),
                    )  # fmt: skip
        if proc is not None:
            logging.info("stopping worker %s (pid %d)", request.worker_id, proc.pid)
            kill_process_gracefully(proc)
        return beam_fn_api_pb2.StopWorkerResponse()

    def processes(self) -> list[subprocess.Popen]:
        with self._lock:
            return list(self._by_connection.values()) + list(self._worker_processes.values())


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
    pool = PerConnectionWorkerPool(use_process=True, state_cache_size=ns.state_cache_mb << 20)
    beam_fn_api_pb2_grpc.add_BeamFnExternalWorkerPoolServicer_to_server(pool, server)
    server.start()
    logging.info("worker pool listening on %s:%d", ns.host, port)
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    stop.wait()
    procs = pool.processes()
    logging.info("stopping the worker pool and %d harness process(es)", len(procs))
    server.stop(2)
    for proc in procs:
        if proc.poll() is None:
            proc.terminate()
    for proc in procs:
        try:
            proc.wait(timeout=10)
        except Exception:  # noqa: BLE001 - a harness that ignores SIGTERM is killed
            proc.kill()


if __name__ == "__main__":
    main()
