"""The configuration room: every setting's name, default and check, and the typed contract.

Holds, one concern a module: the words of the settings (``setting_words``), the model
settings (``settings``), the hyperparameters (``hyperparameters``), the Evaluator's blessing
(``blessing``), the trial-record keys and the Tuner's decision (``trial_records``), the task
and its objectives (``tasks``), the Tuner's search space (``search_space``), the model's code
key (``model_code``) and :class:`~tfx_accum.components.config.custom_config.ModuleConfig`, the
``custom_config`` a pipeline hands the Tuner and Trainer modules, with the registry of its
keys. It imports only the accumulation room below it; importing it is cheap (no
TensorFlow).
"""
