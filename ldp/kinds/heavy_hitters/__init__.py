"""The heavy_hitters kind: the frequent strings of a population, found without a domain listed in advance
(PEM, :mod:`ldp.heavy_hitters`; ``docs/heavy_hitters.md``).

Its task (:mod:`.task`), aggregator and rows (:mod:`.aggregate`, ``schemas/heavy_hitters_estimate.avsc``),
store form (:mod:`.flatten`: store output ``heavy_hitters``, group 0, one item per published string) and
simulated population (:mod:`.population`); :data:`KIND` is its registry entry. Its job's ``--trie_dir DIR``
(trie mode) is where each window's publication is written for the clients (:mod:`wire.publication`
files; the aggregator's ``publish_dir``). A job started on a directory that holds an earlier run's
publications resumes the trie from the newest one (``--trie_start resume``, the default; the aggregator's
``resume_from``), or removes them and starts afresh (``--trie_start fresh``, the default under
``--overwrite``).
"""

from __future__ import annotations

import glob
import json
import logging
import os
import re
from typing import Any

from ldp.kinds import JobOption, Kind, RowKind, ref
from ldp.kinds.heavy_hitters.task import HEAVY_HITTERS_TASK_KIND

__all__ = ["KIND", "TRIE_STARTS", "job_aggregator", "newest_publication"]

_HERE = "ldp.kinds.heavy_hitters."

#: The files of a publication directory (``wire.publication``; ``ldp`` names the layout, not the module).
_PUBLICATION_FILES = ("latest.json", "generation-*.json")
_GENERATION_FILE = re.compile(r"generation-(\d{6,})\.json")
#: A publication file larger than this is refused unread (``wire.publication.MAX_PUBLICATION_BYTES``).
_MAX_PUBLICATION_BYTES = 8 * 1024 * 1024
#: ``--trie_start``: continue from the newest publication, or remove them all and start at level 0
TRIE_STARTS = ("resume", "fresh")
_LOG = logging.getLogger(__name__)

TRIE_DIR = JobOption(
    "trie_dir",
    "path",
    help="trie mode: the directory each window's publication (the level the next window's clients report "
    "at, the surviving prefixes) is written to, as generation-NNNNNN.json and latest.json; created if "
    "missing; when it holds an earlier run's publications, see --trie_start",
)

TRIE_START = JobOption(
    "trie_start",
    "str",
    choices=TRIE_STARTS,
    help="trie mode, when --trie_dir holds an earlier run's publications: resume (the default) continues "
    "the trie from the newest one (its level, survivors and generation; refused in one line when it is of "
    "another task or layout), fresh removes them and starts at level 0 (the default under --overwrite)",
)


def _publication_dir(path: str, task: Any) -> str:
    """``path`` created and writable, else ValueError (one line)."""
    if getattr(task, "mode", "one_window") != "trie":
        raise ValueError(f"--trie_dir needs a task in trie mode (\"mode\": \"trie\"), not {task.mode!r}")
    try:
        os.makedirs(path, exist_ok=True)
    except OSError as e:
        raise ValueError(f"--trie_dir {path!r} cannot be created: {e.strerror or e}") from None
    if not os.access(path, os.W_OK | os.X_OK):
        raise ValueError(f"--trie_dir {path!r} is not writable")
    return path


def _earlier_publications(path: str) -> list[str]:
    here = glob.escape(path)
    return sorted(f for pattern in _PUBLICATION_FILES for f in glob.glob(os.path.join(here, pattern)))


def _load_publication(path: str) -> dict[str, Any]:
    """One publication file as JSON with an integer ``generation`` >= 1, else ValueError (one line); the
    rest is checked by the aggregator (:meth:`~.aggregate.HeavyHittersTrie.check_resume`)."""
    try:
        if os.path.getsize(path) > _MAX_PUBLICATION_BYTES:
            raise ValueError(f"more than {_MAX_PUBLICATION_BYTES} bytes")
        with open(path, "rb") as fh:
            payload = json.loads(fh.read().decode("utf-8"))
        generation = payload.get("generation") if isinstance(payload, dict) else None
        if not isinstance(generation, int) or isinstance(generation, bool) or generation < 1:
            raise ValueError("no integer generation >= 1")
    except (OSError, UnicodeDecodeError, ValueError) as e:
        reason = " ".join(str(e).split())
        raise ValueError(f"{path!r} is not a publication: {reason}") from None
    return payload


def newest_publication(path: str) -> dict[str, Any] | None:
    """The publication of the highest generation in directory ``path``: ``latest.json``, or a generation
    file newer than it (written before a crash kept it from becoming ``latest.json``); None when there is
    none. ValueError (one line) for a file that is not a publication."""
    names = os.listdir(path) if os.path.isdir(path) else []
    files = {int(m.group(1)): m.group(0) for m in map(_GENERATION_FILE.fullmatch, names) if m}
    newest = max(files, default=0)
    latest = os.path.join(path, "latest.json")
    if os.path.exists(latest):
        payload = _load_publication(latest)
        if payload["generation"] >= newest:
            return payload
    if not newest:
        return None
    payload = _load_publication(os.path.join(path, files[newest]))
    if payload["generation"] != newest:
        raise ValueError(f"{files[newest]!r} holds generation {payload['generation']}, not {newest}")
    return payload


def _resume(agg: Any, path: str) -> None:
    """``agg.resume_from`` := the newest publication in ``path`` (none: a first run), checked against the
    task; ValueError (one line) for one the task cannot resume from."""
    try:
        pub = newest_publication(path)
        if pub is None:
            return
        agg.resume_from = pub
        state = agg.window_sequence().check_resume()
    except ValueError as e:
        raise ValueError(f"--trie_dir {path!r}: cannot resume the trie: {e}; --trie_start fresh removes the "
                         "earlier run's publications") from None  # fmt: skip
    _LOG.info("trie: resuming %s from generation %d (level %d next, %d survivors, round %d)",
              agg.task.task_id, state.generation, state.level, state.survivors, state.round)  # fmt: skip


def job_aggregator(options: Any, task: Any) -> Any:
    """The job's aggregator; with ``--trie_dir`` (trie mode only) its ``publish_dir`` and, resuming, its
    ``resume_from`` (``--trie_start``; module docstring)."""
    from ldp.kinds.heavy_hitters.aggregate import HeavyHittersAggregator

    agg = HeavyHittersAggregator(task)
    path, start = getattr(options, "trie_dir", None), getattr(options, "trie_start", None)
    if not path:
        if start is not None:
            raise ValueError(f"--trie_start {start} needs --trie_dir (where the publications are)")
        return agg
    agg.publish_dir = path = _publication_dir(str(path), task)
    if start is None:
        start = "fresh" if getattr(options, "overwrite", False) else "resume"
    if start not in TRIE_STARTS:
        raise ValueError(f"--trie_start is one of {', '.join(TRIE_STARTS)}, not {start!r}")
    if start == "resume":
        _resume(agg, path)
        return agg
    old = _earlier_publications(path)
    for f in old:
        os.remove(f)
    if old:
        _LOG.info("trie: --trie_start fresh removed %d publication file(s) of %s", len(old), path)
    return agg


KIND = Kind(
    "heavy_hitters",
    HEAVY_HITTERS_TASK_KIND,
    aggregator=ref(_HERE + "aggregate:HeavyHittersAggregator"),
    rows=(
        RowKind(
            ref(_HERE + "aggregate:HeavyHittersRow"),
            "heavy_hitters_estimate",
            "heavy_hitters",
            ref(_HERE + "flatten:flatten_heavy_hitters"),
        ),
    ),
    population=ref(_HERE + "population:heavy_hitters_population"),
    default_dataset="zipf-strings",
    datasets="zipf-strings[:S[:M]] (Zipf(S) over M random strings of max_length bytes; default 1.1:100000), "
    "csv:PATH:COLUMN (one string per row)",
    users_from_dataset=("csv:",),
    bad_template=ref(_HERE + "population:heavy_hitters_template"),
    description="open-domain heavy hitters: the frequent strings, found by PEM (batch or streaming)",
    mechanism_registries={"heavy_hitters": ref(_HERE + "aggregate:MECHANISMS")},
    example={
        "task_id": "h",
        "kind": "heavy_hitters",
        "mechanism": "pem",
        "epsilon": 4.0,
        "max_length": 3,
    },
    plan=ref(_HERE + "plan:predict"),
    job_options=(TRIE_DIR, TRIE_START),
    job_aggregator=job_aggregator,
    shuffle_allowed=True,
)
