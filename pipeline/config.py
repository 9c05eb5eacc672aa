"""Pipeline settings in one place (the TFX templates' ``configs.py``).

Model and training defaults live in ``tfx_accum.components.config.settings``, search defaults
in :class:`tfx_accum.components.config.search_space.SearchSpace`; this module holds what only the
pipeline needs.
"""

from __future__ import annotations

from tfx_accum.components.config.setting_words import SettingWords

PIPELINE_NAME = "tfx-accum"  # KFP requires [a-z0-9][a-z0-9-]*
DEFAULT_OUTPUT_DIR = "tfx_accum_output"

# Exit codes of tfx-accum run and compile.
EXIT_FAILED = 1  # a component failed
EXIT_BAD_INPUT = 2  # bad input: one line, before anything runs
EXIT_UNBLESSED = 3  # the model was not blessed (--allow-unblessed: 0)
EXIT_INTERRUPTED = 130  # SIGINT, SIGTERM or SIGHUP

# How the command line's messages name the settings whose checks it shares with the
# components (which name them as custom_config keys).
CLI_WORDS = SettingWords(
    {
        "model": "--model",
        "label_key": "--label-key",
        "num_classes": "--num-classes",
        "task": "--task",
        "features": "--features",
        "exclude_features": "--exclude-features",
        "categorical_features": "--categorical",
        "precision": "--precision",
    },
    flags=True,
)
