"""Pipeline settings in one place (the TFX templates' ``configs.py``)."""

from __future__ import annotations

PIPELINE_NAME = "tfx-accum"  # KFP requires [a-z0-9][a-z0-9-]*
DEFAULT_OUTPUT_DIR = "tfx_accum_output"
LABEL_KEY = "label"
DEFAULT_MODEL = "cnn"

# Trainer: optimizer updates (each one a whole effective batch), and the evaluation gate.
TRAIN_STEPS = 300
EVAL_STEPS = 10
ACCURACY_THRESHOLD = 0.95

# Search defaults (see components.search_space.SearchSpace for the meaning of each).
MAX_TRIALS = 8
TUNING_EPOCHS = 4
ALGORITHM = "bayesian"
STEPS_CHOICES = (1, 2, 4, 8)
MICRO_BATCH_CHOICES = (8, 16, 32, 64)
LEARNING_RATE_MIN = 1e-4
LEARNING_RATE_MAX = 1e-1

# Hyperparameters used when tuning is switched off.
FIXED_HYPERPARAMETERS = {
    "gradient_accumulation_steps": 4,
    "micro_batch_size": 16,
    "learning_rate": 3e-3,
}

# Beam's DirectRunner in multi-processing mode, one worker per core.
BEAM_PIPELINE_ARGS = (
    "--direct_running_mode=multi_processing",
    "--direct_num_workers=0",
)
