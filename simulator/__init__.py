"""The client simulator (Beam-free): simulated populations of any task's clients and their report files.

* :mod:`simulator.population` -- :func:`make_population` (the kind's population, through the registry
  ``ldp.kinds``), event times, ISO-8601 times, the truth of a range simulation;
* :mod:`simulator.files` -- :func:`simulate_files`: Avro report logs with event times spread over a span,
  ``truth.json`` and the kind's truth files;
* :mod:`simulator.bad` -- every kind of bad report, by the reason the aggregator must give (the
  dead-letter demonstration);
* :mod:`simulator.stream` -- :func:`follow`: a live stream of report files with ``.done`` markers at a
  given rate, for a watched directory.

It imports ``ldp``, ``wire`` (the report encoders) and ``schemas``, never Beam or a Pub/Sub client; the
command line and publishing to Pub/Sub are ``pipelines.simulate``.
"""

from simulator.bad import bad_records, bad_records_other_schema, bad_report_variants, write_bad_files
from simulator.files import BLOCK_RECORDS, simulate_files
from simulator.population import (
    ASSIGNMENTS,
    DEFAULT_START,
    client_times,
    load_truth_records,
    make_population,
    parse_iso8601_ms,
)
from simulator.stream import DONE_SUFFIX, FollowPlan, FollowSummary, Stop, follow, stop_on_signals

__all__ = [
    "ASSIGNMENTS",
    "BLOCK_RECORDS",
    "DEFAULT_START",
    "DONE_SUFFIX",
    "FollowPlan",
    "FollowSummary",
    "Stop",
    "bad_records",
    "bad_records_other_schema",
    "bad_report_variants",
    "client_times",
    "follow",
    "load_truth_records",
    "make_population",
    "parse_iso8601_ms",
    "simulate_files",
    "stop_on_signals",
    "write_bad_files",
]
