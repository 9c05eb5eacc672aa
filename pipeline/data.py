"""The embedded data sets, and what the checks learn about the user's data.

With no data given, the pipeline trains on the 8x8 handwritten digits that ship with
scikit-learn (1,797 real images, no network), written as one CSV: ``pixel_00`` ...
``pixel_63`` (integers 0-16) and ``label`` (0-9). ``--embedded digit-images`` writes the
same digits as PNG images (``IMAGE_SIDE`` pixels square, grey) in a TFRecord file of
``tf.Example``s with an ``image`` (PNG bytes) and a ``label`` (int) feature: the image path.

The checks that read the user's data as ExampleGen will, before any component runs, are in
:mod:`~tfx_accum.pipeline.csv_check` and :mod:`~tfx_accum.pipeline.tfrecord_check`;
:func:`validate_data_root` picks one by the files it finds.
"""

from __future__ import annotations

import dataclasses
import io
from pathlib import Path

from tfx_accum.components.feature_kinds import IMAGE, NUMERIC, STRING
from tfx_accum.pipeline.errors import InputError
from tfx_accum.pipeline.files import atomic_write, atomic_write_text

DIGITS_FILE = "digits.csv"
DIGITS_FEATURES = 64  # 8x8 pixels
DIGITS_COLUMNS = tuple(f"pixel_{i:02d}" for i in range(DIGITS_FEATURES))
DIGITS_CLASSES = 10
IMAGES_FILE = "digit_images.tfrecord"
IMAGE_SIDE = 32  # the embedded digit images, upscaled 4x from 8x8
EMBEDDED = ("digits", "digit-images")
CSV, TFRECORD = "csv", "tfrecord"
DATA_FORMATS = (CSV, TFRECORD)
TFRECORD_SUFFIXES = (".tfrecord", ".tfrecords", ".tfrecord.gz", ".tfrecords.gz")


class DataError(InputError):
    """The input data cannot be used; the message says what is wrong and how to fix it."""


def digits_csv_text() -> str:
    from sklearn.datasets import load_digits

    digits = load_digits()
    header = [*DIGITS_COLUMNS, "label"]
    lines = [",".join(header)]
    for row, label in zip(digits.data.astype(int), digits.target):
        lines.append(",".join(str(v) for v in row) + f",{int(label)}")
    return "\n".join(lines) + "\n"


def write_embedded_digits(directory: str | Path) -> Path:
    """Writes the digits CSV into ``directory`` unless an identical file is already there.

    Rewriting an identical file would change its timestamp and defeat the TFX cache, so it
    is left alone; the write itself is atomic (temporary file, then rename).
    """
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    target = directory / DIGITS_FILE
    text = digits_csv_text()
    if target.exists() and target.read_text() == text:
        return directory
    atomic_write_text(target, text)
    return directory


def digit_image_examples() -> list[bytes]:
    """The digits as serialized ``tf.Example``s {image: PNG bytes, label: int64}."""
    import numpy as np
    import tensorflow as tf
    from PIL import Image
    from sklearn.datasets import load_digits

    digits = load_digits()
    scale = IMAGE_SIDE // 8
    records = []
    for pixels, label in zip(digits.images, digits.target):
        grey = np.kron(pixels * (255 / 16), np.ones((scale, scale))).round().astype("uint8")
        png = io.BytesIO()
        Image.fromarray(grey, mode="L").save(png, format="PNG")
        feature = {
            "image": tf.train.Feature(bytes_list=tf.train.BytesList(value=[png.getvalue()])),
            "label": tf.train.Feature(int64_list=tf.train.Int64List(value=[int(label)])),
        }
        example = tf.train.Example(features=tf.train.Features(feature=feature))
        records.append(example.SerializeToString())
    return records


def write_embedded_images(directory: str | Path) -> Path:
    """Writes the digit images' TFRecord file into ``directory`` unless an identical one is
    there (as :func:`write_embedded_digits`, to keep the TFX cache)."""
    import tensorflow as tf

    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    target = directory / IMAGES_FILE

    def write(path: str) -> None:
        with tf.io.TFRecordWriter(path) as writer:
            for record in digit_image_examples():
                writer.write(record)

    fresh = atomic_write(directory / f".{IMAGES_FILE}.new", write)
    if target.exists() and target.read_bytes() == fresh.read_bytes():
        fresh.unlink()  # unchanged: the old file keeps its timestamp
    else:
        fresh.replace(target)
    return directory


@dataclasses.dataclass(frozen=True)
class DataSummary:
    """What the check learned about a data root: files, features, rows and classes."""

    format: str  # CSV or TFRECORD
    files: tuple[str, ...]
    columns: tuple[str, ...]  # every column or feature, the label included, in file order
    kinds: tuple[tuple[str, str], ...]  # (feature, NUMERIC | STRING | IMAGE), label excluded
    rows: int
    num_classes: int
    labels: tuple[int, ...] = ()  # the distinct class indices seen (integer labels)
    label_vocabulary: tuple[str, ...] = ()  # string labels, sorted
    missing: tuple[tuple[str, int], ...] = ()  # features with missing values: (name, count)
    image_shapes: tuple[tuple[str, tuple[int, int, int]], ...] = ()
    vocabularies: tuple[tuple[str, tuple[str, ...]], ...] = ()  # string features (bounded)

    @property
    def features(self) -> list[str]:
        return [name for name, _ in self.kinds]

    def kind_counts(self) -> str:
        """``64 numeric``, ``3 numeric, 1 string``, ``1 image 32x32x1``, for the data line."""
        parts = []
        for kind in (NUMERIC, STRING, IMAGE):
            names = [n for n, k in self.kinds if k == kind]
            if names:
                shape = ""
                if kind == IMAGE:
                    h, w, c = dict(self.image_shapes)[names[0]]
                    shape = f" {h}x{w}x{c}"
                parts.append(f"{len(names)} {kind}{shape}")
        missing = sum(count for _, count in self.missing)
        return ", ".join(parts) + (f"; {missing} missing values" if missing else "")

    def label_warning(self) -> str | None:
        """A line to show when class indices do not start at 0 or leave gaps."""
        unused = self.num_classes - len(self.labels)
        if self.label_vocabulary or unused <= 0:
            return None
        return (
            f"labels {_ranges(self.labels)}: {unused} of the {self.num_classes} classes "
            "0..{0} have no example (class indices should be 0..N-1)".format(self.num_classes - 1)
        )

    def description(self, label_key: str):
        """The model's inputs as the components will see them (statistics left neutral),
        for checking a model function before anything runs."""
        from tfx_accum.components.features import DataDescription, InputFeature

        shapes, vocabularies = dict(self.image_shapes), dict(self.vocabularies)
        features = tuple(
            InputFeature(
                name,
                kind,
                vocabulary=vocabularies.get(name, ()),
                image_shape=shapes.get(name, (0, 0, 0)),
            )
            for name, kind in self.kinds
        )
        return DataDescription(features, label_key, self.num_classes, self.label_vocabulary)


def _ranges(values: tuple[int, ...]) -> str:
    shown = ", ".join(str(v) for v in values[:6])
    return shown + (", ..." if len(values) > 6 else "")


def check_class_count(
    labels: dict[float, str], num_classes: int | None, label_key: str
) -> tuple[int, tuple[int, ...]]:
    """The number of classes of numeric labels and the class indices seen.

    ``labels``: each distinct label value, and where it was first seen ("FILE, line N").
    The count is inferred, or the user's ``num_classes``, checked.
    """
    for value, where in labels.items():
        if value < 0 or value != int(value):
            raise DataError(
                f"{where}, column {label_key!r}: label {value:g} must be a class index "
                "(integer >= 0), or a name (text labels get a vocabulary)."
            )
    indices = {int(value): where for value, where in labels.items()}
    max_label = max(indices)
    if num_classes is not None:
        if max_label >= num_classes:
            raise DataError(
                f"{indices[max_label]}, column {label_key!r}: label {max_label} is outside "
                f"0..{num_classes - 1} (--num-classes {num_classes}); fix the label or raise "
                "--num-classes."
            )
        return num_classes, tuple(sorted(indices))
    if max_label < 1:
        raise DataError("The label column has a single class; classification needs at least 2.")
    if max_label + 1 > 2 * len(indices) and max_label + 1 > len(indices) + 10:
        raise DataError(
            f"The label column has {len(indices)} distinct values up to {max_label} "
            f"({_ranges(tuple(sorted(indices)))}): as class indices that is a "
            f"{max_label + 1}-class output with {max_label + 1 - len(indices)} empty classes. "
            "Map the labels to 0..N-1 first, or pass --num-classes to confirm."
        )
    return max_label + 1, tuple(sorted(indices))


def check_label_vocabulary(vocabulary: set[str], num_classes: int | None) -> int:
    if len(vocabulary) < 2:
        raise DataError("The label column has a single class; classification needs at least 2.")
    if num_classes is not None and num_classes != len(vocabulary):
        raise DataError(
            f"--num-classes {num_classes}, but the labels have {len(vocabulary)} distinct "
            f"values ({', '.join(sorted(vocabulary)[:6])}...); leave --num-classes out."
        )
    return len(vocabulary)


def embedded_summary(name: str) -> DataSummary:
    """What the embedded data set ``name`` holds, without writing or reading it (for the
    checks that run before the output directory is claimed)."""
    labels = tuple(range(DIGITS_CLASSES))
    if name == "digits":
        return DataSummary(
            CSV,
            (),
            (*DIGITS_COLUMNS, "label"),
            tuple((c, NUMERIC) for c in DIGITS_COLUMNS),
            1797,
            DIGITS_CLASSES,
            labels,
        )
    return DataSummary(
        TFRECORD,
        (),
        ("image", "label"),
        (("image", IMAGE),),
        1797,
        DIGITS_CLASSES,
        labels,
        image_shapes=(("image", (IMAGE_SIDE, IMAGE_SIDE, 1)),),
    )


def write_embedded(name: str, directory: str | Path) -> Path:
    """Writes the embedded data set ``name`` (one of ``EMBEDDED``) into ``directory``."""
    if name == "digits":
        return write_embedded_digits(directory)
    return write_embedded_images(directory)


def data_format(data_root: str, requested: str | None = None) -> str:
    """``csv`` or ``tfrecord``: ``requested``, else what the directory holds."""
    root = Path(data_root)
    if not root.exists():
        raise DataError(
            f"Data root {data_root!r} does not exist. Pass --data-root DIR with CSV or "
            "TFRecord files, or leave it out to use the embedded digits."
        )
    if not root.is_dir():
        raise DataError(
            f"Data root {data_root!r} is a file; pass the directory that holds the data files."
        )
    if requested is not None:
        return requested
    names = [p.name for p in root.iterdir() if p.is_file()]
    has_csv = any(n.endswith(".csv") for n in names)
    has_records = any(n.endswith(TFRECORD_SUFFIXES) for n in names)
    if has_csv and has_records:
        raise DataError(
            f"Data root {data_root!r} holds both .csv and TFRecord files; pass "
            "--data-format csv or tfrecord."
        )
    return TFRECORD if has_records else CSV


def validate_data_root(
    data_root: str, label_key: str, num_classes: int | None = None, requested: str | None = None
) -> DataSummary:
    """Checks a data root (CSV or TFRecord files) as ExampleGen and the model will read it."""
    if data_format(data_root, requested) == TFRECORD:
        from tfx_accum.pipeline.tfrecord_check import validate_tfrecord_dir

        return validate_tfrecord_dir(data_root, label_key, num_classes)
    from tfx_accum.pipeline.csv_check import validate_csv_dir

    return validate_csv_dir(data_root, label_key, num_classes)
