"""Encoders, the embedding cache format and the embed job that fills it."""
