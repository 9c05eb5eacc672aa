"""The kinds of model input, and how an image is recognised: shared by the components
(``tfx_accum.components.data.features``) and the command line's data checks, without importing
TensorFlow."""

from __future__ import annotations

NUMERIC, STRING, IMAGE = "numeric", "string", "image"
CATEGORICAL = "categorical"  # integer categories (categorical_features, or the schema says so)
# A feature as Transform (or ExampleGen) wrote it, with its own dtype and shape: what a TFX
# module's own model declares as an input (tfx_accum.components.models.custom_model).
TENSOR = "tensor"
MAX_INDEX_RANGE = 1_000_000  # a categorical domain wider than this is looked up, not indexed
MAX_VOCABULARY = 1_000  # most frequent values of a text feature kept in its vocabulary
_IMAGE_MAGIC = (b"\x89PNG\r\n\x1a\n", b"\xff\xd8\xff")  # PNG, JPEG


def is_image(value: bytes) -> bool:
    """True for the bytes of a PNG or JPEG file."""
    return value.startswith(_IMAGE_MAGIC)
