"""A store filled window by window from a simulated population: the dashboard's test and screenshot data.

Each window's estimates are computed by the numpy core (``ldp.oracles``: a population drawn from a Zipf
law, its reports encoded and estimated), published unpost-processed (method ``base``) so the 95% interval
``estimate +- 1.96 std`` describes the published number; panes (EARLY, ON_TIME, LATE), final flags, counts
and dead-letter reasons are written through the store's own write API (package ``store``, one transaction per
pane), as the job's sink writes them.

This is test and demo tooling; the real writer is ``--store`` on the aggregation jobs.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

__all__ = [
    "HH_WORDS",
    "HOSTILE_TEXTS",
    "SimulatedStream",
    "StoreWriter",
    "heavy_hitters_task",
    "open_writer",
    "write_heavy_hitters_windows",
    "write_hostile_tasks",
]


def open_writer(url: str) -> Any:
    """A writer for ``url`` over the project's store (``store.open_store``, the job's own writer),
    taking the keyword calls :class:`SimulatedStream` makes."""
    from store import open_store

    return StoreWriter(open_store(url, shared=False))


class StoreWriter:
    """Window-tuple keyword calls on a ``store.Store``."""

    def __init__(self, store: Any) -> None:
        self.store = store

    def close(self) -> None:
        self.store.close()

    def write_task(
        self,
        task_id: str,
        kind: str,
        mechanism: str,
        epsilon: float,
        summary: Mapping[str, Any],
        written_ms: int | None = None,
    ) -> None:
        self.store.write_task(
            task_id,
            kind=kind,
            mechanism=mechanism,
            epsilon=epsilon,
            task_json=json.dumps({"task_id": task_id, **({"domain_size": summary["domain_size"]}
                                                         if "domain_size" in summary else {})}),
            summary=summary,
            updated_ms=written_ms,
        )

    def write_pane(
        self,
        items: Sequence[Mapping[str, Any]],
        *,
        task_id: str,
        output: str,
        window: tuple[int, int],
        grp: int,
        pane_index: int,
        timing: str,
        n_reports: int,
        written_ms: int,
        method: str = "base",
    ) -> None:
        from store import FlatItem, FlatPane

        flat = [FlatItem(**{f: it.get(f) for f in FlatItem._fields}) for it in items]
        pane = FlatPane(
            output=output,
            grp=grp,
            method=method,
            n_reports=n_reports,
            n_items=len(flat),
            items=flat,
            extra={},
        )
        self.store.write_flat_pane(
            task_id, window[0], window[1], pane_index, timing, [pane], written_ms=written_ms
        )

    def begin_run(self, run_id: str, task_id: str, *, streaming: bool = True) -> None:
        """Records a live run of the task (``ldp_runs``), as a job does when it starts."""
        self.store.begin_run(run_id, task_id, streaming=streaming)

    def mark_final(self, task_id: str, window: tuple[int, int], final_ms: int) -> None:
        self.store.mark_final(task_id, window[0], window[1], final_ms=final_ms)

    def write_counts(
        self,
        task_id: str,
        window: tuple[int, int],
        *,
        read: int,
        accepted: int,
        rejected: int,
        late_dropped: int,
        reasons: Mapping[str, int],
        written_ms: int,
        lost: int = 0,
    ) -> None:
        counts = {
            "read": read,
            "accepted": accepted,
            "rejected": rejected,
            "late_dropped": late_dropped,
            "lost_records": lost,
            **{f"rejected_{k}": int(v) for k, v in reasons.items()},
        }
        self.store.write_counts(task_id, window[0], window[1], counts, written_ms=written_ms)


#: Labels of the simulated browser task (value i is LABELS[i]).
LABELS = (
    "chrome",
    "safari",
    "firefox",
    "edge",
    "opera",
    "samsung",
    "brave",
    "vivaldi",
    "yandex",
    "uc",
    "duckduckgo",
    "whale",
    "qq",
    "sogou",
    "maxthon",
    "seamonkey",
    "palemoon",
    "waterfox",
    "falkon",
    "midori",
    "konqueror",
    "epiphany",
    "lynx",
    "w3m",
    "links",
    "dillo",
    "netsurf",
    "otter",
    "basilisk",
    "k-meleon",
    "qutebrowser",
    "surf",
)


@dataclass
class SimulatedStream:
    """Windows of a simulated frequency task: GRR at ``epsilon`` over ``len(LABELS)`` browser names, a Zipf
    population (``exponent``) of ``users_per_window`` reports per window, seeded from ``seed``."""

    task_id: str = "browsers"
    epsilon: float = 1.5
    window_s: int = 60
    users_per_window: int = 3000
    exponent: float = 1.3
    seed: int = 2026
    start_ms: int = 1_795_000_000_000
    _rng: np.random.Generator = field(init=False, repr=False)

    def __post_init__(self) -> None:
        self._rng = np.random.default_rng(np.random.SeedSequence(self.seed))

    @property
    def domain_size(self) -> int:
        return len(LABELS)

    def summary(self) -> dict[str, Any]:
        return {
            "task_id": self.task_id,
            "kind": "frequency",
            "mechanism": "grr",
            "epsilon": self.epsilon,
            "domain_size": self.domain_size,
            "labels": list(LABELS),
            "postprocess": "base",
            "window": {"size_s": self.window_s, "allowed_lateness_s": self.window_s},
        }

    def window(self, index: int) -> tuple[int, int]:
        start = self.start_ms + index * self.window_s * 1000
        return start, start + self.window_s * 1000

    def estimate_rows(self, n: int) -> list[dict[str, Any]]:
        """The rows of one pane: ``n`` reports drawn, encoded and estimated by the core."""
        from ldp.datasets import sample_population
        from ldp.oracles import make_oracle

        d = self.domain_size
        oracle = make_oracle("grr", self.epsilon, d)
        values = sample_population(f"zipf:{self.exponent}", n, d, rng=self._rng)
        est = oracle.estimate_reports(oracle.encode(values, rng=self._rng))
        std = np.asarray(est.std, dtype=np.float64)  # Eq. 4 at the clipped estimate (ldp.intervals "normal")
        freqs = np.asarray(est.frequencies, dtype=np.float64)
        lo, hi = freqs - 1.96 * std, freqs + 1.96 * std
        from ldp.intervals import zero_p_values
        from ldp.selection import flag_p_values

        p_zero = zero_p_values(oracle, est)  # GRR: exact binomial p-values of frequency 0, as the job's rows
        found = flag_p_values(p_zero, d) & (freqs > 0)  # the job's flag: Bonferroni over the domain
        rows = []
        for i in range(d):
            rows.append(
                {
                    "item": i,
                    "label": LABELS[i],
                    "estimate": float(freqs[i]),
                    "std": float(std[i]),
                    "ci_low": float(lo[i]),
                    "ci_high": float(hi[i]),
                    "unbiased": float(freqs[i]),
                    "unbiased_std": float(std[i]),
                    "ci_includes_zero": int(not found[i]),
                    "extra_json": json.dumps({"p_zero": float(p_zero[i])}),
                    "method": "base",
                }
            )
        return rows

    def panes(self, index: int) -> Iterator[tuple[str, int, float]]:
        """The panes of window ``index``: ``(timing, n_reports, written offset s after the window end)``."""
        n = self.users_per_window
        yield "EARLY", n // 2, -self.window_s / 2
        yield "ON_TIME", n, 1.5 + (index % 3) * 0.4
        if index % 4 == 1:
            yield "LATE", n + n // 50, 12.0

    def write_window(self, store: Any, index: int, *, now_ms: int | None = None, final: bool = True) -> None:
        """Writes every pane of window ``index`` (at their simulated times unless ``now_ms`` is given),
        its counts, and its final flag."""
        window = self.window(index)
        n_last = self.users_per_window
        for pane_index, (timing, n, offset) in enumerate(self.panes(index)):
            written = now_ms if now_ms is not None else int(window[1] + offset * 1000)
            store.write_pane(
                self.estimate_rows(n),
                task_id=self.task_id,
                output="estimates",
                window=window,
                grp=0,
                pane_index=pane_index,
                timing=timing,
                n_reports=n,
                written_ms=written,
            )
            n_last = n
        rejected = 7 + (index * 5) % 11
        reasons = {"value_out_of_domain": rejected - 3, "wrong_task_id": 2, "bad_report": 1}
        late = 4 if index % 4 == 1 else 0
        store.write_counts(
            self.task_id,
            window,
            read=n_last + rejected + late,
            accepted=n_last,
            rejected=rejected,
            late_dropped=late,
            reasons=reasons,
            written_ms=now_ms if now_ms is not None else window[1] + 2000,
        )
        if final:
            store.mark_final(self.task_id, window, now_ms if now_ms is not None else window[1] + 61_000)


#: Texts that run script or break markup if a page parses them as HTML (the dashboard's XSS tests).
HOSTILE_TEXTS = (
    "<img src=x onerror=window.__xss=1>",
    "<script>window.__xss=1</script>",
    "\"'><svg onload=window.__xss=1>",
    "</div></td></table><i class=ldp-injected>x</i>",
)


def write_hostile_tasks(store: Any, now_ms: int) -> dict[str, str]:
    """Writes, through ``store`` (a :class:`StoreWriter`), a frequency task and a range task whose every
    stored text is hostile (:data:`HOSTILE_TEXTS`): task ids, value labels (rows and summary), range
    attribute names, methods, dead-letter reasons, a run id, summary keys and values.
    Returns ``{"frequency": task id, "range": task id}``; both have one window ending 10 s before
    ``now_ms``."""
    h = HOSTILE_TEXTS
    freq_id, range_id = f"freq {h[0]}", f"range {h[2]}"
    window = (now_ms - 70_000, now_ms - 10_000)
    _write_hostile_frequency(store, freq_id, window, now_ms)
    _write_hostile_range(store, range_id, window, now_ms)
    return {"frequency": freq_id, "range": range_id}


def _write_hostile_frequency(store: Any, freq_id: str, window: tuple[int, int], now_ms: int) -> None:
    """The frequency task: hostile summary, run id, labels, method and dead-letter reasons; two panes."""
    h = HOSTILE_TEXTS
    summary = {
        "labels": [f"{h[i % len(h)]} #{i}" for i in range(6)],
        "description": h[1],
        "run": {
            "run_id": h[3],
            "budget": {"policy": {h[0]: h[1]}, "per_period": {"basic": 2.0, "tight": 1.5}},
        },
    }
    store.write_task(freq_id, "frequency", "grr", 1.0, summary, written_ms=now_ms)
    store.begin_run(h[3], freq_id)  # a hostile run id, shown in the freshness line
    freq_rows = [
        {
            "item": i,
            "label": f"{h[i % len(h)]} #{i}" if i % 2 == 0 else None,  # odd values: the summary's labels
            "estimate": 0.3 - 0.04 * i,
            "std": 0.01,
            "ci_low": 0.28 - 0.04 * i,
            "ci_high": 0.32 - 0.04 * i,
        }
        for i in range(6)
    ]
    for pane_index, timing in enumerate(("ON_TIME", "LATE")):
        store.write_pane(
            freq_rows,
            task_id=freq_id,
            output="estimates",
            window=window,
            grp=0,
            pane_index=pane_index,
            timing=timing,
            n_reports=1000 + pane_index,
            written_ms=window[1] + 1000 * (pane_index + 1),
            method=h[1],
        )
    store.write_counts(
        freq_id,
        window,
        read=1010,
        accepted=1000,
        rejected=10,
        late_dropped=0,
        reasons={text: 2 + i for i, text in enumerate(h)},
        written_ms=window[1] + 1000,
    )


def _write_hostile_range(store: Any, range_id: str, window: tuple[int, int], now_ms: int) -> None:
    """The range task: a hostile summary key, attribute names in its queries and method; one pane."""
    h = HOSTILE_TEXTS
    store.write_task(range_id, "range", "hdg", 1.0, {"labels": None, h[3]: {"budget": h[0]}}, now_ms)
    range_rows = [
        {
            "item": q,
            "estimate": 0.1 * (q + 1),
            "std": 0.01,
            "ci_low": 0.1 * (q + 1) - 0.02,
            "ci_high": 0.1 * (q + 1) + 0.02,
            "extra_json": json.dumps({"query": {h[q % len(h)]: [q, q + 3], "age": [0, 9]}}),
        }
        for q in range(4)
    ]
    store.write_pane(
        range_rows,
        task_id=range_id,
        output="answers",
        window=window,
        grp=0,
        pane_index=0,
        timing="ON_TIME",
        n_reports=900,
        written_ms=window[1] + 800,
        method=h[0],
    )


#: The frequent strings of the simulated heavy-hitters task (at most 4 UTF-8 bytes each, an emoji among
#: them); their shares drift from window to window.
HH_WORDS = ("yeet", "rizz", "\U0001f600", "slay", "mid", "sus", "lol", "brb", "ngl", "omg")


def heavy_hitters_task(task_id: str = "new-words") -> dict[str, Any]:
    """The simulated heavy-hitters task: PEM at eps 4 over strings of at most 4 bytes, the top 10."""
    return {"task_id": task_id, "kind": "heavy_hitters", "mechanism": "pem", "epsilon": 4.0, "max_length": 4,
            "top_k": 10, "window": {"size_s": 60}}  # fmt: skip


def _hh_values(rng: np.random.Generator, index: int, users: int) -> list[Any]:
    """Window ``index``'s strings: :data:`HH_WORDS` with drifting Zipf-like shares (70% of the users; "rizz"
    rising, "yeet" falling), the rest one user each of a random 4-byte string."""
    ranks = np.arange(1, len(HH_WORDS) + 1, dtype=np.float64)
    weights = ranks**-1.1
    weights[0] *= 1.0 / (1.0 + 0.25 * index)  # "yeet" fades
    weights[1] *= 1.0 + 0.3 * index  # "rizz" rises
    shares = 0.7 * weights / weights.sum()
    counts = rng.multinomial(users, [*shares, 0.3])
    values: list[Any] = [w for w, c in zip(HH_WORDS, counts[:-1], strict=True) for _ in range(int(c))]
    values += [bytes(b) for b in rng.integers(0, 256, (int(counts[-1]), 4), dtype=np.uint8)]
    return [values[i] for i in rng.permutation(len(values))]


def write_heavy_hitters_windows(
    store: Any,
    task_obj: Mapping[str, Any],
    start_ms: int,
    windows: int,
    *,
    users_per_window: int = 6000,
    seed: int = 2026,
    open_last: bool = False,
) -> list[Any]:
    """Writes ``windows`` one-minute windows of a heavy-hitters task through ``store`` (a ``store.Store``):
    per window the aggregator's own row over the reports of :func:`_hh_values` encoded by the task's client
    (``wire.client.make_client_encoder``), ON_TIME and final (``open_last``: the last one an EARLY pane, not
    final). A ``trie``-mode task runs the aggregator's window sequence: each window's clients report at the
    level the previous window published. Returns the rows."""
    from ldp.aggregate import WindowInfo, finalize_window, make_aggregator
    from ldp.task import parse_task
    from wire.client import make_client_encoder

    task = parse_task(dict(task_obj))
    agg, encoder = make_aggregator(task), make_client_encoder(task)
    sequence = agg.window_sequence()
    state = None if sequence is None else sequence.initial_state()
    rng = np.random.default_rng(np.random.SeedSequence(seed))
    store.write_task(task.task_id, kind="heavy_hitters", mechanism=str(task_obj["mechanism"]),
                     epsilon=float(task_obj["epsilon"]), task_json=json.dumps(dict(task_obj)))  # fmt: skip
    rows, level = [], 0
    for w in range(windows):
        ws, we = start_ms + w * 60_000, start_ms + (w + 1) * 60_000
        timing = "EARLY" if open_last and w == windows - 1 and sequence is None else "ON_TIME"
        info = WindowInfo(ws, we, timing, 0, timing != "EARLY")
        at_level = {} if sequence is None else {"level": level}  # trie mode: the published level
        reports, levels = encoder.encode_grouped(_hh_values(rng, w, users_per_window), rng=rng, **at_level)
        acc = _hh_accumulate(agg, reports, levels)
        if sequence is None:
            window_rows = finalize_window(agg, acc, info)
        else:
            state, window_rows, publication = sequence.step(state, acc.accs, info)
            level = int(publication["level"]) if publication else level
        written = we - 30_000 if timing == "EARLY" else we + 1500
        store.write_pane(task.task_id, ws, we, 0, timing, window_rows, written_ms=written)
        if timing != "EARLY":
            store.mark_final(task.task_id, ws, we, final_ms=we + 61_000)
        rows += window_rows
    return rows


def _hh_accumulate(agg: Any, reports: Any, levels: np.ndarray) -> Any:
    """The task accumulator of one window's reports, each in its level's group."""
    from ldp.aggregate import GroupAccumulators, accumulate
    from ldp.reports import Reports

    acc = GroupAccumulators()
    for level in np.unique(levels):
        at = levels == level
        acc = accumulate(agg, acc, int(level), Reports(values=reports.values[at], seeds=reports.seeds[at]))
    return acc
