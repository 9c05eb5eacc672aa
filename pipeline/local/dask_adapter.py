"""The Beam internals that ``tfx_accum.pipeline.local.dask_runner`` uses, in one place.

Beam's DaskRunner (``apache_beam.runners.dask``) is built from classes Beam does not export:
the overrides that turn ``Create``, ``Read``, ``GroupByKey`` and ``Flatten`` into leaf
transforms the runner translates, and the machinery that invokes a ``DoFn`` on a bundle
(``DoFnInvoker`` and the output handler the DirectRunner uses). The runner here reuses them
instead of copying them; each use is below, with what it is for.

Tested with apache-beam 2.74.0 (``apache_beam/runners/dask/`` is the same through 2.77.0,
which the ``dask`` extra admits). A Beam release that renames one of these breaks an import
or an attribute here, at once, not a pipeline's results.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import Any

import apache_beam as beam
from apache_beam.internal import pickler  # Beam's own pickling of DoFns and sources
from apache_beam.pipeline import PTransformOverride
from apache_beam.runners import common  # DoFnInvoker, DoFnSignature, DoFnContext, Receiver
from apache_beam.runners.dask import dask_runner, overrides, transform_evaluator
from apache_beam.transforms import sideinputs, window
from apache_beam.transforms.combiners import LiftedCombinePerKey
from apache_beam.utils.windowed_value import WindowedValue

BeamDaskRunner = dask_runner.DaskRunner
DaskOptions = dask_runner.DaskOptions
DaskRunnerResult = dask_runner.DaskRunnerResult

# The leaf transforms Beam's DaskRunner replaces Create, Read, GroupByKey and Flatten with
# (``dask_overrides()``; ``_GroupByKey`` expands into ReifyWindows, ``_GroupByKeyOnly``
# and ``_GroupAlsoByWindow``).
CREATE = overrides._Create  # .values
READ = overrides._Read  # .source, a BoundedSource
GROUP_BY_KEY_ONLY = overrides._GroupByKeyOnly
GROUP_ALSO_BY_WINDOW = overrides._GroupAlsoByWindow  # a ParDo: the grouping is done by then
FLATTEN = overrides._Flatten
RESHUFFLE = overrides._Reshuffle  # an identity


def dumps(value: Any) -> bytes:
    """``value`` pickled as Beam pickles a DoFn for its workers."""
    return pickler.dumps(value)


def loads(data: bytes) -> Any:
    return pickler.loads(data)


def replacements() -> list:
    """Beam's DaskRunner's ``PTransformOverride`` s (``Pipeline.replace_all`` takes them)."""
    return dask_runner.dask_overrides()


class LiftedCombines(PTransformOverride):
    """``CombinePerKey`` in the default windowing as Beam's DirectRunner runs it
    (``direct_runner.CombinePerKeyOverride``): combined per bundle before the shuffle
    (``LiftedCombinePerKey``), so that accumulators, not every input, cross it."""

    def matches(self, applied_ptransform) -> bool:
        transform = applied_ptransform.transform
        return (
            isinstance(transform, beam.CombinePerKey)
            and applied_ptransform.inputs[0].windowing.is_default()
        )

    def get_replacement_transform_for_applied_ptransform(self, applied_ptransform):
        transform = applied_ptransform.transform
        try:
            return LiftedCombinePerKey(transform.fn, transform.args, transform.kwargs)
        except NotImplementedError:  # ten side inputs or more: Beam does not lift those
            return transform


def bag_options(options) -> tuple[dict[str, Any], dict[str, Any]]:
    """``--dask_*`` options as (the ``distributed.Client`` keywords, the ``dask.bag``
    partitioning keywords: ``npartitions`` or ``partition_size``)."""
    client = options.view_as(DaskOptions).get_all_options(drop_default=True, current_only=True)
    bag = DaskOptions._extract_bag_kwargs(client)  # pops the bag's keys from ``client``
    return client, bag


def side_input_spec(view: beam.pvalue.AsSideInput) -> tuple[type, dict[str, Any]]:
    """What a worker needs to rebuild a side input's view from its elements."""
    return type(view), view._view_options()


def side_input_map(spec: tuple[type, dict[str, Any]], values: Iterable[Any]):
    """A side input's ``SideInputMap`` over ``values`` (elements in the global window)."""
    view_class, view_options = spec
    windowed = [WindowedValue(v, 0, (window.GlobalWindow(),)) for v in values]
    return sideinputs.SideInputMap(view_class, view_options, windowed)


def invoke_bundle(
    fn: beam.DoFn,
    label: str,
    window_fn: window.WindowFn | None,
    elements: Iterable[WindowedValue],
    emit: Callable[[str | None, Any], None],
    args: Sequence[Any],
    kwargs: dict[str, Any],
    side_inputs: list,
) -> None:
    """Runs ``fn`` over one bundle of ``elements`` as Beam's runners do (setup, start_bundle,
    process each element, finish_bundle, teardown); ``emit(tag, value)`` receives every
    output, those of ``finish_bundle`` included (tag ``None``: the main output)."""

    class _Receiver(common.Receiver):
        def __init__(self, tag):
            self.tag = tag

        def receive(self, windowed_value):
            emit(self.tag, windowed_value.value)

    class _Receivers(dict):
        def __missing__(self, tag):
            self[tag] = _Receiver(tag)
            return self[tag]

    receivers = _Receivers()
    handler = common._OutputHandler(  # the DirectRunner's: unwraps TaggedOutput, windows
        window_fn=window_fn,
        main_receivers=receivers[None],
        tagged_receivers=receivers,
        per_element_output_counter=None,
        output_batch_converter=None,
        process_yields_batches=False,
        process_batch_yields_elements=False,
    )
    invoker = common.DoFnInvoker.create_invoker(
        common.DoFnSignature(fn),
        handler,
        context=common.DoFnContext(label, state=None),
        side_inputs=side_inputs,
        input_args=list(args),
        input_kwargs=kwargs,
        user_state_context=None,
        bundle_finalizer_param=beam.DoFn.BundleFinalizerParam(),
    )
    invoker.invoke_setup()
    invoker.invoke_start_bundle()
    for element in elements:
        invoker.invoke_process(element)
    invoker.invoke_finish_bundle()
    invoker.invoke_teardown()


def windowed(element: Any, window_fn: window.WindowFn) -> WindowedValue:
    """A main input's element as a ``WindowedValue`` (a ``TimestampedValue`` assigned to its
    windows, any other value in the global window), as Beam's DaskRunner makes them."""
    return transform_evaluator.get_windowed_value(element, window_fn)


def unwindowed(value: Any) -> Any:
    """A ``WindowedValue``'s value (any other value as it is)."""
    return transform_evaluator.defenestrate(value)
