"""eps-LDP audits on the wire of every sparse-vector mechanism (svme, kfold, sampling, gaussian, harmony,
pckv) at event and user level.

Each case encodes two neighbouring inputs many times with the real client (``mech.encode``; the public
seed pinned, since privacy must hold for every seed and the seed is data-independent), maps every report
to a discrete event (the exact report for bit / item reports, per-bin buckets at the two inputs' means
for Laplace bins, quantile tails of a projection for dense Gaussian reports), picks the events with the
largest empirical log-ratio on a training half and bounds their log-ratio on the other half with
one-sided Clopper-Pearson bounds at level 1e-6: ``ln((lower(p1) - delta) / upper(p0))``. The case fails
if that lower bound exceeds eps. The neighbours are the worst cases of the review: an item inserted
first, an item inserted last, the truncation boundary (k vs k + 1 items), a value flip and, at user
level, disjoint supports.

Negative controls the audit must flag: k-fold with the m-th item in slot m, and binary SVME calibrated to
the untruncated L = 1. The fast tier is eps = 1 with the pairs of :data:`FAST_PAIRS`; the rest of the
grid (eps in {0.5, 1, 2}, every pair) is marked integration.
"""

from __future__ import annotations

import importlib
import math

import numpy as np
import pytest
from scipy.stats import beta

from ldp.sparse import SVME, SparseVectors
from ldp.sparse.baselines import DenseReports, ItemReports, KFold, duchi_bits
from ldp.sparse.encode import SparseReports
from ldp.sparse.hashes import bins_signs
from ldp.sparse.mechanisms import make_sparse_mechanism
from ldp.sparse.params import SparseParams, choose_params

baselines_mod = importlib.import_module("ldp.sparse.baselines")
encode_mod = importlib.import_module("ldp.sparse.encode")  # ldp.sparse.encode is also a function name

LEVEL = 1e-6  # one-sided Clopper-Pearson level of each bound
N = 100_000  # reports per input and per half
PICKS = 3  # events kept per direction from the training half

ROOT = np.random.SeedSequence(20261218)


def cp_lower(c: int, n: int) -> float:
    return 0.0 if c == 0 else float(beta.ppf(LEVEL, c, n - c + 1))


def cp_upper(c: int, n: int) -> float:
    return 1.0 if c == n else float(beta.ppf(1.0 - LEVEL, c + 1, n - c))


def replicate(items: list[int], values: list[float], n: int) -> SparseVectors:
    """``n`` identical clients (items in the order given: slot order matters to a leaky k-fold)."""
    m = len(items)
    return SparseVectors(
        np.arange(n + 1) * m,
        np.tile(np.asarray(items, dtype=np.uint64), n),
        np.tile(np.asarray(values, dtype=np.float64), n),
    )


def pairs(level: str, k: int, values: str) -> dict[str, tuple[tuple[list, list], tuple[list, list]]]:
    """Neighbouring inputs ``(items, values)`` for a level (values 1; -1 where a sign must differ)."""
    one = lambda m: [1.0] * m  # noqa: E731
    out = {
        "insert_first": (([2, 3], one(2)), ([1, 2, 3], one(3))),
        "insert_last": (([1, 2], one(2)), ([1, 2, 3], one(3))),
        "truncation": ((list(range(1, k + 1)), one(k)), (list(range(k + 1)), one(k + 1))),
    }
    if level == "event" and values == "real":
        out["flip"] = (([1, 2], [-1.0, 1.0]), ([1, 2], [1.0, 1.0]))
    if level == "user":
        neg = one(k) if values == "binary" else [-1.0] * k
        out["disjoint"] = ((list(range(k)), one(k)), (list(range(k, 2 * k)), neg))
    return out


def features(reports) -> tuple[str, np.ndarray]:
    """``(kind, X)``: how to discretise a batch of reports and the numbers to discretise."""
    if isinstance(reports, SparseReports):
        bits = reports.codes.size == 0 or np.abs(reports.codes).max() <= 1
        return ("exact" if bits else "bins"), reports.codes.astype(np.float64)
    if isinstance(reports, ItemReports):
        return "exact", (reports.items.astype(np.float64) * 2 + (reports.bits > 0))[:, None]
    if isinstance(reports, DenseReports):
        return "project", np.asarray(reports.values, dtype=np.float64)
    raise TypeError(type(reports))


def discretise(kind: str, train: tuple[np.ndarray, np.ndarray], test: tuple[np.ndarray, np.ndarray]):
    """Cell ids for the four samples (thresholds fitted on ``train`` only) and whether cells are ordered
    (then tails are events too)."""
    x0, x1 = train
    if kind == "exact":
        allx = np.concatenate([x0, x1, *test])
        ids = np.zeros(len(allx), dtype=np.int64)
        for j in range(allx.shape[1]):  # mixed radix over the columns' distinct values
            vals, col = np.unique(allx[:, j], return_inverse=True)
            ids = ids * vals.size + col.reshape(-1)
        cuts = np.cumsum([0, len(x0), len(x1), len(test[0]), len(test[1])])
        return [ids[a:b] for a, b in zip(cuts[:-1], cuts[1:])], False
    m0, m1 = x0.mean(axis=0), x1.mean(axis=0)
    if kind == "bins":
        se = np.sqrt((x0.var(axis=0) + x1.var(axis=0)) / len(x0))
        active = np.flatnonzero(np.abs(m1 - m0) > 5 * se + 1e-12)
        lo, hi = np.minimum(m0, m1)[active], np.maximum(m0, m1)[active]

        def cell(x: np.ndarray) -> np.ndarray:
            b = (x[:, active] > lo).astype(np.int64) + (x[:, active] >= hi)
            return (b * 3 ** np.arange(active.size)).sum(axis=1)

        return [cell(x) for x in (x0, x1, *test)], False
    w = m1 - m0
    s0, s1 = x0 @ w, x1 @ w
    qs = np.quantile(np.concatenate([s0, s1]), np.linspace(0.01, 0.99, 25))
    return [np.searchsorted(qs, x @ w) for x in (x0, x1, *test)], True


def event_counts(ids: np.ndarray, cells: int, ordered: bool) -> np.ndarray:
    c = np.bincount(ids, minlength=cells)
    if not ordered:
        return c
    up = np.cumsum(c[::-1])[::-1]  # id >= j
    down = np.cumsum(c)  # id <= j
    return np.concatenate([c, up, down])


def audit(sample0, sample1, sample0b, sample1b, delta: float = 0.0) -> tuple[float, str]:
    """The largest Clopper-Pearson lower bound on ``|ln P1(E) / P0(E)|`` over the events picked on the
    training samples, evaluated on the test samples; and a description of the worst event."""
    kind, x0 = features(sample0)
    _, x1 = features(sample1)
    _, y0 = features(sample0b)
    _, y1 = features(sample1b)
    (a0, a1, b0, b1), ordered = discretise(kind, (x0, x1), (y0, y1))
    cells = int(max(a.max(initial=0) for a in (a0, a1, b0, b1))) + 1
    tr0, tr1 = event_counts(a0, cells, ordered), event_counts(a1, cells, ordered)
    te0, te1 = event_counts(b0, cells, ordered), event_counts(b1, cells, ordered)
    m0, m1 = len(b0), len(b1)
    best, where = -math.inf, ""
    for num_tr, den_tr, num_te, den_te, nn, nd, name in (
        (tr1, tr0, te1, te0, m1, m0, "P1/P0"),
        (tr0, tr1, te0, te1, m0, m1, "P0/P1"),
    ):
        score = np.log((num_tr + 0.5) / (den_tr + 0.5))
        score[num_tr < 20] = -np.inf
        for e in np.argsort(-score)[:PICKS]:
            if not np.isfinite(score[e]):
                continue
            lo = cp_lower(int(num_te[e]), nn) - delta
            hi = cp_upper(int(den_te[e]), nd)
            lb = math.log(lo / hi) if lo > 0 else -math.inf
            if lb > best:
                best, where = lb, f"{name} event {e}: test counts {int(num_te[e])} / {int(den_te[e])}"
    return best, where


def pin_seeds(monkeypatch, seed: int) -> None:
    """Every report gets public seed ``seed`` (privacy must hold for each seed value)."""
    fixed = lambda n, rng=None: np.full(n, seed, dtype=np.uint64)  # noqa: E731
    monkeypatch.setattr(encode_mod, "public_seeds", fixed)
    monkeypatch.setattr(baselines_mod, "public_seeds", fixed)


def adversarial_seed(mech, k: int) -> int:
    """A seed under which items 0..k hash to as many distinct bins as possible (SVME with b > 1): a
    truncation swap then moves two bins."""
    if not isinstance(mech, SVME) or mech.params.bins == 1:
        return 1
    p = mech.params
    cand = np.arange(1, 400, dtype=np.uint64)
    h, _ = bins_signs(p.hash_family, cand, np.arange(k + 1, dtype=np.uint64)[None, :], p.bins, p.domain_size)
    distinct = [np.unique(row).size + np.count_nonzero(row[1:] != row[0]) / (k + 1) for row in h]
    return int(cand[int(np.argmax(distinct))])


def run_case(mech, pair, k: int, seed_tag: int, monkeypatch, delta: float = 0.0) -> tuple[float, str]:
    (it0, v0), (it1, v1) = pair
    pin_seeds(monkeypatch, adversarial_seed(mech, k))
    streams = np.random.SeedSequence([20261218, seed_tag]).spawn(4)
    reps = []
    for (items, vals), ss in zip(((it0, v0), (it1, v1), (it0, v0), (it1, v1)), streams):
        reps.append(mech.encode(replicate(items, vals, N), rng=ss)[0])
    return audit(*reps, delta=delta)


# (mechanism, level, values, k, d, options): small k and d keep the report space small
CONFIGS = [
    ("svme", "event", "real", 16, 64, {}),  # paper rule: b = 4, Laplace(2)
    ("svme", "event", "binary", 16, 64, {}),  # b = 4, discrete Laplace with the truncation L = 2
    ("svme", "user", "real", 4, 64, {}),  # b = 1, clipped, Duchi (Laplace at eps = 2)
    ("svme", "user", "binary", 4, 64, {}),
    ("kfold", "event", "real", 4, 64, {}),
    ("kfold", "event", "binary", 4, 64, {}),
    ("kfold", "user", "real", 4, 64, {}),
    ("sampling", "event", "real", 4, 64, {}),
    ("sampling", "user", "real", 4, 64, {}),
    ("gaussian", "event", "real", 2, 8, {}),
    ("gaussian", "user", "real", 2, 8, {"calibration": "analytic"}),
    ("harmony", "event", "real", 4, 8, {}),
    ("harmony", "user", "real", 4, 8, {}),
    ("pckv", "event", "real", 4, 8, {}),
    ("pckv", "user", "real", 4, 8, {}),
]


#: the fast tier: eps = 1 and the review's worst cases (the rest is marked integration)
FAST_PAIRS = ("insert_first", "truncation", "disjoint")


def _cases(eps_values):
    out = []
    for eps in eps_values:
        for ci, (name, level, values, k, d, opts) in enumerate(CONFIGS):
            for pname in pairs(level, k, values):
                fast = eps == 1.0 and pname in FAST_PAIRS
                marks = () if fast else (pytest.mark.integration,)
                out.append(
                    pytest.param(
                        name,
                        level,
                        values,
                        k,
                        d,
                        opts,
                        pname,
                        eps,
                        ci,
                        id=f"{name}-{level}-{values}-{pname}-eps{eps:g}",
                        marks=marks,
                    )
                )
    return out


@pytest.mark.parametrize("name,level,values,k,d,opts,pname,eps,ci", _cases([0.5, 1.0, 2.0]))
@pytest.mark.statistical
def test_mechanism_is_eps_ldp_on_the_wire(name, level, values, k, d, opts, pname, eps, ci, monkeypatch):
    mech = make_sparse_mechanism(
        name, epsilon=eps, domain_size=d, sparsity=k, privacy=level, values=values, **opts
    )
    delta = getattr(mech, "delta", 0.0) if name == "gaussian" else 0.0
    named = pairs(level, k, values)
    tag = ci * 100 + sorted(named).index(pname)
    lb, where = run_case(mech, named[pname], k, tag, monkeypatch, delta)
    assert lb <= eps, f"{name} {level} {values} {pname} eps={eps}: log-ratio lower bound {lb:.3f} ({where})"


class _SlotOrderKFold(KFold):
    """Negative control: the m-th item of a client in slot m (leaky at event level)."""

    def encode(self, vectors, *, rng=None):
        perturb, seed_rng = baselines_mod.client_streams(rng)
        vec, st = self._prepare(vectors, perturb)
        seeds = baselines_mod.public_seeds(vec.n, seed_rng)
        t = np.zeros((vec.n, self.k))
        rank = np.arange(vec.items.size) - np.repeat(vec.indptr[:-1], vec.nnz)
        t[vec.user_index(), rank] = self._signed_values(vec, seeds)
        return SparseReports(seeds, duchi_bits(t, self.bit_epsilon, perturb)), st


@pytest.mark.statistical
def test_audit_flags_slot_order_kfold(monkeypatch):
    eps, k = 1.0, 4
    mech = _SlotOrderKFold(eps, 64, k, "event")
    lb, where = run_case(mech, pairs("event", k, "real")["insert_first"], k, 9001, monkeypatch)
    assert lb > eps, f"the audit missed the slot-order leak: lower bound {lb:.3f} ({where})"


@pytest.mark.statistical
def test_audit_flags_untruncated_binary_calibration(monkeypatch):
    """Binary event level calibrated to L = 1 (ignoring truncation): the k vs k + 1 boundary leaks."""
    eps, k, d = 1.0, 16, 64
    good = choose_params(eps, d, k, "event", values="binary")
    leaky = SparseParams(
        epsilon=eps,
        domain_size=d,
        sparsity=k,
        privacy="event",
        values="binary",
        L=1,
        bins=good.bins,
        eta=None,
        Delta=1.0,
        sensitivity_rule="L",
        noise="discrete-laplace",
        grid=1.0,
        trunc=float(k + 40),
        hash_family=good.hash_family,
    )
    mech = SVME(leaky)
    lb, where = run_case(mech, pairs("event", k, "binary")["truncation"], k, 9002, monkeypatch)
    assert lb > eps, f"the audit missed the truncation leak: lower bound {lb:.3f} ({where})"
