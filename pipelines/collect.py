"""The HTTP collector: clients POST LDP reports; checked ones become rolling Avro files a job reads.

The files land in ``--output_dir``, where an aggregation job reads them (batch ``--input 'DIR/*.avro'``,
or a watched directory: ``--streaming --require_done_marker``), or, with ``--output_topic
kafka://HOST:PORT/TOPIC`` instead, as one Kafka message per request, answered once the broker acknowledged
it (``pipelines.collect_topic``)::

    python -m pipelines.collect --task TASK.json --output_dir DIR [--port 8080] [--host 127.0.0.1] \\
        [--roll_reports 100000] [--roll_seconds 60] [--max_body_bytes 1048576] [--max_batch 100] \\
        [--max_connections N] [--idle_timeout_s 30] [--allow_origin ORIGIN ...] \\
        [--client_tokens FILE | --token_key FILE] [--idempotency_window_s 86400] \\
        [--idempotency_keys 200000] [--trie_dir DIR]

Endpoints (docs/collector.md): ``POST /v1/reports`` (``application/json``: one report or
``{"reports": [...]}`` in the JSON form of docs/wire_format.md; ``application/avro``: an Avro object
container of report records) -> 200 ``{"accepted": n}`` once the reports are durable (fsync, group
commit), or a 4xx ``{"error", "detail"[, "index"]}`` naming the first problem, nothing of the request
written, or 503 with ``Retry-After`` when the disk cannot take them; an ``Idempotency-Key`` header makes a
repeat an answer without a second write (exactly once, across kill -9 and restarts);
``OPTIONS /v1/reports`` (CORS preflight, ``--allow_origin``);
``GET /healthz``; ``GET /metrics`` (the counts as JSON); ``GET /metrics/prometheus`` (Prometheus text);
``GET /v1/client_params`` (the task's client parameters, ``python -m wire.client``: what a device encodes
with; 404 for a task without a client byte procedure); ``GET /v1/publication`` (with ``--trie_dir DIR``, a
trie-mode heavy_hitters task: the newest publication the job wrote there, without the job's resume
``state``, whose ``level`` the next window's clients report at; 404 ``no_publication`` before the first:
level 0).
At start the collector adopts what a killed predecessor left in ``--output_dir`` (unfinished files: the
blocks their ledgers record).
With ``--demo_page DIR`` (the built TypeScript client package, ``clients/typescript``) it also serves the
browser demo from the same origin: ``GET /`` its ``demo/index.html``, ``GET /dist/....js`` its compiled
JavaScript (nothing else of DIR), ``GET /v1/task`` the task with its ``resolved`` block.
No access log, no address or header kept. SIGTERM / SIGINT: the open file is published, the counts are
printed as one JSON line on stdout, exit 0 (1 when the last file could not be published).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import resource
import signal
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import tornado.httpserver
import tornado.netutil
import tornado.web

from ldp.kinds import kind_of
from ldp.task import TaskError, load_task, resolve_task
from pipelines.cli import fail, job_parser, parse_job_args
from pipelines.collector import (
    AVRO_TYPE,
    DEFAULT_MAX_BATCH,
    JSON_TYPE,
    KEYS_JOURNAL,
    Collector,
    IdempotencyKeys,
    RequestError,
    RollingAvroWriter,
    SenderAuth,
    make_checker,
)

__all__ = ["make_app", "run", "serve"]

_LOG = logging.getLogger(__name__)

#: The body limit of the HTTP layer: the handler refuses larger bodies itself (413, from the
#: Content-Length or while a chunked body arrives), so the server only needs a bound.
_SERVER_BODY_LIMIT = 1 << 40


def _no_access_log(handler: tornado.web.RequestHandler) -> None:
    """No access log: the collector logs nothing about requests (no address, no path, no agent)."""


class _JsonHandler(tornado.web.RequestHandler):
    """JSON answers, errors included; nothing of the request is logged."""

    def initialize(self, collector: Collector, origins: frozenset[str] = frozenset()) -> None:
        self.collector = collector
        self.origins = origins

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
            404: "no such endpoint: POST /v1/reports, GET /healthz, GET /metrics, GET /metrics/prometheus",
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
        self.collector._sync_counts()
        self.answer(200, self.collector.stats.to_json())


class PrometheusHandler(_JsonHandler):
    """``GET /metrics/prometheus``: the Prometheus text exposition format."""

    SUPPORTED_METHODS = ("GET",)

    def get(self) -> None:
        from prometheus_client import CONTENT_TYPE_LATEST

        self.collector._sync_counts()
        self.set_header("Content-Type", CONTENT_TYPE_LATEST)
        self.finish(self.collector.prom.text())


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


class _ClientGetHandler(_JsonHandler):
    """A ``GET`` a device makes before it encodes (CORS for the ``--allow_origin`` pages, like the POST)."""

    SUPPORTED_METHODS = ("GET",)

    def initialize(self, collector: Collector, origins: frozenset[str] = frozenset(),
                   trie_dir: str | None = None, params: dict[str, Any] | None = None) -> None:  # fmt: skip
        super().initialize(collector, origins)
        self.trie_dir = trie_dir
        self.params = params

    def prepare(self) -> None:
        origin = self.request.headers.get("Origin")
        if origin is not None and (origin in self.origins or "*" in self.origins):
            self.set_header("Access-Control-Allow-Origin", origin)
            self.set_header("Vary", "Origin")


class ClientParamsHandler(_ClientGetHandler):
    """``GET /v1/client_params``: the task's client parameters document (computed once, at start)."""

    def get(self) -> None:
        if self.params is None:
            task = self.collector.checker.task
            detail = f"task {task.task_id!r} ({task.kind}) has no client byte procedure to parametrize"
            return self.answer(404, {"error": "no_client_params", "detail": detail})
        return self.answer(200, self.params)


class PublicationHandler(_ClientGetHandler):
    """``GET /v1/publication``: the newest publication of ``--trie_dir`` (read at each request)."""

    def get(self) -> None:
        from wire.publication import read_latest

        task_id = self.collector.checker.task.task_id
        if self.trie_dir is None:
            detail = "this collector serves no publication (start it with --trie_dir for a trie-mode task)"
            return self.answer(404, {"error": "not_found", "detail": detail})
        try:
            latest = read_latest(self.trie_dir, task_id)
        except (ValueError, OSError) as exc:
            _LOG.error("the newest publication cannot be served: %s", exc)
            detail = "the newest publication cannot be read; retry later"
            self.set_header("Retry-After", "5")
            return self.answer(503, {"error": "unavailable", "detail": detail})
        if latest is None:
            detail = "no window has been published yet: clients report at level 0"
            return self.answer(404, {"error": "no_publication", "detail": detail})
        # the aggregator's resume state (survivor words, up to a few hundred KB) stays on the server
        return self.answer(200, {k: v for k, v in latest.items() if k not in SERVER_ONLY_KEYS})


#: publication keys ``GET /v1/publication`` leaves out: what only a restarted job needs
SERVER_ONLY_KEYS = frozenset({"state"})

_MEDIA_TYPES = {JSON_TYPE: JSON_TYPE, AVRO_TYPE: AVRO_TYPE}


@tornado.web.stream_request_body
class ReportsHandler(_JsonHandler):
    """``POST /v1/reports``: a ``Content-Length`` over the limit is refused (413) before the body is read,
    and the connection closes; a chunked body is refused once it passes the limit. A wrong content type
    (415) is answered after the body is read, so the connection stays usable. Then
    :meth:`Collector.handle`."""

    SUPPORTED_METHODS = ("POST", "OPTIONS")

    def refuse(self, error: RequestError) -> None:
        self.answer(*self.collector.refuse(error))

    def answer(self, status: int, obj: dict[str, Any]) -> None:
        if status == 503:
            self.set_header("Retry-After", str(self.collector.retry_after_s))
        elif status == 401:
            self.set_header("WWW-Authenticate", "Bearer")
        self.collector.prom.duration.observe(time.perf_counter() - self._t0)
        super().answer(status, obj)

    def _cors(self) -> bool:
        """Sets the CORS headers for an allowed ``Origin``; False when the request has another origin."""
        origin = self.request.headers.get("Origin")
        if origin is None:
            return True
        if origin not in self.origins and "*" not in self.origins:
            return False
        self.set_header("Access-Control-Allow-Origin", origin)
        self.set_header("Vary", "Origin")
        self.set_header("Access-Control-Expose-Headers", "Retry-After")
        return True

    def options(self) -> None:
        """The CORS preflight: 204 for an allowed origin (POST with these headers), else 403."""
        if not self._cors():
            self.set_status(403)
            detail = "this origin may not post reports here (the collector's --allow_origin)"
            self.finish(json.dumps({"error": "origin_not_allowed", "detail": detail}) + "\n")
            return
        self.set_header("Access-Control-Allow-Methods", "POST")
        self.set_header("Access-Control-Allow-Headers", "Content-Type, Idempotency-Key, Authorization")
        self.set_header("Access-Control-Max-Age", "600")
        self.set_header("Allow", "POST, OPTIONS")
        self.set_status(204)
        self.finish()

    def prepare(self) -> None:
        self._t0 = time.perf_counter()
        self._chunks: list[bytes] = []
        self._size = 0
        self._refusal: RequestError | None = None
        if self.request.method == "OPTIONS":
            return None
        self._cors()
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

    async def post(self) -> None:
        if self._finished:
            return
        if self._refusal is not None:
            return self.refuse(self._refusal)
        body = b"".join(self._chunks)
        self._chunks = []
        assert self._media is not None
        headers = self.request.headers
        answer = await self.collector.handle_async(
            self._media, body, key=headers.get("Idempotency-Key"), authorization=headers.get("Authorization")
        )
        if not self._finished:  # the client may have gone; its reports are durable all the same
            self.answer(*answer)
        return None


def make_app(
    collector: Collector, demo: DemoPage | None = None, origins: Sequence[str] = (),
    trie_dir: str | None = None,
) -> tornado.web.Application:  # fmt: skip
    """The collector's web application (no access log, no cookies; static files only of ``demo``);
    ``origins``: the web origins whose pages may post reports (CORS; ``*``: any); ``trie_dir``: the
    publications ``GET /v1/publication`` serves."""
    args: dict[str, Any] = {"collector": collector}
    client = {**args, "origins": frozenset(origins), "trie_dir": trie_dir,
              "params": _client_params(collector)}  # fmt: skip
    pages = [] if demo is None else [
        (r"/", DemoPageHandler, {**args, "demo": demo}),
        (r"/dist/(.+)", DemoScriptHandler, {**args, "demo": demo}),
        (r"/v1/task", TaskHandler, {**args, "demo": demo}),
    ]  # fmt: skip
    return tornado.web.Application(
        [
            (r"/v1/reports", ReportsHandler, {**args, "origins": frozenset(origins)}),
            (r"/healthz", HealthHandler, args),
            (r"/metrics", MetricsHandler, args),
            (r"/metrics/prometheus", PrometheusHandler, args),
            (r"/v1/client_params", ClientParamsHandler, client),
            (r"/v1/publication", PublicationHandler, client),
            *pages,
        ],
        default_handler_class=NotFoundHandler,
        default_handler_args=args,
        log_function=_no_access_log,
        compress_response=False,
    )


def _client_params(collector: Collector) -> dict[str, Any] | None:
    """The client parameters document of the collector's task, None when its devices run no byte
    procedure the wire format parametrizes (range tasks, several attributes)."""
    from wire.client import client_params_document

    try:
        return client_params_document(collector.checker.task)
    except ValueError:
        return None


def _quiet_tornado() -> None:
    """Tornado's own INFO lines name client addresses ("Malformed HTTP message from ..."): its loggers
    show warnings and errors only, whatever ``--log_level`` says."""
    for name in ("tornado", "tornado.access", "tornado.general", "tornado.application"):
        logging.getLogger(name).setLevel(logging.WARNING)


_CAP_ANSWER = (
    b"HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/json\r\nRetry-After: 1\r\n"
    b"Connection: close\r\nContent-Length: %d\r\n\r\n%s"
)


class CappedHTTPServer(tornado.httpserver.HTTPServer):
    """An HTTP server that takes at most ``max_connections`` connections at once: one more is answered
    503 (``Retry-After``) and closed at once, so descriptors never run out and idle connections, closed
    after the idle timeout, free their places by themselves."""

    max_connections = 0
    collector: Collector | None = None

    def handle_stream(self, stream: Any, address: Any) -> None:
        if self.collector is not None:
            self.collector.prom.connections.set(len(self._connections))
        if self.max_connections and len(self._connections) >= self.max_connections:
            if self.collector is not None:
                self.collector.prom.refused_connections.inc()
            body = json.dumps({"error": "unavailable", "detail": "too many connections; retry later"})
            body = body.encode()
            try:
                fut = stream.write(_CAP_ANSWER % (len(body), body))
                fut.add_done_callback(lambda _: stream.close())
            except Exception:  # noqa: BLE001 - the peer is gone
                stream.close()
            return
        super().handle_stream(stream, address)


def default_max_connections() -> int:
    """The connection cap by default: 1,024, or the descriptor limit less 64 when that is lower."""
    soft = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
    return max(1, min(1024, (soft if soft != resource.RLIM_INFINITY else 1 << 20) - 64))


async def serve(
    collector: Collector,
    host: str = "127.0.0.1",
    port: int = 8080,
    *,
    stop: asyncio.Event | None = None,
    ready: Any = None,
    tick_s: float = 1.0,
    demo: DemoPage | None = None,
    origins: Sequence[str] = (),
    max_connections: int | None = None,
    idle_timeout_s: float = 30.0,
    trie_dir: str | None = None,
) -> dict[str, Any]:
    """Serves until ``stop`` is set (default: SIGTERM or SIGINT), then publishes the open file and returns
    the counts. ``ready(port)`` is called once the socket listens (``port`` 0: a free one)."""
    _quiet_tornado()
    loop = asyncio.get_running_loop()
    if stop is None:
        stop = asyncio.Event()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stop.set)
    server = CappedHTTPServer(
        make_app(collector, demo, origins, trie_dir), max_body_size=_SERVER_BODY_LIMIT, xheaders=False,
        idle_connection_timeout=idle_timeout_s, body_timeout=idle_timeout_s,
    )  # fmt: skip
    server.max_connections = default_max_connections() if max_connections is None else max_connections
    server.collector = collector
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
            await collector.tick_async()
    finally:
        server.stop()
        await server.close_all_connections()
        await collector.drain()
        stats = collector.close()
        collector.writer.close()
    return stats.to_json()


def _parser():
    p = job_parser(__doc__.splitlines()[0], beam_options=False)
    p.add_argument("--task", required=True, help="collection task JSON file (any kind whose devices send LDP "
                   "reports: frequency, range, sparse, numeric, heavy_hitters)")  # fmt: skip
    p.add_argument("--output_dir", help="directory of the report files (created if missing)")
    p.add_argument("--output_topic", metavar="kafka://HOST:PORT/TOPIC",
                   help="publish each accepted request as one message to this Kafka topic instead of files "
                   "(answered 200 once the broker acknowledged it; docs/kafka.md)")  # fmt: skip
    p.add_argument("--kafka_timeout_s", type=float, default=10.0,
                   help="with --output_topic: how long a request waits for the broker's acknowledgement "
                   "before it is answered 503")  # fmt: skip
    p.add_argument("--host", default="127.0.0.1", help="address to listen on (a front proxy does TLS)")
    p.add_argument("--port", type=int, default=8080, help="port to listen on (0: a free one, logged)")
    p.add_argument("--roll_reports", type=int, default=100_000, help="close a file after this many reports")
    p.add_argument(
        "--roll_seconds", type=float, default=60.0, help="close a file this many seconds after it opened"
    )
    p.add_argument("--max_body_bytes", type=int, default=1 << 20, help="largest request body (413 beyond)")
    p.add_argument(
        "--max_batch", type=int, default=DEFAULT_MAX_BATCH,
        help="most reports in one request (413 beyond); keep it well below the shuffler's min_reports",
    )  # fmt: skip
    p.add_argument("--max_connections", type=int, help="most open connections (default: 1024, or fewer "
                   "than the descriptor limit); one more is answered 503 and closed")  # fmt: skip
    p.add_argument("--idle_timeout_s", type=float, default=30.0,
                   help="close a connection idle (or sending its headers or body) this long")  # fmt: skip
    p.add_argument("--allow_origin", action="append", default=[], metavar="ORIGIN",
                   help="a web origin (https://app.example) whose pages may post reports (CORS); repeatable; "
                   "'*' any")  # fmt: skip
    auth = p.add_mutually_exclusive_group()
    auth.add_argument("--client_tokens", metavar="FILE",
                      help="require Authorization: Bearer <token>, one of the file's tokens (one a line)")
    auth.add_argument("--token_key", metavar="FILE",
                      help="require HMAC-signed tokens <sender>.<hex HMAC-SHA256(key, sender)> (key: 0600)")
    p.add_argument("--idempotency_window_s", type=float, default=86_400.0,
                   help="how long an Idempotency-Key is remembered (seconds)")  # fmt: skip
    p.add_argument("--idempotency_keys", type=int, default=200_000,
                   help="most idempotency keys remembered (the oldest forgotten first; ~150 bytes each)")
    p.add_argument("--trie_dir", metavar="DIR",
                   help="a trie-mode heavy_hitters task: the directory its job's --trie_dir writes; GET "
                   "/v1/publication serves the newest publication there (the level clients report at)")
    p.add_argument(
        "--demo_page",
        metavar="DIR",
        help="also serve the browser demo of the built TypeScript client package DIR (clients/typescript): "
        "GET / (DIR/demo/index.html), GET /dist/....js, GET /v1/task; a frequency task only",
    )
    return p


def _check_limits(ns: argparse.Namespace) -> None:
    """Refuses a non-positive size, count or duration and a port outside [0, 65535] (one line, exit 2)."""
    for flag, value in (("--roll_reports", ns.roll_reports), ("--max_body_bytes", ns.max_body_bytes),
                        ("--max_batch", ns.max_batch), ("--idempotency_keys", ns.idempotency_keys),
                        ("--max_connections", ns.max_connections or 1)):  # fmt: skip
        if value < 1:
            fail(f"{flag} must be >= 1, got {value}")
    for flag, value in (("--idle_timeout_s", ns.idle_timeout_s), ("--idempotency_window_s",
                                                                  ns.idempotency_window_s)):  # fmt: skip
        if not value > 0:
            fail(f"{flag} must be > 0, got {value}")
    if not ns.roll_seconds > 0:
        fail(f"--roll_seconds must be > 0, got {ns.roll_seconds}")
    if not 0 <= ns.port <= 65535:
        fail(f"--port must be in [0, 65535], got {ns.port}")
    if (ns.output_dir is None) == (ns.output_topic is None):
        fail("give exactly one of --output_dir and --output_topic")
    if not ns.kafka_timeout_s > 0:
        fail(f"--kafka_timeout_s must be > 0, got {ns.kafka_timeout_s}")


def _task_and_demo(ns: argparse.Namespace) -> tuple[Any, DemoPage | None]:
    """The task of ``--task`` and the browser demo of ``--demo_page`` (None without it)."""
    try:
        task = load_task(ns.task)
    except TaskError as exc:
        fail(exc.one_line())
    if ns.demo_page is None:
        return task, None
    if not kind_of(task).typescript_client:
        fail(f"--demo_page needs a frequency task (the TypeScript client's oracles), not {task.kind}")
    try:
        return task, DemoPage(ns.demo_page, json.dumps(resolve_task(task)))
    except ValueError as exc:
        fail(str(exc))


def _check_trie_dir(ns: argparse.Namespace, task: Any) -> None:
    """``--trie_dir`` only for a trie-mode task, and not a file (it may not exist yet: the job creates it)."""
    if ns.trie_dir is None:
        return
    if getattr(task, "mode", None) != "trie":
        fail(f"--trie_dir needs a heavy_hitters task in trie mode (\"mode\": \"trie\"), not task "
             f"{task.task_id!r} ({task.kind})")  # fmt: skip
    if Path(ns.trie_dir).exists() and not Path(ns.trie_dir).is_dir():
        fail(f"--trie_dir {ns.trie_dir} is not a directory")


def _sender_auth(ns: argparse.Namespace) -> SenderAuth | None:
    """The senders' authentication of ``--client_tokens`` or ``--token_key`` (None: none required)."""
    try:
        if ns.client_tokens:
            return SenderAuth.from_token_file(ns.client_tokens)
        if ns.token_key:
            return SenderAuth.from_hmac_key(ns.token_key)
    except (ValueError, OSError) as exc:
        fail(f"{exc.strerror if isinstance(exc, OSError) and exc.strerror else exc}")
    return None


def _open_collector(ns: argparse.Namespace, task: Any, auth: SenderAuth | None) -> Collector:
    """The collector over ``--output_dir``, after adopting what an earlier process left there, or over
    ``--output_topic``."""
    if ns.output_topic is not None:
        return _open_topic_collector(ns, task, auth)
    try:
        checker = make_checker(task)
        writer = RollingAvroWriter(
            ns.output_dir, roll_reports=ns.roll_reports, roll_seconds=ns.roll_seconds,
            permute=checker.shuffled, senders=auth is not None,
        )  # fmt: skip
        keys = IdempotencyKeys(
            writer.directory / KEYS_JOURNAL, window_s=ns.idempotency_window_s, max_keys=ns.idempotency_keys
        )
        writer.keys = keys
        writer.adopt()  # keeps exactly the blocks whose ledger lines are durable; their keys join the journal
    except (ValueError, OSError) as exc:
        fail(str(exc))
    return Collector(
        checker, writer, max_body_bytes=ns.max_body_bytes, max_batch=ns.max_batch, auth=auth, keys=keys
    )


def _open_topic_collector(ns: argparse.Namespace, task: Any, auth: SenderAuth | None) -> Collector:
    """The collector publishing to ``--output_topic`` (a broker must answer; a shuffled task is refused:
    one message per request would keep its arrival order and times)."""
    from pipelines.collect_topic import TopicWriter
    from transforms.kafka import KafkaSourceError, check_broker, is_kafka_url, parse_kafka_url

    if not is_kafka_url(ns.output_topic):
        fail(f"--output_topic must be kafka://HOST:PORT/TOPIC, got {ns.output_topic!r}")
    try:
        checker = make_checker(task)
        if checker.shuffled:
            fail("--output_topic cannot carry a shuffled task's reports (the shuffler reads files): "
                 "use --output_dir")  # fmt: skip
        check_broker(parse_kafka_url(ns.output_topic))
        keys = IdempotencyKeys(None, window_s=ns.idempotency_window_s, max_keys=ns.idempotency_keys)
        writer = TopicWriter(ns.output_topic, timeout_s=ns.kafka_timeout_s, keys=keys)
    except (KafkaSourceError, ValueError, OSError) as exc:
        fail(str(exc))
    return Collector(  # type: ignore[arg-type]  # the file writer's interface, see collect_topic
        checker, writer, max_body_bytes=ns.max_body_bytes, max_batch=ns.max_batch, auth=auth, keys=keys
    )


def run(argv: Sequence[str] | None = None) -> int:
    """Command-line entry point: serves until SIGTERM / SIGINT; returns the exit status."""
    ns, _ = parse_job_args(_parser(), argv, beam=False)
    _check_limits(ns)
    task, demo = _task_and_demo(ns)
    _check_trie_dir(ns, task)
    collector = _open_collector(ns, task, _sender_auth(ns))

    def ready(port: int) -> None:
        _LOG.info(
            "collecting reports of task %r (%s) on http://%s:%d/v1/reports into %s", task.task_id, task.kind,
            ns.host, port, ns.output_dir or ns.output_topic,
        )  # fmt: skip
        if demo is not None:
            _LOG.info("browser demo: http://%s:%d/", ns.host, port)

    try:
        stats = asyncio.run(serve(
            collector, ns.host, ns.port, ready=ready, demo=demo, origins=ns.allow_origin,
            max_connections=ns.max_connections, idle_timeout_s=ns.idle_timeout_s, trie_dir=ns.trie_dir,
        ))  # fmt: skip
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
