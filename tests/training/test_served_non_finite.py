"""The served model refuses numbers it cannot score (tfx_accum.components.training.export).

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
from tfx_accum.components.models.models import build_model
from tfx_accum.components.training.export import export_serving_model

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


def _refusal(serve, rows: list[dict]) -> str:
    """The message of the InvalidArgumentError ``serving_default`` raises on ``rows``."""
    with pytest.raises(tf.errors.InvalidArgumentError) as raised:
        serve(examples=tf.constant([_example(row) for row in rows]))
    return raised.value.message


@pytest.mark.parametrize("bad", [np.inf, -np.inf, np.nan], ids=["inf", "-inf", "nan"])
def test_a_non_finite_input_is_refused_naming_the_feature_and_the_example(served, bad):
    message = _refusal(served[1], [GOOD, {**GOOD, "f2": bad}])
    assert "not finite" in message
    # The feature, the example (from 0) and the value, as Assert prints its data.
    assert re.search(r"\[b?'?f2'?\] \[1\] \[-?(inf|nan)\]", message), message


def test_a_number_too_large_for_float32_arithmetic_is_refused_naming_the_feature(served):
    message = _refusal(served[1], [GOOD, GOOD, {**GOOD, "f1": 3e38}])
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


@pytest.mark.parametrize("form", ["dense", "sparse", "ragged"])
def test_the_check_names_the_feature_and_example_in_every_parsed_form(form):
    """Transform's serving spec parses dense and sparse tensors, ``parse_raw`` ragged ones."""
    from tfx_accum.components.data.raw_features import assert_finite_numbers

    values = np.array([[1.0], [2.0], [np.inf], [4.0]], np.float32)
    column = {
        "dense": tf.constant(values),
        "sparse": tf.sparse.from_dense(tf.constant(values)),
        "ragged": tf.RaggedTensor.from_tensor(tf.constant(values)),
    }[form]
    parsed = {
        "ok": tf.ragged.constant([[0.5], [], [1.5], [2.5]]),
        "x": column,
        "n": tf.constant([1]),
    }
    with pytest.raises(tf.errors.InvalidArgumentError, match=r"\[x\] \[2\] \[inf\]"):
        tf.function(lambda: assert_finite_numbers(parsed))()  # as in the served graph
    tf.function(lambda: assert_finite_numbers({**parsed, "x": tf.zeros([4, 1])}))()  # finite
