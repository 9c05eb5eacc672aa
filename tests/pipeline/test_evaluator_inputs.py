"""The Evaluator reads only the columns the evaluation needs (tfx_accum.pipeline.evaluator_inputs).

TFX loads ``custom_extractors`` from the Evaluator's ``module_path`` and silently falls
back to TFMA's defaults where the module or the function is missing, so the first test
resolves the hook the way TFX's executor does. The others check that the metrics through
the extractors equal TFMA's defaults on examples with many columns the model ignores, and
which columns an ``EvalConfig`` keeps.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest
import tensorflow as tf
import tensorflow_model_analysis as tfma
from tensorflow_model_analysis import constants
from tfx.components.util import udf_utils

from tfx_accum.components.data import tasks
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


def _metrics(saved, name: str, extractors) -> dict[str, float]:
    tmp, model_dir, examples = saved
    config = eval_config(tasks.BINARY, LABEL, 2)
    shared = tfma.default_eval_shared_model(model_dir, eval_config=config)
    output = str(tmp / name)
    tfma.run_model_analysis(
        eval_shared_model=shared,
        eval_config=config,
        data_location=examples,
        output_path=output,
        extractors=extractors(shared, config),
    )
    return read_evaluation(output).metrics


def test_the_metrics_equal_tfmas_defaults(saved):
    ours = _metrics(saved, "ours", lambda m, c: evaluator_inputs.custom_extractors(m, c, None))
    default = _metrics(saved, "default", lambda m, c: None)
    assert ours.keys() == default.keys()
    assert ours == default
    assert ours[tfma.metrics.ExampleCount().name] == 500


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
