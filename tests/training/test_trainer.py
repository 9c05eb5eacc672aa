"""The Trainer module's pieces (tfx_accum.components.training.trainer_module)."""

from __future__ import annotations

import keras
import numpy as np
import tensorflow as tf

from tfx_accum.components.training.trainer_module import StopAfterUpdates


def test_training_stops_after_exactly_train_steps_updates():
    """Whole epochs of 37 updates, and the last one stops at 300 (the Trainer's plan)."""
    inputs = keras.Input((4,))
    model = keras.Model(inputs, keras.layers.Dense(2)(inputs))
    model.compile(optimizer="sgd", loss="mse")
    x = np.zeros((37 * 4, 4), "float32")
    data = tf.data.Dataset.from_tensor_slices((x, np.zeros((len(x), 2)))).repeat().batch(4)
    model.fit(data, steps_per_epoch=37, epochs=9, callbacks=[StopAfterUpdates(300)], verbose=0)
    assert int(model.optimizer.iterations) == 300


def test_a_non_finite_loss_stops_training_at_once_with_one_line():
    """A loss that becomes NaN stopped nothing: every update ran, the Trainer said done."""
    import keras_tuner
    import pytest

    from tfx_accum.components.models.non_finite import NonFiniteLoss, StopOnNonFiniteLoss

    inputs = keras.Input((4,))
    model = keras.Model(inputs, keras.layers.Dense(1)(inputs))
    model.compile(optimizer=keras.optimizers.SGD(1e3), loss="mse")  # diverges within steps
    x = np.random.default_rng(0).normal(size=(64, 4)).astype("float32") * 100
    data = tf.data.Dataset.from_tensor_slices((x, x[:, :1] * 3)).repeat().batch(8)
    with pytest.raises(NonFiniteLoss) as raised:
        model.fit(
            data,
            steps_per_epoch=8,
            epochs=50,
            callbacks=[StopOnNonFiniteLoss("the Trainer")],
            verbose=0,
        )
    message = str(raised.value)
    update = int(model.optimizer.iterations.numpy())
    assert update < 8 * 50  # stopped, not run to the end
    assert message.startswith("the Trainer: the training loss became ")
    assert f"update {update};" in message and "lower the learning rate" in message
    assert "\n" not in message
    # In a search, a failed trial (Keras Tuner goes on with the next one).
    assert isinstance(raised.value, keras_tuner.errors.FailedTrialError)


def test_the_best_trials_model_is_validated_on_the_examples_its_score_is_on():
    """The Tuner records the held-out examples each score is on (the first 50,000 of a
    large split); the Trainer training the best trial's budget validates on those, and on
    every held-out example otherwise."""
    from tfx_accum.components.config.trial_records import TunerDecision
    from tfx_accum.components.search.search_policy import TrainerChoice, TrialRecord
    from tfx_accum.components.training.budget import trainer_budget
    from tfx_accum.components.training.trainer_module import validated_examples

    values = {"accumulation_steps": 2, "micro_batch_size": 32, "learning_rate": 0.01}
    best = TrialRecord("3", "COMPLETED", 0.9, values, examples=200_000, scored_examples=50_000)
    decision = TunerDecision.from_config(TrainerChoice(best, best).values)
    assert decision.scored_examples == 50_000
    trial_budget = trainer_budget(300, decision.examples, 64, best_trials=True)
    assert validated_examples(decision, trial_budget, 266_640) == 50_000
    assert validated_examples(decision, trial_budget, 4_000) == 4_000  # a smaller split
    asked = trainer_budget(300, decision.examples, 64, best_trials=False)  # --train-steps
    assert validated_examples(decision, asked, 266_640) == 266_640
    assert validated_examples(None, asked, 266_640) == 266_640
