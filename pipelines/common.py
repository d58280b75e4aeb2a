"""Helpers shared by the runnable pipelines: option parsing with a useful ``--help``, task loading,
window configuration from flags, time parsing."""

from __future__ import annotations

import argparse
import dataclasses
import datetime as dt
import sys
from typing import Any, Sequence

from ldp.task import CollectionTask, TaskError, WindowConfig, load_task

__all__ = ["parse_pipeline_args", "load_task_or_exit", "window_from_flags", "parse_iso8601_ms"]


def parse_pipeline_args(
    argv: Sequence[str] | None, options_cls: type[PipelineOptions], description: str
) -> tuple[PipelineOptions, argparse.Namespace]:
    """Parses ``argv`` into Beam ``PipelineOptions`` plus the view ``options_cls``.

    ``-h``/``--help`` prints the pipeline's own options (and a pointer to the Beam ones) and exits.
    """
    from apache_beam.options.pipeline_options import PipelineOptions

    argv = list(sys.argv[1:] if argv is None else argv)
    parser = argparse.ArgumentParser(
        description=description,
        epilog="Any Apache Beam pipeline option is accepted as well, e.g. --runner=DirectRunner, "
        "--direct_running_mode=multi_processing --direct_num_workers=2, --runner=PortableRunner "
        "--job_endpoint=embed --environment_type=LOOPBACK, --runner=FlinkRunner, --runner=DataflowRunner "
        "--setup_file=./setup.py ...",
    )
    options_cls._add_argparse_args(parser)
    if "-h" in argv or "--help" in argv:
        parser.print_help()
        raise SystemExit(0)
    options = PipelineOptions(argv)
    return options, options.view_as(options_cls)


def load_task_or_exit(path: str | None) -> CollectionTask:
    """Loads a task file; prints every problem and exits with status 2 when it is invalid."""
    if not path:
        print("error: --task TASK.json is required", file=sys.stderr)
        raise SystemExit(2)
    try:
        return load_task(path)
    except TaskError as exc:
        print(f"error: {exc}", file=sys.stderr)
        raise SystemExit(2) from None


def window_from_flags(task: CollectionTask, ns) -> WindowConfig:
    """The task's window defaults overridden by ``--window_size``, ``--window_period``,
    ``--allowed_lateness``, ``--early_firing``, ``--accumulating`` when given."""
    w = task.window
    changes = {}
    for flag, field in (
        ("window_size", "size_s"),
        ("window_period", "period_s"),
        ("allowed_lateness", "allowed_lateness_s"),
        ("early_firing", "early_firing_s"),
    ):
        v = getattr(ns, flag, None)
        if v is not None:
            if v < 0 or (v == 0 and field != "allowed_lateness_s"):
                raise SystemExit(f"error: --{flag} must be positive, got {v}")
            changes[field] = float(v)
    if getattr(ns, "accumulating", False):
        changes["accumulating"] = True
    w = dataclasses.replace(w, **changes)
    if w.period_s is not None and (w.size_s is None or w.period_s > w.size_s):
        raise SystemExit("error: --window_period needs --window_size >= the period")
    return w


def parse_iso8601_ms(text: str) -> int:
    """ISO-8601 time (``Z`` or offset; naive means UTC) -> milliseconds since the epoch."""
    t = dt.datetime.fromisoformat(text.replace("Z", "+00:00"))
    if t.tzinfo is None:
        t = t.replace(tzinfo=dt.timezone.utc)
    return int(round(t.timestamp() * 1000))
