"""The sparse-vector task kind (``"kind": "sparse"``) for the task model of :mod:`ldp.task`.

Keys beyond the common ones (``task_id``, ``mechanism``, ``epsilon``, ``window``, ``params``, ...)::

    {
      "mechanism": "svme",          # svme, kfold, sampling, gaussian, harmony, pckv
      "domain_size": 100000,        # required: the item universe d (ids in [0, d), d <= 2**63)
      "sparsity": 64,               # required: k, the most non-zeros a client sends
      "privacy": "user",            # optional, default "user": "event", "user" or an integer L >= 1
      "delta": null,                # optional: SVME's (eps, delta) rule (default 0) / Gaussian delta (1e-6)
      "values": "real",             # optional, default "real": "real" ([-1, 1]) or "binary" ({0, 1})
      "expected_users": 100000,     # optional, default 100000: n in SVME's clip rule and truncation bound
      "params": {"rule": "paper"}   # mechanism options (ldp.sparse.mechanisms.make_sparse_mechanism)
    }

The kind is built into :data:`ldp.task.TASK_KINDS` (``"sparse"``, whose checker is
:func:`build_sparse_task`); :func:`register` is kept for older callers and only makes sure it is there.
The mechanism factory is the final judge of the parameters: whatever it refuses is reported as a task
problem.
"""

from __future__ import annotations

import dataclasses
import math

from ldp import task as _task
from ldp.sparse.mechanisms import make_sparse_mechanism
from ldp.sparse.params import DEFAULT_EXPECTED_USERS, VALUE_KINDS

__all__ = ["SparseTask", "SPARSE_TASK_KIND", "register", "build_sparse_task", "SPARSE_KEYS"]

SPARSE_KEYS = _task.SPARSE_KEYS


@dataclasses.dataclass(frozen=True, kw_only=True)
class SparseTask(_task.Task):
    """A k-sparse vector mean task: one sparse vector in [-1, 1]^d (or {0, 1}^d) per user."""

    kind = "sparse"
    domain_size: int
    sparsity: int
    privacy: str | int = "user"
    delta: float | None = None
    values: str = "real"
    expected_users: int = DEFAULT_EXPECTED_USERS

    def make_mechanism(self):
        """The task's mechanism (:func:`ldp.sparse.mechanisms.make_sparse_mechanism`)."""
        return make_sparse_mechanism(
            self.mechanism,
            epsilon=self.epsilon,
            domain_size=self.domain_size,
            sparsity=self.sparsity,
            privacy=self.privacy,
            values=self.values,
            delta=self.delta,
            expected_users=self.expected_users,
            **dict(self.params),
        )

    def to_dict(self) -> dict[str, object]:
        return {
            **self._common_dict(),
            "domain_size": self.domain_size,
            "sparsity": self.sparsity,
            "privacy": self.privacy,
            "delta": self.delta,
            "values": self.values,
            "expected_users": self.expected_users,
        }


def _is_int(x: object) -> bool:
    return isinstance(x, int) and not isinstance(x, bool)


def build_sparse_task(obj, common: dict[str, object], problems: list[str]) -> SparseTask | None:
    """The checker of the sparse kind's keys (``ldp.task.TaskKind.build``): the task, or None with
    ``problems`` appended."""
    mech = str(common["mechanism"])
    for k in ("domain_size", "sparsity"):
        if k not in obj:
            problems.append(f"missing {k!r} (required by mechanism {mech!r})")
    d, k = obj.get("domain_size"), obj.get("sparsity")
    if "domain_size" in obj and not (_is_int(d) and 2 <= d <= (1 << 63) - 1):
        problems.append(f"domain_size must be an integer in [2, 2^63 - 1], got {d!r}")
    if "sparsity" in obj and not (_is_int(k) and k >= 1):
        problems.append(f"sparsity must be a positive integer, got {k!r}")
    privacy = obj.get("privacy", "user")
    if not (privacy in ("event", "user") or (_is_int(privacy) and privacy >= 1)):
        problems.append(f"privacy must be 'event', 'user' or an integer L >= 1, got {privacy!r}")
    delta = obj.get("delta")
    ok_delta = isinstance(delta, (int, float)) and not isinstance(delta, bool) and math.isfinite(delta)
    if delta is not None and not (ok_delta and 0 <= delta < 1):
        problems.append(f"delta must be a number in [0, 1) or null, got {delta!r}")
    values = obj.get("values", "real")
    if values not in VALUE_KINDS:
        problems.append(f"values must be one of {', '.join(VALUE_KINDS)}, got {values!r}")
    n = obj.get("expected_users", DEFAULT_EXPECTED_USERS)
    if not (_is_int(n) and n >= 2):
        problems.append(f"expected_users must be an integer >= 2, got {n!r}")
    if "n_groups" in obj and not (_is_int(obj["n_groups"]) and obj["n_groups"] == 1):
        problems.append(f"sparse tasks have one group, got n_groups {obj['n_groups']!r}")
    if problems:
        return None
    task = SparseTask(
        domain_size=int(d),
        sparsity=int(k),
        privacy=privacy,
        delta=None if delta is None else float(delta),
        values=str(values),
        expected_users=int(n),
        n_groups=1,
        **common,
    )
    try:
        task.make_mechanism()
    except (TypeError, ValueError) as exc:
        problems.append(f"mechanism parameters rejected by ldp.sparse: {exc}")
        return None
    return task


#: The kind's entry in :data:`ldp.task.TASK_KINDS`.
SPARSE_TASK_KIND = _task.TASK_KINDS["sparse"]


def register() -> None:
    """Makes sure the sparse kind is in :data:`ldp.task.TASK_KINDS` (it is built in; idempotent)."""
    _task.TASK_KINDS.setdefault("sparse", SPARSE_TASK_KIND)
