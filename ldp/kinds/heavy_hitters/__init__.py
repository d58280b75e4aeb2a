"""The heavy_hitters kind: the frequent strings of a population, found without a domain listed in advance
(PEM, :mod:`ldp.heavy_hitters`; ``docs/heavy_hitters.md``).

Its task (:mod:`.task`), aggregator and rows (:mod:`.aggregate`, ``schemas/heavy_hitters_estimate.avsc``),
store form (:mod:`.flatten`: store output ``heavy_hitters``, group 0, one item per published string) and
simulated population (:mod:`.population`); :data:`KIND` is its registry entry. Its job's ``--trie_dir DIR``
(trie mode) is where each window's publication is written for the clients (:mod:`wire.publication`
files; the aggregator's ``publish_dir``).
"""

from __future__ import annotations

import glob
import os
from typing import Any

from ldp.kinds import JobOption, Kind, RowKind, ref
from ldp.kinds.heavy_hitters.task import HEAVY_HITTERS_TASK_KIND

__all__ = ["KIND"]

_HERE = "ldp.kinds.heavy_hitters."

#: The files of a publication directory (``wire.publication``; ``ldp`` names the layout, not the module).
_PUBLICATION_FILES = ("latest.json", "generation-*.json")

TRIE_DIR = JobOption(
    "trie_dir",
    "path",
    help="trie mode: the directory each window's publication (the level the next window's clients report "
    "at, the surviving prefixes) is written to, as generation-NNNNNN.json and latest.json; created if "
    "missing, refused when it holds publications unless --overwrite",
)


def _publication_dir(path: str, task: Any, overwrite: bool) -> str:
    """``path`` created and free of earlier publications (removed with ``overwrite``), else ValueError."""
    if getattr(task, "mode", "one_window") != "trie":
        raise ValueError(f"--trie_dir needs a task in trie mode (\"mode\": \"trie\"), not {task.mode!r}")
    try:
        os.makedirs(path, exist_ok=True)
    except OSError as e:
        raise ValueError(f"--trie_dir {path!r} cannot be created: {e.strerror or e}") from None
    if not os.access(path, os.W_OK | os.X_OK):
        raise ValueError(f"--trie_dir {path!r} is not writable")
    here = glob.escape(path)
    old = sorted(f for pattern in _PUBLICATION_FILES for f in glob.glob(os.path.join(here, pattern)))
    if old and not overwrite:
        raise ValueError(f"--trie_dir {path!r} already holds {len(old)} publication file(s) of an earlier "
                         "run; use an empty directory, or --overwrite to remove them")  # fmt: skip
    for f in old:
        os.remove(f)
    return path


def job_aggregator(options: Any, task: Any) -> Any:
    """The job's aggregator; with ``--trie_dir`` (trie mode only) its ``publish_dir``."""
    from ldp.kinds.heavy_hitters.aggregate import HeavyHittersAggregator

    agg = HeavyHittersAggregator(task)
    path = getattr(options, "trie_dir", None)
    if path:
        agg.publish_dir = _publication_dir(str(path), task, bool(getattr(options, "overwrite", False)))
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
    job_options=(TRIE_DIR,),
    job_aggregator=job_aggregator,
    shuffle_allowed=True,
)
