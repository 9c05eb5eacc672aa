"""The data description from the schema and StatisticsGen's statistics
(tfx_accum.components.data.features)."""

from __future__ import annotations

import keras
import numpy as np
import pytest
import tensorflow as tf
from tensorflow_metadata.proto.v0 import schema_pb2, statistics_pb2

from tfx_accum.components.config.settings import ModelSettings
from tfx_accum.components.data.features import (
    CATEGORY_BINS,
    Preprocessor,
    describe,
)
from tfx_accum.components.data.raw_features import parse_raw
from tfx_accum.components.data.statistics import SplitStatistics


def _schema(features: dict[str, int], categorical=()) -> schema_pb2.Schema:
    schema = schema_pb2.Schema()
    for name, kind in features.items():
        feature = schema.feature.add(name=name, type=kind)
        if name in categorical:
            feature.int_domain.is_categorical = True
    return schema


def _stats(rows: int, numeric=None, text=None) -> SplitStatistics:
    """Statistics as StatisticsGen writes them: ``numeric`` {name: (present, mean, std,
    min, max)}, ``text`` {name: (present, {value: count})}."""
    features = {}
    for name, (present, mean, std, low, high) in (numeric or {}).items():
        feature = statistics_pb2.FeatureNameStatistics()
        feature.path.step.append(name)
        feature.num_stats.common_stats.num_non_missing = present
        feature.num_stats.mean, feature.num_stats.std_dev = mean, std
        feature.num_stats.min, feature.num_stats.max = low, high
        features[name] = feature
    for name, (present, counts) in (text or {}).items():
        feature = statistics_pb2.FeatureNameStatistics()
        feature.path.step.append(name)
        feature.string_stats.common_stats.num_non_missing = present
        for value, count in sorted(counts.items(), key=lambda item: -item[1]):
            feature.string_stats.rank_histogram.buckets.add(label=value, sample_count=count)
        features[name] = feature
    return SplitStatistics(rows, features)


def _example(**values) -> bytes:
    feature = {}
    for name, value in values.items():
        if isinstance(value, str | bytes):
            value = value.encode() if isinstance(value, str) else value
            feature[name] = tf.train.Feature(bytes_list=tf.train.BytesList(value=[value]))
        elif isinstance(value, float):
            feature[name] = tf.train.Feature(float_list=tf.train.FloatList(value=[value]))
        else:
            feature[name] = tf.train.Feature(int64_list=tf.train.Int64List(value=[value]))
    return tf.train.Example(features=tf.train.Features(feature=feature)).SerializeToString()


INT, FLOAT, BYTES = schema_pb2.INT, schema_pb2.FLOAT, schema_pb2.BYTES


def test_the_description_comes_from_the_schema_and_the_statistics():
    schema = _schema(
        {"sepal length (cm)": FLOAT, "zip": INT, "color": BYTES, "label": INT}, ("zip",)
    )
    stats = _stats(
        100,
        numeric={"sepal length (cm)": (90, 5.8, 0.8, 4.3, 7.9), "label": (100, 1, 0.8, 0, 2)},
        text={"color": (100, {"red": 60, "blue": 40}), "zip": (100, {"10001": 70, "10002": 30})},
    )
    data = describe(schema, stats, ModelSettings())
    by_name = {f.name: f for f in data.features}
    sepal = by_name["sepal length (cm)"]
    assert (sepal.kind, sepal.input_name, sepal.missing) == ("numeric", "sepal_length_cm", 10)
    assert sepal.mean == pytest.approx(5.8) and sepal.variance == pytest.approx(0.64)
    assert by_name["color"].vocabulary == ("red", "blue")  # most frequent first
    assert (by_name["zip"].kind, by_name["zip"].vocabulary) == ("categorical", ("10001", "10002"))
    assert (data.task, data.num_classes, data.rows) == ("multiclass", 3, 100)


def test_near_constant_features_get_a_variance_floor_not_a_blow_up():
    schema = _schema({"rare": FLOAT, "flat": FLOAT, "fine": FLOAT, "label": INT})
    stats = _stats(
        15_000,
        numeric={
            "rare": (1, 1234.0, 0.0, 1234.0, 1234.0),  # one value in 15,000 rows
            "flat": (15_000, 3.0, 0.0, 3.0, 3.0),
            "fine": (15_000, 0.0, 2.0, -5.0, 5.0),
            "label": (15_000, 0.5, 0.5, 0, 1),
        },
    )
    features = {f.name: f for f in describe(schema, stats, ModelSettings()).features}
    assert features["rare"].variance_floored and features["rare"].variance == 1234.0**2
    assert features["flat"].variance_floored and features["flat"].variance == 9.0
    assert not features["fine"].variance_floored and features["fine"].variance == 4.0
    # A request's real value stays within a few units of the training inputs.
    scaled = (2000.0 - features["rare"].mean) / np.sqrt(features["rare"].variance)
    assert abs(scaled) < 1.0


def test_an_integer_column_declared_categorical_without_counted_values_is_hashed():
    schema = _schema({"tract": INT, "label": INT})
    stats = _stats(50, numeric={"tract": (50, 5e6, 1e5, 1e6, 9e6), "label": (50, 0.5, 0.5, 0, 1)})
    data = describe(schema, stats, ModelSettings(categorical_features=("tract",)))
    tract = data.features[0]
    assert (tract.kind, tract.vocabulary, tract.index_size) == ("categorical", (), CATEGORY_BINS)
    inputs = Preprocessor(data)(parse_raw(tf.constant([_example(tract=4_000_123)]), data))
    assert 1 <= int(inputs["tract"][0, 0]) < CATEGORY_BINS  # 0: missing


def test_float_labels_written_as_whole_numbers_train_as_classes():
    schema = _schema({"x": FLOAT, "label": FLOAT})
    stats = _stats(40, numeric={"x": (40, 0.0, 1.0, -2, 2), "label": (40, 0.5, 0.5, 0.0, 1.0)})
    data = describe(schema, stats, ModelSettings(task="binary", num_classes=2))
    serialized = tf.constant([_example(x=1.0, label=1.0), _example(x=0.0, label=0.0)])
    raw = parse_raw(serialized, data, with_label=True)
    assert Preprocessor(data).encode_label(raw["label"]).numpy().tolist() == [1, 0]
    with pytest.raises(tf.errors.InvalidArgumentError, match="not a whole number"):
        Preprocessor(data).encode_label(tf.constant([0.5]))


def test_a_regression_target_is_learned_standardised_and_served_in_its_units():
    schema = _schema({"x": FLOAT, "y": INT})
    stats = _stats(400, numeric={"x": (400, 0.0, 1.0, -3, 3), "y": (400, 152.0, 77.0, 25, 346)})
    data = describe(schema, stats, ModelSettings(label_key="y"))
    assert (data.task, data.outputs) == ("regression", 1)
    preprocessor = Preprocessor(data)
    standardised = preprocessor.encode_label(tf.constant([229], tf.int64))
    assert float(standardised[0]) == pytest.approx(1.0)
    assert float(preprocessor.decode_prediction(standardised)[0]) == pytest.approx(229.0)


def test_columns_outside_the_selection_are_not_described_nor_read():
    schema = _schema({"id": INT, "a": FLOAT, "b": FLOAT, "label": INT})
    numeric = {n: (40, 0.0, 1.0, -1, 1) for n in ("id", "a", "b")}
    stats = _stats(40, numeric={**numeric, "label": (40, 0.5, 0.5, 0, 1)})
    assert describe(schema, stats, ModelSettings(exclude_features=("id",))).keys == ["a", "b"]
    assert describe(schema, stats, ModelSettings(features=("b",))).keys == ["b"]


def _transformed(domains: dict[str, tuple[int, int]]) -> schema_pb2.Schema:
    """A transformed schema as Transform writes it: vocabulary and bucket columns with a
    categorical domain, a pass-through integer without one, z-scores, the label."""
    schema = _schema({**{n: INT for n in domains}, "hour_xf": INT, "fare_xf": FLOAT})
    for name, (low, high) in domains.items():
        feature = next(f for f in schema.feature if f.name == name)
        feature.int_domain.min, feature.int_domain.max = low, high
        feature.int_domain.is_categorical = True
    schema.feature.add(name="tips_xf", type=INT)
    return schema


def _transformed_stats() -> SplitStatistics:
    numeric = {
        "company_xf": (60, 3.0, 2.0, 0, 27),
        "lat_xf": (60, 4.0, 2.0, 0, 9),
        "hour_xf": (60, 12.0, 6.0, 0, 23),
        "fare_xf": (60, 0.0, 1.0, -2, 3),
        "tips_xf": (60, 0.3, 0.4, 0, 1),
    }
    return _stats(60, numeric=numeric)


def test_transforms_vocabulary_and_bucket_columns_are_categories_with_their_ranges():
    schema = _transformed({"company_xf": (0, 27), "lat_xf": (0, 9)})
    data = describe(schema, _transformed_stats(), ModelSettings(label_key="tips_xf"))
    kinds = {
        f.name: (f.kind, f.index_size if f.kind == "categorical" else None) for f in data.features
    }
    # No list by hand: the domain makes the category, its range the index size (0: missing).
    assert kinds == {
        "company_xf": ("categorical", 29),
        "lat_xf": ("categorical", 11),
        "hour_xf": ("numeric", None),
        "fare_xf": ("numeric", None),
    }
    serialized = tf.constant([_example(company_xf=27, lat_xf=0, hour_xf=5, fare_xf=0.5)])
    inputs = Preprocessor(data)(parse_raw(serialized, data))
    assert (int(inputs["company_xf"][0, 0]), int(inputs["lat_xf"][0, 0])) == (28, 1)
    missing = Preprocessor(data)(parse_raw(tf.constant([_example(fare_xf=0.5)]), data))
    assert int(missing["company_xf"][0, 0]) == 0


def test_the_contract_and_mlp_get_the_index_ranges():
    from tfx_accum.components.models.models import build_model

    schema = _transformed({"company_xf": (0, 27), "lat_xf": (0, 9)})
    settings = ModelSettings(label_key="tips_xf")
    data = describe(schema, _transformed_stats(), settings)
    model = build_model("mlp", data, 1, 1e-3)
    encodings = [layer for layer in model.layers if "category_encoding" in layer.name]
    assert sorted(layer.num_tokens for layer in encodings) == [11, 29]
    # tests/tfx_model_functions.py's by_index_sizes: an Embedding of index_sizes rows each.
    contract = "tfx_model_functions:by_index_sizes"
    data = describe(schema, _transformed_stats(), ModelSettings(contract, label_key="tips_xf"))
    model = build_model(contract, data, 1, 1e-3)
    embeddings = [layer for layer in _layers(model) if isinstance(layer, keras.layers.Embedding)]
    assert sorted(layer.input_dim for layer in embeddings) == [11, 29]


def _layers(model: keras.Model):
    """Every layer of ``model``, those of the models inside it too."""
    for layer in model.layers:
        yield layer
        if isinstance(layer, keras.Model):
            yield from _layers(layer)


def test_a_raw_label_name_names_its_transformed_column_first():
    schema = _transformed({"company_xf": (0, 27)})
    with pytest.raises(ValueError) as raised:
        describe(schema, _transformed_stats(), ModelSettings(label_key="tips"), transformed=True)
    message = str(raised.value)
    assert "\n" not in message
    assert message.startswith(
        "custom_config['label_key'] 'tips' is not a column of Transform's transformed "
        "examples: did you mean 'tips_xf'? the columns, closest first: tips_xf, "
    )
    assert all(name in message for name in ("company_xf", "hour_xf", "fare_xf"))
