"""The vocabulary readout: one named concept per word (vocabulary), where each is cut (cuts),
how it is trained (fitting, rows), stored (artifact) and scored (quality)."""
