"""Open-domain heavy hitters: frequent byte strings found without a domain listed in advance.

* :mod:`ldp.heavy_hitters.strings`: values of at most ``B`` bytes as bit strings with a length trailer.
* :mod:`ldp.heavy_hitters.mersenne`: the per-report hash of a prefix (linear, modulo ``2**61 - 1``).
* :mod:`ldp.heavy_hitters.pem`: PEM (prefix extending), the client, its eps-LDP guarantee, the mergeable
  accumulator and the estimates; :mod:`ldp.heavy_hitters.search` runs the aggregator's levels.
* :mod:`ldp.heavy_hitters.trie`: the same search spread over windows, one level per window, the survivors
  carried from one to the next (the kind's ``trie`` mode).

numpy and scipy only; no Beam.
"""

from ldp.heavy_hitters.pem import PEM, HeavyHitter, HeavyHitters, HHReports, Level, LevelStats, PEMAccumulator
from ldp.heavy_hitters.strings import StringBatch, encode_strings, total_bits

__all__ = [
    "PEM",
    "HeavyHitter",
    "HeavyHitters",
    "HHReports",
    "Level",
    "LevelStats",
    "PEMAccumulator",
    "StringBatch",
    "encode_strings",
    "total_bits",
]
