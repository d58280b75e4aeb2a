"""Shared test configuration: the two test tiers and helpers every test module may use.

Tiers. ``pytest -m "not integration"`` is the fast unit tier (under two minutes); ``pytest -m integration``
holds the tests that start a service, a runner or a process. ``./run_local.sh test`` (and CI) runs both,
the fast tier first on two processes (``-n 2 --dist loadfile``: a file's tests stay in one process), then
the integration tier in one. The integration tests are marked here, at collection, by file and by test
name, so test files need not carry the marker (a test may still mark itself with
``@pytest.mark.integration``):

* whole files: :data:`INTEGRATION_FILES` (Flink mini-cluster, Pub/Sub emulator, README commands, wheel
  build);
* any test whose name contains one of :data:`INTEGRATION_WORDS` (``portable``, ``multi_processing``,
  ``watched_directory``, ``subprocess``, ...);
* the tests listed by node id in :data:`INTEGRATION_TESTS` whose names say none of that;
* any test that starts a process: its body calls ``subprocess`` (``run``, ``Popen``, ``check_output``,
  ...) or it uses the ``run_cli`` fixture (a CLI run in a fresh interpreter costs seconds of imports).

Helpers (fixtures): ``repo_root``, ``seed_sequence`` / ``rng`` (one root ``numpy.random.SeedSequence``,
a child per test, so a failure reproduces), ``write_json``, ``frequency_task_file``, ``range_task_file``
and ``run_cli`` (runs a command in a subprocess with the repository's environment).
"""

from __future__ import annotations

import inspect
import json
import logging
import os
import re
import subprocess
import sys
import zlib
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pytest

REPO_ROOT = Path(__file__).resolve().parent.parent

#: Root entropy of every test's ``seed_sequence`` (the child is keyed by the test's node id).
ROOT_SEED = 2026_12_01

#: Test files that are integration tests as a whole.
INTEGRATION_FILES = frozenset(
    {
        "test_flink_runner.py",  # Flink job server (Java) + mini-cluster
        "test_pubsub_emulator.py",  # the Pub/Sub emulator (Java) and a streaming job in a subprocess
        "test_readme.py",  # every README command, as written
        "test_packaging.py",  # builds a wheel
    }
)

#: A test whose name contains one of these (case-insensitive) is an integration test.
INTEGRATION_WORDS = (
    "flink",
    "pubsub",
    "emulator",
    "portable",
    "multi_processing",
    "watched_directory",
    "subprocess",
    "readme",
)

#: Integration tests whose names do not say so: ``file::test`` (parameters ignored).
INTEGRATION_TESTS = frozenset(
    {
        "test_pipeline_frequency.py::test_cli_help_and_bad_arguments",  # `python -m` in a subprocess
    }
)


_STARTS_PROCESS = re.compile(r"\bsubprocess\.(run|Popen|call|check_call|check_output)\b")


def _starts_a_process(item: pytest.Item) -> bool:
    if "run_cli" in getattr(item, "fixturenames", ()):
        return True
    fn = getattr(item, "function", None)
    try:
        source = inspect.getsource(fn) if fn is not None else ""
    except (OSError, TypeError):
        return False
    return _STARTS_PROCESS.search(source) is not None


#: Markers of tests that need a service; they are integration tests too.
SERVICE_MARKERS = ("integration", "postgres", "browser", "failover")


def is_integration(item: pytest.Item) -> bool:
    """Whether a collected test belongs to the integration tier (see the module docstring)."""
    if any(item.get_closest_marker(m) is not None for m in SERVICE_MARKERS):
        return True
    path = Path(str(item.fspath))
    if path.name in INTEGRATION_FILES:
        return True
    name = getattr(item, "originalname", None) or item.name.split("[", 1)[0]
    if f"{path.name}::{name}" in INTEGRATION_TESTS:
        return True
    lowered = name.lower()
    return any(word in lowered for word in INTEGRATION_WORDS) or _starts_a_process(item)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        if is_integration(item) and item.get_closest_marker("integration") is None:
            item.add_marker(pytest.mark.integration)


#: Where these machines have the Pub/Sub emulator (``PUBSUB_EMULATOR_BIN`` overrides it).
PUBSUB_EMULATOR_DEFAULT = "/usr/lib/google-cloud-sdk/platform/pubsub-emulator/bin/cloud-pubsub-emulator"


def pubsub_emulator_binary() -> str | None:
    """The Pub/Sub emulator's path when it is installed and executable, else None."""
    path = os.environ.get("PUBSUB_EMULATOR_BIN", PUBSUB_EMULATOR_DEFAULT)
    return path if os.path.isfile(path) and os.access(path, os.X_OK) else None


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


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> None:
    """``LDP_REQUIRE_PUBSUB=1`` (CI): a Pub/Sub emulator test fails instead of skipping when the emulator
    is missing (``LDP_REQUIRE_FLINK=1`` does the same for Flink in tests/test_flink_runner.py)."""
    if os.environ.get("LDP_REQUIRE_PUBSUB") != "1":
        return
    name = item.name.lower()
    if ("pubsub" in Path(str(item.fspath)).name or "pubsub" in name or "emulator" in name) and (
        pubsub_emulator_binary() is None
    ):
        pytest.fail(
            "LDP_REQUIRE_PUBSUB=1 but no Pub/Sub emulator at "
            f"{os.environ.get('PUBSUB_EMULATOR_BIN', PUBSUB_EMULATOR_DEFAULT)}"
        )


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


#: Where these machines have PostgreSQL 15 (``LDP_PG_BIN`` overrides it).
POSTGRES_BIN_DEFAULT = "/usr/lib/postgresql/15/bin"


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
