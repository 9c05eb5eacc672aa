"""GradientAccumulationModel on a GPU through Keras's JAX or PyTorch backend: one short script.

Run on a machine with JAX or PyTorch and a GPU (no TensorFlow needed; Keras and tfx-accum
carried as wheels, see ``bench/gpu_jax.sh``)::

    python bench/gpu_jax.py --backend jax --out results/     # writes gpu_jax.{json,md}
    python bench/gpu_jax.py --backend torch --out results/   # writes gpu_torch.{json,md}

For a transformer block and a conv net, at several effective batches, it measures:

- **exactness**: the max abs weight difference after 3 SGD updates, plain ``fit`` on the
  whole batch vs the model at ``k`` micro-batches (float32 with full-precision matrix
  products, same start, same batches);
- **time**: the median step of the model at ``k`` over the plain step at the same effective
  batch, and over ``k`` plain steps at the micro-batch (what a user who cannot fit the big
  batch would otherwise run);
- **memory**: the peak device memory of each, each in a fresh process (JAX's peak counter
  never goes down; PyTorch's ``max_memory_allocated`` likewise);
- **the largest effective batch that fits** in a memory cap (``--cap-gib``: JAX's
  ``XLA_PYTHON_CLIENT_MEM_FRACTION``, PyTorch's ``set_per_process_memory_fraction``):
  batches doubled until plain training fails, then ``k`` doubled at the largest
  micro-batch that fitted until the model fails or ``--max-k``.

On PyTorch the step runs as Keras runs it by default there: eagerly (``jit_compile=True``
would wrap it in ``torch.compile``). Each measurement runs in a fresh process (a backend
start, and on JAX a compile, each: a few minutes in all, not measured yet). ``--smoke`` runs
tiny shapes on any device (tested on the CPU for both backends:
``tests/accumulation/test_jax_backend.py``, ``tests/accumulation/test_torch_backend.py``),
so the script is known to work before a GPU is lent.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import json
import os
import platform
import subprocess
import sys
import time
from pathlib import Path

BACKENDS = ("jax", "torch")

SHAPES = {
    # name: (input shape, classes, effective batches, k), full size and --smoke
    "transformer": ((128, 256), 10, (256, 1024), 4),
    "convnet": ((32, 32, 3), 10, (512, 2048), 4),
}
SMOKE = {
    "transformer": ((8, 16), 4, (16,), 4),
    "convnet": ((8, 8, 3), 4, (16,), 4),
}


def build(name: str, input_shape, classes: int):
    import keras

    inputs = keras.Input(input_shape)
    if name == "transformer":
        width = input_shape[-1]
        attended = keras.layers.MultiHeadAttention(num_heads=8, key_dim=max(width // 8, 2))(
            inputs, inputs
        )
        x = keras.layers.LayerNormalization()(inputs + attended)
        hidden = keras.layers.Dense(4 * width, activation="gelu")(x)
        x = keras.layers.LayerNormalization()(x + keras.layers.Dense(width)(hidden))
        x = keras.layers.GlobalAveragePooling1D()(x)
    else:
        x = inputs
        for filters in (32, 64, 128):
            x = keras.layers.Conv2D(filters, 3, padding="same", activation="relu")(x)
            x = keras.layers.Conv2D(filters, 3, padding="same", activation="relu")(x)
            x = keras.layers.MaxPooling2D()(x) if x.shape[1] > 2 else x
        x = keras.layers.GlobalAveragePooling2D()(x)
    return keras.Model(inputs, keras.layers.Dense(classes)(x))


def data(input_shape, classes: int, rows: int, seed: int = 0):
    import numpy as np

    rng = np.random.default_rng(seed)
    x = rng.normal(size=(rows, *input_shape)).astype("float32")
    return x, rng.integers(0, classes, rows).astype("int32")


def make(name, input_shape, classes, k: int | None):
    """The plain model (k None) or the accumulation model at k, compiled for SGD."""
    import keras

    from tfx_accum.components import GradientAccumulationModel

    keras.utils.set_random_seed(0)
    model = build(name, input_shape, classes)
    if k is not None:
        model = GradientAccumulationModel.from_model(model, gradient_accumulation_steps=k)
    model.compile(
        optimizer=keras.optimizers.SGD(0.01),
        loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
    )
    return model


def peak_bytes() -> int | None:
    """The device's peak memory in use so far in this process (None on a CPU)."""
    if os.environ["KERAS_BACKEND"] == "torch":
        import torch

        return torch.cuda.max_memory_allocated() if torch.cuda.is_available() else None
    import jax

    stats = jax.devices()[0].memory_stats() or {}
    return stats.get("peak_bytes_in_use")


def synchronize(model) -> None:
    """Waits until the device has finished the work queued for ``model``'s weights."""
    if os.environ["KERAS_BACKEND"] == "torch":
        import torch

        if torch.cuda.is_available():
            torch.cuda.synchronize()
        return
    import jax

    jax.block_until_ready([v.value for v in model.trainable_variables])


def limit_memory(fraction: float) -> None:
    """PyTorch's cap on this process's device memory (JAX's is its environment variable)."""
    if os.environ["KERAS_BACKEND"] == "torch":
        import torch

        if torch.cuda.is_available():
            torch.cuda.set_per_process_memory_fraction(fraction)


def step_seconds(model, x, y, batch: int, steps: int) -> float:
    """Wall time of one training step: an epoch of ``steps`` batches after a compiling one."""
    model.fit(x[:batch], y[:batch], batch_size=batch, epochs=1, verbose=0, shuffle=False)
    synchronize(model)
    start = time.perf_counter()
    model.fit(x, y, batch_size=batch, epochs=1, verbose=0, shuffle=False)
    synchronize(model)
    return (time.perf_counter() - start) / steps


def one(args) -> dict:
    """One measurement in this process: ``--one name,batch,k`` (k 0: plain)."""
    name, batch, k = args.one.split(",")
    batch, k = int(batch), int(k)
    if args.mem_fraction:
        limit_memory(args.mem_fraction)
    input_shape, classes, _, _ = (SMOKE if args.smoke else SHAPES)[name]
    x, y = data(input_shape, classes, batch * args.steps)
    model = make(name, input_shape, classes, k or None)
    return {"seconds": step_seconds(model, x, y, batch, args.steps), "peak": peak_bytes()}


def _in_fresh_process(
    name, batch, k, args, steps: int, fraction: float = 0.0, **env
) -> subprocess.CompletedProcess:
    """``one`` for ``name`` at ``batch`` (k None or 0: plain) in a process of its own."""
    command = [sys.executable, __file__, "--one", f"{name},{batch},{k or 0}"]
    command += ["--backend", args.backend, "--steps", str(steps)]
    command += (["--smoke"] if args.smoke else []) + [f"--mem-fraction={fraction}"]
    return subprocess.run(
        command, env={**os.environ, **env}, capture_output=True, text=True, timeout=600
    )


def fits(name, batch, k, args) -> bool:
    """Whether one step at ``batch`` (k None: plain) fits in the cap, in a fresh process."""
    fraction = round(args.cap_fraction, 4)
    proc = _in_fresh_process(
        name, batch, k, args, 1, fraction, XLA_PYTHON_CLIENT_MEM_FRACTION=str(fraction)
    )
    return proc.returncode == 0


def measure(name, batch, k, args) -> dict:
    if args.smoke:  # no device memory to isolate: in this process, to keep CI's test short
        return one(argparse.Namespace(**{**vars(args), "one": f"{name},{batch},{k}"}))
    proc = _in_fresh_process(name, batch, k, args, args.steps)
    if proc.returncode != 0:
        return {"error": proc.stderr.strip().splitlines()[-1:]}
    return json.loads(proc.stdout.strip().splitlines()[-1])


def exactness(name, batch, k, args) -> float:
    import numpy as np

    input_shape, classes, _, _ = (SMOKE if args.smoke else SHAPES)[name]
    x, y = data(input_shape, classes, batch * 3, seed=1)
    plain, ga = make(name, input_shape, classes, None), make(name, input_shape, classes, k)
    ga.set_weights(plain.get_weights())
    # Full float32 matrix products: a GPU's default TF32 rounds each product to 10 bits
    # of mantissa, which would measure TF32, not the accumulation.
    with full_float32():
        for model in (plain, ga):
            model.fit(x, y, batch_size=batch, epochs=1, verbose=0, shuffle=False)
    return max(float(np.max(np.abs(a - b))) for a, b in zip(plain.get_weights(), ga.get_weights()))


@contextlib.contextmanager
def full_float32():
    """Matrix products and convolutions in full float32 (no TF32) on this backend."""
    if os.environ["KERAS_BACKEND"] == "jax":
        import jax

        with jax.default_matmul_precision("highest"):
            yield
        return
    import torch

    before = torch.get_float32_matmul_precision(), torch.backends.cudnn.allow_tf32
    torch.set_float32_matmul_precision("highest")
    torch.backends.cudnn.allow_tf32 = False
    try:
        yield
    finally:
        torch.set_float32_matmul_precision(before[0])
        torch.backends.cudnn.allow_tf32 = before[1]


def largest(name, k_max, args) -> dict:
    """The largest plain batch that fits the cap, and the largest effective batch with GA."""
    batch, plain_max = (4 if args.smoke else 64), 0
    while batch <= (4 if args.smoke else 1 << 20) and fits(name, batch, None, args):
        plain_max, batch = batch, batch * 2
    k, ga_max = 2, 0
    while plain_max and k <= (2 if args.smoke else k_max) and fits(name, plain_max * k, k, args):
        ga_max, k = plain_max * k, k * 2
    return {"plain": plain_max, "accumulated": ga_max, "micro_batch": plain_max}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--backend",
        choices=BACKENDS,
        default=os.environ.get("KERAS_BACKEND", "jax"),
        help="Keras's backend (default: KERAS_BACKEND, else jax)",
    )
    parser.add_argument("--out", default="bench/results", help="where gpu_<backend>.{json,md} go")
    parser.add_argument("--smoke", action="store_true", help="tiny shapes, any device")
    parser.add_argument("--steps", type=int, default=10, help="timed steps per measurement")
    parser.add_argument("--cap-gib", type=float, default=4.0, help="memory cap for the fit search")
    parser.add_argument("--max-k", type=int, default=16, help="largest k the fit search tries")
    parser.add_argument("--models", default=",".join(SHAPES), help="which models, by name")
    parser.add_argument("--one", help=argparse.SUPPRESS)
    parser.add_argument("--mem-fraction", type=float, default=0.0, help=argparse.SUPPRESS)
    args = parser.parse_args()
    os.environ["KERAS_BACKEND"] = args.backend  # before Keras is imported, here and in children
    if args.one:
        print(json.dumps(one(args)))
        return
    import keras

    device, total, versions = describe_device()
    args.cap_fraction = min(1.0, args.cap_gib * 2**30 / total) if total else 1.0
    models = {
        name: shape
        for name, shape in (SMOKE if args.smoke else SHAPES).items()
        if name in args.models.split(",")
    }
    rows = []
    for name, (_, _, batches, k) in models.items():
        for batch in batches:
            plain = measure(name, batch, 0, args)
            micro = measure(name, batch // k, 0, args)
            ga = measure(name, batch, k, args)
            row = {"model": name, "batch": batch, "k": k, "plain": plain, "micro": micro,
                   "ga": ga, "max_abs_diff": exactness(name, batch, k, args)}  # fmt: skip
            if "seconds" in ga and "seconds" in plain and "seconds" in micro:
                row["ga_over_plain"] = ga["seconds"] / plain["seconds"]
                row["ga_over_k_micro_steps"] = ga["seconds"] / (k * micro["seconds"])
            rows.append(row)
            print(json.dumps(row), flush=True)
    fit = {name: largest(name, args.max_k, args) for name in models}
    report = {
        "date": datetime.date.today().isoformat(),
        "backend": args.backend,
        "device": device,
        "host": platform.node(),
        "versions": {**versions, "keras": keras.__version__},
        "smoke": args.smoke,
        "cap_gib": args.cap_gib,
        "rows": rows,
        "largest_batch": fit,
    }
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / f"gpu_{args.backend}.json").write_text(json.dumps(report, indent=1) + "\n")
    (out / f"gpu_{args.backend}.md").write_text(markdown(report))
    print(markdown(report))


def describe_device() -> tuple[str, int | None, dict[str, str]]:
    """The device this backend trains on, its memory in bytes, and the backend's version."""
    if os.environ["KERAS_BACKEND"] == "torch":
        import torch

        if not torch.cuda.is_available():
            return "cpu", None, {"torch": torch.__version__}
        properties = torch.cuda.get_device_properties(0)
        return f"cuda: {properties.name}", properties.total_memory, {"torch": torch.__version__}
    import jax

    device = jax.devices()[0]
    total = (device.memory_stats() or {}).get("bytes_limit")
    return (
        f"{device.platform}: {getattr(device, 'device_kind', '')}",
        total,
        {"jax": jax.__version__},
    )


def _gib(value) -> str:
    return "n/a" if value is None else f"{value / 2**30:.2f}"


def markdown(report: dict) -> str:
    backend = report.get("backend", "jax")
    name = {"jax": "JAX", "torch": "PyTorch"}[backend]
    lines = [
        f"# GradientAccumulationModel on {report['device']} ({name} backend)",
        "",
        f"{report['date']}, {name} {report['versions'][backend]}, Keras "
        f"{report['versions']['keras']}{' (smoke shapes)' if report['smoke'] else ''}. "
        f"`python bench/gpu_jax.py --backend {backend}`.",
        "",
        "| model | effective batch | k | max abs diff vs plain | GA / plain step | "
        "GA / k plain micro-steps | peak GiB plain | peak GiB GA |",
        "| --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for row in report["rows"]:
        ratio = row.get("ga_over_plain")
        micro = row.get("ga_over_k_micro_steps")
        lines.append(
            f"| {row['model']} | {row['batch']} | {row['k']} | {row['max_abs_diff']:.1e} | "
            f"{'n/a' if ratio is None else f'{ratio:.2f}x'} | "
            f"{'n/a' if micro is None else f'{micro:.2f}x'} | "
            f"{_gib(row['plain'].get('peak'))} | {_gib(row['ga'].get('peak'))} |"
        )
    lines += [
        "",
        f"Largest batch in a {report['cap_gib']:g} GiB cap (doubling):",
        "",
        "| model | plain | with accumulation (micro-batch = plain's largest) |",
        "| --- | --- | --- |",
    ]
    for name, fit in report["largest_batch"].items():
        lines.append(f"| {name} | {fit['plain']} | {fit['accumulated']} |")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    main()
