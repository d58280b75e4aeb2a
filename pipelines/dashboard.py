"""Live web dashboard over the latest-state store (a Bokeh server app; updates without reloading).

    python -m pipelines.dashboard --store sqlite:///out/estimates.db [--port 5006] [--address 127.0.0.1]
                                  [--task TASK_ID] [--refresh 1.0] [--stale_after S]

The store is the one the streaming (or batch) aggregation jobs write with ``--store URL``: a SQLite file
(``sqlite:///PATH`` or a plain path) or PostgreSQL (``postgresql://USER@HOST:PORT/DB``). The page shows the
current window's top-k values with their 95% intervals (noise-level values marked), chosen values across
windows with CI bands, reports and pane timing per window, the job's read / accepted / rejected /
late-dropped counts and dead-letter reasons, the window-end-to-pane latency, range and batch tasks' query
answers with error bars, and the task's privacy budget figures when its summary has them. See
docs/dashboard.md.

BokehJS is served by this server (``/static/``), never from a CDN: the page works offline.
"""

from __future__ import annotations

import argparse
import errno
import logging
import os
import socket
import sys
from collections.abc import Sequence
from typing import Any

from pipelines.cli import fail, job_parser, parse_job_args

__all__ = ["check_port", "make_application", "run"]

_LOG = logging.getLogger(__name__)


def check_port(address: str, port: int) -> int:
    """Binds ``address:port`` once to see that it is free (``port`` 0: picks a free one) and returns the
    port; raises ``OSError`` with a readable message when it is taken or the address is not local."""
    family = socket.AF_INET6 if ":" in address else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((address, port))
        except OSError as exc:
            if exc.errno == errno.EADDRINUSE:
                raise OSError(
                    f"port {port} on {address} is already in use (choose another with --port, or "
                    "--port 0 for any free port)"
                ) from exc
            raise OSError(f"cannot listen on {address}:{port}: {exc.strerror or exc}") from exc
        return int(sock.getsockname()[1])


def make_application(
    store_url: str,
    *,
    task: str | None,
    refresh: float,
    top_k: int,
    max_windows: int,
    stale_after: float | None = None,
):
    """The Bokeh ``Application`` whose every session is a :class:`~pipelines.dashboard_app.app.Dashboard`."""
    from bokeh.application import Application
    from bokeh.application.handlers.function import FunctionHandler

    from pipelines.dashboard_app.app import Dashboard

    def build(doc) -> None:
        Dashboard(
            doc,
            store_url,
            task=task,
            refresh=refresh,
            top_k=top_k,
            max_windows=max_windows,
            stale_after=stale_after,
        )

    return Application(FunctionHandler(build))


def _parser():
    parser = job_parser(__doc__.splitlines()[0], beam_options=False)
    parser.add_argument(
        "--store",
        required=True,
        help="the store URL: sqlite:///PATH/estimates.db, a file path, or postgresql://USER@HOST:PORT/DB",
    )
    parser.add_argument(
        "--port", type=int, default=5006, help="HTTP port (0: any free port; the URL is printed)"
    )
    parser.add_argument(
        "--address",
        default="127.0.0.1",
        help="address to listen on (0.0.0.0 exposes the page to the network)",
    )
    parser.add_argument(
        "--task",
        default=None,
        metavar="TASK_ID",
        help="task id shown first (default: the store's first task; the page has a selector)",
    )
    parser.add_argument("--refresh", type=float, default=1.0, help="seconds between polls of the store")
    parser.add_argument("--top_k", type=int, default=10, help="values in the top-k plot at first")
    parser.add_argument(
        "--max_windows",
        type=int,
        default=60,
        help="newest windows covered by the series, window, count and latency plots",
    )
    parser.add_argument(
        "--stale_after",
        type=float,
        default=None,
        metavar="S",
        help="flag the data stale when the newest pane is older than S seconds (default: twice the task's "
        "window size plus its allowed lateness plus 30 s; 120 s without a window size)",
    )
    parser.add_argument(
        "--allow_origin",
        action="append",
        default=[],
        metavar="HOST:PORT",
        help="another Host:port the page may be opened as (e.g. behind a proxy); repeatable",
    )
    return parser


def _check_flags(ns: argparse.Namespace) -> int:
    """Refuses flags out of range, a store that cannot be read and a port that cannot be bound (one line,
    exit 2); returns the port to listen on."""
    if not 0.05 <= ns.refresh <= 3600:
        fail(f"--refresh {ns.refresh} is out of range (0.05 to 3600 seconds)")
    if not 1 <= ns.top_k <= 1000:
        fail(f"--top_k {ns.top_k} is out of range (1 to 1000)")
    if not 1 <= ns.max_windows <= 100_000:
        fail(f"--max_windows {ns.max_windows} is out of range (1 to 100000)")
    if ns.stale_after is not None and not 1 <= ns.stale_after <= 10**7:
        fail(f"--stale_after {ns.stale_after} is out of range (1 to 10000000 seconds)")
    if not 0 <= ns.port <= 65535:
        fail(f"--port {ns.port} is out of range (0 to 65535)")

    from pipelines.dashboard_app.reader import StoreError, StoreReader

    try:  # a bad URL, a missing directory or an unreachable server: one line now, not a broken page later
        StoreReader(ns.store).close()
    except StoreError as exc:
        fail(str(exc))
    try:
        return check_port(ns.address, ns.port)
    except OSError as exc:
        fail(str(exc))


def _serve_bokehjs_locally() -> None:
    """BokehJS from this server, never a CDN, whatever the environment says."""
    if os.environ.get("BOKEH_RESOURCES", "server") not in ("server", "server-dev"):
        _LOG.warning(
            "ignoring BOKEH_RESOURCES=%s: the dashboard serves BokehJS itself", os.environ["BOKEH_RESOURCES"]
        )
    os.environ["BOKEH_RESOURCES"] = "server"


def _start_server(ns: argparse.Namespace, port: int, loop: Any) -> Any:
    """The Bokeh server of the dashboard application on ``port``, started; it accepts the page from the
    address it listens on, localhost and ``--allow_origin`` (any origin when it listens on all)."""
    from bokeh.server.server import Server

    app = make_application(
        ns.store,
        task=ns.task,
        refresh=ns.refresh,
        top_k=ns.top_k,
        max_windows=ns.max_windows,
        stale_after=ns.stale_after,
    )
    origins = {f"{ns.address}:{port}", f"localhost:{port}", f"127.0.0.1:{port}", *ns.allow_origin}
    if ns.address in ("0.0.0.0", "::"):
        origins.add("*")
    try:
        server = Server(
            {"/": app}, io_loop=loop, address=ns.address, port=port, allow_websocket_origin=sorted(origins)
        )
    except OSError as exc:
        fail(f"cannot listen on {ns.address}:{port}: {exc.strerror or exc}")
    server.start()
    return server


def run(argv: Sequence[str] | None = None) -> int:
    ns, _ = parse_job_args(_parser(), argv, beam=False)
    port = _check_flags(ns)
    _serve_bokehjs_locally()

    from tornado.ioloop import IOLoop

    loop = IOLoop.current()
    server = _start_server(ns, port, loop)
    if ns.address in ("0.0.0.0", "::"):
        host = socket.gethostname()
    else:
        host = f"[{ns.address}]" if ":" in ns.address else ns.address
    url = f"http://{host}:{server.port}/"
    print(
        f"dashboard: {url} (store {_redacted(ns.store)}, refresh {ns.refresh:g} s; Ctrl-C stops)", flush=True
    )
    _LOG.info("serving the dashboard at %s", url)
    try:
        loop.start()
    except KeyboardInterrupt:
        pass
    finally:
        server.stop()
    return 0


def _redacted(url: str) -> str:
    from pipelines.dashboard_app.reader import _redact

    return _redact(url)


if __name__ == "__main__":
    sys.exit(run())
