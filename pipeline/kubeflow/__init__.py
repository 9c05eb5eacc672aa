"""The Kubeflow Pipelines / Vertex AI compile: node-pool profiles, spec edits, the local run.

The pipeline.kubeflow room: the pipeline is the same ``create_pipeline`` as the local run
(``tfx_accum.pipeline.pipeline``), with the Beam arguments of ``pipeline.beam_args``.
"""
