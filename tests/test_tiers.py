"""The test tiers' guard and the service markers of tests/conftest.py (docs/testing.md), checked by running
pytest in this process on a scratch directory that holds a copy of the conftest and a few small tests."""

from __future__ import annotations

import itertools
import sys
from pathlib import Path

import pytest

CONFTEST = Path(__file__).resolve().parent / "conftest.py"

UNMARKED = '''
import subprocess
import sys

import pytest


def test_plain():
    assert True


def test_calls_subprocess():
    subprocess.run([sys.executable, "-c", "pass"], check=True)


@pytest.mark.parametrize("x", [1, 2])
def test_uses_run_cli(run_cli, x):
    run_cli("true")


@pytest.mark.postgres
def test_service_without_integration():
    pass


class TestGrouped:
    def test_method_calls_subprocess(self):
        subprocess.check_output([sys.executable, "-c", "pass"])
'''

MARKED = '''
import subprocess
import sys

import pytest

pytestmark = pytest.mark.integration


def test_calls_subprocess():
    subprocess.run([sys.executable, "-c", "pass"], check=True)


@pytest.mark.node
def test_needs_node():
    pass


@pytest.fixture(params=["a", pytest.param("b", marks=[pytest.mark.integration, pytest.mark.node])])
def store(request):
    return request.param


def test_store(store):
    pass
'''


class _Reports:
    """Collects the collection and test reports of an in-process pytest run."""

    def __init__(self, prefix: str) -> None:
        self.prefix = prefix
        self.collect_failures: list[tuple[str, str]] = []
        self.outcomes: dict[str, tuple[str, str]] = {}

    def pytest_collectreport(self, report: pytest.CollectReport) -> None:
        if report.failed:
            self.collect_failures.append((report.nodeid, str(report.longrepr).replace(self.prefix, "")))

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        if report.when == "call" or report.outcome != "passed":
            reason = report.longrepr[2] if report.skipped and isinstance(report.longrepr, tuple) else ""
            self.outcomes[report.nodeid.split("::", 1)[1]] = (report.outcome, str(reason or report.longrepr))


def _calls(name: str) -> str:
    """The guard's words for a test whose body calls ``subprocess.<name>``."""
    return f"starts a process (it calls subprocess.{name})"


ADD = "but has no integration marker: add @pytest.mark.integration"


def _run(tmp_path: Path, source: str, *args: str) -> tuple[int, _Reports]:
    """pytest on a fresh directory under ``tmp_path`` (its modules get names of their own, so neither this
    session's ``conftest`` nor an earlier run's modules are reused, and they are dropped afterwards)."""
    name = f"scratch{next(_RUNS)}"
    work = tmp_path / name
    work.mkdir()
    (work / "conftest.py").write_text(CONFTEST.read_text(encoding="utf-8"), encoding="utf-8")
    (work / "test_scratch.py").write_text(source, encoding="utf-8")
    (tmp_path / "pytest.ini").write_text("[pytest]\n", encoding="utf-8")
    reports = _Reports(f"{name}/")
    try:
        status = pytest.main(
            ["-q", "-p", "no:cacheprovider", "-p", "no:xdist", "--import-mode=importlib",
             "-c", str(tmp_path / "pytest.ini"), "--rootdir", str(tmp_path), *args, str(work)],
            plugins=[reports],
        )  # fmt: skip
    finally:
        for module in [m for m in sys.modules if m == name or m.startswith(name + ".")]:
            del sys.modules[module]
    return int(status), reports


_RUNS = itertools.count(1)


def test_an_unmarked_process_or_service_test_is_a_collection_error_naming_it(tmp_path):
    status, reports = _run(tmp_path, UNMARKED, "-m", "not integration")
    assert status == pytest.ExitCode.INTERRUPTED  # a collection error stops the run
    lines = "\n".join(text for _, text in reports.collect_failures).splitlines()
    assert sorted(lines) == sorted(
        [
            f"test_scratch.py::test_calls_subprocess {_calls('run')} {ADD}",
            f"test_scratch.py::test_uses_run_cli starts a process (the run_cli fixture) {ADD}",
            f"test_scratch.py::test_service_without_integration needs a service (the postgres marker) {ADD}",
        ]
    )
    assert not reports.outcomes  # nothing ran, not even test_plain


def test_a_class_is_checked_like_a_module(tmp_path):
    imports, grouped = UNMARKED.split("def test_plain", 1)[0], UNMARKED.split("class TestGrouped", 1)[1]
    source = imports + "class TestGrouped" + grouped
    status, reports = _run(tmp_path, source)
    assert status == pytest.ExitCode.INTERRUPTED
    assert [text for _, text in reports.collect_failures] == [
        f"test_scratch.py::TestGrouped::test_method_calls_subprocess {_calls('check_output')} {ADD}"
    ]


def test_a_missing_service_skips_with_the_reason_or_fails_when_required(tmp_path, monkeypatch):
    empty = tmp_path / "empty-bin"
    empty.mkdir()
    monkeypatch.setenv("PATH", str(empty))  # no node, no npm
    monkeypatch.delenv("LDP_REQUIRE_NODE", raising=False)
    status, reports = _run(tmp_path, MARKED, "-k", "needs_node or store")
    assert status == pytest.ExitCode.OK and not reports.collect_failures
    assert reports.outcomes["test_needs_node"] == (
        "skipped",
        "Skipped: node and npm not found on PATH; LDP_REQUIRE_NODE=1 makes this a failure",
    )
    assert reports.outcomes["test_store[a]"][0] == "passed"  # the parameter without the marker runs
    assert reports.outcomes["test_store[b]"][0] == "skipped"

    monkeypatch.setenv("LDP_REQUIRE_NODE", "1")
    status, reports = _run(tmp_path, MARKED, "-k", "needs_node")
    assert status == pytest.ExitCode.TESTS_FAILED
    outcome, text = reports.outcomes["test_needs_node"]
    assert outcome == "failed" and "LDP_REQUIRE_NODE=1 but node and npm not found on PATH" in text
