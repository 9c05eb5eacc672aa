#!/usr/bin/env bash
# Sets up the environment if needed, checks style with ruff, and runs the test suite.
# With no arguments (what CI runs) it first runs the exactness tests on the oldest Keras
# that pyproject.toml admits; with arguments, only `pytest ARGS`.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup_env.sh
.venv/bin/ruff check .
.venv/bin/ruff format --check .
[ $# -gt 0 ] || bash scripts/keras_floor.sh
exec .venv/bin/python -m pytest "$@"
