"""``custom_config``, the typed contract between a TFX pipeline and the modules
(tfx_accum.components.config.custom_config): checked where the pipeline is written
(``module_config``) and read by ``tuner_fn`` and ``run_fn`` through the same checks, each
mistake one line in ``custom_config``'s words, with the closest key."""

from __future__ import annotations

import subprocess
import sys
import types

import pytest

from tfx_accum.components import ModuleConfig, module_config
from tfx_accum.components.config.hyperparameters import Hyperparameters
from tfx_accum.components.config.search_space import SearchSpace
from tfx_accum.components.config.settings import ModelSettings
from tfx_accum.components.search.tuner_module import tuner_fn
from tfx_accum.components.training.trainer_module import run_fn


def _refused(**keys) -> str:
    """The one line the builder refuses ``keys`` with; the modules' reader says the same."""
    with pytest.raises(ValueError) as raised:
        module_config(**keys)
    message = str(raised.value)
    with pytest.raises(ValueError) as read:
        ModuleConfig.from_custom_config(keys)
    assert str(read.value) == message
    assert "\n" not in message and message.startswith("custom_config")
    return message


@pytest.mark.parametrize(
    "key, closest",
    [("modle", "model"), ("lable_key", "label_key"), ("search_spaces", "search_space")],
)
def test_a_misspelt_key_is_refused_with_the_closest_known_one(key, closest):
    message = _refused(model="mlp", **{key: "x"})
    assert f"custom_config key {key!r}" in message and f"did you mean {closest!r}" in message


def test_a_misspelt_search_space_key_gets_the_closest_too():
    message = _refused(model="mlp", search_space={"max_trails": 4})
    assert message.startswith("custom_config['search_space'] key 'max_trails'")
    assert "did you mean 'max_trials'?" in message


def test_a_search_space_key_at_the_top_says_where_it_belongs():
    message = _refused(max_trials=4)
    assert "is a search-space setting: put it in custom_config['search_space']" in message


@pytest.mark.parametrize(
    "keys, words",
    [
        ({"task": "classify"}, "custom_config: `task` must be one of classification"),
        ({"search_space": {"max_trials": 0}}, "custom_config['search_space']: `max_trials`"),
        ({"hyperparameters": {"lr": 0.1}}, "custom_config['hyperparameters'] key 'lr'"),
        ({"parallel_trials": 0}, "custom_config: `parallel_trials` must be an int >= 1"),
        ({"train_budget": "all"}, "custom_config: `train_budget` must be 'best_trial'"),
        ({"model": "taxi.build"}, "custom_config: `model` must be one of cnn, mlp"),
        ({"search_space": [4]}, "custom_config['search_space'] must be a dict"),
    ],
)
def test_a_wrong_value_is_one_line_naming_the_key(keys, words):
    assert words in _refused(**keys)


def test_a_key_like_no_other_is_refused_with_the_list():
    assert "'zzz' is not one tfx-accum reads: the keys are " in _refused(zzz=1)


def test_the_config_round_trips_and_keeps_what_tfx_reads():
    config = module_config(
        model="tests_module:build",
        label_key="tips_xf",
        search_space={"max_trials": 3, "seed": 7},
        hyperparameters={"accumulation_steps": 2, "micro_batch_size": 8, "learning_rate": 0.1},
        search_root="/r",
        backup_root="/b",
        parallel_trials=2,
        train_budget="best_trial",
        statistics="/s",
        ai_platform_training_args={"project": "p"},
        ai_platform_enable_vertex=True,
    )
    typed = ModuleConfig.from_custom_config(config)
    assert typed.model_settings == ModelSettings(model="tests_module:build", label_key="tips_xf")
    assert typed.search_space == SearchSpace(max_trials=3, seed=7)
    assert typed.hyperparameters == Hyperparameters(2, 8, 0.1)
    assert typed.training_seed == 7  # the search's: the Trainer trains the best trial's model
    assert dict(typed.tfx_keys) == {
        "ai_platform_training_args": {"project": "p"},
        "ai_platform_enable_vertex": True,
    }
    assert typed.to_custom_config() == config


def test_a_module_level_function_is_named_for_the_tuner():
    import custom_models  # tests/custom_models.py

    assert module_config(model=custom_models.small_mlp)["model"] == "custom_models:small_mlp"
    with pytest.raises(ValueError, match="cannot be imported where the Tuner and Trainer run"):
        module_config(model=lambda: None)  # a lambda has no importable name


def test_writing_the_config_starts_no_tensorflow():
    code = (
        "import sys; from tfx_accum.components import module_config; "
        "module_config(model='mlp', search_space={'max_trials': 2}); "
        "print('tensorflow' in sys.modules)"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert proc.stdout.strip() == "False", proc.stderr[-2000:]


@pytest.mark.parametrize("module_fn", [tuner_fn, run_fn])
@pytest.mark.parametrize(
    "config, words",
    [
        ({"lable_key": "species"}, "'lable_key' .*did you mean 'label_key'"),
        ({"search_space": {"max_trails": 2}}, "'max_trails' .*did you mean 'max_trials'"),
    ],
)
def test_the_modules_refuse_it_before_any_work(module_fn, config, words, tmp_path):
    # No examples, schema or statistics exist: the check comes before anything reads them.
    fn_args = types.SimpleNamespace(
        custom_config=config,
        hyperparameters=None,
        train_files=[str(tmp_path / "missing")],
        schema_path=str(tmp_path / "missing.pbtxt"),
        working_dir=str(tmp_path),
    )
    with pytest.raises(ValueError, match=words):
        module_fn(fn_args)


def _words_schema():
    from tensorflow_metadata.proto.v0 import schema_pb2, statistics_pb2

    from tfx_accum.components.data.statistics import SplitStatistics

    schema = schema_pb2.Schema()
    schema.feature.add(name="x", type=schema_pb2.FLOAT)
    schema.feature.add(name="city", type=schema_pb2.BYTES)
    schema.feature.add(name="y", type=schema_pb2.FLOAT)
    features = {}
    for name, (mean, low, high) in {"x": (0.0, -1.0, 1.0), "y": (0.4, 0.1, 0.9)}.items():
        feature = statistics_pb2.FeatureNameStatistics()
        feature.path.step.append(name)
        feature.num_stats.common_stats.num_non_missing = 40
        feature.num_stats.mean, feature.num_stats.min, feature.num_stats.max = mean, low, high
        features[name] = feature
    return schema, SplitStatistics(40, features)


@pytest.mark.parametrize(
    "settings, components_words, cli_words",
    [
        (
            {"categorical_features": ("nope",)},
            "custom_config['categorical_features'] names ['nope']",
            "--categorical names ['nope']",
        ),
        (
            {"exclude_features": ("nope",)},
            "custom_config['exclude_features'] names 'nope', not a feature of the data",
            "--exclude-features names 'nope', not a feature of the data",
        ),
        (
            {"task": "binary"},
            "use custom_config['task'] = 'regression', or confirm the classes with "
            "custom_config['num_classes'] = N.",
            "use --task regression, or confirm the classes with --num-classes N.",
        ),
    ],
)
def test_the_modules_messages_name_custom_config_keys_and_the_cli_its_flags(
    settings, components_words, cli_words
):
    from tfx_accum.components.data.features import describe
    from tfx_accum.pipeline.config import CLI_WORDS

    schema, stats = _words_schema()
    settings = ModelSettings(label_key="y", **settings)
    for words, expected in ((None, components_words), (CLI_WORDS, cli_words)):
        with pytest.raises(ValueError) as raised:
            describe(schema, stats, settings, **({"words": words} if words else {}))
        assert expected in str(raised.value) and "\n" not in str(raised.value)


def test_the_model_rules_name_the_model_key_to_the_modules_and_the_flag_to_the_cli():
    from tfx_accum.components.models.model_rules import ModelChoiceError, check_model_suits
    from tfx_accum.pipeline.config import CLI_WORDS

    with pytest.raises(ModelChoiceError, match=r"Use custom_config\['model'\] = 'mlp'\.$"):
        check_model_suits("cnn", {"city": "string"})
    with pytest.raises(ModelChoiceError, match=r"Use --model mlp\.$"):
        check_model_suits("cnn", {"city": "string"}, CLI_WORDS)


def _raw_key_uses(name: str, source: str, keys: set[str]) -> list[str]:
    """Where ``source`` subscripts, ``.get()`` s or builds a dict with one of ``keys``.

    Other dicts that share a word with ``custom_config`` are not it: a component's
    ``outputs[...]`` (its channels), a parallel worker's ``spec[...]``, ``create_pipeline``'s
    keyword arguments as the CLI and the runners pass them on (``settings_``,
    ``pipeline_settings``: named by its parameters) and a node pool's YAML (``raw``)."""
    import ast

    found = []
    for node in ast.walk(ast.parse(source)):
        key, owner = None, None
        if isinstance(node, ast.Subscript) and isinstance(node.slice, ast.Constant):
            key, owner = node.slice.value, node.value
        elif (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr in ("get", "setdefault", "pop")
            and node.args
            and isinstance(node.args[0], ast.Constant)
        ):
            key, owner = node.args[0].value, node.func.value
        elif isinstance(node, ast.Dict):
            found += [
                f"{name}:{item.lineno}: {{{item.value!r}: ...}}"
                for item in node.keys
                if isinstance(item, ast.Constant) and item.value in keys
            ]
        if key in keys:
            last = owner.attr if isinstance(owner, ast.Attribute) else getattr(owner, "id", "")
            if last not in ("outputs", "spec", "settings_", "pipeline_settings", "raw"):
                found.append(f"{name}:{node.lineno}: {ast.unparse(node)}")
    return found


def test_no_module_reads_or_writes_a_raw_custom_config_key_outside_module_config():
    """The pipeline <-> module contract is ModuleConfig alone: no other installed module
    reads or writes a ``custom_config`` key of its own (ModuleConfig's keys and
    ``model_code``); ModelSettings writes its own fields (config/settings.py), and the
    parallel search's worker spec is its own JSON (search/parallel_search.py)."""
    from pathlib import Path

    from tfx_accum.components.config.custom_config import MODULE_CONFIG_KEYS

    root = Path(__file__).resolve().parents[2]
    keys = set(MODULE_CONFIG_KEYS) | {"model_code"}
    allowed = {
        "components/config/custom_config.py",
        "components/config/settings.py",
        "components/search/parallel_search.py",
    }
    found = []
    for folder in ("components", "pipeline", "kubeflow", "tfx_accum"):
        for path in sorted((root / folder).rglob("*.py")):
            name = path.relative_to(root).as_posix()
            if name not in allowed:
                found += _raw_key_uses(name, path.read_text(), keys)
    assert not found, found


def test_the_raw_key_check_finds_the_reads_and_writes_it_forbids():
    source = (
        'config["search_root"]\n'
        'trainer_config["train_budget"] = 1\n'
        'c.get("backup_root")\n'
        'x = {"seed": 1}\n'
        'tuner.outputs["statistics"]\n'  # a component's output channel: not custom_config
    )
    found = _raw_key_uses("m.py", source, {"search_root", "train_budget", "backup_root", "seed"})
    assert [line.split(":")[1] for line in found] == ["1", "2", "3", "4"], found
