"""``tfx_accum.kubeflow``: what deploys the pipeline to Kubeflow, shipped as package data.

Installed, this folder is ``tfx_accum.kubeflow`` (never a top-level ``kubeflow``); the
node-pool profiles (``node_pools.yaml``) are read with ``importlib.resources``.
"""
