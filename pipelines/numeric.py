"""The mean and quantiles of a bounded numeric attribute over LDP reports, batch or streaming.

Batch, over Avro report files (one global window unless the task or ``--window_size`` says otherwise)::

    python -m pipelines.numeric --task TASK.json --input 'DIR/*.avro' --output OUT [--window_size SECONDS]

Streaming, from a watched directory or Pub/Sub (the shared job's flags, as ``pipelines.frequency``)::

    python -m pipelines.numeric --task TASK.json --streaming --input 'DIR/*.avro' --watch_interval 5 \\
        --output OUT --window_size 60 [--store sqlite:///ldp.db]

The task is a numeric task (``"kind": "numeric"``; ``ldp.kinds.numeric``, ``docs/numeric.md``).
Outputs: ``OUT/estimates-<window>-paneNNNNN-*.jsonl`` and ``.avro`` (``schemas/numeric_estimate.avsc``;
one row per attribute, window and pane: ``attribute``, ``attribute_index``, ``n_reports``, ``mean``,
``mean_std``, ``mean_ci_low``, ``mean_ci_high``, ``quantiles`` ``[{q, value, ci_low, ci_high}]``), refused
reports in
``OUT/dead_letter/*.avro`` with their reasons and ``OUT/counts.json``. The job is the registry's
(:func:`pipelines.job.kind_job`).
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence

from pipelines.job import kind_job, run_job

__all__ = ["parser", "run"]


def parser() -> argparse.ArgumentParser:
    """The job's flags (plus every Beam pipeline option)."""
    return kind_job("numeric")[1]


def run(argv: Sequence[str] | None = None) -> dict[str, object]:
    """Runs the job; returns its summary (``counts``, ``output``, ``panes_written``, ...)."""
    return run_job(*kind_job("numeric"), argv)


if __name__ == "__main__":
    run()
