"""docs/results.md is what tools/results_page.py generates from the template and the recorded results."""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

import pytest

from tools import results_page as rp


def test_committed_page_is_current() -> None:
    page = rp.render_page(rp.TEMPLATE.read_text(encoding="utf-8"))
    committed = rp.PAGE.read_text(encoding="utf-8")
    assert committed == page, f"docs/results.md is stale: run `{rp.COMMAND}`"


def test_page_links_resolve() -> None:
    """Every relative link of the page names a file of the checkout (links are relative to docs/)."""
    text = rp.PAGE.read_text(encoding="utf-8")
    targets = [t.split("#", 1)[0] for t in re.findall(r"\]\(([^)\s]+)\)", text)]
    local = [t for t in targets if t and not re.match(r"^[a-z]+://|^mailto:", t)]
    assert local, "the page links no file"
    missing = [t for t in local if not (rp.PAGE.parent / t).exists()]
    assert not missing, f"links to files that do not exist: {missing}"


def test_every_result_file_appears_on_the_page() -> None:
    text = rp.PAGE.read_text(encoding="utf-8")
    for path in rp.result_files():
        assert f"](../{rp._rel(path)})" in text, path


def test_check_flag(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    template = tmp_path / "template.md"
    template.write_text("# Results\n\nprose only\n", encoding="utf-8")
    page = tmp_path / "results.md"
    monkeypatch.setattr(rp, "TEMPLATE", template)
    monkeypatch.setattr(rp, "PAGE", page)
    monkeypatch.setattr(rp, "RESULT_DIRS", ())
    assert rp.main(["--check"]) == 1  # no page yet
    assert rp.main([]) == 0
    assert rp.main(["--check"]) == 0
    page.write_text(page.read_text(encoding="utf-8") + "a hand edit\n", encoding="utf-8")
    assert rp.main(["--check"]) == 1


def _write(root: Path, rel: str, data: object) -> None:
    path = root / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data) if not isinstance(data, str) else data, encoding="utf-8")


def test_source_directive_and_uncovered_files(tmp_path: Path) -> None:
    _write(
        tmp_path,
        "bench/results/a.json",
        {"command": "/x/y/main/.venv/bin/python -m bench.a --json bench/results/a.json", "machine": {
            "load_avg_at_end": [3.0, 2.0, 1.0], "load_avg_at_start": [1.5, 1.2, 1.0]}, "wall_seconds": 12.4},
    )  # fmt: skip
    _write(tmp_path, "bench/results/a.png", "not really a picture")
    _write(tmp_path, "experiments/results/b.json", {"setup": {"command": "python -m experiments.b"}})
    _write(tmp_path, "experiments/results/b.md", "# b\n")
    page = rp.render_page("# R\n\n## A\n\n<!-- source: bench/results/a.json -->\n", tmp_path)
    link = "[`bench/results/a.json`](../bench/results/a.json)"
    assert f"- {link} (load average at start 1.5 / 1.2 / 1.0" in page
    assert "(1, 5, 15 min); at end 3.0 / 2.0 / 1.0 (1, 5, 15 min); ran 12 s)" in page
    assert "recorded command: `.venv/bin/python -m bench.a --json bench/results/a.json`" in page
    assert "- figure: [`bench/results/a.png`](../bench/results/a.png)" in page
    # b.json is named by no directive: it gets its own section, with its write-up
    other = page.split("## Other recorded results", 1)[1]
    assert "### b" in other and "recorded command: `python -m experiments.b`" in other
    assert "- write-up: [`experiments/results/b.md`](../experiments/results/b.md)" in other
    assert "bench/results/a.json" not in other
    assert page == rp.render_page("# R\n\n## A\n\n<!-- source: bench/results/a.json -->\n", tmp_path)


def test_recorded_load_shapes() -> None:
    assert rp.recorded_load({"machine": {"load_avg_1m": 0.975}}) == "1.0"
    assert rp.recorded_load({"machine": "x86_64 2 cpu, load 12.2"}) == "12.2"
    assert rp.recorded_load({"machine": {"load_avg": [1, 2, 3]}}) == "1.0 / 2.0 / 3.0 (1, 5, 15 min)"
    assert rp.recorded_load({"machine": {"cpus": 2}}) is None
    assert rp.recorded_load([{"load_avg": 1.0}]) is None  # a list of records records no load


def test_short_command_keeps_relative_paths() -> None:
    cmd = "/work/main/.venv/bin/python -m x --data /home/u/repo/.cache/b/n1e8 --out /tmp/live/out"
    assert rp.short_command(cmd) == ".venv/bin/python -m x --data .cache/b/n1e8 --out /tmp/live/out"


def test_bad_directives_are_one_line_errors(tmp_path: Path) -> None:
    with pytest.raises(rp.ResultsError, match=r"line 2: .*'nothing/\*.json' matches no file"):
        rp.render_page("# R\n<!-- source: nothing/*.json -->\n", tmp_path)
    _write(tmp_path, "bench/results/s.json", [{"backend": "sqlite"}])
    with pytest.raises(rp.ResultsError, match="NAME one of"):
        rp.render_page("<!-- table: nosuch bench/results/s.json -->\n", tmp_path)
    with pytest.raises(rp.ResultsError, match="a result lacks 'd'"):
        rp.render_page("<!-- table: store bench/results/s.json -->\n", tmp_path)


def test_page_has_a_section_per_result_directory() -> None:
    text = rp.PAGE.read_text(encoding="utf-8")
    assert "## Benchmarks" in text and "## Paper reproductions" in text
    assert os.path.basename(rp.TEMPLATE) in text.splitlines()[0]  # the header says where to edit


def test_docs_index_lists_every_page() -> None:
    """docs/index.md, the one-line-per-page index the results page sits in, names every docs/*.md page."""
    docs = rp.PAGE.parent
    index = (docs / "index.md").read_text(encoding="utf-8")
    linked = set(re.findall(r"\]\(([\w.-]+\.md)\)", index))
    pages = {p.name for p in docs.glob("*.md")} - {"index.md"}
    assert not pages - linked, f"docs/index.md lacks a line for {sorted(pages - linked)}"
    assert not linked - pages, f"docs/index.md links pages that do not exist: {sorted(linked - pages)}"
