#!/usr/bin/env bash
# The GPU bench of #35 on a lent accelerator machine (JAX there, no TensorFlow, no network).
#
#   bash bench/gpu_jax.sh prepare   # here: wheels into .device/wheels (ignored by git)
#   bash bench/gpu_jax.sh run       # there, as the device tool's command (carry .device):
#                                   # installs the wheels, runs bench/gpu_jax.py into $OUT
#
# The machine's image has Python 3.12 with JAX, numpy, h5py, rich and absl-py; Keras, namex
# and optree are carried, with tfx-accum's own wheel installed without its TensorFlow
# dependency (the model needs none on JAX).
set -euo pipefail
cd "$(dirname "$0")/.."
WHEELS=.device/wheels
case "${1:-}" in
  prepare)
    rm -rf "$WHEELS" && mkdir -p "$WHEELS"
    .venv/bin/uv build --quiet --wheel --out-dir "$WHEELS" .
    .venv/bin/python -m pip download --quiet --only-binary=:all: --no-deps \
      --python-version 3.12 --platform manylinux2014_x86_64 --platform manylinux_2_28_x86_64 \
      -d "$WHEELS" keras==3.15.1 namex optree
    ls "$WHEELS"
    ;;
  run)
    # Into a folder on PYTHONPATH, not a venv: the image's python3 is itself a venv, whose
    # packages (JAX) a venv made from it would not see.
    PY=${PYTHON:-python3}
    rm -rf /tmp/gpu-bench
    "$PY" -m pip install --quiet --no-index --no-deps --target /tmp/gpu-bench "$WHEELS"/*.whl
    PYTHONPATH=/tmp/gpu-bench KERAS_BACKEND=jax PYTHONUNBUFFERED=1 "$PY" bench/gpu_jax.py \
      --out "${OUT:-bench/results}" "${@:2}"
    ;;
  *)
    echo "usage: bash bench/gpu_jax.sh prepare|run" >&2
    exit 2
    ;;
esac
