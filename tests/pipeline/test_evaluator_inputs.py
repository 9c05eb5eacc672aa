"""The Evaluator reads only the columns the evaluation needs (tfx_accum.pipeline.evaluator_inputs).

TFX loads ``custom_extractors`` from the Evaluator's ``module_path`` and silently falls
back to TFMA's defaults where the module or the function is missing, so the first test
resolves the hook the way TFX's executor does. The others check that the metrics through
the extractors equal TFMA's defaults on examples with many columns the model ignores, and
which columns an ``EvalConfig`` keeps; and that the overall slice is keyed per batch (the
same per-example extracts as TFMA's unbatching and slicer, TFMA's slicer not run), while
any other slicing keeps TFMA's slicer.
"""

from __future__ import annotations

import pickle

import apache_beam as beam
import numpy as np
import pyarrow as pa
import pytest
import tensorflow as tf
import tensorflow_model_analysis as tfma
from tensorflow_model_analysis import constants
from tensorflow_model_analysis.extractors import slice_key_extractor
from tfx.components.util import udf_utils

from tfx_accum.components.config import tasks
from tfx_accum.pipeline import evaluator_inputs
from tfx_accum.pipeline.evaluation import eval_config, read_evaluation
from tfx_accum.pipeline.pipeline import create_pipeline

LABEL = "label"
EXTRA = 40  # columns the model does not read


def test_the_pipelines_evaluator_hands_tfx_the_extractors(tmp_path):
    pipeline = create_pipeline(
        "p", str(tmp_path / "root"), str(tmp_path / "data"), str(tmp_path / "serving")
    )
    (evaluator,) = [c for c in pipeline.components if c.id == "Evaluator"]
    found = udf_utils.try_get_fn(evaluator.exec_properties, "custom_extractors")
    assert found is evaluator_inputs.custom_extractors


class Model(tf.Module):
    """The Trainer's serving contract: scores from feature ``x0``, labels through
    ``transform_labels``."""

    _spec = {
        "x0": tf.io.FixedLenFeature([1], tf.float32),
        LABEL: tf.io.FixedLenFeature([1], tf.int64),
    }

    @tf.function(input_signature=[tf.TensorSpec([None], tf.string, name="examples")])
    def serve(self, serialized):
        x = tf.io.parse_example(serialized, self._spec)["x0"]
        scores = tf.nn.softmax(tf.concat([x, -x], axis=1), axis=-1)
        return {
            tasks.SCORES_KEY: scores,
            "classes": tf.strings.as_string(tf.argmax(scores, -1))[:, None],
        }

    @tf.function(input_signature=[tf.TensorSpec([None], tf.string, name="examples")])
    def transform_labels(self, serialized):
        return {LABEL: tf.io.parse_example(serialized, self._spec)[LABEL][:, 0]}


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("evaluator_inputs")
    model, model_dir = Model(), str(tmp / "model")
    tf.saved_model.save(
        model,
        model_dir,
        signatures={"serving_default": model.serve, "transform_labels": model.transform_labels},
    )
    rng = np.random.default_rng(0)
    x = rng.normal(size=(500, EXTRA)).astype(np.float32)
    y = ((x[:, 0] + rng.normal(scale=0.7, size=500)) < 0).astype(np.int64)
    examples = str(tmp / "eval.tfrecord")
    with tf.io.TFRecordWriter(examples) as writer:
        for xi, yi in zip(x, y):
            feature = {
                f"x{i}": tf.train.Feature(float_list=tf.train.FloatList(value=[v]))
                for i, v in enumerate(xi)
            }
            feature[LABEL] = tf.train.Feature(int64_list=tf.train.Int64List(value=[int(yi)]))
            writer.write(
                tf.train.Example(features=tf.train.Features(feature=feature)).SerializeToString()
            )
    return tmp, model_dir, examples


def _evaluate(saved, name: str, extractors, config: tfma.EvalConfig | None = None):
    """TFMA's evaluation result, and how many examples TFMA's slicer keyed."""
    tmp, model_dir, examples = saved
    config = config or eval_config(tasks.BINARY, LABEL, 2)
    shared = tfma.default_eval_shared_model(model_dir, eval_config=config)
    output = str(tmp / name)
    keyed = []
    process = slice_key_extractor.ExtractSliceKeysFn.process

    def counted(self, element, *args, **kwargs):
        keyed.append(1)
        return process(self, element, *args, **kwargs)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(slice_key_extractor.ExtractSliceKeysFn, "process", counted)
        tfma.run_model_analysis(
            eval_shared_model=shared,
            eval_config=config,
            data_location=examples,
            output_path=output,
            extractors=extractors(shared, config),
        )
    return tfma.load_eval_result(output), len(keyed)


def _metrics(saved, name: str, extractors) -> tuple[dict[str, float], int]:
    _, keyed = _evaluate(saved, name, extractors)
    return read_evaluation(str(saved[0] / name)).metrics, keyed


def _ours(shared, config):
    return evaluator_inputs.custom_extractors(shared, config, None)


@pytest.mark.e2e
def test_the_metrics_equal_tfmas_defaults(saved):
    ours, keyed = _metrics(saved, "ours", _ours)
    default, default_keyed = _metrics(saved, "default", lambda m, c: None)
    assert ours.keys() == default.keys()
    assert ours == default
    assert ours[tfma.metrics.ExampleCount().name] == 500
    # The overall slice keyed per batch: TFMA's slicer keyed no example (by default, each).
    assert (keyed, default_keyed) == (0, 500)


@pytest.mark.e2e
def test_a_feature_slice_keeps_tfmas_slicer(saved):
    """Slices of a feature's values: TFMA's slicer keys every example, and every slice's
    metrics equal TFMA's defaults'."""
    config = eval_config(tasks.BINARY, LABEL, 2)
    config.slicing_specs.add(feature_keys=[LABEL])
    results = {}
    for name, extractors in (("sliced-ours", _ours), ("sliced-default", lambda m, c: None)):
        result, keyed = _evaluate(saved, name, extractors, config)
        assert keyed == 500
        results[name] = dict(result.slicing_metrics)
    ours, default = results["sliced-ours"], results["sliced-default"]
    assert ours == default
    assert len(ours) == 3  # the overall slice and one per label value


@pytest.mark.parametrize("keep_inputs", [True, False])
def test_the_overall_slice_extractor_gives_tfmas_extracts(tmp_path, keep_inputs):
    """A batch through OverallSliceExtractor and through TFMA's UnbatchExtractor and
    SliceKeyExtractor: the same per-example extracts (without the features and serialized
    examples where not ``keep_inputs``)."""
    config = eval_config(tasks.MULTICLASS, LABEL, 3)
    assert evaluator_inputs.overall_slice_only(config)
    batch = {
        constants.INPUT_KEY: np.array([b"a", b"b", b"c"], dtype=object),
        constants.FEATURES_KEY: {LABEL: np.array([[0], [2], [1]])},
        constants.LABELS_KEY: np.array([0, 2, 1]),
        constants.PREDICTIONS_KEY: {"scores": np.eye(3, dtype=np.float32)[[0, 1, 1]]},
        constants.EXAMPLE_WEIGHTS_KEY: None,
    }
    chains = {
        "tfma": [
            tfma.extractors.UnbatchExtractor(),
            tfma.extractors.SliceKeyExtractor(eval_config=config, materialize=False),
        ],
        "ours": [evaluator_inputs.OverallSliceExtractor(keep_inputs=keep_inputs)],
    }
    outputs = {}
    for name, chain in chains.items():
        path = tmp_path / f"{name}.pickle"
        with beam.Pipeline() as p:
            extracts = p | beam.Create([batch])
            for extractor in chain:
                extracts = extracts | extractor.stage_name >> extractor.ptransform
            _ = (
                extracts
                | beam.combiners.ToList()
                | beam.Map(lambda found, path=path: path.write_bytes(pickle.dumps(found)))
            )
        outputs[name] = pickle.loads(path.read_bytes())
    assert len(outputs["ours"]) == len(outputs["tfma"]) == 3
    dropped = set() if keep_inputs else {constants.INPUT_KEY, constants.FEATURES_KEY}
    for ours, theirs in zip(outputs["ours"], outputs["tfma"]):
        assert ours.keys() == theirs.keys() - dropped
        for key, value in theirs.items():
            if key in dropped:
                continue
            np.testing.assert_equal(ours[key], value)
            assert type(ours[key]) is type(value), key
    assert list(outputs["ours"][0][constants.SLICE_KEY_TYPES_KEY]) == [()]


def _sampled_labels(config: tfma.EvalConfig) -> tfma.EvalConfig:
    """``config`` with TFMA's FixedSizeSample of the label feature: a metric whose
    preprocessor reads the features after slicing."""
    config.metrics_specs.add().metrics.add(
        class_name="FixedSizeSample",
        module="tensorflow_model_analysis.metrics.sample_metrics",
        config=f'{{"sampled_key": "{LABEL}", "size": 1000}}',
    )
    return config


@pytest.mark.e2e
def test_a_metric_reading_the_features_keeps_them(saved):
    """A metric that reads a feature after slicing: the overall slice is still keyed per
    batch, and the features reach it (the metrics equal TFMA's defaults')."""
    config = _sampled_labels(eval_config(tasks.BINARY, LABEL, 2))
    results = {}
    for name, extractors in (("sampled-ours", _ours), ("sampled-default", lambda m, c: None)):
        result, keyed = _evaluate(saved, name, extractors, config)
        results[name] = dict(result.slicing_metrics)[()][""][""]
        assert keyed == (0 if name == "sampled-ours" else 500)
    ours, default = results["sampled-ours"], results["sampled-default"]
    assert ours.keys() == default.keys()
    sample, theirs = (r.pop("fixed_size_sample")["arrayValue"] for r in (ours, default))
    assert sample["shape"] == theirs["shape"] == [500, 1]  # every example's label, sampled
    assert sorted(sample["int64Values"]) == sorted(theirs["int64Values"])
    assert ours == default


def test_which_configs_read_the_inputs_after_slicing(saved):
    _, model_dir, _ = saved
    config = eval_config(tasks.BINARY, LABEL, 2)
    shared = tfma.default_eval_shared_model(model_dir, eval_config=config)
    assert shared.model_type == tfma.TF_GENERIC  # a SavedModel, not a tf.keras model
    for task, classes in ((tasks.BINARY, 2), (tasks.MULTICLASS, 3), (tasks.REGRESSION, None)):
        pipelines = eval_config(task, LABEL, classes)
        assert not evaluator_inputs.read_after_slicing(pipelines, shared), task
        assert not evaluator_inputs.read_after_slicing(pipelines, [shared, shared]), task
    assert evaluator_inputs.read_after_slicing(
        _sampled_labels(eval_config(tasks.BINARY, LABEL, 2)), shared
    )
    grouped = eval_config(tasks.BINARY, LABEL, 2)
    grouped.metrics_specs[0].query_key = "query"
    assert evaluator_inputs.read_after_slicing(grouped, shared)
    # A tf.keras model's own compiled metrics are computed from its features.
    keras_model = shared._replace(model_type=tfma.TF_KERAS)
    assert evaluator_inputs.read_after_slicing(config, keras_model)
    assert evaluator_inputs.read_after_slicing(config, {"candidate": keras_model})
    config.options.include_default_metrics.value = False
    assert not evaluator_inputs.read_after_slicing(config, keras_model)


def test_the_overall_slice_only():
    config = eval_config(tasks.BINARY, LABEL, 2)
    assert evaluator_inputs.overall_slice_only(config)
    config.ClearField("slicing_specs")
    assert evaluator_inputs.overall_slice_only(config)  # TFMA's default: the overall slice
    for spec in (
        tfma.SlicingSpec(feature_keys=["a"]),
        tfma.SlicingSpec(feature_values={"a": "1"}),
        tfma.SlicingSpec(slice_keys_sql="SELECT STRUCT(a) FROM example.a"),
    ):
        other = eval_config(tasks.BINARY, LABEL, 2)
        other.slicing_specs.append(spec)
        assert not evaluator_inputs.overall_slice_only(other), spec
    crossed = eval_config(tasks.BINARY, LABEL, 2)
    crossed.cross_slicing_specs.add(baseline_spec=tfma.SlicingSpec())
    assert not evaluator_inputs.overall_slice_only(crossed)


def _batch() -> pa.RecordBatch:
    columns = {name: pa.array([[1.0], [2.0]]) for name in ("a", "b", LABEL, "weight")}
    columns[constants.ARROW_INPUT_COLUMN] = pa.array([[b"e1"], [b"e2"]])
    return pa.RecordBatch.from_pydict(columns)


def test_only_the_raw_examples_and_the_configs_columns_are_kept():
    config = eval_config(tasks.BINARY, LABEL, 2)
    config.model_specs[0].example_weight_key = "weight"
    config.slicing_specs.add(feature_keys=["a"])
    columns = evaluator_inputs.evaluated_columns(config)
    assert columns == {LABEL, "weight", "a"}
    kept = evaluator_inputs.kept(_batch(), columns)
    assert kept.schema.names == ["a", LABEL, "weight", constants.ARROW_INPUT_COLUMN]
    assert kept.column(0).to_pylist() == [[1.0], [2.0]]


def test_sql_slices_keep_every_column():
    config = eval_config(tasks.BINARY, LABEL, 2)
    config.slicing_specs.add(slice_keys_sql="SELECT STRUCT(a) FROM example.a")
    assert evaluator_inputs.evaluated_columns(config) is None
    assert evaluator_inputs.kept(_batch(), None).schema.names == _batch().schema.names
