"""``python -m ldp.shuffle [delta]``: the comparison table of docs/shuffle_accounting.md;
``python -m ldp.shuffle mechanisms [n] [delta]``: its table of mechanism-specific figures."""

import sys

from ldp.shuffle.accountant import comparison_table, format_mechanism_table, format_table, mechanism_table

if len(sys.argv) > 1 and sys.argv[1] == "mechanisms":
    n = int(float(sys.argv[2])) if len(sys.argv) > 2 else 1_000_000
    delta = float(sys.argv[3]) if len(sys.argv) > 3 else 1e-9
    print(format_mechanism_table(mechanism_table(n, delta), n, delta))
else:
    delta = float(sys.argv[1]) if len(sys.argv) > 1 else 1e-6
    print(format_table(comparison_table(delta=delta), delta))
