"""A run that would change what ``serving_model`` serves is refused unless asked for
(tfx_accum.pipeline.checks.serving_signature): the signature a run's export will have is known
before it runs (``export.serving_outputs``, checked here against real exports), and the
newest version's is read from its SavedModel."""

from __future__ import annotations

import dataclasses

import pytest

from tfx_accum.components.data.features import DataDescription, Preprocessor
from tfx_accum.components.training.export import export_serving_model, serving_outputs
from tfx_accum.pipeline.checks.serving_signature import check_signature, served_outputs
from tfx_accum.pipeline.errors import InputError

KEYS = ["a", "b", "c"]


def _export(path, task: str, num_classes: int | None):
    import tensorflow as tf

    from tfx_accum.components.data.raw_features import parse_raw
    from tfx_accum.components.models.models import build_model

    data = DataDescription.numeric(KEYS, num_classes or 2)
    if task == "regression":
        data = dataclasses.replace(data, num_classes=None, task="regression")
    model, preprocessor = build_model("mlp", data, 1, 1e-3), Preprocessor(data)
    feature = {k: tf.train.Feature(float_list=tf.train.FloatList(value=[1.0])) for k in KEYS}
    example = tf.train.Example(features=tf.train.Features(feature=feature)).SerializeToString()
    model(preprocessor(parse_raw(tf.constant([example] * 4), data)))  # built, as by reading
    export_serving_model(model, data, preprocessor, str(path))
    return path


@pytest.fixture(scope="module")
def serving(tmp_path_factory):
    """``serving_model`` whose newest version is a 3-class classifier (an older one, a
    regression model, is not what a server loads)."""
    base = tmp_path_factory.mktemp("out") / "serving_model"
    _export(base / "100", "regression", None)
    _export(base / "200", "multiclass", 3)
    return base


@pytest.mark.parametrize(
    "task,num_classes,version", [("multiclass", 3, "200"), ("regression", None, "100")]
)
def test_the_signature_a_run_will_serve_is_what_its_export_serves(
    serving, task, num_classes, version
):
    assert served_outputs(serving / version) == serving_outputs(task, num_classes)


def test_a_run_that_would_change_the_served_signature_is_refused(serving):
    with pytest.raises(InputError) as refused:
        check_signature(serving, "regression", None, "price", allow=False)
    line = str(refused.value)
    assert "\n" not in line
    assert f"{serving / '200'} serves serving_default with classes string (-1, 1), " in line
    assert "scores float32 (-1, 3)" in line
    assert "this run's model (label 'price', regression) would serve predictions float32" in line
    assert "--allow-signature-change" in line
    # Other classes are another signature too (the scores' width).
    with pytest.raises(InputError, match=r"would serve classes string \(-1, 1\), scores float32"):
        check_signature(serving, "multiclass", 5, "label", allow=False)


def test_the_same_signature_an_explicit_option_or_no_version_is_let_through(serving, tmp_path):
    check_signature(serving, "multiclass", 3, "other_label", allow=False)
    check_signature(serving, "regression", None, "price", allow=True)
    check_signature(tmp_path / "none", "regression", None, "price", allow=False)
    (tmp_path / "empty" / ".incoming-x-1-a").mkdir(parents=True)
    check_signature(tmp_path / "empty", "regression", None, "price", allow=False)
