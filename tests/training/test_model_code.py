"""A model function's code is part of what its model is keyed by
(components/training/model_code.py): TFX's cache key (the Tuner's and Trainer's
``custom_config``), the Tuner's search and the Trainer's backup. An edit of the module, or of
a module it imports from the user's directory, changes them; an edit elsewhere does not.
tests/pipeline/test_served_truth.py edits a model between two runs of the command."""

from __future__ import annotations

import importlib
import json
import sys

import pytest
from stock_tuner_counts import artifacts, exec_properties, write_examples

from tfx_accum.components.settings import ModelSettings
from tfx_accum.components.training.model_code import changed_files, model_code

MODEL = """import keras
from . import layers_of
from .widths import WIDTH


def net(features, num_classes, hp):
    inputs = {name: keras.Input((1,), name=name) for name in sorted(features)}
    x = keras.layers.Concatenate()(list(inputs.values()))
    x = layers_of.hidden(WIDTH)(x)
    return keras.Model(inputs, keras.layers.Dense(num_classes, activation="softmax")(x))
"""


@pytest.fixture
def project(tmp_path, monkeypatch):
    """``userpkg`` (a model module and two modules it imports) and an unrelated module,
    importable from ``tmp_path`` as PYTHONPATH would make them."""
    package = tmp_path / "userpkg"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "models.py").write_text(MODEL)
    (package / "widths.py").write_text("WIDTH = 32\n")
    (package / "layers_of.py").write_text(
        "import keras\n\n\ndef hidden(width):\n    return keras.layers.Dense(width)\n"
    )
    (tmp_path / "unrelated.py").write_text("X = 1\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    yield tmp_path
    for name in [n for n in sys.modules if n == "userpkg" or n.startswith("userpkg.")]:
        del sys.modules[name]
    importlib.invalidate_caches()


def test_the_code_is_the_module_and_what_it_imports_from_the_users_directory(project):
    files = model_code("userpkg.models:net")
    assert sorted(files) == [
        "userpkg/__init__.py",
        "userpkg/layers_of.py",
        "userpkg/models.py",
        "userpkg/widths.py",
    ]
    assert model_code("mlp") == {}  # a built-in model: its code is the package's


@pytest.mark.parametrize(
    "edited,changes",
    [("userpkg/models.py", True), ("userpkg/widths.py", True), ("unrelated.py", False)],
)
def test_an_edit_changes_the_key_where_the_model_reads_it(project, edited, changes):
    before = model_code("userpkg.models:net")
    path = project / edited
    path.write_text(path.read_text().replace("32", "2") + "\n# edited\n")
    after = model_code("userpkg.models:net")
    assert (changed_files(before, after) == [edited]) is changes
    assert (before != after) is changes


@pytest.fixture
def fn_args(tmp_path):
    from tfx.components.trainer import fn_args_utils

    root = tmp_path / "examples"
    write_examples(root, 20)
    args = fn_args_utils.get_common_fn_args(artifacts(root), exec_properties("mlp"))
    args.custom_config = {"search_root": str(tmp_path / "search"), "backup_root": str(tmp_path)}
    return args


def test_an_edited_model_is_searched_and_trained_in_new_places(project, fn_args):
    """The Tuner's search folder and the Trainer's backup folder follow the code: an
    edited model neither resumes the old model's search nor its training."""
    from tfx_accum.components.custom_config import ModuleConfig
    from tfx_accum.components.search.search_space import SearchSpace
    from tfx_accum.components.search.tuner import search_location
    from tfx_accum.components.settings import Hyperparameters
    from tfx_accum.components.training.trainer import backup_location

    settings = ModelSettings(model="userpkg.models:net")
    config = ModuleConfig.from_custom_config({**fn_args.custom_config, "model": settings.model})
    search_root = config.search_root

    def locations():
        fn_args.model_run_dir = "unused"
        return (
            search_location(fn_args, SearchSpace(), settings, search_root),
            backup_location(fn_args, Hyperparameters(), config),
        )

    before = locations()
    assert locations() == before  # the same code: the same places (a rerun resumes)
    widths = project / "userpkg" / "widths.py"
    widths.write_text("WIDTH = 2\n")
    after = locations()
    assert after[0] != before[0] and after[1] != before[1]
    builtin = ModelSettings(model="mlp")
    assert search_location(fn_args, SearchSpace(), builtin, search_root) == search_location(
        fn_args, SearchSpace(), builtin, search_root
    )


def test_the_tuners_and_trainers_properties_hold_the_code(project, tmp_path):
    """TFX's cache key of a component holds its execution properties: the Tuner's and
    Trainer's ``custom_config`` carry the code's files and digests."""
    from tfx_accum.pipeline.pipeline import create_pipeline

    def configs():
        pipeline = create_pipeline(
            "p",
            str(tmp_path / "root"),
            str(tmp_path / "data"),
            str(tmp_path / "serving"),
            model_settings=ModelSettings(model="userpkg.models:net", task="multiclass"),
        )
        by_id = {c.id: c for c in pipeline.components}
        return [
            json.loads(by_id[name].exec_properties["custom_config"])["model_code"]
            for name in ("Tuner", "Trainer")
        ]

    tuner, trainer = configs()
    assert tuner == trainer == model_code("userpkg.models:net")
    (project / "userpkg" / "models.py").write_text(MODEL.replace("softmax", "sigmoid"))
    assert configs()[0] != tuner


def test_a_module_among_the_libraries_counts_its_own_package_only():
    """keras_tuner (in site-packages) imports keras, numpy, ...: only its own files count."""
    files = model_code("keras_tuner.tuners:RandomSearch")
    assert len(files) > 3 and all(path.startswith("keras_tuner/") for path in files)
