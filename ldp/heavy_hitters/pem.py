"""PEM, the prefix extending method (Wang, Li and Jha, TDSC 2019), over an open domain of byte strings.

**Clients.** Each user is assigned a level ``j`` at random (uniformly, or by ``level_weights``) and
reports the ``l_j``-bit prefix of its value (bit layout: :mod:`ldp.heavy_hitters.strings`) through the
level's frequency oracle:

* OLH: a public 64-bit seed ``s`` (the OS CSPRNG on a client, a seeded generator in simulation) selects
  the hash ``h_s`` of :mod:`ldp.heavy_hitters.mersenne` into ``[g]``, ``g = round(e**eps) + 1``; the client
  sends ``y = h_s(x)`` with probability ``p = e**eps / (e**eps + g - 1)``, else one of the other ``g - 1``
  buckets uniformly.
* GRR (only a first level whose ``2**l_1 < 3 e**eps + 2`` prefixes make it the better oracle): ``y = x``
  with probability ``e**eps / (e**eps + d - 1)``, else another of the ``d = 2**l_1`` prefixes uniformly.

**Guarantee: eps-LDP per report.** The report is ``(j, s, y)``. ``j`` and ``s`` are drawn independently
of the value; given them, ``y`` is randomized response over ``[g]`` (or ``[d]``) applied to a bucket
that is a function of the value, so for any two values ``v, v'`` and any report,
``P[(j, s, y) | v] / P[(j, s, y) | v'] <= p / ((1 - p) / (g - 1)) = e**eps``
(:meth:`PEM.output_distribution` gives the exact distribution; the tests check the ratio).

**Aggregator.** Level by level: the first level's candidates are all ``2**l_1`` prefixes; each next
level's are the ``candidates`` best prefixes of the previous level extended by every value of the next
``l_j - l_{j-1}`` bits. The support counts of all candidates against all reports of a level are one
join per block of reports (:func:`support_product`, cost ``O(n_j * C_j / g)``). With ``verify`` (the
default) one more group of users reports the full value and only re-estimates the survivors of the last
level: fresh users, so the published estimates carry no selection from the search.

**Estimates.** At a level with ``n_j`` of the ``n`` reports, support count ``S`` and oracle
probabilities ``p, q`` (OLH: ``q = 1/g``; GRR: ``q = 1 / (e**eps + d - 1)``), the frequency among all
``n`` users is estimated by ``f = (S / n_j - q) / (p - q)``, unbiased because the level's users are a
uniform random subset of the ``n``. Its variance is the oracle's (Wang, Blocki, Li and Jha, USENIX
Security 2017, Eq. 4 with the ``f`` term, ``[f p (1 - p) + (1 - f) q (1 - q)] / (n_j (p - q)**2)``) plus
the sampling of the subset (hypergeometric, ``f (1 - f) (n - n_j) / ((n - 1) n_j)``), evaluated at the
estimate clipped to ``[0, 1]``; intervals are ``f +- 1.96 std``. Reported values pass a one-sided test
against frequency 0 at level ``alpha / m`` (Bonferroni over the ``m`` values tested: the chance that
any reported value is held by nobody is at most ``alpha``), then the ``top_k`` largest are kept.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Iterable, Sequence
from statistics import NormalDist

import numpy as np
import scipy.sparse as sp

from ldp.hashing import client_streams, public_seeds
from ldp.heavy_hitters.mersenne import level_keys, own_hash
from ldp.heavy_hitters.sketch import (
    SketchAccumulator,
    SketchSpec,
    full_hash,
    full_matrices,
    gf2_hash,
    walsh_add,
)
from ldp.heavy_hitters.strings import StringBatch, bit_field, encode_strings, half_words, total_bits
from ldp.payload import WireSpec
from ldp.selection import RULES

__all__ = [
    "Level",
    "PEM",
    "PEMAccumulator",
    "HHReports",
    "HeavyHitter",
    "HeavyHitters",
    "LevelStats",
    "support_product",
    "plan_levels",
]

Z95 = NormalDist().inv_cdf(0.975)
MAX_CANDIDATES = 1 << 17
DIRECT_BITS = 22  # a first sketch level of at most this many bits has one bucket per prefix
SKETCH_BITS = 20  # buckets per row of a hashed sketch level: 2**20
SKETCH_ROWS = 4
SKETCH_CANDIDATES = 1 << 24  # candidates scored per sketch level
SEARCHES = ("auto", "sketch", "olh")
SKETCH_KEEP = 2048  # default candidates kept per sketch level (measured best of 512 to 4096)
VERIFY_WEIGHT = 0.6  # the verification group's share relative to one search level's (default weights)
BLOCK_PAIRS = 1 << 22


@dataclasses.dataclass(frozen=True)
class Level:
    """One level: prefixes of ``bits`` bits, hashed as a parent part of ``parent_bits`` bits and an
    extension of ``bits - parent_bits`` bits; ``g`` buckets (OLH) or prefixes (GRR)."""

    index: int
    bits: int
    parent_bits: int
    oracle: str
    g: int
    epsilon: float
    verify: bool = False
    sketch: SketchSpec | None = None

    @property
    def extension_bits(self) -> int:
        return self.bits - self.parent_bits

    @property
    def p(self) -> float:
        e = math.exp(self.epsilon)
        return e / (e + self.g - 1)

    @property
    def q(self) -> float:
        """Support probability of a user not holding the candidate."""
        return 1.0 / (math.exp(self.epsilon) + self.g - 1) if self.oracle == "grr" else 1.0 / self.g


@dataclasses.dataclass(frozen=True)
class HHReports:
    """A batch of reports: ``level`` (``uint8``), ``seed`` (``uint64``), ``y`` (``uint64``)."""

    level: np.ndarray
    seed: np.ndarray
    y: np.ndarray

    def __len__(self) -> int:
        return int(self.level.shape[0])


@dataclasses.dataclass(frozen=True)
class HeavyHitter:
    value: bytes
    estimate: float
    std: float
    ci_low: float
    ci_high: float


@dataclasses.dataclass(frozen=True)
class LevelStats:
    level: int
    bits: int
    oracle: str
    g: int
    reports: int
    candidates: int
    kept: int
    verify: bool


@dataclasses.dataclass(frozen=True)
class HeavyHitters:
    """The result: ``hitters`` in descending order of estimate (frequencies among all ``n`` users)."""

    n: int
    hitters: tuple[HeavyHitter, ...]
    levels: tuple[LevelStats, ...]
    tested: int
    threshold_z: float | None


class PEMAccumulator:
    """Per level: a sketch level's :class:`SketchAccumulator` (fixed size, merged by addition), or the
    reports of an OLH or GRR level (seeds and outputs, 16 bytes per report, merged by concatenation)."""

    def __init__(self, levels: Sequence[Level]) -> None:
        self.seeds: list[list[np.ndarray]] = [[] for _ in levels]
        self.ys: list[list[np.ndarray]] = [[] for _ in levels]
        self.sketches: dict[int, SketchAccumulator] = {
            lv.index: SketchAccumulator(lv.sketch) for lv in levels if lv.sketch is not None
        }

    def counts(self) -> list[int]:
        return [
            self.sketches[j].n if j in self.sketches else sum(len(a) for a in s)
            for j, s in enumerate(self.seeds)
        ]

    @property
    def n(self) -> int:
        return sum(self.counts())

    def level(self, j: int) -> tuple[np.ndarray, np.ndarray]:
        if not self.seeds[j]:
            return np.zeros(0, np.uint64), np.zeros(0, np.uint64)
        return np.concatenate(self.seeds[j]), np.concatenate(self.ys[j])


def _olh_g(epsilon: float) -> int:
    return int(round(math.exp(epsilon))) + 1


def _sketch_t(epsilon: float) -> int:
    """``t`` with ``g = 2**t`` nearest OLH's optimum ``e**eps + 1`` (in log scale), within ``[1, 10]``."""
    return int(min(10, max(1, round(math.log2(math.exp(epsilon) + 1)))))


def plan_sketch_levels(
    epsilon: float,
    max_length: int,
    *,
    candidates: int,
    first_bits: int | None = None,
    step_bits: int | None = None,
    sketch_seed: int = 0,
) -> tuple[Level, ...]:
    """Sketch levels over the ``8 B`` byte bits, the length trailer joined to the last one: first
    ``first_bits`` (default ``min(8 B, DIRECT_BITS)``, a direct level), then steps of ``step_bits``
    (default: the most with ``candidates * 2**step <= SKETCH_CANDIDATES``), hashed into ``k = SKETCH_ROWS``
    rows of ``2**SKETCH_BITS`` buckets; then the verification level (exact OLH, ``verify=True``)."""
    width, byte_bits = total_bits(max_length), 8 * max_length
    budget = int(math.log2(SKETCH_CANDIDATES)) - int(math.ceil(math.log2(candidates)))
    first = min(byte_bits, DIRECT_BITS) if first_bits is None else int(first_bits)
    step = max(1, min(32, budget)) if step_bits is None else int(step_bits)
    if not 1 <= first <= min(byte_bits, DIRECT_BITS):
        raise ValueError(f"first_bits must be in [1, {min(byte_bits, DIRECT_BITS)}], got {first}")
    if not 1 <= step <= 32:
        raise ValueError(f"step_bits must be in [1, 32], got {step}")
    bits = [first]
    while bits[-1] < byte_bits:
        bits.append(min(byte_bits, bits[-1] + step))
    bits[-1] = width
    t = _sketch_t(epsilon)
    levels = []
    for j, b in enumerate(bits):
        direct = b <= DIRECT_BITS
        spec = SketchSpec(
            bits=b,
            d=b if direct else SKETCH_BITS,
            rows=1 if direct else SKETCH_ROWS,
            t=t,
            epsilon=epsilon,
            key_seed=(int(sketch_seed) * 1_000_003 + j) % (1 << 64),
        )
        levels.append(Level(j, b, 0 if j == 0 else bits[j - 1], "sketch", 1 << t, epsilon, sketch=spec))
    last = levels[-1]
    verify = Level(len(levels), width, last.parent_bits, "gf2", 1 << t, epsilon, verify=True)
    return (*levels, verify)


def plan_levels(
    epsilon: float,
    max_length: int,
    *,
    candidates: int,
    first_bits: int | None = None,
    step_bits: int | None = None,
    verify: bool = True,
) -> tuple[Level, ...]:
    """The levels of the ``olh`` search: first ``first_bits`` (default ``min(L, 17)``) bits, then steps of
    ``step_bits``
    (default: the most bits with ``candidates * 2**step <= 2**17``, at most 32) up to all ``L`` bits."""
    width = total_bits(max_length)
    budget = int(math.log2(MAX_CANDIDATES))
    first = min(width, budget) if first_bits is None else int(first_bits)
    step = max(1, min(32, budget - int(math.ceil(math.log2(candidates))))) if step_bits is None else step_bits
    if not 1 <= first <= min(width, 32):
        raise ValueError(f"first_bits must be in [1, {min(width, 32)}], got {first}")
    if not 1 <= step <= 32:
        raise ValueError(f"step_bits must be in [1, 32], got {step}")
    bits = [first]
    while bits[-1] < width:
        bits.append(min(width, bits[-1] + step))
    e = math.exp(epsilon)
    first_grr = 2**first < 3 * e + 2
    levels = []
    for j, b in enumerate(bits):
        parent = b // 2 if j == 0 else bits[j - 1]
        if j == 0 and first_grr:
            levels.append(Level(0, b, parent, "grr", 2**b, epsilon))
        else:
            levels.append(Level(j, b, parent, "olh", _olh_g(epsilon), epsilon))
    if verify:
        last = levels[-1]
        g = _olh_g(epsilon)
        levels.append(dataclasses.replace(last, index=len(levels), oracle="olh", g=g, verify=True))
    return tuple(levels)


def support_product(hp: np.ndarray, he: np.ndarray, y: np.ndarray, g: int) -> np.ndarray:
    """Support counts of every (parent, extension) pair: ``#{r : (hp[r, P] + he[r, e]) mod g == y[r]}``.

    ``hp`` ``(n, m)`` and ``he`` ``(n, E)`` hold the two parts of each report's hash. The pair supports
    report ``r`` when ``he[r, e] == (y[r] - hp[r, P]) mod g``: a join on the key ``(r, that value)``,
    computed as a sparse product ``A @ B`` (``A[P, (r, k)] = 1`` for ``k = y - hp``, ``B[(r, k), e] = 1`` for
    ``k = he``), whose cost is the number of matching triples, about ``n m E / g``.
    """
    n, m = hp.shape
    e = he.shape[1]
    g64 = np.uint64(g)
    key_base = np.arange(n, dtype=np.int64)[:, None] * g
    want = ((y[:, None] + g64 - hp) % g64).astype(np.int64) + key_base
    have = he.astype(np.int64) + key_base
    a = sp.csr_matrix(
        (np.ones(n * m, np.float64), want.T.ravel(), np.arange(0, n * m + 1, n, dtype=np.int64)),
        shape=(m, n * g),
    )
    b = sp.csc_matrix(
        (np.ones(n * e, np.float64), have.T.ravel(), np.arange(0, n * e + 1, n, dtype=np.int64)),
        shape=(n * g, e),
    )
    return np.asarray((a @ b.tocsr()).toarray(), dtype=np.int64)


class PEM:
    """PEM over byte strings of at most ``max_length`` bytes (see the module docstring).

    A report travels as the wire's ``group`` (its level), ``seed`` and ``value`` (``y``); :attr:`wire`
    declares what a client encodes and its byte procedure (``docs/wire_format.md``, section 10: the
    sketch search's levels; the ``olh`` search has no byte procedure).

    Args:
        epsilon: the eps of every report (eps-LDP).
        max_length: ``B``.
        top_k: the most values reported (default 32).
        candidates: prefixes kept per level (default: ``1 / f_min`` for the smallest frequency a level of
            ``expected_n`` reports detects at three standard deviations, within ``[2 top_k, 4096]``, or
            ``8 top_k`` without ``expected_n``; no more than ``1 / f`` prefixes can have frequency ``f``).
        first_bits, step_bits: the level layout (:func:`plan_levels`).
        verify: add a last group that re-estimates the survivors (default True).
        level_weights: the share of users per level (default equal).
        alpha: family-wise rate of reporting a value nobody holds (``None``: no test, the ``top_k``).
        expected_n: the expected number of reports, for ``auto`` choices.
    """

    name = "pem"
    wire = WireSpec("strings", "heavy_hitters", "encode_pem", clients=("typescript",))

    def __init__(
        self,
        epsilon: float,
        max_length: int,
        *,
        top_k: int = 32,
        candidates: int | None = None,
        first_bits: int | None = None,
        step_bits: int | None = None,
        verify: bool = True,
        level_weights: Sequence[float] | None = None,
        alpha: float | None = 0.05,
        rule: str = "bh",
        expected_n: int | None = None,
        search: str = "auto",
        sketch_seed: int = 0,
    ) -> None:
        self.epsilon = _check_epsilon(epsilon)
        self.max_length = int(max_length)
        total_bits(self.max_length)
        if not 1 <= int(top_k) <= 100_000:
            raise ValueError(f"top_k must be in [1, 100000], got {top_k}")
        self.top_k = int(top_k)
        if alpha is not None and not 0 < alpha < 1:
            raise ValueError(f"alpha must be in (0, 1) or None, got {alpha}")
        self.alpha = alpha
        if rule not in RULES:
            raise ValueError(f"rule must be one of {', '.join(RULES)}, got {rule!r}")
        self.rule = rule
        if search not in SEARCHES:
            raise ValueError(f"search must be one of {', '.join(SEARCHES)}, got {search!r}")
        self.search = "sketch" if search == "auto" else search
        if self.search == "sketch":
            if not verify:
                raise ValueError("the sketch search publishes through its verification level: verify=True")
            self.candidates = _sketch_candidates(candidates, self.top_k)
            self.levels = plan_sketch_levels(
                self.epsilon, self.max_length, candidates=self.candidates, first_bits=first_bits,
                step_bits=step_bits, sketch_seed=sketch_seed,
            )
        else:
            layout = {"first_bits": first_bits, "step_bits": step_bits, "verify": verify}
            self.candidates = self._choose_candidates(candidates, expected_n, layout)
            self.levels = plan_levels(self.epsilon, self.max_length, candidates=self.candidates, **layout)
        self.weights = _check_weights(level_weights, self.levels)

    def __repr__(self) -> str:
        bits = [lv.bits for lv in self.levels]
        return (
            f"PEM(epsilon={self.epsilon}, max_length={self.max_length}, search={self.search!r}, "
            f"candidates={self.candidates}, bits={bits}, weights={np.round(self.weights, 3).tolist()})"
        )

    def _choose_candidates(self, candidates: int | None, expected_n: int | None, layout: dict) -> int:
        if candidates is not None:
            if not 1 <= int(candidates) <= MAX_CANDIDATES:
                raise ValueError(f"candidates must be in [1, {MAX_CANDIDATES}], got {candidates}")
            return int(candidates)
        c = 8 * self.top_k
        if expected_n is None:
            return min(c, 4096)
        if int(expected_n) < 1:
            raise ValueError(f"expected_n must be >= 1, got {expected_n}")
        for _ in range(2):  # the layout depends on c and c on the layout's number of levels
            levels = plan_levels(self.epsilon, self.max_length, candidates=c, **layout)
            nj = max(1.0, int(expected_n) / len(levels))
            lv = levels[-1]
            f_min = 3.0 * math.sqrt(lv.q * (1 - lv.q) / (nj * (lv.p - lv.q) ** 2))
            c = int(min(4096, max(2 * self.top_k, math.ceil(1.0 / f_min))))
        return c

    # ---------------------------------------------------------------- client

    def encode(
        self,
        values: Iterable[str | bytes] | StringBatch,
        *,
        rng: np.random.Generator | np.random.SeedSequence | int | None = None,
        truncate: bool = False,
        level: int | None = None,
    ) -> HHReports:
        """Reports for ``values`` (``rng=None``: OS CSPRNG noise and seeds, what a client does).

        ``level`` None: each report at a random level (``level_weights``); an index: every report at that
        level (the clients of a trie-mode window, :mod:`ldp.heavy_hitters.trie`). Either way the level does
        not depend on the value, so each report stays eps-LDP."""
        if isinstance(values, StringBatch):
            batch = values
        else:
            batch = encode_strings(values, self.max_length, truncate=truncate)
        if batch.max_length != self.max_length:
            raise ValueError(f"values have max_length {batch.max_length}, the task {self.max_length}")
        perturb, seed_rng = client_streams(rng)
        n = len(batch)
        if level is None:
            edges = np.cumsum(self.weights)[:-1]
            levels = np.searchsorted(edges, perturb.random(n), side="right").astype(np.uint8)
        else:
            levels = np.full(n, self.check_level(level), dtype=np.uint8)
        seeds = public_seeds(n, seed_rng)
        y = np.zeros(n, dtype=np.uint64)
        words = batch.words()
        for lv in self.levels:
            idx = np.flatnonzero(levels == lv.index)
            if idx.size:
                bucket = self._buckets(lv, words[idx], seeds[idx])
                y[idx] = _randomize(bucket, lv, perturb)
        return HHReports(levels, seeds, y)

    def check_level(self, level: object) -> int:
        """``level`` as a level index (ValueError naming the levels otherwise)."""
        if isinstance(level, bool) or not isinstance(level, (int, np.integer)) or not (
            0 <= int(level) < len(self.levels)
        ):
            raise ValueError(f"level must be an integer in [0, {len(self.levels) - 1}], got {level!r}")
        return int(level)

    def _buckets(self, lv: Level, words: np.ndarray, seeds: np.ndarray) -> np.ndarray:
        """Each value's bucket at ``lv`` under its report's seed (GRR: the prefix itself)."""
        if lv.oracle == "grr":
            return bit_field(words, 0, lv.bits)
        if lv.oracle == "gf2":
            s, c = full_matrices(seeds, lv.g.bit_length() - 1, lv.bits)
            return full_hash(s, c, words)
        if lv.sketch is not None:
            spec = lv.sketch
            s, c = spec.matrices(seeds)
            return gf2_hash(s, c, spec.buckets(words, spec.row_of(seeds)))
        keys = level_keys(seeds, (lv.parent_bits + 31) // 32)
        parts = half_words(words, lv.parent_bits)
        ext = bit_field(words, lv.parent_bits, lv.extension_bits)
        return own_hash(keys, parts, ext, lv.g)

    def output_distribution(self, value: str | bytes, level: int, seed: int) -> np.ndarray:
        """The exact probability of each output ``y`` of a report of ``value`` at ``level`` with ``seed``."""
        lv = self.levels[level]
        words = encode_strings([value], self.max_length).words()
        bucket = int(self._buckets(lv, words, np.array([seed], dtype=np.uint64))[0])
        dist = np.full(lv.g, (1 - lv.p) / (lv.g - 1))
        dist[bucket] = lv.p
        return dist

    # ---------------------------------------------------------------- aggregator

    def create_accumulator(self) -> PEMAccumulator:
        return PEMAccumulator(self.levels)

    def validate(self, reports: HHReports) -> np.ndarray:
        """Which reports are well formed (a known level, ``y`` inside the level's range)."""
        level = np.asarray(reports.level).astype(np.int64)
        ok = (level >= 0) & (level < len(self.levels))
        g = np.array([lv.g for lv in self.levels], dtype=np.uint64)
        ok[ok] &= np.asarray(reports.y, dtype=np.uint64)[ok] < g[level[ok]]
        return ok

    def add(self, acc: PEMAccumulator, reports: HHReports) -> PEMAccumulator:
        """Adds the well-formed reports (:meth:`validate`); refused ones are dropped."""
        ok = self.validate(reports)
        level = np.asarray(reports.level)[ok]
        seed = np.asarray(reports.seed, dtype=np.uint64)[ok]
        y = np.asarray(reports.y, dtype=np.uint64)[ok]
        for lv in self.levels:
            m = level == lv.index
            if m.any() and lv.sketch is not None:
                walsh_add(acc.sketches[lv.index], seed[m], y[m])
            elif m.any():
                acc.seeds[lv.index].append(seed[m])
                acc.ys[lv.index].append(y[m])
        return acc

    def merge(self, accumulators: Sequence[PEMAccumulator]) -> PEMAccumulator:
        out = self.create_accumulator()
        for acc in accumulators:
            for j, sketch in acc.sketches.items():
                out.sketches[j].merge(sketch)
            for j in range(len(self.levels)):
                out.seeds[j].extend(acc.seeds[j])
                out.ys[j].extend(acc.ys[j])
        return out

    def estimate(self, acc: PEMAccumulator) -> HeavyHitters:
        """Runs the levels (see the module docstring) and returns the heavy hitters."""
        from ldp.heavy_hitters.search import run_levels

        return run_levels(self, acc)


def _randomize(bucket: np.ndarray, lv: Level, rng: np.random.Generator) -> np.ndarray:
    """Randomized response over ``[g]``: the bucket with probability ``p``, else another uniformly."""
    keep = rng.random(bucket.size) < lv.p
    shift = rng.integers(0, lv.g - 1, size=bucket.size).astype(np.uint64) + np.uint64(1)
    other = (bucket + shift) % np.uint64(lv.g)
    return np.where(keep, bucket, other)


def _check_epsilon(epsilon: float) -> float:
    eps = float(epsilon)
    if not math.isfinite(eps) or not 0 < eps <= 20:
        raise ValueError(f"epsilon must be in (0, 20], got {epsilon!r}")
    return eps


def _sketch_candidates(candidates: int | None, top_k: int) -> int:
    if candidates is None:
        return max(SKETCH_KEEP, 2 * top_k)
    if not 1 <= int(candidates) <= SKETCH_CANDIDATES // 2:
        raise ValueError(f"candidates must be in [1, {SKETCH_CANDIDATES // 2}], got {candidates}")
    return int(candidates)


def _check_weights(weights: Sequence[float] | None, levels: Sequence[Level]) -> np.ndarray:
    if weights is None:
        sketch = levels[0].sketch is not None
        w = np.array([VERIFY_WEIGHT if lv.verify and sketch else 1.0 for lv in levels])
        return w / w.sum()
    w = np.asarray(weights, dtype=np.float64)
    levels = len(levels)
    if w.shape != (levels,) or not np.all(np.isfinite(w)) or np.any(w <= 0):
        raise ValueError(f"level_weights must be {levels} positive numbers, got {list(weights)!r}")
    return w / w.sum()
