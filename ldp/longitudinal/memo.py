"""Memoized frequency oracles for repeated collection: a permanent response per (user, key), a fresh
instantaneous randomization per report.

A user who reports the same value window after window through a fresh oracle spends ``epsilon`` every
time. Memoization (RAPPOR, Erlingsson et al. 2014) breaks that growth: the client randomizes its value
**once** (the *permanent* response, at ``epsilon_inf``), stores it, and every report is a fresh
*instantaneous* randomization of the stored response. Whatever the number of reports of one value, the
server sees a post-processing of one ``epsilon_inf``-LDP response.

Four mechanisms (names of :data:`MEMO_MECHANISMS`):

========== ============================== ============================== ==================== =========
name       permanent (memo key)           instantaneous (every report)   wire fields          max keys
========== ============================== ============================== ==================== =========
memo-grr   GRR on ``[d]`` (the value)     GRR on ``[d]``                 ``values``           ``d``
rappor     unary bit flips (the value)    symmetric bit flips            ``bits``             ``d``
memo-olh   GRR on ``[g]`` of ``H(v)``     GRR on ``[g]``                 ``seeds, values``    ``d``
           (the value)
loloha     GRR on ``[g]`` (the bucket     GRR on ``[g]``                 ``seeds, values``    ``g``
           ``H(v)``)
========== ============================== ============================== ==================== =========

* ``memo-grr`` is RAPPOR's two-stage scheme over GRR (L-GRR); ``rappor`` is RAPPOR with one-hot encoding
  (no Bloom filter): permanent flips ``p1 = P[B'_j = 1 | B_j = 1]``, ``q1 = P[B'_j = 1 | B_j = 0]``
  (``"sue"``:
  RAPPOR's symmetric ``f``; ``"oue"``: ``p1 = 1/2``, ``q1 = 1/(e^eps + 1)``), then symmetric instantaneous
  flips.
* ``memo-olh`` and ``loloha`` (Arcolezi et al., "local hashing with double randomization") both draw **one
  hash function per user and task** (a permanent public seed, sent with every report) and report
  ``(seed, GRR_g(memo))``. They differ in what is memoized: ``memo-olh`` keeps one permanent bucket per
  *value* (values that collide under ``H`` still get independent permanent responses), ``loloha`` one per
  *bucket* (all values hashing to one bucket share it), so a user holds at most ``g`` permanent responses
  however often the value changes: that is where LOLOHA's longitudinal saving of up to ``d / g`` comes
  from.

Probabilities. Write ``p1, q1`` for the permanent stage (probability that the memo equals / supports the
true key, resp. a given other key) and ``p2, q2`` for the instantaneous one. A report supports the user's
value with ``p* = p1 p2 + (1 - p1) q2`` and a given other value with ``q* = q1 p2 + (1 - q1) q2`` (GRR and
unary, per value / bit), or ``q* = 1/g`` (local hashing, the family being universal). In every case
``p* - q* = (p1 - q1)(p2 - q2)`` (for local hashing ``(g p1 - 1)(g p2 - 1) / (g (g - 1))``), computed from
``expm1`` so it never cancels. Over the reports of one window (one per user) the estimator

    f_v = (c_v / n - q*) / (p* - q*)

is unbiased: given the value, a user's report supports ``v`` with probability ``p*`` or ``q*`` marginally over
the permanent randomness, which is independent across users (one secret each). Its variance is the support-
set formula of :mod:`ldp.oracles` at ``(p*, q*)``; the estimators here implement the ``FrequencyOracle``
protocol with those probabilities, reusing the accumulators of :class:`~ldp.oracles.GRR`,
:class:`~ldp.oracles.OUE` and :class:`~ldp.oracles.OLH` (same wire format, same validation).
Estimates of *different windows* are correlated (a user's memo is shared by its windows); each window's
estimate is unbiased on its own.

Guarantees (attributes of every mechanism, computed from the probabilities the code samples):

* ``epsilon_1``: one report, any two values. GRR-type: ``ln(p*/q*)``, with the GRR off-diagonal ``q*`` on
  ``[d]`` or ``[g]``; unary: ``ln(p* (1 - q*) / ((1 - p*) q*))``. The constructor takes the target
  ``epsilon_1`` and solves for the instantaneous stage (GRR: closed form
  ``e^eps2 = (e^e1 (1 - q1) - (1 - p1)) / (p1 - e^e1 q1)``; unary: bisection on the symmetric flip).
* ``epsilon_inf`` (``= epsilon``): any number of reports of a constant value against any other constant
  value: every report is a post-processing of the one permanent response, an ``epsilon``-LDP GRR or unary
  randomization.
* ``epsilon_instantaneous``: the loss of one report *given the memo*, the instantaneous stage's own
  epsilon (GRR on ``[d]`` / ``[g]``: ``ln(p2/q2)``; unary: ``d_diff * ln(p2/q2)`` with up to ``d`` bits
  differing between two independent memos, so ``d ln(p2/q2)``). Conditioned on earlier reports, the next
  one is a mixture of instantaneous rows, so ``k`` reports of *any* two value histories cost at most
  ``k * epsilon_instantaneous`` (tightly: the privacy-loss-distribution composition of ``k`` instantaneous
  randomized responses, :mod:`ldp.longitudinal.accounting`).
* changing values (:meth:`MemoizedOracle.epsilon_after_changes`): two histories with the same pattern of
  memoization keys (which reports share a key is the same in both; the values differ), with ``m``
  distinct keys, cost at most ``m * epsilon_inf``; ``m <= max_memo_keys`` (``d``, or ``g`` for LOLOHA).
  A user whose value changes ``c`` times spends up to ``min(c + 1, max_memo_keys) * epsilon_inf`` about
  its values. The *pattern* itself (when the key changed) is protected only by the instantaneous
  randomization: without it (``epsilon_1 = epsilon``) two memos that differ are seen to differ.
  ``docs/longitudinal.md`` ("What changing values cost") works the cases out.

Randomness. Real clients derive the permanent responses from HMAC-SHA256 of a per-user secret
(:func:`memo_words_hmac`; :class:`ldp.longitudinal.client.Client` holds the secret), so a memo is never
stored, only recomputed, and the instantaneous stage from the OS CSPRNG (``rng=None``: :mod:`ldp.csprng`).
Simulations (:meth:`MemoizedOracle.simulate`) replace HMAC by a vectorized keyed SplitMix64 expansion of
per-user 64-bit keys (:func:`memo_words_sim`, statistically equivalent, not a cryptographic PRF) and take
an explicit seeded ``Generator`` for the instantaneous noise. Both paths map the same words to the same
memo (:meth:`MemoizedOracle.memo_from_words`).
"""

from __future__ import annotations

import abc
import hashlib
import hmac
import math
from typing import Any

import numpy as np

from ldp.csprng import client_rng
from ldp.hashing import DEFAULT_HASH_FAMILY, GOLDEN, client_streams, public_seeds, seed_words, splitmix64
from ldp.oracles import (
    GRR,
    MIN_SAMPLED_PROBABILITY,
    OLH,
    OUE,
    FrequencyOracle,
    SupportAccumulator,
    check_values,
)
from ldp.payload import WireSpec
from ldp.reports import Reports

__all__ = [
    "MemoizedOracle",
    "MemoGRR",
    "RAPPOR",
    "MemoOLH",
    "LOLOHA",
    "MEMO_MECHANISMS",
    "DEFAULT_ALPHA",
    "make_memo_oracle",
    "memo_words_hmac",
    "memo_words_sim",
    "memo_tag",
    "PRF_DOMAIN",
]

#: default ratio ``epsilon_1 / epsilon_inf`` when a mechanism is built without ``epsilon_1``
DEFAULT_ALPHA = 0.5
#: domain-separation prefix of every HMAC message (the version of the derivation)
PRF_DOMAIN = b"ldp-longitudinal/v1"
_U53 = 2.0**-53


# ------------------------------------------------------------------------------------------------
# Permanent randomness: HMAC (clients) or keyed SplitMix64 (simulations)
# ------------------------------------------------------------------------------------------------
def _prf_message(label: str, task_id: str, key: int, block: int) -> bytes:
    t = task_id.encode("utf-8")
    return b"\x00".join([PRF_DOMAIN, label.encode("ascii"), len(t).to_bytes(2, "big") + t,
                         int(key).to_bytes(8, "big", signed=False) + int(block).to_bytes(4, "big")])


def memo_words_hmac(secret: bytes, task_id: str, label: str, key: int, count: int) -> np.ndarray:
    """``count`` pseudo-random 64-bit words for one (user secret, task, label, key).

    Word block ``b`` is ``HMAC-SHA256(secret, PRF_DOMAIN 0 label 0 len(task) task 0 key_u64 b_u32)`` read as
    four big-endian uint64; ``label`` is ``"memo"`` (permanent responses, ``key`` the memoization key) or
    ``"seed"`` (the permanent hash seed, ``key = 0``). A function of the secret: the same words every time,
    unpredictable without it.
    """
    if not isinstance(secret, bytes | bytearray) or len(secret) < 16:
        raise ValueError("secret must be at least 16 bytes")
    if key < 0 or key >= 1 << 64:
        raise ValueError(f"memoization key must be in [0, 2**64), got {key}")
    blocks = (count + 3) // 4
    raw = b"".join(hmac.new(bytes(secret), _prf_message(label, task_id, key, b), hashlib.sha256).digest()
                   for b in range(blocks))
    return np.frombuffer(raw, dtype=">u8")[:count].astype(np.uint64)


def memo_tag(secret: bytes, task_id: str, key: int) -> str:
    """An opaque tag of one memoization key for the budget ledger (hex, 128 bits): a keyed digest, so the
    state file lists which keys were charged without listing the values (see ``docs/longitudinal.md``)."""
    return memo_words_hmac(secret, task_id, "ledger", key, 2).astype(">u8").tobytes().hex()


def _task_tag(task_id: str) -> np.uint64:
    digest = hashlib.sha256(task_id.encode("utf-8")).digest()[:8]
    return np.frombuffer(digest, dtype=">u8").astype(np.uint64)[0]


_LABEL_TAGS = {"memo": np.uint64(0x6D656D6F), "seed": np.uint64(0x73656564)}


def memo_words_sim(
    user_keys: np.ndarray, task_id: str, label: str, keys: np.ndarray, count: int
) -> np.ndarray:
    """Simulation stand-in for :func:`memo_words_hmac`, vectorized: ``(n, count)`` uint64 words for
    per-user 64-bit keys ``user_keys`` and memoization keys ``keys`` (both ``(n,)``).

    ``base = splitmix64(user_key + splitmix64(key * GOLDEN ^ task_tag ^ label_tag))``, then the SplitMix64
    counter stream :func:`ldp.hashing.seed_words` of ``base``. Different users, keys, labels and tasks give
    unrelated words (statistically; this is a simulation device, not a cryptographic PRF).
    """
    uk = np.asarray(user_keys, dtype=np.uint64)
    kk = np.asarray(keys).astype(np.int64).view(np.uint64) if np.asarray(keys).dtype.kind == "i" \
        else np.asarray(keys, dtype=np.uint64)
    tag = _task_tag(task_id) ^ _LABEL_TAGS[label]
    with np.errstate(over="ignore"):
        base = splitmix64(uk + splitmix64((kk * GOLDEN) ^ tag))
    return seed_words(base, count)


def _uniform(words: np.ndarray) -> np.ndarray:
    """53-bit uniforms in [0, 1) from uint64 words."""
    return (words >> np.uint64(11)).astype(np.float64) * _U53


def _grr_from_words(
    keys: np.ndarray, size: int, p: float, w_keep: np.ndarray, w_other: np.ndarray
) -> np.ndarray:
    """GRR on ``[size]``: keep ``keys`` when ``u(w_keep) < p``, else the other value ``w_other mod (size-1)``
    (skipping the key). The modulo bias is below ``size / 2**64``."""
    other = (w_other % np.uint64(size - 1)).astype(np.int64)
    other += other >= keys
    return np.where(_uniform(w_keep) < p, keys, other)


def _grr_fresh(keys: np.ndarray, size: int, p: float, rng: np.random.Generator) -> np.ndarray:
    n = len(keys)
    other = rng.integers(0, size - 1, size=n)
    other += other >= keys
    return np.where(rng.random(n) < p, keys, other)


def _grr_pq(eps: float, size: int) -> tuple[float, float]:
    """``(p, q)`` of GRR on ``[size]``; ``eps = inf`` is the identity."""
    if math.isinf(eps):
        return 1.0, 0.0
    e = math.exp(eps)
    return e / (e + size - 1), 1.0 / (e + size - 1)


def _grr_instantaneous_eps(eps_perm: float, eps_1: float, size: int) -> float:
    """The instantaneous GRR epsilon on ``[size]`` that makes two-stage GRR's one-report loss ``eps_1``
    (``inf`` when ``eps_1 = eps_perm``: no instantaneous randomization)."""
    if eps_1 >= eps_perm:
        return math.inf
    p1, q1 = _grr_pq(eps_perm, size)
    e1 = math.exp(eps_1)
    # p*/q* = (p1 e2 + 1 - p1) / (q1 e2 + 1 - q1) = e1  <=>  e2 = (e1 (1 - q1) - (1 - p1)) / (p1 - e1 q1)
    num = e1 * (1 - q1) - (1 - p1)
    den = p1 - e1 * q1
    return math.log(num / den)


def _check_eps_pair(epsilon: float, epsilon_1: float | None) -> float:
    if epsilon_1 is None:
        return DEFAULT_ALPHA * epsilon
    if isinstance(epsilon_1, bool) or not isinstance(epsilon_1, (int, float)) or not math.isfinite(epsilon_1):
        raise ValueError(f"epsilon_1 must be a positive number, got {epsilon_1!r}")
    e1 = float(epsilon_1)
    if not 0 < e1 <= epsilon:
        raise ValueError(
            f"epsilon_1 (one report) must be in (0, epsilon] = (0, {epsilon:g}], got {e1:g}: a report is a "
            "randomization of the permanent response, so it never reveals more than epsilon (= epsilon_inf)"
        )
    return e1


# ------------------------------------------------------------------------------------------------
# Base class
# ------------------------------------------------------------------------------------------------
class MemoizedOracle(FrequencyOracle):
    """A memoized two-stage frequency oracle (see the module docstring).

    Args:
        epsilon: ``epsilon_inf``, the permanent stage's budget (the loss of unlimited reports of a constant
            value).
        domain_size: ``d``.
        epsilon_1: the loss of one report, in ``(0, epsilon]``; default ``DEFAULT_ALPHA * epsilon``.
            ``epsilon_1 = epsilon`` means no instantaneous randomization (every report is the memo).

    Attributes (beyond the ``FrequencyOracle`` ones; ``p``, ``q``, ``gap`` are the composed ``p*``, ``q*``):
        epsilon_inf, epsilon_1, epsilon_instantaneous: the guarantees (module docstring).
        perm_p, perm_q, inst_p, inst_q: the two stages' probabilities.
        max_memo_keys: the most permanent responses one user can hold.
        base: the :mod:`ldp.oracles` oracle whose wire format, validation and accumulator are reused.
    """

    name = ""
    memo_key_kind = "value"  # what the memoization key is: "value" or "bucket"

    def spec(self) -> dict[str, Any]:
        return {**super().spec(), **self._hash_spec(), "epsilon_1": float(self.epsilon_1)}

    def _hash_spec(self) -> dict[str, Any]:
        """The hash parameters that identify the oracle (local hashing: ``g``)."""
        return {}

    def __init__(self, epsilon: float, domain_size: int, *, epsilon_1: float | None = None) -> None:
        super().__init__(epsilon, domain_size)
        self.epsilon_1_target = _check_eps_pair(self.epsilon, epsilon_1)
        self.alpha = self.epsilon_1_target / self.epsilon

    # -- guarantees ----------------------------------------------------------------------------------
    @property
    def epsilon_inf(self) -> float:
        """Loss of any number of reports of one constant value (= ``epsilon``)."""
        return self.epsilon

    @property
    @abc.abstractmethod
    def epsilon_1(self) -> float:
        """Loss of one report, from the composed probabilities."""

    @property
    @abc.abstractmethod
    def epsilon_instantaneous(self) -> float:
        """Loss of one report given the memo (``inf`` without instantaneous randomization)."""

    @property
    @abc.abstractmethod
    def max_memo_keys(self) -> int:
        """The most distinct permanent responses one user can hold (``d``, or ``g`` for LOLOHA)."""

    def epsilon_after_changes(self, changes: int) -> float:
        """Loss about the values of a user whose memoization key changed ``changes`` times, the change
        pattern treated as public: ``min(changes + 1, max_memo_keys) * epsilon_inf`` (basic composition of
        the permanent responses; see the module docstring for the pattern itself)."""
        if changes < 0:
            raise ValueError(f"changes must be >= 0, got {changes}")
        return min(int(changes) + 1, self.max_memo_keys) * self.epsilon_inf

    def guarantees(self) -> dict[str, float | int]:
        """The guarantees as plain data (for task summaries and estimate metadata)."""
        return {
            "epsilon_1": self.epsilon_1,
            "epsilon_inf": self.epsilon_inf,
            "epsilon_instantaneous": self.epsilon_instantaneous,
            "max_memo_keys": self.max_memo_keys,
            "epsilon_inf_any_changes": self.max_memo_keys * self.epsilon_inf,
        }

    def describe(self) -> dict:
        out = super().describe()
        out.update(self.guarantees())
        out.update(perm_p=self.perm_p, perm_q=self.perm_q, inst_p=self.inst_p, inst_q=self.inst_q,
                   memo_key=self.memo_key_kind)
        return out

    # -- the reused oracle ---------------------------------------------------------------------------
    base: FrequencyOracle

    @property
    def report_fields(self) -> tuple[str, ...]:  # type: ignore[override]
        return self.base.report_fields

    @property
    def report_bits(self) -> int:
        return self.base.report_bits

    def _statistic_shape(self):
        return self.base._statistic_shape()

    @property
    def add_cells_per_report(self) -> int:
        return self.base.add_cells_per_report

    @property
    def finalize_ops(self) -> int:
        return self.base.finalize_ops

    def _add(self, counts, reports):
        self.base._add(counts, reports)

    def support_counts(self, acc: SupportAccumulator) -> np.ndarray:
        return self.base.support_counts(acc)

    def _payload_fields(self):
        return self.base.payload.fields

    def _validate(self, reports, reasons):
        self.base._validate(reports, reasons)

    # -- client: memo keys, permanent responses, instantaneous reports --------------------------------
    #: 64-bit words one permanent response consumes
    words_per_memo: int = 2
    uses_seed: bool = False

    def memo_keys(self, values: np.ndarray, seeds: np.ndarray | None = None) -> np.ndarray:
        """The memoization key of each value (the value itself; LOLOHA: its bucket under the user's hash)."""
        return np.asarray(values, dtype=np.int64)

    @abc.abstractmethod
    def memo_from_words(
        self, keys: np.ndarray, words: np.ndarray, seeds: np.ndarray | None = None
    ) -> np.ndarray:
        """The permanent responses of memo keys ``keys`` (``(n,)``) from their PRF words ``(n, W)`` (and, for
        local hashing, the users' hash seeds): int64 ``(n,)`` (GRR types) or bool ``(n, d)`` (unary)."""

    @abc.abstractmethod
    def instantaneous(self, memo: np.ndarray, rng: np.random.Generator,
                      seeds: np.ndarray | None = None) -> Reports:
        """One fresh report per memo (the instantaneous stage) in the wire format."""

    def seeds_from_words(self, words: np.ndarray) -> np.ndarray:
        """The permanent public hash seed from its PRF words (local hashing only)."""
        raise NotImplementedError(f"{self.name} uses no hash seed")

    def simulate(self, values: Any, user_keys: np.ndarray, *, rng: np.random.Generator,
                 task_id: str = "sim") -> Reports:
        """One report per user for a batch of simulated users (vectorized).

        Args:
            values: each user's current value, ``(n,)``.
            user_keys: each user's 64-bit key (uint64 ``(n,)``, standing in for the HMAC secret): the same
                key gives the same permanent responses in every call, as a real client's secret does.
            rng: the instantaneous noise (keyword-only, explicit for reproducibility).
            task_id: separates the memos of different tasks.
        """
        vals = check_values(values, self.d)
        uk = np.asarray(user_keys, dtype=np.uint64)
        if uk.shape != vals.shape:
            raise ValueError(f"user_keys must have shape {vals.shape}, got {uk.shape}")
        seeds = None
        if self.uses_seed:
            seeds = self.seeds_from_words(memo_words_sim(uk, task_id, "seed", np.zeros(len(uk), np.int64), 1))
        keys = self.memo_keys(vals, seeds)
        words = memo_words_sim(uk, task_id, "memo", keys, self.words_per_memo)
        memo = self.memo_from_words(keys, words, seeds)
        return self.instantaneous(memo, rng, seeds)

    def simulate_memo_keys(self, values: Any, user_keys: np.ndarray, *, task_id: str = "sim") -> np.ndarray:
        """The memoization keys of simulated users (for counting distinct keys, i.e. the budget spent)."""
        vals = check_values(values, self.d)
        seeds = None
        if self.uses_seed:
            uk = np.asarray(user_keys, dtype=np.uint64)
            seeds = self.seeds_from_words(memo_words_sim(uk, task_id, "seed", np.zeros(len(uk), np.int64), 1))
        return self.memo_keys(vals, seeds)

    def client_memo_key(self, secret: bytes, task_id: str, value: int) -> int:
        """The memoization key of one real user's value (the value; LOLOHA: its bucket under the user's
        permanent hash), without drawing a report (the budget ledger charges per key)."""
        v = check_values(np.asarray([value]), self.d)
        seeds = None
        if self.uses_seed:
            seeds = self.seeds_from_words(memo_words_hmac(secret, task_id, "seed", 0, 1)[None, :])
        return int(self.memo_keys(v, seeds)[0])

    def client_report(self, secret: bytes, task_id: str, value: int, *,
                      rng: np.random.Generator | int | None = None) -> tuple[Reports, int]:
        """One report of one real user (the on-device path; :class:`ldp.longitudinal.client.Client` wraps
        it with the budget). Returns ``(report, memo key)``. Pass ``rng=None``: instantaneous noise from the
        OS CSPRNG (:func:`ldp.csprng.secure_rng`); the permanent response comes from HMAC of ``secret``."""
        v = check_values(np.asarray([value]), self.d)
        seeds = None
        if self.uses_seed:
            seeds = self.seeds_from_words(memo_words_hmac(secret, task_id, "seed", 0, 1)[None, :])
        key = int(self.memo_keys(v, seeds)[0])
        words = memo_words_hmac(secret, task_id, "memo", key, self.words_per_memo)[None, :]
        memo = self.memo_from_words(np.asarray([key], dtype=np.int64), words, seeds)
        return self.instantaneous(memo, client_rng(rng), seeds), key

    def _encode_with(self, values, rng):
        """``encode``: one report each from *fresh, independent* users: the one-report distribution
        (``epsilon_1``). The permanent and instantaneous randomness come from the perturbation stream, the
        public hash seeds (local hashing) from a separate one (:func:`ldp.hashing.client_streams`: the OS
        CSPRNG for ``rng=None``), as for :class:`~ldp.oracles.OLH`. Repeated collection goes through
        :meth:`client_report` (real clients) or :meth:`simulate` (simulations)."""
        perturb, seed_rng = client_streams(rng)
        seeds = None
        if self.uses_seed:
            seeds = public_seeds(len(values), seed_rng)
        return self._encode_seeded(values, perturb, seeds)

    def _encode(self, values, rng):  # pragma: no cover - encode goes through _encode_with
        return self._encode_with(values, rng)

    def _encode_seeded(self, values, rng, seeds):
        keys = self.memo_keys(values, seeds)
        words = rng.integers(0, 2**64, size=(len(values), self.words_per_memo), dtype=np.uint64)
        return self.instantaneous(self.memo_from_words(keys, words, seeds), rng, seeds)

    # -- exactness of the samplers -----------------------------------------------------------------------
    def _check_sampled(self, sampled: tuple[float, ...]) -> None:
        smallest = min(min(x, 1.0 - x) for x in sampled if 0.0 < x < 1.0) if any(
            0.0 < x < 1.0 for x in sampled) else 1.0
        if smallest < MIN_SAMPLED_PROBABILITY:
            raise ValueError(
                f"{self!r}: a stage would sample a probability of {smallest:.3g}, below 2**-32, which the "
                "float64 sampler does not realize exactly enough to keep the privacy loss as stated; "
                "use a smaller epsilon"
            )
        if self.gap < MIN_SAMPLED_PROBABILITY:
            raise ValueError(f"{self!r}: p* - q* = {self.gap:.3g} is below 2**-32; use a larger epsilon")

    def _probabilities(self, eps):  # FrequencyOracle's hook: composed (p*, q*) at eps_inf = eps, same alpha
        return self._composed(eps, self.alpha * eps)

    @abc.abstractmethod
    def _composed(self, eps_perm: float, eps_1: float) -> tuple[float, float, float, tuple[float, ...]]: ...

    def __repr__(self) -> str:
        return (f"{type(self).__name__}(epsilon={self.epsilon}, domain_size={self.d}, "
                f"epsilon_1={self.epsilon_1_target})")


# ------------------------------------------------------------------------------------------------
# GRR: memo-grr
# ------------------------------------------------------------------------------------------------
class MemoGRR(MemoizedOracle):
    """RAPPOR-style memoized GRR (L-GRR): permanent GRR on ``[d]`` at ``epsilon``, instantaneous GRR on
    ``[d]`` at ``epsilon_instantaneous`` (solved so one report costs ``epsilon_1``).

    Guarantees: ``epsilon_1 = ln(p*/q*)`` with ``p* = p1 p2 + (1-p1) q2``, ``q* = q1 p2 + (1-q1) q2``;
    ``epsilon_inf = epsilon``; ``epsilon_instantaneous = ln(p2/q2)``; ``max_memo_keys = d``.
    Wire format and accumulator: :class:`~ldp.oracles.GRR`'s (``values``).
    """

    name = "memo-grr"
    wire = WireSpec("categorical", "memo", "memo_memo-grr", clients=("typescript",))

    def __init__(self, epsilon: float, domain_size: int, *, epsilon_1: float | None = None) -> None:
        super().__init__(epsilon, domain_size, epsilon_1=epsilon_1)
        self.base = GRR(self.epsilon, self.d)
        self._set_stages()

    def _set_stages(self) -> None:
        p, q, gap, sampled = self._composed(self.epsilon, self.epsilon_1_target)
        self.p, self.q, self.gap = p, q, gap
        self._eps2 = _grr_instantaneous_eps(self.epsilon, self.epsilon_1_target, self.d)
        self.perm_p, self.perm_q = _grr_pq(self.epsilon, self.d)
        self.inst_p, self.inst_q = _grr_pq(self._eps2, self.d)
        self._check_sampled(sampled)

    def _composed(self, eps_perm, eps_1):
        d = self.d
        p1, q1 = _grr_pq(eps_perm, d)
        eps2 = _grr_instantaneous_eps(eps_perm, eps_1, d)
        p2, q2 = _grr_pq(eps2, d)
        p = p1 * p2 + (1 - p1) * q2
        q = q1 * p2 + (1 - q1) * q2
        # (p1 - q1)(p2 - q2), each from expm1
        g1 = math.expm1(eps_perm) / (math.exp(eps_perm) + d - 1)
        g2 = 1.0 if math.isinf(eps2) else math.expm1(eps2) / (math.exp(eps2) + d - 1)
        return p, q, g1 * g2, (p1, p2)

    @property
    def epsilon_1(self) -> float:
        return math.log(self.p / self.q)

    @property
    def epsilon_instantaneous(self) -> float:
        return self._eps2

    @property
    def max_memo_keys(self) -> int:
        return self.d

    def memo_from_words(self, keys, words, seeds=None):
        keys = np.asarray(keys, dtype=np.int64)
        return _grr_from_words(keys, self.d, self.perm_p, words[:, 0], words[:, 1])

    def instantaneous(self, memo, rng, seeds=None):
        memo = np.asarray(memo, dtype=np.int64)
        if math.isinf(self._eps2):
            return Reports(values=memo.copy())
        return Reports(values=_grr_fresh(memo, self.d, self.inst_p, rng))

    def _set_numerator(self, mask, f):
        """The report is GRR-shaped with ``(p*, q*)`` (one value, uniform among the others when it is not the
        user's): :meth:`ldp.oracles.GRR._set_numerator` at the composed probabilities."""
        return GRR._set_numerator(self, mask, f)


# ------------------------------------------------------------------------------------------------
# Unary encoding: rappor
# ------------------------------------------------------------------------------------------------
def _ue_perm(eps: float, kind: str) -> tuple[float, float]:
    if kind == "sue":
        e = math.exp(eps / 2)
        return e / (e + 1), 1.0 / (e + 1)
    if kind == "oue":
        return 0.5, 1.0 / (math.exp(eps) + 1)
    raise ValueError(f"permanent must be 'sue' (RAPPOR's symmetric flips) or 'oue', got {kind!r}")


def _ue_eps(p: float, q: float) -> float:
    return math.log(p * (1 - q) / ((1 - p) * q))


def _ue_compose(p1: float, q1: float, s: float) -> tuple[float, float]:
    return p1 * s + (1 - p1) * (1 - s), q1 * s + (1 - q1) * (1 - s)


def _ue_instantaneous(p1: float, q1: float, eps_1: float) -> float:
    """The symmetric instantaneous flip ``s = P[S_j = B'_j]`` in (1/2, 1] giving one-report loss ``eps_1``:
    the loss grows monotonically with ``s`` (from 0 at 1/2 to the permanent loss at 1): bisection."""
    if eps_1 >= _ue_eps(p1, q1) * (1 - 1e-15):
        return 1.0
    lo, hi = 0.5, 1.0
    for _ in range(200):
        mid = 0.5 * (lo + hi)
        p, q = _ue_compose(p1, q1, mid)
        if _ue_eps(p, q) < eps_1:
            lo = mid
        else:
            hi = mid
        if hi - lo < 1e-17:
            break
    return 0.5 * (lo + hi)


class RAPPOR(MemoizedOracle):
    """RAPPOR with one-hot encoding (basic RAPPOR, no Bloom filter): permanent per-bit flips of the one-hot
    vector of the value, memoized per value; instantaneous symmetric flips of the memo per report.

    Args:
        permanent: ``"sue"`` (default, RAPPOR's symmetric ``f``: ``p1 = e^(eps/2) / (e^(eps/2) + 1)``,
            ``q1 = 1 - p1``) or ``"oue"`` (``p1 = 1/2``, ``q1 = 1 / (e^eps + 1)``; the L-OSUE variant).

    Per bit: ``p* = p1 s + (1 - p1)(1 - s)``, ``q* = q1 s + (1 - q1)(1 - s)`` with ``s`` the instantaneous
    keep probability. Guarantees: ``epsilon_inf = ln(p1 (1-q1) / ((1-p1) q1)) = epsilon``;
    ``epsilon_1 = ln(p* (1-q*) / ((1-p*) q*))`` (two one-hot vectors differ in two bits);
    ``epsilon_instantaneous = d ln(s / (1-s))``: two *independent memos* (two different values) may differ in
    all ``d`` bits, so the instantaneous stage protects a change of value far less than it protects a value.
    ``max_memo_keys = d``. Wire format and accumulator: :class:`~ldp.oracles.OUE`'s (``bits``).
    """

    name = "rappor"
    wire = WireSpec("categorical", "memo", "memo_rappor", clients=("typescript",))

    def __init__(self, epsilon: float, domain_size: int, *, epsilon_1: float | None = None,
                 permanent: str = "sue") -> None:
        super().__init__(epsilon, domain_size, epsilon_1=epsilon_1)
        _ue_perm(1.0, permanent)  # validates the name
        self.permanent = permanent
        self.base = OUE(self.epsilon, self.d)
        p, q, gap, sampled = self._composed(self.epsilon, self.epsilon_1_target)
        self.p, self.q, self.gap = p, q, gap
        self.perm_p, self.perm_q = _ue_perm(self.epsilon, permanent)
        self.inst_p = _ue_instantaneous(self.perm_p, self.perm_q, self.epsilon_1_target)
        self.inst_q = 1.0 - self.inst_p
        self._check_sampled(sampled)
        self.words_per_memo = self.d

    def _composed(self, eps_perm, eps_1):
        p1, q1 = _ue_perm(eps_perm, self.permanent)
        s = _ue_instantaneous(p1, q1, eps_1)
        p, q = _ue_compose(p1, q1, s)
        return p, q, (p1 - q1) * (2 * s - 1), (p1, q1, s)

    def __repr__(self) -> str:
        return (f"RAPPOR(epsilon={self.epsilon}, domain_size={self.d}, epsilon_1={self.epsilon_1_target}, "
                f"permanent={self.permanent!r})")

    def describe(self) -> dict:
        out = super().describe()
        out["permanent"] = self.permanent
        return out

    @property
    def epsilon_1(self) -> float:
        return _ue_eps(self.p, self.q)

    @property
    def epsilon_instantaneous(self) -> float:
        if self.inst_p >= 1.0:
            return math.inf
        return self.d * math.log(self.inst_p / self.inst_q)

    @property
    def max_memo_keys(self) -> int:
        return self.d

    def memo_from_words(self, keys, words, seeds=None):
        keys = np.asarray(keys, dtype=np.int64)
        u = _uniform(words[:, : self.d])
        bits = u < self.perm_q
        rows = np.arange(len(keys))
        bits[rows, keys] = u[rows, keys] < self.perm_p
        return bits

    def instantaneous(self, memo, rng, seeds=None):
        memo = np.asarray(memo, dtype=bool)
        n = memo.shape[0]
        out = np.empty((n, (self.d + 7) // 8), dtype=np.uint8)
        step = max(1, (64 << 20) // (9 * self.d))
        for start in range(0, n, step):
            m = memo[start : start + step]
            if self.inst_p >= 1.0:
                bits = m
            else:
                bits = m ^ (rng.random(m.shape) >= self.inst_p)
            out[start : start + len(m)] = np.packbits(bits, axis=1, bitorder="little")
        return Reports(bits=out)

    def _set_numerator(self, mask, f):
        """Bits independent given the value (permanent and instantaneous flips are per bit): Eq. 4 summed."""
        return self._independent_numerator(mask, f)


# ------------------------------------------------------------------------------------------------
# Local hashing: memo-olh and loloha
# ------------------------------------------------------------------------------------------------
def _lh_variance_factor(eps_perm: float, eps_1: float, g: int) -> float:
    p1, q1 = _grr_pq(eps_perm, g)
    eps2 = _grr_instantaneous_eps(eps_perm, eps_1, g)
    p2, q2 = _grr_pq(eps2, g)
    p = p1 * p2 + (1 - p1) * q2
    q = 1.0 / g
    return q * (1 - q) / (p - q) ** 2


def lh_buckets(epsilon: float, epsilon_1: float, domain_size: int) -> int:
    """Default ``g`` of the memoized local-hashing oracles: the power of two in ``[2, 2^floor(log2 d)]``
    minimising the composed per-value variance ``q*(1-q*) / (p* - q*)^2`` (``q* = 1/g``)."""
    kmax = max(1, int(domain_size).bit_length() - 1)
    cands = [1 << k for k in range(1, min(kmax, 40) + 1)]
    return min(cands, key=lambda g: (_lh_variance_factor(epsilon, epsilon_1, g), g))


class _MemoLocalHashing(MemoizedOracle):
    uses_seed = True

    def __init__(self, epsilon: float, domain_size: int, *, epsilon_1: float | None = None,
                 g: int | None = None) -> None:
        super().__init__(epsilon, domain_size, epsilon_1=epsilon_1)
        if g is None:
            g = lh_buckets(self.epsilon, self.epsilon_1_target, self.d)
        self.base = OLH(self.epsilon, self.d, g=g, family=DEFAULT_HASH_FAMILY)
        self.g = self.base.g
        self.hash = self.base.hash
        p, q, gap, sampled = self._composed(self.epsilon, self.epsilon_1_target)
        self.p, self.q, self.gap = p, q, gap
        self._eps2 = _grr_instantaneous_eps(self.epsilon, self.epsilon_1_target, self.g)
        self.perm_p, self.perm_q = _grr_pq(self.epsilon, self.g)
        self.inst_p, self.inst_q = _grr_pq(self._eps2, self.g)
        self._check_sampled(sampled)

    def _hash_spec(self) -> dict[str, Any]:
        return {"g": int(self.g)}

    def __repr__(self) -> str:
        return (f"{type(self).__name__}(epsilon={self.epsilon}, domain_size={self.d}, "
                f"epsilon_1={self.epsilon_1_target}, g={self.g})")

    def describe(self) -> dict:
        out = super().describe()
        out.update(g=self.g, hash=self.base.family.name)
        return out

    def _composed(self, eps_perm, eps_1):
        g = self.base.g if hasattr(self, "base") else 2
        p1, q1 = _grr_pq(eps_perm, g)
        eps2 = _grr_instantaneous_eps(eps_perm, eps_1, g)
        p2, q2 = _grr_pq(eps2, g)
        p = p1 * p2 + (1 - p1) * q2
        # p* - 1/g = (g p1 - 1)(g p2 - 1) / (g (g - 1)), with g p - 1 = (g - 1) expm1(eps) / (e^eps + g - 1)
        a = (g - 1) * math.expm1(eps_perm) / (math.exp(eps_perm) + g - 1)
        b = (g - 1) * (1.0 if math.isinf(eps2) else math.expm1(eps2) / (math.exp(eps2) + g - 1))
        return p, 1.0 / g, a * b / (g * (g - 1)), (p1, p2)

    @property
    def epsilon_1(self) -> float:
        """``ln(p*/q*_g)`` with ``q*_g = q1 p2 + (1 - q1) q2`` the probability of a given *other bucket*."""
        q_other = self.perm_q * self.inst_p + (1 - self.perm_q) * self.inst_q
        return math.log(self.p / q_other)

    @property
    def epsilon_instantaneous(self) -> float:
        return self._eps2

    def seeds_from_words(self, words):
        return np.asarray(words, dtype=np.uint64)[:, 0].copy()

    def memo_from_words(self, keys, words, seeds=None):
        """The permanent bucket: GRR on ``[g]`` of the key's bucket (memo-olh: the key is the value, hashed
        here with the user's seed; loloha: the key is the bucket already)."""
        buckets = self._bucket_of_key(np.asarray(keys, dtype=np.int64), seeds)
        return _grr_from_words(buckets, self.g, self.perm_p, words[:, 0], words[:, 1])

    def instantaneous(self, memo, rng, seeds=None):
        if seeds is None:
            raise ValueError(f"{self.name} reports carry the user's permanent hash seed")
        memo = np.asarray(memo, dtype=np.int64)
        y = memo.copy() if math.isinf(self._eps2) else _grr_fresh(memo, self.g, self.inst_p, rng)
        return Reports(seeds=np.asarray(seeds, dtype=np.uint64), values=y)

    def _set_numerator(self, mask, f):
        """3-wise independent family (gf2-affine): support indicators of distinct values are uncorrelated
        given the user's value, as for :class:`~ldp.oracles.OLH`: Eq. 4 summed at ``(p*, 1/g)``."""
        return self._independent_numerator(mask, f)

    @abc.abstractmethod
    def _bucket_of_key(self, keys: np.ndarray, seeds: np.ndarray | None) -> np.ndarray:
        """The bucket a memoization key's permanent response randomizes."""


class MemoOLH(_MemoLocalHashing):
    """Memoized OLH: one permanent hash seed per user and task, one permanent randomized bucket per *value*
    (GRR on ``[g]`` of ``H(v)`` at ``epsilon``), a fresh instantaneous GRR on ``[g]`` per report.

    Guarantees: ``epsilon_1 = ln(p*/q*_g)``; ``epsilon_inf = epsilon``; ``epsilon_instantaneous = ln(p2/q2)``
    on ``[g]``; ``max_memo_keys = d`` (values that collide under ``H`` still get independent permanent
    responses, so every distinct value costs ``epsilon``). Wire format: :class:`~ldp.oracles.OLH`'s
    (``seeds, values``); the seed is the same in every report of a user (a pseudonym within the task).
    """

    name = "memo-olh"
    wire = WireSpec("categorical", "memo", "memo_memo-olh", clients=("typescript",))
    words_per_memo = 2

    @property
    def max_memo_keys(self) -> int:
        return self.d

    def _bucket_of_key(self, keys, seeds):
        if seeds is None:
            raise ValueError("memo-olh hashes the value with the user's permanent seed")
        return self.hash.hash(np.asarray(seeds, dtype=np.uint64), keys)


class LOLOHA(_MemoLocalHashing):
    """LOLOHA, local hashing with double randomization (Arcolezi et al.): one permanent hash seed per user
    and task; the value's bucket ``H(v)`` is the memoization key: one permanent GRR on ``[g]`` per *bucket*
    at ``epsilon``, a fresh instantaneous GRR on ``[g]`` per report.

    Guarantees: ``epsilon_1 = ln(p*/q*_g)``; ``epsilon_inf = epsilon``; ``epsilon_instantaneous = ln(p2/q2)``
    on ``[g]``; ``max_memo_keys = g``: however often the value changes, a user holds at most ``g`` permanent
    responses, so its values cost at most ``g * epsilon`` (``min(c + 1, g) * epsilon`` after ``c`` changes),
    against ``d * epsilon`` for memo-grr, rappor and memo-olh: the saving of up to ``d / g``.
    ``g`` defaults to :func:`lh_buckets` (variance-optimal); ``g = 2`` is BiLOLOHA (smallest budget).
    """

    name = "loloha"
    wire = WireSpec("categorical", "memo", "memo_loloha", clients=("typescript",))
    memo_key_kind = "bucket"

    @property
    def max_memo_keys(self) -> int:
        return self.g

    def memo_keys(self, values, seeds=None):
        if seeds is None:
            raise ValueError("loloha's memoization key is the value's bucket under the user's hash seed")
        return self.hash.hash(np.asarray(seeds, dtype=np.uint64), np.asarray(values, dtype=np.int64))

    def _bucket_of_key(self, keys, seeds):
        return np.asarray(keys, dtype=np.int64)


MEMO_MECHANISMS: dict[str, type[MemoizedOracle]] = {
    "memo-grr": MemoGRR,
    "rappor": RAPPOR,
    "memo-olh": MemoOLH,
    "loloha": LOLOHA,
}


def make_memo_oracle(name: str, epsilon: float, domain_size: int, **params: Any) -> MemoizedOracle:
    """Builds a memoized oracle by name (:data:`MEMO_MECHANISMS`); ``params``: ``epsilon_1`` (all),
    ``g`` (memo-olh, loloha), ``permanent`` (rappor).

    Raises:
        ValueError: unknown name or bad parameters (naming them).
    """
    key = str(name).lower()
    if key not in MEMO_MECHANISMS:
        raise ValueError(f"unknown memoized mechanism {name!r}; choose one of {sorted(MEMO_MECHANISMS)}")
    try:
        return MEMO_MECHANISMS[key](epsilon, domain_size, **params)
    except TypeError as exc:
        raise ValueError(f"bad parameters for {key}: {exc}") from None
