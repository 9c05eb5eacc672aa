"""The DaskRunner (tfx_accum.pipeline.local.dask_runner) on a cluster of real processes.

One tiny Beam pipeline per point the runner mends in Beam's own DaskRunner: each runs on the
DirectRunner (the reference), on this runner, which must give the same output, and on
Beam's DaskRunner, which must not (it fails, or its output differs): the test shows the
point is real and that this runner is what mends it. The cluster is a scheduler and two
single-threaded workers, started for this module and ended with it.
"""

from __future__ import annotations

import contextlib
import json
import os
import uuid

import apache_beam as beam
import distributed
import pytest
from apache_beam.options.pipeline_options import PipelineOptions

from bench.dask_cluster import dask_cluster
from tfx_accum.pipeline.local.dask_runner import RUNNER

STOCK = "apache_beam.runners.dask.dask_runner.DaskRunner"

pytestmark = pytest.mark.e2e  # a scheduler and two workers (processes): about a minute


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    with dask_cluster(tmp_path_factory.mktemp("dask-logs")) as running:
        yield running


def _options(runner: str, address: str) -> PipelineOptions:
    if runner == "direct":
        return PipelineOptions(["--runner=DirectRunner"])
    return PipelineOptions([f"--runner={runner}", f"--dask_client_address={address}"])


def _lines(path: str) -> list[str]:
    return sorted(open(path).read().split()) if os.path.exists(path) else []


def _write(pcoll, path: str, label: str = "Write"):
    return (
        pcoll
        | f"{label}Str" >> beam.Map(str)
        | label >> beam.io.WriteToText(path, shard_name_template="")
    )


def _outputs(case, tmp_path, cluster) -> dict[str, object]:
    """``case(options, directory)`` on each runner, in a directory of its own: its result,
    or the exception Beam's DaskRunner raised."""
    results = {}
    for runner in ("direct", RUNNER, STOCK):
        directory = tmp_path / runner.rsplit(".", 1)[-1] / uuid.uuid4().hex
        directory.mkdir(parents=True)
        options = _options(runner, cluster.address)
        if runner != STOCK:
            results[runner] = case(options, directory)
            continue
        try:
            results[runner] = case(options, directory)
        except Exception as error:  # noqa: BLE001 - Beam's runner failing is the point
            results[runner] = error
        finally:  # Beam's runner leaves its client open (the default client)
            with contextlib.suppress(ValueError):
                distributed.default_client().close()
    return results


def _check(results: dict[str, object], cluster) -> None:
    assert results[RUNNER] == results["direct"], cluster.log_tails()
    assert results[STOCK] != results["direct"]


def test_read_of_a_file_source(tmp_path, cluster):
    """(1) ``Read``: the lines of three files, summed; Beam's DaskRunner has no bag for it."""
    for part in range(3):
        (tmp_path / f"in-{part}.txt").write_text("\n".join(str(part * 100 + i) for i in range(50)))
    pattern = str(tmp_path / "in-*.txt")

    def case(options, directory):
        with beam.Pipeline(options=options) as p:
            numbers = p | beam.io.ReadFromText(pattern) | beam.Map(int)
            _write(numbers | beam.CombineGlobally(sum), str(directory / "sum"))
            _write(numbers | beam.combiners.Count.Globally(), str(directory / "count"), "Count")
        return _lines(str(directory / "sum")), _lines(str(directory / "count"))

    results = _outputs(case, tmp_path, cluster)
    assert results["direct"] == (["18675"], ["150"])
    _check(results, cluster)


def test_multi_output_par_do_keeps_its_tags(tmp_path, cluster):
    """(2) ``with_outputs``: each output gets its own elements, not all of them."""

    # Defined here, so that it is pickled by value: the workers cannot import this module.
    class _EvenOdd(beam.DoFn):
        def process(self, number):
            if number % 2:
                yield beam.pvalue.TaggedOutput("odd", number)
            else:
                yield number

    def case(options, directory):
        with beam.Pipeline(options=options) as p:
            split = p | beam.Create(range(10)) | beam.ParDo(_EvenOdd()).with_outputs("odd")
            _write(split.odd | "SumOdd" >> beam.CombineGlobally(sum), str(directory / "odd"))
            _write(
                split[None] | "SumEven" >> beam.CombineGlobally(sum), str(directory / "even"), "E"
            )
        return _lines(str(directory / "odd")), _lines(str(directory / "even"))

    results = _outputs(case, tmp_path, cluster)
    assert results["direct"] == (["25"], ["20"])
    _check(results, cluster)


def test_elements_emitted_in_finish_bundle(tmp_path, cluster):
    """(3) ``BatchElements`` emits its last (here its only) batch in ``finish_bundle``."""

    def case(options, directory):
        with beam.Pipeline(options=options) as p:
            batches = (
                p
                | beam.Create(range(10))
                | beam.BatchElements(min_batch_size=100, max_batch_size=100)
            )
            _write(batches | beam.FlatMap(lambda batch: batch), str(directory / "out"))
        return _lines(str(directory / "out"))

    results = _outputs(case, tmp_path, cluster)
    assert results["direct"] == sorted(str(i) for i in range(10))
    _check(results, cluster)


def test_every_branch_runs(tmp_path, cluster):
    """(4) Two sinks: both write, not only the one visited last; the step both read runs
    once per bundle (a file each time)."""

    def _noting(value, directory):
        (directory / f"ran-{uuid.uuid4().hex}").write_text("")
        return value

    def case(options, directory):
        with beam.Pipeline(options=options) as p:
            numbers = p | beam.Create([range(5)]) | beam.FlatMap(_noting, directory)
            _write(numbers | "Double" >> beam.Map(lambda x: 2 * x), str(directory / "a"), "A")
            _write(numbers | "Square" >> beam.Map(lambda x: x * x), str(directory / "b"), "B")
        runs = len(list(directory.glob("ran-*")))
        return _lines(str(directory / "a")), _lines(str(directory / "b")), runs

    results = _outputs(case, tmp_path, cluster)
    assert results["direct"] == (["0", "2", "4", "6", "8"], ["0", "1", "16", "4", "9"], 1)
    _check(results, cluster)


def test_a_side_input_is_computed_once(tmp_path, cluster):
    """(5) A side input read by a main input of several partitions is computed once, so its
    producer's side effect happens once, as on the DirectRunner."""

    def _noting(value, directory):  # the side input's producer: a file each time it runs
        (directory / f"ran-{uuid.uuid4().hex}").write_text("")
        return value

    def case(options, directory):
        with beam.Pipeline(options=options) as p:
            offset = p | "Offset" >> beam.Create([1000]) | beam.Map(_noting, directory)
            shifted = (
                p
                | "Numbers" >> beam.Create(range(600))  # several partitions on Dask
                | beam.Map(lambda x, side: x + side, beam.pvalue.AsSingleton(offset))
            )
            _write(shifted | beam.CombineGlobally(sum), str(directory / "sum"))
        return _lines(str(directory / "sum")), len(list(directory.glob("ran-*")))

    results = _outputs(case, tmp_path, cluster)
    assert results["direct"] == ([str(sum(range(600)) + 600 * 1000)], 1)
    _check(results, cluster)


def test_combine_per_key_is_combined_before_its_shuffle(tmp_path, cluster):
    """A ``CombinePerKey`` is combined within each partition before its shuffle (Beam's
    ``LiftedCombinePerKey``, as on the DirectRunner): what crosses the shuffle is one
    accumulator per partition and key, not every input. Four files, one partition each, of
    numbers tagged with their file; the accumulators record the files they hold, and each
    merge after the shuffle writes what it was given to a file (the workers' side channel).
    Without the lifting, the inputs cross the shuffle and are added to accumulators after
    it (Beam's ``CombineValues``: three per key, each holding several files' inputs)."""
    files = 4
    for part in range(files):
        (tmp_path / f"in-{part}.txt").write_text(
            "\n".join(f"{part} {part * 1000 + i}" for i in range(60))
        )
    pattern = str(tmp_path / "in-*.txt")

    # Defined here, so that it is pickled by value: the workers cannot import this module.
    class _SumWithSources(beam.CombineFn):
        """The sum of each key's numbers; its accumulator also holds the files they came
        from. Each merge writes the sources of the accumulators it merges to ``directory``."""

        def __init__(self, directory):
            self.directory = directory

        def create_accumulator(self):
            return 0, frozenset()

        def add_input(self, accumulator, element):
            total, sources = accumulator
            source, number = element
            return total + number, sources | {source}

        def merge_accumulators(self, accumulators):
            accumulators = list(accumulators)
            merge = [sorted(sources) for _, sources in accumulators]
            (self.directory / f"merge-{uuid.uuid4().hex}").write_text(json.dumps(merge))
            total = sum(t for t, _ in accumulators)
            return total, frozenset().union(*(s for _, s in accumulators))

        def extract_output(self, accumulator):
            return accumulator[0]

    def _keyed(line):
        source, number = line.split()
        return int(number) % 3, (source, int(number))

    def case(options, directory):
        with beam.Pipeline(options=options) as p:
            sums = (
                p
                | beam.io.ReadFromText(pattern)
                | beam.Map(_keyed)
                | beam.CombinePerKey(_SumWithSources(directory))
                | beam.MapTuple(lambda key, total: f"{key}:{total}")
            )
            _write(sums, str(directory / "sums"))
        merges = [json.loads(path.read_text()) for path in directory.glob("merge-*")]
        return _lines(str(directory / "sums")), merges

    results = {}
    for runner in ("direct", RUNNER):
        directory = tmp_path / runner.rsplit(".", 1)[-1]
        directory.mkdir()
        results[runner] = case(_options(runner, cluster.address), directory)
    numbers = [part * 1000 + i for part in range(files) for i in range(60)]
    expected = [f"{key}:{sum(n for n in numbers if n % 3 == key)}" for key in range(3)]
    assert results["direct"][0] == results[RUNNER][0] == sorted(expected), cluster.log_tails()
    # On the cluster: one merge per key, of one accumulator from each file's partition.
    merges = results[RUNNER][1]
    assert len(merges) == 3, merges
    for merge in merges:
        assert sorted(merge) == [[str(part)] for part in range(files)], merges
