"""The sparse kind's task: k-sparse vector means (``docs/sparse_vectors.md``).

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

The mechanism factory is the final judge of the parameters: whatever it refuses is reported as a task
problem.
"""

from __future__ import annotations

import dataclasses
import math
from typing import ClassVar

from ldp.sparse.mechanisms import SPARSE_MECHANISMS, make_sparse_mechanism
from ldp.sparse.params import DEFAULT_EXPECTED_USERS, VALUE_KINDS
from ldp.task.base import Task
from ldp.task.checks import is_int
from ldp.task.fields import HASH_WITHOUT_G, NO_RESOLUTION, Field, TaskKind, declare

__all__ = ["SparseTask", "SPARSE_TASK_KIND", "SPARSE_FIELDS", "build_sparse_task", "SPARSE_KEYS"]

#: The sparse kind's own keys.
SPARSE_KEYS: tuple[str, ...] = ("domain_size", "sparsity", "privacy", "delta", "values", "expected_users")


@dataclasses.dataclass(frozen=True, kw_only=True)
class SparseTask(Task):
    """A k-sparse vector mean task: one sparse vector in [-1, 1]^d (or {0, 1}^d) per user."""

    kind: ClassVar[str] = "sparse"
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


def build_sparse_task(obj, common: dict[str, object], problems: list[str]) -> SparseTask | None:
    """The checker of the sparse kind's keys (:attr:`ldp.task.TaskKind.build`): the task, or None with
    ``problems`` appended."""
    mech = str(common["mechanism"])
    for k in ("domain_size", "sparsity"):
        if k not in obj:
            problems.append(f"missing {k!r} (required by mechanism {mech!r})")
    d, k = obj.get("domain_size"), obj.get("sparsity")
    if "domain_size" in obj and not (is_int(d) and 2 <= d <= (1 << 63) - 1):
        problems.append(f"domain_size must be an integer in [2, 2^63 - 1], got {d!r}")
    if "sparsity" in obj and not (is_int(k) and k >= 1):
        problems.append(f"sparsity must be a positive integer, got {k!r}")
    privacy = obj.get("privacy", "user")
    if not (privacy in ("event", "user") or (is_int(privacy) and privacy >= 1)):
        problems.append(f"privacy must be 'event', 'user' or an integer L >= 1, got {privacy!r}")
    delta = obj.get("delta")
    ok_delta = isinstance(delta, (int, float)) and not isinstance(delta, bool) and math.isfinite(delta)
    if delta is not None and not (ok_delta and 0 <= delta < 1):
        problems.append(f"delta must be a number in [0, 1) or null, got {delta!r}")
    values = obj.get("values", "real")
    if values not in VALUE_KINDS:
        problems.append(f"values must be one of {', '.join(VALUE_KINDS)}, got {values!r}")
    n = obj.get("expected_users", DEFAULT_EXPECTED_USERS)
    if not (is_int(n) and n >= 2):
        problems.append(f"expected_users must be an integer >= 2, got {n!r}")
    if "n_groups" in obj and not (is_int(obj["n_groups"]) and obj["n_groups"] == 1):
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


SPARSE_FIELDS: dict[str, Field] = {
    "domain_size": declare("integer", minimum=2, maximum=(1 << 63) - 1),
    "sparsity": declare("integer", minimum=1),
    "privacy": Field(
        (), any_of=(declare("string", enum=("event", "user")), declare("integer", minimum=1)), default="user"
    ),
    "delta": declare("number", "null", minimum=0, exclusive_maximum=1),
    "values": declare("string", enum=("real", "binary"), default="real"),
    "expected_users": declare("integer", minimum=2, default=100_000),
    "n_groups": declare("integer", enum=(1,)),
    "hash": HASH_WITHOUT_G,
    "resolved": NO_RESOLUTION,
}

#: The kind's task section (registered with the kind, ``ldp.kinds.sparse``).
SPARSE_TASK_KIND = TaskKind(
    "sparse",
    lambda: tuple(SPARSE_MECHANISMS),
    SPARSE_KEYS,
    build_sparse_task,
    fields=SPARSE_FIELDS,
    required=("domain_size", "sparsity"),
)
