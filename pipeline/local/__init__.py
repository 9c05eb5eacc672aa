"""The local run: TFX's LocalDagRunner or BeamDagRunner, with Beam sized to the data and machine."""
