#!/usr/bin/env bash
# Sets up the environment if needed, checks style with ruff, and runs the test suite.
# With no arguments (what CI runs) it first runs the exactness tests on the oldest Keras
# that pyproject.toml admits, then on the newest stack with the wheel installed with one
# backend's extra alone (tensorflow, then jax, then torch: no TensorFlow there), then the
# whole suite in parallel; with arguments, only `pytest ARGS`.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup_env.sh
.venv/bin/ruff check .
.venv/bin/ruff format --check .
[ $# -gt 0 ] || bash scripts/keras_floor.sh
[ $# -gt 0 ] || bash scripts/newest_stack.sh
if [ $# -eq 0 ]; then
  # The whole suite on one worker process per CPU (at most 4: each end-to-end test runs a
  # pipeline of about 2 GiB): a sequential run keeps about one core busy, since most of its
  # time is pipelines in subprocesses. tests/conftest.py keeps each module (and each
  # shared session fixture) on one worker.
  workers=$(nproc 2>/dev/null || echo 1)
  [ "$workers" -le 4 ] || workers=4
  exec .venv/bin/python -m pytest -n "$workers" --dist loadscope --no-loadscope-reorder
fi
exec .venv/bin/python -m pytest "$@"
