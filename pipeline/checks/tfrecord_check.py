"""Checks a directory of TFRecord files of ``tf.Example``s, as ImportExampleGen will read it.

Every record must parse as a ``tf.Example`` with a label; a feature keeps one type across
records (one list type: ``int64`` in some records and ``float`` in others is refused, as
StatisticsGen would fail on it) and holds at most one value, a finite number if numeric;
an image feature (bytes that start as a PNG or JPEG file) must decode in every record; a
feature that some files never have is an error (the files disagree), while a record that
lacks a numeric or string value is a missing value. A file must end where a record ends
(TensorFlow's reader takes a file cut inside a record's length field for a clean end;
Beam's, ImportExampleGen's, fails on it). Errors name the file, the
record (counted from 1) and the feature. It reads exactly the files ImportExampleGen will,
``*.tfrecord*`` (``data.tfrecord.bak`` too), decompressed as ImportExampleGen decompresses
them (``tfx_accum.pipeline.checks.data_files``: ``.gz`` as GZIP, other suffixes uncompressed).
"""

from __future__ import annotations

import io
import math
from pathlib import Path

from tfx_accum.components.data.feature_kinds import IMAGE, MAX_VOCABULARY, NUMERIC, STRING, is_image
from tfx_accum.pipeline.checks.data import TFRECORD, DataError, DataSummary
from tfx_accum.pipeline.checks.data_files import PATTERNS, compression, example_gen_files

_KINDS = {"int64_list": NUMERIC, "float_list": NUMERIC, "bytes_list": STRING}


def _records(path: Path):
    import tensorflow as tf

    kind = compression(path)
    if kind not in ("", "GZIP"):
        raise DataError(
            f"{path} is read by ImportExampleGen as {kind}-compressed (by its suffix), which "
            "this check cannot read; decompress it, or compress it with gzip (.gz)."
        )
    dataset = tf.data.TFRecordDataset(str(path), compression_type=kind)
    read = 0  # bytes of the records so far: 12 of length, the record, 4 of checksum
    number = 0
    try:
        for number, record in enumerate(dataset.as_numpy_iterator(), start=1):
            read += RECORD_FRAMING + len(record)
            yield number, record
    except tf.errors.OpError as error:
        raise DataError(_unreadable(path, error.message.splitlines()[0])) from None
    length = _data_length(path, kind)
    if length != read:
        # TensorFlow's reader takes a file cut inside a record's length field for its end;
        # Beam's, ImportExampleGen's, fails on it ("Not a valid TFRecord").
        raise DataError(
            _unreadable(path, f"{length - read} bytes after record {number} are not a record")
        )


RECORD_FRAMING = 16


def _data_length(path: Path, kind: str) -> int:
    """The bytes of ``path`` as the reader sees them: decompressed for GZIP."""
    if kind != "GZIP":
        return path.stat().st_size
    import gzip
    import zlib

    length = 0
    try:
        with gzip.open(path, "rb") as handle:
            while block := handle.read(2**20):
                length += len(block)
    except (OSError, EOFError, zlib.error):
        return -1  # cut short: unequal to any sum of records
    return length


def _unreadable(path: Path, why: str) -> str:
    return (
        f"{path} is not a readable TFRecord file ({why}); ImportExampleGen reads every file "
        "matching *.tfrecord* in the data root, those ending .gz as GZIP, others "
        "uncompressed: fix it (a file cut short?), or move it out of the data root."
    )


def _image_shape(path: Path, number: int, name: str, data: bytes) -> tuple[int, int, int]:
    from PIL import Image

    try:
        with Image.open(io.BytesIO(data)) as image:
            image.load()
            channels = len(image.getbands())
            return image.height, image.width, channels
    except Exception as error:  # noqa: BLE001 - PIL raises several types for bad files
        raise DataError(
            f"{path}, record {number}, feature {name!r}: the image does not decode "
            f"({type(error).__name__}: {error}); every value must be a PNG or JPEG file."
        ) from None


def validate_tfrecord_dir(data_root: str, label_key: str) -> DataSummary:
    """Checks a TFRecord directory; raises DataError naming the file, record and feature."""
    from google.protobuf.message import DecodeError
    from tensorflow.core.example import example_pb2

    files = example_gen_files(data_root, TFRECORD)
    if not files:
        raise DataError(f"Data root {data_root!r} holds no TFRecord file ({PATTERNS[TFRECORD]}).")
    kinds: dict[str, str] = {}  # feature -> NUMERIC | STRING | IMAGE, label included
    first_seen: dict[str, Path] = {}
    shapes: dict[str, tuple[int, int, int]] = {}
    missing: dict[str, int] = {}
    vocabularies: dict[str, set[str]] = {}
    labels: dict[object, tuple[Path, int]] = {}
    label_counts: dict[object, int] = {}
    label_list = ""
    rows = 0
    per_file: dict[Path, set[str]] = {}  # the features each file has values of
    lists: dict[str, tuple[str, str]] = {}  # feature -> its value list, where first seen
    for path in files:
        in_file: set[str] = set()
        records = 0
        for number, record in _records(path):
            records += 1
            try:
                example = example_pb2.Example.FromString(record)
            except DecodeError:
                raise DataError(
                    f"{path}, record {number} is not a serialized tf.Example."
                ) from None
            features = example.features.feature
            if label_key not in features or not _values(features[label_key]):
                raise DataError(
                    f"{path}, record {number}: no label {label_key!r} (features: "
                    f"{', '.join(sorted(features)[:8])}). Add it, or name it with --label-key."
                )
            for name, feature in features.items():
                values = _values(feature)
                _check_values(path, number, name, feature, values, lists)
                kind = _KINDS.get(feature.WhichOneof("kind"))
                if kind == STRING and values and is_image(values[0]):
                    kind = IMAGE
                if not values:
                    missing[name] = missing.get(name, 0) + 1
                    continue
                in_file.add(name)
                known = kinds.setdefault(name, kind)
                first_seen.setdefault(name, path)
                if known != kind:
                    raise DataError(
                        f"{path}, record {number}, feature {name!r}: {kind} values, while "
                        f"earlier records hold {known} values; a feature keeps one type."
                    )
                if kind == IMAGE:
                    shape = _image_shape(path, number, name, values[0])
                    shapes.setdefault(name, shape)
                elif kind == STRING and name != label_key:
                    bucket = vocabularies.setdefault(name, set())
                    if len(bucket) <= MAX_VOCABULARY:
                        bucket.add(values[0].decode("utf-8", "replace"))
            label = _values(features[label_key])[0]
            labels.setdefault(label, (path, number))
            label_counts[label] = label_counts.get(label, 0) + 1
            label_list = label_list or features[label_key].WhichOneof("kind")
            rows += 1
        if records == 0:
            raise DataError(f"{path} holds no records.")
        per_file[path] = in_file
    for path, present in per_file.items():
        lacking = sorted(set(kinds) - present)
        if lacking:
            raise DataError(
                f"{path} has no feature {lacking[0]!r} in any record, while "
                f"{first_seen[lacking[0]]} has it: every file must carry the same features."
            )
    for name, kind in kinds.items():
        if kind == IMAGE and missing.get(name):
            raise DataError(
                f"Feature {name!r} is an image, but {missing[name]} record(s) lack it; every "
                "example needs its image."
            )
    if len(kinds) < 2:
        raise DataError("The records have no feature besides the label.")
    label_kind = kinds[label_key]
    if label_kind == IMAGE:
        raise DataError(f"The label {label_key!r} holds images; it must be a class.")
    label_dtype = {"int64_list": "int", "float_list": "float"}.get(label_list, "string")

    def written(value) -> str:
        return value.decode("utf-8", "replace") if isinstance(value, bytes) else repr(value)

    columns = tuple(kinds)
    features = [(n, k) for n, k in kinds.items() if n != label_key]
    return DataSummary(
        format=TFRECORD,
        files=tuple(str(f) for f in files),
        columns=columns,
        kinds=tuple(sorted(features)),
        rows=rows,
        missing=tuple(sorted((n, c) for n, c in missing.items() if n != label_key)),
        image_shapes=tuple(sorted(shapes.items())),
        vocabularies=tuple(
            (n, tuple(sorted(v))[:MAX_VOCABULARY]) for n, v in sorted(vocabularies.items())
        ),
        label_dtype=label_dtype,
        label_values=tuple(
            (written(value), label_counts[value], f"{path}, record {number}")
            for value, (path, number) in labels.items()
        ),
    )


_LIST_TYPES = {"int64_list": "int64", "float_list": "float", "bytes_list": "bytes"}


def _check_values(
    path: Path, number: int, name: str, feature, values: list, lists: dict[str, tuple[str, str]]
) -> None:
    """One value per feature, of one list type in every record, and finite numbers: what
    StatisticsGen can read (its decoder fails on a second type, naming no record) and what
    the model reads (the first value of each feature; serving refuses non-finite ones)."""
    kind = feature.WhichOneof("kind")
    if kind is None:
        return
    first = lists.setdefault(name, (kind, f"{path}, record {number}"))
    if first[0] != kind:
        raise DataError(
            f"{path}, record {number}, feature {name!r}: {_LIST_TYPES[kind]} values, while "
            f"{first[1]} holds {_LIST_TYPES[first[0]]} values (even an empty list has a type); "
            "StatisticsGen reads one type per feature: write it with one type in every record."
        )
    if len(values) > 1:
        raise DataError(
            f"{path}, record {number}, feature {name!r}: {len(values)} values; the model reads "
            "one value per feature (it would keep the first): write one value per record, or "
            "one feature per value."
        )
    if kind == "float_list" and values and not math.isfinite(values[0]):
        raise DataError(
            f"{path}, record {number}, feature {name!r}: {values[0]} is not a finite number; "
            "a missing value is an empty feature (the served model refuses non-finite ones)."
        )


def _values(feature) -> list:
    kind = feature.WhichOneof("kind")
    return list(getattr(feature, kind).value) if kind else []
