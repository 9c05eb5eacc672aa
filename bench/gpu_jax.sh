#!/usr/bin/env bash
# The GPU bench on a lent accelerator machine (JAX and PyTorch there, no TensorFlow, no
# network), once per Keras backend.
#
#   bash bench/gpu_jax.sh prepare   # here: wheels into .device/wheels (ignored by git)
#   bash bench/gpu_jax.sh run       # there, as the device tool's command (carry .device):
#                                   # installs the wheels, runs bench/gpu_jax.py into $OUT
#                                   # for each of $BACKENDS (default "jax torch")
#
# The machine's image has Python 3.12 with JAX, PyTorch, numpy, h5py, rich and absl-py;
# Keras, namex and optree are carried, with tfx-accum's own wheel installed without its
# dependencies (the model needs no TensorFlow on JAX or PyTorch, and takes the image's
# PyTorch, whatever its version). Each backend takes a few minutes: within one command's
# limit, run them one at a time (BACKENDS=torch bash bench/gpu_jax.sh run).
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
    for backend in ${BACKENDS:-jax torch}; do
      PYTHONPATH=/tmp/gpu-bench KERAS_BACKEND=$backend PYTHONUNBUFFERED=1 "$PY" bench/gpu_jax.py \
        --backend "$backend" --out "${OUT:-bench/results}" "${@:2}"
    done
    ;;
  *)
    echo "usage: bash bench/gpu_jax.sh prepare|run" >&2
    exit 2
    ;;
esac
