"""How a message names a setting: the way its reader wrote it.

The same checks run for two readers: a TFX user who wrote ``custom_config`` in a pipeline,
and a user of the command line who typed flags. A message names the setting as its reader
wrote it, so the checks that both share (the columns, the task, the model choice) take a
:class:`SettingWords` from their caller: :data:`CUSTOM_CONFIG` by default (the Tuner and
Trainer modules), the command line's own (``tfx_accum.pipeline.cli.arguments``: ``--categorical``).

No imports: every layer may use it.

Example:

```python
CUSTOM_CONFIG.name("categorical_features")      # "custom_config['categorical_features']"
CUSTOM_CONFIG.setting("task", "regression")     # "custom_config['task'] = 'regression'"
SettingWords({"task": "--task"}, flags=True).setting("task", "regression")  # "--task regression"
closest_hint("max_trails", ["max_trials", "tuning_epochs"])  # "did you mean 'max_trials'? "
```
"""

from __future__ import annotations

import dataclasses
import difflib
from collections.abc import Iterable, Mapping
from typing import Any


@dataclasses.dataclass(frozen=True)
class SettingWords:
    """Names settings (``features``, ``task``, ...) as one kind of reader writes them.

    ``names``: the setting's name as written (a flag); a setting not in it is written
    ``custom_config['<setting>']``. ``flags``: settings are flags (``--task regression``),
    not ``custom_config`` entries (``custom_config['task'] = 'regression'``).
    """

    names: Mapping[str, str] = dataclasses.field(default_factory=dict)
    flags: bool = False

    def name(self, setting: str) -> str:
        """How the reader names ``setting``."""
        return self.names.get(setting) or f"custom_config[{setting!r}]"

    def setting(self, setting: str, value: Any, placeholder: bool = False) -> str:
        """How the reader sets ``setting`` to ``value`` (``placeholder``: a name standing
        for a value, ``N``, written as it is)."""
        if self.flags:
            shown = ",".join(map(str, value)) if isinstance(value, list | tuple) else value
            return f"{self.name(setting)} {shown}"
        return f"{self.name(setting)} = {value if placeholder else repr(value)}"


CUSTOM_CONFIG = SettingWords()


def by_closeness(name: str, candidates: Iterable[str]) -> list[str]:
    """``candidates``, the closest to ``name`` first (``difflib``'s ratio; ties in order)."""
    candidates = list(candidates)
    score = {c: difflib.SequenceMatcher(None, name.lower(), c.lower()).ratio() for c in candidates}
    return sorted(candidates, key=lambda c: -score[c])


def closest_hint(name: str, known: Iterable[str]) -> str:
    """``"did you mean 'x'? "`` for the known name closest to a misspelt ``name``, or ``""``."""
    close = difflib.get_close_matches(str(name), list(known), n=1, cutoff=0.6)
    return f"did you mean {close[0]!r}? " if close else ""
