"""Every use of Keras Tuner internals, in one place (keras-tuner 1.4.8: constraints.txt pins
it, the tests run on it, and pyproject.toml admits only 1.4.x).

Everything else extends Keras Tuner through its public seams
(tfx_accum.components.search.search_tuners: ``Oracle.populate_space``, ``get_best_trials``,
``Tuner.run_trial``, the trial callbacks, ``HyperModel.declare_hyperparameters``).

1. Building a trial's model without a session reset (:class:`NoSessionResetMixin`).
2. Serving an oracle to parallel workers, to them only (:func:`serve_oracle`,
   :func:`authenticate_client`, :func:`fail_ongoing_trial`, :func:`trials_left`).
3. The search state on disk (tfx_accum.components.search.search_state decides what to do with it):
   atomic state writes (:func:`write_state_atomically`), reading a trial file
   (:func:`load_trial`), and giving a fresh oracle trials back as ``Oracle.reload`` does
   (:func:`readmit_trials`).

**1.**
Keras Tuner's ``Tuner._try_build`` calls ``keras.backend.clear_session()`` and
``gc.collect()`` before every trial, to free the previous trial's model. The
``AccumulationHyperModel`` keeps one model per accumulation step count and reuses it, so
there is nothing to free, and the two calls are a large part of a short trial's time. The override
below is ``_try_build`` of keras-tuner 1.4.8 without them (its ``max_model_size`` check is not used
here). Tested on the pinned keras-tuner (``constraints.txt``) by
``tests/search/test_search_state.py`` and ``tests/search/test_parallel_search.py``.
"""

from __future__ import annotations

from tfx_accum import needs_tfx  # noqa: F401 - first: without the tfx extra, one line

# isort: split
import hmac
import os

import grpc
import keras
import keras_tuner


class NoSessionResetMixin:
    """Mixed into a ``keras_tuner.Tuner`` subclass whose hypermodel reuses its models."""

    def _try_build(self, hp):
        model = self._build_hypermodel(hp)  # keras-tuner's: build under the strategy
        if not isinstance(model, keras.Model):
            raise keras_tuner.errors.FatalTypeError(
                "HyperModel.build() must return a keras.Model. "
                f"Received: {model!r} of type {type(model).__name__}."
            )
        return model

    def build_trial_model(self, hp):
        """The trial's model as ``Tuner.run_trial`` builds it (under the tuner's
        distribution strategy), for a ``run_trial`` override
        (tfx_accum.components.search.search_tuners)."""
        return self._try_build(hp)


# 2. Keras Tuner's chief (``oracle_chief.start_server``) serves the oracle with its own
# ``OracleServicer`` but then polls every second, waits in 20-second sleeps for workers to
# leave, and waits forever for a worker that died (its tuner id never leaves). The chief
# here serves the same servicer and watches the worker processes itself
# (tfx_accum.components.search.parallel_search).


# Keras Tuner serves the oracle without authentication: any local process could report
# trial results. Each request must carry the search's token in this metadata entry.
TOKEN_METADATA = "x-tfx-accum-oracle-token"


def serve_oracle(oracle, address: str, token: str):
    """Starts Keras Tuner's gRPC oracle service on ``address`` (a free port); ``(server, port)``.

    Requests without ``token`` (:func:`authenticate_client`) are refused with
    ``UNAUTHENTICATED``.
    """
    from concurrent import futures

    from keras_tuner.src import protos
    from keras_tuner.src.distribute.oracle_chief import OracleServicer

    # One thread, as Keras Tuner's own chief: the oracle's methods are synchronized, but
    # its proposals should follow one another.
    server = grpc.server(
        futures.ThreadPoolExecutor(max_workers=1), interceptors=[_TokenCheck(token)]
    )
    protos.get_service_grpc().add_OracleServicer_to_server(OracleServicer(oracle), server)
    port = server.add_insecure_port(f"{address}:0")
    server.start()
    return server, port


class _TokenCheck(grpc.ServerInterceptor):
    """Passes a request on only if it carries the token; others get UNAUTHENTICATED."""

    def __init__(self, token: str):
        self._token = token.encode()
        self._refuse = grpc.unary_unary_rpc_method_handler(self._refused)

    def intercept_service(self, continuation, handler_call_details):
        given = dict(handler_call_details.invocation_metadata or ()).get(TOKEN_METADATA, "")
        if hmac.compare_digest(str(given).encode(), self._token):
            return continuation(handler_call_details)
        return self._refuse

    @staticmethod
    def _refused(request, context):
        context.abort(grpc.StatusCode.UNAUTHENTICATED, "not a worker of this search")


def authenticate_client(client, token: str) -> None:
    """Makes a worker's ``OracleClient`` send ``token`` with every request.

    ``OracleClient.__init__`` (keras-tuner 1.4.8) opens its channel itself, from the
    ``KERASTUNER_ORACLE_IP``/``PORT`` variables, and keeps the stub in ``client.stub``; the
    stub is replaced by one on the same address whose calls carry the token.
    """
    import collections

    from keras_tuner.src import protos

    class Details(
        collections.namedtuple(
            "Details",
            ("method", "timeout", "metadata", "credentials", "wait_for_ready", "compression"),
        ),
        grpc.ClientCallDetails,
    ):
        pass

    class AddToken(grpc.UnaryUnaryClientInterceptor):
        def intercept_unary_unary(self, continuation, details, request):
            metadata = [*(details.metadata or ()), (TOKEN_METADATA, token)]
            return continuation(
                Details(
                    details.method,
                    details.timeout,
                    metadata,
                    details.credentials,
                    details.wait_for_ready,
                    details.compression,
                ),
                request,
            )

    address = f"{os.environ['KERASTUNER_ORACLE_IP']}:{os.environ['KERASTUNER_ORACLE_PORT']}"
    channel = grpc.intercept_channel(grpc.insecure_channel(address), AddToken())
    client.stub = protos.get_service_grpc().OracleStub(channel)


def fail_ongoing_trial(oracle, tuner_id: str, message: str) -> str | None:
    """Ends the trial ``tuner_id`` was running as FAILED (its worker died); its id or None."""
    from keras_tuner.src.engine import trial as trial_module

    trial = oracle.ongoing_trials.get(tuner_id)
    oracle.tuner_ids.discard(tuner_id)
    if trial is None:
        return None
    trial.status = trial_module.TrialStatus.FAILED
    trial.message = message
    oracle.end_trial(trial)
    return trial.trial_id


def trials_left(oracle) -> int | None:
    """Trials the oracle will still hand out: new ones up to ``max_trials`` and the
    interrupted ones a reloaded search runs again (``Oracle._retry_queue``); None: no limit
    (Hyperband)."""
    if oracle.max_trials is None:
        return None
    return max(0, oracle.max_trials - len(oracle.trials)) + len(oracle._retry_queue)


def trials_exhausted(oracle) -> bool:
    """True when the oracle has handed out all its trials (random and Bayesian search)."""
    return oracle.max_trials is not None and len(oracle.trials) >= oracle.max_trials


# 3. The search state. Every state file (oracle.json, the tuner's file, each trial.json) is
# written by ``keras_tuner.src.utils.save_json`` (looked up at each call by
# ``Stateful.save``), rewriting the file in place; ``Oracle.reload`` restores the
# bookkeeping below (keras-tuner 1.4.8: ``trials``, ``start_order``, ``end_order``,
# ``_run_times``, ``_retry_queue``, ``_record_values``, ``_save_trial``).


def retry_orphaned_trials(oracle) -> list[str]:
    """Sends for retry the trials a reloaded oracle would lose: running per their own file,
    but not among the state's ongoing ones. ``Oracle.create_trial`` writes the new trial's
    file, then ``oracle.json``; a run killed between the two leaves such a trial, which
    ``Oracle.reload`` counts toward ``max_trials`` but neither finishes nor runs again.
    Returns their ids."""
    from keras_tuner.src.engine import trial as trial_module

    queued = set(oracle._retry_queue)
    orphans = [
        trial_id
        for trial_id, trial in sorted(oracle.trials.items())
        if trial.status == trial_module.TrialStatus.RUNNING and trial_id not in queued
    ]
    oracle._retry_queue.extend(orphans)
    return orphans


def write_state_atomically(write_text) -> None:
    """Every Keras Tuner state file is written by ``write_text(path, text)`` from now on."""
    import json

    from keras_tuner.src import utils as kt_utils

    def save_json(path, obj):
        text = json.dumps(obj)
        write_text(str(path), text)
        return text

    kt_utils.save_json = save_json


def load_trial(path: str):
    """A trial from its ``trial.json`` (raises on a damaged file)."""
    from keras_tuner.src.engine import trial as trial_module

    return trial_module.Trial.load(path)


def is_finished(trial) -> bool:
    from keras_tuner.src.engine import trial as trial_module

    return trial.status in (trial_module.TrialStatus.COMPLETED, trial_module.TrialStatus.FAILED)


def readmit_trials(oracle, trials: dict, lost: list[str], lost_message: str) -> None:
    """Gives a fresh ``oracle`` the ``trials`` of a search back, as ``Oracle.reload`` would:
    finished ones are not run again, a running one runs again with its values; a trial id
    in ``lost`` (its file unreadable) is recorded as failed with ``lost_message``."""
    from keras_tuner.src.engine import trial as trial_module

    for trial_id in sorted({*trials, *lost}, key=int):
        trial = trials.get(trial_id)
        if trial is None:
            trial = trial_module.Trial(
                oracle.hyperparameters.copy(), trial_id, trial_module.TrialStatus.FAILED
            )
            trial.message = lost_message
            oracle._save_trial(trial)
        oracle.trials[trial_id] = trial
        oracle.start_order.append(trial_id)
        if is_finished(trial):
            oracle.end_order.append(trial_id)
            oracle._run_times[trial_id] += 1
        else:  # it was running: it runs again, with its values (as Oracle.reload does)
            trial.status = trial_module.TrialStatus.RUNNING
            oracle._retry_queue.append(trial_id)
        if trial.hyperparameters.values:
            oracle.update_space(trial.hyperparameters)
            oracle._record_values(trial)
