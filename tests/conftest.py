"""Shared test configuration: the test tiers, the service markers and helpers every test module may use.

Markers (declared in pyproject.toml; ``--strict-markers`` refuses any other). Every test file carries its
own, as ``pytestmark = [...]`` at module level or as decorators on the tests that need them:

* ``integration``: the test starts a process, a runner or a service (a CLI in a fresh interpreter, a
  streaming job over a watched directory, the portable or multi-processing runner, Flink, the Pub/Sub
  emulator, PostgreSQL, a browser, Prism, node, the README's commands, a wheel build), or runs a whole job
  on the DirectRunner that takes seconds (the fast tier's budget);
* ``statistical``: a Monte Carlo check against a tolerance stated in the test (either tier);
* the services (always with ``integration``): :data:`SERVICES` (``flink``, ``pubsub``, ``postgres``,
  ``browser``, ``prism``, ``node``); ``failover`` (a Flink TaskManager killed mid-stream).

Tiers. ``pytest -m "not integration"`` is the fast tier (under three minutes on two cores);
``pytest -m integration`` is the rest. ``./run_local.sh test`` (and CI) runs both, the fast tier first on
two processes (``-n 2 --dist loadfile``: a file's tests stay in one process), then the integration tier.

Nothing is classified by file or test name. One guard keeps the tiers from drifting: at collection, a test
without the ``integration`` marker that uses the ``run_cli`` fixture, whose body calls ``subprocess``
(``run``, ``Popen``, ``call``, ``check_call``, ``check_output``) or that carries a service marker makes
its module (or class) a collection error, one line per such test naming it and the marker to add; it is
checked before ``-m`` deselects anything, so the fast tier fails too (``tests/test_tiers.py``).

Services. Before a test with a service marker runs, the service's parts are looked for (:data:`SERVICES`);
when they are missing the test skips with the reason, or fails when the service's ``LDP_REQUIRE_*``
variable is ``1`` (CI, ``.ci/run``). ``LDP_SKIP_FLINK=1`` skips the Flink tests whatever is installed.
A test may check more of its service itself (the Flink cluster's jars, a built TypeScript client).

Helpers (fixtures): ``repo_root``, ``seed_sequence`` / ``rng`` (one root ``numpy.random.SeedSequence``,
a child per test, so a failure reproduces), ``write_json``, ``frequency_task_file``, ``range_task_file``,
``run_cli`` (runs a command in a subprocess with the repository's environment), ``emulator`` (a Pub/Sub
emulator per module) and ``postgres_url`` (a throw-away PostgreSQL server per session).
"""

from __future__ import annotations

import functools
import inspect
import json
import logging
import os
import re
import shutil
import subprocess
import sys
import zlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pytest

REPO_ROOT = Path(__file__).resolve().parent.parent

#: Root entropy of every test's ``seed_sequence`` (the child is keyed by the test's node id).
ROOT_SEED = 2026_12_01

#: Where these machines have the Pub/Sub emulator (``PUBSUB_EMULATOR_BIN`` overrides it).
PUBSUB_EMULATOR_DEFAULT = "/usr/lib/google-cloud-sdk/platform/pubsub-emulator/bin/cloud-pubsub-emulator"

#: Where these machines have PostgreSQL 15 (``LDP_PG_BIN`` overrides it).
POSTGRES_BIN_DEFAULT = "/usr/lib/postgresql/15/bin"

#: The Flink job-server jar tools/flink/get_job_server.sh builds (``LDP_FLINK_JOB_SERVER_JAR`` overrides it).
FLINK_JOB_SERVER_JAR = REPO_ROOT / ".cache" / "flink" / "job-server.jar"


def pubsub_emulator_binary() -> str | None:
    """The Pub/Sub emulator's path when it is installed and executable, else None."""
    path = os.environ.get("PUBSUB_EMULATOR_BIN", PUBSUB_EMULATOR_DEFAULT)
    return path if os.path.isfile(path) and os.access(path, os.X_OK) else None


def _pubsub_missing() -> str | None:
    if pubsub_emulator_binary() is None:
        return f"no Pub/Sub emulator at {os.environ.get('PUBSUB_EMULATOR_BIN', PUBSUB_EMULATOR_DEFAULT)}"
    return None


def _flink_missing() -> str | None:
    configured = os.environ.get("LDP_FLINK_JOB_SERVER_JAR")
    jar = Path(configured) if configured else FLINK_JOB_SERVER_JAR
    if not jar.is_file():
        return f"no Flink job-server jar at {jar}: run `bash tools/flink/get_job_server.sh` (docs/flink.md)"
    if shutil.which("java") is None:
        return "the Flink job server needs `java` on PATH"
    return None


def _postgres_missing() -> str | None:
    bindir = Path(os.environ.get("LDP_PG_BIN", POSTGRES_BIN_DEFAULT))
    if not ((bindir / "initdb").is_file() and (bindir / "postgres").is_file()):
        return f"no PostgreSQL server binaries in {bindir} (set LDP_PG_BIN)"
    return None


def _browser_missing() -> str | None:
    from pipelines.dashboard_app.browser import browser_missing

    return browser_missing()


def _prism_missing() -> str | None:
    from transforms.runners import find_prism_binary

    if find_prism_binary() is None:
        return "no Prism binary: run `bash tools/prism/get_prism.sh` (docs/live.md)"
    return None


def _node_missing() -> str | None:
    absent = [name for name in ("node", "npm") if shutil.which(name) is None]
    return f"{' and '.join(absent)} not found on PATH" if absent else None


def _kafka_missing() -> str | None:
    from kafka_helpers import kafka_missing

    return kafka_missing()


@dataclass(frozen=True)
class Service:
    """An external service a test may need: the variable that turns its absence into a failure, and a
    function saying why it cannot run here (None: it can)."""

    require_env: str
    missing: Callable[[], str | None]


#: The service markers: the marker's name -> its :class:`Service`.
SERVICES: dict[str, Service] = {
    "flink": Service("LDP_REQUIRE_FLINK", _flink_missing),
    "pubsub": Service("LDP_REQUIRE_PUBSUB", _pubsub_missing),
    "postgres": Service("LDP_REQUIRE_POSTGRES", _postgres_missing),
    "browser": Service("LDP_REQUIRE_BROWSER", _browser_missing),
    "prism": Service("LDP_REQUIRE_PRISM", _prism_missing),
    "node": Service("LDP_REQUIRE_NODE", _node_missing),
    "kafka": Service("LDP_REQUIRE_KAFKA", _kafka_missing),
}

#: Markers that are services too (they need ``integration``) but are looked for by their tests.
OTHER_SERVICE_MARKERS = ("failover",)

#: What the guard tells the author of an unmarked test to add.
ADD_MARKER = "@pytest.mark.integration"

_CALLS_SUBPROCESS = re.compile(r"\bsubprocess\.(run|Popen|call|check_call|check_output)\b")


def _body_calls_subprocess(item: pytest.Item) -> str | None:
    fn = getattr(item, "function", None)
    try:
        source = inspect.getsource(fn) if fn is not None else ""
    except (OSError, TypeError):
        return None
    found = _CALLS_SUBPROCESS.search(source)
    return found.group(0) if found else None


def needs_integration(item: pytest.Item) -> str | None:
    """Why ``item`` must carry the ``integration`` marker (None: nothing says it must)."""
    for name in (*SERVICES, *OTHER_SERVICE_MARKERS):
        if item.get_closest_marker(name) is not None:
            return f"needs a service (the {name} marker)"
    if "run_cli" in getattr(item, "fixturenames", ()):
        return "starts a process (the run_cli fixture)"
    call = _body_calls_subprocess(item)
    return f"starts a process (it calls {call})" if call else None


@pytest.hookimpl(wrapper=True)
def pytest_make_collect_report(collector: pytest.Collector):
    """The guard of the module docstring: a module (or class) holding a test that needs the ``integration``
    marker and lacks it fails to collect, one line per such test, whatever ``-m`` selects."""
    report = yield
    if report.outcome != "passed":
        return report
    problems: dict[str, str] = {}
    for item in report.result:
        if not isinstance(item, pytest.Item) or item.get_closest_marker("integration") is not None:
            continue
        why = needs_integration(item)
        if why is not None:
            test = item.nodeid.split("[", 1)[0]
            problems.setdefault(test, f"{test} {why} but has no integration marker: add {ADD_MARKER}")
    if problems:
        report.outcome = "failed"
        report.longrepr = "\n".join(problems.values())
        report.result = []
    return report


@functools.cache
def service_missing(name: str) -> str | None:
    """Why the service of marker ``name`` cannot run here (None: it can); looked for once per session."""
    return SERVICES[name].missing()


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> None:
    """A test with a service marker skips with the reason when the service is missing, or fails when its
    ``LDP_REQUIRE_*`` variable is ``1`` (CI); before any fixture starts anything."""
    for name, service in SERVICES.items():
        if item.get_closest_marker(name) is None:
            continue
        if name == "flink" and os.environ.get("LDP_SKIP_FLINK") == "1":
            pytest.skip("LDP_SKIP_FLINK=1")
        reason = service_missing(name)
        if reason is None:
            continue
        if os.environ.get(service.require_env) == "1":
            pytest.fail(f"{service.require_env}=1 but {reason}")
        pytest.skip(f"{reason}; {service.require_env}=1 makes this a failure")


@pytest.fixture(scope="module")
def emulator(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory):
    """A Pub/Sub emulator on 127.0.0.1 for one test module (its ``PROJECT`` constant names the project),
    with ``PUBSUB_EMULATOR_HOST`` pointing at it; stopped by PID and the variable restored afterwards."""
    from pipelines.pubsub_emulator import PubSubEmulator

    project = getattr(request.module, "PROJECT", "ldp-test")
    log = tmp_path_factory.mktemp("emulator") / "emulator.log"
    emu = PubSubEmulator(project=project, log_path=str(log)).start()
    old = os.environ.get("PUBSUB_EMULATOR_HOST")
    os.environ["PUBSUB_EMULATOR_HOST"] = emu.host
    try:
        yield emu
    finally:
        emu.stop()
        if old is None:
            os.environ.pop("PUBSUB_EMULATOR_HOST", None)
        else:
            os.environ["PUBSUB_EMULATOR_HOST"] = old


@pytest.fixture(autouse=True)
def _isolate_cli_logging():
    """A command run in a test installs its log handler and levels (pipelines.cli.setup_logging); undo
    that after the test so later tests' captured output does not depend on which commands ran before."""
    yield
    cli = sys.modules.get("pipelines.cli")
    handler = getattr(cli, "_HANDLER", None)
    if handler is not None:
        logging.getLogger().removeHandler(handler)
        cli._HANDLER = None
        logging.getLogger().setLevel(logging.WARNING)
        for name in cli._OUR_LOGGERS:
            logging.getLogger(name).setLevel(logging.NOTSET)


@pytest.fixture(scope="session")
def repo_root() -> Path:
    """The repository's root directory."""
    return REPO_ROOT


@pytest.fixture
def seed_sequence(request: pytest.FixtureRequest) -> np.random.SeedSequence:
    """A ``SeedSequence`` for this test: the child of :data:`ROOT_SEED` keyed by the test's node id, so
    each test has its own reproducible stream whatever runs before it."""
    key = zlib.crc32(request.node.nodeid.encode("utf-8"))
    return np.random.SeedSequence(ROOT_SEED, spawn_key=(key,))


@pytest.fixture
def rng(seed_sequence: np.random.SeedSequence) -> np.random.Generator:
    """A ``numpy.random.Generator`` from :func:`seed_sequence` (never the global ``numpy.random``)."""
    return np.random.default_rng(seed_sequence)


@pytest.fixture
def write_json(tmp_path: Path) -> Callable[[str, Any], Path]:
    """``write_json(name, obj)`` writes ``obj`` as JSON to ``tmp_path / name`` and returns the path."""

    def write(name: str, obj: Any) -> Path:
        path = tmp_path / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(obj) + "\n", encoding="utf-8")
        return path

    return write


@pytest.fixture
def frequency_task_file(write_json: Callable[[str, Any], Path]) -> Callable[..., Path]:
    """``frequency_task_file(name="task.json", **fields)``: a frequency task file (OLH, epsilon 1,
    d = 64 unless overridden)."""

    def make(name: str = "task.json", **fields: Any) -> Path:
        task = {"task_id": "test-freq", "mechanism": "olh", "epsilon": 1.0, "domain_size": 64, **fields}
        return write_json(name, task)

    return make


@pytest.fixture
def range_task_file(write_json: Callable[[str, Any], Path]) -> Callable[..., Path]:
    """``range_task_file(name="range_task.json", **fields)``: a range-query task file (HDG, epsilon 1,
    three attributes of domain 16 unless overridden)."""

    def make(name: str = "range_task.json", **fields: Any) -> Path:
        task = {
            "task_id": "test-range",
            "mechanism": "hdg",
            "epsilon": 1.0,
            "expected_users": 20_000,
            "attributes": [{"name": n, "domain_size": 16} for n in ("age", "income", "score")],
            **fields,
        }
        return write_json(name, task)

    return make


def process_running(pid: int) -> bool:
    """The process exists and is not a zombie: a killed process whose parent is gone waits for PID 1 to
    reap it, which some sandboxes never do, so ``os.kill(pid, 0)`` alone would call it running."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state != "Z"


def venv_env(extra: dict[str, str] | None = None) -> dict[str, str]:
    """The environment for a subprocess: this interpreter's ``bin`` first on ``PATH`` (so ``python`` and
    ``ldp-beam`` are the project's), the repository importable, plus ``extra``."""
    env = dict(os.environ)
    bindir = str(Path(sys.executable).parent)
    env["PATH"] = bindir + os.pathsep + env.get("PATH", "")
    env["PYTHONPATH"] = str(REPO_ROOT) + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    env.pop("PYTHONSTARTUP", None)
    env.update(extra or {})
    return env


@pytest.fixture
def run_cli() -> Callable[..., subprocess.CompletedProcess]:
    """``run_cli(*args, cwd=None, env=None, timeout=300, module=None)`` runs a command in a subprocess
    (``module``: ``python -m MODULE ARGS``; else ``ARGS`` as given, e.g. ``"ldp-beam", "simulate"``) with
    :func:`venv_env`, captures text output and returns the ``CompletedProcess`` (any exit status)."""

    def run(
        *args: str,
        cwd: str | os.PathLike[str] | None = None,
        env: dict[str, str] | None = None,
        timeout: float = 300.0,
        module: str | None = None,
    ) -> subprocess.CompletedProcess:
        cmd: Sequence[str] = [sys.executable, "-m", module, *args] if module else list(args)
        return subprocess.run(
            cmd,
            cwd=str(cwd or REPO_ROOT),
            env=venv_env(env),
            capture_output=True,
            text=True,
            timeout=timeout,
        )

    return run


@pytest.fixture(scope="session")
def postgres_url():
    """A throw-away PostgreSQL 15 server for the test session: ``initdb`` in a fresh temporary directory,
    ``postgres`` on a free 127.0.0.1 port with its unix socket in that directory (trust auth, user
    ``ldp``, fsync off), stopped by its PID at the end. Yields ``postgresql://ldp@127.0.0.1:PORT/postgres``.

    PostgreSQL refuses to run as root: as root, the directory is given to the ``nobody`` system user and
    both commands run through ``runuser -u nobody``. Without the binaries the test skips with the reason,
    unless ``LDP_REQUIRE_POSTGRES=1`` (CI), where it fails."""
    import shutil
    import signal
    import socket
    import tempfile
    import time

    bindir = Path(os.environ.get("LDP_PG_BIN", POSTGRES_BIN_DEFAULT))
    initdb, postgres = bindir / "initdb", bindir / "postgres"

    def unavailable(reason: str) -> None:
        if os.environ.get("LDP_REQUIRE_POSTGRES") == "1":
            pytest.fail(f"LDP_REQUIRE_POSTGRES=1 but {reason}")
        pytest.skip(reason)

    if not (initdb.is_file() and postgres.is_file()):
        unavailable(f"no PostgreSQL server binaries in {bindir} (set LDP_PG_BIN)")
    as_user: list[str] = []
    tmp = tempfile.mkdtemp(prefix="ldp-pg-")
    if os.geteuid() == 0:
        runuser = shutil.which("runuser")
        if runuser is None:
            unavailable("running as root and no runuser to start PostgreSQL as the nobody user")
        import pwd

        nobody = pwd.getpwnam("nobody")
        os.chown(tmp, nobody.pw_uid, nobody.pw_gid)
        as_user = [runuser, "-u", "nobody", "--"]
    data = os.path.join(tmp, "data")
    init = subprocess.run(
        [*as_user, str(initdb), "-D", data, "-U", "ldp", "--auth=trust", "-E", "UTF8", "--no-sync"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    if init.returncode != 0:
        shutil.rmtree(tmp, ignore_errors=True)
        unavailable(f"initdb failed: {(init.stderr or init.stdout).strip().splitlines()[-1:]}")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    log = open(os.path.join(tmp, "postgres.log"), "wb")  # noqa: SIM115 - closed below
    proc = subprocess.Popen(
        [*as_user, str(postgres), "-D", data, "-h", "127.0.0.1", "-p", str(port), "-k", tmp,
         "-c", "fsync=off", "-c", "full_page_writes=off", "-c", "synchronous_commit=off"],
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    url = f"postgresql://ldp@127.0.0.1:{port}/postgres"
    pid_file = os.path.join(data, "postmaster.pid")
    server_pid: int | None = None
    try:
        try:
            import psycopg

            deadline = time.monotonic() + 60
            while True:
                if proc.poll() is not None:
                    raise RuntimeError(f"postgres exited with {proc.returncode}; see {log.name}")
                try:
                    with psycopg.connect(url, connect_timeout=2):
                        break
                except psycopg.OperationalError:
                    if time.monotonic() > deadline:
                        raise RuntimeError(
                            f"postgres did not accept connections within 60 s; see {log.name}"
                        ) from None
                    time.sleep(0.2)
        except RuntimeError as exc:
            unavailable(str(exc))  # skips (or fails); the server is stopped below either way
        yield url
    finally:
        if os.path.exists(pid_file):
            with open(pid_file, encoding="utf-8") as fh:
                server_pid = int(fh.readline().strip())  # the postmaster (runuser's child when as root)
        if server_pid is not None:
            try:
                os.kill(server_pid, signal.SIGINT)  # fast shutdown
            except ProcessLookupError:
                pass
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            if server_pid is not None:
                os.kill(server_pid, signal.SIGKILL)
            proc.kill()
            proc.wait(timeout=10)
        log.close()
        shutil.rmtree(tmp, ignore_errors=True)
