"""TFX's per-row floor: the work StatisticsGen and the Evaluator do on every example (#31).

``bench.scale`` finds the pipeline at 6.6x the plain process on 1M rows x 64 columns, and
StatisticsGen and the Evaluator, TFX's stock components, take half of that run. This
benchmark splits their per-row work into parts and measures each in CPU seconds, one
process, on the same records: those this project's ExampleGen writes for a generated
table (``bench/csv_tables.py``) of ``--rows`` rows, in batches of 8,192 examples (TFXIO's
batching by bytes, which the pipeline sets):

- ``decode (tfx_bsl)``: tfx_bsl's ``ExamplesToRecordBatchDecoder``, which every TFXIO
  Beam source of TFX runs on every example (StatisticsGen: all the splits; the Evaluator:
  the eval split) to make Arrow record batches of the ``tf.Example`` protos;
- ``parse (TensorFlow)``: ``tf.io.parse_example`` on the same records, the parser the
  Tuner and Trainer read through (TFXIO's ``TensorFlowDataset``); the same values
  (checked) from the same bytes, for scale;
- ``statistics (TFDV)``: TFDV's statistics generators on the decoded record batches,
  without Beam or decoding (what StatisticsGen computes);
- ``StatisticsGen's path``: TFDV's ``GenerateStatistics`` on the records in a gzipped
  TFRecord file (ExampleGen's format) through TFXIO's Beam source, Beam's DirectRunner in
  one process: reading, decoding, the statistics and Beam's own per-bundle work, as
  StatisticsGen runs them in each worker. Per row: a run on every row less a run on the
  first batch alone (Beam's start is paid once per run, not per row);
- ``training read``: the Tuner's and Trainer's reading of the same file into tensors by
  the schema, in batches of 256: TFXIO's ``TensorFlowDataset`` (what the data accessor
  returns) and this project's reading of it (components/data/tfxio_parsing.py: the same
  tensors, without TFXIO's per-record handoff between reader threads).

Rates are rows per CPU second (medians of ``--repeats``); the CPU seconds per million rows
say what StatisticsGen (every example of every split) and the Evaluator (the eval split)
cannot go below on this machine, whatever the pipeline around them does.

Run with ``python -m bench.tfx_floor [--rows 100000] [--columns 4 64]``; the figures go
to ``bench/results/tfx_floor.md`` and ``tfx_floor.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "bench" / "results"
BATCH = 8192  # tfx_bsl's largest batch under byte-size batching (batch_util.py)
PARTS = (
    "decode (tfx_bsl)",
    "parse (TensorFlow)",
    "statistics (TFDV)",
    "StatisticsGen's path",
    "training read (TFXIO's TensorFlowDataset)",
    "training read (tfx_accum)",
)
READ_BATCH = 256  # the Tuner's and Trainer's read batch (components/data/datasets.py)


def records(rows: int, columns: int) -> list[bytes]:
    """The serialized tf.Examples this project's ExampleGen writes for the generated table."""
    from bench.csv_tables import write_csv
    from tfx_accum.components.data import csv_examples

    with tempfile.TemporaryDirectory(prefix="tfx-floor-") as directory:
        path = Path(directory) / "rows.csv"
        write_csv(path, rows, columns)
        return [record for chunk in csv_examples.examples([str(path)]) for record in chunk]


def batches(serialized: list[bytes]) -> list[list[bytes]]:
    return [serialized[i : i + BATCH] for i in range(0, len(serialized), BATCH)]


def cpu_seconds(work: Callable[[], object], repeats: int) -> float:
    """The median CPU seconds (this process, all threads) of ``work``."""
    spent = []
    for _ in range(repeats):
        start = time.process_time()
        work()
        spent.append(time.process_time() - start)
    return statistics.median(spent)


def decode_tfx_bsl(parts: list[list[bytes]]):
    """Arrow record batches, as a TFXIO source without a schema decodes them."""
    from tfx_bsl.coders import example_coder

    decoder = example_coder.ExamplesToRecordBatchDecoder()
    return [decoder.DecodeBatch(part) for part in parts]


def parse_tensorflow(parts: list[list[bytes]], names: list[str], label: str):
    """Dense tensors per column, as the Tuner's and Trainer's parser reads them."""
    import tensorflow as tf

    spec = {
        name: tf.io.FixedLenFeature([], tf.int64 if name == label else tf.float32) for name in names
    }
    return [tf.io.parse_example(part, spec) for part in parts]


def tfdv_statistics(record_batches) -> object:
    """TFDV's default statistics over ``record_batches``: the generators' per-batch work,
    then the merge, in this process (no Beam)."""
    import tensorflow_data_validation as tfdv
    from tensorflow_data_validation.statistics import stats_impl

    options = tfdv.StatsOptions()
    generators = stats_impl.get_generators(options, in_memory=True)
    partials = [
        stats_impl.generate_partial_statistics_in_memory(batch, options, generators)
        for batch in record_batches
    ]
    merged = [
        generator.merge_accumulators([partial[i] for partial in partials])
        for i, generator in enumerate(generators)
    ]
    return stats_impl.extract_statistics_output(merged, generators)


def write_records(serialized: list[bytes], path: Path) -> None:
    """``serialized`` as ExampleGen writes a split's file: gzipped TFRecords."""
    import tensorflow as tf

    with tf.io.TFRecordWriter(str(path), options="GZIP") as writer:
        for record in serialized:
            writer.write(record)


def statistics_gen_path(pattern: str, output: Path) -> None:
    """TFDV's ``GenerateStatistics`` on a file of ExampleGen's format through TFXIO's Beam
    source (DirectRunner in this process): what each StatisticsGen worker runs."""
    import apache_beam as beam
    import tensorflow_data_validation as tfdv
    from tfx_bsl.public import tfxio

    source = tfxio.TFExampleRecord(file_pattern=pattern)
    with beam.Pipeline(argv=["--direct_running_mode=in_memory", "--direct_num_workers=1"]) as p:
        _ = (
            p
            | source.BeamSource()
            | tfdv.GenerateStatistics(tfdv.StatsOptions())
            | tfdv.WriteStatisticsToBinaryFile(str(output))
        )


def marginal_path_seconds(serialized: list[bytes], directory: Path) -> float:
    """StatisticsGen's path's CPU seconds for ``serialized`` less those for its first
    batch alone: the per-row part, without Beam's start and finish (seconds a run pays
    once, whatever its rows)."""
    whole, first = directory / "whole.gz", directory / "first.gz"
    write_records(serialized, whole)
    write_records(serialized[:BATCH], first)
    spent = {
        path: cpu_seconds(lambda p=path: statistics_gen_path(str(p), directory / "out"), 1)
        for path in (whole, first)
    }
    return spent[whole] - spent[first]


def schema_of(names: list[str], label: str):
    """The schema SchemaGen infers for the table: one value per example in every column."""
    from tensorflow_metadata.proto.v0 import schema_pb2

    schema = schema_pb2.Schema()
    for name in names:
        feature = schema.feature.add(
            name=name, type=schema_pb2.INT if name == label else schema_pb2.FLOAT
        )
        feature.presence.min_fraction = 1.0
        feature.shape.dim.add(size=1)
    return schema


def training_read(path: Path, schema, project: bool) -> int:
    """Examples read into tensors by TFXIO's TensorFlowDataset, or by this project's
    reading of it (``project``), in batches of :data:`READ_BATCH`."""
    from tfx_bsl.public import tfxio

    from tfx_accum.components.data.tfxio_parsing import parsed_batches

    options = tfxio.TensorFlowDatasetOptions(
        batch_size=READ_BATCH, shuffle=False, num_epochs=1, reader_num_threads=1
    )

    def factory(patterns, options, schema):
        return tfxio.TFExampleRecord(file_pattern=patterns, schema=schema).TensorFlowDataset(
            options
        )

    files = [str(path)]
    dataset = (
        parsed_batches(factory, files, files, schema, options)
        if project
        else factory(files, options, schema)
    )
    return sum(int(batch[schema.feature[0].name].shape[0]) for batch in dataset)


def same_values(record_batches, parsed, names: list[str]) -> bool:
    """Whether both decoders read the same value of every column of every example."""
    import numpy as np

    for batch, tensors in zip(record_batches, parsed):
        for name in names:
            column = batch.column(batch.schema.get_field_index(name))
            decoded = np.asarray(column.flatten())
            if len(decoded) != batch.num_rows:  # one value per example
                return False
            if not np.array_equal(decoded, tensors[name].numpy()):
                return False
    return True


def measure(rows: int, columns: int, repeats: int) -> dict:
    from tfx_accum.pipeline import tfxio_batching

    tfxio_batching.enable()  # as StatisticsGen's and the Evaluator's workers batch
    serialized = records(rows, columns)
    parts = batches(serialized)
    from bench.csv_tables import column_names

    names = column_names(columns)
    decoded, parsed = decode_tfx_bsl(parts), parse_tensorflow(parts, names, "label")
    agree = same_values(decoded, parsed, names)
    schema = schema_of(names, "label")
    with tempfile.TemporaryDirectory(prefix="tfx-floor-stats-") as directory:
        split = Path(directory) / "split.gz"
        write_records(serialized, split)
        spent = {
            PARTS[0]: cpu_seconds(lambda: decode_tfx_bsl(parts), repeats),
            PARTS[1]: cpu_seconds(lambda: parse_tensorflow(parts, names, "label"), repeats),
            PARTS[2]: cpu_seconds(lambda: tfdv_statistics(decoded), repeats),
            PARTS[3]: marginal_path_seconds(serialized, Path(directory)),
            PARTS[4]: cpu_seconds(lambda: training_read(split, schema, project=False), repeats),
            PARTS[5]: cpu_seconds(lambda: training_read(split, schema, project=True), repeats),
        }
    marginal_rows = rows - min(rows, BATCH)  # the path's seconds are of these rows
    spent_rows = {part: rows for part in PARTS} | {PARTS[3]: marginal_rows}
    return {
        "rows": rows,
        "columns": columns,
        "record_bytes": sum(map(len, serialized)) / rows,
        "same_values": agree,
        "cpu_s": spent,
        "rows_per_cpu_s": {part: spent_rows[part] / max(s, 1e-9) for part, s in spent.items()},
    }


def markdown(results: list[dict]) -> str:
    lines = [
        "# TFX's per-row floor (`python -m bench.tfx_floor`)",
        "",
        f"Machine: {os.cpu_count()} CPU cores; one process, CPU seconds of all its threads "
        f"(medians). The records this project's ExampleGen writes for the generated table "
        f"(numeric columns and a 10-class label), in batches of {BATCH:,}.",
        "",
        "| part | " + " | ".join(f"{r['columns']} columns: rows per CPU-s" for r in results)
        + " | " + " | ".join(f"{r['columns']} columns: CPU-s per 1M rows" for r in results)
        + " |",
        "| --- |" + " --- |" * (2 * len(results)),
    ]  # fmt: skip
    for part in PARTS:
        rates = [f"{r['rows_per_cpu_s'][part]:,.0f}" for r in results]
        per_million = [f"{1e6 / r['rows_per_cpu_s'][part]:.1f}" for r in results]
        lines.append(f"| {part} | " + " | ".join(rates + per_million) + " |")
    lines.append("")
    for r in results:
        decode, parse = r["rows_per_cpu_s"][PARTS[0]], r["rows_per_cpu_s"][PARTS[1]]
        share = r["rows_per_cpu_s"][PARTS[3]] / decode  # per-row seconds: decode / path
        tfxio_read, ours = (r["rows_per_cpu_s"][part] for part in PARTS[4:])
        lines.append(
            f"- {r['rows']:,} rows x {r['columns']} columns ({r['record_bytes']:.0f} bytes "
            f"per example): TensorFlow's parser reads the records {parse / decode:.1f}x as "
            f"fast as tfx_bsl's decoder (the same values: {r['same_values']}); the decoding "
            f"is {share:.0%} of StatisticsGen's path. The Tuner's and Trainer's reading takes "
            f"{tfxio_read / ours:.2f}x the CPU of TFXIO's TensorFlowDataset for the same "
            "tensors."
        )
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.tfx_floor", description=__doc__)
    parser.add_argument("--rows", type=int, default=100_000)
    parser.add_argument("--columns", type=int, nargs="+", default=[4, 64])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--output", type=Path, default=RESULTS)
    args = parser.parse_args(argv)
    results = []
    for columns in args.columns:
        print(f"[tfx_floor] {args.rows:,} rows x {columns} columns ...", flush=True)
        results.append(measure(args.rows, columns, args.repeats))
    args.output.mkdir(parents=True, exist_ok=True)
    (args.output / "tfx_floor.json").write_text(json.dumps(results, indent=2) + "\n")
    (args.output / "tfx_floor.md").write_text(markdown(results))
    print(f"[tfx_floor] wrote {args.output / 'tfx_floor.md'} and .json", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
