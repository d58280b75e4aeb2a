"""The HTTP collector: clients POST LDP reports; checked ones become rolling Avro files a job reads.

The files land in ``--output_dir``, where an aggregation job reads them (batch ``--input 'DIR/*.avro'``,
or a watched directory: ``--streaming --require_done_marker``)::

    python -m pipelines.collect --task TASK.json --output_dir DIR [--port 8080] [--host 127.0.0.1] \\
        [--roll_reports 100000] [--roll_seconds 60] [--max_body_bytes 1048576] [--max_batch 1000]

Endpoints (docs/collector.md): ``POST /v1/reports`` (``application/json``: one report or
``{"reports": [...]}`` in the JSON form of docs/wire_format.md; ``application/avro``: an Avro object
container of report records) -> 200 ``{"accepted": n}`` or a 4xx ``{"error", "detail"[, "index"]}``
naming the first problem, nothing of the request written; ``GET /healthz``; ``GET /metrics`` (the counts).
With ``--demo_page DIR`` (the built TypeScript client package, ``clients/typescript``) it also serves the
browser demo from the same origin: ``GET /`` its ``demo/index.html``, ``GET /dist/....js`` its compiled
JavaScript (nothing else of DIR), ``GET /v1/task`` the task with its ``resolved`` block.
No access log, no address or header kept. SIGTERM / SIGINT: the open file is closed, the counts are
printed as one JSON line on stdout, exit 0 (1 when a write failed).
"""

from __future__ import annotations

import asyncio
import json
import logging
import signal
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import tornado.httpserver
import tornado.netutil
import tornado.web

from ldp.kinds import kind_of
from ldp.task import TaskError, load_task, resolve_task
from pipelines.cli import fail, job_parser, parse_job_args
from pipelines.collector import AVRO_TYPE, JSON_TYPE, Collector, RequestError, RollingAvroWriter, make_checker

__all__ = ["make_app", "run", "serve"]

_LOG = logging.getLogger(__name__)

#: The body limit of the HTTP layer: the handler refuses larger bodies itself (413, from the
#: Content-Length or while a chunked body arrives), so the server only needs a bound.
_SERVER_BODY_LIMIT = 1 << 40


def _no_access_log(handler: tornado.web.RequestHandler) -> None:
    """No access log: the collector logs nothing about requests (no address, no path, no agent)."""


class _JsonHandler(tornado.web.RequestHandler):
    """JSON answers, errors included; nothing of the request is logged."""

    def initialize(self, collector: Collector) -> None:
        self.collector = collector

    def set_default_headers(self) -> None:
        self.set_header("Content-Type", "application/json")
        self.set_header("Cache-Control", "no-store")
        self.clear_header("Server")

    def answer(self, status: int, obj: dict[str, Any]) -> None:
        self.set_status(status)
        self.finish(json.dumps(obj) + "\n")

    def write_error(self, status_code: int, **kwargs: Any) -> None:
        error = {404: "not_found", 405: "method_not_allowed"}.get(status_code, "error")
        detail = {
            404: "no such endpoint: POST /v1/reports, GET /healthz, GET /metrics",
            405: f"method not allowed here (allowed: {', '.join(self.SUPPORTED_METHODS)})",
        }.get(status_code, self._reason)
        self.finish(json.dumps({"error": error, "detail": detail}) + "\n")

    def log_exception(self, typ: Any, value: Any, tb: Any) -> None:
        """Logs an unexpected exception without the request (whose summary holds the client address)."""
        if not isinstance(value, tornado.web.HTTPError):
            _LOG.error("unexpected %s in %s", typ.__name__, type(self).__name__, exc_info=(typ, value, tb))


class NotFoundHandler(_JsonHandler):
    def prepare(self) -> None:
        raise tornado.web.HTTPError(404)


class HealthHandler(_JsonHandler):
    SUPPORTED_METHODS = ("GET",)

    def get(self) -> None:
        failed = self.collector.failed
        self.answer(503 if failed else 200, {"status": "failed" if failed else "ok"})


class MetricsHandler(_JsonHandler):
    SUPPORTED_METHODS = ("GET",)

    def get(self) -> None:
        self.answer(200, self.collector.stats.to_json())


class DemoPage:
    """The browser demo of ``--demo_page DIR``: ``DIR/demo/index.html``, the ``.js`` files under ``DIR/dist``
    and the task's JSON. Files are read at each request (a rebuild shows at the next reload)."""

    PAGE = Path("demo") / "index.html"
    SCRIPT = Path("dist") / "demo" / "demo.js"

    def __init__(self, root: str | Path, task_json: str) -> None:
        self.root = Path(root).resolve()
        self.dist = self.root / "dist"
        self.task_json = task_json
        missing = [str(self.root / f) for f in (self.PAGE, self.SCRIPT) if not (self.root / f).is_file()]
        if missing:
            raise ValueError(
                f"--demo_page {root}: no {' and no '.join(missing)} (build the client: cd {root} && "
                "npm ci && npm run build)"
            )

    def script(self, rel: str) -> Path | None:
        """The file of ``GET /dist/<rel>``: a ``.js`` file inside ``DIR/dist`` (after resolving links), no
        hidden or empty path part; None otherwise."""
        odd_part = any(p in ("", ".", "..") or p.startswith(".") for p in rel.split("/"))
        if odd_part or not rel.endswith(".js") or "\\" in rel or "\0" in rel:
            return None
        path = (self.dist / rel).resolve()
        if not path.is_relative_to(self.dist) or not path.is_file():
            return None
        return path


class _DemoHandler(_JsonHandler):
    """``GET`` of the demo's page, scripts and task; a refusal is the JSON 404 of the other endpoints."""

    SUPPORTED_METHODS = ("GET",)

    def initialize(self, collector: Collector, demo: DemoPage) -> None:
        self.collector = collector
        self.demo = demo

    def send(self, body: bytes, content_type: str) -> None:
        self.set_header("Content-Type", content_type)
        self.set_header("X-Content-Type-Options", "nosniff")
        self.finish(body)


class DemoPageHandler(_DemoHandler):
    def get(self) -> None:
        self.set_header(
            "Content-Security-Policy",
            "default-src 'self'; style-src 'self' 'unsafe-inline'; img-src 'self' data:; base-uri 'none'; "
            "form-action 'none'; frame-ancestors 'none'",
        )
        self.send((self.demo.root / DemoPage.PAGE).read_bytes(), "text/html; charset=utf-8")


class DemoScriptHandler(_DemoHandler):
    def get(self, rel: str) -> None:
        path = self.demo.script(rel)
        if path is None:
            raise tornado.web.HTTPError(404)
        self.send(path.read_bytes(), "text/javascript; charset=utf-8")


class TaskHandler(_DemoHandler):
    def get(self) -> None:
        self.send(self.demo.task_json.encode("utf-8"), "application/json")


_MEDIA_TYPES = {JSON_TYPE: JSON_TYPE, AVRO_TYPE: AVRO_TYPE}


@tornado.web.stream_request_body
class ReportsHandler(_JsonHandler):
    """``POST /v1/reports``: a ``Content-Length`` over the limit is refused (413) before the body is read,
    and the connection closes; a chunked body is refused once it passes the limit. A wrong content type
    (415) is answered after the body is read, so the connection stays usable. Then
    :meth:`Collector.handle`."""

    SUPPORTED_METHODS = ("POST",)

    def refuse(self, error: RequestError) -> None:
        self.answer(*self.collector.refuse(error))

    def prepare(self) -> None:
        self._chunks: list[bytes] = []
        self._size = 0
        self._refusal: RequestError | None = None
        headers = self.request.headers
        length = headers.get("Content-Length")
        limit = self.collector.max_body_bytes
        if length is not None and length.isdigit() and int(length) > limit:
            return self.refuse(RequestError(413, "too_large", f"body of {length} bytes; at most {limit}"))
        media, _, params = headers.get("Content-Type", "").partition(";")
        self._media = _MEDIA_TYPES.get(media.strip().lower())
        charset = next(
            (p.split("=", 1)[1].strip().strip('"').lower() for p in params.split(";") if "=" in p and
             p.split("=", 1)[0].strip().lower() == "charset"),
            None,
        )  # fmt: skip
        if self._media is None or (charset is not None and charset not in ("utf-8", "utf8")):
            given = f", not {media.strip()!r}" if media.strip() else ""
            detail = f"Content-Type must be {JSON_TYPE} (UTF-8) or {AVRO_TYPE}{given}"
            self._refusal = RequestError(415, "unsupported_media_type", detail)
        elif headers.get("Content-Encoding", "identity").strip().lower() != "identity":
            self._refusal = RequestError(415, "unsupported_media_type", "no Content-Encoding is taken")
        return None

    def data_received(self, chunk: bytes) -> None:
        if self._finished:
            return
        self._size += len(chunk)
        limit = self.collector.max_body_bytes
        if self._size > limit:
            self._chunks = []
            self.refuse(RequestError(413, "too_large", f"body of more than {limit} bytes; at most {limit}"))
        elif self._refusal is None:
            self._chunks.append(chunk)

    def post(self) -> None:
        if self._finished:
            return
        if self._refusal is not None:
            return self.refuse(self._refusal)
        body = b"".join(self._chunks)
        self._chunks = []
        assert self._media is not None
        self.answer(*self.collector.handle(self._media, body))
        return None


def make_app(collector: Collector, demo: DemoPage | None = None) -> tornado.web.Application:
    """The collector's web application (no access log, no cookies; static files only of ``demo``)."""
    args = {"collector": collector}
    pages = [] if demo is None else [
        (r"/", DemoPageHandler, {**args, "demo": demo}),
        (r"/dist/(.+)", DemoScriptHandler, {**args, "demo": demo}),
        (r"/v1/task", TaskHandler, {**args, "demo": demo}),
    ]  # fmt: skip
    return tornado.web.Application(
        [
            (r"/v1/reports", ReportsHandler, args),
            (r"/healthz", HealthHandler, args),
            (r"/metrics", MetricsHandler, args),
            *pages,
        ],
        default_handler_class=NotFoundHandler,
        default_handler_args=args,
        log_function=_no_access_log,
        compress_response=False,
    )


def _quiet_tornado() -> None:
    """Tornado's own INFO lines name client addresses ("Malformed HTTP message from ..."): its loggers
    show warnings and errors only, whatever ``--log_level`` says."""
    for name in ("tornado", "tornado.access", "tornado.general", "tornado.application"):
        logging.getLogger(name).setLevel(logging.WARNING)


async def serve(
    collector: Collector,
    host: str = "127.0.0.1",
    port: int = 8080,
    *,
    stop: asyncio.Event | None = None,
    ready: Any = None,
    tick_s: float = 1.0,
    demo: DemoPage | None = None,
) -> dict[str, Any]:
    """Serves until ``stop`` is set (default: SIGTERM or SIGINT), then closes the open file and returns
    the counts. ``ready(port)`` is called once the socket listens (``port`` 0: a free one)."""
    _quiet_tornado()
    loop = asyncio.get_running_loop()
    if stop is None:
        stop = asyncio.Event()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stop.set)
    server = tornado.httpserver.HTTPServer(
        make_app(collector, demo), max_body_size=_SERVER_BODY_LIMIT, xheaders=False,
        idle_connection_timeout=60, body_timeout=60,
    )  # fmt: skip
    sockets = tornado.netutil.bind_sockets(port, address=host)
    server.add_sockets(sockets)
    bound = sockets[0].getsockname()[1]
    if ready is not None:
        ready(bound)
    try:
        while not stop.is_set():
            try:
                await asyncio.wait_for(stop.wait(), timeout=tick_s)
            except asyncio.TimeoutError:
                pass
            collector.tick()
    finally:
        server.stop()
        await server.close_all_connections()
        stats = collector.close()
    return stats.to_json()


def _parser():
    p = job_parser(__doc__.splitlines()[0], beam_options=False)
    p.add_argument("--task", required=True, help="collection task JSON file (frequency, range or sparse)")
    p.add_argument("--output_dir", required=True, help="directory of the report files (created if missing)")
    p.add_argument("--host", default="127.0.0.1", help="address to listen on (a front proxy does TLS)")
    p.add_argument("--port", type=int, default=8080, help="port to listen on (0: a free one, logged)")
    p.add_argument("--roll_reports", type=int, default=100_000, help="close a file after this many reports")
    p.add_argument(
        "--roll_seconds", type=float, default=60.0, help="close a file this many seconds after it opened"
    )
    p.add_argument("--max_body_bytes", type=int, default=1 << 20, help="largest request body (413 beyond)")
    p.add_argument("--max_batch", type=int, default=1000, help="most reports in one request (413 beyond)")
    p.add_argument(
        "--demo_page",
        metavar="DIR",
        help="also serve the browser demo of the built TypeScript client package DIR (clients/typescript): "
        "GET / (DIR/demo/index.html), GET /dist/....js, GET /v1/task; a frequency task only",
    )
    return p


def run(argv: Sequence[str] | None = None) -> int:
    """Command-line entry point: serves until SIGTERM / SIGINT; returns the exit status."""
    ns, _ = parse_job_args(_parser(), argv, beam=False)
    for flag, value in (("--roll_reports", ns.roll_reports), ("--max_body_bytes", ns.max_body_bytes),
                        ("--max_batch", ns.max_batch)):  # fmt: skip
        if value < 1:
            fail(f"{flag} must be >= 1, got {value}")
    if not ns.roll_seconds > 0:
        fail(f"--roll_seconds must be > 0, got {ns.roll_seconds}")
    if not 0 <= ns.port <= 65535:
        fail(f"--port must be in [0, 65535], got {ns.port}")
    try:
        task = load_task(ns.task)
    except TaskError as exc:
        fail(exc.one_line())
    demo = None
    if ns.demo_page is not None:
        if not kind_of(task).typescript_client:
            fail(f"--demo_page needs a frequency task (the TypeScript client's oracles), not {task.kind}")
        try:
            demo = DemoPage(ns.demo_page, json.dumps(resolve_task(task)))
        except ValueError as exc:
            fail(str(exc))
    try:
        checker = make_checker(task)
        writer = RollingAvroWriter(ns.output_dir, roll_reports=ns.roll_reports, roll_seconds=ns.roll_seconds)
    except (ValueError, OSError) as exc:
        fail(str(exc))
    for name in writer.leftovers():
        _LOG.warning("%s in --output_dir is an unfinished file of an earlier run (killed): it is never read",
                     name)  # fmt: skip
    collector = Collector(checker, writer, max_body_bytes=ns.max_body_bytes, max_batch=ns.max_batch)

    def ready(port: int) -> None:
        _LOG.info(
            "collecting reports of task %r (%s) on http://%s:%d/v1/reports into %s", task.task_id, task.kind,
            ns.host, port, ns.output_dir,
        )  # fmt: skip
        if demo is not None:
            _LOG.info("browser demo: http://%s:%d/", ns.host, port)

    try:
        stats = asyncio.run(serve(collector, ns.host, ns.port, ready=ready, demo=demo))
    except OSError as exc:  # the address is in use, or not this machine's
        fail(f"cannot listen on {ns.host}:{ns.port}: {exc.strerror or exc}")
    print(json.dumps(stats), flush=True)
    _LOG.info(
        "stopped: %d requests (%d accepted, %d rejected), %d reports written in %d files",
        stats["received"], stats["accepted"], stats["rejected"], stats["reports_written"],
        stats["files_written"],
    )  # fmt: skip
    return 1 if collector.failed else 0


if __name__ == "__main__":
    raise SystemExit(run())
