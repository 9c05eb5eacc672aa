import os
import sys
from pathlib import Path

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

# Test helpers (equivalence.py, ...) import each other by name. The project itself is
# imported as the installed package `tfx_accum` (an editable install in .venv), never as
# top-level `components`/`pipeline`.
TESTS = Path(__file__).resolve().parent
if str(TESTS) not in sys.path:
    sys.path.insert(0, str(TESTS))
