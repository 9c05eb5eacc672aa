"""Benchmarks for tfx-accum: exactness against the anchors, speed and memory.

Run them all with ``python -m bench`` (writes ``bench/results/``).
"""
