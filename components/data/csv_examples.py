"""CsvExampleGen's executor, streaming: the same splits and tf.Examples in bounded memory.

TFX's CSV executor parses every line into Python lists of cells, makes a ``tf.train.Example``
per row in Python, infers the column types in a combine that Beam feeds from the same
materialised lines, hashes each example to its split and reshuffles them all before writing,
so its time and memory grow with the rows (bench/example_gen.py measures the two). Here the CSV is
read twice in chunks of ``CHUNK_ROWS`` rows by pyarrow's streaming reader: once to infer the column
types by TFX's rules (``tfx_bsl.coders.csv_decoder``: int64, else float, else bytes; a column
with no value is typeless), once to encode the rows and append them to the splits' gzipped
TFRecord files, written by a second thread. Memory is two chunks, whatever the rows.

The output is what TFX's executor writes for the same input and configuration: the same
features and values per example (an empty cell: an empty list of the column's type), and
the same split per example, since TFX assigns it from the SHA-256 of the example's
deterministic serialisation (``base_example_gen_executor._PartitionFn``), so the rows are
encoded as exactly those bytes: each column's map entries, joined in key order. Numeric and
typeless columns are encoded with numpy (a fixed layout per value); text columns, and
columns with names of 100 bytes or more, by tfx_bsl's C++ ``tf.Example`` coder one column at
a time (slower than numpy per cell, and it orders a map's entries arbitrarily, so not for
whole rows).
The order of the records in a file differs (TFX's is a random shuffle), as the file names
may (a large input is spread over up to :data:`MAX_SHARDS` files per split) and the gzip
level. Configurations this does not cover
(another payload or file format, a partition feature) run TFX's executor unchanged.

ExampleGen's ``custom_config`` may name cells to read as empty (``--missing-values``:
``tfx_accum.components.data.missing_values``): ``N/A`` in a column of numbers is then a
missing value, not a cell that makes the column text. TFX's executor has
no such option, so a configuration it would run refuses them.
"""

from __future__ import annotations

from tfx_accum import needs_tfx  # noqa: F401 - first: without the tfx extra, one line

# isort: split
import hashlib
import os
from collections.abc import Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import tensorflow as tf
from tfx.components.example_gen import utils, write_split
from tfx.components.example_gen.csv_example_gen import executor as csv_executor
from tfx.dsl.io import fileio
from tfx.proto import example_gen_pb2
from tfx.types import artifact_utils, standard_component_specs
from tfx.utils import io_utils, proto_utils
from tfx_bsl.coders import csv_decoder, example_coder

from tfx_accum.components.data.csv_reader import read_rows
from tfx_accum.components.data.missing_values import configured_missing_values

ColumnType = csv_decoder.ColumnType
CHUNK_ROWS = 32_768  # rows encoded at a time: bounds the memory
# gzip's fastest level: a quarter of level 6's CPU (Beam's, TFX's files) on float data, for
# files about 15% larger; the records, and so what every reader gets, are the same.
# Beam reads a gzipped file in one piece, by one worker: a split in one file is read by one
# worker whatever the workers (StatisticsGen, the Evaluator). So each SHARD_ROWS rows of
# input go to a split's next file, up to MAX_SHARDS files (then the first again). Not
# fewer rows a file: every file costs each reader its set-up (for 5,000 columns, seconds).
SHARD_ROWS = 65_536
MAX_SHARDS = 16
COMPRESSION = tf.io.TFRecordOptions(compression_type="GZIP", compression_level=1)
# Cells whose type and value pyarrow parses as Python's int() and float() do; any other
# cell is judged by tfx_bsl's own rule and, in a numeric column, converted by Python.
INT_PATTERN = r"^-?[0-9]{1,18}$"
FLOAT_PATTERN = r"^-?(([0-9]+\.[0-9]*|\.[0-9]+)([eE][-+]?[0-9]{1,2})?|[0-9]+[eE][-+]?[0-9]{1,2})$"
NUMBER_PATTERN = f"({INT_PATTERN})|({FLOAT_PATTERN})"  # what a float column converts fast


def column_names(path: str) -> list[str]:
    """The CSV's header as TFX's executor reads it (``io_utils.load_csv_column_names``)."""
    return io_utils.load_csv_column_names(path)


def read_chunks(
    path: str, names: list[str], missing_values: Sequence[str] = ()
) -> Iterator[pa.RecordBatch]:
    """The rows after the header, every column as text, an empty cell (or one of
    ``missing_values``) as null, in chunks."""
    source = path if "://" not in path else pa.PythonFile(fileio.open(path, "rb"), mode="r")
    for batch in read_rows(source, names, missing_values):
        for start in range(0, batch.num_rows, CHUNK_ROWS):
            yield batch.slice(start, CHUNK_ROWS)


def _all_match(values: pa.Array, pattern: str) -> bool:
    return len(values) == 0 or pc.all(pc.match_substring_regex(values, pattern)).as_py()


def cell_type(values: pa.Array, known: ColumnType) -> tuple[ColumnType, bool]:
    """The highest of tfx_bsl's types of the non-null ``values`` and ``known`` (the type so
    far), and whether every value matched ``INT_PATTERN`` or ``FLOAT_PATTERN``."""
    if len(values) == 0:
        return known, True
    if known <= ColumnType.INT and _all_match(values, INT_PATTERN):
        return ColumnType.INT, True
    if _all_match(values, NUMBER_PATTERN):  # and not all ints
        return ColumnType.FLOAT, True
    is_int = pc.match_substring_regex(values, INT_PATTERN)
    is_float = pc.match_substring_regex(values, FLOAT_PATTERN)
    found = max(known, ColumnType.INT) if pc.any(is_int).as_py() else known
    if pc.any(is_float).as_py():
        found = max(found, ColumnType.FLOAT)
    others = pc.unique(pc.filter(values, pc.invert(pc.or_(is_int, is_float))))
    for value in others.to_pylist():  # tfx_bsl's own rule, for the cells not matched
        found = max(found, csv_decoder._InferValueType(value.encode()))  # noqa: SLF001
        if found == ColumnType.STRING:
            break
    return found, False


def infer_types(
    paths: list[str], names: list[str], missing_values: Sequence[str] = ()
) -> tuple[dict[str, ColumnType], set[str]]:
    """Each column's type over every row of ``paths``, as TFX's ``ColumnTypeInferrer``, and
    the columns whose values all matched the patterns (converted by pyarrow alone)."""
    types = dict.fromkeys(names, ColumnType.UNKNOWN)
    plain = set(names)
    for path in paths:
        for chunk in read_chunks(path, names, missing_values):
            for name, column in zip(names, chunk.columns):
                if types[name] != ColumnType.STRING:
                    types[name], matched = cell_type(column.drop_null(), types[name])
                    if not matched:
                        plain.discard(name)
    return types, plain


def _python_values(values: pa.Array, kind: ColumnType) -> pa.Array:
    convert = int if kind == ColumnType.INT else float
    arrow = pa.int64() if kind == ColumnType.INT else pa.float32()
    return pa.array([convert(v.encode()) for v in values.to_pylist()], arrow)


def typed_values(values: pa.Array, kind: ColumnType, plain: bool = False) -> pa.Array:
    """The non-null text ``values`` of a column of type ``kind``, as TFX's handlers make them
    (``plain``: every value is known to match the patterns)."""
    if kind == ColumnType.STRING:
        return values.cast(pa.large_binary())
    pattern = INT_PATTERN if kind == ColumnType.INT else NUMBER_PATTERN
    if not plain and not _all_match(values, pattern):
        return _python_values(values, kind)
    if kind == ColumnType.INT:
        return values.cast(pa.int64())
    doubles = values.cast(pa.float64()).to_numpy(zero_copy_only=False)
    return pa.array(doubles.astype(np.float32))  # as Python's float, then FloatList's float32


def feature_column(column: pa.Array, kind: ColumnType, plain: bool = False) -> pa.Array:
    """One list per row: the cell's value, or empty for an empty cell (null: no value type)."""
    if kind == ColumnType.UNKNOWN:
        return pa.nulls(len(column), pa.large_list(pa.float32()))
    present = column.is_valid().to_numpy(zero_copy_only=False)
    offsets = np.zeros(len(column) + 1, np.int64)
    np.cumsum(present, out=offsets[1:])
    values = typed_values(column.drop_null(), kind, plain)
    return pa.LargeListArray.from_arrays(pa.array(offsets), values)


def _varint_sizes(values: np.ndarray) -> np.ndarray:
    """Bytes of each value's base-128 varint (values as uint64: a negative int64 takes 10)."""
    values = values.astype(np.uint64)
    sizes = np.ones(len(values), np.int64)
    for shift in range(7, 64, 7):
        sizes += values >= np.uint64(1 << shift)
    return sizes


def _compact(matrix: np.ndarray, sizes: np.ndarray) -> np.ndarray:
    """The first ``sizes[i]`` bytes of each row of ``matrix``, concatenated."""
    return matrix[np.arange(matrix.shape[1]) < sizes[:, None]]


def _coder_entries(
    name: str, column: pa.Array, kind: ColumnType, plain: bool
) -> tuple[np.ndarray, ...]:
    """(bytes, sizes) of the column's map entries, by tfx_bsl's C++ coder, one per row.

    It encodes Examples of this one feature: ``0x0a varint(n)`` then the n bytes of the entry.
    """
    batch = pa.RecordBatch.from_arrays([feature_column(column, kind, plain)], [name])
    encoded = example_coder.RecordBatchToExamplesEncoder().encode(batch)
    sizes = np.fromiter(map(len, encoded), np.int64, len(encoded))
    prefix = np.full(len(sizes), 2, np.int64)  # tag and a one-byte length...
    for width, limit in ((3, 1 << 7), (4, 1 << 14), (5, 1 << 21)):  # ...or longer
        prefix[sizes - (width - 1) >= limit] = width
    flat = np.frombuffer(b"".join(encoded), np.uint8)
    entry = sizes - prefix
    skip = np.repeat(np.cumsum(sizes) - entry, entry) - np.repeat(np.cumsum(entry) - entry, entry)
    return flat[np.arange(entry.sum()) + skip], entry


def _numeric_entries(
    name: str, column: pa.Array, kind: ColumnType, plain: bool
) -> tuple[np.ndarray, ...]:
    """(bytes, sizes) of the map entries of a numeric or typeless column, built with numpy:

    ``0a E | 0a len(key) key | 12 F | feature``, the feature ``12 06 0a 04 <float32>`` or
    ``12 00`` (float), ``1a n+2 0a n <varint>`` or ``1a 00`` (int), nothing (typeless).
    """
    rows, key = len(column), name.encode()
    head = np.frombuffer(bytes([0x0A, len(key)]) + key, np.uint8)
    present = column.is_valid().to_numpy(zero_copy_only=False)
    at = 2 + len(head) + 2  # where the feature starts
    matrix = np.zeros((rows, at + 14), np.uint8)
    matrix[:, 2 : 2 + len(head)] = head
    matrix[:, 0], matrix[:, at - 2] = 0x0A, 0x12
    if kind == ColumnType.UNKNOWN:
        feature = np.zeros(rows, np.int64)
    else:
        matrix[:, at] = 0x12 if kind == ColumnType.FLOAT else 0x1A  # its list's field
        numbers = typed_values(column.drop_null(), kind, plain).to_numpy(zero_copy_only=False)
        values = np.zeros(rows, numbers.dtype)
        values[present] = numbers
        if kind == ColumnType.FLOAT:
            matrix[:, at + 1 : at + 4] = (6, 0x0A, 4)
            matrix[:, at + 4 : at + 8] = values.astype("<f4").view(np.uint8).reshape(rows, 4)
            width = np.full(rows, 8, np.int64)
        else:
            digits = _varint_sizes(values)
            matrix[:, at + 1], matrix[:, at + 2], matrix[:, at + 3] = digits + 2, 0x0A, digits
            remaining = values.view(np.uint64).copy()
            for index in range(10):
                more = np.where(digits > index + 1, 0x80, 0)
                matrix[:, at + 4 + index] = (remaining & np.uint64(0x7F)).astype(np.uint8) | more
                remaining >>= np.uint64(7)
            width = digits + 4
        matrix[~present, at + 1] = 0  # an empty cell: an empty list
        feature = np.where(present, width, 2)
    matrix[:, at - 1] = feature
    matrix[:, 1] = len(head) + 2 + feature
    sizes = at + feature
    return _compact(matrix, sizes), sizes


def serialize(
    columns: dict[str, tuple[ColumnType, pa.Array]], plain: frozenset[str] | set[str] = frozenset()
) -> list[bytes]:
    """The rows' ``tf.train.Example``s from each column's type and text, serialised as
    ``SerializeToString(deterministic=True)`` does: map entries in key order (``plain``:
    the columns whose values all match the patterns)."""
    parts = []
    for name in sorted(columns, key=str.encode):
        kind, column = columns[name]
        numeric = kind != ColumnType.STRING and len(name.encode()) < 100  # E below 128
        entries = _numeric_entries if numeric else _coder_entries
        parts.append(entries(name, column, kind, name in plain))
    payload = np.sum([sizes for _, sizes in parts], axis=0, dtype=np.int64)
    header = 1 + _varint_sizes(payload)
    totals = header + payload
    row_starts = np.cumsum(totals) - totals
    out = np.empty(int(totals.sum()), np.uint8)
    out[row_starts] = 0x0A  # Example.features
    remaining, widths = payload.copy(), header - 1
    for index in range(int(widths.max(initial=1))):  # each row's payload size, a varint
        here = widths > index
        byte = (remaining & 0x7F) | np.where(widths > index + 1, 0x80, 0)
        out[row_starts[here] + 1 + index] = byte[here]
        remaining >>= 7
    at = row_starts + header
    for flat, sizes in parts:
        out[np.repeat(at - np.cumsum(sizes) + sizes, sizes) + np.arange(len(flat))] = flat
        at = at + sizes
    data = out.tobytes()
    ends = (row_starts + totals).tolist()
    return [data[start:end] for start, end in zip(row_starts.tolist(), ends)]


def split_indices(records: list[bytes], buckets: list[int]) -> np.ndarray:
    """TFX's split of each serialised example (``_PartitionFn`` without a partition feature):
    ``bisect(buckets, int(sha256(record)) % buckets[-1])``, the modulo taken byte by byte."""
    digests = b"".join(hashlib.sha256(record).digest() for record in records)
    remainder = np.zeros(len(records), np.uint64)
    total = np.uint64(buckets[-1])  # below 2**55, so remainder * 256 + 255 fits
    for byte in np.frombuffer(digests, np.uint8).reshape(-1, 32).T.astype(np.uint64):
        remainder = (remainder * np.uint64(256) + byte) % total
    return np.searchsorted(np.array(buckets, np.uint64), remainder, side="right")


def examples(paths: list[str], missing_values: Sequence[str] = ()) -> Iterator[list[bytes]]:
    """The serialised tf.Examples of the CSV files ``paths`` (one header), in chunks; a cell
    that is one of ``missing_values`` is an empty cell (a missing value)."""
    names = column_names(paths[0])
    for path in paths[1:]:
        if column_names(path) != names:
            raise RuntimeError(f"CSV files {paths[0]} and {path} have different headers.")
    types, plain = infer_types(paths, names, missing_values)
    for path in paths:
        for chunk in read_chunks(path, names, missing_values):
            yield serialize(
                {name: (types[name], column) for name, column in zip(names, chunk.columns)},
                plain,
            )


class _ShardedSplits:
    """Each split's files, opened as rows arrive and named ``-of-N`` when closed.

    A chunk of rows whose first row is the input's (or the split's input's) row ``r`` goes
    to the split's file ``r // SHARD_ROWS % MAX_SHARDS``: an input of fewer than
    :data:`SHARD_ROWS` rows stays one file per split, a large one is spread over
    :data:`MAX_SHARDS`.
    """

    def __init__(self, output: list[Any], split_names: list[str]):
        self.directories = [artifact_utils.get_split_uri(output, name) for name in split_names]
        self.writers: list[list[Any]] = [[] for _ in split_names]
        for directory in self.directories:
            fileio.makedirs(directory)

    def _path(self, split: int, shard: int, shards: int | None = None) -> str:
        name = f"{write_split.DEFAULT_FILE_NAME}-{shard:05d}"
        name += f"-of-{shards:05d}.gz" if shards else ".gz.partial"
        return os.path.join(self.directories[split], name)

    def writer(self, split: int, row: int) -> Any:
        files = self.writers[split]
        shard = row // SHARD_ROWS % MAX_SHARDS
        while shard >= len(files):
            path = self._path(split, len(files))
            files.append(tf.io.TFRecordWriter(path, options=COMPRESSION))
        return files[shard]

    def close(self, complete: bool) -> None:
        """Closes every file; if ``complete``, names them (a split with no rows, one empty file)."""
        for split, files in enumerate(self.writers):
            for writer in files:
                writer.close()
            if not complete:
                continue
            if not files:
                self.writer(split, 0).close()
            for shard in range(len(files)):
                final = self._path(split, shard, len(files))
                fileio.rename(self._path(split, shard), final, overwrite=True)


def _write(writers: list[Any], records: list[bytes], index: np.ndarray | None) -> None:
    if index is None:
        for record in records:
            writers[0].write(record)
        return
    for record, split in zip(records, index.tolist()):
        writers[split].write(record)


def write_examples(
    input_base: str,
    input_config: Any,
    output_config: Any,
    output: list[Any],
    missing_values: Sequence[str] = (),
) -> dict[str, int]:
    """Writes every split's examples; returns the number per split (``missing_values``:
    cells read as empty).

    One thread writes (TFRecordWriter compresses with the GIL released) while the next chunk
    is encoded; at most two chunks are in memory.
    """
    split_names = utils.generate_output_split_names(input_config, output_config)
    counts = np.zeros(len(split_names), np.int64)
    hash_splits = output_config.split_config.splits
    if hash_splits:
        (split,) = input_config.splits
        buckets = np.cumsum([s.hash_buckets for s in hash_splits]).tolist()
        jobs = [(None, _matching(input_base, split.pattern))]
    else:
        jobs = [(n, _matching(input_base, s.pattern)) for n, s in enumerate(input_config.splits)]
    files = _ShardedSplits(output, split_names)
    rows = np.zeros(len(split_names), np.int64)  # input rows read so far, per split's input
    complete = False
    try:
        with ThreadPoolExecutor(1) as pool:
            pending = None
            for target, inputs in jobs:
                for records in examples(inputs, missing_values):
                    if target is None:
                        index = split_indices(records, buckets)
                        counts += np.bincount(index, minlength=len(split_names))
                        chosen = [files.writer(n, int(rows[0])) for n in range(len(split_names))]
                        rows += len(records)
                        split = index
                    else:
                        counts[target] += len(records)
                        chosen, split = [files.writer(target, int(rows[target]))], None
                        rows[target] += len(records)
                    if pending is not None:
                        pending.result()
                    pending = pool.submit(_write, chosen, records, split)
            if pending is not None:
                pending.result()
        complete = True
    finally:
        files.close(complete)
    return dict(zip(split_names, counts.tolist()))


def _matching(input_base: str, pattern: str) -> list[str]:
    paths = sorted(fileio.glob(os.path.join(input_base, pattern)))
    if not paths:
        raise RuntimeError(f"Split pattern {os.path.join(input_base, pattern)} matches no file.")
    return paths


def streams(exec_properties: dict[str, Any], output_config: Any) -> bool:
    """Whether the streaming path covers this configuration (else TFX's executor runs)."""
    payload = exec_properties.get(standard_component_specs.OUTPUT_DATA_FORMAT_KEY)
    file_format = exec_properties.get(standard_component_specs.OUTPUT_FILE_FORMAT_KEY)
    return (
        payload in (None, example_gen_pb2.FORMAT_TF_EXAMPLE)
        and file_format
        in (None, example_gen_pb2.FILE_FORMAT_UNSPECIFIED, example_gen_pb2.FORMAT_TFRECORDS_GZIP)
        and not output_config.split_config.HasField("partition_feature_name")
    )


class Executor(csv_executor.Executor):
    """TFX's CSV executor, streaming the conversion where it covers the configuration."""

    def Do(self, input_dict, output_dict, exec_properties):  # noqa: N802 - TFX's name
        input_config = example_gen_pb2.Input()
        proto_utils.json_to_proto(
            exec_properties[standard_component_specs.INPUT_CONFIG_KEY], input_config
        )
        output_config = example_gen_pb2.Output()
        proto_utils.json_to_proto(
            exec_properties[standard_component_specs.OUTPUT_CONFIG_KEY], output_config
        )
        missing_values = configured_missing_values(exec_properties)
        if not streams(exec_properties, output_config):
            if missing_values:
                raise ValueError(
                    "Missing-value tokens are read by the streaming CSV conversion only: not "
                    "with another payload or file format, or a partition feature."
                )
            return super().Do(input_dict, output_dict, exec_properties)
        self._log_startup(input_dict, output_dict, exec_properties)
        output = output_dict[standard_component_specs.EXAMPLES_KEY]
        artifact = artifact_utils.get_single_instance(output)
        artifact.split_names = artifact_utils.encode_split_names(
            utils.generate_output_split_names(input_config, output_config)
        )
        write_examples(
            exec_properties[standard_component_specs.INPUT_BASE_KEY],
            input_config,
            output_config,
            output,
            missing_values,
        )
        _set_formats(output, exec_properties)
        return None


def _set_formats(output: list[Any], exec_properties: dict[str, Any]) -> None:
    """The payload and file format properties, as TFX's executor sets them."""
    from tfx.components.util import examples_utils

    payload = exec_properties.get(standard_component_specs.OUTPUT_DATA_FORMAT_KEY)
    file_format = exec_properties.get(standard_component_specs.OUTPUT_FILE_FORMAT_KEY)
    for artifact in output:
        if payload:
            examples_utils.set_payload_format(artifact, payload)
        if file_format:
            examples_utils.set_file_format(artifact, write_split.to_file_format_str(file_format))
