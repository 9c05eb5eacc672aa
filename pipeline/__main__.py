"""``python -m tfx_accum.pipeline [options]`` is ``tfx-accum run [options]``."""

import sys

from tfx_accum.pipeline.cli import main

if __name__ == "__main__":
    sys.exit(main(["run", *sys.argv[1:]]))
