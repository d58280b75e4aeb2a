"""Every command in README.md runs as written; its Python snippet runs; its links stay inside the repo.

How the README is checked (the convention for whoever edits it):

* Every fenced ```` ```bash ```` block is run, in document order, with ``bash -e -o pipefail``, in ONE
  working directory: a fresh copy of the repository (tracked and new files; ``.venv`` and ``.cache`` are
  links to the real ones), with ``.venv/bin`` first on ``PATH`` (so ``python`` and ``ldp-beam`` are the
  project's). Later blocks see the files earlier blocks wrote. A block passes when it exits 0.
* A block that cannot run here is marked by an HTML comment on the line(s) before its opening fence::

      <!-- not run by tests: needs a Pub/Sub subscription -->
      ```bash
      ...

  (or by a first line ``# not run by tests: REASON`` inside the block). The reason is the skip message.
  Use it for commands that need a service (a Pub/Sub subscription, a Flink cluster, Dataflow), run for
  minutes (benchmarks, paper reproductions), run forever (streaming without ``--streaming_duration``) or
  would recurse (``./run_local.sh test``).
* A non-bash block (e.g. the task JSON) preceded by ``<!-- file: task.json -->`` is written to that path
  in the working directory before the bash blocks after it run, so commands can use it as shown.
* ```` ```python ```` blocks are doctests when they contain ``>>>`` lines; otherwise they are executed
  (in the working directory) and must not raise.

:data:`PENDING` lists, by the first command of a block, what does not run as written in today's README and
why; each is skipped with that reason until the README is rewritten, and an entry that matches no block
fails (remove it once its block is fixed or marked).
"""

from __future__ import annotations

import doctest
import os
import re
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

import pytest

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parent.parent
README = REPO / "README.md"
BLOCK_TIMEOUT_S = 900

SKIP_RE = re.compile(r"not run by tests:\s*(.+?)\s*(?:-->)?\s*$", re.I)
FILE_RE = re.compile(r"<!--\s*file:\s*(\S+)\s*-->")

#: Blocks of today's README that do not run as written, by the start of their first command -> why.
PENDING: dict[str, str] = {}


@dataclass
class Block:
    lang: str
    text: str
    line: int  # 1-based line of the opening fence
    skip: str | None  # the "not run by tests" reason
    file: str | None  # the <!-- file: NAME --> target

    @property
    def first(self) -> str:
        """The block's first command (comment-free lines), for PENDING."""
        lines = [ln for ln in self.text.splitlines() if ln.strip() and not ln.lstrip().startswith("#")]
        return "\n".join(lines[:2])

    @property
    def id(self) -> str:
        return f"line{self.line}-{self.lang or 'text'}"


def parse_blocks(text: str) -> list[Block]:
    """The fenced code blocks of a Markdown text (indented fences of list items included)."""
    lines = text.splitlines()
    blocks: list[Block] = []
    i = 0
    while i < len(lines):
        m = re.match(r"^(\s*)```(\w*)\s*$", lines[i])
        if not m:
            i += 1
            continue
        indent, lang, start = m.group(1), m.group(2), i
        body = []
        i += 1
        while i < len(lines) and not re.match(rf"^{re.escape(indent)}```\s*$", lines[i]):
            ln = lines[i]
            body.append(ln[len(indent) :] if ln.startswith(indent) else ln.lstrip())
            i += 1
        i += 1
        skip = file = None
        j = start - 1
        while j >= 0 and not lines[j].strip():
            j -= 1
        while j >= 0 and lines[j].strip().startswith("<!--"):  # the comments right before the fence
            comment = lines[j].strip()
            if (s := SKIP_RE.search(comment)) is not None:
                skip = s.group(1)
            if (f := FILE_RE.search(comment)) is not None:
                file = f.group(1)
            j -= 1
        if body and (s := re.match(r"^#\s*not run by tests:\s*(.+)$", body[0].strip(), re.I)):
            skip = s.group(1)
        blocks.append(Block(lang, "\n".join(body) + "\n", start + 1, skip, file))
    return blocks


BLOCKS = parse_blocks(README.read_text(encoding="utf-8"))
RUNNABLE = [b for b in BLOCKS if b.lang in ("bash", "sh", "python")]


def _matches(block: Block, start: str) -> bool:
    return block.first.startswith(start) or block.text.lstrip().startswith(start)


def _pending(block: Block) -> str | None:
    return next((reason for start, reason in PENDING.items() if _matches(block, start)), None)


class Workdir:
    """The copy of the repository the README runs in, and which blocks ran there."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.done: set[int] = set()
        self.failed: dict[int, str] = {}

    def env(self) -> dict[str, str]:
        env = dict(os.environ)
        env["PATH"] = str(self.root / ".venv" / "bin") + os.pathsep + env.get("PATH", "")
        env.pop("PYTHONPATH", None)
        env.pop("VIRTUAL_ENV", None)
        return env

    def run_through(self, index: int) -> None:
        """Runs (once) every earlier block and writes every earlier file block, then block ``index``."""
        for k, block in enumerate(BLOCKS[: index + 1]):
            if k in self.done:
                continue
            self.done.add(k)
            if block.file:
                target = self.root / block.file
                target.parent.mkdir(parents=True, exist_ok=True)
                target.write_text(block.text, encoding="utf-8")
            if block.lang not in ("bash", "sh", "python") or block.skip or _pending(block):
                continue
            problem = self._run(block)
            if problem:
                self.failed[k] = problem

    def _run(self, block: Block) -> str | None:
        if block.lang == "python":
            return _run_python(block, self.root)
        try:
            out = subprocess.run(
                ["bash", "-e", "-o", "pipefail", "-c", block.text],
                cwd=self.root, env=self.env(), capture_output=True, text=True, timeout=BLOCK_TIMEOUT_S,
            )  # fmt: skip
        except subprocess.TimeoutExpired:
            return f"timed out after {BLOCK_TIMEOUT_S} s"
        if out.returncode != 0:
            tail = "\n".join((out.stdout + out.stderr).strip().splitlines()[-15:])
            return f"exit {out.returncode}:\n{tail}"
        return None


def _run_python(block: Block, cwd: Path) -> str | None:
    old = os.getcwd()
    os.chdir(cwd)
    try:
        if ">>>" in block.text:
            test = doctest.DocTestParser().get_doctest(block.text, {}, f"README.md:{block.line}", None, 0)
            runner = doctest.DocTestRunner(optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
            runner.run(test, out=lambda s: None)
            res = runner.summarize(verbose=False)
            return f"{res.failed} of {res.attempted} doctest examples failed" if res.failed else None
        try:
            exec(compile(block.text, f"README.md:{block.line}", "exec"), {"__name__": "readme"})
        except Exception as exc:  # the snippet must run; report what it raised
            return f"{type(exc).__name__}: {exc}"
        return None
    finally:
        os.chdir(old)


def _repo_files() -> list[str]:
    """The repository's files as a clone has them (tracked, or new and not ignored)."""
    listed = subprocess.run(
        ["git", "ls-files", "--cached", "--others", "--exclude-standard", "-z"],
        cwd=REPO, capture_output=True, check=True,
    )  # fmt: skip
    return [f for f in listed.stdout.decode().split("\0") if f and (REPO / f).is_file()]


def _copy_repo(dst: Path) -> None:
    for f in _repo_files():
        (dst / f).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(REPO / f, dst / f)
    for name in (".venv", ".cache"):
        if (REPO / name).exists():
            os.symlink(REPO / name, dst / name)


@pytest.fixture(scope="module")
def workdir(tmp_path_factory) -> Workdir:
    if shutil.which("git") is None or shutil.which("bash") is None:
        pytest.fail("git and bash are needed to run the README")
    # the copy's tools/ensure_venv.sh must find the environment current (it never rebuilds through a link)
    subprocess.run(["bash", str(REPO / "tools" / "ensure_venv.sh")], check=True)
    root = tmp_path_factory.mktemp("readme") / "repo"
    root.mkdir()
    _copy_repo(root)
    return Workdir(root)


@pytest.mark.parametrize("block", RUNNABLE, ids=[b.id for b in RUNNABLE])
def test_readme_block_runs_as_written(block: Block, workdir: Workdir) -> None:
    if block.skip:
        pytest.skip(f"README.md:{block.line}: not run by tests: {block.skip}")
    if (reason := _pending(block)) is not None:
        pytest.skip(f"README.md:{block.line}: pending README rewrite: {reason}")
    index = BLOCKS.index(block)
    workdir.run_through(index)
    problem = workdir.failed.get(index)
    assert problem is None, f"README.md:{block.line} ({block.lang}) failed: {problem}"


def test_pending_entries_match_blocks() -> None:
    """Every PENDING entry still names a block of the README (else the README moved on: drop it)."""
    stale = [k for k in PENDING if not any(_matches(b, k) for b in BLOCKS)]
    assert not stale, f"PENDING entries that match no README block: {stale}"


#: Paths today's README names outside the repository (as code, not links) -> why they are tolerated for now.
PENDING_OUTSIDE: dict[str, str] = {}


def test_readme_links_stay_inside_the_repository() -> None:
    """Every relative link points to a file a clone has (tracked or new, not git-ignored); no link or code
    path leaves the repository (``../``)."""
    text = README.read_text(encoding="utf-8")
    have = set(_repo_files())
    have |= {str(Path(f).parent) for f in have}  # directories of those files
    outside, missing = [], []
    for t in re.findall(r"\]\(([^)\s]+)\)", text):
        if re.match(r"^[a-z]+://|^mailto:|^#", t):
            continue
        rel = os.path.normpath(t.split("#", 1)[0])
        if rel.startswith(".."):
            outside.append(t)
        elif rel not in have:
            missing.append(t)
    code_paths = [p for p in re.findall(r"`(\.\./[^`\s]+)`", text) if p not in PENDING_OUTSIDE]
    assert not outside and not code_paths, f"paths outside the repository: {outside + code_paths}"
    assert not missing, f"links to files a clone does not have: {missing}"
    stale = [p for p in PENDING_OUTSIDE if p not in text]
    assert not stale, f"PENDING_OUTSIDE entries the README no longer names: {stale}"


def test_parse_blocks_conventions() -> None:
    md = (
        "intro\n\n<!-- not run by tests: needs a Pub/Sub subscription -->\n```bash\nrun me\n```\n\n"
        "<!-- file: task.json -->\n```json\n{\"a\": 1}\n```\n\n* item\n\n  ```bash\n  echo indented\n  ```\n"
        "```bash\n# not run by tests: takes minutes\nsleep 600\n```\n"
    )
    blocks = parse_blocks(md)
    assert [(b.lang, b.skip, b.file) for b in blocks] == [
        ("bash", "needs a Pub/Sub subscription", None),
        ("json", None, "task.json"),
        ("bash", None, None),
        ("bash", "takes minutes", None),
    ]
    assert blocks[1].text == '{"a": 1}\n' and blocks[2].text == "echo indented\n"
