"""``python -m pipelines.simulate_range``: the former name of the range-task simulator's command, an alias
of ``ldp-beam simulate`` (``pipelines.simulate``), which simulates every kind of task.

    python -m pipelines.simulate_range ARGS   ==   python -m pipelines.simulate ARGS
"""

from __future__ import annotations

from pipelines.simulate import run

__all__ = ["run"]

if __name__ == "__main__":
    run()
