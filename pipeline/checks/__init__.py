"""Checks before anything runs: the data (CSV, TFRecords, schema), the model, the output directory.

The pipeline.checks room, above the pipeline's base: each bad case stops the run with one
line (``InputError``, exit 2); the embedded data sets too.
"""
