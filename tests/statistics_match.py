"""Two runs' StatisticsGen outputs compared, and each held against the examples themselves.

TFDV's statistics are exact sums and counts, except what it reads off its quantiles sketch
(``StatsOptions.epsilon``, 0.01 by default: a quantile's rank is within ``epsilon * n`` of
its target): the quantiles histogram, the median, and the equi-width histogram, which TFDV
interpolates from 1,000 of the sketch's quantiles. Two runners batch and merge the same
examples differently, so those may differ between them; the rest must not. So
:func:`assert_same_statistics` checks everything else equal (floats to 1e-9, the order of a
float sum), and every run's sketched figures against the examples' true ranks and counts.
"""

from __future__ import annotations

import glob
import math
import os

import numpy as np
import pyarrow as pa
import tensorflow as tf
from google.protobuf import json_format
from tensorflow_metadata.proto.v0 import statistics_pb2
from tfx_bsl.coders import example_coder

EPSILON = 0.01  # TFDV's StatsOptions default, which StatisticsGen uses
SKETCHED = ("histograms", "median", "numValuesHistogram")
# TFDV interpolates the equi-width histogram's counts between this many of the sketch's
# quantiles (basic_stats_generator: _NUM_QUANTILES_FACTOR_FOR_STD_HISTOGRAM x 10 buckets).
INTERPOLATED = 1000


def load(statistics_uri: str) -> dict[str, statistics_pb2.DatasetFeatureStatistics]:
    """``{split: statistics}`` from a StatisticsGen artifact's directory."""
    found = {}
    for path in sorted(glob.glob(os.path.join(statistics_uri, "Split-*", "FeatureStats.pb"))):
        split = os.path.basename(os.path.dirname(path)).removeprefix("Split-")
        stats = statistics_pb2.DatasetFeatureStatisticsList()
        with open(path, "rb") as handle:
            stats.ParseFromString(handle.read())
        found[split] = stats.datasets[0]
    assert found, f"no statistics under {statistics_uri}"
    return found


def examples(examples_uri: str, split: str) -> pa.RecordBatch:
    """ExampleGen's examples of ``split`` as one Arrow record batch (a list column each)."""
    files = sorted(glob.glob(os.path.join(examples_uri, f"Split-{split}", "*")))
    records = [r.numpy() for r in tf.data.TFRecordDataset(files, compression_type="GZIP")]
    return example_coder.ExamplesToRecordBatchDecoder().DecodeBatch(records)


def _without_sketched(value):
    if isinstance(value, dict):
        return {k: _without_sketched(v) for k, v in value.items() if k not in SKETCHED}
    if isinstance(value, list):
        return [_without_sketched(v) for v in value]
    return value


def _assert_close(a, b, where: str) -> None:
    if isinstance(a, dict) and isinstance(b, dict):
        assert sorted(a) == sorted(b), f"{where}: fields {sorted(a)} != {sorted(b)}"
        for key in a:
            _assert_close(a[key], b[key], f"{where}.{key}")
    elif isinstance(a, list) and isinstance(b, list):
        assert len(a) == len(b), f"{where}: {len(a)} != {len(b)} entries"
        for i, (x, y) in enumerate(zip(a, b)):
            _assert_close(x, y, f"{where}[{i}]")
    elif isinstance(a, float) or isinstance(b, float):
        assert math.isclose(float(a), float(b), rel_tol=1e-9, abs_tol=1e-9), f"{where}: {a} != {b}"
    else:
        assert a == b, f"{where}: {a!r} != {b!r}"


def _feature_name(feature: statistics_pb2.FeatureNameStatistics) -> str:
    return feature.path.step[0] if feature.path.step else feature.name


def _ranks(sorted_values: np.ndarray, value: float) -> tuple[int, int]:
    """The values below ``value``, and those up to it."""
    return (
        int(np.searchsorted(sorted_values, value, side="left")),
        int(np.searchsorted(sorted_values, value, side="right")),
    )


def _rank_within(value: float, target_rank: float, sorted_values: np.ndarray, slack: float) -> bool:
    """Whether ``value`` is a quantile of rank ``target_rank`` within ``slack`` ranks (ties:
    any rank ``value`` holds among ``sorted_values``)."""
    below, through = _ranks(sorted_values, value)
    return below - slack <= target_rank <= through + slack


def assert_sketched_within_error(
    stats: statistics_pb2.DatasetFeatureStatistics, batch: pa.RecordBatch, epsilon: float = EPSILON
) -> int:
    """Every numeric feature's quantile boundaries and median within ``epsilon * n`` ranks of
    the truth; its equi-width buckets' counts within what interpolating a CDF known to
    ``epsilon * n`` at quantiles ``n / INTERPOLATED`` apart allows (ties at an edge count
    on either side). Returns how many features were checked."""
    checked = 0
    for feature in stats.features:
        if not feature.HasField("num_stats"):
            continue
        name = _feature_name(feature)
        column = batch.column(batch.schema.get_field_index(name))
        values = np.sort(np.asarray(pa.compute.list_flatten(column), dtype=np.float64))
        n = len(values)
        slack = epsilon * n + 1
        where = f"{stats.name or 'split'}:{name}"
        numeric = feature.num_stats
        assert _rank_within(numeric.median, n / 2, values, slack), f"{where} median"
        for histogram in numeric.histograms:
            buckets = histogram.buckets
            if histogram.type == statistics_pb2.Histogram.QUANTILES:
                edges = [buckets[0].low_value] + [b.high_value for b in buckets]
                for i, edge in enumerate(edges):
                    target = n * i / len(buckets)
                    assert _rank_within(edge, target, values, slack), f"{where} quantile {i}"
            else:  # the CDF interpolated between quantiles n / INTERPOLATED apart
                gap = slack + n / INTERPOLATED
                for i, bucket in enumerate(buckets):
                    low = _ranks(values, bucket.low_value)
                    high = _ranks(values, bucket.high_value)
                    least, most = high[0] - low[1] - 2 * gap, high[1] - low[0] + 2 * gap
                    assert least <= bucket.sample_count <= most, (
                        f"{where} bucket {i}: {bucket.sample_count} not in [{least}, {most}]"
                    )
        checked += 1
    return checked


def assert_same_statistics(a_uri: str, b_uri: str, examples_uri: str) -> int:
    """Two StatisticsGen outputs of the same examples: equal but for the sketched figures,
    which are within the sketch's error in both. Returns the numeric features checked."""
    a, b = load(a_uri), load(b_uri)
    assert sorted(a) == sorted(b)
    checked = 0
    for split in a:
        _assert_close(
            _without_sketched(json_format.MessageToDict(a[split])),
            _without_sketched(json_format.MessageToDict(b[split])),
            split,
        )
        batch = examples(examples_uri, split)
        for stats in (a[split], b[split]):
            checked += assert_sketched_within_error(stats, batch)
    return checked
