"""Pipeline settings in one place (the TFX templates' ``configs.py``).

Model and training defaults live in :mod:`tfx_accum.components.settings`, search defaults
in :class:`tfx_accum.components.search.search_space.SearchSpace`; this module holds what only the
pipeline needs.
"""

from __future__ import annotations

PIPELINE_NAME = "tfx-accum"  # KFP requires [a-z0-9][a-z0-9-]*
DEFAULT_OUTPUT_DIR = "tfx_accum_output"

# Exit codes of tfx-accum run and compile.
EXIT_OK = 0
EXIT_FAILED = 1  # a component failed
EXIT_BAD_INPUT = 2  # bad input: one line, before anything runs
EXIT_UNBLESSED = 3  # the model was not blessed (--allow-unblessed: 0)
EXIT_INTERRUPTED = 130  # SIGINT, SIGTERM or SIGHUP
