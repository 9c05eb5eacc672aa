#!/usr/bin/env bash
# The model alone, as a Keras user installs it (#30): the built wheel with no extra, in a
# fresh virtual environment on the newest Python, TensorFlow and Keras (constraints-newest.txt,
# the caps of pyproject.toml's ranges). Checks that no TFX, Beam or Keras Tuner came with it,
# then runs the model's exactness tests against that installed wheel (not the source tree):
# on TensorFlow, then on JAX (#35; JAX is installed beside it, the CPU wheels).
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
PY_MAJOR=3 PY_MINOR=13
PY_VERSION=$PY_MAJOR.$PY_MINOR
find_python() {
  local candidate
  for candidate in "${NEWEST_PYTHON:-}" "python$PY_VERSION" \
                   "$(pyenv root 2>/dev/null)"/versions/$PY_VERSION*/bin/python$PY_VERSION \
                   /usr/bin/python$PY_VERSION /usr/local/bin/python$PY_VERSION; do
    [ -n "$candidate" ] || continue
    if "$candidate" -c "import sys; assert sys.version_info[:2] == ($PY_MAJOR, $PY_MINOR)" \
         >/dev/null 2>&1; then
      echo "$candidate"; return 0
    fi
  done
  return 1
}
PY=$(find_python) || {
  echo "newest_stack: Python $PY_VERSION not found; install it (pyenv install $PY_VERSION)" \
       "or point NEWEST_PYTHON=/path/to/python$PY_VERSION." >&2
  exit 1
}
UV=.venv/bin/uv  # installed by scripts/setup_env.sh
ENV=.venv/newest
WHEELS=$(mktemp -d)
trap 'rm -rf "$WHEELS"' EXIT
start=$SECONDS
"$UV" build --quiet --wheel --out-dir "$WHEELS" . >/dev/null 2>&1 \
  || { echo "newest_stack: building the wheel failed" >&2; "$UV" build --wheel --out-dir "$WHEELS" .; exit 1; }
rm -rf "$ENV"
"$UV" venv --quiet --no-python-downloads --python "$PY" "$ENV"
"$UV" pip install --quiet --compile-bytecode --python "$ENV/bin/python" -c constraints-newest.txt \
  "$WHEELS"/tfx_accum-*.whl pytest pytest-xdist jax jaxlib
TF_CPP_MIN_LOG_LEVEL=3 "$ENV/bin/python" - <<'PY' 2>/dev/null
import importlib.util, sys, keras, tensorflow as tf
extra = [n for n in ("tfx", "apache_beam", "keras_tuner", "sklearn") if importlib.util.find_spec(n)]
assert not extra, f"the core install brought {extra}"
print(f"[newest-stack] Python {sys.version.split()[0]}, TensorFlow {tf.__version__}, "
      f"Keras {keras.__version__}; no tfx, apache_beam, keras_tuner, sklearn installed")
PY
echo "[newest-stack] installed in $((SECONDS - start)) s; the model's tests on the installed wheel"
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
echo "[newest-stack] the same exactness tests on the JAX backend"
# On JAX, jit_compile=False runs the step op by op (slow, and the same step): the compiled
# variants only ("xla"), and the tf.distribute and SavedModel tests skip themselves.
KERAS_BACKEND=jax TFX_ACCUM_TESTS_INSTALLED=1 "$ROOT/$ENV/bin/python" -m pytest -q \
  -p no:cacheprovider -n "$workers" --dist load --rootdir "$ROOT" -c "$ROOT/pyproject.toml" \
  "$ROOT/tests/accumulation/test_jax_backend.py" \
  "$ROOT/tests/accumulation/test_core_install.py" \
  "$ROOT/tests/accumulation/test_keras_surprises.py" \
  "$ROOT/tests/accumulation/test_accumulation.py" \
  "$ROOT/tests/accumulation/test_exactness_matrix.py" \
  "$ROOT/tests/accumulation/test_loss_matrix.py" -k "not peak_memory and not graph"
