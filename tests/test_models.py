"""The built-in models (components/models.py) and the model choice (pipeline/model_choice.py)."""

from __future__ import annotations

import keras
import numpy as np
import pytest

from tfx_accum.components.features import DataDescription
from tfx_accum.components.models import build_model
from tfx_accum.components.settings import ModelSettings
from tfx_accum.pipeline.csv_check import validate_csv_dir
from tfx_accum.pipeline.data import (
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
    from tfx_accum.components.features import IMAGE, InputFeature

    image = InputFeature("image", IMAGE, "string", image_shape=(32, 32, 1))
    data = DataDescription((image,), "label", 10)
    model = build_model("densenet121", data, 4, 1e-3)
    assert model.gradient_accumulation_steps == 4
    assert any(layer.name == "densenet121" for layer in model.layers)
    assert model.predict({"image": np.zeros((2, 32, 32, 1), "float32")}, verbose=0).shape == (2, 10)


def test_the_default_model_follows_the_data_and_image_models_need_a_square_grid(tmp_path):
    import argparse

    from tfx_accum.pipeline.errors import InputError
    from tfx_accum.pipeline.model_choice import model_for as _model_for

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
