"""The local run: TFX's LocalDagRunner or BeamDagRunner, with Beam sized to the data and machine.

The pipeline.local room, above ``pipeline.pipeline``; the Beam arguments it shares with the
Kubeflow compile are in ``pipeline.beam_args``.
"""
