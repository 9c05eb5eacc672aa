#!/usr/bin/env bash
# The model on PyTorch, as a Keras user installs it: the built wheel with the `torch` extra in a
# fresh Python 3.11 virtual environment (.venv/newest-torch), PyTorch being the CPU build of
# torch 2.13.0 that lies on these machines' disk, then the exactness tests on that wheel.
#
#   bash scripts/torch_stack.sh [WHEEL]   # scripts/newest_stack.sh passes the wheel it built
#
# PyTorch comes first, with pip from pip's --find-links folders only (--no-index): a plain
# `torch` requirement makes pip or uv download a CUDA build of several GB, so where the CPU
# wheel is missing this stage fails in one line instead. Then the wheel with its extra, whose
# range (torch>=2.13,<2.14) the installed build satisfies: nothing more of PyTorch is fetched,
# which the stage asserts (torch still 2.13.0+cpu, no nvidia-* or triton package).
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
TORCH=2.13.0
ENV=.venv/newest-torch
# shellcheck source=scripts/find_python.sh
source scripts/find_python.sh
PY=$(find_python 3 11 TORCH_PYTHON) || {
  echo "torch_stack: Python 3.11 not found (the CPU wheel of torch $TORCH on disk is for" \
       "Python 3.11); install it (pyenv install 3.11) or point TORCH_PYTHON=/path/to/python3.11." >&2
  exit 1
}
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
WHEEL=${1:-}
if [ -z "$WHEEL" ]; then
  .venv/bin/uv build --quiet --wheel --out-dir "$WORK" . >/dev/null 2>&1 \
    || { echo "torch_stack: building the wheel failed" >&2; .venv/bin/uv build --wheel --out-dir "$WORK" .; exit 1; }
  WHEEL=$(echo "$WORK"/tfx_accum-*.whl)
fi
start=$SECONDS
rm -rf "$ENV"
"$PY" -m venv "$ENV"
PIP=("$ENV/bin/python" -m pip)
# -qq: pip's index settings here name folders that hold no copy of some packages, each a warning.
if ! "${PIP[@]}" install -qq --no-index --no-deps "torch==$TORCH" 2>"$WORK/torch.log"; then
  echo "torch_stack: the CPU wheel of torch $TORCH for Python 3.11 is not in pip's --find-links" \
       "(${PIP_FIND_LINKS:-$("${PIP[@]}" config get global.find-links 2>/dev/null || echo none)});" \
       "not downloading a CUDA build of several GB: put torch-$TORCH+cpu-cp311-*.whl in a folder" \
       "and set PIP_FIND_LINKS to it ($(grep -m 1 "^ERROR" "$WORK/torch.log" || tail -n 1 "$WORK/torch.log"))" >&2
  exit 1
fi
installed_torch() { "$ENV/bin/python" -c "from importlib.metadata import version; print(version('torch'))"; }
[ "$(installed_torch)" = "$TORCH+cpu" ] || {
  echo "torch_stack: pip's --find-links gave torch $(installed_torch), not the CPU build $TORCH+cpu" >&2
  exit 1
}
"${PIP[@]}" install -qq -c constraints-torch.txt "tfx-accum[torch] @ file://$WHEEL" pytest pytest-xdist
"${PIP[@]}" list --format=freeze 2>/dev/null > "$WORK/freeze.txt"
if [ "$(installed_torch)" != "$TORCH+cpu" ] || grep -i -E '^(nvidia-|triton|tensorflow)' "$WORK/freeze.txt"; then
  echo "torch_stack: tfx-accum[torch] brought torch $(installed_torch) or the packages above" >&2
  exit 1
fi
KERAS_BACKEND=torch "$ENV/bin/python" scripts/stack_check.py torch-stack torch \
  tensorflow jax tfx apache_beam keras_tuner sklearn
"$ENV/bin/python" -c "import torch; assert torch.version.cuda is None, 'a CUDA build of torch'"
echo "[torch-stack] tfx-accum[torch] installed in $((SECONDS - start)) s; the exactness tests on PyTorch"
workers=$(nproc 2>/dev/null || echo 1)
[ "$workers" -le 4 ] || workers=4
# From a directory outside the checkout, tfx_accum from the wheel only (tests/conftest.py).
# Keras's default on PyTorch is eager (jit_compile="auto"): every case in that mode; "xla"
# (jit_compile=True, torch.compile: minutes of compiling per case on a CPU) has its own test
# in test_torch_backend.py. tf.distribute and SavedModel tests skip themselves.
cd "$WORK"
KERAS_BACKEND=torch TFX_ACCUM_TESTS_INSTALLED=1 TFX_ACCUM_TESTS_WITHOUT_TENSORFLOW=1 \
  "$ROOT/$ENV/bin/python" -m pytest -q \
  -p no:cacheprovider -n "$workers" --dist load --rootdir "$ROOT" -c "$ROOT/pyproject.toml" \
  "$ROOT/tests/accumulation/test_torch_backend.py" \
  "$ROOT/tests/accumulation/test_core_install.py" \
  "$ROOT/tests/accumulation/test_keras_surprises.py" \
  "$ROOT/tests/accumulation/test_accumulation.py" \
  "$ROOT/tests/accumulation/test_exactness_matrix.py" \
  "$ROOT/tests/accumulation/test_loss_matrix.py" -k "not peak_memory and not xla"
