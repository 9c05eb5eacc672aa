"""``tfx_accum.kubeflow``: what deploys the pipeline to Kubeflow, shipped with the package.

Installed, this folder is ``tfx_accum.kubeflow`` (never a top-level ``kubeflow``): the
node-pool profiles (``node_pools.yaml``, read with ``importlib.resources``), the KFP
environment's script of ``tfx-accum run-compiled`` (``run_compiled``, with
``local-run-requirements.txt``) and the image's own last build step (``image_check``). The
tools that build and check the image from a checkout, ``image_tools``, are not installed.
"""
