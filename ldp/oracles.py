"""Frequency oracles: client encoders, mergeable accumulators and unbiased estimators.

Every oracle here is a "support set" protocol (Wang et al., NDSS 2020, Sec. III): a report ``Y``
supports the user's true value with probability ``p`` and any other value with probability ``q < p``.
With ``c_v`` the number of reports supporting ``v`` among ``n``, the estimate (Eq. 3)

    f_v = (c_v / n - q) / (p - q)

is unbiased, with variance (Eq. 4)

    sigma_v^2 = (q (1 - q) + f_v (p - q)(1 - p - q)) / (n (p - q)^2),

approximately ``q (1 - q) / (n (p - q)^2)`` (Eq. 6) when the ``f_v`` term is dropped.

Each oracle has three parts (see ``DESIGN.md``):

1. ``encode`` (client): values -> :class:`~ldp.reports.Reports`, vectorized over many users. The
   randomness comes from a caller-supplied ``numpy.random.Generator``; the default is a generator seeded
   from the operating system's entropy source, which is what a real device must use.
2. ``create_accumulator / add / merge`` (server): a :class:`SupportAccumulator` whose size depends on
   the domain only, never on the number of reports; merging is exact integer addition, so merged
   shards equal one pass.
3. ``estimate`` (server): accumulator -> :class:`FrequencyEstimate` (unbiased frequencies, closed-form
   variances, confidence intervals).

Every encoder satisfies epsilon-LDP: for any two inputs and any output the probability ratio is at
most ``e**epsilon``; the docstring of each class states why.
"""

from __future__ import annotations

import abc
import dataclasses
import math
from collections.abc import Sequence
from statistics import NormalDist
from typing import Any

import numpy as np

from ldp.hashing import LinearHash, prime_power, random_seeds
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
    "make_oracle",
    "choose_oracle",
    "default_olh_buckets",
    "Reports",
]

_CHUNK = 1 << 16  # reports per chunk in the memory-hungry paths
MAX_OLH_TABLE_CELLS = 1 << 26  # 512 MiB of int64: refuse OLH accumulators larger than this


# ------------------------------------------------------------------------------------------------
# Validation helpers
# ------------------------------------------------------------------------------------------------
def _check_epsilon(epsilon: float) -> float:
    try:
        eps = float(epsilon)
    except (TypeError, ValueError):
        raise ValueError(f"epsilon must be a positive number, got {epsilon!r}") from None
    if not math.isfinite(eps) or eps <= 0:
        raise ValueError(f"epsilon must be a positive finite number, got {epsilon!r}")
    if eps > 50:
        raise ValueError(f"epsilon = {eps} is too large to be meaningful (e**epsilon overflows)")
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
    """Common machinery of the support-set oracles.

    Subclasses set ``name``, ``p``, ``q``, ``report_bits`` and implement ``_encode``, ``_add``,
    ``_statistic_shape``, ``_validate`` and (optionally) ``support_counts``.
    """

    name: str = ""
    p: float
    q: float

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

    # -- client ------------------------------------------------------------------------------------
    def encode(self, values: Any, *, rng: np.random.Generator | int | None = None) -> Reports:
        """Perturbs a batch of values (client side).

        Args:
            values: integers in ``[0, d)``, shape ``(n,)``.
            rng: a ``numpy.random.Generator`` (or seed). ``None`` seeds one from OS entropy, which is
                what a real client must do; simulations pass an explicit seed.

        Returns:
            One report per value.
        """
        vals = check_values(values, self.d)
        return self._encode(vals, np.random.default_rng(rng))

    def encode_one(self, value: int, *, rng: np.random.Generator | int | None = None) -> Reports:
        """Perturbs one user's value (the on-device call); a batch of one report."""
        return self.encode(np.asarray([value]), rng=rng)

    @abc.abstractmethod
    def _encode(self, values: np.ndarray, rng: np.random.Generator) -> Reports: ...

    # -- server: accumulate -----------------------------------------------------------------------
    @abc.abstractmethod
    def _statistic_shape(self) -> tuple[int, ...]: ...

    def create_accumulator(self) -> SupportAccumulator:
        """An empty accumulator."""
        return SupportAccumulator(np.zeros(self._statistic_shape(), dtype=np.int64), 0)

    def add(self, acc: SupportAccumulator, reports: Reports) -> SupportAccumulator:
        """Adds a batch of (already validated) reports to ``acc`` in place and returns it."""
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
            a short reason string for each rejected one (None where accepted).
        """
        n = len(reports)
        reasons = np.full(n, None, dtype=object)
        missing = [f for f in self.report_fields if getattr(reports, f) is None]
        if missing:
            reasons[:] = f"missing field(s) {', '.join(missing)} for {self.name}"
            return np.zeros(n, dtype=bool), reasons
        self._validate(reports, reasons)
        return np.equal(reasons, None), reasons

    report_fields: tuple[str, ...] = ()

    @abc.abstractmethod
    def _validate(self, reports: Reports, reasons: np.ndarray) -> None: ...

    # -- server: estimate -----------------------------------------------------------------------------
    def variance(self, n: int, f: Any = None) -> Any:
        """Closed-form variance of one estimate (Eq. 4; Eq. 6 when ``f`` is None)."""
        p, q = self.p, self.q
        if n <= 0:
            raise ValueError(f"n must be positive, got {n}")
        base = q * (1 - q)
        if f is None:
            return base / (n * (p - q) ** 2)
        f = np.asarray(f, dtype=np.float64)
        return (base + f * (p - q) * (1 - p - q)) / (n * (p - q) ** 2)

    def estimate(self, acc: SupportAccumulator) -> FrequencyEstimate:
        """Unbiased frequencies and their variances from an accumulator."""
        c = self.support_counts(acc)
        n = acc.n
        if n == 0:
            nan = np.full(self.d, np.nan)
            inf = np.full(self.d, np.inf)
            return FrequencyEstimate(self.name, 0, nan, inf, inf.copy(), c)
        f = (c / n - self.q) / (self.p - self.q)
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
            reasons[bad & np.equal(reasons, None)] = f"{name} is not an integer"
            arr = np.where(bad, lo, arr)
        else:
            reasons[np.equal(reasons, None)] = f"{name} has non-integer type {arr.dtype}"
            return np.full(len(arr), lo, dtype=np.int64)
    a = arr.astype(np.int64)
    bad = (a < lo) | (a >= hi)
    reasons[bad & np.equal(reasons, None)] = f"{name} outside [{lo}, {hi})"
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


class GRR(FrequencyOracle):
    """Generalized randomized response (direct encoding).

    ``p = e^eps / (e^eps + d - 1)``, ``q = 1 / (e^eps + d - 1)``. Privacy: the report equals any given
    output with probability ``p`` or ``q`` depending on the input, and ``p / q = e^eps``.
    Report: one integer, ``ceil(log2 d)`` bits. Accumulator: ``d`` counts.
    """

    name = "grr"
    report_fields = ("values",)

    def __init__(self, epsilon: float, domain_size: int) -> None:
        super().__init__(epsilon, domain_size)
        e = math.exp(self.epsilon)
        self.p = e / (e + self.d - 1)
        self.q = 1.0 / (e + self.d - 1)

    @property
    def report_bits(self) -> int:
        return max(1, math.ceil(math.log2(self.d)))

    def _encode(self, values, rng):
        return Reports(values=_grr(values, self.d, self.p, rng))

    def _statistic_shape(self):
        return (self.d,)

    def _add(self, counts, reports):
        counts += np.bincount(reports.values, minlength=self.d)

    def _validate(self, reports, reasons):
        _check_int_field(reports.values, 0, self.d, "value", reasons)


# ------------------------------------------------------------------------------------------------
# OLH / BLH
# ------------------------------------------------------------------------------------------------
def default_olh_buckets(epsilon: float) -> int:
    """The default OLH range ``g``: ``round(e^eps + 1)`` (Wang et al. 2017), moved to the nearest prime
    power when it is not one (ties go to the larger), because the linear hash family needs a field.

    The variance is flat around the optimum, so the move costs well under 1% of variance.
    """
    target = math.exp(_check_epsilon(epsilon)) + 1
    g0 = max(2, round(target))
    if prime_power(g0):
        return g0
    for delta in range(1, g0):
        cands = [g for g in (g0 + delta, g0 - delta) if g >= 2 and prime_power(g)]
        if cands:
            return min(cands, key=lambda g: (abs(g - target), -g))
    return 2


class OLH(FrequencyOracle):
    """Optimized local hashing (Wang et al., USENIX Security 2017; NDSS 2020 Sec. III-A).

    A client draws a 64-bit seed selecting ``H`` from :class:`ldp.hashing.LinearHash` (a universal
    family over GF(p) onto ``g = p^k`` buckets), and reports ``(seed, GRR_g(H(v)))``.
    ``p = e^eps / (e^eps + g - 1)`` and ``q = 1/g`` exactly (the family is universal).
    Privacy: the seed is independent of ``v``; the bucket is GRR on ``[g]``, which is eps-LDP.

    Accumulation in O(1) or O(g) per report, never O(d); support counts of all values come back at
    ``estimate`` from one inverse FFT of size ``p^m`` (a Walsh-Hadamard transform when ``p = 2``).
    The indicator of the support set ``{x : M x + b = y}`` has the Fourier expansion
    ``p^-k sum_{s in GF(p)^k} w^{<s, b - y>} w^{<M^T s, x>}`` (``w = e^{2 pi i / p}``).

    * ``g`` prime (``k = 1``, ``M`` is one row ``a``): the accumulator is the integer histogram
      ``H[a, t]`` of reports by hash row ``a`` in ``GF(p)^m`` and target ``t = y - b``; a report is one
      increment. At ``estimate``, an FFT over ``t`` and the permutations ``a -> s a`` assemble the
      Fourier table.
    * ``g = p^k`` with ``k > 1`` (e.g. 4, 8): the accumulator keeps, for every residue ``r`` and
      frequency ``u`` in ``GF(p)^m``, ``T[r, u] = #{(report, s) : M^T s = u, <s, b - y> = r}``; a report
      adds one to ``g`` cells.

    Either way the statistic is ``p * p^m`` int64 (``2 * 1024`` for ``d = 1024`` at ``g = 4``; it grows
    with ``p``, so for very large ``d`` and large ``epsilon`` choose a power-of-two ``g``), integers only,
    so merges are exact.

    Args:
        epsilon: privacy budget.
        domain_size: ``d``.
        g: number of hash buckets, a prime power >= 2; default :func:`default_olh_buckets`, capped at the
            largest prime power <= d (when e^eps + 1 > d, GRR is the better oracle anyway).
    """

    name = "olh"
    report_fields = ("seeds", "values")

    def __init__(self, epsilon: float, domain_size: int, g: int | None = None) -> None:
        super().__init__(epsilon, domain_size)
        if g is None:
            g = default_olh_buckets(self.epsilon)
            if g > self.d:  # e^eps + 1 > d: hashing cannot help (GRR is better); keep the table small
                g = max(q for q in range(2, self.d + 1) if prime_power(q))
        if isinstance(g, bool) or not isinstance(g, (int, np.integer)) or g < 2:
            raise ValueError(f"g must be an integer >= 2, got {g!r}")
        pk = prime_power(int(g))
        if pk is None:
            raise ValueError(
                f"g = {g} is not a prime power; the linear hash family needs one "
                f"(nearest choices: {default_olh_buckets(math.log(max(g - 1, 1.01)))})"
            )
        self.g = int(g)
        self.hash = LinearHash(self.d, pk[0], pk[1])
        cells = self.hash.p * self.hash.size
        if cells > MAX_OLH_TABLE_CELLS:
            raise ValueError(
                f"OLH with g = {g} on d = {self.d} needs a {cells:,}-cell accumulator (p * p^m with p = "
                f"{self.hash.p}); pass a power-of-two g (e.g. g={1 << max(1, round(math.log2(g)))}) "
                f"to keep it at 2 * {1 << (self.d - 1).bit_length():,} cells"
            )
        e = math.exp(self.epsilon)
        self.p = e / (e + self.g - 1)
        self.q = 1.0 / self.g
        # All s in GF(p)^k (rows) and helpers for the accumulator.
        pp, k = self.hash.p, self.hash.k
        self._s = (np.arange(self.g)[:, None] // (pp ** np.arange(k))[None, :]) % pp  # (g, k)
        self._ypow = pp ** np.arange(k, dtype=np.int64)
        self._upow = pp ** np.arange(self.hash.m, dtype=np.int64)

    def __repr__(self) -> str:
        return f"{type(self).__name__}(epsilon={self.epsilon}, domain_size={self.d}, g={self.g})"

    @property
    def report_bits(self) -> int:
        return 64 + max(1, math.ceil(math.log2(self.g)))

    def describe(self) -> dict:
        out = super().describe()
        out.update(g=self.g, hash="linear-gf", hash_prime=self.hash.p, hash_digits=self.hash.m)
        return out

    def _encode(self, values, rng):
        seeds = random_seeds(len(values), rng=rng)
        h = self.hash.hash(seeds, values)
        return Reports(seeds=seeds, values=_grr(h, self.g, self.p, rng))

    def _statistic_shape(self):
        if self.hash.k == 1:
            return (self.hash.size, self.hash.p)  # H[a, t]
        return (self.hash.p, self.hash.size)  # T[r, u]

    def _add(self, counts, reports):
        seeds = np.asarray(reports.seeds).astype(np.uint64, copy=False)
        ys = np.asarray(reports.values, dtype=np.int64)
        flat = counts.reshape(-1)
        index = self._row_index if self.hash.k == 1 else self._table_index
        for start in range(0, len(ys), _CHUNK):
            idx = index(seeds[start : start + _CHUNK], ys[start : start + _CHUNK])
            flat += np.bincount(idx.ravel(), minlength=flat.size)

    def _row_index(self, seeds: np.ndarray, ys: np.ndarray) -> np.ndarray:
        """``k = 1``: flat index ``a * p + t`` of the one histogram cell each report adds to: ``(n,)``."""
        hsh = self.hash
        rows, b = hsh.rows(seeds)
        if hsh.p == 2:
            return rows[:, 0].astype(np.int64) * 2 + (ys ^ b)
        return (rows[:, 0, :] @ self._upow) * hsh.p + (ys - b[:, 0]) % hsh.p

    def _table_index(self, seeds: np.ndarray, ys: np.ndarray) -> np.ndarray:
        """Flat indices ``r * p^m + u`` of the ``g`` table cells each report adds one to: ``(n, g)``."""
        hsh = self.hash
        size = hsh.size
        if hsh.p == 2:
            rows, b = hsh.rows(seeds)
            z = (b ^ ys).astype(np.uint64)
            n = len(ys)
            u = np.zeros((n, self.g), dtype=np.uint64)
            r = np.zeros((n, self.g), dtype=np.int64)
            for s in range(1, self.g):
                low = (s & -s).bit_length() - 1
                u[:, s] = u[:, s & (s - 1)] ^ rows[:, low]
                r[:, s] = np.bitwise_count(z & np.uint64(s)) & 1
            return r * size + u.astype(np.int64)
        M, b = hsh.rows(seeds)
        p, k, S = hsh.p, hsh.k, self._s
        ydig = (ys[:, None] // self._ypow[None, :]) % p
        z = (b - ydig) % p  # (n, k)
        # r[n, s] = <s, b - y> mod p and u[n, s] = M^T s, digit by digit: k * (m + 1) passes over (n, g)
        r = np.zeros((len(ys), self.g), dtype=np.int64)
        for l in range(k):
            r += z[:, l, None] * S[None, :, l]
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
        if hsh.p == 2:
            F = T[0] - T[1]
            c = _fwht(F)
        else:
            w = np.exp(2j * np.pi * np.arange(hsh.p) / hsh.p)
            F = (w[:, None] * T).sum(axis=0).reshape((hsh.p,) * hsh.m)
            c = np.rint(np.fft.ifftn(F).real.reshape(-1) * hsh.size).astype(np.int64)
        # c is g * (true integer count); exact for p = 2 (integer transform), rounded otherwise.
        return (c[: self.d] / self.g).astype(np.float64)

    def _validate(self, reports, reasons):
        _check_int_field(reports.values, 0, self.g, "bucket", reasons)
        seeds = np.asarray(reports.seeds)
        if seeds.dtype.kind not in "iu":
            reasons[np.equal(reasons, None)] = f"seed has non-integer type {seeds.dtype}"


class BLH(OLH):
    """Binary local hashing: OLH with ``g = 2`` (Bassily and Smith 2015; Wang et al. 2017)."""

    name = "blh"

    def __init__(self, epsilon: float, domain_size: int) -> None:
        super().__init__(epsilon, domain_size, g=2)

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
    Accumulator: ``d`` column counts.
    """

    report_fields = ("bits",)

    @property
    def report_bits(self) -> int:
        return self.d

    @property
    def nbytes(self) -> int:
        return (self.d + 7) // 8

    def _encode(self, values, rng):
        n = len(values)
        out = np.empty((n, self.nbytes), dtype=np.uint8)
        for start in range(0, n, _CHUNK // 4):
            v = values[start : start + _CHUNK // 4]
            m = len(v)
            bits = rng.random((m, self.d)) < self.q
            bits[np.arange(m), v] = rng.random(m) < self.p
            out[start : start + m] = np.packbits(bits, axis=1, bitorder="little")
        return Reports(bits=out)

    def _statistic_shape(self):
        return (self.d,)

    def _add(self, counts, reports):
        bits = reports.bits
        step = _CHUNK // 4
        for start in range(0, len(bits), step):
            unpacked = np.unpackbits(bits[start : start + step], axis=1, count=self.d, bitorder="little")
            counts += unpacked.sum(axis=0, dtype=np.int64)

    def _validate(self, reports, reasons):
        bits = np.asarray(reports.bits)
        if bits.ndim != 2 or bits.shape[1] != self.nbytes or bits.dtype != np.uint8:
            reasons[np.equal(reasons, None)] = (
                f"bit vector must be {self.nbytes} bytes (d = {self.d}), got shape {bits.shape}"
            )
            return
        pad = self.nbytes * 8 - self.d
        if pad:
            stray = (bits[:, -1] >> np.uint8(8 - pad)) != 0
            reasons[stray & np.equal(reasons, None)] = "padding bits beyond the domain are set"


class OUE(_UnaryEncoding):
    """Optimized unary encoding (Wang et al. 2017): ``p = 1/2``, ``q = 1/(e^eps + 1)``."""

    name = "oue"

    def __init__(self, epsilon: float, domain_size: int) -> None:
        super().__init__(epsilon, domain_size)
        self.p = 0.5
        self.q = 1.0 / (math.exp(self.epsilon) + 1)


class SUE(_UnaryEncoding):
    """Symmetric unary encoding, i.e. basic one-time RAPPOR (Erlingsson et al. 2014):
    ``p = e^(eps/2) / (e^(eps/2) + 1)``, ``q = 1 / (e^(eps/2) + 1)``."""

    name = "sue"

    def __init__(self, epsilon: float, domain_size: int) -> None:
        super().__init__(epsilon, domain_size)
        e = math.exp(self.epsilon / 2)
        self.p = e / (e + 1)
        self.q = 1.0 / (e + 1)


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
    report_fields = ("values",)

    def __init__(self, epsilon: float, domain_size: int) -> None:
        super().__init__(epsilon, domain_size)
        self.K = 1 << self.d.bit_length()  # smallest power of two > d
        e = math.exp(self.epsilon)
        self.p = e / (e + 1)
        self.q = 0.5

    @property
    def report_bits(self) -> int:
        return self.K.bit_length() - 1

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
        counts += np.bincount(reports.values, minlength=self.K)

    def support_counts(self, acc):
        t = _fwht(acc.counts)
        return ((acc.n + t[1 : self.d + 1]) / 2).astype(np.float64)

    def _validate(self, reports, reasons):
        _check_int_field(reports.values, 0, self.K, "value", reasons)


# ------------------------------------------------------------------------------------------------
# Subset selection
# ------------------------------------------------------------------------------------------------
def _ss_variance_factor(epsilon: float, d: int, k: int) -> float:
    e = math.exp(epsilon)
    z = k * e + d - k
    p = k * e / z
    q = (k * e * (k - 1) / (d - 1) + (d - k) * k / (d - 1)) / z
    return q * (1 - q) / (p - q) ** 2


class SubsetSelection(FrequencyOracle):
    """k-subset selection (Wang et al. 2016; Ye and Barg 2018).

    The client reports a ``k``-subset of ``[d]`` that contains its value w.p.
    ``p = k e^eps / (k e^eps + d - k)``; given the inclusion decision the subset is uniform.
    Another value is included w.p. ``q = (k e^eps (k-1)/(d-1) + (d-k) k/(d-1)) / (k e^eps + d - k)``.
    Privacy: a subset containing ``v`` has probability ``k e^eps / (Z C(d-1, k-1))``, one without it
    ``k / (Z C(d-1, k-1))``; the ratio is ``e^eps``.
    ``k`` defaults to whichever of ``floor`` / ``ceil`` of ``d / (e^eps + 1)`` gives the lower variance.
    Report: ``k ceil(log2 d)`` bits. Accumulator: ``d`` counts.
    """

    name = "ss"
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
        z = self.k * e + self.d - self.k
        self.p = self.k * e / z
        self.q = (self.k * e * (self.k - 1) / (self.d - 1) + (self.d - self.k) * self.k / (self.d - 1)) / z
        self._dtype = np.uint16 if self.d <= 1 << 16 else np.uint32

    def __repr__(self) -> str:
        return f"SubsetSelection(epsilon={self.epsilon}, domain_size={self.d}, k={self.k})"

    @property
    def report_bits(self) -> int:
        return self.k * max(1, math.ceil(math.log2(self.d)))

    def describe(self) -> dict:
        out = super().describe()
        out["k"] = self.k
        return out

    def _encode(self, values, rng):
        n, k, d = len(values), self.k, self.d
        out = np.empty((n, k), dtype=self._dtype)
        step = max(1, (1 << 24) // d)
        for start in range(0, n, step):
            v = values[start : start + step]
            m = len(v)
            keys = rng.random((m, d))
            keys[np.arange(m), v] = 2.0  # never drawn among the "others"
            others = np.argpartition(keys, k - 1, axis=1)[:, :k]
            include = rng.random(m) < self.p
            others[include, k - 1] = v[include]
            out[start : start + m] = others
        return Reports(items=out)

    def _statistic_shape(self):
        return (self.d,)

    def _add(self, counts, reports):
        items = reports.items
        step = max(1, (1 << 22) // self.k)
        for start in range(0, len(items), step):
            counts += np.bincount(items[start : start + step].ravel(), minlength=self.d)

    def _validate(self, reports, reasons):
        items = np.asarray(reports.items)
        if items.ndim != 2 or items.shape[1] != self.k or items.dtype.kind not in "iu":
            reasons[np.equal(reasons, None)] = f"subset must be {self.k} integers, got shape {items.shape}"
            return
        bad = ((items < 0) | (items >= self.d)).any(axis=1)
        reasons[bad & np.equal(reasons, None)] = f"subset item outside [0, {self.d})"
        srt = np.sort(items, axis=1)
        dup = (srt[:, 1:] == srt[:, :-1]).any(axis=1)
        reasons[dup & np.equal(reasons, None)] = "subset has repeated items"


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

#: relative variance margin within which ``auto`` prefers the smaller report
AUTO_VARIANCE_TOLERANCE = 0.02


def choose_oracle(epsilon: float, domain_size: int) -> tuple[FrequencyOracle, list[dict]]:
    """Picks the oracle with the lowest closed-form variance (Eq. 6) for ``(epsilon, d)``.

    Among candidates whose variance is within :data:`AUTO_VARIANCE_TOLERANCE` (2%) of the best, the one
    with the smallest report wins (OLH's 66-bit report beats OUE's d bits at a 0.5% variance cost).

    Returns:
        ``(oracle, table)`` where ``table`` lists every candidate's ``mechanism``, ``variance_factor``
        (``n * Var``) and ``report_bits``, best first.
    """
    eps, d = _check_epsilon(epsilon), _check_domain(domain_size)
    rows = []
    for name, cls in MECHANISMS.items():
        o = cls(eps, d)
        rows.append(
            {"mechanism": name, "variance_factor": o.variance(1), "report_bits": o.report_bits, "_o": o}
        )
    best = min(r["variance_factor"] for r in rows)
    eligible = [r for r in rows if r["variance_factor"] <= best * (1 + AUTO_VARIANCE_TOLERANCE)]
    pick = min(eligible, key=lambda r: (r["report_bits"], r["variance_factor"]))
    rows.sort(key=lambda r: r["variance_factor"])
    oracle = pick["_o"]
    table = [{k: v for k, v in r.items() if k != "_o"} for r in rows]
    return oracle, table


def make_oracle(name: str, epsilon: float, domain_size: int, **params: Any) -> FrequencyOracle:
    """Builds an oracle by name: ``grr olh blh oue sue hr ss`` or ``auto`` (see :func:`choose_oracle`).

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
