"""Repeated collection: exact eps-LDP audits of one report and of the memoized pair,
the e_1 / e_inf closed forms, stability and independence of the permanent responses, the client's budget
refusal, the state file, and the accountant against a hand computation.

Tolerances: statistical checks use z = 5 with the standard error stated at each assertion; the empirical
eps-LDP audit uses one-sided Clopper-Pearson bounds at level 1e-6 per output (as tests/test_oracles.py);
exact likelihood ratios are compared with a relative slack of 1e-9 (float rounding only).
"""

from __future__ import annotations

import itertools
import json
import math
import os
import stat

import numpy as np
import pytest
from scipy import stats

from ldp.longitudinal.accounting import (
    binary_rr_pld,
    budget_summary,
    composed_epsilon,
    fresh_epsilon,
    grr_pld,
    interval_for,
    memoized_epsilon,
    pld_reports_allowed,
    policy_problems,
)
from ldp.longitudinal.budget import BudgetExceeded, BudgetPolicy
from ldp.longitudinal.client import STATE_VERSION, Client, StateFileError
from ldp.longitudinal.memo import (
    LOLOHA,
    MEMO_MECHANISMS,
    RAPPOR,
    MemoGRR,
    MemoOLH,
    make_memo_oracle,
    memo_words_hmac,
)
from ldp.oracles import GRR, OLH, OUE

ROOT = np.random.SeedSequence(20261202)
NAMES = sorted(MEMO_MECHANISMS)
SLACK = 1 + 1e-9


def _rng(*key: int) -> np.random.Generator:
    return np.random.default_rng(np.random.SeedSequence(ROOT.entropy, spawn_key=key))


# ------------------------------------------------------------------------------------------------
# exact likelihoods over the output space
# ------------------------------------------------------------------------------------------------
def _grr_matrix(p: float, q: float, size: int) -> np.ndarray:
    m = np.full((size, size), q)
    np.fill_diagonal(m, p)
    return m


def _stages(o):
    """(permanent matrix P[memo | key], instantaneous matrix P[y | memo]) over the GRR alphabet."""
    size = o.g if hasattr(o, "g") else o.d
    perm = _grr_matrix(o.perm_p, o.perm_q, size)
    inst = np.eye(size) if o.inst_p >= 1 else _grr_matrix(o.inst_p, o.inst_q, size)
    return perm, inst


def _history_likelihood(perm: np.ndarray, inst: np.ndarray, keys: tuple[int, ...]) -> np.ndarray:
    """P[y_1..y_k | memo keys of the k reports], exactly: memos independent per distinct key, reports
    independent given the memos. Returns an array over (y_1, ..., y_k)."""
    size = perm.shape[0]
    distinct = sorted(set(keys))
    k = len(keys)
    out = np.zeros((size,) * k)
    for memos in itertools.product(range(size), repeat=len(distinct)):
        w = math.prod(perm[key, m] for key, m in zip(distinct, memos))
        if w == 0:
            continue
        memo_of = dict(zip(distinct, memos))
        term = np.ones((size,) * k)
        for t, key in enumerate(keys):
            shape = [1] * k
            shape[t] = size
            term = term * inst[memo_of[key]].reshape(shape)
        out += w * term
    return out


def _max_ratio(a: np.ndarray, b: np.ndarray) -> float:
    """Largest likelihood ratio either way over the outputs (inf where one side is 0 and the other not)."""
    with np.errstate(divide="ignore", invalid="ignore"):
        ab = np.where(a > 0, a / b, 1.0)
        ba = np.where(b > 0, b / a, 1.0)
    return float(max(np.max(ab), np.max(ba)))


@pytest.mark.parametrize("cls,eps,eps1,d", [(MemoGRR, 1.0, 0.5, 4), (MemoGRR, 2.0, 0.7, 3),
                                            (LOLOHA, 1.0, 0.5, 16), (MemoOLH, 2.0, 1.0, 16)])
def test_exact_audit_one_report_and_memoized_pair(cls, eps, eps1, d):
    """One report: max ratio exactly e^eps_1. k reports of a constant value: the ratio grows with k and
    never passes e^eps_inf (exact enumeration over [size]^k, k <= 4). For local hashing the audit is given
    the hash (the public seed) with H(v1) != H(v2), i.e. over buckets; a collision gives ratio 1."""
    o = cls(eps, d, epsilon_1=eps1) if cls is MemoGRR else cls(eps, d, epsilon_1=eps1, g=4)
    perm, inst = _stages(o)
    one = _max_ratio(_history_likelihood(perm, inst, (0,)), _history_likelihood(perm, inst, (1,)))
    assert one == pytest.approx(math.exp(o.epsilon_1), rel=1e-9)
    assert o.epsilon_1 == pytest.approx(eps1, rel=1e-9)
    prev = one
    for k in (2, 3, 4):
        r = _max_ratio(_history_likelihood(perm, inst, (0,) * k), _history_likelihood(perm, inst, (1,) * k))
        assert prev <= r * SLACK and r <= math.exp(o.epsilon_inf) * SLACK, (k, r)
        prev = r
    assert prev > one  # the pair leaks more than one report, and less than e_inf


def test_exact_audit_without_instantaneous_stage_reaches_e_inf():
    o = MemoGRR(1.5, 3, epsilon_1=1.5)  # epsilon_1 = epsilon: every report is the memo
    perm, inst = _stages(o)
    for k in (1, 2, 3):
        r = _max_ratio(_history_likelihood(perm, inst, (0,) * k), _history_likelihood(perm, inst, (1,) * k))
        assert r == pytest.approx(math.exp(1.5), rel=1e-9)


def test_changing_values_cost_and_the_pattern_leak():
    """Same pattern of keys, other values: two memos cost at most 2 eps_inf. Another pattern ((a, a)
    against (a, b)) is protected only by the instantaneous stage: ratio <= e^(2 eps_inst), and unbounded
    without it."""
    o = MemoGRR(1.0, 4, epsilon_1=0.5)
    perm, inst = _stages(o)
    same = _max_ratio(_history_likelihood(perm, inst, (0, 1)), _history_likelihood(perm, inst, (2, 3)))
    assert same <= math.exp(2 * o.epsilon_inf) * SLACK
    pattern = _max_ratio(_history_likelihood(perm, inst, (0, 0)), _history_likelihood(perm, inst, (0, 1)))
    assert pattern <= math.exp(2 * o.epsilon_instantaneous) * SLACK
    bare = MemoGRR(1.0, 4, epsilon_1=1.0)
    perm, inst = _stages(bare)
    leak = _max_ratio(_history_likelihood(perm, inst, (0, 0)), _history_likelihood(perm, inst, (0, 1)))
    assert math.isinf(leak)
    # LOLOHA: two values in one bucket share the memo, so a value change inside a bucket costs nothing
    lo = LOLOHA(1.0, 16, epsilon_1=0.5, g=2)
    assert lo.epsilon_after_changes(10) == 2 * lo.epsilon_inf
    assert MemoOLH(1.0, 16, epsilon_1=0.5, g=2).epsilon_after_changes(10) == 11 * lo.epsilon_inf


@pytest.mark.parametrize("permanent", ["sue", "oue"])
def test_exact_audit_rappor_one_report_and_pair(permanent):
    """Unary: bits are independent given the value, and two one-hot vectors differ in two bits, so the
    likelihood ratio of k reports is the product of the two differing bits' ratios (the others cancel):
    enumerated exactly over {0,1}^k per bit."""
    o = RAPPOR(1.2, 6, epsilon_1=0.6, permanent=permanent)
    s = o.inst_p
    inst = np.array([[s, 1 - s], [1 - s, s]])  # P[S | B'], rows B' = 0, 1
    perm1 = np.array([1 - o.perm_p, o.perm_p])  # P[B' | B = 1]
    perm0 = np.array([1 - o.perm_q, o.perm_q])  # P[B' | B = 0]
    prev = 0.0
    for k in (1, 2, 3, 4):
        up = down = 0.0  # max over one bit's k outputs of L = P[. | B = 1] / P[. | B = 0], and of 1 / L
        for outs in itertools.product((0, 1), repeat=k):
            lik = [sum(pm[b] * math.prod(inst[b, y] for y in outs) for b in (0, 1)) for pm in (perm0, perm1)]
            up, down = max(up, lik[1] / lik[0]), max(down, lik[0] / lik[1])
        ratio = up * down  # bit v1 goes 1 -> 0, bit v2 0 -> 1: the worst outputs of each multiply
        if k == 1:
            assert ratio == pytest.approx(math.exp(o.epsilon_1), rel=1e-9)
        assert prev <= ratio * SLACK <= math.exp(o.epsilon_inf) * SLACK**2
        prev = ratio


# ------------------------------------------------------------------------------------------------
# empirical audit on the simulated wire output (one report and the pair)
# ------------------------------------------------------------------------------------------------
def _worst_ratio(k1: np.ndarray, k2: np.ndarray, level: float = 1e-6) -> float:
    n1, n2 = len(k1), len(k2)
    keys = np.union1d(k1, k2)
    c1 = np.bincount(np.searchsorted(keys, k1), minlength=len(keys))
    c2 = np.bincount(np.searchsorted(keys, k2), minlength=len(keys))
    worst = 0.0
    for a, na, b, nb in ((c1, n1, c2, n2), (c2, n2, c1, n1)):
        lower = np.where(a > 0, stats.beta.ppf(level, np.maximum(a, 1), na - a + 1), 0.0)
        upper = stats.beta.ppf(1 - level, b + 1, np.maximum(nb - b, 1))
        worst = max(worst, float(np.max(lower / upper)))
    return worst


def _wire_key(o, rep, v1, v2) -> np.ndarray:
    if rep.bits is not None:
        bits = np.unpackbits(rep.bits, axis=1, count=o.d, bitorder="little").astype(np.int64)
        return bits @ (1 << np.arange(o.d))
    if rep.seeds is not None:  # a function of the output: collision and which of the two it supports
        h1 = o.hash.hash(rep.seeds, np.full(len(rep), v1))
        h2 = o.hash.hash(rep.seeds, np.full(len(rep), v2))
        return 4 * (h1 == h2) + 2 * (rep.values == h1) + (rep.values == h2)
    return rep.values


@pytest.mark.parametrize("name", NAMES)
def test_empirical_audit_of_one_report_and_of_the_pair(name):
    """200,000 simulated users per input: one report (bounded by e^eps_1) and two reports of the same user
    and value (the memoized pair, bounded by e^eps_inf; more than e^eps_1 is allowed)."""
    eps, d, n = 1.0, 4, 200_000
    o = make_memo_oracle(name, eps, d, epsilon_1=0.5)
    rng = _rng(2, NAMES.index(name))
    keys = {v: rng.integers(0, 2**64, n, dtype=np.uint64) for v in (0, d - 1)}
    wire = {}
    for v in (0, d - 1):
        a = o.simulate(np.full(n, v), keys[v], rng=rng)
        b = o.simulate(np.full(n, v), keys[v], rng=rng)
        wire[v] = (_wire_key(o, a, 0, d - 1), _wire_key(o, b, 0, d - 1))
    one = _worst_ratio(wire[0][0], wire[d - 1][0])
    assert one <= math.exp(o.epsilon_1), one
    base = 1 + max(int(wire[0][0].max()), int(wire[d - 1][0].max()))
    pair = _worst_ratio(wire[0][0] * base + wire[0][1], wire[d - 1][0] * base + wire[d - 1][1])
    assert pair <= math.exp(o.epsilon_inf), pair


def test_empirical_audit_catches_per_report_fresh_memos():
    """Negative control: a 'memo' redrawn for every report (no memoization) makes the pair cost 2 eps_perm
    territory: with eps = 2, eps_1 = 1.9 the pair's ratio exceeds e^eps_inf = e^2."""
    eps, d, n = 2.0, 2, 200_000
    o = MemoGRR(eps, d, epsilon_1=1.9)
    rng = _rng(3)
    k1 = [o.encode(np.zeros(n, dtype=np.int64), rng=rng).values for _ in range(2)]
    k2 = [o.encode(np.ones(n, dtype=np.int64), rng=rng).values for _ in range(2)]
    assert _worst_ratio(k1[0] * 2 + k1[1], k2[0] * 2 + k2[1]) > math.exp(eps)


# ------------------------------------------------------------------------------------------------
# permanent responses: stable across reports, independent across users
# ------------------------------------------------------------------------------------------------
def test_hmac_memos_are_stable_and_independent_across_users():
    """N = 20,000 real-client secrets (HMAC path), memo-grr on d = 4 at eps = 1, value 0.
    * stable: the memo recomputed from the same secret is identical;
    * marginal: P[memo = 0] = p1; binomial SE sqrt(p1 (1-p1) / N) = 0.0035, 5 SE asserted;
    * independent across users: the memos of consecutive users agree with probability
      sum_r P[r]^2 = p1^2 + 3 q1^2; SE of the agreement rate over N - 1 pairs (1-dependent, bounded by
      sqrt(3 x) for x the Bernoulli variance / N), 5 of those asserted;
    * independent across keys of one user: P[memo(0) = 0 and memo(1) = 1] = p1^2."""
    o = MemoGRR(1.0, 4, epsilon_1=0.5)
    N = 20_000
    rng = _rng(4)
    secrets_ = [rng.bytes(32) for _ in range(N)]

    def memos(key: int, task: str = "t", who=secrets_) -> np.ndarray:
        words = np.stack([memo_words_hmac(sec, task, "memo", key, 2) for sec in who])
        return o.memo_from_words(np.full(len(who), key), words)

    m0, m1 = memos(0), memos(1)
    assert np.array_equal(m0[:50], memos(0, who=secrets_[:50]))
    p1, q1 = o.perm_p, o.perm_q
    assert abs(np.mean(m0 == 0) - p1) < 5 * math.sqrt(p1 * (1 - p1) / N)
    agree = np.mean(m0[1:] == m0[:-1])
    a = p1**2 + 3 * q1**2
    assert abs(agree - a) < 5 * math.sqrt(3 * a * (1 - a) / (N - 1)), agree
    both = np.mean((m0 == 0) & (m1 == 1))
    assert abs(both - p1**2) < 5 * math.sqrt(p1**2 * (1 - p1**2) / N), both
    # another task, same secret: unrelated memos (agreement as for two users)
    other = memos(0, task="u")
    assert abs(np.mean(other == m0) - a) < 5 * math.sqrt(a * (1 - a) / N)


@pytest.mark.parametrize("name", NAMES)
def test_simulated_memos_are_stable_and_independent_across_users(name):
    """Simulation path, N = 50,000 users with value 0, no instantaneous stage (the report is the memo):
    identical over two calls with the same keys; across users with independent keys, the agreement rate of
    consecutive users' reports is sum_r P[r]^2 (GRR-shaped), SE bounded as above, 5 SE asserted."""
    N = 50_000
    o = make_memo_oracle(name, 1.0, 8, epsilon_1=1.0)
    rng = _rng(5, NAMES.index(name))
    keys = rng.integers(0, 2**64, N, dtype=np.uint64)
    a = o.simulate(np.zeros(N, dtype=np.int64), keys, rng=rng)
    b = o.simulate(np.zeros(N, dtype=np.int64), keys, rng=rng)
    for f in a.fields():
        assert np.array_equal(getattr(a, f), getattr(b, f))
    k = _wire_key(o, a, 0, 7)
    freq = np.bincount(k) / N
    expect = float(np.sum(freq**2))
    agree = np.mean(k[1:] == k[:-1])
    assert abs(agree - expect) < 5 * math.sqrt(3 * expect * (1 - expect) / (N - 1)), (agree, expect)


# ------------------------------------------------------------------------------------------------
# client: budget refusal and the state file
# ------------------------------------------------------------------------------------------------
def test_client_refuses_past_its_budget_and_produces_no_report(tmp_path):
    c = Client.create(tmp_path / "state.json")
    o = LOLOHA(1.0, 32, epsilon_1=0.5, g=2)
    pol = BudgetPolicy(0.5, reports_per_period=2, period_s=3600.0, total_epsilon=1.0, composition="memoized")
    rng = _rng(6)
    reports = [c.report("t", o, pol, 5, now_s=10.0, rng=rng), c.report("t", o, pol, 5, now_s=20.0, rng=rng)]
    assert all(len(r) == 1 for r in reports) and reports[0].seeds[0] == reports[1].seeds[0]
    on_disk = (tmp_path / "state.json").read_bytes()
    with pytest.raises(BudgetExceeded, match="reports_per_period = 2") as err:
        c.report("t", o, pol, 5, now_s=30.0, rng=rng)
    assert err.value.limit == "reports_per_period"
    assert (tmp_path / "state.json").read_bytes() == on_disk  # nothing charged
    # next hour: a value in another bucket needs a second permanent response (2 x eps_inf > cap 1.0)
    other = next(v for v in range(32) if o.client_memo_key(c._Client__secret, "t", v)
                 != o.client_memo_key(c._Client__secret, "t", 5))
    with pytest.raises(BudgetExceeded, match="total_epsilon = 1") as err:
        c.report("t", o, pol, other, now_s=4000.0, rng=rng)
    assert err.value.limit == "total_epsilon"
    c.report("t", o, pol, 5, now_s=4001.0, rng=rng)  # the charged bucket stays reportable
    assert Client.load(tmp_path / "state.json").ledger_state("t").reports == 3
    # a fresh oracle under basic composition: the cap counts reports
    fresh = OLH(0.5, 32)
    basic = BudgetPolicy(0.5, total_epsilon=1.0)
    c.report("f", fresh, basic, 1, now_s=1.0, rng=rng)
    c.report("f", fresh, basic, 2, now_s=2.0, rng=rng)
    with pytest.raises(BudgetExceeded, match="total_epsilon"):
        c.report("f", fresh, basic, 3, now_s=3.0, rng=rng)


def test_client_pld_budget_allows_what_the_accountant_allows(tmp_path):
    c = Client.create(tmp_path / "s.json")
    o, pol = OLH(1.0, 16), BudgetPolicy(1.0, total_epsilon=5.0, composition="pld")
    sent = 0
    with pytest.raises(BudgetExceeded, match="pld composition"):
        for t in range(100):
            c.report("t", o, pol, 3, now_s=float(t), rng=t)
            sent += 1
    assert sent == pld_reports_allowed(o, 5.0) >= 5


def test_client_refuses_inconsistent_tasks(tmp_path):
    c = Client.create(tmp_path / "s.json")
    o = MemoGRR(1.0, 8)
    pol = BudgetPolicy(o.epsilon_1, total_epsilon=5.0, composition="memoized")
    with pytest.raises(ValueError, match="must equal the mechanism's one-report epsilon_1"):
        c.report("t", o, BudgetPolicy(1.0, total_epsilon=5.0, composition="memoized"), 1, now_s=1.0)
    with pytest.raises(ValueError, match="must be 'memoized'"):
        c.report("t", o, BudgetPolicy(o.epsilon_1, total_epsilon=5.0), 1, now_s=1.0)
    c.report("t", o, pol, 1, now_s=1.0)
    with pytest.raises(ValueError, match="new task id"):
        c.report("t", MemoGRR(2.0, 8, epsilon_1=o.epsilon_1), pol, 1, now_s=2.0)
    with pytest.raises(ValueError, match="new task id"):
        c.report("t", o, BudgetPolicy(o.epsilon_1, total_epsilon=6.0, composition="memoized"), 1, now_s=2.0)
    with pytest.raises(ValueError, match="outside the domain"):
        c.report("t", o, pol, 8, now_s=2.0)
    assert c.ledger_state("t").reports == 1


def test_client_id_is_a_per_task_pseudonym(tmp_path):
    import ldp.reports

    if not hasattr(ldp.reports, "client_pseudonym"):
        pytest.skip("ldp.reports.client_pseudonym is not in this tree yet")
    a, b = Client.create(tmp_path / "a.json"), Client.create(tmp_path / "b.json")
    assert len(a.client_id("t")) == 32 and a.client_id("t") == Client.load(tmp_path / "a.json").client_id("t")
    assert a.client_id("t") != a.client_id("u") and a.client_id("t") != b.client_id("t")


def test_state_file_round_trip_permissions_and_version(tmp_path):
    path = tmp_path / "state.json"
    c = Client.create(path)
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    with pytest.raises(FileExistsError):
        Client.create(path)
    o = RAPPOR(1.0, 8)
    pol = BudgetPolicy(o.epsilon_1, reports_per_period=5, period_s=60.0, composition="memoized")
    r1 = c.report("t", o, pol, 3, now_s=1.0, rng=1)
    doc = json.loads(path.read_text())
    assert doc["format"] == "ldp-longitudinal-client" and doc["version"] == STATE_VERSION == 1
    assert len(bytes.fromhex(doc["secret"])) == 32 and doc["secret"] not in repr(c)
    assert doc["tasks"]["t"]["ledger"]["reports"] == 1 and doc["tasks"]["t"]["policy"] == pol.to_dict()
    tag = doc["tasks"]["t"]["ledger"]["keys"][0]  # a keyed digest of the memo key, not the value
    assert len(tag) == 32 and int(tag, 16) >= 0 and tag != "3"
    c2 = Client.load(path)
    assert c2.ledger_state("t") == c.ledger_state("t")
    r2 = c2.report("t", o, pol, 3, now_s=2.0, rng=1)  # same secret, same noise seed: the same report
    assert np.array_equal(r1.bits, r2.bits)
    with pytest.raises(TypeError):
        __import__("pickle").dumps(c2)
    # permissions: group/other access is refused
    os.chmod(path, 0o644)
    with pytest.raises(StateFileError, match="mode 0644"):
        Client.load(path)
    os.chmod(path, 0o600)
    # version and format
    for mutate, msg in ((lambda d: d.update(version=2), "version 2 is not supported"),
                        (lambda d: d.update(format="x"), "not an ldp-longitudinal-client"),
                        (lambda d: d.update(secret="ab"), "32 bytes"),
                        (lambda d: d["tasks"]["t"]["ledger"].update(reports=-1), "reports must be")):
        bad = json.loads(path.read_text())
        mutate(bad)
        p = tmp_path / "bad.json"
        p.write_text(json.dumps(bad))
        os.chmod(p, 0o600)
        with pytest.raises(StateFileError, match=msg):
            Client.load(p)
    (tmp_path / "junk.json").write_text("{")
    os.chmod(tmp_path / "junk.json", 0o600)
    with pytest.raises(StateFileError, match="not a JSON"):
        Client.load(tmp_path / "junk.json")
    with pytest.raises(StateFileError, match="no state file"):
        Client.load(tmp_path / "missing.json")
    assert not list(tmp_path.glob(".state.json.*.tmp"))  # no temporary files left behind


# ------------------------------------------------------------------------------------------------
# accounting
# ------------------------------------------------------------------------------------------------
def _exact_rr_composition_delta(p_true: float, k: int, eps: float) -> float:
    """Hockey-stick divergence of the k-fold composition of binary randomized response (truthful w.p.
    p_true): outputs summarized by the number j of 'truthful' coordinates, P(j) = C(k,j) p^j (1-p)^(k-j),
    Q(j) = C(k,j) (1-p)^j p^(k-j); delta(eps) = sum_j max(0, P(j) - e^eps Q(j))."""
    p = p_true
    e = math.exp(eps)
    return sum(max(0.0, math.comb(k, j) * (p**j * (1 - p) ** (k - j) - e * (1 - p) ** j * p ** (k - j)))
               for j in range(k + 1))


def _exact_epsilon(p_true: float, k: int, delta: float) -> float:
    lo, hi = 0.0, k * math.log(p_true / (1 - p_true))
    for _ in range(200):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if _exact_rr_composition_delta(p_true, k, mid) > delta else (lo, mid)
    return hi


@pytest.mark.parametrize("eps,k,delta", [(1.0, 10, 1e-6), (0.5, 40, 1e-9), (2.0, 5, 1e-3), (1.0, 30, 1e-9)])
def test_accountant_against_the_hand_computation(eps, k, delta):
    """dp_accounting's k-fold binary randomized response at delta against the exact binomial enumeration:
    the accountant's figure is pessimistic (never below the exact value) and within its discretization error
    (k x 1e-4) of it."""
    exact = _exact_epsilon(math.exp(eps) / (1 + math.exp(eps)), k, delta)
    acc = composed_epsilon(binary_rr_pld(eps), k, delta)
    assert exact - 1e-9 <= acc <= exact + k * 1e-4 + 1e-9, (acc, exact)
    # GRR on 2 values is the same channel
    assert composed_epsilon(grr_pld(eps, 2), k, delta) == pytest.approx(acc, abs=k * 1e-4)
    # the figures the package reports use interval_for(eps) = max(1e-4, 1e-3 eps): within k + 1 intervals
    h = interval_for(eps)
    used = fresh_epsilon(GRR(eps, 2), k, delta)["tight"]
    assert exact - 1e-9 <= used <= exact + (k + 1) * h, (used, exact, h)


def test_fresh_and_memoized_figures():
    olh = OLH(1.0, 100)
    f = fresh_epsilon(olh, 30)
    assert f["basic"] == 30.0 and 20 < f["tight"] < 30  # the collisions (1/g) make OLH compose below basic
    assert fresh_epsilon(GRR(1.0, 2), 1)["tight"] == pytest.approx(1.0, abs=1e-3)  # one interval
    assert fresh_epsilon(OUE(1.0, 100), 1)["tight"] == pytest.approx(1.0, abs=1e-3)
    for name in NAMES:
        o = make_memo_oracle(name, 1.0, 16, epsilon_1=0.5)
        const = memoized_epsilon(o, reports=1000, keys=1)
        assert const["basic"] == 1.0 and const["tight"] == pytest.approx(1.0, abs=1e-3)  # no growth
        many = memoized_epsilon(o, reports=30, keys=30)
        assert many["basic"] == min(30, o.max_memo_keys) * 1.0
        assert many["tight"] <= many["basic"] * SLACK
        one = memoized_epsilon(o, reports=1, keys=1)
        assert one["tight_any_history"] <= o.epsilon_instantaneous * SLACK
        assert one["tight_any_history"] >= 0.9 * o.epsilon_instantaneous
    lo = LOLOHA(1.0, 100, epsilon_1=0.5, g=2)
    assert memoized_epsilon(lo, 30, 30)["basic"] == 2.0
    with pytest.raises(ValueError, match="keys"):
        memoized_epsilon(lo, 3, 4)


def test_budget_summary_and_policy_problems():
    o = LOLOHA(1.0, 64, epsilon_1=0.5, g=2)
    pol = BudgetPolicy(0.5, reports_per_period=24, period_s=86400.0, total_epsilon=4.0,
                       composition="memoized")
    s = budget_summary(pol, o, 30)
    assert s["memoized"] and s["problems"] == [] and s["windows"] == 30
    assert s["constant_value"]["basic"] == 1.0 and s["changing_values"]["basic"] == 2.0
    assert s["fresh_equivalent"]["basic"] == 15.0 and s["reports_allowed"]["lifetime_keys"] == 4
    assert s["guarantees"]["epsilon_1"] == pytest.approx(0.5)
    json.dumps(s)  # plain data
    fresh = OLH(1.0, 64)
    pol2 = BudgetPolicy(1.0, total_epsilon=10.0, composition="pld")
    s2 = budget_summary(pol2, fresh, 10)
    assert s2["basic"] == 10.0 and s2["tight"] <= 10.0 and s2["reports_allowed"]["lifetime"] >= 10
    assert pld_reports_allowed(fresh, 10.0) == s2["reports_allowed"]["lifetime"]
    assert policy_problems(BudgetPolicy(1.0, total_epsilon=5.0, composition="memoized"), fresh)
    assert policy_problems(BudgetPolicy(0.7, total_epsilon=5.0), fresh)
