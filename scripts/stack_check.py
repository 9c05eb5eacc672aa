"""Checks that a test environment holds what it was built for and nothing it must not.

``python scripts/stack_check.py LABEL BACKEND ABSENT...``, run by that environment's Python
with ``KERAS_BACKEND`` set: fails naming any of ``ABSENT`` that the interpreter's finder
sees, else imports Keras and ``BACKEND`` and prints their versions in one line.
"""

import importlib
import importlib.util
import sys

label, backend, *absent = sys.argv[1:]
extra = [name for name in absent if importlib.util.find_spec(name)]
assert not extra, f"[{label}] the install brought {extra}"
import keras  # noqa: E402 - after the check: the absent packages must not be imported first

module = importlib.import_module(backend)
print(
    f"[{label}] Python {sys.version.split()[0]}, {backend} {module.__version__}, "
    f"Keras {keras.__version__}; no {', '.join(absent)} installed"
)
