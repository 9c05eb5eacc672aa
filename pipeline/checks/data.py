"""The embedded data sets, and what the checks learn about the user's data.

With no data given, the pipeline trains on the 8x8 handwritten digits that ship with
scikit-learn (1,797 real images, no network), written as one CSV: ``pixel_00`` ...
``pixel_63`` (integers 0-16) and ``label`` (0-9). ``--embedded digit-images`` writes the
same digits as PNG images (``IMAGE_SIDE`` pixels square, grey) in a TFRecord file of
``tf.Example``s with an ``image`` (PNG bytes) and a ``label`` (int) feature: the image path.

The checks that read the user's data as ExampleGen will, before any component runs, are in
``tfx_accum.pipeline.checks.csv_check`` and ``tfx_accum.pipeline.checks.tfrecord_check``;
:func:`validate_data_root` picks one by the files it finds.
"""

from __future__ import annotations

import dataclasses
import hashlib
import io
from collections.abc import Sequence
from pathlib import Path

from tfx_accum.atomic_files import atomic_write, atomic_write_text
from tfx_accum.components.data.feature_kinds import CATEGORICAL, IMAGE, NUMERIC, STRING
from tfx_accum.pipeline.checks.stray_tokens import StrayToken, refusal
from tfx_accum.pipeline.config import CLI_WORDS
from tfx_accum.pipeline.errors import InputError

DIGITS_FILE = "digits.csv"
DIGITS_FEATURES = 64  # 8x8 pixels
DIGITS_COLUMNS = tuple(f"pixel_{i:02d}" for i in range(DIGITS_FEATURES))
# Examples per class of scikit-learn's digits (tests/pipeline/test_csv_check.py checks it).
DIGITS_CLASS_COUNTS = (178, 182, 177, 183, 181, 182, 181, 179, 174, 180)
# SHA-256 of digits_csv_text(): a re-run finds the file in place without loading
# scikit-learn (tests/pipeline/test_csv_check.py checks it against the text).
DIGITS_CSV_SHA256 = "a6c9808ad8c948b33db0343eaead06895e2dc764162cd27ea809e7bff733af8a"
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
    if target.exists() and hashlib.sha256(target.read_bytes()).hexdigest() == DIGITS_CSV_SHA256:
        return directory
    atomic_write_text(target, digits_csv_text())
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
    """What the check learned about a data root: files, features, rows and the label.

    The checks (csv_check, tfrecord_check) fill in what they read; :func:`decide_label`
    adds the task and the classes (``task``, ``num_classes``, ``labels``,
    ``label_vocabulary``) by the rule of tfx_accum.components.config.tasks.
    """

    format: str  # CSV or TFRECORD
    files: tuple[str, ...]
    columns: tuple[str, ...]  # every column or feature, the label included, in file order
    kinds: tuple[tuple[str, str], ...]  # (feature, NUMERIC | STRING | IMAGE), label excluded
    rows: int
    num_classes: int | None = None  # None for regression
    labels: tuple[int, ...] = ()  # the distinct class indices seen (integer labels)
    label_vocabulary: tuple[str, ...] = ()  # string labels, sorted
    missing: tuple[tuple[str, int], ...] = ()  # features with missing values: (name, count)
    image_shapes: tuple[tuple[str, tuple[int, int, int]], ...] = ()
    vocabularies: tuple[tuple[str, tuple[str, ...]], ...] = ()  # string features (bounded)
    # The label as read: "int", "float" or "string"; each distinct value (as written),
    # its count and where it was first seen ("FILE, line N").
    label_dtype: str = "int"
    label_values: tuple[tuple[str, int, str], ...] = ()
    # Features whose value equals the label's in every row: the answer, not a feature.
    label_copies: tuple[str, ...] = ()
    # CSV columns of numbers with a few other values (tfx_accum.pipeline.checks.stray_tokens).
    stray_tokens: tuple[StrayToken, ...] = ()
    task: str = ""
    task_reason: str = ""

    @property
    def features(self) -> list[str]:
        return [name for name, _ in self.kinds]

    def kind_counts(self, settings) -> str:
        """``64 numeric``, ``3 numeric, 1 string``, ``1 image 32x32x1``, for the data line:
        the columns the model reads (``settings``: the run's ``ModelSettings``; its
        ``--features``/``--exclude-features`` choose them, ``--categorical`` makes numbers
        categories), their missing values, and how many columns are left out. Read off the
        summary alone: the data line is printed before the run's console takes TensorFlow's
        output, so nothing here may import Keras."""
        read = self.read_kinds(settings)
        parts = []
        for kind in (NUMERIC, CATEGORICAL, STRING, IMAGE):
            names = [name for name, k in read.items() if k == kind]
            if names:
                shape = ""
                if kind == IMAGE:
                    h, w, c = dict(self.image_shapes)[names[0]]
                    shape = f" {h}x{w}x{c}"
                parts.append(f"{len(names)} {kind}{shape}")
        names = set(read)
        missing = sum(count for name, count in self.missing if name in names)
        left_out = len(self.kinds) - len(read)
        return (
            ", ".join(parts)
            + (f"; {missing} missing values" if missing else "")
            + (f"; {left_out} column{'s' if left_out > 1 else ''} left out" if left_out else "")
        )

    def label_line(self) -> str:
        """``3 classes (a, b, c)``, ``10 classes``, or ``regression``, for the data line."""
        if self.num_classes is None:
            return "a regression target"
        if self.label_vocabulary:
            shown = ", ".join(self.label_vocabulary[:5])
            return f"{self.num_classes} classes ({shown}{', ...' if self.num_classes > 5 else ''})"
        return f"{self.num_classes} classes"

    def label_warning(self) -> str | None:
        """A line to show when class indices do not start at 0 or leave gaps."""
        if self.num_classes is None or self.label_vocabulary:
            return None
        unused = self.num_classes - len(self.labels)
        if unused <= 0:
            return None
        return (
            f"labels {_ranges(self.labels)}: {unused} of the {self.num_classes} classes "
            "0..{0} have no example (class indices should be 0..N-1)".format(self.num_classes - 1)
        )

    def read_kinds(self, settings) -> dict[str, str]:
        """The columns the model reads (``settings``: the run's ``ModelSettings``) and the
        kind each is read as: ``--categorical`` integers as categories."""
        kinds = dict(self.kinds)
        categorical = set(settings.categorical_features)
        return {
            name: CATEGORICAL if name in categorical and kinds[name] == NUMERIC else kinds[name]
            for name in chosen_features(list(kinds), settings)
        }

    def description(self, settings):
        """The model's inputs as the components will see them (statistics left neutral),
        for checking a model function before anything runs. ``settings``: the run's
        ``ModelSettings`` (label, columns, task)."""
        from tfx_accum.components.data.columns import input_names
        from tfx_accum.components.data.features import DataDescription, InputFeature

        shapes, vocabularies = dict(self.image_shapes), dict(self.vocabularies)
        read = self.read_kinds(settings)
        names = input_names(list(read))
        features = tuple(
            InputFeature(
                name,
                kind,
                input_name=names[name],
                vocabulary=vocabularies.get(name, ()),
                image_shape=shapes.get(name, (0, 0, 0)),
            )
            for name, kind in read.items()
        )
        return DataDescription(
            features,
            settings.label_key,
            self.num_classes,
            self.label_vocabulary,
            self.rows,
            self.task,
        )


def _ranges(values: tuple[int, ...]) -> str:
    shown = ", ".join(str(v) for v in values[:6])
    return shown + (", ..." if len(values) > 6 else "")


def _check_num_classes(summary: DataSummary, settings) -> None:
    """``--num-classes`` against the labels, naming where the first one outside it is."""
    count, key = settings.num_classes, settings.label_key
    if count is None:
        return
    if summary.label_dtype == "string":
        names = sorted(v for v, _, _ in summary.label_values)
        if len(names) != count:
            raise DataError(
                f"--num-classes {count}, but the labels have {len(names)} distinct values "
                f"({', '.join(names[:6])}{', ...' if len(names) > 6 else ''}); leave "
                "--num-classes out."
            )
        return
    for value, _, where in summary.label_values:
        number = float(value)
        if number == int(number) and number >= count:
            raise DataError(
                f"{where}, column {key!r}: label {int(number)} is outside 0..{count - 1} "
                f"(--num-classes {count}); fix the label or raise --num-classes."
            )


def _check_columns_read(summary: DataSummary, settings, chosen: list[str]) -> None:
    """The columns the model reads (``chosen`` and the label), each with values, and none a
    column of numbers with stray tokens unless ``--categorical`` says it is categories."""
    rows, label_key = summary.rows, settings.label_key
    for name, count in summary.missing:
        if count == rows and rows and name in chosen:
            raise DataError(
                f"Column {name!r} is empty in every row: leave it out with "
                f"--exclude-features {name} (or drop it from the data)."
            )
    for stray in summary.stray_tokens:
        column = stray.column
        if column == label_key or (
            column in chosen and column not in settings.categorical_features
        ):
            raise DataError(refusal(stray, label_key))


def chosen_features(columns: Sequence[str], settings) -> list[str]:
    """The features among ``columns`` that the run's ``settings`` (``ModelSettings``: the
    label, ``features``, ``exclude_features``) choose; a ``ColumnError`` names the flag."""
    from tfx_accum.components.data.columns import select_features

    return select_features(
        list(columns),
        settings.label_key,
        settings.features,
        settings.exclude_features,
        words=CLI_WORDS,
    )


def decide_label(summary: DataSummary, settings) -> DataSummary:
    """``summary`` with the task and classes decided (tfx_accum.components.config.tasks's
    rule), and the columns checked against ``settings`` (``ModelSettings``); a ``DataError``
    otherwise.

    Refused here, before anything runs: one class, too few examples (``MIN_EXAMPLES`` in
    all, ``MIN_PER_CLASS`` of each class) to train, validate and evaluate; integer labels
    that are ids rather than class indices (unless ``--num-classes`` confirms them).
    """
    from tfx_accum.components.config.tasks import (
        MIN_EXAMPLES,
        MIN_PER_CLASS,
        LabelFacts,
        infer_task,
    )
    from tfx_accum.components.data.columns import ColumnError

    try:
        chosen = chosen_features(summary.features, settings)
    except ColumnError as error:
        raise DataError(str(error)) from None
    _check_columns_read(summary, settings, chosen)
    leaks = [name for name in summary.label_copies if name in chosen]
    if leaks:
        raise DataError(
            f"Column {leaks[0]!r} equals the label {settings.label_key!r} in every row: the "
            "model would read the answer from it (and score 1.0 on any split). Leave it out "
            f"with --exclude-features {','.join(leaks)}, or name the label with --label-key."
        )
    kinds = dict(summary.kinds)
    for name in settings.categorical_features:
        if name not in kinds:
            raise DataError(f"--categorical {name!r} is not a feature of the data.")
        if kinds[name] == IMAGE:
            raise DataError(
                f"--categorical {name!r}: only integer and text columns can be categories."
            )
    values = summary.label_values
    if summary.label_dtype == "string":
        vocabulary = tuple(sorted(v for v, _, _ in values))
        facts = LabelFacts("string", distinct=len(vocabulary), vocabulary=vocabulary)
    else:
        numbers = [float(v) for v, _, _ in values]
        facts = LabelFacts(
            summary.label_dtype,
            minimum=min(numbers),
            maximum=max(numbers),
            distinct=len(numbers),
            integral=all(n == int(n) for n in numbers),
        )
    _check_num_classes(summary, settings)
    try:
        inference = infer_task(facts, settings.task, settings.num_classes, CLI_WORDS)
    except ValueError as error:
        raise DataError(f"label {settings.label_key!r}: {error}") from None
    if summary.rows < MIN_EXAMPLES:
        raise DataError(
            f"The data has {summary.rows} rows: too few to train, validate and evaluate a "
            f"model (at least {MIN_EXAMPLES}; ExampleGen keeps a third for evaluation)."
        )
    if inference.num_classes is None:
        return dataclasses.replace(
            summary,
            num_classes=None,
            task=inference.task,
            task_reason=inference.reason,
        )
    counts: dict[str, int] = {}
    for value, count, _ in values:
        key = value if summary.label_dtype == "string" else str(int(float(value)))
        counts[key] = counts.get(key, 0) + count
    few = sorted((c, v) for v, c in counts.items() if c < MIN_PER_CLASS)
    if few:
        shown = ", ".join(f"{v!r}: {c}" for c, v in few[:5])
        raise DataError(
            f"label {settings.label_key!r}: {len(few)} class(es) have fewer than "
            f"{MIN_PER_CLASS} examples ({shown}); each class needs some in the training, "
            "validation and evaluation splits. Add examples, or merge or drop those classes."
        )
    vocabulary: tuple[str, ...] = ()
    indices: tuple[int, ...] = ()
    if summary.label_dtype == "string":
        vocabulary = facts.vocabulary
    else:
        indices = tuple(sorted(int(k) for k in counts))
        count = inference.num_classes
        if settings.num_classes is None and count > 2 * len(indices) and count > len(indices) + 10:
            raise DataError(
                f"label {settings.label_key!r} has {len(indices)} distinct values up to "
                f"{count - 1} ({_ranges(indices)}): as class indices that is a {count}-class "
                f"output with {count - len(indices)} empty classes. Map the labels to 0..N-1 "
                "first, or pass --num-classes to confirm."
            )
    return dataclasses.replace(
        summary,
        num_classes=inference.num_classes,
        labels=indices,
        label_vocabulary=vocabulary,
        task=inference.task,
        task_reason=inference.reason,
    )


def embedded_summary(name: str) -> DataSummary:
    """What the embedded data set ``name`` holds, without writing or reading it (for the
    checks that run before the output directory is claimed)."""
    common = dict(
        rows=sum(DIGITS_CLASS_COUNTS),
        label_dtype="int",
        label_values=tuple(
            (str(label), count, "the embedded digits")
            for label, count in enumerate(DIGITS_CLASS_COUNTS)
        ),
    )
    if name == "digits":
        return DataSummary(
            CSV,
            (),
            (*DIGITS_COLUMNS, "label"),
            tuple((c, NUMERIC) for c in DIGITS_COLUMNS),
            **common,
        )
    return DataSummary(
        TFRECORD,
        (),
        ("image", "label"),
        (("image", IMAGE),),
        image_shapes=(("image", (IMAGE_SIDE, IMAGE_SIDE, 1)),),
        **common,
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
    data_root: str,
    settings,
    requested: str | None = None,
    schema_file: str | None = None,
    missing_values: Sequence[str] = (),
) -> DataSummary:
    """Checks a data root (CSV or TFRecord files) as ExampleGen and the model will read it,
    under the user's schema if there is one, and decides the task (``settings``: the run's
    ``ModelSettings``; ``missing_values``: CSV cells read as missing)."""
    if data_format(data_root, requested) == TFRECORD:
        from tfx_accum.pipeline.checks.tfrecord_check import validate_tfrecord_dir

        if missing_values:
            raise DataError(
                "--missing-values applies to CSV files; TFRecords mark a missing value by an "
                "empty feature."
            )

        summary = validate_tfrecord_dir(data_root, settings.label_key)
    else:
        from tfx_accum.pipeline.checks.csv_check import validate_csv_dir

        summary = validate_csv_dir(data_root, settings.label_key, missing_values)
    if schema_file:
        from tfx_accum.pipeline.checks.schema_file import apply_schema, read_schema_file

        summary, dropped = apply_schema(summary, read_schema_file(schema_file), settings.label_key)
        if dropped:
            from tfx_accum import console

            shown = ", ".join(map(repr, dropped[:8])) + (", ..." if len(dropped) > 8 else "")
            console.say(f"[data] not in --schema, so not features: {shown}")
    return decide_label(summary, settings)
