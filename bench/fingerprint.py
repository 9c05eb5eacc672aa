"""The cost of fingerprinting ExampleGen's input by content (#32), against reading it.

Each run hashes the files ExampleGen will read (``components/data/example_fingerprint.py``:
SHA-256, streamed once) so that data rewritten at the same size and time is never served
from the cache. This measures that digest on a generated CSV of ``--mb`` megabytes against
TFX's own fingerprint (sizes and times only) and against what any plain process doing the
same work pays just to read the table (``pandas.read_csv``), alternating them in the same
run; medians of ``--rounds``.

Run with ``python -m bench.fingerprint [--mb 460] [--rounds 3]``; the figures go to
``bench/results/fingerprint.md`` and ``fingerprint.json``.
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from pathlib import Path

import numpy as np

RESULTS = Path(__file__).resolve().parent / "results"
COLUMNS = 65  # the shape of the 1M x 65 table


def write_csv(path: Path, megabytes: int) -> int:
    """A CSV of about ``megabytes`` MB: 64 numeric features and a label; returns its rows."""
    rng = np.random.default_rng(0)
    block = rng.uniform(0, 100, (2000, COLUMNS)).round(3)
    block[:, -1] = block[:, -1] // 10
    text = "\n".join(",".join(f"{v:g}" for v in row) for row in block) + "\n"
    header = ",".join([f"f{i}" for i in range(COLUMNS - 1)] + ["label"]) + "\n"
    repeats = max(1, megabytes * 2**20 // len(text))
    with open(path, "w") as handle:
        handle.write(header)
        for _ in range(repeats):
            handle.write(text)
    return repeats * len(block)


def _timed(function) -> float:
    start = time.perf_counter()
    function()
    return time.perf_counter() - start


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--mb", type=int, default=460)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args(argv)

    import pandas as pd
    from tfx.utils import io_utils

    from tfx_accum.components.data.example_fingerprint import content_digest

    with tempfile.TemporaryDirectory(prefix="bench-fingerprint-") as directory:
        path = Path(directory) / "data.csv"
        rows = write_csv(path, args.mb)
        size = path.stat().st_size
        times: dict[str, list[float]] = {
            "content digest": [],
            "TFX's fingerprint": [],
            "read_csv": [],
        }
        for _ in range(args.rounds):
            times["content digest"].append(_timed(lambda: content_digest(directory, ["*.csv"])))
            times["TFX's fingerprint"].append(
                _timed(lambda: io_utils.generate_fingerprint("s", str(Path(directory) / "*.csv")))
            )
            times["read_csv"].append(_timed(lambda: pd.read_csv(path)))
    medians = {name: statistics.median(values) for name, values in times.items()}
    result = {
        "megabytes": round(size / 2**20, 1),
        "rows": rows,
        "rounds": args.rounds,
        "seconds": medians,
        "digest MB/s": round(size / 2**20 / medians["content digest"], 1),
        "digest / read_csv": round(medians["content digest"] / medians["read_csv"], 3),
    }
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "fingerprint.json").write_text(json.dumps(result, indent=1) + "\n")
    lines = [
        f"# Fingerprint by content: {result['megabytes']} MB CSV, {rows:,} rows x {COLUMNS}",
        "",
        f"`python -m bench.fingerprint --mb {args.mb} --rounds {args.rounds}` "
        f"(medians of {args.rounds} alternating rounds)",
        "",
        "| what | seconds |",
        "| --- | --- |",
        *[f"| {name} | {seconds:.3f} |" for name, seconds in medians.items()],
        "",
        f"The digest streams {result['digest MB/s']} MB/s: "
        f"{result['digest / read_csv']}x the time of reading the table with pandas once.",
    ]
    (RESULTS / "fingerprint.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    return result


if __name__ == "__main__":
    main()
