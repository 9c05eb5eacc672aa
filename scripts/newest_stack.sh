#!/usr/bin/env bash
# The model alone, as a Keras user installs it: the built wheel with one backend's extra, in a
# fresh virtual environment on the newest Python, Keras and backend (constraints-newest.txt,
# the caps of pyproject.toml's ranges), once per backend. `tfx-accum[tensorflow]` in
# .venv/newest, which must hold no TFX, Beam or Keras Tuner; `tfx-accum[jax]` in
# .venv/newest-jax, which must hold no TensorFlow either (the JAX CPU wheels); then
# `tfx-accum[torch]` in .venv/newest-torch (scripts/torch_stack.sh: Python 3.11 and the CPU
# wheel of torch 2.13.0 from this machine's disk). Each runs the model's exactness tests
# against that installed wheel (not the source tree).
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
PY_VERSION=3.13
# shellcheck source=scripts/find_python.sh
source scripts/find_python.sh
PY=$(find_python 3 13 NEWEST_PYTHON) || {
  echo "newest_stack: Python $PY_VERSION not found; install it (pyenv install $PY_VERSION)" \
       "or point NEWEST_PYTHON=/path/to/python$PY_VERSION." >&2
  exit 1
}
UV=.venv/bin/uv  # installed by scripts/setup_env.sh
ENV=.venv/newest
JAX_ENV=.venv/newest-jax
WHEELS=$(mktemp -d)
trap 'rm -rf "$WHEELS"' EXIT
start=$SECONDS
"$UV" build --quiet --wheel --out-dir "$WHEELS" . >/dev/null 2>&1 \
  || { echo "newest_stack: building the wheel failed" >&2; "$UV" build --wheel --out-dir "$WHEELS" .; exit 1; }
WHEEL=$(echo "$WHEELS"/tfx_accum-*.whl)
# A fresh environment holding the wheel with the extra $2 (and pytest), nothing else.
install() {
  rm -rf "$1"
  "$UV" venv --quiet --no-python-downloads --python "$PY" "$1"
  "$UV" pip install --quiet --compile-bytecode --python "$1/bin/python" -c constraints-newest.txt \
    "tfx-accum[$2] @ file://$WHEEL" pytest pytest-xdist
}
install "$ENV" tensorflow
TF_CPP_MIN_LOG_LEVEL=3 "$ENV/bin/python" scripts/stack_check.py newest-stack tensorflow \
  tfx apache_beam keras_tuner sklearn 2>/dev/null
echo "[newest-stack] tfx-accum[tensorflow] installed in $((SECONDS - start)) s; the model's tests on it"
# From a directory outside the checkout, and with tests/conftest.py told not to put the
# checkout on sys.path: tfx_accum can only come from the wheel.
workers=$(nproc 2>/dev/null || echo 1)
[ "$workers" -le 4 ] || workers=4
cd "$WHEELS"
TFX_ACCUM_TESTS_INSTALLED=1 "$ROOT/$ENV/bin/python" -m pytest -q -p no:cacheprovider \
  -n "$workers" --dist load --rootdir "$ROOT" -c "$ROOT/pyproject.toml" \
  "$ROOT/tests/accumulation/test_core_install.py" \
  "$ROOT/tests/accumulation/test_keras_surprises.py" \
  "$ROOT/tests/accumulation/test_accumulation.py" \
  "$ROOT/tests/accumulation/test_exactness_matrix.py" \
  "$ROOT/tests/accumulation/test_micro_batches.py" \
  "$ROOT/tests/accumulation/test_loss_matrix.py" \
  -k "not peak_memory and (not xla or uneven_batches_sample_weights or lstm-xla)"
start=$SECONDS
cd "$ROOT"
install "$JAX_ENV" jax
# The JAX extra alone: no TensorFlow, by the interpreter's finder and by the installer's list.
KERAS_BACKEND=jax "$JAX_ENV/bin/python" scripts/stack_check.py newest-stack jax \
  tensorflow tfx apache_beam keras_tuner sklearn
if "$UV" pip list --quiet --python "$JAX_ENV/bin/python" | grep -i '^tensorflow'; then
  echo "newest_stack: tfx-accum[jax] installed TensorFlow (above)" >&2
  exit 1
fi
echo "[newest-stack] tfx-accum[jax] installed in $((SECONDS - start)) s; the same exactness tests on JAX"
cd "$WHEELS"
# On JAX, jit_compile=False runs the step op by op (slow, and the same step): the compiled
# variants only ("xla"), and the tf.distribute and SavedModel tests skip themselves.
# TFX_ACCUM_TESTS_WITHOUT_TENSORFLOW: test_core_install.py asserts TensorFlow is not importable.
KERAS_BACKEND=jax TFX_ACCUM_TESTS_INSTALLED=1 TFX_ACCUM_TESTS_WITHOUT_TENSORFLOW=1 \
  "$ROOT/$JAX_ENV/bin/python" -m pytest -q \
  -p no:cacheprovider -n "$workers" --dist load --rootdir "$ROOT" -c "$ROOT/pyproject.toml" \
  "$ROOT/tests/accumulation/test_jax_backend.py" \
  "$ROOT/tests/accumulation/test_core_install.py" \
  "$ROOT/tests/accumulation/test_keras_surprises.py" \
  "$ROOT/tests/accumulation/test_accumulation.py" \
  "$ROOT/tests/accumulation/test_exactness_matrix.py" \
  "$ROOT/tests/accumulation/test_loss_matrix.py" -k "not peak_memory and not graph"
cd "$ROOT"
bash scripts/torch_stack.sh "$WHEEL"
