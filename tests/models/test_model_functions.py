"""A TFX module's own model function, unchanged, as the Tuner and Trainer build it
(tfx_accum.components.models.model_function, custom_model.py): the three kinds told apart by
their signature; the model kept (inputs, outputs, loss, metrics, optimizer class) and
wrapped for accumulation; fed the features as Transform wrote them; served as TFX serves it.
Every refusal is one line in ``custom_config``'s words. The models are tests/tfx_model_functions.py.
"""

from __future__ import annotations

import importlib
import os
import subprocess
import sys
from pathlib import Path

import keras
import keras_tuner
import numpy as np
import pytest
import tensorflow as tf
from tensorflow_metadata.proto.v0 import schema_pb2, statistics_pb2

from tfx_accum.components.accumulation.model import GradientAccumulationModel
from tfx_accum.components.config.settings import ModelSettings
from tfx_accum.components.data.features import Preprocessor, describe
from tfx_accum.components.data.raw_features import parse_raw
from tfx_accum.components.data.statistics import SplitStatistics
from tfx_accum.components.models.custom_model import narrow_to_declared
from tfx_accum.components.models.model_function import (
    CONTRACT_FUNCTION,
    TFX_FUNCTION,
    TUNER_FUNCTION,
    ModelFunctionError,
    function_kind,
)
from tfx_accum.components.models.models import build_model
from tfx_accum.components.training.export import export_serving_model

INT, FLOAT, BYTES = schema_pb2.INT, schema_pb2.FLOAT, schema_pb2.BYTES
ROWS = 96
RNG = np.random.default_rng(0)
# The transformed examples' features: Transform's z-scores, a bucket (domain 0..9), a raw
# hour, a census tract of 11 digits, a vector, a city name, and the labels.
COLUMNS = {
    "trip_miles_xf": (FLOAT, RNG.normal(size=ROWS)),
    "fare_xf": (FLOAT, RNG.normal(size=ROWS)),
    "a_xf": (FLOAT, RNG.normal(size=ROWS)),
    "b_xf": (FLOAT, RNG.normal(size=ROWS)),
    "pickup_latitude_xf": (INT, RNG.integers(0, 10, ROWS)),
    "bucket_xf": (INT, RNG.integers(0, 10, ROWS)),
    "trip_start_hour_xf": (INT, RNG.integers(0, 24, ROWS)),
    "pickup_census_tract_xf": (INT, RNG.integers(17031010100, 17031990000, ROWS)),
    "count": (INT, RNG.integers(0, 5, ROWS)),
    "pixels_xf": (FLOAT, RNG.normal(size=(ROWS, 4))),
    "city": (BYTES, RNG.choice(["x", "y"], ROWS)),
}
LABELS = {
    "tips_xf": RNG.integers(0, 2, ROWS),  # binary
    "species_xf": RNG.integers(0, 3, ROWS),  # three classes
    "price_xf": RNG.normal(50.0, 10.0, ROWS),  # regression, not standardised
}
DOMAINS = {"pickup_latitude_xf": (0, 9), "bucket_xf": (0, 9)}


def _table(columns=None, labels=None) -> dict[str, tuple[int, np.ndarray]]:
    """``{name: (schema type, values)}`` of the features and the labels."""
    labels = LABELS if labels is None else labels
    table = dict(COLUMNS if columns is None else columns)
    for name, values in labels.items():
        table[name] = (FLOAT if values.dtype.kind == "f" else INT, values)
    return table


def _schema(table) -> schema_pb2.Schema:
    schema = schema_pb2.Schema()
    for name, (kind, values) in table.items():
        feature = schema.feature.add(name=name, type=kind)
        if name in DOMAINS:
            feature.int_domain.min, feature.int_domain.max = DOMAINS[name]
            feature.int_domain.is_categorical = True
        for size in values.shape[1:] or ((1,) if kind != BYTES else ()):
            feature.shape.dim.add(size=size)
    return schema


def _stats(table) -> SplitStatistics:
    features = {}
    for name, (_, values) in table.items():
        feature = statistics_pb2.FeatureNameStatistics()
        feature.path.step.append(name)
        if values.dtype.kind in "US":
            feature.string_stats.common_stats.num_non_missing = len(values)
            for value in sorted(set(values.ravel())):
                feature.string_stats.rank_histogram.buckets.add(label=value, sample_count=1)
        else:
            feature.num_stats.common_stats.num_non_missing = len(values)
            feature.num_stats.mean, feature.num_stats.std_dev = values.mean(), values.std()
            feature.num_stats.min, feature.num_stats.max = values.min(), values.max()
        features[name] = feature
    return SplitStatistics(len(next(iter(table.values()))[1]), features)


def _examples(table) -> list[bytes]:
    examples = []
    for row in range(len(next(iter(table.values()))[1])):
        feature = {}
        for name, (_, values) in table.items():
            value = np.atleast_1d(values[row]).ravel()
            if value.dtype.kind in "US":
                listed = tf.train.BytesList(value=[v.encode() for v in value])
                feature[name] = tf.train.Feature(bytes_list=listed)
            elif value.dtype.kind == "f":
                feature[name] = tf.train.Feature(float_list=tf.train.FloatList(value=value))
            else:
                feature[name] = tf.train.Feature(int64_list=tf.train.Int64List(value=value))
        examples.append(
            tf.train.Example(features=tf.train.Features(feature=feature)).SerializeToString()
        )
    return examples


def _data(function: str, label: str, table=None, **settings):
    """The settings and the (narrowed) description of ``table`` for a model function
    (``module:function``, or a function of tests/tfx_model_functions.py)."""
    table = _table() if table is None else table
    model = function if ":" in function else f"tfx_model_functions:{function}"
    settings = ModelSettings(model=model, label_key=label, **settings)
    data = describe(_schema(table), _stats(table), settings, transformed=True)
    return settings, narrow_to_declared(settings, data, "trainer")


def _trained_and_served(settings, data, tmp_path, table=None):
    """The built model, fitted a little; its served outputs for the raw examples and its
    own outputs for the same examples."""
    model = build_model(
        settings.model,
        data,
        2,
        1e-2,
        hp=keras_tuner.HyperParameters(),
        model_hyperparameters=settings.model_hyperparameters,
    )
    preprocessor = Preprocessor(data)
    serialized = tf.constant(_examples(_table() if table is None else table))
    raw = parse_raw(serialized, data, with_label=True)
    label = preprocessor.encode_label(raw.pop(data.label_key))
    inputs = preprocessor(raw)
    model.fit(inputs, label, batch_size=16, epochs=2, verbose=0)
    export_serving_model(model, data, preprocessor, str(tmp_path / "serving"))
    served = tf.saved_model.load(str(tmp_path / "serving")).signatures["serving_default"]
    return model, served(examples=serialized), model.predict(inputs, verbose=0)


@pytest.mark.parametrize(
    "function, kind",
    [
        ("taxi_like", TFX_FUNCTION),
        ("mnist_like", TFX_FUNCTION),
        ("penguin_like", TUNER_FUNCTION),
        ("subclassed", TFX_FUNCTION),
    ],
)
def test_the_kind_of_a_function_is_told_by_its_signature(function, kind):
    import tfx_model_functions

    assert function_kind(getattr(tfx_model_functions, function), "m") == kind


@pytest.mark.parametrize(
    "signature, kind",
    [
        ("def f(hp): pass", TUNER_FUNCTION),
        ("def f(units=8, *, hp=None): pass", TUNER_FUNCTION),
        ("def f(features, num_classes, hp, index_sizes): pass", CONTRACT_FUNCTION),
        ("def f(**kwargs): pass", TFX_FUNCTION),
    ],
)
def test_every_accepted_signature(signature, kind):
    scope: dict = {}
    exec(signature, scope)
    assert function_kind(scope["f"], "m") == kind


@pytest.mark.parametrize(
    "signature",
    ["def f(a, b): pass", "def f(features, data): pass", "def f(hp, units): pass"],
)
def test_an_ambiguous_signature_is_refused_naming_those_accepted(signature):
    scope: dict = {}
    exec(signature, scope)
    with pytest.raises(ModelFunctionError) as raised:
        function_kind(scope["f"], "custom_config['model'] 'm:f'")
    message = str(raised.value)
    assert "\n" not in message and message.startswith("custom_config['model'] 'm:f': cannot")
    assert "takes no arguments (or only arguments with defaults)" in message
    assert "keras_tuner.HyperParameters" in message and "(features, num_classes" in message


# Training and serving a model: the slow tier.
@pytest.mark.e2e
def test_the_taxi_function_unchanged_is_wrapped_trained_and_served(tmp_path, capsys):
    settings, data = _data("taxi_like", "tips_xf")
    # The features its inputs name, as Transform wrote them; the unread tract left out.
    assert {f.name: (f.kind, f.input_shape) for f in data.features} == {
        name: ("tensor", (1,))
        for name in ["fare_xf", "pickup_latitude_xf", "trip_miles_xf", "trip_start_hour_xf"]
    }
    assert "inputs no layer reads: 'pickup_census_tract_xf'" in capsys.readouterr().out
    model, served, predicted = _trained_and_served(settings, data, tmp_path)
    assert isinstance(model, GradientAccumulationModel) and model.gradient_accumulation_steps == 2
    # Its loss, optimizer class (at the searched learning rate) and metrics, ours beside.
    assert model.loss == "binary_crossentropy"
    assert type(model.optimizer).__name__ == "Adam"
    assert float(model.optimizer.learning_rate) == pytest.approx(1e-2)
    assert {"binary_accuracy", "auc", "accuracy"} <= set(model.get_metrics_result())
    # The sigmoid served as the probability TFMA's BinaryAccuracy reads: (batch, 1).
    assert served["scores"].shape == (ROWS, 1)
    np.testing.assert_allclose(served["scores"].numpy(), predicted, atol=1e-6)
    classes = served["classes"].numpy()[:, 0].astype(int)
    np.testing.assert_array_equal(classes, (predicted[:, 0] > 0.5).astype(int))


@pytest.mark.e2e
def test_a_keras_tuner_function_reads_hyperparameters_declared_elsewhere(tmp_path, capsys):
    settings, data = _data(
        "penguin_like",
        "species_xf",
        model_hyperparameters="tfx_model_functions:penguin_hyperparameters",
    )
    # The function's own learning_rate is tfx-accum's to search: said in one line.
    assert "declares its own 'learning_rate' (Choice)" in capsys.readouterr().out
    hp = keras_tuner.HyperParameters()
    hp.Int("num_layers", 1, 3, default=3)  # a trial's value
    model = build_model(
        settings.model,
        data,
        1,
        1e-3,
        hp=hp,
        model_hyperparameters=settings.model_hyperparameters,
    )
    dense = [layer for layer in model.layers if isinstance(layer, keras.layers.Dense)]
    inner = [layer for layer in model.layers if isinstance(layer, keras.Model)]
    assert len(dense) + sum(len(m.layers) - 3 for m in inner) >= 4  # 3 hidden + the logits
    _, served, predicted = _trained_and_served(settings, data, tmp_path)
    np.testing.assert_allclose(served["scores"].numpy(), tf.nn.softmax(predicted), atol=1e-5)


def test_a_keras_tuner_function_reading_an_undeclared_name_is_told_where_to_declare_it():
    with pytest.raises(ModelFunctionError) as raised:
        _data("penguin_like", "species_xf")
    message = str(raised.value)
    assert "\n" not in message
    assert message.startswith("custom_config['model'] 'tfx_model_functions:penguin_like' raised")
    assert "custom_config['model_hyperparameters']" in message


@pytest.mark.e2e
@pytest.mark.parametrize(
    "function, label",
    [
        ("mnist_like", "species_xf"),  # Sequential, a vector input, logits, RMSprop
        ("subclassed", "species_xf"),  # reads a dict, a softmax, compiled with SGD
        ("mixed_dtypes", "species_xf"),  # text, an index and a vector
        ("regression_like", "price_xf"),  # the label as it is, not standardised
        ("squeezed_regression", "price_xf"),  # (batch,) in a dict of one output
    ],
)
def test_other_tfx_models_are_fed_what_they_declare_and_served(function, label, tmp_path):
    settings, data = _data(function, label)
    model, served, predicted = _trained_and_served(settings, data, tmp_path)
    if data.classification:
        expected = tf.nn.softmax(predicted) if function == "mnist_like" else predicted
        np.testing.assert_allclose(served["scores"].numpy(), expected, atol=1e-5)
        if function == "subclassed":
            assert type(model.optimizer).__name__ == "SGD"
    else:
        assert (data.label_mean, data.label_variance) == (0.0, 1.0)
        np.testing.assert_allclose(served["predictions"].numpy(), predicted, atol=1e-4)
        if function == "regression_like":
            assert type(model.optimizer).__name__ == "SGD" and model.loss == "mse"


def test_a_vector_input_takes_the_schemas_width():
    _, data = _data("mnist_like", "species_xf")
    (pixels,) = data.features
    assert (pixels.name, pixels.input_shape, pixels.input_dtype) == ("pixels_xf", (4,), "float32")


@pytest.mark.parametrize(
    "function, label, words",
    [
        ("wrong_output", "species_xf", "must have one output of 3 class probabilities"),
        ("wrong_output", "tips_xf", "or 1 unit: class 1's probability (a sigmoid) or logit"),
        ("unknown_input", "species_xf", "input 'tip' is not a feature of the examples"),
        ("takes_two", "species_xf", "cannot tell how to call takes_two(a, b)"),
        ("keras_2_model", "species_xf", "built a Keras 2 (tf_keras) model"),
    ],
)
def test_a_model_that_cannot_be_kept_is_refused_in_one_line(function, label, words):
    with pytest.raises(ModelFunctionError) as raised:
        _data(function, label)
    message = str(raised.value)
    assert "\n" not in message and words in message
    assert message.startswith(f"custom_config['model'] 'tfx_model_functions:{function}'")


def test_an_unknown_input_names_the_closest_features_first():
    with pytest.raises(ModelFunctionError, match=r"closest first: tips_xf, trip_miles_xf, "):
        _data("unknown_input", "species_xf")


TRAP = """
import sys, tensorflow_transform  # first, as a unit test of a TFX module does
import tensorflow as tf
assert tf.keras.__name__.startswith("tf_keras"), tf.keras.__name__
sys.path.insert(0, {tests!r})
from test_model_functions import _data
settings, data = _data("taxi_like", "tips_xf")
assert tf.keras.__name__.startswith("tf_keras")  # restored after the call
print("kept", sorted(f.name for f in data.features))
"""


def test_tf_keras_as_keras_2_is_made_harmless(monkeypatch, capsys):
    """What importing ``tensorflow_transform`` first does to the process, done here by hand:
    ``tf.keras`` is Keras 2's. The taxi function, written with ``tf.keras``, is built with
    Keras 3 all the same, and ``tf.keras`` is Keras 2's again afterwards."""
    keras_2 = importlib.import_module("tf_keras.api._v2.keras")  # what tf.keras then is
    monkeypatch.setattr(tf, "keras", keras_2)
    _, data = _data("taxi_like", "tips_xf")
    assert [f.name for f in data.features] == [
        "fare_xf",
        "pickup_latitude_xf",
        "trip_miles_xf",
        "trip_start_hour_xf",
    ]
    assert tf.keras is keras_2


@pytest.mark.e2e  # a fresh process that imports TensorFlow and Transform
def test_tf_keras_made_keras_2_by_transform_is_made_harmless():
    """``tensorflow_transform`` imported first makes ``tf.keras`` Keras 2 in the process; the
    taxi function, written with ``tf.keras``, is still built with Keras 3 (a fresh process:
    the switch is global and one-way)."""
    tests = str(Path(__file__).resolve().parents[1])
    folder = str(Path(__file__).resolve().parent)
    code = TRAP.format(tests=tests).replace(
        "sys.path.insert(0,", f"sys.path.insert(0, {folder!r}); sys.path.insert(0,"
    )
    env = {k: v for k, v in os.environ.items() if k != "TF_USE_LEGACY_KERAS"}
    proc = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=600, env=env
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "kept ['fare_xf', 'pickup_latitude_xf', 'trip_miles_xf', 'trip_start_hour_xf']" in (
        proc.stdout
    )


TFX_EXAMPLES = """
import sys
from pathlib import Path

import numpy as np
import tensorflow as tf

sys.path[:0] = [{folder!r}, {tests!r}]
from test_model_functions import FLOAT, INT, ROWS, _data, _table, _trained_and_served

EXAMPLES = "tfx.examples."
rng = np.random.default_rng(1)
cases = {{
    # Keras Tuner's hparams, declared in _get_hyperparameters; a list of inputs; 3 logits.
    "penguin": (
        EXAMPLES + "penguin.penguin_utils_keras:_make_keras_model",
        {{f"{{n}}_xf": (FLOAT, rng.normal(size=ROWS)) for n in
          ("culmen_length_mm", "culmen_depth_mm", "flipper_length_mm", "body_mass_g")}},
        {{"species_xf": rng.integers(0, 3, ROWS)}},
        {{"model_hyperparameters": EXAMPLES + "penguin.penguin_utils_keras:_get_hyperparameters"}},
        tf.nn.softmax,
    ),
    # Sequential, one input of 784 floats, 10 logits, RMSprop.
    "mnist": (
        EXAMPLES + "mnist.mnist_utils_native_keras_base:build_keras_model",
        {{"image_floats_xf": (FLOAT, rng.uniform(-0.5, 0.5, (ROWS, 784)))}},
        {{"image_class_xf": np.arange(ROWS) % 10}},
        {{}},
        tf.nn.softmax,
    ),
    # A dict of one int64 sequence of 400 word indices, an LSTM, one logit.
    "imdb": (
        EXAMPLES + "imdb.imdb_utils_native_keras:_build_keras_model",
        {{"text_xf_input": (INT, rng.integers(0, 8000, (ROWS, 400)))}},
        {{"label_xf": rng.integers(0, 2, ROWS)}},
        {{}},
        tf.sigmoid,
    ),
}}
for name, (model, columns, labels, extra, to_probability) in cases.items():
    table = _table(columns, labels)
    settings, data = _data(model, next(iter(labels)), table, **extra)
    _, served, predicted = _trained_and_served(settings, data, Path({tmp!r}) / name, table)
    np.testing.assert_allclose(served["scores"].numpy(), to_probability(predicted), atol=1e-5)
    print(name, "served", tuple(served["scores"].shape))
"""


@pytest.mark.e2e  # a fresh process (the modules import Transform), three models trained
def test_tfx_examples_own_model_functions_are_trained_and_served_unchanged(tmp_path):
    """TFX's penguin (Keras Tuner's kind, its hyperparameters declared elsewhere), MNIST
    (Sequential, a vector input) and IMDB (an LSTM on a sequence, one logit) examples'
    model functions, as the wheel ships them, on data shaped as their Transform writes it."""
    tests = str(Path(__file__).resolve().parents[1])
    folder = str(Path(__file__).resolve().parent)
    code = TFX_EXAMPLES.format(folder=folder, tests=tests, tmp=str(tmp_path))
    proc = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=1200
    )
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    assert "penguin served (96, 3)" in proc.stdout
    assert "mnist served (96, 10)" in proc.stdout
    assert "imdb served (96, 1)" in proc.stdout
