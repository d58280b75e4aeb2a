"""Common interface of the multi-dimensional range-query mechanisms (Yang et al., VLDB 2021).

Every method (HDG, TDG, CALM, HIO, LHIO, MSW, Uni) follows the same three pieces as the rest of ``ldp``:

1. **encode** (client): the aggregator splits users uniformly into ``n_groups`` groups (one per grid,
   marginal, hierarchy level or attribute, Section 2.4 "dividing users"); a user of group ``g`` projects its
   record onto what the group collects (:meth:`RangeMechanism.project`, e.g. the index of the 2-D cell of
   grid ``g``) and perturbs it with the group's frequency oracle at the *full* epsilon.
2. **accumulate** (server, distributed): one fixed-size mergeable accumulator per group
   (:meth:`create_accumulator`, :meth:`add`, :meth:`merge`), by default the group oracle's own.
3. **finalize** (server, once per window): accumulators of all groups -> a :class:`RangeModel`
   (estimates, Norm-Sub, consistency, response matrices ...), which answers any number of queries and
   serializes to a versioned JSON-able dict.

Group assignment (:meth:`RangeMechanism.assign_groups`) has two modes:

* ``user_ids=None``: each user draws its group uniformly at random from ``rng`` (what a client does
  alone); ``balanced=True`` instead deals a random permutation into equal-size groups (what the paper's
  simulations do: "randomly divides users into m groups" of equal population).
* ``user_ids`` given: ``group = H64(salt, user_id) mod n_groups`` with a keyed 64-bit hash, so a user
  always lands in the same group for a task (repeated collections do not leak more of its record by
  reporting different grids). ``salt`` is the mechanism option ``group_salt`` (default 0), which a task
  should set to a task-specific value.

Domain sizes need not be powers of two: the grid methods pad each attribute's domain up to the next power
of two internally (the padded values have zero true frequency).
"""

from __future__ import annotations

import abc
import hashlib
import math
from collections.abc import Mapping, Sequence
from itertools import combinations
from typing import Any, ClassVar

import numpy as np

from ldp.csprng import client_rng
from ldp.hashing import hash_ids
from ldp.payload import WireSpec
from ldp.rangequery.queries import RangeQuery, validate_queries

__all__ = [
    "FORMAT_VERSION",
    "RangeMechanism",
    "RangeModel",
    "PairwiseRangeModel",
    "register_model",
    "model_from_dict",
    "next_power_of_two",
    "attribute_pairs",
    "hash_user_ids",
]

FORMAT_VERSION = 1

_MODEL_CLASSES: dict[str, type[RangeModel]] = {}


def next_power_of_two(x: int) -> int:
    """Smallest power of two >= x (x >= 1)."""
    x = int(x)
    if x < 1:
        raise ValueError(f"expected a positive integer, got {x}")
    return 1 << (x - 1).bit_length()


def attribute_pairs(d: int) -> list[tuple[int, int]]:
    """All C(d, 2) attribute pairs (j, k), j < k, in lexicographic order."""
    return list(combinations(range(d), 2))


# ------------------------------------------------------------------------------------------------------------
# user-id hashing for deterministic group assignment
# ------------------------------------------------------------------------------------------------------------


def hash_user_ids(user_ids: Sequence[Any] | np.ndarray, salt: int = 0) -> np.ndarray:
    """Keyed 64-bit hash of user ids (uint64 array).

    Integer ids use :func:`ldp.hashing.hash_ids` (vectorized SplitMix64 keyed by ``salt``); any other id
    (str, bytes) ``blake2b(digest_size=8, key=salt)`` of its UTF-8 bytes (one call per id: meant for a
    client or small batches). Deterministic across processes and platforms.
    """
    arr = np.asarray(user_ids)
    if arr.dtype.kind in "iu":
        return hash_ids(arr.reshape(-1), salt)
    key = int(salt & 0xFFFFFFFFFFFFFFFF).to_bytes(8, "little")
    out = np.empty(len(arr), dtype=np.uint64)
    for i, uid in enumerate(arr.tolist()):
        b = uid if isinstance(uid, bytes) else str(uid).encode("utf-8")
        out[i] = int.from_bytes(hashlib.blake2b(b, digest_size=8, key=key).digest(), "little")
    return out


# ------------------------------------------------------------------------------------------------------------
# mechanism
# ------------------------------------------------------------------------------------------------------------


class RangeMechanism(abc.ABC):
    """A multi-dimensional range-query mechanism: group assignment, client encoding, accumulation, finalize.

    Subclasses set ``name``, implement :attr:`n_groups`, :meth:`group_oracle`, :meth:`project` and
    :meth:`finalize`, and list their extra options in ``OPTIONS``. The default :meth:`encode`,
    :meth:`create_accumulator`, :meth:`add` and :meth:`merge` delegate to the group oracle, whose
    interface is the one of ``ldp.oracles`` (``encode(values, rng=)``, ``create_accumulator()``,
    ``add(acc, reports)``, ``merge(accs)``, ``estimate(acc)``).

    Args:
        epsilon: privacy budget of every user (each user reports once, at the full epsilon).
        domain_sizes: domain size c_t of each attribute; values are ``0 .. c_t - 1``.
        n_users: expected number of users (used by data-dependent parameters such as the granularity
            guideline; the model uses the actual number of reports).
        **options: method options (see each subclass's ``OPTIONS``) plus ``group_salt`` (int, key of the
            user-id hash used by :meth:`assign_groups`).
    """

    name: ClassVar[str] = ""
    #: a range report is its group oracle's report (that oracle's vectors); the projection of a record to
    #: its group has no byte procedure yet (docs/wire_format.md, section 9)
    wire: ClassVar[WireSpec] = WireSpec(
        "records", reason="a report is its group oracle's; the projection to a group is not specified yet"
    )
    OPTIONS: ClassVar[frozenset[str]] = frozenset()
    BASE_OPTIONS: ClassVar[frozenset[str]] = frozenset({"group_salt"})

    def __init__(self, epsilon: float, domain_sizes: Sequence[int], n_users: int, **options: Any) -> None:
        eps = float(epsilon)
        if not math.isfinite(eps) or eps <= 0:
            raise ValueError(f"epsilon must be a positive finite number, got {epsilon!r}")
        sizes = tuple(int(c) for c in domain_sizes)
        if len(sizes) < 1:
            raise ValueError("at least one attribute is required")
        if any(c < 1 for c in sizes) or any(int(c) != c for c in domain_sizes):
            raise ValueError(f"domain sizes must be positive integers, got {list(domain_sizes)}")
        if int(n_users) < 1:
            raise ValueError(f"n_users must be >= 1, got {n_users}")
        unknown = set(options) - set(self.OPTIONS) - set(self.BASE_OPTIONS)
        if unknown:
            raise ValueError(
                f"unknown option(s) for {self.name or type(self).__name__}: {sorted(unknown)}; "
                f"allowed: {sorted(set(self.OPTIONS) | set(self.BASE_OPTIONS))}"
            )
        self.epsilon = eps
        self.domain_sizes: tuple[int, ...] = sizes
        self.n_attributes = len(sizes)
        self.padded_sizes: tuple[int, ...] = tuple(next_power_of_two(c) for c in sizes)
        self.n_users = int(n_users)
        self.options: dict[str, Any] = dict(options)
        self.group_salt = int(options.get("group_salt", 0))

    # ---- groups --------------------------------------------------------------------------------------------

    @property
    @abc.abstractmethod
    def n_groups(self) -> int:
        """Number of user groups (one per grid / marginal / level / attribute)."""

    def group_label(self, group: int) -> str:
        """Human-readable name of a group (used as a key in reports and logs)."""
        return str(group)

    @abc.abstractmethod
    def group_oracle(self, group: int) -> Any:
        """The frequency oracle (``ldp.oracles``) or numeric mechanism that group ``group`` reports with."""

    @abc.abstractmethod
    def project(self, group: int, records: np.ndarray) -> np.ndarray:
        """What users of ``group`` report before perturbation (e.g. cell index of their grid), one per row."""

    def _check_group(self, group: int) -> int:
        g = int(group)
        if not 0 <= g < self.n_groups:
            raise ValueError(f"group {group} out of range [0, {self.n_groups})")
        return g

    def assign_groups(
        self,
        n: int,
        *,
        rng: np.random.Generator | int | None = None,
        user_ids: Sequence[Any] | np.ndarray | None = None,
        balanced: bool = False,
    ) -> np.ndarray:
        """Assigns ``n`` users to groups uniformly.

        Args:
            n: number of users.
            rng: generator or seed for random assignment (default: the OS CSPRNG, :mod:`ldp.csprng`).
            user_ids: if given (length n), the assignment is deterministic:
                ``hash_user_ids(user_ids, group_salt) mod n_groups``.
            balanced: random assignment only: deal a random permutation into groups whose sizes differ by
                at most one (the paper's equal-population split) instead of independent uniform draws.

        Returns:
            int64 array (n,) of groups in ``[0, n_groups)``.
        """
        n = int(n)
        m = self.n_groups
        if user_ids is not None:
            if len(user_ids) != n:
                raise ValueError(f"got {len(user_ids)} user ids for {n} users")
            return (hash_user_ids(user_ids, self.group_salt) % np.uint64(m)).astype(np.int64)
        rng = client_rng(rng)
        if balanced:
            return (rng.permutation(n) % m).astype(np.int64)
        return rng.integers(0, m, size=n, dtype=np.int64)

    # ---- client --------------------------------------------------------------------------------------------

    def check_records(self, records: np.ndarray) -> np.ndarray:
        """Validates records: integer array (n, d) with each column in its domain. Returns int64 array."""
        arr = np.asarray(records)
        if arr.ndim != 2 or arr.shape[1] != self.n_attributes:
            raise ValueError(f"records must have shape (n, {self.n_attributes}), got {arr.shape}")
        if arr.size and arr.dtype.kind not in "iu":
            if arr.dtype.kind == "f" and np.all(np.isfinite(arr)) and np.all(arr == np.floor(arr)):
                arr = arr.astype(np.int64)
            else:
                raise ValueError(f"records must be integers, got dtype {arr.dtype}")
        arr = arr.astype(np.int64, copy=False)
        if arr.size:
            bad = (arr < 0) | (arr >= np.asarray(self.domain_sizes, dtype=np.int64))
            if bad.any():
                r, t = np.argwhere(bad)[0]
                raise ValueError(
                    f"record {r}: value {arr[r, t]} of attribute {t} outside [0, {self.domain_sizes[t] - 1}]"
                )
        return arr

    def encode(
        self,
        records: np.ndarray,
        *,
        rng: np.random.Generator | int | None = None,
        groups: np.ndarray | None = None,
    ) -> dict[int, Any]:
        """Client side: perturbs each user's projection with its group's oracle at the full epsilon.

        Args:
            records: int array (n, d), one user per row.
            rng: generator or seed (default: the OS CSPRNG, :mod:`ldp.csprng`; a real client must not
                use a predictable one).
            groups: group of each user (n,), e.g. from :meth:`assign_groups`; default: random assignment
                drawn from ``rng``.

        Returns:
            ``{group: Reports}`` for every group that has at least one user; row i of ``reports[g]`` is the
            report of the i-th user (in increasing record index) with ``groups == g``.
        """
        rng = client_rng(rng)
        records = self.check_records(records)
        n = len(records)
        if groups is None:
            groups = self.assign_groups(n, rng=rng)
        groups = np.asarray(groups, dtype=np.int64)
        if groups.shape != (n,):
            raise ValueError(f"groups must have shape ({n},), got {groups.shape}")
        if n and (groups.min() < 0 or groups.max() >= self.n_groups):
            raise ValueError(f"groups must be in [0, {self.n_groups})")
        order = np.argsort(groups, kind="stable")
        bounds = np.searchsorted(groups[order], np.arange(self.n_groups + 1))
        out: dict[int, Any] = {}
        for g in range(self.n_groups):
            idx = order[bounds[g] : bounds[g + 1]]
            if len(idx) == 0:
                continue
            values = self.project(g, records[idx])
            out[g] = self.group_oracle(g).encode(values, rng=rng)
        return out

    def encode_one(
        self,
        record: Sequence[int] | np.ndarray,
        *,
        rng: np.random.Generator | int | None = None,
        user_id: Any = None,
    ) -> tuple[int, Any]:
        """On-device call: one user's record -> ``(group, Reports)`` (a batch of one report).

        The group comes from ``user_id`` (deterministic hash, see :meth:`assign_groups`) when given, else
        it is drawn from ``rng``. ``rng=None`` draws from the OS CSPRNG (:mod:`ldp.csprng`), which is what a
        real client must do.
        """
        rng = client_rng(rng)
        rec = self.check_records(np.asarray(record).reshape(1, -1))
        if user_id is not None:
            group = int(self.assign_groups(1, user_ids=[user_id])[0])
        else:
            group = int(self.assign_groups(1, rng=rng)[0])
        return group, self.group_oracle(group).encode(self.project(group, rec), rng=rng)

    # ---- server: accumulate --------------------------------------------------------------------------------

    def create_accumulator(self, group: int) -> Any:
        """Empty accumulator of ``group`` (fixed size, picklable)."""
        return self.group_oracle(self._check_group(group)).create_accumulator()

    def add(self, group: int, acc: Any, reports: Any) -> Any:
        """Adds a batch of reports of ``group`` (may mutate ``acc``; use the return value)."""
        return self.group_oracle(self._check_group(group)).add(acc, reports)

    def merge(self, group: int, accs: Sequence[Any]) -> Any:
        """Merges accumulators of the same group."""
        return self.group_oracle(self._check_group(group)).merge(list(accs))

    def accumulate(self, reports: Mapping[int, Any]) -> dict[int, Any]:
        """Convenience: one accumulator per group from ``{group: Reports}`` (missing groups stay empty)."""
        accs = {}
        for g in range(self.n_groups):
            acc = self.create_accumulator(g)
            if g in reports:
                acc = self.add(g, acc, reports[g])
            accs[g] = acc
        return accs

    # ---- server: finalize ----------------------------------------------------------------------------------

    @abc.abstractmethod
    def finalize(self, accumulators: Mapping[int, Any]) -> RangeModel:
        """All post-processing of one window: ``{group: accumulator}`` -> model. Missing groups = empty."""

    def fit(self, records: np.ndarray, *, rng: np.random.Generator | int | None = None) -> RangeModel:
        """Simulation shortcut: balanced random groups, encode, accumulate, finalize."""
        rng = np.random.default_rng(rng)
        records = self.check_records(records)
        groups = self.assign_groups(len(records), rng=rng, balanced=True)
        return self.finalize(self.accumulate(self.encode(records, rng=rng, groups=groups)))

    def config(self) -> dict[str, Any]:
        """JSON-able description of the mechanism (method, epsilon, domains, options)."""
        return {
            "method": self.name,
            "epsilon": self.epsilon,
            "domain_sizes": list(self.domain_sizes),
            "n_users": self.n_users,
            "options": dict(self.options),
        }


# ------------------------------------------------------------------------------------------------------------
# model
# ------------------------------------------------------------------------------------------------------------


def register_model(method: str):
    """Class decorator: registers a :class:`RangeModel` subclass for :func:`model_from_dict`."""

    def deco(cls):
        cls.method = method
        _MODEL_CLASSES[method] = cls
        return cls

    return deco


def model_from_dict(d: Mapping[str, Any]) -> RangeModel:
    """Rebuilds a model of an already registered method from :meth:`RangeModel.to_dict` output.

    A model class is registered when its mechanism's module is imported;
    :func:`ldp.rangequery.registry.model_from_dict` imports it by method name first (this module imports no
    method module, so that the registry can import it without a cycle).
    """
    if not isinstance(d, Mapping):
        raise ValueError("a model must be a JSON object")
    version = d.get("format_version")
    if version != FORMAT_VERSION:
        raise ValueError(f"unsupported model format_version {version!r} (supported: {FORMAT_VERSION})")
    method = d.get("method")
    if method not in _MODEL_CLASSES:
        raise ValueError(
            f"unknown range-query model method {method!r} (registered: {sorted(_MODEL_CLASSES)}; "
            "ldp.rangequery.registry.model_from_dict loads any method)"
        )
    return _MODEL_CLASSES[method]._from_dict(d)


class RangeModel(abc.ABC):
    """A finalized range-query model: answers queries as fractions of users.

    Subclasses are registered with :func:`register_model` and implement :meth:`answer`, :meth:`_payload`
    (JSON-able dict of their state) and :meth:`_from_dict`.
    """

    method: ClassVar[str] = ""

    def __init__(self, domain_sizes: Sequence[int], n_users: int) -> None:
        self.domain_sizes: tuple[int, ...] = tuple(int(c) for c in domain_sizes)
        self.n_attributes = len(self.domain_sizes)
        self.n_users = int(n_users)

    def check_queries(self, queries: Sequence[RangeQuery]) -> list[RangeQuery]:
        """Validates queries against the model's domains (ValueError naming the query)."""
        queries = list(queries)
        validate_queries(queries, self.domain_sizes)
        return queries

    @abc.abstractmethod
    def answer(self, queries: Sequence[RangeQuery]) -> np.ndarray:
        """Estimated fraction of users inside each query, float64 array (len(queries),)."""

    def answer_std(self, queries: Sequence[RangeQuery]) -> np.ndarray | None:
        """Standard deviation of each answer where the method allows it (NaN elsewhere), or None."""
        return None

    def std_method(self, lam: int) -> str:
        """How :meth:`answer_std` gets the std of a lambda-D answer (named in the answers' ``ci_method``)."""
        return "closed-form"

    @abc.abstractmethod
    def _payload(self) -> dict[str, Any]:
        """Method-specific JSON-able state."""

    @classmethod
    @abc.abstractmethod
    def _from_dict(cls, d: Mapping[str, Any]) -> RangeModel:
        """Inverse of :meth:`to_dict` for this class."""

    def to_dict(self) -> dict[str, Any]:
        """Versioned JSON-able form: ``{"format_version": 1, "method", "domain_sizes", "n_users", ...}``."""
        out = {
            "format_version": FORMAT_VERSION,
            "method": self.method,
            "domain_sizes": list(self.domain_sizes),
            "n_users": self.n_users,
        }
        out.update(self._payload())
        return out

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> RangeModel:
        """Rebuilds a model of any registered method (dispatches on ``d["method"]``)."""
        return model_from_dict(d)


class PairwiseRangeModel(RangeModel):
    """A model that answers 2-D queries directly and everything else from 2-D answers.

    * lambda = 2: :meth:`answer_2d`, vectorized over the queries of one attribute pair.
    * lambda = 1: :meth:`answer_1d`; by default a 2-D query whose other attribute spans its whole domain.
    * lambda >= 3: the C(lambda, 2) associated 2-D answers are combined by Weighted Update
      (Algorithm 2, :func:`ldp.rangequery.weighted_update.lambda_d_answers`), converged to the threshold
      ``wu_threshold`` (default 1/n).

    Used by HDG, TDG, CALM and LHIO.
    """

    wu_threshold: float | None = None
    wu_max_iter: int = 1000

    @abc.abstractmethod
    def answer_2d(
        self, j: int, k: int, lo_j: np.ndarray, hi_j: np.ndarray, lo_k: np.ndarray, hi_k: np.ndarray
    ) -> np.ndarray:
        """Answers of the 2-D queries ``a_j in [lo_j, hi_j] and a_k in [lo_k, hi_k]`` (j < k), arrays (Q,)."""

    def answer_2d_std(
        self, j: int, k: int, lo_j: np.ndarray, hi_j: np.ndarray, lo_k: np.ndarray, hi_k: np.ndarray
    ) -> np.ndarray | None:
        """Standard deviations of :meth:`answer_2d` answers, or None if the method has no formula."""
        return None

    def _partner(self, j: int) -> int:
        if self.n_attributes < 2:
            raise ValueError("pairwise models need at least two attributes")
        return 1 if j == 0 else 0

    def answer_1d(self, j: int, lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
        """Answers of 1-D queries on attribute j (default: through the pair with one other attribute)."""
        p = self._partner(j)
        full_lo = np.zeros_like(lo)
        full_hi = np.full_like(hi, self.domain_sizes[p] - 1)
        if j < p:
            return self.answer_2d(j, p, lo, hi, full_lo, full_hi)
        return self.answer_2d(p, j, full_lo, full_hi, lo, hi)

    def answer_1d_std(self, j: int, lo: np.ndarray, hi: np.ndarray) -> np.ndarray | None:
        """Standard deviations of :meth:`answer_1d` answers, or None."""
        p = self._partner(j)
        full_lo = np.zeros_like(lo)
        full_hi = np.full_like(hi, self.domain_sizes[p] - 1)
        if j < p:
            return self.answer_2d_std(j, p, lo, hi, full_lo, full_hi)
        return self.answer_2d_std(p, j, full_lo, full_hi, lo, hi)

    def _pair_answers(self, queries: list[RangeQuery], idx: np.ndarray, std: bool) -> np.ndarray:
        """(len(idx), C(lam, 2)) answers of the pairwise sub-queries of queries[idx] (all the same lambda)."""
        lam = queries[idx[0]].dimension
        pos_pairs = list(combinations(range(lam), 2))
        # (Q, lam, 3) array of intervals
        iv = np.array([queries[i].intervals for i in idx], dtype=np.int64).reshape(len(idx), lam, 3)
        out = np.empty((len(idx), len(pos_pairs)))
        for col, (a, b) in enumerate(pos_pairs):
            attrs = iv[:, [a, b], 0]
            keys, inv = np.unique(attrs, axis=0, return_inverse=True)
            inv = inv.reshape(-1)
            for kk, (j, k) in enumerate(keys.tolist()):
                sel = np.flatnonzero(inv == kk)
                args = (j, k, iv[sel, a, 1], iv[sel, a, 2], iv[sel, b, 1], iv[sel, b, 2])
                if std:
                    s = self.answer_2d_std(*args)
                    out[sel, col] = np.nan if s is None else s
                else:
                    out[sel, col] = self.answer_2d(*args)
        return out

    def _by_dimension(self, queries: list[RangeQuery]) -> dict[int, np.ndarray]:
        dims = np.array([q.dimension for q in queries], dtype=np.int64)
        return {int(lam): np.flatnonzero(dims == lam) for lam in np.unique(dims)}

    def answer(self, queries: Sequence[RangeQuery]) -> np.ndarray:
        """Answers any queries (see the class docstring for how each dimension is handled)."""
        from ldp.rangequery.weighted_update import lambda_d_answers

        queries = self.check_queries(queries)
        out = np.empty(len(queries))
        for lam, idx in self._by_dimension(queries).items():
            if lam == 1:
                iv = np.array([queries[i].intervals[0] for i in idx], dtype=np.int64)
                for j in np.unique(iv[:, 0]).tolist():
                    sel = np.flatnonzero(iv[:, 0] == j)
                    out[idx[sel]] = self.answer_1d(j, iv[sel, 1], iv[sel, 2])
            elif lam == 2:
                out[idx] = self._pair_answers(queries, idx, std=False)[:, 0]
            else:
                pair = self._pair_answers(queries, idx, std=False)
                thr = self.wu_threshold if self.wu_threshold is not None else 1.0 / max(self.n_users, 1)
                out[idx] = lambda_d_answers(pair, lam, threshold=thr, max_iter=self.wu_max_iter)
        return out

    def answer_std(self, queries: Sequence[RangeQuery]) -> np.ndarray | None:
        """Standard deviations where :meth:`answer_2d_std` is implemented, NaN otherwise: the closed form
        for lambda <= 2; for lambda >= 3 the 2-D answers' noise carried through Weighted Update by
        simulation (:func:`ldp.rangequery.weighted_update.lambda_d_std`, seeded from the 2-D answers, so
        the same model gives the same std)."""
        from ldp.intervals import data_seed
        from ldp.rangequery.weighted_update import lambda_d_std

        queries = self.check_queries(queries)
        out = np.full(len(queries), np.nan)
        for lam, idx in self._by_dimension(queries).items():
            if lam == 1:
                iv = np.array([queries[i].intervals[0] for i in idx], dtype=np.int64)
                for j in np.unique(iv[:, 0]).tolist():
                    sel = np.flatnonzero(iv[:, 0] == j)
                    s = self.answer_1d_std(j, iv[sel, 1], iv[sel, 2])
                    if s is not None:
                        out[idx[sel]] = s
            elif lam == 2:
                out[idx] = self._pair_answers(queries, idx, std=True)[:, 0]
            else:
                pair = self._pair_answers(queries, idx, std=False)
                pstd = self._pair_answers(queries, idx, std=True)
                thr = self.wu_threshold if self.wu_threshold is not None else 1.0 / max(self.n_users, 1)
                rng = np.random.default_rng(data_seed(pair, pstd, lam))
                out[idx] = lambda_d_std(pair, pstd, lam, threshold=thr, max_iter=self.wu_max_iter, rng=rng)
        return out

    def std_method(self, lam: int) -> str:
        """How :meth:`answer_std` gets the std of a lambda-D answer (``closed-form`` or ``simulated-wu``)."""
        return "closed-form" if lam <= 2 else "simulated-wu"
