#!/usr/bin/env bash
# Creates (or reuses) the Python 3.10 virtual environment in .venv and installs tfx-accum
# with its verified, pinned dependencies (constraints.txt). Safe to run repeatedly: it
# reinstalls only when pyproject.toml or constraints.txt changed.
set -euo pipefail
cd "$(dirname "$0")/.."

find_python310() {
  local candidate
  for candidate in "${PYTHON:-}" python3.10 "$(pyenv root 2>/dev/null)"/versions/3.10*/bin/python3.10 \
                   /usr/bin/python3.10 /usr/local/bin/python3.10; do
    [ -n "$candidate" ] || continue
    if "$candidate" -c 'import sys; assert sys.version_info[:2] == (3, 10)' >/dev/null 2>&1; then
      echo "$candidate"; return 0
    fi
  done
  return 1
}

VENV=.venv
STAMP="$VENV/.tfx-accum-installed"
WANT=$(cat pyproject.toml constraints.txt kubeflow/validate-requirements.txt \
         kubeflow/local-run-requirements.txt | sha256sum | cut -d' ' -f1)
if [ -x "$VENV/bin/python" ] && [ -f "$STAMP" ] && [ "$(cat "$STAMP")" = "$WANT" ]; then
  exit 0
fi
PY=$(find_python310) || {
  echo "error: Python 3.10 not found. TFX 1.16 needs Python 3.10; install it (e.g. 'pyenv install 3.10')" \
       "or point PYTHON=/path/to/python3.10." >&2
  exit 1
}
start=$SECONDS
echo "[setup] creating $VENV with $PY and installing tfx-accum (a few minutes the first time) ..."
[ -x "$VENV/bin/python" ] || "$PY" -m venv "$VENV"
LOG="$VENV/setup.log"
: > "$LOG"
# uv resolves the same constraints.txt and downloads wheels in parallel (several times
# faster on a fresh machine); pip is the fallback when uv cannot be had.
INSTALLER=pip
if "$VENV/bin/python" -m pip install -q "uv>=0.4" >> "$LOG" 2>&1 && [ -x "$VENV/bin/uv" ]; then
  INSTALLER=uv
fi
pip_install() {  # the installer's own output goes to the log; shown only if it fails
  local status=0
  if [ "$INSTALLER" = uv ]; then
    # Bytecode at install: every process (each Beam and Tuner worker too) would otherwise
    # compile its imports again, and machines like ours set PYTHONDONTWRITEBYTECODE, so
    # nothing is cached: importing TFX, TFMA and Keras Tuner took 29 CPU-s without, 11
    # with. (pip compiles at install by default.)
    "$VENV/bin/uv" pip install --quiet --compile-bytecode --python "$VENV/bin/python" "$@" \
      >> "$LOG" 2>&1 || status=$?
  else
    "$VENV/bin/python" -m pip install -q "$@" >> "$LOG" 2>&1 || status=$?
  fi
  if [ "$status" -ne 0 ]; then
    tail -n 30 "$LOG" >&2
    echo "error: $INSTALLER install $* failed; full output in $LOG" >&2
    exit 1
  fi
}
pip_install -c constraints.txt -e ".[tfx,test,dask]"
# Current KFP protos for strict validation of compiled pipelines (kubeflow/image_tools/validate_spec.py),
# in a directory of their own: they need protobuf 6, TFX 1.16 needs protobuf 3.20.
rm -rf "$VENV/kfp-spec"
pip_install --no-deps --target "$VENV/kfp-spec" -r kubeflow/validate-requirements.txt
# KFP's local orchestrator for `tfx-accum run-compiled` (kubeflow/run_compiled.py): KFP 2.17
# with protobuf 6, so in a virtual environment of its own.
KFP_ENV="$VENV/kfp-local"
rm -rf "$KFP_ENV"
if [ "$INSTALLER" = uv ]; then
  # The base interpreter: $PY may itself be a virtual environment's (an activated one).
  BASE_PY=$("$PY" -c 'import os, sys; print(os.path.realpath(sys._base_executable))')
  "$VENV/bin/uv" venv --quiet --no-python-downloads --python "$BASE_PY" "$KFP_ENV" >> "$LOG" 2>&1 \
    || { tail -n 30 "$LOG" >&2; echo "error: creating $KFP_ENV failed; see $LOG" >&2; exit 1; }
  "$VENV/bin/uv" pip install --quiet --python "$KFP_ENV/bin/python" \
      -r kubeflow/local-run-requirements.txt >> "$LOG" 2>&1 \
    || { tail -n 30 "$LOG" >&2; echo "error: installing $KFP_ENV failed; see $LOG" >&2; exit 1; }
else
  "$PY" -m venv "$KFP_ENV"
  "$KFP_ENV/bin/python" -m pip install -q -r kubeflow/local-run-requirements.txt >> "$LOG" 2>&1 \
    || { tail -n 30 "$LOG" >&2; echo "error: installing $KFP_ENV failed; see $LOG" >&2; exit 1; }
fi
echo "$WANT" > "$STAMP"
echo "[setup] done in $((SECONDS - start)) s with $INSTALLER (its output: $LOG)."
