"""The built-in models (tfx_accum.components.models.models) and the model choice
(tfx_accum.pipeline.checks.model_choice)."""

from __future__ import annotations

import keras
import numpy as np
import pytest

from tfx_accum.components.config.settings import ModelSettings
from tfx_accum.components.data.features import DataDescription
from tfx_accum.components.models.models import build_model
from tfx_accum.pipeline.checks.csv_check import validate_csv_dir
from tfx_accum.pipeline.checks.data import (
    embedded_summary,
)


def test_densenet_option_is_the_stackoverflow_setup():
    keys = [f"pixel_{i:02d}" for i in range(64)]
    model = build_model("densenet121", DataDescription.numeric(keys, 10), 2, 1e-3)
    assert model.gradient_accumulation_steps == 2
    assert any(layer.name == "densenet121" for layer in model.layers)
    assert any(isinstance(layer, keras.layers.Resizing) for layer in model.layers)
    batch = {k: np.zeros((2, 1), "float32") for k in keys}
    assert model.predict(batch, verbose=0).shape == (2, 10)
    with pytest.raises(ValueError, match="not a square number"):
        build_model("cnn", DataDescription.numeric(keys[:10], 10), 2, 1e-3)


def test_densenet_reads_an_image_feature_as_three_channels():
    from tfx_accum.components.data.features import IMAGE, InputFeature

    image = InputFeature("image", IMAGE, "string", image_shape=(32, 32, 1))
    data = DataDescription((image,), "label", 10)
    model = build_model("densenet121", data, 4, 1e-3)
    assert model.gradient_accumulation_steps == 4
    assert any(layer.name == "densenet121" for layer in model.layers)
    assert model.predict({"image": np.zeros((2, 32, 32, 1), "float32")}, verbose=0).shape == (2, 10)


def test_the_default_model_follows_the_data_and_image_models_need_a_square_grid(tmp_path):
    import argparse

    from tfx_accum.pipeline.checks.model_choice import model_for as _model_for
    from tfx_accum.pipeline.errors import InputError

    def args(model, data_root):
        return argparse.Namespace(model=model, data_root=data_root, verbose=False, label_key="y")

    def columns(n, text=0):
        header = [f"f{i}" for i in range(n)] + [f"t{i}" for i in range(text)] + ["y"]
        row = ["1"] * n + ["a"] * text
        lines = [",".join(header), ",".join([*row, "0"]), ",".join([*row, "1"])]
        directory = tmp_path / f"{n}-{text}-{len(list(tmp_path.iterdir()))}"
        directory.mkdir()
        (directory / "d.csv").write_text("\n".join(lines) + "\n")
        return validate_csv_dir(str(directory), "y")

    def model_for(args, summary):
        return _model_for(args, summary, ModelSettings(label_key="y"))

    digits, images = embedded_summary("digits"), embedded_summary("digit-images")
    assert model_for(args(None, None), digits) == "cnn"  # the embedded 8x8 digits
    assert model_for(args(None, None), images) == "cnn"  # an image feature
    assert model_for(args(None, "/my/csvs"), columns(4)) == "mlp"  # never a 2x2 "image"
    assert model_for(args(None, "/my/csvs"), columns(64)) == "mlp"  # a grid is declared
    assert model_for(args("cnn", "/my/csvs"), columns(64)) == "cnn"  # declared grid
    with pytest.raises(InputError, match="30 feature columns.*--model mlp"):
        model_for(args("cnn", "/my/csvs"), columns(30))
    with pytest.raises(InputError, match="too small an image"):
        model_for(args("densenet121", "/my/csvs"), columns(4))
    with pytest.raises(InputError, match="'t0' is a text column. Use --model mlp"):
        model_for(args("cnn", "/my/csvs"), columns(63, text=1))
    with pytest.raises(InputError, match="'image' is an image. Use --model cnn"):
        model_for(args("mlp", None), images)


def test_numeric_columns_as_one_vector_train_the_per_column_model():
    """The built-in models take the numeric columns as one input (a 5,000-column table is
    one tensor to slice and trace): same weights, same predictions and the same training
    as one input per column, missing values filled with the training mean in both."""
    import dataclasses

    import tensorflow as tf

    from tfx_accum.components.data.features import NUMERIC_VECTOR, Preprocessor

    keys = [f"c{i}" for i in range(6)]
    rng = np.random.default_rng(0)
    mean, variance = rng.normal(size=6), rng.uniform(0.5, 2.0, size=6)
    per_column = DataDescription.numeric(keys, 3, mean, variance)
    vector = dataclasses.replace(per_column, numeric_vector=True)
    raw_x = rng.normal(size=(32, 6)).astype("float32")
    raw_x[3, 2] = raw_x[7, 0] = np.nan  # missing values
    raw = {k: tf.constant(raw_x[:, i : i + 1]) for i, k in enumerate(keys)}
    labels = rng.integers(0, 3, size=32)
    inputs = {"per_column": Preprocessor(per_column)(raw), "vector": Preprocessor(vector)(raw)}
    assert list(inputs["vector"]) == [NUMERIC_VECTOR]
    assert inputs["vector"][NUMERIC_VECTOR].shape == (32, 6)

    weights: dict[str, list] = {}
    for name, data in (("per_column", per_column), ("vector", vector)):
        model = build_model("mlp", data, 2, 1e-2)
        assert len(model.inputs) == (6 if name == "per_column" else 1)
        if name == "vector":
            model.set_weights(weights["start"])
        else:
            weights["start"] = model.get_weights()
        weights[name] = model.predict(inputs[name], verbose=0)
        model.fit(inputs[name], labels, batch_size=8, epochs=2, shuffle=False, verbose=0)
        weights[name + "_trained"] = model.get_weights()
    np.testing.assert_allclose(weights["per_column"], weights["vector"], atol=1e-6)
    for a, b in zip(weights["per_column_trained"], weights["vector_trained"]):
        np.testing.assert_allclose(a, b, atol=1e-5)

    wide = dataclasses.replace(
        DataDescription.numeric([f"w{i}" for i in range(5000)], 2), numeric_vector=True
    )
    assert len(build_model("mlp", wide, 4, 1e-3).inputs) == 1
