"""Method registry of the range-query mechanisms.

``make_mechanism(name, epsilon, domain_sizes, n_users, **options)`` builds any range-query mechanism by
name. HDG, TDG, CALM and Uni live in this package's ``grids``, ``calm`` and ``uni`` modules; HIO, LHIO,
MSW and LSA in ``hio``, ``lhio``, ``msw`` and ``lsa`` (imported lazily, on first use).
:func:`model_from_dict` reloads a finalized model of any method.

Imports go one way: ``ldp.task`` (the task model, which takes its method names from :data:`METHODS`)
imports this module, this module imports ``base``, and the method modules import ``base``; ``base``
imports neither this module nor ``ldp.task``. The range task itself is
:class:`ldp.kinds.range.task.RangeTask`.

The task file of a range-query job is described in ``ldp.task`` and ``docs/range_queries.md``.

Per-group ``auto`` oracles (option ``oracle``, the default of most methods) choose among the frozen
candidates of ``ldp.oracles.AUTO_CANDIDATES``, so a mechanism added to ``ldp.oracles.MECHANISMS`` does not
change an existing task's groups; :func:`group_oracle_specs` lists what each group resolved to (what
``ldp.task.resolve_task`` records and ``ldp.task.parse_task`` checks).
"""

from __future__ import annotations

import importlib
from collections.abc import Mapping, Sequence
from typing import Any

from ldp.rangequery import base
from ldp.rangequery.base import RangeMechanism, RangeModel

__all__ = [
    "METHODS",
    "RangeMechanism",
    "group_oracle_specs",
    "load_method",
    "make_mechanism",
    "model_from_dict",
    "oracle_spec",
    "schema_version",
]

_METHODS: dict[str, tuple[str, str]] = {
    "hdg": ("ldp.rangequery.grids", "HDGMechanism"),
    "tdg": ("ldp.rangequery.grids", "TDGMechanism"),
    "calm": ("ldp.rangequery.calm", "CALMMechanism"),
    "uni": ("ldp.rangequery.uni", "UniMechanism"),
    "hio": ("ldp.rangequery.hio", "HIOMechanism"),
    "lhio": ("ldp.rangequery.lhio", "LHIOMechanism"),
    "msw": ("ldp.rangequery.msw", "MSWMechanism"),
    "lsa": ("ldp.rangequery.lsa", "LSAMechanism"),
}

#: every method name ``make_mechanism`` accepts
METHODS: tuple[str, ...] = tuple(_METHODS)


def load_method(name: str) -> type[RangeMechanism]:
    """The mechanism class of a method name (imports its module, which also registers its model class)."""
    key = str(name).lower()
    if key not in _METHODS:
        raise ValueError(f"unknown range-query method {name!r}; choose one of {list(METHODS)}")
    module, cls = _METHODS[key]
    try:
        mod = importlib.import_module(module)
    except ImportError as exc:  # pragma: no cover - only while a module is missing
        raise ValueError(f"range-query method {key!r} is not available ({exc})") from exc
    return getattr(mod, cls)


#: report schema version of a method's tasks unless its class sets ``schema_version``: categorical reports
DEFAULT_SCHEMA_VERSION = 2


def schema_version(name: str) -> int:
    """The report schema version of a method's tasks: 3 for MSW (Square Wave's integer grid messages,
    ``docs/wire_format.md`` section 7), 2 for the methods that send categorical reports."""
    return int(getattr(load_method(name), "schema_version", DEFAULT_SCHEMA_VERSION))


def make_mechanism(
    name: str, epsilon: float, domain_sizes: Sequence[int], n_users: int, **options: Any
) -> RangeMechanism:
    """Builds a range-query mechanism by name (``hdg tdg calm uni hio lhio msw lsa``)."""
    return load_method(name)(epsilon, domain_sizes, n_users, **options)


def model_from_dict(d: Mapping[str, Any]) -> RangeModel:
    """Rebuilds a finalized model of any method from :meth:`RangeModel.to_dict` output (imports the
    method's module first, which registers its model class)."""
    if isinstance(d, Mapping) and isinstance(d.get("method"), str) and d["method"] in _METHODS:
        load_method(d["method"])
    return base.model_from_dict(d)


def oracle_spec(oracle: Any) -> dict[str, Any]:
    """What identifies a group's oracle: the oracle's own ``spec()``, its ``mechanism`` name,
    ``domain_size`` and the parameters that change its reports (OLH / BLH: the hash ``family`` and ``g``;
    SS: ``k``; memoized mechanisms: ``epsilon_1``), as plain JSON values."""
    return oracle.spec()


def group_oracle_specs(mechanism: RangeMechanism) -> list[dict[str, Any]]:
    """:func:`oracle_spec` of every group's oracle, group 0 first (per-group ``auto`` resolved)."""
    return [oracle_spec(mechanism.group_oracle(g)) for g in range(mechanism.n_groups)]
