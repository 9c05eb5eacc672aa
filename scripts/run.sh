#!/usr/bin/env bash
# Sets up the environment if needed and runs the local TFX pipeline on the embedded digits
# data (or on your data: any `tfx-accum run` option can be appended, e.g. --data-root DIR).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup_env.sh
exec .venv/bin/tfx-accum run "$@"
