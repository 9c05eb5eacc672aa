"""The container image, checked without Docker: every pinned requirement of every variant
has a wheel for the image's platform or is built in the builder stage (this needs the
package indexes), and each variant installs exactly one TensorFlow distribution."""

from __future__ import annotations

from pathlib import Path

from tfx_accum.kubeflow.check_image_wheels import check

DOCKERFILE = Path(__file__).resolve().parents[1] / "kubeflow" / "Dockerfile"

# The install lines of the image before the builder stage existed (commit 01964fa): the
# image did not build (pyfarmhash 0.3.2 is C++ source, the slim base has no compiler), and
# its TPU variant installed tensorflow-tpu over tensorflow.
OLD_DOCKERFILE = """
FROM python:3.10-slim-bookworm
RUN python -m pip install --upgrade pip \\
 && python -m pip install -c constraints.txt . \\
 && case "$ACCELERATOR" in \\
      gpu) python -m pip install -c constraints.txt "tensorflow[and-cuda]" ;; \\
      tpu) python -m pip install "tensorflow-tpu==2.16.*" \\
             -f https://storage.googleapis.com/libtpu-releases/index.html ;; \\
      cpu) ;; \\
      *) echo "ACCELERATOR must be gpu, tpu or cpu, got $ACCELERATOR" >&2; exit 1 ;; \\
    esac \\
 && python -c "import tfx_accum.components, tfx, keras; assert keras.__version__.startswith('3')"
"""


def test_every_variant_of_the_image_can_be_built():
    problems, unverified, counts = check(DOCKERFILE.read_text())
    assert problems == []
    # Google's libtpu index is the one source not reachable from CI machines.
    assert all(line.startswith("libtpu==") for line in unverified), unverified
    assert counts["cpu"] > 100 and counts["gpu"] > counts["cpu"]  # + the CUDA wheels


def test_the_old_image_would_have_failed_the_check():
    problems, _, _ = check(OLD_DOCKERFILE)
    assert any(p.startswith("pyfarmhash==0.3.2 has no wheel") for p in problems), problems
    assert any("tpu: 2 TensorFlow distributions" in p for p in problems), problems
    assert any(p.startswith("tensorflow-tpu is not pinned") for p in problems), problems
