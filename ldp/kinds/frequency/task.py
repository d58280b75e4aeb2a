"""The frequency kind's task: one value in ``[0, domain_size)`` per user, a frequency oracle.

Keys beyond the common ones: ``"domain_size"`` (required, an integer in [2, 2^31]), value labels (inline
``"labels"`` or a ``"labels_file"`` relative to the task file, not both; :mod:`ldp.task.labels`), the
per-user ``"budget"`` of repeated collection (``client_ids``: reports carry the client's pseudonym and the
aggregator counts them per period), ``"hide_participation"`` (a dummy value ``domain_size`` when a client
has nothing to report) and the ``"anonymity"`` section (:mod:`ldp.anonymity`). The mechanism is one of
``ldp.oracles.MECHANISMS``, a memoized one (``ldp.longitudinal.memo.MEMO_MECHANISMS``; ``epsilon`` is
``epsilon_inf``) or ``auto`` (the frozen candidates of the task's ``schema_version``).
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import ClassVar

import ldp.oracles as _oracles
from ldp.longitudinal import memo as _memo
from ldp.longitudinal.budget import BudgetPolicy
from ldp.rangequery import registry as _range_registry
from ldp.task.base import MAX_DOMAIN, JsonObject, Problems, Task
from ldp.task.budget import check_budget
from ldp.task.checks import check_n_groups, is_int, require
from ldp.task.fields import ANONYMITY, BUDGET, EPSILON_OR_AUTO, Field, TaskKind, declare
from ldp.task.labels import MAX_LABEL_CHARS, MAX_LABELS, check_labels, labels_from_file

__all__ = [
    "FrequencyTask",
    "FREQUENCY_TASK_KIND",
    "FREQUENCY_FIELDS",
    "ORACLE_MECHANISMS",
    "MEMO_MECHANISMS",
    "ABSENT_LABEL",
    "build_frequency_task",
]

#: Memoized mechanisms of repeated collection (``ldp.longitudinal.memo.MEMO_MECHANISMS``).
MEMO_MECHANISMS: tuple[str, ...] = tuple(_memo.MEMO_MECHANISMS)
#: 1-D frequency-oracle mechanisms (``ldp.oracles.MECHANISMS``, then the memoized ones); ``auto`` picks the
#: lowest-variance fresh one.
ORACLE_MECHANISMS: tuple[str, ...] = (*_oracles.MECHANISMS, *MEMO_MECHANISMS, "auto")
#: Label of the dummy value of a task that hides participation (appended to the task's labels).
ABSENT_LABEL = "(no event)"


@dataclasses.dataclass(frozen=True, kw_only=True)
class FrequencyTask(Task):
    """A 1-D frequency-estimation task: one value in ``[0, domain_size)`` per user."""

    kind: ClassVar[str] = "frequency"
    domain_size: int
    #: ``labels[i]`` names value ``i`` (``None``: values are shown as numbers); with ``hide_participation``
    #: the last one is :data:`ABSENT_LABEL`, the dummy value's.
    labels: tuple[str, ...] | None = None
    #: the per-user budget of repeated collection (``None``: none declared)
    budget: BudgetPolicy | None = None
    #: reports carry pseudonymous client ids and the aggregator counts them per budget period
    budget_client_ids: bool = False
    #: clients report every window, the dummy value :meth:`absent_value` when they have nothing to report
    hide_participation: bool = False

    @property
    def requires_client_ids(self) -> bool:
        return self.budget is not None and self.budget_client_ids

    @property
    def is_memoized(self) -> bool:
        """True for the memoized mechanisms (``ldp.longitudinal.memo``)."""
        return self.mechanism in MEMO_MECHANISMS

    @property
    def oracle_domain_size(self) -> int:
        """The oracle's domain: ``domain_size``, plus the dummy value when participation is hidden."""
        return self.domain_size + (1 if self.hide_participation else 0)

    def absent_value(self) -> int | None:
        """The dummy value clients report when they have nothing to report (``domain_size``), or None when
        the task does not hide participation."""
        return self.domain_size if self.hide_participation else None

    def label(self, value: int) -> str:
        """The name of ``value``: its label, else the number as text."""
        return self.labels[value] if self.labels is not None else str(value)

    def oracle_params(self) -> dict[str, object]:
        """Keyword arguments for ``ldp.oracles.make_oracle`` beyond name, epsilon and domain."""
        out = dict(self.params)
        if self.hash.g is not None:
            out["g"] = self.hash.g
        if self.mechanism == "olh":
            out["family"] = self.hash.family
        return out

    def make_oracle(self) -> _oracles.FrequencyOracle:
        """The task's frequency oracle (``ldp.oracles.make_oracle``, or ``ldp.longitudinal.memo`` for the
        memoized mechanisms) over :attr:`oracle_domain_size`. ``auto`` resolves deterministically among the
        frozen candidates of the task's ``schema_version`` (``ldp.oracles.AUTO_CANDIDATES``): clients and the
        aggregator call this same method, so they build the same oracle whatever their release."""
        d = self.oracle_domain_size
        params = self.oracle_params()
        if self.is_memoized:
            return _memo.make_memo_oracle(self.mechanism, self.epsilon, d, **params)
        if self.mechanism == "auto" and not params:
            oracle, table = _oracles.choose_oracle(self.epsilon, d, schema_version=self.schema_version)
            oracle.choice = table
            return oracle
        return _oracles.make_oracle(self.mechanism, self.epsilon, d, **params)

    def grr_domain(self) -> int | None:
        if self.is_memoized:
            return None
        try:
            return self.oracle_domain_size if self.make_oracle().name == "grr" else None
        except (ValueError, ArithmeticError):
            return None

    def oracle_resolution(self) -> tuple[int, list[dict[str, object]]]:
        return self.schema_version, [_range_registry.oracle_spec(self.make_oracle())]

    def to_dict(self) -> dict[str, object]:
        out = {**self._common_dict(), "domain_size": self.domain_size}
        if self.labels is not None:
            out["labels"] = list(self.labels[: self.domain_size])
        if self.budget is not None:
            out["budget"] = {**self.budget.to_dict(), "client_ids": self.budget_client_ids}
        if self.hide_participation:
            out["hide_participation"] = True
        return out



def build_frequency_task(
    obj: JsonObject, common: dict[str, object], problems: Problems, base_dir: Path = Path(".")
) -> FrequencyTask | None:
    mech = str(common["mechanism"])
    d = obj.get("domain_size")
    require(obj, ("domain_size",), mech, problems)
    if "domain_size" in obj and not (is_int(d) and 2 <= d <= MAX_DOMAIN):
        problems.append(f"domain_size must be an integer in [2, 2^31], got {d!r}")
    common["n_groups"] = check_n_groups(obj, problems)
    labels: tuple[str, ...] | None = None
    if "labels" in obj and "labels_file" in obj:
        problems.append("give labels or labels_file, not both")
    elif "labels_file" in obj:
        labels = labels_from_file(obj["labels_file"], d, base_dir, problems)
    elif obj.get("labels") is not None:
        labels = check_labels(obj["labels"], d, problems)
    hide = obj.get("hide_participation", False)
    if not isinstance(hide, bool):
        problems.append(f"hide_participation must be true or false, got {hide!r}")
        hide = False
    if hide and is_int(d) and d >= MAX_DOMAIN:
        problems.append(f"hide_participation needs domain_size < 2^31 (one more value), got {d}")
    if problems:
        return None
    if hide and labels is not None:
        if ABSENT_LABEL in labels:
            problems.append(f"labels: {ABSENT_LABEL!r} names the dummy value of hide_participation")
            return None
        labels = (*labels, ABSENT_LABEL)
    task = FrequencyTask(domain_size=int(d), labels=labels, hide_participation=hide, **common)
    try:  # the oracle is the final judge of mechanism parameters (e.g. g not a prime power)
        oracle = task.make_oracle()
    except (ValueError, ArithmeticError) as exc:  # ArithmeticError: a formula at an extreme epsilon
        where = "ldp.longitudinal.memo" if task.is_memoized else "ldp.oracles"
        problems.append(f"mechanism parameters rejected by {where}: {exc}")
        return None
    if obj.get("budget") is not None:
        policy, client_ids = check_budget(obj["budget"], oracle, problems)
        if policy is None:
            return None
        task = dataclasses.replace(task, budget=policy, budget_client_ids=client_ids)
    return task


FREQUENCY_FIELDS: dict[str, Field] = {
    "domain_size": declare("integer", minimum=2, maximum=MAX_DOMAIN),
    "labels": declare(
        "array",
        "null",
        min_items=2,
        max_items=MAX_LABELS,
        unique_items=True,
        items=declare("string", min_length=1, max_length=MAX_LABEL_CHARS, pattern=r"^\S(.*\S)?$"),
        description="one label per value (domain_size of them); label i names value i",
    ),
    "labels_file": declare("string", pattern=r"\S", description="a labels file, relative to the task file"),
    "budget": BUDGET,
    "hide_participation": declare("boolean", default=False),
    "epsilon": EPSILON_OR_AUTO,
    "anonymity": ANONYMITY,
}

#: The kind's task section (registered with the kind, ``ldp.kinds.frequency``).
FREQUENCY_TASK_KIND = TaskKind(
    "frequency",
    lambda: ORACLE_MECHANISMS,
    ("domain_size", "labels", "labels_file", "budget", "hide_participation", "anonymity"),
    build_frequency_task,
    uses_base_dir=True,
    fields=FREQUENCY_FIELDS,
    required=("domain_size",),
    exclusive=(("labels", "labels_file"),),
)
