"""Mixed precision (``--precision``): the models compute in it, train, and serve float32.

The unit tests build, train and export the pipeline's models under each policy on the CPU
(mixed_float16 computes there too, slowly); ``test_the_pipeline_trains_and_serves_float32``
runs the whole pipeline under each mixed policy (e2e).
"""

from __future__ import annotations

import csv
import json
from pathlib import Path

import keras
import numpy as np
import pytest
import tensorflow as tf
import yaml
from tiny_data import tiny_splits

from tfx_accum.components.config.custom_config import ModuleConfig
from tfx_accum.components.config.settings import PRECISIONS, ModelSettings
from tfx_accum.components.data.features import DataDescription
from tfx_accum.components.data.raw_features import parse_raw
from tfx_accum.components.models.custom_model import by_name
from tfx_accum.components.models.models import build_model, precision_policy
from tfx_accum.components.training.export import export_serving_model
from tfx_accum.pipeline.cli.parser import main
from tfx_accum.pipeline.kubeflow.profiles import KIND_PRECISION, ProfileError, load_profiles

HALF = {"float32": None, "mixed_float16": tf.float16, "mixed_bfloat16": tf.bfloat16}


def _examples(splits) -> list[bytes]:
    """The tiny split as serialized tf.Examples (what the served model takes)."""
    records = []
    for features, _ in splits.train.take(16):
        feature = {
            name: tf.train.Feature(float_list=tf.train.FloatList(value=value.numpy()))
            for name, value in features.items()
        }
        example = tf.train.Example(features=tf.train.Features(feature=feature))
        records.append(example.SerializeToString())
    return records


def _graph_dtypes(function) -> set:
    """Every dtype an op of ``function``'s graph (and the functions it calls) produces."""
    graph_def = function.graph.as_graph_def()
    nodes = list(graph_def.node) + [n for f in graph_def.library.function for n in f.node_def]
    return {
        tf.dtypes.as_dtype(attr.type)
        for node in nodes
        for key, attr in node.attr.items()
        if key in ("T", "DstT", "dtype") and attr.type
    }


@pytest.mark.parametrize("precision", PRECISIONS)
def test_the_model_computes_in_the_policy_trains_and_serves_float32(precision, tmp_path):
    splits = tiny_splits()
    before = keras.config.dtype_policy().name
    model = build_model("mlp", splits.data, 2, 1e-2, precision=precision)
    # The policy held while the model was built, and only then.
    assert keras.config.dtype_policy().name == before == "float32"
    hidden = [layer for layer in model.layers if isinstance(layer, keras.layers.Dense)]
    assert hidden[0].dtype_policy.name == precision
    assert hidden[0].kernel.dtype == "float32"  # variables stay float32
    assert model.output.dtype == "float32"  # the output layer is float32, as Keras advises
    assert isinstance(model.optimizer, keras.optimizers.LossScaleOptimizer) == (
        precision == "mixed_float16"
    )
    history = model.fit(splits.train.batch(16), epochs=8, verbose=0).history
    assert history["loss"][-1] < history["loss"][0]  # it trains
    assert history["accuracy"][-1] > 0.8
    examples = tf.constant(_examples(splits))
    splits.preprocessor(parse_raw(examples, splits.data))  # built, as reading the data does
    export_serving_model(model, splits.data, splits.preprocessor, str(tmp_path / "serving"))
    serve = tf.saved_model.load(str(tmp_path / "serving")).signatures["serving_default"]
    scores = serve(examples=examples)["scores"]
    assert scores.dtype == tf.float32
    np.testing.assert_allclose(scores.numpy().sum(-1), 1.0, atol=1e-5)
    # The served model computes in the policy's half type (absent under float32).
    dtypes = _graph_dtypes(serve)
    for half in (tf.float16, tf.bfloat16):
        assert (half in dtypes) == (HALF[precision] == half), (precision, dtypes)


def test_building_under_the_policy_trains_as_the_global_policy_does():
    """Setting the policy only while the model is built is all that training needs: the
    weights equal those of a model built and trained with the policy set throughout."""
    splits = tiny_splits()

    def train(model):
        model.fit(splits.train.batch(16), epochs=2, verbose=0, shuffle=False)
        return model.get_weights()

    keras.utils.set_random_seed(1)
    scoped = train(build_model("mlp", splits.data, 2, 1e-2, precision="mixed_float16"))
    keras.config.set_dtype_policy("mixed_float16")
    try:
        keras.utils.set_random_seed(1)
        throughout = train(build_model("mlp", splits.data, 2, 1e-2, precision="mixed_float16"))
    finally:
        keras.config.set_dtype_policy("float32")
    for a, b in zip(scoped, throughout):
        np.testing.assert_array_equal(a, b)


def test_a_model_functions_half_precision_output_is_cast_to_float32():
    with precision_policy("mixed_bfloat16"):
        inputs = keras.Input((4,), name="f0")
        outputs = keras.layers.Dense(2, activation="softmax")(inputs)
        model = keras.Model(inputs, outputs)
        assert model.output.dtype == "bfloat16"
        assert by_name(model).output.dtype == "float32"


def test_the_normalisation_stays_float32_for_values_beyond_float16():
    data = DataDescription.numeric(["a"], 2, np.array([1e6]), np.array([1e10]))
    model = build_model("mlp", data, 1, 1e-3, precision="mixed_float16")
    # In float16, 1e6 and a variance of 1e10 are inf: the normalised input would be NaN.
    assert np.isfinite(model({"a": np.array([[1.2e6]], "float32")}).numpy()).all()


def test_precision_is_validated_once_in_the_settings(capsys):
    assert ModelSettings().precision == "float32"
    config = ModuleConfig.from_custom_config({"precision": "mixed_bfloat16"})
    assert config.model_settings.precision == "mixed_bfloat16"
    with pytest.raises(ValueError, match="`precision` must be one of float32, mixed_float16"):
        ModelSettings(precision="float16")
    with pytest.raises(SystemExit) as exit_info:
        main(["run", "--precision", "float64"])
    assert exit_info.value.code == 2
    assert "--precision: invalid choice: 'float64'" in capsys.readouterr().err


def test_profiles_carry_a_precision_per_accelerator_kind(tmp_path):
    profiles = load_profiles()
    for pool in profiles.values():
        assert pool.precision == KIND_PRECISION[pool.kind], pool.name
    assert {p.precision for p in profiles.values()} == set(PRECISIONS)
    extra = tmp_path / "pools.yaml"
    extra.write_text(
        yaml.safe_dump(
            {
                "unnamed": {
                    "accelerator": {"kind": "gpu", "count": 1, "gke_label": "nvidia-l4"},
                    "cpu": 4,
                    "memory": "16G",
                },
                "bf16": {
                    "accelerator": {"kind": "gpu", "count": 1, "gke_label": "nvidia-h100"},
                    "cpu": 4,
                    "memory": "16G",
                    "precision": "mixed_bfloat16",
                },
            }
        )  # fmt: skip
    )
    profiles = load_profiles(extra)
    assert profiles["unnamed"].precision == "mixed_float16"  # the kind's default
    assert profiles["bf16"].precision == "mixed_bfloat16"
    extra.write_text(yaml.safe_dump({"bad": {"cpu": 4, "memory": "16G", "precision": "fp8"}}))
    with pytest.raises(ProfileError, match="'bad' is malformed: `precision` must be one of"):
        load_profiles(extra)


def _custom_configs(path: Path) -> dict[str, dict]:
    spec = next(yaml.safe_load_all(path.read_text()))
    tasks = spec["root"]["dag"]["tasks"]
    return {
        name: json.loads(
            tasks[name]["inputs"]["parameters"]["custom_config"]["runtimeValue"]["constant"]
        )
        for name in ("Tuner", "Trainer")
    }


@pytest.mark.parametrize(
    "pool,extra,expected",
    [
        ("gpu", [], "mixed_float16"),
        ("tpu", [], "mixed_bfloat16"),
        ("cpu", [], "float32"),
        ("gpu", ["--precision", "float32"], "float32"),
    ],
)
def test_compile_takes_the_node_pools_precision_unless_told(tmp_path, pool, extra, expected):
    from test_kubeflow import compile_argv

    output = tmp_path / f"{pool}.yaml"
    assert main(compile_argv(pool, output, *extra)) == 0
    configs = _custom_configs(output)
    assert configs["Tuner"]["precision"] == configs["Trainer"]["precision"] == expected


@pytest.mark.e2e
@pytest.mark.parametrize("precision", ["mixed_float16", "mixed_bfloat16"])
def test_the_pipeline_trains_and_serves_float32(precision, tmp_path):
    """The whole pipeline under a mixed policy (float32 is every other e2e test's): the
    Tuner's trials and the Trainer train, the pushed model computes in the half type and
    serves float32 scores that classify the digits. The mlp: on the CPU float16
    convolutions run much slower than float32 ones."""
    from pipeline_runs import SMALL, digits_examples, run_cli

    out = tmp_path / "out"
    proc, _ = run_cli(
        "--output-dir", str(out), "--precision", precision, "--model", "mlp", *SMALL,
        "--max-trials", "1", "--tuning-epochs", "1",
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "[pipeline] Tuner done" in proc.stdout and "blessed: yes" in proc.stdout
    pushed = next((out / "serving_model").iterdir())
    serve = tf.saved_model.load(str(pushed)).signatures["serving_default"]
    serialized, labels = digits_examples()
    scores = serve(examples=tf.constant(serialized))["scores"]
    assert scores.dtype == tf.float32
    assert float(np.mean(scores.numpy().argmax(-1) == labels)) >= 0.9
    assert HALF[precision] in _graph_dtypes(serve)
    # The trial ran under the policy too: the Trainer, training the best trial's
    # configuration for its budget, ends with the trial's validation score.
    trial = next(csv.DictReader((out / "trials.csv").open()))
    budget = json.loads(
        next((out / "pipeline" / "Trainer" / "model_run").glob("*/budget.json")).read_text()
    )
    assert budget["validation_score"] == pytest.approx(float(trial["score"]), abs=1e-6)


def test_a_logits_model_serves_probabilities(tmp_path):
    """A model function with a linear last layer and a from_logits loss (TFX's penguin
    example's) serves class probabilities as ``scores``: the softmax of its logits."""
    splits = tiny_splits()
    model = build_model("custom_models:logits_mlp", splits.data, 2, 1e-2)
    model.fit(splits.train.batch(16), epochs=2, verbose=0)
    examples = tf.constant(_examples(splits))
    features = splits.preprocessor(parse_raw(examples, splits.data))
    logits = model(features, training=False).numpy()
    export_serving_model(model, splits.data, splits.preprocessor, str(tmp_path / "serving"))
    serve = tf.saved_model.load(str(tmp_path / "serving")).signatures["serving_default"]
    scores = serve(examples=examples)["scores"].numpy()
    np.testing.assert_allclose(scores, tf.nn.softmax(logits).numpy(), atol=1e-6)
    np.testing.assert_allclose(scores.sum(-1), 1.0, atol=1e-5)


def test_a_model_function_declaring_a_searched_name_is_told_which_wins(capsys):
    """The function's own hp.Choice('learning_rate') is shadowed by tfx-accum's search:
    said in one line; its other hyperparameters (units) are its own and pass in silence."""
    import keras_tuner

    from tfx_accum.components.config.search_space import SearchSpace
    from tfx_accum.components.models.custom_model import narrow_to_declared
    from tfx_accum.components.search.hypermodel import AccumulationHyperModel

    splits = tiny_splits()
    narrow_to_declared(ModelSettings("custom_models:own_learning_rate"), splits.data, "tuner")
    lines = [line for line in capsys.readouterr().out.splitlines() if "declares its own" in line]
    assert lines == [
        "[tuner] the model function declares its own 'learning_rate' (Choice); tfx-accum's "
        "search decides it (search_space's learning_rate_min/max): rename yours to search it too"
    ]
    narrow_to_declared(ModelSettings("custom_models:small_mlp"), splits.data, "tuner")
    assert "declares its own" not in capsys.readouterr().out
    # And what the line says is what happens: in a trial, tfx-accum's value is the one used.
    space = SearchSpace(learning_rate_min=0.05, learning_rate_max=0.0501, learning_rate_step=None)
    hypermodel = AccumulationHyperModel(space, splits, "custom_models:own_learning_rate")
    hp = keras_tuner.HyperParameters()
    model = hypermodel.build(hp)
    assert hp.get("learning_rate") == pytest.approx(0.05, rel=1e-2)
    assert float(model.optimizer.learning_rate) == pytest.approx(0.05, rel=1e-2)
