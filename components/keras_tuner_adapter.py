"""Every use of Keras Tuner internals, in one place (keras-tuner 1.4.8: constraints.txt pins
it, the tests run on it, and pyproject.toml admits only 1.4.x).

Everything else extends Keras Tuner through its public seams (components/search_tuners.py:
``Oracle.populate_space``, ``get_best_trials``, ``Tuner.run_trial``, the trial callbacks,
``HyperModel.declare_hyperparameters``).

1. Building a trial's model without a session reset (:class:`NoSessionResetMixin`).
2. Serving an oracle to parallel workers (:func:`serve_oracle`, :func:`fail_ongoing_trial`,
   :func:`trials_exhausted`).

**1.**
Keras Tuner's ``Tuner._try_build`` calls ``keras.backend.clear_session()`` and
``gc.collect()`` before every trial, to free the previous trial's model. The
``AccumulationHyperModel`` keeps one model per accumulation step count and reuses it, so
there is nothing to free, and the two calls cost about 1.1 s of a 3-4 s trial on the
digits (measured: 8 trials in 31.7 s with them, 23.2 s without). The override below is
``_try_build`` of keras-tuner 1.4.8 without them (its ``max_model_size`` check is not used
here). Tested on the pinned keras-tuner (``constraints.txt``) by ``tests/test_components.py``.
"""

from __future__ import annotations

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


# 2. Keras Tuner's chief (``oracle_chief.start_server``) serves the oracle with its own
# ``OracleServicer`` but then polls every second, waits in 20-second sleeps for workers to
# leave, and waits forever for a worker that died (its tuner id never leaves). The chief
# here serves the same servicer and watches the worker processes itself
# (components/parallel_search.py).


def serve_oracle(oracle, address: str):
    """Starts Keras Tuner's gRPC oracle service on ``address`` (a free port); ``(server, port)``."""
    from concurrent import futures

    import grpc
    from keras_tuner.src import protos
    from keras_tuner.src.distribute.oracle_chief import OracleServicer

    # One thread, as Keras Tuner's own chief: the oracle's methods are synchronized, but
    # its proposals should follow one another.
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=1))
    protos.get_service_grpc().add_OracleServicer_to_server(OracleServicer(oracle), server)
    port = server.add_insecure_port(f"{address}:0")
    server.start()
    return server, port


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


def trials_exhausted(oracle) -> bool:
    """True when the oracle has handed out all its trials (random and Bayesian search)."""
    return oracle.max_trials is not None and len(oracle.trials) >= oracle.max_trials
