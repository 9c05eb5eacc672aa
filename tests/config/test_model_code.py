"""A model function's code is part of what its model is keyed by
(tfx_accum.components.config.model_code): TFX's cache key (the Tuner's and Trainer's
``custom_config``), the Tuner's search and the Trainer's backup. An edit of the module, or of
a module it imports from the user's directory, changes them; an edit elsewhere does not. The
same holds for ``model_hyperparameters``' function, and for the ``custom_config`` a stock TFX
pipeline writes with ``module_config``, checked by TFX's own cache key of the compiled
pipeline. tests/pipeline/test_served_truth.py edits a model between two runs of the command."""

from __future__ import annotations

import importlib
import json
import sys

import pytest
from stock_tuner_counts import artifacts, exec_properties, write_examples

from tfx_accum.components.config.model_code import (
    changed_files,
    changed_functions,
    model_code,
    settings_code,
)
from tfx_accum.components.config.settings import ModelSettings

MODEL = """import keras
from . import layers_of
from .widths import WIDTH


def net(features, num_classes, hp):
    inputs = {name: keras.Input((1,), name=name) for name in sorted(features)}
    x = keras.layers.Concatenate()(list(inputs.values()))
    x = layers_of.hidden(WIDTH)(x)
    return keras.Model(inputs, keras.layers.Dense(num_classes, activation="softmax")(x))
"""
# model_hyperparameters' function: a module of its own, which the model's does not import.
SPACE = """import keras_tuner

from .widths import WIDTH


def hyperparameters():
    hp = keras_tuner.HyperParameters()
    hp.Choice("units", [WIDTH, 64])
    return hp
"""
NET, SPACE_FN = "userpkg.models:net", "userpkg.space:hyperparameters"


@pytest.fixture
def project(tmp_path, monkeypatch):
    """``userpkg`` (a model module and two modules it imports) and an unrelated module,
    importable from ``tmp_path`` as PYTHONPATH would make them."""
    package = tmp_path / "userpkg"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "models.py").write_text(MODEL)
    (package / "space.py").write_text(SPACE)
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


def test_the_hyperparameter_functions_code_is_the_settings_code_too(project):
    settings = ModelSettings(model=NET, model_hyperparameters=SPACE_FN)
    before = settings_code(settings)
    assert sorted(before) == sorted({**model_code(NET), "userpkg/space.py": ""})
    (project / "userpkg" / "space.py").write_text(SPACE.replace("64", "128"))
    after = settings_code(settings)
    assert changed_files(before, after) == ["userpkg/space.py"]
    assert changed_functions(settings, ["userpkg/space.py"]) == [
        ("model_hyperparameters", SPACE_FN)
    ]
    # A module both import: both functions' code changed.
    assert changed_functions(settings, ["userpkg/widths.py"]) == [
        ("model", NET),
        ("model_hyperparameters", SPACE_FN),
    ]
    assert settings_code(ModelSettings(model=NET)) == model_code(NET)


@pytest.mark.parametrize("edited", ["userpkg/widths.py", "userpkg/space.py"])
def test_an_edited_model_is_searched_and_trained_in_new_places(project, fn_args, edited):
    """The Tuner's search folder and the Trainer's backup folder follow the code of the
    model's functions: an edited model (or hyperparameter function) neither resumes the
    old search nor the old training."""
    from tfx_accum.components.config.custom_config import ModuleConfig
    from tfx_accum.components.config.hyperparameters import Hyperparameters
    from tfx_accum.components.config.search_space import SearchSpace
    from tfx_accum.components.search.tuner_module import search_location
    from tfx_accum.components.training.trainer_module import backup_location

    settings = ModelSettings(model=NET, model_hyperparameters=SPACE_FN)
    config = ModuleConfig.from_custom_config(
        {**fn_args.custom_config, **settings.to_custom_config()}
    )
    search_root = config.search_root

    def locations():
        fn_args.model_run_dir = "unused"
        return (
            search_location(fn_args, SearchSpace(), settings, search_root),
            backup_location(fn_args, Hyperparameters(), config),
        )

    before = locations()
    assert locations() == before  # the same code: the same places (a rerun resumes)
    path = project / edited
    path.write_text(path.read_text().replace("64", "128").replace("32", "2"))
    after = locations()
    assert after[0] != before[0] and after[1] != before[1]
    builtin = ModelSettings(model="mlp")
    assert search_location(fn_args, SearchSpace(), builtin, search_root) == search_location(
        fn_args, SearchSpace(), builtin, search_root
    )


def test_the_tuners_and_trainers_properties_hold_the_code(project, tmp_path):
    """TFX's cache key of a component holds its execution properties: the Tuner's and
    Trainer's ``custom_config`` carry the code's files and digests, the hyperparameter
    function's included."""
    from tfx_accum.pipeline.pipeline import create_pipeline

    def configs():
        pipeline = create_pipeline(
            "p",
            str(tmp_path / "root"),
            str(tmp_path / "data"),
            str(tmp_path / "serving"),
            model_settings=ModelSettings(
                model=NET, model_hyperparameters=SPACE_FN, task="multiclass"
            ),
        )
        by_id = {c.id: c for c in pipeline.components}
        return [
            json.loads(by_id[name].exec_properties["custom_config"])["model_code"]
            for name in ("Tuner", "Trainer")
        ]

    tuner, trainer = configs()
    assert (
        tuner == trainer == settings_code(ModelSettings(model=NET, model_hyperparameters=SPACE_FN))
    )
    assert "userpkg/space.py" in tuner
    (project / "userpkg" / "models.py").write_text(MODEL.replace("softmax", "sigmoid"))
    assert configs()[0] != tuner
    edited = configs()[0]
    (project / "userpkg" / "space.py").write_text(SPACE.replace("64", "128"))
    assert configs()[0] != edited


def _stock_cache_keys(root, custom_config: dict) -> dict[str, str]:
    """TFX's cache key (the cache context's name) of the stock Tuner and Trainer given
    ``custom_config``: the pipeline compiled, each node's properties resolved and hashed
    as TFX's launcher does before it looks for a cached execution (their inputs, the same
    in both runs, left out)."""
    from ml_metadata.proto import metadata_store_pb2
    from tfx.components import ImportExampleGen, Trainer, Tuner
    from tfx.components.schema_gen.import_schema_gen.component import ImportSchemaGen
    from tfx.dsl.compiler import compiler
    from tfx.orchestration import data_types_utils, metadata
    from tfx.orchestration import pipeline as tfx_pipeline
    from tfx.orchestration.portable import cache_utils, inputs_utils
    from tfx.proto import trainer_pb2

    examples = ImportExampleGen(input_base=str(root / "data"))
    schema = ImportSchemaGen(schema_file=str(root / "schema.pbtxt"))
    args = {
        "examples": examples.outputs["examples"],
        "schema": schema.outputs["schema"],
        "train_args": trainer_pb2.TrainArgs(num_steps=10),
        "eval_args": trainer_pb2.EvalArgs(num_steps=5),
        "custom_config": custom_config,
    }
    tuner = Tuner(tuner_fn="tfx_accum.components.search.tuner_module.tuner_fn", **args)
    trainer = Trainer(
        run_fn="tfx_accum.components.training.trainer_module.run_fn",
        hyperparameters=tuner.outputs["best_hyperparameters"],
        **args,
    )
    ir = compiler.Compiler().compile(
        tfx_pipeline.Pipeline(
            pipeline_name="p",
            pipeline_root=str(root / "pipeline"),
            components=[examples, schema, tuner, trainer],
            enable_cache=True,
        )
    )
    connection = metadata_store_pb2.ConnectionConfig()
    connection.fake_database.SetInParent()
    keys = {}
    with metadata.Metadata(connection) as handle:
        for node in (n.pipeline_node for n in ir.nodes):
            if node.node_info.id not in ("Tuner", "Trainer"):
                continue
            properties = data_types_utils.build_parsed_value_dict(
                inputs_utils.resolve_parameters_with_schema(node_parameters=node.parameters)
            )
            context = cache_utils.get_cache_context(
                handle, node, ir.pipeline_info, parameters=properties
            )
            keys[node.node_info.id] = context.name
    return keys


def test_module_config_puts_the_code_in_tfxs_cache_key(project, tmp_path):
    """A stock TFX pipeline whose ``custom_config`` is written by ``module_config``: TFX's
    cache key of its Tuner and Trainer changes when the model's module, a module it
    imports, or the hyperparameter function's module is edited, and only then."""
    from tfx_accum.components import module_config

    def keys():  # the user's pipeline file, run again
        config = module_config(model=NET, model_hyperparameters=SPACE_FN, label_key="label")
        return _stock_cache_keys(tmp_path, config)

    first = keys()
    assert set(first) == {"Tuner", "Trainer"}
    assert keys() == first  # nothing edited: the cache serves the Tuner and Trainer
    seen = [first]
    for edited in ("userpkg/models.py", "userpkg/widths.py", "userpkg/space.py"):
        path = project / edited
        path.write_text(path.read_text() + "\n# edited\n")
        now = keys()
        assert all(now[name] != key[name] for key in seen for name in now), edited
        seen.append(now)
    (project / "unrelated.py").write_text("X = 2\n")
    assert keys() == seen[-1]
    assert "model_code" not in module_config(model="mlp")


def test_a_module_among_the_libraries_counts_its_own_package_only():
    """keras_tuner (in site-packages) imports keras, numpy, ...: only its own files count."""
    files = model_code("keras_tuner.tuners:RandomSearch")
    assert len(files) > 3 and all(path.startswith("keras_tuner/") for path in files)
