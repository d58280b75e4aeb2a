"""Frequency oracles: client encoders, mergeable accumulators and unbiased estimators.

Every oracle here is a "support set" protocol (Wang et al., NDSS 2020, Sec. III): a report ``Y``
supports the user's true value with probability ``p`` and any other value with probability ``q < p``.
With ``c_v`` the number of reports supporting ``v`` among ``n``, the estimate (Eq. 3)

    f_v = (c_v / n - q) / (p - q)

is unbiased, with variance (Eq. 4)

    sigma_v^2 = (q (1 - q) + f_v (p - q)(1 - p - q)) / (n (p - q)^2),

approximately ``q (1 - q) / (n (p - q)^2)`` (Eq. 6) when the ``f_v`` term is dropped. ``p - q`` is
computed in closed form with ``expm1`` (attribute ``gap``), so it never cancels at small epsilon.
The variance of a *sum* of estimates over a set, with the covariances each mechanism really has, is
:meth:`FrequencyOracle.variance_of_sum` (derived per class).

Each oracle has three parts (see ``DESIGN.md``):

1. ``encode`` (client): values -> :class:`~ldp.reports.Reports`, vectorized over many users. The
   perturbation randomness comes from a caller-supplied ``numpy.random.Generator``; the default
   (``rng=None``) is :func:`ldp.csprng.secure_rng`, a ``Generator`` over the operating system's CSPRNG
   (``os.urandom``), which is what a real device must use; simulations pass explicit seeds (PCG64).
   Public hash seeds (OLH, BLH) always come from a separate stream: the OS CSPRNG for ``rng=None``, a
   spawned child of the caller's ``SeedSequence`` otherwise (:func:`ldp.hashing.client_streams`); the
   perturbation generator's outputs are never published.
2. ``create_accumulator / add / merge`` (server): a :class:`SupportAccumulator` whose size depends on
   the domain only, never on the number of reports; merging is exact integer addition, so merged
   shards equal one pass. ``add`` costs O(batch) for small batches (a scatter-add on the cells the
   batch touches) and a vectorized ``bincount`` for large ones. Every accumulator is refused above
   :data:`MAX_ACCUMULATOR_CELLS`, at construction, with an error naming the limit.
3. ``estimate`` (server): accumulator -> :class:`FrequencyEstimate` (unbiased frequencies, closed-form
   variances, confidence intervals).

Every encoder satisfies epsilon-LDP on its wire output (order included): for any two inputs and any
output the probability ratio is at most ``e**epsilon``; the docstring of each class states why.
The samplers draw Bernoulli variables as ``rng.random() < x`` (resolution ``2**-53``), which realizes
``x`` to absolute precision ``2**-53``. An oracle is refused when one of the probabilities it samples, or
``p - q``, falls below :data:`MIN_SAMPLED_PROBABILITY` (``2**-32``): beyond that the realized privacy loss
or the estimator's scale would be off by more than ``2**-21`` relative (about 5e-7). The error names the
accepted epsilon range for that oracle and domain.
"""

from __future__ import annotations

import abc
import dataclasses
import math
import warnings
from collections.abc import Sequence
from statistics import NormalDist
from typing import Any, ClassVar

import numpy as np

from ldp.csprng import client_rng
from ldp.hashing import (
    DEFAULT_HASH_FAMILY,
    GOLDEN,
    LEGACY_HASH_FAMILY,
    LinearHash,
    client_streams,
    hash_family,
    prime_power,
    public_seeds,
    splitmix64,
)
from ldp.payload import PayloadField, PayloadSpec, WireSpec, missing_fields, refuse
from ldp.reports import Reports

__all__ = [
    "FrequencyOracle",
    "SupportAccumulator",
    "FrequencyEstimate",
    "GRR",
    "OLH",
    "BLH",
    "OUE",
    "SUE",
    "HadamardResponse",
    "SubsetSelection",
    "MECHANISMS",
    "MAX_ACCUMULATOR_CELLS",
    "MIN_SAMPLED_PROBABILITY",
    "make_oracle",
    "choose_oracle",
    "AUTO_CANDIDATES",
    "AUTO_SCHEMA_VERSION",
    "auto_candidates",
    "olh_buckets",
    "olh_variance_factor",
    "default_olh_buckets",
    "Reports",
]

#: every oracle's accumulator is refused above this many int64 cells (512 MiB)
MAX_ACCUMULATOR_CELLS = 1 << 26
MAX_OLH_TABLE_CELLS = MAX_ACCUMULATOR_CELLS  # former name
#: smallest probability (and ``p - q``) the float64 samplers are trusted to realize (see module doc)
MIN_SAMPLED_PROBABILITY = 2.0**-32
#: epsilon above which nothing is meaningful (``e**eps`` is kept far from float overflow)
MAX_EPSILON = 100.0
#: bytes of temporary arrays a chunk of encode / add work may allocate
_CHUNK_BYTES = 64 << 20
#: a batch touching fewer than ``size / _SCATTER_RATIO`` cells uses ``np.add.at`` (O(batch))
_SCATTER_RATIO = 8


# ------------------------------------------------------------------------------------------------
# Validation helpers
# ------------------------------------------------------------------------------------------------
def _check_epsilon(epsilon: float) -> float:
    if isinstance(epsilon, bool):
        raise ValueError(f"epsilon must be a positive number, got {epsilon!r}")
    try:
        eps = float(epsilon)
    except (TypeError, ValueError):
        raise ValueError(f"epsilon must be a positive number, got {epsilon!r}") from None
    if not math.isfinite(eps) or eps <= 0:
        raise ValueError(f"epsilon must be a positive finite number, got {epsilon!r}")
    if eps > MAX_EPSILON:
        raise ValueError(f"epsilon = {eps} is above {MAX_EPSILON:g}, where no mechanism is meaningful")
    return eps


def _check_domain(d: int) -> int:
    if isinstance(d, bool) or not isinstance(d, (int, np.integer)) or d < 2:
        raise ValueError(f"domain_size must be an integer >= 2, got {d!r}")
    return int(d)


def check_values(values: Any, d: int) -> np.ndarray:
    """Validates client values: integers in ``[0, d)``; returns them as int64.

    Raises:
        ValueError: non-integer, NaN, or out-of-domain values, naming the first offender.
    """
    arr = np.asarray(values)
    if arr.ndim == 0:
        arr = arr.reshape(1)
    if arr.ndim != 1:
        raise ValueError(f"values must be a 1-D array, got shape {arr.shape}")
    if arr.dtype.kind == "f":
        bad = ~np.isfinite(arr) | (arr != np.round(arr))
        if bad.any():
            raise ValueError(f"values must be integers; got {arr[bad][0]!r} at index {int(np.argmax(bad))}")
        arr = arr.astype(np.int64)
    elif arr.dtype.kind in "iu":
        arr = arr.astype(np.int64)
    elif arr.dtype.kind == "b":
        raise ValueError("values must be integers, got booleans")
    elif arr.size == 0:
        arr = arr.astype(np.int64)
    else:
        raise ValueError(f"values must be integers, got dtype {arr.dtype}")
    out = (arr < 0) | (arr >= d)
    if out.any():
        i = int(np.argmax(out))
        raise ValueError(f"value {int(arr[i])} at index {i} is outside the domain [0, {d})")
    return arr


def _check_subset(subset: Any, d: int) -> np.ndarray:
    """A set of distinct values in ``[0, d)`` (indices or a boolean mask of length d) -> int64 indices."""
    arr = np.asarray(subset)
    if arr.dtype.kind == "b":
        if arr.shape != (d,):
            raise ValueError(f"a boolean subset mask must have shape ({d},), got {arr.shape}")
        return np.flatnonzero(arr)
    idx = check_values(arr.reshape(-1), d)
    if len(np.unique(idx)) != len(idx):
        raise ValueError("subset has repeated values")
    return idx


def _scatter_add(flat: np.ndarray, idx: np.ndarray) -> None:
    """``flat[i] += 1`` for every index in ``idx``: O(len(idx)) when small, one bincount when large."""
    idx = np.asarray(idx).reshape(-1)
    if idx.size == 0:
        return
    if idx.size * _SCATTER_RATIO < flat.size:
        np.add.at(flat, idx.astype(np.intp, copy=False), 1)
    else:
        flat += np.bincount(idx, minlength=flat.size)


def _hypergeom_moments(N: int, K: int, draws: int) -> tuple[float, float]:
    """(mean, second moment) of the number of marked items among ``draws`` drawn from ``N`` with ``K``
    marked, without replacement."""
    if draws <= 0 or N <= 0:
        return 0.0, 0.0
    r = K / N
    mean = draws * r
    var = draws * r * (1 - r) * (N - draws) / (N - 1) if N > 1 else 0.0
    return mean, var + mean * mean


# ------------------------------------------------------------------------------------------------
# Accumulator and estimate
# ------------------------------------------------------------------------------------------------
@dataclasses.dataclass
class SupportAccumulator:
    """Fixed-size sufficient statistic of a batch of reports.

    Attributes:
        counts: int64 array whose shape is fixed by the oracle (support counts for GRR/OUE/SUE/SS, an
            output histogram for HR, a Fourier-domain table for OLH).
        n: number of reports added.
    """

    counts: np.ndarray
    n: int = 0

    def copy(self) -> SupportAccumulator:
        return SupportAccumulator(self.counts.copy(), self.n)

    def __eq__(self, other: object) -> bool:
        return (
            isinstance(other, SupportAccumulator)
            and self.n == other.n
            and np.array_equal(self.counts, other.counts)
        )

    @property
    def nbytes(self) -> int:
        """Size of the statistic in bytes."""
        return int(self.counts.nbytes) + 8


@dataclasses.dataclass
class FrequencyEstimate:
    """Unbiased frequency estimates with closed-form variances.

    Attributes:
        mechanism: oracle name.
        n: number of reports.
        frequencies: float64 ``(d,)`` unbiased estimates (Eq. 3); NaN when ``n == 0``.
        variance: float64 ``(d,)`` closed-form variance without the ``f_v`` term (Eq. 6).
        variance_with_f: float64 ``(d,)`` Eq. 4 evaluated at the estimate clipped to [0, 1].
        support_counts: float64 ``(d,)`` the ``c_v``.
    """

    mechanism: str
    n: int
    frequencies: np.ndarray
    variance: np.ndarray
    variance_with_f: np.ndarray
    support_counts: np.ndarray

    @property
    def std(self) -> np.ndarray:
        """Standard deviation per value (from ``variance_with_f``)."""
        return np.sqrt(self.variance_with_f)

    def ci(self, level: float = 0.95) -> tuple[np.ndarray, np.ndarray]:
        """Normal-approximation confidence interval (Eq. 5) per value."""
        if not 0 < level < 1:
            raise ValueError(f"level must be in (0, 1), got {level}")
        z = NormalDist().inv_cdf(0.5 + level / 2)
        half = z * self.std
        return self.frequencies - half, self.frequencies + half


# ------------------------------------------------------------------------------------------------
# Base class
# ------------------------------------------------------------------------------------------------
class FrequencyOracle(abc.ABC):
    """Common interface of the frequency oracles (see the module docstring).

    Subclasses set ``p``, ``q`` and ``gap = p - q`` through :meth:`_probabilities` and implement
    ``_encode``, ``_statistic_shape``, ``_add``, ``_validate`` and ``_set_numerator``.
    """

    name: str = ""
    p: float
    q: float
    gap: float

    def __init__(self, epsilon: float, domain_size: int) -> None:
        self.epsilon = _check_epsilon(epsilon)
        self.d = _check_domain(domain_size)

    def __repr__(self) -> str:
        return f"{type(self).__name__}(epsilon={self.epsilon}, domain_size={self.d})"

    @property
    def domain_size(self) -> int:
        return self.d

    @property
    @abc.abstractmethod
    def report_bits(self) -> int:
        """Bits one report takes on the wire (payload only)."""

    # -- parameters and their exactness ---------------------------------------------------------------
    @abc.abstractmethod
    def _probabilities(self, eps: float) -> tuple[float, float, float, tuple[float, ...]]:
        """``(p, q, p - q, sampled)`` at privacy budget ``eps`` (structural parameters fixed);
        ``sampled`` are the Bernoulli parameters the encoder draws with ``rng.random() < x``."""

    def _set_probabilities(self) -> None:
        """Sets ``p``, ``q``, ``gap`` and refuses epsilon where the samplers are not exact (module doc)."""
        p, q, gap, sampled = self._probabilities(self.epsilon)
        self.p, self.q, self.gap = p, q, gap
        smallest = min(min(x, 1.0 - x) for x in sampled)
        lim = MIN_SAMPLED_PROBABILITY
        what = f"{self.name} on d = {self.d}" + self._structure_note()
        if smallest < lim:
            bound = self._epsilon_bound(lambda e: self._smallest(e) >= lim, upper=True)
            raise ValueError(
                f"epsilon = {self.epsilon:g} is too large for {what}: the encoder would sample a "
                f"probability of {smallest:.3g}, below 2**-32, which the float64 sampler (resolution "
                f"2**-53) does not realize exactly enough to keep the privacy loss at epsilon; "
                f"use epsilon <= {bound:.4g}"
            )
        if gap < lim:
            bound = self._epsilon_bound(lambda e: self._probabilities(e)[2] >= lim, upper=False)
            raise ValueError(
                f"epsilon = {self.epsilon:g} is too small for {what}: p - q = {gap:.3g} is below 2**-32, "
                f"which the float64 sampler (resolution 2**-53) cannot separate reliably, so the "
                f"estimates would be biased; use epsilon >= {bound:.4g}"
            )

    def _structure_note(self) -> str:
        return ""

    def _smallest(self, eps: float) -> float:
        return min(min(x, 1.0 - x) for x in self._probabilities(eps)[3])

    def _epsilon_bound(self, ok, *, upper: bool) -> float:
        """The accepted edge of epsilon for this oracle's structure, by bisection on log(eps) (60 steps)."""
        lo, hi = (1e-3, self.epsilon) if upper else (self.epsilon, 1.0)
        if not ok(lo if upper else hi):
            return float("nan")
        a, b = math.log(lo), math.log(hi)
        for _ in range(60):
            m = 0.5 * (a + b)
            good = ok(math.exp(m))
            if upper:
                a, b = (m, b) if good else (a, m)
            else:
                a, b = (a, m) if good else (m, b)
        # round to 4 significant digits on the safe side
        val = math.exp(a if upper else b)
        scale = 10 ** (math.floor(math.log10(val)) - 3)
        return (math.floor(val / scale) if upper else math.ceil(val / scale)) * scale

    # -- client ------------------------------------------------------------------------------------
    def encode(self, values: Any, *, rng: np.random.Generator | int | None = None) -> Reports:
        """Perturbs a batch of values (client side).

        Args:
            values: integers in ``[0, d)``, shape ``(n,)``.
            rng: ``None`` (what a real client must pass): perturbation noise from the OS CSPRNG
                (:func:`ldp.csprng.secure_rng`), public seeds (OLH, BLH) from the OS CSPRNG too. A
                ``Generator`` or seed is for simulations: the noise comes from it and public seeds from a
                spawned child of its ``SeedSequence`` (reproducible, never raw outputs of the noise stream).

        A real client must not reuse one seeded ``Generator`` across its reports: the noise of every
        report is then a deterministic function of one state, so anyone who learns or guesses that state
        (a predictable seed such as a device id or a clock, a state copied with an app backup, or a
        state recovered from published outputs) can replay the noise of all of the user's reports and
        strip the randomized response off them, which voids the epsilon guarantee of each one. Pass
        ``rng=None`` (the OS CSPRNG, :mod:`ldp.csprng`) on devices.

        Returns:
            One report per value.
        """
        vals = check_values(values, self.d)
        return self._encode_with(vals, rng)

    def encode_one(self, value: int, *, rng: np.random.Generator | int | None = None) -> Reports:
        """Perturbs one user's value (the on-device call); a batch of one report. Pass ``rng=None``."""
        return self.encode(np.asarray([value]), rng=rng)

    def _encode_with(self, values: np.ndarray, rng: Any) -> Reports:
        return self._encode(values, client_rng(rng))

    @abc.abstractmethod
    def _encode(self, values: np.ndarray, rng: np.random.Generator) -> Reports: ...

    # -- server: accumulate -----------------------------------------------------------------------
    @abc.abstractmethod
    def _statistic_shape(self) -> tuple[int, ...]: ...

    @property
    def accumulator_cells(self) -> int:
        """Number of int64 cells of the accumulator."""
        return math.prod(self._statistic_shape())

    @property
    def accumulator_bytes(self) -> int:
        return 8 * self.accumulator_cells

    @property
    def add_cells_per_report(self) -> int:
        """Accumulator cells one report increments (the per-report cost of ``add``)."""
        return 1

    @property
    def finalize_ops(self) -> int:
        """Rough count of arithmetic operations of ``estimate`` (for :func:`choose_oracle`)."""
        return self.accumulator_cells

    def _size_hint(self) -> str:
        return ""

    def _check_size(self) -> None:
        cells = self.accumulator_cells
        if cells > MAX_ACCUMULATOR_CELLS:
            raise ValueError(
                f"{self!r} needs an accumulator of {cells:,} int64 cells ({cells * 8 / 2**20:,.0f} MiB), "
                f"above the limit ldp.oracles.MAX_ACCUMULATOR_CELLS = {MAX_ACCUMULATOR_CELLS:,} cells "
                f"({MAX_ACCUMULATOR_CELLS * 8 >> 20} MiB){self._size_hint()}"
            )

    def create_accumulator(self) -> SupportAccumulator:
        """An empty accumulator (refused above :data:`MAX_ACCUMULATOR_CELLS`)."""
        self._check_size()
        return SupportAccumulator(np.zeros(self._statistic_shape(), dtype=np.int64), 0)

    def add(self, acc: SupportAccumulator, reports: Reports) -> SupportAccumulator:
        """Adds a batch of (already validated) reports to ``acc`` in place and returns it.

        Costs O(batch) for batches much smaller than the accumulator, O(batch + accumulator) otherwise.
        """
        if len(reports):
            self._add(acc.counts, reports)
            acc.n += len(reports)
        return acc

    @abc.abstractmethod
    def _add(self, counts: np.ndarray, reports: Reports) -> None: ...

    def merge(self, accumulators: Sequence[SupportAccumulator]) -> SupportAccumulator:
        """Sum of accumulators (a new one); ``merge([])`` is an empty accumulator."""
        out = self.create_accumulator()
        for a in accumulators:
            out.counts += a.counts
            out.n += a.n
        return out

    def support_counts(self, acc: SupportAccumulator) -> np.ndarray:
        """``c_v`` for every ``v``: float64 ``(d,)``."""
        return acc.counts.astype(np.float64)

    # -- server: validate ---------------------------------------------------------------------------
    def validate(self, reports: Reports) -> tuple[np.ndarray, np.ndarray]:
        """Server-side checks of untrusted reports.

        Returns:
            ``(ok, reasons)``: boolean ``(n,)`` mask of acceptable reports and an object array holding
            a :class:`~ldp.payload.Refusal` (reason code and detail) for each rejected one (None where
            accepted).
        """
        n = len(reports)
        reasons = np.full(n, None, dtype=object)
        missing = missing_fields(self.report_fields, reports, self.name)
        if missing is not None:
            reasons[:] = missing
            return np.zeros(n, dtype=bool), reasons
        self._validate(reports, reasons)
        return np.equal(reasons, None), reasons

    report_fields: tuple[str, ...] = ()

    @property
    def payload(self) -> PayloadSpec:
        """The declared shape of this oracle's reports (:mod:`ldp.payload`)."""
        return PayloadSpec(self._payload_fields())

    @abc.abstractmethod
    def _payload_fields(self) -> tuple[PayloadField, ...]: ...

    #: how devices make this oracle's reports (:class:`~ldp.payload.WireSpec`); each registered oracle
    #: declares its own
    wire: ClassVar[WireSpec | None] = None

    def spec(self) -> dict[str, Any]:
        """What identifies this oracle (what a task's ``resolved`` block records): its ``mechanism``
        name, ``domain_size`` and the parameters that change its reports, as plain JSON values."""
        return {"mechanism": self.name, "domain_size": int(self.d)}

    @abc.abstractmethod
    def _validate(self, reports: Reports, reasons: np.ndarray) -> None: ...

    # -- server: estimate -----------------------------------------------------------------------------
    def variance(self, n: int, f: Any = None) -> Any:
        """Closed-form variance of one estimate (Eq. 4; Eq. 6 when ``f`` is None)."""
        p, q, gap = self.p, self.q, self.gap
        if n <= 0:
            raise ValueError(f"n must be positive, got {n}")
        base = q * (1 - q)
        if f is None:
            return base / (n * gap**2)
        f = np.asarray(f, dtype=np.float64)
        return (base + f * gap * (1 - p - q)) / (n * gap**2)

    def variance_of_sum(self, n: int, subset: Any, f: Any = None) -> float:
        """Closed-form variance of ``sum_{v in subset} f_v`` (a set query), covariances included.

        Every report contributes ``X = #{v in subset : the report supports v}``; reports are independent,
        so ``Var(sum) = sum_i Var(X_i) / (n^2 (p - q)^2) = E_u[Var(X | u)] / (n (p - q)^2)`` with ``u``
        the reporting user's value, drawn from ``f``. Each class derives ``Var(X | u)`` in
        ``_set_numerator``. With ``f`` None the ``O(f)`` terms are dropped (as Eq. 6 drops them), i.e.
        every user's value is taken to lie outside the set.

        Args:
            n: number of reports.
            subset: distinct values (int array) or a boolean mask of length ``d``.
            f: the users' true frequencies ``(d,)``, or None.
        """
        if n <= 0:
            raise ValueError(f"n must be positive, got {n}")
        idx = _check_subset(subset, self.d)
        mask = np.zeros(self.d, dtype=bool)
        mask[idx] = True
        if f is not None:
            f = np.asarray(f, dtype=np.float64)
            if f.shape != (self.d,):
                raise ValueError(f"f must have shape ({self.d},), got {f.shape}")
        return float(self._set_numerator(mask, f)) / (n * self.gap**2)

    @abc.abstractmethod
    def _set_numerator(self, mask: np.ndarray, f: np.ndarray | None) -> float:
        """``E_u[Var(X | u)]`` for the set ``mask`` (see :meth:`variance_of_sum`)."""

    def _independent_numerator(self, mask: np.ndarray, f: np.ndarray | None) -> float:
        """Support indicators uncorrelated across values given ``u``: ``Var(X | u)`` is the sum of the
        Bernoulli variances, ``p(1-p) [u in set] + q(1-q) (a - [u in set])``; averaged over ``u``:
        ``a q(1-q) + F (p(1-p) - q(1-q))`` with ``F = sum_{v in set} f_v``; the per-value Eq. 4 summed."""
        a = int(mask.sum())
        F = 0.0 if f is None else float(f[mask].sum())
        p, q = self.p, self.q
        return a * q * (1 - q) + F * (p * (1 - p) - q * (1 - q))

    def estimate(self, acc: SupportAccumulator) -> FrequencyEstimate:
        """Unbiased frequencies and their variances from an accumulator."""
        c = self.support_counts(acc)
        n = acc.n
        if n == 0:
            nan = np.full(self.d, np.nan)
            inf = np.full(self.d, np.inf)
            return FrequencyEstimate(self.name, 0, nan, inf, inf.copy(), c)
        f = (c / n - self.q) / self.gap
        var0 = np.full(self.d, self.variance(n))
        var_f = self.variance(n, np.clip(f, 0.0, 1.0))
        return FrequencyEstimate(self.name, n, f, var0, var_f, c)

    def estimate_reports(self, reports: Reports) -> FrequencyEstimate:
        """Accumulates one batch and estimates (convenience)."""
        return self.estimate(self.add(self.create_accumulator(), reports))

    def describe(self) -> dict:
        """The oracle's parameters as plain data."""
        return {
            "mechanism": self.name,
            "epsilon": self.epsilon,
            "domain_size": self.d,
            "p": self.p,
            "q": self.q,
            "report_bits": self.report_bits,
        }


def _check_int_field(arr: np.ndarray, lo: int, hi: int, name: str, reasons: np.ndarray) -> np.ndarray:
    """Marks entries of a 1-D integer field outside ``[lo, hi)``; returns the int64 view of valid ones."""
    arr = np.asarray(arr)
    if arr.dtype.kind not in "iu":
        if arr.dtype.kind == "f":
            bad = ~np.isfinite(arr) | (arr != np.round(arr))
            refuse(reasons, bad, "invalid_payload", f"{name} is not an integer")
            arr = np.where(bad, lo, arr)
        else:
            refuse(reasons, True, "invalid_payload", f"{name} has non-integer type {arr.dtype}")
            return np.full(len(arr), lo, dtype=np.int64)
    a = arr.astype(np.int64)
    refuse(reasons, (a < lo) | (a >= hi), "out_of_domain", f"{name} outside [{lo}, {hi})")
    return a


# ------------------------------------------------------------------------------------------------
# GRR
# ------------------------------------------------------------------------------------------------
def _grr(values: np.ndarray, d: int, p: float, rng: np.random.Generator) -> np.ndarray:
    """Generalized randomized response on ``[0, d)``: keep w.p. ``p``, else a uniform other value."""
    n = len(values)
    other = rng.integers(0, d - 1, size=n)
    other += other >= values
    keep = rng.random(n) < p
    return np.where(keep, values, other)


def _grr_probabilities(eps: float, d: int) -> tuple[float, float, float, tuple[float, ...]]:
    e = math.exp(eps)
    z = e + d - 1
    p = e / z
    return p, 1.0 / z, math.expm1(eps) / z, (p,)


class GRR(FrequencyOracle):
    """Generalized randomized response (direct encoding).

    ``p = e^eps / (e^eps + d - 1)``, ``q = 1 / (e^eps + d - 1)``. Privacy: the report equals any given
    output with probability ``p`` or ``q`` depending on the input, and ``p / q = e^eps``.
    Report: one integer, ``ceil(log2 d)`` bits. Accumulator: ``d`` counts.
    """

    name = "grr"
    wire = WireSpec("categorical", "frequency", "encode_grr", clients=("typescript",))
    report_fields = ("values",)

    def __init__(self, epsilon: float, domain_size: int) -> None:
        super().__init__(epsilon, domain_size)
        self._set_probabilities()
        self._check_size()

    def _probabilities(self, eps):
        return _grr_probabilities(eps, self.d)

    @property
    def report_bits(self) -> int:
        return max(1, math.ceil(math.log2(self.d)))

    def _encode(self, values, rng):
        return Reports(values=_grr(values, self.d, self.p, rng))

    def _statistic_shape(self):
        return (self.d,)

    def _add(self, counts, reports):
        _scatter_add(counts, reports.values)

    def _payload_fields(self):
        return (PayloadField("values", "int64", low=0, high=self.d - 1),)

    def _validate(self, reports, reasons):
        _check_int_field(reports.values, 0, self.d, "value", reasons)

    def _set_numerator(self, mask, f):
        """One reported value ``y``; ``X = [y in set]`` is Bernoulli with ``pi_1 = p + (a - 1) q`` when
        ``u`` is in the set and ``pi_0 = a q`` when it is not, so
        ``E_u Var(X | u) = F pi_1 (1 - pi_1) + (1 - F) pi_0 (1 - pi_0)``. The estimates of different
        values are negatively correlated (``Cov = -q^2 / (n (p-q)^2)`` per pair at ``f = 0``): the set
        variance is below the sum of the per-value ones."""
        a = int(mask.sum())
        F = 0.0 if f is None else float(f[mask].sum())
        pi1 = self.p + (a - 1) * self.q
        pi0 = a * self.q
        return F * pi1 * (1 - pi1) + (1 - F) * pi0 * (1 - pi0)


# ------------------------------------------------------------------------------------------------
# OLH / BLH
# ------------------------------------------------------------------------------------------------
def olh_variance_factor(epsilon: float, g: float) -> float:
    """``n Var`` of one OLH estimate with ``g`` buckets (Eq. 6).

    ``(e^eps + g - 1)^2 / ((e^eps - 1)^2 (g - 1))``.

    Minimised at the real ``g* = e^eps + 1``, where it is ``4 e^eps / (e^eps - 1)^2``.
    """
    e = math.exp(epsilon)
    return (e + g - 1) ** 2 / (math.expm1(epsilon) ** 2 * (g - 1))


def _legacy_buckets(eps: float, d: int) -> int:
    """The former default (``linear-gf``): ``round(e^eps + 1)`` moved to the nearest prime power (ties to
    the larger), then capped at the largest prime power <= d. Same values as before, bounded work: a
    target above ``2d`` is capped directly (by Bertrand's postulate the nearest prime power is then > d)."""
    target = math.exp(eps) + 1
    g0 = max(2, round(target))
    g = None
    if g0 <= 2 * d:
        if prime_power(g0):
            g = g0
        else:
            for delta in range(1, g0):
                cands = [x for x in (g0 + delta, g0 - delta) if x >= 2 and prime_power(x)]
                if cands:
                    g = min(cands, key=lambda x: (abs(x - target), -x))
                    break
    if g is None or g > d:
        g = next(x for x in range(d, 1, -1) if prime_power(x))
    return g


def olh_buckets(epsilon: float, domain_size: int, family: str = DEFAULT_HASH_FAMILY) -> int:
    """Default number of OLH buckets ``g``, in closed form.

    ``gf2-affine`` (default): the power of two ``2^k`` minimising :func:`olh_variance_factor`, with
    ``1 <= k <= floor(log2 d)`` (more buckets than values only adds cost; when ``e^eps + 1 > d`` GRR is
    the better oracle anyway). The factor is convex in ``g``, so the best power of two is one of the two
    around ``e^eps + 1``: ``k = floor(log2(e^eps + 1))`` or ``k + 1`` (ties go to the smaller ``g``).
    The per-value variance cost against the real optimum (uncapped domain) is at most 7.7% (at
    eps = 0.55), 4.5% for eps >= 1.3 (at eps = 1.52) and 3.7% for eps >= 2; 0.24% at eps = 1, 0.51% at
    eps = 4 (``python -m bench.oracles --olh_sweep ...`` prints these).

    ``linear-gf`` (legacy): the former default, ``round(e^eps + 1)`` moved to the nearest prime power and
    capped at the largest prime power <= d.
    """
    eps, d = _check_epsilon(epsilon), _check_domain(domain_size)
    fam = hash_family(family)
    if fam.name == LEGACY_HASH_FAMILY:
        return _legacy_buckets(eps, d)
    kmax = min(63, d.bit_length() - 1)
    # log2(e^eps + 1) without overflow
    t = eps / math.log(2) + math.log2(1 + math.exp(-eps))
    k0 = math.floor(t)
    cands = sorted({min(kmax, max(1, k0)), min(kmax, max(1, k0 + 1))})
    k = min(cands, key=lambda kk: (olh_variance_factor(eps, 2.0**kk), kk))
    return 1 << k


def default_olh_buckets(
    epsilon: float, domain_size: int | None = None, family: str = DEFAULT_HASH_FAMILY
) -> int:
    """Deprecated alias of :func:`olh_buckets` (without ``domain_size`` the domain cap is not applied)."""
    warnings.warn("default_olh_buckets is deprecated; use olh_buckets(epsilon, domain_size, family)",
                  DeprecationWarning, stacklevel=2)
    return olh_buckets(epsilon, domain_size if domain_size is not None else 1 << 63, family)


class OLH(FrequencyOracle):
    """Optimized local hashing (Wang et al., USENIX Security 2017; NDSS 2020 Sec. III-A).

    A client draws a public 64-bit seed (OS CSPRNG) selecting ``H`` from a named hash family
    (:data:`ldp.hashing.HASH_FAMILIES`) onto ``g`` buckets, and reports ``(seed, GRR_g(H(v)))``.
    ``p = e^eps / (e^eps + g - 1)`` and ``q = 1/g`` exactly (the families are universal).
    Privacy: the seed is independent of ``v``; the bucket is GRR on ``[g]``, which is eps-LDP.

    The default family ``gf2-affine`` (``g = 2^k``) is 3-wise independent, so the estimates of different
    values are uncorrelated and set or range sums have variance sum-of-per-value-variances
    (:meth:`variance_of_sum`). The legacy ``linear-gf`` family (any prime power ``g``) is only pairwise
    independent for ``g`` not a power of two: it is kept to decode reports encoded under it.

    Accumulation in O(1), O(g) or O(2^m / g) per report, never O(d); support counts of all values come
    back at ``estimate`` from one transform of size ``p^m`` (the integer Walsh-Hadamard transform when
    ``p = 2``, exact), or directly. The indicator of the support set ``{x : M x + b = y}`` has the Fourier
    expansion ``p^-k sum_{s in GF(p)^k} w^{<s, b - y>} w^{<M^T s, x>}`` (``w = e^{2 pi i / p}``).

    * ``k = 1`` (``M`` is one row ``a``): the accumulator is the integer histogram ``H[a, t]`` of reports
      by hash row ``a`` and target ``t = y - b``; a report is one increment. For ``p = 2``,
      ``c = (n + WHT(H[:, 0] - H[:, 1])) / 2``.
    * ``k > 1``: the accumulator keeps, for every residue ``r`` and frequency ``u`` in ``GF(p)^m``,
      ``T[r, u] = #{(report, s) : M^T s = u, <s, b - y> = r}``; a report adds one to ``g`` cells. For
      ``p = 2``, ``g c = WHT(T[0] - T[1])``.

    * ``p = 2`` with many buckets (``2 * 2^m / g + 8 k < g``, attribute ``direct``): a report's support set
      ``{x : M x = y xor b}`` is an affine subspace of about ``2^m / g`` values, fewer than the ``g`` Fourier
      cells; it is enumerated (vectorized GF(2) elimination, :meth:`_support_sets`) and the accumulator is
      the ``2^m`` support counts themselves. E.g. eps = 8, d = 4096 (g = 4096): about one cell per report.

    The statistic is ``p * p^m`` int64 (``2 * 1024`` for ``d = 1024``; ``2^m`` on the direct path), integers
    only, so merges are exact.

    Args:
        epsilon: privacy budget.
        domain_size: ``d``.
        g: number of hash buckets (a power of two for ``gf2-affine``, a prime power for ``linear-gf``);
            default :func:`olh_buckets`.
        family: hash family name, ``"gf2-affine"`` (default) or ``"linear-gf"`` (legacy).
    """

    name = "olh"
    wire = WireSpec("categorical", "frequency", "encode_olh", clients=("typescript",))

    def spec(self) -> dict[str, Any]:
        return {**super().spec(), "family": self.family.name, "g": int(self.g)}
    report_fields = ("seeds", "values")

    def __init__(
        self, epsilon: float, domain_size: int, g: int | None = None, family: str = DEFAULT_HASH_FAMILY
    ) -> None:
        super().__init__(epsilon, domain_size)
        self.family = hash_family(family)
        if g is None:
            g = olh_buckets(self.epsilon, self.d, self.family.name)
        if isinstance(g, bool) or not isinstance(g, (int, np.integer)) or g < 2:
            raise ValueError(f"g must be an integer >= 2, got {g!r}")
        msg = self.family.check(int(g))
        if msg:
            raise ValueError(msg)
        self.g = int(g)
        self.hash: LinearHash = self.family.make(self.d, self.g)
        # p = 2 and many buckets: a report's support set {x : M x = y xor b} has about 2^m / g values,
        # fewer than the g Fourier cells it would touch: count in the value domain instead
        # (measured cost model: the Fourier path costs ~g per report, this one ~2 size/g + 8 k)
        self.direct = (self.hash.p == 2 and self.hash.k > 1
                       and 2 * (self.hash.size // self.g) + 8 * self.hash.k < self.g)
        self._check_size()
        self._set_probabilities()
        pp, k = self.hash.p, self.hash.k
        if pp > 2:
            self._s = (np.arange(self.g)[:, None] // (pp ** np.arange(k))[None, :]) % pp  # (g, k)
            self._ypow = pp ** np.arange(k, dtype=np.int64)
            self._upow = pp ** np.arange(self.hash.m, dtype=np.int64)

    def _probabilities(self, eps):
        e = math.exp(eps)
        g = self.g
        z = e + g - 1
        p = e / z
        return p, 1.0 / g, math.expm1(eps) * (g - 1) / (g * z), (p,)

    def _structure_note(self):
        return f" with g = {self.g}"

    def __repr__(self) -> str:
        return (f"{type(self).__name__}(epsilon={self.epsilon}, domain_size={self.d}, g={self.g}, "
                f"family={self.family.name!r})")

    @property
    def report_bits(self) -> int:
        return 64 + max(1, math.ceil(math.log2(self.g)))

    def describe(self) -> dict:
        out = super().describe()
        out.update(g=self.g, hash=self.family.name, hash_prime=self.hash.p, hash_digits=self.hash.m)
        return out

    def _size_hint(self):
        if self.hash.p > 2:
            return (f"; the {self.family.name} table grows with p = {self.hash.p}: the default gf2-affine "
                    f"family keeps it at 2 * {1 << (self.d - 1).bit_length():,} cells")
        return ""

    def _encode_with(self, values, rng):
        perturb, seed_rng = client_streams(rng)
        seeds = public_seeds(len(values), seed_rng)
        h = self.hash.hash(seeds, values)
        return Reports(seeds=seeds, values=_grr(h, self.g, self.p, perturb))

    def _encode(self, values, rng):  # pragma: no cover - encode goes through _encode_with
        return self._encode_with(values, rng)

    def _statistic_shape(self):
        if self.direct:
            return (self.hash.size,)  # support counts of every x in GF(2)^m
        if self.hash.k == 1:
            return (self.hash.size, self.hash.p)  # H[a, t]
        return (self.hash.p, self.hash.size)  # T[r, u]

    @property
    def add_cells_per_report(self) -> int:
        if self.direct:
            return max(1, self.hash.size // self.g)
        return 1 if self.hash.k == 1 else self.g

    @property
    def finalize_ops(self) -> int:
        size = self.hash.size
        if self.direct:
            return size
        return size * max(1, size.bit_length() - 1) * (1 if self.hash.p == 2 else 4 * self.hash.p)

    def _add(self, counts, reports):
        seeds = np.asarray(reports.seeds).astype(np.uint64, copy=False)
        ys = np.asarray(reports.values, dtype=np.int64)
        flat = counts.reshape(-1)
        per = self.add_cells_per_report
        if self.hash.p == 2 and self.hash.k > 1 and not self.direct:
            self._add_gf2_table(flat, seeds, ys)
            return
        if self.direct:  # 2k elimination words and 2 solution arrays of 8 bytes per report
            step = max(1, _CHUNK_BYTES // (8 * (2 * self.hash.k + 2 * per + 8)))
        else:  # three (rows x g) 8-byte arrays per chunk
            step = max(1, min(1 << 16, (_CHUNK_BYTES // 24) // per))
        if self.direct:
            index = self._support_sets
        else:
            index = self._row_index if self.hash.k == 1 else self._table_index
        for start in range(0, len(ys), step):
            _scatter_add(flat, index(seeds[start : start + step], ys[start : start + step]))

    def _add_gf2_table(self, flat: np.ndarray, seeds: np.ndarray, ys: np.ndarray) -> None:
        """Fourier table, ``p = 2``, ``k > 1``: ``T[r, u] += 1`` at ``r * 2^m + u`` for every ``s`` in
        ``GF(2)^k`` and report (``u = M^T s``, ``r = <s, b xor y>``), flat index ``u | r << m``.

        The index is XOR-linear in ``s``: the XOR of ``w_j = row_j | z_j << m`` (``z = b xor y``) over the
        bits ``j`` of ``s``. The ``s = 0`` cell (index 0) gets one per report directly; the other ``g - 1``
        indices are built by doubling into a ``(g - 1, rows)`` buffer reused across chunks (one row of
        the buffer per ``s``, contiguous over the chunk's reports, so every step is a long vector
        operation), from hash words expanded per chunk exactly as :meth:`ldp.hashing.LinearHash.rows`
        does (word ``j`` of seed ``s`` is ``splitmix64(s + (j + 1) * GOLDEN)``).
        """
        hsh = self.hash
        g, k, m = self.g, hsh.k, hsh.m
        step = min(1 << 16, max(1024, (1 << 20) // g))  # a buffer of about 8 MiB
        buf = np.empty((g - 1, min(step, len(ys))), dtype=np.int64)
        steps = (np.arange(1, k + 2, dtype=np.uint64) * GOLDEN)[:, None]
        mask = np.int64((1 << m) - 1)
        for start in range(0, len(ys), step):
            sd = seeds[start : start + step]
            nn = len(sd)
            with np.errstate(over="ignore"):
                words = splitmix64(steps + sd[None, :]).view(np.int64)  # (k + 1, nn)
            z = (words[k] & (g - 1)) ^ ys[start : start + step]
            idx = buf[:, :nn]
            for j in range(k):
                h = 1 << j
                w = idx[h - 1]  # s = 2^j
                np.bitwise_and(words[j], mask, out=w)
                w |= ((z >> j) & 1) << m
                np.bitwise_xor(idx[: h - 1], w, out=idx[h : 2 * h - 1])  # s = 2^j + s' for s' < 2^j
            flat[0] += nn
            _scatter_add(flat, idx)

    def _support_sets(self, seeds: np.ndarray, ys: np.ndarray) -> np.ndarray:
        """Value-domain path (``p = 2``): every ``x`` with ``M x = y xor b``, for each report, flattened.

        Gaussian elimination over GF(2), vectorized over the reports (rows are ``m``-bit masks): reduced
        row echelon form with one pivot bit per independent row; a zero row with target 1 makes the system
        inconsistent (the report supports nothing). The solutions are ``x0 xor span(null basis)``: ``x0``
        sets each pivot bit to its row's target, and each free bit ``f`` gives the basis vector
        ``f | {pivot_i : row i has bit f}``. Reports are grouped by rank, since a group with rank ``r``
        has ``2^(m - r)`` solutions each (``2^m / g`` for the usual full rank).
        """
        hsh = self.hash
        m, k = hsh.m, hsh.k
        rows, b = hsh.rows(seeds)
        z = (b ^ ys).astype(np.uint64)
        # augmented rows: the m-bit mask with the target bit at position m
        A = [rows[:, j] | (((z >> np.uint64(j)) & np.uint64(1)) << np.uint64(m)) for j in range(k)]
        piv = [None] * k
        zero, one = np.uint64(0), np.uint64(1)
        low = np.uint64((1 << m) - 1)
        for j in range(k):
            a = A[j]
            for i in range(j):  # clear earlier pivots from row j
                a ^= A[i] * ((a & piv[i]) != zero)
            r = a & low
            p = r & (~r + one)  # lowest set bit (0 for a zero row)
            for i in range(j):  # clear the new pivot from earlier rows (reduced form)
                A[i] ^= a * ((A[i] & p) != zero)
            A[j], piv[j] = a, p
        pivots = np.zeros(len(ys), dtype=np.uint64)
        x0 = np.zeros(len(ys), dtype=np.uint64)
        rank = np.zeros(len(ys), dtype=np.int64)
        bad = np.zeros(len(ys), dtype=bool)
        top = np.uint64(m)
        for j in range(k):
            pivots |= piv[j]
            x0 |= piv[j] * (A[j] >> top)  # pivot bit set to the row's target
            rank += piv[j] != zero
            bad |= A[j] == (one << top)  # 0 = 1: inconsistent
        full = np.uint64((1 << m) - 1)
        out = []
        for rk in np.unique(rank[~bad]):
            sel = np.flatnonzero((rank == rk) & ~bad)
            if len(sel) == len(ys):
                sel = slice(None)
            free = full & ~pivots[sel]
            As = [A[j][sel] for j in range(k)]
            ps = [piv[j][sel] for j in range(k)]
            sols = x0[sel][:, None]
            for _ in range(m - int(rk)):
                f = free & (~free + one)
                free ^= f
                vec = f.copy()
                for j in range(k):
                    vec |= ps[j] * ((As[j] & f) != zero)
                sols = np.concatenate([sols, sols ^ vec[:, None]], axis=1)
            out.append(sols.reshape(-1))
        if not out:
            return np.zeros(0, dtype=np.int64)
        return np.concatenate(out).astype(np.int64)

    def _row_index(self, seeds: np.ndarray, ys: np.ndarray) -> np.ndarray:
        """``k = 1``: flat index ``a * p + t`` of the one histogram cell each report adds to: ``(n,)``."""
        hsh = self.hash
        rows, b = hsh.rows(seeds)
        if hsh.p == 2:
            return rows[:, 0].astype(np.int64) * 2 + (ys ^ b)
        return (rows[:, 0, :] @ self._upow) * hsh.p + (ys - b[:, 0]) % hsh.p

    def _table_index(self, seeds: np.ndarray, ys: np.ndarray) -> np.ndarray:
        """``p > 2``: flat indices ``r * p^m + u`` of the ``g`` table cells each report adds one to:
        ``(n, g)`` (``p = 2`` goes through :meth:`_add_gf2_table`)."""
        hsh = self.hash
        size = hsh.size
        n = len(ys)
        M, b = hsh.rows(seeds)
        p, k, S = hsh.p, hsh.k, self._s
        ydig = (ys[:, None] // self._ypow[None, :]) % p
        zz = (b - ydig) % p  # (n, k)
        # r[n, s] = <s, b - y> mod p and u[n, s] = M^T s, digit by digit: k * (m + 1) passes over (n, g)
        r = np.zeros((n, self.g), dtype=np.int64)
        for l in range(k):
            r += zz[:, l, None] * S[None, :, l]
        idx = (r % p) * size
        for j in range(hsh.m):
            digit = M[:, 0, j, None] * S[None, :, 0]
            for l in range(1, k):
                digit += M[:, l, j, None] * S[None, :, l]
            idx += (digit % p) * int(self._upow[j])
        return idx

    def support_counts(self, acc):
        hsh = self.hash
        T = acc.counts
        if self.direct:
            return T[: self.d].astype(np.float64)
        if hsh.p == 2:
            if hsh.k == 1:
                c = (acc.n + _fwht(T[:, 0] - T[:, 1])) // 2
            else:
                c = _fwht(T[0] - T[1]) // self.g  # exact: g * (integer count)
            return c[: self.d].astype(np.float64)
        if hsh.k == 1:
            p = hsh.p
            Hhat = np.fft.fft(T, axis=1)  # sum_t H[a, t] w^{-s t}
            adig = hsh.digits(np.arange(hsh.size))
            F = np.zeros(hsh.size, dtype=np.complex128)
            F[0] = Hhat[:, 0].sum()
            for s_ in range(1, p):
                F[((s_ * adig) % p) @ self._upow] += Hhat[:, s_]  # a -> s a is a permutation
            c = np.fft.ifftn(F.reshape((p,) * hsh.m)).real.reshape(-1) * (hsh.size / p)
            return np.rint(c[: self.d])
        w = np.exp(2j * np.pi * np.arange(hsh.p) / hsh.p)
        F = (w[:, None] * T).sum(axis=0).reshape((hsh.p,) * hsh.m)
        c = np.rint(np.fft.ifftn(F).real.reshape(-1) * hsh.size).astype(np.int64)
        return (c[: self.d] / self.g).astype(np.float64)

    def _payload_fields(self):
        return (
            PayloadField("seeds", "uint64", invalid="invalid_seed"),
            PayloadField("values", "int64", low=0, high=self.g - 1),
        )

    def _validate(self, reports, reasons):
        _check_int_field(reports.values, 0, self.g, "bucket", reasons)
        seeds = np.asarray(reports.seeds)
        if seeds.dtype.kind not in "iu":
            refuse(reasons, True, "invalid_seed", f"seed has non-integer type {seeds.dtype}")

    def _set_numerator(self, mask, f):
        """3-wise independent family: for the reporting user ``u`` and ``v != w``, ``h(v)`` and ``h(w)``
        are independent uniform given ``h(u)`` (hence given the bucket ``y``), so
        ``P[h(v) = h(w) = y] = 1/g^2 = q^2`` and ``P[h(u) = y, h(w) = y] = p / g = p q``: every covariance
        of support indicators is 0 and the set variance is the sum of the per-value variances
        (Eq. 4 summed; see :meth:`FrequencyOracle._independent_numerator`)."""
        if not self.family.three_wise_independent and self.hash.p > 2:
            raise ValueError(
                f"no closed-form set variance for the {self.family.name} family with g = {self.g}: it is not "
                "3-wise independent, so support indicators of different values are correlated"
            )
        return self._independent_numerator(mask, f)


class BLH(OLH):
    """Binary local hashing: OLH with ``g = 2`` (Bassily and Smith 2015; Wang et al. 2017)."""

    name = "blh"
    wire = WireSpec("categorical", "frequency", "encode_blh", clients=("typescript",))

    def __init__(self, epsilon: float, domain_size: int, family: str = DEFAULT_HASH_FAMILY) -> None:
        super().__init__(epsilon, domain_size, g=2, family=family)

    def __repr__(self) -> str:
        return f"BLH(epsilon={self.epsilon}, domain_size={self.d})"


def _fwht(x: np.ndarray) -> np.ndarray:
    """Unnormalised Walsh-Hadamard transform of a length-2^m integer vector (exact for ints)."""
    x = np.asarray(x).copy()
    n = x.shape[0]
    h = 1
    while h < n:
        x = x.reshape(-1, 2, h)
        a, b = x[:, 0, :], x[:, 1, :]
        x = np.stack((a + b, a - b), axis=1)
        h *= 2
    return x.reshape(n)


# ------------------------------------------------------------------------------------------------
# Unary encodings
# ------------------------------------------------------------------------------------------------
class _UnaryEncoding(FrequencyOracle):
    """Unary encoding: a length-d bit vector, bit ``v`` set w.p. ``p``, every other bit w.p. ``q``.

    Privacy: two inputs differ in two bit positions; the likelihood ratio of any output vector is at
    most ``p (1 - q) / ((1 - p) q) = e^eps``. Report: ``d`` bits, packed little-endian.
    Accumulator: ``d`` column counts. Encode and add work in chunks of about 64 MiB of temporaries
    (``rows = budget / d``), so memory stays bounded at any ``d``.
    """

    report_fields = ("bits",)

    def __init__(self, epsilon: float, domain_size: int) -> None:
        super().__init__(epsilon, domain_size)
        self._set_probabilities()
        self._check_size()

    @property
    def report_bits(self) -> int:
        return self.d

    @property
    def nbytes(self) -> int:
        return (self.d + 7) // 8

    @property
    def add_cells_per_report(self) -> int:
        return self.d

    def _encode(self, values, rng):
        n = len(values)
        out = np.empty((n, self.nbytes), dtype=np.uint8)
        step = max(1, _CHUNK_BYTES // (9 * self.d))  # float64 uniforms + bool bits per cell
        for start in range(0, n, step):
            v = values[start : start + step]
            m = len(v)
            bits = rng.random((m, self.d)) < self.q
            bits[np.arange(m), v] = rng.random(m) < self.p
            out[start : start + m] = np.packbits(bits, axis=1, bitorder="little")
        return Reports(bits=out)

    def _statistic_shape(self):
        return (self.d,)

    def _add(self, counts, reports):
        bits = reports.bits
        step = max(1, _CHUNK_BYTES // self.d)  # one unpacked byte per cell
        for start in range(0, len(bits), step):
            unpacked = np.unpackbits(bits[start : start + step], axis=1, count=self.d, bitorder="little")
            counts += unpacked.sum(axis=0, dtype=np.int64)

    def _payload_fields(self):
        return (PayloadField("bits", "uint8", length=self.nbytes, low=0, high=self.d - 1),)

    def _validate(self, reports, reasons):
        bits = np.asarray(reports.bits)
        if bits.ndim != 2 or bits.shape[1] != self.nbytes or bits.dtype != np.uint8:
            refuse(reasons, True, "invalid_payload",
                   f"bit vector must be {self.nbytes} bytes (d = {self.d}), got shape {bits.shape}")
            return
        pad = self.nbytes * 8 - self.d
        if pad:
            stray = (bits[:, -1] >> np.uint8(8 - pad)) != 0
            refuse(reasons, stray, "out_of_domain", "padding bits beyond the domain are set")

    def _set_numerator(self, mask, f):
        """The bits are drawn independently: no covariances, the per-value Eq. 4 summed."""
        return self._independent_numerator(mask, f)


class OUE(_UnaryEncoding):
    """Optimized unary encoding (Wang et al. 2017): ``p = 1/2``, ``q = 1/(e^eps + 1)``."""

    name = "oue"
    wire = WireSpec("categorical", "frequency", "encode_oue", clients=("typescript",))

    def _probabilities(self, eps):
        q = 1.0 / (math.exp(eps) + 1)
        return 0.5, q, 0.5 * math.tanh(eps / 2), (0.5, q)


class SUE(_UnaryEncoding):
    """Symmetric unary encoding, i.e. basic one-time RAPPOR (Erlingsson et al. 2014):
    ``p = e^(eps/2) / (e^(eps/2) + 1)``, ``q = 1 / (e^(eps/2) + 1)``."""

    name = "sue"
    wire = WireSpec("categorical", "frequency", "encode_sue", clients=("typescript",))

    def _probabilities(self, eps):
        e = math.exp(eps / 2)
        p, q = e / (e + 1), 1.0 / (e + 1)
        return p, q, math.tanh(eps / 4), (p, q)


# ------------------------------------------------------------------------------------------------
# Hadamard response
# ------------------------------------------------------------------------------------------------
class HadamardResponse(FrequencyOracle):
    """Hadamard response (Acharya, Sun and Zhang, AISTATS 2019), symmetric version.

    ``K`` is the smallest power of two greater than ``d``; value ``v`` owns Hadamard row ``w = v + 1``
    and its set ``S_v = {y in [K] : popcount(y & w) even}`` of size ``K/2``. The client outputs a
    uniform element of ``S_v`` w.p. ``p = e^eps / (e^eps + 1)``, else a uniform element of the
    complement. Two different rows' sets meet in ``K/4`` points, so ``q = 1/2``.
    Privacy: every output has probability ``2p/K`` or ``2(1-p)/K``, ratio ``e^eps``.
    Report: ``log2 K`` bits. Accumulator: a ``K``-bin output histogram; the support counts are
    ``(n + WHT(hist)[v + 1]) / 2``.
    """

    name = "hr"
    wire = WireSpec("categorical", "frequency", "encode_hr", clients=("typescript",))
    report_fields = ("values",)

    def __init__(self, epsilon: float, domain_size: int) -> None:
        super().__init__(epsilon, domain_size)
        self.K = 1 << self.d.bit_length()  # smallest power of two > d
        self._set_probabilities()
        self._check_size()

    def _probabilities(self, eps):
        e = math.exp(eps)
        p = e / (e + 1)
        return p, 0.5, 0.5 * math.tanh(eps / 2), (p,)

    @property
    def report_bits(self) -> int:
        return self.K.bit_length() - 1

    @property
    def finalize_ops(self) -> int:
        return self.K * max(1, self.K.bit_length() - 1)

    def _encode(self, values, rng):
        n = len(values)
        w = (values + 1).astype(np.uint64)
        y = rng.integers(0, self.K, size=n, dtype=np.uint64)
        in_set = (np.bitwise_count(y & w) & 1) == 0
        want = rng.random(n) < self.p
        low = w & (~w + np.uint64(1))  # lowest set bit of w
        y = np.where(in_set != want, y ^ low, y)
        return Reports(values=y.astype(np.int64))

    def _statistic_shape(self):
        return (self.K,)

    def _add(self, counts, reports):
        _scatter_add(counts, reports.values)

    def support_counts(self, acc):
        t = _fwht(acc.counts)
        return ((acc.n + t[1 : self.d + 1]) / 2).astype(np.float64)

    def _payload_fields(self):
        return (PayloadField("values", "int64", low=0, high=self.K - 1),)

    def _validate(self, reports, reasons):
        _check_int_field(reports.values, 0, self.K, "value", reasons)

    def _set_numerator(self, mask, f):
        """With ``chi_w(y) = (-1)^popcount(w & y)``, the report supports ``v`` iff ``chi_{v+1}(y) = 1``,
        so ``X = a/2 + (1/2) sum_{v in set} chi_{v+1}(y)``. Given ``u`` the output has density
        ``(1 + (2p - 1) chi_{u+1}(y)) / K``, hence ``E chi_w = (2p - 1) [w = u + 1]`` and, for ``w != w'``,
        ``E chi_w chi_w' = (2p - 1) [w xor w' = u + 1]``: rows whose XOR is the user's row are correlated.
        ``Var(X | u) = (a - (2p - 1)^2 [u in set] + (2p - 1) N(u + 1)) / 4``, ``N(t)`` the number of ordered
        pairs of set rows with XOR ``t`` (an XOR autocorrelation, computed with the WHT). Averaged over
        ``u``: ``(a - (2p - 1)^2 F + (2p - 1) sum_u f_u N(u + 1)) / 4``."""
        a = int(mask.sum())
        if f is None:
            return a / 4.0
        s = 2 * self.p - 1
        ind = np.zeros(self.K, dtype=np.int64)
        ind[np.flatnonzero(mask) + 1] = 1
        wht = _fwht(ind)
        pairs = _fwht(wht * wht) // self.K  # N(t) = #{(x, x') : x xor x' = t}
        F = float(f[mask].sum())
        cross = float(f @ pairs[1 : self.d + 1])
        return (a - s * s * F + s * cross) / 4.0


# ------------------------------------------------------------------------------------------------
# Subset selection
# ------------------------------------------------------------------------------------------------
def _ss_probabilities(eps: float, d: int, k: int) -> tuple[float, float, float, tuple[float, ...]]:
    e = math.exp(eps)
    z = k * e + d - k
    p = k * e / z
    q = (k * e * (k - 1) / (d - 1) + (d - k) * k / (d - 1)) / z
    gap = k * (d - k) * math.expm1(eps) / ((d - 1) * z)
    return p, q, gap, (p,)


def _ss_variance_factor(epsilon: float, d: int, k: int) -> float:
    _, q, gap, _ = _ss_probabilities(epsilon, d, k)
    return q * (1 - q) / gap**2


class SubsetSelection(FrequencyOracle):
    """k-subset selection (Wang et al. 2016; Ye and Barg 2018).

    The client reports a ``k``-subset of ``[d]`` that contains its value w.p.
    ``p = k e^eps / (k e^eps + d - k)``; given the inclusion decision the subset is uniform.
    Another value is included w.p. ``q = (k e^eps (k-1)/(d-1) + (d-k) k/(d-1)) / (k e^eps + d - k)``.

    Wire format: the ``k`` items **sorted ascending** (the report is a set; the order carries nothing).
    :meth:`validate` refuses unsorted or repeated items, so a client that leaked its value through
    the order (e.g. always putting it last) is dead-lettered instead of accepted.

    Privacy: a sorted tuple is a function of the subset, and a subset containing ``v`` has probability
    ``k e^eps / (Z C(d-1, k-1))``, one without it ``k / (Z C(d-1, k-1))``; the ratio is ``e^eps``.
    ``k`` defaults to whichever of ``floor`` / ``ceil`` of ``d / (e^eps + 1)`` gives the lower variance.
    Report: ``k ceil(log2 d)`` bits. Accumulator: ``d`` counts.
    """

    name = "ss"
    wire = WireSpec("categorical", "frequency", "encode_ss", clients=("typescript",))

    def spec(self) -> dict[str, Any]:
        return {**super().spec(), "k": int(self.k)}
    report_fields = ("items",)

    def __init__(self, epsilon: float, domain_size: int, k: int | None = None) -> None:
        super().__init__(epsilon, domain_size)
        e = math.exp(self.epsilon)
        if k is None:
            x = self.d / (e + 1)
            cands = {min(self.d - 1, max(1, math.floor(x))), min(self.d - 1, max(1, math.ceil(x)))}
            k = min(sorted(cands), key=lambda kk: _ss_variance_factor(self.epsilon, self.d, kk))
        if isinstance(k, bool) or not isinstance(k, (int, np.integer)) or not 1 <= k < self.d:
            raise ValueError(f"k must be an integer in [1, d), got {k!r}")
        self.k = int(k)
        self._set_probabilities()
        self._check_size()
        self._dtype = np.uint16 if self.d <= 1 << 16 else np.uint32

    def _probabilities(self, eps):
        return _ss_probabilities(eps, self.d, self.k)

    def _structure_note(self):
        return f" with k = {self.k}"

    def __repr__(self) -> str:
        return f"SubsetSelection(epsilon={self.epsilon}, domain_size={self.d}, k={self.k})"

    @property
    def report_bits(self) -> int:
        return self.k * max(1, math.ceil(math.log2(self.d)))

    @property
    def add_cells_per_report(self) -> int:
        return self.k

    def describe(self) -> dict:
        out = super().describe()
        out["k"] = self.k
        return out

    def _others(self, v: np.ndarray, count: int, rng: np.random.Generator) -> np.ndarray:
        """``count`` distinct uniform values of ``[0, d) minus {v}`` per row: ``(m, count)`` int64."""
        m, d = len(v), self.d
        if count == 0:
            return np.zeros((m, 0), dtype=np.int64)
        if 4 * count * count <= d:
            # i.i.d. draws, rows with a repeat redrawn: uniform over ordered distinct tuples
            out = rng.integers(0, d - 1, size=(m, count))
            todo = np.arange(m)
            while True:
                srt = np.sort(out[todo], axis=1)
                rep = (srt[:, 1:] == srt[:, :-1]).any(axis=1)
                todo = todo[rep]
                if not len(todo):
                    break
                out[todo] = rng.integers(0, d - 1, size=(len(todo), count))
            return out + (out >= v[:, None])
        keys = rng.random((m, d))
        keys[np.arange(m), v] = 2.0  # never among the smallest
        return np.argpartition(keys, count - 1, axis=1)[:, :count]

    def _encode(self, values, rng):
        n, k, d = len(values), self.k, self.d
        out = np.empty((n, k), dtype=self._dtype)
        small = 4 * k * k <= d
        step = max(1, (1 << 20) // k) if small else max(1, _CHUNK_BYTES // (10 * d))
        for start in range(0, n, step):
            v = values[start : start + step]
            m = len(v)
            include = rng.random(m) < self.p
            if small:
                items = self._others(v, k, rng)
                items[include, k - 1] = v[include]  # any slot: the row is sorted below
                out[start : start + m] = np.sort(items, axis=1)
                continue
            # uniform random keys; the value's key is excluded; a row keeps its k (or, with the value,
            # k - 1) smallest keys. Reading the kept columns of the boolean mask row by row gives each
            # row's items already sorted ascending.
            keys = rng.random((m, d))
            rows = np.arange(m)
            keys[rows, v] = 2.0
            kth = [k - 2, k - 1] if k >= 2 else [k - 1]
            part = np.partition(keys, kth, axis=1)
            lower = part[:, k - 2] if k >= 2 else np.full(m, -1.0)
            thr = np.where(include, lower, part[:, k - 1])
            mask = keys <= thr[:, None]
            mask[rows[include], v[include]] = True
            if not np.all(mask.sum(axis=1) == k):  # tied keys (probability ~ d^2 2^-53): redraw the chunk
                items = self._others(v, k, rng)
                items[include, k - 1] = v[include]
                out[start : start + m] = np.sort(items, axis=1)
                continue
            out[start : start + m] = np.nonzero(mask)[1].reshape(m, k)
        return Reports(items=out)

    def _statistic_shape(self):
        return (self.d,)

    def _add(self, counts, reports):
        items = reports.items
        step = max(1, (1 << 22) // self.k)
        for start in range(0, len(items), step):
            _scatter_add(counts, items[start : start + step])

    def _payload_fields(self):
        return (PayloadField("items", "int64", length=self.k, low=0, high=self.d - 1),)

    def _validate(self, reports, reasons):
        items = np.asarray(reports.items)
        if items.ndim != 2 or items.shape[1] != self.k or items.dtype.kind not in "iu":
            why = f"subset must be {self.k} integers, got shape {items.shape}"
            refuse(reasons, True, "invalid_payload", why)
            return
        it = items.astype(np.int64)
        bad = ((it < 0) | (it >= self.d)).any(axis=1)
        refuse(reasons, bad, "out_of_domain", f"subset item outside [0, {self.d})")
        if self.k > 1:
            dup = (np.diff(np.sort(it, axis=1), axis=1) == 0).any(axis=1)
            refuse(reasons, dup, "invalid_payload", "duplicate items")
            unsorted = (np.diff(it, axis=1) < 0).any(axis=1)
            refuse(reasons, unsorted, "invalid_payload", "items not sorted ascending")

    def _set_numerator(self, mask, f):
        """Given ``u``, the ``k`` items are ``u`` plus ``k - 1`` uniform others (w.p. ``p``) or ``k``
        uniform others, drawn without replacement from the ``d - 1`` values other than ``u``. So ``X`` is
        a mixture of hypergeometrics: for ``u`` in the set (``a - 1`` marked others)
        ``X = 1 + HG(d-1, a-1, k-1)`` w.p. ``p`` else ``HG(d-1, a-1, k)``; for ``u`` outside (``a``
        marked) ``HG(d-1, a, k-1)`` w.p. ``p`` else ``HG(d-1, a, k)``.
        ``E_u Var(X | u) = F V_in + (1 - F) V_out`` from the first two moments."""
        a = int(mask.sum())
        F = 0.0 if f is None else float(f[mask].sum())
        N, k, p = self.d - 1, self.k, self.p

        def mixture(marked: int, plus: int) -> float:
            m1, s1 = _hypergeom_moments(N, marked, k - 1)
            m0, s0 = _hypergeom_moments(N, marked, k)
            mean = p * (plus + m1) + (1 - p) * m0
            second = p * (s1 + 2 * plus * m1 + plus) + (1 - p) * s0
            return second - mean * mean

        v_in = mixture(a - 1, 1) if a >= 1 else 0.0
        v_out = mixture(a, 0) if a <= N else 0.0
        return F * v_in + (1 - F) * v_out


# ------------------------------------------------------------------------------------------------
# Registry and adaptive choice
# ------------------------------------------------------------------------------------------------
MECHANISMS: dict[str, type[FrequencyOracle]] = {
    "grr": GRR,
    "olh": OLH,
    "blh": BLH,
    "oue": OUE,
    "sue": SUE,
    "hr": HadamardResponse,
    "ss": SubsetSelection,
}

#: relative variance margin within which ``auto`` prefers the cheaper candidate
AUTO_VARIANCE_TOLERANCE = 0.02

#: The mechanisms ``auto`` chooses among, frozen per task schema version (``schema_version`` of the task,
#: ``ldp.task.SUPPORTED_SCHEMA_VERSIONS``). A mechanism added to :data:`MECHANISMS` joins ``auto`` only in
#: a new schema version, so an existing task never resolves to another oracle than it did when it was
#: made: its clients and its aggregator encode and decode alike whatever their release.
AUTO_CANDIDATES: dict[int, tuple[str, ...]] = {
    2: ("grr", "olh", "blh", "oue", "sue", "hr", "ss"),
    # version 3 changed the numeric and msw wires (integer grid messages), not the frequency oracles
    3: ("grr", "olh", "blh", "oue", "sue", "hr", "ss"),
}
#: The schema version whose candidates ``auto`` uses when none is named (the current one).
AUTO_SCHEMA_VERSION = 2


def auto_candidates(schema_version: int = AUTO_SCHEMA_VERSION) -> tuple[str, ...]:
    """The frozen ``auto`` candidates of a schema version (:data:`AUTO_CANDIDATES`).

    Raises:
        ValueError: the version has no candidate list, or a candidate is missing from :data:`MECHANISMS`
            (a removed mechanism would silently change what old tasks resolve to).
    """
    if schema_version not in AUTO_CANDIDATES:
        raise ValueError(
            f"'auto' has no candidate list for schema version {schema_version!r} "
            f"(known: {sorted(AUTO_CANDIDATES)})"
        )
    names = AUTO_CANDIDATES[schema_version]
    missing = [n for n in names if n not in MECHANISMS]
    if missing:
        raise ValueError(
            f"'auto' candidates {missing} of schema version {schema_version} are not in MECHANISMS"
        )
    return names


def choose_oracle(
    epsilon: float, domain_size: int, *, schema_version: int = AUTO_SCHEMA_VERSION
) -> tuple[FrequencyOracle, list[dict]]:
    """Picks an oracle for ``(epsilon, d)`` among the frozen candidates of ``schema_version``
    (:func:`auto_candidates`; mechanisms registered later are never considered).

    Rule: every candidate is built with its defaults; one that cannot be built (epsilon outside its exact
    range, accumulator above :data:`MAX_ACCUMULATOR_CELLS`) is skipped and its row records why. Among the
    built ones, those whose closed-form variance (Eq. 6) is within :data:`AUTO_VARIANCE_TOLERANCE` (2%) of
    the best are eligible, and the cheapest eligible one wins, comparing in order: report size (bits on the
    wire, paid by every client), accumulator cells each report touches (the aggregator's per-report cost),
    accumulator bytes (memory per key and window, shuffled at every merge), finalize operations, then
    variance. E.g. at eps = 1, d = 1024 OLH's 66-bit report beats OUE's 1024 bits at a 0.3% variance cost.
    All candidates are O(1) to build at any accepted epsilon.

    Returns:
        ``(oracle, table)`` where ``table`` lists every candidate's ``mechanism``, ``variance_factor``
        (``n * Var``; ``inf`` when skipped), ``report_bits``, ``accumulator_bytes``,
        ``add_cells_per_report``, ``finalize_ops`` and ``status`` (``"chosen"``, ``"eligible"``,
        ``"higher variance"`` or ``"skipped: <reason>"``), best variance first, skipped last.

    Raises:
        ValueError: no mechanism can be built (the message lists each reason).
    """
    eps, d = _check_epsilon(epsilon), _check_domain(domain_size)
    rows: list[dict] = []
    for name in auto_candidates(schema_version):
        cls = MECHANISMS[name]
        try:
            o = cls(eps, d)
        except ValueError as exc:
            rows.append({"mechanism": name, "variance_factor": math.inf, "report_bits": None,
                         "accumulator_bytes": None, "add_cells_per_report": None, "finalize_ops": None,
                         "status": f"skipped: {exc}", "_o": None})
            continue
        rows.append({"mechanism": name, "variance_factor": float(o.variance(1)), "report_bits": o.report_bits,
                     "accumulator_bytes": o.accumulator_bytes, "add_cells_per_report": o.add_cells_per_report,
                     "finalize_ops": o.finalize_ops, "status": "", "_o": o})
    built = [r for r in rows if r["_o"] is not None]
    if not built:
        raise ValueError(f"no frequency oracle can be built at epsilon = {eps:g}, d = {d}: "
                         + "; ".join(f"{r['mechanism']}: {r['status']}" for r in rows))
    best = min(r["variance_factor"] for r in built)
    for r in built:
        eligible = r["variance_factor"] <= best * (1 + AUTO_VARIANCE_TOLERANCE)
        r["status"] = "eligible" if eligible else "higher variance"
    pick = min(
        (r for r in built if r["status"] == "eligible"),
        key=lambda r: (r["report_bits"], r["add_cells_per_report"], r["accumulator_bytes"], r["finalize_ops"],
                       r["variance_factor"]),
    )
    pick["status"] = "chosen"
    rows.sort(key=lambda r: (r["_o"] is None, r["variance_factor"]))
    table = [{k: v for k, v in r.items() if k != "_o"} for r in rows]
    return pick["_o"], table


def make_oracle(name: str, epsilon: float, domain_size: int, **params: Any) -> FrequencyOracle:
    """Builds an oracle by name: ``grr olh blh oue sue hr ss`` or ``auto`` (see :func:`choose_oracle`; the
    candidates of :data:`AUTO_SCHEMA_VERSION`).

    For ``auto`` the returned oracle has an attribute ``choice`` holding the candidate table.

    Raises:
        ValueError: unknown name, bad epsilon or domain, or unknown parameters.
    """
    key = str(name).lower()
    if key == "auto":
        if params:
            raise ValueError(f"'auto' takes no mechanism parameters, got {sorted(params)}")
        oracle, table = choose_oracle(epsilon, domain_size)
        oracle.choice = table
        return oracle
    if key not in MECHANISMS:
        raise ValueError(f"unknown mechanism {name!r}; choose one of {sorted(MECHANISMS) + ['auto']}")
    try:
        return MECHANISMS[key](epsilon, domain_size, **params)
    except TypeError as exc:
        raise ValueError(f"bad parameters for {key}: {exc}") from None
