"""Tests of ``ldp-beam show OUT/`` (pipelines.show) on the outputs of real job runs and on rows written by
hand following the schemas.

* frequency (windowed, value labels, bad records), range, sparse and batch-query jobs run once per module
  (5,000 simulated users each); the printed top values, estimates, std and 95% intervals are the rows' own
  (``--json`` exactly, the table to the printed precision), from the newest window or the one chosen;
* the counts (read / accepted / rejected, reasons largest first) are counts.json's, or a streaming job's
  count windows summed with a repeated window counted once;
* panes: the latest (final) pane of a window is shown, an early one is marked speculative;
* errors are one line with exit status 2; hostile labels are printed escaped;
* the command imports no Apache Beam (checked in a fresh interpreter: integration tier);
* each kind's rows are read and printed through its registry entry's show piece (``pipelines.show_kinds``).
"""

from __future__ import annotations

import glob
import json
import re
import shutil
import sys
from pathlib import Path
from statistics import NormalDist

import numpy as np
import pytest

import simulator
from ldp.task import parse_task
from pipelines import batch_queries, frequency, numeric, range_queries, show, sparse_mean

T0 = 1_767_225_600_000  # 2026-01-01T00:00:00Z
SEEDS = np.random.SeedSequence(2026_12_19).spawn(4)
LABELS = [f"fruit{v}" for v in range(16)]


def _seed(i: int) -> int:
    return int(SEEDS[i].generate_state(1)[0])


def _job(tmp: Path, name: str, obj: dict, run, extra: list[str], *, dataset: str, inject_bad: int = 0,
         duration_s: float = 600.0) -> Path:
    """Simulates 5,000 users of task ``obj`` and runs the job ``run`` over them; returns its output."""
    task = parse_task(obj)
    (tmp / f"{name}.json").write_text(json.dumps(obj))
    simulator.simulate_files(task, 5000, dataset, tmp / f"{name}-in", seed=_seed(len(name) % 4), files=2,
                            start_ms=T0, duration_s=duration_s, inject_bad=inject_bad)  # fmt: skip
    out = tmp / f"{name}-out"
    run(["--task", str(tmp / f"{name}.json"), "--input", str(tmp / f"{name}-in" / "*.avro"),
         "--output", str(out), "--log_level", "WARNING", *extra])  # fmt: skip
    return out


@pytest.fixture(scope="module")
def outs(tmp_path_factory) -> dict[str, Path]:
    tmp = tmp_path_factory.mktemp("show")
    queries = [{"age": [2, 5], "income": [0, 3]}, {"age": [0, 3]}, {"income": [7, 7]}]
    (tmp / "q.json").write_text(json.dumps(queries))
    (tmp / "w.json").write_text(json.dumps({"type": "prefix"}))
    return {
        "frequency": _job(
            tmp, "freq",
            {"task_id": "show-freq", "mechanism": "olh", "epsilon": 2.0, "domain_size": 16, "labels": LABELS,
             "window": {"size_s": 300}},
            frequency.run, [], dataset="zipf", inject_bad=1, duration_s=900.0,
        ),
        "range": _job(
            tmp, "range",
            {"task_id": "show-range", "mechanism": "hdg", "epsilon": 1.0, "expected_users": 5000,
             "attributes": [{"name": "age", "domain_size": 8}, {"name": "income", "domain_size": 8}]},
            range_queries.run, ["--queries", str(tmp / "q.json")], dataset="gaussian",
        ),
        "sparse": _job(
            tmp, "sparse",
            {"task_id": "show-sparse", "kind": "sparse", "mechanism": "svme", "epsilon": 1.0,
             "domain_size": 256, "sparsity": 8, "privacy": "event", "expected_users": 5000},
            sparse_mean.run, [], dataset="supersparse",
        ),
        "batch": _job(
            tmp, "batch",
            {"task_id": "show-batch", "kind": "batch_queries", "mechanism": "lsa", "epsilon": 1.0,
             "delta": 1e-6, "attributes": [{"name": "age", "domain_size": 16}], "params": {"k_max": 4}},
            batch_queries.run, ["--workload", str(tmp / "w.json"), "--noise_seed", "5"], dataset="gaussian",
        ),
        "numeric": _job(
            tmp, "numeric",
            {"task_id": "show-numeric", "kind": "numeric", "mechanism": "square-wave", "epsilon": 1.0,
             "attributes": [{"name": "load_ms", "low": 0, "high": 5000}], "quantiles": [0.5, 0.9]},
            numeric.run, [], dataset="lognormal:6:1",
        ),
    }  # fmt: skip


def _rows(out: Path) -> list[dict]:
    rows = []
    for f in sorted(glob.glob(str(out / "*.jsonl"))):
        rows += [json.loads(line) for line in open(f, encoding="utf-8")]
    return rows


def _show(capsys, *argv: str) -> str:
    assert show.run(list(argv)) == 0
    return capsys.readouterr().out


def _show_json(capsys, *argv: str) -> dict:
    return json.loads(_show(capsys, *argv, "--json"))


def _fails(capsys, argv: list[str], pattern: str) -> str:
    with pytest.raises(SystemExit) as ei:
        show.run(argv)
    assert ei.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and re.search(pattern, err[0]), err
    return err[0]


def _tables(text: str) -> list[list[list[str]]]:
    """The printed tables: for each, its rows (header first) split into cells at runs of 2+ spaces."""
    lines = text.splitlines()
    tables = []
    for i, line in enumerate(lines):
        if re.fullmatch(r"\s*-+(\s+-+)*", line) and i > 0:
            rows = [lines[i - 1]]
            for nxt in lines[i + 1 :]:
                if not nxt.startswith("    ") or not nxt.strip():
                    break
                rows.append(nxt)
            tables.append([re.split(r"\s{2,}", r.strip()) for r in rows])
    return tables


def _g(x: float | None) -> str:
    return "n/a" if x is None else f"{x:.6g}"


# ---------------------------------------------------------------------------------------------- frequency


@pytest.mark.integration
def test_frequency_latest_window_top_values_are_the_rows(outs, capsys):
    rows = _rows(outs["frequency"])
    assert len(rows) == 3  # three 300 s windows, one pane each
    newest = max(rows, key=lambda r: r["window_start"])
    freq = np.asarray(newest["frequencies"])
    top = sorted(range(16), key=lambda v: (-freq[v], v))[:5]

    content = _show_json(capsys, str(outs["frequency"]), "--top", "5")
    assert content["kind"] == "frequency" and content["windows_total"] == 3
    (window,) = content["windows"]
    assert window["window_start"] == newest["window_start"] and window["window_end"] == newest["window_end"]
    (table,) = window["tables"]
    assert table["group"] == 0 and table["n_reports"] == newest["n_reports"]
    assert table["pane_index"] == 0 and table["pane_timing"] == "ON_TIME" and table["final"] is True
    assert [e["value"] for e in table["rows"]] == top
    # a top-K is a selection: its intervals are simultaneous over the 16 values (Bonferroni), made here
    # from the row's unbiased estimates with z = Phi^-1(1 - 0.05 / 32), and its flags are Bonferroni's
    z = NormalDist().inv_cdf(1 - 0.05 / 32)
    sim = {}
    for e in table["rows"]:
        v = e["value"]
        u, s, f = newest["unbiased"][v], newest["unbiased_std"][v], newest["frequencies"][v]
        sim[v] = (min(max(u - z * s, 0.0), f), max(min(u + z * s, 1.0), f))
        assert e["label"] == LABELS[v]
        assert (e["estimate"], e["std"]) == (f, newest["std"][v])
        assert e["ci_low"] == pytest.approx(sim[v][0], abs=1e-15)
        assert e["ci_high"] == pytest.approx(sim[v][1], abs=1e-15)
        assert e["above_zero"] is (u >= z * s)
        assert (e["per_value_ci_low"], e["per_value_ci_high"]) == (newest["ci_low"][v], newest["ci_high"][v])
        assert e["ci_low"] <= e["estimate"] <= e["ci_high"]
    assert table["flag_rule"] == "Bonferroni over d = 16 at 5%"

    text = _show(capsys, str(outs["frequency"]), "--top", "5")
    assert f"[{newest['window_start']}, {newest['window_end']})" in text
    assert "group 0; pane 0 ON_TIME, final" in text and f"{newest['n_reports']:,} reports" in text
    (printed,) = _tables(text)
    assert printed[0] == ["rank", "value", "label", "estimate", "std", "sim. 95% low", "sim. 95% high", "> 0"]
    expected = [
        [str(rank), str(v), LABELS[v], _g(newest["frequencies"][v]), _g(newest["std"][v]),
         _g(sim[v][0]), _g(sim[v][1])]
        for rank, v in enumerate(top, 1)
    ]  # fmt: skip
    assert [p[:7] for p in printed[1:]] == expected
    assert "simultaneous 95% over all 16 values (Bonferroni" in text
    assert "Bonferroni over d = 16 at 5%" in text


@pytest.mark.integration
def test_frequency_window_choice(outs, capsys):
    rows = sorted(_rows(outs["frequency"]), key=lambda r: r["window_start"])
    middle = rows[1]
    start = middle["window_start"]  # e.g. 2026-01-01T00:05:00.000Z
    for given in (start, start.replace(".000Z", "Z"), start.replace(".000Z", ""), str(T0 + 300_000)):
        (window,) = _show_json(capsys, str(outs["frequency"]), "--window", given)["windows"]
        assert window["window_start"] == start
        assert window["tables"][0]["rows"][0]["estimate"] == max(middle["frequencies"])
    every = _show_json(capsys, str(outs["frequency"]), "--window", "all", "--top", "1")["windows"]
    assert [w["window_start"] for w in every] == [r["window_start"] for r in rows]
    text = _show(capsys, str(outs["frequency"]), "--window", "all")
    assert len(_tables(text)) == 3
    line = _fails(capsys, [str(outs["frequency"]), "--window", "2026-01-01T00:07:00Z"], "no window starts")
    assert rows[0]["window_start"] in line and rows[2]["window_start"] in line
    _fails(capsys, [str(outs["frequency"]), "--window", "yesterday"], "give latest, all, global or a window")
    _fails(capsys, [str(outs["frequency"]), "--window", "global"], "no window starts then")
    _fails(capsys, [str(outs["frequency"]), "--top", "0"], "--top must be at least 1")


@pytest.mark.integration
def test_counts_from_counts_json(outs, capsys):
    summary = json.loads((outs["frequency"] / "counts.json").read_text())
    c = summary["counts"]
    reasons = sorted(((k[9:], v) for k, v in c.items() if k.startswith("rejected_") and v),
                     key=lambda kv: (-kv[1], kv[0]))  # fmt: skip
    assert c["rejected"] > 0 and len(reasons) > show.TOP_REASONS
    got = _show_json(capsys, str(outs["frequency"]))["counts"]
    assert (got["read"], got["accepted"], got["rejected"]) == (c["read"], c["accepted"], c["rejected"])
    assert [tuple(r) for r in got["reasons"]] == reasons
    text = _show(capsys, str(outs["frequency"]))
    (line,) = [x for x in text.splitlines() if x.startswith("reports: ")]
    named = ", ".join(f"{r} {n:,}" for r, n in reasons[: show.TOP_REASONS])
    rest = reasons[show.TOP_REASONS :]
    assert line == (
        f"reports: read {c['read']:,}  accepted {c['accepted']:,}  rejected {c['rejected']:,} ({named}, and "
        f"{sum(n for _, n in rest):,} more of {len(rest)} other reason(s))"
    )


# ---------------------------------------------------------------------------------------- other kinds


@pytest.mark.integration
def test_range_answers_are_the_rows(outs, capsys):
    rows = sorted(_rows(outs["range"]), key=lambda r: r["query_index"])
    assert len(rows) == 3
    content = _show_json(capsys, str(outs["range"]))
    (window,) = content["windows"]
    assert content["kind"] == "range" and window["window_start"] is None
    (table,) = window["tables"]
    assert table["final"] is True and table["n_reports"] == 5000  # a batch job's one pane
    for e, r in zip(table["rows"], rows, strict=True):
        assert e["query_index"] == r["query_index"] and e["query"] == r["query"]
        fields = ("answer", "std", "ci_low", "ci_high")
        assert [e[k] for k in fields] == [r[k] for k in fields]
    text = _show(capsys, str(outs["range"]))
    assert "global window" in text and "method hdg" in text
    (printed,) = _tables(text)
    assert printed[0] == ["query", "range", "answer", "std", "95% low", "95% high"]
    assert printed[1:] == [
        ["0", "age=[2,5] income=[0,3]", _g(rows[0]["answer"]), _g(rows[0]["std"]), _g(rows[0]["ci_low"]),
         _g(rows[0]["ci_high"])],
        ["1", "age=[0,3]", *(_g(rows[1][k]) for k in ("answer", "std", "ci_low", "ci_high"))],
        ["2", "income=[7,7]", *(_g(rows[2][k]) for k in ("answer", "std", "ci_low", "ci_high"))],
    ]  # fmt: skip
    two = _show_json(capsys, str(outs["range"]), "--top", "2")["windows"][0]["tables"][0]
    assert (two["shown"], two["of"]) == (2, 3) and [e["query_index"] for e in two["rows"]] == [0, 1]


@pytest.mark.integration
def test_sparse_top_coordinates_are_the_rows(outs, capsys):
    (row,) = _rows(outs["sparse"])
    mean = np.asarray(row["mean"])
    top = sorted(range(len(mean)), key=lambda i: (-mean[i], i))[:4]
    (table,) = _show_json(capsys, str(outs["sparse"]), "--top", "4")["windows"][0]["tables"]
    assert table["about"]["linf_bound_95"] == row["linf_bound_95"]
    assert [e["item"] for e in table["rows"]] == [row["items"][i] for i in top]
    for e, i in zip(table["rows"], top, strict=True):
        assert (e["mean"], e["std"], e["ci_low"], e["ci_high"]) == (
            row["mean"][i], row["std"][i], row["ci_low"][i], row["ci_high"][i])
    (printed,) = _tables(_show(capsys, str(outs["sparse"]), "--top", "4"))
    assert printed[0] == ["rank", "item", "mean", "std", "95% low", "95% high"]
    assert [p[1:3] for p in printed[1:]] == [[str(row["items"][i]), _g(row["mean"][i])] for i in top]


@pytest.mark.integration
def test_numeric_mean_and_quantiles_are_the_rows(outs, capsys):
    (row,) = _rows(outs["numeric"])
    (table,) = _show_json(capsys, str(outs["numeric"]))["windows"][0]["tables"]
    assert table["about"]["attribute"] == "load_ms" and table["n_reports"] == row["n_reports"]
    mean, *quantiles = table["rows"]
    assert (mean["value"], mean["std"], mean["ci_low"], mean["ci_high"]) == (
        row["mean"], row["mean_std"], row["mean_ci_low"], row["mean_ci_high"])
    assert [(e["value"], e["ci_low"], e["ci_high"]) for e in quantiles] == [
        (q["value"], q["ci_low"], q["ci_high"]) for q in row["quantiles"]]
    (printed,) = _tables(_show(capsys, str(outs["numeric"])))
    assert printed[0] == ["statistic", "estimate", "std", "95% low", "95% high"]
    assert printed[1][:2] == ["mean", _g(row["mean"])]
    assert [p[0] for p in printed[2:]] == ["q0.5", "q0.9"]


@pytest.mark.integration
def test_batch_answers_are_the_rows_and_marked_central(outs, capsys):
    rows = sorted(_rows(outs["batch"]), key=lambda r: r["query_index"])
    assert len(rows) == 16  # the prefix workload of a 16-cell domain
    (table,) = _show_json(capsys, str(outs["batch"]), "--top", "16")["windows"][0]["tables"]
    assert [(e["answer"], e["std"], e["ci_low"], e["ci_high"]) for e in table["rows"]] == [
        (r["answer"], r["std"], r["ci_low"], r["ci_high"]) for r in rows]
    text = _show(capsys, str(outs["batch"]))
    assert "CENTRAL DP" in text and "SEEDED NOISE: a simulation, not private" in text  # ran with --noise_seed
    assert "not differentially private, not to publish" in text  # counts.json's counts_private note
    (printed,) = _tables(text)
    assert len(printed) == 1 + 10 and printed[4][1] == "age=[0,3]" and printed[4][2] == _g(rows[3]["answer"])


# ------------------------------------------------------------------------------------ panes, counts, labels


def _row_dir(tmp_path: Path, src: Path, rows: list[dict], name: str = "estimates-x.jsonl") -> Path:
    out = tmp_path / "out"
    out.mkdir()
    shutil.copy(src / ".ldp-beam-output.json", out)
    with open(out / name, "w", encoding="utf-8") as fh:
        for r in rows:
            fh.write(json.dumps(r) + "\n")
    return out


@pytest.mark.integration
def test_latest_pane_of_a_window_and_early_panes(outs, tmp_path, capsys):
    base = _rows(outs["frequency"])[0]
    early = {**base, "pane_timing": "EARLY", "pane_index": 0, "is_last_pane": False, "n_reports": 10}
    final = {**base, "pane_timing": "ON_TIME", "pane_index": 1, "is_last_pane": True}
    out = _row_dir(tmp_path, outs["frequency"], [final, early])
    (window,) = _show_json(capsys, str(out))["windows"]
    assert window["panes_written"] == 2
    assert window["tables"][0]["pane_index"] == 1 and window["tables"][0]["final"] is True
    (out / "estimates-x.jsonl").write_text(json.dumps(early) + "\n")
    text = _show(capsys, str(out))
    assert "pane 0 EARLY, early (speculative), not final; 10 reports" in text


@pytest.mark.integration
def test_streaming_counts_are_summed_once_per_window(outs, tmp_path, capsys):
    out = _row_dir(tmp_path, outs["frequency"], _rows(outs["frequency"])[:1])
    (out / "counts").mkdir()
    w1 = {"window_start_ms": 0, "window_end_ms": 60_000, "read": 7, "accepted": 5, "rejected": 2,
          "rejected_wrong_task": 2}  # fmt: skip
    w2 = {"window_start_ms": 60_000, "window_end_ms": 120_000, "read": 4, "accepted": 3, "rejected": 1,
          "rejected_out_of_domain": 1}  # fmt: skip
    (out / "counts" / "counts-a.jsonl").write_text(json.dumps(w1) + "\n" + json.dumps(w2) + "\n")
    (out / "counts" / "counts-b.jsonl").write_text(json.dumps(w1) + "\n")  # rewritten after a restore
    c = _show_json(capsys, str(out))["counts"]
    assert (c["read"], c["accepted"], c["rejected"]) == (11, 8, 3)
    assert [tuple(r) for r in c["reasons"]] == [("wrong_task", 2), ("out_of_domain", 1)]
    assert "streaming: 2 count window(s) summed" in _show(capsys, str(out))


@pytest.mark.integration
def test_labels_and_names_are_printed_escaped(outs, tmp_path, capsys):
    row = dict(_rows(outs["frequency"])[0])
    hostile = ["\x1b[31mred\x1b[0m", "a\rb", "\u202etxt", "x\ny", "bell\x07", "z\u200b", "back\\x1b"]
    labels = list(LABELS)
    freq = [0.0] * 16
    for v, lab in enumerate(hostile):
        labels[v] = lab
        freq[v] = 0.5 - 0.01 * v  # the hostile labels are the top values
    row.update(labels=labels, frequencies=freq, task_id="t\x1b]0;title\x07")
    out = _row_dir(tmp_path, outs["frequency"], [row])
    text = _show(capsys, str(out), "--top", str(len(hostile)))
    assert not re.search(r"[\x00-\x09\x0b-\x1f\x7f-\x9f\u200b\u202e]", text)
    for shown in ("\\x1b[31mred\\x1b[0m", "a\\x0db", "\\u202etxt", "x\\x0ay", "bell\\x07", "z\\u200b",
                  "back\\\\x1b", "t\\x1b]0;title\\x07"):
        assert shown in text, shown
    (table,) = _show_json(capsys, str(out), "--top", "1")["windows"][0]["tables"]
    assert table["rows"][0]["label"] == hostile[0]  # JSON keeps the label whole (json.dumps escapes it)
    assert show.safe_text("\x1b" * 100, 10) == "\\x1b\\x1b\u2026"  # 9 columns and the ellipsis


def test_table_alignment_counts_wide_characters():
    lines = show.format_table(["a", "b"], [["\u6c34\u679c", "1"], ["xy", "22"]], [False, True])
    assert lines == ["a      b", "----  --", "\u6c34\u679c   1", "xy    22"]
    assert show.display_width("e\u0301") == 1


# ------------------------------------------------------------------------------------------------- errors


@pytest.mark.integration
def test_errors_are_one_line_with_status_2(outs, tmp_path, capsys):
    _fails(capsys, [str(tmp_path / "missing")], "does not exist")
    (tmp_path / "file").write_text("x")
    _fails(capsys, [str(tmp_path / "file")], "is not a directory")
    (tmp_path / "empty").mkdir()
    _fails(capsys, [str(tmp_path / "empty")], "is not an ldp-beam job's output")
    sim = outs["frequency"].parent / "freq-in"  # the simulator's output: reports, no results
    _fails(capsys, [str(sim)], r"holds report files \(e.g. reports-00000-of-00002.avro\), not a job's")
    marked = tmp_path / "marked"  # a directory the simulator command prepared, before its first file
    marked.mkdir()
    (marked / ".ldp-beam-output.json").write_text(json.dumps({"command": ["simulate.py", "--users", "5"]}))
    _fails(capsys, [str(marked)], "was written by simulate.py, not an aggregation job")
    started = tmp_path / "started"  # a job's directory before its first pane
    started.mkdir()
    shutil.copy(outs["frequency"] / ".ldp-beam-output.json", started)
    _fails(capsys, [str(started)], "has no result rows yet")
    shutil.copy(outs["frequency"] / "counts.json", started)
    _fails(capsys, [str(started)], r"has no result rows yet .*the job read [\d,]+ reports")
    bad = _row_dir(tmp_path, outs["frequency"], [])
    (bad / "estimates-x.jsonl").write_text('{"task_id": "t"}\n')
    _fails(capsys, [str(bad)], r"estimates-x.jsonl line 1: not a result row: none of the fields")
    (bad / "estimates-x.jsonl").write_text("{not json\n")
    _fails(capsys, [str(bad)], r"line 1: not a result row: not JSON")
    row = _rows(outs["frequency"])[0]
    (bad / "estimates-x.jsonl").write_text(json.dumps({**row, "std": row["std"][:3]}) + "\n")
    _fails(capsys, [str(bad)], r"'std' does not hold 16 entries")
    _fails(capsys, [str(outs["frequency"]), "--windows", "all"], "unrecognized arguments")


# ------------------------------------------------------------- a fresh interpreter (integration tier)


@pytest.mark.integration
def test_no_apache_beam_import_subprocess(outs, run_cli):
    """The command (help, a table, JSON, an error) never imports Apache Beam; ``--help`` imports no numpy
    either (reading rows imports the registry of kinds, hence the task model and numpy)."""
    check = (
        "import runpy, sys\n"
        "sys.argv = ['show', *sys.argv[1:]]\n"
        "try:\n"
        "    runpy.run_module('pipelines.show', run_name='__main__')\n"
        "except SystemExit as exc:\n"
        "    code = exc.code\n"
        "loaded = sorted(m for m in ('apache_beam', 'numpy') if m in sys.modules)\n"
        "sys.stderr.write(f'loaded={loaded}\\n')\n"
        "sys.exit(code)\n"
    )
    for args, status, loaded in (
        (["--help"], 0, "[]"),
        ([str(outs["frequency"])], 0, "['numpy']"),
        ([str(outs["range"]), "--json"], 0, "['numpy']"),
        ([str(outs["batch"]), "--window", "all"], 0, "['numpy']"),
        ([str(outs["frequency"].parent / "nothing-here")], 2, "[]"),
    ):
        done = run_cli(sys.executable, "-c", check, *args)
        assert done.returncode == status, (args, done.stderr)
        assert done.stderr.splitlines()[-1] == f"loaded={loaded}", (args, done.stderr)
    entry = run_cli(str(Path(sys.executable).parent / "ldp-beam"), "show", str(outs["sparse"]), "--top", "3")
    assert entry.returncode == 0 and "top 3 of 256 coordinates by mean" in entry.stdout, entry.stderr


# ------------------------------------------------------------------------------------- the registry's pieces


def test_every_built_in_kind_shows_through_its_registry_piece_and_show_names_no_kind():
    import inspect

    from ldp import kinds
    from pipelines.show_kinds import BUILT_IN

    assert set(BUILT_IN) == set(kinds.KINDS)  # every built-in kind has its piece in pipelines
    for name, k in kinds.KINDS.items():
        assert not hasattr(k, "show"), name  # ldp names nothing of pipelines: pipelines registers its pieces
        assert show.show_spec(name) is BUILT_IN[name], name
    source = inspect.getsource(show)
    named = [n for n in kinds.KINDS if f'"{n}"' in source or f"'{n}'" in source]
    assert not named, f"pipelines/show.py dispatches on kind names {named}: give the kind a show piece"


# ------------------------------------------------------------------------------- the top-K after selection


def _apps_row(seed: int) -> tuple[dict, np.ndarray]:
    """The README's apps example (200,000 Zipf(1.5) users, OLH, epsilon 1, d = 1024, Norm-Sub, the
    simulator's population with ``--seed``) through the frequency aggregator, as the batch job's JSON
    Lines row; and the true frequencies."""
    from ldp.aggregate import GroupAccumulators, WindowInfo, accumulate, finalize_window
    from ldp.kinds.frequency.aggregate import FrequencyAggregator

    task = parse_task({"task_id": "apps-2026-12", "mechanism": "olh", "epsilon": 1.0, "domain_size": 1024,
                       "postprocess": "norm-sub"})  # fmt: skip
    pop = simulator.make_population(task, 200_000, "zipf:1.5", seed=seed)
    agg = FrequencyAggregator(task)
    accs = GroupAccumulators()
    for _, chunk in pop.chunks(np.array([0, 200_000])):
        accumulate(agg, accs, 0, chunk.reports)
    (row,) = finalize_window(agg, accs, WindowInfo(None, None, "ON_TIME", 0, True))
    return json.loads(json.dumps(row._asdict())), pop.counts / 200_000


def _result_dir(tmp_path: Path, rows: list[dict]) -> Path:
    out = tmp_path / "est"
    out.mkdir(parents=True)
    (out / ".ldp-beam-output.json").write_text(json.dumps({"command": ["ldp-beam frequency"]}))
    with open(out / "estimates-00000-of-00001.jsonl", "w", encoding="utf-8") as fh:
        for r in rows:
            fh.write(json.dumps(r) + "\n")
    return out


@pytest.mark.statistical
def test_apps_example_top20_flags_no_zero_and_its_intervals_cover(tmp_path, capsys):
    """``ldp-beam show est/ --top 20`` on the README's apps example (seed 1): no value of true frequency 0
    is flagged under either rule, and every shown interval covers its truth (they are simultaneous 95%
    over the domain: all 20 cover in at least 95% of runs; tests/test_selection.py counts 20 seeds). The
    per-value intervals of the same values miss 9 of 20 here: the selection error the view avoids."""
    row, truth = _apps_row(1)
    out = _result_dir(tmp_path, [row])
    for rule in ("bonferroni", "bh"):
        (table,) = _show_json(capsys, str(out), "--top", "20", "--flag_rule", rule)["windows"][0]["tables"]
        assert len(table["rows"]) == 20 and table["of"] == 1024
        values = [e["value"] for e in table["rows"]]
        flagged = [e["value"] for e in table["rows"] if e["above_zero"]]
        assert not [v for v in flagged if truth[v] == 0], rule
        assert len(flagged) >= 5, rule  # the head is found
        assert all(e["ci_low"] <= truth[e["value"]] <= e["ci_high"] for e in table["rows"]), rule
        per_value_miss = sum(not (e["per_value_ci_low"] <= truth[e["value"]] <= e["per_value_ci_high"])
                             for e in table["rows"])  # fmt: skip
        assert per_value_miss >= 5
        assert values == sorted(range(1024), key=lambda v: (-row["frequencies"][v], v))[:20]
    assert table["flag_rule"] == "Benjamini-Hochberg FDR 5% over d = 1,024"
    text = _show(capsys, str(out), "--top", "20")
    assert "Bonferroni over d = 1,024 at 5%" in text and "sim. 95% low" in text
    (printed,) = _tables(text)
    assert printed[0][-1] == "> 0" and {p[-1] for p in printed[1:]} <= {"yes", "-"}


def test_a_row_without_unbiased_estimates_shows_no_interval_and_no_flag(tmp_path, capsys):
    """An older row (no ``unbiased``): nothing valid after selection can be made from the published
    numbers and their per-value intervals, so the top-K says so instead of showing those."""
    row = {"task_id": "old", "schema_version": 2, "group": 0, "window_start": None, "window_end": None,
           "pane_timing": "ON_TIME", "pane_index": 0, "is_last_pane": True, "n_reports": 100,
           "mechanism": "grr", "epsilon": 1.0, "domain_size": 3, "postprocess": "base",
           "frequencies": [0.5, 0.3, 0.2], "std": [0.1, 0.1, 0.1], "ci_low": [0.3, 0.1, 0.0],
           "ci_high": [0.7, 0.5, 0.4]}  # fmt: skip
    out = _result_dir(tmp_path, [row])
    (table,) = _show_json(capsys, str(out))["windows"][0]["tables"]
    assert table["interval"] == "none: the row has no unbiased estimates"
    assert all(e["ci_low"] is None and e["above_zero"] is None for e in table["rows"])
    assert [e["per_value_ci_low"] for e in table["rows"]] == [0.3, 0.1, 0.0]
    (printed,) = _tables(_show(capsys, str(out)))
    assert printed[1][-3:] == ["n/a", "n/a", "n/a"]
    # a forged row whose unbiased estimates do not match its values is refused, not half-shown
    bad = _result_dir(tmp_path / "bad", [{**row, "unbiased": [0.5], "unbiased_std": [0.1, 0.1, 0.1]}])
    _fails(capsys, [str(bad)], "'unbiased' does not hold 3 entries")


def test_flag_rule_choices_are_the_selection_rules(capsys):
    from ldp import selection

    assert show.FLAG_RULES == selection.RULES and show.DEFAULT_FLAG_RULE == selection.DEFAULT_RULE
    _fails(capsys, ["somewhere", "--flag_rule", "holm"], "flag_rule")
