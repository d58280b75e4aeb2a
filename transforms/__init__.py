"""Beam transforms of the one aggregation stack (see ``docs/architecture.md``).

``io`` (sources and sinks), ``aggregate`` (validate -> window -> combine by task -> finalize), ``counts``
(counters and count windows), ``runners`` (every adaptation to a runner's limits), ``store`` (the store
sink) and ``display`` (what the runner's UI shows). The report codec and the validator they run are the
Beam-free ``wire`` package's.
"""
