"""The ``tfx-accum`` console script: the CLI, or one line when the ``tfx`` extra is missing.

The CLI lives in ``tfx_accum.pipeline.cli.parser``, which needs the extra; this module is in the
core package so that a core-only install answers ``tfx-accum ...`` with the way out (exit
code 2, bad set-up) instead of an import traceback.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence

from tfx_accum.extras import MissingExtra


def entry(argv: Sequence[str] | None = None) -> None:
    try:
        from tfx_accum.pipeline.cli.parser import entry as cli_entry
    except MissingExtra as error:
        print(f"tfx-accum: error: {error}", file=sys.stderr)
        raise SystemExit(2) from None
    cli_entry(argv)
