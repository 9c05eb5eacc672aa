"""The streaming CsvExampleGen executor writes what TFX's writes: per split, the same
tf.Examples, with empty cells, text, ints and floats, odd numerals and typeless columns."""

from __future__ import annotations

import gzip
import random
import struct
from pathlib import Path

import pytest
import tensorflow as tf
from tfx.components.example_gen import utils
from tfx.components.example_gen.csv_example_gen import executor as csv_executor
from tfx.dsl.components.base import base_beam_executor
from tfx.proto import example_gen_pb2
from tfx.types import artifact_utils, standard_artifacts
from tfx.types import standard_component_specs as specs
from tfx.utils import proto_utils

from tfx_accum.components.data import csv_examples
from tfx_accum.components.data.example_fingerprint import CsvExecutor

EDGE_ROWS = [
    '1,.5,x,,7,1e3,"quoted, with comma",+5',
    "2,,y,,-8,2.5,,9223372036854775807",
    ',3,"",,9,nan,"multi\nline",',
    "-0,-0.0,é,, 12 ,1e999,plain, 6",
    "",  # a blank line: skipped
    '007,1.,"say ""hi""",,0,-1E-3,ü,-3',
]
HEADER = "i,f,s,empty,int_odd,float_odd,text,int_big"


def _write_csv(path: Path, rows: int = 400) -> None:
    rng = random.Random(0)
    lines = [HEADER, *EDGE_ROWS]
    for n in range(rows):
        lines.append(
            f"{rng.randint(-999, 999)},{rng.uniform(-1, 1):.4f},w{n % 7},,{n},"
            f"{rng.uniform(-5, 5):.3f},t{n},{n * 3}"
        )
    path.write_text("\n".join(lines) + "\n")


def _run(executor_class, data: Path, out: Path, output_config=None) -> dict[str, list[bytes]]:
    input_config = example_gen_pb2.Input(
        splits=[example_gen_pb2.Input.Split(name="single_split", pattern="*.csv")]
    )
    output_config = output_config or utils.make_default_output_config(input_config)
    examples = standard_artifacts.Examples()
    examples.uri = str(out)
    properties = {
        specs.INPUT_BASE_KEY: str(data),
        specs.INPUT_CONFIG_KEY: proto_utils.proto_to_json(input_config),
        specs.OUTPUT_CONFIG_KEY: proto_utils.proto_to_json(output_config),
        specs.OUTPUT_DATA_FORMAT_KEY: example_gen_pb2.FORMAT_TF_EXAMPLE,
        specs.OUTPUT_FILE_FORMAT_KEY: example_gen_pb2.FORMAT_TFRECORDS_GZIP,
    }
    context = base_beam_executor.BaseBeamExecutor.Context(
        beam_pipeline_args=["--direct_running_mode=in_memory", "--direct_num_workers=1"],
        tmp_dir=str(out / ".tmp"),
    )
    executor_class(context).Do({}, {specs.EXAMPLES_KEY: [examples]}, properties)
    splits = {}
    for split in artifact_utils.decode_split_names(examples.split_names):
        files = tf.io.gfile.glob(str(Path(artifact_utils.get_split_uri([examples], split), "*")))
        records = tf.data.TFRecordDataset(files, compression_type="GZIP")
        splits[split] = sorted(
            tf.train.Example.FromString(r.numpy()).SerializeToString(deterministic=True)
            for r in records
        )
    return splits


@pytest.fixture(scope="module")
def data(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("csv")
    _write_csv(root / "rows.csv")
    return root


@pytest.mark.e2e
@pytest.mark.parametrize("executor", [csv_examples.Executor, CsvExecutor])
def test_the_same_examples_in_the_same_splits_as_tfx(data, tmp_path, executor):
    stock = _run(csv_executor.Executor, data, tmp_path / "stock")
    ours = _run(executor, data, tmp_path / "ours")
    assert list(ours) == list(stock) == ["train", "eval"]
    assert sum(map(len, stock.values())) == 405  # the blank line is no example
    assert all(stock.values())
    for split in stock:
        assert ours[split] == stock[split], split


@pytest.mark.e2e
def test_three_custom_splits_as_tfx(data, tmp_path):
    config = example_gen_pb2.Output(
        split_config=example_gen_pb2.SplitConfig(
            splits=[
                example_gen_pb2.SplitConfig.Split(name=name, hash_buckets=buckets)
                for name, buckets in (("a", 3), ("b", 5), ("c", 2))
            ]
        )
    )
    stock = _run(csv_executor.Executor, data, tmp_path / "stock", config)
    ours = _run(csv_examples.Executor, data, tmp_path / "ours", config)
    assert list(ours) == ["a", "b", "c"] and ours == stock


def test_the_values_are_typed_as_tfx_types_them(data, tmp_path):
    ours = _run(csv_examples.Executor, data, tmp_path / "ours")
    examples = [tf.train.Example.FromString(r) for split in ours.values() for r in split]
    (edge,) = [e for e in examples if e.features.feature["int_big"].int64_list.value == [2**63 - 1]]
    feature = edge.features.feature
    assert feature["i"].int64_list.value == [2]
    assert list(feature["f"].float_list.value) == []  # an empty cell: an empty list
    assert feature["empty"] == tf.train.Feature()  # a column without values: no type
    assert feature["text"] == tf.train.Feature(bytes_list=tf.train.BytesList())


@pytest.mark.parametrize(
    ("kind", "cells"),
    [
        ("STRING", ["1", None, "x" * 300, ""]),
        ("FLOAT", ["0.25", "2", None, "-1e-3"]),
        ("INT", ["-1", None, str(2**63 - 1), "127"]),
        ("UNKNOWN", [None, None, None, None]),
    ],
)
def test_a_row_serialises_as_protobufs_deterministic_bytes(kind, cells):
    kind = csv_examples.ColumnType[kind]
    columns = {
        "z": (kind, csv_examples.pa.array(cells, csv_examples.pa.string())),
        "a": (csv_examples.ColumnType.INT, csv_examples.pa.array(["5", "6", None, "-7"])),
        "k" * 120: (kind, csv_examples.pa.array(cells, csv_examples.pa.string())),  # coder's
    }
    for record in csv_examples.serialize(columns):
        example = tf.train.Example.FromString(record)
        assert record == example.SerializeToString(deterministic=True)
        assert len(example.features.feature) == 3


def test_the_output_is_gzipped_tfrecords(data, tmp_path):
    _run(csv_examples.Executor, data, tmp_path / "ours")
    (path,) = (tmp_path / "ours" / "Split-train").iterdir()
    assert path.name == "data_tfrecord-00000-of-00001.gz"
    with gzip.open(path) as handle:
        (length,) = struct.unpack("<Q", handle.read(8))
    assert length > 0


def test_a_large_input_is_written_in_several_files_per_split(data, tmp_path, monkeypatch):
    """Each SHARD_ROWS rows go to a split's next file, up to MAX_SHARDS (Beam reads a
    gzipped file whole, by one worker): the same examples per split as in one file, in
    every file; an input of fewer rows stays one file (the first test)."""
    whole = _run(csv_examples.Executor, data, tmp_path / "one")
    monkeypatch.setattr(csv_examples, "CHUNK_ROWS", 40)  # 400+ rows: 10+ chunks
    monkeypatch.setattr(csv_examples, "SHARD_ROWS", 80)  # two chunks a file
    monkeypatch.setattr(csv_examples, "MAX_SHARDS", 4)
    sharded = _run(csv_examples.Executor, data, tmp_path / "many")
    assert sharded == whole
    for split in ("train", "eval"):
        files = sorted((tmp_path / "many" / f"Split-{split}").iterdir())
        assert [f.name for f in files] == [f"data_tfrecord-{i:05d}-of-00004.gz" for i in range(4)]
        sizes = [sum(1 for _ in tf.data.TFRecordDataset(str(f), "GZIP")) for f in files]
        assert min(sizes) > 0


def test_a_quoted_line_break_is_one_value_for_the_check_and_for_example_gen(tmp_path, monkeypatch):
    """The data check judges the rows ExampleGen writes: a quoted value over two lines is one
    cell of one row in both readings (one pyarrow reader, ``newlines_in_values``), also where
    a read block ends inside it (blocks of a few bytes here)."""
    from tfx_accum.components.data import csv_reader
    from tfx_accum.pipeline.checks.csv_check import validate_csv_dir

    monkeypatch.setattr(csv_reader, "BLOCK_BYTES", 16)
    data = tmp_path / "data"
    data.mkdir()
    (data / "table.csv").write_text('a,text,label\n1,"two\nlines",0\n2,one,1\n\n3,"x",0\n')
    summary = validate_csv_dir(str(data), "label")
    records = [r for chunk in csv_examples.examples([str(data / "table.csv")]) for r in chunk]
    texts = [tf.train.Example.FromString(r).features.feature["text"] for r in records]
    assert summary.rows == len(records) == 3
    assert [t.bytes_list.value[0] for t in texts] == [b"two\nlines", b"one", b"x"]
    assert dict(summary.vocabularies)["text"] == ("one", "two\nlines", "x")
