"""The examples' fingerprint that keys the search and the Trainer's backup
(tfx_accum.components.data.datasets).

It must be the same for the same examples however ExampleGen wrote them (files, shards,
order, the serialized order of each example's features, which a protobuf map does not
fix), and differ when the examples differ, also when only values move between examples.
"""

from __future__ import annotations

import random
from pathlib import Path
from types import SimpleNamespace

import tensorflow as tf

from tfx_accum.components.data.input_keys import examples_fingerprint, location_for_inputs


def _example(values: dict[str, int]) -> tf.train.Example:
    return tf.train.Example(
        features=tf.train.Features(
            feature={
                k: tf.train.Feature(int64_list=tf.train.Int64List(value=[v]))
                for k, v in values.items()
            }
        )
    )


def _varint(n: int) -> bytes:
    out = b""
    while True:
        low, n = n & 0x7F, n >> 7
        out += bytes([low | 0x80]) if n else bytes([low])
        if not n:
            return out


def _serialized(example: tf.train.Example, reverse: bool) -> bytes:
    """``example``'s bytes with its feature entries in sorted or reversed order."""
    names = sorted(example.features.feature, reverse=reverse)
    entries = b"".join(
        tf.train.Features(feature={n: example.features.feature[n]}).SerializeToString()
        for n in names
    )
    return b"\x0a" + _varint(len(entries)) + entries  # Example.features, field 1


def _write(directory: Path, shards: list[list[bytes]]) -> list[str]:
    directory.mkdir(parents=True, exist_ok=True)
    for i, records in enumerate(shards):
        with tf.io.TFRecordWriter(str(directory / f"part-{i}.gz"), options="GZIP") as writer:
            for record in records:
                writer.write(record)
    return [str(directory / "*")]


ROWS = [{"pixel": i % 17, "label": i % 10, "other": i} for i in range(600)]


def test_the_same_examples_written_differently_have_one_fingerprint(tmp_path):
    examples = [_example(row) for row in ROWS]
    one = _write(tmp_path / "one", [[_serialized(e, reverse=False) for e in examples]])
    shuffled = [_serialized(e, reverse=True) for e in examples]
    random.Random(0).shuffle(shuffled)
    three = _write(tmp_path / "three", [shuffled[:100], shuffled[100:450], shuffled[450:]])
    assert _serialized(examples[0], False) != _serialized(examples[0], True)
    assert examples_fingerprint(one) == examples_fingerprint(three)


def test_other_examples_have_another_fingerprint(tmp_path):
    base = examples_fingerprint(
        _write(tmp_path / "base", [[_example(r).SerializeToString() for r in ROWS]])
    )
    changed = [dict(r) for r in ROWS]
    changed[5]["label"] = 9 if changed[5]["label"] != 9 else 8
    # The same values, two labels swapped between examples.
    swapped = [dict(r) for r in ROWS]
    swapped[1]["label"], swapped[2]["label"] = swapped[2]["label"], swapped[1]["label"]
    for name, rows in (("changed", changed), ("swapped", swapped), ("fewer", ROWS[:-1])):
        records = [_example(r).SerializeToString() for r in rows]
        assert examples_fingerprint(_write(tmp_path / name, [records])) != base, name


def test_the_search_location_follows_the_content_not_the_paths(tmp_path):
    records = [_example(r).SerializeToString() for r in ROWS]
    schema = tmp_path / "schema.pbtxt"
    schema.write_text('feature { name: "label" type: INT }\n')

    def args(run: str, rows: list[bytes], held: int = 50):
        return SimpleNamespace(
            train_files=_write(tmp_path / run / "train", [rows]),
            eval_files=_write(tmp_path / run / "eval", [rows[:held]]),
            schema_path=str(schema),
        )

    first = location_for_inputs("/root/_search", "search", args("run-1", records), space={"a": 1})
    again = location_for_inputs("/root/_search", "search", args("run-2", records), space={"a": 1})
    other = location_for_inputs(
        "/root/_search", "search", args("run-3", records[1:]), space={"a": 1}
    )
    assert first == again != other
    assert location_for_inputs("/r", "search", args("run-4", records), space={"a": 2}) != (
        location_for_inputs("/r", "search", args("run-5", records), space={"a": 1})
    )
    # The eval split, which the Tuner and Trainer never read, does not name their state.
    assert (
        location_for_inputs(
            "/root/_search", "search", args("run-6", records, held=20), space={"a": 1}
        )
        == first
    )


def test_a_process_computes_a_fingerprint_once_and_again_for_changed_files(tmp_path, monkeypatch):
    """The Tuner and the Trainer of a local run fingerprint the same files: the second
    asks no TensorFlow pass. A file changed in place is read again."""
    from tfx_accum.components.data import input_keys as data

    calls = []
    real = data._fingerprint
    monkeypatch.setattr(data, "_fingerprint", lambda files: calls.append(files) or real(files))
    files = _write(tmp_path / "x", [[_example(r).SerializeToString() for r in ROWS]])
    first = examples_fingerprint(files)
    assert examples_fingerprint(files) == first and len(calls) == 1
    _write(tmp_path / "x", [[_example(r).SerializeToString() for r in ROWS[:-1]]])
    assert examples_fingerprint(files) != first and len(calls) == 2
