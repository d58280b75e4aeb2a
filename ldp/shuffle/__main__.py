"""``python -m ldp.shuffle [delta]``: the comparison table of docs/shuffle_accounting.md."""

import sys

from ldp.shuffle.accountant import comparison_table, format_table

delta = float(sys.argv[1]) if len(sys.argv) > 1 else 1e-6
print(format_table(comparison_table(delta=delta), delta))
