"""Small data sets for unit tests of the Tuner's pieces (no pipeline run)."""

from __future__ import annotations

import numpy as np
import tensorflow as tf

from tfx_accum.components.data.datasets import Splits
from tfx_accum.components.data.features import DataDescription, Preprocessor


def tiny_splits() -> Splits:
    rng = np.random.default_rng(0)
    keys = ["f0", "f1", "f2", "f3"]
    x = rng.normal(size=(96, 4)).astype("float32")
    y = (x[:, 0] > 0).astype("int64")
    features = {k: x[:, i : i + 1] for i, k in enumerate(keys)}
    ds = tf.data.Dataset.from_tensor_slices((features, y))
    data = DataDescription.numeric(keys, 2)
    return Splits(ds, ds, data, 96, Preprocessor(data))
