"""The range kind's task: multi-dimensional range queries (Yang et al., VLDB 2021), one record of
``attributes`` per user.

Keys beyond the common ones: ``"attributes"`` (required, ``[{"name", "domain_size"}, ...]``),
``"expected_users"`` (required), ``"granularity"`` (``{"g1", "g2"}``, hdg / tdg), ``"options"`` (method
options; ``params`` is an alias) and the ``"anonymity"`` section. The mechanism is a method of
``ldp.rangequery.registry.METHODS``; ``n_groups`` is the method's and ``schema_version`` the method's
(msw 3, its integer grid messages; the others 2).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import ClassVar

import ldp.oracles as _oracles
from ldp.rangequery import registry as _range_registry
from ldp.task.base import AttributeTask, JsonObject, Problems
from ldp.task.checks import as_object, check_attributes, is_int, require
from ldp.task.fields import ANONYMITY, ATTRIBUTES, EPSILON_OR_AUTO, HASH_WITHOUT_G, Field, TaskKind, declare

__all__ = ["RangeTask", "RANGE_TASK_KIND", "RANGE_FIELDS", "MULTI_ATTRIBUTE_MECHANISMS", "build_range_task"]

#: Multi-attribute (range-query) methods (``ldp.rangequery.registry.METHODS``).
MULTI_ATTRIBUTE_MECHANISMS: tuple[str, ...] = tuple(_range_registry.METHODS)


@dataclasses.dataclass(frozen=True, kw_only=True)
class RangeTask(AttributeTask):
    """A multi-dimensional range-query task (Yang et al., VLDB 2021): one record of ``attributes`` per user.

    ``n_groups`` is the method's number of user groups (computed when the task is parsed).
    """

    kind: ClassVar[str] = "range"
    expected_users: int
    granularity: Mapping[str, int] = dataclasses.field(default_factory=dict)

    @property
    def options(self) -> dict[str, object]:
        """The method options: ``params`` (alias ``options`` in the file) plus ``granularity``."""
        return {**self.params, **self.granularity}

    def make_mechanism(self) -> _range_registry.RangeMechanism:
        """The mechanism this task describes (``ldp.rangequery.registry.make_mechanism``)."""
        return _range_registry.make_mechanism(
            self.mechanism, self.epsilon, self.domain_sizes, self.expected_users, **self.options
        )

    def default_expected_reports(self) -> int | None:
        return self.expected_users

    def oracle_resolution(self) -> tuple[int, list[dict[str, object]]]:
        # the per-group ``auto`` oracles choose among the candidates of version 2 whatever the wire version
        # (msw's version 3 changes its Square Wave messages, not any frequency oracle)
        return _oracles.AUTO_SCHEMA_VERSION, _range_registry.group_oracle_specs(self.make_mechanism())

    def to_dict(self) -> dict[str, object]:
        out = self._attributes_dict()
        out["expected_users"] = self.expected_users
        if self.granularity:
            out["granularity"] = dict(self.granularity)
        return out



def _schema_version(obj: JsonObject, common: dict[str, object], problems: Problems) -> None:
    """A range task's report schema version is its method's (``ldp.rangequery.registry.schema_version``:
    msw 3, the integer grid wire; the others 2); absent, it defaults to the method's."""
    mech = str(common["mechanism"])
    if mech not in _range_registry.METHODS:
        return  # not a range method: refused by the mechanism check
    want = _range_registry.schema_version(mech)
    if "schema_version" not in obj:
        common["schema_version"] = want
        return
    sv = obj["schema_version"]
    if sv == want or not is_int(sv) or sv not in RANGE_SCHEMA_VERSIONS:
        return  # equal, or already refused by the field's check
    if want == 3:
        problems.append(
            f"schema_version {sv} is retired for {mech} (float_reals_retired: version 2 sent floating-point "
            "Square Wave reals that leak the input; version 3 sends integer grid messages): make a new task "
            "with schema_version 3"
        )
    else:
        problems.append(f"schema_version must be {want} for {mech} (version 3 is msw's integer grid wire)")


def build_range_task(obj: JsonObject, common: dict[str, object], problems: Problems) -> RangeTask | None:
    mech = str(common["mechanism"])
    _schema_version(obj, common, problems)
    require(obj, ("attributes", "expected_users"), mech, problems)
    attributes = check_attributes(obj["attributes"], problems) if "attributes" in obj else ()
    n = obj.get("expected_users")
    if "expected_users" in obj and not (is_int(n) and n >= 1):
        problems.append(f"expected_users must be a positive integer, got {n!r}")
    options = as_object(obj.get("options"), "options", problems)
    common["params"] = {**dict(common["params"]), **options}  # type: ignore[arg-type]
    gran = as_object(obj.get("granularity"), "granularity", problems)
    if gran and mech not in ("hdg", "tdg"):
        problems.append(f"granularity applies to hdg/tdg only, not {mech}")
    if not set(gran) <= {"g1", "g2"}:
        problems.append(f"granularity must be an object with g1 and/or g2, got keys {sorted(gran)}")
    if problems:
        return None
    probe = RangeTask(
        attributes=attributes, expected_users=int(n), granularity=dict(gran), n_groups=1, **common
    )
    try:  # the method is the final judge of its options (e.g. a granularity that is not a power of two)
        n_groups = probe.make_mechanism().n_groups
    except (ValueError, ArithmeticError) as exc:
        problems.append(f"mechanism options rejected by ldp.rangequery ({mech}): {exc}")
        return None
    if "n_groups" in obj and not (is_int(obj["n_groups"]) and obj["n_groups"] == n_groups):
        problems.append(f"n_groups {obj['n_groups']!r} does not match {mech}'s {n_groups} groups")
        return None
    return dataclasses.replace(probe, n_groups=n_groups)


#: range tasks take version 2 (categorical reports) or 3 (msw: integer grid messages), the method's own
RANGE_SCHEMA_VERSIONS: tuple[int, ...] = (2, 3)
RANGE_FIELDS: dict[str, Field] = {
    "schema_version": declare(
        "integer",
        enum=RANGE_SCHEMA_VERSIONS,
        description="the method's: 3 for msw (integer grid messages, docs/wire_format.md section 7; its "
        "version 2 float reals are retired, float_reals_retired), 2 for the others; default the method's",
    ),
    "attributes": ATTRIBUTES,
    "expected_users": declare("integer", minimum=1),
    "granularity": declare(
        "object",
        "null",
        properties={"g1": declare("integer", minimum=2), "g2": declare("integer", minimum=2)},
        description="hdg / tdg: grid granularities (powers of two)",
    ),
    "options": declare("object", "null", description="method options (params is an alias)"),
    "hash": HASH_WITHOUT_G,
    "epsilon": EPSILON_OR_AUTO,
    "anonymity": ANONYMITY,
}

#: The kind's task section (registered with the kind, ``ldp.kinds.range``).
RANGE_TASK_KIND = TaskKind(
    "range",
    lambda: MULTI_ATTRIBUTE_MECHANISMS,
    ("attributes", "expected_users", "granularity", "options", "anonymity"),
    build_range_task,
    fields=RANGE_FIELDS,
    required=("attributes", "expected_users"),
    expected_reports_key="expected_users",
)
