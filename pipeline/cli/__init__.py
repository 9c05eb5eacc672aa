"""The ``tfx-accum`` command line: the parser (``parser.main``), the ``run`` and ``compile``
commands, and what a run reports (summary, failures, the options tables of the README).

The pipeline.cli room: above every other room of the pipeline, which it drives.
"""
