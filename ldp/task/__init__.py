"""The collection task: the one configuration clients and the aggregator share (the common model).

A task is a small JSON object with an id. Clients encode with it; the aggregator refuses (dead-letters)
reports that carry another task id or values outside the task's domains. Changing any privacy-relevant
parameter (mechanism, epsilon, domains, hash family) means a new ``task_id``. The JSON Schema of the file
is ``schemas/task.schema.json``, generated from the field declarations (:mod:`ldp.task.fields`,
:func:`task_json_schema`; ``tests/test_task_schema_model.py`` checks both agree at every declared boundary).

Keys common to every kind of task (keys not listed are an error, so typos do not pass silently)::

    {
      "task_id": "fruit-2026-11",        # required: 1-128 chars of [A-Za-z0-9._-]
      "mechanism": "olh",                # required: names the kind of task (see below)
      "epsilon": 1.0,                    # required: a number in (0, 50]
      "kind": "frequency",               # optional: must agree with the mechanism ("frequency", "range")
      "description": "",                 # optional free text
      "schema_version": 2,               # optional, default 2: report schema version clients write
      "n_groups": 1,                     # frequency: users split into this many groups (default 1);
                                         #   range: optional, must equal the method's number of groups
      "postprocess": "base",             # optional, default "base": ldp.postprocess method name
      "hash": {"family": "gf2-affine",   # optional: OLH hash family (ldp.hashing.HASH_FAMILIES; default
               "g": null},               #   "gf2-affine", "linear-gf" for old tasks) and bucket count g
      "params": {},                      # optional: further mechanism parameters (e.g. {"k": 8} for ss)
      "window": {                        # optional, defaults shown; pipeline flags override
        "size_s": null,                  #   event-time window length; null = one global window
                                         #   (window times are finite whole milliseconds)
        "period_s": null,                #   sliding period; null = fixed (tumbling) windows
        "allowed_lateness_s": 0,         #   how long after a window closes late reports still count
        "early_firing_s": null,          #   processing-time period of early (speculative) panes
        "accumulating": false            #   panes report everything so far (true) or only new data
      },
      "resolved": {                      # optional (frequency, range), written by resolve_task: what the
        "auto_candidates": [...],        #   oracles resolved to when the task was made; every load checks
        "oracles": [{"mechanism": ...}], #   this release resolves the same (else a TaskError)
        "local_epsilon": {...}           #   with a central target: the epsilon chosen for it
      }
    }

Anonymous collection (the kinds that declare ``shuffle_allowed``: frequency, range and heavy_hitters;
``docs/shuffler.md``, ``docs/shuffle_accounting.md``): an
``"anonymity"`` section (``ldp.anonymity.AnonymitySettings``: ``shuffled``, ``delta``,
``time_precision_s``, ``min_reports``, ``short_bucket``) says the reports reach the aggregator only through
the shuffler. With ``"shuffled": true`` a task is refused when its reports would carry a sender's identity
or its windows would not survive rounding: a budget with ``client_ids`` (reports carry the client's
pseudonym), a memoized mechanism (reports linkable across windows; ``memo-olh`` and ``loloha`` send the
user's hash seed in every report), a window size or period that is not a multiple of
``time_precision_s``. Two more keys set an optional **central target**:

* ``"central_epsilon": 1.0``: the central epsilon (at the section's ``delta``) every shuffled batch must
  meet; ``"expected_reports": 1000000``: the reports expected per aggregation window (range tasks: default
  ``expected_users``), at least ``min_reports``. A user hides only among the reports of its own batch (one
  bucket of ``time_precision_s``), so the target is planned per batch, at
  ``expected_reports * time_precision_s / window.size_s`` reports (``Task.expected_batch_reports``,
  ``ldp.anonymity.batch_reports``; the global window, or a window of one bucket: ``expected_reports``),
  which must also reach ``min_reports``: a daily window of 1e6 reports with hourly buckets plans at 41,666.
* ``"epsilon": "auto"`` (only with a central target): the local epsilon is the largest ``eps0`` whose
  shuffled guarantee at the expected batch size meets the target (``ldp.shuffle.local_epsilon_for_central``;
  GRR's own bound when the oracle is GRR, else the bound for any eps0-LDP randomizer), rounded down to
  0.001. The parsed task carries that number, so clients and the aggregator use the same epsilon.
* ``"epsilon": <number>`` with a central target: it must meet the target at the batch size (any
  smaller epsilon does); otherwise the task is refused, naming the largest epsilon that does.
* :func:`resolve_task` writes the number into ``epsilon`` and records ``resolved.local_epsilon``
  (``epsilon``, ``central_epsilon``, ``delta``, ``expected_reports``, ``accounting``); a load refuses a
  task whose record differs from the task or whose epsilon this release's accountant no longer certifies.

``auto`` (and a range method's per-group ``auto`` oracles) chooses only among the frozen candidates of the
task's ``schema_version`` (``ldp.oracles.AUTO_CANDIDATES``): a mechanism added to the registry never
changes what an existing task means. :func:`resolve_task` returns the task with its resolution recorded.

Each kind of task is a package of :mod:`ldp.kinds` whose ``task`` module holds its task class, its
section (:class:`TaskKind`: keys, mechanism names, field declarations, checker) and its keys' documentation:
``ldp.kinds.frequency.task`` (``FrequencyTask``), ``ldp.kinds.range.task`` (``RangeTask``),
``ldp.kinds.batch_queries.task`` (``BatchTask``, central DP), ``ldp.kinds.sparse.task`` (``SparseTask``) and
``ldp.kinds.numeric.task`` (``NumericTask``). The task model finds a kind only through :data:`TASK_KINDS`,
the sections :func:`ldp.kinds.register` fills; importing this package imports the registry last, so every
built-in kind is known to :func:`parse_task` (the modules of this package never import a kind).

Modules: :mod:`ldp.task.base` (:class:`Task`, the common types and constants), :mod:`ldp.task.checks`
(the common sections' checkers), :mod:`ldp.task.fields` (declarations, :class:`TaskKind`, the JSON
Schema), :mod:`ldp.task.labels`, :mod:`ldp.task.budget`, :mod:`ldp.task.resolve` and
:mod:`ldp.task.parse` (:func:`parse_task`, :func:`load_task`, :func:`resolve_task`). The central target of
the ``anonymity`` section is planned in :mod:`ldp.anonymity`.

:func:`parse_task` reports every problem at once (:class:`TaskError` lists them), not just the first:
each section of the file has its own small checker that appends messages to one list.
"""

from __future__ import annotations

from ldp.anonymity import CentralTarget
from ldp.task.base import (
    AUTO_EPSILON,
    DEFAULT_HASH_FAMILY,
    DEFAULT_SCHEMA_VERSION,
    HASH_FAMILY_NAMES,
    POSTPROCESS_METHODS,
    SUPPORTED_SCHEMA_VERSIONS,
    Attribute,
    AttributeTask,
    CollectionTask,
    HashConfig,
    ParsedTask,
    Task,
    TaskError,
    WindowConfig,
)
from ldp.task.budget import budget_summary
from ldp.task.fields import COMMON_FIELDS, SEMANTIC_CHECKS, TASK_KINDS, Field, TaskKind, task_json_schema
from ldp.task.labels import MAX_LABEL_CHARS, MAX_LABELS, MAX_LABELS_FILE_BYTES, read_labels_file
from ldp.task.parse import load_task, parse_task, resolve_task
from ldp.task.resolve import task_resolution

__all__ = [
    "Task",
    "AttributeTask",
    "ParsedTask",
    "CollectionTask",
    "HashConfig",
    "WindowConfig",
    "Attribute",
    "CentralTarget",
    "TaskKind",
    "TASK_KINDS",
    "TaskError",
    "load_task",
    "parse_task",
    "resolve_task",
    "task_resolution",
    "AUTO_EPSILON",
    "task_json_schema",
    "Field",
    "COMMON_FIELDS",
    "SEMANTIC_CHECKS",
    "POSTPROCESS_METHODS",
    "HASH_FAMILY_NAMES",
    "DEFAULT_HASH_FAMILY",
    "SUPPORTED_SCHEMA_VERSIONS",
    "DEFAULT_SCHEMA_VERSION",
    "MAX_LABELS",
    "MAX_LABEL_CHARS",
    "MAX_LABELS_FILE_BYTES",
    "read_labels_file",
    "budget_summary",
]

import ldp.kinds  # noqa: E402, F401  (last: registers the built-in kinds' sections in TASK_KINDS)
