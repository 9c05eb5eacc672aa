"""Beam's DaskRunner, mended to run TFX's components on a Dask cluster.

``--runner=tfx_accum.pipeline.local.dask_runner.DaskRunner`` (:data:`RUNNER`).

Beam's own DaskRunner (``apache_beam.runners.dask.dask_runner.DaskRunner``) turns a
pipeline into ``dask.bag`` operations on a ``distributed`` cluster. It runs Create,
ParDo, GroupByKey and Flatten, which is enough for a word count, but TFX's components
(TFDV in StatisticsGen, TFMA in the Evaluator) lose data or fail on it. This runner keeps
its options (``--dask_client_address``, ``--dask_npartitions``, ...), its overrides and its
result, and replaces its translation where it is wrong:

1. ``Read`` of a bounded source (``ReadFromTFRecord``, ``ReadFromText``) is translated: the
   source is split into bundles as Beam's ``Read`` does, one partition per bundle. Beam's
   runner leaves it untranslated, so its consumers receive no bag.
2. A multi-output ``ParDo`` (``with_outputs``) gives each output PCollection its own
   elements. Beam's runner hands every consumer all of them, tags stripped (TFDV's
   ``with_hot_key_fanout`` then feeds its 'hot' and 'cold' paths each other's elements).
3. Elements a ``DoFn`` emits in ``finish_bundle`` are kept (``BatchElements`` emits its
   last batch there). Beam's runner collects a bundle's outputs before ``finish_bundle``.
4. Every branch runs: every PCollection that nothing consumes is computed (each sink's
   writes). Beam's runner computes the last transform visited only.
5. A side input is computed once, as a task of its own, and handed to every task that reads
   it. Beam's runner computes the side input's whole graph again inside every task that
   reads it, with its side effects (a file sink's ``initialize_write`` makes a new
   temporary directory each time).

As on Beam's DirectRunner, a ``CombinePerKey`` is combined within each partition before
its shuffle, so that accumulators, not every input, travel between workers. Beyond those,
the translation refuses what it cannot run (a leaf transform it has no
translation for, a non-global ``WindowInto``) instead of passing the input through, and
``GroupByKey`` always shuffles through the cluster's tasks, never through one machine's
disk. As with Beam's runner, every element is in the global window; windowed and streaming
pipelines are not supported.

Each ``DoFn`` travels to the workers pickled by Beam's own pickler and is unpickled for
each bundle, as on Beam's other runners. The scheduler and the workers need the same
Python environment as the pipeline's process (Dask unpickles the task graph on both). Beam
internals are used only through ``tfx_accum.pipeline.local.dask_adapter``.

Example::

    options = PipelineOptions([
        "--runner=tfx_accum.pipeline.local.dask_runner.DaskRunner",
        "--dask_client_address=tcp://127.0.0.1:8786",
    ])
    with beam.Pipeline(options=options) as p:
        p | beam.io.ReadFromText("in*.txt") | beam.combiners.Count.Globally() | ...
"""

from __future__ import annotations

import dataclasses
import itertools
import math
from collections.abc import Iterable, Sequence
from typing import Any

import apache_beam as beam
from apache_beam import pvalue
from apache_beam.io import iobase
from apache_beam.pipeline import AppliedPTransform, PipelineVisitor
from apache_beam.transforms import window

from tfx_accum.pipeline.beam_args import DASK_RUNNER
from tfx_accum.pipeline.local import dask_adapter as adapter

RUNNER = DASK_RUNNER  # what --runner takes: this class's full path
DEFAULT_PARTITION_SIZE = 128  # Create's elements per partition (Beam's DaskRunner's)


class DaskRunner(adapter.BeamDaskRunner):
    """Executes a pipeline on a Dask ``distributed`` cluster (``--dask_client_address``;
    without it, a ``distributed.LocalCluster`` of this machine)."""

    def run_pipeline(self, pipeline, options):
        import dask.bag as db
        import distributed

        client_options, bag_options = adapter.bag_options(options)
        client = distributed.Client(**client_options)
        try:
            # Combines lifted first: their expansion's GroupByKey is then replaced too.
            pipeline.replace_all([adapter.LiftedCombines(), *adapter.replacements()])
            translation = _Translation(bag_options)
            pipeline.visit(translation)
            # Every PCollection nothing reads is a branch's end: all are computed, as one
            # collection (one graph, so that no task is fused into two chains and run twice),
            # each partition reduced to nothing, so that no data comes back to this process.
            ends = [bag.map_partitions(_discard) for bag in translation.unread()]
            futures = [client.compute(db.concat(ends))] if ends else []
        except BaseException:
            client.close()
            raise
        return DaskRunnerResult(client, futures)


@dataclasses.dataclass
class DaskRunnerResult(adapter.DaskRunnerResult):
    """Beam's DaskRunner's result, which also closes its client once the pipeline ended."""

    def wait_until_finish(self, duration=None) -> str:
        try:
            return super().wait_until_finish(duration)
        finally:
            self.client.close()

    def cancel(self) -> str:
        try:
            return super().cancel()
        finally:
            self.client.close()


class _Translation(PipelineVisitor):
    """A ``dask.bag`` per PCollection of the pipeline, built leaf transform by leaf transform
    (the visit is in topological order)."""

    def __init__(self, bag_options: dict[str, Any]):
        self.bag_options = bag_options
        self.bags: dict[pvalue.PCollection, Any] = {}
        self.consumed: set[pvalue.PValue] = set()
        self._side_values: dict[pvalue.PCollection, Any] = {}

    def unread(self) -> list:
        return [bag for pcoll, bag in self.bags.items() if pcoll not in self.consumed]

    def visit_transform(self, node: AppliedPTransform) -> None:
        # Every main input but the pipeline's beginning (Create's, Read's) has a bag by now.
        inputs = [
            self.bags[p] for p in node.main_inputs.values() if isinstance(p, pvalue.PCollection)
        ]
        self.consumed.update(node.main_inputs.values())
        self.consumed.update(side.pvalue for side in node.side_inputs)
        transform = node.transform
        outputs = {tag: p for tag, p in node.outputs.items() if isinstance(p, pvalue.PCollection)}
        if isinstance(transform, adapter.CREATE):
            bag = self._create(transform.values)
        elif isinstance(transform, adapter.READ):
            bag = _read(transform.source)
        elif isinstance(transform, adapter.FLATTEN):
            bag = _flatten(inputs)
        elif isinstance(transform, adapter.GROUP_BY_KEY_ONLY):
            bag = _group_by_key(_one(inputs, node))
        elif isinstance(transform, (adapter.GROUP_ALSO_BY_WINDOW, adapter.RESHUFFLE)):
            bag = _one(inputs, node)  # grouped already; a reshuffle changes no element
        elif isinstance(transform, beam.WindowInto):
            if not isinstance(transform.windowing.windowfn, window.GlobalWindows):
                raise NotImplementedError(
                    f"{node.full_label}: the DaskRunner supports the global window only, "
                    f"not {type(transform.windowing.windowfn).__name__}."
                )
            bag = _one(inputs, node)
        elif isinstance(transform, beam.ParDo):
            self._par_do(node, _one(inputs, node), outputs)
            return
        else:
            raise NotImplementedError(
                f"{node.full_label}: the DaskRunner has no translation of "
                f"{type(transform).__module__}.{type(transform).__qualname__}."
            )
        for output in outputs.values():
            self.bags[output] = bag

    def _create(self, values: Sequence[Any]):
        import dask.bag as db

        values = list(values)
        npartitions = self.bag_options.get("npartitions")
        size = self.bag_options.get("partition_size")
        if not npartitions and not size:
            size = max(DEFAULT_PARTITION_SIZE, math.ceil(math.sqrt(len(values)) / 10))
        return db.from_sequence(values, npartitions=npartitions, partition_size=size)

    def _side_value(self, pcoll: pvalue.PCollection):
        """A side input's elements as one task's result, computed once (per PCollection)
        and handed to every task that reads it."""
        import dask

        if pcoll not in self._side_values:
            parts = self.bags[pcoll].to_delayed(optimize_graph=False)
            self._side_values[pcoll] = dask.delayed(_concatenated)(parts)
        return self._side_values[pcoll]

    def _par_do(self, node: AppliedPTransform, bag, outputs: dict) -> None:
        import dask
        import dask.bag as db

        transform = node.transform
        main_input = next(iter(node.main_inputs.values()))
        args, kwargs = transform.raw_side_inputs
        side_specs = [adapter.side_input_spec(view) for view in node.side_inputs]
        dofn = adapter.dumps((transform.fn, _window_fn(main_input), list(args), kwargs, side_specs))
        tagged = any(tag is not None for tag in outputs)
        if node.side_inputs:
            # Each side input is a Delayed task the bundles depend on, not a collection
            # passed to map_partitions: dask would wrap that in a finalize task per use.
            sides = [self._side_value(view.pvalue) for view in node.side_inputs]
            run = dask.delayed(_run_bundle)
            out = db.from_delayed(
                [
                    run(part, node.full_label, dofn, tagged, *sides)
                    for part in bag.to_delayed(optimize_graph=False)
                ]
            )
        else:
            out = bag.map_partitions(_run_bundle, node.full_label, dofn, tagged)
        for tag, pcoll in outputs.items():
            self.bags[pcoll] = out.map_partitions(_tagged, tag) if tagged else out


def _window_fn(pcoll: pvalue.PCollection) -> window.WindowFn:
    """``pcoll``'s window function; global for a ``Read``'s output, whose leaf transform
    (Beam's DaskRunner's override) cannot tell its windowing."""
    try:
        return pcoll.windowing.windowfn
    except AttributeError:
        return window.GlobalWindows()


def _one(inputs: list, node: AppliedPTransform):
    if len(inputs) != 1:
        raise NotImplementedError(f"{node.full_label}: expected one main input, got {len(inputs)}.")
    return inputs[0]


def _read(source: iobase.BoundedSource):
    """The source's bundles, as Beam's ``Read`` splits it: one partition each."""
    import dask.bag as db

    size = source.estimate_size()
    bundles = [
        adapter.dumps(bundle)
        for bundle in source.split(desired_bundle_size=iobase.Read.get_desired_chunk_size(size))
    ]
    if not bundles:
        return db.from_sequence([], npartitions=1)
    return db.from_sequence(bundles, npartitions=len(bundles)).map_partitions(_read_bundles)


def _read_bundles(bundles: Iterable[bytes]) -> list:
    elements = []
    for pickled in bundles:
        bundle = adapter.loads(pickled)
        tracker = bundle.source.get_range_tracker(bundle.start_position, bundle.stop_position)
        elements.extend(bundle.source.read(tracker))
    return elements


def _flatten(inputs: list):
    import dask.bag as db

    return db.concat(inputs) if inputs else db.from_sequence([], npartitions=1)


def _group_by_key(bag):
    """``(key, [values])`` per key, shuffled through the cluster's tasks (not ``disk``, a
    single machine's files, which ``dask.bag`` picks when no default client is set)."""
    return bag.groupby(_key, shuffle="tasks").map(_values)


def _key(item):
    return item[0]


def _values(group):
    key, items = group  # items: (key, value in its window), from ReifyWindows
    return key, [adapter.unwindowed(value) for _, value in items]


def _run_bundle(elements: Iterable[Any], label: str, dofn: bytes, tagged: bool, *sides) -> list:
    """One partition through the ``ParDo``'s ``DoFn`` (unpickled for this bundle); with
    ``tagged``, every output as ``(tag, value)``."""
    fn, window_fn, args, kwargs, side_specs = adapter.loads(dofn)
    side_inputs = [adapter.side_input_map(spec, values) for spec, values in zip(side_specs, sides)]
    outputs: list = []

    def emit(tag, value):
        if tagged:
            outputs.append((tag, value))
        elif tag is None:  # a tag the ParDo did not declare has no PCollection
            outputs.append(value)

    adapter.invoke_bundle(
        fn,
        label,
        window_fn,
        (adapter.windowed(element, window_fn) for element in elements),
        emit,
        args,
        kwargs,
        side_inputs,
    )
    return outputs


def _tagged(pairs: Iterable[tuple[str | None, Any]], tag: str | None) -> list:
    return [value for output_tag, value in pairs if output_tag == tag]


def _concatenated(parts: Iterable[list]) -> list:
    return list(itertools.chain.from_iterable(parts))


def _discard(elements: Iterable[Any]) -> list:
    for _ in elements:
        pass
    return []
