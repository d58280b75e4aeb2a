"""One factory for every sparse-vector mechanism, by the names a task uses.

``make_sparse_mechanism("svme", epsilon=1, domain_size=10**5, sparsity=64, privacy="user")`` returns
an object with the shared shape ``encode(vectors, rng=None) -> (reports, EncodeStats)``,
``create_accumulator(items=None)``, ``add``, ``merge``, ``estimate(acc) -> SparseEstimate``,
``variance(vectors, items)``, ``report_bits`` and ``describe()``. Names (:data:`SPARSE_MECHANISMS`):
``svme``, ``kfold``, ``sampling``, ``gaussian``, ``harmony``, ``pckv``.
"""

from __future__ import annotations

from ldp.sparse.accumulate import SVME
from ldp.sparse.baselines import PCKV, Gaussian, Harmony, KFold, Sampling
from ldp.sparse.params import DEFAULT_EXPECTED_USERS, choose_params

__all__ = ["SPARSE_MECHANISMS", "SPARSE_MECHANISM_CLASSES", "make_sparse_mechanism"]

#: name -> mechanism class (each declares its payload and its ``wire`` spec)
SPARSE_MECHANISM_CLASSES: dict[str, type] = {
    cls.name: cls for cls in (SVME, KFold, Sampling, Gaussian, Harmony, PCKV)
}
SPARSE_MECHANISMS: tuple[str, ...] = tuple(SPARSE_MECHANISM_CLASSES)


def make_sparse_mechanism(
    mechanism: str,
    *,
    epsilon: float,
    domain_size: int,
    sparsity: int,
    privacy: str | int = "user",
    values: str = "real",
    delta: float | None = None,
    expected_users: int = DEFAULT_EXPECTED_USERS,
    **options,
):
    """The mechanism called ``mechanism`` (see the module docstring).

    ``delta``: SVME's (eps, delta) rule (default 0: pure eps) or the Gaussian's delta (default 1e-6).
    ``options``: SVME: ``rule``, ``hash_family``, ``grid``, ``bins``, ``eta``, ``noise``; k-fold and
    sampling: ``hash_family``; Gaussian: ``calibration``; PCKV: ``estimator``.

    Raises:
        ValueError: an unknown name or option, or invalid parameters.
    """
    common = dict(privacy=privacy, values=values)
    allowed = {
        "svme": {"rule", "hash_family", "grid", "bins", "eta", "noise"},
        "kfold": {"hash_family"},
        "sampling": {"hash_family"},
        "gaussian": {"calibration"},
        "harmony": set(),
        "pckv": {"estimator"},
    }
    if mechanism not in allowed:
        raise ValueError(f"unknown sparse mechanism {mechanism!r}; known: {', '.join(SPARSE_MECHANISMS)}")
    extra = set(options) - allowed[mechanism]
    if extra:
        raise ValueError(
            f"{mechanism} takes no option(s) {sorted(extra)}; allowed: {sorted(allowed[mechanism])}"
        )
    if mechanism == "svme":
        params = choose_params(
            epsilon,
            domain_size,
            sparsity,
            privacy,
            values=values,
            delta=0.0 if delta is None else delta,
            expected_users=expected_users,
            **options,
        )
        return SVME(params)
    if mechanism == "gaussian":
        return Gaussian(
            epsilon, domain_size, sparsity, delta=1e-6 if delta is None else delta, **common, **options
        )
    if delta not in (None, 0, 0.0):
        raise ValueError(f"{mechanism} is pure eps-LDP; it takes no delta")
    cls = {"kfold": KFold, "sampling": Sampling, "harmony": Harmony, "pckv": PCKV}[mechanism]
    return cls(epsilon, domain_size, sparsity, **common, **options)
