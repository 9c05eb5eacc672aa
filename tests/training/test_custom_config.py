"""``custom_config`` as TFX's stock Tuner and Trainer hand it to the modules: a key that
nothing reads is refused in one line, naming the closest known key (#29)."""

from __future__ import annotations

import types

import pytest

from tfx_accum.components.search.tuner import tuner_fn
from tfx_accum.components.settings import ModelSettings, check_custom_config
from tfx_accum.components.training.trainer import run_fn


@pytest.mark.parametrize(
    "key, closest",
    [("modle", "model"), ("lable_key", "label_key"), ("search_spaces", "search_space")],
)
def test_a_misspelt_key_is_refused_with_the_closest_known_one(key, closest):
    with pytest.raises(ValueError) as raised:
        check_custom_config({"model": "mlp", key: "x"})
    message = str(raised.value)
    assert f"custom_config key {key!r}" in message and f"did you mean {closest!r}" in message
    assert "\n" not in message


def test_a_key_like_no_other_is_refused_with_the_list():
    with pytest.raises(ValueError, match=r"'zzz' is not one tfx-accum reads: the keys are .*model"):
        check_custom_config({"zzz": 1})


def test_every_key_the_pipeline_and_tfx_set_is_accepted():
    config = {
        **ModelSettings(model="mlp", num_classes=3).to_custom_config(),
        "search_space": {},
        "search_root": "/r",
        "parallel_trials": 1,
        "hyperparameters": {},
        "backup_root": "/b",
        "seed": 42,
        "train_budget": "best_trial",
        "statistics": "/s",
        "ai_platform_training_args": {},
        "ai_platform_enable_vertex": True,
    }
    check_custom_config(config)
    assert ModelSettings.from_custom_config(config).num_classes == 3


@pytest.mark.parametrize("module_fn", [tuner_fn, run_fn])
def test_the_modules_refuse_it_before_any_work(module_fn, tmp_path):
    # No examples, schema or statistics exist: the check comes before anything reads them.
    fn_args = types.SimpleNamespace(
        custom_config={"lable_key": "species"},
        hyperparameters=None,
        train_files=[str(tmp_path / "missing")],
        schema_path=str(tmp_path / "missing.pbtxt"),
        working_dir=str(tmp_path),
    )
    with pytest.raises(ValueError, match=r"'lable_key' .*did you mean 'label_key'"):
        module_fn(fn_args)
