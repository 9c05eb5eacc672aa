"""Peak memory of a stretch of work: the accelerator's on GPU, the process's on CPU.

A trial records how much memory its training took beside its score, so that a user can see
what a micro-batch costs. On a GPU this is TensorFlow's allocator peak for the first GPU
(reset before the trial). On the CPU it is the process's peak resident set (``VmHWM``),
reset by writing ``5`` to ``/proc/self/clear_refs`` (Linux); it includes the data the
process holds, so compare trials with each other, not with a GPU figure.

Example:

```python
meter = PeakMemory()
meter.reset()
model.fit(...)
meter.peak_mb()  # e.g. 812.4
```
"""

from __future__ import annotations

from pathlib import Path

_STATUS = Path("/proc/self/status")
_CLEAR_REFS = Path("/proc/self/clear_refs")


def reset_host_peak() -> None:
    """Resets this process's peak resident set (Linux; elsewhere it stays since start)."""
    try:
        _CLEAR_REFS.write_text("5")
    except OSError:
        pass


def host_peak_mb() -> float | None:
    """This process's peak resident set since :func:`reset_host_peak`, in MiB."""
    try:
        for line in _STATUS.read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    return None


class PeakMemory:
    """Resets and reads the peak memory of the device that trains."""

    def __init__(self) -> None:
        import tensorflow as tf

        gpus = tf.config.list_logical_devices("GPU")
        self.device = gpus[0].name.replace("/device:", "") if gpus else None
        self.kind = "gpu" if self.device else "host"

    def reset(self) -> None:
        if self.device:
            import tensorflow as tf

            tf.config.experimental.reset_memory_stats(self.device)
            return
        reset_host_peak()

    def peak_mb(self) -> float | None:
        """The peak since :meth:`reset`, in MiB (``None`` if the platform does not say)."""
        if self.device:
            import tensorflow as tf

            return tf.config.experimental.get_memory_info(self.device)["peak"] / 2**20
        return host_peak_mb()
