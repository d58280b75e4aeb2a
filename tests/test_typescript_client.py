"""The TypeScript client (``clients/typescript``): build, conformance vectors, audit of its own output.

Runs ``npm ci && npm test`` in the package (``npm test`` compiles to ``dist/`` and runs every test there,
among them the vectors of ``schemas/vectors/v1``), then has the client draw 200,000 reports per input value
with WebCrypto randomness (``node dist/src/cli.js``) and audits them here: every report accepted by the
project's validator; the eps-LDP audit of ``tests/test_oracles.py`` at eps 0.5, 1 and 4 (one-sided
Clopper-Pearson bounds at level 1e-6 per output; fail only when the ratio most favourable to the mechanism
exceeds e^eps); and a two-sample chi-square test against ``oracle.encode`` of the Python core (fail at
p-value < 1e-6). The memoized mechanisms (``memo_<mechanism>.json`` under ``node --test``): the
instantaneous step on two fixed memos audited against e^epsilon_instantaneous, and one report per fresh
WebCrypto secret audited against e^epsilon_1 (eps 0.5, 1, 4), accepted by the validator and compared with
``oracle.encode``. Heavy-hitters reports (``pem``): the same audit on (level, which of two strings the value
supports), the validator and a chi-square test against ``PEM.encode``. The client reads the task's client
parameters (``wire.client.client_params_document``, ``--wire``), so its thresholds equal the Python release's
exactly.

Skipped, with the reason, when node or npm is missing, unless ``LDP_REQUIRE_NODE=1``.
"""

from __future__ import annotations

import base64
import json
import math
import os
import re
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest
from scipy import stats

from ldp.oracles import OLH
from ldp.reports import Reports
from ldp.task import parse_task
from tests.test_oracles import _worst_ratio
from tests.test_wire_vectors import _wire_keys
from wire.client import client_params_document
from wire.json_form import report_from_json
from wire.validate import ReportValidator
from wire.vectors import BYTE_MECHANISMS, MEMO_BYTE_MECHANISMS, memo_wire_params, wire_params

#: every test drives node in a subprocess (a minute in all)
pytestmark = [pytest.mark.integration, pytest.mark.node]

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "clients" / "typescript"
N_PER_VALUE = 200_000
D = 6


def _require_node() -> tuple[str, str]:
    node, npm = shutil.which("node"), shutil.which("npm")
    if node and npm:
        return node, npm
    missing = " and ".join(name for name, path in (("node", node), ("npm", npm)) if not path)
    if os.environ.get("LDP_REQUIRE_NODE") == "1":
        pytest.fail(f"{missing} not found on PATH and LDP_REQUIRE_NODE=1")
    pytest.skip(f"{missing} not found on PATH (set LDP_REQUIRE_NODE=1 to make this a failure)")


def _run(cmd: list[str], timeout: float) -> subprocess.CompletedProcess:
    proc = subprocess.run(cmd, cwd=PACKAGE, capture_output=True, text=True, timeout=timeout)
    if proc.returncode:
        raise AssertionError(
            f"{' '.join(cmd)} failed ({proc.returncode}):\n{proc.stdout[-4000:]}\n{proc.stderr[-4000:]}"
        )
    return proc


@pytest.fixture(scope="module")
def npm_test() -> tuple[str, str]:
    """The package installed from its lock file, then ``npm test`` (its ``pretest`` compiles ``dist/``, once);
    returns the node executable and the test run's output."""
    node, npm = _require_node()
    _run([npm, "ci", "--no-audit", "--no-fund"], timeout=600)
    proc = _run([npm, "test"], timeout=600)
    return node, proc.stdout


@pytest.fixture(scope="module")
def built(npm_test) -> str:
    """The node executable, once the package is compiled (by ``npm test``)."""
    return npm_test[0]


def test_npm_test_builds_and_runs_every_typescript_test(npm_test):
    out = npm_test[1]
    declared = sum(len(re.findall(r"^\s*test\(", f.read_text(encoding="utf-8"), re.M))
                   for f in (PACKAGE / "test").glob("*.test.ts"))
    ran = re.search(r"^# tests (\d+)$", out, re.M)
    assert declared and ran and int(ran.group(1)) >= declared, out[-2000:]
    assert "# fail 0" in out, out[-2000:]


def _sample(node: str, task: dict, value: int, out: Path, extra: tuple[str, ...] = (),
            count: int = N_PER_VALUE) -> dict:
    """``count`` reports of ``value`` drawn by the client, which reads the task's client parameters
    (``python -m wire.client``: the thresholds as integers)."""
    task_file = out.with_suffix(".task.json")
    task_file.write_text(json.dumps(task), encoding="utf-8")
    wire_file = out.with_suffix(".wire.json")
    wire_file.write_text(json.dumps(client_params_document(parse_task(task))), encoding="utf-8")
    _run([node, "dist/src/cli.js", "--task", str(task_file), "--wire", str(wire_file), "--value", str(value),
          "--count", str(count), "--out", str(out), *extra], timeout=600)
    return json.loads(out.read_text(encoding="utf-8"))


def _reports(doc: dict, d: int) -> Reports:
    """The sampled payload columns as a numpy batch."""
    fields = {}
    if "value" in doc:
        fields["values"] = np.array(doc["value"], dtype=np.int64)
    if "seed" in doc:
        fields["seeds"] = np.array(doc["seed"]).astype(np.int64).view(np.uint64)
    if "bits" in doc:
        raw = b"".join(base64.b64decode(s) for s in doc["bits"])
        fields["bits"] = np.frombuffer(raw, dtype=np.uint8).reshape(len(doc["bits"]), (d + 7) // 8)
    if "items" in doc:
        fields["items"] = np.array(doc["items"], dtype=np.int64)
    return Reports(**fields)


def _records(doc: dict, task_id: str, count: int) -> list[dict]:
    """The first ``count`` sampled reports as JSON-form reports."""
    out = []
    for i in range(count):
        rec = {"task_id": task_id, "schema_version": 2, "event_time": 1767225600000 + i, "group": 0}
        for member in ("value", "seed", "bits", "items"):
            rec[member] = doc[member][i] if member in doc else None
        out.append(rec)
    return out


@pytest.mark.parametrize("eps", [0.5, 1.0, 4.0])
@pytest.mark.parametrize("mechanism", BYTE_MECHANISMS)
@pytest.mark.statistical
def test_typescript_output_passes_the_epsilon_ldp_audit(built, mechanism, eps, tmp_path):
    task_json = {"task_id": f"ts-{mechanism}", "mechanism": mechanism, "epsilon": eps, "domain_size": D}
    task = parse_task(task_json)
    oracle = task.make_oracle()
    docs = [_sample(built, task_json, v, tmp_path / f"v{v}.json") for v in (0, D - 1)]
    for doc in docs:
        assert doc["count"] == N_PER_VALUE
        got = doc["params"]
        want = wire_params(oracle)
        assert {k: v for k, v in got.items() if k not in ("p", "q")} == \
            {k: v for k, v in want.items() if k not in ("p", "q")}
    records = _records(docs[0], task.task_id, 2000)
    batch = ReportValidator(task).validate([report_from_json(r) for r in records])
    assert not batch.dead_letters and batch.n_accepted == 2000
    reports = [_reports(doc, D) for doc in docs]
    ok, _ = oracle.validate(reports[0])
    assert ok.all()
    k1, k2 = (_wire_keys(oracle, r, 0, D - 1) for r in reports)
    assert _worst_ratio(k1, k2) <= math.exp(eps)
    # the same distribution as the Python oracle's own encoder (input 0)
    rng = np.random.default_rng(np.random.SeedSequence(20261201, spawn_key=(BYTE_MECHANISMS.index(mechanism),
                                                                              int(2 * eps))))
    py = _wire_keys(oracle, oracle.encode(np.zeros(N_PER_VALUE, dtype=np.int64), rng=rng), 0, D - 1)
    keys = np.union1d(k1, py)
    table = np.stack([np.bincount(np.searchsorted(keys, x), minlength=len(keys)) for x in (k1, py)])
    table = table[:, table.sum(axis=0) >= 10]  # cells with enough mass for the chi-square approximation
    if table.shape[1] > 1:
        assert stats.chi2_contingency(table)[1] > 1e-6
    if isinstance(oracle, OLH):  # the seeds are uniform 64-bit words: their top bit is a fair coin
        top = (reports[0].seeds >> np.uint64(63)).astype(np.int64)
        assert abs(top.mean() - 0.5) < 5 * math.sqrt(0.25 / N_PER_VALUE)


#: reports per input of the memoized mechanisms' audits
N_MEMO = 100_000


def _memo_task(mechanism: str, eps: float) -> dict:
    """A memoized task whose one report costs ``eps`` (``epsilon_inf = 2 eps``)."""
    return {"task_id": f"ts-{mechanism}", "mechanism": mechanism, "epsilon": 2 * eps, "domain_size": D,
            "params": {"epsilon_1": eps}}


def _check_params(doc: dict, oracle) -> None:
    got, want = doc["params"], memo_wire_params(oracle)
    assert set(got) == set(want)
    for key, value in want.items():
        if isinstance(value, float):  # reference doubles, unused by the procedure
            assert abs(got[key] - value) <= 2**-50, key
        else:
            assert got[key] == value, key


@pytest.mark.parametrize("eps", [0.5, 1.0, 4.0])
@pytest.mark.parametrize("mechanism", MEMO_BYTE_MECHANISMS)
@pytest.mark.statistical
def test_typescript_memo_instantaneous_step_passes_the_epsilon_ldp_audit(built, mechanism, eps, tmp_path):
    """The instantaneous step alone, on two memos as far apart as possible (GRR types: 0 and size - 1;
    rappor: all bits 0 and all bits 1, differing in all d bits): the Clopper-Pearson audit at level 1e-6
    per output bounds the ratio by e^epsilon_instantaneous (ln(p2/q2); rappor: d ln(s/(1-s)))."""
    task_json = _memo_task(mechanism, eps)
    oracle = parse_task(task_json).make_oracle()
    size = oracle.g if oracle.uses_seed else D
    memos = ("0" * D, "1" * D) if mechanism == "rappor" else ("0", str(size - 1))
    docs = [_sample(built, task_json, 0, tmp_path / f"m{i}.json", ("--memo", m), N_MEMO)
            for i, m in enumerate(memos)]
    for doc in docs:
        assert doc["count"] == N_MEMO
        _check_params(doc, oracle)
    k1, k2 = (_wire_keys(oracle, _reports(doc, D), 0, D - 1) for doc in docs)
    assert _worst_ratio(k1, k2) <= math.exp(oracle.epsilon_instantaneous)


@pytest.mark.parametrize("eps", [0.5, 1.0, 4.0])
@pytest.mark.parametrize("mechanism", MEMO_BYTE_MECHANISMS)
@pytest.mark.statistical
def test_typescript_memo_reports_of_fresh_users_pass_the_epsilon_ldp_audit(built, mechanism, eps, tmp_path):
    """One report per fresh WebCrypto secret (permanent and instantaneous stage, the HMAC included): every
    report accepted by the validator, the audit bounds the ratio by e^epsilon_1 (= e^eps), and a two-sample
    chi-square against the Python oracle's encoder (fresh independent users) does not reject (p < 1e-6)."""
    task_json = _memo_task(mechanism, eps)
    task = parse_task(task_json)
    oracle = task.make_oracle()
    docs = [_sample(built, task_json, v, tmp_path / f"v{v}.json", ("--secret", "fresh"), N_MEMO)
            for v in (0, D - 1)]
    for doc in docs:
        _check_params(doc, oracle)
    records = _records(docs[0], task.task_id, 2000)
    batch = ReportValidator(task).validate([report_from_json(r) for r in records])
    assert not batch.dead_letters and batch.n_accepted == 2000
    reports = [_reports(doc, D) for doc in docs]
    k1, k2 = (_wire_keys(oracle, r, 0, D - 1) for r in reports)
    assert _worst_ratio(k1, k2) <= math.exp(oracle.epsilon_1)
    rng = np.random.default_rng(np.random.SeedSequence(20261202, spawn_key=(
        MEMO_BYTE_MECHANISMS.index(mechanism), int(2 * eps))))
    py = _wire_keys(oracle, oracle.encode(np.zeros(N_MEMO, dtype=np.int64), rng=rng), 0, D - 1)
    keys = np.union1d(k1, py)
    table = np.stack([np.bincount(np.searchsorted(keys, x), minlength=len(keys)) for x in (k1, py)])
    table = table[:, table.sum(axis=0) >= 10]
    assert table.shape[1] > 1 and stats.chi2_contingency(table)[1] > 1e-6


@pytest.mark.parametrize("eps", [0.5, 1.0, 4.0])
@pytest.mark.statistical
def test_typescript_heavy_hitters_reports_pass_the_epsilon_ldp_audit(built, eps, tmp_path):
    """The client's heavy-hitters reports (WebCrypto seeds and words) for "ab" and "ba" (max_length 3): the
    eps-LDP audit on (level, which of the two strings its value supports) per report, every report accepted
    by the validator, and the same distribution as the Python core's ``PEM.encode`` (chi-square)."""
    from ldp.kinds import make_aggregator
    from tests.test_wire_vectors import _pem_keys
    from wire.validate import TaskReportValidator

    task_json = {"task_id": f"ts-pem-{eps}", "kind": "heavy_hitters", "mechanism": "pem", "epsilon": eps,
                 "max_length": 3}
    task = parse_task(task_json)
    pem = task.make_mechanism()
    a, b = "ab", "ba"
    docs = [_sample(built, task_json, v, tmp_path / f"{v}.json") for v in (a, b)]
    cols = [(np.array(d["group"]), np.array([int(s) % 2**64 for s in d["seed"]], dtype=np.uint64),
             np.array(d["value"], dtype=np.uint64)) for d in docs]
    k1, k2 = (_pem_keys(pem, g, s, y, a.encode(), b.encode()) for g, s, y in cols)
    assert _worst_ratio(k1, k2) <= math.exp(eps)
    rng = np.random.default_rng(np.random.SeedSequence(20261207, spawn_key=(int(2 * eps),)))
    core = pem.encode([a] * N_PER_VALUE, rng=rng)
    py = _pem_keys(pem, core.level, core.seed, core.y, a.encode(), b.encode())
    keys = np.union1d(k1, py)
    table = np.stack([np.bincount(np.searchsorted(keys, x), minlength=len(keys)) for x in (k1, py)])
    table = table[:, table.sum(axis=0) >= 10]  # cells with enough mass for the chi-square approximation
    assert stats.chi2_contingency(table)[1] > 1e-6
    g, s, y = cols[0]
    start = 1767225600000
    records = [report_from_json({"task_id": task.task_id, "schema_version": 2, "event_time": start + i,
                                 "group": int(g[i]), "value": int(y[i]),
                                 "seed": str(int(np.uint64(s[i]).astype(np.int64))), "bits": None,
                                 "items": None, "reals": None, "client_id": None}) for i in range(2000)]
    assert TaskReportValidator(make_aggregator(task)).validate(records).n_accepted == 2000
