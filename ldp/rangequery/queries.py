"""Multi-dimensional range queries: representation, parsing, exact answers and the paper's generator.

A lambda-D range query (Yang et al., VLDB 2021, Section 2.3) is a conjunction of lambda predicates
``a_t in [l_t, r_t]`` on distinct attributes; its answer is the fraction of records that satisfy all of
them. Here intervals are inclusive and 0-based: attribute ``t`` with domain size ``c_t`` takes values
``0 .. c_t - 1``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

__all__ = [
    "RangeQuery",
    "drop_full_domain",
    "AnswerPostprocessing",
    "clip_option",
    "parse_queries",
    "queries_to_json",
    "true_answers",
    "random_queries",
    "validate_queries",
]


@dataclass(frozen=True)
class RangeQuery:
    """A conjunction of inclusive 0-based intervals, one per constrained attribute.

    Attributes:
        intervals: ``((attribute_index, lo, hi), ...)`` sorted by attribute index, attributes distinct,
            ``0 <= lo <= hi``. Checking ``hi`` against a domain needs the domain sizes: see
            :func:`validate_queries`.
    """

    intervals: tuple[tuple[int, int, int], ...]

    def __post_init__(self) -> None:
        ivs = tuple((int(a), int(lo), int(hi)) for a, lo, hi in self.intervals)
        object.__setattr__(self, "intervals", ivs)
        if not ivs:
            raise ValueError("a range query must constrain at least one attribute")
        attrs = [a for a, _, _ in ivs]
        if attrs != sorted(attrs) or len(set(attrs)) != len(attrs):
            raise ValueError(f"query intervals must be sorted by distinct attribute index: {ivs}")
        for a, lo, hi in ivs:
            if a < 0:
                raise ValueError(f"negative attribute index in {ivs}")
            if lo < 0 or lo > hi:
                raise ValueError(f"invalid interval [{lo}, {hi}] for attribute {a} in {ivs}")

    @classmethod
    def from_mapping(cls, mapping: Mapping[int, tuple[int, int]]) -> RangeQuery:
        """Builds a query from ``{attribute_index: (lo, hi)}`` (any order)."""
        return cls(tuple((int(a), int(lo), int(hi)) for a, (lo, hi) in sorted(mapping.items())))

    @property
    def attributes(self) -> tuple[int, ...]:
        """Constrained attribute indices, ascending."""
        return tuple(a for a, _, _ in self.intervals)

    @property
    def dimension(self) -> int:
        """lambda, the number of constrained attributes."""
        return len(self.intervals)

    def volume(self, domain_sizes: Sequence[int]) -> float:
        """Fraction of the full domain the query covers (the answer under a uniform distribution)."""
        v = 1.0
        for a, lo, hi in self.intervals:
            v *= (hi - lo + 1) / domain_sizes[a]
        return v

    def to_json(self, attribute_names: Sequence[str]) -> dict[str, list[int]]:
        """The task-file form ``{"name": [lo, hi], ...}``."""
        return {attribute_names[a]: [lo, hi] for a, lo, hi in self.intervals}


def validate_queries(queries: Sequence[RangeQuery], domain_sizes: Sequence[int]) -> None:
    """Raises ValueError naming the first query that does not fit the domains."""
    d = len(domain_sizes)
    for i, q in enumerate(queries):
        if not isinstance(q, RangeQuery):
            raise ValueError(f"query {i} is not a RangeQuery: {q!r}")
        for a, lo, hi in q.intervals:
            if a >= d:
                raise ValueError(f"query {i} {q.intervals}: attribute index {a} out of range (d={d})")
            if hi >= domain_sizes[a]:
                raise ValueError(
                    f"query {i} {q.intervals}: interval [{lo}, {hi}] of attribute {a} is outside the "
                    f"domain [0, {domain_sizes[a] - 1}]"
                )


def parse_queries(
    obj: Sequence[Mapping[str, Sequence[int]]],
    attribute_names: Sequence[str],
    domain_sizes: Sequence[int],
) -> list[RangeQuery]:
    """Parses the JSON query-file form: a list of ``{"attribute name": [lo, hi], ...}`` objects.

    Args:
        obj: list of query objects (inclusive 0-based intervals).
        attribute_names: names of the task's attributes, in attribute-index order.
        domain_sizes: domain size of each attribute.

    Returns:
        One :class:`RangeQuery` per object, in input order.

    Raises:
        ValueError: naming the query (index and content) for a non-object, an empty query, an unknown
            attribute, a malformed interval, ``lo > hi`` or an interval outside the attribute's domain.
    """
    names = list(attribute_names)
    if len(names) != len(domain_sizes):
        raise ValueError("attribute_names and domain_sizes differ in length")
    index = {n: i for i, n in enumerate(names)}
    if not isinstance(obj, (list, tuple)):
        raise ValueError(f"queries must be a JSON list of objects, got {type(obj).__name__}")
    out: list[RangeQuery] = []
    for qi, q in enumerate(obj):
        label = f"query {qi} {q!r}"
        if not isinstance(q, Mapping):
            raise ValueError(f"{label}: must be an object mapping attribute names to [lo, hi]")
        if not q:
            raise ValueError(f"{label}: constrains no attribute")
        ivs: dict[int, tuple[int, int]] = {}
        for name, iv in q.items():
            if name not in index:
                raise ValueError(f"{label}: unknown attribute {name!r} (known: {names})")
            if (
                not isinstance(iv, (list, tuple))
                or len(iv) != 2
                or not all(isinstance(x, (int, np.integer)) and not isinstance(x, bool) for x in iv)
            ):
                raise ValueError(f"{label}: interval of {name!r} must be [lo, hi] with integers, got {iv!r}")
            lo, hi = int(iv[0]), int(iv[1])
            a = index[name]
            if lo > hi:
                raise ValueError(f"{label}: lo > hi for {name!r} ({lo} > {hi})")
            if lo < 0 or hi >= domain_sizes[a]:
                raise ValueError(
                    f"{label}: interval [{lo}, {hi}] of {name!r} is outside the domain "
                    f"[0, {domain_sizes[a] - 1}]"
                )
            ivs[a] = (lo, hi)
        out.append(RangeQuery.from_mapping(ivs))
    return out


def queries_to_json(queries: Sequence[RangeQuery], attribute_names: Sequence[str]) -> list[dict]:
    """Inverse of :func:`parse_queries`."""
    return [q.to_json(attribute_names) for q in queries]


def true_answers(records: np.ndarray, queries: Sequence[RangeQuery]) -> np.ndarray:
    """Exact answers: the fraction of records inside each query (Section 2.3).

    Args:
        records: integer array (n, d), one user per row.
        queries: range queries over the columns of ``records``.

    Returns:
        float64 array (len(queries),).
    """
    records = np.asarray(records)
    if records.ndim != 2:
        raise ValueError(f"records must be 2-D (n, d), got shape {records.shape}")
    n, d = records.shape
    out = np.zeros(len(queries))
    if n == 0:
        return out
    cols = [np.ascontiguousarray(records[:, t]) for t in range(d)]
    for i, q in enumerate(queries):
        mask = None
        for a, lo, hi in q.intervals:
            if a >= d:
                raise ValueError(f"query {i} {q.intervals}: attribute index {a} out of range (d={d})")
            c = cols[a]
            m = (c >= lo) & (c <= hi)
            mask = m if mask is None else (mask & m)
        out[i] = np.count_nonzero(mask) / n
    return out


def random_queries(
    domain_sizes: Sequence[int],
    n_queries: int,
    lam: int,
    volume: float | None = None,
    *,
    omega: float | None = None,
    rng: np.random.Generator | int | None = None,
) -> list[RangeQuery]:
    """Random query workload (Yang et al., Section 6.1).

    Each query picks ``lam`` distinct attributes uniformly at random; every chosen attribute gets an
    interval of length ``round(c_t * w)`` (at least 1, at most ``c_t``) placed uniformly at random in its
    domain, where ``w`` is one of (exactly one must be given):

    * ``omega``: the *dimensional* query volume, the paper's workload parameter: each queried attribute
      spans a fraction ``omega`` of its domain (total volume ``omega ** lam``);
    * ``volume``: the *total* volume: ``w = volume ** (1 / lam)``, so the query covers a fraction
      ``volume`` of the lambda-D domain.

    Args:
        domain_sizes: domain size of each attribute.
        n_queries: number of queries.
        lam: query dimension lambda (1 <= lam <= d).
        volume: total query volume in (0, 1].
        omega: dimensional query volume in (0, 1].
        rng: generator or seed.

    Returns:
        ``n_queries`` queries.
    """
    rng = np.random.default_rng(rng)
    d = len(domain_sizes)
    if not 1 <= lam <= d:
        raise ValueError(f"lam must be in [1, {d}], got {lam}")
    if (volume is None) == (omega is None):
        raise ValueError("give exactly one of volume (total) and omega (per attribute)")
    w = omega if omega is not None else volume
    if not 0.0 < w <= 1.0:  # type: ignore[operator]
        raise ValueError(f"{'omega' if omega is not None else 'volume'} must be in (0, 1], got {w}")
    if n_queries < 0:
        raise ValueError("n_queries must be >= 0")
    sizes = np.asarray(domain_sizes, dtype=np.int64)
    frac = float(omega) if omega is not None else float(volume) ** (1.0 / lam)  # type: ignore[arg-type]
    lengths = np.clip(np.rint(sizes * frac).astype(np.int64), 1, sizes)
    # lam distinct attributes per query: argsort of uniform keys gives a random permutation per row.
    attrs = np.sort(np.argsort(rng.random((n_queries, d)), axis=1)[:, :lam], axis=1)
    lens = lengths[attrs]
    los = (rng.random((n_queries, lam)) * (sizes[attrs] - lens + 1)).astype(np.int64)
    his = los + lens - 1
    return [
        RangeQuery(tuple(zip(attrs[i].tolist(), los[i].tolist(), his[i].tolist()))) for i in range(n_queries)
    ]


# ------------------------------------------------------------------------------------------------------------
# answering: full-domain attributes and clipping (shared by every range model)
# ------------------------------------------------------------------------------------------------------------


def drop_full_domain(
    queries: Sequence[RangeQuery], domain_sizes: Sequence[int]
) -> list[RangeQuery | None]:
    """Removes the predicates whose interval is the attribute's whole domain (they are always true).

    ``a_t in [0, c_t - 1]`` holds for every record, so a query and the same query without it have the same
    true answer. Answering the reduced query is exact and cheaper, and it avoids a real bias: Weighted Update
    (Algorithm 2) treats every attribute as informative and, given the exact pairwise answers of a query
    with a full-domain attribute, does not return the exact answer (e.g. pairwise inputs 0.2, 0.3, 0.15
    where 0.15 is the truth give 0.087).

    Returns:
        One entry per query: the reduced query, or None when every interval spans its whole domain (the
        answer is then exactly 1).
    """
    out: list[RangeQuery | None] = []
    for q in queries:
        kept = tuple((a, lo, hi) for a, lo, hi in q.intervals if not (lo == 0 and hi >= domain_sizes[a] - 1))
        if len(kept) == len(q.intervals):
            out.append(q)
        else:
            out.append(RangeQuery(kept) if kept else None)
    return out


def clip_option(options: Mapping[str, Any]) -> bool:
    """The ``clip`` mechanism option (default True): must be a bool."""
    clip = options.get("clip", True)
    if not isinstance(clip, (bool, np.bool_)):
        raise ValueError(f"option clip must be true or false, got {clip!r}")
    return bool(clip)


class AnswerPostprocessing:
    """Mixin placed before a :class:`~ldp.rangequery.base.RangeModel` base: what every model does to queries.

    * Predicates whose interval is the whole domain are dropped before answering
      (:func:`drop_full_domain`); a query made only of them is answered 1 (std 0). So adding full-domain
      attributes to a query leaves its answer exactly unchanged, for every method.
    * Answers are clipped to ``[0, 1]`` when ``clip`` is true (the default; attribute of the model, set from
      the mechanism option ``clip`` and stored in the model's JSON). The true answer is a fraction of users,
      always in ``[0, 1]``, so clipping a single answer never increases its absolute error:
      ``|clip(x) - t| <= |x - t|`` for every ``x`` when ``t`` is in ``[0, 1]``. Clipping does remove
      unbiasedness: an unbiased estimate whose noise can push it below 0 (or above 1) becomes biased
      upwards (downwards) for true answers near 0 (near 1); its mean squared error never grows.
      ``answer_std`` describes the unclipped estimate, so for an unbiased method it is an upper bound on the
      root-mean-square error of the clipped answer. ``answer(queries, clip=False)`` (or the option
      ``clip=false``) gives the raw answers, e.g. to average many windows without bias.
    """

    clip: bool = True
    domain_sizes: tuple[int, ...]

    def _raw_answer(self, queries: list[RangeQuery]) -> np.ndarray:
        """The method's own answers of validated queries (default: the next class in the MRO)."""
        return super().answer(queries)  # type: ignore[misc]

    def _raw_answer_std(self, queries: list[RangeQuery]) -> np.ndarray | None:
        """The method's own standard deviations (default: the next class in the MRO)."""
        return super().answer_std(queries)  # type: ignore[misc]

    def _reduced(self, queries: Sequence[RangeQuery]) -> tuple[list[RangeQuery], np.ndarray, int]:
        queries = self.check_queries(queries)  # type: ignore[attr-defined]
        reduced = drop_full_domain(queries, self.domain_sizes)
        keep = np.array([q is not None for q in reduced], dtype=bool)
        return [q for q in reduced if q is not None], keep, len(queries)

    def answer(self, queries: Sequence[RangeQuery], *, clip: bool | None = None) -> np.ndarray:
        """Estimated fraction of users inside each query (see the class docstring for ``clip``)."""
        kept, keep, n = self._reduced(queries)
        out = np.ones(n)
        if kept:
            out[keep] = np.asarray(self._raw_answer(kept), dtype=np.float64)
        if self.clip if clip is None else clip:
            np.clip(out, 0.0, 1.0, out=out)
        return out

    def answer_std(self, queries: Sequence[RangeQuery]) -> np.ndarray | None:
        """Standard deviation of each (unclipped) answer where the method has a formula, NaN elsewhere."""
        kept, keep, n = self._reduced(queries)
        if not kept:
            return np.zeros(n)
        std = self._raw_answer_std(kept)
        if std is None:
            return None
        out = np.zeros(n)
        out[keep] = np.asarray(std, dtype=np.float64)
        return out

    def to_dict(self) -> dict[str, Any]:
        out = super().to_dict()  # type: ignore[misc]
        out["clip"] = bool(self.clip)
        return out

    def _restore_options(self, d: Mapping[str, Any]) -> Any:
        """Sets the answering options of a model rebuilt from :meth:`to_dict` output; returns the model."""
        self.clip = bool(d.get("clip", True))
        return self
