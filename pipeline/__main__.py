"""``python -m tfx_accum.pipeline [options]`` is ``tfx-accum run [options]``."""

import sys

from tfx_accum.pipeline.cli.parser import entry

if __name__ == "__main__":
    entry(["run", *sys.argv[1:]])
