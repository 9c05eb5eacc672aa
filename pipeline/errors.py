"""The error type for bad user input: the CLI prints its message, without a traceback."""


class InputError(ValueError):
    """Bad input (data, settings, profiles, URIs); the message says what and how to fix it."""
