"""Byte-driven reference encoders of the wire format (``docs/wire_format.md``): the conformance procedure.

Every client implementation of the frequency oracles (the TypeScript client in ``clients/typescript``,
any later one) turns the same random bytes into the same report: this module is the Python reference of
that procedure, and the conformance vectors of ``schemas/vectors/`` are generated from it.

Random bytes are read as a stream of 64-bit little-endian words (:class:`WordStream`). Two primitives
consume them:

* ``uniform(m)``: an integer uniform on ``[0, m)``; ``m = 1`` consumes nothing, otherwise a word is
  masked to the bit length of ``m - 1`` and redrawn while the result is ``>= m`` (exact rejection);
* ``bernoulli(T)``: the top 53 bits of one word, ``u = w >> 11``, and the outcome ``u < T`` with the
  integer threshold ``T = ceil(p * 2**53)`` (:func:`bernoulli_threshold`). It is exactly the oracles'
  ``rng.random() < p`` on a word source (``random()`` is ``(w >> 11) * 2**-53``), so each byte-driven
  encoder has the distribution of the oracle's own ``encode`` (same ``p``, ``q``).

The encoders (:func:`encode_bytes`) are vectorized over reports: each report owns a row of words and a
cursor, so rejection redraws advance only the rows that need them. Real clients draw the bytes from a
cryptographic source; the conformance vectors carry them explicitly.

The memoized mechanisms (:func:`memo_report_bytes`) derive the permanent response from HMAC-SHA256 of
the user's secret exactly as :mod:`ldp.longitudinal.memo` does, then run the instantaneous step on the
random bytes.

The numeric mechanisms (:func:`numeric_encode_bytes`, schema version 3) run the mechanisms' own integer
samplers (:mod:`ldp.numeric.grid`) with ``uniform(m)`` of each report's words as the only randomness.

The sparse-vector mechanisms (:func:`sparse_encode_bytes`) clean the input (clip, drop zeros, sort,
truncate to ``k`` by a partial Fisher-Yates shuffle from the words), then hash with
:func:`ldp.sparse.hashes.bins_signs` (pure-integer reference :func:`sparse_hash_one`) and draw each
bin's noise or bit from the words in order; they match :mod:`ldp.sparse`'s encoders in distribution.

A task's client parameters (the thresholds as integers) come from :mod:`wire.client`
(``python -m wire.client TASK.json``); the JSON form of a report is :mod:`wire.json_form`.
"""

from __future__ import annotations

import hashlib
import hmac
import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from ldp.hashing import GOLDEN, splitmix64
from ldp.heavy_hitters.pem import PEM, HHReports
from ldp.heavy_hitters.sketch import MATRIX_WORD, ROW_WORD
from ldp.heavy_hitters.strings import total_bits
from ldp.kinds.heavy_hitters.aggregate import MECHANISMS as HH_MECHANISMS
from ldp.longitudinal.memo import (
    LOLOHA,
    MEMO_MECHANISMS,
    PRF_DOMAIN,
    RAPPOR,
    MemoGRR,
    MemoizedOracle,
    MemoOLH,
)
from ldp.numeric.grid import SlidingWindow, TwoPoint
from ldp.numeric.mechanisms import (
    LAPLACE_TAIL,
    Duchi,
    Hybrid,
    LaplaceMean,
    NumericMechanism,
    OneBitMean,
    Piecewise,
    SquareWaveNumeric,
    to_unit,
)
from ldp.numeric.mechanisms import MECHANISMS as NUMERIC_MECHANISMS
from ldp.oracles import (
    BLH,
    GRR,
    OLH,
    OUE,
    SUE,
    FrequencyOracle,
    HadamardResponse,
    SubsetSelection,
    check_values,
)
from ldp.oracles import MECHANISMS as ORACLE_MECHANISMS
from ldp.reports import Reports
from ldp.sparse.accumulate import SVME
from ldp.sparse.baselines import PCKV, Gaussian, Harmony, KFold, Sampling
from ldp.sparse.hashes import bins_signs, domain_bits
from ldp.sparse.mechanisms import SPARSE_MECHANISM_CLASSES
from ldp.sparse.vectors import SparseVectors
from wire.registry import byte_mechanisms

__all__ = [
    "WIRE_VECTORS_VERSION",
    "BYTE_MECHANISMS",
    "WordStream",
    "bernoulli_threshold",
    "wire_params",
    "encode_bytes",
    "bytes_needed",
    "gf2_hash_one",
    "MEMO_BYTE_MECHANISMS",
    "memo_wire_params",
    "memo_prf_words",
    "memo_report_bytes",
    "NUMERIC_BYTE_MECHANISMS",
    "numeric_wire_params",
    "numeric_encode_bytes",
    "SPARSE_BYTE_MECHANISMS",
    "sparse_item_bits",
    "sparse_hash_one",
    "sparse_wire_params",
    "sparse_encode_bytes",
    "PEM_BYTE_MECHANISMS",
    "pem_wire_params",
    "pem_value_words",
    "pem_bucket_one",
    "pem_encode_bytes",
]

#: Version of the conformance vectors (``schemas/vectors/v<N>/``) and of the byte-level procedure.
WIRE_VECTORS_VERSION = 1
#: Frequency oracles with a byte-driven client procedure (their ``wire`` spec, :mod:`wire.registry`).
BYTE_MECHANISMS = byte_mechanisms("frequency", ORACLE_MECHANISMS)
_TWO53 = 1 << 53


def bernoulli_threshold(p: float) -> int:
    """``T = ceil(p * 2**53)``: ``bernoulli`` succeeds when the 53-bit uniform ``w >> 11`` is below ``T``,
    i.e. with probability ``T / 2**53``, exactly what ``rng.random() < p`` realizes."""
    p = float(p)
    if not 0.0 < p < 1.0:
        raise ValueError(f"a sampled probability must lie in (0, 1), got {p!r}")
    return math.ceil(p * _TWO53)  # p * 2**53 is exact (a power-of-two scaling of a double)


class WordStream:
    """Rows of 64-bit little-endian words, one row per report, each consumed from a cursor.

    Args:
        data: one ``bytes`` per report (lengths may differ; a trailing partial word is never read), or a
            uint8 array ``(n, 8 L)``, or a uint64 array ``(n, L)`` of words.
    """

    def __init__(self, data: Sequence[bytes] | np.ndarray) -> None:
        if isinstance(data, np.ndarray) and data.dtype == np.uint64:
            self.words = np.ascontiguousarray(data).reshape(len(data), -1)
            self.avail = np.full(len(data), self.words.shape[1], dtype=np.int64)
        elif isinstance(data, np.ndarray):
            raw = np.ascontiguousarray(data, dtype=np.uint8)
            n, nb = raw.shape
            self.words = raw[:, : nb - nb % 8].copy().view("<u8").astype(np.uint64)
            self.avail = np.full(n, self.words.shape[1], dtype=np.int64)
        else:
            lens = np.array([len(b) // 8 for b in data], dtype=np.int64)
            width = int(lens.max()) if len(lens) else 0
            buf = np.zeros((len(data), 8 * width), dtype=np.uint8)
            for i, b in enumerate(data):  # building the rows; the encoders never loop over reports
                buf[i, : 8 * lens[i]] = np.frombuffer(bytes(b)[: 8 * lens[i]], dtype=np.uint8)
            self.words = buf.view("<u8").astype(np.uint64).reshape(len(data), width)
            self.avail = lens
        self.pos = np.zeros(len(self.words), dtype=np.int64)

    def __len__(self) -> int:
        return len(self.words)

    @property
    def consumed_bytes(self) -> np.ndarray:
        """Bytes each report has consumed so far: ``(n,)``."""
        return 8 * self.pos

    def take(self, rows: np.ndarray) -> np.ndarray:
        """The next word of each row in ``rows`` (uint64), advancing their cursors."""
        rows = np.asarray(rows, dtype=np.int64)
        short = self.pos[rows] >= self.avail[rows]
        if short.any():
            raise ValueError(f"random bytes exhausted for report {int(rows[np.argmax(short)])}")
        w = self.words[rows, self.pos[rows]]
        self.pos[rows] += 1
        return w

    def take_block(self, rows: np.ndarray, count: int) -> np.ndarray:
        """The next ``count`` words of each row: uint64 ``(len(rows), count)``."""
        rows = np.asarray(rows, dtype=np.int64)
        short = self.pos[rows] + count > self.avail[rows]
        if short.any():
            raise ValueError(f"random bytes exhausted for report {int(rows[np.argmax(short)])}")
        cols = self.pos[rows][:, None] + np.arange(count)[None, :]
        w = self.words[rows[:, None], cols]
        self.pos[rows] += count
        return w

    def uniform(self, m: int, rows: np.ndarray) -> np.ndarray:
        """An integer uniform on ``[0, m)`` per row (int64; ``1 <= m <= 2**63``), by masked rejection."""
        m = int(m)
        rows = np.asarray(rows, dtype=np.int64)
        if not 1 <= m <= 1 << 63:
            raise ValueError(f"uniform needs 1 <= m <= 2**63, got {m}")
        out = np.zeros(len(rows), dtype=np.uint64)
        if m == 1:
            return out.astype(np.int64)
        mask = np.uint64((1 << (m - 1).bit_length()) - 1)
        todo = np.arange(len(rows))
        while len(todo):
            x = self.take(rows[todo]) & mask
            ok = x < np.uint64(m)
            out[todo[ok]] = x[ok]
            todo = todo[~ok]
        return out.astype(np.int64)

    def bernoulli(self, threshold: int | np.ndarray, rows: np.ndarray) -> np.ndarray:
        """``(w >> 11) < T`` per row: boolean, probability ``T / 2**53``."""
        u = self.take(rows) >> np.uint64(11)
        return u < np.asarray(threshold, dtype=np.uint64)


def wire_params(oracle: FrequencyOracle) -> dict[str, Any]:
    """The integers a client needs to run ``oracle`` byte for byte (plus ``p``, ``q`` for reference)."""
    out: dict[str, Any] = {"mechanism": oracle.name, "d": oracle.d, "p": oracle.p, "q": oracle.q}
    if isinstance(oracle, OLH):
        if oracle.hash.p != 2:
            raise ValueError(f"{oracle!r}: the byte-driven procedure covers binary hash families only")
        out.update(g=oracle.g, family=oracle.family.name, m=oracle.hash.m, k=oracle.hash.k)
    elif isinstance(oracle, HadamardResponse):
        out["K"] = oracle.K
    elif isinstance(oracle, SubsetSelection):
        out["k"] = oracle.k
    if isinstance(oracle, (OUE, SUE)):
        out["T_p"], out["T_q"] = bernoulli_threshold(oracle.p), bernoulli_threshold(oracle.q)
    else:
        out["T_p"] = bernoulli_threshold(oracle.p)
    return out


def _grr_bytes(values: np.ndarray, size: int, t_p: int, ws: WordStream, rows: np.ndarray) -> np.ndarray:
    """GRR on ``[size]``: keep with ``bernoulli(T_p)``, else ``o = uniform(size - 1)``, ``o + (o >= v)``."""
    keep = ws.bernoulli(t_p, rows)
    out = values.astype(np.int64).copy()
    flip = np.flatnonzero(~keep)
    o = ws.uniform(size - 1, rows[flip])
    out[flip] = o + (o >= out[flip])
    return out


def gf2_hash_one(seed: int, value: int, m: int, k: int) -> int:
    """The ``gf2-affine`` hash of one value (pure-integer form of :class:`ldp.hashing.GF2AffineHash`):
    words ``w_j = splitmix64(seed + (j + 1) * GOLDEN)``, rows ``w_j & (2**m - 1)`` (``j < k``), offset
    ``w_k & (2**k - 1)``, bit ``j`` of ``h`` the parity of ``row_j & value``, then XOR the offset."""
    seeds = np.full(1, seed % (1 << 64), dtype=np.uint64)
    steps = (np.arange(1, k + 2, dtype=np.uint64) * GOLDEN).astype(np.uint64)
    with np.errstate(over="ignore"):
        words = [int(w) for w in splitmix64(seeds[:, None] + steps[None, :])[0]]
    h = 0
    for j in range(k):
        h |= (((words[j] & ((1 << m) - 1)) & value).bit_count() & 1) << j
    return h ^ (words[k] & ((1 << k) - 1))


def _ss_bytes(oracle: SubsetSelection, values: np.ndarray, t_p: int, ws: WordStream) -> np.ndarray:
    """Subset selection: ``include = bernoulli(T_p)``, then Floyd's sampling of ``c = k - include``
    distinct indices of ``[0, d - 1)`` (for ``j = d-1-c .. d-2``: ``t = uniform(j + 1)``, take ``j`` if
    ``t`` is already taken, else ``t``), index ``x`` meaning value ``x + (x >= v)``; plus ``v`` when
    included; sorted ascending."""
    n, k, d = len(values), oracle.k, oracle.d
    rows = np.arange(n)
    include = ws.bernoulli(t_p, rows)
    out = np.empty((n, k), dtype=np.int64)
    big = d - 1
    for inc in (True, False):
        sel = rows[include == inc]
        c = k - 1 if inc else k
        chosen = np.zeros((len(sel), c), dtype=np.int64)
        for step, j in enumerate(range(big - c, big)):
            t = ws.uniform(j + 1, sel)
            taken = (chosen[:, :step] == t[:, None]).any(axis=1)
            chosen[:, step] = np.where(taken, j, t)
        v = values[sel][:, None]
        chosen = chosen + (chosen >= v)
        if inc:
            chosen = np.concatenate([chosen, v], axis=1)
        out[sel] = np.sort(chosen, axis=1)
    return out


def encode_bytes(
    oracle: FrequencyOracle,
    values: Any,
    random: WordStream | Sequence[bytes] | np.ndarray,
    seeds: Any = None,
) -> tuple[Reports, np.ndarray]:
    """Encodes ``values`` with ``oracle``'s wire procedure from explicit random bytes.

    Args:
        oracle: one of :data:`BYTE_MECHANISMS` (OLH / BLH with a binary hash family).
        values: integers in ``[0, d)``, one per report.
        random: the reports' random bytes (see :class:`WordStream`), or a stream already in use.
        seeds: OLH, BLH: the public 64-bit hash seeds (uint64 ``(n,)``); the procedure never draws them
            from ``random`` (a real client reads them from its cryptographic source separately).

    Returns:
        ``(reports, consumed)``: the reports and the bytes each consumed.
    """
    vals = check_values(values, oracle.d)
    ws = random if isinstance(random, WordStream) else WordStream(random)
    if len(ws) != len(vals):
        raise ValueError(f"{len(ws)} random byte strings for {len(vals)} values")
    rows = np.arange(len(vals))
    params = wire_params(oracle)
    t_p = params["T_p"]
    if isinstance(oracle, OLH):  # BLH too
        if seeds is None:
            raise ValueError(f"{oracle.name} needs the public seeds")
        sd = np.asarray(seeds, dtype=np.uint64).reshape(-1)
        if len(sd) != len(vals):
            raise ValueError(f"{len(sd)} seeds for {len(vals)} values")
        h = oracle.hash.hash(sd, vals)
        reports = Reports(seeds=sd.copy(), values=_grr_bytes(h, oracle.g, t_p, ws, rows))
    elif seeds is not None:
        raise ValueError(f"{oracle.name} takes no seeds")
    elif isinstance(oracle, GRR):
        reports = Reports(values=_grr_bytes(vals, oracle.d, t_p, ws, rows))
    elif isinstance(oracle, HadamardResponse):
        want = ws.bernoulli(t_p, rows)
        y = ws.uniform(oracle.K, rows).astype(np.uint64)
        w = (vals + 1).astype(np.uint64)
        in_set = (np.bitwise_count(y & w) & np.uint8(1)) == 0
        low = w & (~w + np.uint64(1))
        reports = Reports(values=np.where(in_set != want, y ^ low, y).astype(np.int64))
    elif isinstance(oracle, (OUE, SUE)):
        u = ws.take_block(rows, oracle.d) >> np.uint64(11)
        thr = np.where(np.arange(oracle.d)[None, :] == vals[:, None], params["T_p"], params["T_q"])
        bits = u < thr.astype(np.uint64)
        reports = Reports(bits=np.packbits(bits, axis=1, bitorder="little"))
    elif isinstance(oracle, SubsetSelection):
        reports = Reports(items=_ss_bytes(oracle, vals, t_p, ws))
    else:
        raise ValueError(f"no byte-driven procedure for {oracle!r}; known: {BYTE_MECHANISMS}")
    return reports, ws.consumed_bytes.copy()


def bytes_needed(oracle: FrequencyOracle) -> int:
    """Random bytes one report consumes at most when no rejection redraw happens (a buffer size hint)."""
    if isinstance(oracle, (OUE, SUE)):
        return 8 * oracle.d
    if isinstance(oracle, SubsetSelection):
        return 8 * (1 + oracle.k)
    if isinstance(oracle, (GRR, OLH, BLH, HadamardResponse)):
        return 16
    raise ValueError(f"no byte-driven procedure for {oracle!r}")


# ------------------------------------------------------------------------------------------------
# Memoized mechanisms (docs/wire_format.md, section 6)
# ------------------------------------------------------------------------------------------------
#: Memoized mechanisms with a byte-driven client procedure.
MEMO_BYTE_MECHANISMS = byte_mechanisms("memo", MEMO_MECHANISMS)


def _threshold_or_none(p: float) -> int | None:
    """``T`` of a sampled probability, ``None`` for ``p = 1`` (the stage draws nothing)."""
    return None if p >= 1.0 else bernoulli_threshold(p)


def memo_wire_params(oracle: MemoizedOracle) -> dict[str, Any]:
    """The integers a client needs to run a memoized ``oracle`` byte for byte: the permanent thresholds
    ``T_perm_p`` (and ``T_perm_q``, rappor), the instantaneous ``T_inst`` (``None``: no instantaneous
    stage, ``epsilon_1 = epsilon``), the structure (``d``; ``g, m, k`` for local hashing) and, for
    reference, the composed ``p``, ``q`` and the stage probabilities."""
    if not isinstance(oracle, (MemoGRR, RAPPOR, MemoOLH, LOLOHA)):
        raise ValueError(f"no byte-driven procedure for {oracle!r}; known: {MEMO_BYTE_MECHANISMS}")
    out: dict[str, Any] = {"mechanism": oracle.name, "d": oracle.d, "p": oracle.p, "q": oracle.q,
                           "perm_p": oracle.perm_p, "perm_q": oracle.perm_q, "inst_p": oracle.inst_p,
                           "T_perm_p": bernoulli_threshold(oracle.perm_p),
                           "T_inst": _threshold_or_none(oracle.inst_p)}
    if isinstance(oracle, RAPPOR):
        out["T_perm_q"] = bernoulli_threshold(oracle.perm_q)
    if isinstance(oracle, (MemoOLH, LOLOHA)):
        if oracle.hash.p != 2:
            raise ValueError(f"{oracle!r}: the byte-driven procedure covers binary hash families only")
        out.update(g=oracle.g, family=oracle.base.family.name, m=oracle.hash.m, k=oracle.hash.k)
    return out


def _memo_message(label: str, task_id: str, key: int, block: int) -> bytes:
    t = task_id.encode("utf-8")
    return (PRF_DOMAIN + b"\x00" + label.encode("ascii") + b"\x00" + len(t).to_bytes(2, "big") + t + b"\x00"
            + key.to_bytes(8, "big") + block.to_bytes(4, "big"))


def memo_prf_words(secret: bytes, task_id: str, label: str, key: int, count: int) -> list[int]:
    """``count`` 64-bit words: block ``b`` is ``HMAC-SHA256(secret, message(label, task_id, key, b))``
    read as four **big-endian** words (the byte order of :func:`ldp.longitudinal.memo.memo_words_hmac`)."""
    if len(secret) < 16:
        raise ValueError("secret must be at least 16 bytes")
    if not 0 <= key < 1 << 64:
        raise ValueError(f"memoization key must be in [0, 2**64), got {key}")
    raw = b"".join(hmac.new(bytes(secret), _memo_message(label, task_id, key, b), hashlib.sha256).digest()
                   for b in range((count + 3) // 4))
    return [int.from_bytes(raw[8 * i : 8 * i + 8], "big") for i in range(count)]


def memo_report_bytes(
    oracle: MemoizedOracle, secret: bytes, task_id: str, value: int, random: bytes
) -> tuple[Reports, int, dict[str, Any]]:
    """One report of one user of a memoized ``oracle`` from its secret and the instantaneous random bytes.

    Permanent step (a function of the secret; words of :func:`memo_prf_words`, ``u(w) = w >> 11``):

    * memo-grr: words ``w0, w1`` of key ``v``: the memo is ``v`` if ``u(w0) < T_perm_p``, else
      ``o + (o >= v)`` with ``o = w1 mod (d - 1)``;
    * rappor: words ``w_0 .. w_{d-1}`` of key ``v``: bit ``j`` is ``u(w_j) < (T_perm_p if j = v else
      T_perm_q)``;
    * memo-olh, loloha: the seed is word 0 of label ``"seed"``, key 0; ``h = h_seed(v)``; the key is ``v``
      (memo-olh) or ``h`` (loloha); from its words ``w0, w1``: GRR on ``[g]`` of ``h`` as for memo-grr.

    Instantaneous step (section 3's procedure on ``random``): GRR on ``[d]`` / ``[g]`` of the memo at
    ``T_inst`` (``bernoulli``, then ``uniform(size - 1)`` when not kept); rappor: per bit ``j``,
    ``keep = bernoulli(T_inst)``, the reported bit is the memo's bit when kept, else its complement. With
    ``T_inst = None`` nothing is read and the report is the memo.

    Returns ``(report, bytes consumed, info)`` with ``info`` the ``memo_key``, ``permanent`` response and
    (local hashing) ``seed_u64``, ``hash``.
    """
    params = memo_wire_params(oracle)
    v = int(check_values(np.asarray([value]), oracle.d)[0])
    ws = WordStream([bytes(random)])
    if isinstance(oracle, RAPPOR):
        reports, info = _memo_rappor_report(oracle.d, secret, task_id, v, params, ws)
    else:
        reports, info = _memo_grr_report(oracle, secret, task_id, v, params, ws)
    return reports, int(ws.consumed_bytes[0]), info


def _memo_rappor_report(
    d: int, secret: bytes, task_id: str, v: int, params: dict[str, Any], ws: WordStream
) -> tuple[Reports, dict[str, Any]]:
    """rappor's report: the permanent bits from the secret, each kept or flipped at ``T_inst``."""
    words = memo_prf_words(secret, task_id, "memo", v, d)
    memo = np.array([(w >> 11) < (params["T_perm_p"] if j == v else params["T_perm_q"])
                     for j, w in enumerate(words)], dtype=bool)  # fmt: skip
    t_inst = params["T_inst"]
    if t_inst is None:
        bits = memo
    else:
        keep = (ws.take_block(np.zeros(1, dtype=np.int64), d)[0] >> np.uint64(11)) < np.uint64(t_inst)
        bits = memo == keep
    info = {"memo_key": v, "permanent": memo.astype(int).tolist()}
    return Reports(bits=np.packbits(bits[None, :], axis=1, bitorder="little")), info


def _memo_grr_report(
    oracle: MemoizedOracle, secret: bytes, task_id: str, v: int, params: dict[str, Any], ws: WordStream
) -> tuple[Reports, dict[str, Any]]:
    """memo-grr, memo-olh and loloha: GRR on ``[d]`` (or on ``[g]`` of the hashed value) from the secret,
    then GRR at ``T_inst``; the local-hashing ones report their seed."""
    info: dict[str, Any] = {}
    seed = None
    if isinstance(oracle, (MemoOLH, LOLOHA)):
        seed = memo_prf_words(secret, task_id, "seed", 0, 1)[0]
        size = oracle.g
        start = gf2_hash_one(seed, v, params["m"], params["k"])
        key = start if isinstance(oracle, LOLOHA) else v
        info.update(seed_u64=str(seed), hash=start)
    else:
        size, start, key = oracle.d, v, v
    w0, w1 = memo_prf_words(secret, task_id, "memo", key, 2)
    if (w0 >> 11) < params["T_perm_p"]:
        memo_value = start
    else:
        o = w1 % (size - 1)
        memo_value = o + (o >= start)
    info.update(memo_key=key, permanent=memo_value)
    t_inst = params["T_inst"]
    if t_inst is None:
        y = np.array([memo_value], dtype=np.int64)
    else:
        y = _grr_bytes(np.array([memo_value], dtype=np.int64), size, t_inst, ws, np.zeros(1, dtype=np.int64))
    if seed is None:
        return Reports(values=y), info
    return Reports(seeds=np.array([seed], dtype=np.uint64), values=y), info


# ------------------------------------------------------------------------------------------------
# Numeric mechanisms (docs/wire_format.md, section 7)
# ------------------------------------------------------------------------------------------------
#: Numeric mechanisms (:mod:`ldp.numeric.mechanisms`) with a byte-driven client procedure.
NUMERIC_BYTE_MECHANISMS = byte_mechanisms("numeric", NUMERIC_MECHANISMS)
_TWO_M53 = 2.0**-53


def _grid_params(g: Any) -> dict[str, Any]:
    if isinstance(g, SlidingWindow):
        return {"sampler": "sliding-window", "N": g.n_steps, "s": g.step, "w": g.width, "h": g.high,
                "l": g.low, "M": g.cells, "S": g.total}
    if isinstance(g, TwoPoint):
        return {"sampler": "two-point", "N": g.n_steps, "T0": g.base, "d": g.slope, "S": g.total}
    return {"sampler": "block-geometric", "N": g.n_steps, "T": g.threshold,
            "Z_max": g.max_block(LAPLACE_TAIL)}


def _unit_double(ws: WordStream, rows: np.ndarray) -> np.ndarray:
    """``(w >> 11) * 2**-53`` of the next word per row: a double uniform on ``[0, 1)`` (sparse vectors)."""
    return (ws.take(rows) >> np.uint64(11)).astype(np.float64) * _TWO_M53


def numeric_wire_params(mech: NumericMechanism) -> dict[str, Any]:
    """The integers a client needs to run a numeric mechanism byte for byte (schema version 3, the grid
    wire: :mod:`ldp.numeric.grid`): the input grid ``N`` and each sampler's integers; ``messages`` the range
    of the integer a report carries. Nothing a client computes in floating point decides a message."""
    out: dict[str, Any] = {"mechanism": mech.name, "epsilon": mech.epsilon, "low": mech.low,
                           "high": mech.high, "moments": mech.moments, "schema_version": 3,
                           "messages": list(mech.message_range())}
    if mech.moments == 2:
        out["T_slot"] = bernoulli_threshold(0.5)
    if isinstance(mech, Hybrid):
        out.update(T_alpha=mech.alpha_threshold, pm=_grid_params(mech._pm.grid),
                   duchi=_grid_params(mech._duchi.grid))
    elif isinstance(mech, (Duchi, Piecewise, LaplaceMean, OneBitMean, SquareWaveNumeric)):
        out["grid"] = _grid_params(mech.grid)
    else:
        raise ValueError(f"no byte-driven procedure for {mech!r}; known: {NUMERIC_BYTE_MECHANISMS}")
    return out


def numeric_encode_bytes(
    mech: NumericMechanism, values: Any, random: WordStream | Sequence[bytes] | np.ndarray
) -> tuple[Reports, np.ndarray]:
    """Encodes real ``values`` with a numeric mechanism's wire procedure (schema version 3) from explicit
    random bytes; every draw is ``uniform(m)`` (section 3's masked rejection) of the report's own words.

    The value is clipped and mapped exactly as :meth:`NumericMechanism.encode`: ``u = (min(max(x, low),
    high) - low) / (high - low)``, ``t = 2 u - 1``; with ``moments = 2`` first ``slot = bernoulli(T_slot)``
    and ``t = 2 u u - 1`` for slot 1. Then:

    1. grid: ``p = N (t + 1) / 2`` (clipped to ``[0, N]``), ``j = floor(p) + 1[uniform(2^53) 2^-53 < p -
       floor(p)]``;
    2. message (integers only):

       * sliding window (piecewise, square-wave): ``U = uniform(S)``, ``a = j s l``: ``m = U // l`` if
         ``U < a``; ``j s + (U - a) // h`` if ``U < a + w h``; else ``j s + w + (U - a - w h) // l``;
       * two-point (duchi, one-bit-mean): ``m = 1[uniform(S) < T0 + j d]``;
       * hybrid: ``pm = 1[uniform(2^62) < T_alpha]`` (nothing read when ``T_alpha = 0``), then the
         two-point message plus ``M`` (``pm.M``) or the sliding-window message;
       * block geometric (laplace): ``G1`` = the number of ``uniform(2^62) < T`` before the first that is
         not, then ``G2`` the same, then ``V = uniform(N)``; ``m = j + N (G1 - G2) + V``.

    The report carries ``m`` as an integer-valued double in ``reals`` (one-bit-mean: the bit in
    ``value``, ``2 bit + slot`` with two moments). Returns ``(reports, consumed bytes per report)``.
    """
    pr = numeric_wire_params(mech)
    u = to_unit(values, mech.low, mech.high)
    ws = random if isinstance(random, WordStream) else WordStream(random)
    if len(ws) != len(u):
        raise ValueError(f"{len(ws)} random byte strings for {len(u)} values")
    rows = np.arange(len(u))
    slot = None
    if mech.moments == 2:
        slot = ws.bernoulli(pr["T_slot"], rows).astype(np.int64)
        t = np.where(slot == 1, 2.0 * u * u - 1.0, 2.0 * u - 1.0)
    else:
        t = 2.0 * u - 1.0

    def uniform(m: int, idx: np.ndarray) -> np.ndarray:
        return ws.uniform(m, rows[np.asarray(idx, dtype=np.int64)])

    m = mech.messages(t, uniform)
    if isinstance(mech, OneBitMean):
        reals, values_out = None, m
    else:
        reals, values_out = m.astype(np.float64), None
    if slot is not None:
        values_out = slot if values_out is None else values_out * 2 + slot
    return Reports(reals=reals, values=values_out), ws.consumed_bytes.copy()


# ------------------------------------------------------------------------------------------------
# Sparse vectors (docs/wire_format.md, section 8)
# ------------------------------------------------------------------------------------------------
#: Sparse-vector mechanisms (:data:`ldp.sparse.mechanisms.SPARSE_MECHANISMS`) with a byte-driven client.
SPARSE_BYTE_MECHANISMS = byte_mechanisms("sparse", SPARSE_MECHANISM_CLASSES)
_M64 = (1 << 64) - 1
_GOLDEN_INT = 0x9E3779B97F4A7C15
_SPARSE_TAG_BIN = 0x6A09E667F3BCC909
_SPARSE_TAG_SIGN = 0xBB67AE8584CAA73B
_SPARSE_PI_MULT = (0x9E3779B97F4A7C15, 0xD6E8FEB86659FD93, 0xC2B2AE3D27D4EB4F)


def _splitmix64_int(z: int) -> int:
    z &= _M64
    z ^= z >> 30
    z = (z * 0xBF58476D1CE4E5B9) & _M64
    z ^= z >> 27
    z = (z * 0x94D049BB133111EB) & _M64
    return z ^ (z >> 31)


def sparse_item_bits(item: int, m: int) -> int:
    """``pi(x)`` of the sparse gf2-affine family (pure-integer form of :func:`ldp.sparse.hashes.item_bits`):
    ``x mod 2**m``, then three rounds of ``x = x * c mod 2**m``, ``x ^= x >> ceil(m / 2)``."""
    mask, shift = (1 << m) - 1, (m + 1) // 2
    x = int(item) & mask
    for c in _SPARSE_PI_MULT:
        x = (x * c) & mask
        x ^= x >> shift
    return x


def sparse_hash_one(family: str, seed: int, item: int, b: int, d: int) -> tuple[int, int]:
    """``(bin, sign)`` of one item under one public seed: the pure-integer reference of
    :func:`ldp.sparse.hashes.bins_signs` (``docs/wire_format.md`` section 8)."""
    seed, item = int(seed) & _M64, int(item)
    if family == "gf2-affine":
        r = int(b).bit_length() - 1
        if 1 << r != b:
            raise ValueError(f"gf2-affine needs a power-of-two number of bins, got b = {b}")
        m = max(1, (int(d) - 1).bit_length())
        w = [_splitmix64_int(seed + (j + 1) * _GOLDEN_INT) for j in range(r + 2)]
        u = sparse_item_bits(item, m)
        mask = (1 << m) - 1
        h = w[r + 1] & ((1 << r) - 1)
        for j in range(r):
            h ^= ((w[j] & mask & u).bit_count() & 1) << j
        sign_bit = ((w[r] & mask & u).bit_count() & 1) ^ (w[r + 1] >> 63)
        return h, 1 - 2 * sign_bit
    if family == "mix64":
        zb = _splitmix64_int(seed ^ _splitmix64_int(item ^ _SPARSE_TAG_BIN))
        zs = _splitmix64_int(seed ^ _splitmix64_int(item ^ _SPARSE_TAG_SIGN))
        return ((zb >> 32) * b) >> 32, 1 - 2 * (zs >> 63)
    if family == "blake2b":
        key = seed.to_bytes(8, "little")
        dig = hashlib.blake2b(item.to_bytes(8, "little"), key=key, digest_size=16).digest()
        z = int.from_bytes(dig[:8], "little")
        return ((z >> 32) * b) >> 32, 1 - 2 * (dig[8] & 1)
    raise ValueError(f"unknown sparse hash family {family!r}")


def _duchi_a(epsilon: float) -> float:
    """``a = (e - 1) / (2 (e + 1))``, ``e = exp(eps)``: Duchi's bit is +1 with probability ``1/2 + t a``."""
    e = math.exp(epsilon)
    return (e - 1.0) / (2.0 * (e + 1.0))


def sparse_wire_params(mech: SVME | KFold | Sampling | Gaussian | Harmony | PCKV) -> dict[str, Any]:
    """The integers and doubles a client needs to run a sparse-vector mechanism byte for byte (doubles as
    :mod:`ldp.sparse` computes them; ``T_*`` are :func:`bernoulli_threshold` integers)."""
    if isinstance(mech, SVME):
        p = mech.params
        out: dict[str, Any] = {"mechanism": "svme", "epsilon": p.epsilon, "d": p.domain_size, "k": p.sparsity,
                               "values": p.values, "family": p.hash_family, "bins": p.bins, "noise": p.noise,
                               "eta": p.eta, "code_scale": p.code_scale, "max_code": p.max_code}
        if p.hash_family == "gf2-affine":
            out["m"] = domain_bits(p.domain_size)
        if p.noise == "laplace":
            out.update(scale=p.scale, trunc=p.trunc, grid=p.grid)
        elif p.noise == "discrete-laplace":
            out["T_geo"] = bernoulli_threshold(math.exp(-p.epsilon / p.Delta))
        else:
            out["duchi_a"] = _duchi_a(p.epsilon)
        return out
    if not isinstance(mech, (KFold, Sampling, Gaussian, Harmony, PCKV)):
        raise ValueError(f"no byte-driven procedure for {mech!r}; known: {SPARSE_BYTE_MECHANISMS}")
    out = {"mechanism": mech.name, "epsilon": mech.epsilon, "d": mech.d, "k": mech.k, "values": mech.values}
    if isinstance(mech, (KFold, Sampling)):
        out["family"] = mech.hash_family
        if mech.hash_family == "gf2-affine":
            out["m"] = domain_bits(mech.d)
    if isinstance(mech, Gaussian):
        out["sigma"] = mech.sigma
    elif isinstance(mech, PCKV):
        out.update(d_prime=mech.dp, a=mech.a, p=mech.p, T_a=bernoulli_threshold(mech.a),
                   T_p=bernoulli_threshold(mech.p), T_half=bernoulli_threshold(0.5), unit=mech.unit)
    else:
        bit_eps = mech.bit_epsilon if isinstance(mech, KFold) else mech.epsilon
        out.update(bit_epsilon=bit_eps, duchi_a=_duchi_a(bit_eps), unit=mech.unit)
    return out


def _uniform_rows(ws: WordStream, m: np.ndarray, rows: np.ndarray) -> np.ndarray:
    """``uniform(m_i)`` per row with its own ``m_i`` (``1 <= m_i <= 2**63``; ``m_i = 1`` reads nothing)."""
    m = np.asarray(m, dtype=np.uint64)
    rows = np.asarray(rows, dtype=np.int64)
    mask = m - np.uint64(1)  # smeared to 2**L - 1, L the bit length of m - 1
    for sh in (1, 2, 4, 8, 16, 32):
        mask |= mask >> np.uint64(sh)
    out = np.zeros(len(rows), dtype=np.uint64)
    todo = np.flatnonzero(m > np.uint64(1))
    while len(todo):
        x = ws.take(rows[todo]) & mask[todo]
        ok = x < m[todo]
        out[todo[ok]] = x[ok]
        todo = todo[~ok]
    return out


def _sparse_clean(vectors: SparseVectors, d: int, k: int, values: str, ws: WordStream):
    """Input cleaning from the random words: ids checked, values clipped to [-1, 1] (real) or checked to
    be 0 / 1 (binary), zeros dropped, entries in ascending item order; a client with ``m > k`` entries
    keeps ``k`` by a partial Fisher-Yates shuffle of its sorted entries (``for i < k: j = i +
    uniform(m - i)``, swap ``i`` and ``j``), the kept ones again in ascending item order.

    Returns ``(items uint64 (n, k), vals float64 (n, k), nnz (n,))`` (padding: item 0, value 0)."""
    n = vectors.n
    user = vectors.user_index()
    items = np.asarray(vectors.items, dtype=np.uint64)
    vals = np.asarray(vectors.values, dtype=np.float64)
    if items.size and int(items.max()) >= d:
        j = int(np.argmax(items >= np.uint64(d)))
        raise ValueError(f"client {user[j]}: item id {int(items[j])} outside [0, {d})")
    order = np.lexsort((items, user))
    user, items, vals = user[order], items[order], vals[order]
    dup = (user[1:] == user[:-1]) & (items[1:] == items[:-1])
    if dup.any():
        j = int(np.argmax(dup)) + 1
        raise ValueError(f"client {user[j]}: item {int(items[j])} appears more than once")
    if values == "binary":
        bad = (vals != 0.0) & (vals != 1.0)
        if bad.any():
            j = int(np.argmax(bad))
            raise ValueError(f"client {user[j]}: binary rounds take values 0 or 1, got {vals[j]}")
    else:
        vals = np.clip(vals, -1.0, 1.0)
    nz = vals != 0.0
    user, items, vals = user[nz], items[nz], vals[nz]
    counts = np.bincount(user, minlength=n)
    width = max(int(counts.max()) if n else 0, k)
    starts = np.concatenate(([0], np.cumsum(counts)))[:-1]
    pos = np.arange(user.size) - starts[user]
    it = np.zeros((n, width), dtype=np.uint64)
    va = np.zeros((n, width), dtype=np.float64)
    it[user, pos], va[user, pos] = items, vals
    over = np.flatnonzero(counts > k)
    if len(over):
        idx = np.broadcast_to(np.arange(width), (len(over), width)).copy()
        r = np.arange(len(over))
        for i in range(k):
            j = i + _uniform_rows(ws, counts[over] - i, over).astype(np.int64)
            a, b = idx[r, i].copy(), idx[r, j].copy()
            idx[r, i], idx[r, j] = b, a
        keep = np.sort(idx[:, :k], axis=1)
        it[over, :k] = np.take_along_axis(it[over], keep, axis=1)
        va[over, :k] = np.take_along_axis(va[over], keep, axis=1)
    return it[:, :k].copy(), va[:, :k].copy(), np.minimum(counts, k)


def _nonzero_unit(ws: WordStream, rows: np.ndarray) -> np.ndarray:
    """``U`` of the next word per row, redrawn from the following word while ``U = 0``."""
    u = _unit_double(ws, rows)
    todo = np.flatnonzero(u == 0.0)
    while len(todo):
        u[todo] = _unit_double(ws, rows[todo])
        todo = todo[u[todo] == 0.0]
    return u


def _geometric_count(ws: WordStream, threshold: int, rows: np.ndarray) -> np.ndarray:
    """Per row, the ``bernoulli(T)`` successes before the first failure: ``P[G = j] = p^j (1 - p)``."""
    count = np.zeros(len(rows), dtype=np.int64)
    todo = np.arange(len(rows))
    while len(todo):
        more = ws.bernoulli(threshold, rows[todo])
        count[todo[more]] += 1
        todo = todo[more]
    return count


def _duchi_bit(ws: WordStream, t: np.ndarray, a: float, rows: np.ndarray) -> np.ndarray:
    """``+1`` if ``U < 0.5 + t a`` else ``-1`` (int64)."""
    return np.where(_unit_double(ws, rows) < 0.5 + t * a, 1, -1).astype(np.int64)


def _svme_codes(pr: dict[str, Any], c: np.ndarray, ws: WordStream, rows: np.ndarray) -> np.ndarray:
    """The noisy, discretised codes of the bin sums ``c`` (n, b): bin by bin, in bin order."""
    codes = np.zeros(c.shape, dtype=np.int64)
    for j in range(c.shape[1]):
        cj = c[:, j]
        if pr["noise"] == "laplace":
            u = _nonzero_unit(ws, rows)
            s = pr["scale"]
            with np.errstate(divide="ignore"):
                noisy = np.where(u >= 0.5, cj - s * np.log(2.0 - u - u), cj + s * np.log(u + u))
            noisy = np.minimum(np.maximum(noisy, -pr["trunc"]), pr["trunc"])
            x = noisy / pr["grid"]
            f = np.floor(x)
            up = _unit_double(ws, rows) < x - f
            code = f.astype(np.int64) + up
        elif pr["noise"] == "discrete-laplace":
            g1 = _geometric_count(ws, pr["T_geo"], rows)
            g2 = _geometric_count(ws, pr["T_geo"], rows)
            code = np.rint(cj).astype(np.int64) + g1 - g2
        else:
            code = _duchi_bit(ws, cj / pr["eta"], pr["duchi_a"], rows)
        codes[:, j] = np.clip(code, -pr["max_code"], pr["max_code"])
    return codes


def _sparse_byte_inputs(
    mech: Any, pr: dict[str, Any], random: WordStream | Sequence[bytes] | np.ndarray, seeds: Any, n: int
) -> tuple[WordStream, np.ndarray | None]:
    """The reports' word stream and the public seeds (uint64 ``(n,)``; ``None`` for unseeded mechanisms),
    checked against ``n`` vectors and against whether ``mech`` takes seeds."""
    ws = random if isinstance(random, WordStream) else WordStream(random)
    if len(ws) != n:
        raise ValueError(f"{len(ws)} random byte strings for {n} vectors")
    sd = None
    if isinstance(mech, (SVME, KFold, Sampling)):
        if seeds is None:
            raise ValueError(f"{pr['mechanism']} needs the public seeds")
        sd = np.asarray(seeds, dtype=np.uint64).reshape(-1)
        if len(sd) != n:
            raise ValueError(f"{len(sd)} seeds for {n} vectors")
    elif seeds is not None:
        raise ValueError(f"{pr['mechanism']} takes no seeds")
    return ws, sd


def _svme_byte_reports(
    pr: dict[str, Any], ws: WordStream, sd: np.ndarray, items: np.ndarray, vals: np.ndarray, held: np.ndarray,
    rows: np.ndarray,
) -> Reports:
    """SVME: clipped signed bin sums in ascending item order, then one noisy code per bin."""
    n, k = held.shape
    b = pr["bins"]
    h, s = bins_signs(pr["family"], sd, items, b, pr["d"])
    c = np.zeros((n, b), dtype=np.float64)
    for i in range(k):  # ascending item order within each report
        sel = np.flatnonzero(held[:, i])
        c[sel, h[sel, i]] += s[sel, i] * vals[sel, i]
    if pr["eta"] is not None:
        c = np.minimum(np.maximum(c, -pr["eta"]), pr["eta"])
    return Reports(seeds=sd.copy(), reals=_svme_codes(pr, c, ws, rows).astype(np.float64))


def _kfold_sampling_byte_reports(
    mech: KFold | Sampling, pr: dict[str, Any], ws: WordStream, sd: np.ndarray, items: np.ndarray,
    vals: np.ndarray, nnz: np.ndarray, held: np.ndarray, rows: np.ndarray,
) -> Reports:
    """KFold: entries shuffled into slots, one Duchi bit per slot; Sampling: one sampled entry's Duchi bit."""
    n, k = held.shape
    _, s = bins_signs(pr["family"], sd, items, 1, pr["d"])
    sv = np.where(held, s * vals, 0.0)
    if isinstance(mech, KFold):
        slots = np.broadcast_to(np.arange(k), (n, k)).copy()
        for i in range(k):
            sel = np.flatnonzero(nnz > i)
            j = i + _uniform_rows(ws, np.full(len(sel), k - i), sel).astype(np.int64)
            a, bb = slots[sel, i].copy(), slots[sel, j].copy()
            slots[sel, i], slots[sel, j] = bb, a
        t = np.zeros((n, k))
        np.put_along_axis(t, slots, sv, axis=1)  # padding entries carry 0.0 into the unused slots
        bits = np.stack([_duchi_bit(ws, t[:, m], pr["duchi_a"], rows) for m in range(k)], axis=1)
    else:
        u = ws.uniform(k, rows)
        t = np.where(u < nnz, sv[rows, np.minimum(u, k - 1)], 0.0)
        bits = _duchi_bit(ws, t, pr["duchi_a"], rows)[:, None]
    return Reports(seeds=sd.copy(), reals=bits.astype(np.float64))


def _harmony_byte_reports(
    pr: dict[str, Any], ws: WordStream, items: np.ndarray, vals: np.ndarray, held: np.ndarray,
    rows: np.ndarray,
) -> Reports:
    """Harmony: a uniform coordinate ``j`` and the Duchi bit of its value (0 when not held)."""
    j = ws.uniform(pr["d"], rows).astype(np.uint64)
    hit = held & (items == j[:, None])
    t = np.where(hit, vals, 0.0).sum(axis=1)
    bit = _duchi_bit(ws, t, pr["duchi_a"], rows)
    return Reports(values=j.astype(np.int64), reals=bit.astype(np.float64)[:, None])


def _pckv_byte_reports(
    pr: dict[str, Any], ws: WordStream, items: np.ndarray, vals: np.ndarray, nnz: np.ndarray, rows: np.ndarray
) -> Reports:
    """PCKV: a sampled (or dummy) key-value pair, its value as a bit, then key-value perturbation."""
    d, k = pr["d"], pr["k"]
    u = ws.uniform(k, rows)
    real = u < nnz
    uc = np.minimum(u, k - 1)
    key = np.where(real, items[rows, uc], np.uint64(0)).astype(np.uint64)
    val = np.where(real, vals[rows, uc], 0.0)
    dummy = np.flatnonzero(~real)
    key[dummy] = np.uint64(d) + ws.uniform(k, dummy).astype(np.uint64)
    bit = np.where(_unit_double(ws, rows) < (1.0 + val) / 2.0, 1, -1).astype(np.int64)
    keep = ws.bernoulli(pr["T_a"], rows)
    out_key, out_bit = key.copy(), bit.copy()
    kept, moved = np.flatnonzero(keep), np.flatnonzero(~keep)
    same = ws.bernoulli(pr["T_p"], kept)
    out_bit[kept] = np.where(same, bit[kept], -bit[kept])
    o = ws.uniform(pr["d_prime"] - 1, moved).astype(np.uint64)
    out_key[moved] = o + (o >= key[moved]).astype(np.uint64)
    out_bit[moved] = np.where(ws.bernoulli(pr["T_half"], moved), 1, -1)
    return Reports(values=out_key.astype(np.int64), reals=out_bit.astype(np.float64)[:, None])


def _gaussian_byte_reports(
    pr: dict[str, Any], ws: WordStream, items: np.ndarray, vals: np.ndarray, held: np.ndarray,
    rows: np.ndarray,
) -> Reports:
    """Gaussian: the dense vector plus ``sigma`` times polar-method normals, rounded to float32."""
    n, k = held.shape
    d = pr["d"]
    dense = np.zeros((n, d))
    rr = np.repeat(rows[:, None], k, axis=1)
    dense[rr[held], items[held].astype(np.int64)] = vals[held]
    z = np.zeros((n, d + 1))
    for pair in range((d + 1) // 2):
        x, y = np.zeros(n), np.zeros(n)
        todo = rows
        while len(todo):
            x[todo] = 2.0 * _unit_double(ws, todo) - 1.0
            y[todo] = 2.0 * _unit_double(ws, todo) - 1.0
            s2 = x[todo] * x[todo] + y[todo] * y[todo]
            todo = todo[(s2 >= 1.0) | (s2 == 0.0)]
        s2 = x * x + y * y
        f = np.sqrt(-2.0 * np.log(s2) / s2)
        z[:, 2 * pair], z[:, 2 * pair + 1] = x * f, y * f
    out = (pr["sigma"] * z[:, :d] + dense).astype(np.float32).astype(np.float64)
    return Reports(reals=out)


def sparse_encode_bytes(
    mech: SVME | KFold | Sampling | Gaussian | Harmony | PCKV,
    vectors: SparseVectors,
    random: WordStream | Sequence[bytes] | np.ndarray,
    seeds: Any = None,
) -> tuple[Reports, np.ndarray]:
    """Encodes sparse vectors with a sparse mechanism's wire procedure from explicit random bytes.

    Args:
        mech: one of :data:`SPARSE_BYTE_MECHANISMS` (:func:`ldp.sparse.mechanisms.make_sparse_mechanism`).
        vectors: a :class:`ldp.sparse.vectors.SparseVectors` batch, one vector per report.
        random: the reports' random bytes (see :class:`WordStream`).
        seeds: svme, kfold, sampling: the public 64-bit seeds (uint64 ``(n,)``), never drawn from
            ``random``; the others take none.

    Steps (``docs/wire_format.md`` section 8): input cleaning (:func:`_sparse_clean`), then

    * svme: bin sums ``C[h(x)] += s(x) v`` in ascending item order, clipped to ``[-eta, eta]``; per bin:
      Laplace (``U`` redrawn while 0; ``C - scale log(2 - U - U)`` if ``U >= 0.5``, else ``C + scale
      log(U + U)``), clipped to ``[-R, R]``, ``x = B / grid``, ``floor(x) + (U < x - floor(x))``; discrete
      Laplace ``C + G1 - G2`` (geometric counts of ``bernoulli(T_geo)``); Duchi ``+-1`` at ``t = C / eta``;
      every code clipped to ``[-max_code, max_code]``;
    * kfold: the entries go to slots by a partial Fisher-Yates shuffle of ``[0, k)`` (``for i < nnz: j =
      i + uniform(k - i)``, swap; entry ``i`` in slot ``slot[i]``), then one Duchi bit per slot at ``t =
      s(x) v`` (0 for an empty slot);
    * sampling: ``u = uniform(k)``, ``t = s(x_u) v_u`` if ``u < nnz`` else 0, one Duchi bit;
    * harmony: ``j = uniform(d)``, ``t = v_j`` (0 when not held), one Duchi bit; report ``value = j``;
    * pckv: ``u = uniform(k)``; the pair ``(x_u, v_u)`` if ``u < nnz``, else ``(d + uniform(k), 0)``;
      ``bit = +1`` if ``U < (1 + v) / 2``; ``keep = bernoulli(T_a)``; kept: ``bernoulli(T_p)`` keeps the
      bit, else it flips; not kept: ``o = uniform(d' - 1)``, key ``o + (o >= key)``, bit ``+1`` iff
      ``bernoulli(T_half)``;
    * gaussian: coordinates in pairs, Marsaglia's polar method (``x = 2 U - 1``, ``y = 2 U - 1``,
      ``s = x x + y y``, redrawn until ``0 < s < 1``, ``f = sqrt((-2 log s) / s)``), coordinate ``i`` is
      ``sigma z_i + v_i`` rounded to float32.

    Returns ``(reports, consumed bytes per report)``.
    """
    pr = sparse_wire_params(mech)
    d, k = pr["d"], pr["k"]
    n = vectors.n
    ws, sd = _sparse_byte_inputs(mech, pr, random, seeds, n)
    rows = np.arange(n)
    items, vals, nnz = _sparse_clean(vectors, d, k, pr["values"], ws)
    col = np.arange(k)[None, :]
    held = col < nnz[:, None]
    if isinstance(mech, SVME):
        reports = _svme_byte_reports(pr, ws, sd, items, vals, held, rows)
    elif isinstance(mech, (KFold, Sampling)):
        reports = _kfold_sampling_byte_reports(mech, pr, ws, sd, items, vals, nnz, held, rows)
    elif isinstance(mech, Harmony):
        reports = _harmony_byte_reports(pr, ws, items, vals, held, rows)
    elif isinstance(mech, PCKV):
        reports = _pckv_byte_reports(pr, ws, items, vals, nnz, rows)
    elif isinstance(mech, Gaussian):
        reports = _gaussian_byte_reports(pr, ws, items, vals, held, rows)
    else:
        raise ValueError(f"no byte-driven procedure for {mech!r}; known: {SPARSE_BYTE_MECHANISMS}")
    return reports, ws.consumed_bytes.copy()


# ---------------------------------------------------------------------------------- heavy hitters (PEM)

#: Heavy-hitters mechanisms (:mod:`ldp.heavy_hitters`) with a byte-driven client procedure (section 10).
PEM_BYTE_MECHANISMS = byte_mechanisms("heavy_hitters", HH_MECHANISMS)


def pem_wire_params(pem: PEM) -> dict[str, Any]:
    """The numbers a client needs to run ``pem``'s procedure byte for byte (``docs/wire_format.md``,
    section 10): the level thresholds ``T_level`` and, per level, its hash (``direct``, ``hashed`` or
    ``full``), ``bits``, ``d``, ``rows``, ``t``, ``g``, ``key_seed`` (decimal string), ``p`` and ``T_p``."""
    if pem.search != "sketch":
        raise ValueError(f"{pem!r}: the byte-driven procedure covers the sketch search only")
    edges = np.cumsum(pem.weights)[:-1]
    levels = []
    for lv in pem.levels:
        if lv.sketch is None:
            kind, d, rows, key_seed = "full", lv.bits, 1, None
        else:
            sk = lv.sketch
            kind = "direct" if sk.direct else "hashed"
            d, rows, key_seed = sk.d, sk.rows, None if sk.direct else str(sk.key_seed)
        levels.append({
            "level": lv.index, "hash": kind, "bits": lv.bits, "d": d, "rows": rows,
            "t": lv.g.bit_length() - 1, "g": lv.g, "key_seed": key_seed, "p": lv.p,
            "T_p": bernoulli_threshold(lv.p),
        })
    return {
        "mechanism": "pem", "epsilon": pem.epsilon, "max_length": pem.max_length,
        "total_bits": total_bits(pem.max_length), "weights": pem.weights.tolist(),
        "T_level": [bernoulli_threshold(float(e)) for e in edges], "levels": levels,
    }


def pem_value_words(value: str | bytes, max_length: int) -> int:
    """A value's bit string (``L`` bits: the padded bytes, then the length) as one integer, bit 0 of the
    string its most significant of ``L`` bits; ``str`` is UTF-8. Refuses a value of more than ``B`` bytes."""
    data = value.encode("utf-8") if isinstance(value, str) else bytes(value)
    b = int(max_length)
    if len(data) > b:
        raise ValueError(f"a value of {len(data)} bytes, more than max_length {b}")
    h = b.bit_length()
    return (int.from_bytes(data.ljust(b, b"\0"), "big") << h) | len(data)


def _seed_word(seed: int, j: int) -> int:
    return _splitmix64_int(int(seed) + (j + 1) * _GOLDEN_INT)


def _prefix(x: int, width: int, bits: int) -> int:
    """The first ``bits`` bits of an ``width``-bit string, as a ``bits``-bit integer."""
    return x >> (width - bits)


def pem_bucket_one(level: dict[str, Any], seed: int, x: int, width: int) -> int:
    """``H(b)`` of one report (pure integers; section 10): the bucket ``b`` of the value's ``bits``-bit
    prefix (``direct``: the prefix; ``hashed``: the row's multiply-shift hash), mapped by ``S b xor c``;
    ``full``: ``S x xor c`` over the whole ``L``-bit string ``x``."""
    t, d, bits = int(level["t"]), int(level["d"]), int(level["bits"])
    if level["hash"] == "full":
        nw = (width + 63) // 64
        padded = x << (64 * nw - width)  # the words, big-endian, bits past L zero
        words = [_seed_word(seed, MATRIX_WORD + i) for i in range(t * nw + 1)]
        h = 0
        for i in range(t):
            row = 0
            for k in range(nw):
                row = (row << 64) | words[i * nw + k]
            h |= (bin(row & padded).count("1") & 1) << i
        return h ^ (words[t * nw] & ((1 << t) - 1))
    prefix = _prefix(x, width, bits)
    if level["hash"] == "direct":
        b = prefix
    else:
        pieces = (bits + 31) // 32
        piece = prefix << (32 * pieces - bits)
        xs = [(piece >> (32 * (pieces - 1 - i))) & 0xFFFFFFFF for i in range(pieces)]
        row = _seed_word(seed, ROW_WORD) % int(level["rows"])
        key_seed = int(level["key_seed"])
        keys = [_seed_word(key_seed, row * (pieces + 1) + i) for i in range(pieces + 1)]
        acc = keys[pieces]
        for a, xi in zip(keys, xs):
            acc = (acc + a * xi) & _M64
        b = acc >> (64 - d)
    h = 0
    for i in range(t):
        h |= (bin(_seed_word(seed, MATRIX_WORD + i) & ((1 << d) - 1) & b).count("1") & 1) << i
    return h ^ (_seed_word(seed, MATRIX_WORD + t) & ((1 << t) - 1))


def pem_encode_bytes(
    pem: PEM, values: Sequence[str | bytes], random: Sequence[bytes], seeds: np.ndarray
) -> tuple[HHReports, np.ndarray, list[int]]:
    """Encodes values with PEM's wire procedure (section 10) from explicit random bytes and public seeds.

    Returns:
        the reports, the bytes each consumed, and each report's ``H(b)`` (its bucket before randomization).
    """
    params = pem_wire_params(pem)
    width = params["total_bits"]
    n = len(values)
    if len(random) != n or len(seeds) != n:
        raise ValueError("values, random and seeds need one entry per report")
    ws = WordStream(list(random))
    level, y, hashes = np.zeros(n, np.uint8), np.zeros(n, np.uint64), []
    for i, v in enumerate(values):
        x = pem_value_words(v, pem.max_length)
        row = np.array([i])
        u = int(ws.take(row)[0] >> np.uint64(11))
        j = sum(u >= t for t in params["T_level"])
        lv = params["levels"][j]
        h = pem_bucket_one(lv, int(seeds[i]), x, width)
        if ws.bernoulli(lv["T_p"], row)[0]:
            out = h
        else:
            o = int(ws.uniform(lv["g"] - 1, row)[0])
            out = o + (o >= h)
        level[i], y[i] = j, out
        hashes.append(h)
    return HHReports(level, np.asarray(seeds, np.uint64), y), ws.consumed_bytes.copy(), hashes
