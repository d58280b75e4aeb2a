"""``python -m ldp.kinds --table``: the Markdown table of the registered kinds (``docs/architecture.md``)."""

from __future__ import annotations

import sys
from collections.abc import Sequence

from ldp.kinds import kinds_table


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if args != ["--table"]:
        print("usage: python -m ldp.kinds --table   (the registered kinds as a Markdown table)",
              file=sys.stderr)
        return 2
    sys.stdout.write(kinds_table())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
