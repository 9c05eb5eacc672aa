"""Public data sets from scikit-learn (offline), written by pandas with their own column
names, as a user would hand them to the pipeline; and what a pipeline run wrote.

- ``wine``: multiclass (3 cultivars), 178 rows, names such as
  ``od280/od315_of_diluted_wines``;
- ``breast_cancer``: binary, made skewed (every benign tumour, a third of the malignant
  ones: about 84 % majority), names such as ``mean radius``, plus a ``patient_id`` column
  that is an id (to be excluded);
- ``diabetes``: regression, unscaled (``sex`` is 1 or 2, the target whole numbers
  25-346), 442 rows.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import tensorflow as tf


def write_wine(directory: Path) -> Path:
    from sklearn.datasets import load_wine

    frame = load_wine(as_frame=True).frame.rename(columns={"target": "cultivar"})
    directory.mkdir(parents=True, exist_ok=True)
    frame.to_csv(directory / "wine.csv", index=False)
    return directory


def write_breast_cancer(directory: Path) -> Path:
    from sklearn.datasets import load_breast_cancer

    frame = load_breast_cancer(as_frame=True).frame
    malignant = frame[frame.target == 0]
    frame = frame.drop(malignant.index[np.arange(len(malignant)) % 3 != 0])
    frame.insert(0, "patient_id", np.arange(100_000, 100_000 + len(frame)))
    frame = frame.rename(columns={"target": "benign"})
    directory.mkdir(parents=True, exist_ok=True)
    frame.to_csv(directory / "breast_cancer.csv", index=False)
    return directory


def write_diabetes(directory: Path) -> Path:
    from sklearn.datasets import load_diabetes

    frame = load_diabetes(as_frame=True, scaled=False).frame
    frame["sex"] = frame["sex"].astype(int)
    frame["target"] = frame["target"].astype(int)
    directory.mkdir(parents=True, exist_ok=True)
    frame.to_csv(directory / "diabetes.csv", index=False)
    return directory


def split_examples(output_dir: Path, split: str) -> list[bytes]:
    """The serialized examples ExampleGen wrote for ``split`` (``train`` or ``eval``)."""
    files = sorted((output_dir / "pipeline").glob(f"*ExampleGen/examples/*/Split-{split}/*"))
    assert files, f"no {split} split under {output_dir}"
    return [r.numpy() for r in tf.data.TFRecordDataset([str(f) for f in files], "GZIP")]


def as_arrays(serialized: list[bytes], label: str) -> tuple[dict[str, np.ndarray], np.ndarray]:
    """Numeric features (NaN where missing) and the label of serialized examples."""
    columns: dict[str, list[float]] = {}
    labels = []
    for record in serialized:
        example = tf.train.Example.FromString(record)
        for name, feature in example.features.feature.items():
            values = feature.float_list.value or feature.int64_list.value
            if name == label:
                labels.append(values[0])
            else:
                columns.setdefault(name, []).append(values[0] if values else np.nan)
    return {n: np.asarray(v, "float64") for n, v in columns.items()}, np.asarray(labels)


def without(serialized: list[bytes], name: str) -> list[bytes]:
    """The same examples without feature ``name`` (as a request that lacks it)."""
    result = []
    for record in serialized:
        example = tf.train.Example.FromString(record)
        del example.features.feature[name]
        result.append(example.SerializeToString())
    return result


def served(output_dir: Path):
    """The pushed model's ``serving_default`` signature."""
    versions = sorted((output_dir / "serving_model").iterdir())
    assert versions, f"nothing pushed under {output_dir}"
    return tf.saved_model.load(str(versions[-1])).signatures["serving_default"]
