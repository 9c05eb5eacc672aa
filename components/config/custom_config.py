"""The contract between a TFX pipeline and tfx-accum's Tuner and Trainer modules.

TFX hands a module its settings as ``custom_config``, a JSON dict. :class:`ModuleConfig` is
that dict typed and checked: the pipeline writes it with :func:`module_config` (or
:meth:`ModuleConfig.to_custom_config`), and ``tuner_fn`` and ``run_fn`` read it with
:meth:`ModuleConfig.from_custom_config`, which runs the same checks. A misspelt key fails
where the pipeline is written, with the closest key (search-space keys included), and
would fail with the same line in the Tuner before any work. For a model function it also
writes ``model_code``, the code's key (tfx_accum.components.config.model_code), so that TFX's
cache runs the Tuner and Trainer again when the model's module changes.

Importing this module is cheap (no TensorFlow), so a pipeline file and the command line
can use it.

Example:

```python
from tfx_accum.components import module_config

config = module_config(
    model="tfx.examples.chicago_taxi_pipeline.taxi_utils_native_keras:_build_keras_model",
    label_key="tips_xf",
    search_space={"max_trials": 8, "tuning_epochs": 4},
)
tfx.components.Tuner(tuner_fn="tfx_accum.components.search.tuner_module.tuner_fn", ...,
                     custom_config=config)
tfx.components.Trainer(run_fn="tfx_accum.components.training.trainer_module.run_fn", ...,
                       custom_config=config)
module_config(model="mlp", search_space={"max_trails": 8})
# ValueError: custom_config['search_space'] key 'max_trails' is not a search-space
# setting: did you mean 'max_trials'? ...
```
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from typing import Any

from tfx_accum.components.accumulation.arguments import (
    validate_positive_float,
    validate_positive_int,
)
from tfx_accum.components.config.hyperparameters import Hyperparameters
from tfx_accum.components.config.model_code import with_code
from tfx_accum.components.config.search_space import SearchSpace
from tfx_accum.components.config.setting_words import closest_hint
from tfx_accum.components.config.settings import ModelSettings

__all__ = ["MODULE_CONFIG_KEYS", "ModuleConfig", "module_config"]

# The keys besides ModelSettings' fields, and what each is; a key that is none of these (nor
# TFX's own) is refused, never ignored.
MODULE_CONFIG_KEYS = {
    "search_space": "the Tuner's search space (a dict of SearchSpace's fields)",
    "search_root": "where the Tuner keeps its search, so that a rerun continues it",
    "parallel_trials": "trials the Tuner runs at a time",
    "worker_stall_seconds": "how long a parallel Tuner worker may use no CPU before it is killed",
    "hyperparameters": "the Trainer's hyperparameters when there is no Tuner",
    "backup_root": "where the Trainer backs up its training state",
    "seed": "the Trainer's seed (default: the search space's), for its initial weights and order",
    "train_budget": "'best_trial': the Trainer trains for the best trial's examples",
    "statistics": "StatisticsGen's statistics (set by tfx_accum's Tuner and Trainer)",
}
# Read by TFX itself (its Google Cloud extensions: ai_platform_training_args, ...): kept.
TFX_CONFIG_PREFIXES = ("ai_platform_", "remote_trials_working_dir")
MODEL_KEYS = tuple(f.name for f in dataclasses.fields(ModelSettings))
KNOWN_KEYS = (*MODEL_KEYS, *MODULE_CONFIG_KEYS)
STALL_SECONDS = 600.0  # worker_stall_seconds' default
# custom_config["train_budget"]: the Trainer trains for the best trial's examples (the
# default when tuning); otherwise for train_steps updates with early stopping.
BEST_TRIAL_BUDGET = "best_trial"


@dataclasses.dataclass(frozen=True)
class ModuleConfig:
    """``custom_config`` of tfx-accum's ``tuner_fn`` and ``run_fn``, each value checked.

    ``model_settings``: the model, label and columns (the ``custom_config`` keys of
    :class:`~tfx_accum.components.config.settings.ModelSettings`); ``search_space``: the Tuner's
    (None: the defaults); ``hyperparameters``: the Trainer's without a Tuner;
    ``search_root``/``backup_root``: where a rerun finds the search and the training state;
    ``seed``: the Trainer's (None: the search space's, so that the Trainer trains the best
    trial's model); ``train_budget``: ``"best_trial"`` or None; ``statistics``: the
    StatisticsGen artifact's URI (set by tfx_accum's own components); ``tfx_keys``: TFX's
    own entries (``ai_platform_*``), passed on as they are.
    """

    model_settings: ModelSettings = dataclasses.field(default_factory=ModelSettings)
    search_space: SearchSpace | None = None
    hyperparameters: Hyperparameters | None = None
    search_root: str | None = None
    backup_root: str | None = None
    parallel_trials: int = 1
    worker_stall_seconds: float = STALL_SECONDS
    seed: int | None = None
    train_budget: str | None = None
    statistics: str | None = None
    tfx_keys: tuple[tuple[str, Any], ...] = ()

    def __post_init__(self) -> None:
        object.__setattr__(
            self, "parallel_trials", validate_positive_int("parallel_trials", self.parallel_trials)
        )
        object.__setattr__(
            self,
            "worker_stall_seconds",
            validate_positive_float("worker_stall_seconds", self.worker_stall_seconds),
        )
        if self.seed is not None and (
            isinstance(self.seed, bool) or not isinstance(self.seed, int) or self.seed < 0
        ):
            raise ValueError(f"`seed` must be an integer >= 0. Received: seed={self.seed!r}.")
        if self.train_budget not in (None, BEST_TRIAL_BUDGET):
            raise ValueError(
                f"`train_budget` must be {BEST_TRIAL_BUDGET!r} or left out. "
                f"Received: train_budget={self.train_budget!r}."
            )
        for name in ("search_root", "backup_root", "statistics"):
            value = getattr(self, name)
            if value is not None and (not isinstance(value, str) or not value):
                raise ValueError(f"`{name}` must be a path. Received: {name}={value!r}.")

    @property
    def space(self) -> SearchSpace:
        """The search space: the one given, or the defaults."""
        return self.search_space or SearchSpace()

    @property
    def training_seed(self) -> int:
        """The Trainer's seed: the one given, else the search's (the best trial's start)."""
        return self.seed if self.seed is not None else self.space.seed

    def to_custom_config(self) -> dict[str, Any]:
        """The JSON dict TFX stores and hands to the modules (what was not set is left out)."""
        config = self.model_settings.to_custom_config()
        if self.search_space is not None:
            config["search_space"] = self.search_space.to_config()
        if self.hyperparameters is not None:
            config["hyperparameters"] = self.hyperparameters.to_values()
        defaults = ModuleConfig()
        for name in (
            "search_root",
            "backup_root",
            "parallel_trials",
            "worker_stall_seconds",
            "seed",
            "train_budget",
            "statistics",
        ):
            if getattr(self, name) != getattr(defaults, name):
                config[name] = getattr(self, name)
        config.update(self.tfx_keys)
        return config

    @classmethod
    def from_custom_config(cls, config: Mapping[str, Any] | None) -> ModuleConfig:
        """The checked settings of ``config``; a ``ValueError`` of one line naming the key.

        A key nothing reads is refused with the closest known one (``modle`` ->
        ``model``), a search-space key given at the top tells where it belongs, and a
        search-space key is checked against the search space's (``max_trails`` ->
        ``max_trials``).
        """
        config = dict(config or {})
        for key in config:
            if key in KNOWN_KEYS or str(key).startswith(TFX_CONFIG_PREFIXES):
                continue
            raise ValueError(_unknown_key(key))
        model = _checked(ModelSettings, "", **{k: config[k] for k in MODEL_KEYS if k in config})
        space = config.get("search_space")
        if space is not None and not isinstance(space, SearchSpace):
            if not isinstance(space, Mapping):
                raise ValueError(
                    "custom_config['search_space'] must be a dict of search-space settings "
                    f"(e.g. {{'max_trials': 8}}). Received: {space!r}."
                )
            space = _checked(SearchSpace.from_config, "['search_space']", dict(space))
        fixed = config.get("hyperparameters")
        if fixed is not None and not isinstance(fixed, Hyperparameters):
            fixed = _fixed_hyperparameters(fixed)
        others = {
            name: config[name]
            for name in MODULE_CONFIG_KEYS
            if name in config and name not in ("search_space", "hyperparameters")
        }
        tfx_keys = tuple(sorted((k, v) for k, v in config.items() if k not in KNOWN_KEYS))
        return _checked(
            cls,
            "",
            model_settings=model,
            search_space=space,
            hyperparameters=fixed,
            tfx_keys=tfx_keys,
            **others,
        )


def module_config(**keys: Any) -> dict[str, Any]:
    """The ``custom_config`` of tfx-accum's Tuner and Trainer, checked as it is written.

    The keys are ``custom_config``'s (:data:`KNOWN_KEYS`): ``model`` (``mlp``, ``cnn``,
    ``densenet121``, ``package.module:function`` or the function itself), ``label_key``,
    ``search_space`` (a dict of the search space's settings), ... . Raises a one-line
    ``ValueError`` for a key or value the modules would refuse, before any component runs.

    For a model function (and ``model_hyperparameters``' function), ``model_code`` is
    filled in with the code of their modules and of what they import from the user's
    directory (tfx_accum.components.config.model_code): TFX's cache key is the component's
    properties, ``custom_config`` among them, so an edited model is searched and trained
    again. A ``model_code`` given is kept only where their modules are not found here (a
    pipeline compiled for an image that holds them).
    """
    if callable(keys.get("model")):
        keys["model"] = function_reference(keys["model"], "model")
    if callable(keys.get("model_hyperparameters")):
        keys["model_hyperparameters"] = function_reference(
            keys["model_hyperparameters"], "model_hyperparameters"
        )
    config = ModuleConfig.from_custom_config(keys)
    config = dataclasses.replace(config, model_settings=with_code(config.model_settings))
    return config.to_custom_config()


def function_reference(function: Callable[..., Any], key: str) -> str:
    """``package.module:function`` of a module-level function (what the Tuner imports)."""
    module, name = getattr(function, "__module__", None), getattr(function, "__qualname__", "")
    if not module or module == "__main__" or not name.isidentifier():
        raise ValueError(
            f"custom_config[{key!r}]: {function!r} cannot be imported where the Tuner and "
            "Trainer run; define it at the top of a module on their PYTHONPATH and name it "
            "as 'package.module:function'."
        )
    return f"{module}:{name}"


def _unknown_key(key: Any) -> str:
    if key in SearchSpace.__dataclass_fields__:
        return (
            f"custom_config key {key!r} is a search-space setting: put it in "
            f"custom_config['search_space'] ({{{key!r}: ...}})."
        )
    return (
        f"custom_config key {key!r} is not one tfx-accum reads: {closest_hint(key, KNOWN_KEYS)}"
        f"the keys are {', '.join(sorted(KNOWN_KEYS))}."
    )


def _fixed_hyperparameters(values: Any) -> Hyperparameters:
    known = [f.name for f in dataclasses.fields(Hyperparameters)]
    if not isinstance(values, Mapping):
        raise ValueError(
            f"custom_config['hyperparameters'] must be a dict of {', '.join(known)}. "
            f"Received: {values!r}."
        )
    for key in values:
        if key not in known:
            raise ValueError(
                f"custom_config['hyperparameters'] key {key!r} is not one the Trainer reads: "
                f"{closest_hint(key, known)}the keys are {', '.join(known)}."
            )
    return _checked(Hyperparameters, "['hyperparameters']", **values)


def _checked(make: Callable[..., Any], where: str, *args: Any, **kwargs: Any) -> Any:
    """``make(*args, **kwargs)``, its ``TypeError``/``ValueError`` as one line naming
    ``custom_config`` (and ``where`` in it)."""
    try:
        return make(*args, **kwargs)
    except (TypeError, ValueError) as error:
        message = str(error).splitlines()[0] if str(error) else type(error).__name__
        if message.startswith("custom_config"):
            raise ValueError(message) from None
        raise ValueError(f"custom_config{where}: {message}") from None
