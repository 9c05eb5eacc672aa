"""Runs every benchmark and writes ``bench/results/bench.md``, ``bench.json`` and ``bench.png``.

Usage: ``python -m bench [--output DIR] [--repeats N]``. Speed and memory runs each happen
in a fresh process (single-threaded TensorFlow; for memory, glibc's mmap threshold is fixed
so that RSS follows live buffers, not allocator caching).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from dataclasses import asdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
# The environment before TensorFlow is imported here: TF and XLA set variables in the
# process (TF2_BEHAVIOR, KMP_*, XLA flags) that would change the measured subprocesses.
BASE_ENV = dict(os.environ)
MEMORY_CONFIGS = (("plain", 256, 1), ("tfx_accum", 256, 8), ("plain", 32, 1))
SPEED_MODELS = {
    "conv": "conv net, 32x32x3, 512 samples (compute dominates)",
    "dense": "dense net, 1.3M params, 2048 samples (per-update work visible)",
}


def _run_json(args: list[str], env: dict | None = None) -> dict:
    proc = subprocess.run(
        [sys.executable, "-m", *args],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env={**BASE_ENV, **(env or {})},
        timeout=900,
    )
    if proc.returncode != 0:
        raise RuntimeError(f"benchmark {' '.join(args)} failed:\n{proc.stderr[-2000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def _ratio(speed: dict, other: str, method: str = "tfx_accum") -> str:
    ratio = speed["ratio"][other] if method == "tfx_accum" else speed["floor_ratio"][other]
    low, high = ratio["range"]
    return f"**{ratio['median']:.2f}x** [{low:.2f}-{high:.2f}]"


def _plot(speeds: list[dict], memory: list[dict], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(11, 4))
    labels = {
        "tfx_accum": "tfx-accum B=128, k=4",
        "plain_big": "plain B=128",
        "plain_micro": "plain B=32",
        "keras_option": "Keras 3 option B=32, k=4",
    }
    width = 0.2
    for i, method in enumerate(labels):
        ratios = [
            s["seconds_per_epoch_min"][method] / s["seconds_per_epoch_min"]["plain_big"]
            for s in speeds
        ]
        ax1.bar(
            [j + (i - 1.5) * width for j in range(len(speeds))],
            ratios,
            width,
            label=labels[method],
            color=["C0", "C7", "C2", "C3"][i],
        )
    ax1.set_xticks(
        range(len(speeds)),
        [f"{s['model']}{' XLA' if s['jit_compile'] else ''}" for s in speeds],
    )
    ax1.set_ylabel("time per epoch / plain B=128")
    ax1.set_title("Speed (single-threaded TF)")
    ax1.legend(fontsize=7)
    names = [
        f"{m['method'].replace('tfx_accum', 'tfx-accum')}\nB={m['batch']}"
        + (f", k={m['steps']}" if m["steps"] > 1 else "")
        for m in memory
    ]
    ax2.bar(names, [m["increase_mib"] for m in memory], color=["C7", "C0", "C7"])
    ax2.set_ylabel("peak RSS increase over idle (MiB)")
    ax2.set_title("Memory (conv net, activations dominate)")
    fig.tight_layout()
    fig.savefig(path, dpi=100)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench", description=__doc__)
    parser.add_argument("--output", type=Path, default=ROOT / "bench" / "results")
    parser.add_argument("--repeats", type=int, default=9, help="speed rounds (interleaved)")
    args = parser.parse_args(argv)
    args.output.mkdir(parents=True, exist_ok=True)
    sys.path.insert(0, str(ROOT))
    from bench.exactness import run_exactness, to_markdown
    from bench.loss_patterns import run_loss_patterns
    from bench.loss_patterns import to_markdown as patterns_markdown

    print("[bench] exactness against the anchors ...", flush=True)
    exactness = run_exactness(log=lambda m: print(m, flush=True))
    patterns = run_loss_patterns(log=lambda m: print(m, flush=True))
    print("[bench] speed ...", flush=True)
    speeds = [
        _run_json(["bench.speed", kind, str(args.repeats), *(["--jit"] if jit else [])])
        for kind in ("conv", "dense")
        for jit in (False, True)
    ]
    profile = _run_json(["bench.speed", "profile"])
    memory = []
    for method, batch, steps in MEMORY_CONFIGS:
        print(f"[bench] memory: {method} B={batch} k={steps} ...", flush=True)
        for _ in range(3):  # a run whose warm-up peaked above its training is repeated
            result = _run_json(
                ["bench.memory", method, str(batch), str(steps)],
                env={"MALLOC_MMAP_THRESHOLD_": "65536"},
            )
            if result["increase_mib"] > 0:
                break
        memory.append(result)
    ga, plain_big, plain_micro = memory[1], memory[0], memory[2]
    vs_micro = ga["increase_mib"] / plain_micro["increase_mib"]
    vs_big = ga["increase_mib"] / plain_big["increase_mib"]
    md = [
        "## Exactness (100 samples with sample weights, B=32, k=4, SGD+momentum, decaying LR,"
        " 2 epochs)",
        "",
        to_markdown(exactness),
        "",
        "### Loss patterns (max abs weight diff vs plain fit on the whole batch, 2 epochs)",
        "",
        patterns_markdown(patterns),
        "",
        "## Speed (CPU time per epoch, single-threaded TF, "
        f"{speeds[0]['repeats']} interleaved rounds; ratios: median of per-round ratios "
        "[range])",
        "",
        "| model | XLA | tfx-accum B=128 k=4 (min s) | plain B=128 (min s) "
        "| plain B=32 (min s) | Keras 3 option B=32 k=4 (min s) "
        "| hand-written floor B=128 k=4 (min s) "
        "| tfx-accum / plain B=128 (same updates) | floor / plain B=128 "
        "| tfx-accum / floor | tfx-accum / plain B=32 (micro-batch) "
        "| tfx-accum / Keras option |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |",
        *[
            f"| {SPEED_MODELS[s['model']]} | {'yes' if s['jit_compile'] else 'no'} "
            + "".join(
                f"| {s['seconds_per_epoch_min'][m]:.3f} "
                for m in ("tfx_accum", "plain_big", "plain_micro", "keras_option", "floor")
            )
            + f"| {_ratio(s, 'plain_big')} | {_ratio(s, 'plain_big', 'floor')} "
            f"| {_ratio(s, 'floor')} | {_ratio(s, 'plain_micro')} "
            f"| {_ratio(s, 'keras_option')} |"
            for s in speeds
        ],
        "",
        "### Where the dense net's extra time goes (ms per step at B=128, k=4, "
        "without the optimizer update and Keras's step overhead; best of rounds)",
        "",
        "| piece | ms |",
        "| --- | --- |",
        *[
            f"| {name.replace('_', ' ')} | {ms:.2f} |"
            for name, ms in profile["milliseconds"].items()
        ],
        "",
        "The Dense layers' matrix products alone, outside Keras (ms per step; the same "
        "arithmetic, 128 rows once or 32 rows 4 times):",
        "",
        "| product | 128 rows once | 32 rows 4 times | ratio |",
        "| --- | --- | --- | --- |",
        *[
            f"| {name.replace('_', ' ')} | {once:.2f} | {split:.2f} | **{split / once:.2f}x** |"
            for name, times in profile["matrix_products_milliseconds"].items()
            for once, split in [times.values()]  # 128 rows once, 32 rows 4 times
        ],
        "",
        "## Memory (3-layer conv net on 64x64x3, peak RSS increase over the idle process)",
        "",
        "| configuration | increase (MiB) |",
        "| --- | --- |",
        *[
            f"| {m['method']} B={m['batch']} k={m['steps']} | {m['increase_mib']:.0f} |"
            for m in memory
        ],
        "",
        f"- tfx-accum B=256 k=8 / plain B=32: **{vs_micro:.2f}x**",
        f"- tfx-accum B=256 k=8 / plain B=256: **{vs_big:.2f}x**",
    ]
    (args.output / "bench.md").write_text("\n".join(md) + "\n")
    (args.output / "bench.json").write_text(
        json.dumps(
            {
                "exactness": [asdict(r) for r in exactness],
                "loss_patterns": [asdict(r) for r in patterns],
                "speed": speeds,
                "dense_step_profile": profile,
                "memory": memory,
            },
            indent=2,
        )
    )
    _plot(speeds, memory, args.output / "bench.png")
    print("\n".join(md))
    print(f"[bench] wrote {args.output}/bench.md, bench.json, bench.png")
    return 0


if __name__ == "__main__":
    sys.exit(main())
