"""Anonymous (shuffled) collection: the privacy accountant (:mod:`ldp.shuffle.accountant`).

Beam-free, like all of ``ldp``. See ``docs/shuffle_accounting.md``.
"""

from ldp.shuffle.accountant import (
    BINARY_EXACT_MAX_N,
    MECHANISMS,
    MIN_WINDOW_REPORTS,
    CentralEpsilon,
    ShuffleAccountingError,
    accounting_for_oracle,
    accounting_for_task,
    central_epsilon,
    central_epsilon_binary_rr_exact,
    central_epsilon_fmt_closed_form,
    central_epsilon_fmt_numerical,
    central_epsilon_general,
    central_epsilon_grr,
    central_epsilon_grr_blanket,
    central_epsilon_report,
    compose_windows,
    delta_curve,
    local_epsilon_for_central,
)

__all__ = [
    "BINARY_EXACT_MAX_N",
    "MECHANISMS",
    "MIN_WINDOW_REPORTS",
    "CentralEpsilon",
    "ShuffleAccountingError",
    "accounting_for_oracle",
    "accounting_for_task",
    "central_epsilon",
    "central_epsilon_binary_rr_exact",
    "central_epsilon_fmt_closed_form",
    "central_epsilon_fmt_numerical",
    "central_epsilon_general",
    "central_epsilon_grr",
    "central_epsilon_grr_blanket",
    "central_epsilon_report",
    "compose_windows",
    "delta_curve",
    "local_epsilon_for_central",
]
