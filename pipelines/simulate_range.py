"""Former name of the range-task simulator, kept as an alias: ``pipelines.simulate`` simulates every kind
of task (frequency and range) and is what this module runs.

    python -m pipelines.simulate_range ARGS   ==   python -m pipelines.simulate ARGS
"""

from __future__ import annotations

from pipelines.simulate import (
    ASSIGNMENTS,
    RECORDS_FILE,
    load_truth_records,
    run,
    simulate_files,
)

__all__ = ["ASSIGNMENTS", "RECORDS_FILE", "load_truth_records", "run", "simulate_range_files"]

#: The range simulator of earlier versions; :func:`pipelines.simulate.simulate_files` handles any task.
simulate_range_files = simulate_files

if __name__ == "__main__":
    run()
