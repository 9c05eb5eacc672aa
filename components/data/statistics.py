"""StatisticsGen's statistics, read by the Tuner and Trainer (no TFX import needed).

StatisticsGen writes one ``DatasetFeatureStatisticsList`` per split
(``<uri>/Split-<split>/FeatureStats.pb``) over the *whole* split: for every feature the
number of examples with and without a value, numeric mean, standard deviation, minimum and
maximum, and for text the distinct values with their counts (the rank histogram). The
data description (``tfx_accum.components.data.features``) is made from these and the schema, instead
of a pass of our own over the data.

Example:

```python
stats = SplitStatistics.load(statistics_uri, "train")
stats.num_examples, stats.feature("age").num_stats.mean
```
"""

from __future__ import annotations

import dataclasses
import os

from tensorflow_metadata.proto.v0 import statistics_pb2

# What StatisticsGen writes (tfx/components/statistics_gen/stats_artifact_utils.py).
_SPLIT_DIR, _BINARY = "Split-{}", "FeatureStats.pb"


@dataclasses.dataclass(frozen=True)
class SplitStatistics:
    """One split's statistics, by feature name."""

    num_examples: int
    features: dict[str, statistics_pb2.FeatureNameStatistics]

    @classmethod
    def load(cls, uri: str, split: str) -> SplitStatistics:
        import tensorflow as tf

        path = os.path.join(uri, _SPLIT_DIR.format(split), _BINARY)
        if not tf.io.gfile.exists(path):
            raise ValueError(
                f"StatisticsGen wrote no statistics for the {split!r} split ({path}); the "
                "Tuner and Trainer read the data description from them."
            )
        stats = statistics_pb2.DatasetFeatureStatisticsList()
        with tf.io.gfile.GFile(path, "rb") as handle:
            stats.ParseFromString(handle.read())
        return cls.from_proto(stats)

    @classmethod
    def from_proto(cls, stats: statistics_pb2.DatasetFeatureStatisticsList) -> SplitStatistics:
        dataset = stats.datasets[0]
        return cls(
            int(dataset.num_examples),
            {_name(f): f for f in dataset.features},
        )

    @classmethod
    def compute(cls, splits: dict[str, list[str]], schema) -> dict[str, SplitStatistics]:
        """The same statistics, computed by TFDV over each split's examples (gzip'd
        TFRecords of ``tf.Example``, as ExampleGen and Transform write them), typed by
        ``schema``: ``{split: its file patterns}`` in, ``{split: statistics}`` out.

        For TFX's stock Tuner and Trainer, which hand the module no StatisticsGen output:
        TFDV is what StatisticsGen runs, here in one Beam pipeline (DirectRunner, this
        process) for all the splits.
        """
        import tempfile

        import apache_beam as beam
        import tensorflow_data_validation as tfdv
        from tfx_bsl.public import tfxio

        options = tfdv.StatsOptions(schema=schema)
        with tempfile.TemporaryDirectory(prefix="tfx-accum-stats-") as directory:
            with beam.Pipeline() as pipeline:
                for split, patterns in splits.items():
                    source = tfxio.TFExampleRecord(file_pattern=list(patterns), schema=schema)
                    _ = (
                        pipeline
                        | f"Read[{split}]" >> source.BeamSource()
                        | f"Statistics[{split}]" >> tfdv.GenerateStatistics(options)
                        | f"Write[{split}]"
                        >> tfdv.WriteStatisticsToBinaryFile(os.path.join(directory, split))
                    )
            result = {}
            for split in splits:
                stats = statistics_pb2.DatasetFeatureStatisticsList()
                with open(os.path.join(directory, split), "rb") as handle:
                    stats.ParseFromString(handle.read())
                result[split] = cls.from_proto(stats)
        return result

    def feature(self, name: str) -> statistics_pb2.FeatureNameStatistics | None:
        return self.features.get(name)

    def present(self, name: str) -> int:
        """Examples with a value of ``name``."""
        common = _common(self.features.get(name))
        return int(common.num_non_missing) if common is not None else 0

    def values(self, name: str) -> list[tuple[str, float]]:
        """A text feature's distinct values and their counts, most frequent first."""
        feature = self.features.get(name)
        if feature is None or not feature.HasField("string_stats"):
            return []
        buckets = feature.string_stats.rank_histogram.buckets
        if buckets:
            return [(b.label, float(b.sample_count)) for b in buckets]
        return [(v.value, float(v.frequency)) for v in feature.string_stats.top_values]


def _name(feature: statistics_pb2.FeatureNameStatistics) -> str:
    return feature.path.step[0] if feature.path.step else feature.name


def _common(feature):
    if feature is None:
        return None
    for kind in ("num_stats", "string_stats", "bytes_stats"):
        if feature.HasField(kind):
            return getattr(feature, kind).common_stats
    return None
