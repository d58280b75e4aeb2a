"""How the client of each kind of task turns a chosen input into what it sends, and which inputs to compare.

:data:`ADAPTERS` maps a kind's name (``ldp.kinds.KINDS``) to an :class:`Adapter`. An adapter builds the
kind's task for any mechanism the kind's task section lists, at a given epsilon (``tasks``), names the worst
input pairs (``pairs``) and encodes ``n`` copies of each input of a pair with the task's own client encoder
(``encode_pair``), returning :class:`Segment` s: the reports of the two inputs in one group (range tasks:
one segment per group, since the group travels with the report; other kinds: one segment).

A segment may carry ``decode``: cells the collector can compute from a report and the (public) input pair,
for reports whose payload is only meaningful together with their hash seed (OLH, BLH, memo-OLH, LOLOHA,
SVME, k-fold, sampling). A seeded payload without a decoder is an error, never silently skipped.

Nothing here knows a mechanism's name: what a mechanism sends is read from the ``Reports`` fields it
fills, so a mechanism added to a kind's registry is audited through its kind's adapter.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from ldp.reports import Reports
from ldp.task import parse_task

__all__ = ["ADAPTERS", "Adapter", "Pair", "Segment", "seed_decoder"]


@dataclasses.dataclass(frozen=True)
class Pair:
    """Two inputs whose report distributions an eps-LDP mechanism must keep within ``e^eps``."""

    label: str
    a: Any
    b: Any


@dataclasses.dataclass
class Segment:
    """The reports of input ``a`` and of input ``b`` that fell in one group (``label``; "" for one group)."""

    label: str
    a: Reports
    b: Reports
    decode: Callable[[Reports], np.ndarray] | None = None


def seed_decoder(hash_fn: Any, a: int, b: int) -> Callable[[Reports], np.ndarray]:
    """Cells of a local-hashing report ``(seed, value)`` against the pair ``(a, b)``: whether the seed's hash
    collides ``a`` and ``b``, and whether the value equals ``h(a)``, ``h(b)`` (what the aggregator counts as
    support); a function of the whole message, seed included."""

    def decode(r: Reports) -> np.ndarray:
        n = len(r)
        ha = np.asarray(hash_fn.hash(r.seeds, np.full(n, a, dtype=np.int64)), dtype=np.int64)
        hb = np.asarray(hash_fn.hash(r.seeds, np.full(n, b, dtype=np.int64)), dtype=np.int64)
        v = np.asarray(r.values, dtype=np.int64)
        return 4 * (ha == hb) + 2 * (v == ha) + (v == hb)

    return decode


def _oracle_hash(oracle: Any) -> Any:
    for obj in (oracle, getattr(oracle, "base", None)):
        h = getattr(obj, "hash", None)
        if h is not None and hasattr(h, "hash"):
            return h
    return None


class Adapter:
    """The audit's view of one kind's client (see the module docstring)."""

    def tasks(self, example: Mapping[str, Any], mechanism: str, epsilon: float) -> list[tuple[str, Any]]:
        """``[(label, task)]``: the kind's tasks of ``mechanism`` at ``epsilon`` the audit runs."""
        raise NotImplementedError

    def pairs(self, task: Any) -> list[Pair]:
        raise NotImplementedError

    def encode_pair(self, task: Any, pair: Pair, n: int, rng: np.random.Generator) -> list[Segment]:
        raise NotImplementedError

    def claimed_epsilon(self, task: Any) -> float:
        """The loss one report claims: the task's epsilon (memoized oracles: ``epsilon_1``)."""
        return float(task.epsilon)

    def resolved_name(self, task: Any) -> str:
        """The mechanism a task's client really runs (``auto`` resolved)."""
        return str(task.mechanism)


class FrequencyAdapter(Adapter):
    """Frequency tasks on a domain of 8 (small enough that a report's exact payload is one cell); the pair
    is two distinct values, the first and the last."""

    domain_size = 8

    def tasks(self, example, mechanism, epsilon):
        raw = {**example, "mechanism": mechanism, "epsilon": epsilon, "domain_size": self.domain_size}
        return [("", parse_task(raw))]

    def pairs(self, task):
        return [Pair("0 vs d-1", 0, task.domain_size - 1)]

    def claimed_epsilon(self, task):
        oracle = task.make_oracle()
        return float(getattr(oracle, "epsilon_1", task.epsilon))

    def resolved_name(self, task):
        return task.make_oracle().name

    def encode_pair(self, task, pair, n, rng):
        oracle = task.make_oracle()
        ra = oracle.encode(np.full(n, pair.a, dtype=np.int64), rng=rng)
        rb = oracle.encode(np.full(n, pair.b, dtype=np.int64), rng=rng)
        decode = None
        if ra.seeds is not None:
            h = _oracle_hash(oracle)
            if h is None:
                raise AssertionError(f"{oracle.name}: seeded reports but no hash to decode them")
            decode = seed_decoder(h, pair.a, pair.b)
        return [Segment("", ra, rb, decode)]


def _empty_like(r: Reports) -> Reports:
    return r.take(slice(0, 0))


class RangeAdapter(Adapter):
    """Range tasks (the kind's example attributes); pairs: the two corners of the domain, and two interior
    records (a third and two thirds of each attribute's domain). The group, drawn independently of the
    record, travels with the report: one segment per group."""

    def tasks(self, example, mechanism, epsilon):
        return [("", parse_task({**example, "mechanism": mechanism, "epsilon": epsilon}))]

    def pairs(self, task):
        ds = np.asarray(task.domain_sizes, dtype=np.int64)
        return [
            Pair("corners", np.zeros_like(ds), ds - 1),
            Pair("interior", ds // 3, (2 * ds) // 3),
        ]

    def encode_pair(self, task, pair, n, rng):
        mech = task.make_mechanism()
        out = []
        for rec in (pair.a, pair.b):
            records = np.tile(np.asarray(rec, dtype=np.int64), (n, 1))
            groups = mech.assign_groups(n, rng=rng)
            out.append(mech.encode(records, rng=rng, groups=groups))
        segs = []
        for g in sorted(set(out[0]) | set(out[1])):
            ra = out[0].get(g)
            rb = out[1].get(g)
            ra = _empty_like(rb) if ra is None else ra
            rb = _empty_like(ra) if rb is None else rb
            decode = None
            if ra.seeds is not None:
                oracle = mech.group_oracle(g)
                h = _oracle_hash(oracle)
                if h is None:
                    raise AssertionError(f"group {g}'s oracle sends a seed but exposes no hash to decode it")
                pa = int(mech.project(g, np.asarray(pair.a, dtype=np.int64)[None, :])[0])
                pb = int(mech.project(g, np.asarray(pair.b, dtype=np.int64)[None, :])[0])
                decode = seed_decoder(h, pa, pb)
            segs.append(Segment(f"group {g}", ra, rb, decode))
        return segs


def _constant_vectors(n: int, entries: Mapping[int, float]) -> Any:
    from ldp.sparse import SparseVectors

    items = np.array(sorted(entries), dtype=np.uint64)
    vals = np.array([entries[int(i)] for i in items], dtype=np.float64)
    return SparseVectors(np.arange(n + 1) * len(items), np.tile(items, n), np.tile(vals, n))


class SparseAdapter(Adapter):
    """Sparse tasks on d = 16 with sparsity 2 (user-level privacy, the default); pairs: one item at +1 and
    at -1, and two items at +1 against two other items at -1."""

    domain_size = 16
    sparsity = 2

    def tasks(self, example, mechanism, epsilon):
        raw = {**example, "mechanism": mechanism, "epsilon": epsilon, "domain_size": self.domain_size,
               "sparsity": self.sparsity}
        return [("", parse_task(raw))]

    def pairs(self, task):
        return [
            Pair("item 1 at +1 vs -1", {1: 1.0}, {1: -1.0}),
            Pair("items 1,2 at +1 vs 3,4 at -1", {1: 1.0, 2: 1.0}, {3: -1.0, 4: -1.0}),
        ]

    def encode_pair(self, task, pair, n, rng):
        from ldp.kinds.sparse.aggregate import to_reports

        mech = task.make_mechanism()
        ra = to_reports(mech, mech.encode(_constant_vectors(n, pair.a), rng=rng)[0])
        rb = to_reports(mech, mech.encode(_constant_vectors(n, pair.b), rng=rng)[0])
        decode = None
        if ra.seeds is not None:
            decode = self._seed_decoder(mech, sorted(set(pair.a) | set(pair.b)))
        return [Segment("", ra, rb, decode)]

    @staticmethod
    def _seed_decoder(mech: Any, items: Sequence[int]) -> Callable[[Reports], np.ndarray]:
        """The signed code the aggregator adds to each item of the pair (``S_x`` of docs/wire_format.md
        section 8), per report: a function of the seed and the codes."""
        from ldp.sparse.hashes import bins_signs

        params = getattr(mech, "params", None)
        if params is not None and hasattr(params, "bins"):
            family, d, binned = params.hash_family, int(params.domain_size), True
        elif hasattr(mech, "hash_family"):
            family, d, binned = mech.hash_family, int(mech.d), False
        else:
            raise AssertionError(f"{type(mech).__name__}: seeded reports but no hash family to decode them")

        def decode(r: Reports) -> np.ndarray:
            n = len(r)
            reals = np.asarray(r.reals, dtype=np.float64)
            b = reals.shape[1] if binned else 1
            codes = reals if binned else reals.sum(axis=1, keepdims=True)
            cols = []
            for x in items:
                h, sg = bins_signs(family, r.seeds, np.full(n, x, dtype=np.uint64), b, d)
                cols.append(np.rint(sg * codes[np.arange(n), np.asarray(h, dtype=np.int64)]).astype(np.int64))
            return np.stack(cols, axis=1)

        return decode


class NumericAdapter(Adapter):
    """Numeric tasks: the kind's example (one attribute on [0, 10]) and, where the task model accepts the
    mechanism there, three attributes on [0, 10] (the sample-k-of-m path); pairs: the attribute's low and
    high bound, and the interior pair 3 and 7 (every attribute at the same input)."""

    n_multi = 3

    def tasks(self, example, mechanism, epsilon):
        raw = {**example, "mechanism": mechanism, "epsilon": epsilon}
        out = [("one attribute", parse_task(raw))]
        attr = dict(raw["attributes"][0])
        multi = {**raw, "attributes": [{**attr, "name": f"a{j}"} for j in range(self.n_multi)]}
        try:
            out.append((f"{self.n_multi} attributes", parse_task(multi)))
        except ValueError as exc:
            if "one attribute" not in str(exc):  # a mechanism the task model keeps to one attribute
                raise
        return out

    def _bounds(self, task):
        a = task.attributes[0]
        return float(a.low), float(a.high)

    def pairs(self, task):
        lo, hi = self._bounds(task)
        w = hi - lo
        return [Pair("low vs high", lo, hi), Pair("interior", lo + 0.3 * w, lo + 0.7 * w)]

    def resolved_name(self, task):
        return task.make_mechanism().name

    def encode_pair(self, task, pair, n, rng):
        mech = task.make_mechanism()
        m = len(task.attributes)
        shape = (n, m) if m > 1 else (n,)
        ra = mech.encode(np.full(shape, pair.a, dtype=np.float64), rng=rng)
        rb = mech.encode(np.full(shape, pair.b, dtype=np.float64), rng=rng)
        return [Segment("", ra, rb)]


class HeavyHittersAdapter(Adapter):
    """Heavy-hitters tasks (the kind's example, ``max_length`` 3); pairs: two strings that differ from the
    first byte on, and two that differ only in their last byte (the same prefix at every level but the
    last). The level, drawn independently of the value, travels as the group: one segment per level, each
    decoded against the pair through the level's hash under the report's own seed."""

    def tasks(self, example, mechanism, epsilon):
        return [("", parse_task({**example, "mechanism": mechanism, "epsilon": epsilon}))]

    def pairs(self, task):
        b = task.max_length
        return [Pair("first byte", b"a" * b, b"z" * b), Pair("last byte", b"a" * b, b"a" * (b - 1) + b"b")]

    def resolved_name(self, task):
        return task.resolved_mechanism

    def encode_pair(self, task, pair, n, rng):
        from wire.client import make_client_encoder

        encoder = make_client_encoder(task)
        out = [encoder.encode_grouped([v] * n, rng=rng) for v in (pair.a, pair.b)]
        segs = []
        for g in range(task.n_groups):
            ra, rb = (r.take(np.flatnonzero(groups == g)) for r, groups in out)
            segs.append(Segment(f"group {g}", ra, rb, _level_decoder(encoder.mechanism, g, pair)))
        return segs


def _level_decoder(pem: Any, level: int, pair: Pair) -> Callable[[Reports], np.ndarray]:
    """Cells of a PEM report of ``level`` against the pair: whether its seed's hash collides the two values
    and whether its value is the hash of either (what the aggregator counts as support)."""
    from ldp.heavy_hitters.strings import encode_strings

    lv = pem.levels[level]

    def decode(r: Reports) -> np.ndarray:
        n = len(r)
        seeds = np.asarray(r.seeds, dtype=np.uint64)
        words = [np.repeat(encode_strings([v], pem.max_length).words(), n, axis=0) for v in (pair.a, pair.b)]
        ha, hb = (np.asarray(pem._buckets(lv, w, seeds), dtype=np.int64) for w in words)
        v = np.asarray(r.values, dtype=np.int64)
        return 4 * (ha == hb) + 2 * (v == ha) + (v == hb)

    return decode


#: kind name -> its audit adapter; a kind with LDP reports and no adapter fails the audit unless its
#: registry entry declares ``audit_exempt["*"]``.
ADAPTERS: dict[str, Adapter] = {
    "frequency": FrequencyAdapter(),
    "range": RangeAdapter(),
    "sparse": SparseAdapter(),
    "numeric": NumericAdapter(),
    "heavy_hitters": HeavyHittersAdapter(),
}
