"""The indexer's commands: `strata index …` and `strata upgrade`."""
