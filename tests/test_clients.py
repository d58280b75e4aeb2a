"""Tests of pipelines/clients.py: stateful simulated clients of repeated collection.

The two backends (one state file per user through ``ldp.longitudinal.client.Client``, and the vectorized
in-memory one) must refuse the same reports for the same values and times; the reports carry each
user's stable pseudonym; misconfigured users bypass their budget; tasks that hide participation get a
report from every user every window. Simulation randomness: one SeedSequence per test (``--seed``).
"""

from __future__ import annotations

import io
import json
import os
from pathlib import Path

import numpy as np
import pytest

from ldp.task import parse_task
from pipelines.clients import ClientPopulation, iter_windows, publish_window, run, write_window
from transforms.io import DONE_SUFFIX
from wire.decode import ColumnBatch, iter_report_batches

WINDOW_MS = 10_000


def _task(mech="memo-grr", **budget):
    budget = {"reports_per_period": 2, "period_s": 30, **budget}
    return parse_task(
        {"task_id": f"clients-{mech}", "mechanism": mech, "epsilon": 1.0, "domain_size": 8, "budget": budget}
    )


@pytest.mark.parametrize(
    "mech, budget",
    [
        ("memo-grr", {"total_epsilon": 2.0}),  # memoized: at most 2 permanent responses (e_inf = 1 each)
        ("olh", {"total_epsilon": 5.0}),  # basic: at most 5 reports
        ("grr", {"composition": "pld", "total_epsilon": 3.0}),  # tight figure under the cap
    ],
)
def test_file_and_memory_clients_refuse_the_same_reports(tmp_path, mech, budget):
    task = _task(mech, **budget)
    kw = {"seed": 5, "drift": 0.5, "active": 0.8, "misconfigured": 1, "misconfigured_reports": 2}
    mem = ClientPopulation(task, 12, **kw)
    disk = ClientPopulation(task, 12, state_dir=tmp_path / "states", **kw)
    a = [w.truth for w in iter_windows(mem, 8, 1_800_000_000_000, WINDOW_MS)]
    b = [w.truth for w in iter_windows(disk, 8, 1_800_000_000_000, WINDOW_MS)]
    assert a == b
    assert sum(t["refused"] for t in a) > 0  # the budgets bind in this run
    assert {t["misconfigured_reports"] for t in a} <= {0, 2}  # user 0 sends 2 when active, unchecked
    assert np.allclose(mem.spent(), disk.spent())
    pol = task.budget
    assert disk.spent()[1:].max() <= pol.total_epsilon * (1 + 1e-12)  # well-configured users keep the cap


def test_clients_refuse_past_the_period_budget():
    """2 reports per 30 s period and 10 s windows: every active user reports in two windows of three."""
    task = _task("olh")
    pop = ClientPopulation(task, 50, seed=1, drift=0.2, active=1.0)
    start = 1_800_000_000_000  # a multiple of the 30 s period: windows 0-2 are period one, 3-5 the next
    truths = [w.truth for w in iter_windows(pop, 6, start, WINDOW_MS)]
    assert [t["refused"] for t in truths] == [0, 0, 50, 0, 0, 50]
    assert [t["reports"] for t in truths] == [50, 50, 0, 50, 50, 0]
    assert np.allclose(pop.spent(), 4.0)  # 4 reports x eps 1, basic composition


def test_reports_carry_stable_pseudonyms(tmp_path):
    task = _task("memo-olh")
    states = tmp_path / "states"
    pop = ClientPopulation(task, 5, state_dir=states, seed=2, misconfigured=1, misconfigured_reports=3)
    batch = pop.window(0, 0, WINDOW_MS)
    path = write_window(batch, task, tmp_path / "in")
    assert path.exists() and (tmp_path / "in" / (path.name + DONE_SUFFIX)).exists()
    with open(path, "rb") as fh:
        cbs = list(iter_report_batches(fh, task_id=task.task_id))
    cb = ColumnBatch.concat(cbs)
    assert isinstance(cb, ColumnBatch) and len(cb) == 4 + 3
    got = [cb.record(i)["client_id"] for i in range(len(cb))]
    ids = [bytes(r) for r in pop.client_ids]
    assert sorted(got) == sorted(ids[1:] + [ids[0]] * 3)  # user 0 is misconfigured: 3 reports
    assert len(set(ids)) == 5 and all(len(i) == 32 for i in ids)
    again = ClientPopulation(task, 5, state_dir=states, seed=9)  # reloads the same secrets
    assert [bytes(r) for r in again.client_ids] == ids
    other = parse_task({**task.to_dict(), "task_id": "another-task"})
    assert not set(ids) & {bytes(r) for r in ClientPopulation(other, 5, state_dir=states).client_ids}
    assert all(json.loads((states / f"user-{u:07d}.json").read_text())["tasks"] for u in range(1, 5))


def test_hidden_participation_reports_every_window():
    task = parse_task({**_task("grr").to_dict(), "hide_participation": True,
                       "budget": {"reports_per_period": 3, "period_s": 30}})
    pop = ClientPopulation(task, 200, seed=3, active=0.3)
    for batch in iter_windows(pop, 3, 0, WINDOW_MS):
        t = batch.truth
        assert t["reports"] == 200 and t["refused"] == 0
        assert t["dummies"] == 200 - t["active"]


def test_pubsub_messages_per_window():
    task = _task("olh")
    pop = ClientPopulation(task, 30, seed=4)
    batch = pop.window(0, 0, WINDOW_MS)

    class Publisher:
        def __init__(self):
            self.sent = []

        def publish(self, topic, data, **attrs):
            self.sent.append((topic, data, attrs))
            return None

    pub = Publisher()
    publish_window(batch, task, pub, "projects/p/topics/t", message_size=8)
    assert len(pub.sent) == 4
    n = 0
    for topic, data, attrs in pub.sent:
        recs = [r for b in iter_report_batches(io.BytesIO(data)) for r in b]
        n += len(recs)
        assert topic == "projects/p/topics/t" and all(len(r["client_id"]) == 32 for r in recs)
        assert int(attrs["event_time"]) == max(r["event_time"] for r in recs)
    assert n == 30


def test_cli_writes_windows_and_the_truth(tmp_path, capsys):
    task = _task("olh")
    (tmp_path / "task.json").write_text(task.to_json())
    summary = run([
        "--task", str(tmp_path / "task.json"), "--users", "20", "--windows", "4", "--window_s", "10",
        "--start", "2027-01-01T00:00:00Z", "--output", str(tmp_path / "in"), "--misconfigured", "2",
    ])  # fmt: skip
    assert len(list((tmp_path / "in").glob("reports-w*.avro"))) == 4
    truth = json.loads((tmp_path / "in" / "clients-truth.json").read_text())
    assert truth == json.loads(json.dumps(summary)) and truth["misconfigured_reports"] == 2 * 3 * 4
    assert "refused by the clients' budgets" in capsys.readouterr().out
    with pytest.raises(SystemExit):
        run(["--task", str(tmp_path / "task.json"), "--users", "2"])  # no --output / --output_topic


_CONCURRENT_REPORTER = """
import json, sys, time
from ldp.longitudinal.client import Client
from ldp.task import parse_task
task = parse_task(json.loads(sys.argv[1]))
client, oracle = Client.load(sys.argv[2]), task.make_oracle()
while time.time() < float(sys.argv[3]):  # every process starts reporting at the same instant
    time.sleep(0.001)
moved_back = 0
for i in range(int(sys.argv[4])):
    try:
        client.report(task.task_id, oracle, task.budget, i % 8)  # the clock's time, noise from the CSPRNG
    except ValueError as exc:
        if "clock moved back" not in str(exc):
            raise
        moved_back += 1
print(moved_back)
"""


@pytest.mark.integration
def test_concurrent_processes_of_one_client_are_never_refused_for_a_clock_moved_back(tmp_path):
    """Four processes of one app report through one state file at once: the clock is read under the
    file's lock, so the times each process charges are in lock order and no report is refused as
    "clock moved back" (reading the clock before the lock refused about a quarter of them)."""
    import subprocess
    import sys
    import time

    from ldp.longitudinal.client import Client

    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parent.parent)}
    task = _task("olh", reports_per_period=10_000, period_s=10**9)
    state = tmp_path / "state.json"
    Client.create(state)
    start, procs, per_process = time.time() + 3.0, [], 40
    for _ in range(4):
        procs.append(subprocess.Popen(
            [sys.executable, "-c", _CONCURRENT_REPORTER, task.to_json(), str(state), str(start),
             str(per_process)],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
        ))  # fmt: skip
    outs = []
    for p in procs:
        out, err = p.communicate(timeout=120)
        assert p.returncode == 0, err
        outs.append(int(out.strip()))
    assert outs == [0, 0, 0, 0]
    assert Client.load(state).ledger_state(task.task_id).reports == 4 * per_process


@pytest.mark.parametrize("mech", ["olh", "memo-grr"])
def test_report_noise_comes_from_the_os_csprng_unless_a_noise_seed_is_given(mech, monkeypatch):
    """The population repeats with --seed, the clients' noise does not: it comes from the OS CSPRNG
    (``ldp.csprng``), as on a device; ``noise_seed`` (tests only) makes the reports repeat too."""
    from ldp.csprng import SecureGenerator

    task = _task(mech, total_epsilon=50.0)
    kw = {"seed": 11, "drift": 0.3}

    def reports(**extra):
        pop = ClientPopulation(task, 400, **kw, **extra)
        return [w for w in iter_windows(pop, 2, 0, WINDOW_MS)]

    drawn = []
    real_random = SecureGenerator.random
    monkeypatch.setattr(
        SecureGenerator, "random", lambda self, *a, **k: drawn.append(1) or real_random(self, *a, **k)
    )
    a, b = reports(), reports()
    assert drawn  # the noise was drawn from the CSPRNG generator
    assert [w.truth for w in a] == [w.truth for w in b]  # same simulated population
    va, vb = (np.concatenate([np.asarray(w.reports.values).ravel() for w in ws]) for ws in (a, b))
    # 800 reports of a randomized response at eps 1: equal noise twice by chance has probability < 1e-50
    assert not np.array_equal(va, vb)
    drawn.clear()
    c, d = reports(noise_seed=3), reports(noise_seed=3)
    assert not drawn
    if mech == "olh":  # memoized responses also depend on each user's secret, always from the OS CSPRNG
        vc, vd = (np.concatenate([np.asarray(w.reports.values).ravel() for w in ws]) for ws in (c, d))
        assert np.array_equal(vc, vd)


def test_post_reports_sends_one_key_per_request_and_raises_on_a_final_refusal(tmp_path, frequency_task_file):
    from test_collect import Server, make_records

    from pipelines.clients import CollectorRefused, post_reports
    from wire.records import encode_report_container

    task = frequency_task_file()
    server = Server(task, tmp_path / "out")
    url = f"http://127.0.0.1:{server.port}/v1/reports"
    body = encode_report_container(make_records(task, 5, np.random.default_rng(1)))
    assert post_reports(url, body, key="retry-key-0001") == {"accepted": 5}
    assert post_reports(url, body, key="retry-key-0001") == {"accepted": 5, "duplicate": True}
    with pytest.raises(CollectorRefused) as refused:
        post_reports(url, b"not avro", retries=3)
    assert refused.value.status == 400 and refused.value.answer["error"] == "undecodable"
    with pytest.raises(ValueError, match="not an http"):
        post_reports("ftp://x/v1/reports", body)
    stats = server.stop()
    assert stats["reports_accepted"] == 5 and stats["duplicates"] == 1 and stats["rejected"] == 1
