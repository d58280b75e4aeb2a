"""The batch-query kind's task: a batch of linear (range) queries answered by the Gaussian matrix
mechanism -- **central DP** (a trusted aggregator counts raw records; ``docs/matrix_mechanism.md``).

Keys beyond the common ones: ``"kind": "batch_queries"`` (required: ``lsa`` is also a range method),
``"attributes"`` (the public domain, at most :data:`MAX_BATCH_CELLS` cells), ``"delta"`` (required),
``"calibration"`` and ``"max_contributions"``. The mechanism is a strategy of :data:`BATCH_MECHANISMS`.
Its window releases each record once (no sliding windows, early firings or accumulating panes).
"""

from __future__ import annotations

import dataclasses
import math
from typing import ClassVar

from ldp.task.base import AttributeTask, JsonObject, Problems, WindowConfig
from ldp.task.checks import check_attributes, is_int, is_num, require
from ldp.task.fields import ATTRIBUTES, HASH_WITHOUT_G, NO_RESOLUTION, WINDOW_FIELDS, Field, TaskKind, declare

__all__ = [
    "BatchTask",
    "BATCH_TASK_KIND",
    "BATCH_FIELDS",
    "BATCH_MECHANISMS",
    "BATCH_CALIBRATIONS",
    "MAX_BATCH_CELLS",
    "build_batch_task",
]

#: Strategies of the central-DP batch-query kind (``ldp.matrix.strategies.make_strategy`` names).
BATCH_MECHANISMS: tuple[str, ...] = ("identity", "h2", "haar", "lsa", "opt")
#: Noise calibrations of the batch-query kind (``ldp.matrix.mechanism.CALIBRATIONS``; tests keep them equal).
BATCH_CALIBRATIONS: tuple[str, ...] = ("analytic", "paper", "dwork_roth")
#: Largest public domain (cells) of a batch-query task: strategies are dense (p x n) matrices.
MAX_BATCH_CELLS = 4096
#: Strategy options (``params``) each batch strategy accepts.
BATCH_PARAMS: dict[str, tuple[str, ...]] = {"lsa": ("k_max",), "opt": ("tol", "max_iter")}


@dataclasses.dataclass(frozen=True, kw_only=True)
class BatchTask(AttributeTask):
    """A batch of linear (range) queries answered by the Gaussian matrix mechanism -- **central DP**.

    A trusted aggregator counts the users' raw records per cell of the public product domain
    ``attributes`` (one record per user, at most ``max_contributions``), then adds Gaussian noise once per
    window through the strategy ``mechanism`` with (``epsilon``, ``delta``) and the ``calibration``.
    These records are *not* LDP reports. ``params`` holds strategy options (lsa: ``k_max``; opt:
    ``tol``, ``max_iter``).
    """

    kind: ClassVar[str] = "batch_queries"
    delta: float
    calibration: str = "analytic"
    max_contributions: int = 1

    @property
    def n_cells(self) -> int:
        return math.prod(self.domain_sizes)

    def to_dict(self) -> dict[str, object]:
        out = self._attributes_dict()
        out["delta"] = self.delta
        out["calibration"] = self.calibration
        out["max_contributions"] = self.max_contributions
        return out



def build_batch_task(obj: JsonObject, common: dict[str, object], problems: Problems) -> BatchTask | None:
    mech = str(common["mechanism"])
    if obj.get("kind") != BatchTask.kind:
        problems.append('batch-query tasks must say "kind": "batch_queries" (central DP, raw records)')
    require(obj, ("attributes", "delta"), mech, problems)
    attributes = check_attributes(obj["attributes"], problems) if "attributes" in obj else ()
    cells = math.prod(a.domain_size for a in attributes) if attributes else 0
    if cells > MAX_BATCH_CELLS:
        problems.append(f"the domain has {cells} cells; batch-query tasks allow at most {MAX_BATCH_CELLS}")
    delta = obj.get("delta")
    if "delta" in obj and not (is_num(delta) and 0 < delta < 1):
        problems.append(f"delta must be a number in (0, 1), got {delta!r}")
    cal = obj.get("calibration", "analytic")
    if cal not in BATCH_CALIBRATIONS:
        problems.append(f"calibration must be one of {', '.join(BATCH_CALIBRATIONS)}, got {cal!r}")
    elif cal == "dwork_roth" and float(common["epsilon"]) >= 1:  # type: ignore[arg-type]
        problems.append("calibration 'dwork_roth' is only valid for epsilon < 1 (use 'analytic')")
    k = obj.get("max_contributions", 1)
    if not (is_int(k) and 1 <= k <= 1_000_000):
        problems.append(f"max_contributions must be an integer in [1, 10^6], got {k!r}")
    if "n_groups" in obj and not (is_int(obj["n_groups"]) and obj["n_groups"] == 1):
        problems.append(f"batch-query tasks have one group, got n_groups {obj['n_groups']!r}")
    allowed = BATCH_PARAMS.get(mech, ())
    for key in common["params"]:  # type: ignore[union-attr]
        if key not in allowed:
            problems.append(
                f"params: unknown key {key!r} for strategy {mech!r} (known: {', '.join(allowed) or 'none'})"
            )
    window = common["window"]
    assert isinstance(window, WindowConfig)
    if window.period_s is not None or window.early_firing_s is not None or window.accumulating:
        problems.append(
            "batch-query windows must release each record once: no window.period_s, early_firing_s "
            "or accumulating (every extra release of the same records spends privacy again)"
        )
    if problems:
        return None
    return BatchTask(
        attributes=attributes,
        delta=float(delta),  # type: ignore[arg-type]
        calibration=str(cal),
        max_contributions=int(k),  # type: ignore[arg-type]
        n_groups=1,
        **{**common, "params": dict(common["params"])},  # type: ignore[arg-type]
    )


BATCH_FIELDS: dict[str, Field] = {
    "attributes": ATTRIBUTES,
    "delta": declare("number", exclusive_minimum=0, exclusive_maximum=1),
    "calibration": declare("string", enum=BATCH_CALIBRATIONS, default="analytic"),
    "max_contributions": declare("integer", minimum=1, maximum=1_000_000, default=1),
    "n_groups": declare("integer", enum=(1,)),
    "hash": HASH_WITHOUT_G,
    "resolved": NO_RESOLUTION,
    "window": declare(
        "object",
        "null",
        properties={
            **WINDOW_FIELDS,
            "period_s": declare("null"),
            "early_firing_s": declare("null"),
            "accumulating": declare("boolean", enum=(False,)),
        },
        description="each record is released once: no sliding windows, early firings or accumulating panes",
    ),
}

#: The kind's task section (registered with the kind, ``ldp.kinds.batch_queries``).
BATCH_TASK_KIND = TaskKind(
    "batch_queries",
    lambda: BATCH_MECHANISMS,
    ("attributes", "delta", "calibration", "max_contributions"),
    build_batch_task,
    fields=BATCH_FIELDS,
    required=("kind", "attributes", "delta"),
)
