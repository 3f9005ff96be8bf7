"""Strata's offline stages: corpora, encoders and the embedding cache, then the transforms."""
