"""The heavy_hitters kind's aggregator and rows: one group per PEM level, finalize = the core's search.

A report is ``(group = level, seed, value = y)`` (:func:`pem_reports`). Each level's accumulator is a
:class:`LevelAccumulator`: the reports themselves (seed and ``y``, 9 to 12 bytes each) until they would
take more memory than the level's Walsh array, then that array (:mod:`ldp.heavy_hitters.sketch`: sums of
+-1, merged by addition, exact in any order), held in the smallest integer type that cannot overflow for
the reports it has summed (``|W| <= reports * g``: ``int16``, then ``int32`` up to ``2**31 / g`` reports,
about 33 million at eps 4, then ``int64``; :func:`~ldp.heavy_hitters.sketch.walsh_dtype`). A direct level
of 22 bits is 16 MiB in ``int32`` and a hashed level (4 rows of 2**20) 16 MiB, not the 32 MiB of ``int64``,
and a bundle of a few thousand reports moves kilobytes through Beam's accumulator coder, not the arrays.
The verification level (and the levels of the ``olh`` search) keep their reports: their candidates are
known only once the search ends.

``finalize`` rebuilds the core's accumulator and runs :meth:`ldp.heavy_hitters.PEM.estimate` (the level
search, then the verification group's exact estimates and the publication rule): one
:class:`HeavyHittersRow` (``schemas/heavy_hitters_estimate.avsc``) per window and pane.

In ``trie`` mode (the task's ``mode``) :meth:`HeavyHittersAggregator.window_sequence` gives
:class:`HeavyHittersTrie`, the :class:`ldp.aggregate.WindowSequence` the stack finalizes the windows with, in
order: each window scores its scheduled level only (:class:`ldp.heavy_hitters.trie.TrieSearch`), its row
carries the ``trie`` record (the level, its reports and stale ones, the surviving prefixes) and its
publication (:func:`trie_publication`) tells the next window's clients their level and carries the full
state, so that a restarted job resumes from its newest publication (the aggregator's ``resume_from``:
:meth:`HeavyHittersTrie.initial_state` is then that publication's state, checked against the task).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any, NamedTuple

import numpy as np

from ldp.aggregate import OutputSpec, ResultRow, TaskAggregator, WindowInfo
from ldp.heavy_hitters.pem import PEM, HeavyHitters, HHReports, Level, PEMAccumulator
from ldp.heavy_hitters.sketch import SketchAccumulator, walsh_add, walsh_dtype
from ldp.heavy_hitters.strings import StringBatch, escape_bytes
from ldp.heavy_hitters.trie import TrieSearch, TrieState, TrieWindow, prefix_records
from ldp.kinds.heavy_hitters.task import HeavyHittersTask
from ldp.payload import PayloadField, PayloadSpec, Refusal
from ldp.reports import Reports
from ldp.rows import pane_header

__all__ = [
    "HeavyHittersRow",
    "HeavyHittersAggregator",
    "HEAVY_HITTERS_ESTIMATES",
    "LevelAccumulator",
    "LevelValidator",
    "pem_reports",
    "heavy_hitters_row",
    "HeavyHittersTrie",
    "trie_row",
    "trie_publication",
    "trie_context",
    "MECHANISMS",
]

#: the mechanism registry of the kind (its wire spec is declared on the class)
MECHANISMS: dict[str, type] = {"pem": PEM}


class HeavyHittersRow(NamedTuple):
    """The heavy hitters of one window and pane (the fields of ``schemas/heavy_hitters_estimate.avsc``).

    ``heavy_hitters``: ``{value, estimate, std, ci_low, ci_high}`` in descending order of estimate, the value
    printed by :func:`ldp.heavy_hitters.strings.escape_bytes` (``\\xNN`` for a byte that is not UTF-8),
    the estimate the frequency among all ``n_reports`` users with its 95% interval; ``levels``: per level
    its bits, oracle, ``g``, reports, candidates scored and prefixes kept (published at the last);
    ``tested``: values tested by the ``rule`` at ``alpha``; ``threshold_z``: the smallest published
    estimate in null standard deviations (None: nothing passed, or no test); ``trie``: in trie mode the
    window's step (:func:`trie_row`), else None."""

    task_id: str
    schema_version: int
    window_start: int | None
    window_end: int | None
    pane_timing: str
    pane_index: int
    is_last_pane: bool
    mechanism: str
    epsilon: float
    max_length: int
    top_k: int
    search: str
    rule: str
    alpha: float | None
    n_reports: int
    heavy_hitters: list[dict[str, Any]]
    levels: list[dict[str, Any]]
    tested: int
    threshold_z: float | None
    #: the row type (``schemas/heavy_hitters_estimate.avsc``): readers dispatch on it
    row_schema: str | None = "heavy_hitters_estimate"
    trie: dict[str, Any] | None = None
    output = "estimates"


HEAVY_HITTERS_ESTIMATES = OutputSpec("estimates", "heavy_hitters_estimate", "", "estimates", None)


def pem_reports(reports: HHReports) -> tuple[Reports, np.ndarray]:
    """The wire form of the core's reports: ``(Reports(values=y, seeds=seed), groups = level)``."""
    y = np.asarray(reports.y, dtype=np.uint64).astype(np.int64)
    seeds = np.asarray(reports.seed, dtype=np.uint64)
    return Reports(values=y, seeds=seeds), np.asarray(reports.level).astype(np.int64)


class LevelValidator:
    """The report checks of one level: ``value`` in ``[0, g)``, a 64-bit ``seed``."""

    name = "pem"
    report_fields = ("values", "seeds")

    def __init__(self, level: Level) -> None:
        self.level = level
        self.payload = PayloadSpec((
            PayloadField("values", "int64", low=0, high=level.g - 1),
            PayloadField("seeds", "uint64", invalid="invalid_seed"),
        ))

    def validate(self, reports: Reports) -> tuple[np.ndarray, np.ndarray]:
        n = len(reports)
        reasons = np.full(n, None, dtype=object)
        if reports.values is None or reports.seeds is None:
            reasons[:] = Refusal("missing_field", "pem reports carry value and seed")
            return np.zeros(n, dtype=bool), reasons
        y = np.asarray(reports.values, dtype=np.int64)
        ok = (y >= 0) & (y < self.level.g)
        why = f"value outside [0, {self.level.g}) at level {self.level.index}"
        reasons[~ok] = Refusal("out_of_domain", why)
        return ok, reasons


def _y_dtype(g: int) -> np.dtype:
    return np.dtype(np.uint16 if g <= 1 << 16 else np.uint32)


class LevelAccumulator:
    """One level's reports (see the module docstring): pending ``(seed, y)`` blocks and, once they outgrow
    it, the level's sketch (Walsh array); merged exactly by concatenation and addition."""

    def __init__(self, level: Level) -> None:
        self.level = level
        self.seeds: list[np.ndarray] = []
        self.ys: list[np.ndarray] = []
        self.pending = 0
        self.sketch: SketchAccumulator | None = None

    @property
    def n(self) -> int:
        return self.pending + (0 if self.sketch is None else self.sketch.n)

    def add(self, seeds: np.ndarray, y: np.ndarray) -> None:
        if seeds.size:
            self.seeds.append(np.asarray(seeds, dtype=np.uint64))
            self.ys.append(np.asarray(y).astype(_y_dtype(self.level.g)))
            self.pending += int(seeds.size)
        self._maybe_fold()

    def absorb(self, other: LevelAccumulator) -> None:
        """Adds ``other``'s reports (``other`` is left as it was)."""
        if other.sketch is not None:
            self._widen(self.n + other.sketch.n)
            if self.sketch is None:
                self.sketch = SketchAccumulator(other.sketch.spec, other.sketch.walsh.dtype)
            self.sketch.walsh += other.sketch.walsh
            self.sketch.counts += other.sketch.counts
        self.seeds.extend(other.seeds)
        self.ys.extend(other.ys)
        self.pending += other.pending
        self._maybe_fold()

    def reports(self) -> tuple[np.ndarray, np.ndarray]:
        """The pending reports, one array each (seeds ``uint64``, ``y`` ``uint64``)."""
        if not self.seeds:
            return np.zeros(0, np.uint64), np.zeros(0, np.uint64)
        return np.concatenate(self.seeds), np.concatenate(self.ys).astype(np.uint64)

    def fold(self) -> SketchAccumulator:
        """The level's sketch with every pending report added (a sketch level only)."""
        spec = self.level.sketch
        assert spec is not None, "only a sketch level has a Walsh array"
        self._widen(self.n)
        if self.sketch is None:
            self.sketch = SketchAccumulator(spec, walsh_dtype(self.n, spec.g))
        if self.pending:
            seeds, y = self.reports()
            walsh_add(self.sketch, seeds, y)
            self.seeds, self.ys, self.pending = [], [], 0
        return self.sketch

    def _widen(self, reports: int) -> None:
        """Promotes the sketch's integer type so that ``reports`` reports cannot overflow it."""
        if self.sketch is None:
            return
        want = walsh_dtype(reports, self.sketch.spec.g)
        if want.itemsize > self.sketch.walsh.dtype.itemsize:
            self.sketch.walsh = self.sketch.walsh.astype(want)

    def _maybe_fold(self) -> None:
        spec = self.level.sketch
        if spec is None:
            return
        per_report = 8 + _y_dtype(self.level.g).itemsize
        dense = spec.rows * spec.m * walsh_dtype(self.n, spec.g).itemsize
        if self.pending * per_report > dense:
            self.fold()


class HeavyHittersAggregator(TaskAggregator):
    """:class:`ldp.aggregate.Aggregator` of a :class:`HeavyHittersTask`: group ``j`` is level ``j`` of the
    task's PEM (its :class:`LevelAccumulator`); finalize runs the core's search and publication."""

    kind = HeavyHittersTask.kind
    outputs = (HEAVY_HITTERS_ESTIMATES,)
    uniform_oracle = False

    def validation_oracle(self, group: int) -> LevelValidator:
        return LevelValidator(self.mechanism.levels[group])

    def create_accumulator(self, group: int) -> LevelAccumulator:
        return LevelAccumulator(self.mechanism.levels[group])

    def add(self, group: int, acc: LevelAccumulator, reports: Reports) -> LevelAccumulator:
        acc.add(np.asarray(reports.seeds, dtype=np.uint64), np.asarray(reports.values, dtype=np.int64))
        return acc

    def merge(self, group: int, accs: Sequence[LevelAccumulator]) -> LevelAccumulator:
        out = accs[0]
        for acc in accs[1:]:
            out.absorb(acc)
        return out

    def finalize(self, accs: Mapping[int, LevelAccumulator], window: WindowInfo) -> list[ResultRow]:
        if not any(a.n for a in accs.values()):
            return []
        pem: PEM = self.mechanism
        result = pem.estimate(core_accumulator(pem, accs.values()))
        return [heavy_hitters_row(self.task, window, pem, result)]

    #: trie mode: the publication a restarted job resumes from (the job's ``--trie_dir``), None: afresh
    resume_from: dict[str, Any] | None = None

    def window_sequence(self) -> HeavyHittersTrie | None:
        """In ``trie`` mode the ordered, stateful finalize (:class:`HeavyHittersTrie`, resuming from
        ``resume_from``); else None."""
        if self.task.mode != "trie":  # type: ignore[attr-defined]
            return None
        return HeavyHittersTrie(self.task, resume_from=self.resume_from)  # type: ignore[arg-type]


class HeavyHittersTrie:
    """The :class:`ldp.aggregate.WindowSequence` of a trie-mode task: ``step`` runs
    :meth:`~ldp.heavy_hitters.trie.TrieSearch.step` on the scheduled level's accumulator (the other levels'
    reports are counted as stale, never folded) and returns the window's row and publication.

    ``resume_from``: a publication of an earlier run of the task (:func:`trie_publication`), checked
    (:meth:`check_resume`); :meth:`initial_state` is then its state, so the next step is generation
    ``G + 1``, and :attr:`resumed_window_end` its ``window_end``: the ordered finalize step counts a
    window ending by then as late. Pickles as its task and that publication (the core is rebuilt on first
    use)."""

    def __init__(self, task: HeavyHittersTask, resume_from: Mapping[str, Any] | None = None) -> None:
        self.task = task
        self.resume_from = None if resume_from is None else dict(resume_from)
        self._search: TrieSearch | None = None

    def __getstate__(self) -> dict[str, object]:
        return {"task": self.task, "resume_from": self.resume_from, "_search": None}

    @property
    def search(self) -> TrieSearch:
        if self._search is None:
            self._search = TrieSearch(self.task.make_mechanism(), trie_context(self.task))
        return self._search

    @property
    def resumed_window_end(self) -> int | None:
        """The resumed publication's ``window_end`` (None: not resumed, or the global window's)."""
        return None if self.resume_from is None else self.resume_from.get("window_end")

    def check_resume(self) -> TrieState:
        """The resumed state; :class:`ValueError` (one line) for a publication of another task or layout,
        or one whose state this task cannot step."""
        pub = self.resume_from
        if pub is None:
            return self.search.initial_state()
        if pub.get("task_id") != self.task.task_id:
            theirs = pub.get("task_id")
            raise ValueError(f"a publication of task {theirs!r}, not of task {self.task.task_id!r}")
        end = pub.get("window_end")
        if end is not None and (not isinstance(end, int) or isinstance(end, bool)):
            raise ValueError(f"the publication's window_end is integer ms or null, not {end!r}")
        return self.search.resume(pub)

    def initial_state(self) -> TrieState:
        """Level 0 with nothing published, or the resumed publication's state."""
        return self.check_resume()

    def step(self, state: TrieState, accs: Mapping[int, LevelAccumulator], window: WindowInfo
             ) -> tuple[TrieState, list[ResultRow], dict[str, Any]]:
        pem = self.search.pem
        scheduled = accs.get(state.level)
        stale = sum(a.n for g, a in accs.items() if g != state.level)
        core = core_accumulator(pem, [scheduled] if scheduled is not None else [])
        new, out = self.search.step(state, core, stale)
        row = trie_row(self.task, window, pem, new, out)
        return new, [row], trie_publication(self.task, window, new, out, self.search)


def trie_context(task: HeavyHittersTask) -> dict[str, Any]:
    """The task's keys that a trie state depends on beside its PEM's (the layout fingerprint's context)."""
    return {"task_id": task.task_id, "kind": task.kind, "schema_version": task.schema_version,
            "truncate": bool(task.truncate), "mode": task.mode}  # fmt: skip


def core_accumulator(pem: PEM, levels: Iterable[LevelAccumulator]) -> PEMAccumulator:
    """The core's accumulator of the levels' reports (a level without reports stays empty)."""
    out = pem.create_accumulator()
    for acc in levels:
        j = acc.level.index
        if acc.level.sketch is not None:
            out.sketches[j] = acc.fold()
        else:
            seeds, y = acc.reports()
            out.seeds[j], out.ys[j] = ([seeds], [y]) if seeds.size else ([], [])
    return out


def heavy_hitters_row(task: HeavyHittersTask, window: WindowInfo, pem: PEM, result: HeavyHitters
                      ) -> HeavyHittersRow:
    """The row of one window's :class:`~ldp.heavy_hitters.HeavyHitters`."""
    hitters = [
        {"value": escape_bytes(h.value), "estimate": h.estimate, "std": h.std, "ci_low": h.ci_low,
         "ci_high": h.ci_high}
        for h in result.hitters
    ]
    levels = [
        {"level": s.level, "bits": s.bits, "oracle": s.oracle, "g": s.g, "reports": s.reports,
         "candidates": s.candidates, "kept": s.kept, "verify": s.verify}
        for s in result.levels
    ]
    return HeavyHittersRow(
        **pane_header(task, window, mechanism=pem.name, row_schema="heavy_hitters_estimate"),  # type: ignore[arg-type]
        epsilon=float(pem.epsilon),
        max_length=int(pem.max_length),
        top_k=int(pem.top_k),
        search=pem.search,
        rule=pem.rule,
        alpha=pem.alpha,
        n_reports=int(result.n),
        heavy_hitters=hitters,
        levels=levels,
        tested=int(result.tested),
        threshold_z=result.threshold_z,
    )


def encode_values(task: HeavyHittersTask, values: Sequence[str | bytes] | StringBatch,
                  rng: np.random.Generator | None = None, level: int | None = None
                  ) -> tuple[Reports, np.ndarray]:
    """A client's reports of ``values`` and their groups (levels), through the task's PEM (``rng`` None:
    the OS CSPRNG); ``level``: every report at that level (trie mode)."""
    pem = task.make_mechanism()
    return pem_reports(pem.encode(values, rng=rng, truncate=task.truncate, level=level))


def _trie_record(task: HeavyHittersTask, state: TrieState, out: TrieWindow) -> dict[str, Any]:
    return {
        "generation": int(state.generation),
        "level": int(out.level),
        "status": out.status,
        "prefix_bits": int(state.prefix_bits),
        "reports_at_level": int(out.reports),
        "stale_reports": int(out.stale),
        "survivors": state.survivors,
        "prefixes": prefix_records(state, task.max_length),
    }


def trie_row(task: HeavyHittersTask, window: WindowInfo, pem: PEM, state: TrieState, out: TrieWindow
             ) -> HeavyHittersRow:
    """The row of one trie-mode window: at the verification level the heavy hitters as in one-window mode
    (frequencies among the level's ``n_reports`` users), else none; ``trie`` the step (``generation``,
    ``level`` scored, ``status``, ``prefix_bits``, ``reports_at_level``, ``stale_reports``, ``survivors`` and
    the best :data:`~ldp.heavy_hitters.trie.MAX_PUBLISHED_PREFIXES` ``prefixes``)."""
    result = out.hitters
    if result is None:
        result = HeavyHitters(out.reports, (), out.stats, 0, None)
    row = heavy_hitters_row(task, window, pem, result)
    return row._replace(trie=_trie_record(task, state, out))


def trie_publication(task: HeavyHittersTask, window: WindowInfo, state: TrieState, out: TrieWindow,
                     search: TrieSearch | None = None) -> dict[str, Any]:
    """What the next window's clients fetch: ``task_id``, ``generation``, ``level`` (where they report),
    ``window_end``, for the dashboard ``round``, ``prefix_bits``, ``survivors`` and the best ``prefixes``,
    and for a restarted job ``state`` (:meth:`~ldp.heavy_hitters.trie.TrieSearch.state_record`: every
    survivor and the layout fingerprint; ``search``: the task's, built when not given)."""
    record = _trie_record(task, state, out)
    if search is None:
        search = TrieSearch(task.make_mechanism(), trie_context(task))
    return {
        "task_id": task.task_id,
        "generation": record["generation"],
        "level": int(state.level),
        "window_end": window.end_ms,
        "status": out.status,
        "prefix_bits": record["prefix_bits"],
        "survivors": record["survivors"],
        "prefixes": record["prefixes"],
        "round": int(state.round),
        "state": search.state_record(state),
    }
