"""The Kubeflow image's tools, run from a checkout by CI, the tests and scripts; not installed.

``check_image_wheels`` (every image variant's pinned requirements have wheels or are built),
``image_replay`` (the Dockerfile's install lines replayed into a fresh environment without
Docker), ``dockerfile`` (the Dockerfile read as its build steps) and ``validate_spec`` (a
compiled spec checked against KFP's own protos, run by path with ``python -S``). The wheel
leaves this folder out (pyproject.toml lists the installed packages): no user imports it.
From a checkout it is ``tfx_accum.kubeflow.image_tools``.
"""
