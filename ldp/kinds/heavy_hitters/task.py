"""The heavy_hitters kind's task: the frequent strings of at most ``max_length`` bytes, found by PEM.

Keys beyond the common ones::

    {"task_id": "words", "kind": "heavy_hitters", "mechanism": "pem",  # or "auto": the same
     "epsilon": 4.0,
     "max_length": 6,            # required: values are UTF-8 strings or bytes of at most this many bytes
     "truncate": false,          # clients cut a longer value to max_length bytes instead of refusing it
     "top_k": 20,                # the most strings published per window
     "expected_users": 1000000,  # reports expected per window (the olh search's candidates; the plan)
     "mode": "one_window",       # or "trie": one level per window, the survivors published between windows
     "anonymity": {"shuffled": true, "central_epsilon": 1.0},  # optional: through the shuffler
     "params": {"first_bits": 22, "step_bits": 13, "candidates": 2048, "search": "auto",
                "rule": "bh", "alpha": 0.05, "sketch_seed": 0}}

``params`` overrides what ``auto`` takes from the core (:class:`ldp.heavy_hitters.PEM`): the level layout
(``first_bits``, ``step_bits``), the prefixes kept per level (``candidates``), the search (``auto`` =
``sketch``, or ``olh``), the publication rule (``bh`` or ``bonferroni``) at ``alpha`` (null: the
``top_k`` largest, untested) and the public row-hash keys (``sketch_seed``).

A report's group is its level: ``n_groups`` is derived from the layout (the search levels plus the
verification level) and never written in the task.

``anonymity`` (:mod:`ldp.anonymity`, docs/shuffler.md): reports collected through the shuffler, with an
optional central target (``"epsilon": "auto"`` picks the largest local epsilon at which every level meets
it, ``expected_reports`` defaulting to ``expected_users``); each level is accounted at its own reports
(:mod:`ldp.shuffle.levels`).

``mode``: ``one_window`` (default) assigns each user a level at random and runs the whole search in every
window; ``trie`` has every client of a window report at the one level the previous window published
(levels 0, 1, ..., the verification level, then level 0 again; :mod:`ldp.heavy_hitters.trie`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any, ClassVar

from ldp.heavy_hitters.pem import DIRECT_BITS, PEM, SEARCHES, SKETCH_CANDIDATES
from ldp.heavy_hitters.strings import MAX_LENGTH_LIMIT
from ldp.selection import RULES
from ldp.task.base import AUTO_EPSILON, JsonObject, Problems, Task
from ldp.task.checks import is_int, is_num
from ldp.task.fields import ANONYMITY, HASH_WITHOUT_G, NO_RESOLUTION, Field, TaskKind, declare

__all__ = [
    "HeavyHittersTask",
    "HEAVY_HITTERS_TASK_KIND",
    "HEAVY_HITTERS_FIELDS",
    "MECHANISMS",
    "PARAMS",
    "DEFAULT_TOP_K",
    "MAX_TOP_K",
    "MAX_EXPECTED_USERS",
    "MODES",
]

#: the task's mechanisms: PEM, and ``auto`` (PEM with the core's parameters)
MECHANISMS: tuple[str, ...] = ("pem", "auto")
DEFAULT_TOP_K = 20
MAX_TOP_K = 100_000
MAX_EXPECTED_USERS = 10**12
MAX_SKETCH_SEED = 2**53
#: ``mode``: the whole search in every window, or one level per window with the survivors published between
MODES: tuple[str, ...] = ("one_window", "trie")
_KEYS = ("max_length", "truncate", "top_k", "expected_users", "mode", "anonymity")


@dataclasses.dataclass(frozen=True, kw_only=True)
class HeavyHittersTask(Task):
    """Open-domain heavy hitters: each user holds one string of at most ``max_length`` bytes."""

    kind: ClassVar[str] = "heavy_hitters"
    max_length: int
    truncate: bool = False
    top_k: int = DEFAULT_TOP_K
    expected_users: int | None = None
    mode: str = "one_window"

    @property
    def resolved_mechanism(self) -> str:
        """What clients and aggregator run: ``pem`` (``auto`` has no other candidate)."""
        return "pem"

    def default_expected_reports(self) -> int | None:
        """The reports per shuffled window when ``anonymity.expected_reports`` is not given."""
        return self.expected_users

    def make_mechanism(self) -> PEM:
        """The task's :class:`~ldp.heavy_hitters.PEM` (``params`` over the core's defaults)."""
        return _make_pem(self.epsilon, self.max_length, self.top_k, self.expected_users, self.params)

    def to_dict(self) -> dict[str, object]:
        out = self._common_dict()
        out.pop("n_groups")  # derived from the levels
        out.update(max_length=self.max_length, truncate=self.truncate, top_k=self.top_k)
        if self.expected_users is not None:
            out["expected_users"] = self.expected_users
        if self.mode != "one_window":
            out["mode"] = self.mode
        return out


def _make_pem(epsilon: float, max_length: int, top_k: int, expected: int | None,
              params: Mapping[str, Any]) -> PEM:
    p = dict(params)
    return PEM(
        epsilon,
        max_length,
        top_k=top_k,
        candidates=p.get("candidates"),
        first_bits=p.get("first_bits"),
        step_bits=p.get("step_bits"),
        alpha=p.get("alpha", 0.05),
        rule=p.get("rule", "bh"),
        expected_n=expected,
        search=p.get("search", "auto"),
        sketch_seed=p.get("sketch_seed", 0),
    )


#: ``params`` keys: their declarations (the JSON Schema's) and the core's defaults
PARAMS: dict[str, Field] = {
    "first_bits": declare("integer", minimum=1, maximum=DIRECT_BITS,
                          description="bits of the first level (at most 8 max_length); default: the core's"),
    "step_bits": declare("integer", minimum=1, maximum=32,
                         description="bits added per level; default: the most the candidates allow"),
    "candidates": declare("integer", minimum=1, maximum=SKETCH_CANDIDATES // 2,
                          description="prefixes kept per level (olh search: at most 131072); default 2048 "
                          "(sketch) or sized from expected_users (olh)"),
    "search": declare("string", enum=SEARCHES, default="auto", description="auto = sketch; olh"),
    "rule": declare("string", enum=RULES, default="bh",
                    description="multiple-comparison rule of publication (ldp.selection)"),
    "alpha": declare("number", "null", exclusive_minimum=0, exclusive_maximum=1, default=0.05,
                     description="error rate of the rule; null: publish the top_k largest, untested"),
    "sketch_seed": declare("integer", minimum=0, maximum=MAX_SKETCH_SEED, default=0,
                           description="seed of the public row-hash keys of the sketch levels"),
}


def _check_params(raw: Mapping[str, Any], problems: Problems) -> bool:
    ok = True
    for key, value in raw.items():
        f = PARAMS.get(key)
        if f is None:
            problems.append(f"params: unknown key {key!r} (known: {', '.join(PARAMS)})")
            ok = False
        elif f.enum is not None and value not in f.enum:
            problems.append(f"params.{key} must be one of {', '.join(map(str, f.enum))}, got {value!r}")
            ok = False
        elif f.enum is None and not _in_bounds(f, value):
            problems.append(f"params.{key} must be {_bounds_text(f)}, got {value!r}")
            ok = False
    return ok


def _in_bounds(f: Field, value: object) -> bool:
    if value is None:
        return "null" in f.type
    if not (is_int(value) if f.type[0] == "integer" else is_num(value)):
        return False
    v: float = value  # type: ignore[assignment]  # int against the bounds exactly (no float rounding)
    return not (
        (f.minimum is not None and v < f.minimum) or (f.maximum is not None and v > f.maximum)
        or (f.exclusive_minimum is not None and v <= f.exclusive_minimum)
        or (f.exclusive_maximum is not None and v >= f.exclusive_maximum)
    )


def _bounds_text(f: Field) -> str:
    lo = f"[{f.minimum:g}" if f.minimum is not None else f"({f.exclusive_minimum:g}"
    hi = f"{f.maximum:g}]" if f.maximum is not None else f"{f.exclusive_maximum:g})"
    kind = "an integer" if f.type[0] == "integer" else "a number"
    return f"{kind} in {lo}, {hi}" + (" or null" if "null" in f.type else "")


def _int_key(
    obj: JsonObject, key: str, lo: int, hi: int, default: int | None, problems: Problems
) -> int | None:
    raw = obj.get(key, default)
    if raw is None and default is None:
        return None
    if not (is_int(raw) and lo <= raw <= hi):  # type: ignore[operator]
        problems.append(f"{key} must be an integer in [{lo}, {hi}], got {raw!r}")
        return None
    return int(raw)  # type: ignore[arg-type]


def _build(obj: JsonObject, common: dict[str, object], problems: Problems) -> HeavyHittersTask | None:
    if obj.get("kind") != HeavyHittersTask.kind:
        problems.append('heavy_hitters tasks must say "kind": "heavy_hitters"')
    if "max_length" not in obj:
        problems.append("missing 'max_length' (required by heavy_hitters tasks)")
    max_length = None
    if "max_length" in obj:
        max_length = _int_key(obj, "max_length", 1, MAX_LENGTH_LIMIT, 0, problems)
    top_k = _int_key(obj, "top_k", 1, MAX_TOP_K, DEFAULT_TOP_K, problems)
    expected = _int_key(obj, "expected_users", 1, MAX_EXPECTED_USERS, None, problems)
    truncate = obj.get("truncate", False)
    if not isinstance(truncate, bool):
        problems.append(f"truncate must be true or false, got {truncate!r}")
    mode = obj.get("mode", "one_window")
    if mode not in MODES:
        problems.append(f"mode must be one of {', '.join(MODES)}, got {mode!r}")
    if obj.get("n_groups") is not None:
        problems.append("n_groups is derived from the levels (one group per level) in heavy_hitters tasks: "
                        "leave it out")
    if common.get("postprocess", "base") != "base":
        problems.append(f"postprocess must be 'base' in heavy_hitters tasks, got {common['postprocess']!r}")
    params = dict(common.get("params") or {})  # type: ignore[call-overload]
    if not _check_params(params, problems) or problems:
        return None
    assert max_length is not None and top_k is not None
    try:
        pem = _make_pem(float(common["epsilon"]), max_length, top_k, expected, params)  # type: ignore[arg-type]
    except ValueError as exc:
        problems.append(f"mechanism parameters rejected by ldp.heavy_hitters: {exc}")
        return None
    return HeavyHittersTask(
        max_length=max_length, truncate=bool(truncate), top_k=top_k, expected_users=expected, mode=str(mode),
        **{**common, "params": params, "n_groups": len(pem.levels)},  # type: ignore[arg-type]
    )


HEAVY_HITTERS_FIELDS: dict[str, Field] = {
    "max_length": declare("integer", minimum=1, maximum=MAX_LENGTH_LIMIT,
                          description="the most bytes a value has (UTF-8 strings or bytes)"),
    "truncate": declare("boolean", default=False,
                        description="clients cut a longer value to max_length bytes (a string at a character "
                        "boundary) instead of refusing it"),
    "top_k": declare("integer", minimum=1, maximum=MAX_TOP_K, default=DEFAULT_TOP_K,
                     description="the most strings published per window"),
    "expected_users": declare("integer", "null", minimum=1, maximum=MAX_EXPECTED_USERS,
                              description="reports expected per window (the olh search's candidates; "
                              "the plan)"),
    "mode": declare("string", enum=MODES, default="one_window",
                    description="one_window: the whole search in every window; trie: every client of a "
                    "window reports at the one level the previous window published"),
    "epsilon": Field((), any_of=(declare("number", exclusive_minimum=0, maximum=20),
                                 declare("string", enum=(AUTO_EPSILON,))),
                     description='the local epsilon; "auto": the largest meeting anonymity.central_epsilon '
                     "at every level"),
    "anonymity": ANONYMITY,
    "schema_version": declare("integer", enum=(2,), default=2),
    "n_groups": declare("null", description="derived: one group per level (search levels and verification)"),
    "postprocess": declare("string", enum=("base",), default="base"),
    "params": declare("object", "null", properties=PARAMS,
                      description="overrides of the core's parameters (ldp.heavy_hitters.PEM)"),
    "hash": HASH_WITHOUT_G,
    "resolved": NO_RESOLUTION,
}

#: The kind's task section (registered with the kind, ``ldp.kinds.heavy_hitters``).
HEAVY_HITTERS_TASK_KIND = TaskKind(
    "heavy_hitters",
    lambda: MECHANISMS,
    _KEYS,
    _build,
    fields=HEAVY_HITTERS_FIELDS,
    required=("kind", "max_length"),
    expected_reports_key="expected_users",
)
