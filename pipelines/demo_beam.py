"""The Beam demo: simulate clients, run the frequency pipeline, compare with the truth.

Batch (default; what ``run_local.sh`` runs)::

    python -m pipelines.demo_beam --users 1000000 --mechanism auto --epsilon 1 --domain_size 1024 \
        --dataset zipf --seed 2026 --workdir out/beam-demo --top 20 --inject_bad 2

(every flag optional; ``ldp-beam demo`` is the same command). Beam options are passed on to the pipeline,
e.g. ``--direct_running_mode=multi_processing --direct_num_workers=2``.

The demo owns ``WORKDIR``: its ``task.json``, ``reports/`` and ``out-*/`` are replaced on every run.

1. writes the collection task ``WORKDIR/task.json`` (``auto`` resolves to the lowest-variance oracle);
2. simulates the users into ``WORKDIR/reports/*.avro`` (plus a few bad records of every kind and one
   undecodable file, to show the dead-letter path) with ``pipelines.simulate``;
3. runs ``pipelines.frequency`` on the DirectRunner (``--postprocess base``, then ``norm-sub``);
4. prints the top values by true frequency (truth, estimate, per-value 95% CI), the full-domain MSE
   against the closed-form variance, Norm-Sub's MSE, what a top-k by *estimate* may claim (the values
   flagged above 0 under Bonferroni over the domain, and the top-k's simultaneous 95% intervals against
   the per-value ones: ``ldp.selection``), and the read / accepted / rejected counts (per reason).

Streaming (``--streaming``): starts the Pub/Sub emulator on 127.0.0.1, runs the streaming pipeline with
5-second windows, early panes every 2 s, 10 s of allowed lateness and accumulating (cumulative) panes,
publishes the users at ``--rate`` reports/s, prints each window's panes as they arrive on the output
topic, and stops the emulator by PID.
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import shutil
import subprocess
import sys
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from ldp.task import TaskError, parse_task
from pipelines.cli import fail, job_parser, parse_job_args

__all__ = ["run"]


def _parser() -> argparse.ArgumentParser:
    ap = job_parser(__doc__.splitlines()[0])
    ap.add_argument("--users", type=int, default=1_000_000, help="number of simulated users")
    ap.add_argument("--mechanism", default="auto", help="frequency oracle (auto: the lowest variance)")
    ap.add_argument("--epsilon", type=float, default=1.0, help="privacy budget per report")
    ap.add_argument("--domain_size", type=int, default=1024, help="size of the categorical domain")
    ap.add_argument("--dataset", default="zipf", help="zipf[:EXPONENT], uniform or csv:PATH:COLUMN")
    ap.add_argument("--seed", type=int, default=2026, help="simulation seed (real clients use OS entropy)")
    ap.add_argument("--workdir", default="out/beam-demo", help="the demo's scratch directory")
    ap.add_argument("--top", type=int, default=20, help="values printed, by true frequency")
    ap.add_argument("--files", type=int, default=4, help="number of Avro report files")
    ap.add_argument("--inject_bad", type=int, default=2, help="bad records of every kind in the input")
    ap.add_argument("--compare", default="norm-sub", help="second post-processing method ('none': skip)")
    ap.add_argument("--streaming", action="store_true", help="the streaming demo on the Pub/Sub emulator")
    ap.add_argument("--rate", type=float, default=10_000.0, help="streaming: reports per second")
    ap.add_argument("--window_size", type=float, default=5.0, help="streaming: window length in seconds")
    return ap


def _fresh(path: Path) -> Path:
    """Removes one of the demo's own subdirectories of ``--workdir`` (an earlier demo run's)."""
    if path.is_dir():
        shutil.rmtree(path)
    return path


def _task(ns: argparse.Namespace, task_id: str):
    obj = {"task_id": task_id, "mechanism": ns.mechanism, "epsilon": ns.epsilon}
    obj["domain_size"] = ns.domain_size
    try:
        return parse_task(obj, source="demo task", kind="frequency")
    except TaskError as exc:
        fail(exc.one_line())


def _read_estimates(out: Path) -> list[dict[str, Any]]:
    rows = []
    for f in sorted(glob.glob(str(out / "estimates-*.jsonl"))):
        with open(f, encoding="utf-8") as fh:
            rows += [json.loads(line) for line in fh]
    return rows


def run_batch(ns: argparse.Namespace, beam_args: list[str]) -> dict[str, Any]:
    """The batch demo: simulated report files, the frequency job over them (``base`` and ``--compare``
    post-processing), then the estimates against the truth: the top values with their intervals, the
    full-domain MSE against the closed-form variance, coverage, what a top-k may claim, the counts."""
    work = Path(ns.workdir)
    work.mkdir(parents=True, exist_ok=True)
    task = _task(ns, "beam-demo")
    task.save(work / "task.json")
    oracle = task.make_oracle()
    print(
        f"task {work / 'task.json'}: mechanism {ns.mechanism} -> {oracle!r}, {oracle.report_bits} bits/report"
    )
    f_true = _simulate_reports(ns, work, task)
    methods = ["base"] + ([ns.compare] if ns.compare and ns.compare not in ("none", "base") else [])
    results = {method: _run_frequency(ns, work, method, beam_args) for method in methods}
    summary, est = results["base"]
    out = _compare_with_truth(ns, oracle, est, f_true)
    out.update(counts=summary["counts"], mechanism=est["mechanism"])
    if len(methods) > 1:
        m2 = methods[1]
        mse2 = float(np.mean((np.asarray(results[m2][1]["frequencies"]) - f_true) ** 2))
        print(f"full-domain MSE ({m2}): {mse2:.3e}   ({out['mse_base'] / mse2:.1f}x lower than base)")
        out["mse_" + m2] = mse2
    print(f"95% CI coverage over the domain: {out['coverage']:.3f}")
    out.update(_selection_summary(est, f_true, ns.top))
    c = summary["counts"]
    reasons = ", ".join(f"{k[9:]}={v}" for k, v in sorted(c.items()) if k.startswith("rejected_") and v)
    print(
        f"reports read {c['read']:,}, accepted {c['accepted']:,}, rejected {c['rejected']:,}"
        + (f" ({reasons}); dead letters in {work / 'out-base' / 'dead_letter'}/" if reasons else "")
    )
    assert c["read"] == c["accepted"] + c["rejected"]
    return out


def _simulate_reports(ns: argparse.Namespace, work: Path, task: Any) -> np.ndarray:
    """``--users`` simulated reports in ``--files`` Avro files under ``WORKDIR/reports``; returns the
    true frequencies (a bad ``--dataset``: one line, exit status 2)."""
    import simulator

    t0 = time.perf_counter()
    try:
        truth = simulator.simulate_files(
            task, ns.users, ns.dataset, _fresh(work / "reports"), seed=ns.seed, files=ns.files,
            inject_bad=ns.inject_bad,
        )  # fmt: skip
    except ValueError as exc:
        fail(str(exc))
    print(f"simulated {ns.users:,} users ({ns.dataset}) into {ns.files} Avro files in "
          f"{time.perf_counter() - t0:.1f} s")  # fmt: skip
    return np.asarray(truth["frequencies"])


def _run_frequency(ns: argparse.Namespace, work: Path, method: str,
                   beam_args: list[str]) -> tuple[dict[str, Any], dict[str, Any]]:
    """The frequency job over the report files with ``--postprocess method`` into ``WORKDIR/out-METHOD``;
    returns its summary and its one estimate row."""
    from pipelines import frequency

    out = _fresh(work / f"out-{method}")
    summary = frequency.run(["--task", str(work / "task.json"), "--input", str(work / "reports" / "*.avro"),
                             "--output", str(out), "--postprocess", method, *beam_args])  # fmt: skip
    (est,) = _read_estimates(out)
    print(
        f"pipeline --postprocess {method}: {summary['seconds']:.1f} s "
        f"({ns.users / summary['seconds']:,.0f} reports/s), output {out}/"
    )
    return summary, est


def _compare_with_truth(ns: argparse.Namespace, oracle: Any, est: dict[str, Any],
                        f_true: np.ndarray) -> dict[str, Any]:
    """Prints the ``--top`` values by true frequency with their estimates and 95% intervals and the
    full-domain MSE against the closed-form variance; returns ``mse_base``, ``closed_form`` and
    ``coverage``."""
    f, std = np.asarray(est["frequencies"]), np.asarray(est["std"])
    lo, hi = f - 1.959964 * std, f + 1.959964 * std
    top = np.argsort(-f_true, kind="stable")[: ns.top]
    print(
        f"\ntop {ns.top} values by true frequency ({est['n_reports']:,} reports, {est['mechanism']}; "
        "chosen by the truth, not by the estimates, so per-value 95% intervals apply):"
    )
    print(f"{'value':>6} {'truth':>9} {'estimate':>9} {'95% CI':>21}  in CI")
    for v in top:
        inside = "yes" if lo[v] <= f_true[v] <= hi[v] else "no"
        print(f"{v:>6} {f_true[v]:>9.5f} {f[v]:>9.5f} [{lo[v]:>9.5f},{hi[v]:>9.5f}]  {inside}")
    mse = float(np.mean((f - f_true) ** 2))
    closed = float(np.mean(oracle.variance(est["n_reports"], f_true)))
    print(
        f"\nfull-domain MSE (base): {mse:.3e}   closed-form variance: {closed:.3e}   ratio {mse / closed:.3f}"
    )
    coverage = float(np.mean((lo <= f_true) & (f_true <= hi)))
    return {"mse_base": mse, "closed_form": closed, "coverage": coverage}


def _selection_summary(est: dict[str, Any], f_true: np.ndarray, k: int) -> dict[str, Any]:
    """Prints what a top-k by *estimate* may claim (``ldp.selection``): the values flagged above 0 under
    Bonferroni over the domain (from the row's exact ``p_zero`` when it has them, else the normal
    p-values; and how many of them have true frequency 0), and how many of the top
    ``k`` by estimate their simultaneous 95% intervals cover, next to the per-value intervals."""
    from ldp import selection

    u, s = np.asarray(est["unbiased"], dtype=float), np.asarray(est["unbiased_std"], dtype=float)
    pub = np.asarray(est["frequencies"], dtype=float)
    d = int(est["domain_size"])
    p_zero = est.get("p_zero")  # exact p-values of f = 0 (rows of mechanisms with an exact null law)
    if p_zero is not None and len(p_zero) == u.size:
        flag = selection.flag_p_values(np.asarray(p_zero, dtype=float), d) & (u > 0)
    else:
        flag = selection.discoveries(u, s, d)
    false = int(np.sum(flag & (f_true == 0)))
    lo, hi = selection.simultaneous_intervals(u, s, d, published=pub)
    top = np.argsort(-pub, kind="stable")[:k]
    sim = int(np.sum((lo[top] <= f_true[top]) & (f_true[top] <= hi[top])))
    half = 1.959964 * s[top]
    naive = int(np.sum((u[top] - half <= f_true[top]) & (f_true[top] <= u[top] + half)))
    print(
        f"flagged above 0 ({selection.rule_text(selection.DEFAULT_RULE, d)}): {int(flag.sum())} value(s), "
        f"{false} of them with true frequency 0"
    )
    print(
        f"top {top.size} by estimate: simultaneous 95% intervals (z = {selection.simultaneous_z(d):.2f}) "
        f"cover {sim}/{top.size}; per-value 95% intervals would cover {naive}/{top.size}"
    )
    return {"flagged": int(flag.sum()), "flagged_true_zero": false, "top_covered_simultaneous": sim,
            "top_covered_per_value": naive}  # fmt: skip


def run_streaming(ns: argparse.Namespace, beam_args: list[str]) -> dict[str, Any]:
    """The streaming demo: the Pub/Sub emulator, its topics, the frequency job reading one subscription
    and publishing its panes, a thread printing each pane as it arrives, and the simulated reports
    published at ``--rate``; returns the job's exit status."""
    from google.cloud import pubsub_v1

    from pipelines.pubsub_emulator import PubSubEmulator
    from pipelines.simulate import publish

    work = Path(ns.workdir)
    work.mkdir(parents=True, exist_ok=True)
    task = _task(ns, "beam-demo-stream")
    task.save(work / "stream-task.json")
    if not PubSubEmulator.available():
        raise SystemExit(
            f"Pub/Sub emulator not found at {PubSubEmulator.DEFAULT_BINARY} (set PUBSUB_EMULATOR_BIN)"
        )
    with PubSubEmulator(log_path=str(work / "emulator.log")) as emu:
        os.environ["PUBSUB_EMULATOR_HOST"] = emu.host
        print(f"Pub/Sub emulator on {emu.host} (pid {emu.proc.pid})")
        pub, sub = pubsub_v1.PublisherClient(), pubsub_v1.SubscriberClient()
        topic, out_topic, in_sub, out_sub = _demo_topics(pub, sub)
        with open(work / "stream-pipeline.log", "wb") as log:
            cmd = _stream_job_command(ns, work, in_sub, out_topic, beam_args)
            proc = subprocess.Popen(cmd, env=emu.env(), stdout=log, stderr=subprocess.STDOUT)
            stop = threading.Event()
            print("(* in the top values: not shown above 0, Bonferroni over the domain at 5%)", flush=True)
            th = threading.Thread(target=_print_panes, args=(sub, out_sub, stop), daemon=True)
            th.start()
            time.sleep(5)  # the job's start-up
            print(f"publishing {ns.users:,} reports at {ns.rate:,.0f}/s ...", flush=True)
            publish(task, ns.users, ns.dataset, topic, seed=ns.seed, rate=ns.rate, inject_bad=ns.inject_bad,
                    message_size=1000, heartbeat=lambda: proc.poll() is None)  # fmt: skip
            proc.wait()
            stop.set()
            th.join(timeout=10)
        for line in (work / "stream-pipeline.log").read_text().strip().splitlines()[-2:]:
            print(line)
        print(f"outputs in {work / 'stream-out'}/ (estimates-*.jsonl/.avro, counts/, dead_letter/)")
    return {"returncode": proc.returncode}


def _demo_topics(pub: Any, sub: Any) -> tuple[str, str, str, str]:
    """Creates the demo's topics (reports in, estimates out) and their subscriptions (the aggregator's,
    the printer's) on the emulator; returns ``(topic, out_topic, in_sub, out_sub)``."""
    topic, out_topic = pub.topic_path("ldp-demo", "reports"), pub.topic_path("ldp-demo", "estimates")
    in_sub = sub.subscription_path("ldp-demo", "aggregator")
    out_sub = sub.subscription_path("ldp-demo", "dashboard")
    for t in (topic, out_topic):
        pub.create_topic(name=t)
    sub.create_subscription(name=in_sub, topic=topic)
    sub.create_subscription(name=out_sub, topic=out_topic)
    return topic, out_topic, in_sub, out_sub


def _stream_job_command(ns: argparse.Namespace, work: Path, in_sub: str, out_topic: str,
                        beam_args: list[str]) -> list[str]:
    """The frequency job over ``in_sub``: windows of ``--window_size`` with early panes every 2 s,
    10 s allowed lateness, accumulating panes published to ``out_topic``, running long enough for the
    publishing, two windows, the lateness and its start-up."""
    duration = ns.users / ns.rate + 2 * ns.window_size + 25
    return [
        sys.executable, "-m", "pipelines.frequency", "--task", str(work / "stream-task.json"), "--streaming",
        "--input_subscription", in_sub, "--output", str(_fresh(work / "stream-out")),
        "--output_topic", out_topic, "--window_size", str(ns.window_size), "--early_firing", "2",
        "--allowed_lateness", "10", "--accumulating", "--streaming_duration", str(duration),
        "--counts_window", str(ns.window_size), "--dead_letter_window", str(ns.window_size), *beam_args,
    ]  # fmt: skip


def _print_panes(sub: Any, out_sub: str, stop: threading.Event) -> None:
    """Until ``stop``: prints each published pane (window, timing, reports, top 3 values; ``*`` marks a
    value not flagged above 0, the row's ``ci_includes_zero``) and acknowledges it."""
    while not stop.is_set():
        resp = sub.pull(subscription=out_sub, max_messages=100, timeout=2)
        for m in resp.received_messages:
            e = json.loads(m.message.data)
            top = np.argsort(-np.asarray(e["frequencies"]))[:3].tolist()
            names, zero = e.get("labels"), e.get("ci_includes_zero")
            shown = [f"{names[v] if names else v}{'*' if zero and zero[v] else ''}" for v in top]
            print(f"  window {e['window_start']} .. {e['window_end'][11:]} {e['pane_timing']:<7} "
                  f"n={e['n_reports']:>7,}  top values [{', '.join(shown)}]", flush=True)  # fmt: skip
        if resp.received_messages:
            sub.acknowledge(subscription=out_sub, ack_ids=[m.ack_id for m in resp.received_messages])


def run(argv: Sequence[str] | None = None) -> dict[str, Any]:
    ns, _ = parse_job_args(_parser(), argv)
    return run_streaming(ns, ns.beam_args) if ns.streaming else run_batch(ns, ns.beam_args)


if __name__ == "__main__":
    run()
