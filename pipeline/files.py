"""Atomic file writes for the pipeline's own files (reports, compiled specs, embedded data).

The helpers live in ``tfx_accum.atomic_files``, shared with the components
(the Trainer's backups, the search state, the pushed model); this module keeps the names
the pipeline imports.
"""

from tfx_accum.atomic_files import atomic_write, atomic_write_text

__all__ = ["atomic_write", "atomic_write_text"]
