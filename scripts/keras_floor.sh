#!/usr/bin/env bash
# Runs the exactness tests on the oldest Keras that pyproject.toml admits (its `keras>=`
# bound), installed beside the pinned one in .venv/keras-floor: the accumulation relies on
# Keras internals (components/accumulation/keras_adapter.py), so the floor is proved, not assumed.
set -euo pipefail
cd "$(dirname "$0")/.."
floor=$(sed -n 's/^ *"keras>=\([0-9.]*\),.*/\1/p' pyproject.toml)
[ -n "$floor" ] || { echo "keras_floor: no keras>= bound in pyproject.toml" >&2; exit 1; }
target=.venv/keras-floor
if [ "$(cat "$target/.version" 2>/dev/null)" != "$floor" ]; then
  rm -rf "$target"
  .venv/bin/python -m pip install -q --no-deps --target "$target" "keras==$floor"
  echo "$floor" > "$target/.version"
fi
PYTHONPATH="$target" .venv/bin/python -c \
  "import keras, sys; from packaging.version import Version as V; sys.exit(V(keras.__version__) != V('$floor'))" \
  || { echo "keras_floor: keras $floor did not load from $target" >&2; exit 1; }
echo "[keras-floor] exactness tests on keras $floor"
# Every exactness case in graph mode, and under XLA the cases that reach the adapter in
# other ways than graph mode does (uneven batches with sample weights, recurrent layers'
# own loops): the internals the floor proves are Keras's, not XLA's, and the full XLA
# matrix runs on the pinned Keras in the main suite (it would double the floor's time).
# The loss matrix at k=3 only: its k=1 cells run the same split and the same Keras internals
# with one micro-batch (the pinned Keras and the newest stack run them).
# One worker per CPU (at most 4), the tests dealt one by one: they are in-process Keras
# tests (no pipelines).
workers=$(nproc 2>/dev/null || echo 1)
[ "$workers" -le 4 ] || workers=4
PYTHONPATH="$target" .venv/bin/python -m pytest -q -p no:cacheprovider -n "$workers" --dist load \
  tests/accumulation/test_accumulation.py tests/accumulation/test_exactness_matrix.py tests/accumulation/test_micro_batches.py \
  tests/accumulation/test_keras_surprises.py tests/accumulation/test_loss_matrix.py \
  -k "not mirrored and not peak_memory and (not xla or uneven_batches_sample_weights or lstm-xla) and not (loss_matrix and k1)"
