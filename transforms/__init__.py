"""Beam transforms of the one aggregation stack (see ``docs/architecture.md``).

``io`` (sources and sinks), ``avro_fast`` (column-wise report decoding), ``records`` (Beam-free report
validation), ``aggregate`` (validate -> window -> combine by task -> finalize), ``counts`` (counters and
count windows) and ``runners`` (every adaptation to a runner's limits).
"""
