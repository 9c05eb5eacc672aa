"""The models room: the Keras models the Tuner searches and the Trainer trains.

The built-in models (``models``), a user's model function loaded and checked
(``model_function``, ``custom_model``, ``model_rules``), the loss and metrics of each task
(``task_compile``), the adapter for ``tf.keras`` models (``tf_keras_compat``) and the
non-finite-loss stop (``non_finite``). Below the search and the training, which both build
models here; above the data, whose description a model is built for.
"""
