"""The configuration room: every setting's name, default and check, and the typed contract.

Holds the words of the settings (``setting_words``), the settings themselves (``settings``),
the task and its objectives (``tasks``), the Tuner's search space (``search_space``), the
model's code key (``model_code``) and
:class:`~tfx_accum.components.config.custom_config.ModuleConfig`,
the ``custom_config`` a pipeline hands the Tuner and Trainer modules. It imports only the
accumulation room below it; importing it is cheap (no TensorFlow).
"""
