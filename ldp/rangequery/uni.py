"""Uni: the uniform-guess baseline (Yang et al., VLDB 2021, Section 6.1).

Collects nothing and answers every query with its volume, i.e. the answer it would have if the records were
uniformly distributed over the domain. Useful as the floor every LDP method must beat.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from ldp.payload import PayloadField, PayloadSpec, Refusal, refuse
from ldp.rangequery.base import RangeMechanism, RangeModel, register_model
from ldp.rangequery.queries import AnswerPostprocessing, RangeQuery, clip_option

__all__ = ["NoPayloadOracle", "UniMechanism", "UniModel"]


class NoPayloadOracle:
    """Stand-in "oracle" of a group whose reports carry no information (Uni's single group): users report
    nothing (``value`` 0); the accumulator counts them."""

    name = "none"
    report_fields = ("values",)
    d = 1
    payload = PayloadSpec((PayloadField("values", "int64", low=0, high=0),))

    def spec(self) -> dict[str, Any]:
        """What identifies this stand-in in a task's ``resolved`` block."""
        return {"mechanism": self.name, "domain_size": self.d}

    def validate(self, reports: Any) -> tuple[np.ndarray, np.ndarray]:
        n = len(reports)
        reasons = np.full(n, None, dtype=object)
        if reports.values is None:
            reasons[:] = Refusal("missing_field", "missing field(s) values for none")
            return np.zeros(n, dtype=bool), reasons
        bad = np.asarray(reports.values) != 0
        refuse(reasons, bad, "out_of_domain", "value outside [0, 1)")
        return ~bad, reasons

    def encode(self, values: np.ndarray, *, rng: Any = None) -> Any:
        from ldp.reports import Reports

        return Reports(values=np.zeros(len(values), dtype=np.int64))

    def create_accumulator(self) -> dict[str, int]:
        return {"n": 0}

    def add(self, acc: dict[str, int], reports: Any) -> dict[str, int]:
        acc["n"] += len(reports)
        return acc

    def merge(self, accs: Sequence[dict[str, int]]) -> dict[str, int]:
        return {"n": sum(a["n"] for a in accs)}


class UniMechanism(RangeMechanism):
    """Uniform guess: one (trivial) group whose reports carry no information."""

    name = "uni"
    OPTIONS = frozenset({"clip"})

    def __init__(self, epsilon: float, domain_sizes: Sequence[int], n_users: int, **options: Any) -> None:
        super().__init__(epsilon, domain_sizes, n_users, **options)
        self.clip = clip_option(options)

    @property
    def n_groups(self) -> int:
        return 1

    def group_oracle(self, group: int) -> NoPayloadOracle:
        self._check_group(group)
        return NoPayloadOracle()

    def project(self, group: int, records: np.ndarray) -> np.ndarray:
        return np.zeros(len(records), dtype=np.int64)

    def finalize(self, accumulators: Mapping[int, Any]) -> UniModel:
        n = sum(int(a["n"]) for a in accumulators.values())
        model = UniModel(self.domain_sizes, n)
        model.clip = self.clip
        return model


@register_model("uni")
class UniModel(AnswerPostprocessing, RangeModel):
    """Answers each query with its volume ``prod_t (r_t - l_t + 1) / c_t``."""

    def _raw_answer(self, queries: list[RangeQuery]) -> np.ndarray:
        return np.array([q.volume(self.domain_sizes) for q in queries], dtype=np.float64)

    def _payload(self) -> dict[str, Any]:
        return {}

    @classmethod
    def _from_dict(cls, d: Mapping[str, Any]) -> UniModel:
        return cls(d["domain_sizes"], d.get("n_users", 0))._restore_options(d)
