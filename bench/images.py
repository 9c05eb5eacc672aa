"""DenseNet121 on the embedded digit images: peak memory of one effective batch with and
without gradient accumulation (the StackOverflow question behind this project).

``python -m bench.images`` trains, each in a process of its own and through the
pipeline's own code (the embedded PNG examples, TFDV's statistics of them, ``describe``,
the exported ``Preprocessor`` on ``parse_raw``'s features, ``build_model("densenet121",
...)``), a few optimizer updates at effective batch ``EFFECTIVE_BATCH``:

- without GA: one micro-batch of ``EFFECTIVE_BATCH`` (k=1);
- with GA: ``k`` micro-batches of ``EFFECTIVE_BATCH // k``.

Each process first builds the model and runs one warm-up update on a batch of 1 (tracing,
allocator set-up) and takes that peak RSS as its idle baseline; the figure is the increase
of peak RSS (VmHWM) over it while training, which is what the batch costs. On a GPU the
same split moves the allocator's peak the same way. Writes ``bench/results/images.json``
and ``.md``.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

EFFECTIVE_BATCH = 1024
SPLITS = ((1, 1024), (8, 128), (32, 32))  # (k, micro-batch); k * micro == EFFECTIVE_BATCH
UPDATES = 3
MODEL = "densenet121"
RESULTS = Path(__file__).resolve().parent / "results"


def _peak_rss_mib() -> float:
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024.0
    raise RuntimeError("no VmHWM in /proc/self/status (Linux only)")


def image_examples():
    """The embedded digit images as the Tuner and Trainer read them: the description from
    the schema and TFDV's statistics of the examples (what StatisticsGen computes; in this
    process, bench.tfx_floor), and ``(model inputs, class index)`` pairs through the
    ``Preprocessor`` the model is exported with."""
    import tensorflow as tf
    from tensorflow_metadata.proto.v0 import schema_pb2

    from bench.tfx_floor import batches, decode_tfx_bsl, tfdv_statistics
    from tfx_accum.components.config.settings import ModelSettings
    from tfx_accum.components.data.features import Preprocessor, describe
    from tfx_accum.components.data.raw_features import parse_raw, raw_spec
    from tfx_accum.components.data.statistics import SplitStatistics
    from tfx_accum.pipeline.checks.data import digit_image_examples

    def _first_bytes_values(records, schema, rows: int = 256):
        # The BYTES features' values in the first ``rows`` serialized examples: the sample
        # that tells ``describe`` images from text (the statistics do not say).
        names = [f.name for f in schema.feature if f.type == schema_pb2.BYTES]
        spec = raw_spec({n: "string" for n in names})
        sample: dict[str, list[bytes]] = {n: [] for n in names}
        for batch in records.take(rows).batch(rows):
            parsed = tf.io.parse_example(batch, spec)
            for name in names:
                sample[name] = [v for v in parsed[name].flat_values.numpy().tolist() if v]
        return sample

    records = digit_image_examples()
    schema = schema_pb2.Schema()
    schema.feature.add(name="image", type=schema_pb2.BYTES)
    schema.feature.add(name="label", type=schema_pb2.INT)
    statistics = SplitStatistics.from_proto(tfdv_statistics(decode_tfx_bsl(batches(records))))
    serialized = tf.data.Dataset.from_tensor_slices(records)
    data = describe(
        schema,
        statistics,
        ModelSettings(model=MODEL, label_key="label"),
        sample=_first_bytes_values(serialized, schema),
    )
    preprocessor = Preprocessor(data)

    def preprocess(batch):
        raw = parse_raw(batch, data, with_label=True)
        label = preprocessor.encode_label(raw.pop(data.label_key))
        return preprocessor(raw), label

    return data, serialized.batch(256).map(preprocess).unbatch().cache()


def one(k: int, micro: int, updates: int = UPDATES, model_name: str = MODEL) -> dict:
    """One configuration, in this process: ``updates`` optimizer updates of ``k``
    micro-batches of ``micro`` examples. ``model_name``: another built-in image model
    runs the same steps (the bench's smoke test uses ``cnn``: DenseNet121's training
    step takes minutes to trace on two cores)."""
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    import keras

    from tfx_accum.components.models.models import build_model

    data, examples = image_examples()
    keras.utils.set_random_seed(0)
    model = build_model(model_name, data, k, 1e-3)
    # Warm-up on a batch of k single examples (one per micro-batch): tracing, allocators.
    model.fit(examples.take(k).batch(k), epochs=1, verbose=0)
    idle = _peak_rss_mib()
    batches = examples.repeat().batch(k * micro).take(updates + 1)
    start = None
    times = []

    class Timer(keras.callbacks.Callback):
        def on_train_batch_begin(self, batch, logs=None):
            nonlocal start
            start = time.perf_counter()

        def on_train_batch_end(self, batch, logs=None):
            times.append(time.perf_counter() - start)

    model.fit(batches, epochs=1, verbose=0, callbacks=[Timer()])
    peak = _peak_rss_mib()
    return {
        "accumulation_steps": k,
        "micro_batch": micro,
        "effective_batch": k * micro,
        "idle_mib": round(idle),
        "peak_mib": round(peak),
        "increase_mib": round(peak - idle),
        "seconds_per_update": round(sorted(times[1:])[len(times[1:]) // 2], 3),
        "image": list(data.features[0].image_shape),
    }


def main() -> None:
    rows = []
    for k, micro in SPLITS:
        result = subprocess.run(
            [sys.executable, "-m", "bench.images", "--one", str(k), str(micro)],
            capture_output=True,
            text=True,
            check=True,
            cwd=Path(__file__).resolve().parents[1],
        )
        rows.append(json.loads(result.stdout.strip().splitlines()[-1]))
        print(rows[-1], flush=True)
    plain = rows[0]
    lines = [
        f"DenseNet121 on the embedded digit images ({'x'.join(map(str, plain['image']))}, "
        f"read at 32x32x3), effective batch {EFFECTIVE_BATCH}, {UPDATES} updates; "
        "`python -m bench.images`",
        "",
        "| split | idle process | peak while training | peak over idle | vs no GA | s per update |",
        "| --- | --- | --- | --- | --- | --- |",
    ]
    for row in rows:
        split = f"{row['accumulation_steps']} x {row['micro_batch']}"
        split += " (no GA)" if row["accumulation_steps"] == 1 else ""
        lines.append(
            f"| {split} | {row['idle_mib']:,} MiB | {row['peak_mib']:,} MiB | "
            f"{row['increase_mib']:,} MiB | {row['increase_mib'] / plain['increase_mib']:.2f}x | "
            f"{row['seconds_per_update']} |"
        )
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "images.json").write_text(json.dumps(rows, indent=2) + "\n")
    (RESULTS / "images.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    if sys.argv[1:2] == ["--one"]:  # --one K MICRO [UPDATES]
        print(json.dumps(one(*map(int, sys.argv[2:5]))))
    else:
        main()
