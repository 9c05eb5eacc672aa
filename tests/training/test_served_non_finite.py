"""The served model refuses numbers it cannot score (components/training/export.py).

``serving_default`` on serialized tf.Examples, as TF Serving, the Evaluator and the
BulkInferrer call it: inf, -inf or NaN in a float feature is an ``InvalidArgumentError``
naming the feature, the example and the value; a finite number too far from the training
mean for the model's float32 arithmetic (3e38: NaN or a plausible score) is one naming the
example and the feature; finite requests, with a feature left out, are scored as before.
"""

from __future__ import annotations

import dataclasses
import re

import numpy as np
import pytest
import tensorflow as tf
from tiny_data import tiny_splits

from tfx_accum.components.data.features import Preprocessor
from tfx_accum.components.data.raw_features import parse_raw
from tfx_accum.components.training.export import export_serving_model
from tfx_accum.components.training.models import build_model

OUTPUT = {"binary": "scores", "regression": "predictions"}


def _example(values: dict[str, float]) -> bytes:
    feature = {
        name: tf.train.Feature(float_list=tf.train.FloatList(value=[value]))
        for name, value in values.items()
    }
    return tf.train.Example(features=tf.train.Features(feature=feature)).SerializeToString()


@pytest.fixture(scope="module", params=["binary", "regression"])
def served(request, tmp_path_factory):
    """A trained mlp exported as the pipeline exports it, and its ``serving_default``."""
    splits = tiny_splits()
    # Spread 0.5 (as the digits' pixels): 3e38 standardised is beyond float32's range.
    features = tuple(dataclasses.replace(f, variance=0.25) for f in splits.data.features)
    data = dataclasses.replace(splits.data, features=features)
    if request.param == "regression":
        data = dataclasses.replace(data, num_classes=None, task="regression", label_variance=4.0)
    preprocessor = Preprocessor(data)
    model = build_model("mlp", data, 2, 1e-2)
    model.fit(splits.train.batch(16), epochs=2, verbose=0)  # raw numbers: no missing value
    path = str(tmp_path_factory.mktemp("served") / request.param)
    rows = [_example({"f0": 0.5, "f1": -1.0, "f2": 0.25, "f3": 2.0})]
    preprocessor(parse_raw(tf.constant(rows), data))  # built, as reading the data does
    export_serving_model(model, data, preprocessor, path)
    signature = tf.saved_model.load(path).signatures["serving_default"]
    return request.param, signature, model, preprocessor, data


GOOD = {"f0": 0.5, "f1": -1.0, "f2": 0.25, "f3": 2.0}


@pytest.mark.parametrize("bad", [np.inf, -np.inf, np.nan], ids=["inf", "-inf", "nan"])
def test_a_non_finite_input_is_refused_naming_the_feature_and_the_example(served, bad):
    task, serve, *_ = served
    rows = [_example(GOOD), _example({**GOOD, "f2": bad})]
    with pytest.raises(tf.errors.InvalidArgumentError) as raised:
        serve(examples=tf.constant(rows))
    message = raised.value.message
    assert "not finite" in message
    # The feature, the example (from 0) and the value, as Assert prints its data.
    assert re.search(r"\[b?'?f2'?\] \[1\] \[-?(inf|nan)\]", message), message


def test_a_number_too_large_for_float32_arithmetic_is_refused_naming_the_feature(served):
    task, serve, *_ = served
    rows = [_example(GOOD), _example(GOOD), _example({**GOOD, "f1": 3e38})]
    with pytest.raises(tf.errors.InvalidArgumentError) as raised:
        serve(examples=tf.constant(rows))
    message = raised.value.message
    assert "cannot compute with in float32" in message
    assert re.search(r"\[2\] \[b?'?f1'?\] \[3\.0\d*e\+38\]", message), message


def test_finite_requests_and_missing_features_are_scored_as_the_model_scores_them(served):
    task, serve, model, preprocessor, data = served
    rows = [_example(GOOD), _example({"f0": 1e6, "f3": -2.0}), _example({})]
    served_output = serve(examples=tf.constant(rows))[OUTPUT[task]].numpy()
    expected = model(preprocessor(parse_raw(tf.constant(rows), data)), training=False)
    expected = preprocessor.decode_prediction(tf.cast(expected, tf.float32)).numpy()
    assert np.isfinite(served_output).all()
    np.testing.assert_allclose(served_output, expected, rtol=1e-5, atol=1e-6)
