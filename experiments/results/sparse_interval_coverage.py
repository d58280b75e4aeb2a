"""Coverage of the sparse 95% intervals (new: SparseEstimate.interval; old: mean +- 1.96 std).

Run: python experiments/results/sparse_interval_coverage.py N D TRIALS (sparse_interval_coverage.txt)
"""

import sys

import numpy as np

from ldp.datasets.sparse import sample_sparse
from ldp.sparse import SparseVectors
from ldp.sparse.mechanisms import make_sparse_mechanism


def adversarial(n, d, k, r):
    """Every client: item 0 with value 1 and k-1 other distinct items with values +-1."""
    other = (r.integers(0, d - 1, (n, 1)) + np.arange(k - 1)[None, :]) % (d - 1) + 1
    items = np.concatenate([np.zeros((n, 1), np.int64), other], axis=1).ravel().astype(np.uint64)
    vals = np.concatenate([np.ones((n, 1)), r.choice([-1.0, 1.0], (n, k - 1))], axis=1).ravel()
    return SparseVectors(np.arange(n + 1) * k, items, vals)


n, d, k, trials = int(sys.argv[1]), int(sys.argv[2]), 64, int(sys.argv[3])
for level, rule in (("user", "paper"), ("user", "theory"), ("event", "paper")):
    m = make_sparse_mechanism(
        "svme", epsilon=1.0, domain_size=d, sparsity=k, privacy=level, expected_users=n, rule=rule
    )
    for ds in ("supersparse", "zipf-sparse", "adversarial"):
        cov_new = cov_old = 0.0
        cnt = 0
        w_new = w_old = 0.0
        cov0 = []
        for t in range(trials):
            r = np.random.default_rng([7, t, ["supersparse", "zipf-sparse", "adversarial"].index(ds)])
            vec = adversarial(n, d, k, r) if ds == "adversarial" else sample_sparse(ds, n, d, k, r)
            rep, _ = m.encode(vec, rng=r)
            est = m.estimate(m.add(m.create_accumulator(), rep))
            truth = vec.mean_at(est.items)
            lo, hi = est.interval(0.95)
            ok = (lo <= truth) & (truth <= hi)
            ok_old = np.abs(est.mean - truth) <= 1.959964 * est.std
            cov_new += ok.sum()
            cov_old += ok_old.sum()
            cnt += truth.size
            w_new += (hi - lo).mean()
            w_old += (2 * 1.959964 * est.std).mean()
            cov0.append((ok[0], ok_old[0]))
        c0 = np.mean(cov0, axis=0)
        print(
            f"{level:5s} {rule:6s} {ds:12s} q={est.shrinkage:.3f} coverage all coords "
            f"new={cov_new / cnt:.4f} old={cov_old / cnt:.4f} | item0 new={c0[0]:.2f} old={c0[1]:.2f} | "
            f"width new={w_new / trials:.3f} old={w_old / trials:.3f}",
            flush=True,
        )
