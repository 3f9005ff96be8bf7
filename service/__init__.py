"""Strata's online side, and the `strata` command that drives every stage."""
